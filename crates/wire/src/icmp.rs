//! ICMPv4 (RFC 792) and ICMPv6 (RFC 4443) messages: the common type/code/checksum header.
//!
//! ```text
//! +-------+-------+---------------+-------------------------------+
//! | Type  | Code  |   Checksum    |  rest of header (e.g. id/seq) |
//! +-------+-------+---------------+-------------------------------+
//! ```

use crate::bytes::{read_u16, write_u16};

/// The buffer is shorter than the 4-byte ICMP header.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("ICMP header truncated: shorter than 4 bytes")]
pub struct Truncated;

mod field {
    use core::ops::{Range, RangeFrom};
    pub const TYPE: usize = 0;
    pub const CODE: usize = 1;
    pub const CHECKSUM: Range<usize> = 2..4;
    pub const ECHO_IDENT: Range<usize> = 4..6;
    pub const ECHO_SEQNO: Range<usize> = 6..8;
    pub const REST: RangeFrom<usize> = 4..;
}

/// Length of the common ICMP header (type, code, checksum).
pub const HEADER_LEN: usize = field::CHECKSUM.end;

/// ICMPv4 type numbers tapflow names.
pub mod v4 {
    /// Echo reply.
    pub const ECHO_REPLY: u8 = 0;
    /// Destination unreachable.
    pub const DST_UNREACHABLE: u8 = 3;
    /// Redirect.
    pub const REDIRECT: u8 = 5;
    /// Echo request.
    pub const ECHO_REQUEST: u8 = 8;
    /// Time exceeded.
    pub const TIME_EXCEEDED: u8 = 11;
}

/// ICMPv6 type numbers tapflow names.
pub mod v6 {
    /// Destination unreachable.
    pub const DST_UNREACHABLE: u8 = 1;
    /// Packet too big.
    pub const PKT_TOO_BIG: u8 = 2;
    /// Time exceeded.
    pub const TIME_EXCEEDED: u8 = 3;
    /// Echo request.
    pub const ECHO_REQUEST: u8 = 128;
    /// Echo reply.
    pub const ECHO_REPLY: u8 = 129;
    /// Neighbor solicitation.
    pub const NEIGHBOR_SOLICIT: u8 = 135;
    /// Neighbor advertisement.
    pub const NEIGHBOR_ADVERT: u8 = 136;
}

/// A view of an ICMPv4 or ICMPv6 message.
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

    /// Checks that the 4 header bytes are present; after this no getter panics.
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

    /// The message type.
    #[inline]
    pub fn msg_type(&self) -> u8 {
        self.buffer.as_ref()[field::TYPE]
    }

    /// The message code.
    #[inline]
    pub fn msg_code(&self) -> u8 {
        self.buffer.as_ref()[field::CODE]
    }

    /// The checksum field.
    #[inline]
    pub fn checksum(&self) -> u16 {
        read_u16(&self.buffer.as_ref()[field::CHECKSUM])
    }

    /// Echo identifier (meaningful for echo messages), if captured.
    #[inline]
    pub fn echo_ident(&self) -> Option<u16> {
        self.buffer.as_ref().get(field::ECHO_IDENT).map(read_u16)
    }

    /// Echo sequence number (meaningful for echo messages), if captured.
    #[inline]
    pub fn echo_seq_no(&self) -> Option<u16> {
        self.buffer.as_ref().get(field::ECHO_SEQNO).map(read_u16)
    }

    /// The captured bytes after type, code and checksum.
    #[inline]
    pub fn rest(&self) -> &[u8] {
        &self.buffer.as_ref()[field::REST]
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Packet<T> {
    /// Sets the message type.
    #[inline]
    pub fn set_msg_type(&mut self, v: u8) {
        self.buffer.as_mut()[field::TYPE] = v;
    }

    /// Sets the message code.
    #[inline]
    pub fn set_msg_code(&mut self, v: u8) {
        self.buffer.as_mut()[field::CODE] = v;
    }

    /// Sets the checksum field.
    #[inline]
    pub fn set_checksum(&mut self, v: u16) {
        write_u16(&mut self.buffer.as_mut()[field::CHECKSUM], v);
    }

    /// The bytes after type, code and checksum, mutably.
    #[inline]
    pub fn rest_mut(&mut self) -> &mut [u8] {
        &mut self.buffer.as_mut()[field::REST]
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::checksum;
    use proptest::prelude::*;

    // ICMPv4 echo request, id 0x0001, seq 0x0007, 4 bytes of data "abcd".
    static PACKET_BYTES: [u8; 12] = [
        0x08, 0x00, 0x33, 0x31, 0x00, 0x01, 0x00, 0x07, 0x61, 0x62, 0x63, 0x64,
    ];

    #[test]
    fn deconstruct() {
        let p = Packet::new_checked(&PACKET_BYTES[..]).unwrap();
        assert_eq!((p.msg_type(), p.msg_code()), (v4::ECHO_REQUEST, 0));
        assert_eq!((p.echo_ident(), p.echo_seq_no()), (Some(1), Some(7)));
        assert_eq!(p.rest().len(), 8);
        assert!(checksum::is_valid(checksum::sum(&PACKET_BYTES)));
        let short = Packet::new_checked(&PACKET_BYTES[..5]).unwrap();
        assert_eq!(short.echo_ident(), None);
        assert_eq!(
            Packet::new_checked(&PACKET_BYTES[..3]).err(),
            Some(Truncated)
        );
    }

    #[test]
    fn construct() {
        let mut b = [0u8; 12];
        let mut p = Packet::new_unchecked(&mut b[..]);
        p.set_msg_type(v4::ECHO_REQUEST);
        p.set_msg_code(0);
        p.rest_mut().copy_from_slice(&PACKET_BYTES[4..]);
        let c = checksum::finish(checksum::sum(&b));
        Packet::new_unchecked(&mut b[..]).set_checksum(c);
        assert_eq!(b, PACKET_BYTES);
    }

    proptest! {
        #[test]
        fn never_panics(buf in proptest::collection::vec(any::<u8>(), 0..12)) {
            if let Ok(p) = Packet::new_checked(&buf[..]) {
                let _ = (p.msg_type(), p.msg_code(), p.checksum(), p.echo_ident(), p.rest().len());
            }
        }
    }
}
