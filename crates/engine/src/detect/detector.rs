//! The detector: merges the tallies of every worker (or of the one flow stream) interval by
//! interval, measures each destination, group and the total against its limits, and hands the
//! alerts that start and end to the actions.
//!
//! Workers hand a tally over once an interval (a mutex taken once a second per worker, never
//! per packet). An interval is measured once every worker has moved past it, so the merged
//! table holds all of its traffic.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use serde::Serialize;

use crate::detect::action::{Action, Gauge};
use crate::detect::alert::{Alert, Alerts, Measure, Target};
use crate::detect::baseline::{Hour, Learner};
use crate::detect::tally::Tally;
use crate::detect::threshold::{Limits, Thresholds};

/// Intervals are one second long.
pub const INTERVAL_S: u64 = 1;
/// Intervals waiting for a slow worker; past this the oldest is measured without it.
const MAX_PENDING: usize = 8;

/// What detection did, for the summary.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct DetectSummary {
    /// Intervals measured.
    pub intervals: u64,
    /// Packets observed (flow streams: packets their records stand for).
    pub packets: u64,
    /// Flow records observed.
    pub flows: u64,
    /// Alerts started.
    pub alerts: u64,
    /// Alerts running when detection ended (ended with it).
    pub running_at_end: u64,
    /// Tallies that arrived for an interval already measured, merged into the next.
    pub late: u64,
    /// Intervals counted from a sample of their packets (a worker over
    /// [`crate::detect::meter::EXACT_PER_SECOND`]), and the largest sampling period.
    pub sampled: u64,
    /// The largest sampling period (one packet counted in this many).
    pub period: u64,
}

/// The shared detector.
#[derive(Debug)]
pub struct Detector {
    thresholds: Arc<Thresholds>,
    alerts: Alerts,
    actions: Vec<Box<dyn Action>>,
    /// Per worker: every interval before this one is closed.
    closed_before: Vec<u64>,
    pending: BTreeMap<u64, Tally>,
    spare: Vec<Tally>,
    /// The last interval measured.
    measured: Option<u64>,
    summary: DetectSummary,
    gauge: Gauge,
    /// Learns the group and total limits from a store, if asked to.
    learner: Option<Learner>,
    /// Per group, then the total: the last second at or over a learnt limit and how many in a
    /// row up to it.
    runs: Vec<(u64, u64)>,
}

/// A detector several workers share.
pub type Hub = Arc<Mutex<Detector>>;

impl Detector {
    /// A detector over `workers` workers, with `actions` for its alerts.
    pub fn new(thresholds: Thresholds, actions: Vec<Box<dyn Action>>, workers: usize) -> Detector {
        let runs = vec![(0, 0); thresholds.groups.len() + 1];
        Detector {
            alerts: Alerts::new(thresholds.hold, thresholds.release, INTERVAL_S),
            thresholds: Arc::new(thresholds),
            actions,
            closed_before: vec![0; workers.max(1)],
            pending: BTreeMap::new(),
            spare: Vec::new(),
            measured: None,
            summary: DetectSummary::default(),
            gauge: Gauge::default(),
            learner: None,
            runs,
        }
    }

    /// The running alerts, for `/metrics`.
    pub fn gauge(&self) -> Gauge {
        self.gauge.clone()
    }

    /// Learns the group and total limits with `learner` (docs/detect.md, "Learnt baseline").
    pub fn set_baseline(&mut self, learner: Learner) {
        self.learner = Some(learner);
    }

    /// Sets the number of workers that hand tallies over.
    pub fn set_workers(&mut self, workers: usize) {
        self.closed_before = vec![0; workers.max(1)];
    }

    /// Shared between workers.
    pub fn shared(self) -> Hub {
        Arc::new(Mutex::new(self))
    }

    /// The thresholds.
    pub fn thresholds(&self) -> Arc<Thresholds> {
        Arc::clone(&self.thresholds)
    }

    /// The alerts running now: target and kind.
    pub fn running(&self) -> Vec<(String, String)> {
        self.alerts.running()
    }

    /// Worker `worker` hands over `tally` (if it saw anything) and says every interval before
    /// `next` is closed for it.
    pub fn submit(&mut self, worker: usize, tally: Option<&Tally>, next: u64) {
        if let Some(t) = tally {
            if t.period > 1 {
                self.summary.sampled += 1;
                self.summary.period = self.summary.period.max(t.period);
            }
            let mut second = t.second;
            if self.measured.is_some_and(|m| second <= m) {
                self.summary.late += 1;
                second = self.measured.unwrap_or(0) + 1;
            }
            let spare = &mut self.spare;
            let th = &self.thresholds;
            self.pending
                .entry(second)
                .or_insert_with(|| {
                    let mut n = spare
                        .pop()
                        .unwrap_or_else(|| Tally::new(th.capacity, th.groups.len()));
                    n.reset(second);
                    n
                })
                .merge(t);
        }
        if let Some(c) = self.closed_before.get_mut(worker) {
            *c = (*c).max(next);
        }
        self.measure_ready(false);
    }

    /// Worker `worker` is done.
    pub fn finish(&mut self, worker: usize) {
        self.submit(worker, None, u64::MAX);
    }

    /// Measures every pending interval and ends every alert; returns the summary.
    pub fn close(&mut self) -> DetectSummary {
        self.measure_ready(true);
        let ends = self.alerts.expire(self.measured.unwrap_or(0), true);
        self.summary.running_at_end += ends.len() as u64;
        self.act(&ends);
        for a in &mut self.actions {
            a.close();
        }
        self.summary.clone()
    }

    fn measure_ready(&mut self, all: bool) {
        let before = self.closed_before.iter().copied().min().unwrap_or(0);
        while let Some((&s, _)) = self.pending.first_key_value() {
            if !(all || s < before || self.pending.len() > MAX_PENDING) {
                break;
            }
            let Some((_, t)) = self.pending.pop_first() else {
                break;
            };
            self.measure(&t);
            self.spare.push(t);
        }
        // Quiet intervals end alerts too.
        if before != u64::MAX && before > 0 && self.measured.is_none_or(|m| before - 1 > m) {
            let ends = self.alerts.expire(before - 1, false);
            self.act(&ends);
        }
    }

    fn measure(&mut self, t: &Tally) {
        let s = t.second;
        // Alerts that held past their time end before new ones start in this interval.
        let mut events = self.alerts.expire(s, false);
        self.summary.intervals += 1;
        self.summary.packets += t.total.packets;
        self.summary.flows += t.total.flows;
        let th = Arc::clone(&self.thresholds);
        // Once an interval: a look at the learner's latest hour, never a query.
        let learnt = self.learner.as_mut().and_then(|l| l.hour(s));
        for e in t.entries() {
            let g = th.group_of(e.addr.ipv6, &e.addr.bytes);
            let m = Measure {
                target: Target::Host(e.addr.ip()),
                group: g.map(|g| th.groups[g].name.as_str()),
                counts: e.counts,
                entry: Some(e),
                limits: th.host_limits(g),
                limit: "static",
            };
            events.extend(self.alerts.measure(s, &m));
        }
        for (i, (g, c)) in th.groups.iter().zip(&t.groups).enumerate() {
            let learnt = learnt
                .as_ref()
                .and_then(|h| h.groups.get(i).copied().flatten());
            if let Some((limits, limit)) = effective(g.total, learnt.map(|l| l.limits)) {
                let m = Measure {
                    target: Target::Group(g.name.clone()),
                    group: Some(&g.name),
                    counts: *c,
                    entry: None,
                    limits,
                    limit,
                };
                events.extend(self.sustained(i, s, &m));
            }
        }
        let learnt = learnt.as_ref().and_then(|h: &Arc<Hour>| h.total);
        if let Some((limits, limit)) = effective(th.total, learnt.map(|l| l.limits)) {
            let m = Measure {
                target: Target::Total,
                group: None,
                counts: t.total,
                entry: None,
                limits,
                limit,
            };
            events.extend(self.sustained(th.groups.len(), s, &m));
        }
        self.measured = Some(s);
        self.act(&events);
    }

    /// Measures a group's or the total's `m` (run `i`): against a learnt limit, an alert starts
    /// only once the limit was reached `sustain` seconds in a row.
    fn sustained(&mut self, i: usize, s: u64, m: &Measure<'_>) -> Option<Alert> {
        if m.limit == "baseline" && !self.alerts.is_running(&m.target) {
            let sustain = self.thresholds.baseline.as_ref().map_or(1, |b| b.sustain);
            let c = &m.counts;
            let secs = INTERVAL_S as f64;
            let rates = [
                c.packets as f64 / secs,
                c.bytes as f64 * 8.0 / secs,
                c.flows as f64 / secs,
            ];
            let run = &mut self.runs[i];
            if m.limits.over(rates, 1.0).is_empty() {
                *run = (s, 0);
                return None;
            }
            *run = (
                s,
                if run.0 + INTERVAL_S == s {
                    run.1 + 1
                } else {
                    1
                },
            );
            if run.1 < sustain {
                return None;
            }
        }
        self.alerts.measure(s, m)
    }

    fn act(&mut self, events: &[Alert]) {
        for a in events {
            if a.event == "start" {
                self.summary.alerts += 1;
            }
            self.gauge.alert(a);
            for x in &mut self.actions {
                x.alert(a);
            }
        }
    }
}

/// The limits a group or the total is measured against: the learnt packets and bits limits
/// where there are (the static flows limit beside them), else the static ones; and which.
fn effective(fixed: Option<Limits>, learnt: Option<Limits>) -> Option<(Limits, &'static str)> {
    match (fixed, learnt) {
        (f, Some(l)) => Some((
            Limits {
                flows: f.and_then(|f| f.flows),
                ..l
            },
            "baseline",
        )),
        (Some(f), None) => Some((f, "static")),
        (None, None) => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::detect::meter::Meter;
    use crate::detect::signature::Observation;

    #[derive(Debug, Clone, Default)]
    struct Seen(Arc<Mutex<Vec<Alert>>>);
    impl Action for Seen {
        fn alert(&mut self, a: &Alert) {
            self.0.lock().unwrap().push(a.clone());
        }
    }

    fn syn(dst: u8, src: u32) -> Observation {
        let mut o = Observation {
            proto: 6,
            tcp_flags: 0x02,
            sport: (src % 60000) as u16,
            packets: 1,
            bytes: 60,
            ..Default::default()
        };
        o.dst[..4].copy_from_slice(&[192, 0, 2, dst]);
        o.src[..4].copy_from_slice(&src.to_be_bytes());
        o
    }

    #[test]
    fn two_workers_halves_add_up_to_one_alert_that_ends() {
        let seen = Seen::default();
        let th = Thresholds {
            hold: 2,
            ..Default::default()
        };
        let hub = Detector::new(th, vec![Box::new(seen.clone())], 2).shared();
        let (mut a, mut b) = (Meter::new(hub.clone(), 0), Meter::new(hub.clone(), 1));
        let s = 1_700_000_000u64 * 1_000_000_000;
        // 12k SYN/s on each worker for 3 s: 24k/s at 192.0.2.7, over 20k only together.
        for sec in 0..3u64 {
            for i in 0..12_000u64 {
                let t = s + sec * 1_000_000_000 + i * 80_000;
                a.observe(t, &syn(7, i as u32));
                b.observe(t, &syn(7, 1_000_000 + i as u32));
                b.observe(t, &syn(9, i as u32));
            }
        }
        // A little traffic much later moves both workers on; the alert's hold time passes.
        a.observe(s + 10_000_000_000, &syn(1, 1));
        b.observe(s + 10_000_000_000, &syn(1, 1));
        a.finish();
        b.finish();
        let sum = hub.lock().unwrap().close();
        let v = seen.0.lock().unwrap().clone();
        assert_eq!(v.len(), 2, "{v:#?}");
        assert_eq!((v[0].event, v[0].target.as_str()), ("start", "192.0.2.7"));
        assert_eq!(v[0].kind, "syn_flood");
        assert_eq!(v[0].packets_per_second, 24_000.0);
        assert_eq!(v[0].signatures.syn, 24_000.0);
        assert_eq!(v[0].time, "2023-11-14T22:13:20Z");
        assert_eq!((v[1].event, v[1].duration_seconds), ("end", Some(3)));
        assert_eq!((sum.alerts, sum.running_at_end, sum.late), (1, 0, 0));
        assert_eq!(sum.packets, 3 * 36_000 + 2);
    }

    #[test]
    fn effective_limits_are_learnt_where_learnt() {
        let fixed = Limits {
            packets: Some(10),
            bits: None,
            flows: Some(7),
        };
        let learnt = Limits {
            packets: Some(9_000),
            bits: Some(1_000_000),
            flows: None,
        };
        assert_eq!(effective(None, None), None);
        assert_eq!(effective(Some(fixed), None), Some((fixed, "static")));
        let (l, from) = effective(Some(fixed), Some(learnt)).unwrap();
        assert_eq!(
            (l.packets, l.bits, l.flows, from),
            (Some(9_000), Some(1_000_000), Some(7), "baseline")
        );
        assert_eq!(effective(None, Some(learnt)), Some((learnt, "baseline")));
    }
}
