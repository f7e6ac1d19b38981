//! Fuzzes the ERF reader: the record view and the file reader over any bytes, the first sixteen
//! of them made a plausible ERF record header so that most inputs are taken for ERF and reach
//! the records past it (extension header chains, Ethernet pads, unsupported types). Packets or
//! one error, never a panic; every packet inside the input.
#![no_main]

use libfuzzer_sys::fuzz_target;
use tapflow_wire::capfile::{Format, Reader};
use tapflow_wire::erf::{self, Record};

fuzz_target!(|data: &[u8]| {
    if let Ok(r) = Record::new_checked(data) {
        assert!(r.payload().len() <= usize::from(r.rlen()));
        let _ = (erf::ts_to_ns(r.ts()), r.record_type().linktype(), r.lctr());
    }
    let mut input = data.to_vec();
    if input.len() >= erf::HEADER_LEN {
        // A defined type (keeping the extension bit), and an rlen within the input.
        input[8] = (input[8] & 0x80)
            | [2, 11, 16, 20, 22, 23, 1, 4, 27, 48][usize::from(input[8] & 0x7f) % 10];
        let rlen = u16::from_be_bytes([input[10], input[11]]) as usize % (input.len() + 1);
        input[10..12].copy_from_slice(&(rlen as u16).to_be_bytes());
    }
    let Ok(mut r) = Reader::new(&input) else {
        return;
    };
    let erf = r.format() == Format::Erf;
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
                assert!(e.offset <= input.len() as u64);
                assert!(r.next_packet().is_none());
                break;
            }
        }
    }
    assert!(r.offset() <= input.len() as u64);
    if erf {
        assert!(
            r.skipped()
                .iter()
                .all(|&(t, n)| n > 0 && t.linktype().is_none())
        );
    }
});
