//! The flow exporter as a [`FlowStore`]: flows a collector keeps are re-encoded for every
//! export output (`json:`, `csv:`, `ipfix://`, `nfv9://`, ...), which turns `tapflow collect`
//! into a converter and a relay.
//!
//! These formats carry flows only: interface names and exporter counters are not written.

use tapflow_store::{FlowStore, InterfaceName, StoreError, StoreReport, StoredFlow};
use tapflow_wire::flowrecord::FlowRecord;

use crate::EngineError;
use crate::sink::flow::export::{BATCH, ExportConfig, ExportQueue, Exporter, MeterClock};

/// A [`FlowStore`] that hands flows to a running [`Exporter`].
#[derive(Debug)]
pub struct ExportStore {
    exporter: Exporter,
    queue: ExportQueue,
    batch: Vec<FlowRecord>,
    /// The NetFlow "boot time": the earliest flow start seen, so every record's times are
    /// after it.
    epoch_ns: u64,
    received: u64,
}

impl ExportStore {
    /// Opens every output of `cfg` (a bad address or path fails here) and starts the exporter.
    pub fn start(cfg: &ExportConfig) -> Result<ExportStore, EngineError> {
        let exporter = Exporter::start(cfg, MeterClock::Wall)?;
        let queue = exporter.queue();
        Ok(ExportStore {
            exporter,
            queue,
            batch: Vec::with_capacity(BATCH),
            epoch_ns: u64::MAX,
            received: 0,
        })
    }

    fn send(&mut self) -> Result<(), StoreError> {
        if self.batch.is_empty() {
            return Ok(());
        }
        let n = self.batch.len();
        let now = tapflow_sys::clock::realtime_ns();
        self.queue
            .send(&mut self.batch, now, self.epoch_ns.min(now))
            .map_err(|e| StoreError::Other(format!("{e}: {n} flows not exported")))
    }
}

impl FlowStore for ExportStore {
    fn insert(&mut self, flows: &[StoredFlow]) -> Result<(), StoreError> {
        self.received += flows.len() as u64;
        for f in flows {
            self.epoch_ns = self.epoch_ns.min(f.flow.start_ns());
            self.batch.push(f.flow);
            if self.batch.len() >= BATCH {
                self.send()?;
            }
        }
        Ok(())
    }

    fn insert_interfaces(&mut self, _names: &[InterfaceName]) -> Result<(), StoreError> {
        Ok(())
    }

    fn insert_exporter_stats(
        &mut self,
        _stats: &[tapflow_store::ExporterStats],
    ) -> Result<(), StoreError> {
        Ok(())
    }

    fn insert_if_counters(
        &mut self,
        _rows: &[tapflow_store::InterfaceCounters],
    ) -> Result<(), StoreError> {
        Ok(())
    }

    fn flush(&mut self) -> Result<(), StoreError> {
        self.send()
    }

    fn report(&self) -> StoreReport {
        StoreReport {
            received: self.received,
            pending: self.received,
            ..StoreReport::default()
        }
    }

    /// Ends the export. A message an output lost (a refused datagram, a broken TCP session)
    /// counts as the mean number of records of that output's messages.
    fn close(mut self: Box<Self>) -> Result<StoreReport, StoreError> {
        let sent = self.send();
        let ExportStore {
            exporter,
            queue,
            received,
            ..
        } = *self;
        drop(queue);
        let report = exporter.finish();
        let dropped = report
            .outputs
            .iter()
            .map(|o| {
                let per_message = o.records.div_ceil(o.messages.max(1)).max(1);
                o.lost_records + o.not_encodable + o.lost_messages * per_message
            })
            .max()
            .unwrap_or(0)
            .min(received);
        sent?;
        Ok(StoreReport {
            received,
            stored: received - dropped,
            dropped,
            pending: 0,
        })
    }
}
