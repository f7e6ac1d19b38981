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
pub const EXACT_PER_SECOND: u64 = 100_000;

/// Packets counted between two looks at the rate within an interval.
const ADAPT_EVERY: u64 = 4096;

/// A worker's detection meter.
#[derive(Debug)]
pub struct Meter {
    hub: Hub,
    worker: usize,
    thresholds: Arc<Thresholds>,
    tally: Tally,
    /// Whether the tally holds anything.
    busy: bool,
    /// One packet in this many is counted (1: every one), from the last interval's rate
    /// and, every [`ADAPT_EVERY`] packets counted, the rate so far in this one.
    period: u64,
    /// Observations counted in this interval.
    counted: u64,
    /// Whether its observations are packets its caller samples by [`Meter::period`] (flow
    /// records are few, and every one counts).
    sampled: bool,
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
            counted: 0,
            sampled: false,
        }
    }

    /// A meter of packets its caller samples by [`Meter::period`].
    pub fn sampling(mut self) -> Meter {
        self.sampled = true;
        self
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
        self.counted += 1;
        if self.sampled && self.counted.is_multiple_of(ADAPT_EVERY) {
            self.adapt(ns);
        }
    }

    /// The sampling period for the rest of the interval, from its rate so far: a flood is
    /// sampled within milliseconds of its start, not from its second second on.
    #[cold]
    fn adapt(&mut self, ns: u64) {
        let start = self.tally.second * NS;
        let elapsed = ns.saturating_sub(start).max(NS / 1000);
        let rate = u128::from(self.tally.total.packets) * u128::from(NS) / u128::from(elapsed);
        self.period = (rate.div_ceil(u128::from(EXACT_PER_SECOND)) as u64).max(1);
        self.tally.period = self.tally.period.max(self.period);
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
        self.period = if self.sampled && next == self.tally.second + INTERVAL_S {
            self.tally.total.packets.div_ceil(EXACT_PER_SECOND).max(1)
        } else {
            1
        };
        let mut d = self.hub.lock().unwrap_or_else(|e| e.into_inner());
        d.submit(self.worker, self.busy.then_some(&self.tally), next);
        drop(d);
        self.tally.reset(next);
        self.tally.period = self.period;
        self.counted = 0;
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
