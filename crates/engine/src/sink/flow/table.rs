//! One worker's flow table (a shard: fanout is symmetric, so both directions of a connection
//! reach the same worker and no table is shared).
//!
//! Layout, chosen for memory per flow and one cache miss per lookup in the common case:
//! - a slab of 128-byte [`Flow`] entries (two cache lines), reserved for `max_flows` up front
//!   but only touched as flows arrive; slab and index are advised into transparent huge pages,
//!   as a large table read at random otherwise misses the TLB on nearly every access;
//! - the slots of ended flows on a stack of their own (reserved like the slab), reused last in,
//!   first out, so that a new flow takes a slot without first loading it;
//! - an open-addressing index of `u32` slot numbers (0 = empty), linear probing at a load of at
//!   most 1/2, backward-shift deletion (no tombstones); each flow keeps its 32-bit hash so
//!   probes rarely touch a flow that does not match and deletion never rehashes a key;
//! - one list per timeout class (TCP, UDP, ICMP, other, closed TCP), ordered by the second in
//!   which each flow was last moved to its tail. A flow moves at most once per second of packet
//!   time, so a busy flow costs no list work on most packets; the idle sweep walks only list
//!   heads and is late by less than one second. The heads are also the oldest flows, the ones
//!   evicted first when the table is full. A flow keeps its predecessor; the successors are a
//!   `u32` array beside the slab (4 bytes a flow), small enough to stay cached, so the sweep
//!   runs ahead along a list, loading the flows it will end, instead of waiting for each flow
//!   to learn where the next one is.
//!
//! The hash is seeded per table so that an attacker who does not know the seed cannot aim
//! packets at one probe chain.

use serde::ser::{Serialize, SerializeStruct, Serializer};
use tapflow_wire::flowkey::FlowFields;
use tapflow_wire::flowrecord::{Counters, EndReason, FlowRecord};

/// Timeout classes: each has its own idle timeout and its own list.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum Class {
    /// TCP, not yet closed.
    Tcp = 0,
    /// UDP.
    Udp = 1,
    /// ICMP and ICMPv6.
    Icmp = 2,
    /// Any other IP protocol.
    Other = 3,
    /// TCP after FIN in both directions or RST: kept briefly for the last ACKs, then ended
    /// with reason 3.
    Closed = 4,
}

/// Number of [`Class`]es.
pub const CLASSES: usize = 5;

impl Class {
    /// Every class, in index order.
    pub const ALL: [Class; CLASSES] = [
        Class::Tcp,
        Class::Udp,
        Class::Icmp,
        Class::Other,
        Class::Closed,
    ];

    fn of(proto: u8, ipv6: bool) -> Class {
        match (proto, ipv6) {
            (6, _) => Class::Tcp,
            (17, _) => Class::Udp,
            (1, false) | (58, true) => Class::Icmp,
            _ => Class::Other,
        }
    }

    /// The name used on the command line (`--idle-timeout tcp=300`).
    pub const fn name(self) -> &'static str {
        match self {
            Class::Tcp => "tcp",
            Class::Udp => "udp",
            Class::Icmp => "icmp",
            Class::Other => "other",
            Class::Closed => "closed",
        }
    }
}

/// Idle timeouts in seconds per [`Class`], in index order: TCP 300, UDP 60, ICMP 60, other 60,
/// closed TCP 5 (Zeek's inactivity timeouts; docs/flows.md compares them with softflowd's,
/// nfpcapd's and YAF's).
pub const DEFAULT_IDLE_SECS: [u64; CLASSES] = [300, 60, 60, 60, 5];

/// Timeouts and size of a table.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TableConfig {
    /// Most flows held at once; the oldest is evicted (reason 5) to make room.
    pub max_flows: usize,
    /// A record never spans more than this (ns); the flow then continues in a new record.
    pub active_ns: u64,
    /// Idle timeout of each [`Class`] (ns).
    pub idle_ns: [u64; CLASSES],
    /// Hash seed.
    pub seed: u64,
}

const NIL: u32 = u32::MAX;
/// Index slots to start with (256 KiB); the index doubles whenever it would pass half full, so
/// it stays as small as the flows held need (a large, sparse index misses the cache on every
/// lookup).
const INITIAL_SLOTS: usize = 1 << 16;
const NS: u64 = 1_000_000_000;
/// How many flows ahead of the head of a list the idle sweep starts loading flows.
const SWEEP_AHEAD: usize = 8;

const FIN: u16 = 0x01;
const SYN: u16 = 0x02;
const RST: u16 = 0x04;
const ACK: u16 = 0x10;

const FIN_FWD: u8 = 1;
const FIN_REV: u8 = 2;

/// What one direction carried in the current record (32 bytes; `Counters` with a 32-bit
/// packet count, so that a flow fits two cache lines).
#[derive(Debug, Clone, Copy, Default)]
#[repr(C)]
struct Side {
    first: u64,
    last: u64,
    octets: u64,
    packets: u32,
    flags: u16,
}

impl Side {
    #[inline(always)]
    fn add(&mut self, ts: u64, octets: u64, flags: u16) {
        if self.packets == 0 {
            self.first = ts;
            self.last = ts;
        } else {
            self.first = self.first.min(ts);
            self.last = self.last.max(ts);
        }
        self.packets += 1;
        self.octets += octets;
        self.flags |= flags;
    }

    fn counters(&self) -> Counters {
        Counters {
            packets: u64::from(self.packets),
            octets: self.octets,
            tcp_flags: self.flags,
            first_ns: self.first,
            last_ns: self.last,
        }
    }
}

/// One flow: key, both directions' counters, its predecessor in its list. 128 bytes.
#[derive(Debug, Clone, Copy, Default)]
#[repr(C, align(64))]
struct Flow {
    src: [u8; 16],
    dst: [u8; 16],
    fwd: Side,
    rev: Side,
    hash: u32,
    prev: u32,
    moved_s: u32,
    sport: u16,
    dport: u16,
    vlan: u16,
    interface: u16,
    proto: u8,
    ipv6: bool,
    class: u8,
    fins: u8,
}

const _: () = assert!(size_of::<Flow>() == 128);

impl Flow {
    #[inline]
    fn last(&self) -> u64 {
        self.fwd.last.max(self.rev.last)
    }

    #[inline]
    fn start(&self) -> u64 {
        match (self.fwd.packets, self.rev.packets) {
            (_, 0) => self.fwd.first,
            (0, _) => self.rev.first,
            _ => self.fwd.first.min(self.rev.first),
        }
    }

    /// Which way a packet with these fields goes, if it belongs to this flow.
    #[inline]
    fn direction(&self, p: &FlowFields, interface: u16) -> Option<bool> {
        if self.proto != p.proto
            || self.ipv6 != p.ipv6
            || self.vlan != p.vlan
            || self.interface != interface
        {
            return None;
        }
        if self.sport == p.sport && self.dport == p.dport && self.src == p.src && self.dst == p.dst
        {
            Some(true)
        } else if self.sport == p.dport
            && self.dport == p.sport
            && self.src == p.dst
            && self.dst == p.src
        {
            Some(false)
        } else {
            None
        }
    }

    #[inline]
    fn count(&mut self, forward: bool, ts: u64, octets: u64, flags: u16) {
        let side = if forward {
            &mut self.fwd
        } else {
            &mut self.rev
        };
        side.add(ts, octets, flags);
    }

    fn reset_counters(&mut self) {
        self.fwd = Side::default();
        self.rev = Side::default();
    }

    fn record(&self, end_reason: EndReason) -> FlowRecord {
        FlowRecord {
            ipv6: self.ipv6,
            proto: self.proto,
            src: self.src,
            dst: self.dst,
            sport: self.sport,
            dport: self.dport,
            vlan: self.vlan,
            interface: u32::from(self.interface),
            fwd: self.fwd.counters(),
            rev: self.rev.counters(),
            end_reason,
        }
    }
}

/// What a table has done.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct TableStats {
    /// Flows created.
    pub created: u64,
    /// Records exported, by end reason (index = IANA value − 1).
    pub ended: [u64; 5],
}

impl Serialize for TableStats {
    /// `created`, then `ended_idle`, `ended_active`, `ended_end`, `ended_forced`,
    /// `ended_evicted` (the end reasons in IANA order).
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        const ENDED: [&str; 5] = [
            "ended_idle",
            "ended_active",
            "ended_end",
            "ended_forced",
            "ended_evicted",
        ];
        let mut st = s.serialize_struct("TableStats", 1 + ENDED.len())?;
        st.serialize_field("created", &self.created)?;
        for (key, n) in ENDED.into_iter().zip(self.ended) {
            st.serialize_field(key, &n)?;
        }
        st.end()
    }
}

/// A flow table; see the module documentation.
#[derive(Debug)]
pub struct FlowTable {
    cfg: TableConfig,
    flows: Vec<Flow>,
    /// Each flow's successor in its list, beside the slab rather than in it: the idle sweep
    /// walks ahead along a list without loading the flows it passes (4 bytes a flow, few
    /// enough to stay in the cache).
    next: Vec<u32>,
    /// Slots of ended flows, reused last in, first out: a stack of its own, so that taking a slot
    /// does not wait for the slot to load.
    free: Vec<u32>,
    index: Vec<u32>,
    mask: usize,
    len: usize,
    head: [u32; CLASSES],
    tail: [u32; CLASSES],
    /// An odd multiplier made from the seed, for the hash's non-address fields.
    rest_key: u64,
    stats: TableStats,
}

impl FlowTable {
    /// An empty table. Memory is reserved for `max_flows` but touched only as flows arrive.
    pub fn new(cfg: TableConfig) -> FlowTable {
        let max = cfg.max_flows.clamp(1, NIL as usize - 1);
        let slots = (max * 2).next_power_of_two().min(INITIAL_SLOTS);
        let mut flows = Vec::with_capacity(max);
        tapflow_sys::mmap::advise_huge(flows.spare_capacity_mut());
        FlowTable {
            cfg: TableConfig {
                max_flows: max,
                ..cfg
            },
            flows,
            next: Vec::with_capacity(max),
            free: Vec::with_capacity(max),
            index: vec![0; slots],
            mask: slots - 1,
            len: 0,
            head: [NIL; CLASSES],
            tail: [NIL; CLASSES],
            rest_key: mix(cfg.seed.rotate_left(32)) | 1,
            stats: TableStats::default(),
        }
    }

    /// Flows held now.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the table holds no flow.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// What the table has done so far.
    pub fn stats(&self) -> TableStats {
        self.stats
    }

    /// The symmetric, seeded hash of a packet's key, for [`FlowTable::update_hashed`].
    #[inline]
    pub fn hash(&self, p: &FlowFields, interface: u32) -> u32 {
        // The key keeps 16 bits of the interface, and so does its hash.
        let interface = u16::try_from(interface).unwrap_or(u16::MAX);
        let w = |b: &[u8; 16]| {
            let (lo, hi) = b.split_at(8);
            u64::from_le_bytes(lo.try_into().unwrap_or_default())
                ^ u64::from_le_bytes(hi.try_into().unwrap_or_default()).rotate_left(29)
        };
        let (a, b) = (
            w(&p.src) ^ u64::from(p.sport) << 48,
            w(&p.dst) ^ u64::from(p.dport) << 48,
        );
        // `ipv6` is kept away from `proto`: side by side, the two bytes would be read as one
        // 16-bit load, which waits for the two separate stores that wrote them to retire.
        let rest = u64::from(p.proto)
            | u64::from(p.vlan) << 16
            | u64::from(interface) << 32
            | u64::from(p.ipv6) << 48;
        // Symmetric: the two ends in a fixed order. Every part passes through the seed (a mix, or
        // a multiplication by an odd number made from it), so which keys collide depends on it.
        let (lo, hi) = if a <= b { (a, b) } else { (b, a) };
        let ends = mix(lo ^ self.cfg.seed) ^ hi ^ rest.wrapping_mul(self.rest_key);
        (mix(ends) >> 32) as u32
    }

    /// Counts one packet seen at `ts` (ns). Records the packet ends are passed to `out`.
    #[inline]
    pub fn update(
        &mut self,
        p: &FlowFields,
        interface: u32,
        ts: u64,
        out: &mut impl FnMut(FlowRecord),
    ) {
        self.update_hashed(p, interface, self.hash(p, interface), ts, out);
    }

    /// Starts loading the index slot a packet with `hash` looks at first: a hint, for a packet
    /// counted a little later.
    #[inline]
    pub fn prefetch_slot(&self, hash: u32) {
        tapflow_sys::cpu::prefetch(&self.index[hash as usize & self.mask]);
    }

    /// Starts loading the flow the index slot of `hash` names, once that slot is loaded
    /// ([`FlowTable::prefetch_slot`]): a hint.
    #[inline]
    pub fn prefetch_flow(&self, hash: u32) {
        let v = self.index[hash as usize & self.mask];
        if let Some(f) = self.flows.get((v as usize).wrapping_sub(1)) {
            tapflow_sys::cpu::prefetch(f);
        }
    }

    /// [`FlowTable::update`] with the packet's [`FlowTable::hash`] already computed.
    #[inline(always)]
    pub fn update_hashed(
        &mut self,
        p: &FlowFields,
        interface: u32,
        hash: u32,
        ts: u64,
        out: &mut impl FnMut(FlowRecord),
    ) {
        let interface = u16::try_from(interface).unwrap_or(u16::MAX);
        let (slot, found) = self.find(hash, p, interface);
        let Some((i, forward)) = found else {
            self.insert(slot, hash, p, interface, ts, out);
            return;
        };
        let f = &mut self.flows[i as usize];
        let flags = p.tcp_flags;
        let closed = f.class == Class::Closed as u8;
        let idle = f
            .last()
            .saturating_add(self.cfg.idle_ns[usize::from(f.class)])
            <= ts;
        if idle || (closed && flags & (SYN | ACK) == SYN) {
            // The flow timed out before this packet (the sweep had not run yet), or a new
            // connection reuses the ports of a closed one: end the old record, start anew.
            let reason = if closed {
                EndReason::EndOfFlow
            } else {
                EndReason::IdleTimeout
            };
            self.end(i, reason, out);
            let (slot, _) = self.find(hash, p, interface);
            self.insert(slot, hash, p, interface, ts, out);
            return;
        }
        // One compare covers both ways out of the record's window: a packet the active timeout
        // or more after its start, and (wrapping) any packet before its start.
        if ts.wrapping_sub(f.start()) >= self.cfg.active_ns
            || f.fwd.packets == u32::MAX
            || f.rev.packets == u32::MAX
        {
            self.end_record_before(i, ts, out);
        }
        let f = &mut self.flows[i as usize];
        f.count(forward, ts, u64::from(p.octets), flags);
        let s = (ts / NS) as u32;
        if f.proto == 6 && flags & (FIN | RST) != 0 && f.class != Class::Closed as u8 {
            f.fins |= if flags & FIN == 0 {
                0
            } else if forward {
                FIN_FWD
            } else {
                FIN_REV
            };
            if flags & RST != 0 || f.fins == FIN_FWD | FIN_REV {
                self.unlink(i);
                let f = &mut self.flows[i as usize];
                f.class = Class::Closed as u8;
                f.moved_s = s;
                self.push_tail(i);
                return;
            }
        }
        let f = &mut self.flows[i as usize];
        if f.moved_s != s {
            f.moved_s = s;
            if self.tail[usize::from(f.class)] != i {
                self.unlink(i);
                self.push_tail(i);
            }
        }
    }

    /// Before a packet at `ts` that flow `i`'s record may not hold, ends the record and leaves
    /// the flow to go on in a new one: with reason 2 (active timeout) when the packet comes the
    /// active timeout or more after the record's start or a direction's packet counter is
    /// full; with reason 4 (forced end) when it comes so long before the record's start that
    /// the record would span the active timeout (time went back: a merged file, interfaces
    /// with different clocks, a packet without a timestamp). A packet a little before the
    /// start (reordered) stays in the record, which then starts with it.
    #[cold]
    #[inline(never)]
    fn end_record_before(&mut self, i: u32, ts: u64, out: &mut impl FnMut(FlowRecord)) {
        let f = &mut self.flows[i as usize];
        let reason = if f.fwd.packets == u32::MAX || f.rev.packets == u32::MAX || ts >= f.start() {
            EndReason::ActiveTimeout
        } else if f.last() - ts >= self.cfg.active_ns {
            EndReason::ForcedEnd
        } else {
            return;
        };
        out(f.record(reason));
        f.reset_counters();
        self.stats.ended[reason as usize - 1] += 1;
    }

    /// Ends every flow idle at `now` (ns).
    pub fn expire(&mut self, now: u64, out: &mut impl FnMut(FlowRecord)) {
        for c in Class::ALL {
            let idle = self.cfg.idle_ns[c as usize];
            let reason = if c == Class::Closed {
                EndReason::EndOfFlow
            } else {
                EndReason::IdleTimeout
            };
            let due = |t: &FlowTable, h: u32| {
                h != NIL && t.flows[h as usize].last().saturating_add(idle) <= now
            };
            if !due(self, self.head[c as usize]) {
                continue;
            }
            // The flows next in line are likely the next to end. A cursor runs `SWEEP_AHEAD`
            // flows ahead of the head along the successors (which stay in the cache), starting
            // to load each flow it passes; the next flow's index slot is asked for one flow
            // ahead, its flow having been loaded meanwhile.
            let mut ahead = self.head[c as usize];
            for _ in 0..SWEEP_AHEAD {
                ahead = self.load_ahead(ahead);
            }
            loop {
                let h = self.head[c as usize];
                if !due(self, h) {
                    break;
                }
                ahead = self.load_ahead(ahead);
                if let Some(n) = self.flows.get(self.next[h as usize] as usize) {
                    tapflow_sys::cpu::prefetch(&self.index[n.hash as usize & self.mask]);
                }
                self.end(h, reason, out);
            }
        }
    }

    /// Starts loading flow `i` for the idle sweep; its successor in its list (`NIL` past the end).
    #[inline]
    fn load_ahead(&self, i: u32) -> u32 {
        match self.flows.get(i as usize) {
            Some(f) => {
                tapflow_sys::cpu::prefetch(f);
                self.next[i as usize]
            }
            None => NIL,
        }
    }

    /// Ends every flow with `reason` (shutdown: 4).
    pub fn drain(&mut self, reason: EndReason, out: &mut impl FnMut(FlowRecord)) {
        for c in Class::ALL {
            while self.head[c as usize] != NIL {
                self.end(self.head[c as usize], reason, out);
            }
        }
    }

    /// The slot where the key is or would go, and the flow and direction if it is there.
    #[inline(always)]
    fn find(&self, hash: u32, p: &FlowFields, interface: u16) -> (usize, Option<(u32, bool)>) {
        let mut slot = hash as usize & self.mask;
        loop {
            let v = self.index[slot];
            if v == 0 {
                return (slot, None);
            }
            let f = &self.flows[v as usize - 1];
            if f.hash == hash
                && let Some(forward) = f.direction(p, interface)
            {
                return (slot, Some((v - 1, forward)));
            }
            slot = (slot + 1) & self.mask;
        }
    }

    fn insert(
        &mut self,
        mut slot: usize,
        hash: u32,
        p: &FlowFields,
        interface: u16,
        ts: u64,
        out: &mut impl FnMut(FlowRecord),
    ) {
        if self.len >= self.cfg.max_flows {
            self.evict_oldest(out);
            slot = self.find(hash, p, interface).0;
        } else if (self.len + 1) * 2 > self.index.len() {
            self.grow_index();
            slot = self.find(hash, p, interface).0;
        }
        // A SYN-ACK first means its receiver initiated: keep the initiator forward.
        let swap = p.tcp_flags & (SYN | ACK) == SYN | ACK && p.proto == 6;
        let (src, dst, sport, dport) = if swap {
            (p.dst, p.src, p.dport, p.sport)
        } else {
            (p.src, p.dst, p.sport, p.dport)
        };
        let class = Class::of(p.proto, p.ipv6);
        let mut f = Flow {
            src,
            dst,
            sport,
            dport,
            proto: p.proto,
            ipv6: p.ipv6,
            vlan: p.vlan,
            interface,
            hash,
            class: class as u8,
            moved_s: (ts / NS) as u32,
            prev: NIL,
            ..Flow::default()
        };
        f.count(!swap, ts, u64::from(p.octets), p.tcp_flags);
        if p.proto == 6 && p.tcp_flags & RST != 0 {
            f.class = Class::Closed as u8;
        }
        let i = if let Some(i) = self.free.pop() {
            self.flows[i as usize] = f;
            // The next new flow takes the next slot: start loading it (freed by a sweep, it has
            // likely left the cache since).
            if let Some(&next) = self.free.last() {
                tapflow_sys::cpu::prefetch(&self.flows[next as usize]);
            }
            i
        } else {
            self.flows.push(f);
            self.next.push(NIL);
            (self.flows.len() - 1) as u32
        };
        self.index[slot] = i + 1;
        self.push_tail(i);
        self.len += 1;
        self.stats.created += 1;
    }

    /// Doubles the index and puts every flow back by its stored hash.
    fn grow_index(&mut self) {
        let slots = self.index.len() * 2;
        let old = std::mem::replace(&mut self.index, vec![0; slots]);
        tapflow_sys::mmap::advise_huge(&self.index);
        self.mask = slots - 1;
        for v in old.into_iter().filter(|&v| v != 0) {
            let mut slot = self.flows[v as usize - 1].hash as usize & self.mask;
            while self.index[slot] != 0 {
                slot = (slot + 1) & self.mask;
            }
            self.index[slot] = v;
        }
    }

    fn evict_oldest(&mut self, out: &mut impl FnMut(FlowRecord)) {
        let oldest = self
            .head
            .iter()
            .filter(|&&h| h != NIL)
            .min_by_key(|&&h| self.flows[h as usize].moved_s)
            .copied();
        if let Some(h) = oldest {
            self.end(h, EndReason::LackOfResources, out);
        }
    }

    /// Exports flow `i` with `reason` and removes it.
    fn end(&mut self, i: u32, reason: EndReason, out: &mut impl FnMut(FlowRecord)) {
        let f = &self.flows[i as usize];
        if f.fwd.packets != 0 || f.rev.packets != 0 {
            out(f.record(reason));
            self.stats.ended[reason as usize - 1] += 1;
        }
        self.unlink(i);
        self.remove_from_index(i);
        self.flows[i as usize].reset_counters();
        self.free.push(i);
        self.len -= 1;
    }

    fn remove_from_index(&mut self, i: u32) {
        let mut hole = self.flows[i as usize].hash as usize & self.mask;
        while self.index[hole] != i + 1 {
            hole = (hole + 1) & self.mask;
        }
        let mut j = (hole + 1) & self.mask;
        loop {
            let v = self.index[j];
            if v == 0 {
                break;
            }
            let home = self.flows[v as usize - 1].hash as usize & self.mask;
            // Move `v` back into the hole unless its home lies cyclically in (hole, j].
            if (j.wrapping_sub(home) & self.mask) >= (j.wrapping_sub(hole) & self.mask) {
                self.index[hole] = v;
                hole = j;
            }
            j = (j + 1) & self.mask;
        }
        self.index[hole] = 0;
    }

    fn unlink(&mut self, i: u32) {
        let (prev, c) = {
            let f = &self.flows[i as usize];
            (f.prev, usize::from(f.class))
        };
        let next = self.next[i as usize];
        if prev == NIL {
            self.head[c] = next;
        } else {
            self.next[prev as usize] = next;
        }
        if next == NIL {
            self.tail[c] = prev;
        } else {
            self.flows[next as usize].prev = prev;
        }
    }

    fn push_tail(&mut self, i: u32) {
        let c = usize::from(self.flows[i as usize].class);
        let t = self.tail[c];
        self.flows[i as usize].prev = t;
        self.next[i as usize] = NIL;
        if t == NIL {
            self.head[c] = i;
        } else {
            self.next[t as usize] = i;
        }
        self.tail[c] = i;
    }
}

/// The murmur3 64-bit finaliser.
#[inline]
fn mix(x: u64) -> u64 {
    let mut z = x;
    z = (z ^ (z >> 33)).wrapping_mul(0xff51_afd7_ed55_8ccd);
    z = (z ^ (z >> 33)).wrapping_mul(0xc4ce_b9fe_1a85_ec53);
    z ^ (z >> 33)
}

#[cfg(test)]
mod tests {
    use super::*;

    const S: u64 = NS;

    fn cfg(max_flows: usize) -> TableConfig {
        TableConfig {
            max_flows,
            active_ns: 300 * S,
            idle_ns: [300 * S, 60 * S, 60 * S, 60 * S, 5 * S],
            seed: 0x1234_5678,
        }
    }

    fn pkt(proto: u8, a: u8, b: u8, sport: u16, dport: u16, flags: u16) -> FlowFields {
        let mut f = FlowFields {
            proto,
            sport,
            dport,
            octets: 100,
            tcp_flags: flags,
            ..FlowFields::default()
        };
        f.src[..4].copy_from_slice(&[10, 0, 0, a]);
        f.dst[..4].copy_from_slice(&[10, 0, 0, b]);
        f
    }

    fn run(t: &mut FlowTable, p: &FlowFields, ts: u64) -> Vec<FlowRecord> {
        let mut v = Vec::new();
        t.update(p, 0, ts, &mut |r| v.push(r));
        v
    }

    /// The hash is the same both ways, and keys an attacker varies in step (an address byte and
    /// the protocol flipped by the same bits, which cancel in a plain XOR) do not share it.
    #[test]
    fn the_hash_is_symmetric_and_keys_varied_in_step_do_not_collide() {
        for seed in [1, 0x1234_5678, 0x9e37_79b9_7f4a_7c15] {
            let t = FlowTable::new(TableConfig { seed, ..cfg(16) });
            let base = pkt(17, 1, 2, 5000, 53, 0);
            let back = pkt(17, 2, 1, 53, 5000, 0);
            assert_eq!(t.hash(&base, 3), t.hash(&back, 3));
            let h = t.hash(&base, 3);
            // Either end, whichever the hash takes first.
            for end in [0, 1] {
                let collisions = (1..=255u8)
                    .filter(|&d| {
                        let mut p = base;
                        p.proto ^= d;
                        [&mut p.src, &mut p.dst][end][0] ^= d;
                        t.hash(&p, 3) == h
                    })
                    .count();
                assert_eq!(collisions, 0, "seed {seed:#x}, end {end}");
            }
        }
    }

    #[test]
    fn both_directions_make_one_biflow() {
        let mut t = FlowTable::new(cfg(16));
        assert!(run(&mut t, &pkt(17, 1, 2, 5000, 53, 0), S).is_empty());
        assert!(run(&mut t, &pkt(17, 2, 1, 53, 5000, 0), 2 * S).is_empty());
        assert!(run(&mut t, &pkt(17, 1, 2, 5000, 53, 0), 3 * S).is_empty());
        assert_eq!(t.len(), 1);
        let mut v = Vec::new();
        t.drain(EndReason::ForcedEnd, &mut |r| v.push(r));
        assert_eq!(v.len(), 1);
        let r = v[0];
        assert_eq!(
            (r.sport, r.dport, &r.src[..4]),
            (5000, 53, &[10, 0, 0, 1][..])
        );
        assert_eq!((r.fwd.packets, r.fwd.octets, r.rev.packets), (2, 200, 1));
        assert_eq!((r.fwd.first_ns, r.fwd.last_ns), (S, 3 * S));
        assert_eq!((r.rev.first_ns, r.rev.last_ns), (2 * S, 2 * S));
        assert_eq!(r.end_reason, EndReason::ForcedEnd);
        assert!(t.is_empty());
    }

    #[test]
    fn idle_timeouts_follow_the_protocol() {
        let mut t = FlowTable::new(cfg(16));
        run(&mut t, &pkt(17, 1, 2, 1, 2, 0), S);
        run(&mut t, &pkt(6, 1, 2, 1, 2, 0x10), S);
        let mut v = Vec::new();
        t.expire(61 * S - 1, &mut |r| v.push(r));
        assert!(v.is_empty());
        t.expire(61 * S, &mut |r| v.push(r));
        assert_eq!(v.len(), 1);
        assert_eq!((v[0].proto, v[0].end_reason), (17, EndReason::IdleTimeout));
        t.expire(301 * S, &mut |r| v.push(r));
        assert_eq!(v.len(), 2);
        assert_eq!(v[1].proto, 6);
    }

    #[test]
    fn a_packet_after_the_idle_timeout_starts_a_new_record_even_before_the_sweep() {
        let mut t = FlowTable::new(cfg(16));
        assert!(run(&mut t, &pkt(17, 1, 2, 7, 53, 0), S).is_empty());
        assert!(run(&mut t, &pkt(17, 1, 2, 7, 53, 0), 60 * S).is_empty());
        let v = run(&mut t, &pkt(17, 2, 1, 53, 7, 0), 120 * S);
        assert_eq!(v.len(), 1);
        assert_eq!(
            (v[0].fwd.packets, v[0].end_reason),
            (2, EndReason::IdleTimeout)
        );
        let mut rest = Vec::new();
        t.drain(EndReason::ForcedEnd, &mut |r| rest.push(r));
        // The new record's initiator is the sender of its own first packet.
        assert_eq!((rest[0].sport, rest[0].fwd.packets), (53, 1));
    }

    #[test]
    fn idle_sweep_is_late_by_less_than_a_second_for_busy_flows() {
        // A flow whose packets come every 0.4 s moves on the list at most once a second; the
        // sweep must still find it idle behind an older one.
        let mut t = FlowTable::new(cfg(16));
        let a = pkt(17, 1, 2, 1, 2, 0);
        let b = pkt(17, 3, 4, 1, 2, 0);
        run(&mut t, &a, 10 * S);
        run(&mut t, &b, 10 * S);
        for k in 1..10 {
            run(&mut t, &a, 10 * S + k * 4 * S / 10);
        }
        let a_last = 10 * S + 36 * S / 10;
        let mut v = Vec::new();
        t.expire(a_last + 60 * S - 1, &mut |r| v.push(r));
        assert_eq!(v.len(), 1, "b is idle since 10 s");
        t.expire(a_last + 60 * S, &mut |r| v.push(r));
        assert_eq!(v.len(), 2);
    }

    #[test]
    fn no_record_spans_more_than_the_active_timeout() {
        let mut t = FlowTable::new(cfg(16));
        let mut v = Vec::new();
        for k in 0..100u64 {
            let p = if k % 2 == 0 {
                pkt(6, 1, 2, 40000, 80, 0x10)
            } else {
                pkt(6, 2, 1, 80, 40000, 0x10)
            };
            t.update(&p, 0, k * 10 * S, &mut |r| v.push(r));
        }
        t.drain(EndReason::ForcedEnd, &mut |r| v.push(r));
        assert_eq!(v.len(), 4, "0-290, 300-590, 600-890, 900-990");
        let total: u64 = v.iter().map(|r| r.fwd.packets + r.rev.packets).sum();
        assert_eq!(total, 100);
        for r in &v {
            assert!(r.end_ns() - r.start_ns() < 300 * S);
            assert_eq!((r.sport, r.dport), (40000, 80));
        }
        assert!(
            v[..3]
                .iter()
                .all(|r| r.end_reason == EndReason::ActiveTimeout)
        );
        assert_eq!(v[1].start_ns(), 300 * S);
    }

    /// A packet dated 0 (a pcapng Simple Packet Block read as 1970) in the middle of a flow
    /// ends the record before it (forced end) instead of stretching it back to 1970; the bad
    /// packet is alone in its record, and the flow goes on in a new one.
    #[test]
    fn a_packet_from_1970_ends_the_record_and_no_record_starts_at_0_because_of_it() {
        const T: u64 = 1_300_000_000 * S;
        let mut t = FlowTable::new(cfg(16));
        let (a, b) = (pkt(6, 1, 2, 40000, 80, 0x10), pkt(6, 2, 1, 80, 40000, 0x10));
        let mut v = Vec::new();
        for (p, ts) in [(a, T), (b, T + S), (a, 0), (b, T + 2 * S), (a, T + 3 * S)] {
            t.update(&p, 0, ts, &mut |r| v.push(r));
        }
        t.drain(EndReason::ForcedEnd, &mut |r| v.push(r));
        let got: Vec<_> = v
            .iter()
            .map(|r| {
                let n = r.fwd.packets + r.rev.packets;
                (r.start_ns(), r.end_ns(), n, r.end_reason)
            })
            .collect();
        assert_eq!(
            got,
            [
                (T, T + S, 2, EndReason::ForcedEnd),
                (0, 0, 1, EndReason::IdleTimeout),
                (T + 2 * S, T + 3 * S, 2, EndReason::ForcedEnd),
            ]
        );
        assert!(v.iter().all(|r| r.end_ns() - r.start_ns() < 300 * S));
    }

    /// Time going back by more than the active timeout (a merged file) ends the record with
    /// reason 4; a packet a little early (reordered) stays in its record; a packet the active
    /// timeout after the record's start ends it with reason 2. No record spans the active
    /// timeout, whichever way time goes.
    #[test]
    fn a_packet_before_the_record_start_never_makes_it_span_the_active_timeout() {
        let mut t = FlowTable::new(TableConfig {
            idle_ns: [3600 * S; CLASSES],
            ..cfg(16)
        });
        let p = pkt(17, 1, 2, 5000, 53, 0);
        let mut v = Vec::new();
        // Seconds: a record from 1000, a packet 700 s before it, then back in time order.
        for ts in [1000, 1010, 300, 299, 1299, 1300, 1310, 1305, 1600] {
            t.update(&p, 0, ts * S, &mut |r| v.push(r));
        }
        t.drain(EndReason::ForcedEnd, &mut |r| v.push(r));
        let got: Vec<_> = v
            .iter()
            .map(|r| {
                (
                    r.start_ns() / S,
                    r.end_ns() / S,
                    r.fwd.packets,
                    r.end_reason,
                )
            })
            .collect();
        assert_eq!(
            got,
            [
                (1000, 1010, 2, EndReason::ForcedEnd),
                (299, 300, 2, EndReason::ActiveTimeout),
                (1299, 1310, 4, EndReason::ActiveTimeout),
                (1600, 1600, 1, EndReason::ForcedEnd),
            ]
        );
        for r in &v {
            assert!(r.end_ns() - r.start_ns() < 300 * S, "{r:?}");
        }
        assert_eq!(t.stats().ended, [0, 2, 0, 2, 0]);
    }

    #[test]
    fn fin_both_ways_or_rst_end_the_flow_after_the_closing_wait() {
        let mut t = FlowTable::new(cfg(16));
        run(&mut t, &pkt(6, 1, 2, 1000, 80, 0x02), S);
        run(&mut t, &pkt(6, 2, 1, 80, 1000, 0x12), S);
        run(&mut t, &pkt(6, 1, 2, 1000, 80, 0x11), 2 * S);
        run(&mut t, &pkt(6, 2, 1, 80, 1000, 0x11), 2 * S);
        run(&mut t, &pkt(6, 1, 2, 1000, 80, 0x10), 2 * S); // last ACK, same record
        run(&mut t, &pkt(6, 3, 4, 1000, 80, 0x04), 2 * S); // lone RST
        let mut v = Vec::new();
        t.expire(7 * S - 1, &mut |r| v.push(r));
        assert!(v.is_empty());
        t.expire(7 * S, &mut |r| v.push(r));
        assert_eq!(v.len(), 2);
        assert!(v.iter().all(|r| r.end_reason == EndReason::EndOfFlow));
        assert_eq!((v[0].fwd.packets, v[0].rev.packets), (3, 2));
        assert_eq!((v[0].fwd.tcp_flags, v[0].rev.tcp_flags), (0x13, 0x13));
    }

    #[test]
    fn a_new_syn_on_a_closed_flow_starts_a_new_record() {
        let mut t = FlowTable::new(cfg(16));
        run(&mut t, &pkt(6, 1, 2, 1000, 80, 0x02), S);
        run(&mut t, &pkt(6, 2, 1, 80, 1000, 0x14), S); // RST-ACK
        let v = run(&mut t, &pkt(6, 1, 2, 1000, 80, 0x02), 2 * S);
        assert_eq!(v.len(), 1);
        assert_eq!(v[0].end_reason, EndReason::EndOfFlow);
        assert_eq!(t.len(), 1);
    }

    #[test]
    fn syn_ack_first_keeps_the_initiator_forward() {
        let mut t = FlowTable::new(cfg(16));
        run(&mut t, &pkt(6, 2, 1, 80, 1000, 0x12), S);
        run(&mut t, &pkt(6, 1, 2, 1000, 80, 0x10), S);
        let mut v = Vec::new();
        t.drain(EndReason::ForcedEnd, &mut |r| v.push(r));
        assert_eq!((v[0].sport, v[0].dport), (1000, 80));
        assert_eq!((v[0].fwd.tcp_flags, v[0].rev.tcp_flags), (0x10, 0x12));
    }

    #[test]
    fn a_full_table_evicts_the_oldest() {
        let mut t = FlowTable::new(cfg(3));
        for (k, port) in [1u16, 2, 3].into_iter().enumerate() {
            run(&mut t, &pkt(17, 1, 2, port, 9, 0), (k as u64 + 1) * S);
        }
        run(&mut t, &pkt(17, 1, 2, 1, 9, 0), 4 * S); // port 1 is now the newest
        let v = run(&mut t, &pkt(17, 1, 2, 4, 9, 0), 5 * S);
        assert_eq!(v.len(), 1);
        assert_eq!(
            (v[0].sport, v[0].end_reason),
            (2, EndReason::LackOfResources)
        );
        assert_eq!(t.len(), 3);
    }

    #[test]
    fn vlan_and_interface_are_part_of_the_key() {
        let mut t = FlowTable::new(cfg(16));
        let p = pkt(17, 1, 2, 1, 2, 0);
        let mut q = p;
        q.vlan = 7;
        let mut v = Vec::new();
        t.update(&p, 0, S, &mut |r| v.push(r));
        t.update(&q, 0, S, &mut |r| v.push(r));
        t.update(&p, 1, S, &mut |r| v.push(r));
        assert_eq!(t.len(), 3);
    }

    #[test]
    fn the_index_grows_and_keeps_every_flow() {
        let mut t = FlowTable::new(cfg(1_000_000));
        assert_eq!(t.index.len(), INITIAL_SLOTS);
        let p = |i: u32| {
            let mut f = pkt(17, 0, 0, (i >> 16) as u16, 53, 0);
            f.src[..4].copy_from_slice(&i.to_be_bytes());
            f
        };
        for i in 0..200_000 {
            assert!(run(&mut t, &p(i), S).is_empty());
        }
        assert!(t.index.len() >= 400_000 && t.index.len() <= 1 << 19);
        for i in (0..200_000).rev() {
            assert!(run(&mut t, &p(i), 2 * S).is_empty());
        }
        assert_eq!((t.len(), t.stats().created), (200_000, 200_000));
        let mut two = 0;
        t.drain(EndReason::ForcedEnd, &mut |r| {
            two += usize::from(r.fwd.packets == 2)
        });
        assert_eq!(two, 200_000);
    }

    /// Many flows through a small table with collisions, removals and evictions: every packet
    /// is in exactly one record, and every flow still held can be found.
    #[test]
    fn random_churn_loses_no_packet() {
        let mut t = FlowTable::new(TableConfig {
            idle_ns: [3 * S; CLASSES],
            ..cfg(200)
        });
        let mut x = 0x9e37_79b9_7f4a_7c15u64;
        let mut exported = 0u64;
        let mut records = 0u64;
        for k in 0..200_000u64 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let a = (x % 5) as u8;
            let b = (x >> 8) as u8 % 5;
            let port = (x >> 16) as u16 % 8;
            let flags = if x >> 40 & 31 == 0 { RST } else { ACK };
            let proto = [6u8, 17, 1, 47][(x >> 32) as usize % 4];
            let ts = k * S / 100;
            t.update(&pkt(proto, a, b, port, 80, flags), 0, ts, &mut |r| {
                exported += r.fwd.packets + r.rev.packets;
                records += 1;
            });
            if k % 100 == 0 {
                t.expire(ts, &mut |r| {
                    exported += r.fwd.packets + r.rev.packets;
                    records += 1;
                });
                assert!(t.len() <= 200);
                for i in 0..t.flows.len() as u32 {
                    let f = t.flows[i as usize];
                    if f.fwd.packets + f.rev.packets == 0 {
                        continue; // free
                    }
                    let q = FlowFields {
                        proto: f.proto,
                        src: f.src,
                        dst: f.dst,
                        sport: f.sport,
                        dport: f.dport,
                        ..FlowFields::default()
                    };
                    let h = t.hash(&q, 0);
                    assert_eq!(t.find(h, &q, 0).1, Some((i, true)));
                }
            }
        }
        t.drain(EndReason::ForcedEnd, &mut |r| {
            exported += r.fwd.packets + r.rev.packets;
            records += 1;
        });
        assert_eq!(exported, 200_000);
        let st = t.stats();
        assert_eq!(st.ended.iter().sum::<u64>(), records);
        assert!(
            st.ended[4] > 0 && st.ended[0] > 0 && st.ended[2] > 0,
            "{st:?}"
        );
    }
}
