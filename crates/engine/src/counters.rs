//! Per-worker counters: written by one worker, read by anyone (the status line, the summary).
//!
//! The worker keeps plain integers on the packet path and publishes them once per ring block
//! with relaxed stores, so readers see a recent, internally consistent-enough view without any
//! lock or per-packet atomic.

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

use serde::{Deserialize, Serialize};

/// Totals of one worker. `received = recorded + filtered + dropped_kernel + dropped_ours +
/// past_limit` holds once the worker has drained.
///
/// Serialized with the field names as keys: the same keys in `--summary-json`, `tapflow stats
/// --json` and (as `tapflow_KEY_total`) on `/metrics`.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Totals {
    /// Packets the kernel handed to the socket, drops included (Σ `tp_packets`), or packets read
    /// from a file.
    pub received: u64,
    /// Records written to the output (or counted, without output).
    pub recorded: u64,
    /// Packets refused in user space: by the rules (behind a kernel prefilter, or in a file),
    /// or by a `-f` expression run on a file's packets.
    pub filtered: u64,
    /// Packets the kernel dropped because the ring was full (Σ `tp_drops`).
    pub dropped_kernel: u64,
    /// Records tapflow dropped because the writer's queue was full.
    pub dropped_ours: u64,
    /// Packets received after `-c COUNT` was reached.
    pub past_limit: u64,
    /// Times the kernel froze the ring (Σ `tp_freeze_q_cnt`).
    pub freezes: u64,
    /// Ring blocks handed to user space (the packets per block they carried: `tapflow plan`).
    pub blocks: u64,
    /// Original bytes of the received packets (for bit rates).
    pub bytes: u64,
}

impl Totals {
    /// Adds another worker's totals.
    pub fn add(&mut self, o: &Totals) {
        self.received += o.received;
        self.recorded += o.recorded;
        self.filtered += o.filtered;
        self.dropped_kernel += o.dropped_kernel;
        self.dropped_ours += o.dropped_ours;
        self.past_limit += o.past_limit;
        self.freezes += o.freezes;
        self.blocks += o.blocks;
        self.bytes += o.bytes;
    }

    /// Packets not yet accounted for (0 after a drained stop).
    pub fn unaccounted(&self) -> i128 {
        self.received as i128
            - (self.recorded
                + self.filtered
                + self.dropped_kernel
                + self.dropped_ours
                + self.past_limit) as i128
    }

    /// Fraction of the packets the filters passed that were recorded, in percent.
    pub fn collected_percent(&self) -> f64 {
        let wanted = self.received.saturating_sub(self.filtered);
        if wanted == 0 {
            100.0
        } else {
            (self.recorded + self.past_limit) as f64 * 100.0 / wanted as f64
        }
    }
}

/// A worker's published counters.
#[derive(Debug, Default)]
pub struct SharedTotals {
    received: AtomicU64,
    recorded: AtomicU64,
    filtered: AtomicU64,
    dropped_kernel: AtomicU64,
    dropped_ours: AtomicU64,
    past_limit: AtomicU64,
    freezes: AtomicU64,
    blocks: AtomicU64,
    bytes: AtomicU64,
}

impl SharedTotals {
    /// Publishes a snapshot (single writer).
    pub fn publish(&self, t: &Totals) {
        self.received.store(t.received, Relaxed);
        self.recorded.store(t.recorded, Relaxed);
        self.filtered.store(t.filtered, Relaxed);
        self.dropped_kernel.store(t.dropped_kernel, Relaxed);
        self.dropped_ours.store(t.dropped_ours, Relaxed);
        self.past_limit.store(t.past_limit, Relaxed);
        self.freezes.store(t.freezes, Relaxed);
        self.blocks.store(t.blocks, Relaxed);
        self.bytes.store(t.bytes, Relaxed);
    }

    /// Reads the last published snapshot.
    pub fn load(&self) -> Totals {
        Totals {
            received: self.received.load(Relaxed),
            recorded: self.recorded.load(Relaxed),
            filtered: self.filtered.load(Relaxed),
            dropped_kernel: self.dropped_kernel.load(Relaxed),
            dropped_ours: self.dropped_ours.load(Relaxed),
            past_limit: self.past_limit.load(Relaxed),
            freezes: self.freezes.load(Relaxed),
            blocks: self.blocks.load(Relaxed),
            bytes: self.bytes.load(Relaxed),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn publish_then_load_round_trips_and_sums() {
        let s = SharedTotals::default();
        let t = Totals {
            received: 10,
            recorded: 6,
            filtered: 0,
            dropped_kernel: 3,
            dropped_ours: 1,
            past_limit: 0,
            freezes: 2,
            blocks: 4,
            bytes: 600,
        };
        s.publish(&t);
        assert_eq!(s.load(), t);
        assert_eq!(t.unaccounted(), 0);
        let mut sum = t;
        sum.add(&t);
        assert_eq!(sum.received, 20);
        assert_eq!(sum.unaccounted(), 0);
        assert!((t.collected_percent() - 60.0).abs() < 1e-9);
    }
}
