//! The contract between a worker and its sinks: [`RecordSink`], called per record in the
//! worker's own thread, and what a sink reports while it runs and when it closes.

use std::time::Duration;

use serde::{Deserialize, Serialize};
use tapflow_wire::record::ControlField;

use crate::EngineError;
use crate::counters::Totals;
use crate::source::{InterfaceInfo, LinkEvent};

/// A consumer of header records, owned by one worker.
pub trait RecordSink: Send + std::fmt::Debug {
    /// What the sink reports when it closes, summed over workers.
    type Report: Outcome;

    /// Whether this sink reads the control field's whole-IP checksum (`CKSUM_WHOLE`). The
    /// worker sums the IP packet only if one of its sinks does: only a sink that passes the
    /// control field on (forwarding) needs it; a file keeps the bytes themselves.
    fn wants_ip_sum(&self) -> bool {
        false
    }

    /// Whether this sink takes records with the addresses as captured when the capture
    /// anonymises them: the flow meter does, and anonymises its flow records instead, once per
    /// record rather than per packet.
    fn takes_original_addresses(&self) -> bool {
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

    /// The link of interface `event.interface` went down or came back (see [`LinkEvent`]):
    /// the moment to mark the gap in the output. `totals` and `if_stats` are as in
    /// [`RecordSink::end_of_block`], read at the event. Nothing by default.
    fn link_changed(
        &mut self,
        event: &LinkEvent,
        totals: &Totals,
        if_stats: Option<(u64, u64)>,
    ) -> Result<(), EngineError> {
        let _ = (event, totals, if_stats);
        Ok(())
    }

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

    /// Records this sink accepted but could not keep (a write that failed, a full disk): the
    /// worker moves them from `recorded` to `dropped_ours` when the sink has closed.
    fn lost(&self) -> u64 {
        0
    }

    /// The worker has drained; `totals` are its final counts and `if_stats` the interface's
    /// last, read with them. Finish everything.
    fn close(
        &mut self,
        totals: &Totals,
        if_stats: Option<(u64, u64)>,
    ) -> Result<Self::Report, EngineError>;
}

/// A sink's report at close, summed over the workers that each had one.
pub trait Outcome: std::fmt::Debug + Default + Clone + Send {
    /// Adds another worker's report of the same sink.
    fn add(&mut self, other: &Self);
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
