//! Bad input: one clear line that names the problem, exit code 2 (≠ 0 for missing privilege),
//! no panic, no backtrace.

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use common::*;

/// A small valid capture (50 packets of 10 conversations) in `dir`.
fn small_file(dir: &Path) -> PathBuf {
    built_trace(dir, "small.pcap", 10, 5, 1_000_000)
}

/// Runs tapflow (in `ns` when given) and checks the error contract.
fn expect_error(ns: Option<&str>, args: &[&str], code: Option<i32>, keys: &[&str]) {
    let mut c = match ns {
        Some(ns) => VethPair::in_ns(ns, &bin(), args),
        None => tapflow(args),
    };
    // A capture that wrongly starts would run forever: the limit turns that into a failure.
    let o = run_limited(&mut c, Duration::from_secs(20));
    assert_clean_error(&o, code, keys, &format!("tapflow {}", args.join(" ")));
}

fn p(path: &Path) -> String {
    path.to_string_lossy().into_owned()
}

#[test]
fn unknown_interface_is_named() {
    require_root();
    expect_error(
        None,
        &["capture", "-i", "tfnosuchif0", "-q"],
        Some(2),
        &["tfnosuchif0"],
    );
}

#[test]
fn filter_syntax_error_is_named() {
    require_root();
    expect_error(
        None,
        &["capture", "-i", "lo", "-q", "-f", "tcp prt 80"],
        Some(2),
        &["syntax"],
    );
}

#[test]
fn unwritable_output_is_named() {
    let tmp = tempfile::tempdir().unwrap();
    let f = p(&small_file(tmp.path()));
    expect_error(
        None,
        &[
            "capture",
            "-r",
            &f,
            "-q",
            "-w",
            "/nonexistent-tapflow-dir/x.pcapng",
        ],
        Some(2),
        &["/nonexistent-tapflow-dir/x.pcapng"],
    );
    expect_error(
        None,
        &["capture", "-r", &f, "-q", "-w", "/proc/x.pcapng"],
        Some(2),
        &["/proc/x.pcapng"],
    );
}

#[test]
fn unwritable_output_fails_before_a_live_capture() {
    require_root();
    expect_error(
        None,
        &[
            "capture",
            "-i",
            "lo",
            "-q",
            "-w",
            "/nonexistent-tapflow-dir/x.pcapng",
        ],
        Some(2),
        &["/nonexistent-tapflow-dir/x.pcapng"],
    );
}

#[test]
fn nonsense_sizes_are_named() {
    let tmp = tempfile::tempdir().unwrap();
    let f = p(&small_file(tmp.path()));
    expect_error(
        None,
        &["capture", "-r", &f, "-q", "-s", "300K"],
        Some(2),
        &["snaplen"],
    );
    expect_error(
        None,
        &["capture", "-i", "lo", "-q", "--threads", "0"],
        Some(2),
        &["threads"],
    );
    expect_error(
        None,
        &["capture", "-i", "lo", "-q", "--block-size", "3000"],
        Some(2),
        &["block-size", "block size"],
    );
}

#[test]
fn gen_frame_size_out_of_range_is_named() {
    // In a namespace of its own: if the check were missing, the frame must not leave it.
    let net = VethPair::new("bad");
    expect_error(
        Some(&net.ns_a),
        &["gen", "-i", &net.if_a, "-q", "--size", "10", "--count", "1"],
        Some(2),
        &["size"],
    );
    expect_error(
        Some(&net.ns_a),
        &[
            "gen", "-i", &net.if_a, "-q", "--size", "9001", "--count", "1",
        ],
        Some(2),
        &["size"],
    );
}

#[test]
fn missing_input_is_named() {
    expect_error(
        None,
        &["capture", "-q", "-w", "/tmp/tapflow-never-written.pcapng"],
        Some(2),
        &["interface", "-i", "--read", "-r"],
    );
}

#[test]
fn both_inputs_are_named() {
    let tmp = tempfile::tempdir().unwrap();
    let f = p(&small_file(tmp.path()));
    expect_error(
        None,
        &["capture", "-q", "-i", "lo", "-r", &f],
        Some(2),
        &["interface", "read"],
    );
}

#[test]
fn size_that_does_not_parse_is_named() {
    expect_error(
        None,
        &["capture", "-i", "lo", "-q", "--block-size", "lots"],
        Some(2),
        &["block-size", "lots"],
    );
}

#[test]
fn unreadable_input_files_are_named() {
    expect_error(
        None,
        &["capture", "-q", "-r", "/nonexistent-tapflow-dir/in.pcap"],
        Some(2),
        &["/nonexistent-tapflow-dir/in.pcap"],
    );
    let toml = concat!(env!("CARGO_MANIFEST_DIR"), "/Cargo.toml");
    expect_error(
        None,
        &["capture", "-q", "-r", toml],
        Some(2),
        &["Cargo.toml"],
    );
    let tmp = tempfile::tempdir().unwrap();
    let empty = tmp.path().join("empty.pcap");
    std::fs::write(&empty, b"").unwrap();
    expect_error(
        None,
        &["capture", "-q", "-r", &p(&empty)],
        Some(2),
        &["empty.pcap"],
    );
    let short = tmp.path().join("short.pcap");
    std::fs::write(&short, [0xd4, 0xc3, 0xb2, 0xa1, 2, 0, 4, 0, 0, 0]).unwrap();
    expect_error(
        None,
        &["capture", "-q", "-r", &p(&short)],
        Some(2),
        &["short.pcap"],
    );
}

/// Test 11: without root or CAP_NET_RAW, one line says so.
#[test]
fn missing_privilege_is_named() {
    require_root();
    // A copy of the binary that user nobody can reach.
    let tmp = tempfile::tempdir().unwrap();
    let copy = tmp.path().join("tapflow");
    std::fs::copy(bin(), &copy).unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(tmp.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    std::fs::set_permissions(&copy, std::fs::Permissions::from_mode(0o755)).unwrap();
    let net = VethPair::new("prv");
    let keys = ["root", "CAP_NET_RAW"];
    for args in [
        vec!["capture", "-i", net.if_b.as_str(), "-q"],
        vec!["gen", "-i", net.if_b.as_str(), "-q", "--count", "1"],
    ] {
        let mut c = Command::new("ip");
        c.args([
            "netns",
            "exec",
            &net.ns_b,
            "setpriv",
            "--reuid=nobody",
            "--regid=nogroup",
            "--clear-groups",
            "--inh-caps=-all",
            "--",
        ]);
        c.arg(&copy).args(&args);
        let o = run_limited(&mut c, Duration::from_secs(20));
        assert_clean_error(&o, None, &keys, &format!("{} as nobody", args.join(" ")));
    }
}

/// libpcap is loaded only for a filter expression: with its library hidden (a private mount
/// namespace binds /dev/null over it), `-f` names the missing package and everything else runs.
#[test]
fn missing_libpcap_is_named_and_only_filters_need_it() {
    require_root();
    let Some(lib) = [
        "/lib/x86_64-linux-gnu/libpcap.so.0.8",
        "/usr/lib/libpcap.so.0.8",
    ]
    .iter()
    .find_map(|l| std::fs::canonicalize(l).ok()) else {
        eprintln!("skipped: libpcap's library not found where Debian keeps it");
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let out = p(&dir.path().join("out.pcapng"));
    let run = |extra: &str| {
        let script = format!(
            "mount --bind /dev/null {} && exec {} capture -r {} -w {out} -q {extra}",
            lib.display(),
            bin().display(),
            p(&small_file(dir.path())),
        );
        let mut c = Command::new("unshare");
        c.args(["-m", "sh", "-c", &script]);
        run_limited(&mut c, Duration::from_secs(20))
    };
    let o = run("-f udp");
    assert_clean_error(
        &o,
        Some(2),
        &["libpcap", "apt-get install"],
        "-f without libpcap",
    );
    let o = run("");
    assert!(
        o.status.success(),
        "no filter, no libpcap needed: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    assert!(dir.path().join("out.pcapng").exists());
}
