//! IPv6 packets (RFC 8200) and the extension-header chain.
//!
//! ```text
//! +-------+---------------+---------------------------------------+
//! |Version| Traffic Class |              Flow Label               |
//! |        Payload Length         |  Next Header  |   Hop Limit   |
//! |                    Source Address (16 bytes)                  |
//! |                 Destination Address (16 bytes)                |
//! +---------------------------------------------------------------+
//! ```

use crate::bytes::{read_u16, read_u32, write_u16, write_u32};
pub use crate::ipv4::IpProtocol;
use core::net::Ipv6Addr;

/// Why a buffer is not a usable IPv6 header.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum Error {
    /// Fewer than 40 bytes.
    #[error("IPv6 header truncated")]
    Truncated,
    /// The version nibble is not 6.
    #[error("IPv6 header has version {0}")]
    BadVersion(u8),
}

mod field {
    use core::ops::Range;
    pub const VER_TC_FLOW: Range<usize> = 0..4;
    pub const LENGTH: Range<usize> = 4..6;
    pub const NXT_HDR: usize = 6;
    pub const HOP_LIMIT: usize = 7;
    pub const SRC_ADDR: Range<usize> = 8..24;
    pub const DST_ADDR: Range<usize> = 24..40;
}

/// Length of the fixed IPv6 header.
pub const HEADER_LEN: usize = field::DST_ADDR.end;

/// Extension headers [`Packet::upper_layer`] follows before giving up.
pub const MAX_EXT_HEADERS: usize = 8;

/// The contents of an IPv6 fragment header.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Fragment {
    /// Offset of this fragment's data in bytes.
    pub offset: u16,
    /// The M (more fragments) flag.
    pub more: bool,
    /// The identification.
    pub ident: u32,
}

impl Fragment {
    /// Whether this is the first fragment (the only one carrying the upper-layer header).
    #[inline]
    pub const fn is_first(&self) -> bool {
        self.offset == 0
    }
}

/// A view of an IPv6 packet.
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

    /// Checks version 6 and that the 40-byte header is present; after this no getter panics.
    #[inline]
    pub fn check_len(&self) -> Result<(), Error> {
        let b = self.buffer.as_ref();
        let Some(&v) = b.first() else {
            return Err(Error::Truncated);
        };
        if v >> 4 != 6 {
            return Err(Error::BadVersion(v >> 4));
        }
        if b.len() < HEADER_LEN {
            Err(Error::Truncated)
        } else {
            Ok(())
        }
    }

    /// Returns the underlying buffer.
    #[inline]
    pub fn into_inner(self) -> T {
        self.buffer
    }

    #[inline]
    fn word0(&self) -> u32 {
        read_u32(&self.buffer.as_ref()[field::VER_TC_FLOW])
    }

    /// The version nibble.
    #[inline]
    pub fn version(&self) -> u8 {
        (self.word0() >> 28) as u8
    }

    /// The traffic class (DSCP << 2 | ECN).
    #[inline]
    pub fn traffic_class(&self) -> u8 {
        (self.word0() >> 20) as u8
    }

    /// The 20-bit flow label.
    #[inline]
    pub fn flow_label(&self) -> u32 {
        self.word0() & 0x000f_ffff
    }

    /// The payload length field (0 for jumbograms).
    #[inline]
    pub fn payload_len(&self) -> u16 {
        read_u16(&self.buffer.as_ref()[field::LENGTH])
    }

    /// The first next-header value.
    #[inline]
    pub fn next_header(&self) -> IpProtocol {
        IpProtocol::from_u8(self.buffer.as_ref()[field::NXT_HDR])
    }

    /// The hop limit.
    #[inline]
    pub fn hop_limit(&self) -> u8 {
        self.buffer.as_ref()[field::HOP_LIMIT]
    }

    /// The source address.
    #[inline]
    pub fn src_addr(&self) -> Ipv6Addr {
        let mut a = [0u8; 16];
        a.copy_from_slice(&self.buffer.as_ref()[field::SRC_ADDR]);
        Ipv6Addr::from(a)
    }

    /// The destination address.
    #[inline]
    pub fn dst_addr(&self) -> Ipv6Addr {
        let mut a = [0u8; 16];
        a.copy_from_slice(&self.buffer.as_ref()[field::DST_ADDR]);
        Ipv6Addr::from(a)
    }

    /// The captured payload (extension headers included): up to `payload_len` or the end of the
    /// buffer; a `payload_len` of 0 (jumbogram) means the end of the buffer.
    #[inline]
    pub fn payload(&self) -> &[u8] {
        let b = self.buffer.as_ref();
        &b[HEADER_LEN..self.payload_end(b.len())]
    }

    #[inline]
    fn payload_end(&self, buf_len: usize) -> usize {
        match self.payload_len() {
            0 => buf_len,
            n => (HEADER_LEN + usize::from(n)).min(buf_len),
        }
    }

    /// Walks the extension headers to the upper-layer protocol.
    ///
    /// Returns the protocol, the offset of its header from the start of this packet and the
    /// fragment header if one was crossed. Follows hop-by-hop, routing, fragment, destination
    /// options, AH and mobility headers; stops at anything else (ESP and no-next-header
    /// included) and after a fragment header with a non-zero offset (the rest is not a header).
    /// `None` if an extension header is cut short or more than [`MAX_EXT_HEADERS`] are chained.
    /// The offset is at most the buffer length.
    pub fn upper_layer(&self) -> Option<(IpProtocol, usize, Option<Fragment>)> {
        let b = self.buffer.as_ref();
        let mut next = b[field::NXT_HDR];
        let mut off = HEADER_LEN;
        let mut frag = None;
        for _ in 0..=MAX_EXT_HEADERS {
            let len = match next {
                0 | 43 | 60 | 135 => (usize::from(*b.get(off + 1)?) + 1) * 8,
                51 => (usize::from(*b.get(off + 1)?) + 2) * 4,
                44 => {
                    let h = b.get(off..off + 8)?;
                    let f = Fragment {
                        offset: read_u16(&h[2..]) & !0b111,
                        more: h[3] & 1 != 0,
                        ident: read_u32(&h[4..]),
                    };
                    frag = Some(f);
                    if !f.is_first() {
                        return Some((IpProtocol::from_u8(h[0]), off + 8, frag));
                    }
                    8
                }
                _ => return Some((IpProtocol::from_u8(next), off, frag)),
            };
            if off + len > b.len() {
                return None;
            }
            next = b[off];
            off += len;
        }
        None
    }
}

impl<'a> Packet<&'a [u8]> {
    /// The captured payload with the buffer's lifetime (see [`payload`](Self::payload)).
    #[inline]
    pub fn into_payload(self) -> &'a [u8] {
        let end = self.payload_end(self.buffer.len());
        &self.buffer[HEADER_LEN..end]
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Packet<T> {
    /// Sets version 6, the traffic class and the flow label.
    #[inline]
    pub fn set_version_tc_flow(&mut self, traffic_class: u8, flow_label: u32) {
        let w = (6u32 << 28) | (u32::from(traffic_class) << 20) | (flow_label & 0x000f_ffff);
        write_u32(&mut self.buffer.as_mut()[field::VER_TC_FLOW], w);
    }

    /// Sets the payload length.
    #[inline]
    pub fn set_payload_len(&mut self, v: u16) {
        write_u16(&mut self.buffer.as_mut()[field::LENGTH], v);
    }

    /// Sets the next header.
    #[inline]
    pub fn set_next_header(&mut self, p: IpProtocol) {
        self.buffer.as_mut()[field::NXT_HDR] = p.to_u8();
    }

    /// Sets the hop limit.
    #[inline]
    pub fn set_hop_limit(&mut self, v: u8) {
        self.buffer.as_mut()[field::HOP_LIMIT] = v;
    }

    /// Sets the source address.
    #[inline]
    pub fn set_src_addr(&mut self, a: Ipv6Addr) {
        self.buffer.as_mut()[field::SRC_ADDR].copy_from_slice(&a.octets());
    }

    /// Sets the destination address.
    #[inline]
    pub fn set_dst_addr(&mut self, a: Ipv6Addr) {
        self.buffer.as_mut()[field::DST_ADDR].copy_from_slice(&a.octets());
    }

    /// The captured payload, mutably (see [`payload`](Self::payload)).
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

    // IPv6 UDP packet 2001:db8::1 -> 2001:db8::2 with hop-by-hop (router alert), destination
    // options (PadN) and a first-fragment header (ident 0xdeadbeef, M set), then UDP 5353 -> 53
    // with 4 bytes of data, then 4 bytes of Ethernet padding.
    static PACKET_BYTES: [u8; 80] = [
        0x60, 0x00, 0x00, 0x00, 0x00, 0x24, 0x00, 0x40, // ver, len 36, next HBH, hlim 64
        0x20, 0x01, 0x0d, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x01, //
        0x20, 0x01, 0x0d, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x02, //
        0x3c, 0x00, 0x05, 0x02, 0x00, 0x00, 0x01,
        0x00, // HBH -> dest opts: router alert, Pad1...
        0x2c, 0x00, 0x01, 0x04, 0x00, 0x00, 0x00, 0x00, // dest opts -> frag: PadN(4)
        0x11, 0x00, 0x00, 0x01, 0xde, 0xad, 0xbe, 0xef, // frag -> UDP: offset 0, M
        0x14, 0xe9, 0x00, 0x35, 0x00, 0x0c, 0x00, 0x00, // UDP 5353 -> 53, len 12, no checksum
        0x01, 0x02, 0x03, 0x04, 0xaa, 0xbb, 0xcc, 0xdd, // data, then 4 captured trailer bytes
    ];

    #[test]
    fn deconstruct() {
        let p = Packet::new_checked(&PACKET_BYTES[..]).unwrap();
        assert_eq!(p.version(), 6);
        assert_eq!(p.traffic_class(), 0);
        assert_eq!(p.flow_label(), 0);
        assert_eq!(p.payload_len(), 36);
        assert_eq!(p.next_header(), IpProtocol::HopByHop);
        assert_eq!(p.hop_limit(), 64);
        assert_eq!(p.src_addr(), "2001:db8::1".parse::<Ipv6Addr>().unwrap());
        assert_eq!(p.dst_addr(), "2001:db8::2".parse::<Ipv6Addr>().unwrap());
        assert_eq!(p.payload().len(), 36);
        let frag = Fragment {
            offset: 0,
            more: true,
            ident: 0xdead_beef,
        };
        assert_eq!(p.upper_layer(), Some((IpProtocol::Udp, 64, Some(frag))));
    }

    #[test]
    fn construct() {
        let mut b = PACKET_BYTES;
        b[..HEADER_LEN].fill(0);
        let mut p = Packet::new_unchecked(&mut b[..]);
        p.set_version_tc_flow(0, 0);
        p.set_payload_len(36);
        p.set_next_header(IpProtocol::HopByHop);
        p.set_hop_limit(64);
        p.set_src_addr("2001:db8::1".parse().unwrap());
        p.set_dst_addr("2001:db8::2".parse().unwrap());
        assert_eq!(p.payload_mut().len(), 36);
        assert_eq!(b, PACKET_BYTES);
    }

    #[test]
    fn upper_layer_edge_cases() {
        // Cut inside the fragment header: unknown.
        assert_eq!(
            Packet::new_checked(&PACKET_BYTES[..60])
                .unwrap()
                .upper_layer(),
            None
        );
        // Cut right after the chain: known, offset = buffer length.
        let p = Packet::new_checked(&PACKET_BYTES[..64]).unwrap();
        assert_eq!(
            p.upper_layer().map(|u| (u.0, u.1)),
            Some((IpProtocol::Udp, 64))
        );
        // A later fragment stops the walk.
        let mut b = PACKET_BYTES;
        b[58] = 0x05;
        b[59] = 0xa8;
        let p = Packet::new_checked(&b[..]).unwrap();
        let f = Fragment {
            offset: 0x5a8,
            more: false,
            ident: 0xdead_beef,
        };
        assert_eq!(p.upper_layer(), Some((IpProtocol::Udp, 64, Some(f))));
        // ESP ends the walk.
        let mut b = PACKET_BYTES;
        b[6] = 50;
        let p = Packet::new_checked(&b[..]).unwrap();
        assert_eq!(p.upper_layer(), Some((IpProtocol::Esp, 40, None)));
        // AH counts 4-byte units: length 1 means 12 bytes.
        let mut b = [0u8; 60];
        b[0] = 0x60;
        b[6] = 51;
        b[40] = 6;
        b[41] = 1;
        let p = Packet::new_checked(&b[..]).unwrap();
        assert_eq!(p.upper_layer(), Some((IpProtocol::Tcp, 52, None)));
        // A loop of hop-by-hop headers is cut off.
        let mut b = [0u8; 40 + 8 * 20];
        b[0] = 0x60;
        assert_eq!(Packet::new_checked(&b[..]).unwrap().upper_layer(), None);
        // Truncated or wrong version.
        assert_eq!(
            Packet::new_checked(&PACKET_BYTES[..39]).err(),
            Some(Error::Truncated)
        );
        assert_eq!(
            Packet::new_checked(&[0x45u8; 40][..]).err(),
            Some(Error::BadVersion(4))
        );
    }

    proptest! {
        #[test]
        fn never_panics(mut buf in proptest::collection::vec(any::<u8>(), 0..120), v6 in any::<bool>()) {
            if v6 && !buf.is_empty() {
                buf[0] = 0x60 | (buf[0] & 0xf);
            }
            if let Ok(p) = Packet::new_checked(&buf[..]) {
                let _ = (p.flow_label(), p.src_addr(), p.dst_addr(), p.payload().len());
                if let Some((_, off, _)) = p.upper_layer() {
                    prop_assert!(off <= buf.len());
                }
            }
        }
    }
}
