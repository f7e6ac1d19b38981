//! What a running capture shows of itself: each worker's published counters and the live
//! rules, for the control socket and the metrics endpoint.

use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use crate::counters::{SharedTotals, Totals};
use crate::rules::LiveRules;
use crate::sink::record_sink::SinkLive;
use crate::traffic::{SharedStats, Traffic};

/// One worker's counters at one moment.
#[derive(Debug, Clone, Copy, Default)]
pub struct WorkerSnapshot {
    /// Accounting.
    pub totals: Totals,
    /// Traffic by kind.
    pub traffic: Traffic,
    /// Its sinks' counters.
    pub live: SinkLive,
}

/// A running capture, as the control socket and `/metrics` see it.
#[derive(Debug)]
pub struct ProbeState {
    workers: Vec<(Arc<SharedTotals>, Arc<SharedStats>)>,
    rules: Option<Arc<LiveRules>>,
    started: SystemTime,
}

impl ProbeState {
    /// The state of a capture whose workers publish into `workers`.
    pub fn new(
        workers: Vec<(Arc<SharedTotals>, Arc<SharedStats>)>,
        rules: Option<Arc<LiveRules>>,
    ) -> ProbeState {
        ProbeState {
            workers,
            rules,
            started: SystemTime::now(),
        }
    }

    /// Every worker's counters now.
    pub fn snapshot(&self) -> Vec<WorkerSnapshot> {
        self.workers
            .iter()
            .map(|(t, s)| {
                let (traffic, live) = s.load();
                WorkerSnapshot {
                    totals: t.load(),
                    traffic,
                    live,
                }
            })
            .collect()
    }

    /// The live rules, if the capture has them.
    pub fn rules(&self) -> Option<&Arc<LiveRules>> {
        self.rules.as_ref()
    }

    /// When the capture started, in seconds since 1970.
    pub fn started_unix(&self) -> f64 {
        self.started
            .duration_since(UNIX_EPOCH)
            .map_or(0.0, |d| d.as_secs_f64())
    }
}
