//! `tapflow flows` on inputs whose time goes wrong: files written here with the project's
//! packet builder and pcap writer.

mod common;

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

use common::*;
use tapflow_wire::build::{self, FrameSpec, L4};
use tapflow_wire::ethernet::EthernetAddress;
use tapflow_wire::{LinkType, pcap};

const S: u64 = 1_000_000_000;
/// 2012-06-29: a capture's own time.
const T: u64 = 1_340_954_905 * S;

/// One CSV flow record, by column name.
type Row = BTreeMap<String, String>;

/// A TCP segment 192.0.2.1:40000 → 192.0.2.2:80, or the other way when `back`.
fn segment(back: bool) -> Vec<u8> {
    let (a, b) = ("192.0.2.1".parse().unwrap(), "192.0.2.2".parse().unwrap());
    let spec = FrameSpec {
        src_mac: EthernetAddress([2, 0, 0, 0, 0, 1]),
        dst_mac: EthernetAddress([2, 0, 0, 0, 0, 2]),
        src_ip: if back { b } else { a },
        dst_ip: if back { a } else { b },
        proto: L4::Tcp,
        src_port: if back { 80 } else { 40000 },
        dst_port: if back { 40000 } else { 80 },
        frame_len: 80,
    };
    let mut f = vec![0u8; spec.frame_len];
    build::build(&spec, &mut f).unwrap();
    f
}

/// A pcap of Ethernet frames at these times (ns).
fn write_pcap(path: &Path, frames: &[(u64, Vec<u8>)]) {
    let mut out = Vec::new();
    pcap::write_header(&mut out, LinkType::Ethernet, 65535);
    for (ts, f) in frames {
        pcap::write_record(&mut out, *ts, f, f.len() as u32);
    }
    std::fs::write(path, out).unwrap();
}

/// `tapflow flows -r FILE -q --csv CSV`: the records, in the order written.
fn flows(file: &Path) -> Vec<Row> {
    let csv = file.with_extension("csv");
    let mut c = tapflow(["flows", "-q", "-r"]);
    c.arg(file).arg("--csv").arg(&csv);
    let o = run_limited(&mut c, Duration::from_secs(60));
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let text = std::fs::read_to_string(&csv).unwrap();
    let mut lines = text.lines();
    let header: Vec<&str> = lines.next().unwrap().split(',').collect();
    lines
        .map(|l| {
            header
                .iter()
                .map(|h| h.to_string())
                .zip(l.split(',').map(String::from))
                .collect()
        })
        .collect()
}

fn num(r: &Row, k: &str) -> u64 {
    r[k].parse().unwrap_or_else(|_| panic!("{k} = {:?}", r[k]))
}

/// A record's (start, end, packets both ways), times in ns.
fn span(r: &Row) -> (u64, u64, u64) {
    let (n, rn) = (num(r, "packets"), num(r, "rev_packets"));
    let firsts = [(n, "first_ns"), (rn, "rev_first_ns")];
    let lasts = [(n, "last_ns"), (rn, "rev_last_ns")];
    let start = firsts.iter().filter(|x| x.0 > 0).map(|x| num(r, x.1)).min();
    let end = lasts.iter().filter(|x| x.0 > 0).map(|x| num(r, x.1)).max();
    (start.unwrap(), end.unwrap(), n + rn)
}

/// Item 17: a packet dated 1970 and a jump 700 s back in the middle of a connection (a
/// merged file) end the record before them instead of stretching it; no record lasts the
/// active timeout (300 s), and the packet dated 0 is alone in its record.
#[test]
fn time_going_back_ends_the_record_and_none_lasts_the_active_timeout() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("back.pcap");
    let (a, b) = (segment(false), segment(true));
    let at = |s: u64| T + s * S;
    write_pcap(
        &file,
        &[
            (at(1000), a.clone()),
            (at(1001), b.clone()),
            (0, a.clone()),
            (at(1002), b.clone()),
            (at(1003), a.clone()),
            (at(300), b.clone()),
            (at(301), a.clone()),
            (at(1100), a.clone()),
        ],
    );
    let rows = flows(&file);
    let spans: Vec<_> = rows.iter().map(span).collect();
    assert_eq!(
        spans.iter().map(|s| s.2).sum::<u64>(),
        8,
        "every packet counted once: {rows:?}"
    );
    for (r, (start, end, n)) in rows.iter().zip(&spans) {
        assert!(
            end - start < 300 * S,
            "record lasts the active timeout: {r:?}"
        );
        assert!(
            *start != 0 || *n == 1,
            "a record of good packets from 1970: {r:?}"
        );
    }
    let ends: Vec<_> = rows
        .iter()
        .map(|r| (span(r).0, r["end_reason"].as_str()))
        .collect();
    assert_eq!(
        ends,
        [
            (at(1000), "forced"),
            (0, "idle"),
            (at(1002), "forced"),
            (at(300), "idle"),
            (at(1100), "forced"),
        ]
    );
}
