//! Which rule a packet matches, in user space: the exact match behind a kernel prefilter, and
//! the per-rule counters.
//!
//! A packet belongs to the first rule, in rule-set order, that matches it. Few rules are tried
//! one by one. Many are found by tuple-space search (Srinivasan, Suri and Varghese, SIGCOMM
//! 1999): rules are grouped by their shape — IP version, the two prefix lengths, and whether each
//! port is one exact port — and each group is a hash table keyed by the masked addresses and
//! exact ports. A packet costs one probe per shape, and the probe's candidates are checked in
//! full, so hash collisions cost time, never a wrong answer.

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};

use crate::LinkType;
use crate::rules::{Family, Rule, Tuple};

/// Up to this many rule directions are tried one by one.
const LINEAR_MAX: usize = 16;

/// A rule set ready to match packets.
#[derive(Debug, Clone)]
pub struct Matcher {
    rules: Vec<Rule>,
    shapes: Vec<Shape>,
    /// The first rule testing nothing but the IP version, for IPv4 and for IPv6.
    whole_family: [Option<usize>; 2],
}

/// One group of rule directions with the same shape.
#[derive(Debug, Clone)]
struct Shape {
    family: Family,
    src_len: u8,
    dst_len: u8,
    /// The prefixes as masks over the address read as a big-endian `u128`.
    src_mask: u128,
    dst_mask: u128,
    sport_exact: bool,
    dport_exact: bool,
    /// The lowest rule index in the group: no better match can come from it.
    first_rule: u32,
    /// Masked-tuple hash → (rule index, reversed) candidates, in rule order.
    table: HashMap<u64, Vec<(u32, bool)>, BuildHasherDefault<Identity>>,
}

impl Matcher {
    /// A matcher for `rules`, in priority order.
    pub fn new(rules: Vec<Rule>) -> Matcher {
        let directions: usize = rules.iter().map(|r| 1 + usize::from(r.both)).sum();
        let mut shapes: Vec<Shape> = Vec::new();
        if directions > LINEAR_MAX {
            for (i, rule) in rules.iter().enumerate() {
                for reverse in [false, true].into_iter().take(1 + usize::from(rule.both)) {
                    let r = if reverse {
                        rule.reversed()
                    } else {
                        rule.clone()
                    };
                    let family = r.family();
                    let src_len = r.src.map_or(0, |p| p.len);
                    let dst_len = r.dst.map_or(0, |p| p.len);
                    let sport_exact = r.sport.is_some_and(|p| p.lo == p.hi);
                    let dport_exact = r.dport.is_some_and(|p| p.lo == p.hi);
                    let at = shapes.iter().position(|s| {
                        (s.family, s.src_len, s.dst_len, s.sport_exact, s.dport_exact)
                            == (family, src_len, dst_len, sport_exact, dport_exact)
                    });
                    let shape = match at {
                        Some(k) => &mut shapes[k],
                        None => {
                            shapes.push(Shape {
                                family,
                                src_len,
                                dst_len,
                                src_mask: mask(src_len),
                                dst_mask: mask(dst_len),
                                sport_exact,
                                dport_exact,
                                first_rule: i as u32,
                                table: HashMap::default(),
                            });
                            shapes.last_mut().expect("just pushed")
                        }
                    };
                    let key = key(
                        r.src.map_or(0, |p| u128::from_be_bytes(p.addr)),
                        r.dst.map_or(0, |p| u128::from_be_bytes(p.addr)),
                        r.sport.filter(|_| sport_exact).map_or(0, |p| p.lo),
                        r.dport.filter(|_| dport_exact).map_or(0, |p| p.lo),
                    );
                    shape
                        .table
                        .entry(key)
                        .or_default()
                        .push((i as u32, reverse));
                }
            }
            shapes.sort_by_key(|s| s.first_rule);
        }
        let whole_family = [false, true].map(|v6| {
            rules
                .iter()
                .position(|r| r.is_whole_family() && r.family().covers(v6))
        });
        Matcher {
            rules,
            shapes,
            whole_family,
        }
    }

    /// The index of the first rule matching a frame captured with `linktype`: by its tuple, or,
    /// for an IP packet too short to hold its addresses, as in the kernel filter, the first
    /// rule that tests nothing but the IP version.
    #[inline]
    pub fn classify_frame(&self, linktype: LinkType, frame: &[u8]) -> Option<usize> {
        let (ip, v6) = Tuple::ip_version(linktype, frame)?;
        match frame.get(ip..).and_then(|h| Tuple::of_ip(h, v6)) {
            Some(t) => self.classify(&t),
            None => self.classify_short(v6),
        }
    }

    /// The index of the first rule matching an IP packet too short to hold its addresses: the
    /// first that tests nothing but the IP version (`ipv6` says which), if any.
    #[inline]
    pub fn classify_short(&self, ipv6: bool) -> Option<usize> {
        self.whole_family[usize::from(ipv6)]
    }

    /// The rules, in priority order.
    pub fn rules(&self) -> &[Rule] {
        &self.rules
    }

    /// The index of the first rule matching `t`, if any.
    #[inline]
    pub fn classify(&self, t: &Tuple) -> Option<usize> {
        if self.shapes.is_empty() {
            return self.rules.iter().position(|r| r.matches(t));
        }
        let mut best = u32::MAX;
        let (src, dst) = (u128::from_be_bytes(t.src), u128::from_be_bytes(t.dst));
        for s in &self.shapes {
            if s.first_rule >= best {
                break;
            }
            if !s.family.covers(t.ipv6) {
                continue;
            }
            let (sp, dp) = match t.ports {
                Some(p) => p,
                None if s.sport_exact || s.dport_exact => continue,
                None => (0, 0),
            };
            let k = key(
                src & s.src_mask,
                dst & s.dst_mask,
                if s.sport_exact { sp } else { 0 },
                if s.dport_exact { dp } else { 0 },
            );
            let Some(candidates) = s.table.get(&k) else {
                continue;
            };
            for &(i, reverse) in candidates {
                if i >= best {
                    break;
                }
                if self.rules[i as usize].matches_one_way(t, reverse) {
                    best = i;
                    break;
                }
            }
        }
        (best != u32::MAX).then_some(best as usize)
    }
}

/// The mask of a `len`-bit prefix over a big-endian `u128` address.
fn mask(len: u8) -> u128 {
    u128::MAX.checked_shl(128 - u32::from(len)).unwrap_or(0)
}

/// A hash of the masked addresses and exact ports (two multiplications deep).
#[inline]
fn key(src: u128, dst: u128, sport: u16, dport: u16) -> u64 {
    const K1: u64 = 0x9e37_79b9_7f4a_7c15;
    const K2: u64 = 0xc2b2_ae3d_27d4_eb4f;
    const K3: u64 = 0x1656_67b1_9e37_79f9;
    let fold = |a: u128| a as u64 ^ ((a >> 64) as u64).rotate_left(32);
    let h = (fold(src).wrapping_mul(K1) ^ fold(dst)).wrapping_mul(K2)
        ^ (u64::from(sport) << 16 | u64::from(dport)).wrapping_mul(K3);
    h ^ (h >> 29)
}

/// The keys are already hashes.
#[derive(Debug, Default, Clone, Copy)]
struct Identity(u64);

impl Hasher for Identity {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = self.0.rotate_left(8) ^ u64::from(b);
        }
    }
    fn write_u64(&mut self, n: u64) {
        self.0 = n;
    }
}
