//! One interval's per-destination accounting, in bounded memory: the space-saving algorithm
//! (Metwally, Agrawal and El Abbadi, "Efficient Computation of Frequent and Top-k Elements in
//! Data Streams", ICDT 2005) over destinations, weighted by packets.
//!
//! The table holds at most `capacity` (K) destinations. A destination not in it takes the place
//! of the one with the fewest packets and inherits that count as its `error`. With N packets in
//! the interval:
//! - every destination with more than N / K packets is in the table;
//! - an entry's `weight` overestimates its packets by at most its `error` ≤ N / K;
//! - its [`Counts`] are exact since it entered, so they underestimate by at most `error`.
//!
//! Detection compares [`Counts`] (the lower bound) with thresholds, so a table never raises an
//! alert traffic did not earn; with K = 4096 and a threshold of 20,000 packets/s the counts of
//! any destination over it are exact until the interval carries more than 82 million packets.
//!
//! Memory is fixed when the table is made: [`Tally::memory_bytes`] (340 bytes per entry: the
//! entry with its evidence, its weight again for the heap, a heap slot and two index slots;
//! 1.33 MiB for K = 4096), however many destinations pass. No allocation, lock or system call
//! per observation: a lookup in an open-addressing index and a sift in a min-heap, O(log K).

use crate::detect::signature::{Observation, PROTOS, SIGNATURES};

/// Sources and source ports kept per destination, as evidence.
pub const EVIDENCE: usize = 4;
const EMPTY: u32 = u32::MAX;
/// The most destinations a table keeps (about 350 MB).
pub const MAX_CAPACITY: usize = 1 << 20;

/// A destination address (IPv4 in the first 4 bytes).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Addr {
    /// Whether it is IPv6.
    pub ipv6: bool,
    /// The bytes.
    pub bytes: [u8; 16],
}

impl Addr {
    /// As text.
    pub fn ip(&self) -> std::net::IpAddr {
        if self.ipv6 {
            std::net::Ipv6Addr::from(self.bytes).into()
        } else {
            let b = self.bytes;
            std::net::Ipv4Addr::new(b[0], b[1], b[2], b[3]).into()
        }
    }

    #[inline]
    fn hash(&self) -> u64 {
        let lo = u64::from_le_bytes(self.bytes[..8].try_into().unwrap_or_default());
        let hi = u64::from_le_bytes(self.bytes[8..].try_into().unwrap_or_default());
        let mut h = (lo ^ u64::from(self.ipv6)).wrapping_mul(0x9e37_79b9_7f4a_7c15);
        h ^= h >> 29;
        h = (h ^ hi).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        h ^ (h >> 32)
    }
}

/// What reached one destination (or a group, or everything) in one interval.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Counts {
    /// Packets.
    pub packets: u64,
    /// IP bytes.
    pub bytes: u64,
    /// Flows (flow records; 0 on a packet stream).
    pub flows: u64,
    /// Packets per [`crate::detect::signature::ProtoClass`].
    pub protos: [u64; PROTOS],
    /// Packets per [`crate::detect::signature::Signature`].
    pub signatures: [u64; SIGNATURES],
}

impl Counts {
    /// Adds one observation.
    #[inline]
    pub fn observe(&mut self, o: &Observation) {
        self.packets += o.packets;
        self.bytes += o.bytes;
        self.flows += o.flows;
        self.protos[o.class() as usize] += o.packets;
        let s = o.signatures();
        for (i, n) in self.signatures.iter_mut().enumerate() {
            if s & (1 << i) != 0 {
                *n += o.packets;
            }
        }
    }

    /// Adds another interval's or worker's counts.
    pub fn add(&mut self, o: &Counts) {
        self.packets += o.packets;
        self.bytes += o.bytes;
        self.flows += o.flows;
        for (a, b) in self.protos.iter_mut().zip(o.protos) {
            *a += b;
        }
        for (a, b) in self.signatures.iter_mut().zip(o.signatures) {
            *a += b;
        }
    }
}

/// A small space-saving summary of `T` (a source address, a source port): the heaviest few.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Top<T: Copy + PartialEq + Default> {
    /// The kept values and their packet weights (an overestimate, as in the big table).
    pub items: [(T, u64); EVIDENCE],
}

impl<T: Copy + PartialEq + Default> Top<T> {
    /// Adds `w` packets of `v`.
    #[inline]
    pub fn add(&mut self, v: T, w: u64) {
        let mut min = 0;
        for i in 0..EVIDENCE {
            let (k, n) = &mut self.items[i];
            if *n > 0 && *k == v {
                *n += w;
                return;
            }
            if *n < self.items[min].1 {
                min = i;
            }
        }
        let (k, n) = &mut self.items[min];
        *k = v;
        *n += w;
    }

    /// The kept values, heaviest first.
    pub fn sorted(&self) -> Vec<(T, u64)> {
        let mut v: Vec<_> = self.items.iter().copied().filter(|i| i.1 > 0).collect();
        v.sort_by_key(|i| std::cmp::Reverse(i.1));
        v
    }
}

/// One destination's entry.
#[derive(Debug, Clone, Copy, Default)]
pub struct Entry {
    /// The destination.
    pub addr: Addr,
    /// Packets counted for it, including the `error` it inherited.
    pub weight: u64,
    /// The weight of the entry it replaced: how much `weight` may overstate.
    pub error: u64,
    /// Exact counts since it entered the table.
    pub counts: Counts,
    /// The heaviest sources.
    pub sources: Top<Addr>,
    /// The heaviest source ports.
    pub sports: Top<u16>,
    heap_at: u32,
}

/// One interval's table: the top destinations, and the counts of everything.
#[derive(Debug, Clone)]
pub struct Tally {
    /// The interval's start, in seconds since 1970.
    pub second: u64,
    /// Everything observed in the interval.
    pub total: Counts,
    /// One packet in this many was counted, weighing this many (1: every one).
    pub period: u64,
    /// Everything observed per group of [`crate::detect::threshold::Thresholds`].
    pub groups: Vec<Counts>,
    entries: Vec<Entry>,
    /// Each entry's weight again, packed: the heap's comparisons read these, not the entries.
    weights: Vec<u64>,
    /// Entry indexes, a min-heap by weight.
    heap: Vec<u32>,
    /// Open addressing by [`Addr::hash`], linear probing; [`EMPTY`] or an entry index.
    index: Vec<u32>,
}

impl Tally {
    /// A table for at most `capacity` destinations (at least 1) and `groups` groups.
    pub fn new(capacity: usize, groups: usize) -> Tally {
        let capacity = capacity.clamp(1, MAX_CAPACITY);
        Tally {
            second: 0,
            total: Counts::default(),
            period: 1,
            groups: vec![Counts::default(); groups],
            entries: Vec::with_capacity(capacity),
            weights: Vec::with_capacity(capacity),
            heap: Vec::with_capacity(capacity),
            index: vec![EMPTY; (capacity * 2).next_power_of_two()],
        }
    }

    /// The most destinations it keeps.
    pub fn capacity(&self) -> usize {
        self.entries.capacity()
    }

    /// The bytes it holds, fixed at creation.
    pub fn memory_bytes(&self) -> usize {
        std::mem::size_of::<Tally>()
            + self.entries.capacity() * std::mem::size_of::<Entry>()
            + self.weights.capacity() * 8
            + self.heap.capacity() * 4
            + self.index.capacity() * 4
            + self.groups.capacity() * std::mem::size_of::<Counts>()
    }

    /// The destinations kept.
    pub fn entries(&self) -> &[Entry] {
        &self.entries
    }

    /// Empties it for the interval starting at `second`, keeping its memory.
    pub fn reset(&mut self, second: u64) {
        self.second = second;
        self.total = Counts::default();
        self.period = 1;
        self.groups.fill(Counts::default());
        self.entries.clear();
        self.weights.clear();
        self.heap.clear();
        self.index.fill(EMPTY);
    }

    /// Adds one observation, to destination group `group` if it is in one. No allocation,
    /// lock or system call.
    #[inline]
    pub fn observe(&mut self, o: &Observation, group: Option<usize>) {
        self.total.observe(o);
        if let Some(g) = group.and_then(|g| self.groups.get_mut(g)) {
            g.observe(o);
        }
        let addr = Addr {
            ipv6: o.ipv6,
            bytes: o.dst,
        };
        let e = self.slot(addr, o.packets);
        e.counts.observe(o);
        e.sources.add(
            Addr {
                ipv6: o.ipv6,
                bytes: o.src,
            },
            o.packets,
        );
        e.sports.add(o.sport, o.packets);
    }

    /// Adds another table's entries (another worker's, for the same interval).
    pub fn merge(&mut self, other: &Tally) {
        self.total.add(&other.total);
        self.period = self.period.max(other.period);
        for (a, b) in self.groups.iter_mut().zip(&other.groups) {
            a.add(b);
        }
        for x in &other.entries {
            let e = self.slot(x.addr, x.weight);
            e.error += x.error;
            e.counts.add(&x.counts);
            for (s, n) in x.sources.items {
                if n > 0 {
                    e.sources.add(s, n);
                }
            }
            for (p, n) in x.sports.items {
                if n > 0 {
                    e.sports.add(p, n);
                }
            }
        }
    }

    /// The entry of `addr` with `w` more packets of weight: found, new, or in place of the
    /// lightest.
    #[inline]
    fn slot(&mut self, addr: Addr, w: u64) -> &mut Entry {
        let mask = self.index.len() - 1;
        let mut at = addr.hash() as usize & mask;
        loop {
            match self.index[at] {
                EMPTY => break,
                i if self.entries[i as usize].addr == addr => {
                    let i = i as usize;
                    self.entries[i].weight += w;
                    self.weights[i] += w;
                    let h = self.entries[i].heap_at as usize;
                    self.sift_down(h);
                    return &mut self.entries[i];
                }
                _ => at = (at + 1) & mask,
            }
        }
        let i = if self.entries.len() < self.entries.capacity() {
            let i = self.entries.len();
            self.entries.push(Entry {
                addr,
                weight: w,
                heap_at: i as u32,
                ..Default::default()
            });
            self.index[at] = i as u32;
            self.weights.push(w);
            self.heap.push(i as u32);
            self.sift_up(i);
            return &mut self.entries[i];
        } else {
            self.heap[0] as usize
        };
        // Space-saving: the lightest entry gives its place and its weight.
        let old = self.entries[i];
        self.unindex(old.addr);
        self.entries[i] = Entry {
            addr,
            weight: old.weight + w,
            error: old.weight,
            heap_at: 0,
            ..Default::default()
        };
        self.weights[i] = old.weight + w;
        let mut at = addr.hash() as usize & mask;
        while self.index[at] != EMPTY {
            at = (at + 1) & mask;
        }
        self.index[at] = i as u32;
        self.sift_down(0);
        &mut self.entries[i]
    }

    /// Removes `addr` from the index (backward-shift deletion keeps probe chains whole).
    fn unindex(&mut self, addr: Addr) {
        let mask = self.index.len() - 1;
        let mut at = addr.hash() as usize & mask;
        while self.entries[self.index[at] as usize].addr != addr {
            at = (at + 1) & mask;
        }
        let mut hole = at;
        let mut next = (hole + 1) & mask;
        while self.index[next] != EMPTY {
            let home = self.entries[self.index[next] as usize].addr.hash() as usize & mask;
            // Move it back if its home is not in (hole, next].
            if (next.wrapping_sub(home) & mask) >= (next.wrapping_sub(hole) & mask) {
                self.index[hole] = self.index[next];
                hole = next;
            }
            next = (next + 1) & mask;
        }
        self.index[hole] = EMPTY;
    }

    #[inline]
    fn weight_at(&self, h: usize) -> u64 {
        self.weights[self.heap[h] as usize]
    }

    fn swap(&mut self, a: usize, b: usize) {
        self.heap.swap(a, b);
        self.entries[self.heap[a] as usize].heap_at = a as u32;
        self.entries[self.heap[b] as usize].heap_at = b as u32;
    }

    fn sift_up(&mut self, mut h: usize) {
        while h > 0 {
            let parent = (h - 1) / 2;
            if self.weight_at(parent) <= self.weight_at(h) {
                break;
            }
            self.swap(parent, h);
            h = parent;
        }
    }

    fn sift_down(&mut self, mut h: usize) {
        let n = self.heap.len();
        loop {
            let (l, r) = (2 * h + 1, 2 * h + 2);
            let mut least = h;
            if l < n && self.weight_at(l) < self.weight_at(least) {
                least = l;
            }
            if r < n && self.weight_at(r) < self.weight_at(least) {
                least = r;
            }
            if least == h {
                return;
            }
            self.swap(h, least);
            h = least;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn to(dst: u32, packets: u64) -> Observation {
        let mut o = Observation {
            proto: 17,
            sport: 53,
            packets,
            bytes: packets * 100,
            ..Default::default()
        };
        o.dst[..4].copy_from_slice(&dst.to_be_bytes());
        o.src[..4].copy_from_slice(&(dst ^ 0xffff).to_be_bytes());
        o
    }

    fn find(t: &Tally, dst: u32) -> Option<&Entry> {
        t.entries()
            .iter()
            .find(|e| e.addr.bytes[..4] == dst.to_be_bytes())
    }

    #[test]
    fn a_million_destinations_stay_within_the_stated_bound() {
        let mut t = Tally::new(4096, 0);
        let bound = t.memory_bytes();
        // The stated bound: 340 bytes an entry, 1.33 MiB for K = 4096.
        assert!(bound <= 4096 * 340 + 1024, "{bound} bytes");
        let victim = 0x0a0a_0a0a;
        for i in 0..1_000_000u32 {
            t.observe(&to(0x2000_0000 + i, 1), None);
            if i % 10 == 0 {
                t.observe(&to(victim, 1), None);
            }
        }
        // Nothing grew: the same capacities, so the same bytes.
        assert_eq!(t.memory_bytes(), bound);
        assert_eq!(t.entries().len(), 4096);
        assert_eq!(t.total.packets, 1_100_000);
        // The heavy destination is kept, its exact counts within N / K of the truth.
        let e = find(&t, victim).expect("the heavy hitter is in the table");
        let n_over_k = 1_100_000 / 4096;
        assert!(e.counts.packets <= 100_000 && e.counts.packets + n_over_k >= 100_000);
        assert!(e.weight >= 100_000 && e.error <= n_over_k);
    }

    #[test]
    fn counts_are_exact_while_destinations_fit() {
        let mut t = Tally::new(16, 0);
        for d in 0..10u32 {
            for _ in 0..=d {
                t.observe(&to(d, 3), None);
            }
        }
        for d in 0..10u32 {
            let e = find(&t, d).unwrap();
            assert_eq!((e.counts.packets, e.error), (3 * (u64::from(d) + 1), 0));
            assert_eq!(e.counts.signatures[2], e.counts.packets);
            assert_eq!(e.sports.sorted()[0], (53, e.counts.packets));
        }
        t.reset(7);
        assert!(t.entries().is_empty() && t.total.packets == 0 && t.second == 7);
        t.observe(&to(1, 1), None);
        assert_eq!(find(&t, 1).unwrap().counts.packets, 1);
    }

    #[test]
    fn evictions_keep_the_index_consistent() {
        let mut t = Tally::new(8, 0);
        // Churn many keys through a small table; every kept key must still be found.
        for i in 0..10_000u32 {
            t.observe(&to(i % 97, 1 + u64::from(i % 5)), None);
        }
        for e in t.entries() {
            let before = e.weight;
            let d = u32::from_be_bytes(e.addr.bytes[..4].try_into().unwrap());
            let mut c = t.clone();
            c.observe(&to(d, 1), None);
            assert_eq!(find(&c, d).unwrap().weight, before + 1);
            assert_eq!(c.entries().len(), 8);
        }
    }

    #[test]
    fn merging_two_workers_adds_their_counts() {
        let (mut a, mut b) = (Tally::new(8, 0), Tally::new(8, 0));
        a.observe(&to(5, 10), None);
        b.observe(&to(5, 7), None);
        b.observe(&to(6, 1), None);
        a.merge(&b);
        assert_eq!(find(&a, 5).unwrap().counts.packets, 17);
        assert_eq!(a.total.packets, 18);
    }

    #[test]
    fn top_keeps_the_heaviest() {
        let mut t = Top::<u16>::default();
        for (p, n) in [(1, 5), (2, 50), (3, 1), (4, 1), (5, 1), (2, 10)] {
            t.add(p, n);
        }
        assert_eq!(t.sorted()[0], (2, 60));
    }
}
