//! A store in front of another that enriches each flow first: AS, country and network of both
//! addresses ([`super::Enricher`]). In front of anonymisation, so lookups see the real
//! addresses.

use std::sync::Arc;

use tapflow_store::{
    ExporterStats, FlowStore, InterfaceCounters, InterfaceName, StoreError, StoreReport, StoredFlow,
};

use super::{Enricher, Source};

/// Sets each flow's places, then hands the batch on.
#[derive(Debug)]
pub struct EnrichedStore {
    inner: Box<dyn FlowStore>,
    enricher: Enricher,
    batch: Vec<StoredFlow>,
}

impl EnrichedStore {
    /// `inner`, fed through an enricher over `source`.
    pub fn new(inner: Box<dyn FlowStore>, source: Arc<Source>) -> EnrichedStore {
        EnrichedStore {
            inner,
            enricher: Enricher::new(source),
            batch: Vec::new(),
        }
    }
}

impl FlowStore for EnrichedStore {
    fn insert(&mut self, flows: &[StoredFlow]) -> Result<(), StoreError> {
        self.batch.clear();
        self.batch.extend_from_slice(flows);
        self.enricher.enrich(&mut self.batch);
        self.inner.insert(&self.batch)
    }

    fn insert_interfaces(&mut self, names: &[InterfaceName]) -> Result<(), StoreError> {
        self.inner.insert_interfaces(names)
    }

    fn insert_exporter_stats(&mut self, stats: &[ExporterStats]) -> Result<(), StoreError> {
        self.inner.insert_exporter_stats(stats)
    }

    fn insert_if_counters(&mut self, counters: &[InterfaceCounters]) -> Result<(), StoreError> {
        self.inner.insert_if_counters(counters)
    }

    fn flush(&mut self) -> Result<(), StoreError> {
        self.inner.flush()
    }

    fn report(&self) -> StoreReport {
        self.inner.report()
    }

    fn close(self: Box<Self>) -> Result<StoreReport, StoreError> {
        self.inner.close()
    }
}
