//! `tapflow query` against nfdump on the same flows: nfpcapd meters a trace into nfcapd files,
//! `nfdump -o csv` lists its one-way flows, the test stores exactly those in the Parquet store,
//! and top-N by address, port and protocol and the `-I` totals must equal nfdump's on them.

mod common;

use std::collections::HashMap;
use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use common::{built_trace, corpus, run_limited, run_ok, tapflow};
use tapflow_store::query::filter::protocol;
use tapflow_store::query::time::parse_time;
use tapflow_store::{FlowStore, ParquetOptions, ParquetStore, StoredFlow};
use tapflow_wire::flowrecord::FlowRecord;

fn nfdump(args: &[&str]) -> String {
    let mut c = Command::new("nfdump");
    c.env("TZ", "UTC").args(args);
    let o = run_limited(&mut c, Duration::from_secs(120));
    assert!(
        o.status.success(),
        "nfdump {args:?}: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    String::from_utf8(o.stdout).unwrap()
}

/// nfpcapd's flows of `pcap` in `dir/nf`, and those flows in the store `dir/store`; returns
/// both directories.
fn both_stores(dir: &Path, pcap: &Path) -> (PathBuf, PathBuf) {
    let nf = dir.join("nf");
    std::fs::create_dir(&nf).unwrap();
    let mut c = Command::new("nfpcapd");
    c.env("TZ", "UTC")
        .arg("-r")
        .arg(pcap)
        .arg("-w")
        .arg(&nf)
        .args(["-e", "3600,3600"]);
    let o = run_limited(&mut c, Duration::from_secs(120));
    assert!(o.status.success(), "nfpcapd (apt-get install nfdump)");
    let csv = nfdump(&["-R", nf.to_str().unwrap(), "-o", "csv", "-q"]);
    let flows: Vec<StoredFlow> = csv
        .lines()
        .filter(|l| !l.starts_with("ts,") && !l.is_empty())
        .filter_map(from_nfdump_csv)
        .collect();
    assert!(flows.len() > 100, "{} flows", flows.len());
    let store = dir.join("store");
    let mut s = Box::new(ParquetStore::open(&store, ParquetOptions::default()).unwrap());
    s.insert(&flows).unwrap();
    let report = s.close().unwrap();
    assert_eq!(report.stored, flows.len() as u64);
    (nf, store)
}

/// One line of `nfdump -o csv` as a stored one-way flow (its reverse counters zero, as
/// nfpcapd's uniflows are); records without packets (nfpcapd's tunnel markers) are left out,
/// as nfdump's statistics leave them out.
fn from_nfdump_csv(line: &str) -> Option<StoredFlow> {
    let f: Vec<&str> = line.split(',').map(str::trim).collect();
    let packets: u64 = f[11].parse().ok()?;
    if packets == 0 {
        return None;
    }
    let start_us = parse_time(f[0]).ok()?;
    let dur_us = (f[2].parse::<f64>().ok()? * 1e6).round() as i64;
    let addr = |s: &str| -> Option<(bool, [u8; 16])> {
        let mut a = [0u8; 16];
        match s.parse::<IpAddr>().ok()? {
            IpAddr::V4(v) => {
                a[..4].copy_from_slice(&v.octets());
                Some((false, a))
            }
            IpAddr::V6(v) => Some((true, v.octets())),
        }
    };
    let (ipv6, src) = addr(f[3])?;
    let (_, dst) = addr(f[4])?;
    let mut r = FlowRecord {
        ipv6,
        proto: protocol(f[7]).ok()?,
        src,
        dst,
        sport: f[5].parse().ok()?,
        dport: f[6].parse().ok()?,
        ..FlowRecord::default()
    };
    r.fwd.packets = packets;
    r.fwd.octets = f[12].parse().ok()?;
    r.fwd.first_ns = start_us as u64 * 1000;
    r.fwd.last_ns = (start_us + dur_us) as u64 * 1000;
    Some(StoredFlow {
        flow: r,
        sampling: 1,
        ..StoredFlow::default()
    })
}

/// (value, flows, packets, bytes) rows of `nfdump -s STAT -o csv`.
fn nfdump_top(nf: &Path, stat: &str, n: &str) -> Vec<(String, u64, u64, u64)> {
    nfdump(&[
        "-R",
        nf.to_str().unwrap(),
        "-s",
        stat,
        "-n",
        n,
        "-o",
        "csv",
        "-q",
    ])
    .lines()
    .skip_while(|l| !l.starts_with("ts,"))
    .skip(1)
    .take_while(|l| !l.is_empty())
    .map(|l| {
        let c: Vec<&str> = l.split(',').collect();
        (
            c[4].to_string(),
            c[5].parse().unwrap(),
            c[7].parse().unwrap(),
            c[9].parse().unwrap(),
        )
    })
    .collect()
}

/// The same from `tapflow query -s STAT -n N --csv`.
fn tapflow_top(store: &Path, stat: &str, n: &str) -> Vec<(String, u64, u64, u64)> {
    let out = run_ok(&mut tapflow([
        "query",
        "-R",
        store.to_str().unwrap(),
        "-s",
        stat,
        "-n",
        n,
        "--csv",
    ]));
    out.lines()
        .skip(1)
        .map(|l| {
            let c: Vec<&str> = l.split(',').collect();
            (
                c[0].to_string(),
                c[1].parse().unwrap(),
                c[2].parse().unwrap(),
                c[3].parse().unwrap(),
            )
        })
        .collect()
}

/// nfdump shows an IPv6 address whose first 96 bits are zero (`::1`) the IPv4 way (`0.0.0.1`)
/// and leaves the unspecified address (`::`, IPv6 duplicate address detection) out of its
/// statistics: ours are shown the same way here, and both without the unspecified address.
fn as_nfdump_shows(rows: Vec<(String, u64, u64, u64)>) -> Vec<(String, u64, u64, u64)> {
    rows.into_iter()
        .map(|mut r| {
            if let Ok(IpAddr::V6(a)) = r.0.parse::<IpAddr>() {
                let o = a.octets();
                if o[..12] == [0; 12] {
                    r.0 = std::net::Ipv4Addr::new(o[12], o[13], o[14], o[15]).to_string();
                }
            }
            r
        })
        .filter(|r| r.0 != "0.0.0.0")
        .collect()
}

/// Equal rows, in equal order of the metric; values tied at the same metric may come in
/// either order (nfdump's order among ties is its hash table's), and a tie at the cut may
/// keep a different member.
fn assert_same_top(
    what: &str,
    ours: &[(String, u64, u64, u64)],
    theirs: &[(String, u64, u64, u64)],
    metric: fn(&(String, u64, u64, u64)) -> u64,
) {
    assert_eq!(ours.len(), theirs.len(), "{what}: row counts");
    assert!(!ours.is_empty(), "{what}: no rows");
    let cut = metric(ours.last().unwrap());
    let by_value = |rows: &[(String, u64, u64, u64)]| -> HashMap<String, (u64, u64, u64)> {
        rows.iter()
            .filter(|r| metric(r) > cut)
            .map(|r| (r.0.clone(), (r.1, r.2, r.3)))
            .collect()
    };
    assert_eq!(
        ours.iter().map(metric).collect::<Vec<_>>(),
        theirs.iter().map(metric).collect::<Vec<_>>(),
        "{what}: the ranked metric"
    );
    assert_eq!(by_value(ours), by_value(theirs), "{what}: rows");
}

fn agrees_with_nfdump(pcap: &Path) {
    let dir = tempfile::tempdir().unwrap();
    let (nf, store) = both_stores(dir.path(), pcap);
    let bytes = |r: &(String, u64, u64, u64)| r.3;
    let flows = |r: &(String, u64, u64, u64)| r.1;
    let packets = |r: &(String, u64, u64, u64)| r.2;
    for (stat, metric) in [
        ("srcip/bytes", bytes as fn(&_) -> u64),
        ("dstip/packets", packets),
        ("ip/flows", flows),
        ("dstport/bytes", bytes),
        ("srcport/flows", flows),
        ("port/packets", packets),
    ] {
        for n in ["20", "0"] {
            let what = format!("{} -s {stat} -n {n}", pcap.display());
            assert_same_top(
                &what,
                &as_nfdump_shows(tapflow_top(&store, stat, n)),
                &as_nfdump_shows(nfdump_top(&nf, stat, n)),
                metric,
            );
        }
    }
    // The port tables above came from the 1-hour ports table, the address ones from the hosts.
    for (stat, table) in [("dstport/bytes", "ports_1h"), ("srcip/bytes", "hosts_1h")] {
        let o = tapflow(["query", "-R", store.to_str().unwrap(), "-s", stat, "-v"])
            .output()
            .unwrap();
        let said = String::from_utf8_lossy(&o.stderr);
        assert!(
            said.contains(&format!("tier {table},")),
            "-s {stat}: {said}"
        );
    }
    // Protocols: nfdump names them in the value column by number.
    let ours: Vec<(u8, u64, u64, u64)> = tapflow_top(&store, "proto/bytes", "0")
        .into_iter()
        .map(|r| (protocol(&r.0).unwrap(), r.1, r.2, r.3))
        .collect();
    let theirs: Vec<(u8, u64, u64, u64)> = nfdump_top(&nf, "proto/bytes", "0")
        .into_iter()
        .map(|r| (r.0.parse().unwrap(), r.1, r.2, r.3))
        .collect();
    assert_eq!(ours, theirs, "-s proto/bytes");

    // -I: the same words and numbers for flows, packets and bytes, in all and per protocol.
    let pick = |text: &str| -> Vec<String> {
        text.lines()
            .filter(|l| {
                ["Flows", "Packets", "Bytes"]
                    .iter()
                    .any(|w| l.starts_with(w))
            })
            .map(str::to_string)
            .collect()
    };
    let ours = run_ok(&mut tapflow(["query", "-R", store.to_str().unwrap(), "-I"]));
    let theirs = nfdump(&["-R", nf.to_str().unwrap(), "-I"]);
    assert_eq!(pick(&ours), pick(&theirs), "-I");
    assert_eq!(pick(&ours).len(), 15);
}

#[test]
fn top_n_and_totals_equal_nfdumps_on_built_traffic() {
    let dir = tempfile::tempdir().unwrap();
    let pcap = built_trace(dir.path(), "t.pcap", 400, 12, 1_000_000);
    agrees_with_nfdump(&pcap);
}

#[test]
fn top_n_and_totals_equal_nfdumps_on_real_traces() {
    let Some(corpus) = corpus() else { return };
    for name in [
        "composite-nfstream-163apps-backtoback.pcap",
        "stratosphere-slips-test-cc-capture-1.pcap",
    ] {
        agrees_with_nfdump(&corpus.join(name));
    }
}

/// Bad words, windows, keys and orders: one line naming them, exit code 2, before any file is
/// read; a store that is not there: exit code 1.
#[test]
fn bad_queries_say_what_is_wrong() {
    let dir = tempfile::tempdir().unwrap();
    let store = dir.path().to_str().unwrap();
    for (args, says) in [
        (vec!["-s", "srcip/bytez"], "unknown order 'bytez'"),
        (vec!["-s", "srcipp"], "unknown key 'srcipp'"),
        (vec!["-t", "yesterday"], "time window 'yesterday'"),
        (vec!["-a", "ip,proto"], "-a takes directional keys"),
        (vec!["--every", "5"], "duration '5'"),
        (vec!["-c", "1", "src", "net", "10.0.0.1/8"], "host bits"),
        (vec!["dst", "prot", "80"], "'prot'"),
    ] {
        let mut c = tapflow(["query", "-R", store]);
        c.args(&args);
        let o = run_limited(&mut c, Duration::from_secs(60));
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(2), "{args:?}: {err}");
        assert_eq!(err.lines().count(), 1, "{args:?}: {err}");
        assert!(err.contains(says), "{args:?}: {err}");
    }
    let o = run_limited(
        &mut tapflow(["query", "-R", "/nonexistent/store", "-I"]),
        Duration::from_secs(60),
    );
    assert_eq!(o.status.code(), Some(1));
}

/// A reader that stops early (`tapflow query … | head`) ends the query quietly, as it ends
/// nfdump: exit code 0, nothing on stderr.
#[test]
fn a_reader_that_stops_early_is_not_an_error() {
    let dir = tempfile::tempdir().unwrap();
    let pcap = built_trace(dir.path(), "t.pcap", 200, 4, 1_000_000);
    let store = dir.path().join("store");
    run_ok(&mut tapflow([
        "flows",
        "-r",
        pcap.to_str().unwrap(),
        "--store",
        store.to_str().unwrap(),
    ]));
    let mut c = tapflow(["query", "-R", store.to_str().unwrap()]);
    let mut child = c
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    // The read end closed before anything is written: the first write fails with EPIPE.
    drop(child.stdout.take());
    let o = child.wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(0), "{err}");
    assert!(err.is_empty(), "{err}");
}

/// The flow count of `tapflow query -R DIR -I` (from the rollups, or the flows with `--raw`).
fn summary_flows(store: &Path, raw: bool) -> u64 {
    let mut c = tapflow(["query", "-R", store.to_str().unwrap(), "-I", "--json"]);
    if raw {
        c.arg("--raw");
    }
    let out = run_ok(&mut c);
    let v: serde_json::Value = serde_json::from_str(out.lines().next().unwrap()).unwrap();
    v["flows"].as_u64().unwrap()
}

/// Meters `pcap` into a store with `tapflow flows --store` and returns the store and the
/// number of directions with packets in the records it wrote (`--csv`).
fn meter_into_store(dir: &Path, pcap: &Path) -> (PathBuf, u64, u64) {
    let store = dir.join("store");
    let csv = dir.join("flows.csv");
    run_ok(&mut tapflow([
        "flows",
        "-r",
        pcap.to_str().unwrap(),
        "--store",
        store.to_str().unwrap(),
        "--csv",
        csv.to_str().unwrap(),
    ]));
    let text = std::fs::read_to_string(&csv).unwrap();
    let mut lines = text.lines();
    let header: Vec<&str> = lines.next().unwrap().split(',').collect();
    let col = |name: &str| header.iter().position(|h| *h == name).unwrap();
    let (packets, rev_packets) = (col("packets"), col("rev_packets"));
    let (mut records, mut directions) = (0, 0);
    for l in lines {
        let f: Vec<&str> = l.split(',').collect();
        records += 1;
        for c in [packets, rev_packets] {
            directions += u64::from(f[c].parse::<u64>().unwrap() > 0);
        }
    }
    (store, records, directions)
}

/// A capture that starts mid-connection: a connection first seen from its SYN-ACK has an empty
/// initiator direction, which is not a flow. `query -I`, from the flows and from the rollups,
/// counts one flow per direction with packets.
#[test]
fn a_direction_without_packets_is_not_a_flow() {
    use common::traffic::{Conversation, Packet, pcap_file};
    use tapflow_wire::build::L4;
    let dir = tempfile::tempdir().unwrap();
    // TCP flags sit 13 bytes into the TCP header, after Ethernet (14) and IPv4 (20).
    let with_flags = |mut f: Vec<u8>, flags: u8| {
        f[14 + 20 + 13] = flags;
        f
    };
    let (syn, syn_ack, ack) = (0x02, 0x12, 0x10);
    let mut packets = Vec::new();
    let mut t = common::T0;
    let mut at = |f: Vec<u8>| {
        t += 1_000_000;
        packets.push(Packet::new(t, f));
    };
    // Conversation 0, 4 and 8 are IPv4 TCP ones; 1 is IPv4 UDP.
    let c = |n: u32| {
        let c = Conversation::nth(n);
        assert!(c.client.is_ipv4(), "{c:?}");
        c
    };
    // Seen from its SYN-ACK, then both sides talk: two flows.
    let (a, b, d, u) = (c(0), c(4), c(6), c(1));
    assert_eq!(
        (a.proto, b.proto, d.proto, u.proto),
        (L4::Tcp, L4::Tcp, L4::Tcp, L4::Udp)
    );
    at(with_flags(a.frame(false, 60, 0), syn_ack));
    at(with_flags(a.frame(true, 60, 1), ack));
    at(with_flags(a.frame(false, 400, 1), ack));
    // Only the SYN-ACK, as a reflection attack sends: one flow, the answer.
    at(with_flags(b.frame(false, 60, 0), syn_ack));
    // A whole handshake: two flows.
    at(with_flags(d.frame(true, 60, 0), syn));
    at(with_flags(d.frame(false, 60, 0), syn_ack));
    at(with_flags(d.frame(true, 60, 1), ack));
    // A UDP query with no answer: one flow.
    at(u.frame(true, 100, 0));
    let bytes = pcap_file(
        tapflow_wire::LinkType::Ethernet,
        true,
        false,
        65535,
        &packets,
    );
    let pcap = common::write_file(dir.path(), "mid.pcap", &bytes);
    let (store, records, directions) = meter_into_store(dir.path(), &pcap);
    assert_eq!((records, directions), (4, 6), "the meter's records");
    assert_eq!(summary_flows(&store, true), 6, "-I over the flows");
    assert_eq!(summary_flows(&store, false), 6, "-I over the rollups");
    let listed = run_ok(&mut tapflow([
        "query",
        "-R",
        store.to_str().unwrap(),
        "--json",
    ]));
    assert_eq!(listed.lines().count(), 6, "{listed}");
    // A top-N from a rollup says its times and rates are its buckets'; from the flows it does not.
    for (raw, label) in [(false, true), (true, false)] {
        let mut cmd = tapflow(["query", "-R", store.to_str().unwrap(), "-s", "srcip/bytes"]);
        if raw {
            cmd.arg("--raw");
        }
        let o = cmd.output().unwrap();
        assert!(o.status.success());
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(
            err.contains("first, last, bps and pps per ")
                && err.contains(" bucket of the rollup that answered"),
            label,
            "--raw {raw}: {err}"
        );
    }
}

/// The same on a real capture of SYN-ACK reflection, where every connection is seen from its
/// answer only.
#[test]
fn a_reflection_capture_counts_its_answers_only() {
    let Some(corpus) = corpus() else { return };
    let pcap = corpus.join("stopddos-amp-tcp-reflection-synack.pcap");
    if !pcap.is_file() {
        println!(
            "skipped: a_reflection_capture_counts_its_answers_only: no corpus at {} (set TAPFLOW_CORPUS)",
            pcap.display()
        );
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let (store, records, directions) = meter_into_store(dir.path(), &pcap);
    assert!(
        directions < 2 * records,
        "{directions} of {records} records"
    );
    assert_eq!(summary_flows(&store, true), directions, "-I over the flows");
    assert_eq!(
        summary_flows(&store, false),
        directions,
        "-I over the rollups"
    );
}
