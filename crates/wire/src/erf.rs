//! ERF files (Endace DAG's Extensible Record Format): records one after another, with no file
//! header and no magic.
//!
//! ```text
//! +-----------------------------------------------+
//! | ts: 64-bit fixed point, little-endian          |  seconds in the high 32 bits,
//! |                                                |  binary fraction in the low 32
//! +-----------+-----------+-----------------------+
//! | type      | flags     | rlen (record length)  |  type bit 7: an extension header
//! +-----------+-----------+-----------------------+  follows; flags bits 0-1: the port
//! | lctr (loss counter    | wlen (wire length)    |
//! |   or colour)          |                       |
//! +-----------------------+-----------------------+
//! | extension headers, 8 bytes each, while bit 7 of the last one's first byte is set |
//! | Ethernet types: 2 bytes of pad                                                    |
//! | payload, then padding to rlen                                                     |
//! ```
//!
//! Every field but the timestamp is big-endian. A record's captured bytes are what `rlen`
//! leaves after the headers, cut at `wlen` (the rest is padding). `lctr` counts records the
//! card lost just before this one, in the types that have it; the coloured types put a colour
//! or hash there instead.
//!
//! A file is recognised as ERF the way Wireshark recognises one: by records that look right (see
//! [`sniff`]), after the pcap and pcapng magics are ruled out.

use crate::LinkType;
use crate::capfile::FileErrorKind;

/// Length of the record header.
pub const HEADER_LEN: usize = 16;
/// Length of one extension header.
pub const EXT_HEADER_LEN: usize = 8;
/// The pad between the headers and an Ethernet frame.
pub const ETH_PAD_LEN: usize = 2;
/// Bit 7 of the type byte, and of an extension header's first byte: another extension header
/// follows.
pub const MORE_EXT: u8 = 0x80;
/// The largest wire length a first record may claim for the file to be taken as ERF.
pub const SNIFF_MAX_WLEN: u16 = 16_384;
/// Records [`sniff`] looks at, at most.
pub const SNIFF_RECORDS: usize = 3;

mod field {
    use core::ops::Range;
    pub const TS: Range<usize> = 0..8;
    pub const TYPE: usize = 8;
    pub const FLAGS: usize = 9;
    pub const RLEN: Range<usize> = 10..12;
    pub const LCTR: Range<usize> = 12..14;
    pub const WLEN: Range<usize> = 14..16;
}

/// An ERF record type: the low 7 bits of the type byte (`ERF_TYPE_*`).
///
/// Open enum: values without a name here round-trip as [`RecordType::Unknown`].
#[doc(alias = "ERF_TYPE")]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum RecordType {
    /// `ERF_TYPE_HDLC_POS` (1): PoS with HDLC framing.
    HdlcPos,
    /// `ERF_TYPE_ETH` (2): Ethernet.
    Eth,
    /// `ERF_TYPE_ATM` (3): ATM cells.
    Atm,
    /// `ERF_TYPE_AAL5` (4): reassembled AAL5 frames.
    Aal5,
    /// `ERF_TYPE_COLOR_ETH` (11): Ethernet, `lctr` holds a colour.
    ColorEth,
    /// `ERF_TYPE_DSM_COLOR_ETH` (16): Ethernet, `lctr` holds a DSM colour.
    DsmColorEth,
    /// `ERF_TYPE_COLOR_HASH_ETH` (20): Ethernet, `lctr` holds a colour and hash.
    ColorHashEth,
    /// `ERF_TYPE_IPV4` (22): an IPv4 packet, no link layer.
    Ipv4,
    /// `ERF_TYPE_IPV6` (23): an IPv6 packet, no link layer.
    Ipv6,
    /// `ERF_TYPE_META` (27): metadata about the capture, not a packet.
    Meta,
    /// `ERF_TYPE_PAD` (48): padding, not a packet.
    Pad,
    /// Any other value (1-29 but 26 are defined, 32-47 are for internal use).
    Unknown(u8),
}

impl RecordType {
    /// The type for the low 7 bits of a type byte.
    pub const fn from_u8(n: u8) -> RecordType {
        match n & 0x7f {
            1 => RecordType::HdlcPos,
            2 => RecordType::Eth,
            3 => RecordType::Atm,
            4 => RecordType::Aal5,
            11 => RecordType::ColorEth,
            16 => RecordType::DsmColorEth,
            20 => RecordType::ColorHashEth,
            22 => RecordType::Ipv4,
            23 => RecordType::Ipv6,
            27 => RecordType::Meta,
            48 => RecordType::Pad,
            n => RecordType::Unknown(n),
        }
    }

    /// The `ERF_TYPE_*` number.
    pub const fn to_u8(self) -> u8 {
        match self {
            RecordType::HdlcPos => 1,
            RecordType::Eth => 2,
            RecordType::Atm => 3,
            RecordType::Aal5 => 4,
            RecordType::ColorEth => 11,
            RecordType::DsmColorEth => 16,
            RecordType::ColorHashEth => 20,
            RecordType::Ipv4 => 22,
            RecordType::Ipv6 => 23,
            RecordType::Meta => 27,
            RecordType::Pad => 48,
            RecordType::Unknown(n) => n,
        }
    }

    /// Whether the type is one the ERF specification defines (1-29 but 26, and PAD), the
    /// set [`sniff`] accepts.
    pub const fn is_defined(self) -> bool {
        matches!(self.to_u8(), 1..=25 | 27..=29 | 48)
    }

    /// Whether an Ethernet frame, after a 2-byte pad, is the payload.
    pub const fn is_ethernet(self) -> bool {
        matches!(
            self,
            RecordType::Eth
                | RecordType::ColorEth
                | RecordType::DsmColorEth
                | RecordType::ColorHashEth
        )
    }

    /// The link type of the payload, for the types whose payload tapflow reads.
    pub const fn linktype(self) -> Option<LinkType> {
        match self {
            t if t.is_ethernet() => Some(LinkType::Ethernet),
            RecordType::Ipv4 | RecordType::Ipv6 => Some(LinkType::Raw),
            _ => None,
        }
    }

    /// Whether records of this type carry no packet at all (padding, metadata).
    pub const fn is_not_a_packet(self) -> bool {
        matches!(self, RecordType::Pad | RecordType::Meta)
    }

    /// Whether `lctr` is a loss counter (the plain types), not a colour.
    pub const fn has_loss_counter(self) -> bool {
        matches!(
            self,
            RecordType::HdlcPos | RecordType::Eth | RecordType::Atm | RecordType::Aal5
        )
    }
}

/// The timestamp (seconds and a binary fraction, 2^-32 s) in ns since 1970, rounded to the
/// nearest as Wireshark rounds it.
#[inline]
pub const fn ts_to_ns(ts: u64) -> u64 {
    let secs = ts >> 32;
    let frac = (ts & 0xffff_ffff) * 1_000_000_000;
    let ns = (frac + 0x8000_0000) >> 32;
    secs * 1_000_000_000 + ns
}

/// The timestamp for `ns` since 1970 (seconds past 2106 saturate).
pub const fn ns_to_ts(ns: u64) -> u64 {
    let secs = ns / 1_000_000_000;
    if secs > u32::MAX as u64 {
        return u64::MAX;
    }
    let sub = ns % 1_000_000_000;
    // Rounded to the nearest 2^-32 s, which `ts_to_ns` reads back as `sub` exactly.
    let frac = ((sub << 32) + 500_000_000) / 1_000_000_000;
    (secs << 32) + frac
}

/// A view of one ERF record at the start of a buffer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Record<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> Record<T> {
    /// A view without checks: accessors may panic on a short buffer.
    pub const fn new_unchecked(buffer: T) -> Record<T> {
        Record { buffer }
    }

    /// A view of a whole, well-formed record: see [`Record::check_len`].
    pub fn new_checked(buffer: T) -> Result<Record<T>, FileErrorKind> {
        let r = Record::new_unchecked(buffer);
        r.check_len()?;
        Ok(r)
    }

    /// Checks that the buffer holds the header and `rlen` bytes, and that `rlen` holds the
    /// extension headers and the Ethernet pad. After it, no accessor panics.
    pub fn check_len(&self) -> Result<(), FileErrorKind> {
        let b = self.buffer.as_ref();
        if b.len() < HEADER_LEN {
            return Err(FileErrorKind::ShortRecordHeader {
                need: HEADER_LEN as u32,
                remain: b.len() as u64,
            });
        }
        let rlen = self.rlen();
        let need = self.headers_len();
        if usize::from(rlen) < need {
            return Err(FileErrorKind::ErfRecordTooShort {
                rlen,
                need: need as u32,
            });
        }
        if b.len() < usize::from(rlen) {
            return Err(FileErrorKind::Truncated {
                claimed: u64::from(rlen),
                remain: b.len() as u64,
            });
        }
        Ok(())
    }

    /// Bytes before the payload: the header, the extension headers (walked while they fit in
    /// the buffer and in `rlen`, one more claimed past them) and an Ethernet type's pad.
    fn headers_len(&self) -> usize {
        let b = self.buffer.as_ref();
        let end = b.len().min(usize::from(self.rlen()));
        let mut off = HEADER_LEN;
        let mut more = self.type_byte() & MORE_EXT != 0;
        while more {
            off += EXT_HEADER_LEN;
            if off > end {
                // Claims a header past the record: `check_len` refuses it.
                return off;
            }
            more = b[off - EXT_HEADER_LEN] & MORE_EXT != 0;
        }
        if self.record_type().is_ethernet() {
            off += ETH_PAD_LEN;
        }
        off
    }

    /// The timestamp, 64-bit fixed point (see [`ts_to_ns`]).
    pub fn ts(&self) -> u64 {
        let b = self.buffer.as_ref();
        u64::from_le_bytes(b[field::TS].try_into().expect("8 bytes"))
    }

    /// The whole type byte (bit 7: extension headers follow).
    pub fn type_byte(&self) -> u8 {
        self.buffer.as_ref()[field::TYPE]
    }

    /// The record type.
    pub fn record_type(&self) -> RecordType {
        RecordType::from_u8(self.type_byte())
    }

    /// The flags byte.
    pub fn flags(&self) -> u8 {
        self.buffer.as_ref()[field::FLAGS]
    }

    /// The capture port (flags bits 0-1).
    pub fn port(&self) -> u8 {
        self.flags() & 0b11
    }

    /// `rlen`: the record's length, headers and padding included.
    pub fn rlen(&self) -> u16 {
        let b = self.buffer.as_ref();
        u16::from_be_bytes([b[field::RLEN.start], b[field::RLEN.start + 1]])
    }

    /// `lctr`: the loss counter, or a colour (see [`RecordType::has_loss_counter`]).
    pub fn lctr(&self) -> u16 {
        let b = self.buffer.as_ref();
        u16::from_be_bytes([b[field::LCTR.start], b[field::LCTR.start + 1]])
    }

    /// `wlen`: the packet's length on the wire.
    pub fn wlen(&self) -> u16 {
        let b = self.buffer.as_ref();
        u16::from_be_bytes([b[field::WLEN.start], b[field::WLEN.start + 1]])
    }

    /// The captured bytes: what `rlen` leaves after the headers, cut at `wlen` (the
    /// Ethernet pad not counted in it).
    pub fn payload(&self) -> &[u8] {
        let b = self.buffer.as_ref();
        let start = self.headers_len();
        let end = usize::from(self.rlen());
        let body = &b[start..end];
        &body[..body.len().min(usize::from(self.wlen()))]
    }
}

impl<'a> Record<&'a [u8]> {
    /// [`Record::payload`], borrowing the buffer rather than the view.
    pub fn into_payload(self) -> &'a [u8] {
        let start = self.headers_len();
        let end = usize::from(self.rlen());
        let body = &self.buffer[start..end];
        &body[..body.len().min(usize::from(self.wlen()))]
    }
}

/// Whether `bytes` start like an ERF file: up to [`SNIFF_RECORDS`] records, each of a defined
/// type, with an `rlen` that holds its headers (extension headers and pad) and a plausible
/// `wlen`, the first one whole within the file, and the later ones as far as the file goes.
pub fn sniff(bytes: &[u8]) -> bool {
    let mut rest = bytes;
    for i in 0..SNIFF_RECORDS {
        if rest.len() < HEADER_LEN {
            // The end of the file, or a later record cut by it.
            return i > 0;
        }
        let r = Record::new_unchecked(rest);
        let whole = match r.check_len() {
            Ok(()) => true,
            // A later record may be cut by the end of the file.
            Err(FileErrorKind::Truncated { .. }) if i > 0 => false,
            Err(_) => return false,
        };
        let t = r.record_type();
        if !t.is_defined() || (!t.is_not_a_packet() && r.wlen() > SNIFF_MAX_WLEN) {
            return false;
        }
        if !whole {
            return true;
        }
        rest = &rest[usize::from(r.rlen())..];
    }
    true
}

/// Appends one record: `data` after the headers (and the pad, for an Ethernet type), padded
/// to a multiple of 8 bytes, with `wlen` the larger of `orig_len` and the data's length.
///
/// # Panics
/// If the record would exceed 65535 bytes.
pub fn write_record(
    out: &mut Vec<u8>,
    rtype: RecordType,
    port: u8,
    ts_ns: u64,
    lctr: u16,
    data: &[u8],
    orig_len: u16,
) {
    let pad = if rtype.is_ethernet() { ETH_PAD_LEN } else { 0 };
    let rlen = (HEADER_LEN + pad + data.len()).next_multiple_of(8);
    let rlen = u16::try_from(rlen).expect("an ERF record fits in 65535 bytes");
    let wlen = orig_len.max(data.len() as u16);
    out.extend_from_slice(&ns_to_ts(ts_ns).to_le_bytes());
    out.push(rtype.to_u8() & 0x7f);
    out.push(port & 0b11);
    out.extend_from_slice(&rlen.to_be_bytes());
    out.extend_from_slice(&lctr.to_be_bytes());
    out.extend_from_slice(&wlen.to_be_bytes());
    let start = out.len() - HEADER_LEN;
    out.resize(out.len() + pad, 0);
    out.extend_from_slice(data);
    out.resize(start + usize::from(rlen), 0);
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    // One ERF_TYPE_ETH record on port 1: 1700000000.5 s, rlen 40, lctr 3, wlen 18; a 2-byte
    // pad, 18 bytes of frame, 4 of padding.
    static ETH_RECORD: [u8; 40] = [
        0x00, 0x00, 0x00, 0x80, 0x00, 0xf1, 0x53, 0x65, // ts: .5 s, 1700000000 s
        0x02, 0x01, 0x00, 0x28, 0x00, 0x03, 0x00,
        0x12, // ETH, port 1, rlen 40, lctr 3, wlen 18
        0x00, 0x00, // pad
        0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x02, 0x00, 0x00, 0x00, 0x00, 0x01, 0x08, 0x00, //
        0x45, 0x00, 0x00, 0x14, //
        0x00, 0x00, 0x00, 0x00, // padding
    ];

    #[test]
    fn deconstruct() {
        let r = Record::new_checked(&ETH_RECORD[..]).unwrap();
        assert_eq!(r.record_type(), RecordType::Eth);
        assert_eq!(ts_to_ns(r.ts()), 1_700_000_000_500_000_000);
        assert_eq!((r.port(), r.rlen(), r.lctr(), r.wlen()), (1, 40, 3, 18));
        assert_eq!(r.payload(), &ETH_RECORD[18..36]);
        assert!(sniff(&ETH_RECORD));
    }

    #[test]
    fn construct() {
        let mut out = Vec::new();
        write_record(
            &mut out,
            RecordType::Eth,
            1,
            1_700_000_000_500_000_000,
            3,
            &ETH_RECORD[18..36],
            18,
        );
        assert_eq!(out, ETH_RECORD);
    }

    #[test]
    fn extension_headers_are_skipped() {
        // Two extension headers: the type's bit 7, then the first one's.
        let mut b = ETH_RECORD[..16].to_vec();
        b[8] |= MORE_EXT;
        b[11] = 56;
        b.extend_from_slice(&[0x80 | 0x21, 1, 2, 3, 4, 5, 6, 7]);
        b.extend_from_slice(&[0x05, 1, 2, 3, 4, 5, 6, 7]);
        b.extend_from_slice(&ETH_RECORD[16..]);
        let r = Record::new_checked(&b[..]).unwrap();
        assert_eq!(r.payload(), &ETH_RECORD[18..36]);
        // The chain claims a third header past rlen.
        b[24] |= MORE_EXT;
        b[11] = 40;
        assert_eq!(
            Record::new_checked(&b[..]).unwrap_err(),
            FileErrorKind::ErfRecordTooShort { rlen: 40, need: 42 }
        );
    }

    #[test]
    fn records_that_are_not_erf() {
        assert!(!sniff(b""));
        assert!(!sniff(b"GIF89a not a capture file at all"));
        let mut b = ETH_RECORD;
        b[8] = 26; // undefined type
        assert!(!sniff(&b));
        let mut b = ETH_RECORD;
        b[11] = 12; // rlen below the header
        assert!(!sniff(&b));
        let mut b = ETH_RECORD;
        b[14] = 0x50; // wlen 20498
        assert!(!sniff(&b));
        // The first record must be whole; a second may be cut by the end of the file.
        assert!(!sniff(&ETH_RECORD[..39]));
        let two = [&ETH_RECORD[..], &ETH_RECORD[..20]].concat();
        assert!(sniff(&two));
        for cut in 40..two.len() {
            assert!(sniff(&two[..cut]), "cut at {cut}");
        }
        let mut bad = two.clone();
        bad[48] = 99;
        assert!(!sniff(&bad));
    }

    #[test]
    fn record_types_round_trip() {
        for n in 0..128u8 {
            assert_eq!(RecordType::from_u8(n).to_u8(), n);
            assert_eq!(RecordType::from_u8(n | MORE_EXT).to_u8(), n);
        }
        assert!(RecordType::from_u8(20).is_ethernet());
        assert!(!RecordType::from_u8(26).is_defined());
        assert_eq!(RecordType::from_u8(23).linktype(), Some(LinkType::Raw));
        assert_eq!(RecordType::HdlcPos.linktype(), None);
    }

    #[test]
    fn timestamps() {
        assert_eq!(ts_to_ns(1 << 32), 1_000_000_000);
        assert_eq!(ts_to_ns(1), 0, "2^-32 s rounds to 0 ns");
        assert_eq!(ts_to_ns(3), 1, "0.698 ns rounds to 1");
        assert_eq!(
            ts_to_ns(0xffff_ffff),
            1_000_000_000,
            "rounds up into the next second"
        );
        assert_eq!(ns_to_ts(u64::MAX), u64::MAX);
    }

    proptest! {
        #[test]
        fn ns_round_trip(ns in 0..(u64::from(u32::MAX) + 1) * 1_000_000_000) {
            prop_assert_eq!(ts_to_ns(ns_to_ts(ns)), ns);
        }

        #[test]
        fn damaged_files_never_panic(
            flips in proptest::collection::vec((any::<usize>(), any::<u8>()), 0..6),
            cut in any::<usize>(),
        ) {
            let mut f = Vec::new();
            write_record(&mut f, RecordType::Eth, 0, 1, 2, &[7; 60], 64);
            write_record(&mut f, RecordType::Ipv4, 1, 2, 0, &[0x45; 20], 20);
            write_record(&mut f, RecordType::Aal5, 2, 3, 0, &[0; 48], 48);
            for (at, v) in flips {
                let n = f.len();
                f[at % n] = v;
            }
            f.truncate(cut % (f.len() + 1));
            let _ = sniff(&f);
            if let Ok(mut r) = crate::capfile::Reader::new(&f) {
                while let Some(p) = r.next_packet() {
                    if let Ok(p) = p {
                        prop_assert!(p.data.len() as u64 <= u64::from(p.len));
                    }
                }
            }
        }

        #[test]
        fn never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..200)) {
            let _ = sniff(&bytes);
            if let Ok(r) = Record::new_checked(&bytes[..]) {
                prop_assert!(r.payload().len() <= usize::from(r.rlen()));
            }
        }
    }
}
