//! `tapflow gen` on a real kernel: a veth pair between two private network namespaces, the
//! generator sending from A, and B's own receive counter as the oracle for what left. How much a
//! replay sends (once, `--loop N`, `--loop 0`), and frames the link cannot take: refused before
//! the start (`--size`), or counted by reason in a replay, which then fails. The replay inputs are
//! built here with the project's frame builder and pcap writer. Needs root; fails (never skips)
//! without it.

mod common;

use std::path::Path;
use std::process::Output;
use std::time::{Duration, Instant};

use common::*;
use tapflow_wire::build::{self, FrameSpec, L4};
use tapflow_wire::ethernet::EthernetAddress;
use tapflow_wire::linktype::LinkType;
use tapflow_wire::pcap;

/// A UDP frame of `len` bytes (built at 60 or more, then cut to `len`).
fn frame(port: u16, len: usize) -> Vec<u8> {
    let spec = FrameSpec {
        src_mac: EthernetAddress([2, 0, 0, 0, 0, 1]),
        dst_mac: EthernetAddress([2, 0, 0, 0, 0, 2]),
        src_ip: "198.18.0.1".parse().unwrap(),
        dst_ip: "198.18.0.2".parse().unwrap(),
        proto: L4::Udp,
        src_port: port,
        dst_port: 9,
        frame_len: len.max(build::MIN_FRAME_LEN),
    };
    let mut f = vec![0; spec.frame_len];
    build::build(&spec, &mut f).unwrap();
    f.truncate(len);
    f
}

/// Writes a pcap file of frames of these lengths.
fn write_pcap(path: &Path, lens: &[usize]) {
    let mut d = Vec::new();
    pcap::write_header(&mut d, LinkType::Ethernet, 65535);
    for (i, &len) in lens.iter().enumerate() {
        let f = frame(1024 + i as u16, len);
        pcap::write_record(&mut d, i as u64 * 1_000_000, &f, f.len() as u32);
    }
    std::fs::write(path, d).unwrap();
}

fn s(p: &Path) -> String {
    p.to_string_lossy().into_owned()
}

/// Frames B's interface has received.
fn rx_packets(p: &VethPair) -> u64 {
    let path = format!("/sys/class/net/{}/statistics/rx_packets", p.if_b);
    let mut c = std::process::Command::new("ip");
    c.args(["netns", "exec", &p.ns_b, "cat", &path]);
    run_ok(&mut c).trim().parse().unwrap()
}

/// Waits (up to 2 s) until B has received `n` frames, and returns what it has received.
fn rx_settled(p: &VethPair, n: u64) -> u64 {
    let start = Instant::now();
    loop {
        let got = rx_packets(p);
        if got >= n || start.elapsed() > Duration::from_secs(2) {
            return got;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Runs `tapflow gen -i A -q --summary-json DIR/gen.json ARGS` in A, with a time limit (a replay
/// that never ends fails the test); returns its output, stderr, and the JSON if it was written.
fn run_gen(p: &VethPair, dir: &Path, args: &[&str]) -> (Output, String, Option<String>) {
    let json = dir.join("gen.json");
    let _ = std::fs::remove_file(&json);
    let js = s(&json);
    let mut a = vec!["gen", "-i", &p.if_a, "-q", "--summary-json", &js];
    a.extend_from_slice(args);
    let o = run_limited(&mut p.tapflow_a(&a), Duration::from_secs(20));
    let err = String::from_utf8_lossy(&o.stderr).into_owned();
    (o, err, std::fs::read_to_string(&json).ok())
}

/// Runs a gen that must succeed and send `sent` frames, all of which B receives.
fn gen_ok(p: &VethPair, dir: &Path, args: &[&str], sent: u64) {
    let before = rx_packets(p);
    let (o, err, json) = run_gen(p, dir, args);
    assert!(
        o.status.success(),
        "gen {args:?} failed ({}): {err}",
        o.status
    );
    let json = json.expect("gen summary JSON");
    assert_eq!(json_u64(&json, "sent"), sent, "gen {args:?}: {json}");
    assert_eq!(json_u64(&json, "failed"), 0, "gen {args:?}: {json}");
    assert_eq!(
        rx_settled(p, before + sent) - before,
        sent,
        "gen {args:?}: frames B received"
    );
}

#[test]
fn a_replay_sends_the_file_once_by_default_and_loop_repeats_it() {
    let p = VethPair::new("grl");
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("seven.pcap");
    write_pcap(&file, &[60, 64, 128, 256, 512, 1024, 1514]);
    let f = s(&file);
    gen_ok(&p, dir.path(), &["--replay", &f], 7);
    gen_ok(&p, dir.path(), &["--replay", &f, "--loop", "3"], 21);
    gen_ok(&p, dir.path(), &["--replay", &f, "-l", "1"], 7);
    // -c cuts a replay short; --loop 0 repeats the file until -c (or --duration, or a signal).
    gen_ok(&p, dir.path(), &["--replay", &f, "-c", "5"], 5);
    gen_ok(
        &p,
        dir.path(),
        &["--replay", &f, "--loop", "0", "-c", "30"],
        30,
    );
    let (o, err, _) = run_gen(
        &p,
        dir.path(),
        &["--replay", &f, "--loop", "0", "--duration", "0.3"],
    );
    assert!(o.status.success(), "--loop 0 --duration: {err}");
    // --loop is for a replay.
    let o = run_limited(
        &mut p.tapflow_a(&["gen", "-i", &p.if_a, "-q", "--loop", "2", "-c", "1"]),
        Duration::from_secs(10),
    );
    assert_clean_error(&o, Some(2), &["--replay"], "--loop without --replay");
}

#[test]
fn a_size_larger_than_the_link_takes_is_refused_before_sending() {
    let p = VethPair::new("gsz");
    let dir = tempfile::tempdir().unwrap();
    // MTU 1500: frames of up to 1514 bytes.
    gen_ok(&p, dir.path(), &["--size", "1514", "-c", "3"], 3);
    let before = rx_packets(&p);
    for size in ["1515", "1600"] {
        let (o, _, json) = run_gen(&p, dir.path(), &["--size", size, "-c", "3"]);
        assert_clean_error(&o, Some(2), &[size], &format!("--size {size}"));
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(
            err.contains("MTU of 1500 allows frames of at most 1514 bytes"),
            "--size {size}: {err}"
        );
        assert!(
            json.is_none(),
            "--size {size}: a summary of a run never started"
        );
    }
    // The MTU read is the interface's own.
    ip(&["-n", &p.ns_a, "link", "set", &p.if_a, "mtu", "1000"]);
    let (o, _, _) = run_gen(&p, dir.path(), &["--size", "1015", "-c", "3"]);
    assert_clean_error(&o, Some(2), &["1015"], "--size 1015 at MTU 1000");
    assert!(String::from_utf8_lossy(&o.stderr).contains("MTU of 1000"));
    gen_ok(&p, dir.path(), &["--size", "1014", "-c", "2"], 2);
    assert_eq!(
        rx_packets(&p) - before,
        2,
        "nothing left for the refused sizes"
    );
}

#[test]
fn replay_frames_the_link_cannot_take_are_counted_by_reason_and_fail_the_run() {
    let p = VethPair::new("gtl");
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("mixed.pcap");
    write_pcap(&file, &[60, 1600, 100, 9000, 10, 1514]);
    let f = s(&file);
    let before = rx_packets(&p);
    let (o, err, json) = run_gen(&p, dir.path(), &["--replay", &f]);
    assert_eq!(o.status.code(), Some(1), "{err}");
    let json = json.expect("the summary JSON of a run that failed frames");
    for (key, want) in [
        ("sent", 3),
        ("failed", 3),
        ("too_large", 2),
        ("too_short", 1),
        ("refused", 0),
        ("mtu", 1500),
    ] {
        assert_eq!(json_u64(&json, key), want, "{key} in {json}");
    }
    assert_eq!(rx_settled(&p, before + 3) - before, 3, "frames B received");
    let lines: Vec<&str> = err.lines().collect();
    let reasons = "2 too large for the MTU (1500 + 14-byte Ethernet header), \
                   1 shorter than an Ethernet header (14 bytes)";
    assert_eq!(lines.len(), 2, "{err}");
    assert!(
        lines[0].starts_with("tapflow gen: sent 3 packets (")
            && lines[0].ends_with(&format!(", 3 failed: {reasons}")),
        "{err}"
    );
    assert_eq!(
        lines[1],
        format!(
            "tapflow: error: 3 of 6 frames not sent on {}: {reasons}",
            p.if_a
        )
    );
    // Counted on every pass.
    let (o, err, json) = run_gen(&p, dir.path(), &["--replay", &f, "--loop", "2"]);
    assert_eq!(o.status.code(), Some(1), "{err}");
    let json = json.unwrap();
    assert_eq!(
        (json_u64(&json, "sent"), json_u64(&json, "too_large")),
        (6, 4),
        "{json}"
    );
}

#[test]
fn a_run_that_can_send_nothing_fails_with_the_reason() {
    let p = VethPair::new("gno");
    let dir = tempfile::tempdir().unwrap();
    let before = rx_packets(&p);
    // Every frame too large: a failure, and with --loop 0 too, where the run still ends.
    let big = dir.path().join("big.pcap");
    write_pcap(&big, &[1600, 9000]);
    for extra in [&[][..], &["--loop", "0"]] {
        let mut args = vec!["--replay".to_string(), s(&big)];
        args.extend(extra.iter().map(|a| a.to_string()));
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let (o, err, json) = run_gen(&p, dir.path(), &args);
        assert_eq!(o.status.code(), Some(1), "{args:?}: {err}");
        assert!(
            err.contains("tapflow: error: 2 of 2 frames not sent")
                && err.contains("2 too large for the MTU"),
            "{args:?}: {err}"
        );
        assert_eq!(json_u64(&json.unwrap(), "sent"), 0, "{args:?}");
    }
    // A file without packets, and a count of none: refused at the start.
    let empty = dir.path().join("empty.pcap");
    write_pcap(&empty, &[]);
    let (o, _, _) = run_gen(&p, dir.path(), &["--replay", &s(&empty)]);
    assert_clean_error(&o, Some(2), &["holds no packets"], "an empty replay");
    let (o, _, _) = run_gen(&p, dir.path(), &["-c", "0"]);
    assert_clean_error(&o, Some(2), &["--count 0"], "-c 0");
    assert_eq!(rx_packets(&p), before, "nothing left");
}
