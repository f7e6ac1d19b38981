//! The header record: the paper's 16-byte control field followed by the first `caplen` bytes of
//! a packet, padded to a multiple of 8 bytes.
//!
//! ```text
//!  0                   1                   2                   3
//!  0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1
//! +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//! |                    rxtime (ns since 1970, high)               |
//! |                    rxtime (ns since 1970, low)                |
//! |            flags              |            caplen             |
//! |            cksum              |              len              |
//! +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//! |      caplen bytes of the packet, then 0-7 zero bytes of pad   |
//! ```
//!
//! All fields are big-endian. `docs/wire-formats.md` describes every bit of `flags`.

use crate::bytes::{read_u16, read_u64, write_u16, write_u64};

/// Length of the control field in bytes.
pub const CONTROL_LEN: usize = 16;

/// Records are padded to this alignment.
pub const RECORD_ALIGN: usize = 8;

/// Largest `caplen` a record can carry.
pub const MAX_CAPLEN: usize = u16::MAX as usize;

/// Total length of a record carrying `caplen` packet bytes, padding included.
#[inline]
pub const fn record_len(caplen: usize) -> usize {
    (CONTROL_LEN + caplen + RECORD_ALIGN - 1) & !(RECORD_ALIGN - 1)
}

/// Where a record's timestamp came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TsSource {
    /// Copied from a capture file.
    File,
    /// The kernel's software receive time (`TP_STATUS_TS_SOFTWARE`).
    Kernel,
    /// The NIC's clock (`TP_STATUS_TS_RAW_HARDWARE`, via `SO_TIMESTAMPING`).
    Hardware,
    /// None in the capture file (a pcapng Simple Packet Block has no timestamp): the previous
    /// packet's time, copied.
    Copied,
}

/// Which way a packet crossed the capture interface (from `sll_pkttype`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Direction {
    /// Not known (files without `epb_flags`).
    Unknown,
    /// Received by the interface.
    Inbound,
    /// Sent by this host (`PACKET_OUTGOING`).
    Outbound,
    /// Reserved value 3.
    Reserved,
}

/// The control field's `flags` (the paper's `rsvd`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Hash)]
pub struct Flags(pub u16);

impl Flags {
    const TS_SOURCE_MASK: u16 = 0b11;
    /// `cksum` is the 1's-complement sum of the whole IP packet (the packet was captured whole).
    pub const CKSUM_WHOLE: u16 = 1 << 2;
    /// The kernel or NIC validated the transport checksum (`TP_STATUS_CSUM_VALID`).
    pub const CSUM_VALID: u16 = 1 << 3;
    /// The checksum is not filled in yet: an outgoing packet with offload
    /// (`TP_STATUS_CSUMNOTREADY`).
    pub const CSUM_NOT_READY: u16 = 1 << 4;
    const DIRECTION_SHIFT: u16 = 5;
    const DIRECTION_MASK: u16 = 0b11 << 5;
    /// The kernel had stripped an 802.1Q tag (`TP_STATUS_VLAN_VALID`); it was put back into the
    /// captured bytes, and `caplen` and `len` include its 4 bytes.
    pub const VLAN_RESTORED: u16 = 1 << 7;
    /// The packet is larger than the interface MTU allows: merged by receive offload (GRO/LRO).
    pub const OFFLOAD_MERGED: u16 = 1 << 8;
    /// The original length is 65536 or more: `len` holds its low 16 bits and `cksum` its high
    /// 16 bits. (Such a packet is never captured whole, so `cksum` is free.)
    pub const LEN32: u16 = 1 << 9;

    /// The timestamp source.
    #[inline]
    pub const fn ts_source(self) -> TsSource {
        match self.0 & Self::TS_SOURCE_MASK {
            0 => TsSource::File,
            1 => TsSource::Kernel,
            2 => TsSource::Hardware,
            _ => TsSource::Copied,
        }
    }

    /// These flags with the timestamp source replaced.
    #[inline]
    pub const fn with_ts_source(self, src: TsSource) -> Flags {
        let v = match src {
            TsSource::File => 0,
            TsSource::Kernel => 1,
            TsSource::Hardware => 2,
            TsSource::Copied => 3,
        };
        Flags((self.0 & !Self::TS_SOURCE_MASK) | v)
    }

    /// The direction.
    #[inline]
    pub const fn direction(self) -> Direction {
        match (self.0 & Self::DIRECTION_MASK) >> Self::DIRECTION_SHIFT {
            0 => Direction::Unknown,
            1 => Direction::Inbound,
            2 => Direction::Outbound,
            _ => Direction::Reserved,
        }
    }

    /// These flags with the direction replaced.
    #[inline]
    pub const fn with_direction(self, d: Direction) -> Flags {
        let v: u16 = match d {
            Direction::Unknown => 0,
            Direction::Inbound => 1,
            Direction::Outbound => 2,
            Direction::Reserved => 3,
        };
        Flags((self.0 & !Self::DIRECTION_MASK) | (v << Self::DIRECTION_SHIFT))
    }

    /// Whether every bit of `bits` is set.
    #[inline]
    pub const fn contains(self, bits: u16) -> bool {
        self.0 & bits == bits
    }

    /// These flags with `bits` set.
    #[inline]
    pub const fn with(self, bits: u16) -> Flags {
        Flags(self.0 | bits)
    }

    /// The pcapng `epb_flags` word these flags map to (direction bits 0-1; checksum bits 9-10).
    pub const fn epb_flags(self) -> u32 {
        let mut w = match self.direction() {
            Direction::Inbound => 0b01,
            Direction::Outbound => 0b10,
            _ => 0,
        };
        if self.contains(Self::CSUM_NOT_READY) {
            w |= 1 << 9;
        }
        if self.contains(Self::CSUM_VALID) {
            w |= 1 << 10;
        }
        if self.contains(Self::OFFLOAD_MERGED) {
            w |= 1 << 11;
        }
        w
    }
}

/// Why a record could not be read.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum RecordError {
    /// Fewer than 16 bytes remain for the control field.
    #[error("header record truncated: {have} bytes left, control field needs 16")]
    ShortControl {
        /// Bytes available.
        have: usize,
    },
    /// `caplen` claims more bytes than remain.
    #[error("header record claims caplen {caplen} but only {have} bytes follow the control field")]
    ShortData {
        /// The claimed caplen.
        caplen: u16,
        /// Bytes available after the control field.
        have: usize,
    },
    /// `caplen` is larger than the original length.
    #[error("header record caplen {caplen} exceeds its original length {len}")]
    CaplenExceedsLen {
        /// The claimed caplen.
        caplen: u16,
        /// The claimed original length.
        len: u32,
    },
}

/// The 16-byte control field that precedes every captured header.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ControlField {
    /// Arrival time in nanoseconds since the Unix epoch.
    pub rxtime: u64,
    /// Flags (the paper's `rsvd`).
    pub flags: Flags,
    /// Number of packet bytes that follow.
    pub caplen: u16,
    /// 1's-complement sum of the IP packet, valid when [`Flags::CKSUM_WHOLE`] is set; the high
    /// half of the original length when [`Flags::LEN32`] is set; else 0.
    pub cksum: u16,
    /// Original length of the packet on the wire (its low 16 bits when [`Flags::LEN32`] is set).
    pub len: u16,
}

mod field {
    use core::ops::Range;
    pub const RXTIME: Range<usize> = 0..8;
    pub const FLAGS: Range<usize> = 8..10;
    pub const CAPLEN: Range<usize> = 10..12;
    pub const CKSUM: Range<usize> = 12..14;
    pub const LEN: Range<usize> = 14..16;
}

impl ControlField {
    /// Builds a control field; an original length over 65535 is split between `len` and
    /// `cksum` with [`Flags::LEN32`] (and `cksum` is then not a sum).
    #[inline]
    pub fn new(rxtime: u64, flags: Flags, caplen: u16, cksum: u16, len: u32) -> ControlField {
        if len > u32::from(u16::MAX) {
            let flags = Flags((flags.0 | Flags::LEN32) & !Flags::CKSUM_WHOLE);
            let (cksum, len) = ((len >> 16) as u16, len as u16);
            ControlField {
                rxtime,
                flags,
                caplen,
                cksum,
                len,
            }
        } else {
            ControlField {
                rxtime,
                flags,
                caplen,
                cksum,
                len: len as u16,
            }
        }
    }

    /// The original length on the wire.
    #[inline]
    pub const fn orig_len(&self) -> u32 {
        if self.flags.contains(Flags::LEN32) {
            (self.cksum as u32) << 16 | self.len as u32
        } else {
            self.len as u32
        }
    }

    /// The 1's-complement sum of the whole IP packet, if the record carries one.
    #[inline]
    pub const fn ip_sum(&self) -> Option<u16> {
        if self.flags.contains(Flags::CKSUM_WHOLE) {
            Some(self.cksum)
        } else {
            None
        }
    }

    /// Parses a control field from the first 16 bytes of `buf`.
    #[inline]
    pub fn parse(buf: &[u8]) -> Result<ControlField, RecordError> {
        let Some(b) = buf.get(..CONTROL_LEN) else {
            return Err(RecordError::ShortControl { have: buf.len() });
        };
        Ok(ControlField {
            rxtime: read_u64(&b[field::RXTIME]),
            flags: Flags(read_u16(&b[field::FLAGS])),
            caplen: read_u16(&b[field::CAPLEN]),
            cksum: read_u16(&b[field::CKSUM]),
            len: read_u16(&b[field::LEN]),
        })
    }

    /// Writes the control field into the first 16 bytes of `buf`.
    ///
    /// # Panics
    /// If `buf` is shorter than 16 bytes.
    #[inline]
    pub fn emit(&self, buf: &mut [u8]) {
        write_u64(&mut buf[field::RXTIME], self.rxtime);
        write_u16(&mut buf[field::FLAGS], self.flags.0);
        write_u16(&mut buf[field::CAPLEN], self.caplen);
        write_u16(&mut buf[field::CKSUM], self.cksum);
        write_u16(&mut buf[field::LEN], self.len);
    }
}

/// Writes one record (control field, `data`, zero padding) into `buf`, which must be exactly
/// [`record_len`]`(data.len())` bytes; `ctl.caplen` is set from `data.len()`. Encoders that fill
/// a buffer in place (a datagram) call this per packet: no growth check, no zero-fill.
///
/// # Panics
/// If `buf` has another length, or `data` is longer than [`MAX_CAPLEN`].
#[inline]
pub fn emit_record(buf: &mut [u8], mut ctl: ControlField, data: &[u8]) {
    assert!(
        data.len() <= MAX_CAPLEN,
        "record data longer than MAX_CAPLEN"
    );
    assert_eq!(
        buf.len(),
        record_len(data.len()),
        "record buffer sized by record_len"
    );
    ctl.caplen = data.len() as u16;
    let (head, body) = buf.split_at_mut(CONTROL_LEN);
    ctl.emit(head);
    if body.len() >= RECORD_ALIGN {
        // Zero the last word before the data lands on it: the padding.
        let end = body.len();
        body[end - RECORD_ALIGN..].copy_from_slice(&[0; RECORD_ALIGN]);
    }
    body[..data.len()].copy_from_slice(data);
}

/// Appends one record (control field, `data`, padding) to `out`.
///
/// `ctl.caplen` is set from `data.len()`, which must be at most [`MAX_CAPLEN`]; longer data is
/// cut. Allocates only if `out` lacks capacity.
pub fn push_record(out: &mut Vec<u8>, ctl: ControlField, data: &[u8]) {
    let data = &data[..data.len().min(MAX_CAPLEN)];
    let start = out.len();
    out.resize(start + record_len(data.len()), 0);
    emit_record(&mut out[start..], ctl, data);
}

/// Reads records one after another from a buffer.
#[derive(Debug, Clone)]
pub struct Records<'a> {
    buf: &'a [u8],
    offset: usize,
}

impl<'a> Records<'a> {
    /// Iterates the records in `buf`.
    pub fn new(buf: &'a [u8]) -> Records<'a> {
        Records { buf, offset: 0 }
    }

    /// Byte offset of the next record within the buffer.
    pub fn offset(&self) -> usize {
        self.offset
    }
}

impl<'a> Iterator for Records<'a> {
    type Item = Result<(ControlField, &'a [u8]), RecordError>;

    fn next(&mut self) -> Option<Self::Item> {
        let rest = &self.buf[self.offset..];
        if rest.is_empty() {
            return None;
        }
        let ctl = match ControlField::parse(rest) {
            Ok(c) => c,
            Err(e) => {
                self.offset = self.buf.len();
                return Some(Err(e));
            }
        };
        let caplen = ctl.caplen as usize;
        let body = &rest[CONTROL_LEN..];
        if caplen > body.len() {
            self.offset = self.buf.len();
            return Some(Err(RecordError::ShortData {
                caplen: ctl.caplen,
                have: body.len(),
            }));
        }
        if u32::from(ctl.caplen) > ctl.orig_len() {
            self.offset = self.buf.len();
            return Some(Err(RecordError::CaplenExceedsLen {
                caplen: ctl.caplen,
                len: ctl.orig_len(),
            }));
        }
        // The final record's padding may be absent.
        self.offset += record_len(caplen).min(rest.len());
        Some(Ok((ctl, &body[..caplen])))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    // rxtime 1700000000.123456789 s, kernel timestamp + inbound + csum valid, caplen 4,
    // cksum 0xbeef, len 60, then 4 bytes and 4 bytes of padding.
    static RECORD_BYTES: [u8; 24] = [
        0x17, 0x97, 0x9c, 0xfe, 0x3d, 0x85, 0xcd, 0x15, //
        0x00, 0x29, 0x00, 0x04, 0xbe, 0xef, 0x00, 0x3c, //
        0xde, 0xad, 0xbe, 0xef, 0x00, 0x00, 0x00, 0x00,
    ];

    fn fixture() -> ControlField {
        ControlField {
            rxtime: 1_700_000_000_123_456_789,
            flags: Flags::default()
                .with_ts_source(TsSource::Kernel)
                .with_direction(Direction::Inbound)
                .with(Flags::CSUM_VALID),
            caplen: 4,
            cksum: 0xbeef,
            len: 60,
        }
    }

    #[test]
    fn deconstruct() {
        let mut it = Records::new(&RECORD_BYTES);
        let (ctl, data) = it.next().unwrap().unwrap();
        assert_eq!(ctl, fixture());
        assert_eq!(ctl.flags.ts_source(), TsSource::Kernel);
        assert_eq!(ctl.flags.direction(), Direction::Inbound);
        assert_eq!(data, &[0xde, 0xad, 0xbe, 0xef]);
        assert!(it.next().is_none());
    }

    #[test]
    fn construct() {
        let mut out = Vec::new();
        push_record(&mut out, fixture(), &[0xde, 0xad, 0xbe, 0xef]);
        assert_eq!(out, RECORD_BYTES);
    }

    #[test]
    fn every_timestamp_source_round_trips_in_bits_0_and_1() {
        let base = Flags::default().with_direction(Direction::Outbound);
        for (src, bits) in [
            (TsSource::File, 0),
            (TsSource::Kernel, 1),
            (TsSource::Hardware, 2),
            (TsSource::Copied, 3),
        ] {
            let f = base.with_ts_source(src);
            assert_eq!((f.0 & 0b11, f.ts_source()), (bits, src));
            assert_eq!(f.direction(), Direction::Outbound);
        }
    }

    #[test]
    fn long_original_length_is_kept_in_32_bits() {
        let c = ControlField::new(0, Flags(Flags::CKSUM_WHOLE), 0, 0xbeef, 262_144);
        assert!(c.flags.contains(Flags::LEN32));
        assert!(!c.flags.contains(Flags::CKSUM_WHOLE));
        assert_eq!((c.cksum, c.len), (4, 0));
        assert_eq!(c.orig_len(), 262_144);
        assert_eq!(c.ip_sum(), None);
        let short = ControlField::new(0, Flags(Flags::CKSUM_WHOLE), 0, 0xbeef, 65_535);
        assert_eq!((short.orig_len(), short.ip_sum()), (65_535, Some(0xbeef)));
    }

    #[test]
    fn epb_flags_map_direction_and_checksum() {
        let f = fixture().flags;
        assert_eq!(f.epb_flags(), 0b01 | 1 << 10);
        let out = Flags::default()
            .with_direction(Direction::Outbound)
            .with(Flags::CSUM_NOT_READY);
        assert_eq!(out.epb_flags(), 0b10 | 1 << 9);
        // Every combination against the mapping written out case by case.
        for bits in 0..1u16 << 10 {
            let f = Flags(bits);
            let mut want = match f.direction() {
                Direction::Inbound => 0b01,
                Direction::Outbound => 0b10,
                Direction::Unknown | Direction::Reserved => 0,
            };
            for (flag, bit) in [
                (Flags::CSUM_NOT_READY, 9),
                (Flags::CSUM_VALID, 10),
                (Flags::OFFLOAD_MERGED, 11),
            ] {
                if f.contains(flag) {
                    want |= 1 << bit;
                }
            }
            assert_eq!(f.epb_flags(), want, "flags {bits:#x}");
        }
    }

    #[test]
    fn rejects_lying_caplen() {
        let mut b = RECORD_BYTES;
        b[11] = 200;
        assert_eq!(
            Records::new(&b).next(),
            Some(Err(RecordError::ShortData {
                caplen: 200,
                have: 8
            }))
        );
        let mut b = RECORD_BYTES;
        b[15] = 2;
        assert_eq!(
            Records::new(&b).next(),
            Some(Err(RecordError::CaplenExceedsLen { caplen: 4, len: 2 }))
        );
        assert_eq!(
            Records::new(&b[..7]).next(),
            Some(Err(RecordError::ShortControl { have: 7 }))
        );
    }

    proptest! {
        #[test]
        fn parse_emit_round_trip(
            recs in proptest::collection::vec(
                (any::<u64>(), any::<u16>(), any::<u16>(), proptest::collection::vec(any::<u8>(), 0..300)),
                0..20)
        ) {
            let mut out = Vec::new();
            for (t, f, ck, data) in &recs {
                let flags = Flags(*f & !Flags::LEN32);
                let ctl = ControlField::new(*t, flags, 0, *ck, data.len() as u32 + 7);
                push_record(&mut out, ctl, data);
                prop_assert_eq!(out.len() % RECORD_ALIGN, 0);
            }
            let back: Vec<_> = Records::new(&out).map(|r| r.unwrap()).collect();
            prop_assert_eq!(back.len(), recs.len());
            for ((ctl, data), (t, f, ck, orig)) in back.iter().zip(&recs) {
                prop_assert_eq!(ctl.rxtime, *t);
                prop_assert_eq!(ctl.flags, Flags(*f & !Flags::LEN32));
                prop_assert_eq!(ctl.cksum, *ck);
                prop_assert_eq!(ctl.orig_len(), orig.len() as u32 + 7);
                prop_assert_eq!(*data, orig.as_slice());
            }
        }

        #[test]
        fn never_panics_on_garbage(buf in proptest::collection::vec(any::<u8>(), 0..200)) {
            for r in Records::new(&buf) { let _ = r; }
        }
    }
}
