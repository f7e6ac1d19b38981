//! Flows for the store's tests: varied, deterministic, IPv4 and IPv6.
#![allow(dead_code)] // Each test file uses part of it.

use tapflow_store::StoredFlow;
use tapflow_store::query::time::days_from_civil;
use tapflow_store::schema::{DAY_US, HOUR_US};
use tapflow_wire::flowrecord::{EndReason, FlowRecord};

/// 2024-03-10T00:00:00Z, µs.
pub fn day0_us() -> i64 {
    days_from_civil(2024, 3, 10) * DAY_US
}

/// A small xorshift generator.
#[derive(Debug)]
pub struct Rng(pub u64);

impl Rng {
    pub fn next(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        self.0 = x;
        x
    }

    pub fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

/// A flow starting at `start_us` (µs, with a few ns past it), from one of `hosts` sources.
pub fn flow(rng: &mut Rng, start_us: i64, hosts: u64) -> StoredFlow {
    let ipv6 = rng.below(5) == 0;
    let mut f = FlowRecord {
        ipv6,
        proto: [6, 17, 1, 47][rng.below(4) as usize],
        sport: rng.below(65536) as u16,
        dport: [53, 80, 443, 8080, 1234][rng.below(5) as usize],
        vlan: rng.below(3) as u16,
        interface: rng.below(4) as u32,
        end_reason: EndReason::from_u8(1 + rng.below(5) as u8).unwrap(),
        ..FlowRecord::default()
    };
    let host = rng.below(hosts);
    if ipv6 {
        f.src = [0x20, 0x01, 0x0d, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0];
        f.src[8..].copy_from_slice(&host.to_be_bytes());
        f.dst = [0x20, 0x01, 0x0d, 0xb8, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0];
        f.dst[15] = rng.below(7) as u8;
    } else {
        f.src[..4].copy_from_slice(&(0x0a00_0000 + host as u32).to_be_bytes());
        f.dst[..4].copy_from_slice(&[192, 0, 2, rng.below(7) as u8]);
    }
    let start_ns = start_us as u64 * 1000 + rng.below(1000);
    let dur = rng.below(30_000_000_000);
    let n = 1 + rng.below(20);
    for k in 0..n {
        f.fwd.add(
            start_ns + dur * k / n,
            40 + rng.below(1400),
            rng.below(64) as u16,
        );
    }
    if rng.below(3) > 0 {
        let m = 1 + rng.below(20);
        for k in 0..m {
            f.rev.add(
                start_ns + 1 + dur * k / m,
                40 + rng.below(1400),
                rng.below(64) as u16,
            );
        }
    }
    // Some connections seen from their answer only (a capture that starts mid-connection): the
    // initiator's direction has no packets, and is not a flow.
    if f.rev.packets > 0 && f.sport.is_multiple_of(8) {
        f.fwd = Default::default();
    }
    let mut exporter = [0u8; 16];
    exporter[10] = 0xff;
    exporter[11] = 0xff;
    exporter[12..].copy_from_slice(&[198, 51, 100, 1 + rng.below(2) as u8]);
    StoredFlow {
        flow: f,
        egress: rng.below(4) as u32,
        exporter,
        domain: rng.below(2) as u32,
        sampling: 1,
        received_ns: f.end_ns() + 1_000_000_000,
        ..StoredFlow::default()
    }
}

/// `n` flows starting at random times within `[from_us, from_us + span_us)`, in random order.
pub fn flows(seed: u64, n: usize, from_us: i64, span_us: i64, hosts: u64) -> Vec<StoredFlow> {
    let mut rng = Rng(seed);
    (0..n)
        .map(|_| {
            let t = from_us + rng.below(span_us as u64) as i64;
            flow(&mut rng, t, hosts)
        })
        .collect()
}

/// One hour, µs.
pub const H: i64 = HOUR_US;
