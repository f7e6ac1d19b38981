//! An inline tap between two interfaces through AF_XDP: frames received on one leave on the
//! other from the same UMEM, never copied, and each is shown to the pipeline on its way, as
//! any source's packets are. One worker per direction, each owning the rings it uses
//! ([`tapflow_sys::xsk_pair`]).
//!
//! Each interface runs the capture program with one receive queue, redirecting to its
//! socket. Forwarding does not depend on what is recorded: `-f` and the rules decide what
//! reaches the sinks; every frame the program hands over is sent on.
//!
//! Accounting, per direction: the program counts the frames it ran on (`received`) and those
//! it had no socket for; the kernel counts frames dropped with no free frame or no room in
//! the RX ring; the crossing counts frames the other interface took (`forwarded`), those it
//! could not put on a full TX ring, and those still on it. Once drained,
//! `received = forwarded + no_socket + rx_dropped + rx_ring_full + tx_ring_full + tx_invalid`
//! (+ in flight, 0 when the run ends). For the sinks, as for any source, the frames the
//! kernel dropped before user space saw them are the losses.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use tapflow_sys::iface::{self, Promiscuous};
use tapflow_sys::xdp::{self, Map, Program, XdpLink};
use tapflow_sys::xsk::BindMode;
use tapflow_sys::xsk_pair::{self, Crossing, CrossingCounters, Port};
use tapflow_wire::record::{Direction, TsSource};
use tapflow_wire::rules::Rule;
use tapflow_wire::{Flags, LinkType};

use crate::EngineError;
use crate::rules::{self, LiveRules};
use crate::source::xdp::{clock_offset, rx_queues};
use crate::source::{
    InterfaceInfo, Opened, Packet, PacketSource, Progress, SourceCounter, SourceMetrics,
    SourceStats,
};
use crate::stop::Stop;

/// Two interfaces to bridge.
#[derive(Debug, Clone)]
pub struct BridgeInput {
    /// The interfaces; frames go from each to the other.
    pub ifnames: [String; 2],
    /// UMEM frames shared by both directions (a power of two).
    pub frames: u32,
}

/// Frames taken per block at most.
const BATCH: u32 = 256;

/// Opens both interfaces: the shared UMEM and its sockets, each interface's `XSKMAP` and
/// counters, then the programs, attached last. Both interfaces are put in promiscuous mode: a
/// bridge takes frames for any address.
pub fn open(
    input: &BridgeInput,
    snaplen: u32,
    filter: Option<&str>,
    rules: Option<Vec<Rule>>,
    stop: &Arc<Stop>,
) -> Result<Opened<BridgeSource>, EngineError> {
    let [a, b] = &input.ifnames;
    if a == b {
        return Err(EngineError::Config(format!(
            "bridge: {a} is both sides: give two interfaces"
        )));
    }
    if let Some(expr) = filter {
        rules::compile_expr(expr, LinkType::Ethernet, snaplen, stop)?;
    }
    let mut ports = Vec::new();
    for ifname in [a, b] {
        let queues = rx_queues(ifname);
        if queues > 1 {
            return Err(EngineError::Config(format!(
                "bridge: {ifname} has {queues} receive queues and the bridge takes one per \
                 interface: `ethtool -L {ifname} combined 1` (or `rx 1`)"
            )));
        }
        ports.push(Port {
            ifname: ifname.clone(),
            ifindex: iface::index(ifname)?,
        });
    }
    let ports: [Port; 2] = ports.try_into().expect("two ports");
    let promiscuous = ports
        .iter()
        .map(|p| iface::promiscuous(&p.ifname, p.ifindex))
        .collect::<Result<Vec<_>, _>>()?;
    let crossings = xsk_pair::open(&ports, input.frames)?;
    let pass = Program::load(a, "tapflow_pass", &xdp::pass_program())?;
    let mut links = Vec::new();
    let mut counters = Vec::new();
    for (p, c) in ports.iter().zip(&crossings) {
        let map = Arc::new(Map::queue_counters(&p.ifname, 1)?);
        let sockets = Map::xsk_map(&p.ifname, 1)?;
        sockets.set_socket(0, c.rx_fd())?;
        let program = Program::load(
            &p.ifname,
            "tapflow_bridge",
            &xdp::capture_program(&map, &sockets, 1),
        )?;
        links.push(XdpLink::attach_best(&program, &p.ifname, p.ifindex)?);
        counters.push(map);
    }
    let mode = format!(
        "XDP {}/{} mode, {}, {} frames shared by both directions, {a} <-> {b}",
        links[0].mode().name(),
        links[1].mode().name(),
        match crossings[0].mode() {
            BindMode::ZeroCopy => "zero-copy",
            BindMode::Copy => "copy",
        },
        input.frames,
    );
    let metrics = bridge_metrics(&crossings, &counters)?;
    let rules = LiveRules::new(rules, 2, snaplen, None)?;
    let intake = Arc::new(Intake {
        links,
        pass,
        _promiscuous: promiscuous,
        closed: AtomicBool::new(false),
    });
    let sources = crossings
        .into_iter()
        .zip(counters)
        .map(|(crossing, counters)| {
            let ifname = crossing.ifname().to_string();
            BridgeSource {
                interfaces: [InterfaceInfo {
                    linktype: LinkType::Ethernet,
                    snaplen,
                    max_frame: iface::mtu(&ifname).ok().map(|m| m + 18),
                    name: Some(ifname),
                    filter: filter.map(str::to_string),
                }],
                crossing,
                counters,
                intake: Arc::clone(&intake),
                snaplen: snaplen as usize,
                stats: SourceStats::default(),
                clock_offset: clock_offset(),
                stop: Some(Arc::clone(stop)),
            }
        })
        .collect();
    Ok(Opened {
        sources,
        input: format!("{a} <-> {b}"),
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

/// The programs on both interfaces, shared by the two directions: detached when the last of
/// them is dropped.
#[derive(Debug)]
struct Intake {
    links: Vec<XdpLink>,
    /// Swapped in to close the intake.
    pass: Program,
    _promiscuous: Vec<Promiscuous>,
    closed: AtomicBool,
}

impl Intake {
    /// Lets every frame go on to the stack from now on: the bridge stops forwarding.
    fn close(&self) -> Result<(), EngineError> {
        if !self.closed.swap(true, Ordering::AcqRel) {
            for l in &self.links {
                l.update(&self.pass)?;
            }
        }
        Ok(())
    }
}

/// Each direction's counters on `/metrics` and in the summary, labelled `direction="A->B"`.
fn bridge_metrics(
    crossings: &[Crossing; 2],
    programs: &[Arc<Map>],
) -> Result<SourceMetrics, EngineError> {
    struct Side {
        label: String,
        program: Arc<Map>,
        sent: Arc<CrossingCounters>,
        sockets: [tapflow_sys::xsk::XskStatsHandle; 2],
    }
    let names = [crossings[0].ifname(), crossings[1].ifname()];
    let sides = crossings
        .iter()
        .zip(programs)
        .enumerate()
        .map(|(i, (c, p))| {
            Ok(Side {
                label: format!("direction=\"{}->{}\"", names[i], names[1 - i]),
                program: Arc::clone(p),
                sent: c.counters(),
                sockets: c.stats_handles()?,
            })
        })
        .collect::<Result<Vec<_>, EngineError>>()?;
    Ok(SourceMetrics::new(move || {
        let now: Vec<(&str, [u64; 8])> = sides
            .iter()
            .map(|s| {
                let p = s.program.read_counters(0).unwrap_or_default();
                let beyond = s.program.read_counters(1).unwrap_or_default();
                let rx = s.sockets[0].statistics().unwrap_or_default();
                let tx = s.sockets[1].statistics().unwrap_or_default();
                (
                    s.label.as_str(),
                    [
                        p.seen + beyond.seen,
                        s.sent.forwarded.load(Ordering::Relaxed),
                        p.no_socket + beyond.no_socket,
                        rx.rx_dropped,
                        rx.rx_ring_full,
                        s.sent.tx_ring_full.load(Ordering::Relaxed),
                        tx.tx_invalid_descs,
                        s.sent.in_flight.load(Ordering::Relaxed),
                    ],
                )
            })
            .collect();
        const FAMILIES: [(&str, &str); 8] = [
            (
                "tapflow_bridge_received_total",
                "Frames the XDP program ran on, by direction.",
            ),
            (
                "tapflow_bridge_forwarded_total",
                "Frames the other interface's driver took.",
            ),
            (
                "tapflow_bridge_no_socket_total",
                "Frames with no AF_XDP socket to go to, passed to the stack.",
            ),
            (
                "tapflow_bridge_rx_dropped_total",
                "Frames the kernel dropped with no free UMEM frame (fill ring empty) or too large.",
            ),
            (
                "tapflow_bridge_rx_ring_full_total",
                "Frames the kernel dropped with the AF_XDP RX ring full.",
            ),
            (
                "tapflow_bridge_tx_ring_full_total",
                "Frames not sent because the other interface's TX ring was full.",
            ),
            (
                "tapflow_bridge_tx_invalid_total",
                "Frames the kernel refused on the TX ring.",
            ),
            (
                "tapflow_bridge_in_flight",
                "Frames on the TX ring not yet sent.",
            ),
        ];
        FAMILIES
            .iter()
            .enumerate()
            .map(|(k, (name, help))| SourceCounter {
                name,
                help,
                samples: now
                    .iter()
                    .map(|(l, v)| ((*l).to_string(), v[k] as f64))
                    .collect(),
            })
            .collect()
    }))
}

/// One direction of the bridge.
#[derive(Debug)]
pub struct BridgeSource {
    crossing: Crossing,
    /// The receiving interface's program counters.
    counters: Arc<Map>,
    intake: Arc<Intake>,
    interfaces: [InterfaceInfo; 1],
    snaplen: usize,
    stats: SourceStats,
    clock_offset: u64,
    /// Ends a wait early once raised, until the intake is closed.
    stop: Option<Arc<Stop>>,
}

impl PacketSource for BridgeSource {
    fn interfaces(&self) -> &[InterfaceInfo] {
        &self.interfaces
    }

    fn next_block<F: FnMut(&Packet<'_>)>(
        &mut self,
        timeout_ms: i32,
        _max_packets: usize,
        mut f: F,
    ) -> Result<Progress, EngineError> {
        self.crossing.flush()?;
        let wake = self.stop.as_deref().map(Stop::wake_fd);
        if !self.crossing.wait(timeout_ms, wake)? {
            self.crossing.flush()?;
            return Ok(Progress::Idle);
        }
        let flags = Flags::default()
            .with_ts_source(TsSource::Kernel)
            .with_direction(Direction::Inbound);
        let (offset, snaplen) = (self.clock_offset, self.snaplen);
        let mut now = None;
        let n = self.crossing.cross(BATCH, |fr| {
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
                drops_before: 0,
            });
        })?;
        if n == 0 {
            return Ok(Progress::Idle);
        }
        self.stats.blocks += 1;
        Ok(Progress::Block)
    }

    fn stats(&mut self) -> Result<SourceStats, EngineError> {
        let c = self.counters.read_counters(0)?;
        let beyond = self.counters.read_counters(1)?;
        let [rx, _] = self.crossing.statistics()?;
        self.stats.received = c.seen + beyond.seen;
        self.stats.dropped = c.no_socket + beyond.no_socket + rx.rx_dropped + rx.rx_ring_full;
        self.clock_offset = clock_offset();
        Ok(self.stats)
    }

    fn stop_intake(&mut self) -> Result<(), EngineError> {
        self.intake.close()?;
        self.stop = None;
        Ok(())
    }
}
