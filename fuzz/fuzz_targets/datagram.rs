//! Arbitrary bytes as a batch datagram: `Datagram::parse` must never panic, and whatever it
//! accepts must hold exactly `count` whole records that re-emit to the same bytes.
#![no_main]

use libfuzzer_sys::fuzz_target;
use tapflow_wire::datagram::{Builder, Datagram, HEADER_LEN};
use tapflow_wire::record::Records;

fuzz_target!(|data: &[u8]| {
    let Ok(d) = Datagram::parse(data) else {
        return;
    };
    let mut n = 0usize;
    for r in Records::new(d.records()) {
        assert!(r.is_ok(), "accepted a datagram with a bad record");
        n += 1;
    }
    assert_eq!(n, usize::from(d.header().count));
    let mut buf = Vec::new();
    let mut b = Builder::start(&mut buf);
    b.push_raw(d.records());
    let len = b.seal(d.header());
    assert_eq!(len, HEADER_LEN + d.records().len());
    let again = Datagram::parse(&buf).expect("re-emitted datagram parses");
    assert_eq!(again.header(), d.header());
    assert_eq!(again.records(), d.records());
});
