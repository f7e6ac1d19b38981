//! The store thread: takes the workers' batches and hands them to every store, makes them
//! visible every flush interval, and writes each exporter's counters every stats interval.
//!
//! A store that fails is not a crash. A failure that passes (no descriptor left, a full disk,
//! no memory) is tried again with a growing wait ([`RETRY_FIRST`] to [`RETRY_MAX`]); meanwhile
//! the thread holds the store's flows back, up to [`MAX_HELD`], and counts what it drops past
//! that. Any other failure ends the store: what it could not take is counted as its loss, and
//! the collector goes on.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::mpsc::{self, Receiver, RecvTimeoutError, SyncSender};
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

use serde::Serialize;
use tapflow_store::{ExporterStats, FlowStore, InterfaceName, StoreError, StoreReport, StoredFlow};

use crate::EngineError;
use crate::collector::intake::Batch;
use crate::collector::ledger::{ExporterCounts, ExporterKey, Ledger, StoreHold};

/// Batches waiting for the store thread: with 4096 flows each, 256k flows.
const QUEUE: usize = 64;
/// Flows held back for one store while it fails, about 200 MiB; more are dropped, counted.
pub const MAX_HELD: usize = 1 << 20;
/// Interface names held back for one store while it fails.
const MAX_HELD_NAMES: usize = 65_536;
/// The wait before a store that failed is tried again the first time.
pub const RETRY_FIRST: Duration = Duration::from_millis(100);
/// The longest wait between two tries; each failed try doubles the wait up to this.
pub const RETRY_MAX: Duration = Duration::from_secs(5);

/// One store, by name, as it was handed to the collector.
#[derive(Debug)]
pub struct NamedStore {
    /// How the summary names it (`parquet:DIR`, `json:FILE`, `ipfix://HOST:PORT`).
    pub name: String,
    /// The store.
    pub store: Box<dyn FlowStore>,
}

/// What one store did.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct StoreOutcome {
    /// Its name.
    pub name: String,
    /// Flows the collector had for it.
    pub flows: u64,
    /// Flows durably written.
    pub stored: u64,
    /// Flows it took and then dropped (it says why in `error`).
    pub dropped: u64,
    /// Flows it took and did not write by the end.
    pub pending: u64,
    /// Flows not handed to it because it had failed for good.
    pub withheld: u64,
    /// Flows held back in the collector while it failed for a while, handed over once it
    /// recovered (or counted in `dropped` if it did not).
    pub held_back: u64,
    /// Times it was tried again after a failure that passes.
    pub retries: u64,
    /// The first error it returned (it may have recovered since: see `lost`).
    pub error: Option<String>,
}

impl StoreOutcome {
    /// Flows of the collector's that it did not store.
    pub fn lost(&self) -> u64 {
        self.flows - self.stored.min(self.flows)
    }
}

/// A store and its bookkeeping in the store thread.
#[derive(Debug)]
struct Held {
    name: String,
    store: Box<dyn FlowStore>,
    flows: u64,
    withheld: u64,
    failed: bool,
    error: Option<String>,
    /// Flows and names waiting for the store to recover.
    waiting: Vec<StoredFlow>,
    waiting_names: Vec<InterfaceName>,
    /// While it fails: when to try again, and the wait after that.
    retry: Option<(Instant, Duration)>,
    hold: StoreHold,
}

impl Held {
    fn new(s: NamedStore) -> Held {
        Held {
            name: s.name,
            store: s.store,
            flows: 0,
            withheld: 0,
            failed: false,
            error: None,
            waiting: Vec::new(),
            waiting_names: Vec::new(),
            retry: None,
            hold: StoreHold::default(),
        }
    }

    /// A failure that passes starts (or keeps) the retries; any other ends the store.
    fn trouble(&mut self, e: &StoreError) {
        self.error.get_or_insert_with(|| e.to_string());
        if !e.is_transient() {
            self.failed = true;
            self.withheld += self.waiting.len() as u64;
            self.waiting = Vec::new();
            self.waiting_names = Vec::new();
            self.retry = None;
            return;
        }
        if self.retry.is_none() {
            eprintln!(
                "tapflow: store {}: {e}; holding flows back and trying again",
                self.name
            );
        }
        let wait = self
            .retry
            .map_or(RETRY_FIRST, |(_, w)| (w * 2).min(RETRY_MAX));
        self.retry = Some((Instant::now() + wait, wait));
    }

    /// Takes one batch: hands it to the store, holds it back while the store fails, or counts
    /// it withheld once the store has failed for good.
    fn take(&mut self, flows: &[StoredFlow], names: &[InterfaceName]) {
        self.flows += flows.len() as u64;
        if self.failed {
            self.withheld += flows.len() as u64;
        } else if self.retry.is_some() {
            self.hold_back(flows, names);
        } else {
            self.insert(flows, names);
        }
    }

    fn insert(&mut self, flows: &[StoredFlow], names: &[InterfaceName]) {
        // The store counts what a failed insert held (dropped, or pending for its next write).
        let r = self.store.insert(flows).and_then(|()| {
            if names.is_empty() {
                Ok(())
            } else {
                self.store.insert_interfaces(names)
            }
        });
        if let Err(e) = r {
            self.trouble(&e);
        }
    }

    fn hold_back(&mut self, flows: &[StoredFlow], names: &[InterfaceName]) {
        let room = MAX_HELD - self.waiting.len();
        let (now, over) = flows.split_at(room.min(flows.len()));
        self.waiting.extend_from_slice(now);
        self.hold.held_back += now.len() as u64;
        self.hold.dropped += over.len() as u64;
        let room = MAX_HELD_NAMES - self.waiting_names.len();
        self.waiting_names
            .extend_from_slice(&names[..room.min(names.len())]);
        self.hold.waiting = self.waiting.len() as u64;
    }

    /// Tries a failing store again once its wait is over (or at once if `now`): a flush, then
    /// what was held back.
    fn try_again(&mut self, now: bool) {
        match self.retry {
            Some((at, _)) if now || Instant::now() >= at => {}
            _ => return,
        }
        self.hold.retries += 1;
        if let Err(e) = self.store.flush() {
            return self.trouble(&e);
        }
        self.retry = None;
        eprintln!(
            "tapflow: store {} works again after {} tries; {} flows held back are handed over",
            self.name,
            self.hold.retries,
            self.waiting.len()
        );
        let (flows, names) = (
            std::mem::take(&mut self.waiting),
            std::mem::take(&mut self.waiting_names),
        );
        self.hold.waiting = 0;
        self.insert(&flows, &names);
    }

    /// What is still held back at the end is dropped.
    fn give_up(&mut self) {
        self.hold.dropped += self.waiting.len() as u64;
        self.waiting = Vec::new();
        self.hold.waiting = 0;
    }
}

/// The running store thread.
#[derive(Debug)]
pub struct Writer {
    tx: SyncSender<Batch>,
    thread: JoinHandle<Vec<StoreOutcome>>,
}

impl Writer {
    /// Starts the thread over `stores`; every `flush` it makes what it took visible, every
    /// `stats` it writes the exporters' counters from `ledger`.
    pub fn start(
        stores: Vec<NamedStore>,
        ledger: Arc<Ledger>,
        flush: Duration,
        stats: Duration,
    ) -> Result<Writer, EngineError> {
        let (tx, rx) = mpsc::sync_channel(QUEUE);
        let held = stores.into_iter().map(Held::new).collect();
        let thread = thread::Builder::new()
            .name("tapflow-store".into())
            .spawn(move || run(&rx, held, &ledger, flush, stats))
            .map_err(|e| EngineError::Config(format!("cannot start the store thread: {e}")))?;
        Ok(Writer { tx, thread })
    }

    /// A queue into the thread, for a worker.
    pub fn queue(&self) -> SyncSender<Batch> {
        self.tx.clone()
    }

    /// Waits until every queue is dropped, closes the stores and reports.
    pub fn finish(self) -> Vec<StoreOutcome> {
        drop(self.tx);
        self.thread.join().unwrap_or_default()
    }
}

fn run(
    rx: &Receiver<Batch>,
    mut stores: Vec<Held>,
    ledger: &Ledger,
    flush: Duration,
    stats: Duration,
) -> Vec<StoreOutcome> {
    let (mut last_flush, mut last_stats) = (Instant::now(), Instant::now());
    let mut before: HashMap<ExporterKey, ExporterCounts> = HashMap::new();
    loop {
        match rx.recv_timeout(Duration::from_millis(100)) {
            Ok(b) => {
                for s in &mut stores {
                    s.take(&b.flows, &b.interfaces);
                }
                if !b.counters.is_empty() {
                    if_counters(&mut stores, &b.counters);
                }
                let mut flows = b.flows;
                flows.clear();
                let _ = b.back.send(flows);
            }
            Err(RecvTimeoutError::Timeout) => {}
            Err(RecvTimeoutError::Disconnected) => break,
        }
        for s in &mut stores {
            s.try_again(false);
        }
        if last_flush.elapsed() >= flush {
            last_flush = Instant::now();
            for s in stores.iter_mut().filter(|s| !s.failed && s.retry.is_none()) {
                if let Err(e) = s.store.flush() {
                    s.trouble(&e);
                }
            }
        }
        if last_stats.elapsed() >= stats {
            last_stats = Instant::now();
            write_stats(&mut stores, ledger, &mut before);
        }
        ledger.set_stores(stores.iter().map(|s| (s.name.clone(), s.hold)).collect());
    }
    write_stats(&mut stores, ledger, &mut before);
    for s in &mut stores {
        // A last try for what is held back, then it is dropped.
        s.try_again(true);
        s.give_up();
    }
    ledger.set_stores(stores.iter().map(|s| (s.name.clone(), s.hold)).collect());
    stores.into_iter().map(close).collect()
}

/// Writes each exporter's counters since the last call.
fn write_stats(
    stores: &mut [Held],
    ledger: &Ledger,
    before: &mut HashMap<ExporterKey, ExporterCounts>,
) {
    let now = ledger.snapshot();
    let time_ns = tapflow_sys::clock::realtime_ns();
    let rows: Vec<ExporterStats> = now
        .exporters
        .iter()
        .filter_map(|(k, c)| {
            let b = before.get(k).cloned().unwrap_or_default();
            let row = ExporterStats {
                exporter: k.exporter,
                domain: k.domain,
                time_ns,
                records: c.records - b.records,
                sequence_lost: c.sequence_lost - b.sequence_lost,
                template_missing: c.template_missing - b.template_missing,
                bad_messages: c.bad_messages - b.bad_messages,
            };
            let quiet = row.records == 0
                && row.sequence_lost == 0
                && row.template_missing == 0
                && row.bad_messages == 0;
            (!quiet).then_some(row)
        })
        .collect();
    *before = now.exporters;
    if rows.is_empty() {
        return;
    }
    for s in stores.iter_mut().filter(|s| !s.failed && s.retry.is_none()) {
        if let Err(e) = s.store.insert_exporter_stats(&rows) {
            s.trouble(&e);
        }
    }
}

/// Hands interface counters to each store that is taking rows (a store failing or retrying
/// does not keep them: they are samples of totals, and the next sample carries them on).
fn if_counters(stores: &mut [Held], rows: &[tapflow_store::InterfaceCounters]) {
    for s in stores.iter_mut().filter(|s| !s.failed && s.retry.is_none()) {
        if let Err(e) = s.store.insert_if_counters(rows) {
            s.trouble(&e);
        }
    }
}

fn close(s: Held) -> StoreOutcome {
    let Held {
        name,
        store,
        flows,
        withheld,
        mut error,
        hold,
        ..
    } = s;
    let report = store.report();
    let r = match store.close() {
        Ok(r) => r,
        Err(e) => {
            error.get_or_insert_with(|| e.to_string());
            // What it had not made durable before the failed close is lost.
            StoreReport {
                dropped: report.received - report.stored.min(report.received),
                pending: 0,
                ..report
            }
        }
    };
    StoreOutcome {
        name,
        flows,
        stored: r.stored,
        dropped: r.dropped + hold.dropped,
        pending: r.pending,
        withheld,
        held_back: hold.held_back,
        retries: hold.retries,
        error,
    }
}
