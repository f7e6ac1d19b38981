//! The worker: drains one source block by block, builds header records into batches and hands
//! them to its writer. No lock, no allocation and no syscall per packet.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use crate::EngineError;
use crate::batch::{Batch, Producer};
use crate::counters::{SharedTotals, Totals};
use crate::record_builder::RecordBuilder;
use crate::source::{InterfaceInfo, Packet, PacketSource, Progress};

/// How often the worker polls its source's counters (the kernel's are 32-bit and clear on read).
const STATS_INTERVAL: Duration = Duration::from_millis(500);

/// Settings shared by all workers of one capture.
#[derive(Debug, Clone)]
pub struct WorkerConfig {
    /// Bytes of each packet to keep.
    pub snaplen: u32,
    /// How long one wait for a block may take, in ms (bounds reaction to a stop).
    pub poll_ms: i32,
    /// How long the source must stay idle during a drain before the worker concludes it is empty.
    pub drain_quiet: Duration,
}

/// Everything the worker owns except its source.
#[derive(Debug)]
struct Output {
    producer: Producer,
    batch: Option<Batch>,
    builders: Vec<RecordBuilder>,
    announced: usize,
    snaplen: u32,
    totals: Totals,
    /// Losses not yet placed before a record.
    pending_drops: u64,
    limit: Option<Arc<AtomicU64>>,
    stop: Arc<AtomicBool>,
    if_stats: Option<(u64, u64)>,
}

/// One capture pipeline: a source, a record builder per interface, a pipe to the writer.
#[derive(Debug)]
pub struct Worker<S> {
    source: S,
    out: Output,
    shared: Arc<SharedTotals>,
    cfg: WorkerConfig,
}

impl<S: PacketSource> Worker<S> {
    /// A worker over `source` feeding `producer`.
    ///
    /// `limit`, when set, is the number of records all workers together may still take (`-c`);
    /// `stop` is raised by a signal, by the limit, or by the caller.
    pub fn new(
        source: S,
        producer: Producer,
        cfg: WorkerConfig,
        shared: Arc<SharedTotals>,
        limit: Option<Arc<AtomicU64>>,
        stop: Arc<AtomicBool>,
    ) -> Worker<S> {
        let snaplen = cfg.snaplen;
        Worker {
            source,
            out: Output {
                producer,
                batch: None,
                builders: Vec::new(),
                announced: 0,
                snaplen,
                totals: Totals::default(),
                pending_drops: 0,
                limit,
                stop,
                if_stats: None,
            },
            shared,
            cfg,
        }
    }

    /// The source, e.g. to ask for its progress.
    pub fn source(&self) -> &S {
        &self.source
    }

    /// Runs until the input ends or a stop is requested, then drains the source, tells the
    /// writer and returns the final totals, with the error that ended the run if any.
    pub fn run(mut self) -> (Totals, Result<(), EngineError>) {
        let result = self.capture();
        // Whatever happened, the writer gets what was collected and the final count.
        self.out.flush();
        self.shared.publish(&self.out.totals);
        self.out.producer.close(self.out.totals);
        (self.out.totals, result)
    }

    fn capture(&mut self) -> Result<(), EngineError> {
        let mut last_stats = Instant::now();
        loop {
            if self.out.stop.load(Ordering::Relaxed) || self.out.remaining() == 0 {
                return self.drain();
            }
            if self.step()? == Progress::End {
                return self.poll_stats();
            }
            if last_stats.elapsed() >= STATS_INTERVAL {
                last_stats = Instant::now();
                self.poll_stats()?;
            }
            self.shared.publish(&self.out.totals);
        }
    }

    /// Closes the intake, then empties the source until it stays quiet.
    fn drain(&mut self) -> Result<(), EngineError> {
        self.source.stop_intake()?;
        let mut quiet_since = Instant::now();
        loop {
            match self.step()? {
                Progress::End => break,
                Progress::Block => quiet_since = Instant::now(),
                Progress::Idle if quiet_since.elapsed() >= self.cfg.drain_quiet => break,
                Progress::Idle => {}
            }
        }
        self.poll_stats()
    }

    /// Takes one block from the source into batches, and sends what it built.
    fn step(&mut self) -> Result<Progress, EngineError> {
        self.out.announce(self.source.interfaces());
        let max = self.out.remaining();
        let out = &mut self.out;
        let progress = self
            .source
            .next_block(self.cfg.poll_ms, max, |p| out.on_packet(p))?;
        self.out.flush();
        Ok(progress)
    }

    fn poll_stats(&mut self) -> Result<(), EngineError> {
        let s = self.source.stats()?;
        // Kernel drops reach the records through `Packet::drops_before`; only totals move here.
        let t = &mut self.out.totals;
        t.received = s.received;
        t.dropped_kernel = s.dropped;
        t.freezes = s.freezes;
        self.out.if_stats = s.if_received.zip(s.if_dropped);
        Ok(())
    }
}

impl Output {
    /// Tells the writer about interfaces it has not seen yet.
    fn announce(&mut self, interfaces: &[InterfaceInfo]) {
        while self.announced < interfaces.len() {
            let info = &interfaces[self.announced];
            self.builders.push(RecordBuilder::new(
                info.linktype,
                self.snaplen.min(info.snaplen.max(1)),
                info.max_frame,
            ));
            self.flush();
            let mut info = info.clone();
            info.snaplen = self.snaplen.min(info.snaplen);
            self.producer.announce(info);
            self.announced += 1;
        }
    }

    /// Records all workers together may still take (`-c`), or `usize::MAX`.
    fn remaining(&self) -> usize {
        self.limit.as_ref().map_or(usize::MAX, |l| {
            usize::try_from(l.load(Ordering::Relaxed)).unwrap_or(usize::MAX)
        })
    }

    #[inline]
    fn on_packet(&mut self, p: &Packet<'_>) {
        if let Some(limit) = &self.limit
            && limit
                .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| n.checked_sub(1))
                .is_err()
        {
            self.totals.past_limit += 1;
            self.stop.store(true, Ordering::Relaxed);
            return;
        }
        self.pending_drops += p.drops_before;
        // The source's own view of the drops is the kernel's; `drops_before` from a file is
        // loss noted upstream, which only moves into the output.
        let Some(builder) = self.builders.get(p.interface as usize).copied() else {
            // A packet for an interface never announced cannot be described in the output.
            self.totals.dropped_ours += 1;
            self.pending_drops += 1;
            return;
        };
        let need = builder.record_len(p);
        let cut = match &self.batch {
            Some(b) => {
                b.count > 0
                    && (b.interface != p.interface
                        || self.pending_drops > 0
                        || b.records.len() + need > b.records.capacity())
            }
            None => false,
        };
        if cut {
            self.flush();
        }
        if self.batch.is_none() {
            self.batch = self.producer.take_waiting();
        }
        let Some(batch) = self.batch.as_mut() else {
            // The writer is gone (it failed and said why): this record is lost, and counted.
            self.totals.dropped_ours += 1;
            self.pending_drops += 1;
            return;
        };
        if batch.count == 0 {
            batch.interface = p.interface;
            batch.drops_before = std::mem::take(&mut self.pending_drops);
        }
        if batch.records.len() + need > batch.records.capacity() {
            // A single record larger than a batch: cannot happen with snaplen <= 65535 and
            // batches of at least 1 MiB, but never grow on the packet path.
            self.totals.dropped_ours += 1;
            self.pending_drops += 1;
            return;
        }
        builder.push(&mut batch.records, p);
        batch.count += 1;
        self.totals.bytes += u64::from(p.len);
    }

    /// Sends the current batch to the writer, waiting while its queue is full: the kernel ring
    /// behind us is the buffer sized for bursts, and loss is counted there, in one place. A
    /// batch is dropped (and counted) only if the writer is gone.
    fn flush(&mut self) {
        let Some(mut b) = self.batch.take() else {
            return;
        };
        if b.count == 0 {
            self.batch = Some(b);
            return;
        }
        let n = u64::from(b.count);
        b.totals = self.totals;
        b.totals.recorded += n;
        b.if_stats = self.if_stats;
        match self.producer.send_waiting(b) {
            Ok(()) => self.totals.recorded += n,
            Err(mut b) => {
                self.totals.dropped_ours += n;
                self.pending_drops += n + b.drops_before;
                b.clear();
                self.batch = Some(b);
            }
        }
    }
}
