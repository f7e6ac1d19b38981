//! Decode speed of the flow decoders: encodes N synthetic biflows with tapflow's own IPFIX,
//! NetFlow v9 or v5 exporter, then decodes the messages with one `Decoder` on one thread, the
//! best of several passes, and prints records per second. `--write FILE` also writes the
//! messages, each as a 2-byte big-endian length and the bytes, for a collector benchmark to
//! replay (bench/flowdecode.py sends them to nfcapd).
//!
//!   cargo run --release -p tapflow-wire --example flowdecode_bench -- ipfix 1000000 [--write F]

use std::time::Instant;

use tapflow_wire::flowdecode::{Decoded, Decoder, Limits, Protocol};
use tapflow_wire::flowrecord::{Counters, EndReason, FlowRecord};
use tapflow_wire::{ipfix, netflow5, netflow9};

const T0: u64 = 1_800_000_000_000_000_000;

/// Biflow `i`: distinct addresses and ports, a tenth IPv6 (not for v5), TCP and UDP.
fn record(i: u64, v6: bool) -> FlowRecord {
    let mut r = FlowRecord {
        ipv6: v6,
        proto: if i.is_multiple_of(3) { 17 } else { 6 },
        sport: 1024 + (i % 60000) as u16,
        dport: [443, 80, 53, 22][(i % 4) as usize],
        vlan: (i % 7) as u16,
        interface: (i % 4) as u32,
        end_reason: EndReason::IdleTimeout,
        ..FlowRecord::default()
    };
    let a = (i as u32).to_be_bytes();
    if v6 {
        r.src[..2].copy_from_slice(&[0x20, 0x01]);
        r.src[12..].copy_from_slice(&a);
        r.dst[..2].copy_from_slice(&[0x20, 0x01]);
        r.dst[15] = 1;
    } else {
        r.src[..4].copy_from_slice(&[10, a[1], a[2], a[3]]);
        r.dst[..4].copy_from_slice(&[192, 0, 2, a[3]]);
    }
    let t = T0 + i * 1_000_000;
    r.fwd = Counters {
        packets: 1 + i % 20,
        octets: 60 + i % 20 * 700,
        tcp_flags: 0x1b,
        first_ns: t,
        last_ns: t + 5_000_000,
    };
    if i.is_multiple_of(2) {
        r.rev = Counters {
            packets: 1 + i % 30,
            octets: 60 + i % 30 * 1200,
            tcp_flags: 0x12,
            first_ns: t + 1_000_000,
            last_ns: t + 4_000_000,
        };
    }
    r
}

/// CPU time this thread has used, in seconds (`/proc/thread-self/stat` utime + stime): the
/// machine may be busy, so wall time would measure the neighbours too.
fn cpu_secs() -> f64 {
    let stat = std::fs::read_to_string("/proc/thread-self/stat").expect("/proc/thread-self/stat");
    // Fields after the command name (which ends with the last ')'): utime is the 12th, stime 13th.
    let rest = &stat[stat.rfind(')').expect("stat format") + 2..];
    let f: Vec<&str> = rest.split(' ').collect();
    let ticks: u64 = f[11].parse::<u64>().unwrap() + f[12].parse::<u64>().unwrap();
    ticks as f64 / 100.0 // USER_HZ
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let usage = "usage: flowdecode_bench ipfix|nfv9|nfv5 N [--write FILE]";
    let (Some(proto), Some(n)) = (
        args.first(),
        args.get(1).and_then(|n| n.parse::<u64>().ok()),
    ) else {
        eprintln!("{usage}");
        std::process::exit(2);
    };
    let write = match args.get(2).map(String::as_str) {
        Some("--write") => args.get(3).cloned(),
        None => None,
        _ => {
            eprintln!("{usage}");
            std::process::exit(2);
        }
    };
    let (protocol, v6_ok) = match proto.as_str() {
        "ipfix" => (Protocol::Ipfix, true),
        "nfv9" => (Protocol::NetflowV9, true),
        "nfv5" => (Protocol::NetflowV5, false),
        _ => {
            eprintln!("{usage}");
            std::process::exit(2);
        }
    };
    let records: Vec<FlowRecord> = (0..n).map(|i| record(i, v6_ok && i % 10 == 9)).collect();
    let mut msgs: Vec<Vec<u8>> = Vec::new();
    let mut out = |m: &[u8]| msgs.push(m.to_vec());
    let now = T0 + n * 1_000_000 + 10_000_000_000;
    match protocol {
        Protocol::Ipfix => ipfix::Encoder::new(ipfix::Config::new(1))
            .unwrap()
            .encode(&records, now, &mut out),
        Protocol::NetflowV9 => netflow9::Encoder::new(netflow9::Config::new(1, T0))
            .unwrap()
            .encode(&records, now, &mut out),
        Protocol::NetflowV5 => netflow5::Encoder::new(netflow5::Config::new(T0))
            .unwrap()
            .encode(&records, now, &mut out),
        Protocol::Sflow5 => unreachable!(),
    }
    if let Some(path) = write {
        let mut f = Vec::new();
        for m in &msgs {
            f.extend_from_slice(&(m.len() as u16).to_be_bytes());
            f.extend_from_slice(m);
        }
        std::fs::write(&path, f).unwrap_or_else(|e| panic!("{path}: {e}"));
    }
    let bytes: usize = msgs.iter().map(Vec::len).sum();
    // Each measurement decodes the messages `reps` times (at least 5M records, so the CPU
    // clock's 10 ms ticks do not matter); the best of 3 counts.
    let per_pass = match protocol {
        Protocol::NetflowV5 => records
            .iter()
            .map(|r| 1 + u64::from(r.rev.packets > 0))
            .sum(),
        _ => n,
    }
    .max(1);
    let reps = 5_000_000u64.div_ceil(per_pass);
    let (mut best, mut best_wall) = (f64::MAX, f64::MAX);
    let mut decoded = 0u64;
    for _ in 0..3 {
        let mut d = Decoder::new(Limits::default());
        let mut packets = 0u64;
        let mut flows = 0u64;
        let (t, c) = (Instant::now(), cpu_secs());
        for _ in 0..reps {
            for m in &msgs {
                d.decode(protocol, [0; 16], m, now, &mut |x| {
                    if let Decoded::Flow(f) = x {
                        flows += 1;
                        packets += f.flow.fwd.packets;
                    }
                })
                .expect("own export decodes");
            }
        }
        let (wall, secs) = (t.elapsed().as_secs_f64(), cpu_secs() - c);
        std::hint::black_box(packets);
        best = best.min(secs);
        best_wall = best_wall.min(wall);
        decoded = flows;
    }
    println!(
        "{} {n} biflows -> {} records in {} messages ({bytes} bytes), decoded {reps} times: best of \
         3 {:.3} CPU s ({:.3} s wall), {:.2} M records per CPU second, {:.0} ns/record, {:.3} CPU \
         s per million records",
        protocol.name(),
        decoded / reps,
        msgs.len(),
        best,
        best_wall,
        decoded as f64 / best / 1e6,
        best * 1e9 / decoded as f64,
        best * 1e6 / decoded as f64,
    );
}
