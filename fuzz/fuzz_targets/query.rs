//! Arbitrary text as `tapflow query`'s filter words, time window and keys. Parsing never
//! panics; an error names what was wrong; a parsed filter tests a flow without panicking, and a
//! parsed window ends after it starts.
#![no_main]

use libfuzzer_sys::fuzz_target;
use tapflow_store::query::filter::{OneWay, parse};
use tapflow_store::query::time::parse_window;
use tapflow_store::query::{Key, Metric, QueryError};

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    match parse(text) {
        Ok(f) => {
            let _ = f.matches(&OneWay::default());
        }
        Err(QueryError::Parse(m)) => assert!(!m.is_empty()),
        Err(e) => panic!("not a parse error: {e}"),
    }
    if let Ok(w) = parse_window(text, 1_795_600_800_000_000) {
        assert!(w.start_us < w.end_us, "{text}: {w:?}");
    }
    let _ = text.parse::<Key>();
    let _ = text.parse::<Metric>();
});
