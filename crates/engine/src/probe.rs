//! What a running capture shows of itself: each worker's published counters and the live
//! rules, for the control socket and the metrics endpoint.

use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use serde::{Deserialize, Serialize};

use crate::counters::{SharedTotals, Totals};
use crate::rules::LiveRules;
use crate::sink::record_sink::SinkLive;
use crate::source::{SourceCounter, SourceMetrics};
use crate::traffic::{SharedStats, Traffic};

/// One worker's counters at one moment.
///
/// As JSON (`tapflow stats --json`, the control socket's `stats`): the accounting's keys, then
/// `traffic` as an object, then the sinks' keys, e.g. `{"received":…,…,"traffic":{"packets":…,
/// …},"forward_failed":…,"flows_active":…,"flows_exported":…}`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct WorkerSnapshot {
    /// Accounting.
    #[serde(flatten)]
    pub totals: Totals,
    /// Traffic by kind.
    pub traffic: Traffic,
    /// Its sinks' counters.
    #[serde(flatten)]
    pub live: SinkLive,
}

impl WorkerSnapshot {
    /// Adds another worker's counters (the traffic's time span becomes the union of both).
    pub fn add(&mut self, o: &WorkerSnapshot) {
        self.totals.add(&o.totals);
        self.traffic.add(&o.traffic);
        self.live.add(&o.live);
    }
}

/// A running capture's statistics, as the control socket's `stats` answers them.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Stats {
    /// When the capture started, in seconds since 1970.
    pub start_time_seconds: f64,
    /// Each worker's counters, in fanout order.
    pub workers: Vec<WorkerSnapshot>,
}

impl Stats {
    /// The workers' counters summed.
    pub fn total(&self) -> WorkerSnapshot {
        let mut t = WorkerSnapshot::default();
        for w in &self.workers {
            t.add(w);
        }
        t
    }
}

/// A running capture, as the control socket and `/metrics` see it.
#[derive(Debug)]
pub struct ProbeState {
    workers: Vec<(Arc<SharedTotals>, Arc<SharedStats>)>,
    rules: Option<Arc<LiveRules>>,
    started: SystemTime,
    source: Option<SourceMetrics>,
    /// What is captured: the interface's name, or the file or address read.
    interface: String,
    /// The running alerts of flood detection, if it runs.
    alerts: Option<crate::detect::action::Gauge>,
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
            source: None,
            interface: String::new(),
            alerts: None,
        }
    }

    /// Serves the running alerts of flood detection too (`tapflow_alert_active`).
    pub fn with_alerts(mut self, g: Option<crate::detect::action::Gauge>) -> ProbeState {
        self.alerts = g;
        self
    }

    /// The running alerts, if detection runs.
    pub fn alerts(&self) -> Option<&crate::detect::action::Gauge> {
        self.alerts.as_ref()
    }

    /// Names what is captured (the interface, or the file or address read).
    pub fn with_interface(mut self, name: &str) -> ProbeState {
        self.interface = name.to_string();
        self
    }

    /// What is captured: the interface's name, or the file or address read.
    pub fn interface(&self) -> &str {
        &self.interface
    }

    /// Serves what the source counts of itself too.
    pub fn with_source_metrics(mut self, m: Option<SourceMetrics>) -> ProbeState {
        self.source = m;
        self
    }

    /// The source's own counters now, if it has any.
    pub fn source_metrics(&self) -> Vec<SourceCounter> {
        self.source
            .as_ref()
            .map(SourceMetrics::read)
            .unwrap_or_default()
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

    /// Every worker's counters now, and the start time.
    pub fn stats(&self) -> Stats {
        Stats {
            start_time_seconds: self.started_unix(),
            workers: self.snapshot(),
        }
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stats_round_trip_through_json() {
        let w = WorkerSnapshot {
            totals: Totals {
                received: 10,
                recorded: 7,
                dropped_kernel: 2,
                dropped_ours: 1,
                bytes: 600,
                ..Totals::default()
            },
            traffic: Traffic {
                packets: 7,
                bytes: 420,
                ipv4: 6,
                tcp: 5,
                tcp_syn: 1,
                first_ns: 1,
                last_ns: 2_000_000_001,
                ..Traffic::default()
            },
            live: SinkLive {
                forward_failed: 3,
                flows_active: 4,
                flows_exported: 5,
            },
        };
        let s = Stats {
            start_time_seconds: 1.7e9,
            workers: vec![w, WorkerSnapshot::default()],
        };
        let text = serde_json::to_string(&s).unwrap();
        assert!(
            text.contains(
                "\"workers\":[{\"received\":10,\"recorded\":7,\"filtered\":0,\"dropped_kernel\":2,\
                 \"dropped_in_transit\":0,\"dropped_ours\":1,"
            ),
            "{text}"
        );
        assert!(
            text.contains("\"non_ip\":1,") && text.contains("\"mean_rate_bytes_per_second\":210.0"),
            "{text}"
        );
        assert!(
            text.contains("},\"forward_failed\":3,\"flows_active\":4,"),
            "{text}"
        );
        assert_eq!(serde_json::from_str::<Stats>(&text).unwrap(), s);
        assert_eq!(s.total().totals.received, 10);
    }
}
