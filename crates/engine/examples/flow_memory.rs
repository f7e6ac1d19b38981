//! Memory per active flow and table speed with N concurrent synthetic flows (default 10M):
//!
//!     cargo run --release -p tapflow-engine --example flow_memory [N]
//!
//! Builds one FlowTable sized for N, inserts N distinct UDP flows (one packet each), then sends
//! a second packet to every flow in another order; prints the resident memory the table added
//! (from /proc/self/statm) per flow, and the time per insert and per update. Nothing may end
//! before the final drain: the timeouts are far away and the table is exactly large enough.

use std::time::Instant;

use tapflow_engine::sink::flow::table::{CLASSES, FlowTable, TableConfig};
use tapflow_wire::flowkey::FlowFields;
use tapflow_wire::flowrecord::EndReason;

fn rss_bytes() -> u64 {
    let statm = std::fs::read_to_string("/proc/self/statm").expect("/proc/self/statm");
    let pages: u64 = statm.split_whitespace().nth(1).unwrap().parse().unwrap();
    pages * 4096
}

/// Flow `i`: 10.x.y.z:port → 192.0.2.1:53, unique for i < 2^40.
fn packet(i: u64) -> FlowFields {
    let mut f = FlowFields {
        proto: 17,
        sport: 1024 + (i >> 24) as u16,
        dport: 53,
        octets: 80,
        ..FlowFields::default()
    };
    f.src[..4].copy_from_slice(&[10, (i >> 16) as u8, (i >> 8) as u8, i as u8]);
    f.dst[..4].copy_from_slice(&[192, 0, 2, 1]);
    f
}

fn main() {
    let n: u64 = std::env::args()
        .nth(1)
        .map_or(10_000_000, |s| s.parse().expect("N"));
    let before = rss_bytes();
    let mut t = FlowTable::new(TableConfig {
        max_flows: n as usize,
        active_ns: u64::MAX / 4,
        idle_ns: [u64::MAX / 4; CLASSES],
        seed: 0x5eed,
    });
    let mut ended = 0u64;
    let t0 = Instant::now();
    for i in 0..n {
        t.update(&packet(i), 0, 1_000_000_000 + i, &mut |_| ended += 1);
    }
    let insert = t0.elapsed();
    let after = rss_bytes();
    assert_eq!(t.len() as u64, n);
    assert_eq!(ended, 0, "flows ended before the drain");
    // Second pass in a scattered order: every lookup is a hit.
    let t1 = Instant::now();
    let step = 0x9e37_79b9u64 | 1;
    for k in 0..n {
        let i = k.wrapping_mul(step) % n;
        t.update(&packet(i), 0, 2_000_000_000 + k, &mut |_| ended += 1);
    }
    let update = t1.elapsed();
    assert_eq!(t.len() as u64, n);
    let mut packets = 0u64;
    t.drain(EndReason::ForcedEnd, &mut |r| packets += r.fwd.packets);
    assert_eq!(packets, 2 * n);
    let per_flow = (after - before) as f64 / n as f64;
    println!(
        "flows {n}  rss_added_bytes {}  bytes_per_flow {per_flow:.1}  insert_ns {:.1}  update_ns {:.1}",
        after - before,
        insert.as_nanos() as f64 / n as f64,
        update.as_nanos() as f64 / n as f64
    );
}
