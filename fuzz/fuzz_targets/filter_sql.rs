//! Arbitrary text as a filter, through the parser to the ClickHouse SQL of both dialects. Never
//! panics nor overflows the stack: a parsed filter nests at most `MAX_DEPTH` levels, and its
//! SQL's parentheses at most two per level (an `or` holding an `and`) and four around them (the
//! outermost `or` and `and`, a port range's `and` or an address's two ends).
#![no_main]

use libfuzzer_sys::fuzz_target;
use tapflow_store::clickhouse::{Dialect, filter_sql};
use tapflow_store::query::QueryError;
use tapflow_store::query::filter::{MAX_DEPTH, MAX_LEN, OneWay, parse};

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let f = match parse(text) {
        Ok(f) => f,
        Err(QueryError::Parse(m)) => {
            assert!(m.starts_with("filter:") || m.contains("empty"), "{m}");
            return;
        }
        Err(e) => panic!("not a parse error: {e}"),
    };
    assert!(text.len() <= MAX_LEN);
    assert!(f.depth() <= 2 * MAX_DEPTH + 4, "{}", f.depth());
    let _ = f.matches(&OneWay::default());
    for d in [Dialect::Legacy, Dialect::Current] {
        let sql = filter_sql(&f, d);
        let (mut depth, mut deepest) = (0usize, 0usize);
        for c in sql.chars() {
            match c {
                '(' => depth += 1,
                ')' => depth = depth.checked_sub(1).expect("balanced parentheses"),
                _ => {}
            }
            deepest = deepest.max(depth);
        }
        assert_eq!(depth, 0, "{sql}");
        assert!(deepest <= 2 * MAX_DEPTH + 4, "{deepest}: {sql}");
    }
});
