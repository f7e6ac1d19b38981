//! A store in front of another that anonymises the flows' addresses first (Crypto-PAn,
//! prefix-preserving, keyed: `collect --anonymize`). Exporter addresses are kept: they name the
//! operator's own routers, not the traffic.

use tapflow_wire::cryptopan::Anonymizer;

use crate::{
    ExporterStats, FlowStore, InterfaceCounters, InterfaceName, StoreError, StoreReport, StoredFlow,
};

/// Rewrites each flow's source and destination addresses, then hands the batch on.
#[derive(Debug)]
pub struct AnonymizedStore {
    inner: Box<dyn FlowStore>,
    anon: Anonymizer,
    batch: Vec<StoredFlow>,
}

impl AnonymizedStore {
    /// `inner`, fed through `anon`.
    pub fn new(inner: Box<dyn FlowStore>, anon: Anonymizer) -> AnonymizedStore {
        AnonymizedStore {
            inner,
            anon,
            batch: Vec::new(),
        }
    }
}

impl FlowStore for AnonymizedStore {
    fn insert(&mut self, flows: &[StoredFlow]) -> Result<(), StoreError> {
        self.batch.clear();
        self.batch.extend_from_slice(flows);
        for f in &mut self.batch {
            self.anon.flow_record(&mut f.flow);
        }
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

#[cfg(test)]
mod tests {
    use super::*;
    use tapflow_wire::cryptopan::CryptoPan;

    /// Keeps what it is given, for the test below.
    #[derive(Debug, Default)]
    struct Kept(std::sync::Arc<std::sync::Mutex<Vec<StoredFlow>>>);

    impl FlowStore for Kept {
        fn insert(&mut self, flows: &[StoredFlow]) -> Result<(), StoreError> {
            self.0.lock().unwrap().extend_from_slice(flows);
            Ok(())
        }
        fn insert_interfaces(&mut self, _: &[InterfaceName]) -> Result<(), StoreError> {
            Ok(())
        }
        fn insert_exporter_stats(&mut self, _: &[ExporterStats]) -> Result<(), StoreError> {
            Ok(())
        }
        fn insert_if_counters(&mut self, _: &[InterfaceCounters]) -> Result<(), StoreError> {
            Ok(())
        }
        fn flush(&mut self) -> Result<(), StoreError> {
            Ok(())
        }
        fn report(&self) -> StoreReport {
            StoreReport::default()
        }
        fn close(self: Box<Self>) -> Result<StoreReport, StoreError> {
            Ok(StoreReport::default())
        }
    }

    #[test]
    fn addresses_are_rewritten_as_the_exporter_does_and_exporters_kept() {
        let key: [u8; 32] = core::array::from_fn(|i| i as u8);
        let kept = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        let mut s = AnonymizedStore::new(
            Box::new(Kept(kept.clone())),
            Anonymizer::new(CryptoPan::new(&key)),
        );
        let mut f = StoredFlow::default();
        f.flow.src[..4].copy_from_slice(&[10, 1, 2, 3]);
        f.flow.dst[..4].copy_from_slice(&[192, 0, 2, 9]);
        f.exporter = crate::schema::addr16(
            false,
            &[198, 51, 100, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0],
        );
        s.insert(&[f]).unwrap();
        let out = kept.lock().unwrap()[0];
        let mut want = f.flow;
        Anonymizer::new(CryptoPan::new(&key)).flow_record(&mut want);
        assert_eq!(out.flow, want);
        assert_ne!(out.flow.src, f.flow.src);
        assert_eq!(out.exporter, f.exporter);
    }
}
