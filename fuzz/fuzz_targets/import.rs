//! Arbitrary bytes as a file for `tapflow import` (`import::import`, JSON lines or CSV).
//! Reading never panics; a line is either one flow handed to the store or the error that ends
//! the import; a flow's text form, printed as CSV, parses back to the same record.
#![no_main]

use libfuzzer_sys::fuzz_target;
use tapflow_store::import::{self, CSV_HEADER, Format};
use tapflow_store::{
    ExporterStats, FlowStore, InterfaceCounters, InterfaceName, StoreError, StoreReport, StoredFlow,
};

/// A store that keeps what it is given.
#[derive(Debug, Default)]
struct Kept(Vec<StoredFlow>);

impl FlowStore for Kept {
    fn insert(&mut self, flows: &[StoredFlow]) -> Result<(), StoreError> {
        self.0.extend_from_slice(flows);
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

fuzz_target!(|data: &[u8]| {
    let mut kept = Kept::default();
    let result = import::import(&mut &data[..], "fuzz", 0, &mut kept);
    let lines = data.split(|&b| b == b'\n').count() as u64;
    match result {
        Ok(n) => {
            assert_eq!(n.flows, kept.0.len() as u64);
            assert!(n.lines <= lines);
        }
        Err(e) => assert!(e.to_string().starts_with("fuzz:"), "{e}"),
    }
    for s in &kept.0 {
        let f = &s.flow;
        let addr = |a: &[u8; 16]| -> String {
            if f.ipv6 {
                std::net::Ipv6Addr::from(*a).to_string()
            } else {
                std::net::Ipv4Addr::new(a[0], a[1], a[2], a[3]).to_string()
            }
        };
        let line = format!(
            "{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{}",
            f.proto, addr(&f.src), f.sport, addr(&f.dst), f.dport, f.vlan, f.interface,
            f.fwd.first_ns, f.fwd.last_ns, f.fwd.packets, f.fwd.octets, f.fwd.tcp_flags,
            f.rev.first_ns, f.rev.last_ns, f.rev.packets, f.rev.octets, f.rev.tcp_flags,
            f.end_reason.name()
        );
        assert_eq!(CSV_HEADER.split(',').count(), line.split(',').count());
        assert_eq!(import::parse_line(Format::Csv, &line).as_ref(), Ok(f), "{line}");
    }
});
