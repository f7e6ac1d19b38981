//! Detection on the flow stream, as a [`FlowStore`] beside the collector's stores: the store
//! thread hands it every batch it hands them, so it never takes a flow from a store.

use tapflow_store::{
    ExporterStats, FlowStore, InterfaceCounters, InterfaceName, StoreError, StoreReport, StoredFlow,
};

use crate::detect::detector::{Hub, INTERVAL_S};
use crate::detect::meter::Meter;
use crate::detect::signature::Observation;

/// Flow records into a detector.
#[derive(Debug)]
pub struct DetectStore {
    meter: Meter,
    received: u64,
    /// Whether intervals follow the wall clock (a live collector) besides the records.
    realtime: bool,
}

impl DetectStore {
    /// A stage feeding `hub` (as its worker 0); `realtime` for a live collector.
    pub fn new(hub: Hub, realtime: bool) -> DetectStore {
        DetectStore {
            meter: Meter::new(hub, 0),
            received: 0,
            realtime,
        }
    }

    /// Counts `flows`, each at the time the collector received it.
    pub fn observe(&mut self, flows: &[StoredFlow]) {
        for f in flows {
            let at = if f.received_ns > 0 {
                f.received_ns
            } else {
                f.flow.end_ns()
            };
            for o in Observation::of_flow(&f.flow, INTERVAL_S * 1_000_000_000)
                .iter()
                .flatten()
            {
                self.meter.observe(at, o);
            }
        }
        self.received += flows.len() as u64;
    }
}

impl FlowStore for DetectStore {
    fn insert(&mut self, flows: &[StoredFlow]) -> Result<(), StoreError> {
        self.observe(flows);
        Ok(())
    }

    fn insert_interfaces(&mut self, _names: &[InterfaceName]) -> Result<(), StoreError> {
        Ok(())
    }

    fn insert_exporter_stats(&mut self, _stats: &[ExporterStats]) -> Result<(), StoreError> {
        Ok(())
    }

    fn insert_if_counters(&mut self, _counters: &[InterfaceCounters]) -> Result<(), StoreError> {
        Ok(())
    }

    fn flush(&mut self) -> Result<(), StoreError> {
        if self.realtime {
            self.meter.tick(tapflow_sys::clock::realtime_ns());
        }
        Ok(())
    }

    fn report(&self) -> StoreReport {
        StoreReport {
            received: self.received,
            stored: self.received,
            dropped: 0,
            pending: 0,
        }
    }

    fn close(mut self: Box<Self>) -> Result<StoreReport, StoreError> {
        self.meter.finish();
        Ok(self.report())
    }
}
