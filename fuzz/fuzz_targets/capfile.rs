//! Fuzzes the capture-file reader: any bytes must yield packets or one error, never a panic,
//! and every packet must lie inside the input.
#![no_main]

use libfuzzer_sys::fuzz_target;
use tapflow_wire::capfile::Reader;

fuzz_target!(|data: &[u8]| {
    let Ok(mut r) = Reader::new(data) else { return };
    let mut last = r.offset();
    while let Some(p) = r.next_packet() {
        match p {
            Ok(p) => {
                assert!((p.interface as usize) < r.interfaces().len());
                assert!(p.data.len() as u64 <= u64::from(p.len));
                assert!(r.offset() > last, "the reader must move forward");
                last = r.offset();
            }
            Err(e) => {
                assert!(e.offset <= data.len() as u64);
                assert!(r.next_packet().is_none());
                break;
            }
        }
    }
    assert!(r.offset() <= data.len() as u64);
});
