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

use crate::rules::{Family, Rule, Tuple};

/// Up to this many rule directions are tried one by one.
const LINEAR_MAX: usize = 16;

/// A rule set ready to match packets.
#[derive(Debug, Clone)]
pub struct Matcher {
    rules: Vec<Rule>,
    shapes: Vec<Shape>,
}

/// One group of rule directions with the same shape.
#[derive(Debug, Clone)]
struct Shape {
    family: Family,
    src_len: u8,
    dst_len: u8,
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
                                sport_exact,
                                dport_exact,
                                first_rule: i as u32,
                                table: HashMap::default(),
                            });
                            shapes.last_mut().expect("just pushed")
                        }
                    };
                    let key = key(
                        &r.src.map_or([0; 16], |p| p.addr),
                        &r.dst.map_or([0; 16], |p| p.addr),
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
        Matcher { rules, shapes }
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
        for s in &self.shapes {
            if s.first_rule >= best {
                break;
            }
            match s.family {
                Family::V4 if t.ipv6 => continue,
                Family::V6 if !t.ipv6 => continue,
                _ => {}
            }
            let (sp, dp) = match t.ports {
                Some(p) => p,
                None if s.sport_exact || s.dport_exact => continue,
                None => (0, 0),
            };
            let k = key(
                &masked(&t.src, s.src_len),
                &masked(&t.dst, s.dst_len),
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

#[inline]
fn masked(addr: &[u8; 16], len: u8) -> [u8; 16] {
    let mut out = [0u8; 16];
    let full = usize::from(len / 8);
    out[..full].copy_from_slice(&addr[..full]);
    let rest = len % 8;
    if rest != 0 {
        out[full] = addr[full] & (0xffu8 << (8 - rest));
    }
    out
}

#[inline]
fn key(src: &[u8; 16], dst: &[u8; 16], sport: u16, dport: u16) -> u64 {
    const K: u64 = 0x9e37_79b9_7f4a_7c15;
    let word =
        |b: &[u8; 16], at: usize| u64::from_le_bytes(b[at..at + 8].try_into().unwrap_or([0; 8]));
    let mut h = u64::from(sport) << 16 | u64::from(dport);
    for w in [word(src, 0), word(src, 8), word(dst, 0), word(dst, 8)] {
        h = (h ^ w).wrapping_mul(K).rotate_left(29);
    }
    h
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
