//! A store in front of another that enriches each flow first: AS, country and network of both
//! addresses ([`super::Enricher`]), and stores the interfaces file's names at each load. In
//! front of anonymisation, so lookups see the real addresses.

use tapflow_store::rewritten::{Rewrite, Rewritten};
use tapflow_store::{InterfaceName, StoredFlow};

use super::Enricher;

/// Sets each flow's places, then hands the batch on:
/// `EnrichedStore::new(inner, Enricher::new(source))`.
pub type EnrichedStore = Rewritten<Enricher>;

impl Rewrite for Enricher {
    fn rewrite(&mut self, flows: &mut [StoredFlow]) {
        self.enrich(flows);
    }

    fn names(&mut self) -> Option<Vec<InterfaceName>> {
        self.new_interfaces().map(<[InterfaceName]>::to_vec)
    }
}
