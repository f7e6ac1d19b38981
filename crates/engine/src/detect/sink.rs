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
    /// Packets still to pass uncounted before the next sampled one.
    skip: u64,
    /// The sampler's state (xorshift).
    rng: u64,
}

/// What the sinks counted.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct DetectSinkReport {
    /// IP packets counted (each sampled one once).
    pub packets: u64,
    /// Packets that were not IP (not counted).
    pub not_ip: u64,
    /// Packets passed over by sampling, over [`crate::detect::meter::EXACT_PER_SECOND`].
    pub not_sampled: u64,
}

impl Outcome for DetectSinkReport {
    fn add(&mut self, o: &Self) {
        self.packets += o.packets;
        self.not_ip += o.not_ip;
        self.not_sampled += o.not_sampled;
    }
}

impl DetectSink {
    /// A sink counting into `meter`; `realtime` for a live input.
    pub fn new(meter: Meter, realtime: bool) -> DetectSink {
        DetectSink {
            meter: meter.sampling(),
            linktypes: Vec::new(),
            realtime,
            report: DetectSinkReport::default(),
            skip: 0,
            rng: 0x9e37_79b9_7f4a_7c15,
        }
    }

    /// The packets to pass over before the next sampled one at sampling period `period`:
    /// uniform over 0..=2·(period − 1), so one packet in `period` on average and none in step
    /// with a periodic pattern of the traffic.
    #[inline]
    fn gap(&mut self, period: u64) -> u64 {
        if period <= 1 {
            return 0;
        }
        self.rng ^= self.rng << 13;
        self.rng ^= self.rng >> 7;
        self.rng ^= self.rng << 17;
        self.rng % (2 * period - 1)
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
        // Over a flood, most packets pass uncounted, before any parsing.
        if self.skip > 0 {
            self.skip -= 1;
            self.report.not_sampled += 1;
            return Ok(());
        }
        let linktype = self
            .linktypes
            .get(interface as usize)
            .copied()
            .unwrap_or(LinkType::Unknown(0));
        match FlowFields::of_frame(linktype, data, ctl.orig_len()) {
            Some(f) => {
                self.report.packets += 1;
                let mut o = Observation::packet(&f);
                let period = self.meter.period();
                (o.packets, o.bytes) = (period, o.bytes * period);
                self.meter.observe(ctl.rxtime, &o);
                // The period may have changed with the interval this packet opened.
                let period = self.meter.period();
                self.skip = self.gap(period);
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
