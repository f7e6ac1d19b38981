//! A store in front of another that rewrites each batch of flows first, then hands it on:
//! anonymisation ([`crate::anonymized`]) and enrichment use it. Everything else the store
//! takes goes straight through.

use crate::{
    ExporterStats, FlowStore, InterfaceCounters, InterfaceName, StoreError, StoreReport, StoredFlow,
};

/// What a [`Rewritten`] store does to each batch of flows before the store behind it takes it.
pub trait Rewrite: Send + std::fmt::Debug {
    /// Rewrites `flows` in place.
    fn rewrite(&mut self, flows: &mut [StoredFlow]);

    /// Interface names to store before the next batch of flows (the operator's interfaces
    /// file, newly loaded), if any.
    fn names(&mut self) -> Option<Vec<InterfaceName>> {
        None
    }
}

/// `inner`, fed each batch of flows through a [`Rewrite`] (on a copy: the caller's flows are
/// left as they were).
#[derive(Debug)]
pub struct Rewritten<R> {
    inner: Box<dyn FlowStore>,
    rewrite: R,
    batch: Vec<StoredFlow>,
}

impl<R: Rewrite> Rewritten<R> {
    /// `inner`, fed through `rewrite`.
    pub fn new(inner: Box<dyn FlowStore>, rewrite: R) -> Rewritten<R> {
        Rewritten {
            inner,
            rewrite,
            batch: Vec::new(),
        }
    }
}

impl<R: Rewrite> FlowStore for Rewritten<R> {
    fn insert(&mut self, flows: &[StoredFlow]) -> Result<(), StoreError> {
        if let Some(names) = self.rewrite.names() {
            self.inner.insert_interfaces(&names)?;
        }
        self.batch.clear();
        self.batch.extend_from_slice(flows);
        self.rewrite.rewrite(&mut self.batch);
        self.inner.insert(&self.batch)
    }

    fn insert_interfaces(&mut self, names: &[InterfaceName]) -> Result<(), StoreError> {
        self.inner.insert_interfaces(names)
    }

    fn insert_exporter_stats(&mut self, stats: &[ExporterStats]) -> Result<(), StoreError> {
        self.inner.insert_exporter_stats(stats)
    }

    fn insert_if_counters(&mut self, rows: &[InterfaceCounters]) -> Result<(), StoreError> {
        self.inner.insert_if_counters(rows)
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
