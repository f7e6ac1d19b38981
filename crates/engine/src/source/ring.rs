//! A live interface as a packet source: one AF_PACKET TPACKET_V3 ring (one fanout member).

use std::sync::Arc;
use std::time::Duration;

use tapflow_sys::bpf;
use tapflow_sys::iface::LinkCounters;
use tapflow_sys::ring::{self, Fanout, FanoutMode, RxRing, RxRingConfig};
use tapflow_wire::record::{Direction, TsSource};
use tapflow_wire::rules::Rule;
use tapflow_wire::{Flags, LinkType};

use crate::EngineError;
use crate::rules::{self, LiveRules};
use crate::source::{InterfaceInfo, Opened, Packet, PacketSource, Progress, SourceStats};
use crate::stop::Stop;
use crate::tools::plan::RingGeometry;

/// A live interface to capture on.
#[derive(Debug, Clone)]
pub struct RingInput {
    /// Interface name.
    pub ifname: String,
    /// Number of workers in the fanout group.
    pub threads: usize,
    /// Ring geometry per worker.
    pub ring: RingGeometry,
    /// `PACKET_FANOUT` group id.
    pub fanout_group: u16,
    /// Put the interface in promiscuous mode while capturing.
    pub promiscuous: bool,
}

/// Opens one ring per worker on the interface, in one fanout group, each behind one kernel
/// program: the tcpdump expression `filter` first, then the rules (which the control socket
/// can change later). A stop raised later wakes a worker waiting on its ring.
pub fn open(
    input: &RingInput,
    snaplen: u32,
    filter: Option<&str>,
    rules: Option<Vec<Rule>>,
    stop: &Arc<Stop>,
) -> Result<Opened<LiveSource>, EngineError> {
    let base = match filter {
        Some(expr) => {
            let prog = rules::compile_expr(expr, LinkType::Ethernet, snaplen, stop)?;
            bpf::check_kernel_len(expr, &rules::to_sys(&prog))?;
            Some(prog)
        }
        None => None,
    };
    let rules = LiveRules::new(rules, input.threads, snaplen, base)?;
    let rings = open_rings(input, &rules.kernel_program())?;
    rules.attach(
        rings
            .iter()
            .map(RxRing::filter_handle)
            .collect::<Result<_, _>>()?,
    );
    let hw_timestamps = rings.iter().all(RxRing::hw_timestamps);
    let sources = rings
        .into_iter()
        .map(|r| {
            LiveSource::new(r, &input.ifname, snaplen, filter.map(str::to_string))
                .with_stop(Arc::clone(stop))
        })
        .collect();
    Ok(Opened {
        sources,
        input: input.ifname.clone(),
        linktype: LinkType::Ethernet,
        ring: Some(input.ring),
        hw_timestamps,
        rules: Some(rules),
        filter_in_user_space: false,
        realtime: true,
        drain_quiet: Duration::from_millis(u64::from(input.ring.retire_ms) * 3 + 20),
        progress: None,
        metrics: None,
    })
}

fn open_rings(input: &RingInput, program: &[bpf::Instruction]) -> Result<Vec<RxRing>, EngineError> {
    let fanout = (input.threads > 1).then_some(Fanout {
        group_id: input.fanout_group,
        mode: FanoutMode::Hash,
        defrag: true,
    });
    (0..input.threads)
        .map(|_| {
            let rc = RxRingConfig {
                block_size: input.ring.block_size,
                block_count: input.ring.block_count,
                retire_tov_ms: input.ring.retire_ms,
                filter: program.to_vec(),
                fanout,
                hw_timestamps: true,
                fill_rxhash: false,
                promiscuous: input.promiscuous,
            };
            RxRing::open(&input.ifname, &rc).map_err(EngineError::from)
        })
        .collect()
}

/// A ring and the counters read from it.
#[derive(Debug)]
pub struct LiveSource {
    ring: RxRing,
    link: LinkCounters,
    interfaces: [InterfaceInfo; 1],
    stats: SourceStats,
    /// Kernel drops read from `PACKET_STATISTICS` but not yet placed before a packet.
    unplaced_drops: u64,
    /// Ends a wait for packets early once raised, until the intake is stopped (the drain then
    /// waits on the ring alone).
    stop: Option<Arc<Stop>>,
    /// The interface's own counters when the ring opened: its statistics count from there.
    link_base: (Option<u64>, Option<u64>),
}

impl LiveSource {
    /// A source over an open ring on `ifname`.
    pub fn new(ring: RxRing, ifname: &str, snaplen: u32, filter: Option<String>) -> LiveSource {
        let max_frame = tapflow_sys::iface::mtu(ifname).ok().map(|m| m + 18);
        let link = LinkCounters::open(ifname);
        LiveSource {
            ring,
            link_base: link.read(),
            link,
            interfaces: [InterfaceInfo {
                linktype: LinkType::Ethernet,
                snaplen,
                name: Some(ifname.to_string()),
                filter,
                max_frame,
            }],
            stats: SourceStats::default(),
            unplaced_drops: 0,
            stop: None,
        }
    }

    /// Makes a wait for packets end as soon as `stop` is raised.
    pub fn with_stop(mut self, stop: Arc<Stop>) -> LiveSource {
        self.stop = Some(stop);
        self
    }

    /// Reads and accumulates the kernel's clear-on-read counters.
    fn poll_kernel(&mut self) -> Result<(), EngineError> {
        let s = self.ring.statistics()?;
        accumulate(&mut self.stats, &mut self.unplaced_drops, s);
        Ok(())
    }
}

/// Adds one clear-on-read `PACKET_STATISTICS` reading to the 64-bit totals.
fn accumulate(stats: &mut SourceStats, unplaced: &mut u64, s: ring::TpacketStats) {
    stats.received += u64::from(s.packets);
    stats.dropped += u64::from(s.drops);
    stats.freezes += u64::from(s.freeze_q_cnt);
    *unplaced += u64::from(s.drops);
}

#[inline]
fn flags_of(status: u32, pkttype: u8) -> Flags {
    let mut f = Flags::default().with_ts_source(if status & ring::TP_STATUS_TS_RAW_HARDWARE != 0 {
        TsSource::Hardware
    } else {
        TsSource::Kernel
    });
    f = f.with_direction(if pkttype == ring::PACKET_OUTGOING {
        Direction::Outbound
    } else {
        Direction::Inbound
    });
    if status & ring::TP_STATUS_CSUM_VALID != 0 {
        f = f.with(Flags::CSUM_VALID);
    }
    if status & ring::TP_STATUS_CSUMNOTREADY != 0 {
        f = f.with(Flags::CSUM_NOT_READY);
    }
    f
}

impl PacketSource for LiveSource {
    fn interfaces(&self) -> &[InterfaceInfo] {
        &self.interfaces
    }

    fn next_block<F: FnMut(&Packet<'_>)>(
        &mut self,
        timeout_ms: i32,
        _max_packets: usize,
        mut f: F,
    ) -> Result<Progress, EngineError> {
        let wake = self.stop.as_deref().map(Stop::wake_fd);
        let Some(block) = self.ring.next_block(timeout_ms, wake)? else {
            return Ok(Progress::Idle);
        };
        if block.losing() {
            // The kernel dropped packets before this block: count them now, so that they are
            // placed before its first packet.
            let s = self.ring.statistics()?;
            accumulate(&mut self.stats, &mut self.unplaced_drops, s);
        }
        self.stats.blocks += 1;
        let mut drops = std::mem::take(&mut self.unplaced_drops);
        for rp in block.packets() {
            let stripped_vlan = (rp.status & ring::TP_STATUS_VLAN_VALID != 0).then(|| {
                let tpid = if rp.status & ring::TP_STATUS_VLAN_TPID_VALID != 0 {
                    rp.vlan_tpid
                } else {
                    0x8100
                };
                (tpid, rp.vlan_tci)
            });
            f(&Packet {
                data: rp.data,
                ts_ns: rp.ts_ns,
                len: rp.len,
                flags: flags_of(rp.status, rp.pkttype),
                interface: 0,
                stripped_vlan,
                drops_before: std::mem::take(&mut drops),
            });
        }
        // A block without packets cannot carry the drops; keep them for the next one.
        self.unplaced_drops += drops;
        Ok(Progress::Block)
    }

    fn stats(&mut self) -> Result<SourceStats, EngineError> {
        self.poll_kernel()?;
        let (rx, drop) = self.link.read();
        let since_open =
            |now: Option<u64>, base: Option<u64>| now.map(|n| n.saturating_sub(base.unwrap_or(0)));
        self.stats.if_received = since_open(rx, self.link_base.0);
        self.stats.if_dropped = since_open(drop, self.link_base.1);
        Ok(self.stats)
    }

    fn stop_intake(&mut self) -> Result<(), EngineError> {
        self.ring.set_filter(&bpf::reject_all())?;
        // Raised for good: from here a wait must be for the ring's last blocks only.
        self.stop = None;
        Ok(())
    }
}
