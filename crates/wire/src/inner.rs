//! Headers inside headers: the addresses of an IP packet and of every IP header inside it —
//! quoted in ICMP and ICMPv6 errors, or carried by a tunnel — rewritten in place, with every
//! checksum over a rewritten byte kept as right, or as wrong, as it was.
//!
//! [`rewrite`] walks from the outer IP header inward, one header at a time and at most
//! [`MAX_DEPTH`] below the outer one, without recursion. It follows ICMP errors (destination
//! unreachable, source quench, redirect, time exceeded, parameter problem) and ICMPv6 errors
//! (destination unreachable, packet too big, time exceeded, parameter problem); IPv4 and IPv6
//! in IPv4 or IPv6 (protocols 4 and 41: IP-in-IP, 6in4); GRE carrying IPv4, IPv6, Ethernet
//! (0x6558), ERSPAN types I, II and III, or Aruba's 802.11 frames; and over UDP, GTP-U (2152),
//! VXLAN (4789), Geneve (6081) and Teredo (3544, its origin indication included). An Ethernet
//! frame inside is read as [`link::network_layer`] reads an outer one (VLAN tags, MPLS, PPPoE),
//! and its ARP addresses are rewritten too. Besides the IP headers: the gateway of an ICMP
//! redirect and the target of an ICMPv6 neighbour solicitation or advertisement.
//!
//! Every checksum that covers a rewritten byte is updated incrementally (RFC 1624) when its own
//! bytes were captured, whether or not all it covers was: the IPv4 header checksums, the TCP,
//! UDP and ICMPv6 checksums whose pseudo-header holds the addresses, and the ICMP, ICMPv6, UDP
//! and GRE checksums around an inner header. A UDP checksum of 0 (none) stays 0. An address cut
//! by the snap length is rewritten as far as it goes and no checksum is touched for it.
//!
//! What the walk recognises but cannot read (a GRE payload of another kind, headers nested
//! deeper than [`MAX_DEPTH`]) is returned as [`Unread`], for the caller to count, as is an
//! Ethernet frame whose link layer is not read through ([`unread_link`]).

use crate::LinkType;
use crate::bytes::{get_u16, read_u16, write_u16};
use crate::checksum;
use crate::link::{self, NetworkProto};

/// IP headers followed below the outer one (GRE in GRE in an ICMP error, say).
pub const MAX_DEPTH: usize = 4;

/// GTP-U extension headers followed before giving up.
const MAX_GTP_EXTENSIONS: usize = 8;

/// Checksums open at once: one around each header level (ICMP, UDP or GRE) and two of the
/// level at hand (IPv4 header, pseudo-header), with as much again to spare.
const MAX_COVERS: usize = 2 * (MAX_DEPTH + 1) + 2;

/// The address mapping [`rewrite`] applies.
pub trait AddressMap {
    /// The image of an IPv4 address.
    fn ipv4(&mut self, addr: [u8; 4]) -> [u8; 4];
    /// The image of an IPv6 address.
    fn ipv6(&mut self, addr: [u8; 16]) -> [u8; 16];
}

/// An encapsulation whose addresses [`rewrite`] found but could not reach.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Unread {
    /// A GRE payload other than IPv4, IPv6, Ethernet, ERSPAN and Aruba's 802.11 (PPTP's PPP,
    /// MPLS, WCCP, source routes).
    Gre,
    /// An IP header nested deeper than [`MAX_DEPTH`] below the outer one.
    TooDeep,
    /// An Ethernet frame whose link layer [`link::network_layer`] does not read through: MPLS it
    /// gives up on (a pseudowire's control word), FabricPath, 802.1ah.
    Link,
}

impl Unread {
    /// Every kind, in the order of [`Unread::index`].
    pub const ALL: [Unread; 3] = [Unread::Gre, Unread::TooDeep, Unread::Link];

    /// The kind's place in [`Unread::ALL`].
    pub const fn index(self) -> usize {
        self as usize
    }

    /// What the kind is, for people.
    pub const fn describe(self) -> &'static str {
        match self {
            Unread::Gre => "in GRE payloads of another kind",
            Unread::TooDeep => "nested deeper than 4 headers",
            Unread::Link => "behind link-layer headers it does not read",
        }
    }
}

/// What [`rewrite`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Walked {
    /// Whether an address of the outer header (or a part of it) was rewritten.
    pub outer: bool,
    /// Addresses rewritten anywhere, the outer ones included.
    pub addresses: usize,
    /// What held addresses the walk could not reach, if anything did.
    pub unread: Option<Unread>,
}

/// Rewrites through `map` the addresses of the IP packet (IPv6 if `v6`) at `at` in `frame` and
/// of every header inside it, with the checksums over them. Never panics; no allocation.
pub fn rewrite<M: AddressMap>(frame: &mut [u8], at: usize, v6: bool, map: &mut M) -> Walked {
    let end = frame.len();
    let mut w = Walk {
        f: frame,
        map,
        covers: [Cover::default(); MAX_COVERS],
        n: 0,
        addresses: 0,
    };
    let mut outer = false;
    let mut next = Some(Next::Ip { at, v6, end });
    for depth in 0..=MAX_DEPTH + 1 {
        match next {
            None => break,
            Some(Next::Unread(k)) => {
                return w.done(outer, Some(k));
            }
            Some(Next::Ip { .. }) if depth > MAX_DEPTH => {
                return w.done(outer, Some(Unread::TooDeep));
            }
            Some(Next::Ip { at, v6, end }) => {
                let before = w.addresses;
                next = w.ip(at, v6, end);
                if depth == 0 {
                    outer = w.addresses > before;
                }
            }
        }
    }
    w.done(outer, None)
}

/// Whether an Ethernet frame in which [`link::network_layer`] found no IP header is MPLS,
/// FabricPath or 802.1ah (behind any VLAN tags): a packet or frame may be inside, unread.
pub fn unread_link(linktype: LinkType, frame: &[u8]) -> bool {
    if linktype != LinkType::Ethernet {
        return false;
    }
    let mut at = 12;
    for _ in 0..=link::MAX_VLAN_TAGS {
        match get_u16(frame, at) {
            Some(0x8100 | 0x88a8 | 0x9100) => at += 4,
            Some(0x8847 | 0x8848 | 0x8903 | 0x88e7) => return frame.len() > at + 2,
            _ => return false,
        }
    }
    false
}

/// What comes next in the walk.
#[derive(Debug, Clone, Copy)]
enum Next {
    /// An IP header at `at` (IPv6 if `v6`), the packet it heads ending by `end`.
    Ip { at: usize, v6: bool, end: usize },
    /// Something holding addresses the walk does not read.
    Unread(Unread),
}

/// A checksum open over the part of the frame being rewritten.
#[derive(Debug, Clone, Copy, Default)]
struct Cover {
    /// Offset of the 2-byte checksum field.
    field: usize,
    /// The bytes it covers directly: `lo..hi` (for a pseudo-header, the addresses).
    lo: usize,
    hi: usize,
    /// An offset at an even distance from the start of what it sums.
    even_at: usize,
    /// A zero field means "no checksum" and stays zero; a computed zero is sent as all ones
    /// (UDP, RFC 768).
    udp: bool,
}

struct Walk<'f, M> {
    f: &'f mut [u8],
    map: &'f mut M,
    /// The open checksums, outermost first.
    covers: [Cover; MAX_COVERS],
    n: usize,
    addresses: usize,
}

impl<M: AddressMap> Walk<'_, M> {
    fn done(&self, outer: bool, unread: Option<Unread>) -> Walked {
        Walked {
            outer,
            addresses: self.addresses,
            unread,
        }
    }

    fn push(&mut self, c: Cover) {
        if let Some(slot) = self.covers.get_mut(self.n) {
            *slot = c;
            self.n += 1;
        }
    }

    /// An IP header at `at`, if the version nibble says so and it starts before `end`.
    fn ip_at(&self, at: usize, v6: bool, end: usize) -> Option<Next> {
        let version = self.f.get(at).filter(|_| at < end)? >> 4;
        (version == if v6 { 6 } else { 4 }).then_some(Next::Ip { at, v6, end })
    }

    /// Writes `new` over the bytes at `at` and updates every open checksum over them, and the
    /// checksums over those checksums, innermost first.
    fn patch(&mut self, at: usize, new: &[u8]) {
        let Some(old) = self.f.get_mut(at..at + new.len()) else {
            return;
        };
        // (offset, old sum, new sum) of each piece changed so far.
        let mut changed = [(0usize, 0u32, 0u32); MAX_COVERS + 1];
        changed[0] = (at, checksum::sum(old), checksum::sum(new));
        old.copy_from_slice(new);
        let mut k = 1;
        for c in self.covers[..self.n].iter().rev() {
            let Some(field) = self.f.get(c.field..c.field + 2) else {
                continue;
            };
            let hc = read_u16(field);
            if c.udp && hc == 0 {
                continue;
            }
            let (mut old, mut new, mut any) = (0, 0, false);
            for &(x, o, n) in &changed[..k] {
                if x == c.field || x < c.lo || x >= c.hi || x < c.even_at {
                    continue;
                }
                let odd = |s| {
                    if (x - c.even_at) % 2 == 1 {
                        checksum::at_odd_offset(s)
                    } else {
                        s
                    }
                };
                old = checksum::combine(old, odd(o));
                new = checksum::combine(new, odd(n));
                any = true;
            }
            if !any {
                continue;
            }
            let mut v = checksum::update_sum(hc, old, new);
            if c.udp && v == 0 {
                v = 0xffff;
            }
            write_u16(&mut self.f[c.field..c.field + 2], v);
            if let Some(slot) = changed.get_mut(k) {
                *slot = (c.field, u32::from(hc), u32::from(v));
                k += 1;
            }
        }
    }

    /// Rewrites the address at `at` (4 bytes, 16 if `v6`; stored XORed with all ones if
    /// `obfuscated`), or the part of it the capture holds.
    fn address(&mut self, at: usize, v6: bool, obfuscated: bool) {
        let len = if v6 { 16 } else { 4 };
        let end = self.f.len().min(at + len);
        if at >= end {
            return;
        }
        let flip = if obfuscated { 0xff } else { 0 };
        let mut a = [0u8; 16];
        for (d, s) in a.iter_mut().zip(&self.f[at..end]) {
            *d = s ^ flip;
        }
        let mut m = if v6 {
            self.map.ipv6(a)
        } else {
            let m = self.map.ipv4([a[0], a[1], a[2], a[3]]);
            let mut w = [0u8; 16];
            w[..4].copy_from_slice(&m);
            w
        };
        for b in &mut m {
            *b ^= flip;
        }
        self.addresses += 1;
        if end - at < len {
            // Cut by the snap length: no checksum over it can be told.
            self.f[at..end].copy_from_slice(&m[..end - at]);
        } else {
            self.patch(at, &m[..len]);
        }
    }

    /// The checksum of upper-layer protocol `proto` at `l4` whose pseudo-header holds the
    /// addresses at `addrs` (8 or 32 bytes).
    fn pseudo(&mut self, proto: u8, l4: usize, addrs: usize, v6: bool) {
        let at = match proto {
            6 => 16,
            17 => 6,
            58 if v6 => 2,
            _ => return,
        };
        let len = if v6 { 32 } else { 8 };
        self.push(Cover {
            field: l4 + at,
            lo: addrs,
            hi: addrs + len,
            even_at: addrs,
            udp: proto == 17,
        });
    }

    /// An IP header at `at` of a packet ending by `end`: its addresses, then what it carries.
    fn ip(&mut self, at: usize, v6: bool, end: usize) -> Option<Next> {
        let base = self.n;
        let first = *self.f.get(at)?;
        let (proto, l4, end, whole) = if v6 {
            if first >> 4 != 6 || self.f.len() <= at + 8 {
                return None;
            }
            let payload = usize::from(get_u16(self.f, at + 4)?);
            let end = if payload > 0 {
                end.min(at + 40 + payload)
            } else {
                end
            };
            let upper = self
                .f
                .get(at..end)
                .filter(|ip| ip.len() >= 40)
                .and_then(|ip| crate::ipv6::Packet::new_unchecked(ip).upper_layer());
            match upper {
                Some((proto, off, frag)) if frag.is_none_or(|f| f.is_first()) => {
                    (Some(proto.to_u8()), at + off, end, true)
                }
                _ => (None, end, end, false),
            }
        } else {
            let ihl = usize::from(first & 0xf) * 4;
            if first >> 4 != 4 || ihl < 20 || self.f.len() <= at + 12 {
                return None;
            }
            let total = usize::from(get_u16(self.f, at + 2)?);
            let end = if total >= ihl {
                end.min(at + total)
            } else {
                end
            };
            self.push(Cover {
                field: at + 10,
                lo: at,
                hi: at + ihl,
                even_at: at,
                udp: false,
            });
            let first_fragment = get_u16(self.f, at + 6).is_some_and(|f| f & 0x1fff == 0);
            let proto = self.f.get(at + 9).copied().filter(|_| first_fragment);
            (proto, at + ihl, end, first_fragment)
        };
        if let Some(p) = proto
            && whole
        {
            self.pseudo(p, l4, at + if v6 { 8 } else { 12 }, v6);
        }
        let (src, len) = if v6 { (at + 8, 16) } else { (at + 12, 4) };
        self.address(src, v6, false);
        self.address(src + len, v6, false);
        self.n = base;
        if l4 >= end {
            return None;
        }
        self.upper(proto?, l4, end, v6)
    }

    /// What protocol `proto` at `l4` (up to `end`) carries, its checksums opened.
    fn upper(&mut self, proto: u8, l4: usize, end: usize, v6: bool) -> Option<Next> {
        match proto {
            4 => self.ip_at(l4, false, end),
            41 => self.ip_at(l4, true, end),
            1 if !v6 => self.icmp(l4, end),
            58 if v6 => self.icmpv6(l4, end),
            17 => self.udp(l4, end),
            47 => self.gre(l4, end),
            _ => None,
        }
    }

    /// A checksum over `l4..end` at `l4 + at`.
    fn cover(&mut self, l4: usize, at: usize, end: usize, udp: bool) {
        self.push(Cover {
            field: l4 + at,
            lo: l4,
            hi: end,
            even_at: l4,
            udp,
        });
    }

    fn icmp(&mut self, l4: usize, end: usize) -> Option<Next> {
        let ty = *self.f.get(l4)?;
        // Destination unreachable, source quench, redirect, time exceeded, parameter problem.
        if !matches!(ty, 3 | 4 | 5 | 11 | 12) {
            return None;
        }
        self.cover(l4, 2, end, false);
        if ty == 5 && l4 + 4 < end {
            self.address(l4 + 4, false, false);
        }
        self.ip_at(l4 + 8, false, end)
    }

    fn icmpv6(&mut self, l4: usize, end: usize) -> Option<Next> {
        let ty = *self.f.get(l4)?;
        match ty {
            // Destination unreachable, packet too big, time exceeded, parameter problem.
            1..=4 => {
                self.cover(l4, 2, end, false);
                self.ip_at(l4 + 8, true, end)
            }
            // Neighbour solicitation and advertisement: the target.
            135 | 136 if l4 + 8 < end => {
                self.cover(l4, 2, end, false);
                self.address(l4 + 8, true, false);
                None
            }
            _ => None,
        }
    }

    fn udp(&mut self, l4: usize, end: usize) -> Option<Next> {
        let (sport, dport) = (get_u16(self.f, l4)?, get_u16(self.f, l4 + 2)?);
        let on = |p| sport == p || dport == p;
        let len = usize::from(get_u16(self.f, l4 + 4)?);
        let end = if len >= 8 { end.min(l4 + len) } else { end };
        if ![2152, 4789, 6081, 3544].into_iter().any(on) {
            return None;
        }
        self.cover(l4, 6, end, true);
        let at = l4 + 8;
        if on(2152) {
            self.gtp_u(at, end)
        } else if on(4789) {
            // VXLAN: flags (I set), reserved, VNI; then Ethernet.
            (*self.f.get(at)? & 0x08 != 0).then_some(())?;
            self.ethernet(at + 8, end)
        } else if on(6081) {
            self.geneve(at, end)
        } else {
            self.teredo(at, end)
        }
    }

    /// GTP-U (3GPP TS 29.281): a G-PDU's header, sequence number and extension headers, then
    /// the user's IP packet.
    fn gtp_u(&mut self, at: usize, end: usize) -> Option<Next> {
        let flags = *self.f.get(at)?;
        // Version 1, protocol type GTP, message type G-PDU.
        if flags >> 5 != 1 || flags & 0x10 == 0 || *self.f.get(at + 1)? != 0xff {
            return None;
        }
        let mut off = at + 8;
        if flags & 0x07 != 0 {
            let mut next = *self.f.get(at + 11)?;
            off = at + 12;
            // E: extension headers, each a length in 4-byte units ending with the next type.
            if flags & 0x04 != 0 {
                for _ in 0..MAX_GTP_EXTENSIONS {
                    if next == 0 {
                        break;
                    }
                    let len = usize::from(*self.f.get(off)?) * 4;
                    if len == 0 {
                        return None;
                    }
                    next = *self.f.get(off + len - 1)?;
                    off += len;
                }
                if next != 0 {
                    return None;
                }
            }
        }
        self.by_version(off, end)
    }

    /// Geneve (RFC 8926): version 0, options, then the protocol type's payload.
    fn geneve(&mut self, at: usize, end: usize) -> Option<Next> {
        let b0 = *self.f.get(at)?;
        if b0 >> 6 != 0 {
            return None;
        }
        let off = at + 8 + usize::from(b0 & 0x3f) * 4;
        let proto = get_u16(self.f, at + 2)?;
        self.ethertype(proto, off, end)
    }

    /// Teredo (RFC 4380): an optional authentication indicator, an optional origin indication
    /// (whose IPv4 address is stored XORed with all ones), then IPv6.
    fn teredo(&mut self, at: usize, end: usize) -> Option<Next> {
        let mut off = at;
        if get_u16(self.f, off) == Some(1) {
            let id = usize::from(*self.f.get(off + 2)?);
            let au = usize::from(*self.f.get(off + 3)?);
            off += 4 + id + au + 8 + 1;
        }
        if get_u16(self.f, off) == Some(0) && off + 4 < end {
            self.address(off + 4, false, true);
            off += 8;
        }
        self.ip_at(off, true, end)
    }

    fn gre(&mut self, l4: usize, end: usize) -> Option<Next> {
        let flags = get_u16(self.f, l4)?;
        let proto = get_u16(self.f, l4 + 2)?;
        // Version 1 is PPTP's enhanced GRE (PPP inside); a routing field (R) lists routes.
        if flags & 0x7 != 0 || flags & 0x4000 != 0 {
            return Some(Next::Unread(Unread::Gre));
        }
        let mut off = l4 + 4;
        if flags & 0x8000 != 0 {
            self.cover(l4, 4, end, false);
            off += 4;
        }
        let seq = flags & 0x1000 != 0;
        off += 4 * usize::from(flags & 0x2000 != 0) + 4 * usize::from(seq);
        if off >= end {
            return None;
        }
        match proto {
            // ERSPAN type II (8-byte header; type I has none and no sequence number).
            0x88be => self.ethernet(off + if seq { 8 } else { 0 }, end),
            // ERSPAN type III: 12 bytes, 8 more with the platform subheader (O); frame type 0
            // is Ethernet.
            0x22eb => {
                let h = self.f.get(off..off + 12)?;
                if (h[10] >> 2) & 0x1f != 0 {
                    return Some(Next::Unread(Unread::Gre));
                }
                let o = h[11] & 1 != 0;
                self.ethernet(off + 12 + if o { 8 } else { 0 }, end)
            }
            // Aruba's access points: 802.11 frames.
            p if (0x8200..=0x8370).contains(&p) && p & 0xf == 0 => self.wlan(off, end),
            0x0800 | 0x86dd | 0x6558 => self.ethertype(proto, off, end),
            _ => Some(Next::Unread(Unread::Gre)),
        }
    }

    /// The payload at `at` of EtherType `et`.
    fn ethertype(&mut self, et: u16, at: usize, end: usize) -> Option<Next> {
        match et {
            0x0800 => self.ip_at(at, false, end),
            0x86dd => self.ip_at(at, true, end),
            0x6558 => self.ethernet(at, end),
            _ => None,
        }
    }

    /// The IP header at `at`, whichever version its first nibble says.
    fn by_version(&mut self, at: usize, end: usize) -> Option<Next> {
        match *self.f.get(at)? >> 4 {
            4 => self.ip_at(at, false, end),
            6 => self.ip_at(at, true, end),
            _ => None,
        }
    }

    /// An Ethernet frame at `at`: its IP header, or its ARP addresses rewritten here.
    fn ethernet(&mut self, at: usize, end: usize) -> Option<Next> {
        let frame = self.f.get(at..end)?;
        match link::network_layer(LinkType::Ethernet, frame) {
            Some(l3) => self.ip_at(at + l3.offset, l3.proto == NetworkProto::Ipv6, end),
            None => {
                // ARP for IPv4 over Ethernet: the sender's and target's protocol addresses.
                let arp = at + 14;
                let ipv4_arp = get_u16(frame, 12) == Some(0x0806)
                    && frame.get(14..20) == Some(&[0, 1, 8, 0, 6, 4][..]);
                if ipv4_arp {
                    self.address(arp + 14, false, false);
                    self.address(arp + 24, false, false);
                }
                None
            }
        }
    }

    /// An IEEE 802.11 data frame at `at`: its header, LLC/SNAP, then IP. Encrypted frames and
    /// frames without data have no header to read.
    fn wlan(&mut self, at: usize, end: usize) -> Option<Next> {
        let (fc0, fc1) = (*self.f.get(at)?, *self.f.get(at + 1)?);
        // Data frames (type 2) with data, not protected.
        if (fc0 >> 2) & 3 != 2 || fc0 & 0x40 != 0 || fc1 & 0x40 != 0 {
            return None;
        }
        let mut off = at + 24;
        if fc1 & 3 == 3 {
            off += 6;
        }
        if fc0 & 0x80 != 0 {
            // QoS control, and HT control when the order bit is set.
            off += 2 + if fc1 & 0x80 != 0 { 4 } else { 0 };
        }
        if self.f.get(off..off + 6)? != [0xaa, 0xaa, 0x03, 0, 0, 0] {
            return None;
        }
        self.ethertype(get_u16(self.f, off + 6)?, off + 8, end)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cryptopan::{Anonymizer, CryptoPan};
    use core::net::IpAddr;

    const KEY: [u8; 32] = [7; 32];

    /// An address as the fixture has it: the original, or its image.
    type Map<'a> = &'a dyn Fn(&str) -> IpAddr;

    fn mapped(pan: &CryptoPan) -> impl Fn(&str) -> IpAddr + '_ {
        move |a| match a.parse().unwrap() {
            IpAddr::V4(v) => IpAddr::from(pan.ipv4(v.octets())),
            IpAddr::V6(v) => IpAddr::from(pan.ipv6(v.octets())),
        }
    }

    fn original(a: &str) -> IpAddr {
        a.parse().unwrap()
    }

    fn octets(a: IpAddr) -> Vec<u8> {
        match a {
            IpAddr::V4(v) => v.octets().to_vec(),
            IpAddr::V6(v) => v.octets().to_vec(),
        }
    }

    fn set_checksum(b: &mut [u8], at: usize, sum: u32) {
        let mut c = checksum::finish(sum);
        if c == 0 {
            c = 0xffff;
        }
        b[at..at + 2].copy_from_slice(&c.to_be_bytes());
    }

    /// The sum of the pseudo-header of a `proto` segment of `len` bytes.
    fn pseudo(src: IpAddr, dst: IpAddr, proto: u8, len: usize) -> u32 {
        match (src, dst) {
            (IpAddr::V4(s), IpAddr::V4(d)) => checksum::pseudo_header_v4(s, d, proto, len as u16),
            (IpAddr::V6(s), IpAddr::V6(d)) => checksum::pseudo_header_v6(s, d, proto, len as u32),
            _ => unreachable!("one family per header"),
        }
    }

    /// An IP packet with a right header checksum.
    fn ip(src: IpAddr, dst: IpAddr, proto: u8, payload: &[u8]) -> Vec<u8> {
        let mut p = if src.is_ipv4() {
            let len = (20 + payload.len()) as u16;
            let mut h = vec![0x45, 0, 0, 0, 0, 1, 0, 0, 64, proto, 0, 0];
            h[2..4].copy_from_slice(&len.to_be_bytes());
            h.extend(octets(src));
            h.extend(octets(dst));
            let s = checksum::sum(&h);
            set_checksum(&mut h, 10, s);
            h
        } else {
            let mut h = vec![0x60, 0, 0, 0, 0, 0, proto, 64];
            h[4..6].copy_from_slice(&(payload.len() as u16).to_be_bytes());
            h.extend(octets(src));
            h.extend(octets(dst));
            h
        };
        p.extend_from_slice(payload);
        p
    }

    /// A transport segment (`proto` 6, 17 or 58) with its checksum field at `at` made right.
    fn segment(src: IpAddr, dst: IpAddr, proto: u8, mut seg: Vec<u8>, at: usize) -> Vec<u8> {
        let s = checksum::combine(pseudo(src, dst, proto, seg.len()), checksum::sum(&seg));
        set_checksum(&mut seg, at, s);
        seg
    }

    fn udp(src: IpAddr, dst: IpAddr, sport: u16, dport: u16, payload: &[u8]) -> Vec<u8> {
        let mut s = Vec::new();
        s.extend(sport.to_be_bytes());
        s.extend(dport.to_be_bytes());
        s.extend(((8 + payload.len()) as u16).to_be_bytes());
        s.extend([0, 0]);
        s.extend_from_slice(payload);
        segment(src, dst, 17, s, 6)
    }

    fn tcp(src: IpAddr, dst: IpAddr, payload: &[u8]) -> Vec<u8> {
        let mut s = vec![
            0x9c, 0x40, 0, 80, 0, 0, 0, 1, 0, 0, 0, 0, 0x50, 0x18, 0xff, 0xff,
        ];
        s.extend([0, 0, 0, 0]);
        s.extend_from_slice(payload);
        segment(src, dst, 6, s, 16)
    }

    /// An ICMP message (`word`: its second 4 bytes) with a right checksum.
    fn icmp(ty: u8, word: [u8; 4], body: &[u8]) -> Vec<u8> {
        let mut m = vec![ty, 0, 0, 0];
        m.extend(word);
        m.extend_from_slice(body);
        let s = checksum::sum(&m);
        set_checksum(&mut m, 2, s);
        m
    }

    fn icmpv6(src: IpAddr, dst: IpAddr, ty: u8, word: [u8; 4], body: &[u8]) -> Vec<u8> {
        let mut m = vec![ty, 0, 0, 0];
        m.extend(word);
        m.extend_from_slice(body);
        segment(src, dst, 58, m, 2)
    }

    /// GRE with a checksum (made right) if `csum`, a key and a sequence number if `seq`.
    fn gre(csum: bool, seq: bool, proto: u16, payload: &[u8]) -> Vec<u8> {
        let flags = if csum { 0x8000u16 } else { 0 } | 0x2000 | if seq { 0x1000 } else { 0 };
        let mut g = flags.to_be_bytes().to_vec();
        g.extend(proto.to_be_bytes());
        if csum {
            g.extend([0, 0, 0, 0]);
        }
        g.extend([0, 0, 0, 42]);
        if seq {
            g.extend([0, 0, 0, 9]);
        }
        g.extend_from_slice(payload);
        if csum {
            let s = checksum::sum(&g);
            set_checksum(&mut g, 4, s);
        }
        g
    }

    fn eth(et: u16, payload: &[u8]) -> Vec<u8> {
        let mut f = vec![2, 0, 0, 0, 0, 2, 2, 0, 0, 0, 0, 1];
        f.extend(et.to_be_bytes());
        f.extend_from_slice(payload);
        f
    }

    /// An outer Ethernet frame around `ip`.
    fn frame(ip: Vec<u8>) -> Vec<u8> {
        eth(if ip[0] >> 4 == 6 { 0x86dd } else { 0x0800 }, &ip)
    }

    const A: &str = "192.0.2.1";
    const B: &str = "198.51.100.2";
    const C: &str = "10.1.2.3";
    const D: &str = "10.9.8.7";
    const E: &str = "2001:db8::1";
    const F: &str = "2001:db8:1::2";

    /// An inner IPv4 TCP packet from C to D.
    fn inner_tcp(m: Map) -> Vec<u8> {
        ip(m(C), m(D), 6, &tcp(m(C), m(D), b"GET / HTTP/1.1\r\n"))
    }

    /// An inner IPv6 UDP packet from E to F.
    fn inner_udp6(m: Map) -> Vec<u8> {
        ip(m(E), m(F), 17, &udp(m(E), m(F), 5353, 53, b"question"))
    }

    /// ICMP port unreachable from B to A quoting A's UDP datagram from C to D, cut after the
    /// UDP header as routers quote.
    fn icmp_unreachable(m: Map) -> Vec<u8> {
        let quoted = ip(m(C), m(D), 17, &udp(m(C), m(D), 40000, 53, &[0x55; 33]));
        frame(ip(m(B), m(A), 1, &icmp(3, [0; 4], &quoted[..28])))
    }

    /// ICMP redirect: the gateway D and the whole quoted TCP packet.
    fn icmp_redirect(m: Map) -> Vec<u8> {
        let g: [u8; 4] = octets(m(D)).try_into().unwrap();
        frame(ip(m(B), m(A), 1, &icmp(5, g, &inner_tcp(m))))
    }

    /// ICMPv6 packet too big from F to E quoting a whole IPv6 UDP packet.
    fn icmpv6_too_big(m: Map) -> Vec<u8> {
        frame(ip(
            m(F),
            m(E),
            58,
            &icmpv6(m(F), m(E), 2, [0, 0, 5, 0xdc], &inner_udp6(m)),
        ))
    }

    /// ICMPv6 neighbour solicitation for F, with a source link-layer address option.
    fn neighbour_solicitation(m: Map) -> Vec<u8> {
        let mut body = octets(m(F));
        body.extend([1, 1, 2, 0, 0, 0, 0, 1]);
        frame(ip(m(E), m(F), 58, &icmpv6(m(E), m(F), 135, [0; 4], &body)))
    }

    fn ip_in_ip(m: Map) -> Vec<u8> {
        frame(ip(m(A), m(B), 4, &inner_tcp(m)))
    }

    fn six_in_four(m: Map) -> Vec<u8> {
        frame(ip(m(A), m(B), 41, &inner_udp6(m)))
    }

    fn four_in_six(m: Map) -> Vec<u8> {
        frame(ip(m(E), m(F), 4, &inner_tcp(m)))
    }

    /// GRE with checksums in GRE, IPv4 in IPv6 in IPv4.
    fn gre_in_gre(m: Map) -> Vec<u8> {
        let inner = ip(m(E), m(F), 47, &gre(true, true, 0x0800, &inner_tcp(m)));
        frame(ip(m(A), m(B), 47, &gre(true, false, 0x86dd, &inner)))
    }

    /// Transparent Ethernet bridging, the inner frame with a VLAN tag.
    fn gre_ethernet(m: Map) -> Vec<u8> {
        let mut tagged = vec![0, 100];
        tagged.extend(0x86ddu16.to_be_bytes());
        tagged.extend(inner_udp6(m));
        frame(ip(
            m(A),
            m(B),
            47,
            &gre(true, false, 0x6558, &eth(0x8100, &tagged)),
        ))
    }

    fn erspan_1(m: Map) -> Vec<u8> {
        frame(ip(
            m(A),
            m(B),
            47,
            &gre(false, false, 0x88be, &eth(0x0800, &inner_tcp(m))),
        ))
    }

    fn erspan_2(m: Map) -> Vec<u8> {
        let mut e = vec![0x10, 0x01, 0x00, 0x07, 0, 0, 0, 0];
        e.extend(eth(0x0800, &inner_tcp(m)));
        frame(ip(m(A), m(B), 47, &gre(false, true, 0x88be, &e)))
    }

    fn erspan_3(m: Map) -> Vec<u8> {
        // Version 2 (type III), frame type 0, with the platform subheader (O).
        let mut e = vec![0x20, 0x01, 0x00, 0x07, 0, 0, 0, 1, 0, 0, 0, 0x01];
        e.extend([0; 8]);
        e.extend(eth(0x0800, &inner_tcp(m)));
        frame(ip(m(A), m(B), 47, &gre(false, true, 0x22eb, &e)))
    }

    /// Aruba: a QoS data frame to the distribution system, LLC/SNAP, IPv4.
    fn aruba(m: Map) -> Vec<u8> {
        let mut w = vec![0x88, 0x01, 0, 0];
        w.extend([0x11; 18]);
        w.extend([0, 0, 0, 0]);
        w.extend([0xaa, 0xaa, 0x03, 0, 0, 0, 0x08, 0x00]);
        w.extend(inner_tcp(m));
        frame(ip(m(A), m(B), 47, &gre(false, false, 0x8200, &w)))
    }

    /// GTP-U with a sequence number and one extension header (PDU session container).
    fn gtp_u(m: Map) -> Vec<u8> {
        let inner = inner_tcp(m);
        let mut g = vec![0x36, 0xff];
        g.extend(((inner.len() + 8) as u16).to_be_bytes());
        g.extend([0, 0, 0, 1, 0, 7, 0, 0x85, 1, 0x10, 9, 0]);
        g.extend(inner);
        frame(ip(m(A), m(B), 17, &udp(m(A), m(B), 2152, 2152, &g)))
    }

    fn vxlan(m: Map) -> Vec<u8> {
        let mut v = vec![0x08, 0, 0, 0, 0, 0, 1, 0];
        v.extend(eth(0x0800, &inner_tcp(m)));
        frame(ip(m(A), m(B), 17, &udp(m(A), m(B), 51000, 4789, &v)))
    }

    fn geneve(m: Map) -> Vec<u8> {
        let mut g = vec![0x01, 0, 0x65, 0x58, 0, 0, 1, 0, 0x01, 0x02, 0x03, 0x01];
        g.extend(eth(0x86dd, &inner_udp6(m)));
        frame(ip(m(A), m(B), 17, &udp(m(A), m(B), 51000, 6081, &g)))
    }

    /// Teredo: an authentication indicator of odd length (the inner header at an odd offset
    /// from the UDP header), an origin indication for C, then IPv6.
    fn teredo(m: Map) -> Vec<u8> {
        let mut t = vec![0, 1, 2, 0, 0xaa, 0xbb];
        t.extend([0; 9]);
        t.extend([0, 0, 0xf2, 0x3a]);
        t.extend(octets(m(C)).iter().map(|b| !b));
        t.extend(ip(
            m(E),
            m(F),
            58,
            &icmpv6(m(E), m(F), 128, [0, 1, 0, 1], b"ping"),
        ));
        frame(ip(m(A), m(B), 17, &udp(m(A), m(B), 3544, 3797, &t)))
    }

    /// IPv4 in IPv4 `levels` times around a TCP packet, the outermost first: A to B, C to D, A
    /// to B...
    fn nested(m: Map, levels: usize) -> Vec<u8> {
        let mut p = inner_tcp(m);
        for i in 0..levels {
            let (s, d) = if i % 2 == 0 { (A, B) } else { (C, D) };
            p = ip(m(s), m(d), 4, &p);
        }
        frame(p)
    }

    type Fixture = fn(Map) -> Vec<u8>;

    const FIXTURES: [(&str, Fixture); 19] = [
        ("icmp unreachable", icmp_unreachable),
        ("icmp redirect", icmp_redirect),
        ("icmpv6 too big", icmpv6_too_big),
        ("neighbour solicitation", neighbour_solicitation),
        ("ip in ip", ip_in_ip),
        ("6in4", six_in_four),
        ("4in6", four_in_six),
        ("gre in gre", gre_in_gre),
        ("gre ethernet", gre_ethernet),
        ("erspan i", erspan_1),
        ("erspan ii", erspan_2),
        ("erspan iii", erspan_3),
        ("aruba", aruba),
        ("gtp-u", gtp_u),
        ("vxlan", vxlan),
        ("geneve", geneve),
        ("teredo", teredo),
        ("four levels inside", |m| nested(m, 4)),
        ("three levels inside", |m| nested(m, 3)),
    ];

    /// Each kind: the frame anonymised is the frame built from the images of its addresses,
    /// byte for byte, so every address is its image and every checksum is right.
    #[test]
    fn every_inner_address_becomes_its_image_and_every_checksum_stays_right() {
        let pan = CryptoPan::new(&KEY);
        let image = mapped(&pan);
        let mut anon = Anonymizer::new(pan.clone());
        for (name, fixture) in FIXTURES {
            let mut f = fixture(&original);
            let want = fixture(&image);
            assert_eq!(f.len(), want.len());
            assert!(anon.frame(LinkType::Ethernet, &mut f), "{name}");
            assert_eq!(f, want, "{name}");
        }
        assert_eq!(pan.unread().map(|(_, n)| n), [0, 0, 0]);
    }

    /// A checksum that was wrong stays wrong by as much, and a UDP checksum of 0 stays 0.
    #[test]
    fn wrong_checksums_stay_wrong_and_absent_ones_absent() {
        let pan = CryptoPan::new(&KEY);
        let image = mapped(&pan);
        let mut anon = Anonymizer::new(pan.clone());
        for (name, fixture) in FIXTURES {
            // A byte of data changed after the checksums were made: each over it is wrong. The
            // last byte, or in the quote cut after the UDP checksum, the ICMP header's unused
            // word.
            let mut f = fixture(&original);
            let mut want = fixture(&image);
            let at = if name == "icmp unreachable" {
                14 + 20 + 5
            } else {
                f.len() - 1
            };
            f[at] ^= 0x21;
            want[at] ^= 0x21;
            anon.frame(LinkType::Ethernet, &mut f);
            assert_eq!(f, want, "{name}");
        }
        for fixture in [vxlan, gtp_u, teredo, geneve] {
            let (mut f, mut want) = (fixture(&original), fixture(&image));
            f[40..42].copy_from_slice(&[0, 0]);
            want[40..42].copy_from_slice(&[0, 0]);
            anon.frame(LinkType::Ethernet, &mut f);
            assert_eq!(f, want);
        }
    }

    /// A frame cut anywhere: every address byte there is the whole frame's image's.
    #[test]
    fn a_cut_frame_has_the_address_bytes_the_whole_one_would() {
        let mut anon = Anonymizer::new(CryptoPan::new(&KEY));
        for (name, fixture) in FIXTURES {
            let full = fixture(&original);
            let mut whole = full.clone();
            anon.frame(LinkType::Ethernet, &mut whole);
            // Where the fixture's addresses are.
            let mut at = Vec::new();
            for a in [A, B, C, D, E, F] {
                let o = octets(original(a));
                at.extend(
                    (0..=full.len() - o.len())
                        .filter(|&i| full[i..i + o.len()] == o[..])
                        .map(|i| i..i + o.len()),
                );
            }
            assert!(at.len() >= 3, "{name}");
            for cut in 14..full.len() {
                let mut f = full[..cut].to_vec();
                anon.frame(LinkType::Ethernet, &mut f);
                for r in &at {
                    let r = r.start.min(cut)..r.end.min(cut);
                    assert_eq!(f[r.clone()], whole[r.clone()], "{name} cut at {cut}: {r:?}");
                }
            }
        }
    }

    /// Deeper than the bound, or a GRE payload it does not read: counted, and what it reached
    /// rewritten.
    #[test]
    fn what_cannot_be_reached_is_counted_by_kind() {
        let pan = CryptoPan::new(&KEY);
        let image = mapped(&pan);
        let mut anon = Anonymizer::new(pan.clone());
        let mut f = nested(&original, 5);
        anon.frame(LinkType::Ethernet, &mut f);
        let want = nested(&image, 5);
        // The five outer headers are rewritten; the sixth, at 14 + 5 * 20, is not.
        assert_eq!(f[..14 + 5 * 20 - 8], want[..14 + 5 * 20 - 8]);
        assert_eq!(
            f[14 + 5 * 20 + 12..14 + 5 * 20 + 20],
            nested(&original, 5)[126..134]
        );
        let pptp = |m: Map| {
            let mut g = vec![
                0x30, 0x01, 0x88, 0x0b, 0, 4, 0, 1, 0, 0, 0, 1, 0xff, 0x03, 0, 0x21,
            ];
            g.extend(inner_tcp(m));
            frame(ip(m(A), m(B), 47, &g))
        };
        let mut f = pptp(&original);
        assert!(anon.frame(LinkType::Ethernet, &mut f));
        assert_eq!(f[26..34], pptp(&image)[26..34]);
        // An MPLS pseudowire (a control word, then Ethernet): the link layer is not read
        // through, and an ARP or plain frame is not counted.
        let mut pw = vec![
            2, 0, 0, 0, 0, 2, 2, 0, 0, 0, 0, 1, 0x88, 0x47, 0, 0x01, 0x01, 0x40,
        ];
        pw.extend([0; 4]);
        pw.extend(eth(0x0800, &inner_tcp(&original)));
        let before = pw.clone();
        assert!(!anon.frame(LinkType::Ethernet, &mut pw));
        assert_eq!(pw, before);
        let mut lldp = eth(0x88cc, &[0; 20]);
        assert!(!anon.frame(LinkType::Ethernet, &mut lldp));
        assert_eq!(
            pan.unread(),
            [(Unread::Gre, 1), (Unread::TooDeep, 1), (Unread::Link, 1)],
            "counted once each"
        );
    }

    #[test]
    fn arp_in_vxlan_is_rewritten() {
        let pan = CryptoPan::new(&KEY);
        let image = mapped(&pan);
        let arp = |m: Map| {
            let mut a = vec![0, 1, 8, 0, 6, 4, 0, 1, 2, 0, 0, 0, 0, 1];
            a.extend(octets(m(C)));
            a.extend([0; 6]);
            a.extend(octets(m(D)));
            let mut v = vec![0x08, 0, 0, 0, 0, 0, 1, 0];
            v.extend(eth(0x0806, &a));
            frame(ip(m(A), m(B), 17, &udp(m(A), m(B), 51000, 4789, &v)))
        };
        let mut f = arp(&original);
        Anonymizer::new(pan.clone()).frame(LinkType::Ethernet, &mut f);
        assert_eq!(f, arp(&image));
    }

    proptest::proptest! {
        /// Fixtures with bytes changed at random and cut anywhere: no panic, no change of
        /// length.
        #[test]
        fn damaged_fixtures_are_taken_without_a_panic(
            which in 0usize..FIXTURES.len(),
            changes in proptest::collection::vec((0usize..400, proptest::prelude::any::<u8>()), 0..8),
            cut in 0usize..400,
        ) {
            let mut f = (FIXTURES[which].1)(&original);
            for (at, v) in changes {
                let n = f.len();
                f[at % n] = v;
            }
            f.truncate(cut.max(14));
            let n = f.len();
            Anonymizer::new(CryptoPan::new(&KEY)).frame(LinkType::Ethernet, &mut f);
            proptest::prop_assert_eq!(f.len(), n);
        }
    }
}
