//! Control sockets are named per network namespace and per run
//! (`/run/tapflow/IFACE.NETNS.PID.sock`): same-named interfaces in two namespaces, and two looks
//! at one interface, each get their own; `tapflow stats -i` finds the one of its namespace, says
//! which `--control` to give when there are several, and a socket given twice is refused with a
//! line naming `--control`.

mod common;

use std::time::Duration;

use common::*;

/// A namespace with a veth pair `tfdup0`/`tfdup1` of its own, both up.
fn with_pair(tag: &str) -> Netns {
    let ns = Netns::new(tag).without_ipv6();
    ip(&[
        "-n", &ns.name, "link", "add", "tfdup0", "type", "veth", "peer", "name", "tfdup1",
    ]);
    for i in ["tfdup0", "tfdup1"] {
        disable_ipv6(&ns.name, i);
        ip(&["-n", &ns.name, "link", "set", i, "up"]);
    }
    ns
}

fn start(ns: &Netns, extra: &[&str]) -> ChildGuard {
    let mut a = vec!["capture", "-i", "tfdup0", "-q", "-w", "/dev/null"];
    a.extend_from_slice(extra);
    let mut g = VethPair::spawn(&mut ns.tapflow(&a));
    wait_capturing(&mut g, 1);
    g.wait_until(
        Duration::from_secs(10),
        "served its control socket",
        |pid| {
            std::fs::read_dir("/run/tapflow").is_ok_and(|d| {
                d.filter_map(Result::ok).any(|e| {
                    let n = e.file_name().to_string_lossy().into_owned();
                    n.starts_with("tfdup0.") && n.ends_with(&format!(".{pid}.sock"))
                })
            })
        },
    );
    g
}

fn received(ns: &Netns, args: &[&str]) -> u64 {
    let mut a = vec!["stats", "--json"];
    a.extend_from_slice(args);
    json_u64(&run_ok(&mut ns.tapflow(&a)), "total.received")
}

#[test]
fn each_namespace_and_each_run_has_its_own_socket() {
    let (one, two) = (with_pair("c1"), with_pair("c2"));
    let mut a = start(&one, &[]);
    let mut b = start(&two, &[]);
    // Traffic in the first namespace only: each stats -i reads its own namespace's capture.
    let dir = tempfile::tempdir().unwrap();
    let json = dir.path().join("g.json");
    run_ok(&mut one.tapflow(&[
        "gen",
        "-i",
        "tfdup1",
        "-q",
        "-c",
        "300",
        "--summary-json",
        json.to_str().unwrap(),
    ]));
    std::thread::sleep(Duration::from_millis(500));
    assert_eq!(received(&one, &["-i", "tfdup0"]), 300);
    assert_eq!(received(&two, &["-i", "tfdup0"]), 0);
    // A second look at the same interface starts too; -i is then ambiguous and says so.
    let mut c = start(&one, &[]);
    let o = run_limited(
        &mut one.tapflow(&["stats", "-i", "tfdup0"]),
        Duration::from_secs(10),
    );
    assert_clean_error(&o, Some(2), &["--control PATH"], "two captures on tfdup0");
    let err = String::from_utf8_lossy(&o.stderr).into_owned();
    let paths: Vec<&str> = err
        .split_whitespace()
        .map(|w| w.trim_end_matches(','))
        .filter(|w| w.starts_with("/run/tapflow/tfdup0."))
        .collect();
    assert_eq!(paths.len(), 2, "{err}");
    for p in &paths {
        received(&one, &["--control", p]);
    }
    // A socket given twice: the second is refused, naming --control.
    let taken = paths[0].to_string();
    let o = run_limited(
        &mut one.tapflow(&[
            "capture",
            "-i",
            "tfdup0",
            "-q",
            "-w",
            "/dev/null",
            "--control",
            &taken,
        ]),
        Duration::from_secs(20),
    );
    assert_clean_error(&o, Some(1), &["--control PATH"], "the same --control twice");
    for g in [&mut a, &mut b, &mut c] {
        g.signal(libc::SIGINT);
        let (status, err) = g.wait_output(Duration::from_secs(20));
        assert!(status.success(), "{err}");
    }
    // Gone with their captures.
    assert!(!std::path::Path::new(&taken).exists());
}
