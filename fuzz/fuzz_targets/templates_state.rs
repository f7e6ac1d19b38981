//! Arbitrary bytes as the collector's template-state file (`templates_state::parse`), what it
//! holds restored into a `Decoder` with small limits (`Decoder::restore`). It must never panic;
//! a restore takes no more than the limits allow and accounts for the states it was given; the
//! decoder's state written back as a file (`TemplatesState::save`) reads back to itself.
#![no_main]

use libfuzzer_sys::fuzz_target;
use tapflow_engine::collector::templates_state::{TemplatesState, parse};
use tapflow_wire::flowdecode::{Decoder, Limits};

const LIMITS: Limits = Limits {
    max_templates_per_exporter: 16,
    max_exporters: 6,
    max_exporters_per_address: 3,
    max_templates: 48,
    max_fields: 64,
};

fuzz_target!(|data: &[u8]| {
    let Ok(saved) = parse(data) else {
        return;
    };
    let now = 1_800_000_000_000_000_000;
    let mut d = Decoder::new(LIMITS);
    let r = d.restore(&saved, now, 3_600_000_000_000);
    // Each state given is restored, stale, refused or already held (a repeat), once.
    assert!(r.exporters + r.stale <= saved.len());
    assert_eq!(r.first_refusal.is_some(), r.refused > 0);
    let state = d.save();
    assert!(state.len() <= r.exporters.min(LIMITS.max_exporters));
    let held: usize = state.iter().map(|e| e.templates.len()).sum();
    assert!(held <= r.templates.min(LIMITS.max_templates));
    assert!(state.iter().all(|e| {
        e.templates.len() <= LIMITS.max_templates_per_exporter
            && e.templates
                .iter()
                .all(|t| t.fields.len() <= LIMITS.max_fields)
    }));
    // What the decoder holds, written and read back, is itself; restored again, the same.
    let dir = tempfile::tempdir().unwrap();
    let file = TemplatesState::in_dir(dir.path());
    file.save(&state, now).unwrap();
    assert_eq!(file.load().unwrap(), state);
    let mut again = Decoder::new(LIMITS);
    again.restore(&state, now, 3_600_000_000_000);
    assert_eq!(again.save(), state);
});
