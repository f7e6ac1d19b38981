//! `tapflow doctor` against a real kernel: one end of a veth pair in a private network namespace,
//! with `ethtool` run in that namespace as the independent oracle for the feature states, and
//! python3's json module as the oracle for `--json`. Needs root; fails (never skips) without it.

mod common;

use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::Output;
use std::time::Duration;

use common::*;

/// `tapflow doctor -i IF_B ARGS` in namespace B.
fn doctor(p: &VethPair, args: &[&str]) -> Output {
    let mut a = vec!["doctor", "-i", &p.if_b];
    a.extend_from_slice(args);
    run_limited(&mut p.tapflow_b(&a), Duration::from_secs(30))
}

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

/// `ethtool ARGS` in namespace B; must succeed.
fn ethtool(p: &VethPair, args: &[&str]) -> String {
    run_ok(&mut VethPair::in_ns(&p.ns_b, Path::new("ethtool"), args))
}

/// What `ethtool -k IF_B` says of `label` (`on` / `off`, without a `[fixed]` note).
fn ethtool_k(p: &VethPair, label: &str) -> String {
    let out = ethtool(p, &["-k", &p.if_b]);
    let prefix = format!("{label}:");
    let line = out
        .lines()
        .find(|l| l.trim_start().starts_with(&prefix))
        .unwrap_or_else(|| panic!("ethtool -k has no {label}: {out}"));
    line.trim_start()[prefix.len()..]
        .split_whitespace()
        .next()
        .unwrap_or_default()
        .to_string()
}

/// Evaluates the Python expression `expr` over `json.load` of `text` (bound to `d`); the JSON
/// must parse.
fn py(text: &str, expr: &str) -> String {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("doctor.json");
    std::fs::write(&file, text).unwrap();
    let code = format!("import json, sys\nd = json.load(open(sys.argv[1]))\nprint({expr})");
    run_ok(
        std::process::Command::new("python3")
            .args(["-c", &code])
            .arg(&file),
    )
    .trim_end()
    .to_string()
}

/// The field `field` of the finding `check` in a `--json` report.
fn finding(json: &str, check: &str, field: &str) -> String {
    py(
        json,
        &format!("[f for f in d['findings'] if f['check'] == '{check}'][0]['{field}']"),
    )
}

#[test]
fn gro_is_reported_as_the_kernel_has_it_and_fix_turns_it_off() {
    let p = VethPair::new("doc");
    ethtool(&p, &["-K", &p.if_b, "gro", "on"]);
    assert_eq!(ethtool_k(&p, "generic-receive-offload"), "on");
    let vlan_before = ethtool_k(&p, "rx-vlan-offload");

    // Text: a warning with the command, exit 1.
    let o = doctor(&p, &[]);
    let text = stdout(&o);
    assert_eq!(o.status.code(), Some(1), "{text}");
    assert!(
        text.lines()
            .any(|l| l == "warning  generic-receive-offload on"),
        "{text}"
    );
    assert!(
        text.contains(&format!(
            "fix: ethtool -K {} gro off (--fix does this)",
            p.if_b
        )),
        "{text}"
    );

    // JSON: parses, and agrees with ethtool.
    let o = doctor(&p, &["--json"]);
    let json = stdout(&o);
    assert_eq!(o.status.code(), Some(1), "{json}");
    assert_eq!(py(&json, "d['interface']"), p.if_b);
    assert_eq!(py(&json, "d['features']['rx-gro']['active']"), "True");
    assert_eq!(finding(&json, "gro", "severity"), "warning");
    assert_eq!(finding(&json, "gro", "what"), "generic-receive-offload on");
    assert_eq!(py(&json, "d['driver']['driver']"), "veth");
    // veth has no descriptor rings: not supported, not an error.
    assert_eq!(py(&json, "d['rings']['supported']"), "False");
    assert_eq!(py(&json, "d['mtu']"), "1500");
    assert_eq!(py(&json, "d['changes']"), "[]");

    // --fix: GRO (and GSO, TSO) off, as the kernel reports back.
    let o = doctor(&p, &["--fix"]);
    let text = stdout(&o);
    assert!(
        text.lines().any(|l| l
            == format!(
                "changed  generic-receive-offload off (ethtool -K {} gro off)",
                p.if_b
            )),
        "{text}"
    );
    // Promiscuous mode is still off: --fix leaves it alone; it is advice (capture turns it on
    // for itself), so no warning remains.
    assert_eq!(o.status.code(), Some(0), "{text}");
    assert!(text.contains("advice   promiscuous mode off"), "{text}");
    assert_eq!(ethtool_k(&p, "generic-receive-offload"), "off");
    assert_eq!(ethtool_k(&p, "generic-segmentation-offload"), "off");
    assert_eq!(ethtool_k(&p, "tcp-segmentation-offload"), "off");
    // Never VLAN stripping, never the MTU.
    assert_eq!(ethtool_k(&p, "rx-vlan-offload"), vlan_before);
    let o = doctor(&p, &["--json"]);
    let json = stdout(&o);
    assert_eq!(finding(&json, "gro", "what"), "generic-receive-offload off");
    assert_eq!(finding(&json, "gro", "severity"), "ok");
    assert_eq!(py(&json, "d['features']['rx-gro']['active']"), "False");
    assert_eq!(py(&json, "d['mtu']"), "1500");

    // With promiscuous mode on, nothing is left to advise either: --fix has nothing to do.
    run_ok(
        std::process::Command::new("ip")
            .args(["-n", &p.ns_b, "link", "set", &p.if_b, "promisc", "on"]),
    );
    let o = doctor(&p, &["--json"]);
    let json = stdout(&o);
    assert_eq!(o.status.code(), Some(0), "{json}");
    assert_eq!(py(&json, "d['warnings']"), "0");
    assert_eq!(py(&json, "d['flags']['promisc']"), "True");
    let o = doctor(&p, &["--fix"]);
    assert_eq!(o.status.code(), Some(0), "{}", stdout(&o));
    assert!(
        stdout(&o).lines().any(|l| l == "nothing to change"),
        "{}",
        stdout(&o)
    );

    // GRO back on: --fix --json reports the change and that the kernel took it.
    ethtool(&p, &["-K", &p.if_b, "gro", "on"]);
    let o = doctor(&p, &["--fix", "--json"]);
    let json = stdout(&o);
    assert_eq!(o.status.code(), Some(0), "{json}");
    assert_eq!(
        py(
            &json,
            "[(c['features'], c['outcome']) for c in d['changes'] if c['check'] == 'gro']"
        ),
        "[(['rx-gro'], 'applied')]"
    );
    assert_eq!(ethtool_k(&p, "generic-receive-offload"), "off");
}

#[test]
fn fix_without_privilege_is_refused_and_changes_nothing() {
    let p = VethPair::new("dnp");
    ethtool(&p, &["-K", &p.if_b, "gro", "on"]);
    // As nobody, without capabilities: reading works, changing is refused. A copy of the binary
    // in a world-readable place, whatever the permissions above the target directory.
    let dir = tempfile::tempdir().unwrap();
    let copy = dir.path().join("tapflow");
    std::fs::copy(bin(), &copy).unwrap();
    for path in [dir.path(), copy.as_path()] {
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o755)).unwrap();
    }
    let mut c = VethPair::in_ns(
        &p.ns_b,
        Path::new("setpriv"),
        &[
            "--reuid=65534",
            "--regid=65534",
            "--clear-groups",
            "--inh-caps=-all",
            &copy.to_string_lossy(),
            "doctor",
            "-i",
            &p.if_b,
            "--fix",
        ],
    );
    let o = run_limited(&mut c, Duration::from_secs(30));
    let text = stdout(&o);
    assert_eq!(o.status.code(), Some(1), "{text}");
    let line = text
        .lines()
        .find(|l| l.starts_with("refused  generic-receive-offload off"))
        .unwrap_or_else(|| panic!("no refusal: {text}"));
    assert!(
        line.ends_with("needs root or CAP_NET_ADMIN (Operation not permitted)"),
        "{line}"
    );
    assert!(
        text.contains("warning  generic-receive-offload on"),
        "{text}"
    );
    assert_eq!(ethtool_k(&p, "generic-receive-offload"), "on");
}

#[test]
fn threads_are_checked_against_the_receive_queues() {
    let p = VethPair::new("drq");
    let o = doctor(&p, &["--json", "--threads", "4"]);
    let json = stdout(&o);
    // ethtool -l is the oracle for the queue count.
    let out = ethtool(&p, &["-l", &p.if_b]);
    let current = out
        .split("Current hardware settings:")
        .nth(1)
        .unwrap_or_else(|| panic!("ethtool -l: {out}"));
    let rx: String = current
        .lines()
        .find(|l| l.starts_with("RX:"))
        .unwrap_or_else(|| panic!("ethtool -l: {out}"))
        .split_whitespace()
        .nth(1)
        .unwrap()
        .to_string();
    assert_eq!(py(&json, "d['channels']['rx']"), rx);
    // veth has queues but no hardware RSS: nothing to advise.
    assert_eq!(finding(&json, "rss", "severity"), "ok");
    let queues = if rx == "1" { "queue" } else { "queues" };
    assert_eq!(
        finding(&json, "rss", "what"),
        format!("{rx} receive {queues}, 4 workers (--threads 4)")
    );
}

#[test]
fn unknown_interface_is_a_one_line_usage_error() {
    let o = run_limited(
        &mut tapflow(["doctor", "-i", "tfdocnosuch0"]),
        Duration::from_secs(30),
    );
    assert_clean_error(
        &o,
        Some(2),
        &["no such interface: tfdocnosuch0"],
        "doctor -i tfdocnosuch0",
    );
    assert!(o.stdout.is_empty());
    let o = run_limited(
        &mut tapflow(["doctor", "-i", "lo", "--threads", "0"]),
        Duration::from_secs(30),
    );
    assert_clean_error(&o, Some(2), &["--threads 0"], "doctor --threads 0");
}

#[test]
fn problems_come_first_and_passing_checks_take_one_line_unless_verbose() {
    let p = VethPair::new("dv");
    let short = stdout(&doctor(&p, &[]));
    let long = stdout(&doctor(&p, &["-v"]));
    let lines: Vec<&str> = short.lines().collect();
    let severity = |l: &str| l.split_whitespace().next().unwrap_or("").to_string();
    let rank = |s: &str| match s {
        "warning" => 0,
        "advice" => 1,
        "ok" => 2,
        _ => 3,
    };
    let findings: Vec<usize> = lines
        .iter()
        .filter(|l| !l.starts_with(' ') && !l.starts_with("tapflow doctor"))
        .map(|l| rank(&severity(l)))
        .collect();
    assert!(
        findings.contains(&2) && findings.iter().any(|&r| r < 2),
        "{short}"
    );
    assert!(
        findings.windows(2).all(|w| w[0] <= w[1]),
        "problems first: {short}"
    );
    // An ok line is followed by the next finding, not an explanation; with -v it is explained.
    for (i, l) in lines.iter().enumerate() {
        if severity(l) == "ok" {
            assert!(!lines[i + 1].starts_with(' '), "{short}");
        }
    }
    let long_lines: Vec<&str> = long.lines().collect();
    let explained = long_lines
        .windows(2)
        .any(|w| severity(w[0]) == "ok" && w[1].starts_with("         "));
    assert!(explained, "-v explains the passing checks: {long}");
    assert!(long.lines().count() > short.lines().count());
}

/// A bpffs mounted on a temporary directory; unmounted (and the pins with it) on drop.
struct BpfFs {
    dir: tempfile::TempDir,
}

impl BpfFs {
    fn mount() -> BpfFs {
        let dir = tempfile::tempdir().unwrap();
        run_ok(
            std::process::Command::new("mount")
                .args(["-t", "bpf", "bpf"])
                .arg(dir.path()),
        );
        BpfFs { dir }
    }
}

impl Drop for BpfFs {
    fn drop(&mut self) {
        let _ = std::process::Command::new("umount")
            .arg(self.dir.path())
            .status();
    }
}

/// The id of the XDP program on B's interface, if any (`ip link` as the oracle).
fn xdp_prog_id(p: &VethPair) -> Option<String> {
    let out = run_ok(
        std::process::Command::new("ip").args(["-n", &p.ns_b, "link", "show", "dev", &p.if_b]),
    );
    let at = out.find("prog/xdp id ")? + "prog/xdp id ".len();
    Some(out[at..].split_whitespace().next()?.to_string())
}

/// An XDP capture killed with SIGKILL leaves nothing (the kernel closes its BPF link); a
/// tapflow program attached through netlink and left behind (pinned while the capture ran,
/// re-attached with `ip link ... pinned` after it died) is a warning that names it, and
/// `--fix` detaches it. A running capture's program is named with its holder and left alone.
#[test]
fn fix_detaches_a_stale_tapflow_xdp_program() {
    let p = VethPair::new("dxs");
    p.wait_link_up();
    let fs = BpfFs::mount();
    let pin = fs.dir.path().join("stale");
    let mut g = VethPair::spawn(&mut p.tapflow_b(&[
        "capture",
        "-i",
        &p.if_b,
        "--source",
        "xdp",
        "-q",
        "-w",
        "/dev/null",
        "--control",
        "none",
    ]));
    g.wait_until(Duration::from_secs(15), "attached its XDP program", |_| {
        xdp_prog_id(&p).is_some()
    });
    let id = xdp_prog_id(&p).unwrap();
    let o = doctor(&p, &["--json"]);
    let json = stdout(&o);
    assert_eq!(
        finding(&json, "xdp-attached", "severity"),
        "advice",
        "{json}"
    );
    assert!(
        finding(&json, "xdp-attached", "what").contains("held by tapflow (pid"),
        "{json}"
    );
    assert_eq!(py(&json, "d['xdp']['attached']['name']"), "tapflow_xdp");
    assert_eq!(py(&json, "d['xdp']['source']"), "netlink");

    run_ok(
        std::process::Command::new("bpftool")
            .args(["prog", "pin", "id", &id])
            .arg(&pin),
    );
    g.signal(libc::SIGKILL);
    g.wait_limited(Duration::from_secs(10));
    let start = std::time::Instant::now();
    while xdp_prog_id(&p).is_some() {
        assert!(
            start.elapsed() < Duration::from_secs(5),
            "the link outlived SIGKILL"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    run_ok(
        std::process::Command::new("ip")
            .args([
                "-n", &p.ns_b, "link", "set", "dev", &p.if_b, "xdpdrv", "pinned",
            ])
            .arg(&pin),
    );
    assert_eq!(xdp_prog_id(&p).as_deref(), Some(id.as_str()));

    let o = doctor(&p, &[]);
    let text = stdout(&o);
    assert_eq!(o.status.code(), Some(1), "{text}");
    let want = format!("warning  stale tapflow XDP program tapflow_xdp (id {id}, native) attached");
    assert!(
        text.lines()
            .next()
            .is_some_and(|l| l.starts_with("tapflow doctor:")),
        "{text}"
    );
    assert!(
        text.lines().nth(1) == Some(want.as_str()),
        "problems first: {text}"
    );

    let o = doctor(&p, &["--fix"]);
    let text = stdout(&o);
    assert!(
        text.contains(&format!(
            "changed  XDP program {id} detached (ip link set dev {} xdpdrv off)",
            p.if_b
        )),
        "{text}"
    );
    assert!(text.contains("ok       no XDP program attached"), "{text}");
    assert_eq!(xdp_prog_id(&p), None);
}
