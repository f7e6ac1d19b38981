//! The symmetric 5-tuple of a captured frame and a fast hash of it: both directions of a
//! connection give the same key, so a forwarder (and later the flow meter) can keep a
//! connection in one place.
//!
//! The key is canonical: of the two (address, port) ends, the smaller comes first. Ports are
//! read for TCP, UDP, DCCP, SCTP and UDP-Lite when the transport header's first four bytes were
//! captured and the packet is not an IP fragment; otherwise they are 0, so all fragments of a
//! datagram share one key (a 3-tuple). Frames that are not IP have no key.
//!
//! [`FlowFields`] is the one parser behind it: the directed fields a flow meter counts.

use crate::LinkType;
use crate::ipv4::{self, IpProtocol};
use crate::ipv6;
use crate::link::{ETH_P_IP, NetworkProto, network_layer};

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

const TCP: u8 = 6;
const ICMP: u8 = 1;
const ICMPV6: u8 = 58;
const IPV6_HEADER_LEN: u32 = 40;

/// An IP fragment: which datagram it belongs to and whether it is the first piece.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct FragmentId {
    /// The IP identification (IPv4: 16 bits; IPv6: the fragment header's 32 bits).
    pub ident: u32,
    /// Whether this is the first fragment, the one carrying the transport header.
    pub first: bool,
}

/// The IP datagram a fragment belongs to, keyed like a flow (IP version, protocol, both
/// addresses, outermost VLAN, capture interface) with the IP identification in place of the
/// ports: the fragments of one datagram share it, and a fragment of another IP version, VLAN
/// or interface never does, whatever its addresses and identification.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct DatagramKey {
    /// Whether the addresses are IPv6.
    pub ipv6: bool,
    /// IP protocol number (for IPv6 the upper layer after the extension headers).
    pub proto: u8,
    /// The outermost VLAN ID, 0 if untagged.
    pub vlan: u16,
    /// The capture interface.
    pub interface: u32,
    /// The IP identification (IPv4: 16 bits; IPv6: the fragment header's 32 bits).
    pub ident: u32,
    /// Source address.
    pub src: [u8; 16],
    /// Destination address.
    pub dst: [u8; 16],
}

impl DatagramKey {
    /// A 64-bit hash of the key (multiply-xorshift; not keyed).
    #[inline]
    pub fn hash64(&self) -> u64 {
        let w = |b: &[u8; 16], hi: bool| {
            let (lo, high) = b.split_at(8);
            u64::from_le_bytes(if hi { high } else { lo }.try_into().unwrap_or_default())
        };
        let mut h = mix(u64::from(self.proto)
            | u64::from(self.ipv6) << 8
            | u64::from(self.vlan) << 16
            | u64::from(self.ident) << 32);
        for x in [
            w(&self.src, false),
            w(&self.src, true),
            w(&self.dst, false),
            w(&self.dst, true),
            u64::from(self.interface),
        ] {
            h = mix(h ^ x);
        }
        h
    }
}

/// What a flow meter needs from one packet, in the packet's own direction.
///
/// Ports are read for TCP, UDP, DCCP, SCTP and UDP-Lite; for ICMP and ICMPv6 `sport` is 0 and
/// `dport` is `type << 8 | code`; otherwise both are 0. They are also 0 for a fragment other
/// than the first (its `fragment` says which datagram it belongs to) and when the transport
/// header was not captured.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct FlowFields {
    /// Whether the addresses are IPv6 (else IPv4 in the first 4 bytes).
    pub ipv6: bool,
    /// IP protocol number; for IPv6 the upper layer after the extension headers.
    pub proto: u8,
    /// Source address.
    pub src: [u8; 16],
    /// Destination address.
    pub dst: [u8; 16],
    /// Source port.
    pub sport: u16,
    /// Destination port, or ICMP type and code.
    pub dport: u16,
    /// The outermost VLAN ID, 0 if untagged.
    pub vlan: u16,
    /// IP bytes as the IP header says: IPv4 total length, IPv6 payload length + 40 (for a
    /// jumbogram, the wire length minus the link header).
    pub octets: u32,
    /// TCP control bits (the 12 bits after the data offset), 0 for other protocols.
    pub tcp_flags: u16,
    /// Set for IP fragments.
    pub fragment: Option<FragmentId>,
}

impl FlowFields {
    /// For a fragment captured on `interface`, the key of its datagram.
    #[inline]
    pub fn datagram(&self, interface: u32) -> Option<DatagramKey> {
        self.fragment.map(|fr| DatagramKey {
            ipv6: self.ipv6,
            proto: self.proto,
            vlan: self.vlan,
            interface,
            ident: fr.ident,
            src: self.src,
            dst: self.dst,
        })
    }

    /// The flow fields of a frame captured with `linktype` that was `wire_len` bytes long, or
    /// `None` if it is not IP or its IP header was not captured whole.
    #[inline(always)]
    pub fn of_frame(linktype: LinkType, frame: &[u8], wire_len: u32) -> Option<FlowFields> {
        // Most frames are untagged Ethernet with an IPv4 header of 20 bytes, not a fragment:
        // read those at fixed offsets. Anything else takes the general walk below, which gives
        // the same fields for these frames too.
        if linktype == LinkType::Ethernet
            && let Some(
                &[
                    e0,
                    e1,
                    0x45,
                    _,
                    l0,
                    l1,
                    _,
                    _,
                    fl,
                    fo,
                    _,
                    proto,
                    _,
                    _,
                    s0,
                    s1,
                    s2,
                    s3,
                    d0,
                    d1,
                    d2,
                    d3,
                ],
            ) = frame.get(12..).and_then(<[u8]>::first_chunk::<22>)
            && u16::from_be_bytes([e0, e1]) == ETH_P_IP
            && u16::from_be_bytes([fl, fo]) & (ipv4::FLAG_MF | ipv4::FRAG_MASK) == 0
        {
            let mut f = FlowFields {
                proto,
                src: ipv4_in_16([s0, s1, s2, s3]),
                dst: ipv4_in_16([d0, d1, d2, d3]),
                octets: u32::from(u16::from_be_bytes([l0, l1])),
                ..FlowFields::default()
            };
            f.ports(&frame[34..]);
            return Some(f);
        }
        Self::walk(linktype, frame, wire_len)
    }

    /// [`FlowFields::of_frame`] for any frame: the link layer, any IP header, extension
    /// headers, fragments.
    // Inline too: out of line, its result comes back through memory and the meter's next
    // reads of it wait on those stores (measured +10% on `flows -r`).
    #[inline(always)]
    fn walk(linktype: LinkType, frame: &[u8], wire_len: u32) -> Option<FlowFields> {
        let nl = network_layer(linktype, frame)?;
        let ip = frame.get(nl.offset..)?;
        let mut f = FlowFields {
            vlan: nl.vlan.unwrap_or(0),
            ..FlowFields::default()
        };
        let l4 = match nl.proto {
            NetworkProto::Ipv4 => {
                let p = ipv4::Packet::new_checked(ip).ok()?;
                f.proto = p.protocol().to_u8();
                f.src = ipv4_in_16(p.src_addr().octets());
                f.dst = ipv4_in_16(p.dst_addr().octets());
                f.octets = u32::from(p.total_len());
                if p.is_fragment() {
                    f.fragment = Some(FragmentId {
                        ident: u32::from(p.ident()),
                        first: p.frag_offset() == 0,
                    });
                }
                ip.get(p.header_len()..)
            }
            NetworkProto::Ipv6 => {
                let p = ipv6::Packet::new_checked(ip).ok()?;
                f.ipv6 = true;
                f.src = p.src_addr().octets();
                f.dst = p.dst_addr().octets();
                f.octets = match p.payload_len() {
                    0 => wire_len.saturating_sub(nl.offset as u32),
                    n => u32::from(n) + IPV6_HEADER_LEN,
                };
                match p.upper_layer() {
                    Some((proto, off, frag)) => {
                        f.proto = proto.to_u8();
                        f.fragment = frag.map(|fr| FragmentId {
                            ident: fr.ident,
                            first: fr.is_first(),
                        });
                        ip.get(off..)
                    }
                    None => {
                        f.proto = IpProtocol::from_u8(ip[6]).to_u8();
                        None
                    }
                }
            }
        };
        if let (Some(l4), None) | (Some(l4), Some(FragmentId { first: true, .. })) =
            (l4, f.fragment)
        {
            f.ports(l4);
        }
        Some(f)
    }

    /// Takes the ports (ICMP: type and code as the destination port) and TCP flags from the
    /// transport header `l4`, as far as it was captured.
    #[inline(always)]
    fn ports(&mut self, l4: &[u8]) {
        let f = self;
        match (f.proto, f.ipv6) {
            (ICMP, false) | (ICMPV6, true) => {
                if let [t, c, ..] = *l4 {
                    f.dport = u16::from_be_bytes([t, c]);
                }
            }
            (p, _) if has_ports(p) => {
                if let [a, b, c, d, ..] = *l4 {
                    f.sport = u16::from_be_bytes([a, b]);
                    f.dport = u16::from_be_bytes([c, d]);
                }
                if p == TCP
                    && let Some(&[hi, lo]) = l4.get(12..14)
                {
                    f.tcp_flags = u16::from_be_bytes([hi, lo]) & 0x0fff;
                }
            }
            _ => {}
        }
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
    /// was not captured whole. Fragments and ICMP get ports 0, so every piece of a datagram
    /// and both directions of an ICMP exchange share one key.
    #[inline]
    pub fn of_frame(linktype: LinkType, frame: &[u8]) -> Option<FlowKey> {
        let f = FlowFields::of_frame(linktype, frame, 0)?;
        let (sport, dport) = if f.fragment.is_some() || !has_ports(f.proto) {
            (0, 0)
        } else {
            (f.sport, f.dport)
        };
        Some(FlowKey::new(f.proto, f.ipv6, f.src, f.dst, sport, dport))
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

/// An IPv4 address in the first 4 bytes of a 16-byte field, the rest zero, made as one value:
/// written with one store, so that reading it back in 8-byte words (the flow hash does, at
/// once) is forwarded from that store instead of waiting for two narrower ones to retire.
#[inline(always)]
fn ipv4_in_16(a: [u8; 4]) -> [u8; 16] {
    u128::from(u32::from_le_bytes(a)).to_le_bytes()
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

    proptest! {
        /// The fixed-offset path for Ethernet + 20-byte IPv4 gives what the general walk gives,
        /// on frames that are mostly that shape (and some that only nearly are).
        #[test]
        fn the_ipv4_shortcut_agrees_with_the_walk(
            mut frame in proptest::collection::vec(any::<u8>(), 0..80),
            shape in any::<[bool; 4]>(),
        ) {
            if frame.len() >= 34 {
                if shape[0] { frame[12..14].copy_from_slice(&[0x08, 0x00]); }
                if shape[1] { frame[14] = 0x45; }
                if shape[2] { frame[20] &= 0xc0; frame[21] = 0; }
                if shape[3] { frame[23] = [6, 17, 1, 58][usize::from(frame[23] % 4)]; }
            }
            let wire_len = frame.len() as u32;
            prop_assert_eq!(
                FlowFields::of_frame(LinkType::Ethernet, &frame, wire_len),
                FlowFields::walk(LinkType::Ethernet, &frame, wire_len)
            );
        }
    }

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
    fn flow_fields_of_tcp_icmp_and_vlan() {
        let (x, y) = ([0x20; 16], [0x30; 16]);
        let mut a = eth_ipv6_tcp(x, y, 443, 5000);
        a[14 + 40 + 12..14 + 40 + 14].copy_from_slice(&0x5012u16.to_be_bytes()); // SYN+ACK
        let f = FlowFields::of_frame(LinkType::Ethernet, &a, a.len() as u32).unwrap();
        assert_eq!((f.ipv6, f.proto, f.sport, f.dport), (true, 6, 443, 5000));
        assert_eq!((f.src, f.dst, f.octets, f.tcp_flags), (x, y, 60, 0x012));
        assert_eq!((f.vlan, f.fragment), (0, None));

        let mut icmp = eth_ipv4_udp([10, 0, 0, 1], [10, 0, 0, 2], 0x0b00, 0, false);
        icmp[14 + 9] = 1;
        let f = FlowFields::of_frame(LinkType::Ethernet, &icmp, 0).unwrap();
        assert_eq!((f.proto, f.sport, f.dport, f.octets), (1, 0, 0x0b00, 28));
        let k = FlowKey::of_frame(LinkType::Ethernet, &icmp).unwrap();
        assert_eq!((k.port_lo, k.port_hi), (0, 0));

        let plain = eth_ipv4_udp([10, 0, 0, 1], [10, 0, 0, 2], 1234, 53, false);
        let mut tagged = plain[..12].to_vec();
        tagged.extend_from_slice(&[0x81, 0x00, 0x20, 0x2a]); // PCP 1, VLAN 42
        tagged.extend_from_slice(&plain[12..]);
        let f = FlowFields::of_frame(LinkType::Ethernet, &tagged, 0).unwrap();
        assert_eq!((f.vlan, f.sport, f.dport), (42, 1234, 53));
    }

    #[test]
    fn flow_fields_of_fragments() {
        let mut first = eth_ipv4_udp([1, 1, 1, 1], [2, 2, 2, 2], 9, 10, true);
        first[14 + 4..14 + 6].copy_from_slice(&0x1234u16.to_be_bytes());
        let f = FlowFields::of_frame(LinkType::Ethernet, &first, 0).unwrap();
        assert_eq!(
            f.fragment,
            Some(FragmentId {
                ident: 0x1234,
                first: true
            })
        );
        assert_eq!((f.sport, f.dport), (9, 10));
        let mut later = first.clone();
        later[14 + 6..14 + 8].copy_from_slice(&0x0003u16.to_be_bytes()); // offset 24, no MF
        let f = FlowFields::of_frame(LinkType::Ethernet, &later, 0).unwrap();
        assert_eq!(
            f.fragment,
            Some(FragmentId {
                ident: 0x1234,
                first: false
            })
        );
        assert_eq!((f.sport, f.dport), (0, 0));

        // IPv6: fragment header (next header UDP, offset 0, M) before the ports.
        let mut v6 = vec![0u8; 14 + 40 + 8 + 8];
        v6[12..14].copy_from_slice(&[0x86, 0xdd]);
        v6[14] = 0x60;
        v6[14 + 4..14 + 6].copy_from_slice(&16u16.to_be_bytes());
        v6[14 + 6] = 44;
        v6[14 + 40] = 17;
        v6[14 + 40 + 3] = 1;
        v6[14 + 40 + 4..14 + 40 + 8].copy_from_slice(&7u32.to_be_bytes());
        v6[14 + 48..14 + 50].copy_from_slice(&53u16.to_be_bytes());
        v6[14 + 50..14 + 52].copy_from_slice(&99u16.to_be_bytes());
        let f = FlowFields::of_frame(LinkType::Ethernet, &v6, 0).unwrap();
        assert_eq!((f.proto, f.sport, f.dport, f.octets), (17, 53, 99, 56));
        assert_eq!(
            f.fragment,
            Some(FragmentId {
                ident: 7,
                first: true
            })
        );

        // A jumbogram (payload length 0) counts the wire length.
        v6[14 + 4..14 + 6].copy_from_slice(&0u16.to_be_bytes());
        let f = FlowFields::of_frame(LinkType::Ethernet, &v6, 70_014).unwrap();
        assert_eq!(f.octets, 70_000);
    }

    /// An IPv4 fragment and an IPv6 one with the same address bytes (a.b.c.d vs a.b.c.d::)
    /// and identification belong to different datagrams; so do fragments on another VLAN or
    /// interface.
    #[test]
    fn the_datagram_key_holds_ip_version_vlan_and_interface() {
        let mut v4 = eth_ipv4_udp([1, 2, 3, 4], [5, 6, 7, 8], 0, 0, true);
        v4[14 + 4..14 + 6].copy_from_slice(&9u16.to_be_bytes());
        let f4 = FlowFields::of_frame(LinkType::Ethernet, &v4, 0).unwrap();
        let mut v6 = vec![0u8; 14 + 40 + 8 + 8];
        v6[12..14].copy_from_slice(&[0x86, 0xdd]);
        v6[14] = 0x60;
        v6[14 + 4..14 + 6].copy_from_slice(&16u16.to_be_bytes());
        v6[14 + 6] = 44;
        v6[14 + 8..14 + 12].copy_from_slice(&[1, 2, 3, 4]);
        v6[14 + 24..14 + 28].copy_from_slice(&[5, 6, 7, 8]);
        v6[14 + 40] = 17;
        v6[14 + 40 + 3] = 1;
        v6[14 + 40 + 4..14 + 40 + 8].copy_from_slice(&9u32.to_be_bytes());
        let f6 = FlowFields::of_frame(LinkType::Ethernet, &v6, 0).unwrap();
        assert_eq!((f4.src, f4.dst, f4.proto), (f6.src, f6.dst, f6.proto));
        let k4 = f4.datagram(0).unwrap();
        let k6 = f6.datagram(0).unwrap();
        assert_eq!((k4.ident, k6.ident), (9, 9));
        assert_ne!(k4, k6);
        assert_ne!(k4.hash64(), k6.hash64());
        let tagged = FlowFields { vlan: 7, ..f4 }.datagram(0).unwrap();
        assert_ne!(tagged, k4);
        assert_ne!(tagged.hash64(), k4.hash64());
        assert_ne!(f4.datagram(1).unwrap().hash64(), k4.hash64());
        assert_eq!(f4.datagram(0), Some(k4));
        let whole = eth_ipv4_udp([1, 2, 3, 4], [5, 6, 7, 8], 0, 0, false);
        let whole = FlowFields::of_frame(LinkType::Ethernet, &whole, 0).unwrap();
        assert_eq!(whole.datagram(0), None);
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
            let _ = FlowFields::of_frame(LinkType::from_u16(lt), &buf, buf.len() as u32);
        }
    }
}
