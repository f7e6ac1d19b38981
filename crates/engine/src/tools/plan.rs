//! Ring planning: the SEPCOM model (`sepcom-zero-copy.txt` §4–5) adapted to TPACKET_V3 blocks.
//!
//! SEPCOM splits one shared buffer into `n` units that a driver scans every `α`; its model bounds
//! `n` so that packets are managed faster than they come (Condition 1, eqs. 9–10) and predicts
//! the loss when a burst finds no free unit (Condition 2, eqs. 11–12). In a TPACKET_V3 ring the
//! unit is a block: the kernel fills the open block and hands it to user space when it is full
//! or when the retire timer (`tp_retire_blk_tov`, the paper's `α`) expires; user space walks the
//! block and gives it back. So here:
//!
//! - a block of `B` bytes holds `k = ⌊(B − 48 − 1) / r⌋` packets of `r` ring bytes each;
//! - the retire timer fires every `α` and closes the open block, full or not (measured on
//!   Linux 6.18, whose timer no longer restarts when a block opens): in each `α` the `p·α`
//!   packets fill `⌈p·α / k⌉` blocks, so a block carries `k_eff = p·α / ⌈p·α / k⌉` (just
//!   `p·α` when that is less than `k`);
//! - the consumer's time per packet is `t_M = β + c_blk / k_eff` (eq. 7: `β` the per-packet cost,
//!   `c_blk` the per-block cost that replaces the scan term), and it keeps up when `p·t_M < 1`
//!   (Condition 1);
//! - the ring absorbs `(n − ½)·k_eff` packets while the consumer does not run (the open block is
//!   half full on average), so a stall of `S` loses `max(0, p·S − (n − ½)·k_eff)` and a burst at
//!   `p_b > 1/t_M` for `T` loses `max(0, (p_b − 1/t_M)·T − (n − ½)·k_eff)` (Condition 2);
//! - a backlog `b` drains in `b / (1/t_M − p)` (eq. 11's recovery time).
//!
//! Everything here is arithmetic: no I/O. docs/operations.md derives it and bench/plan.py
//! compares it with drops measured on veth.

use std::time::Duration;

use serde::{Serialize, Serializer};

use tapflow_sys::ring::{BLOCK_DESC_LEN, ETHERNET_MAC_OFFSET};

/// The consumer's cost per packet in ns, measured by `bench/plan.py` for `tapflow capture`
/// writing pcapng (docs/benchmarks.md): the default of `tapflow plan --cost-ns`.
pub const MEASURED_PACKET_NS: f64 = 60.0;

/// The consumer's cost per block in ns, measured the same way: the default of
/// `--block-cost-ns`.
pub const MEASURED_BLOCK_NS: f64 = 2900.0;

/// The page size blocks are made of.
pub const PAGE: u32 = 4096;

/// The largest block tapflow asks for.
pub const MAX_BLOCK_SIZE: u32 = 1 << 30;

/// The most blocks tapflow puts in one ring.
pub const MAX_BLOCK_COUNT: u32 = 1 << 20;

/// The most workers (fanout members) tapflow runs.
pub const MAX_THREADS: usize = 64;

/// The largest block the kernel takes from the page allocator in one piece (order 10); larger
/// blocks may silently become vmalloc memory.
pub const MAX_CONTIGUOUS_BLOCK: u32 = 4 << 20;

/// Bytes one packet of `caplen` kept bytes takes in a block: its slot is 8-aligned
/// (`TOTAL_PKT_LEN_INCL_ALIGN(macoff + snaplen)` in `af_packet.c`).
pub fn ring_record_bytes(caplen: u32) -> u32 {
    (ETHERNET_MAC_OFFSET + caplen).next_multiple_of(8)
}

/// Packets of `record` ring bytes that fit in a block of `block_size` bytes: the kernel places a
/// packet only while `offset + len < end`. (In a block too small for one slot the kernel still
/// puts one packet, cut to `block_size − 48` bytes; the model counts such a block as holding
/// none, and `plan` refuses it.)
pub fn packets_per_block(block_size: u32, record: u32) -> u64 {
    u64::from(block_size.saturating_sub(BLOCK_DESC_LEN + 1) / record.max(1))
}

/// Bytes kept of a frame of `frame` bytes on the wire (FCS included, as frame sizes are quoted)
/// at snaplen `snaplen`.
pub fn kept_bytes(frame: u32, snaplen: u32) -> u32 {
    frame.saturating_sub(4).min(snaplen)
}

/// Packets per second of back-to-back `frame`-byte frames at `speed_mbps` (each frame also
/// costs 20 bytes of preamble and inter-frame gap).
pub fn line_rate_pps(speed_mbps: f64, frame: u32) -> f64 {
    speed_mbps * 1e6 / (f64::from(frame + 20) * 8.0)
}

/// The ring geometry of each fanout member.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct RingGeometry {
    /// `tp_block_size`.
    pub block_size: u32,
    /// `tp_block_nr`.
    pub block_count: u32,
    /// `tp_retire_blk_tov` in ms.
    pub retire_ms: u32,
}

impl RingGeometry {
    /// A geometry of 1 MiB blocks whose ring rides out a stall of `hold` of line-rate traffic
    /// at `speed_mbps`, whatever the frame size (64 to 1518 bytes), with the given retire
    /// timeout: the model's [`Workload::blocks_for`], at least 4 blocks.
    pub fn for_line_rate(speed_mbps: u32, snaplen: u32, hold: Duration, retire_ms: u32) -> Self {
        let block_size: u32 = 1 << 20;
        let retire = Duration::from_millis(u64::from(retire_ms.max(1)));
        let block_count = (64u32..=1518)
            .map(|frame| {
                Workload {
                    rate: line_rate_pps(f64::from(speed_mbps), frame),
                    record: ring_record_bytes(kept_bytes(frame, snaplen)),
                    retire,
                    packet_ns: MEASURED_PACKET_NS,
                    block_ns: MEASURED_BLOCK_NS,
                }
                .blocks_for(block_size, hold, None)
            })
            .max()
            .unwrap_or(4);
        RingGeometry {
            block_size,
            block_count,
            retire_ms,
        }
    }

    /// Bytes of ring memory per member.
    pub fn bytes(&self) -> u64 {
        u64::from(self.block_size) * u64::from(self.block_count)
    }

    /// The same ring memory (rounded up to whole blocks) in blocks of `block_size` bytes.
    pub fn with_block_size(self, block_size: u32) -> RingGeometry {
        RingGeometry {
            block_size,
            block_count: self.bytes().div_ceil(u64::from(block_size)).max(1) as u32,
            ..self
        }
    }
}

/// What one ring (one fanout member) must carry, and what its consumer costs.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Workload {
    /// Packets per second arriving at this ring (`p`).
    #[serde(rename = "rate_per_ring")]
    pub rate: f64,
    /// Ring bytes per packet (`r`, from [`ring_record_bytes`]).
    #[serde(rename = "slot_bytes")]
    pub record: u32,
    /// The retire timeout (`α`; in JSON as the ring's `retire_ms`).
    #[serde(skip)]
    pub retire: Duration,
    /// The consumer's cost per packet in ns (`β`).
    pub packet_ns: f64,
    /// The consumer's cost per block in ns (`c_blk`: the wakeup, the walk's start, the release).
    pub block_ns: f64,
}

/// How a ring of one geometry behaves under a [`Workload`].
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct RingBehaviour {
    /// Packets a block holds when full (`k`).
    #[serde(rename = "packets_per_block")]
    pub capacity_per_block: u64,
    /// Packets a block carries on average at this rate (`k_eff`): fewer than `k`, as the timer
    /// closes one block part full every retire timeout.
    pub fill: f64,
    /// Whether the retire timer closes every block before it is full at this rate.
    pub timer_bound: bool,
    /// The consumer's time per packet in ns (`t_M`).
    pub service_ns: f64,
    /// Fraction of the consumer's time spent on this traffic (`p·t_M`); ≥ 1 cannot keep up.
    pub busy: f64,
    /// Packets the ring absorbs while the consumer does not run (`(n − ½)·k_eff`).
    pub absorbs: f64,
    /// The longest stall of the consumer that loses nothing.
    #[serde(rename = "holds_ms", serialize_with = "ms")]
    pub holds: Duration,
    /// Mean time a packet waits in its block before user space can see it.
    #[serde(rename = "mean_delay_ms", serialize_with = "ms")]
    pub mean_delay: Duration,
}

/// What a burst or a stall costs.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Loss {
    /// Packets lost (the kernel's `tp_drops`).
    pub packets: f64,
    /// Packets queued in the ring when the burst or stall ends.
    pub backlog: f64,
    /// Time to drain that backlog once the rate is back to normal; `None` if the consumer
    /// cannot keep up with the normal rate.
    #[serde(rename = "recovery_ms", serialize_with = "opt_ms")]
    pub recovery: Option<Duration>,
}

/// Bounds on the block size and a recommended geometry.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Plan {
    /// Packets per block below which the consumer cannot keep up (Condition 1); `None` when no
    /// block size is enough because the per-packet cost alone exceeds the time between packets.
    pub min_fill: Option<f64>,
    /// The smallest power-of-two block that keeps up; `None` as for `min_fill`.
    #[serde(rename = "min_block_size")]
    pub min_block: Option<u32>,
    /// The smallest power-of-two block with room for a whole retire period's packets (larger
    /// blocks carry no more), at most [`MAX_CONTIGUOUS_BLOCK`].
    #[serde(rename = "max_block_size")]
    pub max_block: u32,
    /// The recommended geometry.
    #[serde(rename = "recommended")]
    pub geometry: RingGeometry,
}

/// A duration in JSON: milliseconds, `null` for [`Duration::MAX`] (forever).
pub fn ms<S: Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
    opt_ms(&Some(*d), s)
}

/// An optional duration in JSON: milliseconds, `null` for none and for forever.
pub fn opt_ms<S: Serializer>(d: &Option<Duration>, s: S) -> Result<S::Ok, S::Error> {
    match d {
        Some(d) if *d != Duration::MAX => s.serialize_f64(d.as_secs_f64() * 1e3),
        _ => s.serialize_none(),
    }
}

impl Workload {
    /// Packets that arrive in one retire period (`p·α`, at least 1).
    pub fn per_retire(&self) -> f64 {
        (self.rate * self.retire.as_secs_f64()).max(1.0)
    }

    /// Packets a block of `block_size` bytes carries on average (`k_eff`): the `p·α` packets of
    /// a retire period fill `⌈p·α / k⌉` blocks.
    pub fn fill(&self, block_size: u32) -> f64 {
        let k = packets_per_block(block_size, self.record).max(1) as f64;
        let by_timer = self.per_retire();
        (by_timer / (by_timer / k).ceil()).max(1.0)
    }

    /// How a ring of geometry `g` behaves under this workload.
    pub fn behaviour(&self, g: &RingGeometry) -> RingBehaviour {
        let k = packets_per_block(g.block_size, self.record);
        let by_timer = self.per_retire();
        let fill = self.fill(g.block_size);
        let service_ns = self.packet_ns + self.block_ns / fill;
        let absorbs = (f64::from(g.block_count) - 0.5).max(0.0) * fill;
        let holds = if self.rate > 0.0 {
            secs(absorbs / self.rate)
        } else {
            Duration::MAX
        };
        // Per retire period, `full` blocks of k packets and one of the rest; a packet waits on
        // average half of its block's life, and a block lives as long as it takes to fill.
        let k_f = k.max(1) as f64;
        let full = (by_timer / k_f).floor();
        let rest = by_timer - full * k_f;
        let mean_delay_s = if self.rate > 0.0 {
            (full * k_f * k_f + rest * rest) / (2.0 * self.rate * by_timer)
        } else {
            self.retire.as_secs_f64() / 2.0
        };
        RingBehaviour {
            capacity_per_block: k,
            fill,
            timer_bound: by_timer < k as f64,
            service_ns,
            busy: self.rate * service_ns * 1e-9,
            absorbs,
            holds,
            mean_delay: secs(mean_delay_s),
        }
    }

    /// Packets lost when the consumer does not run for `stall` (descheduled, a slow disk).
    pub fn stall(&self, g: &RingGeometry, stall: Duration) -> Loss {
        let b = self.behaviour(g);
        let arrived = self.rate * stall.as_secs_f64();
        self.loss(&b, arrived, b.absorbs)
    }

    /// Packets lost when `burst_rate` packets/s arrive for `length` instead of the normal rate.
    pub fn burst(&self, g: &RingGeometry, burst_rate: f64, length: Duration) -> Loss {
        let during = Workload {
            rate: burst_rate,
            ..*self
        };
        let b = during.behaviour(g);
        let served = 1e9 / b.service_ns;
        let excess = (burst_rate - served).max(0.0) * length.as_secs_f64();
        self.loss(&self.behaviour(g), excess, b.absorbs)
    }

    /// Blocks of `block_size` bytes needed to ride out a stall of `hold` (at least 4), but no
    /// more than `memory` bytes of them if given (at least 1).
    pub fn blocks_for(&self, block_size: u32, hold: Duration, memory: Option<u64>) -> u32 {
        let absorb = self.rate * hold.as_secs_f64();
        let mut n = ((absorb / self.fill(block_size)) + 0.5)
            .ceil()
            .clamp(4.0, f64::from(MAX_BLOCK_COUNT)) as u64;
        if let Some(m) = memory {
            n = n.min(m / u64::from(block_size.max(1))).max(1);
        }
        n as u32
    }

    fn loss(&self, normal: &RingBehaviour, excess: f64, room: f64) -> Loss {
        let packets = (excess - room).max(0.0);
        let backlog = excess.min(room);
        let spare = 1e9 / normal.service_ns - self.rate;
        Loss {
            packets,
            backlog,
            recovery: (spare > 0.0).then(|| secs(backlog / spare)),
        }
    }

    /// Bounds on the block size, and the geometry to use: the smallest power-of-two block whose
    /// per-block cost is at most 5% of the per-packet cost (or, if the timer closes blocks
    /// before that, the block that takes a whole retire period), with enough blocks to ride
    /// out a stall of `hold`. With `memory`, blocks are at most a quarter of it and the ring
    /// no larger; `None` if not even one block fits.
    pub fn plan(&self, hold: Duration, memory: Option<u64>) -> Option<Plan> {
        let retire_ms = self.retire.as_millis().clamp(1, u128::from(u32::MAX)) as u32;
        // Power-of-two blocks from a page up that hold at least one slot.
        let blocks = || {
            (PAGE.trailing_zeros()..=MAX_BLOCK_SIZE.trailing_zeros())
                .map(|s| 1u32 << s)
                .filter(|&b| packets_per_block(b, self.record) > 0)
        };
        let smallest = blocks().next().unwrap_or(MAX_BLOCK_SIZE);
        // Condition 1: p·(β + c_blk/k) < 1.
        let gap_ns = 1e9 / self.rate.max(f64::MIN_POSITIVE);
        let min_fill = (gap_ns > self.packet_ns).then(|| self.block_ns / (gap_ns - self.packet_ns));
        let min_block = min_fill.and_then(|m| blocks().find(|&b| self.fill(b) > m));
        // The timer: a block with room for a whole retire period's packets carries them all;
        // a bigger one carries no more.
        let max_block = blocks()
            .find(|&b| packets_per_block(b, self.record) as f64 >= self.per_retire())
            .unwrap_or(MAX_BLOCK_SIZE)
            .min(MAX_CONTIGUOUS_BLOCK)
            .max(smallest);
        let cheap_fill = if self.packet_ns > 0.0 {
            self.block_ns / (0.05 * self.packet_ns)
        } else {
            f64::INFINITY
        };
        let cheap = blocks()
            .take_while(|&b| b <= max_block)
            .find(|&b| self.fill(b) >= cheap_fill)
            .unwrap_or(max_block);
        // Keeping up comes first, then the memory cap (a quarter of it: at least 4 blocks).
        let mut block_size = cheap.max(min_block.unwrap_or(smallest));
        if let Some(m) = memory {
            let quarter = u32::try_from(m / 4).unwrap_or(u32::MAX);
            block_size = blocks()
                .take_while(|&b| b <= block_size && b <= quarter)
                .last()
                .or_else(|| blocks().next().filter(|&b| u64::from(b) <= m))?;
        }
        let block_count = self.blocks_for(block_size, hold, memory);
        Some(Plan {
            min_fill,
            min_block,
            max_block,
            geometry: RingGeometry {
                block_size,
                block_count,
                retire_ms,
            },
        })
    }
}

fn secs(s: f64) -> Duration {
    Duration::try_from_secs_f64(s).unwrap_or(Duration::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: Duration = Duration::from_millis(1);

    #[test]
    fn a_new_block_size_keeps_the_ring_memory() {
        let g = RingGeometry {
            block_size: 1 << 20,
            block_count: 10,
            retire_ms: 10,
        };
        let h = g.with_block_size(3 << 20);
        assert_eq!((h.block_size, h.block_count, h.retire_ms), (3 << 20, 4, 10));
        assert_eq!(g.with_block_size(64 << 20).block_count, 1);
    }

    #[test]
    fn durations_are_ms_in_json_and_forever_is_null() {
        let l = Loss {
            packets: 10.0,
            backlog: 0.0,
            recovery: Some(Duration::from_micros(1500)),
        };
        assert_eq!(
            serde_json::to_string(&l).unwrap(),
            "{\"packets\":10.0,\"backlog\":0.0,\"recovery_ms\":1.5}"
        );
        let v = opt_ms(&Some(Duration::MAX), serde_json::value::Serializer).unwrap();
        assert!(v.is_null());
    }

    fn work(rate: f64) -> Workload {
        Workload {
            rate,
            record: ring_record_bytes(60),
            retire: 10 * MS,
            packet_ns: 100.0,
            block_ns: 5000.0,
        }
    }

    fn near(a: Duration, b: Duration) -> bool {
        a.abs_diff(b) < Duration::from_micros(1)
    }

    fn ring(block_size: u32, block_count: u32) -> RingGeometry {
        RingGeometry {
            block_size,
            block_count,
            retire_ms: 10,
        }
    }

    /// The SEPCOM equations with the paper's own numbers (§5): 172 < n < 5828 from eq. 9,
    /// n > p·α = 200 from eq. 10, the optimum n = √(α/C_scan) = 1000 with t_M ≈ 3 µs, and a
    /// loss of about 0.3·m packets after a burst (eq. 12). This is the model our adaptation
    /// starts from; the numbers pin the reading of the equations.
    #[test]
    fn sepcom_equations_give_the_papers_numbers() {
        let (c_scan, p, alpha, beta, rho) = (1e-9, 2e5, 1e-3, 2e-6, 1.0);
        let c = rho * beta;
        let c1 = 2.0 / rho * (1.0 / p - c) - c_scan;
        let delta: f64 = c1 * c1 - 4.0 * c_scan * alpha;
        let lo = (c1 - delta.sqrt()) / (2.0 * c_scan);
        let hi = (c1 + delta.sqrt()) / (2.0 * c_scan);
        // The paper rounds both roots up: 171.6 and 5827.4.
        assert_eq!((lo.ceil(), hi.ceil()), (172.0, 5828.0));
        assert_eq!((p * alpha).round(), 200.0);
        let n = (alpha / c_scan).sqrt();
        assert_eq!(n.round(), 1000.0);
        let t_m = rho * alpha / (2.0 * n) + rho * c_scan * (n + 1.0) / 2.0 + c;
        assert!((t_m - 3e-6).abs() < 1e-7, "{t_m}");
        let n_s_per_m = 0.5 * p * t_m;
        assert!((n_s_per_m - 0.3).abs() < 0.01, "{n_s_per_m}");
    }

    /// Ring slots as `tpacket_rcv` lays them out: 152 bytes at snaplen 64, 216 at 128, and a
    /// 1 MiB block holds 6898 header-only packets.
    #[test]
    fn records_and_blocks_follow_the_kernel_layout() {
        assert_eq!(ring_record_bytes(64), 152);
        assert_eq!(ring_record_bytes(128), 216);
        assert_eq!(ring_record_bytes(1514), 1600);
        assert_eq!(packets_per_block(1 << 20, 152), 6898);
        // 48 + 26·152 = 4000 < 4096 but 48 + 27·152 = 4152: 26 fit; exactly full does not.
        assert_eq!(packets_per_block(4096, 152), 26);
        assert_eq!(packets_per_block(48 + 2 * 152, 152), 1);
        assert_eq!(packets_per_block(16, 152), 0);
        assert_eq!(kept_bytes(64, 128), 60);
        assert_eq!(kept_bytes(1518, 128), 128);
        assert!((line_rate_pps(1000.0, 64) - 1_488_095.2).abs() < 1.0);
    }

    /// At a low rate the timer closes blocks long before they fill, so the ring holds n·α of
    /// traffic whatever the block size; at a high rate full blocks set the capacity.
    #[test]
    fn the_retire_timer_limits_what_a_block_carries() {
        let slow = work(10_000.0).behaviour(&ring(1 << 20, 8));
        assert!(slow.timer_bound);
        assert_eq!(slow.fill, 100.0);
        assert_eq!(slow.absorbs, 750.0);
        assert!(near(slow.holds, 75 * MS), "{slow:?}");
        assert!(near(slow.mean_delay, 5 * MS), "{slow:?}");
        let fast = work(2e6).behaviour(&ring(1 << 20, 8));
        assert!(!fast.timer_bound);
        // 20000 packets per 10 ms fill 3 blocks of 7281: two full, one closed by the timer.
        assert!((fast.fill - 20_000.0 / 3.0).abs() < 1e-9);
        assert!((fast.service_ns - (100.0 + 5000.0 / fast.fill)).abs() < 1e-9);
        assert!((fast.busy - 2e6 * fast.service_ns * 1e-9).abs() < 1e-12);
        assert!(fast.mean_delay < 2 * MS);
    }

    /// Condition 2 for a stall: what the ring cannot absorb is lost, the rest drains at the
    /// consumer's spare rate.
    #[test]
    fn a_stall_loses_what_the_ring_cannot_absorb() {
        let w = work(1e6);
        let g = ring(64 << 10, 8);
        let b = w.behaviour(&g);
        // 10000 packets per 10 ms in blocks of 454: 23 blocks per period.
        let fill = 10_000.0 / 23.0;
        assert!((b.fill - fill).abs() < 1e-9);
        assert!((b.absorbs - 7.5 * fill).abs() < 1e-9);
        let short = w.stall(&g, MS);
        assert_eq!(short.packets, 0.0);
        assert_eq!(short.backlog, 1000.0);
        let long = w.stall(&g, 10 * MS);
        assert!((long.packets - (10_000.0 - 7.5 * fill)).abs() < 1e-6);
        assert!((long.backlog - 7.5 * fill).abs() < 1e-6);
        let spare = 1e9 / b.service_ns - 1e6;
        let want = Duration::from_secs_f64(7.5 * fill / spare);
        assert!(near(long.recovery.unwrap(), want));
    }

    /// A burst below the service rate loses nothing; above it, the excess beyond the ring.
    #[test]
    fn a_burst_loses_the_excess_over_the_service_rate() {
        let w = work(1e6);
        let g = ring(1 << 20, 4);
        assert_eq!(w.burst(&g, 5e6, 100 * MS).packets, 0.0);
        let b = Workload { rate: 2e7, ..w }.behaviour(&g);
        let served = 1e9 / b.service_ns;
        let excess = (2e7 - served) * 0.1;
        let loss = w.burst(&g, 2e7, 100 * MS);
        // 200000 packets per 10 ms in blocks of 7281: 28 blocks per period.
        assert!((loss.packets - (excess - 3.5 * 200_000.0 / 28.0)).abs() < 1e-3);
    }

    /// Condition 1 bounds the block from below, the timer from above; the recommendation sits
    /// between and holds the stall asked for.
    #[test]
    fn the_plan_keeps_up_and_holds_the_stall() {
        let w = work(1e6);
        let p = w.plan(50 * MS, None).unwrap();
        // 1 µs between packets, 100 ns each: blocks must carry > 5000/900 packets.
        assert!((p.min_fill.unwrap() - 5000.0 / 900.0).abs() < 1e-9);
        assert_eq!(p.min_block, Some(PAGE));
        // 10 ms at 1 Mpps = 10000 packets; a 2 MiB block holds 14563, 1 MiB 7281: 2 MiB takes
        // a whole retire period, larger blocks carry no more.
        assert_eq!(p.max_block, 2 << 20);
        // 5% of 100 ns → blocks of ≥ 1000 packets: 128 KiB holds 909, 256 KiB 1819 (and
        // carries 10000/6 = 1667 a block with the timer's partial block).
        // 50 ms at 1 Mpps: (n − ½)·1667 ≥ 50000 → n = 31.
        assert_eq!(p.geometry.block_count, 31);
        assert_eq!(p.geometry.block_size, 256 << 10);
        let b = w.behaviour(&p.geometry);
        assert!(b.holds >= 50 * MS, "{b:?}");
        assert!(w.stall(&p.geometry, 50 * MS).packets == 0.0);
        assert!(b.busy < 1.0);
        // A memory cap shortens the ring, and shrinks the blocks to a quarter of it.
        let capped = w.plan(50 * MS, Some(1 << 20)).unwrap();
        assert_eq!(capped.geometry.block_size, 256 << 10);
        assert_eq!(capped.geometry.block_count, 4);
        let tiny = w.plan(50 * MS, Some(64 << 10)).unwrap();
        assert_eq!(tiny.geometry.bytes(), 64 << 10);
        assert!(w.plan(50 * MS, Some(1000)).is_none());
        // A consumer slower than the packets: no block is enough.
        let hopeless = Workload {
            packet_ns: 2000.0,
            ..w
        }
        .plan(50 * MS, None)
        .unwrap();
        assert_eq!((hopeless.min_fill, hopeless.min_block), (None, None));
        // A slow link: the timer bounds the block to a page.
        let slow = work(1000.0).plan(50 * MS, None).unwrap();
        assert_eq!(slow.max_block, PAGE);
        assert_eq!(slow.geometry.block_size, PAGE);
        assert!(work(1000.0).behaviour(&slow.geometry).holds >= 50 * MS);
        // Jumbo frames kept whole: a slot of 9096 bytes needs a 16 KiB block at least (4 KiB
        // and 8 KiB hold none); 64 KiB holds 7 of the 10 packets of one timeout, 128 KiB all.
        let jumbo = Workload {
            record: ring_record_bytes(9014),
            ..work(1000.0)
        }
        .plan(50 * MS, None)
        .unwrap();
        assert_eq!(ring_record_bytes(9014), 9096);
        assert_eq!(jumbo.min_block, Some(16 << 10));
        assert_eq!(
            (jumbo.max_block, jumbo.geometry.block_size),
            (128 << 10, 128 << 10)
        );
    }

    #[test]
    fn default_ring_holds_50ms_at_line_rate() {
        let hold = Duration::from_millis(50);
        for speed in [1_000, 10_000, 25_000] {
            let g = RingGeometry::for_line_rate(speed, 128, hold, 10);
            assert_eq!(g.block_size, 1 << 20);
            for frame in [64, 65, 128, 300, 1518] {
                let w = Workload {
                    rate: line_rate_pps(f64::from(speed), frame),
                    record: ring_record_bytes(kept_bytes(frame, 128)),
                    ..work(0.0)
                };
                let b = w.behaviour(&g);
                assert!(b.holds >= hold, "{speed} Mbit/s, {frame} B: {b:?}");
            }
        }
        // At 1 GbE the timer closes blocks part full (14881 packets per 10 ms in 3 blocks of
        // 7281): 16 blocks, not the 11 that full blocks would need.
        let g = RingGeometry::for_line_rate(1_000, 128, hold, 10);
        assert_eq!(g.block_count, 16);
    }

    /// The mean wait of a packet for its block, weighted by packet: at 100k pps, 1000 packets
    /// per 10 ms fill a 128 KiB block (909) and 91 in the next, closed by the timer.
    #[test]
    fn the_mean_delay_weights_each_packet() {
        let b = work(100_000.0).behaviour(&ring(128 << 10, 8));
        let want = (909.0 * 909.0 + 91.0 * 91.0) / (2.0 * 1e5 * 1000.0);
        assert!(near(b.mean_delay, Duration::from_secs_f64(want)), "{b:?}");
        // Timer-bound: half the retire timeout.
        assert!(near(
            work(1000.0).behaviour(&ring(1 << 20, 8)).mean_delay,
            5 * MS
        ));
    }
}
