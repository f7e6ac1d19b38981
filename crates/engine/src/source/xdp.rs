//! A live interface through XDP: an XDP program hands each receive queue's frames to an
//! AF_XDP socket before the stack makes a socket buffer; one socket, one UMEM and one worker
//! per queue.
//!
//! The program runs in the driver (native mode) where the driver has XDP, else after the
//! stack made a socket buffer (generic mode); sockets are bound zero-copy where the driver
//! has it, else in copy mode. The frames are taken from the stack: this is for a tap or SPAN
//! port. For a host's own interface (`pass`), a frame cannot both go to a socket and on to
//! the stack, so the program lets every frame go on and copies its first snaplen bytes into
//! a BPF ring buffer shared by all CPUs, read by one worker; a full ring is counted there.
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
use tapflow_sys::iface::{self, LinkCounters, Promiscuous};
use tapflow_sys::ringbuf::RingBuf;
use tapflow_sys::xdp::{self, Map, Program, QueueCounters, XdpLink};
use tapflow_sys::xsk::{BindMode, FRAME_SIZE, XskSocket, XskStatistics, XskStatsHandle};
use tapflow_wire::record::{Direction, TsSource};
use tapflow_wire::rules::Rule;
use tapflow_wire::{Flags, LinkType};

use crate::EngineError;
use crate::rules::{self, LiveRules};
use crate::source::{
    InterfaceInfo, Opened, Packet, PacketSource, Progress, SourceCounter, SourceMetrics,
    SourceStats, ppm,
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
    /// Let the frames go on to the stack, and take copies of their first bytes.
    pub pass: bool,
}

/// Frames delivered per block at most.
const BATCH: u32 = 2048;

/// How many frames ahead of the one delivered the reader asks for the next frame's first
/// line: each frame is in a page of its own, far from the last.
const AHEAD: u32 = 4;

/// How long the reader sleeps after a small block (fewer frames than [`BATCH`] and than a
/// quarter of what its memory holds), before it looks again: the most it adds to a frame's
/// way to the sinks, and what bounds its wake-ups (no timer closes a block here, unlike a
/// `TPACKET_V3` ring's retire timeout). At a rate that fills blocks it never sleeps.
const NAP: Duration = Duration::from_millis(1);

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
    let promiscuous = match input.promiscuous {
        true => Some(iface::promiscuous(ifname, ifindex)?),
        false => None,
    };
    let pass = Program::load(ifname, "tapflow_pass", &xdp::pass_program())?;
    let (handovers, counters, link, metrics) = if input.pass {
        open_copies(input, ifindex, snaplen)?
    } else {
        open_sockets(input, ifindex)?
    };
    let workers = handovers.len();
    let rules = LiveRules::new(rules, workers, snaplen, None)?;
    let mode = match &handovers[0] {
        Handover::Socket(xsk) => format!(
            "XDP {} mode, {}, {} queue{}, {} frames per queue, frames taken from the stack",
            link.mode().name(),
            match xsk.mode() {
                BindMode::ZeroCopy => "zero-copy",
                BindMode::Copy => "copy",
            },
            workers,
            if workers == 1 { "" } else { "s" },
            input.frames,
        ),
        Handover::Copies(_) => format!(
            "XDP {} mode, copies of {snaplen} bytes into a {} MiB BPF ring buffer, frames \
             passed on to the stack",
            link.mode().name(),
            ring_bytes(input.frames) >> 20,
        ),
    };
    let intake = Arc::new(Intake {
        link,
        pass,
        _promiscuous: promiscuous,
        closed: AtomicBool::new(false),
    });
    let max_frame = iface::mtu(ifname).ok().map(|m| m + 18);
    let sources = handovers
        .into_iter()
        .enumerate()
        .map(|(q, handover)| XdpSource {
            counts_beyond: q == 0,
            queue: q as u32,
            queues: workers as u32,
            handover,
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
            fill_ppm: 0,
            placed: 0,
            clock_offset: clock_offset(),
            stop: Some(Arc::clone(stop)),
            nap: false,
            small: small_block(input, snaplen),
            link: LinkCounters::open(ifname),
            link_base: (None, None),
        })
        .map(|mut s: XdpSource| {
            s.link_base = s.link.read();
            s
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

/// What opening one kind of handover gives: one handover per worker, the program's counters,
/// its link (which holds the program) and the counters for `/metrics`.
type OpenedHandovers = (Vec<Handover>, Arc<Map>, XdpLink, SourceMetrics);

/// One socket per receive queue in an `XSKMAP`, then the program, attached last so that no
/// frame meets it before its socket is there.
fn open_sockets(input: &XdpInput, ifindex: u32) -> Result<OpenedHandovers, EngineError> {
    let ifname = input.ifname.as_str();
    let queues = rx_queues(ifname);
    let counters = Map::queue_counters(ifname, queues)?;
    let sockets_map = Map::xsk_map(ifname, queues)?;
    let program = Program::load(
        ifname,
        "tapflow_xdp",
        &xdp::capture_program(&counters, &sockets_map, queues),
    )?;
    let sockets = (0..queues)
        .map(|q| {
            let s = XskSocket::open(ifname, ifindex, q, input.frames, true)?;
            sockets_map.set_socket(q, s.fd())?;
            Ok(s)
        })
        .collect::<Result<Vec<_>, EngineError>>()?;
    let link = XdpLink::attach_best(&program, ifname, ifindex)?;
    let counters = Arc::new(counters);
    let handles = sockets
        .iter()
        .map(XskSocket::stats_handle)
        .collect::<Result<Vec<_>, _>>()?;
    let metrics = socket_metrics(Arc::clone(&counters), handles, queues);
    let handovers = sockets.into_iter().map(Handover::Socket).collect();
    Ok((handovers, counters, link, metrics))
}

/// The ring buffer's size: as much memory as the UMEM of `frames` frames would take.
fn ring_bytes(frames: u32) -> u32 {
    frames.saturating_mul(FRAME_SIZE)
}

/// Frames in a small block (see [`NAP`]): fewer than a block holds, and than a quarter of the
/// frames (or ring buffer records) a worker's memory holds.
fn small_block(input: &XdpInput, snaplen: u32) -> usize {
    let held = match input.pass {
        false => input.frames,
        true => ring_bytes(input.frames) / (xdp::copy_record(snaplen) + 8),
    };
    BATCH.min(held / 4) as usize
}

/// A ring buffer for copies, and the program that fills it.
fn open_copies(
    input: &XdpInput,
    ifindex: u32,
    snaplen: u32,
) -> Result<OpenedHandovers, EngineError> {
    let ifname = input.ifname.as_str();
    let counters = Map::queue_counters(ifname, 1)?;
    let bytes = ring_bytes(input.frames);
    let ring = Map::ring_buffer(ifname, bytes)?;
    let program = Program::load(
        ifname,
        "tapflow_copy",
        &xdp::copy_program(&counters, &ring, snaplen),
    )?;
    let reader = RingBuf::open(&ring, ifname, bytes as usize)?;
    let link = XdpLink::attach_best(&program, ifname, ifindex)?;
    let counters = Arc::new(counters);
    let metrics = copy_metrics(Arc::clone(&counters));
    Ok((vec![Handover::Copies(reader)], counters, link, metrics))
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
pub(crate) fn clock_offset() -> u64 {
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

/// The copy program's counters on `/metrics` and in the summary.
fn copy_metrics(counters: Arc<Map>) -> SourceMetrics {
    SourceMetrics::new(move || {
        let c = counters.read_counters(0).unwrap_or_default();
        let one = |name, help, v: u64| SourceCounter {
            name,
            help,
            samples: vec![(String::new(), v as f64)],
        };
        vec![
            one(
                "tapflow_xdp_seen_total",
                "Frames the XDP program ran on.",
                c.seen,
            ),
            one(
                "tapflow_xdp_copied_total",
                "Frames the XDP program copied into the ring buffer.",
                c.redirected,
            ),
            one(
                "tapflow_xdp_ring_full_total",
                "Frames not copied because the ring buffer was full.",
                c.ring_full,
            ),
        ]
    })
}

/// The program's and the sockets' counters on `/metrics` and in the summary.
fn socket_metrics(counters: Arc<Map>, sockets: Vec<XskStatsHandle>, queues: u32) -> SourceMetrics {
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

/// How frames reach a worker.
#[derive(Debug)]
enum Handover {
    /// Redirected to the AF_XDP socket of a receive queue.
    Socket(XskSocket),
    /// Copied into the ring buffer, the frames going on to the stack.
    Copies(RingBuf),
}

/// One receive queue's socket (or the ring buffer of copies) and its counters.
#[derive(Debug)]
pub struct XdpSource {
    handover: Handover,
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
    /// How full the RX ring (or the ring buffer) was when the last block was read, in parts
    /// per million.
    fill_ppm: u64,
    /// Drops counted so far that have been placed (or are about to be).
    placed: u64,
    /// See [`clock_offset`]; refreshed with the counters.
    clock_offset: u64,
    /// Ends a wait early once raised, until the intake is closed.
    stop: Option<Arc<Stop>>,
    /// Whether the last block was small (see [`NAP`]).
    nap: bool,
    /// Blocks of fewer frames than this are small.
    small: usize,
    /// The interface's own counters, and their values when the capture started.
    link: LinkCounters,
    link_base: (Option<u64>, Option<u64>),
}

impl XdpSource {
    /// Frames the program ran on for this worker, and the frames lost so far: for a socket,
    /// those it had no socket for and those the kernel dropped (`rx_dropped`,
    /// `rx_ring_full`); for copies, those that found the ring buffer full.
    fn counts(&mut self) -> Result<(u64, u64), EngineError> {
        let mut c = self.counters.read_counters(self.queue)?;
        if self.counts_beyond {
            let beyond = self.counters.read_counters(self.queues)?;
            c.seen += beyond.seen;
            c.no_socket += beyond.no_socket;
        }
        let dropped = match &self.handover {
            Handover::Socket(xsk) => {
                let x = xsk.statistics()?;
                x.rx_dropped + x.rx_ring_full + c.no_socket
            }
            Handover::Copies(_) => c.ring_full,
        };
        Ok((c.seen, dropped))
    }

    /// Whether frames wait to be read.
    fn waiting(&mut self) -> bool {
        match &mut self.handover {
            Handover::Socket(xsk) => xsk.ready(),
            Handover::Copies(ring) => ring.ready(),
        }
    }

    /// Places the losses counted up to `total` before the next frame delivered. Called only
    /// with nothing waiting to be read: every frame read so far came before those losses
    /// (the kernel drops when the memory the waiting frames fill runs out), every frame read
    /// from now on after them.
    fn place(&mut self, total: u64) {
        self.unplaced_drops += total.saturating_sub(self.placed);
        self.placed = self.placed.max(total);
    }
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
        if std::mem::take(&mut self.nap) {
            std::thread::sleep(NAP);
        }
        let wake = self.stop.as_deref().map(Stop::wake_fd);
        let flags = Flags::default()
            .with_ts_source(TsSource::Kernel)
            .with_direction(Direction::Inbound);
        let (offset, snaplen) = (self.clock_offset, self.snaplen);
        let mut drops = std::mem::take(&mut self.unplaced_drops);
        let delivered = match &mut self.handover {
            Handover::Socket(xsk) => {
                if !xsk.wait(timeout_ms, wake)? {
                    0
                } else {
                    let batch = xsk.receive(BATCH);
                    let (waiting, size) = batch.ring_fill();
                    self.fill_ppm = ppm(waiting.into(), size.into());
                    // Frames the program could not stamp take the time they are read.
                    let mut now = None;
                    for i in 0..batch.len() {
                        if i + AHEAD < batch.len() {
                            let next = batch.frame(i + AHEAD).data;
                            tapflow_sys::cpu::prefetch_line(next.as_ptr());
                        }
                        let fr = batch.frame(i);
                        let ts_ns = match fr.meta {
                            0 => *now.get_or_insert_with(tapflow_sys::clock::realtime_ns),
                            t => t.wrapping_add(offset),
                        };
                        f(&Packet {
                            data: &fr.data[..fr.data.len().min(snaplen)],
                            ts_ns,
                            len: fr.data.len() as u32,
                            flags,
                            interface: 0,
                            stripped_vlan: None,
                            drops_before: std::mem::take(&mut drops),
                        });
                    }
                    batch.len() as usize
                }
            }
            Handover::Copies(ring) => {
                if !ring.wait(timeout_ms, wake)? {
                    0
                } else {
                    let n = ring.read(BATCH as usize, |rec| {
                        let Some(c) = Copy::parse(rec) else { return };
                        f(&Packet {
                            data: &c.data[..c.data.len().min(snaplen)],
                            ts_ns: c.ts.wrapping_add(offset),
                            len: c.len,
                            flags,
                            interface: 0,
                            stripped_vlan: None,
                            drops_before: std::mem::take(&mut drops),
                        });
                    });
                    let (waiting, size) = ring.ring_fill();
                    self.fill_ppm = ppm(waiting, size);
                    n
                }
            }
        };
        self.unplaced_drops += drops;
        if delivered == 0 {
            return Ok(Progress::Idle);
        }
        self.nap = delivered < self.small;
        if !self.nap && !self.waiting() {
            // The reader was behind: losses, if any, happened after what it just read.
            let (_, dropped) = self.counts()?;
            self.place(dropped);
        }
        self.stats.blocks += 1;
        Ok(Progress::Block)
    }

    fn stats(&mut self) -> Result<SourceStats, EngineError> {
        let (seen, dropped) = self.counts()?;
        if !self.waiting() {
            self.place(dropped);
        }
        self.stats.received = seen;
        self.stats.dropped = dropped;
        self.clock_offset = clock_offset();
        let (rx, drop) = self.link.read();
        let since = |now: Option<u64>, base: Option<u64>| now.map(|n| n - base.unwrap_or(0).min(n));
        self.stats.if_received = since(rx, self.link_base.0);
        self.stats.if_dropped = since(drop, self.link_base.1);
        Ok(self.stats)
    }

    fn ring_fill_ppm(&self) -> u64 {
        self.fill_ppm
    }

    fn stop_intake(&mut self) -> Result<(), EngineError> {
        self.intake.close()?;
        self.stop = None;
        Ok(())
    }
}

/// A ring buffer record: a frame's first bytes behind [`xdp::COPY_HEADER`].
struct Copy<'a> {
    ts: u64,
    len: u32,
    data: &'a [u8],
}

impl<'a> Copy<'a> {
    /// The record's fields; `None` if it is shorter than its header.
    #[inline]
    fn parse(rec: &'a [u8]) -> Option<Copy<'a>> {
        let ts = u64::from_ne_bytes(rec.get(0..8)?.try_into().ok()?);
        let len = u32::from_ne_bytes(rec.get(8..12)?.try_into().ok()?);
        let caplen = u32::from_ne_bytes(rec.get(12..16)?.try_into().ok()?) as usize;
        let data = rec.get(xdp::COPY_HEADER..)?;
        Some(Copy {
            ts,
            len,
            data: &data[..caplen.min(data.len())],
        })
    }
}
