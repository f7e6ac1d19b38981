//! The worker: drains one source block by block and hands each packet's header record to its
//! sinks, in one pass. No lock, no allocation and no syscall per packet.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use crate::EngineError;
use crate::counters::{SharedTotals, Totals};
use crate::record_builder::{AnonymizedRecords, RecordBuilder};
use crate::rules::{self, RuleReader};
use crate::sink::record_sink::SinkLive;
use crate::sink::registry::{Sink, SinkReport};
use crate::source::{InterfaceInfo, LinkEvent, Packet, PacketSource, Progress};
use crate::stop::Stop;
use crate::traffic::{SharedStats, Traffic};
use tapflow_wire::LinkType;
use tapflow_wire::cbpf::{self, Insn};
use tapflow_wire::cryptopan::Anonymizer;
use tapflow_wire::record::ControlField;

/// How often the worker polls its source's counters (the kernel's are 32-bit and clear on read),
/// and so the longest it waits for packets.
const STATS_INTERVAL: Duration = Duration::from_millis(500);

/// Settings shared by all workers of one capture.
#[derive(Debug, Clone)]
pub struct WorkerConfig {
    /// Bytes of each packet to keep.
    pub snaplen: u32,
    /// How long the source must stay idle during a drain before the worker concludes it is empty.
    pub drain_quiet: Duration,
}

/// What a finished worker reports.
#[derive(Debug)]
pub struct WorkerReport {
    /// Its final totals.
    pub totals: Totals,
    /// Each sink's report, in order.
    pub sinks: Vec<SinkReport>,
    /// The error that ended the run, if any.
    pub error: Option<EngineError>,
}

/// Everything the worker owns except its source.
#[derive(Debug)]
struct Output {
    sinks: Vec<Sink>,
    /// Each interface announced to the sinks, by index.
    interfaces: Vec<Announced>,
    /// The live rules, if the capture has any: a packet no rule matches is filtered.
    rules: Option<RuleReader>,
    /// A tcpdump expression run on each packet (file input: no kernel to run it).
    filter: Option<String>,
    /// Traffic statistics, counted only when published.
    traffic: Option<Traffic>,
    snaplen: u32,
    totals: Totals,
    /// Losses not yet placed before a record.
    pending_drops: u64,
    limit: Option<Arc<AtomicU64>>,
    stop: Arc<Stop>,
    if_stats: Option<(u64, u64)>,
    /// Room to put a stripped VLAN tag back into a packet's bytes.
    scratch: Vec<u8>,
    /// The records' addresses are anonymised for every sink but the flow meter.
    anon: Option<AnonymizedRecords>,
    /// The first sink failure; later packets are counted as dropped by tapflow.
    failed: Option<EngineError>,
    /// The plain lane is open for this block (see [`Output::open_plain_lane`]).
    plain: bool,
}

/// What the worker keeps of an interface it announced.
#[derive(Debug)]
struct Announced {
    linktype: LinkType,
    builder: RecordBuilder,
    /// The `-f` expression compiled for this link type, if there is one.
    filter: Option<Vec<Insn>>,
}

/// One capture pipeline: a source, a record builder per interface, and the sinks.
#[derive(Debug)]
pub struct Worker<S> {
    source: S,
    out: Output,
    shared: Arc<SharedTotals>,
    stats: Option<Arc<SharedStats>>,
    cfg: WorkerConfig,
}

impl<S: PacketSource> Worker<S> {
    /// A worker over `source` feeding `sinks`.
    ///
    /// `limit`, when set, is the number of records all workers together may still take (`-c`);
    /// `stop` is raised by a signal, by the limit, or by the caller.
    pub fn new(
        source: S,
        sinks: Vec<Sink>,
        cfg: WorkerConfig,
        shared: Arc<SharedTotals>,
        limit: Option<Arc<AtomicU64>>,
        stop: Arc<Stop>,
    ) -> Worker<S> {
        let snaplen = cfg.snaplen;
        Worker {
            source,
            out: Output {
                sinks,
                interfaces: Vec::new(),
                rules: None,
                traffic: None,
                filter: None,
                snaplen,
                totals: Totals::default(),
                pending_drops: 0,
                limit,
                stop,
                if_stats: None,
                scratch: Vec::with_capacity(snaplen as usize + 4),
                anon: None,
                failed: None,
                plain: false,
            },
            shared,
            stats: None,
            cfg,
        }
    }

    /// Matches every packet against live rules first.
    pub fn with_rules(mut self, rules: RuleReader) -> Worker<S> {
        self.out.rules = Some(rules);
        self
    }

    /// Runs the tcpdump expression `expr` on every packet, compiled by libpcap for each
    /// interface's link type; a packet it refuses is counted as filtered.
    pub fn with_filter(mut self, expr: &str) -> Worker<S> {
        self.out.filter = Some(expr.to_string());
        self
    }

    /// Anonymises the addresses in the records (Crypto-PAn) before the sinks get them.
    pub fn with_anonymizer(mut self, a: Anonymizer) -> Worker<S> {
        self.out.anon = Some(AnonymizedRecords::new(a, self.cfg.snaplen));
        self
    }

    /// Publishes traffic statistics and the sinks' counters to `stats` once per block.
    pub fn with_stats(mut self, stats: Arc<SharedStats>) -> Worker<S> {
        self.stats = Some(stats);
        self.out.traffic = Some(Traffic::default());
        self
    }

    fn publish(&self) {
        self.shared.publish(&self.out.totals);
        if let Some(s) = &self.stats {
            let mut live = SinkLive::default();
            for sink in &self.out.sinks {
                live.add(&sink.live());
            }
            s.publish(&self.out.traffic.unwrap_or_default(), &live);
        }
    }

    /// Runs until the input ends or a stop is requested, drains the source, closes the sinks
    /// and reports. Everything collected before an error is in the sinks' output.
    pub fn run(mut self) -> WorkerReport {
        let mut error = self.capture().err();
        if error.is_some() {
            // The source's counts up to the failure: a sink that fails mid-run (a full disk
            // under a compressed file) stops the run between two polls.
            let _ = self.poll_stats();
        }
        if let Some(e) = self.out.failed.take() {
            error.get_or_insert(e);
        }
        self.publish();
        let mut sinks = Vec::new();
        for s in &mut self.out.sinks {
            match s.close(&self.out.totals, self.out.if_stats) {
                Ok(r) => sinks.push(r),
                Err(e) => {
                    error.get_or_insert(e);
                }
            }
        }
        // What a sink could not keep was counted as recorded when it was handed over.
        let lost: u64 = self.out.sinks.iter().map(Sink::lost).sum();
        let t = &mut self.out.totals;
        let lost = lost.min(t.recorded);
        t.recorded -= lost;
        t.dropped_ours += lost;
        WorkerReport {
            totals: self.out.totals,
            sinks,
            error,
        }
    }

    fn capture(&mut self) -> Result<(), EngineError> {
        let mut last_stats = Instant::now();
        loop {
            if self.out.stop.is_raised() || self.out.remaining() == 0 {
                return self.drain();
            }
            // Asleep until the counters or a sink's timer are due, or a stop wakes the source.
            let wait = self.out.sinks.iter().filter_map(|s| s.wake_within()).fold(
                STATS_INTERVAL.saturating_sub(last_stats.elapsed()),
                Duration::min,
            );
            if self.step(wait)? == Progress::End {
                return self.poll_stats();
            }
            if last_stats.elapsed() >= STATS_INTERVAL {
                last_stats = Instant::now();
                self.poll_stats()?;
            }
            self.publish();
        }
    }

    /// Closes the intake, then empties the source until it stays quiet.
    fn drain(&mut self) -> Result<(), EngineError> {
        self.source.stop_intake()?;
        let mut quiet_since = Instant::now();
        loop {
            match self.step(self.cfg.drain_quiet)? {
                Progress::End => break,
                Progress::Block => quiet_since = Instant::now(),
                Progress::Idle | Progress::Link(_)
                    if quiet_since.elapsed() >= self.cfg.drain_quiet =>
                {
                    break;
                }
                Progress::Idle | Progress::Link(_) => {}
            }
        }
        self.poll_stats()
    }

    /// Takes one block from the source through the sinks, waiting up to `wait` for one, then
    /// runs the sinks' timers.
    fn step(&mut self, wait: Duration) -> Result<Progress, EngineError> {
        self.out.announce(self.source.interfaces())?;
        let max = self.out.remaining();
        let out = &mut self.out;
        // Whole milliseconds, rounded up: a wait cut short would wake before its timer.
        let wait_ms = i32::try_from(wait.as_micros().div_ceil(1000)).unwrap_or(i32::MAX);
        let progress = if out.open_plain_lane() {
            self.source
                .next_block(wait_ms, max, |p| out.on_plain_packet(p))?
        } else {
            self.source.next_block(wait_ms, max, |p| out.on_packet(p))?
        };
        if let Some(e) = self.out.failed.take() {
            return Err(e);
        }
        if progress == Progress::Block {
            let t = &mut self.out.totals;
            t.ring_fill_ppm = self.source.ring_fill_ppm();
            t.ring_fill_peak_ppm = t.ring_fill_peak_ppm.max(t.ring_fill_ppm);
        }
        if let Progress::Link(event) = progress {
            self.link_changed(&event)?;
        }
        self.out.totals.settle();
        for s in &mut self.out.sinks {
            s.end_of_block(&self.out.totals, self.out.if_stats)?;
        }
        Ok(progress)
    }

    /// A gap in the input starts or ends: the totals count it at once, and the sinks mark it
    /// in their output between the packets before and after. Out of line: once per gap.
    #[cold]
    fn link_changed(&mut self, event: &LinkEvent) -> Result<(), EngineError> {
        self.poll_stats()?;
        for s in &mut self.out.sinks {
            s.link_changed(event, &self.out.totals, self.out.if_stats)?;
        }
        Ok(())
    }

    fn poll_stats(&mut self) -> Result<(), EngineError> {
        let s = self.source.stats()?;
        // Kernel drops reach the records through `Packet::drops_before`; only totals move here.
        let t = &mut self.out.totals;
        t.received = s.received;
        t.dropped_kernel = s.dropped;
        t.dropped_in_transit = s.dropped_in_transit;
        t.freezes = s.freezes;
        t.blocks = s.blocks;
        t.link_gaps = s.link_gaps;
        t.link_down_ns = s.link_down_ns;
        t.settle();
        self.out.if_stats = s.if_received.zip(s.if_dropped);
        Ok(())
    }
}

impl Output {
    /// Tells the sinks about interfaces they have not seen yet.
    fn announce(&mut self, interfaces: &[InterfaceInfo]) -> Result<(), EngineError> {
        for info in &interfaces[self.interfaces.len()..] {
            let ip_sum = self.sinks.iter().any(|s| s.wants_ip_sum());
            let builder = RecordBuilder::new(
                info.linktype,
                self.snaplen.min(info.snaplen.max(1)),
                info.max_frame,
            )
            .with_ip_sum(ip_sum);
            let filter = match &self.filter {
                Some(expr) => Some(rules::compile_expr(
                    expr,
                    info.linktype,
                    self.snaplen,
                    &self.stop,
                )?),
                None => None,
            };
            let mut info = info.clone();
            info.snaplen = self.snaplen.min(info.snaplen);
            for s in &mut self.sinks {
                s.add_interface(&info)?;
            }
            self.interfaces.push(Announced {
                linktype: info.linktype,
                builder,
                filter,
            });
        }
        Ok(())
    }

    /// Records all workers together may still take (`-c`), or `usize::MAX`.
    fn remaining(&self) -> usize {
        self.limit.as_ref().map_or(usize::MAX, |l| {
            usize::try_from(l.load(Ordering::Relaxed)).unwrap_or(usize::MAX)
        })
    }

    /// Whether the next block may take the plain lane: one sink (a file or a flow meter; not
    /// forwarding, which wants the whole-IP sum), and no filter, active rule, `-c` limit or
    /// anonymisation to apply, and no sink failed. The lane closes for the rest of the block if the rules
    /// change or the sink fails.
    fn open_plain_lane(&mut self) -> bool {
        self.plain = self.filter.is_none()
            && self.rules.as_mut().is_none_or(RuleReader::admits_all)
            && self.limit.is_none()
            && self.anon.is_none()
            && self.failed.is_none()
            && matches!(&self.sinks[..], [s] if !s.wants_ip_sum());
        self.plain
    }

    /// [`Output::on_packet`] in the plain lane: a packet with no loss before it and no
    /// stripped VLAN tag goes from the ring straight to the one sink, none of the general
    /// path's checks in between and the sink's code inlined here (the record is the same).
    /// Any other packet takes the general path.
    #[inline(always)]
    fn on_plain_packet(&mut self, p: &Packet<'_>) {
        if self.rules.as_ref().is_some_and(RuleReader::changed) {
            self.plain = false;
        }
        let (true, Some(i), [sink]) = (
            self.plain,
            self.interfaces.get(p.interface as usize),
            &mut self.sinks[..],
        ) else {
            return self.on_other_packet(p);
        };
        if p.drops_before | self.pending_drops != 0 || p.stripped_vlan.is_some() {
            return self.on_other_packet(p);
        }
        if let Some(t) = &mut self.traffic {
            t.count(i.linktype, p.data, p.len, p.ts_ns);
        }
        let (data, flags) = i.builder.plain(p);
        let ctl = ControlField::new(p.ts_ns, flags, data.len() as u16, 0, p.len);
        if let Err(e) = sink.record(p.interface, 0, &ctl, data) {
            return self.sink_failed(e);
        }
        self.totals.recorded += 1;
        self.totals.bytes += u64::from(p.len);
    }

    /// A sink refused a record: the run stops, the record counts as dropped by tapflow, and so
    /// do the packets after it (in the general path, which the lane closes for).
    #[cold]
    fn sink_failed(&mut self, e: EngineError) {
        self.plain = false;
        self.failed = Some(e);
        self.stop.raise();
        self.totals.dropped_ours += 1;
    }

    /// The plain lane's way out for a packet it does not take: out of line, so that the
    /// general path does not crowd the lane's loop.
    #[cold]
    #[inline(never)]
    fn on_other_packet(&mut self, p: &Packet<'_>) {
        self.on_packet(p);
    }

    #[inline]
    fn on_packet(&mut self, p: &Packet<'_>) {
        let interface = self.interfaces.get(p.interface as usize);
        let linktype = interface.map_or(LinkType::Unknown(0), |i| i.linktype);
        if self.filter.is_some()
            && interface
                .and_then(|i| i.filter.as_ref())
                .is_none_or(|prog| cbpf::run(prog, p.data, p.len) == 0)
        {
            self.totals.filtered += 1;
            return;
        }
        if let Some(rules) = &mut self.rules
            && !rules.admit(linktype, p.data, p.len)
        {
            self.totals.filtered += 1;
            return;
        }
        if let Some(limit) = &self.limit
            && limit
                .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| n.checked_sub(1))
                .is_err()
        {
            self.totals.past_limit += 1;
            self.stop.raise();
            return;
        }
        self.pending_drops += p.drops_before;
        let builder = match interface {
            Some(i) if self.failed.is_none() => i.builder,
            // A packet for an interface never announced, or after a sink failed: it cannot be
            // recorded, and is counted.
            _ => {
                self.totals.dropped_ours += 1;
                self.pending_drops += 1;
                return;
            }
        };
        if let Some(t) = &mut self.traffic {
            t.count(linktype, p.data, p.len, p.ts_ns);
        }
        let (ctl, data) = builder.build(p, &mut self.scratch);
        let drops = std::mem::take(&mut self.pending_drops);
        let anon = self.anon.as_mut().map(|a| a.apply(linktype, &ctl, data));
        for s in &mut self.sinks {
            let (c, d) = match &anon {
                Some((c, d)) if !s.takes_original_addresses() => (c, *d),
                _ => (&ctl, data),
            };
            if let Err(e) = s.record(p.interface, drops, c, d) {
                return self.sink_failed(e);
            }
        }
        self.totals.recorded += 1;
        self.totals.bytes += u64::from(p.len);
    }
}
