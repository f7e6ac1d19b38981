//! UDP datagrams (RFC 768).
//!
//! ```text
//! +----------------+----------------+
//! |  Source Port   |   Dest Port    |
//! |     Length     |    Checksum    |
//! +----------------+----------------+
//! ```

use crate::bytes::{read_u16, write_u16};

/// The buffer is shorter than the 8-byte UDP header.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("UDP header truncated: shorter than 8 bytes")]
pub struct Truncated;

mod field {
    use core::ops::Range;
    pub const SRC_PORT: Range<usize> = 0..2;
    pub const DST_PORT: Range<usize> = 2..4;
    pub const LENGTH: Range<usize> = 4..6;
    pub const CHECKSUM: Range<usize> = 6..8;
}

/// Length of the UDP header.
pub const HEADER_LEN: usize = field::CHECKSUM.end;

/// Byte offset of the source port within the header.
pub const SRC_PORT_OFFSET: usize = field::SRC_PORT.start;

/// Byte offset of the checksum within the header.
pub const CHECKSUM_OFFSET: usize = field::CHECKSUM.start;

/// A view of a UDP datagram.
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
    pub fn new_checked(buffer: T) -> Result<Packet<T>, Truncated> {
        let p = Packet::new_unchecked(buffer);
        p.check_len()?;
        Ok(p)
    }

    /// Checks that the 8 header bytes are present; after this no getter panics.
    #[inline]
    pub fn check_len(&self) -> Result<(), Truncated> {
        if self.buffer.as_ref().len() < HEADER_LEN {
            Err(Truncated)
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

    /// The length field (header + data).
    #[inline]
    pub fn len(&self) -> u16 {
        read_u16(&self.buffer.as_ref()[field::LENGTH])
    }

    /// Whether the length field claims no data.
    #[inline]
    pub fn is_empty(&self) -> bool {
        self.len() <= HEADER_LEN as u16
    }

    /// The checksum field (0: none was computed).
    #[inline]
    pub fn checksum(&self) -> u16 {
        read_u16(&self.buffer.as_ref()[field::CHECKSUM])
    }

    /// The captured data: up to the length field or the end of the buffer.
    ///
    /// A length below 8 (0 for IPv6 jumbograms) means the end of the buffer.
    #[inline]
    pub fn payload(&self) -> &[u8] {
        let b = self.buffer.as_ref();
        &b[HEADER_LEN..self.payload_end(b.len())]
    }

    #[inline]
    fn payload_end(&self, buf_len: usize) -> usize {
        match usize::from(self.len()) {
            n if n < HEADER_LEN => buf_len,
            n => n.min(buf_len),
        }
    }
}

impl<'a> Packet<&'a [u8]> {
    /// The captured data with the buffer's lifetime (see [`payload`](Self::payload)).
    #[inline]
    pub fn into_payload(self) -> &'a [u8] {
        let end = self.payload_end(self.buffer.len());
        &self.buffer[HEADER_LEN..end]
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

    /// Sets the length field.
    #[inline]
    pub fn set_len(&mut self, v: u16) {
        write_u16(&mut self.buffer.as_mut()[field::LENGTH], v);
    }

    /// Sets the checksum field.
    #[inline]
    pub fn set_checksum(&mut self, v: u16) {
        write_u16(&mut self.buffer.as_mut()[field::CHECKSUM], v);
    }

    /// The captured data, mutably (see [`payload`](Self::payload)).
    #[inline]
    pub fn payload_mut(&mut self) -> &mut [u8] {
        let end = self.payload_end(self.buffer.as_ref().len());
        &mut self.buffer.as_mut()[HEADER_LEN..end]
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    // UDP 5353 -> 53, length 12, checksum 0x1234, 4 data bytes, then 2 bytes of link padding.
    static PACKET_BYTES: [u8; 14] = [
        0x14, 0xe9, 0x00, 0x35, 0x00, 0x0c, 0x12, 0x34, 0x01, 0x02, 0x03, 0x04, 0x00, 0x00,
    ];

    #[test]
    fn deconstruct() {
        let p = Packet::new_checked(&PACKET_BYTES[..]).unwrap();
        assert_eq!(
            (p.src_port(), p.dst_port(), p.len(), p.checksum()),
            (5353, 53, 12, 0x1234)
        );
        assert_eq!(p.payload(), &[1, 2, 3, 4]);
        assert!(!p.is_empty());
        assert_eq!(
            Packet::new_checked(&PACKET_BYTES[..7]).err(),
            Some(Truncated)
        );
        assert_eq!(
            Packet::new_checked(&PACKET_BYTES[..10]).unwrap().payload(),
            &[1, 2]
        );
    }

    #[test]
    fn construct() {
        let mut b = [0u8; 14];
        let mut p = Packet::new_unchecked(&mut b[..]);
        p.set_src_port(5353);
        p.set_dst_port(53);
        p.set_len(12);
        p.set_checksum(0x1234);
        p.payload_mut().copy_from_slice(&[1, 2, 3, 4]);
        assert_eq!(b, PACKET_BYTES);
    }

    proptest! {
        #[test]
        fn never_panics(buf in proptest::collection::vec(any::<u8>(), 0..40)) {
            if let Ok(p) = Packet::new_checked(&buf[..]) {
                let _ = (p.src_port(), p.dst_port(), p.len(), p.checksum(), p.payload().len());
            }
        }
    }
}
