//! The packet-source trait: live rings, capture files, and (later) AF_XDP.

pub mod file;
pub mod ring;

use tapflow_wire::{Flags, LinkType};

use crate::EngineError;

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
}

/// Counters a source keeps about its input.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct SourceStats {
    /// Packets offered (Σ `tp_packets`, or packets read).
    pub received: u64,
    /// Packets dropped before us (Σ `tp_drops`).
    pub dropped: u64,
    /// Ring freezes (Σ `tp_freeze_q_cnt`).
    pub freezes: u64,
    /// Ring blocks handed to user space.
    pub blocks: u64,
    /// Interface-level received packets, if known (`isb_ifrecv`).
    pub if_received: Option<u64>,
    /// Interface-level drops, if known (`isb_ifdrop`).
    pub if_dropped: Option<u64>,
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
}
