//! Per-worker counters: written by one worker, read by anyone (the status line, the summary).
//!
//! The worker keeps plain integers on the packet path and publishes them once per ring block
//! with relaxed stores, so readers see a recent, internally consistent-enough view without any
//! lock or per-packet atomic.

use std::sync::atomic::{AtomicU64, Ordering, Ordering::Relaxed, fence};

use serde::{Deserialize, Serialize};

/// Totals of one worker. `received = recorded + filtered + dropped_kernel + dropped_in_transit +
/// dropped_ours + past_limit` holds once the worker has drained.
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
    /// Records a probe sent that never reached this receiver (missing datagrams).
    pub dropped_in_transit: u64,
    /// Records tapflow could not keep: a sink that failed (a full disk, a refused send) and
    /// the packets after it.
    pub dropped_ours: u64,
    /// Packets received after `-c COUNT` was reached.
    pub past_limit: u64,
    /// Times the kernel froze the ring (Σ `tp_freeze_q_cnt`).
    pub freezes: u64,
    /// Ring blocks handed to user space (the packets per block they carried: `tapflow plan`).
    pub blocks: u64,
    /// Original bytes of the received packets (for bit rates).
    pub bytes: u64,
    /// Times the link went down (set down, or lost its carrier): gaps in the capture. Every
    /// worker on an interface sees the same gaps.
    pub link_gaps: u64,
    /// Time the link was down, in ns, a gap going on included. In seconds (a float) under the
    /// key `link_down_seconds`: the unit Prometheus wants.
    #[serde(rename = "link_down_seconds", with = "ns_as_seconds")]
    pub link_down_ns: u64,
    /// How full the ring was when the last block was taken, in parts per million: the part of
    /// it the kernel had filled and tapflow not yet given back (a gauge, 0 for an input
    /// without a ring). As a ratio (a float, 0 to 1) under the key `ring_fill_ratio`.
    #[serde(rename = "ring_fill_ratio", with = "ppm_as_ratio", default)]
    pub ring_fill_ppm: u64,
    /// The highest ring fill since the start, likewise; key `ring_fill_peak_ratio`.
    #[serde(rename = "ring_fill_peak_ratio", with = "ppm_as_ratio", default)]
    pub ring_fill_peak_ppm: u64,
}

/// Parts per million written as a ratio, a float, and read back.
mod ppm_as_ratio {
    use serde::{Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(ppm: &u64, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_f64(*ppm as f64 / 1e6)
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<u64, D::Error> {
        let ratio = f64::deserialize(d)?;
        Ok((ratio * 1e6).round() as u64)
    }
}

/// A count of ns written as seconds, a float, and read back.
mod ns_as_seconds {
    use serde::{Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(ns: &u64, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_f64(*ns as f64 / 1e9)
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<u64, D::Error> {
        let secs = f64::deserialize(d)?;
        Ok((secs * 1e9).round() as u64)
    }
}

impl Totals {
    /// Adds another worker's totals. The link's gaps are the interface's, seen by every
    /// worker on it: the larger count stands, not the sum; so does the fuller ring.
    pub fn add(&mut self, o: &Totals) {
        self.received = self.received.saturating_add(o.received);
        self.recorded = self.recorded.saturating_add(o.recorded);
        self.filtered = self.filtered.saturating_add(o.filtered);
        self.dropped_kernel = self.dropped_kernel.saturating_add(o.dropped_kernel);
        self.dropped_in_transit = self.dropped_in_transit.saturating_add(o.dropped_in_transit);
        self.dropped_ours = self.dropped_ours.saturating_add(o.dropped_ours);
        self.past_limit = self.past_limit.saturating_add(o.past_limit);
        self.freezes = self.freezes.saturating_add(o.freezes);
        self.blocks = self.blocks.saturating_add(o.blocks);
        self.bytes = self.bytes.saturating_add(o.bytes);
        self.link_gaps = self.link_gaps.max(o.link_gaps);
        self.link_down_ns = self.link_down_ns.max(o.link_down_ns);
        self.ring_fill_ppm = self.ring_fill_ppm.max(o.ring_fill_ppm);
        self.ring_fill_peak_ppm = self.ring_fill_peak_ppm.max(o.ring_fill_peak_ppm);
    }

    /// Lifts `received` to at least what is accounted for. The kernel's count is read twice a
    /// second while records are counted as they go, so between two readings the records can
    /// run ahead of it; the totals a sink or a reader sees never do.
    #[inline]
    pub fn settle(&mut self) {
        let accounted = self
            .recorded
            .saturating_add(self.filtered)
            .saturating_add(self.dropped_kernel)
            .saturating_add(self.dropped_in_transit)
            .saturating_add(self.dropped_ours)
            .saturating_add(self.past_limit);
        self.received = self.received.max(accounted);
    }

    /// Packets not yet accounted for (0 after a drained stop).
    pub fn unaccounted(&self) -> i128 {
        self.received as i128
            - (self.recorded
                + self.filtered
                + self.dropped_kernel
                + self.dropped_in_transit
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

/// A worker's published counters, read as one consistent snapshot: a sequence number, odd
/// while the single writer is publishing, tells a reader to read again (a seqlock).
#[derive(Debug, Default)]
pub struct SharedTotals {
    sequence: AtomicU64,
    received: AtomicU64,
    recorded: AtomicU64,
    filtered: AtomicU64,
    dropped_kernel: AtomicU64,
    dropped_in_transit: AtomicU64,
    dropped_ours: AtomicU64,
    past_limit: AtomicU64,
    freezes: AtomicU64,
    blocks: AtomicU64,
    bytes: AtomicU64,
    link_gaps: AtomicU64,
    link_down_ns: AtomicU64,
    ring_fill_ppm: AtomicU64,
    ring_fill_peak_ppm: AtomicU64,
}

impl SharedTotals {
    /// Publishes a snapshot (single writer).
    pub fn publish(&self, t: &Totals) {
        let seq = self.sequence.load(Relaxed);
        self.sequence.store(seq.wrapping_add(1), Relaxed);
        fence(Ordering::Release);
        self.received.store(t.received, Relaxed);
        self.recorded.store(t.recorded, Relaxed);
        self.filtered.store(t.filtered, Relaxed);
        self.dropped_kernel.store(t.dropped_kernel, Relaxed);
        self.dropped_in_transit.store(t.dropped_in_transit, Relaxed);
        self.dropped_ours.store(t.dropped_ours, Relaxed);
        self.past_limit.store(t.past_limit, Relaxed);
        self.freezes.store(t.freezes, Relaxed);
        self.blocks.store(t.blocks, Relaxed);
        self.bytes.store(t.bytes, Relaxed);
        self.link_gaps.store(t.link_gaps, Relaxed);
        self.link_down_ns.store(t.link_down_ns, Relaxed);
        self.ring_fill_ppm.store(t.ring_fill_ppm, Relaxed);
        self.ring_fill_peak_ppm.store(t.ring_fill_peak_ppm, Relaxed);
        self.sequence.store(seq.wrapping_add(2), Ordering::Release);
    }

    /// Reads the last published snapshot, whole.
    pub fn load(&self) -> Totals {
        loop {
            let before = self.sequence.load(Ordering::Acquire);
            let t = self.load_fields();
            fence(Ordering::Acquire);
            if before.is_multiple_of(2) && self.sequence.load(Relaxed) == before {
                return t;
            }
            std::hint::spin_loop();
        }
    }

    fn load_fields(&self) -> Totals {
        Totals {
            received: self.received.load(Relaxed),
            recorded: self.recorded.load(Relaxed),
            filtered: self.filtered.load(Relaxed),
            dropped_kernel: self.dropped_kernel.load(Relaxed),
            dropped_in_transit: self.dropped_in_transit.load(Relaxed),
            dropped_ours: self.dropped_ours.load(Relaxed),
            past_limit: self.past_limit.load(Relaxed),
            freezes: self.freezes.load(Relaxed),
            blocks: self.blocks.load(Relaxed),
            bytes: self.bytes.load(Relaxed),
            link_gaps: self.link_gaps.load(Relaxed),
            link_down_ns: self.link_down_ns.load(Relaxed),
            ring_fill_ppm: self.ring_fill_ppm.load(Relaxed),
            ring_fill_peak_ppm: self.ring_fill_peak_ppm.load(Relaxed),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn publish_then_load_round_trips_and_sums() {
        let s = SharedTotals::default();
        let t = Totals {
            received: 10,
            recorded: 6,
            filtered: 0,
            dropped_kernel: 2,
            dropped_in_transit: 1,
            dropped_ours: 1,
            past_limit: 0,
            freezes: 2,
            blocks: 4,
            bytes: 600,
            link_gaps: 1,
            link_down_ns: 2_000_000_000,
            ring_fill_ppm: 250_000,
            ring_fill_peak_ppm: 500_000,
        };
        s.publish(&t);
        assert_eq!(s.load(), t);
        assert_eq!(t.unaccounted(), 0);
        let mut sum = t;
        sum.add(&t);
        assert_eq!(sum.received, 20);
        // Both workers saw the one gap of their interface.
        assert_eq!((sum.link_gaps, sum.link_down_ns), (1, 2_000_000_000));
        // The fuller ring stands, not the sum.
        assert_eq!(
            (sum.ring_fill_ppm, sum.ring_fill_peak_ppm),
            (250_000, 500_000)
        );
        // The time down is in seconds in JSON, and reads back to the ns; the fill is a ratio.
        let json = serde_json::to_value(t).unwrap();
        assert_eq!(json["link_down_seconds"], 2.0);
        assert_eq!(
            (&json["ring_fill_ratio"], &json["ring_fill_peak_ratio"]),
            (&json!(0.25), &json!(0.5))
        );
        let t2 = Totals {
            link_down_ns: 2_039_842_713,
            ..t
        };
        let back: Totals = serde_json::from_str(&serde_json::to_string(&t2).unwrap()).unwrap();
        assert_eq!(back, t2);
        assert_eq!(sum.unaccounted(), 0);
        assert!((t.collected_percent() - 60.0).abs() < 1e-9);
    }

    #[test]
    fn a_reader_never_sees_half_a_snapshot() {
        let s = std::sync::Arc::new(SharedTotals::default());
        let w = {
            let s = std::sync::Arc::clone(&s);
            std::thread::spawn(move || {
                for i in 0..200_000u64 {
                    s.publish(&Totals {
                        received: i,
                        recorded: i,
                        ..Totals::default()
                    });
                }
            })
        };
        let mut reads = 0u64;
        while !w.is_finished() || reads == 0 {
            let t = s.load();
            assert_eq!(t.received, t.recorded, "a torn snapshot");
            reads += 1;
        }
        w.join().unwrap();
        assert_eq!(s.load().recorded, 199_999);
    }

    #[test]
    fn settled_totals_never_show_more_records_than_packets() {
        let mut t = Totals {
            received: 100,
            recorded: 130,
            filtered: 5,
            ..Totals::default()
        };
        t.settle();
        assert_eq!((t.received, t.unaccounted()), (135, 0));
        // A newer kernel reading above what is accounted for stands.
        t.received = 200;
        t.settle();
        assert_eq!(t.received, 200);
    }
}
