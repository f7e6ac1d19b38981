//! Arbitrary bytes as flow export messages: the first byte picks the protocol (IPFIX, NetFlow
//! v9, v5, sFlow v5) and the exporter, the rest is the message. One `Decoder` with small limits
//! keeps its state (templates, sequence numbers, samplers) across inputs, so messages build on
//! the templates earlier ones left. It must never panic; a message it refuses must emit
//! nothing (no flow, interface name or sFlow interface counters), and one it accepts must emit
//! as many flows as its summary says.
#![no_main]

use std::sync::Mutex;

use libfuzzer_sys::fuzz_target;
use tapflow_wire::flowdecode::{Decoded, Decoder, Limits, Protocol};

static DECODER: Mutex<Option<Decoder>> = Mutex::new(None);

const PROTOCOLS: [Protocol; 4] = [
    Protocol::Ipfix,
    Protocol::NetflowV9,
    Protocol::NetflowV5,
    Protocol::Sflow5,
];

fuzz_target!(|data: &[u8]| {
    let Some((&pick, msg)) = data.split_first() else {
        return;
    };
    let mut guard = DECODER.lock().unwrap();
    let d = guard.get_or_insert_with(|| {
        Decoder::new(Limits {
            max_templates_per_exporter: 16,
            max_exporters: 6,
            max_exporters_per_address: 3,
            max_templates: 48,
            max_fields: 64,
        })
    });
    let protocol = PROTOCOLS[usize::from(pick & 3)];
    let mut exporter = [0u8; 16];
    exporter[15] = pick >> 2 & 7;
    let now = 1_800_000_000_000_000_000 + u64::from(pick) * 1_000_000_000;
    let (mut flows, mut other) = (0u32, 0u32);
    let r = d.decode(protocol, exporter, msg, now, &mut |x| match x {
        Decoded::Flow(_) => flows += 1,
        Decoded::Interface { .. } | Decoded::Counters { .. } => other += 1,
    });
    match r {
        Ok(s) => assert_eq!(s.records, flows),
        Err(e) => {
            assert_eq!(flows + other, 0, "refused ({e}) after emitting");
            assert!(!e.reason().is_empty());
        }
    }
    if pick == 0xff {
        d.expire(now, 1);
    }
});
