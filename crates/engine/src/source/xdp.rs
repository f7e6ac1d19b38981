//! A live interface through AF_XDP: an XDP program hands each receive queue's frames to an
//! AF_XDP socket before the stack makes a socket buffer; one socket, one UMEM and one worker
//! per queue.
//!
//! The program runs in the driver (native mode) where the driver has XDP, else after the
//! stack made a socket buffer (generic mode); sockets are bound zero-copy where the driver
//! has it, else in copy mode. The frames are taken from the stack: this source is for a tap
//! or SPAN port, not for a host's own traffic.
//!
//! Accounting, per queue: the program counts the frames it ran on (`received`) and those it
//! had no socket for; the kernel counts, per socket, frames dropped for want of a free frame
//! (`rx_dropped`) or of room in the RX ring (`rx_ring_full`). `dropped_kernel` is their sum,
//! so that `received = recorded + filtered + dropped_kernel + dropped_ours` once drained.
//! Classic BPF (`-f`, the rules' filter) cannot run in an XDP program: both run in user space
//! on the frames handed over, and count what they refuse as filtered.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use tapflow_sys::ethtool::Ethtool;
use tapflow_sys::iface::{self, Promiscuous};
use tapflow_sys::xdp::{self, Map, Program, QueueCounters, XdpLink};
use tapflow_sys::xsk::{BindMode, XskSocket, XskStatistics, XskStatsHandle};
use tapflow_wire::record::{Direction, TsSource};
use tapflow_wire::rules::Rule;
use tapflow_wire::{Flags, LinkType};

use crate::EngineError;
use crate::rules::{self, LiveRules};
use crate::source::{
    InterfaceInfo, Opened, Packet, PacketSource, Progress, SourceCounter, SourceMetrics,
    SourceStats,
};
use crate::stop::Stop;

/// A live interface to capture on through AF_XDP.
#[derive(Debug, Clone)]
pub struct XdpInput {
    /// Interface name.
    pub ifname: String,
    /// UMEM frames per queue (a power of two): how many frames wait for the reader at most.
    pub frames: u32,
    /// Put the interface in promiscuous mode while capturing.
    pub promiscuous: bool,
}

/// UMEM frames per queue unless told: 16 MiB of 4 KiB frames.
pub const DEFAULT_FRAMES: u32 = 4096;

/// Frames delivered per block at most.
const BATCH: u32 = 256;

/// Opens the interface's queues: one socket per queue in an `XSKMAP`, then the program,
/// attached last so that no frame meets it before its socket is there.
pub fn open(
    input: &XdpInput,
    snaplen: u32,
    filter: Option<&str>,
    rules: Option<Vec<Rule>>,
    stop: &Arc<Stop>,
) -> Result<Opened<XdpSource>, EngineError> {
    let ifname = input.ifname.as_str();
    if let Some(expr) = filter {
        // Compiled here only to fail at start on a bad expression; each worker runs it.
        rules::compile_expr(expr, LinkType::Ethernet, snaplen, stop)?;
    }
    let ifindex = iface::index(ifname)?;
    let queues = rx_queues(ifname);
    let rules = LiveRules::new(rules, queues as usize, snaplen, None)?;
    let counters = Map::queue_counters(ifname, queues)?;
    let sockets_map = Map::xsk_map(ifname, queues)?;
    let capture = Program::load(
        ifname,
        "tapflow_xdp",
        &xdp::capture_program(&counters, &sockets_map, queues),
    )?;
    let pass = Program::load(ifname, "tapflow_pass", &xdp::pass_program())?;
    let promiscuous = match input.promiscuous {
        true => Some(iface::promiscuous(ifname, ifindex)?),
        false => None,
    };
    let sockets = (0..queues)
        .map(|q| {
            let s = XskSocket::open(ifname, ifindex, q, input.frames, true)?;
            sockets_map.set_socket(q, s.fd())?;
            Ok(s)
        })
        .collect::<Result<Vec<_>, EngineError>>()?;
    let link = XdpLink::attach_best(&capture, ifname, ifindex)?;
    let zero_copy = sockets.iter().all(|s| s.mode() == BindMode::ZeroCopy);
    let mode = format!(
        "XDP {} mode, {}, {} queue{}, {} frames per queue, frames taken from the stack",
        link.mode().name(),
        if zero_copy { "zero-copy" } else { "copy" },
        queues,
        if queues == 1 { "" } else { "s" },
        input.frames,
    );
    let intake = Arc::new(Intake {
        link,
        pass,
        _capture: capture,
        _promiscuous: promiscuous,
        closed: AtomicBool::new(false),
    });
    let counters = Arc::new(counters);
    let handles = sockets
        .iter()
        .map(XskSocket::stats_handle)
        .collect::<Result<Vec<_>, _>>()?;
    let metrics = xdp_metrics(Arc::clone(&counters), handles, queues);
    let max_frame = iface::mtu(ifname).ok().map(|m| m + 18);
    let sources = sockets
        .into_iter()
        .map(|xsk| XdpSource {
            counts_beyond: xsk.queue() == 0,
            queue: xsk.queue(),
            queues,
            xsk,
            counters: Arc::clone(&counters),
            intake: Arc::clone(&intake),
            interfaces: [InterfaceInfo {
                linktype: LinkType::Ethernet,
                snaplen,
                name: Some(ifname.to_string()),
                filter: filter.map(str::to_string),
                max_frame,
            }],
            snaplen: snaplen as usize,
            stats: SourceStats::default(),
            unplaced_drops: 0,
            clock_offset: clock_offset(),
            stop: Some(Arc::clone(stop)),
        })
        .collect();
    Ok(Opened {
        sources,
        input: input.ifname.clone(),
        linktype: LinkType::Ethernet,
        ring: None,
        mode: Some(mode),
        hw_timestamps: false,
        rules: Some(rules),
        filter_in_user_space: true,
        realtime: true,
        drain_quiet: Duration::from_millis(50),
        progress: None,
        metrics: Some(metrics),
    })
}

/// The interface's receive queues (`ETHTOOL_GCHANNELS`), 1 if it does not say: the workers
/// of a capture on it.
pub fn rx_queues(ifname: &str) -> u32 {
    Ethtool::open(ifname)
        .and_then(|e| e.channels())
        .ok()
        .and_then(|c| c.supported())
        .map_or(1, |c| c.rx_queues())
        .max(1)
}

/// `CLOCK_REALTIME - CLOCK_MONOTONIC` now: what turns the program's `bpf_ktime_get_ns()`
/// stamps into times since 1970.
fn clock_offset() -> u64 {
    let before = tapflow_sys::clock::realtime_ns();
    let mono = tapflow_sys::clock::monotonic_ns();
    let after = tapflow_sys::clock::realtime_ns();
    (before / 2 + after / 2).wrapping_sub(mono)
}

/// The program on the interface, shared by the queues' sources: detached when the last of
/// them is dropped.
#[derive(Debug)]
struct Intake {
    link: XdpLink,
    /// Swapped in to close the intake.
    pass: Program,
    _capture: Program,
    _promiscuous: Option<Promiscuous>,
    closed: AtomicBool,
}

impl Intake {
    /// Lets every frame go on to the stack from now on, uncounted; the frames already handed
    /// over stay in the sockets' rings to be drained.
    fn close(&self) -> Result<(), EngineError> {
        if !self.closed.swap(true, Ordering::AcqRel) {
            self.link.update(&self.pass)?;
        }
        Ok(())
    }
}

/// The program's and the sockets' counters on `/metrics` and in the summary.
fn xdp_metrics(counters: Arc<Map>, sockets: Vec<XskStatsHandle>, queues: u32) -> SourceMetrics {
    SourceMetrics::new(move || {
        let per_queue: Vec<(String, QueueCounters, XskStatistics)> = sockets
            .iter()
            .enumerate()
            .map(|(q, h)| {
                let mut c = counters.read_counters(q as u32).unwrap_or_default();
                if q == 0 {
                    let beyond = counters.read_counters(queues).unwrap_or_default();
                    c.seen += beyond.seen;
                    c.no_socket += beyond.no_socket;
                }
                (
                    format!("queue=\"{q}\""),
                    c,
                    h.statistics().unwrap_or_default(),
                )
            })
            .collect();
        let family =
            |name, help, get: &dyn Fn(&QueueCounters, &XskStatistics) -> u64| SourceCounter {
                name,
                help,
                samples: per_queue
                    .iter()
                    .map(|(l, c, x)| (l.clone(), get(c, x) as f64))
                    .collect(),
            };
        vec![
            family(
                "tapflow_xdp_seen_total",
                "Frames the XDP program ran on, by receive queue.",
                &|c, _| c.seen,
            ),
            family(
                "tapflow_xdp_redirected_total",
                "Frames the XDP program handed to the queue's AF_XDP socket.",
                &|c, _| c.redirected,
            ),
            family(
                "tapflow_xdp_no_socket_total",
                "Frames with no AF_XDP socket to go to, passed to the stack.",
                &|c, _| c.no_socket,
            ),
            family(
                "tapflow_xsk_rx_dropped_total",
                "Frames the kernel dropped with no free UMEM frame or too large for one.",
                &|_, x| x.rx_dropped,
            ),
            family(
                "tapflow_xsk_rx_ring_full_total",
                "Frames the kernel dropped with the AF_XDP RX ring full.",
                &|_, x| x.rx_ring_full,
            ),
            family(
                "tapflow_xsk_rx_fill_ring_empty_total",
                "Times the kernel found the fill ring empty (part of rx_dropped in copy mode).",
                &|_, x| x.rx_fill_ring_empty_descs,
            ),
        ]
    })
}

/// One receive queue's socket and its counters.
#[derive(Debug)]
pub struct XdpSource {
    xsk: XskSocket,
    queue: u32,
    queues: u32,
    /// Whether this source also counts frames from queues beyond the last (the first does).
    counts_beyond: bool,
    counters: Arc<Map>,
    intake: Arc<Intake>,
    interfaces: [InterfaceInfo; 1],
    snaplen: usize,
    stats: SourceStats,
    /// Drops counted but not yet placed before a packet.
    unplaced_drops: u64,
    /// See [`clock_offset`]; refreshed with the counters.
    clock_offset: u64,
    /// Ends a wait early once raised, until the intake is closed.
    stop: Option<Arc<Stop>>,
}

impl PacketSource for XdpSource {
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
        if !self.xsk.wait(timeout_ms, wake)? {
            return Ok(Progress::Idle);
        }
        let batch = self.xsk.receive(BATCH);
        if batch.is_empty() {
            return Ok(Progress::Idle);
        }
        self.stats.blocks += 1;
        let flags = Flags::default()
            .with_ts_source(TsSource::Kernel)
            .with_direction(Direction::Inbound);
        // Frames the program could not stamp take the time they are read.
        let mut now = None;
        let mut drops = std::mem::take(&mut self.unplaced_drops);
        for i in 0..batch.len() {
            let fr = batch.frame(i);
            let ts_ns = match fr.meta {
                0 => *now.get_or_insert_with(tapflow_sys::clock::realtime_ns),
                t => t.wrapping_add(self.clock_offset),
            };
            f(&Packet {
                data: &fr.data[..fr.data.len().min(self.snaplen)],
                ts_ns,
                len: fr.data.len() as u32,
                flags,
                interface: 0,
                stripped_vlan: None,
                drops_before: std::mem::take(&mut drops),
            });
        }
        drop(batch);
        self.unplaced_drops += drops;
        Ok(Progress::Block)
    }

    fn stats(&mut self) -> Result<SourceStats, EngineError> {
        let mut c = self.counters.read_counters(self.queue)?;
        if self.counts_beyond {
            let beyond = self.counters.read_counters(self.queues)?;
            c.seen += beyond.seen;
            c.no_socket += beyond.no_socket;
        }
        let x = self.xsk.statistics()?;
        let dropped = x.rx_dropped + x.rx_ring_full + c.no_socket;
        self.unplaced_drops += dropped.saturating_sub(self.stats.dropped);
        self.stats.received = c.seen;
        self.stats.dropped = dropped;
        self.clock_offset = clock_offset();
        Ok(self.stats)
    }

    fn stop_intake(&mut self) -> Result<(), EngineError> {
        self.intake.close()?;
        self.stop = None;
        Ok(())
    }
}
