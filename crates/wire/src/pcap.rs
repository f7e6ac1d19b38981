//! Classic pcap files (the libpcap format): a 24-byte file header, then one 16-byte record
//! header before each packet's `caplen` bytes.
//!
//! ```text
//! file header                              record header
//! +--------------------------------+       +--------------------------------+
//! | magic (a1b2c3d4 µs, a1b23c4d ns)|      | ts_sec                         |
//! | version_major  | version_minor  |      | ts_usec or ts_nsec             |
//! | thiszone                       |       | caplen                         |
//! | sigfigs                        |       | len (original length)          |
//! | snaplen                        |       +--------------------------------+
//! | linktype (low 16 bits) + FCS   |       | caplen bytes of packet data    |
//! +--------------------------------+
//! ```
//!
//! The upper 16 bits of the `linktype` field are libpcap's `LT_LINKTYPE_EXT`: bits 28-31 hold
//! the length of the FCS at the end of every packet in 16-bit words, valid when bit 26 (the
//! "F" bit) is set; bits 16-25 (`LT_RESERVED1`) must be zero, and a file with any of them set
//! is refused, as tcpdump and tshark refuse it. Bit 27 is ignored, as libpcap ignores it.
//!
//! The byte order of every field is the writer's; the magic tells which. tapflow writes
//! little-endian, nanosecond files (magic `0xa1b23c4d`), version 2.4.

use crate::LinkType;
use crate::bytes::{read_u16_as, read_u32_as, write_u16_as, write_u32_as};
use crate::capfile::FileErrorKind;

/// Magic of a microsecond-resolution file, as read in the writer's byte order.
pub const MAGIC_MICROS: u32 = 0xa1b2_c3d4;
/// Magic of a nanosecond-resolution file, as read in the writer's byte order.
pub const MAGIC_NANOS: u32 = 0xa1b2_3c4d;
/// Length of the file header.
pub const HEADER_LEN: usize = 24;
/// Length of a record header.
pub const RECORD_HEADER_LEN: usize = 16;
/// `LT_RESERVED1`: the bits of the `linktype` field that must be zero.
pub const LINKTYPE_RESERVED: u32 = 0x03ff_0000;
/// `LT_FCS_LENGTH_PRESENT`: the "F" bit, set when bits 28-31 hold an FCS length.
pub const LINKTYPE_FCS_PRESENT: u32 = 0x0400_0000;

/// The major version tapflow writes and the only one it reads.
pub const VERSION_MAJOR: u16 = 2;
/// The minor version tapflow writes.
pub const VERSION_MINOR: u16 = 4;

mod field {
    use core::ops::Range;
    pub const MAGIC: Range<usize> = 0..4;
    pub const VERSION_MAJOR: Range<usize> = 4..6;
    pub const VERSION_MINOR: Range<usize> = 6..8;
    pub const THISZONE: Range<usize> = 8..12;
    pub const SIGFIGS: Range<usize> = 12..16;
    pub const SNAPLEN: Range<usize> = 16..20;
    pub const LINKTYPE: Range<usize> = 20..24;

    pub const TS_SEC: Range<usize> = 0..4;
    pub const TS_FRAC: Range<usize> = 4..8;
    pub const CAPLEN: Range<usize> = 8..12;
    pub const LEN: Range<usize> = 12..16;
}

/// The pcap file header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FileHeader {
    /// Timestamps carry nanoseconds (magic `0xa1b23c4d`) instead of microseconds.
    pub nanos: bool,
    /// Fields are big-endian.
    pub big_endian: bool,
    /// `version_major` (2).
    pub version_major: u16,
    /// `version_minor` (4).
    pub version_minor: u16,
    /// `thiszone`: GMT offset, always 0 in practice.
    pub thiszone: i32,
    /// `sigfigs`: timestamp accuracy, always 0 in practice.
    pub sigfigs: u32,
    /// `snaplen`: the largest `caplen` the capture allowed.
    pub snaplen: u32,
    /// The link type: the low 16 bits of the `linktype` field.
    pub linktype: LinkType,
    /// The high 16 bits of the `linktype` field (`LT_LINKTYPE_EXT`: FCS length and flag);
    /// [`FileHeader::parse`] has checked that its reserved bits are zero.
    pub link_info: u16,
}

impl FileHeader {
    /// Parses the file header at the start of `buf`, detecting byte order and resolution.
    pub fn parse(buf: &[u8]) -> Result<FileHeader, FileErrorKind> {
        let Some(h) = buf.first_chunk::<HEADER_LEN>() else {
            if let Some(m) = buf.first_chunk::<4>() {
                // Say "not a capture file" rather than "truncated" when the magic is wrong.
                if magic_order(u32::from_le_bytes(*m)).is_none() {
                    return Err(FileErrorKind::NotCapture {
                        magic: u32::from_be_bytes(*m),
                    });
                }
            }
            return Err(FileErrorKind::HeaderTruncated {
                format: "pcap",
                need: HEADER_LEN as u64,
                have: buf.len() as u64,
            });
        };
        let m = [h[0], h[1], h[2], h[3]];
        let Some((nanos, big_endian)) = magic_order(u32::from_le_bytes(m)) else {
            return Err(FileErrorKind::NotCapture {
                magic: u32::from_be_bytes(m),
            });
        };
        let version_major = read_u16_as(big_endian, &h[field::VERSION_MAJOR]);
        let version_minor = read_u16_as(big_endian, &h[field::VERSION_MINOR]);
        if version_major != VERSION_MAJOR {
            return Err(FileErrorKind::UnsupportedVersion {
                format: "pcap",
                major: version_major,
                minor: version_minor,
            });
        }
        let linktype = read_u32_as(big_endian, &h[field::LINKTYPE]);
        if linktype & LINKTYPE_RESERVED != 0 {
            return Err(FileErrorKind::LinkTypeReserved { field: linktype });
        }
        Ok(FileHeader {
            nanos,
            big_endian,
            version_major,
            version_minor,
            thiszone: read_u32_as(big_endian, &h[field::THISZONE]) as i32,
            sigfigs: read_u32_as(big_endian, &h[field::SIGFIGS]),
            snaplen: read_u32_as(big_endian, &h[field::SNAPLEN]),
            linktype: LinkType::from_u16(linktype as u16),
            link_info: (linktype >> 16) as u16,
        })
    }

    /// Bytes of FCS at the end of every packet (`LT_FCS_LENGTH` words of 16 bits, when the
    /// "F" bit says the length is valid), 0 if the packets carry none.
    pub fn fcs_len(&self) -> u8 {
        let ext = u32::from(self.link_info) << 16;
        if ext & LINKTYPE_FCS_PRESENT == 0 {
            return 0;
        }
        (ext >> 28) as u8 * 2
    }

    /// Writes the header into the first 24 bytes of `buf`, in the byte order it names.
    ///
    /// # Panics
    /// If `buf` is shorter than 24 bytes.
    pub fn emit(&self, buf: &mut [u8]) {
        let be = self.big_endian;
        let magic = if self.nanos {
            MAGIC_NANOS
        } else {
            MAGIC_MICROS
        };
        let linktype = u32::from(self.linktype.to_u16()) | u32::from(self.link_info) << 16;
        write_u32_as(be, &mut buf[field::MAGIC], magic);
        write_u16_as(be, &mut buf[field::VERSION_MAJOR], self.version_major);
        write_u16_as(be, &mut buf[field::VERSION_MINOR], self.version_minor);
        write_u32_as(be, &mut buf[field::THISZONE], self.thiszone as u32);
        write_u32_as(be, &mut buf[field::SIGFIGS], self.sigfigs);
        write_u32_as(be, &mut buf[field::SNAPLEN], self.snaplen);
        write_u32_as(be, &mut buf[field::LINKTYPE], linktype);
    }
}

/// Resolution and byte order for a magic read little-endian: `(nanos, big_endian)`.
const fn magic_order(le: u32) -> Option<(bool, bool)> {
    match le {
        MAGIC_MICROS => Some((false, false)),
        MAGIC_NANOS => Some((true, false)),
        m if m == MAGIC_MICROS.swap_bytes() => Some((false, true)),
        m if m == MAGIC_NANOS.swap_bytes() => Some((true, true)),
        _ => None,
    }
}

/// The 16-byte header before each packet.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct RecordHeader {
    /// `ts_sec`: seconds since 1970.
    pub ts_sec: u32,
    /// `ts_usec` or `ts_nsec`, per the file's magic.
    pub ts_frac: u32,
    /// `caplen`: bytes of packet data that follow.
    pub caplen: u32,
    /// `len`: the packet's original length.
    pub len: u32,
}

impl RecordHeader {
    /// Parses a record header in the given byte order.
    #[inline(always)]
    pub fn parse(h: &[u8; RECORD_HEADER_LEN], big_endian: bool) -> RecordHeader {
        RecordHeader {
            ts_sec: read_u32_as(big_endian, &h[field::TS_SEC]),
            ts_frac: read_u32_as(big_endian, &h[field::TS_FRAC]),
            caplen: read_u32_as(big_endian, &h[field::CAPLEN]),
            len: read_u32_as(big_endian, &h[field::LEN]),
        }
    }

    /// Writes the record header in the given byte order.
    pub fn emit(&self, h: &mut [u8; RECORD_HEADER_LEN], big_endian: bool) {
        write_u32_as(big_endian, &mut h[field::TS_SEC], self.ts_sec);
        write_u32_as(big_endian, &mut h[field::TS_FRAC], self.ts_frac);
        write_u32_as(big_endian, &mut h[field::CAPLEN], self.caplen);
        write_u32_as(big_endian, &mut h[field::LEN], self.len);
    }
}

/// Appends a little-endian, nanosecond, version 2.4 file header (magic `0xa1b23c4d`).
pub fn write_header(out: &mut Vec<u8>, linktype: LinkType, snaplen: u32) {
    let h = FileHeader {
        nanos: true,
        big_endian: false,
        version_major: VERSION_MAJOR,
        version_minor: VERSION_MINOR,
        thiszone: 0,
        sigfigs: 0,
        snaplen,
        linktype,
        link_info: 0,
    };
    let mut b = [0u8; HEADER_LEN];
    h.emit(&mut b);
    out.extend_from_slice(&b);
}

/// Length of the record [`emit_record`] writes for `caplen` bytes.
#[inline]
pub const fn record_len(caplen: usize) -> usize {
    RECORD_HEADER_LEN + caplen
}

/// Writes a little-endian ns record into `buf`, which must be exactly [`record_len`] bytes.
///
/// # Panics
/// If `buf` has another length: the caller sizes it with [`record_len`].
#[inline]
pub fn emit_record(buf: &mut [u8], ts_ns: u64, data: &[u8], orig_len: u32) {
    assert_eq!(
        buf.len(),
        record_len(data.len()),
        "record buffer sized by record_len"
    );
    let caplen = data.len() as u32;
    let r = RecordHeader {
        ts_sec: u32::try_from(ts_ns / 1_000_000_000).unwrap_or(u32::MAX),
        ts_frac: (ts_ns % 1_000_000_000) as u32,
        caplen,
        len: orig_len.max(caplen),
    };
    let (h, body) = buf.split_at_mut(RECORD_HEADER_LEN);
    r.emit(h.try_into().expect("16 bytes"), false);
    body.copy_from_slice(data);
}

/// Appends one record for a file started by [`write_header`] (nanosecond timestamps).
///
/// `len` is written as `max(orig_len, data.len())` so the file stays valid; seconds past
/// 2106-02-07 (the end of the 32-bit `ts_sec`) saturate. Allocates only if `out` lacks capacity.
#[inline]
pub fn write_record(out: &mut Vec<u8>, ts_ns: u64, data: &[u8], orig_len: u32) {
    let start = out.len();
    out.resize(start + record_len(data.len()), 0);
    emit_record(&mut out[start..], ts_ns, data, orig_len);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::capfile::{Format, Reader};
    use proptest::prelude::*;

    // ns magic, v2.4, thiszone 0, sigfigs 0, snaplen 65535, LINKTYPE_ETHERNET; then one record:
    // 1700000000.123456789 s, caplen 4, len 60, then 4 bytes.
    static FILE_BYTES: [u8; 44] = [
        0x4d, 0x3c, 0xb2, 0xa1, 0x02, 0x00, 0x04, 0x00, //
        0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, //
        0xff, 0xff, 0x00, 0x00, 0x01, 0x00, 0x00, 0x00, //
        0x00, 0xf1, 0x53, 0x65, 0x15, 0xcd, 0x5b, 0x07, //
        0x04, 0x00, 0x00, 0x00, 0x3c, 0x00, 0x00, 0x00, //
        0xde, 0xad, 0xbe, 0xef,
    ];

    // The same packet in a big-endian microsecond file with FCS bits set in the linktype field
    // (LINKTYPE_LINUX_SLL, 113 = 0x71); ts 1700000000.123456 s.
    static BE_MICROS_BYTES: [u8; 44] = [
        0xa1, 0xb2, 0xc3, 0xd4, 0x00, 0x02, 0x00, 0x04, //
        0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, //
        0x00, 0x00, 0x00, 0x80, 0x14, 0x00, 0x00, 0x71, //
        0x65, 0x53, 0xf1, 0x00, 0x00, 0x01, 0xe2, 0x40, //
        0x00, 0x00, 0x00, 0x04, 0x00, 0x00, 0x00, 0x3c, //
        0xde, 0xad, 0xbe, 0xef,
    ];

    fn header() -> FileHeader {
        FileHeader {
            nanos: true,
            big_endian: false,
            version_major: 2,
            version_minor: 4,
            thiszone: 0,
            sigfigs: 0,
            snaplen: 65535,
            linktype: LinkType::Ethernet,
            link_info: 0,
        }
    }

    #[test]
    fn deconstruct() {
        assert_eq!(FileHeader::parse(&FILE_BYTES), Ok(header()));
        let rec = RecordHeader::parse(FILE_BYTES[24..40].try_into().unwrap(), false);
        assert_eq!(
            rec,
            RecordHeader {
                ts_sec: 1_700_000_000,
                ts_frac: 123_456_789,
                caplen: 4,
                len: 60
            }
        );
    }

    #[test]
    fn construct() {
        let mut out = Vec::new();
        write_header(&mut out, LinkType::Ethernet, 65535);
        write_record(
            &mut out,
            1_700_000_000_123_456_789,
            &[0xde, 0xad, 0xbe, 0xef],
            60,
        );
        assert_eq!(out, FILE_BYTES);
    }

    #[test]
    fn deconstruct_big_endian_micros() {
        let h = FileHeader::parse(&BE_MICROS_BYTES).unwrap();
        assert!(h.big_endian && !h.nanos);
        assert_eq!(h.linktype, LinkType::LinuxSll);
        assert_eq!(h.link_info, 0x1400);
        assert_eq!(h.fcs_len(), 2, "F bit set, one 16-bit word of FCS");
        assert_eq!(h.snaplen, 128);
        let mut back = [0u8; HEADER_LEN];
        h.emit(&mut back);
        assert_eq!(back, BE_MICROS_BYTES[..HEADER_LEN]);

        let mut r = Reader::new(&BE_MICROS_BYTES).unwrap();
        assert_eq!(
            r.format(),
            Format::Pcap {
                nanos: false,
                big_endian: true
            }
        );
        assert_eq!(r.interfaces()[0].linktype, LinkType::LinuxSll);
        assert_eq!(r.interfaces()[0].fcs_len, 2);
        let p = r.next_packet().unwrap().unwrap();
        assert_eq!(p.ts_ns, 1_700_000_000_123_456_000);
        // The FCS (bytes 58-59 of the frame) was not captured: only `len` loses it.
        assert_eq!((p.len, p.data), (58, &[0xde, 0xad, 0xbe, 0xef][..]));
        assert!(r.next_packet().is_none());
    }

    #[test]
    fn rejects_bad_magic_and_version() {
        assert_eq!(
            FileHeader::parse(b"GIF89a not a capture file at all"),
            Err(FileErrorKind::NotCapture { magic: 0x4749_4638 })
        );
        let mut b = FILE_BYTES;
        b[4] = 3;
        assert_eq!(
            FileHeader::parse(&b),
            Err(FileErrorKind::UnsupportedVersion {
                format: "pcap",
                major: 3,
                minor: 4
            })
        );
        assert_eq!(
            FileHeader::parse(&FILE_BYTES[..10]),
            Err(FileErrorKind::HeaderTruncated {
                format: "pcap",
                need: 24,
                have: 10
            })
        );
    }

    /// `FILE_BYTES` with another `linktype` field and its packet captured whole (caplen = len).
    fn with_linktype_field(field: u32) -> [u8; 44] {
        let mut b = FILE_BYTES;
        b[20..24].copy_from_slice(&field.to_le_bytes());
        b[36..40].copy_from_slice(&4u32.to_le_bytes());
        b
    }

    #[test]
    fn reserved_linktype_bits_refuse_the_file() {
        for field in [0x0008_0001, 0x0001_0001, 0x0200_0001, 0x27ff_0001] {
            let e = FileHeader::parse(&with_linktype_field(field)).unwrap_err();
            assert_eq!(e, FileErrorKind::LinkTypeReserved { field });
        }
        assert_eq!(
            Reader::new(&with_linktype_field(0x0008_0001))
                .unwrap_err()
                .to_string(),
            "byte offset 0: pcap link-type field 0x00080001 has reserved bits 0x00080000 set \
             (bits 16-25 must be zero)"
        );
        // Bit 27, and an FCS length without the "F" bit, mean nothing to libpcap or tshark.
        for field in [0x0800_0001, 0x2000_0001] {
            let b = with_linktype_field(field);
            assert_eq!(FileHeader::parse(&b).unwrap().fcs_len(), 0);
            let p = Reader::new(&b).unwrap().next_packet().unwrap().unwrap();
            assert_eq!((p.len, p.data.len()), (4, 4));
        }
    }

    #[test]
    fn an_fcs_length_cuts_the_fcs_from_each_packet() {
        // LINKTYPE_ETHERNET, F bit, 2 words: a 4-byte FCS.
        let b = with_linktype_field(0x2400_0001);
        let h = FileHeader::parse(&b).unwrap();
        assert_eq!((h.linktype, h.fcs_len()), (LinkType::Ethernet, 4));
        let p = Reader::new(&b).unwrap().next_packet().unwrap().unwrap();
        assert_eq!((p.len, p.data), (0, &[][..]));
        let mut out = Vec::new();
        write_header(&mut out, LinkType::Ethernet, 65535);
        out[22..24].copy_from_slice(&0x2400u16.to_le_bytes());
        write_record(&mut out, 1, &[1, 2, 3, 4, 5, 6, 0xfc, 0xfc, 0xfc, 0xfc], 10);
        write_record(&mut out, 2, &[1, 2, 3, 4, 5, 6, 0xfc, 0xfc], 10);
        write_record(&mut out, 3, &[1, 2, 3], 10);
        write_record(&mut out, 4, &[1, 2], 2);
        let mut r = Reader::new(&out).unwrap();
        let mut got = Vec::new();
        while let Some(p) = r.next_packet() {
            let p = p.unwrap();
            got.push((p.len, p.data.to_vec()));
        }
        assert_eq!(
            got,
            [
                (6, vec![1, 2, 3, 4, 5, 6]),
                (6, vec![1, 2, 3, 4, 5, 6]),
                (6, vec![1, 2, 3]),
                (0, vec![]),
            ]
        );
    }

    #[test]
    fn tolerates_caplen_above_len() {
        let mut b = FILE_BYTES;
        b[36] = 2; // len 2 < caplen 4
        let p = Reader::new(&b).unwrap().next_packet().unwrap().unwrap();
        assert_eq!((p.len, p.data.len()), (4, 4));
    }

    #[test]
    fn saturates_seconds_past_2106() {
        let mut out = Vec::new();
        write_record(&mut out, u64::MAX, &[], 0);
        let r = RecordHeader::parse(out[..16].try_into().unwrap(), false);
        assert_eq!(r.ts_sec, u32::MAX);
        assert_eq!(r.ts_frac, 709_551_615);
    }

    proptest! {
        #[test]
        fn round_trip(
            snaplen in any::<u32>(),
            lt in any::<u16>(),
            pkts in proptest::collection::vec(
                (0..u64::from(u32::MAX) * 1_000_000_000, proptest::collection::vec(any::<u8>(), 0..200), 0u32..2000),
                0..30),
        ) {
            let mut out = Vec::new();
            write_header(&mut out, LinkType::from_u16(lt), snaplen);
            for (ts, data, extra) in &pkts {
                write_record(&mut out, *ts, data, data.len() as u32 + extra);
            }
            let mut r = Reader::new(&out).unwrap();
            prop_assert_eq!(r.format(), Format::Pcap { nanos: true, big_endian: false });
            prop_assert_eq!(r.interfaces()[0].linktype, LinkType::from_u16(lt));
            prop_assert_eq!(r.interfaces()[0].snaplen, snaplen);
            for (ts, data, extra) in &pkts {
                let p = r.next_packet().unwrap().unwrap();
                prop_assert_eq!(p.ts_ns, *ts);
                prop_assert_eq!(p.data, data.as_slice());
                prop_assert_eq!(p.len, data.len() as u32 + extra);
                prop_assert_eq!((p.interface, p.epb_flags, p.dropcount), (0, None, None));
            }
            prop_assert!(r.next_packet().is_none());
            prop_assert_eq!(r.offset(), out.len() as u64);
        }
    }
}
