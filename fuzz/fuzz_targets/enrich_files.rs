//! Arbitrary bytes as each file enrichment reads: a networks file (TOML and CSV), CSV ranges, an
//! MMDB file and an interfaces file. Nothing may panic: a bad file is an error naming it.
#![no_main]

use std::path::Path;

use libfuzzer_sys::fuzz_target;
use tapflow_engine::enrich::interfaces::{Interfaces, parse_speed};
use tapflow_engine::enrich::mmdb::Mmdb;
use tapflow_engine::enrich::networks::Networks;
use tapflow_engine::enrich::ranges::Ranges;

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    if let Ok(n) = Networks::parse(Path::new("n.toml"), &text) {
        let _ = n.find(false, &[10; 16]);
    }
    if let Ok(n) = Networks::parse(Path::new("n.csv"), &text) {
        let _ = n.find(true, &[0x20; 16]);
    }
    if let Ok(r) = Ranges::parse(Path::new("r.csv"), data) {
        let _ = r.find("1.2.3.4".parse().unwrap());
    }
    if let Ok(i) = Interfaces::parse(Path::new("i.csv"), &text, 1) {
        assert!(i.rows.iter().all(|r| r.index > 0));
    }
    let _ = parse_speed(&text);
    if let Ok(m) = Mmdb::new(Path::new("x.mmdb"), data.to_vec()) {
        let _ = m.find("1.2.3.4".parse().unwrap());
        let _ = m.find("2001:db8::1".parse().unwrap());
    }
});
