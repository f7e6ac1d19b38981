//! Every sink a worker can hold, one line each: the list makes [`Sink`] (what a worker holds),
//! [`SinkReport`] (what one closed sink reported) and [`SinkReports`] (the reports of a whole
//! run, summed per kind of sink).
//!
//! An enum rather than a `Box<dyn RecordSink>`: the worker calls `record` for every packet,
//! and a direct call is inlined into its loop over the ring block, where the sink's per-packet
//! checks (is a file open, which format) are made once per loop.

use std::time::Duration;

use tapflow_wire::record::ControlField;

use crate::EngineError;
use crate::counters::Totals;
use crate::detect::sink::DetectSink;
use crate::sink::file::FileSink;
use crate::sink::flow::meter::FlowMeter;
use crate::sink::forward::ForwardSink;
use crate::sink::record_sink::{Outcome, RecordSink, SinkLive};
use crate::sink::text::TextSink;
use crate::source::{InterfaceInfo, LinkEvent};

macro_rules! registry {
    ($($(#[$doc:meta])* $kind:ident($sink:ty) => $field:ident,)+) => {
        /// One of a worker's sinks.
        #[derive(Debug)]
        #[allow(clippy::large_enum_variant)] // A few, in a Vec: a box would cost a load a packet.
        pub enum Sink {
            $($(#[$doc])* $kind($sink),)+
        }

        /// What one sink reported when it closed.
        #[derive(Debug, Clone)]
        pub enum SinkReport {
            $($(#[$doc])* $kind(<$sink as RecordSink>::Report),)+
        }

        /// What the sinks of a run reported, summed over workers per kind of sink.
        #[derive(Debug, Clone, Default)]
        pub struct SinkReports {
            $($(#[$doc])* pub $field: Option<<$sink as RecordSink>::Report>,)+
        }

        impl SinkReports {
            /// Adds one closed sink's report.
            pub fn add(&mut self, r: &SinkReport) {
                match r {
                    $(SinkReport::$kind(x) => self.$field.get_or_insert_with(Default::default).add(x),)+
                }
            }
        }

        $(impl From<$sink> for Sink {
            fn from(s: $sink) -> Sink {
                Sink::$kind(s)
            }
        })+

        impl Sink {
            /// See [`RecordSink::wants_ip_sum`].
            pub fn wants_ip_sum(&self) -> bool {
                match self {
                    $(Sink::$kind(s) => s.wants_ip_sum(),)+
                }
            }

            /// See [`RecordSink::takes_original_addresses`].
            #[inline(always)]
            pub fn takes_original_addresses(&self) -> bool {
                match self {
                    $(Sink::$kind(s) => s.takes_original_addresses(),)+
                }
            }

            /// See [`RecordSink::add_interface`].
            pub fn add_interface(&mut self, info: &InterfaceInfo) -> Result<(), EngineError> {
                match self {
                    $(Sink::$kind(s) => s.add_interface(info),)+
                }
            }

            /// See [`RecordSink::record`].
            #[inline(always)]
            pub fn record(
                &mut self,
                interface: u32,
                drops_before: u64,
                ctl: &ControlField,
                data: &[u8],
            ) -> Result<(), EngineError> {
                match self {
                    $(Sink::$kind(s) => s.record(interface, drops_before, ctl, data),)+
                }
            }

            /// See [`RecordSink::end_of_block`].
            pub fn end_of_block(
                &mut self,
                totals: &Totals,
                if_stats: Option<(u64, u64)>,
            ) -> Result<(), EngineError> {
                match self {
                    $(Sink::$kind(s) => s.end_of_block(totals, if_stats),)+
                }
            }

            /// See [`RecordSink::link_changed`].
            pub fn link_changed(
                &mut self,
                event: &LinkEvent,
                totals: &Totals,
                if_stats: Option<(u64, u64)>,
            ) -> Result<(), EngineError> {
                match self {
                    $(Sink::$kind(s) => s.link_changed(event, totals, if_stats),)+
                }
            }

            /// See [`RecordSink::wake_within`].
            pub fn wake_within(&self) -> Option<Duration> {
                match self {
                    $(Sink::$kind(s) => s.wake_within(),)+
                }
            }

            /// See [`RecordSink::live`].
            pub fn live(&self) -> SinkLive {
                match self {
                    $(Sink::$kind(s) => s.live(),)+
                }
            }

            /// See [`RecordSink::lost`].
            pub fn lost(&self) -> u64 {
                match self {
                    $(Sink::$kind(s) => s.lost(),)+
                }
            }

            /// See [`RecordSink::close`].
            pub fn close(
                &mut self,
                totals: &Totals,
                if_stats: Option<(u64, u64)>,
            ) -> Result<SinkReport, EngineError> {
                Ok(match self {
                    $(Sink::$kind(s) => SinkReport::$kind(s.close(totals, if_stats)?),)+
                })
            }
        }
    };
}

registry! {
    /// A pcapng or pcap file.
    File(FileSink) => file,
    /// Header records to collectors over UDP.
    Forward(ForwardSink) => forward,
    /// A flow meter.
    Flows(FlowMeter) => flows,
    /// A line per packet on standard output.
    Text(TextSink) => text,
    /// Flood detection.
    Detect(DetectSink) => detect,
}
