//! A store in front of another that anonymises the flows' addresses first (Crypto-PAn,
//! prefix-preserving, keyed: `collect --anonymize`). Exporter addresses are kept: they name the
//! operator's own routers, not the traffic.

use tapflow_wire::cryptopan::Anonymizer;

use crate::StoredFlow;
use crate::rewritten::{Rewrite, Rewritten};

/// Rewrites each flow's source and destination addresses, then hands the batch on:
/// `AnonymizedStore::new(inner, anonymizer)`.
pub type AnonymizedStore = Rewritten<Anonymizer>;

impl Rewrite for Anonymizer {
    fn rewrite(&mut self, flows: &mut [StoredFlow]) {
        for f in flows {
            self.flow_record(&mut f.flow);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{
        ExporterStats, FlowStore, InterfaceCounters, InterfaceName, StoreError, StoreReport,
    };
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
