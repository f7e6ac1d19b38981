//! Detection on the packet stream: a worker's sink that reads each packet's flow fields and
//! counts it in the worker's [`Meter`].

use std::time::Duration;

use serde::Serialize;
use tapflow_wire::flowkey::FlowFields;
use tapflow_wire::linktype::LinkType;
use tapflow_wire::record::ControlField;

use crate::EngineError;
use crate::counters::Totals;
use crate::detect::meter::Meter;
use crate::detect::signature::Observation;
use crate::sink::record_sink::{Outcome, RecordSink};
use crate::source::InterfaceInfo;

/// A worker's detection sink.
#[derive(Debug)]
pub struct DetectSink {
    meter: Meter,
    linktypes: Vec<LinkType>,
    /// Whether the clock moves intervals on while no packet comes (a live input).
    realtime: bool,
    report: DetectSinkReport,
}

/// What the sinks counted.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct DetectSinkReport {
    /// IP packets counted.
    pub packets: u64,
    /// Packets that were not IP (not counted).
    pub not_ip: u64,
}

impl Outcome for DetectSinkReport {
    fn add(&mut self, o: &Self) {
        self.packets += o.packets;
        self.not_ip += o.not_ip;
    }
}

impl DetectSink {
    /// A sink counting into `meter`; `realtime` for a live input.
    pub fn new(meter: Meter, realtime: bool) -> DetectSink {
        DetectSink {
            meter,
            linktypes: Vec::new(),
            realtime,
            report: DetectSinkReport::default(),
        }
    }
}

impl RecordSink for DetectSink {
    type Report = DetectSinkReport;

    fn add_interface(&mut self, info: &InterfaceInfo) -> Result<(), EngineError> {
        self.linktypes.push(info.linktype);
        Ok(())
    }

    #[inline(always)]
    fn record(
        &mut self,
        interface: u32,
        _drops_before: u64,
        ctl: &ControlField,
        data: &[u8],
    ) -> Result<(), EngineError> {
        let linktype = self
            .linktypes
            .get(interface as usize)
            .copied()
            .unwrap_or(LinkType::Unknown(0));
        match FlowFields::of_frame(linktype, data, ctl.orig_len()) {
            Some(f) => {
                self.report.packets += 1;
                self.meter.observe(ctl.rxtime, &Observation::packet(&f));
            }
            None => self.report.not_ip += 1,
        }
        Ok(())
    }

    fn end_of_block(
        &mut self,
        _totals: &Totals,
        _if_stats: Option<(u64, u64)>,
    ) -> Result<(), EngineError> {
        if self.realtime {
            self.meter.tick(tapflow_sys::clock::realtime_ns());
        }
        Ok(())
    }

    fn wake_within(&self) -> Option<Duration> {
        self.realtime.then_some(Duration::from_millis(250))
    }

    fn close(
        &mut self,
        _totals: &Totals,
        _if_stats: Option<(u64, u64)>,
    ) -> Result<DetectSinkReport, EngineError> {
        self.meter.finish();
        Ok(self.report.clone())
    }
}
