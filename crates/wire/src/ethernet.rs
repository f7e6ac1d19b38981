//! Ethernet II frames (IEEE 802.3), MAC addresses and EtherTypes.
//!
//! ```text
//! +----------------+----------------+-----------+---------
//! | destination(6) |   source(6)    | type(2)   | payload
//! +----------------+----------------+-----------+---------
//! ```

use crate::bytes::{read_u16, write_u16};
use core::fmt;
use core::str::FromStr;

/// An EtherType (IEEE 802 numbers). Open enum: unknown values round-trip.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum EtherType {
    /// 0x0800.
    Ipv4,
    /// 0x0806.
    Arp,
    /// 0x8100: IEEE 802.1Q customer VLAN tag.
    Vlan,
    /// 0x88a8: IEEE 802.1ad service VLAN tag (QinQ outer tag).
    QinQ,
    /// 0x9100: pre-standard QinQ outer tag.
    QinQ9100,
    /// 0x86dd.
    Ipv6,
    /// 0x8847: MPLS unicast.
    Mpls,
    /// 0x8848: MPLS multicast.
    MplsMulticast,
    /// 0x8864: PPPoE session stage.
    PppoeSession,
    /// Any other value.
    Unknown(u16),
}

impl EtherType {
    /// The EtherType for a 16-bit value.
    #[inline]
    pub const fn from_u16(v: u16) -> EtherType {
        match v {
            0x0800 => EtherType::Ipv4,
            0x0806 => EtherType::Arp,
            0x8100 => EtherType::Vlan,
            0x88a8 => EtherType::QinQ,
            0x9100 => EtherType::QinQ9100,
            0x86dd => EtherType::Ipv6,
            0x8847 => EtherType::Mpls,
            0x8848 => EtherType::MplsMulticast,
            0x8864 => EtherType::PppoeSession,
            v => EtherType::Unknown(v),
        }
    }

    /// The 16-bit value.
    #[inline]
    pub const fn to_u16(self) -> u16 {
        match self {
            EtherType::Ipv4 => 0x0800,
            EtherType::Arp => 0x0806,
            EtherType::Vlan => 0x8100,
            EtherType::QinQ => 0x88a8,
            EtherType::QinQ9100 => 0x9100,
            EtherType::Ipv6 => 0x86dd,
            EtherType::Mpls => 0x8847,
            EtherType::MplsMulticast => 0x8848,
            EtherType::PppoeSession => 0x8864,
            EtherType::Unknown(v) => v,
        }
    }

    /// Whether this value introduces a 4-byte VLAN tag (0x8100, 0x88a8, 0x9100).
    #[inline]
    pub const fn is_vlan(self) -> bool {
        matches!(
            self,
            EtherType::Vlan | EtherType::QinQ | EtherType::QinQ9100
        )
    }
}

impl From<u16> for EtherType {
    fn from(v: u16) -> Self {
        EtherType::from_u16(v)
    }
}

impl From<EtherType> for u16 {
    fn from(t: EtherType) -> Self {
        t.to_u16()
    }
}

/// A 48-bit MAC address.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct EthernetAddress(pub [u8; 6]);

impl EthernetAddress {
    /// The broadcast address ff:ff:ff:ff:ff:ff.
    pub const BROADCAST: EthernetAddress = EthernetAddress([0xff; 6]);

    /// Whether the group (multicast) bit is set.
    #[inline]
    pub const fn is_multicast(&self) -> bool {
        self.0[0] & 1 != 0
    }

    /// Whether the locally-administered bit is set.
    #[inline]
    pub const fn is_local(&self) -> bool {
        self.0[0] & 2 != 0
    }
}

impl fmt::Display for EthernetAddress {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let b = &self.0;
        write!(
            f,
            "{:02x}:{:02x}:{:02x}:{:02x}:{:02x}:{:02x}",
            b[0], b[1], b[2], b[3], b[4], b[5]
        )
    }
}

/// A string that is not six colon- or dash-separated hex bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("invalid MAC address: expected six hex bytes like aa:bb:cc:dd:ee:ff")]
pub struct AddressParseError;

impl FromStr for EthernetAddress {
    type Err = AddressParseError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let sep = if s.contains('-') { '-' } else { ':' };
        let mut out = [0u8; 6];
        let mut parts = s.split(sep);
        for b in &mut out {
            let p = parts.next().ok_or(AddressParseError)?;
            if p.is_empty() || p.len() > 2 {
                return Err(AddressParseError);
            }
            *b = u8::from_str_radix(p, 16).map_err(|_| AddressParseError)?;
        }
        if parts.next().is_some() {
            return Err(AddressParseError);
        }
        Ok(EthernetAddress(out))
    }
}

/// The buffer is shorter than the 14-byte Ethernet header.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("Ethernet frame truncated: shorter than 14 bytes")]
pub struct Truncated;

mod field {
    use core::ops::{Range, RangeFrom};
    pub const DESTINATION: Range<usize> = 0..6;
    pub const SOURCE: Range<usize> = 6..12;
    pub const ETHERTYPE: Range<usize> = 12..14;
    pub const PAYLOAD: RangeFrom<usize> = 14..;
}

/// Length of the Ethernet II header.
pub const HEADER_LEN: usize = field::PAYLOAD.start;

/// A view of an Ethernet II frame (without FCS).
#[derive(Debug, Clone, Copy)]
pub struct Frame<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> Frame<T> {
    /// Wraps a buffer without checking its length; getters may panic if it is short.
    #[inline]
    pub const fn new_unchecked(buffer: T) -> Frame<T> {
        Frame { buffer }
    }

    /// Wraps a buffer after [`check_len`](Self::check_len).
    #[inline]
    pub fn new_checked(buffer: T) -> Result<Frame<T>, Truncated> {
        let f = Frame::new_unchecked(buffer);
        f.check_len()?;
        Ok(f)
    }

    /// Checks that the 14 header bytes are present; after this no getter panics.
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

    /// The destination address.
    #[inline]
    pub fn dst_addr(&self) -> EthernetAddress {
        let mut a = [0u8; 6];
        a.copy_from_slice(&self.buffer.as_ref()[field::DESTINATION]);
        EthernetAddress(a)
    }

    /// The source address.
    #[inline]
    pub fn src_addr(&self) -> EthernetAddress {
        let mut a = [0u8; 6];
        a.copy_from_slice(&self.buffer.as_ref()[field::SOURCE]);
        EthernetAddress(a)
    }

    /// The EtherType (or 802.3 length when below 0x0600).
    #[inline]
    pub fn ethertype(&self) -> EtherType {
        EtherType::from_u16(read_u16(&self.buffer.as_ref()[field::ETHERTYPE]))
    }

    /// The bytes after the header.
    #[inline]
    pub fn payload(&self) -> &[u8] {
        &self.buffer.as_ref()[field::PAYLOAD]
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Frame<T> {
    /// Sets the destination address.
    #[inline]
    pub fn set_dst_addr(&mut self, a: EthernetAddress) {
        self.buffer.as_mut()[field::DESTINATION].copy_from_slice(&a.0);
    }

    /// Sets the source address.
    #[inline]
    pub fn set_src_addr(&mut self, a: EthernetAddress) {
        self.buffer.as_mut()[field::SOURCE].copy_from_slice(&a.0);
    }

    /// Sets the EtherType.
    #[inline]
    pub fn set_ethertype(&mut self, t: EtherType) {
        write_u16(&mut self.buffer.as_mut()[field::ETHERTYPE], t.to_u16());
    }

    /// The bytes after the header, mutably.
    #[inline]
    pub fn payload_mut(&mut self) -> &mut [u8] {
        &mut self.buffer.as_mut()[field::PAYLOAD]
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    // dst 00:1b:21:3a:4c:5d, src 52:54:00:12:34:56, IPv4, 4 payload bytes.
    static FRAME_BYTES: [u8; 18] = [
        0x00, 0x1b, 0x21, 0x3a, 0x4c, 0x5d, 0x52, 0x54, 0x00, 0x12, 0x34, 0x56, 0x08, 0x00, 0xde,
        0xad, 0xbe, 0xef,
    ];

    #[test]
    fn deconstruct() {
        let f = Frame::new_checked(&FRAME_BYTES[..]).unwrap();
        assert_eq!(f.dst_addr().to_string(), "00:1b:21:3a:4c:5d");
        assert_eq!(f.src_addr(), "52:54:00:12:34:56".parse().unwrap());
        assert_eq!(f.ethertype(), EtherType::Ipv4);
        assert_eq!(f.payload(), &[0xde, 0xad, 0xbe, 0xef]);
    }

    #[test]
    fn construct() {
        let mut b = [0u8; 18];
        let mut f = Frame::new_unchecked(&mut b[..]);
        f.set_dst_addr("00-1b-21-3a-4c-5d".parse().unwrap());
        f.set_src_addr(EthernetAddress([0x52, 0x54, 0, 0x12, 0x34, 0x56]));
        f.set_ethertype(EtherType::Ipv4);
        f.payload_mut().copy_from_slice(&[0xde, 0xad, 0xbe, 0xef]);
        assert_eq!(b, FRAME_BYTES);
    }

    #[test]
    fn address_parsing_rejects_junk() {
        for s in [
            "",
            "aa:bb:cc:dd:ee",
            "aa:bb:cc:dd:ee:ff:00",
            "aa:bb:cc:dd:ee:fg",
            "aaa:b:c:d:e:f",
        ] {
            assert_eq!(s.parse::<EthernetAddress>(), Err(AddressParseError), "{s}");
        }
        assert!(EthernetAddress::BROADCAST.is_multicast());
    }

    #[test]
    fn ethertype_round_trips() {
        for v in 0..=u16::MAX {
            assert_eq!(EtherType::from_u16(v).to_u16(), v);
        }
    }

    proptest! {
        #[test]
        fn never_panics(buf in proptest::collection::vec(any::<u8>(), 0..40)) {
            if let Ok(f) = Frame::new_checked(&buf[..]) {
                let _ = (f.dst_addr(), f.src_addr(), f.ethertype(), f.payload().len());
            }
        }

        #[test]
        fn address_display_parse(a in any::<[u8; 6]>()) {
            let s = EthernetAddress(a).to_string();
            prop_assert_eq!(s.parse::<EthernetAddress>(), Ok(EthernetAddress(a)));
        }
    }
}
