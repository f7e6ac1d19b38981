//! IPv4 packets (RFC 791) and IP protocol numbers.
//!
//! ```text
//!  0                   1                   2                   3
//!  0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1
//! +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//! |Version|  IHL  |   DSCP/ECN    |          Total Length         |
//! |         Identification        |Flags|      Fragment Offset    |
//! |  Time to Live |    Protocol   |         Header Checksum       |
//! |                       Source Address                          |
//! |                    Destination Address                        |
//! +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//! ```

use crate::bytes::{read_u16, write_u16};
use crate::checksum;
use core::net::Ipv4Addr;

/// An IP protocol / IPv6 next-header number (IANA). Open enum: unknown values round-trip.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum IpProtocol {
    /// 0: IPv6 hop-by-hop options.
    HopByHop,
    /// 1.
    Icmp,
    /// 2.
    Igmp,
    /// 4: IPv4 encapsulation.
    IpIp,
    /// 6.
    Tcp,
    /// 17.
    Udp,
    /// 41: IPv6 encapsulation.
    Ipv6,
    /// 43: IPv6 routing header.
    Ipv6Route,
    /// 44: IPv6 fragment header.
    Ipv6Frag,
    /// 47.
    Gre,
    /// 50: encapsulating security payload.
    Esp,
    /// 51: authentication header.
    Ah,
    /// 58.
    Icmpv6,
    /// 59: no next header.
    Ipv6NoNxt,
    /// 60: IPv6 destination options.
    Ipv6Opts,
    /// 132.
    Sctp,
    /// 135: mobility header.
    Mobility,
    /// Any other value.
    Unknown(u8),
}

impl IpProtocol {
    /// The protocol for a number.
    #[inline]
    pub const fn from_u8(v: u8) -> IpProtocol {
        match v {
            0 => IpProtocol::HopByHop,
            1 => IpProtocol::Icmp,
            2 => IpProtocol::Igmp,
            4 => IpProtocol::IpIp,
            6 => IpProtocol::Tcp,
            17 => IpProtocol::Udp,
            41 => IpProtocol::Ipv6,
            43 => IpProtocol::Ipv6Route,
            44 => IpProtocol::Ipv6Frag,
            47 => IpProtocol::Gre,
            50 => IpProtocol::Esp,
            51 => IpProtocol::Ah,
            58 => IpProtocol::Icmpv6,
            59 => IpProtocol::Ipv6NoNxt,
            60 => IpProtocol::Ipv6Opts,
            132 => IpProtocol::Sctp,
            135 => IpProtocol::Mobility,
            v => IpProtocol::Unknown(v),
        }
    }

    /// The protocol's keyword in the IANA registry (and `/etc/protocols`), lower case: `tcp`,
    /// `udp`, `ipv6-icmp`; `None` for a number this type does not name.
    pub const fn keyword(self) -> Option<&'static str> {
        Some(match self {
            IpProtocol::HopByHop => "hopopt",
            IpProtocol::Icmp => "icmp",
            IpProtocol::Igmp => "igmp",
            IpProtocol::IpIp => "ipv4",
            IpProtocol::Tcp => "tcp",
            IpProtocol::Udp => "udp",
            IpProtocol::Ipv6 => "ipv6",
            IpProtocol::Ipv6Route => "ipv6-route",
            IpProtocol::Ipv6Frag => "ipv6-frag",
            IpProtocol::Gre => "gre",
            IpProtocol::Esp => "esp",
            IpProtocol::Ah => "ah",
            IpProtocol::Icmpv6 => "ipv6-icmp",
            IpProtocol::Ipv6NoNxt => "ipv6-nonxt",
            IpProtocol::Ipv6Opts => "ipv6-opts",
            IpProtocol::Sctp => "sctp",
            IpProtocol::Mobility => "mobility-header",
            IpProtocol::Unknown(_) => return None,
        })
    }

    /// The number.
    #[inline]
    pub const fn to_u8(self) -> u8 {
        match self {
            IpProtocol::HopByHop => 0,
            IpProtocol::Icmp => 1,
            IpProtocol::Igmp => 2,
            IpProtocol::IpIp => 4,
            IpProtocol::Tcp => 6,
            IpProtocol::Udp => 17,
            IpProtocol::Ipv6 => 41,
            IpProtocol::Ipv6Route => 43,
            IpProtocol::Ipv6Frag => 44,
            IpProtocol::Gre => 47,
            IpProtocol::Esp => 50,
            IpProtocol::Ah => 51,
            IpProtocol::Icmpv6 => 58,
            IpProtocol::Ipv6NoNxt => 59,
            IpProtocol::Ipv6Opts => 60,
            IpProtocol::Sctp => 132,
            IpProtocol::Mobility => 135,
            IpProtocol::Unknown(v) => v,
        }
    }
}

impl From<u8> for IpProtocol {
    fn from(v: u8) -> Self {
        IpProtocol::from_u8(v)
    }
}

impl From<IpProtocol> for u8 {
    fn from(p: IpProtocol) -> Self {
        p.to_u8()
    }
}

/// Why a buffer is not a usable IPv4 header.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum Error {
    /// Fewer than 20 bytes, or fewer than the IHL claims.
    #[error("IPv4 header truncated")]
    Truncated,
    /// The version nibble is not 4.
    #[error("IPv4 header has version {0}")]
    BadVersion(u8),
    /// IHL below 5.
    #[error("IPv4 header length {0} is below 20")]
    BadHeaderLen(u8),
}

mod field {
    use core::ops::Range;
    pub const VER_IHL: usize = 0;
    pub const DSCP_ECN: usize = 1;
    pub const LENGTH: Range<usize> = 2..4;
    pub const IDENT: Range<usize> = 4..6;
    pub const FLG_OFF: Range<usize> = 6..8;
    pub const TTL: usize = 8;
    pub const PROTOCOL: usize = 9;
    pub const CHECKSUM: Range<usize> = 10..12;
    pub const SRC_ADDR: Range<usize> = 12..16;
    pub const DST_ADDR: Range<usize> = 16..20;
}

/// Length of an IPv4 header without options.
pub const HEADER_LEN: usize = field::DST_ADDR.end;

const FLAG_DF: u16 = 0x4000;
pub(crate) const FLAG_MF: u16 = 0x2000;
pub(crate) const FRAG_MASK: u16 = 0x1fff;

/// A view of an IPv4 packet.
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

    /// Checks version 4, IHL ≥ 5 and that the whole header (options included) is present.
    ///
    /// The payload may be truncated; after this no getter panics.
    #[inline]
    pub fn check_len(&self) -> Result<(), Error> {
        let b = self.buffer.as_ref();
        let Some(&vi) = b.first() else {
            return Err(Error::Truncated);
        };
        if vi >> 4 != 4 {
            return Err(Error::BadVersion(vi >> 4));
        }
        if vi & 0xf < 5 {
            return Err(Error::BadHeaderLen((vi & 0xf) * 4));
        }
        if b.len() < usize::from(vi & 0xf) * 4 {
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

    /// The version nibble.
    #[inline]
    pub fn version(&self) -> u8 {
        self.buffer.as_ref()[field::VER_IHL] >> 4
    }

    /// The header length in bytes (IHL × 4).
    #[inline]
    pub fn header_len(&self) -> usize {
        usize::from(self.buffer.as_ref()[field::VER_IHL] & 0xf) * 4
    }

    /// The DSCP (upper 6 bits of the former TOS byte).
    #[inline]
    pub fn dscp(&self) -> u8 {
        self.buffer.as_ref()[field::DSCP_ECN] >> 2
    }

    /// The ECN bits.
    #[inline]
    pub fn ecn(&self) -> u8 {
        self.buffer.as_ref()[field::DSCP_ECN] & 0b11
    }

    /// The total length field (header + payload as sent; 0 on some TSO captures).
    #[inline]
    pub fn total_len(&self) -> u16 {
        read_u16(&self.buffer.as_ref()[field::LENGTH])
    }

    /// The identification field.
    #[inline]
    pub fn ident(&self) -> u16 {
        read_u16(&self.buffer.as_ref()[field::IDENT])
    }

    /// The don't-fragment flag.
    #[inline]
    pub fn dont_frag(&self) -> bool {
        read_u16(&self.buffer.as_ref()[field::FLG_OFF]) & FLAG_DF != 0
    }

    /// The more-fragments flag.
    #[inline]
    pub fn more_frags(&self) -> bool {
        read_u16(&self.buffer.as_ref()[field::FLG_OFF]) & FLAG_MF != 0
    }

    /// The fragment offset in bytes.
    #[inline]
    pub fn frag_offset(&self) -> u16 {
        (read_u16(&self.buffer.as_ref()[field::FLG_OFF]) & FRAG_MASK) << 3
    }

    /// Whether this is a fragment (MF set or a non-zero offset).
    #[inline]
    pub fn is_fragment(&self) -> bool {
        read_u16(&self.buffer.as_ref()[field::FLG_OFF]) & (FLAG_MF | FRAG_MASK) != 0
    }

    /// Time to live.
    #[inline]
    pub fn ttl(&self) -> u8 {
        self.buffer.as_ref()[field::TTL]
    }

    /// The payload's protocol.
    #[inline]
    pub fn protocol(&self) -> IpProtocol {
        IpProtocol::from_u8(self.buffer.as_ref()[field::PROTOCOL])
    }

    /// The header checksum field.
    #[inline]
    pub fn checksum(&self) -> u16 {
        read_u16(&self.buffer.as_ref()[field::CHECKSUM])
    }

    /// The source address.
    #[inline]
    pub fn src_addr(&self) -> Ipv4Addr {
        let b = &self.buffer.as_ref()[field::SRC_ADDR];
        Ipv4Addr::new(b[0], b[1], b[2], b[3])
    }

    /// The destination address.
    #[inline]
    pub fn dst_addr(&self) -> Ipv4Addr {
        let b = &self.buffer.as_ref()[field::DST_ADDR];
        Ipv4Addr::new(b[0], b[1], b[2], b[3])
    }

    /// The options bytes.
    #[inline]
    pub fn options(&self) -> &[u8] {
        &self.buffer.as_ref()[HEADER_LEN..self.header_len()]
    }

    /// Whether the header checksum verifies.
    #[inline]
    pub fn verify_checksum(&self) -> bool {
        checksum::is_valid(checksum::sum(&self.buffer.as_ref()[..self.header_len()]))
    }

    /// The captured payload: after the header, up to `total_len` or the end of the buffer.
    ///
    /// A `total_len` of 0 (TSO) means "up to the end of the buffer"; one shorter than the header
    /// gives an empty payload.
    #[inline]
    pub fn payload(&self) -> &[u8] {
        let b = self.buffer.as_ref();
        let (start, end) = self.payload_range(b.len());
        &b[start..end]
    }

    #[inline]
    fn payload_range(&self, buf_len: usize) -> (usize, usize) {
        let start = self.header_len();
        let total = usize::from(self.total_len());
        let end = if total == 0 {
            buf_len
        } else {
            total.clamp(start, buf_len.max(start))
        };
        (start, end.min(buf_len))
    }
}

impl<'a> Packet<&'a [u8]> {
    /// The captured payload with the buffer's lifetime (see [`payload`](Self::payload)).
    #[inline]
    pub fn into_payload(self) -> &'a [u8] {
        let (start, end) = self.payload_range(self.buffer.len());
        &self.buffer[start..end]
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Packet<T> {
    /// Sets version 4 and the header length in bytes (a multiple of 4, 20..=60).
    #[inline]
    pub fn set_version_and_header_len(&mut self, header_len: usize) {
        self.buffer.as_mut()[field::VER_IHL] = 0x40 | ((header_len / 4) as u8 & 0xf);
    }

    /// Sets DSCP and ECN.
    #[inline]
    pub fn set_dscp_ecn(&mut self, dscp: u8, ecn: u8) {
        self.buffer.as_mut()[field::DSCP_ECN] = (dscp << 2) | (ecn & 0b11);
    }

    /// Sets the total length.
    #[inline]
    pub fn set_total_len(&mut self, v: u16) {
        write_u16(&mut self.buffer.as_mut()[field::LENGTH], v);
    }

    /// Sets the identification.
    #[inline]
    pub fn set_ident(&mut self, v: u16) {
        write_u16(&mut self.buffer.as_mut()[field::IDENT], v);
    }

    /// Sets the flags and fragment offset (offset in bytes, a multiple of 8).
    #[inline]
    pub fn set_frag(&mut self, dont_frag: bool, more_frags: bool, offset: u16) {
        let mut v = (offset >> 3) & FRAG_MASK;
        if dont_frag {
            v |= FLAG_DF;
        }
        if more_frags {
            v |= FLAG_MF;
        }
        write_u16(&mut self.buffer.as_mut()[field::FLG_OFF], v);
    }

    /// Sets the time to live.
    #[inline]
    pub fn set_ttl(&mut self, v: u8) {
        self.buffer.as_mut()[field::TTL] = v;
    }

    /// Sets the protocol.
    #[inline]
    pub fn set_protocol(&mut self, p: IpProtocol) {
        self.buffer.as_mut()[field::PROTOCOL] = p.to_u8();
    }

    /// Sets the checksum field.
    #[inline]
    pub fn set_checksum(&mut self, v: u16) {
        write_u16(&mut self.buffer.as_mut()[field::CHECKSUM], v);
    }

    /// Sets the source address.
    #[inline]
    pub fn set_src_addr(&mut self, a: Ipv4Addr) {
        self.buffer.as_mut()[field::SRC_ADDR].copy_from_slice(&a.octets());
    }

    /// Sets the destination address.
    #[inline]
    pub fn set_dst_addr(&mut self, a: Ipv4Addr) {
        self.buffer.as_mut()[field::DST_ADDR].copy_from_slice(&a.octets());
    }

    /// Computes and writes the header checksum.
    #[inline]
    pub fn fill_checksum(&mut self) {
        self.set_checksum(0);
        let hl = self.header_len();
        let c = checksum::finish(checksum::sum(&self.buffer.as_ref()[..hl]));
        self.set_checksum(c);
    }

    /// The captured payload, mutably (see [`payload`](Self::payload)).
    #[inline]
    pub fn payload_mut(&mut self) -> &mut [u8] {
        let len = self.buffer.as_ref().len();
        let (start, end) = self.payload_range(len);
        &mut self.buffer.as_mut()[start..end]
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    // IPv4 header of a real TCP SYN: 192.168.1.140 -> 174.143.213.184, ident 0xbd6a, DF,
    // TTL 64, total length 60, checksum zeroed (filled by `fixture`), then 4 bytes of TCP header.
    static PACKET_BYTES: [u8; 24] = [
        0x45, 0x00, 0x00, 0x3c, 0xbd, 0x6a, 0x40, 0x00, 0x40, 0x06, 0x00, 0x00, 0xc0, 0xa8, 0x01,
        0x8c, 0xae, 0x8f, 0xd5, 0xb8, 0xd7, 0x1c, 0x00, 0x50,
    ];

    fn fixture() -> [u8; 24] {
        let mut b = PACKET_BYTES;
        Packet::new_unchecked(&mut b[..]).fill_checksum();
        b
    }

    #[test]
    fn deconstruct() {
        let b = fixture();
        let p = Packet::new_checked(&b[..]).unwrap();
        assert_eq!(p.version(), 4);
        assert_eq!(p.header_len(), 20);
        assert_eq!(p.total_len(), 60);
        assert_eq!(p.ident(), 0xbd6a);
        assert!(p.dont_frag() && !p.more_frags() && !p.is_fragment());
        assert_eq!(p.frag_offset(), 0);
        assert_eq!(p.ttl(), 64);
        assert_eq!(p.protocol(), IpProtocol::Tcp);
        assert_eq!(p.src_addr(), Ipv4Addr::new(192, 168, 1, 140));
        assert_eq!(p.dst_addr(), Ipv4Addr::new(174, 143, 213, 184));
        assert!(p.verify_checksum());
        assert_eq!(p.payload(), &[0xd7, 0x1c, 0x00, 0x50]);
    }

    #[test]
    fn construct() {
        let mut b = [0u8; 24];
        let mut p = Packet::new_unchecked(&mut b[..]);
        p.set_version_and_header_len(20);
        p.set_dscp_ecn(0, 0);
        p.set_total_len(60);
        p.set_ident(0xbd6a);
        p.set_frag(true, false, 0);
        p.set_ttl(64);
        p.set_protocol(IpProtocol::Tcp);
        p.set_src_addr(Ipv4Addr::new(192, 168, 1, 140));
        p.set_dst_addr(Ipv4Addr::new(174, 143, 213, 184));
        p.fill_checksum();
        p.payload_mut().copy_from_slice(&[0xd7, 0x1c, 0x00, 0x50]);
        assert_eq!(b, fixture());
    }

    #[test]
    fn rejects_bad_headers() {
        let b = fixture();
        assert_eq!(Packet::new_checked(&b[..19]).err(), Some(Error::Truncated));
        let mut v = b;
        v[0] = 0x65;
        assert_eq!(
            Packet::new_checked(&v[..]).err(),
            Some(Error::BadVersion(6))
        );
        v[0] = 0x44;
        assert_eq!(
            Packet::new_checked(&v[..]).err(),
            Some(Error::BadHeaderLen(16))
        );
        v[0] = 0x47;
        assert_eq!(Packet::new_checked(&v[..]).err(), Some(Error::Truncated));
        let mut v = b;
        v[3] = 10; // total length below header length
        assert_eq!(Packet::new_checked(&v[..]).unwrap().payload(), &[] as &[u8]);
        v[3] = 0; // TSO: zero means whole buffer
        assert_eq!(Packet::new_checked(&v[..]).unwrap().payload().len(), 4);
    }

    proptest! {
        #[test]
        fn never_panics(buf in proptest::collection::vec(any::<u8>(), 0..80)) {
            if let Ok(p) = Packet::new_checked(&buf[..]) {
                let _ = (p.total_len(), p.ident(), p.frag_offset(), p.protocol(), p.src_addr());
                let _ = (p.options().len(), p.payload().len(), p.verify_checksum(), p.dscp());
            }
        }
    }
}
