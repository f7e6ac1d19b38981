//! The symmetric 5-tuple of a captured frame and a fast hash of it: both directions of a
//! connection give the same key, so a forwarder (and later the flow meter) can keep a
//! connection in one place.
//!
//! The key is canonical: of the two (address, port) ends, the smaller comes first. Ports are
//! read for TCP, UDP, DCCP, SCTP and UDP-Lite when the transport header's first four bytes were
//! captured and the packet is not an IP fragment; otherwise they are 0, so all fragments of a
//! datagram share one key (a 3-tuple). Frames that are not IP have no key.

use crate::LinkType;
use crate::ipv4::{self, IpProtocol};
use crate::ipv6;
use crate::link::{NetworkProto, network_layer};

/// A connection's canonical 5-tuple. IPv4 addresses sit in the first 4 bytes of the 16.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct FlowKey {
    /// IP protocol number (`protocolIdentifier`).
    pub proto: u8,
    /// Whether the addresses are IPv6.
    pub ipv6: bool,
    /// The smaller end's address.
    pub addr_lo: [u8; 16],
    /// The larger end's address.
    pub addr_hi: [u8; 16],
    /// The smaller end's port.
    pub port_lo: u16,
    /// The larger end's port.
    pub port_hi: u16,
}

/// Whether `proto` starts with a 16-bit source port then a 16-bit destination port.
const fn has_ports(proto: u8) -> bool {
    matches!(proto, 6 | 17 | 33 | 132 | 136)
}

fn ports(l4: &[u8], proto: u8) -> (u16, u16) {
    match l4.get(..4) {
        Some(p) if has_ports(proto) => (
            u16::from_be_bytes([p[0], p[1]]),
            u16::from_be_bytes([p[2], p[3]]),
        ),
        _ => (0, 0),
    }
}

impl FlowKey {
    /// Builds the canonical key from one direction's fields.
    pub fn new(
        proto: u8,
        ipv6: bool,
        src: [u8; 16],
        dst: [u8; 16],
        sport: u16,
        dport: u16,
    ) -> FlowKey {
        let (addr_lo, port_lo, addr_hi, port_hi) = if (src, sport) <= (dst, dport) {
            (src, sport, dst, dport)
        } else {
            (dst, dport, src, sport)
        };
        FlowKey {
            proto,
            ipv6,
            addr_lo,
            addr_hi,
            port_lo,
            port_hi,
        }
    }

    /// The key of a frame captured with `linktype`, or `None` if it is not IP or its IP header
    /// was not captured whole.
    #[inline]
    pub fn of_frame(linktype: LinkType, frame: &[u8]) -> Option<FlowKey> {
        let nl = network_layer(linktype, frame)?;
        let ip = frame.get(nl.offset..)?;
        match nl.proto {
            NetworkProto::Ipv4 => {
                let p = ipv4::Packet::new_checked(ip).ok()?;
                let proto = p.protocol().to_u8();
                let (sport, dport) = if p.is_fragment() {
                    (0, 0)
                } else {
                    ports(ip.get(p.header_len()..).unwrap_or(&[]), proto)
                };
                let mut s = [0u8; 16];
                let mut d = [0u8; 16];
                s[..4].copy_from_slice(&p.src_addr().octets());
                d[..4].copy_from_slice(&p.dst_addr().octets());
                Some(FlowKey::new(proto, false, s, d, sport, dport))
            }
            NetworkProto::Ipv6 => {
                let p = ipv6::Packet::new_checked(ip).ok()?;
                let (proto, (sport, dport)) = match p.upper_layer() {
                    Some((proto, off, None)) => {
                        let proto = proto.to_u8();
                        (proto, ports(ip.get(off..).unwrap_or(&[]), proto))
                    }
                    Some((proto, _, Some(_))) => (proto.to_u8(), (0, 0)),
                    None => (IpProtocol::from_u8(ip[6]).to_u8(), (0, 0)),
                };
                Some(FlowKey::new(
                    proto,
                    true,
                    p.src_addr().octets(),
                    p.dst_addr().octets(),
                    sport,
                    dport,
                ))
            }
        }
    }

    /// A 64-bit hash of the key (multiply-xorshift; not keyed, not for untrusted hash tables).
    #[inline]
    pub fn hash64(&self) -> u64 {
        let w = |b: &[u8]| {
            let mut a = [0u8; 8];
            a.copy_from_slice(b);
            u64::from_le_bytes(a)
        };
        let mut h = mix(u64::from(self.proto) | u64::from(self.ipv6) << 8);
        for x in [
            w(&self.addr_lo[..8]),
            w(&self.addr_lo[8..]),
            w(&self.addr_hi[..8]),
            w(&self.addr_hi[8..]),
            u64::from(self.port_lo) << 16 | u64::from(self.port_hi),
        ] {
            h = mix(h ^ x);
        }
        h
    }
}

/// The murmur3 64-bit finaliser after an add: spreads every input bit over the word.
#[inline]
fn mix(x: u64) -> u64 {
    let mut z = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 33)).wrapping_mul(0xff51_afd7_ed55_8ccd);
    z = (z ^ (z >> 33)).wrapping_mul(0xc4ce_b9fe_1a85_ec53);
    z ^ (z >> 33)
}

/// The symmetric hash of a frame's 5-tuple; 0 for frames without one.
#[inline]
pub fn symmetric_hash(linktype: LinkType, frame: &[u8]) -> u64 {
    FlowKey::of_frame(linktype, frame).map_or(0, |k| k.hash64())
}

/// Which of `n` places (collectors, shards) a hash goes to: `n × hash / 2⁶⁴`, no division.
#[inline]
pub fn pick(hash: u64, n: usize) -> usize {
    ((u128::from(hash) * n as u128) >> 64) as usize
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn eth_ipv4_udp(src: [u8; 4], dst: [u8; 4], sport: u16, dport: u16, frag: bool) -> Vec<u8> {
        let mut f = vec![0u8; 14 + 20 + 8];
        f[12..14].copy_from_slice(&[0x08, 0x00]);
        let ip = &mut f[14..];
        ip[0] = 0x45;
        ip[2..4].copy_from_slice(&28u16.to_be_bytes());
        if frag {
            ip[6] = 0x20; // MF
        }
        ip[8] = 64;
        ip[9] = 17;
        ip[12..16].copy_from_slice(&src);
        ip[16..20].copy_from_slice(&dst);
        ip[20..22].copy_from_slice(&sport.to_be_bytes());
        ip[22..24].copy_from_slice(&dport.to_be_bytes());
        f
    }

    fn eth_ipv6_tcp(src: [u8; 16], dst: [u8; 16], sport: u16, dport: u16) -> Vec<u8> {
        let mut f = vec![0u8; 14 + 40 + 20];
        f[12..14].copy_from_slice(&[0x86, 0xdd]);
        let ip = &mut f[14..];
        ip[0] = 0x60;
        ip[4..6].copy_from_slice(&20u16.to_be_bytes());
        ip[6] = 6;
        ip[7] = 64;
        ip[8..24].copy_from_slice(&src);
        ip[24..40].copy_from_slice(&dst);
        ip[40..42].copy_from_slice(&sport.to_be_bytes());
        ip[42..44].copy_from_slice(&dport.to_be_bytes());
        f
    }

    #[test]
    fn both_directions_give_one_key() {
        let a = eth_ipv4_udp([10, 0, 0, 1], [10, 0, 0, 2], 1234, 53, false);
        let b = eth_ipv4_udp([10, 0, 0, 2], [10, 0, 0, 1], 53, 1234, false);
        let ka = FlowKey::of_frame(LinkType::Ethernet, &a).unwrap();
        let kb = FlowKey::of_frame(LinkType::Ethernet, &b).unwrap();
        assert_eq!(ka, kb);
        assert_eq!((ka.proto, ka.port_lo, ka.port_hi), (17, 1234, 53));
        assert_eq!(&ka.addr_lo[..4], &[10, 0, 0, 1]);
        assert_eq!(ka.hash64(), kb.hash64());
        let c = eth_ipv4_udp([10, 0, 0, 1], [10, 0, 0, 2], 1235, 53, false);
        assert_ne!(
            symmetric_hash(LinkType::Ethernet, &a),
            symmetric_hash(LinkType::Ethernet, &c)
        );
    }

    #[test]
    fn ipv6_and_fragments() {
        let (x, y) = ([0x20; 16], [0x30; 16]);
        let a = eth_ipv6_tcp(x, y, 443, 5000);
        let b = eth_ipv6_tcp(y, x, 5000, 443);
        let k = FlowKey::of_frame(LinkType::Ethernet, &a).unwrap();
        assert!(k.ipv6);
        assert_eq!((k.proto, k.port_lo, k.port_hi), (6, 443, 5000));
        assert_eq!(Some(k), FlowKey::of_frame(LinkType::Ethernet, &b));
        let f = eth_ipv4_udp([1, 1, 1, 1], [2, 2, 2, 2], 9, 10, true);
        let k = FlowKey::of_frame(LinkType::Ethernet, &f).unwrap();
        assert_eq!((k.port_lo, k.port_hi), (0, 0));
    }

    #[test]
    fn non_ip_and_cut_frames() {
        let mut arp = vec![0u8; 42];
        arp[12..14].copy_from_slice(&[0x08, 0x06]);
        assert_eq!(symmetric_hash(LinkType::Ethernet, &arp), 0);
        let a = eth_ipv4_udp([10, 0, 0, 1], [10, 0, 0, 2], 1234, 53, false);
        assert_eq!(FlowKey::of_frame(LinkType::Ethernet, &a[..30]), None);
        let k = FlowKey::of_frame(LinkType::Ethernet, &a[..36]).unwrap();
        assert_eq!((k.port_lo, k.port_hi), (0, 0));
        assert_eq!(
            FlowKey::of_frame(LinkType::Raw, &a[14..]).unwrap().port_lo,
            1234
        );
    }

    #[test]
    fn pick_spreads_evenly() {
        let mut n = [0u32; 3];
        for i in 0..3000u16 {
            let f = eth_ipv4_udp([10, 0, 0, 1], [10, 0, 0, 2], 1024 + i, 9, false);
            n[pick(symmetric_hash(LinkType::Ethernet, &f), 3)] += 1;
        }
        assert!(n.iter().all(|&c| (850..1150).contains(&c)), "{n:?}");
        assert_eq!(pick(u64::MAX, 2), 1);
        assert_eq!(pick(0, 2), 0);
    }

    proptest! {
        #[test]
        fn symmetric_for_any_tuple(s in any::<[u8; 4]>(), d in any::<[u8; 4]>(),
                                   sp in any::<u16>(), dp in any::<u16>()) {
            let a = eth_ipv4_udp(s, d, sp, dp, false);
            let b = eth_ipv4_udp(d, s, dp, sp, false);
            prop_assert_eq!(symmetric_hash(LinkType::Ethernet, &a),
                            symmetric_hash(LinkType::Ethernet, &b));
        }

        #[test]
        fn never_panics(buf in proptest::collection::vec(any::<u8>(), 0..120), lt in 0u16..300) {
            let _ = symmetric_hash(LinkType::from_u16(lt), &buf);
        }
    }
}
