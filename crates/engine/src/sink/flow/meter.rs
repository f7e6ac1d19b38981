//! The flow meter: a record sink that turns one worker's header records into bidirectional
//! flow records (RFC 5103) and hands them to the exporter.
//!
//! Per packet: the flow fields are parsed from the captured bytes ([`FlowFields`]), fragments
//! get their ports from the first fragment, and the worker's own [`FlowTable`] counts the
//! packet. No lock, no allocation, no system call; finished records are batched.
//!
//! Fragments. The first fragment carries the transport header: the meter remembers its ports
//! under its datagram's key ([`DatagramKey`]: IP version, protocol, both addresses, VLAN,
//! interface, like the flow key, and the IP identification) for 30 s (Linux's `ipfrag_time`),
//! and later fragments of that datagram take them, so the whole datagram counts in its flow.
//! Limits: a later fragment that arrives before the first (reordering), or whose entry was
//! overwritten in the 4096-entry cache, is counted in the flow with ports 0 for its addresses
//! and protocol; a live capture with `--threads` > 1 never sees fragments, because the fanout's
//! defrag flag makes the kernel reassemble them first.

use std::hash::{BuildHasher, Hash, RandomState};
use std::time::Duration;

use serde::Serialize;
use tapflow_wire::LinkType;
use tapflow_wire::flowkey::{DatagramKey, FlowFields};
use tapflow_wire::flowrecord::{EndReason, FlowRecord};
use tapflow_wire::record::ControlField;

use crate::EngineError;
use crate::counters::Totals;
use crate::sink::flow::export::{
    BATCH, ExportConfig, ExportQueue, ExportReport, Exporter, MeterClock,
};
use crate::sink::flow::table::{FlowTable, TableConfig, TableStats};
use crate::sink::record_sink::{Outcome, RecordSink, SinkLive};
use crate::source::InterfaceInfo;

/// Packets parsed ahead of the one being counted. Counting a packet touches its flow's index
/// slot and the flow, both usually out of the caches; a packet is counted only `DEPTH` packets
/// after it was parsed, its slot loading meanwhile, and its flow once halfway.
const DEPTH: usize = 8;

/// How long (monotonic ns) finished records may wait in a batch that is not full. Each batch
/// handed over wakes the exporter; on the worker's core that is two context switches, so a
/// batch is sent when full, and a partial one only once it has waited this long (or at close).
const HOLD_NS: u64 = 20_000_000;

const FRAGMENT_SLOTS: usize = 4096;
const FRAGMENT_TTL_NS: u64 = 30_000_000_000;

/// Where the first fragment of a datagram said its ports are.
#[derive(Debug, Clone, Copy, Default)]
struct FragmentPorts {
    datagram: DatagramKey,
    sport: u16,
    dport: u16,
    expires: u64,
}

/// What a meter counted besides its flows.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct MeterStats {
    /// Packets that are not IP (or whose IP header was not captured), not in any flow.
    pub not_ip: u64,
    /// Later fragments that found the first fragment's ports.
    pub fragments_joined: u64,
    /// Later fragments counted with ports 0.
    pub fragments_unjoined: u64,
    /// The flow table's own counts.
    #[serde(flatten)]
    pub table: TableStats,
}

impl Outcome for MeterStats {
    /// Adds another meter's counts.
    fn add(&mut self, o: &MeterStats) {
        self.not_ip += o.not_ip;
        self.fragments_joined += o.fragments_joined;
        self.fragments_unjoined += o.fragments_unjoined;
        self.table.created += o.table.created;
        for (a, b) in self.table.ended.iter_mut().zip(o.table.ended) {
            *a += b;
        }
    }
}

/// The flow meters (one per worker) and their exporter.
#[derive(Debug, Clone)]
pub struct FlowConfig {
    /// Timeouts and size, for all meters together (each gets its share of `max_flows`).
    pub table: TableConfig,
    /// The outputs.
    pub export: ExportConfig,
}

impl FlowConfig {
    /// The meter of one of `shards` workers: its share of the table, a hash seed of its own
    /// (from the OS's randomness and `shard`), a queue to `exporter`.
    pub fn meter(
        &self,
        shards: usize,
        shard: impl Hash,
        clock: MeterClock,
        exporter: &Exporter,
    ) -> FlowMeter {
        let table = TableConfig {
            max_flows: self.table.max_flows.div_ceil(shards.max(1)),
            seed: RandomState::new().hash_one(shard),
            ..self.table
        };
        FlowMeter::new(table, clock, exporter.queue())
    }
}

/// What the flow meters and the exporter did.
#[derive(Debug, Clone, Default, Serialize)]
pub struct FlowSummary {
    /// Summed over the meters.
    #[serde(flatten)]
    pub meter: MeterStats,
    /// The exporter's outputs.
    #[serde(flatten)]
    pub export: ExportReport,
}

/// A packet parsed and hashed, waiting to be counted.
#[derive(Debug, Clone, Copy, Default)]
struct Pending {
    fields: FlowFields,
    interface: u32,
    hash: u32,
    ts: u64,
}

/// One worker's flow meter.
#[derive(Debug)]
pub struct FlowMeter {
    table: FlowTable,
    /// The last [`DEPTH`] packets, not yet counted; packet `n` is at `n % DEPTH`.
    pending: [Pending; DEPTH],
    /// Packets parsed since the table last caught up.
    parsed: usize,
    linktypes: Vec<LinkType>,
    fragments: Box<[FragmentPorts]>,
    out: Batcher,
    clock: MeterClock,
    /// For [`MeterClock::Wall`]: the meter's time at the last block and the monotonic time then.
    seen: (u64, u64),
    stats: MeterStats,
}

impl FlowMeter {
    /// A meter with its own table, sending finished records through `queue`.
    pub fn new(table: TableConfig, clock: MeterClock, queue: ExportQueue) -> FlowMeter {
        FlowMeter {
            table: FlowTable::new(table),
            pending: [Pending::default(); DEPTH],
            parsed: 0,
            linktypes: Vec::new(),
            fragments: vec![FragmentPorts::default(); FRAGMENT_SLOTS].into_boxed_slice(),
            out: Batcher {
                batch: Vec::with_capacity(BATCH),
                since: 0,
                queue,
                now: 0,
                epoch: 0,
                error: None,
            },
            clock,
            seen: (0, 0),
            stats: MeterStats::default(),
        }
    }

    /// What the meter counted so far.
    pub fn stats(&self) -> MeterStats {
        MeterStats {
            table: self.table.stats(),
            ..self.stats
        }
    }

    /// Counts pending packet `n` in the table.
    #[inline]
    fn count(&mut self, n: usize) {
        let p = &self.pending[n % DEPTH];
        let out = &mut self.out;
        self.table
            .update_hashed(&p.fields, p.interface, p.hash, p.ts, &mut |r| out.push(r));
    }

    /// Counts the packets still pending, oldest first: before the table is swept or read.
    fn catch_up(&mut self) {
        for n in self.parsed.saturating_sub(DEPTH)..self.parsed {
            self.count(n);
        }
        self.parsed = 0;
    }

    /// The ports of fragment `f` (captured on `interface` at `ts`): a later fragment's are its
    /// datagram's first fragment's, if remembered; a first fragment's own are remembered.
    /// Out of line: fragments are rare, and `f` goes by value so that the caller's copy can
    /// stay in registers.
    #[inline(never)]
    fn join_fragment(&mut self, f: FlowFields, interface: u32, ts: u64) -> (u16, u16) {
        let Some(datagram) = f.datagram(interface) else {
            return (f.sport, f.dport);
        };
        let slot = &mut self.fragments[datagram.hash64() as usize % FRAGMENT_SLOTS];
        if f.fragment.is_some_and(|fr| fr.first) {
            *slot = FragmentPorts {
                datagram,
                sport: f.sport,
                dport: f.dport,
                expires: ts.saturating_add(FRAGMENT_TTL_NS),
            };
        } else if slot.datagram == datagram && ts <= slot.expires {
            self.stats.fragments_joined += 1;
            return (slot.sport, slot.dport);
        } else {
            self.stats.fragments_unjoined += 1;
        }
        (f.sport, f.dport)
    }
}

/// Collects finished records into batches and hands each full one to the exporter.
#[derive(Debug)]
struct Batcher {
    batch: Vec<FlowRecord>,
    /// When (monotonic ns) a block's end first found the batch not empty; 0 while it is
    /// empty or not yet seen so.
    since: u64,
    queue: ExportQueue,
    /// The meter's clock: newest packet time (or wall time, live).
    now: u64,
    /// The meter's first packet time.
    epoch: u64,
    error: Option<EngineError>,
}

impl Batcher {
    #[inline]
    fn push(&mut self, r: FlowRecord) {
        // The batch's memory was last read by the exporter: start loading the lines a few
        // records on, so that writing them does not wait.
        if let Some(ahead) = self.batch.spare_capacity_mut().get(4) {
            tapflow_sys::cpu::prefetch(ahead);
        }
        self.batch.push(r);
        if self.batch.len() >= BATCH {
            self.send();
        }
    }

    fn send(&mut self) {
        self.since = 0;
        if let Err(e) = self.queue.send(&mut self.batch, self.now, self.epoch) {
            self.error.get_or_insert(e);
        }
        // Let the exporter take the batch now, while its last records are still in the cache,
        // if it shares this core; on a core of its own this returns at once.
        std::thread::yield_now();
    }

    /// Sends what is collected; reports a failure of this or an earlier send.
    fn flush(&mut self) -> Result<(), EngineError> {
        if !self.batch.is_empty() {
            self.send();
        }
        self.result()
    }

    /// At the end of a block: sends a partial batch that has waited [`HOLD_NS`]; reports a
    /// failure of an earlier send.
    fn flush_held(&mut self, mono: u64) -> Result<(), EngineError> {
        if !self.batch.is_empty() && self.since == 0 {
            self.since = mono;
        }
        if self.held_due(mono) == Some(Duration::ZERO) {
            self.send();
        }
        self.result()
    }

    /// How long a partial batch may still wait before [`Batcher::flush_held`] sends it, at
    /// monotonic time `mono`; `None` while the batch is empty.
    fn held_due(&self, mono: u64) -> Option<Duration> {
        (!self.batch.is_empty()).then(|| {
            let held = if self.since == 0 {
                0
            } else {
                mono.saturating_sub(self.since)
            };
            Duration::from_nanos(HOLD_NS.saturating_sub(held))
        })
    }

    /// Reports a failure of an earlier send, once.
    fn result(&mut self) -> Result<(), EngineError> {
        self.error.take().map_or(Ok(()), Err)
    }
}

impl RecordSink for FlowMeter {
    type Report = MeterStats;

    fn takes_original_addresses(&self) -> bool {
        true
    }

    fn add_interface(&mut self, info: &InterfaceInfo) -> Result<(), EngineError> {
        self.linktypes.push(info.linktype);
        Ok(())
    }

    #[inline(always)]
    fn record(
        &mut self,
        interface: u32,
        _drops_before: u64,
        ctl: &ControlField,
        data: &[u8],
    ) -> Result<(), EngineError> {
        let linktype = self
            .linktypes
            .get(interface as usize)
            .copied()
            .unwrap_or(LinkType::Unknown(0));
        let ts = ctl.rxtime;
        if self.out.epoch == 0 {
            self.out.epoch = ts;
        }
        self.out.now = self.out.now.max(ts);
        let Some(mut f) = FlowFields::of_frame(linktype, data, ctl.orig_len()) else {
            self.stats.not_ip += 1;
            return Ok(());
        };
        if f.fragment.is_some() {
            (f.sport, f.dport) = self.join_fragment(f, interface, ts);
        }
        let hash = self.table.hash(&f, interface);
        self.table.prefetch_slot(hash);
        let n = self.parsed;
        if n >= DEPTH / 2 {
            self.table
                .prefetch_flow(self.pending[(n - DEPTH / 2) % DEPTH].hash);
        }
        if n >= DEPTH {
            // The packet parsed DEPTH ago, in the slot the new one takes.
            self.count(n);
        }
        self.pending[n % DEPTH] = Pending {
            fields: f,
            interface,
            hash,
            ts,
        };
        self.parsed = n + 1;
        self.out.result()
    }

    fn end_of_block(
        &mut self,
        _totals: &Totals,
        _if_stats: Option<(u64, u64)>,
    ) -> Result<(), EngineError> {
        let mono = tapflow_sys::clock::monotonic_ns();
        if self.clock == MeterClock::Wall {
            // Packet time, moved on by the wall clock while no packet moves it.
            if self.out.now != self.seen.0 {
                self.seen = (self.out.now, mono);
            } else if self.seen.0 != 0 {
                self.out.now = self.seen.0 + mono.saturating_sub(self.seen.1);
                self.seen.0 = self.out.now;
                self.seen.1 = mono;
            }
        }
        self.catch_up();
        let out = &mut self.out;
        self.table.expire(out.now, &mut |r| out.push(r));
        out.flush_held(mono)
    }

    fn wake_within(&self) -> Option<Duration> {
        // Ends by idle timeout are due within the worker's own wake-up interval.
        self.out.held_due(tapflow_sys::clock::monotonic_ns())
    }

    fn live(&self) -> SinkLive {
        // Read once per block, after `end_of_block` counted every pending packet.
        SinkLive {
            flows_active: self.table.len() as u64,
            flows_exported: self.table.stats().ended.iter().sum(),
            ..SinkLive::default()
        }
    }

    fn close(
        &mut self,
        _totals: &Totals,
        _if_stats: Option<(u64, u64)>,
    ) -> Result<MeterStats, EngineError> {
        self.catch_up();
        let out = &mut self.out;
        self.table.drain(EndReason::ForcedEnd, &mut |r| out.push(r));
        out.flush()?;
        Ok(self.stats())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sink::flow::table::CLASSES;
    use tapflow_wire::record::Flags;

    const S: u64 = 1_000_000_000;

    /// An IPv4/UDP packet from port `sport` (LINKTYPE_RAW).
    fn udp(sport: u16) -> Vec<u8> {
        let mut p = vec![0u8; 28];
        p[0] = 0x45;
        p[2..4].copy_from_slice(&28u16.to_be_bytes());
        p[8] = 64;
        p[9] = 17;
        p[12..16].copy_from_slice(&[10, 0, 0, 1]);
        p[16..20].copy_from_slice(&[10, 0, 0, 2]);
        p[20..22].copy_from_slice(&sport.to_be_bytes());
        p[22..24].copy_from_slice(&53u16.to_be_bytes());
        p[24..26].copy_from_slice(&8u16.to_be_bytes());
        p
    }

    fn feed(m: &mut FlowMeter, sport: u16, ts: u64) {
        feed_frame(m, 0, &udp(sport), ts);
    }

    fn feed_frame(m: &mut FlowMeter, interface: u32, p: &[u8], ts: u64) {
        let ctl = ControlField::new(ts, Flags::default(), p.len() as u16, 0, p.len() as u32);
        m.record(interface, 0, &ctl, p).unwrap();
    }

    /// A meter with default timeouts and an interface of each of `linktypes`.
    fn meter(linktypes: &[LinkType], queue: ExportQueue) -> FlowMeter {
        let table = TableConfig {
            max_flows: 1000,
            active_ns: 300 * S,
            idle_ns: [60 * S; CLASSES],
            seed: 1,
        };
        let mut m = FlowMeter::new(table, MeterClock::Packets, queue);
        for &linktype in linktypes {
            m.add_interface(&InterfaceInfo {
                linktype,
                snaplen: 128,
                name: None,
                filter: None,
                max_frame: None,
            })
            .unwrap();
        }
        m
    }

    /// An IPv4 UDP fragment 1.2.3.4 → 5.6.7.8, identification 0x1234: the first (ports 1000
    /// → 53, more fragments) or a later one (offset 8), as LINKTYPE_RAW.
    fn ipv4_fragment(first: bool) -> Vec<u8> {
        let mut p = udp(1000);
        p[4..6].copy_from_slice(&0x1234u16.to_be_bytes());
        p[6..8].copy_from_slice(&if first { 0x2000u16 } else { 1 }.to_be_bytes());
        p[12..16].copy_from_slice(&[1, 2, 3, 4]);
        p[16..20].copy_from_slice(&[5, 6, 7, 8]);
        if !first {
            p[20..].fill(0);
        }
        p
    }

    /// A later IPv6 fragment 102:304:: → 506:708:: (the IPv4 fragment's address bytes) of a UDP
    /// datagram with the same identification, 0x1234, as LINKTYPE_RAW.
    fn ipv6_later_fragment() -> Vec<u8> {
        let mut p = vec![0u8; 40 + 8 + 8];
        p[0] = 0x60;
        p[4..6].copy_from_slice(&16u16.to_be_bytes());
        p[6] = 44;
        p[7] = 64;
        p[8..12].copy_from_slice(&[1, 2, 3, 4]);
        p[24..28].copy_from_slice(&[5, 6, 7, 8]);
        p[40] = 17;
        p[42..44].copy_from_slice(&8u16.to_be_bytes()); // offset 8 bytes, no M
        p[44..48].copy_from_slice(&0x1234u32.to_be_bytes());
        p
    }

    /// `frame` (Ethernet payload from the EtherType on) behind Ethernet, with an 802.1Q tag of
    /// `vlan` unless it is 0.
    fn ethernet(vlan: u16, ip: &[u8]) -> Vec<u8> {
        let mut f = vec![0u8; 12];
        if vlan != 0 {
            f.extend_from_slice(&[0x81, 0x00]);
            f.extend_from_slice(&vlan.to_be_bytes());
        }
        f.extend_from_slice(&[0x08, 0x00]);
        f.extend_from_slice(ip);
        f
    }

    /// A later fragment takes the first fragment's ports only if it has the same datagram key:
    /// not across IP versions (a.b.c.d vs a.b.c.d:: with the same identification), VLANs or
    /// interfaces.
    #[test]
    fn a_later_fragment_joins_only_a_first_fragment_of_its_version_vlan_and_interface() {
        let (queue, mut handed_over) = ExportQueue::detached();
        let raw = LinkType::Raw;
        let mut m = meter(&[raw, raw, LinkType::Ethernet], queue);
        let (first, later) = (ipv4_fragment(true), ipv4_fragment(false));
        feed_frame(&mut m, 0, &first, S);
        feed_frame(&mut m, 0, &ipv6_later_fragment(), S);
        feed_frame(&mut m, 1, &later, S);
        feed_frame(&mut m, 2, &ethernet(0, &first), S);
        feed_frame(&mut m, 2, &ethernet(7, &later), S);
        let st = m.stats();
        assert_eq!(
            (st.fragments_joined, st.fragments_unjoined),
            (0, 3),
            "IPv6, interface 1, VLAN 7: other datagrams"
        );
        feed_frame(&mut m, 0, &later, S);
        feed_frame(&mut m, 2, &ethernet(0, &later), S);
        let st = m.stats();
        assert_eq!((st.fragments_joined, st.fragments_unjoined), (2, 3));
        // The first fragments' flow (two of them, on interfaces 0 and 2), and three flows of
        // ports 0 (IPv6, interface 1, VLAN 7).
        let st = m.close(&Totals::default(), None).unwrap();
        assert_eq!((st.table.created, handed_over()), (5, 5));
    }

    #[test]
    fn a_partial_batch_waits_for_the_hold_time_and_close_sends_the_rest() {
        let (queue, mut handed_over) = ExportQueue::detached();
        let mut m = meter(&[LinkType::Raw], queue);
        let totals = Totals::default();
        for port in 1..=3 {
            feed(&mut m, port, S);
        }
        // Past the idle timeout: the sweep ends the first three flows.
        feed(&mut m, 4, 100 * S);
        m.end_of_block(&totals, None).unwrap();
        m.end_of_block(&totals, None).unwrap();
        assert_eq!(handed_over(), 0, "three records are not a full batch");
        std::thread::sleep(std::time::Duration::from_nanos(HOLD_NS + 5_000_000));
        m.end_of_block(&totals, None).unwrap();
        assert_eq!(handed_over(), 3, "held for HOLD_NS, then sent");
        let report = m.close(&totals, None).unwrap();
        assert_eq!(
            (handed_over(), report.table.ended.iter().sum::<u64>()),
            (4, 4)
        );
    }
}
