//! The hash table of a top-N's groups: key values packed as one 128-bit number (an address's
//! 16 bytes, or a number), each with its [`Counters`].
//!
//! A scan counts millions of one-way flows into a table of up to millions of groups, larger
//! than the caches: each count is a wait for memory. So the table is open addressing with
//! linear probing, one group to a 64-byte slot (the key and its counters in one cache line),
//! and a batch's keys are hashed first, each slot fetched ([`Groups::prefetch`]) a few keys
//! before it is counted, so that the waits overlap instead of following one another.

use super::result::Counters;

/// One group: its packed key and counters; empty while `counters.flows == 0`.
#[derive(Debug, Clone, Copy)]
#[repr(C, align(64))]
struct Slot {
    key: u128,
    counters: Counters,
}

const EMPTY: Slot = Slot {
    key: 0,
    counters: Counters::EMPTY,
};

/// How many keys ahead of the one counted a batch fetches slots.
pub const AHEAD: usize = 16;

/// Groups by packed key.
#[derive(Debug, Clone)]
pub struct Groups {
    slots: Vec<Slot>,
    len: usize,
}

impl Default for Groups {
    fn default() -> Self {
        Groups::new()
    }
}

impl Groups {
    /// An empty table.
    pub fn new() -> Groups {
        Groups {
            slots: vec![EMPTY; 64],
            len: 0,
        }
    }

    /// The hash of a key (a multiply of its folded halves; IPv4-mapped addresses differ in the
    /// low half only).
    #[inline(always)]
    pub fn hash(key: u128) -> u64 {
        let x = (key as u64) ^ ((key >> 64) as u64).rotate_left(29);
        let m = u128::from(x) * 0x9e37_79b9_7f4a_7c15;
        ((m >> 64) as u64) ^ (m as u64)
    }

    /// Asks for the slot of `hash` to be brought into the cache.
    #[inline(always)]
    pub fn prefetch(&self, hash: u64) {
        tapflow_sys::cpu::prefetch(&self.slots[hash as usize & (self.slots.len() - 1)]);
    }

    /// The counters of `key` (hashed as `hash`), added if new.
    #[inline(always)]
    pub fn get(&mut self, key: u128, hash: u64) -> &mut Counters {
        if (self.len + 1) * 2 > self.slots.len() {
            self.grow();
        }
        let mask = self.slots.len() - 1;
        let mut i = hash as usize & mask;
        loop {
            let s = &self.slots[i];
            if s.counters.flows == 0 {
                self.len += 1;
                self.slots[i].key = key;
                return &mut self.slots[i].counters;
            }
            if s.key == key {
                return &mut self.slots[i].counters;
            }
            i = (i + 1) & mask;
        }
    }

    /// Adds `c` (at least one flow) to the group of `key`.
    pub fn merge(&mut self, key: u128, c: &Counters) {
        if c.flows > 0 {
            self.get(key, Groups::hash(key)).merge(c);
        }
    }

    #[cold]
    fn grow(&mut self) {
        let twice = vec![EMPTY; self.slots.len() * 2];
        let old = std::mem::replace(&mut self.slots, twice);
        self.len = 0;
        for s in old.iter().filter(|s| s.counters.flows > 0) {
            *self.get(s.key, Groups::hash(s.key)) = s.counters;
        }
    }

    /// The groups.
    pub fn into_groups(self) -> impl Iterator<Item = (u128, Counters)> {
        self.slots
            .into_iter()
            .filter(|s| s.counters.flows > 0)
            .map(|s| (s.key, s.counters))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_grow_drain_and_merge_as_a_hash_map_does() {
        let mut g = Groups::new();
        let mut want = std::collections::HashMap::new();
        for i in 0u128..50_000 {
            // Keys that collide in their low bits, IPv4-mapped-like and plain.
            let k = if i % 2 == 0 {
                (0xffff << 32) | (i * 4096)
            } else {
                i << 64
            };
            let c = g.get(k, Groups::hash(k));
            c.add(1, i as u64, 2 * i as u64, i as i64, i as i64 + 1);
            want.entry(k).or_insert(Counters::EMPTY).add(
                1,
                i as u64,
                2 * i as u64,
                i as i64,
                i as i64 + 1,
            );
            if i % 3 == 0 {
                g.get(k, Groups::hash(k)).add(1, 1, 1, 0, 0);
                want.get_mut(&k).unwrap().add(1, 1, 1, 0, 0);
            }
        }
        assert_eq!(g.len, want.len());
        let mut other = Groups::new();
        for (k, c) in g.into_groups() {
            other.merge(k, &c);
        }
        assert_eq!(other.len, want.len());
        let got: std::collections::HashMap<u128, Counters> = other.into_groups().collect();
        assert_eq!(got, want);
    }
}
