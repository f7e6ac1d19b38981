//! A live interface as a packet source: one AF_PACKET TPACKET_V3 ring (one fanout member).
//!
//! A link that goes down is a gap in the capture, not its end. The socket says `ENETDOWN` when
//! the interface is set down; a lost carrier shows in the interface's flags, read with the
//! kernel's counters once no packet comes. The source then delivers what the kernel still closes from before, reports
//! [`LinkEvent::Down`], looks at the link every [`LINK_CHECK`] (and at the ring: a packet means
//! the link is back), and reports [`LinkEvent::Up`] with the gap's length before the first
//! packet after it. The kernel hooks the socket back itself when the interface comes up, fanout
//! members included, so the ring is not bound again. A deleted interface ends the run: its
//! socket never sees another device, even one made again under the same name.

use std::sync::Arc;
use std::time::{Duration, Instant};

use tapflow_sys::bpf;
use tapflow_sys::iface::{self, LinkCounters, LinkState};
use tapflow_sys::ring::{self, Fanout, FanoutMode, RxRing, RxRingConfig, Wait};
use tapflow_wire::record::{Direction, TsSource};
use tapflow_wire::rules::Rule;
use tapflow_wire::{Flags, LinkType};

use crate::EngineError;
use crate::rules::{self, LiveRules};
use crate::source::{
    InterfaceInfo, LinkDown, LinkEvent, Opened, Packet, PacketSource, Progress, SourceStats, ppm,
};
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
///
/// On [`ring::ANY`] the frames are Linux cooked v2 (`LINKTYPE_LINUX_SLL2`): the expression and
/// the rules are compiled for them and moved to the network header, where the kernel's filter
/// starts on that socket, and `snaplen` counts the 20-byte header as tcpdump does.
pub fn open(
    input: &RingInput,
    snaplen: u32,
    filter: Option<&str>,
    rules: Option<Vec<Rule>>,
    stop: &Arc<Stop>,
) -> Result<Opened<LiveSource>, EngineError> {
    let cooked = input.ifname == ring::ANY;
    let (linktype, kernel_snaplen) = if cooked {
        let header = tapflow_wire::sll::HEADER_LEN as u32;
        (LinkType::LinuxSll2, snaplen.saturating_sub(header).max(1))
    } else {
        (LinkType::Ethernet, snaplen)
    };
    let base = match filter {
        Some(expr) => {
            let prog = rules::compile_expr(expr, linktype, kernel_snaplen, stop)?;
            let kernel = if cooked {
                tapflow_wire::sll::for_cooked_socket(&prog).map_err(|e| {
                    EngineError::Config(format!("filter '{expr}' cannot run on -i any: {e}"))
                })?
            } else {
                prog.clone()
            };
            bpf::check_kernel_len(expr, &rules::to_sys(&kernel))?;
            Some(prog)
        }
        None => None,
    };
    let rules = if cooked {
        LiveRules::new_cooked(rules, input.threads, kernel_snaplen, base)?
    } else {
        LiveRules::new(rules, input.threads, snaplen, base)?
    };
    let rings = open_rings(input, &rules.kernel_program()?)?;
    rules.attach(
        rings
            .iter()
            .map(RxRing::filter_handle)
            .collect::<Result<_, _>>()?,
    );
    let hw_timestamps = rings.iter().all(RxRing::hw_timestamps);
    let settle = settle_time(input.ring.retire_ms);
    let sources = rings
        .into_iter()
        .enumerate()
        .map(|(k, r)| {
            LiveSource::new(r, &input.ifname, snaplen, filter.map(str::to_string))
                .with_stop(Arc::clone(stop))
                .in_group(k, settle)
        })
        .collect();
    Ok(Opened {
        sources,
        input: input.ifname.clone(),
        linktype,
        ring: Some(input.ring),
        mode: None,
        hw_timestamps,
        rules: Some(rules),
        filter_in_user_space: false,
        realtime: true,
        drain_quiet: settle,
        progress: None,
        metrics: None,
    })
}

/// How long the kernel may take to close the block it is filling (three retire timeouts, and
/// some): how long a ring must stay quiet before it is known to be empty.
fn settle_time(retire_ms: u32) -> Duration {
    Duration::from_millis(u64::from(retire_ms) * 3 + 20)
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

/// How often the link is looked at while it is down (two `ioctl`s): the longest the end of a
/// gap waits to be seen when no packet shows it first.
pub const LINK_CHECK: Duration = Duration::from_millis(100);

/// How often a lost carrier is looked for while the link is up, when no block came since the
/// last look.
pub const CARRIER_CHECK: Duration = Duration::from_millis(500);

/// How long the flags must say "no carrier", with no packet coming, before that is a gap. The
/// kernel sets the flags from the carrier up to a second late (the link watch's rate limit):
/// packets may flow while they still say down, as on a link just set up.
pub const CARRIER_SETTLE: Duration = Duration::from_secs(1);

/// Where the source's link is.
#[derive(Debug, Clone, Copy)]
enum Link {
    /// Packets flow.
    Up,
    /// The socket said `ENETDOWN`: until `settled`, the kernel may still close blocks of packets
    /// from before, which are delivered before the gap is reported.
    Closing { gap: Gap, settled: Instant },
    /// Reported down; looked at again at `next_check`.
    Down { gap: Gap, next_check: Instant },
}

/// A gap in the capture: since when, and why.
#[derive(Debug, Clone, Copy)]
struct Gap {
    since: Instant,
    why: LinkDown,
}

/// A ring and the counters read from it.
#[derive(Debug)]
pub struct LiveSource {
    ring: RxRing,
    link: LinkCounters,
    state: Link,
    /// A change seen while reading the counters, reported by the next `next_block`.
    pending: Option<LinkEvent>,
    /// Time down in the gaps that have ended, ns.
    down_ns: u64,
    /// When the carrier is due to be looked at, and the blocks delivered at the last look.
    carrier_check: (Instant, u64),
    /// Since when the flags say "no carrier" with no packet coming (not a gap yet: see
    /// [`CARRIER_SETTLE`]).
    no_carrier_since: Option<Instant>,
    /// Whether this source logs the link's changes (the first of a fanout group: every member
    /// sees them).
    logs: bool,
    /// See [`settle_time`].
    settle: Duration,
    interfaces: [InterfaceInfo; 1],
    stats: SourceStats,
    /// Kernel drops read from `PACKET_STATISTICS` but not yet placed before a packet.
    unplaced_drops: u64,
    /// How full the ring was when the last block was taken, in parts per million.
    fill_ppm: u64,
    /// Ends a wait for packets early once raised, until the intake is stopped (the drain then
    /// waits on the ring alone).
    stop: Option<Arc<Stop>>,
    /// The interface's own counters when the ring opened: its statistics count from there.
    link_base: (Option<u64>, Option<u64>),
}

impl LiveSource {
    /// A source over an open ring on `ifname` (Linux cooked v2 frames on [`ring::ANY`]).
    pub fn new(ring: RxRing, ifname: &str, snaplen: u32, filter: Option<String>) -> LiveSource {
        let linktype = if ring.cooked() {
            LinkType::LinuxSll2
        } else {
            LinkType::Ethernet
        };
        let max_frame = if ring.cooked() {
            None
        } else {
            tapflow_sys::iface::mtu(ifname).ok().map(|m| m + 18)
        };
        let link = LinkCounters::open(ifname);
        LiveSource {
            ring,
            link_base: link.read(),
            link,
            state: Link::Up,
            pending: None,
            down_ns: 0,
            carrier_check: (Instant::now(), 0),
            no_carrier_since: None,
            logs: true,
            settle: settle_time(10),
            interfaces: [InterfaceInfo {
                linktype,
                snaplen,
                name: Some(ifname.to_string()),
                filter,
                max_frame,
            }],
            stats: SourceStats::default(),
            unplaced_drops: 0,
            fill_ppm: 0,
            stop: None,
        }
    }

    /// Makes a wait for packets end as soon as `stop` is raised.
    pub fn with_stop(mut self, stop: Arc<Stop>) -> LiveSource {
        self.stop = Some(stop);
        self
    }

    /// Makes this the `k`th member of its fanout group (only the first logs the link's
    /// changes), on rings whose blocks close within `settle`.
    pub fn in_group(mut self, k: usize, settle: Duration) -> LiveSource {
        self.logs = k == 0;
        self.settle = settle;
        self
    }

    fn ifname(&self) -> &str {
        self.ring.iface()
    }

    /// The link's state now; an error if the interface was deleted.
    fn link_state(&self) -> Result<LinkState, EngineError> {
        Ok(iface::link_state(self.ifname(), self.ring.ifindex())?)
    }

    /// The socket said the link went down: the gap starts now, and is reported once the
    /// ring has settled. Nothing new if a gap is open already.
    fn set_down(&mut self) {
        if let Link::Up = self.state {
            self.state = Link::Closing {
                gap: Gap::now(LinkDown::SetDown),
                settled: Instant::now() + self.settle,
            };
        }
    }

    /// Reports the gap: it is counted, logged, and looked at again after [`LINK_CHECK`].
    #[cold]
    fn report_down(&mut self, gap: Gap) -> LinkEvent {
        self.stats.link_gaps += 1;
        self.state = Link::Down {
            gap,
            next_check: Instant::now() + LINK_CHECK,
        };
        if self.logs {
            eprintln!(
                "tapflow: link down on {} ({}); waiting for it to come back",
                self.ifname(),
                gap.why.describe()
            );
        }
        LinkEvent::Down {
            interface: 0,
            why: gap.why,
        }
    }

    /// Ends the gap: its time is counted and logged.
    #[cold]
    fn report_up(&mut self, gap: Gap) -> LinkEvent {
        let down_ns = u64::try_from(gap.since.elapsed().as_nanos()).unwrap_or(u64::MAX);
        self.down_ns += down_ns;
        self.state = Link::Up;
        if self.logs {
            eprintln!(
                "tapflow: link up on {} after {:.3} s down; capturing again",
                self.ifname(),
                down_ns as f64 / 1e9
            );
        }
        LinkEvent::Up {
            interface: 0,
            down_ns,
        }
    }

    /// A change of the link due now: a gap to report once the ring has settled, a gap's end
    /// once the link is up (or a block is waiting: a packet came over it). An error if the
    /// interface was deleted.
    fn link_change(&mut self) -> Result<Option<LinkEvent>, EngineError> {
        if let Some(e) = self.pending.take() {
            return Ok(Some(e));
        }
        match self.state {
            Link::Up => Ok(None),
            Link::Closing { gap, settled } if Instant::now() >= settled && !self.ring.ready() => {
                self.link_state()?;
                Ok(Some(self.report_down(gap)))
            }
            Link::Closing { .. } => Ok(None),
            Link::Down { gap, .. } if self.ring.ready() => Ok(Some(self.report_up(gap))),
            Link::Down { gap, next_check } if Instant::now() >= next_check => {
                if self.link_state()? == LinkState::Up {
                    return Ok(Some(self.report_up(gap)));
                }
                self.state = Link::Down {
                    gap,
                    next_check: Instant::now() + LINK_CHECK,
                };
                Ok(None)
            }
            Link::Down { .. } => Ok(None),
        }
    }

    /// Looks for a lost carrier (which the socket does not report) while the link is up,
    /// every [`CARRIER_CHECK`]: a gap once the flags have said so for [`CARRIER_SETTLE`] with
    /// no packet coming (a packet is proof of a link that no flag outweighs), from the first
    /// look that saw it.
    fn check_carrier(&mut self) {
        if self.ring.cooked() {
            // On every interface: one link's carrier is no gap in the capture.
            return;
        }
        let (due, blocks) = self.carrier_check;
        let now = Instant::now();
        if now < due {
            return;
        }
        self.carrier_check = (now + CARRIER_CHECK, self.stats.blocks);
        let lost = matches!((self.state, self.pending), (Link::Up, None))
            && blocks == self.stats.blocks
            && !self.ring.ready()
            && matches!(self.link_state(), Ok(LinkState::NoCarrier));
        if !lost {
            self.no_carrier_since = None;
            return;
        }
        let since = *self.no_carrier_since.get_or_insert(now);
        if now.duration_since(since) >= CARRIER_SETTLE {
            self.no_carrier_since = None;
            let e = self.report_down(Gap {
                since,
                why: LinkDown::NoCarrier,
            });
            self.pending = Some(e);
        }
    }

    /// Reads and accumulates the kernel's clear-on-read counters.
    fn poll_kernel(&mut self) -> Result<(), EngineError> {
        let s = self.ring.statistics()?;
        accumulate(&mut self.stats, &mut self.unplaced_drops, s);
        Ok(())
    }
}

impl Gap {
    fn now(why: LinkDown) -> Gap {
        Gap {
            since: Instant::now(),
            why,
        }
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
        if let Some(e) = self.link_change()? {
            return Ok(Progress::Link(e));
        }
        // In a gap, the wait ends when the link is due to be looked at.
        let timeout_ms = match self.state {
            Link::Up => timeout_ms,
            Link::Closing { settled: due, .. }
            | Link::Down {
                next_check: due, ..
            } => {
                let left = due.saturating_duration_since(Instant::now());
                let left = i32::try_from(left.as_micros().div_ceil(1000)).unwrap_or(i32::MAX);
                if timeout_ms < 0 {
                    left
                } else {
                    timeout_ms.min(left)
                }
            }
        };
        let wake = self.stop.as_deref().map(Stop::wake_fd);
        match self.ring.wait(timeout_ms, wake)? {
            Wait::Ready => {}
            Wait::Nothing => return Ok(Progress::Idle),
            Wait::LinkDown => {
                self.set_down();
                return Ok(Progress::Idle);
            }
        }
        if let Link::Down { gap, .. } = self.state {
            // A packet came: the link is back, and the gap ends before it.
            return Ok(Progress::Link(self.report_up(gap)));
        }
        let Some(block) = self.ring.next_block(0, None)? else {
            return Ok(Progress::Idle);
        };
        if block.losing() {
            // The kernel dropped packets before this block: count them now, so that they are
            // placed before its first packet.
            let s = self.ring.statistics()?;
            accumulate(&mut self.stats, &mut self.unplaced_drops, s);
        }
        self.stats.blocks += 1;
        self.fill_ppm = ppm(block.ring_fill() as u64, self.ring.block_count() as u64);
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
        self.check_carrier();
        self.stats.link_down_ns = self.down_ns
            + match self.state {
                Link::Down { gap, .. } => {
                    u64::try_from(gap.since.elapsed().as_nanos()).unwrap_or(u64::MAX)
                }
                Link::Up | Link::Closing { .. } => 0,
            };
        let (rx, drop) = self.link.read();
        let since_open =
            |now: Option<u64>, base: Option<u64>| now.map(|n| n.saturating_sub(base.unwrap_or(0)));
        self.stats.if_received = since_open(rx, self.link_base.0);
        self.stats.if_dropped = since_open(drop, self.link_base.1);
        Ok(self.stats)
    }

    fn ring_fill_ppm(&self) -> u64 {
        self.fill_ppm
    }

    fn stop_intake(&mut self) -> Result<(), EngineError> {
        self.ring.set_filter(&bpf::reject_all())?;
        // Raised for good: from here a wait must be for the ring's last blocks only.
        self.stop = None;
        Ok(())
    }
}
