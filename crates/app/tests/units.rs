//! One way to write units: every flag with a count, rate, size, duration or listen address
//! takes the same forms (`10k`, `64K`, `1m`, `5000`), and a bad one fails with a line naming
//! the text and the subcommand's help.

mod common;

use std::time::Duration;

use common::*;

fn ok(args: &[&str]) -> String {
    run_ok(&mut tapflow(args))
}

#[test]
fn every_kind_of_unit_is_taken_by_the_flags_that_need_it() {
    let tmp = tempfile::tempdir().unwrap();
    let trace = built_trace(tmp.path(), "t.pcap", 10, 5, 1_000_000);
    let t = trace.to_str().unwrap();
    let out = tmp.path().join("o.pcapng");
    let sum = tmp.path().join("s.json");
    // Counts, sizes and durations in capture.
    ok(&[
        "capture",
        "-r",
        t,
        "-q",
        "-c",
        "1k",
        "-s",
        "1K",
        "--duration",
        "1m",
        "--rotate-size",
        "1MiB",
        "--rotate-seconds",
        "1h",
        "-w",
        out.to_str().unwrap(),
        "--summary-json",
        sum.to_str().unwrap(),
    ]);
    let json = std::fs::read_to_string(&sum).unwrap();
    assert_eq!(json_u64(&json, "recorded"), 50, "{json}");
    // Durations and counts in flows.
    let table = ok(&[
        "flows",
        "-r",
        t,
        "-q",
        "--active-timeout",
        "5m",
        "--idle-timeout",
        "udp=1m,closed=5s",
        "--max-flows",
        "2M",
        "--json",
        "-",
    ]);
    assert_eq!(table.lines().count(), 10, "{table}");
    // Rates, durations in ms and sizes in plan.
    let plan = ok(&[
        "plan",
        "--rate",
        "200k",
        "--hold-ms",
        "0.1s",
        "--stall-ms",
        "20ms",
        "--burst",
        "3M:50ms",
        "--retire-ms",
        "10",
        "--memory",
        "64MiB",
        "--json",
    ]);
    assert_eq!(json_f64(&plan, "link_rate"), 200e3, "{plan}");
    assert!(json_f64(&plan, "ring.holds_ms") >= 100.0, "{plan}");
    // A bare port for recv --listen (every address), as for --metrics (loopback).
    let o = run_limited(
        &mut tapflow([
            "recv",
            "-l",
            "0",
            "-q",
            "--duration",
            "300ms",
            "--metrics",
            "0",
            "-w",
            tmp.path().join("r.pcapng").to_str().unwrap(),
        ]),
        Duration::from_secs(30),
    );
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    // The collector's periods take units too.
    let o = run_limited(
        &mut tapflow([
            "collect",
            "-l",
            "ipfix://127.0.0.1:0",
            "-q",
            "--store",
            tmp.path().join("store").to_str().unwrap(),
            "--flush-seconds",
            "500ms",
            "--stats-seconds",
            "1m",
            "--exporter-timeout",
            "1h",
            "--duration",
            "300ms",
        ]),
        Duration::from_secs(30),
    );
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
}

#[test]
fn gen_takes_rates_and_counts_with_suffixes() {
    require_root();
    // The units pass; what fails is the interface, which does not exist.
    let o = run_limited(
        &mut tapflow([
            "gen",
            "-i",
            "tfnosuchif1",
            "--rate",
            "10k",
            "-c",
            "1k",
            "--duration",
            "1m",
            "--size",
            "1K",
        ]),
        Duration::from_secs(20),
    );
    assert_clean_error(&o, Some(2), &["tfnosuchif1"], "gen with units");
}

#[test]
fn a_bad_unit_names_the_text_and_the_subcommands_help() {
    for (args, key, help) in [
        (
            &["capture", "-i", "lo", "--duration", "1y"][..],
            "'1y' is not a duration",
            "tapflow capture --help",
        ),
        (
            &["gen", "-i", "lo", "--rate", "fast"][..],
            "'fast' is not a count",
            "tapflow gen --help",
        ),
        (
            &["recv", "-l", "x", "-w", "o"][..],
            "'x' is not port",
            "tapflow recv --help",
        ),
        (
            &["plan", "--memory", "1Q"][..],
            "'1q' is not a size",
            "tapflow plan --help",
        ),
        (
            &["stats", "--watch", "soon"][..],
            "'soon' is not a duration",
            "tapflow stats --help",
        ),
        (
            &[
                "collect",
                "-l",
                "ipfix://127.0.0.1:0",
                "--flush-seconds",
                "0",
            ][..],
            "'0' is not a positive duration",
            "tapflow collect --help",
        ),
        (
            &["recv", "-l", "0", "-w", "o", "--duration", "0s"][..],
            "'0s' is not a positive duration",
            "tapflow recv --help",
        ),
    ] {
        let o = run_limited(&mut tapflow(args), Duration::from_secs(20));
        let what = args.join(" ");
        assert_clean_error(&o, Some(2), &[key], &what);
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(err.contains(&format!("try '{help}'")), "{what}: {err}");
    }
}

#[test]
fn help_names_no_document_that_does_not_exist() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    for sub in [
        "capture", "flows", "recv", "gen", "rules", "stats", "check", "doctor", "plan",
    ] {
        let help = ok(&[sub, "--help"]);
        for word in help.split(|c: char| c.is_whitespace() || c == ',' || c == ';' || c == ')') {
            if let Some(at) = word.find("docs/") {
                let doc = word[at..].trim_end_matches(['.', ':']);
                assert!(root.join(doc).exists(), "tapflow {sub} --help names {doc}");
            }
        }
    }
}
