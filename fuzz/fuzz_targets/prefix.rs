//! Arbitrary text as an address prefix, as rules, query filters and `--allow` read one. Parsing
//! never panics; a parsed prefix holds its own address, prints in a canonical form that parses
//! back to itself, and the lenient parse agrees with the strict one wherever that succeeds.
#![no_main]

use libfuzzer_sys::fuzz_target;
use tapflow_wire::prefix::Prefix;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let strict = text.parse::<Prefix>();
    let covering = Prefix::parse_covering(text);
    if let Ok(p) = &strict {
        assert_eq!(covering.as_ref().ok(), Some(p), "{text:?}");
    }
    if let Ok(p) = covering {
        assert!(p.contains_ip(p.ip()), "{text:?}");
        let shown = p.to_string();
        assert_eq!(shown.parse::<Prefix>().as_ref(), Ok(&p), "{text:?} shown {shown}");
        let (addr, len) = p.mapped();
        assert!(len >= if p.ipv6 { 0 } else { 96 } && len <= 128, "{addr:?}");
    }
});
