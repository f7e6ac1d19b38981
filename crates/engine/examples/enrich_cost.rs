//! CPU of enrichment per million records, beside the same batches handed on without it: the
//! work `EnrichedStore` adds in a store thread. Two address mixes: traffic-like (flows among a
//! pool of hosts, a few of them heavy) and one where every address is new (the worst case: every
//! lookup misses the address cache).
//!
//!   cargo run --release -p tapflow-engine --example enrich_cost -- DIR [NETWORKS]
//!
//! DIR holds country.mmdb and asn.csv (scripts/fetch-ipdb.sh); NETWORKS is a networks file.

use std::path::PathBuf;
use std::time::Duration;

use tapflow_engine::enrich::{EnrichConfig, Enricher, Source};
use tapflow_store::StoredFlow;

const RECORDS: usize = 1_000_000;
const BATCH: usize = 4096;

fn thread_cpu() -> Duration {
    let mut t = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes one timespec into `t`, which lives across the call.
    unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut t) };
    Duration::new(t.tv_sec as u64, t.tv_nsec as u32)
}

struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
}

fn v4(x: u64) -> [u8; 16] {
    let mut a = [0u8; 16];
    // Public-looking: first octet 1..=223.
    let o = 1 + (x % 223) as u8;
    a[..4].copy_from_slice(&[o, (x >> 8) as u8, (x >> 16) as u8, (x >> 24) as u8]);
    a
}

/// Flows among `hosts` addresses (a host's index squared over the pool: a few heavy hitters),
/// or all-new addresses when `hosts` is 0.
fn flows(hosts: u64, seed: u64) -> Vec<StoredFlow> {
    let mut rng = Rng(seed);
    let pool: Vec<[u8; 16]> = (0..hosts).map(|_| v4(rng.next())).collect();
    let pick = |rng: &mut Rng| {
        if hosts == 0 {
            return v4(rng.next());
        }
        let r = rng.next() % hosts;
        pool[(r * r / hosts) as usize]
    };
    (0..RECORDS)
        .map(|_| {
            let mut f = StoredFlow::default();
            f.flow.src = pick(&mut rng);
            f.flow.dst = pick(&mut rng);
            f
        })
        .collect()
}

/// CPU seconds to hand `all` on in batches: copied into a reused batch, and enriched if
/// `enricher` is given.
fn run(all: &[StoredFlow], mut enricher: Option<&mut Enricher>) -> f64 {
    let mut batch: Vec<StoredFlow> = Vec::with_capacity(BATCH);
    let mut sink = 0u64;
    let t0 = thread_cpu();
    for chunk in all.chunks(BATCH) {
        batch.clear();
        batch.extend_from_slice(chunk);
        if let Some(e) = enricher.as_deref_mut() {
            e.enrich(&mut batch);
        }
        sink = sink.wrapping_add(u64::from(batch[batch.len() / 2].src_place.asn));
    }
    let t = (thread_cpu() - t0).as_secs_f64();
    std::hint::black_box(sink);
    t
}

fn main() {
    let mut args = std::env::args().skip(1);
    let dir = PathBuf::from(args.next().expect("DIR with country.mmdb and asn.csv"));
    let networks = args.next().map(PathBuf::from);
    let source = Source::open(EnrichConfig {
        geoip: Some(dir.join("country.mmdb")),
        asn: Some(dir.join("asn.csv")),
        networks,
        interfaces: None,
    })
    .unwrap_or_else(|e| panic!("{e}"));
    println!("tables: {}", source.current().0.describe().join("; "));
    for (what, hosts) in [
        ("traffic-like, 50k hosts", 50_000u64),
        ("every address new", 0),
    ] {
        let all = flows(hosts, 0x5eed);
        let mut best = (f64::MAX, f64::MAX);
        for _ in 0..3 {
            // A fresh enricher each time: its caches start empty, as after a start or reload.
            let mut e = Enricher::new(source.clone());
            let with = run(&all, Some(&mut e));
            let without = run(&all, None);
            best = (best.0.min(with), best.1.min(without));
        }
        let per_m = 1e6 / RECORDS as f64;
        println!(
            "{what}: {:.3} s CPU per million records with enrichment, {:.3} s without, \
             enrichment {:.3} s per million",
            best.0 * per_m,
            best.1 * per_m,
            (best.0 - best.1) * per_m
        );
    }
}
