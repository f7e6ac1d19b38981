//! `tapflow query --clickhouse URL` prints what `tapflow query -R DIR` prints when both hold the
//! same flows: a real ClickHouse server (Debian's 18.16, started through
//! `scripts/clickhouse.sh` on its own ports and stopped when the test ends) filled by the
//! ClickHouse store, and the Parquet store filled with the same flows.

mod common;

use common::{ClickHouse, tapflow};
use tapflow_store::clickhouse::{ClickHouseConfig, ClickHouseStore};
use tapflow_store::schema::addr16;
use tapflow_store::{FlowStore, ParquetOptions, ParquetStore, StoredFlow};
use tapflow_wire::flowrecord::{Counters, FlowRecord};

fn flows(n: u64) -> Vec<StoredFlow> {
    let t0 = 1_795_000_000_000_000_000u64;
    (0..n)
        .map(|i| {
            let mut src = [0u8; 16];
            src[..4].copy_from_slice(&[10, (i % 5) as u8, (i % 37) as u8, (i % 11) as u8]);
            let mut dst = [0u8; 16];
            dst[..4].copy_from_slice(&[192, 0, 2, (i % 50) as u8]);
            let first = t0 + i * 90_000_000;
            let fwd = Counters {
                packets: 1 + i % 17,
                octets: 80 + (i * 7919) % 90_000,
                tcp_flags: 0x1b,
                first_ns: first,
                last_ns: first + (i % 5) * 1_000_000_000,
            };
            let rev = Counters {
                packets: i % 4,
                octets: (i % 4) * 700,
                tcp_flags: 0x12,
                first_ns: first + 500,
                last_ns: first + 800_000,
            };
            let mut exporter = [0u8; 16];
            exporter[..4].copy_from_slice(&[198, 51, 100, (i % 3) as u8]);
            StoredFlow {
                flow: FlowRecord {
                    proto: [6, 17, 6, 1][(i % 4) as usize],
                    src,
                    dst,
                    sport: if i % 4 == 3 {
                        0
                    } else {
                        30_000 + (i % 900) as u16
                    },
                    dport: [443, 53, 80, 0x0800][(i % 4) as usize],
                    interface: (i % 2) as u32,
                    fwd,
                    rev: if i % 4 == 3 { Counters::default() } else { rev },
                    ..FlowRecord::default()
                },
                egress: 2,
                exporter: addr16(false, &exporter),
                domain: 1,
                sampling: 1,
                received_ns: first + 1_000_000_000,
                ..StoredFlow::default()
            }
        })
        .collect()
}

fn query(args: &[&str]) -> String {
    let out = tapflow(["query"]).args(args).output().unwrap();
    assert!(
        out.status.success(),
        "tapflow query {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

#[test]
fn query_over_clickhouse_prints_what_it_prints_over_parquet() {
    let (_server, url) = ClickHouse::start(28600);
    let url = format!("{url}/q");
    let f = flows(20_000);
    let mut ch = Box::new(ClickHouseStore::open(ClickHouseConfig::new(&url)).unwrap());
    ch.insert(&f).unwrap();
    assert_eq!(ch.close().unwrap().stored, 20_000);
    let dir = tempfile::tempdir().unwrap();
    let mut pq = Box::new(ParquetStore::open(dir.path(), ParquetOptions::default()).unwrap());
    pq.insert(&f).unwrap();
    assert_eq!(pq.close().unwrap().stored, 20_000);
    let store = dir.path().to_str().unwrap();

    for args in [
        &["-I"][..],
        &["-s", "srcip/bytes", "-n", "20"],
        &["-s", "ip/flows", "-n", "5", "proto", "tcp"],
        &["-s", "dstport/packets", "-t", "2026-11-18T11:10/10m"],
        &["-s", "proto/bps"],
        &["-a", "srcip4/16,dstport", "-n", "0", "--csv"],
        &["--every", "5m", "-s", "exporter/bytes", "-n", "2", "--json"],
        &["-c", "30", "src net 10.1.0.0/16 and not dst port 53"],
    ] {
        let parquet = query(&[&["-R", store, "--raw"][..], args].concat());
        let clickhouse = query(&[&["--clickhouse", &url, "--raw"][..], args].concat());
        assert!(
            parquet.lines().count() > 2,
            "{args:?} selects something:\n{parquet}"
        );
        assert_eq!(clickhouse, parquet, "{args:?}");
    }

    // What the rollups answer exactly, both stores answer from them (first and last times are
    // then the buckets' bounds), and say so under -v.
    for args in [
        &["-I"][..],
        &["-s", "proto/packets"],
        &["--every", "5m", "-s", "exporter/bytes", "-n", "2", "--json"],
    ] {
        let parquet = query(&[&["-R", store][..], args].concat());
        let out = tapflow(["query", "-v", "--clickhouse", &url])
            .args(args)
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "{args:?}: {err}");
        assert!(err.contains("read: ClickHouse, rollup_"), "{args:?}: {err}");
        let clickhouse = String::from_utf8(out.stdout).unwrap();
        assert!(parquet.lines().count() > 2, "{args:?}:\n{parquet}");
        assert_eq!(clickhouse, parquet, "{args:?}");
    }

    // Its errors are one line: a bad URL is the user's (exit 2), a server away a failure (1).
    let out = tapflow(["query", "--clickhouse", "https://x:1/db", "-I"])
        .output()
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(2),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let out = tapflow(["query", "--clickhouse", "http://127.0.0.1:1/db", "-I"])
        .output()
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(1),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(String::from_utf8_lossy(&out.stderr).lines().count(), 1);
}
