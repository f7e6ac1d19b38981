//! `tapflow import`: what `tapflow flows` writes as JSON lines and as CSV goes into the store
//! and comes back the same; a bad line stops the import with its file and line.

mod common;

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

use common::*;
use tapflow_store::StoredFlow;
use tapflow_store::parquet::partition::{Table, files_between};
use tapflow_store::parquet::reader::read_flows;

fn stored(dir: &Path) -> Vec<StoredFlow> {
    let mut out: Vec<StoredFlow> = files_between(dir, Table::Flows, i64::MIN, i64::MAX)
        .unwrap()
        .iter()
        .flat_map(|f| read_flows(f).unwrap())
        .collect();
    for f in &mut out {
        f.received_ns = 0;
    }
    out.sort_by_key(|f| (f.flow.start_ns(), f.flow.src, f.flow.sport, f.flow.dport));
    out
}

#[test]
fn json_and_csv_from_flows_import_to_the_same_store_rows() {
    let d = tempfile::tempdir().unwrap();
    let trace = built_trace(d.path(), "t.pcap", 300, 6, 7_000_000);
    let (json, csv) = (d.path().join("f.jsonl"), d.path().join("f.csv"));
    run_ok(
        tapflow(["flows", "-q", "-r"])
            .arg(&trace)
            .arg("--json")
            .arg(&json)
            .arg("--csv")
            .arg(&csv),
    );
    let csv_text = std::fs::read_to_string(&csv).unwrap();
    let records = csv_text.lines().count() as u64 - 1;
    assert!(records >= 300, "{records} records");

    let (s1, s2, s3) = (
        d.path().join("s1"),
        d.path().join("s2"),
        d.path().join("s3"),
    );
    let o = run_limited(
        tapflow(["import", "--store"]).arg(&s1).arg(&json),
        Duration::from_secs(60),
    );
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success(), "{err}");
    assert!(
        err.contains(&format!("{records} lines, {records} flows")),
        "{err}"
    );
    assert!(
        err.contains(&format!(
            "{records} flows received, {records} stored, 0 dropped"
        )),
        "{err}"
    );
    run_ok(tapflow(["import", "--store"]).arg(&s2).arg(&csv));
    // From stdin.
    let o = tapflow(["import", "--store"])
        .arg(&s3)
        .arg("-")
        .stdin(Stdio::from(std::fs::File::open(&json).unwrap()))
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));

    let (a, b, c) = (stored(&s1), stored(&s2), stored(&s3));
    assert_eq!(a.len() as u64, records);
    assert_eq!(a, b, "JSON and CSV give the same rows");
    assert_eq!(a, c);
    // The counters as the CSV has them.
    let col = |name: &str| {
        let k = csv_text
            .lines()
            .next()
            .unwrap()
            .split(',')
            .position(|c| c == name)
            .unwrap();
        csv_text
            .lines()
            .skip(1)
            .map(|l| l.split(',').nth(k).unwrap().parse::<u64>().unwrap())
            .sum::<u64>()
    };
    assert_eq!(
        a.iter().map(|f| f.flow.fwd.octets).sum::<u64>(),
        col("octets")
    );
    assert_eq!(
        a.iter().map(|f| f.flow.rev.packets).sum::<u64>(),
        col("rev_packets")
    );
}

#[test]
fn a_bad_line_names_its_file_and_line() {
    let d = tempfile::tempdir().unwrap();
    let trace = built_trace(d.path(), "t.pcap", 20, 4, 7_000_000);
    let json = d.path().join("f.jsonl");
    run_ok(
        tapflow(["flows", "-q", "-r"])
            .arg(&trace)
            .arg("--json")
            .arg(&json),
    );
    let mut lines: Vec<String> = std::fs::read_to_string(&json)
        .unwrap()
        .lines()
        .map(String::from)
        .collect();
    lines[4] = lines[4].replacen("\"sport\":", "\"sport\":99999", 1);
    let bad = write_file(d.path(), "bad.jsonl", (lines.join("\n") + "\n").as_bytes());
    let store = d.path().join("s");
    let o = run_limited(
        tapflow(["import", "--store"]).arg(&store).arg(&bad),
        Duration::from_secs(60),
    );
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{err}");
    let line = err
        .lines()
        .find(|l| l.starts_with("tapflow: error:"))
        .unwrap();
    assert!(
        line.contains(&format!("{}:5: not a flow record", bad.display())),
        "{line}"
    );
    // The four lines before it are stored and counted.
    assert!(
        err.contains("4 flows received, 4 stored, 0 dropped"),
        "{err}"
    );
    assert_eq!(stored(&store).len(), 4);

    let other = write_file(d.path(), "x.txt", b"hello\n");
    let o = Command::new(bin())
        .args(["import", "--store"])
        .arg(&store)
        .arg(&other)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(
        err.contains("x.txt:1: neither a JSON flow record nor the CSV header"),
        "{err}"
    );
}
