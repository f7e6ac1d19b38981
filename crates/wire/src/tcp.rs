//! TCP segments (RFC 9293).
//!
//! ```text
//! +-------------------------------+-------------------------------+
//! |          Source Port          |       Destination Port        |
//! |                        Sequence Number                        |
//! |                    Acknowledgment Number                      |
//! |  Data |       |C|E|U|A|P|R|S|F|                               |
//! | Offset| Rsrvd |W|C|R|C|S|S|Y|I|            Window             |
//! |           Checksum            |         Urgent Pointer        |
//! +-------------------------------+-------------------------------+
//! ```

use core::fmt;

use crate::bytes::{read_u16, read_u32, write_u16, write_u32};

/// Why a buffer is not a usable TCP header.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum Error {
    /// Fewer than 20 bytes.
    #[error("TCP header truncated")]
    Truncated,
    /// Data offset below 5 words.
    #[error("TCP data offset {0} is below 20 bytes")]
    BadDataOffset(u8),
}

mod field {
    use core::ops::Range;
    pub const SRC_PORT: Range<usize> = 0..2;
    pub const DST_PORT: Range<usize> = 2..4;
    pub const SEQ_NUM: Range<usize> = 4..8;
    pub const ACK_NUM: Range<usize> = 8..12;
    pub const DATA_OFF: usize = 12;
    pub const FLAGS: usize = 13;
    pub const WIN_SIZE: Range<usize> = 14..16;
    pub const CHECKSUM: Range<usize> = 16..18;
    pub const URGENT: Range<usize> = 18..20;
}

/// Length of a TCP header without options.
pub const HEADER_LEN: usize = field::URGENT.end;

/// Byte offset of the source port within the header.
pub const SRC_PORT_OFFSET: usize = field::SRC_PORT.start;

/// Byte offset of the checksum within the header.
pub const CHECKSUM_OFFSET: usize = field::CHECKSUM.start;

/// The eight TCP control bits of byte 13.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct TcpFlags(pub u8);

impl TcpFlags {
    /// No more data from sender.
    pub const FIN: u8 = 0x01;
    /// Synchronize sequence numbers.
    pub const SYN: u8 = 0x02;
    /// Reset the connection.
    pub const RST: u8 = 0x04;
    /// Push function.
    pub const PSH: u8 = 0x08;
    /// Acknowledgment field is significant.
    pub const ACK: u8 = 0x10;
    /// Urgent pointer field is significant.
    pub const URG: u8 = 0x20;
    /// ECN echo (RFC 3168).
    pub const ECE: u8 = 0x40;
    /// Congestion window reduced (RFC 3168).
    pub const CWR: u8 = 0x80;

    /// Whether every bit of `bits` is set.
    #[inline]
    pub const fn contains(self, bits: u8) -> bool {
        self.0 & bits == bits
    }
}

impl fmt::Display for TcpFlags {
    /// tcpdump's notation: `[S.]`, `[P.]`, `[none]`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // print-tcp.c tcp_flag_values order.
        const TOKENS: [(u8, char); 8] = [
            (TcpFlags::FIN, 'F'),
            (TcpFlags::SYN, 'S'),
            (TcpFlags::RST, 'R'),
            (TcpFlags::PSH, 'P'),
            (TcpFlags::ACK, '.'),
            (TcpFlags::URG, 'U'),
            (TcpFlags::ECE, 'E'),
            (TcpFlags::CWR, 'W'),
        ];
        f.write_str("[")?;
        if self.0 == 0 {
            f.write_str("none")?;
        }
        for (bit, c) in TOKENS {
            if self.0 & bit != 0 {
                fmt::Write::write_char(f, c)?;
            }
        }
        f.write_str("]")
    }
}

/// A view of a TCP segment.
#[derive(Debug, Clone, Copy)]
pub struct Packet<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> Packet<T> {
    /// Wraps a buffer without checks; getters may panic if it is short.
    #[inline]
    pub const fn new_unchecked(buffer: T) -> Packet<T> {
        Packet { buffer }
    }

    /// Wraps a buffer after [`check_len`](Self::check_len).
    #[inline]
    pub fn new_checked(buffer: T) -> Result<Packet<T>, Error> {
        let p = Packet::new_unchecked(buffer);
        p.check_len()?;
        Ok(p)
    }

    /// Checks that the fixed 20 bytes are present and the data offset is at least 5.
    ///
    /// Options may be cut off by the capture: [`options`](Self::options) and
    /// [`payload`](Self::payload) return what was captured. After this no getter panics.
    #[inline]
    pub fn check_len(&self) -> Result<(), Error> {
        let b = self.buffer.as_ref();
        if b.len() < HEADER_LEN {
            return Err(Error::Truncated);
        }
        let off = b[field::DATA_OFF] >> 4;
        if off < 5 {
            Err(Error::BadDataOffset(off * 4))
        } else {
            Ok(())
        }
    }

    /// Returns the underlying buffer.
    #[inline]
    pub fn into_inner(self) -> T {
        self.buffer
    }

    /// The source port.
    #[inline]
    pub fn src_port(&self) -> u16 {
        read_u16(&self.buffer.as_ref()[field::SRC_PORT])
    }

    /// The destination port.
    #[inline]
    pub fn dst_port(&self) -> u16 {
        read_u16(&self.buffer.as_ref()[field::DST_PORT])
    }

    /// The sequence number.
    #[inline]
    pub fn seq_number(&self) -> u32 {
        read_u32(&self.buffer.as_ref()[field::SEQ_NUM])
    }

    /// The acknowledgment number.
    #[inline]
    pub fn ack_number(&self) -> u32 {
        read_u32(&self.buffer.as_ref()[field::ACK_NUM])
    }

    /// The header length in bytes (data offset × 4).
    #[inline]
    pub fn header_len(&self) -> usize {
        usize::from(self.buffer.as_ref()[field::DATA_OFF] >> 4) * 4
    }

    /// The control bits.
    #[inline]
    pub fn flags(&self) -> TcpFlags {
        TcpFlags(self.buffer.as_ref()[field::FLAGS])
    }

    /// Whether the header carries options (data offset above 5).
    #[inline]
    pub fn has_options(&self) -> bool {
        self.header_len() > HEADER_LEN
    }

    /// The window field (unscaled).
    #[inline]
    pub fn window_len(&self) -> u16 {
        read_u16(&self.buffer.as_ref()[field::WIN_SIZE])
    }

    /// The checksum field.
    #[inline]
    pub fn checksum(&self) -> u16 {
        read_u16(&self.buffer.as_ref()[field::CHECKSUM])
    }

    /// The urgent pointer.
    #[inline]
    pub fn urgent_at(&self) -> u16 {
        read_u16(&self.buffer.as_ref()[field::URGENT])
    }

    /// The captured option bytes (may be fewer than the data offset claims).
    #[inline]
    pub fn options(&self) -> &[u8] {
        let b = self.buffer.as_ref();
        &b[HEADER_LEN..self.header_len().min(b.len())]
    }

    /// The captured bytes after the header (empty if the header itself is cut).
    #[inline]
    pub fn payload(&self) -> &[u8] {
        let b = self.buffer.as_ref();
        &b[self.header_len().min(b.len())..]
    }
}

impl<'a> Packet<&'a [u8]> {
    /// The captured payload with the buffer's lifetime (see [`payload`](Self::payload)).
    #[inline]
    pub fn into_payload(self) -> &'a [u8] {
        let start = self.header_len().min(self.buffer.len());
        &self.buffer[start..]
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Packet<T> {
    /// Sets the source port.
    #[inline]
    pub fn set_src_port(&mut self, v: u16) {
        write_u16(&mut self.buffer.as_mut()[field::SRC_PORT], v);
    }

    /// Sets the destination port.
    #[inline]
    pub fn set_dst_port(&mut self, v: u16) {
        write_u16(&mut self.buffer.as_mut()[field::DST_PORT], v);
    }

    /// Sets the sequence number.
    #[inline]
    pub fn set_seq_number(&mut self, v: u32) {
        write_u32(&mut self.buffer.as_mut()[field::SEQ_NUM], v);
    }

    /// Sets the acknowledgment number.
    #[inline]
    pub fn set_ack_number(&mut self, v: u32) {
        write_u32(&mut self.buffer.as_mut()[field::ACK_NUM], v);
    }

    /// Sets the header length in bytes (a multiple of 4, 20..=60); clears the reserved bits.
    #[inline]
    pub fn set_header_len(&mut self, len: usize) {
        self.buffer.as_mut()[field::DATA_OFF] = ((len / 4) as u8) << 4;
    }

    /// Sets the control bits.
    #[inline]
    pub fn set_flags(&mut self, f: TcpFlags) {
        self.buffer.as_mut()[field::FLAGS] = f.0;
    }

    /// Sets the window.
    #[inline]
    pub fn set_window_len(&mut self, v: u16) {
        write_u16(&mut self.buffer.as_mut()[field::WIN_SIZE], v);
    }

    /// Sets the checksum field.
    #[inline]
    pub fn set_checksum(&mut self, v: u16) {
        write_u16(&mut self.buffer.as_mut()[field::CHECKSUM], v);
    }

    /// Sets the urgent pointer.
    #[inline]
    pub fn set_urgent_at(&mut self, v: u16) {
        write_u16(&mut self.buffer.as_mut()[field::URGENT], v);
    }

    /// The captured bytes after the header, mutably.
    #[inline]
    pub fn payload_mut(&mut self) -> &mut [u8] {
        let start = self.header_len().min(self.buffer.as_ref().len());
        &mut self.buffer.as_mut()[start..]
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{checksum, ipv4};
    use proptest::prelude::*;

    // A real TCP SYN (zeek testing/btest/Traces/tcp/options.pcap, frame 1):
    // 192.168.1.102:36861 -> 193.1.193.64:80, MSS 1460, SACK-permitted, timestamps, WS 3.
    static FRAME_BYTES: [u8; 74] = [
        0x00, 0x19, 0xe3, 0xe7, 0x5d, 0x23, 0x00, 0x0b, 0xdb, 0x63, 0x58, 0xa6, 0x08, 0x00, 0x45,
        0x00, 0x00, 0x3c, 0xa9, 0x12, 0x40, 0x00, 0x40, 0x06, 0x4d, 0x59, 0xc0, 0xa8, 0x01, 0x66,
        0xc1, 0x01, 0xc1, 0x40, 0x8f, 0xfd, 0x00, 0x50, 0xdf, 0x91, 0xfd, 0xfb, 0x00, 0x00, 0x00,
        0x00, 0xa0, 0x02, 0x16, 0xd0, 0x2a, 0x1c, 0x00, 0x00, 0x02, 0x04, 0x05, 0xb4, 0x04, 0x02,
        0x08, 0x0a, 0xff, 0xff, 0x54, 0xe9, 0x00, 0x00, 0x00, 0x00, 0x01, 0x03, 0x03, 0x06,
    ];
    const TCP: core::ops::RangeFrom<usize> = 34..;

    #[test]
    fn deconstruct() {
        let p = Packet::new_checked(&FRAME_BYTES[TCP]).unwrap();
        assert_eq!(p.src_port(), 36861);
        assert_eq!(p.dst_port(), 80);
        assert_eq!(p.seq_number(), 0xdf91_fdfb);
        assert_eq!(p.ack_number(), 0);
        assert_eq!(p.header_len(), 40);
        assert!(p.has_options());
        assert_eq!(p.flags(), TcpFlags(TcpFlags::SYN));
        assert_eq!(p.flags().to_string(), "[S]");
        assert_eq!(p.window_len(), 5840);
        assert_eq!(p.checksum(), 0x2a1c);
        assert_eq!(p.options()[..4], [0x02, 0x04, 0x05, 0xb4]);
        assert!(p.payload().is_empty());
        // The checksum verifies over the pseudo-header.
        let ip = ipv4::Packet::new_checked(&FRAME_BYTES[14..]).unwrap();
        let ph = checksum::pseudo_header_v4(ip.src_addr(), ip.dst_addr(), 6, 40);
        assert!(checksum::is_valid(checksum::combine(
            ph,
            checksum::sum(&FRAME_BYTES[TCP])
        )));
    }

    #[test]
    fn construct() {
        let mut b = FRAME_BYTES;
        b[TCP][..HEADER_LEN].fill(0);
        let mut p = Packet::new_unchecked(&mut b[TCP]);
        p.set_src_port(36861);
        p.set_dst_port(80);
        p.set_seq_number(0xdf91_fdfb);
        p.set_ack_number(0);
        p.set_header_len(40);
        p.set_flags(TcpFlags(TcpFlags::SYN));
        p.set_window_len(5840);
        p.set_checksum(0x2a1c);
        p.set_urgent_at(0);
        assert!(p.payload_mut().is_empty());
        assert_eq!(b, FRAME_BYTES);
    }

    #[test]
    fn truncated_options_and_bad_offset() {
        let p = Packet::new_checked(&FRAME_BYTES[34..60]).unwrap();
        assert_eq!(p.options().len(), 6);
        assert!(p.payload().is_empty());
        assert_eq!(
            Packet::new_checked(&FRAME_BYTES[34..53]).err(),
            Some(Error::Truncated)
        );
        let mut b = FRAME_BYTES;
        b[46] = 0x40;
        assert_eq!(
            Packet::new_checked(&b[TCP]).err(),
            Some(Error::BadDataOffset(16))
        );
    }

    #[test]
    fn flags_display_like_tcpdump() {
        let f = |b| TcpFlags(b).to_string();
        assert_eq!(f(TcpFlags::SYN | TcpFlags::ACK), "[S.]");
        assert_eq!(f(TcpFlags::PSH | TcpFlags::ACK), "[P.]");
        assert_eq!(f(TcpFlags::FIN | TcpFlags::ACK), "[F.]");
        assert_eq!(f(TcpFlags::ACK), "[.]");
        assert_eq!(f(TcpFlags::RST), "[R]");
        assert_eq!(f(TcpFlags::SYN | TcpFlags::ECE | TcpFlags::CWR), "[SEW]");
        assert_eq!(f(0), "[none]");
    }

    proptest! {
        #[test]
        fn never_panics(buf in proptest::collection::vec(any::<u8>(), 0..80)) {
            if let Ok(p) = Packet::new_checked(&buf[..]) {
                let _ = (p.src_port(), p.dst_port(), p.seq_number(), p.ack_number(), p.flags());
                let _ = (p.options().len(), p.payload().len(), p.urgent_at(), p.window_len());
            }
        }
    }
}
