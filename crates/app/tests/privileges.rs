//! The privilege drop (`-Z USER`), on real kernels in private namespaces: once its inputs are
//! open, every thread of a capture (and of a receiver) has the new user's ids and no capability
//! at all, bounding set included, and the capture still records every packet, rotates its
//! files and takes live rule changes. Needs root; fails (never skips) without it.

mod common;

use std::collections::BTreeMap;
use std::os::unix::fs::{MetadataExt, chown};
use std::path::Path;
use std::time::{Duration, Instant};

use common::*;

const NOBODY: u32 = 65534;

fn s(p: &Path) -> String {
    p.to_string_lossy().into_owned()
}

/// A temporary directory that belongs to `nobody`.
fn nobodys_dir() -> tempfile::TempDir {
    let dir = tempfile::Builder::new()
        .prefix("tapflow-priv")
        .tempdir()
        .unwrap();
    chown(dir.path(), Some(NOBODY), Some(NOBODY)).unwrap();
    dir
}

/// Each thread of process `pid`: its name, and the `Uid`, `Gid`, `Groups`, `Cap*` and
/// `NoNewPrivs` fields of its `/proc/PID/task/TID/status`.
fn threads(pid: i32) -> Vec<(String, BTreeMap<String, String>)> {
    let mut out = Vec::new();
    for t in std::fs::read_dir(format!("/proc/{pid}/task"))
        .unwrap()
        .flatten()
    {
        let (Ok(comm), Ok(status)) = (
            std::fs::read_to_string(t.path().join("comm")),
            std::fs::read_to_string(t.path().join("status")),
        ) else {
            continue; // the thread ended meanwhile
        };
        let fields = status
            .lines()
            .filter_map(|l| l.split_once(':'))
            .filter(|(k, _)| {
                ["Uid", "Gid", "Groups", "NoNewPrivs"].contains(k) || k.starts_with("Cap")
            })
            .map(|(k, v)| {
                (
                    k.to_string(),
                    v.split_whitespace().collect::<Vec<_>>().join(" "),
                )
            })
            .collect();
        out.push((comm.trim().to_string(), fields));
    }
    out
}

/// Fails unless every thread of `pid` runs as `nobody` with no capability and no way to gain
/// one; returns the threads' names.
fn assert_all_threads_unprivileged(pid: i32) -> Vec<String> {
    let threads = threads(pid);
    let ids = format!("{NOBODY} {NOBODY} {NOBODY} {NOBODY}");
    for (name, f) in &threads {
        let want = |k: &str, v: &str| {
            assert_eq!(
                f.get(k).map(String::as_str),
                Some(v),
                "thread {name}: {k} in {f:?}"
            );
        };
        want("Uid", &ids);
        want("Gid", &ids);
        want("Groups", &NOBODY.to_string());
        for cap in ["CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb"] {
            want(cap, "0000000000000000");
        }
        want("NoNewPrivs", "1");
    }
    threads.into_iter().map(|(name, _)| name).collect()
}

/// Waits until `path` exists.
fn wait_for(path: &Path) {
    let start = Instant::now();
    while !path.exists() {
        assert!(
            start.elapsed() < Duration::from_secs(5),
            "no {}",
            path.display()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn a_capture_as_nobody_has_no_privilege_in_any_thread_and_loses_nothing() {
    let p = VethPair::new("prv");
    let dir = nobodys_dir();
    let d = dir.path();
    let rules = d.join("r.rules");
    std::fs::write(
        &rules,
        "a proto udp sport 1024-1025 dport 9\nb proto udp sport 1026 both\n",
    )
    .unwrap();
    let (out, control, json, flows) = (
        d.join("out.pcapng"),
        d.join("ctl.sock"),
        d.join("sum.json"),
        d.join("flows.json"),
    );
    // Two workers, the control socket, /metrics and the flow exporter: every kind of thread.
    let mut g = VethPair::spawn(&mut p.tapflow_b(&[
        "capture",
        "-i",
        &p.if_b,
        "-q",
        "-Z",
        "nobody",
        "--threads",
        "2",
        "-s",
        "64",
        "--rules",
        &s(&rules),
        "--control",
        &s(&control),
        "--metrics",
        "9464",
        "--json",
        &s(&flows),
        "-w",
        &s(&out),
        "--rotate-size",
        "64K",
        "--summary-json",
        &s(&json),
    ]));
    wait_capturing(&mut g, 2);
    wait_for(&control);
    let names = assert_all_threads_unprivileged(g.pid());
    for t in [
        "tapflow-w0",
        "tapflow-w1",
        "tapflow-control",
        "tapflow-metrics",
        "tapflow-export",
    ] {
        assert!(names.iter().any(|n| n == t), "no thread {t} in {names:?}");
    }
    // UDP from ports 1024-1027: the rules keep three ports of four.
    p.send(&["-c", "4000", "--flows", "4"], d, 4000);
    std::thread::sleep(Duration::from_millis(300));
    // A rule change from root's `tapflow rules`: the filter of the open socket is replaced.
    let ask = |args: &[&str]| {
        let mut c = tapflow(args);
        c.arg("--control").arg(&control);
        run_ok(&mut c)
    };
    let listing = ask(&["rules", "add", "c", "proto", "udp", "sport", "1027"]);
    assert!(
        listing.starts_with("3 rules, kernel filter exact"),
        "{listing}"
    );
    p.send(&["-c", "4000", "--flows", "4"], d, 4000);
    std::thread::sleep(Duration::from_millis(300));
    // Files rotated meanwhile, by threads started after the drop.
    let names = assert_all_threads_unprivileged(g.pid());
    assert!(names.iter().any(|n| n == "tapflow-io"), "{names:?}");
    assert!(ask(&["stats", "--json"]).contains("\"received\""));

    g.signal(libc::SIGINT);
    let (status, err) = g.wait_output(Duration::from_secs(20));
    assert!(status.success(), "capture exited with {status}: {err}");
    assert!(!err.contains("running as root"), "{err}");
    let sum = Summary::read(&json);
    sum.assert_adds_up();
    assert_eq!(
        (sum.received, sum.recorded, sum.filtered),
        (7000, 7000, 0),
        "{}",
        sum.text
    );
    assert!(sum.files.len() > 4, "not rotated: {:?}", sum.files);
    let mut packets = 0;
    for f in &sum.files {
        let m = std::fs::metadata(f).unwrap();
        assert_eq!((m.uid(), m.mode() & 0o777), (NOBODY, 0o640), "{f}");
        let cap = read_capture(Path::new(f));
        assert!(cap.damage.is_none(), "{f}: {:?}", cap.damage);
        packets += cap.packets.len();
    }
    assert_eq!(packets, 7000);
    assert!(std::fs::metadata(&flows).unwrap().len() > 0);
    assert_eq!(std::fs::metadata(&json).unwrap().uid(), NOBODY);
    // The user removed its control socket at the end.
    assert!(!control.exists());
}

#[test]
fn the_run_says_at_start_when_the_user_cannot_write_the_output() {
    let ns = Netns::new("prw");
    // Root's directory, mode 0700: root may write there, nobody may not.
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("out.pcapng");
    let o = run_limited(
        &mut ns.tapflow(&[
            "capture",
            "-i",
            "lo",
            "-q",
            "-Z",
            "nobody",
            "--control",
            "none",
            "-w",
            &s(&out),
        ]),
        Duration::from_secs(20),
    );
    assert_clean_error(&o, Some(2), &["as user nobody"], "unwritable output");
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains(&s(&out)) && err.contains("-Z root"), "{err}");
    assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);
}

#[test]
fn a_receiver_as_nobody_keeps_the_buffer_it_opened_as_root() {
    let ns = Netns::new("prr");
    let dir = nobodys_dir();
    let out = dir.path().join("r.pcapng");
    let mut g = VethPair::spawn(&mut ns.tapflow(&[
        "recv",
        "-l",
        "127.0.0.1:6100",
        "-w",
        &s(&out),
        "-q",
        "-Z",
        "nobody",
        "--rcvbuf",
        "64M",
        "--json",
        &s(&dir.path().join("flows.json")),
    ]));
    wait_udp_bound(&mut g, 6100);
    // The ready line comes after the drop; then only the workers are still to start.
    std::thread::sleep(Duration::from_millis(300));
    let names = assert_all_threads_unprivileged(g.pid());
    assert!(names.iter().any(|n| n == "tapflow-export"), "{names:?}");
    g.signal(libc::SIGINT);
    let (status, err) = g.wait_output(Duration::from_secs(20));
    assert!(status.success(), "recv exited with {status}: {err}");
    // 64 MiB asked, past rmem_max: only root gets it (SO_RCVBUFFORCE), so the socket was set
    // up before the drop.
    let kib: u64 = err
        .split("receive buffer ")
        .nth(1)
        .and_then(|r| r.split(' ').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no receive buffer line: {err}"));
    assert_eq!(kib, 64 << 10, "{err}");
}

/// A pcap file of one 60-byte frame.
fn one_packet_file(path: &Path) {
    let mut b = 0xa1b2_c3d4u32.to_le_bytes().to_vec();
    b.extend_from_slice(&2u16.to_le_bytes());
    b.extend_from_slice(&4u16.to_le_bytes());
    for w in [0u32, 0, 65535, 1, 1_700_000_000, 0, 60, 60] {
        b.extend_from_slice(&w.to_le_bytes());
    }
    b.extend_from_slice(&[0; 60]);
    std::fs::write(path, b).unwrap();
}

#[test]
fn without_a_tapflow_user_root_stays_and_says_so_once() {
    require_root();
    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("in.pcap");
    one_packet_file(&input);
    let tapflow_user = std::process::Command::new("getent")
        .args(["passwd", "tapflow"])
        .output()
        .unwrap()
        .status
        .success();
    let note = "tapflow: running as root: no 'tapflow' user; give -Z USER to drop privileges";
    for (args, said) in [
        (vec![], !tapflow_user),
        (vec!["-Z", "root"], false),
        (vec!["-Z", "nobody"], false),
    ] {
        let out = dir.path().join("out.pcapng");
        let _ = std::fs::remove_file(&out);
        // Not quiet: the note belongs to the start banner, which -q leaves out for a file.
        let mut a = vec!["capture", "-r", input.to_str().unwrap()];
        a.extend_from_slice(&args);
        // The temporary directory is root's: only the runs that keep root write into it.
        if args.is_empty() || args[1] == "root" {
            a.extend_from_slice(&["-w", out.to_str().unwrap()]);
        }
        let o = run_limited(&mut tapflow(&a), Duration::from_secs(20));
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(o.status.success(), "{a:?}: {err}");
        assert_eq!(err.matches(note).count(), usize::from(said), "{a:?}: {err}");
    }
}

#[test]
fn an_unknown_user_is_a_usage_error() {
    for cmd in [
        &["capture", "-r", "/nonexistent.pcap"][..],
        &["flows", "-i", "lo"],
        &["recv", "-l", "127.0.0.1:0", "-w", "/nonexistent/x"],
    ] {
        let mut a = cmd.to_vec();
        a.extend_from_slice(&["-Z", "tapflow-no-such-user"]);
        let o = run_limited(&mut tapflow(&a), Duration::from_secs(20));
        assert_clean_error(
            &o,
            Some(2),
            &["-Z tapflow-no-such-user: no such user"],
            cmd[0],
        );
    }
}
