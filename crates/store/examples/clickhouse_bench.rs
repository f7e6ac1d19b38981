//! The ClickHouse benchmark's client side (run by `scripts/bench-clickhouse.sh`):
//!
//! ```text
//! clickhouse_bench insert URL MILLIONS   # insert synthetic flows through the store, print rows/s
//! clickhouse_bench write FILE MILLIONS   # the same rows as RowBinary, for clickhouse-client
//! clickhouse_bench top URL RUNS          # top-10 sources by bytes through the query engine
//! clickhouse_bench ddl legacy|current    # the statements creating database `t`, one a line
//! ```
//!
//! The flows: 65,536 sources in 10.0.0.0/16 (a few heavy, many light), 4,096 destinations, 20
//! exporters, one hour of start times; a third carry a reverse direction.

use std::io::Write;
use std::time::Instant;

use tapflow_store::clickhouse::{
    ClickHouseConfig, ClickHouseEngine, ClickHouseStore, Dialect, Layout, Schema, encode_flow,
};
use tapflow_store::query::{Key, Kind, Metric, Query, QueryEngine, QueryResult};
use tapflow_store::schema::addr16;
use tapflow_store::{FlowStore, StoredFlow};
use tapflow_wire::flowrecord::{Counters, FlowRecord};

/// Where `insert` and `write` put each chunk of flows (an empty chunk ends the run).
type Sink = Box<dyn FnMut(&[StoredFlow])>;

fn flow(i: u64, x: u64) -> StoredFlow {
    let t = 1_795_000_000_000_000_000 + i * 360; // one hour over 10M flows
    // Skewed sources: the low bits of a hash, squared, so small indexes are frequent.
    let r = (x >> 16) & 0xffff;
    let s = (r * r) >> 16;
    let mut src = [0u8; 16];
    src[..4].copy_from_slice(&[10, 0, (s >> 8) as u8, s as u8]);
    let mut dst = [0u8; 16];
    dst[..4].copy_from_slice(&[192, 168, ((x >> 40) & 0xf) as u8, (x >> 48) as u8]);
    let mut exporter = [0u8; 16];
    exporter[..4].copy_from_slice(&[198, 51, 100, (x % 20) as u8]);
    let packets = 1 + (x >> 8) % 64;
    let fwd = Counters {
        packets,
        octets: packets * (64 + (x >> 20) % 1400),
        tcp_flags: 0x1b,
        first_ns: t,
        last_ns: t + 1_000_000_000,
    };
    let rev = if x.is_multiple_of(3) {
        Counters {
            packets: packets / 2 + 1,
            octets: (packets / 2 + 1) * 600,
            tcp_flags: 0x12,
            first_ns: t + 1000,
            last_ns: t + 900_000_000,
        }
    } else {
        Counters::default()
    };
    StoredFlow {
        flow: FlowRecord {
            ipv6: false,
            proto: if x.is_multiple_of(5) { 17 } else { 6 },
            src,
            dst,
            sport: 1024 + (x % 60000) as u16,
            dport: [443, 80, 53, 22, 8080][(x % 5) as usize],
            interface: (x % 4) as u32,
            fwd,
            rev,
            ..FlowRecord::default()
        },
        egress: 1,
        exporter: addr16(false, &exporter),
        domain: 0,
        sampling: 1,
        received_ns: t + 2_000_000_000,
        ..StoredFlow::default()
    }
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let usage = "usage: clickhouse_bench insert URL MILLIONS | write FILE MILLIONS | top URL RUNS | ddl legacy|current";
    match args.get(1).map(String::as_str) {
        Some(cmd @ ("insert" | "write")) if args.len() >= 4 => {
            let n: u64 = (args[3].parse::<f64>().expect(usage) * 1e6) as u64;
            let start = Instant::now();
            let mut out: Sink = if cmd == "insert" {
                let store = ClickHouseStore::open(ClickHouseConfig::new(&args[2])).unwrap();
                let mut store = Some(Box::new(store));
                Box::new(move |chunk: &[StoredFlow]| {
                    if chunk.is_empty() {
                        let report = store.take().unwrap().close().unwrap();
                        assert_eq!(
                            (report.stored, report.dropped, report.pending),
                            (n, 0, 0),
                            "{report:?}"
                        );
                    } else {
                        let store = store.as_mut().unwrap();
                        store.insert(chunk).unwrap();
                        // As fast as the server takes rows: the store would queue (256 MiB in
                        // memory) and then drop what a faster caller hands it.
                        while store.report().pending > 2_000_000 {
                            std::thread::sleep(std::time::Duration::from_millis(1));
                        }
                    }
                })
            } else {
                let mut f = std::io::BufWriter::new(std::fs::File::create(&args[2]).unwrap());
                let mut buf = Vec::new();
                Box::new(move |chunk: &[StoredFlow]| {
                    buf.clear();
                    chunk.iter().for_each(|s| encode_flow(&mut buf, s));
                    f.write_all(&buf).unwrap();
                    if chunk.is_empty() {
                        f.flush().unwrap();
                    }
                })
            };
            let mut chunk = Vec::with_capacity(8192);
            let mut x = 0x9e37_79b9_7f4a_7c15u64;
            for i in 0..n {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                chunk.push(flow(i, x));
                if chunk.len() == 8192 {
                    out(&chunk);
                    chunk.clear();
                }
            }
            if !chunk.is_empty() {
                out(&chunk);
            }
            out(&[]);
            let spent = start.elapsed().as_secs_f64();
            println!(
                "{cmd}: {n} rows in {spent:.2} s: {:.0} rows/s",
                n as f64 / spent
            );
        }
        Some("top") if args.len() >= 4 => {
            let engine = ClickHouseEngine::open(&args[2]).unwrap();
            let q = Query {
                window: None,
                filter: None,
                kind: Kind::Top {
                    key: Key::SrcAddr(None),
                    order_by: Metric::Bytes,
                    n: 10,
                },
            };
            for _ in 0..args[3].parse::<u32>().expect(usage) {
                let t = Instant::now();
                let a = engine.run(&q).unwrap();
                let QueryResult::Table { rows, total, .. } = a.result else {
                    unreachable!()
                };
                println!(
                    "top-10 srcip/bytes over {} one-way flows: {:.3} s, first {} bytes",
                    total.flows,
                    t.elapsed().as_secs_f64(),
                    rows[0].counters.bytes
                );
            }
        }
        Some("ddl") if args.len() >= 3 => {
            let dialect = if args[2] == "legacy" {
                Dialect::Legacy
            } else {
                Dialect::Current
            };
            let schema = Schema {
                dialect,
                layout: Layout::Single,
                database: "t".into(),
                retain_days: 30,
            };
            println!("{}", schema.statements().join(";\n"));
        }
        _ => {
            eprintln!("{usage}");
            std::process::exit(2);
        }
    }
}
