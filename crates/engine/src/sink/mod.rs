//! Record sinks: where a worker's header records go (files, collectors, ...). A worker calls
//! its sinks directly, one record at a time, in its own thread: no queue, no copy in between.
//! A sink that must wait for a device or a network does that in a thread of its own. A new
//! output is one new `RecordSink`, and a variant of [`Sink`].

pub mod file;
pub mod flow;
pub mod forward;

use std::path::PathBuf;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use tapflow_wire::record::ControlField;

use crate::EngineError;
use crate::counters::Totals;
use crate::sink::file::FileSink;
use crate::sink::flow::meter::FlowMeter;
use crate::sink::forward::ForwardSink;
use crate::source::InterfaceInfo;

/// A consumer of header records, owned by one worker.
pub trait RecordSink: Send + std::fmt::Debug {
    /// Whether this sink reads the control field's whole-IP checksum (`CKSUM_WHOLE`). The
    /// worker sums the IP packet only if one of its sinks does: only a sink that passes the
    /// control field on (forwarding) needs it; a file keeps the bytes themselves.
    fn wants_ip_sum(&self) -> bool {
        false
    }

    /// A new interface; its index is the number of interfaces announced before it.
    fn add_interface(&mut self, info: &InterfaceInfo) -> Result<(), EngineError>;

    /// One header record of interface `interface`: the control field and the captured bytes.
    /// `drops_before` packets were lost just before it (0 almost always). Called per packet:
    /// no allocation, no lock, no system call.
    fn record(
        &mut self,
        interface: u32,
        drops_before: u64,
        ctl: &ControlField,
        data: &[u8],
    ) -> Result<(), EngineError>;

    /// The end of a source block, or of a wait for one that found none: the moment for timers
    /// (statistics blocks, rotation by time, flushing partial datagrams). `totals` are the
    /// worker's counts so far; `if_stats` the interface's own (received, dropped) counters, if
    /// known.
    fn end_of_block(
        &mut self,
        totals: &Totals,
        if_stats: Option<(u64, u64)>,
    ) -> Result<(), EngineError>;

    /// How long an idle worker may wait for packets before this sink's next timer is due in
    /// `end_of_block`; `None` while it has none. Asked before every wait: the worker also
    /// wakes on its own at least every half second.
    fn wake_within(&self) -> Option<Duration> {
        None
    }

    /// What the sink counts while it runs, for statistics; read once per block.
    fn live(&self) -> SinkLive {
        SinkLive::default()
    }

    /// The worker has drained; `totals` are its final counts. Finish everything.
    fn close(&mut self, totals: &Totals) -> Result<SinkReport, EngineError>;
}

/// One of a worker's sinks. An enum rather than a `Box<dyn RecordSink>`: the worker calls
/// `record` for every packet, and a direct call is inlined into its loop over the ring block,
/// where the sink's per-packet checks (is a file open, which format) are made once per loop.
#[derive(Debug)]
#[allow(clippy::large_enum_variant)] // At most three, in a Vec: a box would cost a load a packet.
pub enum Sink {
    /// A pcapng or pcap file.
    File(FileSink),
    /// Header records to collectors over UDP.
    Forward(ForwardSink),
    /// A flow meter.
    Flows(FlowMeter),
}

macro_rules! each {
    ($sink:expr, $s:ident => $e:expr) => {
        match $sink {
            Sink::File($s) => $e,
            Sink::Forward($s) => $e,
            Sink::Flows($s) => $e,
        }
    };
}

impl RecordSink for Sink {
    fn wants_ip_sum(&self) -> bool {
        each!(self, s => s.wants_ip_sum())
    }

    fn add_interface(&mut self, info: &InterfaceInfo) -> Result<(), EngineError> {
        each!(self, s => s.add_interface(info))
    }

    #[inline(always)]
    fn record(
        &mut self,
        interface: u32,
        drops_before: u64,
        ctl: &ControlField,
        data: &[u8],
    ) -> Result<(), EngineError> {
        each!(self, s => s.record(interface, drops_before, ctl, data))
    }

    fn end_of_block(
        &mut self,
        totals: &Totals,
        if_stats: Option<(u64, u64)>,
    ) -> Result<(), EngineError> {
        each!(self, s => s.end_of_block(totals, if_stats))
    }

    fn wake_within(&self) -> Option<Duration> {
        each!(self, s => s.wake_within())
    }

    fn live(&self) -> SinkLive {
        each!(self, s => s.live())
    }

    fn close(&mut self, totals: &Totals) -> Result<SinkReport, EngineError> {
        each!(self, s => s.close(totals))
    }
}

/// A running sink's counters, summed over a worker's sinks.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct SinkLive {
    /// Records a forwarding sink failed to send.
    pub forward_failed: u64,
    /// Flows in a meter's table.
    pub flows_active: u64,
    /// Flow records a meter has ended and handed to the exporter.
    pub flows_exported: u64,
}

impl SinkLive {
    /// Adds another sink's counters.
    pub fn add(&mut self, o: &SinkLive) {
        self.forward_failed += o.forward_failed;
        self.flows_active += o.flows_active;
        self.flows_exported += o.flows_exported;
    }
}

/// What a sink did.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct SinkReport {
    /// Files completed, in order.
    pub files: Vec<PathBuf>,
    /// Records the sink handled.
    pub records: u64,
    /// Records the sink could not deliver (counted, never retried).
    pub failed: u64,
    /// What a forwarding sink sent, per collector.
    pub forward: Option<crate::sink::forward::ForwardReport>,
    /// What a flow meter counted.
    pub flows: Option<crate::sink::flow::meter::MeterStats>,
}
