//! Crypto-PAn: keyed, prefix-preserving anonymisation of IPv4 and IPv6 addresses (Xu, Fan,
//! Ammar, Moon, "Prefix-Preserving IP Address Anonymization", ICNP 2002), and its application to
//! the addresses in a captured frame and in a flow record.
//!
//! Two addresses that share their first `k` bits are mapped to two that share their first `k`
//! bits, and no more: subnets stay subnets. Bit `i` of the output is bit `i` of the input
//! XORed with the first bit of AES-128 (the key's first 16 bytes) applied to the input's first
//! `i` bits padded with the bits of the secret pad (AES of the key's last 16 bytes) after
//! them. The same 32-byte key gives the same mapping as the reference implementation and as
//! `nfanon` (nfdump). Output bit `i` depends only on input bits `0..=i`, so the bytes of an
//! address that a snap length cut short are not needed to anonymise the ones before them.
//!
//! [`Anonymizer`] rewrites frames in place: the source and destination of the outer IPv4 or
//! IPv6 header and of every header inside it (quoted in ICMP errors, carried by tunnels:
//! [`crate::inner`]), the sender and target of an Ethernet ARP packet, and every checksum over
//! them (RFC 1624 incremental update, for each checksum whose bytes were captured). A checksum
//! that was right stays right, one that was wrong (an outgoing packet's, left to the NIC) stays
//! wrong by as much. Not rewritten: MAC addresses and payloads; what holds addresses the walk
//! cannot reach is counted ([`CryptoPan::unread`]).

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use aes::Aes128;
use aes::cipher::{Array, BlockCipherEncrypt, KeyInit};

use crate::LinkType;
use crate::bytes::get_u16;
use crate::flowrecord::FlowRecord;
use crate::inner::{self, AddressMap, Unread};
use crate::link::{self, NetworkProto};

/// Bytes of a Crypto-PAn key: 16 for the AES key, then 16 that make the pad.
pub const KEY_LEN: usize = 32;

/// The keyed, prefix-preserving address mapping. Its clones share one tally of the packets
/// whose addresses [`Anonymizer::frame`] could not all reach ([`CryptoPan::unread`]).
#[derive(Clone)]
pub struct CryptoPan {
    aes: Aes128,
    pad: [u8; 16],
    unread: Arc<[AtomicU64; Unread::ALL.len()]>,
}

impl std::fmt::Debug for CryptoPan {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Neither the key nor the pad is shown.
        f.write_str("CryptoPan")
    }
}

impl CryptoPan {
    /// The mapping for `key`.
    pub fn new(key: &[u8; KEY_LEN]) -> CryptoPan {
        let mut k = [0u8; 16];
        k.copy_from_slice(&key[..16]);
        let aes = Aes128::new(&Array::from(k));
        let mut pad = Array::from([0u8; 16]);
        pad.copy_from_slice(&key[16..]);
        aes.encrypt_block(&mut pad);
        CryptoPan {
            aes,
            pad: pad.into(),
            unread: Arc::default(),
        }
    }

    /// Packets with headers whose addresses were left as they were, per kind of
    /// [`Unread::ALL`], counted by every [`Anonymizer`] made from this mapping or a clone.
    pub fn unread(&self) -> [(Unread, u64); Unread::ALL.len()] {
        Unread::ALL.map(|k| (k, self.unread[k.index()].load(Ordering::Relaxed)))
    }

    /// The one-time pad of `addr` (`N` bytes, 4 or 16): bit `i` from the prefix of length `i`.
    /// The `8 * N` encryptions are independent and go to AES as one batch (pipelined by the
    /// CPU's AES instructions where it has them).
    fn pad_of<const N: usize>(&self, addr: &[u8; N]) -> [u8; N] {
        let mut blocks = [Array::from([0u8; 16]); 128];
        let blocks = &mut blocks[..N * 8];
        for (pos, block) in blocks.iter_mut().enumerate() {
            let (whole, bits) = (pos / 8, pos % 8);
            let mut b = self.pad;
            b[..whole].copy_from_slice(&addr[..whole]);
            // The first `bits` bits of the address byte, the rest from the pad.
            let keep = !(0xffu8.checked_shr(bits as u32).unwrap_or(0));
            b[whole] = (addr[whole] & keep) | (self.pad[whole] & !keep);
            *block = Array::from(b);
        }
        self.aes.encrypt_blocks(blocks);
        let mut otp = [0u8; N];
        for (pos, block) in blocks.iter().enumerate() {
            otp[pos / 8] |= (block[0] >> 7) << (7 - pos % 8);
        }
        otp
    }

    /// The anonymised IPv4 address.
    pub fn ipv4(&self, addr: [u8; 4]) -> [u8; 4] {
        let otp = self.pad_of(&addr);
        std::array::from_fn(|i| addr[i] ^ otp[i])
    }

    /// The anonymised IPv6 address (the same construction over 128 bits).
    pub fn ipv6(&self, addr: [u8; 16]) -> [u8; 16] {
        let otp = self.pad_of(&addr);
        std::array::from_fn(|i| addr[i] ^ otp[i])
    }
}

/// Recently anonymised IPv4 addresses kept (direct-mapped, a power of two).
const V4_SLOTS: usize = 1 << 12;
/// Recently anonymised IPv6 addresses kept.
const V6_SLOTS: usize = 1 << 10;

/// A [`CryptoPan`] with a cache of the addresses it mapped last, and what applies it to frames
/// and flow records. Made once per thread; after that nothing allocates.
#[derive(Clone)]
pub struct Anonymizer {
    pan: CryptoPan,
    /// (address, mapped address) per slot; an address is in at most one slot.
    v4: Box<[Slot<4>]>,
    v6: Box<[Slot<16>]>,
}

impl std::fmt::Debug for Anonymizer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Anonymizer")
    }
}

/// A cache slot: an address of `N` bytes and its image, if filled.
type Slot<const N: usize> = Option<([u8; N], [u8; N])>;

/// A slot index from an address: the Fibonacci hash of its last 8 bytes.
#[inline]
fn slot(addr: &[u8], slots: usize) -> usize {
    let mut tail = [0u8; 8];
    let n = addr.len().min(8);
    tail[8 - n..].copy_from_slice(&addr[addr.len() - n..]);
    let h = u64::from_be_bytes(tail).wrapping_mul(0x9e37_79b9_7f4a_7c15);
    (h >> (64 - slots.trailing_zeros())) as usize
}

impl Anonymizer {
    /// An anonymiser with an empty cache.
    pub fn new(pan: CryptoPan) -> Anonymizer {
        Anonymizer {
            pan,
            v4: vec![None; V4_SLOTS].into_boxed_slice(),
            v6: vec![None; V6_SLOTS].into_boxed_slice(),
        }
    }

    /// [`CryptoPan::ipv4`], from the cache when the address was seen lately.
    #[inline]
    pub fn ipv4(&mut self, addr: [u8; 4]) -> [u8; 4] {
        let s = &mut self.v4[slot(&addr, V4_SLOTS)];
        match s {
            Some((a, m)) if *a == addr => *m,
            _ => {
                let m = self.pan.ipv4(addr);
                *s = Some((addr, m));
                m
            }
        }
    }

    /// [`CryptoPan::ipv6`], from the cache when the address was seen lately.
    #[inline]
    pub fn ipv6(&mut self, addr: [u8; 16]) -> [u8; 16] {
        let s = &mut self.v6[slot(&addr, V6_SLOTS)];
        match s {
            Some((a, m)) if *a == addr => *m,
            _ => {
                let m = self.pan.ipv6(addr);
                *s = Some((addr, m));
                m
            }
        }
    }

    /// Rewrites the address bytes `b` (4 or 16 bytes of an address, or its first bytes if the
    /// capture cut it) in place.
    fn rewrite(&mut self, b: &mut [u8], v6: bool) {
        if v6 {
            let mut a = [0u8; 16];
            a[..b.len()].copy_from_slice(b);
            let m = self.ipv6(a);
            b.copy_from_slice(&m[..b.len()]);
        } else {
            let mut a = [0u8; 4];
            a[..b.len()].copy_from_slice(b);
            let m = self.ipv4(a);
            b.copy_from_slice(&m[..b.len()]);
        }
    }

    /// Anonymises the addresses of a flow record.
    pub fn flow_record(&mut self, r: &mut FlowRecord) {
        let n = if r.ipv6 { 16 } else { 4 };
        for a in [&mut r.src, &mut r.dst] {
            let v6 = r.ipv6;
            self.rewrite(&mut a[..n], v6);
        }
    }

    /// Rewrites the addresses in `frame` (captured with link type `linktype`, perhaps cut
    /// short), those of the headers inside it ([`inner::rewrite`]) and the checksums over them,
    /// in place. Returns whether there was an outer address to rewrite; counts the frame in
    /// [`CryptoPan::unread`] if it holds addresses the walk could not reach. Never panics; no
    /// allocation.
    pub fn frame(&mut self, linktype: LinkType, frame: &mut [u8]) -> bool {
        let Some(l3) = link::network_layer(linktype, frame) else {
            if self.arp(linktype, frame) {
                return true;
            }
            if inner::unread_link(linktype, frame) {
                self.pan.unread[Unread::Link.index()].fetch_add(1, Ordering::Relaxed);
            }
            return false;
        };
        let walked = inner::rewrite(frame, l3.offset, l3.proto == NetworkProto::Ipv6, self);
        if let Some(k) = walked.unread {
            self.pan.unread[k.index()].fetch_add(1, Ordering::Relaxed);
        }
        walked.outer
    }

    /// An Ethernet ARP packet for IPv4: the sender's and the target's protocol addresses.
    fn arp(&mut self, linktype: LinkType, frame: &mut [u8]) -> bool {
        const ETH_P_ARP: u16 = 0x0806;
        if linktype != LinkType::Ethernet || get_u16(frame, 12) != Some(ETH_P_ARP) {
            return false;
        }
        let arp = &mut frame[14..];
        // Ethernet hardware (1), IPv4 protocol, 6- and 4-byte addresses.
        if arp.get(..6) != Some(&[0, 1, 8, 0, 6, 4]) {
            return false;
        }
        for at in [14usize, 24] {
            let end = arp.len().min(at + 4);
            if let Some(a) = arp.get_mut(at..end).filter(|a| !a.is_empty()) {
                self.rewrite(a, false);
            }
        }
        true
    }
}

impl AddressMap for Anonymizer {
    fn ipv4(&mut self, addr: [u8; 4]) -> [u8; 4] {
        Anonymizer::ipv4(self, addr)
    }

    fn ipv6(&mut self, addr: [u8; 16]) -> [u8; 16] {
        Anonymizer::ipv6(self, addr)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::build::{self, FrameSpec, L4};
    use crate::checksum;
    use crate::ethernet::EthernetAddress;
    use core::net::{IpAddr, Ipv4Addr, Ipv6Addr};
    use proptest::prelude::*;

    /// The key of the sample in the Crypto-PAn 1.0 distribution (Fan, Georgia Tech, 2002).
    const REFERENCE_KEY: [u8; 32] = [
        21, 34, 23, 141, 51, 164, 207, 128, 19, 10, 91, 22, 73, 144, 125, 16, 216, 152, 143, 131,
        121, 121, 101, 39, 98, 87, 76, 45, 42, 132, 34, 2,
    ];

    /// Every distinct address pair of the distribution's `sample_trace_raw.dat` and
    /// `sample_trace_sanitized.dat` (as collected in Yawning Angel's Go port, cryptopan_test.go).
    const REFERENCE_V4: [(&str, &str); 71] = [
        ("128.11.68.132", "135.242.180.132"),
        ("129.118.74.4", "134.136.186.123"),
        ("130.132.252.244", "133.68.164.234"),
        ("141.223.7.43", "141.167.8.160"),
        ("141.233.145.108", "141.129.237.235"),
        ("152.163.225.39", "151.140.114.167"),
        ("156.29.3.236", "147.225.12.42"),
        ("165.247.96.84", "162.9.99.234"),
        ("166.107.77.190", "160.132.178.185"),
        ("192.102.249.13", "252.138.62.131"),
        ("192.215.32.125", "252.43.47.189"),
        ("192.233.80.103", "252.25.108.8"),
        ("192.41.57.43", "252.222.221.184"),
        ("193.150.244.223", "253.169.52.216"),
        ("195.205.63.100", "255.186.223.5"),
        ("198.200.171.101", "249.199.68.213"),
        ("198.26.132.101", "249.36.123.202"),
        ("198.36.213.5", "249.7.21.132"),
        ("198.51.77.238", "249.18.186.254"),
        ("199.217.79.101", "248.38.184.213"),
        ("202.49.198.20", "245.206.7.234"),
        ("203.12.160.252", "244.248.163.4"),
        ("204.184.162.189", "243.192.77.90"),
        ("204.202.136.230", "243.178.4.198"),
        ("204.29.20.4", "243.33.20.123"),
        ("205.178.38.67", "242.108.198.51"),
        ("205.188.147.153", "242.96.16.101"),
        ("205.188.248.25", "242.96.88.27"),
        ("205.245.121.43", "242.21.121.163"),
        ("207.105.49.5", "241.118.205.138"),
        ("207.135.65.238", "241.202.129.222"),
        ("207.155.9.214", "241.220.250.22"),
        ("207.188.7.45", "241.255.249.220"),
        ("207.25.71.27", "241.33.119.156"),
        ("207.33.151.131", "241.1.233.131"),
        ("208.147.89.59", "227.237.98.191"),
        ("208.234.120.210", "227.154.67.17"),
        ("208.28.185.184", "227.39.94.90"),
        ("208.52.56.122", "227.8.63.165"),
        ("209.12.231.7", "226.243.167.8"),
        ("209.238.72.3", "226.6.119.243"),
        ("209.246.74.109", "226.22.124.76"),
        ("209.68.60.238", "226.184.220.233"),
        ("209.85.249.6", "226.170.70.6"),
        ("212.120.124.31", "228.135.163.231"),
        ("212.146.8.236", "228.19.4.234"),
        ("212.186.227.154", "228.59.98.98"),
        ("212.204.172.118", "228.71.195.169"),
        ("212.206.130.201", "228.69.242.193"),
        ("216.148.237.145", "235.84.194.111"),
        ("216.157.30.252", "235.89.31.26"),
        ("216.184.159.48", "235.96.225.78"),
        ("216.227.10.221", "235.28.253.36"),
        ("216.254.18.172", "235.7.16.162"),
        ("216.32.132.250", "235.192.139.38"),
        ("216.35.217.178", "235.195.157.81"),
        ("24.0.250.221", "100.15.198.226"),
        ("24.13.62.231", "100.2.192.247"),
        ("24.14.213.138", "100.1.42.141"),
        ("24.5.0.80", "100.9.15.210"),
        ("24.7.198.88", "100.10.6.25"),
        ("24.94.26.44", "100.88.228.35"),
        ("38.15.67.68", "64.3.66.187"),
        ("4.3.88.225", "124.60.155.63"),
        ("63.14.55.111", "95.9.215.7"),
        ("63.195.241.44", "95.179.238.44"),
        ("63.97.7.140", "95.97.9.123"),
        ("64.14.118.196", "0.255.183.58"),
        ("64.34.154.117", "0.221.154.117"),
        ("64.39.15.238", "0.219.7.41"),
        ("10.185.25.118", "117.161.29.118"),
    ];

    #[test]
    fn the_reference_sample_maps_as_published() {
        let pan = CryptoPan::new(&REFERENCE_KEY);
        let mut cached = Anonymizer::new(pan.clone());
        for (raw, sanitized) in REFERENCE_V4 {
            let a: Ipv4Addr = raw.parse().unwrap();
            let want: Ipv4Addr = sanitized.parse().unwrap();
            assert_eq!(Ipv4Addr::from(pan.ipv4(a.octets())), want, "{raw}");
            // Twice through the cache: computed, then remembered.
            assert_eq!(Ipv4Addr::from(cached.ipv4(a.octets())), want, "{raw}");
            assert_eq!(Ipv4Addr::from(cached.ipv4(a.octets())), want, "{raw}");
        }
    }

    /// IPv6 with the same key, from the Go port (the construction above over 128 bits).
    #[test]
    fn ipv6_maps_as_the_go_port_does() {
        let pan = CryptoPan::new(&REFERENCE_KEY);
        for (raw, want) in [
            ("::1", "78ff:f001:9fc0:20df:8380:b1f1:704:ed"),
            ("::2", "78ff:f001:9fc0:20df:8380:b1f1:704:ef"),
            ("::ffff", "78ff:f001:9fc0:20df:8380:b1f1:704:f838"),
            ("2001:db8::1", "4401:2bc:603f:d91d:27f:ff8e:e6f1:dc1e"),
            ("2001:db8::2", "4401:2bc:603f:d91d:27f:ff8e:e6f1:dc1c"),
        ] {
            let a: Ipv6Addr = raw.parse().unwrap();
            assert_eq!(
                Ipv6Addr::from(pan.ipv6(a.octets())),
                want.parse::<Ipv6Addr>().unwrap()
            );
        }
    }

    fn common_prefix(a: &[u8], b: &[u8]) -> u32 {
        let x = u128::from_be_bytes(pad16(a)) ^ u128::from_be_bytes(pad16(b));
        x.leading_zeros().min(a.len() as u32 * 8)
    }

    fn pad16(a: &[u8]) -> [u8; 16] {
        let mut p = [0u8; 16];
        p[..a.len()].copy_from_slice(a);
        p
    }

    proptest! {
        #[test]
        fn prefixes_are_kept_exactly(key in any::<[u8; 32]>(), a in any::<[u8; 16]>(), b in any::<[u8; 16]>(), k in 0usize..128) {
            let pan = CryptoPan::new(&key);
            // b shares exactly k bits with a (unless k is 128).
            let mut b = u128::from_be_bytes(b);
            let a128 = u128::from_be_bytes(a);
            let mask = if k == 0 { 0 } else { !0u128 << (128 - k) };
            b = (a128 & mask) | (b & !mask);
            b ^= 1u128 << (127 - k);
            let b = b.to_be_bytes();
            let (ma, mb) = (pan.ipv6(a), pan.ipv6(b));
            prop_assert_eq!(common_prefix(&ma, &mb), common_prefix(&a, &b));
            let (a4, b4): ([u8; 4], [u8; 4]) = (a[..4].try_into().unwrap(), b[..4].try_into().unwrap());
            prop_assert_eq!(common_prefix(&pan.ipv4(a4), &pan.ipv4(b4)), common_prefix(&a4, &b4));
        }
    }

    fn frame(src: IpAddr, dst: IpAddr, proto: L4) -> Vec<u8> {
        let spec = FrameSpec {
            src_mac: EthernetAddress([2, 0, 0, 0, 0, 1]),
            dst_mac: EthernetAddress([2, 0, 0, 0, 0, 2]),
            src_ip: src,
            dst_ip: dst,
            proto,
            src_port: 40000,
            dst_port: 53,
            frame_len: 120,
        };
        let mut buf = vec![0u8; 120];
        build::build(&spec, &mut buf).unwrap();
        buf
    }

    /// Whether the IPv4 header and the transport checksum of an Ethernet frame verify.
    fn checksums_hold(f: &[u8]) -> bool {
        let ip = &f[14..];
        let (v6, l4_at) = (ip[0] >> 4 == 6, if ip[0] >> 4 == 6 { 40 } else { 20 });
        let pseudo = if v6 {
            checksum::pseudo_header_v6(
                Ipv6Addr::from(<[u8; 16]>::try_from(&ip[8..24]).unwrap()),
                Ipv6Addr::from(<[u8; 16]>::try_from(&ip[24..40]).unwrap()),
                ip[6],
                (ip.len() - 40) as u32,
            )
        } else {
            if !checksum::is_valid(checksum::sum(&ip[..20])) {
                return false;
            }
            checksum::pseudo_header_v4(
                Ipv4Addr::from(<[u8; 4]>::try_from(&ip[12..16]).unwrap()),
                Ipv4Addr::from(<[u8; 4]>::try_from(&ip[16..20]).unwrap()),
                ip[9],
                (ip.len() - 20) as u16,
            )
        };
        checksum::is_valid(checksum::combine(pseudo, checksum::sum(&ip[l4_at..])))
    }

    #[test]
    fn frames_get_new_addresses_and_checksums_that_still_verify() {
        let mut anon = Anonymizer::new(CryptoPan::new(&REFERENCE_KEY));
        let v4 = |s: &str| IpAddr::V4(s.parse().unwrap());
        let v6 = |s: &str| IpAddr::V6(s.parse().unwrap());
        for (src, dst) in [
            (v4("128.11.68.132"), v4("10.185.25.118")),
            (v6("2001:db8::1"), v6("fe80::2")),
        ] {
            for proto in [L4::Udp, L4::Tcp] {
                let mut f = frame(src, dst, proto);
                assert!(checksums_hold(&f));
                let before = f.clone();
                assert!(anon.frame(LinkType::Ethernet, &mut f));
                assert!(checksums_hold(&f), "{src} {proto:?}");
                let (a, n) = if src.is_ipv4() { (26, 4) } else { (22, 16) };
                assert_ne!(f[a..a + n], before[a..a + n]);
                if src == v4("128.11.68.132") {
                    assert_eq!(f[26..34], [135, 242, 180, 132, 117, 161, 29, 118]);
                }
                // The payload is untouched.
                assert_eq!(f[f.len() - 20..], before[before.len() - 20..]);
            }
        }
    }

    #[test]
    fn a_frame_cut_inside_an_address_keeps_the_prefix_of_its_mapping() {
        let mut anon = Anonymizer::new(CryptoPan::new(&REFERENCE_KEY));
        let full = frame(
            IpAddr::V4("128.11.68.132".parse().unwrap()),
            IpAddr::V4("10.185.25.118".parse().unwrap()),
            L4::Udp,
        );
        let mut whole = full.clone();
        anon.frame(LinkType::Ethernet, &mut whole);
        for cut in 0..full.len() {
            let mut f = full[..cut].to_vec();
            let any = anon.frame(LinkType::Ethernet, &mut f);
            assert_eq!(any, cut > 26, "cut at {cut}");
            // Every captured address byte is what the whole frame's would be.
            let end = cut.min(34);
            if end > 26 {
                assert_eq!(f[26..end], whole[26..end], "cut at {cut}");
            }
        }
    }

    #[test]
    fn arp_addresses_are_rewritten_and_zero_udp_checksums_stay_zero() {
        let mut anon = Anonymizer::new(CryptoPan::new(&REFERENCE_KEY));
        let mut arp = vec![0xffu8; 6];
        arp.extend_from_slice(&[2, 0, 0, 0, 0, 1, 0x08, 0x06, 0, 1, 8, 0, 6, 4, 0, 1]);
        arp.extend_from_slice(&[2, 0, 0, 0, 0, 1, 128, 11, 68, 132]);
        arp.extend_from_slice(&[0, 0, 0, 0, 0, 0, 10, 185, 25, 118]);
        assert!(anon.frame(LinkType::Ethernet, &mut arp));
        assert_eq!(arp[28..32], [135, 242, 180, 132]);
        assert_eq!(arp[38..42], [117, 161, 29, 118]);

        let mut f = frame(
            IpAddr::V4("128.11.68.132".parse().unwrap()),
            IpAddr::V4("10.185.25.118".parse().unwrap()),
            L4::Udp,
        );
        f[40..42].copy_from_slice(&[0, 0]);
        anon.frame(LinkType::Ethernet, &mut f);
        assert_eq!(f[40..42], [0, 0]);
        assert!(checksum::is_valid(checksum::sum(&f[14..34])));
    }

    #[test]
    fn flow_records_get_the_same_mapping_as_frames() {
        let mut anon = Anonymizer::new(CryptoPan::new(&REFERENCE_KEY));
        let mut r = FlowRecord {
            ipv6: false,
            proto: 17,
            src: pad16(&[24, 5, 0, 80]),
            dst: pad16(&[4, 3, 88, 225]),
            sport: 1,
            dport: 2,
            vlan: 0,
            interface: 0,
            fwd: Default::default(),
            rev: Default::default(),
            end_reason: Default::default(),
        };
        anon.flow_record(&mut r);
        assert_eq!(r.src[..4], [100, 9, 15, 210]);
        assert_eq!(r.dst[..4], [124, 60, 155, 63]);
        assert_eq!(r.src[4..], [0; 12]);
    }

    proptest! {
        #[test]
        fn any_bytes_are_taken_without_a_panic(data in proptest::collection::vec(any::<u8>(), 0..200), lt in 0u16..300) {
            let mut anon = Anonymizer::new(CryptoPan::new(&REFERENCE_KEY));
            let mut d = data.clone();
            anon.frame(LinkType::from(lt), &mut d);
            prop_assert_eq!(d.len(), data.len());
        }
    }
}
