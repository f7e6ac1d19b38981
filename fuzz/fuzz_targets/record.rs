//! Arbitrary bytes as back-to-back header records: `Records` must never panic, every record it
//! hands out lies inside the input and re-emits to the same control field and data, and after
//! the first error it stops.
#![no_main]

use libfuzzer_sys::fuzz_target;
use tapflow_wire::record::{CONTROL_LEN, ControlField, Records, push_record, record_len};

fuzz_target!(|data: &[u8]| {
    let mut records = Records::new(data);
    let mut at = 0usize;
    let mut out = Vec::new();
    while let Some(r) = records.next() {
        let Ok((ctl, bytes)) = r else {
            assert!(records.next().is_none(), "records go on after an error");
            return;
        };
        assert_eq!(usize::from(ctl.caplen), bytes.len());
        assert!(u32::from(ctl.caplen) <= ctl.orig_len());
        assert_eq!(ControlField::parse(&data[at..]), Ok(ctl));
        out.clear();
        push_record(&mut out, ctl, bytes);
        let end = (at + record_len(bytes.len())).min(data.len());
        assert_eq!(
            records.offset(),
            end,
            "the reader moves by one padded record"
        );
        assert_eq!(
            &out[..CONTROL_LEN + bytes.len()],
            &data[at..at + CONTROL_LEN + bytes.len()]
        );
        at = end;
    }
    assert_eq!(at, data.len());
});
