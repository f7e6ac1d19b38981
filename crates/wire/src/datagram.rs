//! The batch datagram: header records forwarded to collectors in one UDP datagram, as the
//! paper packs many headers into one forwarding packet (`header-collection-gigabit` §3.3.3).
//!
//! ```text
//!  0                   1                   2                   3
//!  0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1
//! +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//! |                      magic "TFBD" (0x54464244)                |
//! |    version    |  header len/8 |          record count         |
//! |                           probe id                            |
//! |                            session                            |
//! |            stream             |           link type           |
//! |                            snaplen                            |
//! |                           interface                           |
//! |                       reserved (zero)                         |
//! |                     sequence (64 bits)                        |
//! |                                                               |
//! |                   records before (64 bits)                    |
//! |                                                               |
//! |                  drops, cumulative (64 bits)                  |
//! |                                                               |
//! +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//! |        record count header records (see `record`)             |
//! ```
//!
//! All fields are big-endian. `sequence` and `records before` count per (probe, session,
//! stream, destination), so a collector sees a gap only for datagrams that were sent to it and
//! lost on the way; `drops` counts, cumulatively, the records lost on the probe before this
//! datagram's first record, so the difference to the previous datagram received is exact even
//! when datagrams in between were lost. `docs/wire-formats.md` has the full rules.

use crate::LinkType;
use crate::bytes::{read_u16, read_u32, read_u64, write_u16, write_u32, write_u64};
use crate::record::{self, Records};

/// The magic number, "TFBD" (tapflow batch datagram).
pub const MAGIC: u32 = 0x5446_4244;

/// The version this module writes and reads.
pub const VERSION: u8 = 1;

/// Length of the version-1 header in bytes (a multiple of 8, so records stay aligned).
pub const HEADER_LEN: usize = 56;

/// Largest UDP payload over IPv4 (65535 − 20 − 8).
pub const MAX_DATAGRAM: usize = 65_507;

mod field {
    use core::ops::Range;
    pub const MAGIC: Range<usize> = 0..4;
    pub const VERSION: usize = 4;
    pub const HDR_LEN: usize = 5;
    pub const COUNT: Range<usize> = 6..8;
    pub const PROBE: Range<usize> = 8..12;
    pub const SESSION: Range<usize> = 12..16;
    pub const STREAM: Range<usize> = 16..18;
    pub const LINKTYPE: Range<usize> = 18..20;
    pub const SNAPLEN: Range<usize> = 20..24;
    pub const INTERFACE: Range<usize> = 24..28;
    pub const RESERVED: Range<usize> = 28..32;
    pub const SEQUENCE: Range<usize> = 32..40;
    pub const RECORDS_BEFORE: Range<usize> = 40..48;
    pub const DROPS: Range<usize> = 48..56;
}

/// Why a datagram was rejected. Cheap to copy and count on the receive path.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum Error {
    /// Fewer bytes than a header.
    #[error("datagram of {len} bytes is shorter than the {HEADER_LEN}-byte header")]
    Short {
        /// Bytes received.
        len: usize,
    },
    /// The first four bytes are not "TFBD".
    #[error("datagram magic {0:#010x} is not 0x54464244 (\"TFBD\")")]
    BadMagic(u32),
    /// A version this reader does not know.
    #[error("datagram version {0} is not supported (this reader knows version 1)")]
    BadVersion(u8),
    /// The header length field is below 56 bytes or past the end of the datagram.
    #[error("datagram header length {0} is below 56 or past the end")]
    BadHeaderLen(usize),
    /// The records do not parse, or run past the end of the datagram.
    #[error("record {index} of the datagram is damaged: {error}")]
    BadRecord {
        /// Index of the first bad record.
        index: u16,
        /// What is wrong with it.
        error: record::RecordError,
    },
    /// The record count disagrees with the records present.
    #[error("datagram says {claimed} records but holds {found}")]
    CountMismatch {
        /// The header's record count.
        claimed: u16,
        /// Records found before the end.
        found: u16,
    },
}

/// A datagram's header as values (the smoltcp `Repr`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Header {
    /// Records that follow the header.
    pub count: u16,
    /// The probe's id (`--probe-id`).
    pub probe: u32,
    /// A number chosen at probe start: a new session restarts the sequences.
    pub session: u32,
    /// The sending stream within the probe (its worker index).
    pub stream: u16,
    /// LINKTYPE_ of the records' interface.
    pub linktype: u16,
    /// Snap length the probe applied.
    pub snaplen: u32,
    /// Index of the interface within the probe.
    pub interface: u32,
    /// Datagrams this stream sent to this destination before this one.
    pub sequence: u64,
    /// Records this stream sent to this destination before this datagram.
    pub records_before: u64,
    /// Records lost on the probe (in the kernel, in tapflow's queues, or failing to be sent)
    /// that this stream attributes to this destination, from the start of the session to just
    /// before this datagram's first record: a running total.
    pub drops: u64,
}

impl Header {
    /// The link type as an open enum.
    pub fn link_type(&self) -> LinkType {
        LinkType::from_u16(self.linktype)
    }

    /// Writes the header into the first [`HEADER_LEN`] bytes of `buf`.
    ///
    /// # Panics
    /// If `buf` is shorter than [`HEADER_LEN`].
    #[inline]
    pub fn emit(&self, buf: &mut [u8]) {
        let b = &mut buf[..HEADER_LEN];
        write_u32(&mut b[field::MAGIC], MAGIC);
        b[field::VERSION] = VERSION;
        b[field::HDR_LEN] = (HEADER_LEN / 8) as u8;
        write_u16(&mut b[field::COUNT], self.count);
        write_u32(&mut b[field::PROBE], self.probe);
        write_u32(&mut b[field::SESSION], self.session);
        write_u16(&mut b[field::STREAM], self.stream);
        write_u16(&mut b[field::LINKTYPE], self.linktype);
        write_u32(&mut b[field::SNAPLEN], self.snaplen);
        write_u32(&mut b[field::INTERFACE], self.interface);
        b[field::RESERVED].fill(0);
        write_u64(&mut b[field::SEQUENCE], self.sequence);
        write_u64(&mut b[field::RECORDS_BEFORE], self.records_before);
        write_u64(&mut b[field::DROPS], self.drops);
    }
}

/// A checked view of a batch datagram: after [`Datagram::parse`] every record is known to be
/// whole and nothing panics.
#[derive(Debug, Clone, Copy)]
pub struct Datagram<'a> {
    header: Header,
    records: &'a [u8],
}

impl<'a> Datagram<'a> {
    /// Checks `buf` completely: magic, version, header length, and that exactly `count` whole
    /// records fill the rest (the last one's padding may be absent).
    pub fn parse(buf: &'a [u8]) -> Result<Datagram<'a>, Error> {
        if buf.len() < HEADER_LEN {
            return Err(Error::Short { len: buf.len() });
        }
        let magic = read_u32(&buf[field::MAGIC]);
        if magic != MAGIC {
            return Err(Error::BadMagic(magic));
        }
        if buf[field::VERSION] != VERSION {
            return Err(Error::BadVersion(buf[field::VERSION]));
        }
        // A later minor revision may append fields; version 1 readers skip them.
        let hdr_len = usize::from(buf[field::HDR_LEN]) * 8;
        if hdr_len < HEADER_LEN || hdr_len > buf.len() {
            return Err(Error::BadHeaderLen(hdr_len));
        }
        let header = Header {
            count: read_u16(&buf[field::COUNT]),
            probe: read_u32(&buf[field::PROBE]),
            session: read_u32(&buf[field::SESSION]),
            stream: read_u16(&buf[field::STREAM]),
            linktype: read_u16(&buf[field::LINKTYPE]),
            snaplen: read_u32(&buf[field::SNAPLEN]),
            interface: read_u32(&buf[field::INTERFACE]),
            sequence: read_u64(&buf[field::SEQUENCE]),
            records_before: read_u64(&buf[field::RECORDS_BEFORE]),
            drops: read_u64(&buf[field::DROPS]),
        };
        let records = &buf[hdr_len..];
        let mut found: u16 = 0;
        for r in Records::new(records) {
            if let Err(error) = r {
                return Err(Error::BadRecord {
                    index: found,
                    error,
                });
            }
            found = found.saturating_add(1);
            if found > header.count {
                break;
            }
        }
        if found != header.count {
            return Err(Error::CountMismatch {
                claimed: header.count,
                found,
            });
        }
        Ok(Datagram { header, records })
    }

    /// The header fields.
    pub fn header(&self) -> &Header {
        &self.header
    }

    /// The records, back to back as in `record` (checked whole).
    pub fn records(&self) -> &'a [u8] {
        self.records
    }
}

/// Builds a datagram in a caller's buffer: room for the header first, then records appended;
/// the header is written last, when the datagram is sealed.
#[derive(Debug)]
pub struct Builder<'b> {
    buf: &'b mut Vec<u8>,
}

impl<'b> Builder<'b> {
    /// Starts a datagram in `buf` (cleared; its capacity is kept).
    pub fn start(buf: &'b mut Vec<u8>) -> Builder<'b> {
        buf.clear();
        buf.resize(HEADER_LEN, 0);
        Builder { buf }
    }

    /// Appends one whole record (control field, data and padding, as `record` lays it out).
    #[inline]
    pub fn push_raw(&mut self, record: &[u8]) {
        self.buf.extend_from_slice(record);
    }

    /// Writes `header` and returns the finished datagram's length.
    pub fn seal(self, header: &Header) -> usize {
        header.emit(self.buf);
        self.buf.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::record::{ControlField, Flags, push_record};
    use proptest::prelude::*;

    fn fixture_header() -> Header {
        Header {
            count: 1,
            probe: 7,
            session: 0xdead_beef,
            stream: 2,
            linktype: 1,
            snaplen: 128,
            interface: 0,
            sequence: 5,
            records_before: 300,
            drops: 4,
        }
    }

    // The header above, then one record (rxtime 1, caplen 4, len 60, bytes 01 02 03 04 + pad).
    static DATAGRAM_BYTES: [u8; 80] = [
        0x54, 0x46, 0x42, 0x44, 0x01, 0x07, 0x00, 0x01, //
        0x00, 0x00, 0x00, 0x07, 0xde, 0xad, 0xbe, 0xef, //
        0x00, 0x02, 0x00, 0x01, 0x00, 0x00, 0x00, 0x80, //
        0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, //
        0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x05, //
        0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x01, 0x2c, //
        0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x04, //
        0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x01, //
        0x00, 0x00, 0x00, 0x04, 0x00, 0x00, 0x00, 0x3c, //
        0x01, 0x02, 0x03, 0x04, 0x00, 0x00, 0x00, 0x00,
    ];

    fn one_record() -> Vec<u8> {
        let mut r = Vec::new();
        push_record(
            &mut r,
            ControlField::new(1, Flags::default(), 0, 0, 60),
            &[1, 2, 3, 4],
        );
        r
    }

    #[test]
    fn deconstruct() {
        let d = Datagram::parse(&DATAGRAM_BYTES).unwrap();
        assert_eq!(*d.header(), fixture_header());
        assert_eq!(d.header().link_type(), LinkType::Ethernet);
        assert_eq!(d.records(), &one_record()[..]);
    }

    #[test]
    fn construct() {
        let mut buf = Vec::new();
        let mut b = Builder::start(&mut buf);
        b.push_raw(&one_record());
        assert_eq!(b.seal(&fixture_header()), 80);
        assert_eq!(buf, DATAGRAM_BYTES);
    }

    #[test]
    fn rejects_what_lies() {
        let d = &DATAGRAM_BYTES;
        assert_eq!(
            Datagram::parse(&d[..55]).unwrap_err(),
            Error::Short { len: 55 }
        );
        let mut b = *d;
        b[0] = b'X';
        assert_eq!(
            Datagram::parse(&b).unwrap_err(),
            Error::BadMagic(0x5846_4244)
        );
        let mut b = *d;
        b[4] = 2;
        assert_eq!(Datagram::parse(&b).unwrap_err(), Error::BadVersion(2));
        let mut b = *d;
        b[5] = 6;
        assert_eq!(Datagram::parse(&b).unwrap_err(), Error::BadHeaderLen(48));
        b[5] = 11;
        assert_eq!(Datagram::parse(&b).unwrap_err(), Error::BadHeaderLen(88));
        let mut b = *d;
        b[7] = 2;
        assert_eq!(
            Datagram::parse(&b).unwrap_err(),
            Error::CountMismatch {
                claimed: 2,
                found: 1
            }
        );
        let mut b = *d;
        b[7] = 0;
        assert_eq!(
            Datagram::parse(&b).unwrap_err(),
            Error::CountMismatch {
                claimed: 0,
                found: 1
            }
        );
        // caplen 200: the record runs past the end of the datagram.
        let mut b = *d;
        b[67] = 200;
        assert!(matches!(
            Datagram::parse(&b).unwrap_err(),
            Error::BadRecord { index: 0, .. }
        ));
        // A cut last record (padding may go, data may not).
        assert!(Datagram::parse(&d[..76]).is_ok());
        assert!(matches!(
            Datagram::parse(&d[..75]).unwrap_err(),
            Error::BadRecord { index: 0, .. }
        ));
    }

    #[test]
    fn longer_header_of_a_later_revision_is_skipped() {
        let mut b = DATAGRAM_BYTES[..HEADER_LEN].to_vec();
        b[5] = 8;
        b.extend_from_slice(&[0xaa; 8]);
        b.extend_from_slice(&one_record());
        let d = Datagram::parse(&b).unwrap();
        assert_eq!(d.records(), &one_record()[..]);
    }

    proptest! {
        #[test]
        fn emit_parse_round_trip(
            h in (any::<u32>(), any::<u32>(), any::<u16>(), any::<u16>(), any::<u32>(),
                  any::<u32>(), any::<u64>(), any::<u64>(), any::<u64>()),
            recs in proptest::collection::vec(proptest::collection::vec(any::<u8>(), 0..200), 0..30)
        ) {
            let header = Header {
                count: recs.len() as u16,
                probe: h.0, session: h.1, stream: h.2, linktype: h.3, snaplen: h.4,
                interface: h.5, sequence: h.6, records_before: h.7, drops: h.8,
            };
            let mut rec_bytes = Vec::new();
            for data in &recs {
                push_record(&mut rec_bytes,
                    ControlField::new(1, Flags::default(), 0, 0, data.len() as u32), data);
            }
            let mut buf = Vec::new();
            let mut b = Builder::start(&mut buf);
            b.push_raw(&rec_bytes);
            let n = b.seal(&header);
            prop_assert_eq!(n, HEADER_LEN + rec_bytes.len());
            let d = Datagram::parse(&buf).unwrap();
            prop_assert_eq!(*d.header(), header);
            prop_assert_eq!(d.records(), &rec_bytes[..]);
            let back: Vec<_> = Records::new(d.records()).map(|r| r.unwrap().1.to_vec()).collect();
            prop_assert_eq!(back, recs);
        }

        #[test]
        fn never_panics_on_garbage(buf in proptest::collection::vec(any::<u8>(), 0..400)) {
            let _ = Datagram::parse(&buf);
        }

        #[test]
        fn never_panics_on_damaged_datagrams(
            at in 0usize..80, v in any::<u8>(), cut in 0usize..=80
        ) {
            let mut b = DATAGRAM_BYTES;
            b[at] = v;
            if let Ok(d) = Datagram::parse(&b[..cut]) {
                prop_assert_eq!(Records::new(d.records()).count(), usize::from(d.header().count));
            }
        }
    }
}
