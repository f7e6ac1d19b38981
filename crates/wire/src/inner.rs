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
//! deeper than [`MAX_DEPTH`]) is returned as [`Unread`], for the caller to count.

use crate::LinkType;
use crate::bytes::{get_u16, read_u16, write_u16};
use crate::checksum;
use crate::link::{self, NetworkProto};

/// IP headers followed below the outer one (GRE in GRE in an ICMP error, say).
pub const MAX_DEPTH: usize = 4;

/// GTP-U extension headers followed before giving up.
const MAX_GTP_EXTENSIONS: usize = 8;

/// Checksums open at once: at most two around each header level, two of the level at hand.
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
}

impl Unread {
    /// Every kind, in the order of [`Unread::index`].
    pub const ALL: [Unread; 2] = [Unread::Gre, Unread::TooDeep];

    /// The kind's place in [`Unread::ALL`].
    pub const fn index(self) -> usize {
        self as usize
    }

    /// What the kind is, for people.
    pub const fn describe(self) -> &'static str {
        match self {
            Unread::Gre => "in GRE payloads of another kind",
            Unread::TooDeep => "nested deeper than 4 headers",
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
        if ty == 5 && l4 + 8 <= end {
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
            135 | 136 if l4 + 24 <= end => {
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
        if get_u16(self.f, off) == Some(0) && off + 8 <= end {
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
