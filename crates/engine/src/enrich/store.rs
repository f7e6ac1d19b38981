//! A store in front of another that enriches each flow first: AS, country and network of both
//! addresses ([`super::Enricher`]). In front of anonymisation, so lookups see the real
//! addresses.

use tapflow_store::StoredFlow;
use tapflow_store::rewritten::{Rewrite, Rewritten};

use super::Enricher;

/// Sets each flow's places, then hands the batch on:
/// `EnrichedStore::new(inner, Enricher::new(source))`.
pub type EnrichedStore = Rewritten<Enricher>;

impl Rewrite for Enricher {
    fn rewrite(&mut self, flows: &mut [StoredFlow]) {
        self.enrich(flows);
    }
}
