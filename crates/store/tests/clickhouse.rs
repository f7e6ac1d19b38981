//! The ClickHouse store against real servers: Debian's `clickhouse-server` (18.16) started by
//! each test through `scripts/clickhouse.sh` on its own loopback ports and directory, stopped
//! (also on failure) when the test ends; and `chdb` from PyPI (a current ClickHouse, in process)
//! for the current servers' tables (that test prints one `skipped:` line without chdb); the
//! Parquet store and its scan as the oracle for queries.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use tapflow_store::clickhouse::{
    ClickHouseConfig, ClickHouseStore, Dialect, Layout, Schema, Server, encode_flow,
};
use tapflow_store::schema::{ColumnType, FLOW_COLUMNS, addr16};
use tapflow_store::{
    ExporterStats, FlowStore, InterfaceCounters, InterfaceName, ParquetOptions, ParquetStore,
    Place, StoreReport, StoredFlow,
};
use tapflow_wire::flowrecord::{Counters, EndReason, FlowRecord};
use tapflow_wire::sflow::IfCounters;

/// Servers started for one test in their own directory; stopped when dropped.
struct Servers {
    dir: tempfile::TempDir,
    base: u16,
    shards: u16,
}

fn script() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scripts/clickhouse.sh")
}

impl Servers {
    fn start(base: u16, shards: u16) -> Servers {
        let s = Servers {
            dir: tempfile::tempdir().unwrap(),
            base,
            shards,
        };
        s.run("start");
        s
    }

    fn run(&self, cmd: &str) {
        let out = Command::new(script())
            .args([cmd, self.dir.path().to_str().unwrap()])
            .args([self.shards.to_string(), self.base.to_string()])
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "clickhouse.sh {cmd}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }

    fn host(&self, shard: u16) -> String {
        format!("127.0.0.1:{}", self.base + 10 * shard)
    }

    fn query(&self, shard: u16, sql: &str) -> String {
        Server::new(&self.host(shard), None, None)
            .query(sql)
            .unwrap()
            .trim()
            .to_string()
    }

    /// Kills shard `shard` at once (SIGKILL), as a crash would.
    fn kill(&self, shard: u16) {
        let pidfile = self.dir.path().join(format!("shard{shard}/pid"));
        let pid = std::fs::read_to_string(&pidfile).unwrap();
        let pid = pid.trim();
        assert!(
            Command::new("kill")
                .args(["-9", pid])
                .status()
                .unwrap()
                .success()
        );
        while Path::new(&format!("/proc/{pid}")).exists() {
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for Servers {
    fn drop(&mut self) {
        let _ = Command::new(script())
            .args(["stop", self.dir.path().to_str().unwrap()])
            .status();
    }
}

/// The network named `name` (none if empty).
fn network(name: &str) -> &'static tapflow_store::Network {
    tapflow_store::names::intern_network(tapflow_store::Network {
        name: tapflow_store::names::intern(name),
        role: tapflow_store::names::intern(if name.is_empty() { "" } else { "servers" }),
        ..Default::default()
    })
}

/// `n` flows from ten exporters over two hours, addresses and counters varying.
fn flows(n: u64) -> Vec<StoredFlow> {
    let t0 = 1_795_000_000_000_000_000u64; // 2026-11-18, ns
    (0..n)
        .map(|i| {
            let mut src = [0u8; 16];
            src[..4].copy_from_slice(&[10, (i % 7) as u8, (i % 251) as u8, (i % 13) as u8]);
            let mut dst = [0u8; 16];
            let ipv6 = i % 5 == 0;
            if ipv6 {
                dst = [
                    0x20,
                    1,
                    0xd,
                    0xb8,
                    0,
                    0,
                    0,
                    0,
                    0,
                    0,
                    0,
                    0,
                    0,
                    0,
                    (i % 3) as u8,
                    1,
                ];
                src = [
                    0x20,
                    1,
                    0xd,
                    0xb8,
                    0,
                    1,
                    0,
                    0,
                    0,
                    0,
                    0,
                    0,
                    0,
                    0,
                    0,
                    (i % 11) as u8,
                ];
            } else {
                dst[..4].copy_from_slice(&[192, 0, 2, (i % 200) as u8]);
            }
            let first = t0 + i * 7_000_000_000 / 100 + (i % 1000) * 1_000;
            // Every 17th connection is seen from its answer only: no forward packets.
            let fwd = Counters {
                packets: if i % 17 == 1 { 0 } else { 1 + i % 40 },
                octets: if i % 17 == 1 {
                    0
                } else {
                    60 + (i * 977) % 150_000
                },
                tcp_flags: 0x18,
                first_ns: first,
                last_ns: first + 2_000_000_000,
            };
            let rev = Counters {
                packets: i % 3,
                octets: (i % 3) * 1400,
                tcp_flags: 0x10,
                first_ns: first + 1_000,
                last_ns: first + 1_500_000,
            };
            let mut exporter = [0u8; 16];
            exporter[..4].copy_from_slice(&[198, 51, 100, (i % 10) as u8]);
            StoredFlow {
                flow: FlowRecord {
                    ipv6,
                    proto: if i % 4 == 0 { 17 } else { 6 },
                    src,
                    dst,
                    sport: 1024 + (i % 5000) as u16,
                    dport: [443, 80, 53, 22][(i % 4) as usize],
                    vlan: (i % 3) as u16,
                    interface: 1 + (i % 2) as u32,
                    fwd,
                    rev: if i % 3 == 0 { Counters::default() } else { rev },
                    end_reason: EndReason::IdleTimeout,
                },
                egress: 3,
                exporter: addr16(false, &exporter),
                domain: 7,
                sampling: 1,
                received_ns: first + 5_000_000_000,
                src_place: Place {
                    asn: 64500 + (i % 3) as u32,
                    as_name: "Example, Inc.",
                    country: [*b"DE", *b"FR", [0; 2]][(i % 3) as usize],
                    net: network(["office", "dc1 web", "", "lab's (new)"][(i % 4) as usize]),
                },
                dst_place: Place {
                    asn: [0, 15169][(i % 2) as usize],
                    as_name: ["", "Google LLC"][(i % 2) as usize],
                    country: [*b"US", [0; 2], *b"JP"][(i % 7 % 3) as usize],
                    net: network(["", "office", "transit\tA"][(i % 5 % 3) as usize]),
                },
            }
        })
        .collect()
}

fn totals(f: &[StoredFlow]) -> String {
    let bytes: u64 = f.iter().map(|f| f.flow.fwd.octets).sum();
    let packets: u64 = f.iter().map(|f| f.flow.fwd.packets).sum();
    let rev_bytes: u64 = f.iter().map(|f| f.flow.rev.octets).sum();
    format!("{}\t{bytes}\t{packets}\t{rev_bytes}", f.len())
}

/// The rollups' totals: `flows` counts the rows whose forward direction has packets.
fn rollup_totals(f: &[StoredFlow]) -> String {
    let forward = f.iter().filter(|f| f.flow.fwd.packets > 0).count();
    let all = totals(f);
    let rest = all.split_once('\t').map_or("", |(_, r)| r);
    format!("{forward}\t{rest}")
}

const TOTALS: &str = "count(), sum(bytes), sum(packets), sum(rev_bytes)";
const ROLLUP_TOTALS: &str = "sum(flows), sum(bytes), sum(packets), sum(rev_bytes)";

/// The ten sources with the most bytes, as `hex(addr)\tbytes` lines.
fn top_src(f: &[StoredFlow]) -> String {
    let mut by: HashMap<[u8; 16], u64> = HashMap::new();
    for f in f {
        *by.entry(addr16(f.flow.ipv6, &f.flow.src)).or_default() += f.flow.fwd.octets;
    }
    let mut v: Vec<_> = by.into_iter().collect();
    v.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
    v.iter()
        .take(10)
        .map(|(a, b)| {
            format!(
                "{}\t{b}",
                a.iter().map(|x| format!("{x:02X}")).collect::<String>()
            )
        })
        .collect::<Vec<_>>()
        .join("\n")
}

const TOP_SRC: &str = "SELECT hex(src_addr) AS a, sum(bytes) AS b FROM t.flows \
                       GROUP BY a ORDER BY b DESC, a LIMIT 10";

fn config(url: String, batch_rows: u64) -> ClickHouseConfig {
    let mut c = ClickHouseConfig::new(&url);
    c.batch_rows = batch_rows;
    c
}

fn insert_in_calls(store: &mut dyn FlowStore, f: &[StoredFlow], per_call: usize) {
    for chunk in f.chunks(per_call) {
        store.insert(chunk).unwrap();
    }
}

#[test]
fn a_server_stores_every_flow_and_its_rollups_and_names() {
    let ch = Servers::start(28100, 1);
    let f = flows(120_000);
    let mut store = Box::new(
        ClickHouseStore::open(config(format!("http://{}/t", ch.host(0)), 20_000)).unwrap(),
    );
    assert_eq!(store.schema().dialect, Dialect::Legacy);
    insert_in_calls(store.as_mut(), &f, 3000);
    let mut exporter = [0u8; 16];
    exporter[..4].copy_from_slice(&[198, 51, 100, 1]);
    let exporter = addr16(false, &exporter);
    let names = vec![
        InterfaceName {
            exporter,
            domain: 7,
            index: 1,
            name: "eth0".into(),
            description: "uplink é".into(),
            speed: 25_000_000_000,
            received_ns: 1,
        },
        InterfaceName {
            exporter,
            domain: 7,
            index: 2,
            name: "x".repeat(200),
            description: String::new(),
            speed: 0,
            received_ns: 2,
        },
    ];
    store.insert_interfaces(&names).unwrap();
    let stats = ExporterStats {
        exporter,
        domain: 7,
        time_ns: 1_795_000_000_000_000_000,
        records: 120_000,
        sequence_lost: 3,
        template_missing: 2,
        bad_messages: 1,
    };
    store.insert_exporter_stats(&[stats]).unwrap();
    let report = store.close().unwrap();
    assert_eq!(
        report,
        StoreReport {
            received: 120_000,
            stored: 120_000,
            dropped: 0,
            pending: 0
        }
    );

    assert_eq!(
        ch.query(0, &format!("SELECT {TOTALS} FROM t.flows")),
        totals(&f)
    );
    for tier in ["1m", "5m", "1h"] {
        let got = ch.query(0, &format!("SELECT {ROLLUP_TOTALS} FROM t.rollup_{tier}"));
        assert_eq!(got, rollup_totals(&f), "rollup {tier}");
    }
    assert_eq!(ch.query(0, TOP_SRC), top_src(&f));
    let reverse = f.iter().filter(|f| f.flow.rev.packets > 0).count();
    assert_eq!(
        ch.query(0, "SELECT sum(rev_flows) FROM t.rollup_1h"),
        reverse.to_string()
    );
    // Times are µs since 1970, both addresses IPv4-mapped.
    let second = &f[1].flow;
    let row = ch.query(
        0,
        "SELECT time_start, time_end, IPv6NumToString(src_addr), IPv6NumToString(exporter), \
         dst_port, in_if, out_if FROM t.flows ORDER BY time_start LIMIT 1 OFFSET 1",
    );
    let expected = format!(
        "{}\t{}\t::ffff:{}\t::ffff:198.51.100.1\t{}\t{}\t3",
        second.start_ns() / 1000,
        second.end_ns() / 1000,
        second.src_addr(),
        second.dport,
        second.interface
    );
    assert_eq!(row, expected);
    assert_eq!(
        ch.query(
            0,
            "SELECT `index`, description, name, speed FROM t.interfaces ORDER BY `index`"
        ),
        format!(
            "1\tuplink é\teth0\t25000000000\n2\t\t{}\t0",
            "x".repeat(200)
        )
    );
    assert_eq!(
        ch.query(
            0,
            "SELECT records, sequence_lost, template_missing, bad_messages FROM t.exporter_stats"
        ),
        "120000\t3\t2\t1"
    );
    // Partitions by day, sorted time first.
    let key = ch.query(
        0,
        "SELECT sorting_key FROM system.tables WHERE database = 't' AND name = 'flows'",
    );
    assert!(key.starts_with("toStartOfFiveMinute("), "{key}");
}

#[test]
fn a_server_killed_mid_run_loses_nothing() {
    let ch = Servers::start(28200, 1);
    let spool = tempfile::tempdir().unwrap();
    let mut c = config(format!("http://{}/t", ch.host(0)), 5000);
    c.spool_dir = Some(spool.path().to_path_buf());
    c.memory_limit = 3 * 5000 * 130; // about three batches in memory, the rest on disk
    c.close_timeout = Duration::from_secs(60);
    let mut store = Box::new(ClickHouseStore::open(c).unwrap());
    let f = flows(150_000);
    let chunks: Vec<_> = f.chunks(5000).collect();
    for (i, chunk) in chunks.iter().enumerate() {
        if i == 8 {
            ch.kill(0);
        }
        store.insert(chunk).unwrap();
        store.flush().unwrap();
        std::thread::sleep(Duration::from_millis(20));
    }
    let r = store.report();
    assert!(
        r.pending >= 20 * 5000,
        "the batches sent while down wait: {r:?}"
    );
    assert_eq!(r.received, r.stored + r.pending);
    let spooled = std::fs::read_dir(spool.path()).unwrap().count();
    assert!(spooled > 0, "some batches went to the spool directory");
    ch.run("start");
    let report = store.close().unwrap();
    assert_eq!(
        report,
        StoreReport {
            received: 150_000,
            stored: 150_000,
            dropped: 0,
            pending: 0
        }
    );
    assert_eq!(
        std::fs::read_dir(spool.path()).unwrap().count(),
        0,
        "spool drained"
    );
    // Every flow is there (time_start is unique per flow here). A server killed during an
    // insert may have kept that batch without answering, and one restarting has been seen to
    // answer a kept batch with an error: the retry inserts it again
    // (delivery is at least once), so whole batches may be there twice, never part of one.
    let (unique, rows): (u64, u64) = {
        let r = ch.query(0, "SELECT uniqExact(time_start), count() FROM t.flows");
        let (a, b) = r.split_once('\t').unwrap();
        (a.parse().unwrap(), b.parse().unwrap())
    };
    assert_eq!(unique, 150_000);
    assert!(
        rows >= 150_000 && (rows - 150_000) % 5000 == 0,
        "{rows} rows: not whole batches"
    );
    if rows == 150_000 {
        assert_eq!(
            ch.query(0, &format!("SELECT {TOTALS} FROM t.flows")),
            totals(&f)
        );
    }
}

#[test]
fn beyond_the_spool_limit_drops_are_counted_and_the_rest_survives_the_run() {
    let ch = Servers::start(28300, 1);
    let spool = tempfile::tempdir().unwrap();
    let rows = 2000u64;
    let f = flows(10 * rows);
    // The largest a batch of the flows below can be (their names differ in length).
    let one = f
        .iter()
        .map(|x| {
            let mut one = Vec::new();
            encode_flow(&mut one, x);
            one.len() as u64
        })
        .max()
        .unwrap();
    let batch_bytes = rows * one;
    let mut c = config(format!("http://{}/t", ch.host(0)), rows);
    c.spool_dir = Some(spool.path().to_path_buf());
    c.memory_limit = 0;
    c.spool_limit = 3 * batch_bytes + batch_bytes / 2; // room for three batches
    c.close_timeout = Duration::from_secs(1);
    let mut store = Box::new(ClickHouseStore::open(c.clone()).unwrap());
    ch.kill(0);
    insert_in_calls(store.as_mut(), &f, rows as usize);
    let r = store.report();
    assert_eq!(
        r,
        StoreReport {
            received: 10 * rows,
            stored: 0,
            dropped: 7 * rows,
            pending: 3 * rows
        }
    );
    // The server stays away past the end of the run: the three batches stay in the spool.
    let report = store.close().unwrap();
    assert_eq!(report, r);
    assert_eq!(std::fs::read_dir(spool.path()).unwrap().count(), 3);

    // The next run sends them first.
    ch.run("start");
    let next = Box::new(ClickHouseStore::open(c).unwrap());
    let later = &f[..10];
    let mut next = next;
    next.insert(later).unwrap();
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    while next.resumed_stored() < 3 * rows && std::time::Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(50));
    }
    assert_eq!(next.resumed_stored(), 3 * rows);
    let report = next.close().unwrap();
    assert_eq!(
        report,
        StoreReport {
            received: 10,
            stored: 10,
            dropped: 0,
            pending: 0
        }
    );
    let mut expected = f[..3 * rows as usize].to_vec();
    expected.extend_from_slice(later);
    assert_eq!(
        ch.query(0, &format!("SELECT {TOTALS} FROM t.flows")),
        totals(&expected)
    );
    // In order: the spooled batches went in before the later flows.
    assert_eq!(std::fs::read_dir(spool.path()).unwrap().count(), 0);
}

#[test]
fn two_shards_share_the_rows_and_the_distributed_tables_add_up() {
    let ch = Servers::start(28400, 2);
    let url = format!("http://{},{}/t?cluster=tapflow", ch.host(0), ch.host(1));
    let f = flows(100_000);
    let mut store = Box::new(ClickHouseStore::open(config(url.clone(), 10_000)).unwrap());
    assert_eq!(store.schema().layout, Layout::Cluster("tapflow".into()));
    insert_in_calls(store.as_mut(), &f, 4000);
    let report = store.close().unwrap();
    assert_eq!(
        report,
        StoreReport {
            received: 100_000,
            stored: 100_000,
            dropped: 0,
            pending: 0
        }
    );
    let on: Vec<u64> = (0..2)
        .map(|s| {
            ch.query(s, "SELECT count() FROM t.flows_local")
                .parse()
                .unwrap()
        })
        .collect();
    assert_eq!(on[0] + on[1], 100_000);
    for n in &on {
        // Each shard's sender took batches (of 10,000 rows) whenever it was free.
        assert!(*n >= 10_000, "rows on both shards: {on:?}");
    }
    for shard in 0..2 {
        assert_eq!(
            ch.query(shard, &format!("SELECT {TOTALS} FROM t.flows")),
            totals(&f)
        );
        assert_eq!(
            ch.query(shard, &format!("SELECT {ROLLUP_TOTALS} FROM t.rollup_1h")),
            rollup_totals(&f)
        );
        assert_eq!(ch.query(shard, TOP_SRC), top_src(&f));
    }
    // A shard that stops answering leaves its batches to the other: nothing is lost.
    let mut store = Box::new(ClickHouseStore::open(config(url, 5_000)).unwrap());
    ch.kill(1);
    insert_in_calls(store.as_mut(), &flows(20_000), 4000);
    let report = store.close().unwrap();
    assert_eq!(
        (report.stored, report.dropped, report.pending),
        (20_000, 0, 0)
    );
    assert_eq!(
        ch.query(0, "SELECT count() FROM t.flows_local"),
        (on[0] + 20_000).to_string()
    );
}

#[test]
fn chdb_takes_the_current_tables_and_answers_over_them() {
    // The environment scripts/install-deps.sh makes, or $TAPFLOW_PYTHON.
    let python = std::env::var("TAPFLOW_PYTHON")
        .unwrap_or_else(|_| "/var/cache/tapflow/pyenv/bin/python3".to_owned());
    let probe = Command::new(&python).args(["-c", "import chdb"]).output();
    if !probe.is_ok_and(|o| o.status.success()) {
        eprintln!(
            "skipped: chdb_takes_the_current_tables_and_answers_over_them: no chdb in {python} \
             (scripts/install-deps.sh installs it)"
        );
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let schema = Schema {
        dialect: Dialect::Current,
        layout: Layout::Single,
        database: "t".into(),
        retain_days: 30,
    };
    let f = flows(20_000);
    let mut rows = Vec::new();
    for f in &f {
        encode_flow(&mut rows, f);
    }
    let data = dir.path().join("flows.rowbinary");
    std::fs::write(&data, &rows).unwrap();
    let structure: Vec<String> = FLOW_COLUMNS
        .iter()
        .map(|(n, t)| {
            let t = match t {
                ColumnType::TimestampMicros => "DateTime64(6, \\'UTC\\')",
                ColumnType::Addr16 => "IPv6",
                ColumnType::U8 => "UInt8",
                ColumnType::U16 => "UInt16",
                ColumnType::U32 => "UInt32",
                ColumnType::U64 => "UInt64",
                ColumnType::Utf8 => "String",
            };
            format!("{n} {t}")
        })
        .collect();
    let mut statements = schema.statements();
    statements.push(format!(
        "INSERT INTO t.flows SELECT * FROM file('{}', 'RowBinary', '{}')",
        data.display(),
        structure.join(", ")
    ));
    let script = format!(
        "import json, sys\nfrom chdb import session\ns = session.Session({:?})\nfor q in json.load(sys.stdin):\n    s.query(q)\n\
         for q in [{:?}, {:?}, {:?}, {:?}]:\n    print(s.query(q, 'TSV').bytes().decode().strip())\n",
        dir.path().join("db").display().to_string(),
        format!("SELECT {TOTALS} FROM t.flows"),
        format!("SELECT {ROLLUP_TOTALS} FROM t.rollup_1m"),
        TOP_SRC.replace('\n', " "),
        "SELECT engine_full LIKE '%TTL%' AND create_table_query LIKE '%CODEC(DoubleDelta%' FROM system.tables WHERE database = 't' AND name = 'flows'",
    );
    let mut child = Command::new(&python)
        .args(["-c", &script])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let json = format!(
        "[{}]",
        statements
            .iter()
            .map(|s| format!("{s:?}"))
            .collect::<Vec<_>>()
            .join(",")
    );
    use std::io::Write;
    child
        .stdin
        .take()
        .unwrap()
        .write_all(json.as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "chdb: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let out = String::from_utf8(out.stdout).unwrap();
    let expected = format!(
        "{}\n{}\n{}\n1\n",
        totals(&f),
        rollup_totals(&f),
        top_src(&f)
    );
    assert_eq!(out, expected);
}

#[test]
fn the_same_queries_answer_the_same_over_parquet_a_clickhouse_server_and_a_cluster() {
    use tapflow_store::clickhouse::ClickHouseEngine;
    use tapflow_store::parquet::ParquetEngine;
    use tapflow_store::query::{
        Key, Kind, Metric, Prefixes, Query, QueryEngine, QueryResult, Window, filter,
    };
    // One server (database `t`) and a cluster of two shards (database `c`).
    let ch = Servers::start(28500, 2);
    let f = flows(60_000);
    let urls = [
        format!("http://{}/t", ch.host(0)),
        format!("http://{},{}/c?cluster=tapflow", ch.host(0), ch.host(1)),
    ];
    // The collector's counters: two intervals of one exporter's domain, one of another domain,
    // and one interval that ends after the window asked for below.
    let t0 = (f[0].flow.start_ns() / 1000) as i64;
    let at = |s: i64| u64::try_from(t0 + s * 1_000_000).unwrap() * 1000;
    let exporter = f[0].exporter;
    let counters = |domain, time_ns, records, lost| ExporterStats {
        exporter,
        domain,
        time_ns,
        records,
        sequence_lost: lost,
        template_missing: domain.into(),
        bad_messages: 1,
    };
    let stats = [
        counters(1, at(60), 1000, 0),
        counters(1, at(120), 2000, 7),
        counters(2, at(60), 500, 3),
        counters(1, at(7200), 9, 9),
    ];
    // sFlow interface counter samples: interface 3 of domain 1 with a 32-bit counter that
    // wraps and a 64-bit one reset, interface 4 sampled once, and one sample after the window.
    let sample = |domain, if_index, s, in_octets, in_errors| InterfaceCounters {
        exporter,
        domain,
        received_ns: at(s),
        counters: IfCounters {
            if_index,
            if_speed: 1_000_000_000,
            if_status: 3,
            in_octets,
            out_octets: in_octets / 2,
            in_ucast_pkts: in_errors,
            in_errors,
            out_discards: 1,
            ..IfCounters::default()
        },
    };
    let samples = [
        sample(1, 3, 30, 1_000, u32::MAX - 1),
        sample(1, 3, 60, 5_000, 3),
        sample(1, 3, 90, 400, 10),
        sample(1, 4, 60, 7, 0),
        sample(1, 3, 7200, 1 << 40, 99),
    ];
    // Interface names: 1 from the operator's interfaces file with its speed, then named
    // again by the exporter without one; 2 named by the exporter alone.
    let named = |index, name: &str, speed, s| InterfaceName {
        exporter,
        domain: 0,
        index,
        name: name.into(),
        description: String::new(),
        speed,
        received_ns: at(s),
    };
    let names = [
        named(1, "uplink", 10_000_000_000, 0),
        named(1, "ge-0/0/1", 0, 60),
        named(2, "ge-0/0/2", 0, 60),
    ];
    for url in &urls {
        let mut store = Box::new(ClickHouseStore::open(config(url.clone(), 20_000)).unwrap());
        store.insert(&f).unwrap();
        store.insert_exporter_stats(&stats).unwrap();
        store.insert_if_counters(&samples).unwrap();
        store.insert_interfaces(&names).unwrap();
        assert_eq!(store.close().unwrap().stored, 60_000);
    }
    let dir = tempfile::tempdir().unwrap();
    let mut parquet = Box::new(ParquetStore::open(dir.path(), ParquetOptions::default()).unwrap());
    parquet.insert(&f).unwrap();
    parquet.insert_exporter_stats(&stats).unwrap();
    parquet.insert_if_counters(&samples).unwrap();
    parquet.insert_interfaces(&names).unwrap();
    assert_eq!(parquet.close().unwrap().stored, 60_000);

    let parquet = ParquetEngine::new(dir.path(), 2).prefer_rollups(false);
    let servers: Vec<ClickHouseEngine> = urls
        .iter()
        .map(|u| ClickHouseEngine::open(u).unwrap().prefer_rollups(false))
        .collect();
    let hour = Window {
        start_us: t0,
        end_us: t0 + 3_600_000_000,
    };
    let want = vec![
        ExporterStats {
            time_ns: at(120),
            records: 3000,
            sequence_lost: 7,
            template_missing: 2,
            bad_messages: 2,
            ..counters(1, 0, 0, 0)
        },
        ExporterStats {
            bad_messages: 1,
            ..counters(2, at(60), 500, 3)
        },
    ];
    assert_eq!(parquet.exporter_stats(hour).unwrap(), want);
    for (url, clickhouse) in urls.iter().zip(&servers) {
        assert_eq!(clickhouse.exporter_stats(hour).unwrap(), want, "{url}");
    }
    // `query --interfaces` over the hour and over all time.
    let interfaces = parquet.interfaces(hour).unwrap();
    let got: Vec<_> = interfaces
        .iter()
        .map(|t| (t.domain, t.if_index, t.samples, t.in_octets, t.out_octets))
        .collect();
    // 1000 → 5000 (4000), then reset to 400 (counted from 0); errors 2^32 - 2 → 3 (5) → 10 (7).
    assert_eq!(got, [(1, 3, 3, 4_400, 2_200), (1, 4, 1, 0, 0)]);
    assert_eq!(
        (interfaces[0].in_errors, interfaces[0].in_packets),
        (12, 12)
    );
    assert_eq!(
        (interfaces[0].first_ns, interfaces[0].last_ns),
        (at(30), at(90))
    );
    let all = Window {
        start_us: i64::MIN,
        end_us: i64::MAX,
    };
    let everything = parquet.interfaces(all).unwrap();
    assert_eq!(everything[0].samples, 4);
    for (url, clickhouse) in urls.iter().zip(&servers) {
        assert_eq!(clickhouse.interfaces(hour).unwrap(), interfaces, "{url}");
        assert_eq!(clickhouse.interfaces(all).unwrap(), everything, "{url}");
    }
    let half_hour = Some(Window {
        start_us: t0 + 600_000_000,
        end_us: t0 + 2_400_000_000,
    });
    let p24 = Some(Prefixes { v4: 24, v6: 64 });
    let queries: Vec<(Option<Window>, Option<&str>, Kind)> = vec![
        (None, None, Kind::Summary),
        (half_hour, Some("net 2001:db8::/32"), Kind::Summary),
        (
            half_hour,
            None,
            Kind::Top {
                key: Key::SrcAddr(None),
                order_by: Metric::Bytes,
                n: 10,
            },
        ),
        (
            None,
            Some("proto tcp and dst port 80"),
            Kind::Top {
                key: Key::Addr(None),
                order_by: Metric::Flows,
                n: 10,
            },
        ),
        (
            None,
            None,
            Kind::Top {
                key: Key::Port,
                order_by: Metric::Packets,
                n: 5,
            },
        ),
        (
            None,
            None,
            Kind::Top {
                key: Key::DstPort,
                order_by: Metric::Bps,
                n: 5,
            },
        ),
        (
            None,
            Some("not (udp or port 22) and flags A"),
            Kind::Top {
                key: Key::Exporter,
                order_by: Metric::Pps,
                n: 0,
            },
        ),
        (
            None,
            Some("in if 1 and vlan 2 and bytes >= 10000"),
            Kind::Top {
                key: Key::InIf,
                order_by: Metric::Bytes,
                n: 3,
            },
        ),
        (
            None,
            Some("src as 64501 or dst country JP"),
            Kind::Top {
                key: Key::SrcAs,
                order_by: Metric::Bytes,
                n: 0,
            },
        ),
        (
            None,
            Some("src net-name office or dst net-name \"transit\tA\""),
            Kind::Top {
                key: Key::SrcNet,
                order_by: Metric::Bytes,
                n: 0,
            },
        ),
        (
            None,
            Some("src net-role servers and not dst net-role servers or net-site x"),
            Kind::Top {
                key: Key::DstNet,
                order_by: Metric::Flows,
                n: 0,
            },
        ),
        (
            None,
            Some("not net-name \"dc1 web\""),
            Kind::Aggregate {
                keys: vec![Key::SrcNet, Key::DstPort],
                order_by: Metric::Flows,
                n: 0,
            },
        ),
        (
            None,
            Some("dst net-name -"),
            Kind::Aggregate {
                keys: vec![Key::SrcAs, Key::DstPort, Key::DstAs, Key::DstNet],
                order_by: Metric::Bytes,
                n: 7,
            },
        ),
        (
            half_hour,
            None,
            Kind::Series {
                every_us: 600_000_000,
                key: Some(Key::DstAs),
                order_by: Metric::Flows,
                n: 2,
            },
        ),
        (
            None,
            Some("src net-name \"lab's (new)\""),
            Kind::Top {
                key: Key::DstNet,
                order_by: Metric::Packets,
                n: 2,
            },
        ),
        (
            None,
            Some("not src country DE"),
            Kind::Aggregate {
                keys: vec![Key::SrcCountry, Key::DstAs, Key::DstCountry],
                order_by: Metric::Flows,
                n: 0,
            },
        ),
        (
            None,
            None,
            Kind::Aggregate {
                keys: vec![Key::Protocol, Key::DstPort],
                order_by: Metric::Bytes,
                n: 0,
            },
        ),
        (
            half_hour,
            None,
            Kind::Aggregate {
                keys: vec![Key::SrcAddr(p24), Key::Vlan],
                order_by: Metric::Flows,
                n: 20,
            },
        ),
        (
            None,
            None,
            Kind::Series {
                every_us: 600_000_000,
                key: Some(Key::Exporter),
                order_by: Metric::Bytes,
                n: 3,
            },
        ),
        (
            half_hour,
            Some("src net 10.1.0.0/16 or dst host 192.0.2.7"),
            Kind::Series {
                every_us: 300_000_000,
                key: None,
                order_by: Metric::Bytes,
                n: 0,
            },
        ),
        (
            None,
            None,
            Kind::Series {
                every_us: 1_800_000_000,
                key: Some(Key::Addr(p24)),
                order_by: Metric::Packets,
                n: 4,
            },
        ),
        (
            half_hour,
            Some("src net 10.1.0.0/16 and bytes > 1000"),
            Kind::List { limit: Some(50) },
        ),
        (
            Some(Window {
                start_us: t0,
                end_us: t0 + 60_000_000,
            }),
            None,
            Kind::List { limit: None },
        ),
    ];
    for (window, text, kind) in queries {
        let q = Query {
            window,
            filter: text.map(|t| filter::parse(t).unwrap()),
            kind,
        };
        let want = parquet.run(&q).unwrap().result;
        let empty = match &want {
            QueryResult::Flows(v) => v.is_empty(),
            QueryResult::Table { rows, .. } => rows.is_empty(),
            QueryResult::Summary(s) => s.total.flows == 0,
        };
        assert!(!empty, "the query selects something: {q:?}");
        // Interfaces come with their names, the file's speed kept under the exporter's name.
        if let QueryResult::Table { keys, if_names, .. } = &want {
            if keys.contains(&Key::InIf) {
                assert_eq!(if_names.name(None, 1), Some("ge-0/0/1"), "{q:?}");
                assert_eq!(if_names.name(Some(&exporter), 2), Some("ge-0/0/2"), "{q:?}");
                let one = if_names.get(&exporter, 1).unwrap();
                assert_eq!(one.speed, 10_000_000_000, "{q:?}");
            } else {
                assert!(if_names.is_empty(), "{q:?}");
            }
        }
        // AS numbers come with their names where enrichment knew them.
        if let QueryResult::Table { keys, as_names, .. } = &want {
            if keys.contains(&Key::SrcAs) {
                assert_eq!(as_names.get(&64500), Some(&"Example, Inc."), "{q:?}");
            }
            if keys.contains(&Key::DstAs) {
                assert_eq!(as_names.get(&15169), Some(&"Google LLC"), "{q:?}");
                assert!(!as_names.contains_key(&0), "{q:?}");
            }
        }
        for (url, clickhouse) in urls.iter().zip(&servers) {
            let got = clickhouse
                .run(&q)
                .unwrap_or_else(|e| panic!("{url} {q:?}: {e}"))
                .result;
            assert_eq!(got, want, "{url} {q:?}");
        }
    }

    // AS, country and network keys over whole hours from the places table, on both stores:
    // the same answers as each other (first and last times the hours' bounds), the same sums
    // as from the flows.
    let parquet_tiers = ParquetEngine::new(dir.path(), 2);
    let server_tiers: Vec<ClickHouseEngine> = urls
        .iter()
        .map(|u| ClickHouseEngine::open(u).unwrap())
        .collect();
    let places = [
        Kind::Top {
            key: Key::SrcAs,
            order_by: Metric::Bytes,
            n: 0,
        },
        Kind::Top {
            key: Key::DstCountry,
            order_by: Metric::Flows,
            n: 2,
        },
        Kind::Aggregate {
            keys: vec![Key::SrcNet, Key::SrcAs],
            order_by: Metric::Packets,
            n: 0,
        },
        Kind::Series {
            every_us: 3_600_000_000,
            key: Some(Key::DstNet),
            order_by: Metric::Bytes,
            n: 2,
        },
    ];
    let sums = |r: &QueryResult| match r {
        QueryResult::Table { rows, total, .. } => {
            let mut v: Vec<_> = rows
                .iter()
                .map(|r| {
                    let c = r.counters;
                    (
                        r.time_us.map(|t| t - t % 3_600_000_000),
                        r.values.clone(),
                        c.flows,
                        c.packets,
                        c.bytes,
                    )
                })
                .collect();
            v.sort();
            (v, total.flows, total.packets, total.bytes)
        }
        r => panic!("{r:?}"),
    };
    for kind in places {
        let q = Query {
            window: None,
            filter: None,
            kind,
        };
        let want = parquet_tiers.run(&q).unwrap();
        assert_eq!(want.stats.table, "places_1h", "{q:?}");
        let raw = parquet.run(&q).unwrap().result;
        if !matches!(q.kind, Kind::Top { n: 2, .. } | Kind::Series { .. }) {
            assert_eq!(sums(&want.result), sums(&raw), "{q:?}");
        }
        for (url, clickhouse) in urls.iter().zip(&server_tiers) {
            let got = clickhouse
                .run(&q)
                .unwrap_or_else(|e| panic!("{url} {q:?}: {e}"));
            assert_eq!(got.stats.table, "places_1h", "{url} {q:?}");
            assert_eq!(got.result, want.result, "{url} {q:?}");
        }
    }
}

/// Tables an older tapflow made, whose rollup views counted every row as a forward flow, are
/// brought up to date when a store opens them: from then on a direction with no packets is not
/// a flow, in the rollups as in the flow table's one-way view.
#[test]
fn tables_of_an_older_tapflow_learn_that_a_direction_without_packets_is_not_a_flow() {
    use tapflow_store::clickhouse::ClickHouseEngine;
    use tapflow_store::query::{Kind, Query, QueryEngine, QueryResult};
    let ch = Servers::start(28600, 1);
    let url = format!("http://{}/t", ch.host(0));
    // Today's tables, then turned back into the older ones: no fwd_flow, views by count().
    Box::new(ClickHouseStore::open(config(url.clone(), 5_000)).unwrap())
        .close()
        .unwrap();
    for (name, bucket) in [
        ("rollup_1m", "toStartOfMinute"),
        ("rollup_5m", "toStartOfFiveMinute"),
        ("rollup_1h", "toStartOfHour"),
    ] {
        ch.query(0, &format!("DROP TABLE t.{name}_mv"));
        ch.query(
            0,
            &format!(
                "CREATE MATERIALIZED VIEW t.{name}_mv TO t.{name} AS \
                 SELECT toUInt64({bucket}(toDateTime(intDiv(time_start, 1000000), 'UTC'))) * 1000000 AS time, \
                 exporter, domain, protocol, toUInt64(count()) AS flows, \
                 toUInt64(sum(rev_flow)) AS rev_flows, sum(packets) AS packets, sum(bytes) AS bytes, \
                 sum(rev_packets) AS rev_packets, sum(rev_bytes) AS rev_bytes FROM t.flows \
                 GROUP BY time, exporter, domain, protocol"
            ),
        );
    }
    ch.query(0, "ALTER TABLE t.flows DROP COLUMN fwd_flow");
    // An interfaces table from before the speed column.
    ch.query(0, "ALTER TABLE t.interfaces DROP COLUMN speed");
    assert_eq!(
        ch.query(
            0,
            "SELECT count() FROM system.columns WHERE database = 't' AND table = 'flows' AND name = 'fwd_flow'"
        ),
        "0"
    );

    let f = flows(3_400);
    let forward = f.iter().filter(|f| f.flow.fwd.packets > 0).count();
    let reverse = f.iter().filter(|f| f.flow.rev.packets > 0).count();
    assert!(
        forward < f.len(),
        "some connections are seen from their answer only"
    );
    let mut store = Box::new(ClickHouseStore::open(config(url.clone(), 5_000)).unwrap());
    insert_in_calls(store.as_mut(), &f, 1_000);
    let uplink = InterfaceName {
        exporter: f[0].exporter,
        index: 1,
        name: "uplink".into(),
        speed: 40_000_000_000,
        received_ns: 1_000,
        ..InterfaceName::default()
    };
    store
        .insert_interfaces(std::slice::from_ref(&uplink))
        .unwrap();
    store.close().unwrap();
    assert_eq!(
        ClickHouseEngine::open(&url)
            .unwrap()
            .interface_names()
            .unwrap(),
        [uplink]
    );
    for tier in ["1m", "5m", "1h"] {
        assert_eq!(
            ch.query(
                0,
                &format!("SELECT sum(flows), sum(rev_flows) FROM t.rollup_{tier}")
            ),
            format!("{forward}\t{reverse}"),
            "rollup {tier}"
        );
    }
    // `-I` from the flow table and from the rollups: one flow per direction with packets.
    for rollups in [false, true] {
        let engine = ClickHouseEngine::open(&url).unwrap();
        let q = Query {
            window: None,
            filter: None,
            kind: Kind::Summary,
        };
        let a = engine.prefer_rollups(rollups).run(&q).unwrap();
        let QueryResult::Summary(s) = a.result else {
            panic!("{:?}", a.result)
        };
        assert_eq!(
            s.total.flows,
            (forward + reverse) as u64,
            "rollups {rollups}"
        );
    }
}
