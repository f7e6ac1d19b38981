//! Finding the IP header behind any supported link layer.
//!
//! [`network_layer`] runs once per packet: it only reads the few bytes that say what comes next,
//! never allocates and gives `None` for anything it does not recognise or that is cut short.

use crate::LinkType;
use crate::bytes::{get_u16, read_u16_as, read_u32, read_u32_as};

/// Which IP version starts at [`NetworkLayer::offset`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum NetworkProto {
    /// IPv4.
    Ipv4,
    /// IPv6.
    Ipv6,
}

/// Where the IP header of a frame starts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct NetworkLayer {
    /// Offset of the IP header from the start of the frame (at most the frame length).
    pub offset: usize,
    /// The IP version the link layer announced.
    pub proto: NetworkProto,
    /// The outermost VLAN ID (low 12 bits of the first tag's TCI), if any.
    pub vlan: Option<u16>,
}

/// VLAN tags followed before giving up.
pub const MAX_VLAN_TAGS: usize = 8;

/// NFLOG TLVs followed before giving up.
pub const MAX_NFLOG_TLVS: usize = 32;

pub(crate) const ETH_P_IP: u16 = 0x0800;
const ETH_P_IPV6: u16 = 0x86dd;
const ETH_P_8021Q: u16 = 0x8100;
const ETH_P_8021AD: u16 = 0x88a8;
const ETH_P_QINQ1: u16 = 0x9100;
const ETH_P_MPLS_UC: u16 = 0x8847;
const ETH_P_MPLS_MC: u16 = 0x8848;
const ETH_P_PPP_SES: u16 = 0x8864;

const PPP_IP: u16 = 0x0021;
const PPP_IPV6: u16 = 0x0057;

const SLL_HDR_LEN: usize = 16;
const SLL2_HDR_LEN: usize = 20;
const NFLOG_HDR_LEN: usize = 4;
const NFULA_PAYLOAD: u16 = 9;
const AF_INET: u8 = 2;
const AF_INET6_LINUX: u8 = 10;

#[inline(always)]
fn found(offset: usize, proto: NetworkProto, vlan: Option<u16>) -> Option<NetworkLayer> {
    Some(NetworkLayer {
        offset,
        proto,
        vlan,
    })
}

/// Locates the IP header in `frame`, captured with link type `linktype`.
///
/// Understands Ethernet (with any stack of 802.1Q/802.1ad/0x9100 tags, MPLS label stacks and
/// PPPoE sessions), Linux cooked v1/v2, raw IP, BSD/OpenBSD loopback, PPP and NFLOG. The
/// returned offset is at most `frame.len()`: the IP header itself may be missing.
#[inline(always)]
pub fn network_layer(linktype: LinkType, frame: &[u8]) -> Option<NetworkLayer> {
    // Untagged Ethernet carrying IPv4, most frames, without a call or a walk; the same answer
    // as the walk gives.
    if linktype == LinkType::Ethernet && get_u16(frame, 12) == Some(ETH_P_IP) {
        return found(14, NetworkProto::Ipv4, None);
    }
    walk(linktype, frame)
}

/// [`network_layer`] for every link type and encapsulation.
#[inline(never)]
fn walk(linktype: LinkType, frame: &[u8]) -> Option<NetworkLayer> {
    match linktype {
        LinkType::Ethernet => ethertype(frame, get_u16(frame, 12)?, 14, None),
        LinkType::LinuxSll => ethertype(frame, get_u16(frame, 14)?, SLL_HDR_LEN, None),
        LinkType::LinuxSll2 => ethertype(frame, get_u16(frame, 0)?, SLL2_HDR_LEN, None),
        LinkType::Raw => by_version(frame, 0, None),
        LinkType::Ipv4 => found(0, NetworkProto::Ipv4, None),
        LinkType::Ipv6 => found(0, NetworkProto::Ipv6, None),
        LinkType::Null => {
            let b = frame.get(..4)?;
            let le = read_u32_as(false, b);
            // Host order of the capturing machine: a value that only fits when swapped is
            // big-endian.
            let af = if le > 0xffff { le.swap_bytes() } else { le };
            bsd_af(af, 4)
        }
        LinkType::Loop => {
            let b = frame.get(..4)?;
            bsd_af(read_u32(b), 4)
        }
        LinkType::Ppp => {
            let off = if frame.starts_with(&[0xff, 0x03]) {
                2
            } else {
                0
            };
            ppp(frame, off, None)
        }
        LinkType::Nflog => nflog(frame),
        LinkType::Unknown(_) => None,
    }
}

/// Follows an EtherType whose payload starts at `off`.
#[inline]
fn ethertype(b: &[u8], mut et: u16, mut off: usize, mut vlan: Option<u16>) -> Option<NetworkLayer> {
    for _ in 0..=MAX_VLAN_TAGS {
        match et {
            ETH_P_IP => return payload(b, off, NetworkProto::Ipv4, vlan),
            ETH_P_IPV6 => return payload(b, off, NetworkProto::Ipv6, vlan),
            ETH_P_8021Q | ETH_P_8021AD | ETH_P_QINQ1 => {
                let tci = get_u16(b, off)?;
                vlan = vlan.or(Some(tci & 0x0fff));
                et = get_u16(b, off + 2)?;
                off += 4;
            }
            ETH_P_MPLS_UC | ETH_P_MPLS_MC => return mpls(b, off, vlan),
            ETH_P_PPP_SES => return ppp(b, off + 6, vlan),
            _ => return None,
        }
    }
    None
}

#[inline(always)]
fn payload(b: &[u8], off: usize, proto: NetworkProto, vlan: Option<u16>) -> Option<NetworkLayer> {
    if off <= b.len() {
        found(off, proto, vlan)
    } else {
        None
    }
}

/// Walks an MPLS label stack to its bottom-of-stack bit, however deep (each label takes 4 of
/// the captured bytes, so the walk ends with them), and guesses the payload from its version
/// nibble.
#[inline]
fn mpls(b: &[u8], mut off: usize, vlan: Option<u16>) -> Option<NetworkLayer> {
    loop {
        let entry = b.get(off..off + 4)?;
        off += 4;
        if entry[2] & 0x01 != 0 {
            return by_version(b, off, vlan);
        }
    }
}

/// A PPP protocol field at `off` (2 bytes, or 1 if protocol-field-compressed).
#[inline]
fn ppp(b: &[u8], off: usize, vlan: Option<u16>) -> Option<NetworkLayer> {
    let first = *b.get(off)?;
    let (proto, len) = if first & 1 != 0 {
        (u16::from(first), 1)
    } else {
        (get_u16(b, off)?, 2)
    };
    match proto {
        PPP_IP => payload(b, off + len, NetworkProto::Ipv4, vlan),
        PPP_IPV6 => payload(b, off + len, NetworkProto::Ipv6, vlan),
        _ => None,
    }
}

/// The IP version nibble at `off`.
#[inline]
fn by_version(b: &[u8], off: usize, vlan: Option<u16>) -> Option<NetworkLayer> {
    match b.get(off)? >> 4 {
        4 => found(off, NetworkProto::Ipv4, vlan),
        6 => found(off, NetworkProto::Ipv6, vlan),
        _ => None,
    }
}

/// A BSD address family value (`AF_INET` 2; `AF_INET6` 24, 28 or 30 depending on the BSD).
#[inline]
fn bsd_af(af: u32, off: usize) -> Option<NetworkLayer> {
    match af {
        2 => found(off, NetworkProto::Ipv4, None),
        24 | 28 | 30 => found(off, NetworkProto::Ipv6, None),
        _ => None,
    }
}

/// An NFLOG message: a 4-byte header then little-endian, 4-aligned TLVs; the packet is in
/// `NFULA_PAYLOAD`.
#[inline]
fn nflog(b: &[u8]) -> Option<NetworkLayer> {
    let family = *b.first()?;
    let mut off = NFLOG_HDR_LEN;
    for _ in 0..MAX_NFLOG_TLVS {
        let h = b.get(off..off + 4)?;
        let len = usize::from(read_u16_as(false, h));
        let ty = read_u16_as(false, &h[2..]) & 0x7fff;
        if ty == NFULA_PAYLOAD {
            let start = off + 4;
            return match family {
                AF_INET => payload(b, start, NetworkProto::Ipv4, None),
                AF_INET6_LINUX => payload(b, start, NetworkProto::Ipv6, None),
                _ => by_version(b, start, None),
            };
        }
        if len < 4 {
            return None;
        }
        off += (len + 3) & !3;
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        /// The shortcut for untagged Ethernet + IPv4 answers as the walk does.
        #[test]
        fn the_ethernet_ipv4_shortcut_agrees_with_the_walk(
            mut frame in proptest::collection::vec(any::<u8>(), 0..40),
            linktype in prop::sample::select(vec![
                LinkType::Ethernet, LinkType::Ethernet, LinkType::LinuxSll, LinkType::LinuxSll2,
                LinkType::Raw, LinkType::Null, LinkType::Ppp,
            ]),
            et in prop::sample::select(vec![
                Some(ETH_P_IP), Some(ETH_P_IPV6), Some(ETH_P_8021Q), Some(0x0806), None,
            ]),
        ) {
            // The ethertype where Ethernet has it, and at the same place for the other link types.
            if let (Some(et), true) = (et, frame.len() >= 14) {
                frame[12..14].copy_from_slice(&et.to_be_bytes());
            }
            prop_assert_eq!(network_layer(linktype, &frame), walk(linktype, &frame));
        }
    }

    fn nl(offset: usize, proto: NetworkProto, vlan: Option<u16>) -> Option<NetworkLayer> {
        Some(NetworkLayer {
            offset,
            proto,
            vlan,
        })
    }
    use NetworkProto::{Ipv4 as V4, Ipv6 as V6};

    // zeek testing/btest/Traces/pppoe-over-qinq.pcap frame 1, cut after the IPv4 header:
    // VLAN 3704, VLAN 2474, PPPoE session 0x0f07, PPP IPv4, 1.1.1.1 -> 2.2.2.2 TCP.
    static PPPOE_QINQ: [u8; 50] = [
        0x00, 0x00, 0x00, 0x00, 0x00, 0x01, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x81, 0x00, 0x0e,
        0x78, 0x81, 0x00, 0x09, 0xaa, 0x88, 0x64, 0x11, 0x00, 0x0f, 0x07, 0x00, 0x42, 0x00, 0x21,
        0x45, 0x00, 0x00, 0x40, 0x00, 0x00, 0x40, 0x00, 0x3f, 0x06, 0x35, 0xb3, 0x01, 0x01, 0x01,
        0x01, 0x02, 0x02, 0x02, 0x02,
    ];

    // zeek testing/btest/Traces/mixed-vlan-mpls.pcap's first MPLS frame (label 29, bottom of
    // stack) with an 802.1ad tag (VLAN 100) and an 802.1Q tag (VLAN 200) inserted, and an extra
    // label (16) on top: QinQ + two-label MPLS + IPv4, cut after the IPv4 header.
    static QINQ_MPLS: [u8; 46] = [
        0x00, 0x30, 0x96, 0xe6, 0xfc, 0x39, 0x00, 0x30, 0x96, 0x05, 0x28, 0x38, // MACs
        0x88, 0xa8, 0x00, 0x64, 0x81, 0x00, 0x00, 0xc8, 0x88, 0x47, // S-tag, C-tag, MPLS
        0x00, 0x01, 0x00, 0xff, 0x00, 0x01, 0xdd, 0xff, // labels 16, 29 (S)
        0x45, 0xc0, 0x00, 0x2c, 0x00, 0x00, 0x00, 0x00, 0xff, 0x06, 0xa4, 0xe7, 0x0a, 0x01, 0x02,
        0x01,
    ];

    #[test]
    fn pppoe_over_qinq() {
        assert_eq!(
            network_layer(LinkType::Ethernet, &PPPOE_QINQ),
            nl(30, V4, Some(3704))
        );
        // Cut inside the PPP protocol field.
        assert_eq!(network_layer(LinkType::Ethernet, &PPPOE_QINQ[..29]), None);
    }

    #[test]
    fn qinq_mpls() {
        assert_eq!(
            network_layer(LinkType::Ethernet, &QINQ_MPLS),
            nl(30, V4, Some(100))
        );
        // The guess needs the version nibble.
        assert_eq!(network_layer(LinkType::Ethernet, &QINQ_MPLS[..30]), None);
        // No bottom of stack within the capture.
        assert_eq!(network_layer(LinkType::Ethernet, &QINQ_MPLS[..28]), None);
        let mut b = QINQ_MPLS;
        b[30] = 0x00; // pseudowire control word: not IP
        assert_eq!(network_layer(LinkType::Ethernet, &b), None);
    }

    /// An Ethernet frame: `labels` MPLS labels (the last with the bottom-of-stack bit, unless
    /// `bottom` is false), then `ip`.
    fn mpls_frame(labels: usize, bottom: bool, ip: &[u8]) -> Vec<u8> {
        let mut f = vec![0u8; 12];
        f.extend_from_slice(&[0x88, 0x47]);
        for i in 0..labels {
            let s = u8::from(bottom && i + 1 == labels);
            f.extend_from_slice(&[0x00, 0x01, s, 0x40]);
        }
        f.extend_from_slice(ip);
        f
    }

    #[test]
    fn a_label_stack_is_walked_to_its_bottom_however_deep() {
        let v4 = [0x45, 0, 0, 20];
        let v6 = [0x60, 0, 0, 0];
        for labels in [1, 16, 17, 20, 100, 1000] {
            let at = 14 + 4 * labels;
            assert_eq!(
                network_layer(LinkType::Ethernet, &mpls_frame(labels, true, &v4)),
                nl(at, V4, None),
                "{labels} labels"
            );
            assert_eq!(
                network_layer(LinkType::Ethernet, &mpls_frame(labels, true, &v6)),
                nl(at, V6, None),
                "{labels} labels"
            );
            // No bottom of stack before the capture ends: not IP.
            let f = mpls_frame(labels, false, &[]);
            assert_eq!(network_layer(LinkType::Ethernet, &f), None);
            assert_eq!(network_layer(LinkType::Ethernet, &f[..f.len() - 1]), None);
        }
        // Under 802.1Q, and cut inside the last label.
        let mut f = mpls_frame(20, true, &v4);
        f.splice(12..12, [0x81, 0x00, 0x00, 0x07]);
        assert_eq!(network_layer(LinkType::Ethernet, &f), nl(98, V4, Some(7)));
        assert_eq!(network_layer(LinkType::Ethernet, &f[..97]), None);
    }

    #[test]
    fn plain_ethernet_and_vlan() {
        let mut b = [0u8; 60];
        b[12..14].copy_from_slice(&[0x86, 0xdd]);
        assert_eq!(network_layer(LinkType::Ethernet, &b), nl(14, V6, None));
        assert_eq!(
            network_layer(LinkType::Ethernet, &b[..14]),
            nl(14, V6, None)
        );
        assert_eq!(network_layer(LinkType::Ethernet, &b[..13]), None);
        b[12..18].copy_from_slice(&[0x91, 0x00, 0xf0, 0x05, 0x08, 0x00]);
        assert_eq!(network_layer(LinkType::Ethernet, &b), nl(18, V4, Some(5)));
        b[12..14].copy_from_slice(&[0x08, 0x06]); // ARP
        assert_eq!(network_layer(LinkType::Ethernet, &b), None);
        // An endless VLAN stack stops.
        let tags: Vec<u8> = (0..40).flat_map(|_| [0x81, 0x00]).collect();
        let f = [&[0u8; 12][..], &tags].concat();
        assert_eq!(network_layer(LinkType::Ethernet, &f), None);
    }

    #[test]
    fn cooked_captures() {
        // SLL: packet type, ARPHRD_ETHER, addr len 6, address, protocol IPv4.
        let mut sll = [0u8; 36];
        sll[..16].copy_from_slice(&[0, 0, 0, 1, 0, 6, 1, 2, 3, 4, 5, 6, 0, 0, 0x08, 0x00]);
        sll[16] = 0x45;
        assert_eq!(network_layer(LinkType::LinuxSll, &sll), nl(16, V4, None));
        sll[14..20].copy_from_slice(&[0x81, 0x00, 0x00, 0x07, 0x86, 0xdd]);
        assert_eq!(network_layer(LinkType::LinuxSll, &sll), nl(20, V6, Some(7)));
        // SLL2: protocol first.
        let mut sll2 = [0u8; 40];
        sll2[..2].copy_from_slice(&[0x86, 0xdd]);
        assert_eq!(network_layer(LinkType::LinuxSll2, &sll2), nl(20, V6, None));
        assert_eq!(network_layer(LinkType::LinuxSll2, &sll2[..19]), None);
    }

    #[test]
    fn raw_and_loopback() {
        assert_eq!(network_layer(LinkType::Raw, &[0x45, 0]), nl(0, V4, None));
        assert_eq!(network_layer(LinkType::Raw, &[0x60, 0]), nl(0, V6, None));
        assert_eq!(network_layer(LinkType::Raw, &[0x50, 0]), None);
        assert_eq!(network_layer(LinkType::Raw, &[]), None);
        assert_eq!(network_layer(LinkType::Ipv6, &[]), nl(0, V6, None));
        assert_eq!(
            network_layer(LinkType::Null, &[2, 0, 0, 0, 0x45]),
            nl(4, V4, None)
        );
        assert_eq!(
            network_layer(LinkType::Null, &[0, 0, 0, 2, 0x45]),
            nl(4, V4, None)
        );
        for af in [24u8, 28, 30] {
            assert_eq!(
                network_layer(LinkType::Null, &[af, 0, 0, 0]),
                nl(4, V6, None)
            );
            assert_eq!(
                network_layer(LinkType::Null, &[0, 0, 0, af]),
                nl(4, V6, None)
            );
            assert_eq!(
                network_layer(LinkType::Loop, &[0, 0, 0, af]),
                nl(4, V6, None)
            );
        }
        assert_eq!(network_layer(LinkType::Null, &[10, 0, 0, 0]), None);
        assert_eq!(network_layer(LinkType::Loop, &[2, 0, 0, 0]), None);
    }

    #[test]
    fn ppp() {
        assert_eq!(
            network_layer(LinkType::Ppp, &[0xff, 0x03, 0x00, 0x21]),
            nl(4, V4, None)
        );
        assert_eq!(
            network_layer(LinkType::Ppp, &[0x00, 0x57, 0x60]),
            nl(2, V6, None)
        );
        assert_eq!(network_layer(LinkType::Ppp, &[0x21, 0x45]), nl(1, V4, None));
        assert_eq!(network_layer(LinkType::Ppp, &[0xc0, 0x21, 0x01]), None); // LCP
    }

    #[test]
    fn nflog() {
        // AF_INET, version 0, resource 0; NFULA_PACKET_HDR (type 1, len 8); NFULA_PREFIX (type
        // 10, len 5, padded to 8); NFULA_PAYLOAD (type 9).
        let mut b = vec![2, 0, 0, 0];
        b.extend_from_slice(&[8, 0, 1, 0, 0x08, 0x00, 3, 0]);
        b.extend_from_slice(&[5, 0, 10, 0, b'x', 0, 0, 0]);
        b.extend_from_slice(&[24, 0, 9, 0]);
        b.extend_from_slice(&[0x45; 20]);
        assert_eq!(network_layer(LinkType::Nflog, &b), nl(24, V4, None));
        b[0] = 10;
        assert_eq!(network_layer(LinkType::Nflog, &b), nl(24, V6, None));
        b[0] = 0;
        assert_eq!(network_layer(LinkType::Nflog, &b), nl(24, V4, None));
        b[12] = 0; // zero-length TLV
        assert_eq!(network_layer(LinkType::Nflog, &b), None);
    }

    proptest! {
        #[test]
        fn never_panics(buf in proptest::collection::vec(any::<u8>(), 0..80), lt in 0u16..300) {
            if let Some(n) = network_layer(LinkType::from_u16(lt), &buf) {
                prop_assert!(n.offset <= buf.len());
            }
        }

        #[test]
        fn never_panics_on_ethernet_like(mut buf in proptest::collection::vec(any::<u8>(), 12..80),
                                         et in proptest::sample::select(vec![
                                             0x0800u16, 0x86dd, 0x8100, 0x88a8, 0x9100, 0x8847,
                                             0x8848, 0x8864])) {
            buf.splice(12..12, et.to_be_bytes());
            if let Some(n) = network_layer(LinkType::Ethernet, &buf) {
                prop_assert!(n.offset <= buf.len());
            }
        }
    }
}
