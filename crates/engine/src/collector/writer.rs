//! The store thread: takes the workers' batches and hands them to every store, makes them
//! visible every flush interval, and writes each exporter's counters every stats interval.
//!
//! A store that fails (a full disk, a server gone) is not a crash: what it could not take is
//! counted as its loss, and the collector goes on.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::mpsc::{self, Receiver, RecvTimeoutError, SyncSender};
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

use serde::Serialize;
use tapflow_store::{ExporterStats, FlowStore, StoreReport};

use crate::EngineError;
use crate::collector::intake::Batch;
use crate::collector::ledger::{ExporterCounts, ExporterKey, Ledger};

/// Batches waiting for the store thread: with 4096 flows each, 256k flows.
const QUEUE: usize = 64;

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
    /// Flows not handed to it because it had failed.
    pub withheld: u64,
    /// The first error it returned.
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
}

impl Held {
    fn fail(&mut self, e: impl std::fmt::Display) {
        self.failed = true;
        self.error.get_or_insert_with(|| e.to_string());
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
        let held = stores
            .into_iter()
            .map(|s| Held {
                name: s.name,
                store: s.store,
                flows: 0,
                withheld: 0,
                failed: false,
                error: None,
            })
            .collect();
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
                    s.flows += b.flows.len() as u64;
                    if s.failed {
                        s.withheld += b.flows.len() as u64;
                        continue;
                    }
                    if let Err(e) = s.store.insert(&b.flows) {
                        s.fail(e);
                    }
                    if !b.interfaces.is_empty()
                        && !s.failed
                        && let Err(e) = s.store.insert_interfaces(&b.interfaces)
                    {
                        s.fail(e);
                    }
                }
                let mut flows = b.flows;
                flows.clear();
                let _ = b.back.send(flows);
            }
            Err(RecvTimeoutError::Timeout) => {}
            Err(RecvTimeoutError::Disconnected) => break,
        }
        if last_flush.elapsed() >= flush {
            last_flush = Instant::now();
            for s in stores.iter_mut().filter(|s| !s.failed) {
                if let Err(e) = s.store.flush() {
                    s.fail(e);
                }
            }
        }
        if last_stats.elapsed() >= stats {
            last_stats = Instant::now();
            write_stats(&mut stores, ledger, &mut before);
        }
    }
    write_stats(&mut stores, ledger, &mut before);
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
    for s in stores.iter_mut().filter(|s| !s.failed) {
        if let Err(e) = s.store.insert_exporter_stats(&rows) {
            s.fail(e);
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
        dropped: r.dropped,
        pending: r.pending,
        withheld,
        error,
    }
}
