//! Readers that are not ours read the store: chdb (ClickHouse in a Python module) and DuckDB
//! give the same totals and the same top-10 senders as the flows written. They come from PyPI
//! into the Python environment `scripts/install-deps.sh` makes (`TAPFLOW_PYTHON`, default
//! `/var/cache/tapflow/pyenv/bin/python3`); without them the test prints one `skipped:` line.

mod common;

use std::collections::HashMap;
use std::path::Path;
use std::process::Command;
use std::time::Duration;

use common::{H, day0_us, flows};
use tapflow_store::schema::addr16;
use tapflow_store::{FlowStore, ParquetOptions, ParquetStore, StoredFlow};

fn python() -> String {
    std::env::var("TAPFLOW_PYTHON")
        .unwrap_or_else(|_| "/var/cache/tapflow/pyenv/bin/python3".to_owned())
}

/// Whether `module` imports in [`python`].
fn has(module: &str) -> bool {
    Command::new(python())
        .args(["-c", &format!("import {module}")])
        .output()
        .is_ok_and(|o| o.status.success())
}

/// The answer every reader must give: one line of totals, then the top 10 senders as
/// `HEXADDR BYTES` lines (one-way flows: a row's forward bytes to its source, its reverse bytes
/// to its destination when it has reverse packets), then the 1-hour rollup's byte total.
fn expected(input: &[StoredFlow]) -> String {
    let mut sent: HashMap<[u8; 16], u64> = HashMap::new();
    let (mut p, mut b, mut rp, mut rb) = (0u64, 0u64, 0u64, 0u64);
    let mut first = u64::MAX;
    for s in input {
        let f = &s.flow;
        p += f.fwd.packets;
        b += f.fwd.octets;
        rp += f.rev.packets;
        rb += f.rev.octets;
        first = first.min(f.start_ns() / 1000);
        *sent.entry(addr16(f.ipv6, &f.src)).or_default() += f.fwd.octets;
        if f.rev.packets > 0 {
            *sent.entry(addr16(f.ipv6, &f.dst)).or_default() += f.rev.octets;
        }
    }
    let hex = |a: &[u8; 16]| a.iter().map(|x| format!("{x:02X}")).collect::<String>();
    let mut top: Vec<(String, u64)> = sent.iter().map(|(a, &v)| (hex(a), v)).collect();
    top.sort_by(|x, y| y.1.cmp(&x.1).then(x.0.cmp(&y.0)));
    let mut out = format!("{} {p} {b} {rp} {rb} {first}\n", input.len());
    for (a, v) in top.into_iter().take(10) {
        out.push_str(&format!("{a} {v}\n"));
    }
    out.push_str(&format!("{}\n", b + rb));
    out
}

const CHDB: &str = r#"
import chdb, sys
d = sys.argv[1]
f = f"file('{d}/flows/*/*/*.parquet', Parquet)"
q = lambda s: chdb.query(s, "TSV").bytes().decode()
out = q(f"SELECT count(), sum(packets), sum(bytes), sum(rev_packets), sum(rev_bytes), "
        f"toUnixTimestamp64Micro(min(time_start)) FROM {f}").replace("\t", " ")
out += q(f"SELECT hex(a), sum(b) AS s FROM (SELECT src_addr AS a, bytes AS b FROM {f} "
         f"UNION ALL SELECT dst_addr, rev_bytes FROM {f} WHERE rev_packets > 0) "
         f"GROUP BY a ORDER BY s DESC, hex(a) LIMIT 10").replace("\t", " ")
out += q(f"SELECT sum(bytes) + sum(rev_bytes) FROM file('{d}/rollup_1h/*/*.parquet', Parquet)")
sys.stdout.write(out)
"#;

const DUCKDB: &str = r#"
import duckdb, sys
d = sys.argv[1]
f = f"read_parquet('{d}/flows/*/*/*.parquet')"
rows = lambda s: duckdb.sql(s).fetchall()
t = rows(f"SELECT count(*), sum(packets), sum(bytes), sum(rev_packets), sum(rev_bytes), "
         f"epoch_us(min(time_start)) FROM {f}")[0]
out = " ".join(str(int(x)) for x in t) + "\n"
for a, s in rows(f"SELECT hex(a), sum(b) AS s FROM (SELECT src_addr AS a, bytes AS b FROM {f} "
                 f"UNION ALL SELECT dst_addr, rev_bytes FROM {f} WHERE rev_packets > 0) "
                 f"GROUP BY a ORDER BY s DESC, hex(a) LIMIT 10"):
    out += f"{a} {int(s)}\n"
out += str(int(rows(f"SELECT sum(bytes) + sum(rev_bytes) FROM read_parquet('{d}/rollup_1h/*/*.parquet')")[0][0])) + "\n"
sys.stdout.write(out)
"#;

fn run(script: &str, dir: &Path) -> String {
    let o = Command::new(python())
        .args(["-c", script])
        .arg(dir)
        .output()
        .expect("run python");
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    String::from_utf8(o.stdout).unwrap()
}

#[test]
fn chdb_and_duckdb_read_the_same_totals_and_top_senders() {
    let (chdb, duckdb) = (has("chdb"), has("duckdb"));
    if !chdb && !duckdb {
        eprintln!(
            "skipped: chdb_and_duckdb_read_the_same_totals_and_top_senders: neither chdb nor \
             duckdb imports in {} (scripts/install-deps.sh installs them)",
            python()
        );
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    // A few hosts send most: a top 10 with clear gaps, over IPv4 and IPv6, across 3 hours.
    let input = flows(42, 20_000, day0_us() + 5 * H, 3 * H, 40);
    let opts = ParquetOptions {
        flush_interval: Duration::from_secs(3600),
        ..ParquetOptions::default()
    };
    let mut store = Box::new(ParquetStore::open(dir.path(), opts).unwrap());
    for chunk in input.chunks(3000) {
        store.insert(chunk).unwrap();
        store.flush().unwrap();
    }
    store.close().unwrap();
    let want = expected(&input);
    if chdb {
        assert_eq!(run(CHDB, dir.path()), want, "chdb");
    } else {
        eprintln!(
            "skipped: the chdb half: chdb does not import in {}",
            python()
        );
    }
    if duckdb {
        assert_eq!(run(DUCKDB, dir.path()), want, "duckdb");
    } else {
        eprintln!(
            "skipped: the DuckDB half: duckdb does not import in {}",
            python()
        );
    }
}
