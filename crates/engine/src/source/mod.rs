//! Where packets come from: the [`PacketSource`] trait, and what an input becomes when it is
//! opened for a run ([`Opened`]): one source per worker. A new source is one new file here
//! that implements the trait and has an `open` function, and one line in
//! [`crate::pipeline::run`] (or its own command) that calls it.

pub mod bridge;
pub mod datagrams;
pub mod file;
pub mod ring;
pub mod xdp;

use std::sync::Arc;
use std::sync::atomic::AtomicU64;

use tapflow_wire::{Flags, LinkType};

use crate::EngineError;
use crate::rules::LiveRules;
use crate::tools::plan::RingGeometry;

/// One packet as a source delivers it, borrowed from the source's memory.
#[derive(Debug, Clone, Copy)]
pub struct Packet<'a> {
    /// Captured bytes (already cut to the snaplen by the kernel for live sources).
    pub data: &'a [u8],
    /// Arrival time, ns since 1970.
    pub ts_ns: u64,
    /// Original length on the wire.
    pub len: u32,
    /// Timestamp source, direction and checksum status known so far.
    pub flags: Flags,
    /// Interface index within the source.
    pub interface: u32,
    /// An 802.1Q tag the kernel removed from `data` (`tp_vlan_tpid`, `tp_vlan_tci`).
    pub stripped_vlan: Option<(u16, u16)>,
    /// Packets lost just before this one, as the source knows it.
    pub drops_before: u64,
}

/// An interface a source captures on or a file describes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InterfaceInfo {
    /// Link type of its packets.
    pub linktype: LinkType,
    /// Snap length applied.
    pub snaplen: u32,
    /// Interface name, if known.
    pub name: Option<String>,
    /// The capture filter, if any.
    pub filter: Option<String>,
    /// Largest frame the interface carries without offload merging (MTU + link header).
    pub max_frame: Option<u32>,
}

/// What a call to [`PacketSource::next_block`] found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Progress {
    /// A block was delivered (possibly empty).
    Block,
    /// Nothing arrived before the timeout.
    Idle,
    /// The input has ended.
    End,
    /// The link of a live input went down or came back; no packet was delivered.
    Link(LinkEvent),
}

/// A live input's link going down or coming back: the edges of a gap in the capture.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LinkEvent {
    /// The link went down; every packet from before is delivered.
    Down {
        /// The interface, by index within the source.
        interface: u32,
        /// Why it is down.
        why: LinkDown,
    },
    /// The link came back; no packet from after is delivered yet.
    Up {
        /// The interface, by index within the source.
        interface: u32,
        /// How long it was down, in ns.
        down_ns: u64,
    },
}

/// Why a link is down.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LinkDown {
    /// The interface was set down (`ENETDOWN` on the socket).
    SetDown,
    /// The interface is up without a working link: no carrier (no `IFF_RUNNING`).
    NoCarrier,
}

impl LinkDown {
    /// In words, for a log line or a file comment.
    pub fn describe(self) -> &'static str {
        match self {
            LinkDown::SetDown => "set down",
            LinkDown::NoCarrier => "no carrier",
        }
    }
}

/// Counters a source keeps about its input.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct SourceStats {
    /// Packets offered (Σ `tp_packets`, or packets read).
    pub received: u64,
    /// Packets dropped before us (Σ `tp_drops`, or lost on a probe).
    pub dropped: u64,
    /// Records a probe sent that never arrived (missing datagrams).
    pub dropped_in_transit: u64,
    /// Ring freezes (Σ `tp_freeze_q_cnt`).
    pub freezes: u64,
    /// Ring blocks handed to user space.
    pub blocks: u64,
    /// Interface-level received packets, if known (`isb_ifrecv`).
    pub if_received: Option<u64>,
    /// Interface-level drops, if known (`isb_ifdrop`).
    pub if_dropped: Option<u64>,
    /// Times the link went down.
    pub link_gaps: u64,
    /// Time the link was down, in ns, the gap going on included.
    pub link_down_ns: u64,
}

/// A source of packets, delivered a block at a time.
pub trait PacketSource {
    /// The interfaces packets may name, by index.
    fn interfaces(&self) -> &[InterfaceInfo];

    /// Calls `f` for every packet of the next block, waiting up to `timeout_ms` for one.
    ///
    /// A source that can stop anywhere (a file) delivers at most `max_packets`; a ring delivers
    /// whole blocks, and the worker counts what it cannot take.
    fn next_block<F: FnMut(&Packet<'_>)>(
        &mut self,
        timeout_ms: i32,
        max_packets: usize,
        f: F,
    ) -> Result<Progress, EngineError>;

    /// Current counters; live sources poll the kernel here.
    fn stats(&mut self) -> Result<SourceStats, EngineError>;

    /// Stops new packets from entering (live sources swap in a reject-all filter) so that what
    /// is already queued can be drained and counted exactly.
    fn stop_intake(&mut self) -> Result<(), EngineError>;

    /// How far through its input the source is, as (done, total) bytes, if it knows.
    fn progress(&self) -> Option<(u64, u64)> {
        None
    }

    /// How full the source's ring was when its last block was taken, in parts per million:
    /// the part of the ring the kernel had filled and tapflow not yet given back. 0 for a
    /// source without a ring. Read once per block: no system call.
    fn ring_fill_ppm(&self) -> u64 {
        0
    }
}

/// `used` of `size` in parts per million (0 for an empty size).
pub(crate) fn ppm(used: u64, size: u64) -> u64 {
    if size == 0 {
        0
    } else {
        u64::try_from(u128::from(used.min(size)) * 1_000_000 / u128::from(size)).unwrap_or(0)
    }
}

/// An input opened for a run: one source per worker, and what the run needs to know of it.
#[derive(Debug)]
pub struct Opened<S> {
    /// One source per worker.
    pub sources: Vec<S>,
    /// The input's name: an interface, a file path, a listening address.
    pub input: String,
    /// Link type of the (first) interface.
    pub linktype: LinkType,
    /// Ring geometry of each worker, for a ring.
    pub ring: Option<RingGeometry>,
    /// How a live source other than a ring runs, in words for the start line.
    pub mode: Option<String>,
    /// Whether the NIC's clock stamps packets.
    pub hw_timestamps: bool,
    /// The rules: attached to the sources' kernel filters, or matched in user space. A live
    /// input always has them (they can be given later through the control socket).
    pub rules: Option<Arc<LiveRules>>,
    /// Whether a `-f` expression must run in user space (no kernel filter ran it).
    pub filter_in_user_space: bool,
    /// Whether packets arrive in real time (a link, a socket) rather than from a file: flows
    /// then also end by the wall clock while the input is quiet, and a file sink loads its
    /// output buffer ahead, since the input comes from another CPU's cache and leaves it the
    /// memory path.
    pub realtime: bool,
    /// How long a drain waits for the source to stay quiet before it concludes it is empty.
    pub drain_quiet: std::time::Duration,
    /// Bytes of input done (shared with the source) and the total, for a progress bar.
    pub progress: Option<(Arc<AtomicU64>, u64)>,
    /// What the source counts of itself beyond the totals, for `/metrics`.
    pub metrics: Option<SourceMetrics>,
}

/// A counter a source reports of itself on `/metrics`: its name, help, and samples as
/// (labels, value).
#[derive(Debug, Clone, PartialEq)]
pub struct SourceCounter {
    /// The metric's name, `tapflow_...`.
    pub name: &'static str,
    /// One line of help.
    pub help: &'static str,
    /// Each series: its labels (`a="x",b="y"`, escaped) and value.
    pub samples: Vec<(String, f64)>,
}

/// The source's counters now, read by `/metrics` on each scrape.
#[derive(Clone)]
pub struct SourceMetrics(Arc<dyn Fn() -> Vec<SourceCounter> + Send + Sync>);

impl SourceMetrics {
    /// Counters that `read` makes on each scrape.
    pub fn new(read: impl Fn() -> Vec<SourceCounter> + Send + Sync + 'static) -> SourceMetrics {
        SourceMetrics(Arc::new(read))
    }

    /// The counters now.
    pub fn read(&self) -> Vec<SourceCounter> {
        (self.0)()
    }
}

impl std::fmt::Debug for SourceMetrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("SourceMetrics")
    }
}
