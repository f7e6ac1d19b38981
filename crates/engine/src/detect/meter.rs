//! One worker's side of detection: its own tally of the current interval, filled per packet
//! or flow record without a lock, handed to the shared [`Detector`] when the interval ends.

use std::sync::Arc;

use crate::detect::detector::{Hub, INTERVAL_S};
use crate::detect::signature::Observation;
use crate::detect::tally::Tally;
use crate::detect::threshold::Thresholds;

const NS: u64 = 1_000_000_000;

/// Packets a second a worker counts one by one. Above it (a flood), it counts a random sample
/// of about this many a second, each sampled packet weighing the sampling period, so
/// detection's cost stays bounded however large the attack.
pub const EXACT_PER_SECOND: u64 = 200_000;

/// A worker's detection meter.
#[derive(Debug)]
pub struct Meter {
    hub: Hub,
    worker: usize,
    thresholds: Arc<Thresholds>,
    tally: Tally,
    /// Whether the tally holds anything.
    busy: bool,
    /// One packet in this many is counted (1: every one), from the last interval's rate.
    period: u64,
}

impl Meter {
    /// Worker `worker`'s meter, handing its tallies to `hub`.
    pub fn new(hub: Hub, worker: usize) -> Meter {
        let thresholds = hub
            .lock()
            .map(|d| d.thresholds())
            .unwrap_or_else(|e| e.into_inner().thresholds());
        let tally = Tally::new(thresholds.capacity, thresholds.groups.len());
        Meter {
            hub,
            worker,
            thresholds,
            tally,
            busy: false,
            period: 1,
        }
    }

    /// The sampling period in force: one packet in this many is to be counted, weighing this
    /// many packets.
    #[inline]
    pub fn period(&self) -> u64 {
        self.period
    }

    /// The interval `ns` (since 1970) falls in.
    #[inline]
    fn second(ns: u64) -> u64 {
        ns / NS / INTERVAL_S * INTERVAL_S
    }

    /// Adds one observation made at `ns`. No allocation, lock or system call, except once an
    /// interval, when the tally is handed over.
    #[inline]
    pub fn observe(&mut self, ns: u64, o: &Observation) {
        let s = Self::second(ns);
        if s > self.tally.second || !self.busy {
            self.roll(s);
        }
        let g = if self.thresholds.groups.is_empty() {
            None
        } else {
            self.thresholds.group_of(o.ipv6, &o.dst)
        };
        self.tally.observe(o, g);
        self.busy = true;
    }

    /// The clock says `ns`: hands over the interval if it is over.
    pub fn tick(&mut self, ns: u64) {
        let s = Self::second(ns);
        if s > self.tally.second {
            self.roll(s);
        }
    }

    #[cold]
    fn roll(&mut self, s: u64) {
        let next = s.max(self.tally.second);
        // The rate of the interval that ended, if it was the one just before: the next one is
        // sampled by it. After a gap, every packet counts again.
        self.period = if next == self.tally.second + INTERVAL_S {
            self.tally.total.packets.div_ceil(EXACT_PER_SECOND).max(1)
        } else {
            1
        };
        let mut d = self.hub.lock().unwrap_or_else(|e| e.into_inner());
        d.submit(self.worker, self.busy.then_some(&self.tally), next);
        drop(d);
        self.tally.reset(next);
        self.tally.period = self.period;
        self.busy = false;
    }

    /// The worker is done: hands over what is left.
    pub fn finish(&mut self) {
        let mut d = self.hub.lock().unwrap_or_else(|e| e.into_inner());
        if self.busy {
            d.submit(self.worker, Some(&self.tally), self.tally.second + 1);
        }
        d.finish(self.worker);
        self.busy = false;
    }
}
