//! Operating a running probe, on real kernels in private namespaces: rule sets in the kernel
//! filter and their counters, rule changes under load, statistics through the control socket
//! and `/metrics` (checked by promtool), the Nagios check's exit codes, and the control socket's
//! refusal of other users. Needs root; fails (never skips) without it.

mod common;

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::*;

fn s(p: &Path) -> String {
    p.to_string_lossy().into_owned()
}

/// A capture on B's interface with a control socket in `dir`, started and bound.
struct Probe {
    guard: ChildGuard,
    control: PathBuf,
    json: PathBuf,
}

impl Probe {
    fn start(p: &VethPair, dir: &Path, args: &[&str]) -> Probe {
        let control = dir.join("ctl.sock");
        let json = dir.join("sum.json");
        let (c, j) = (s(&control), s(&json));
        let mut a = vec![
            "capture",
            "-i",
            &p.if_b,
            "-q",
            "--control",
            &c,
            "--summary-json",
            &j,
        ];
        a.extend_from_slice(args);
        let mut guard = VethPair::spawn(&mut p.tapflow_b(&a));
        wait_capturing(&mut guard, 1);
        let start = Instant::now();
        while !control.exists() {
            assert!(
                start.elapsed() < Duration::from_secs(5),
                "no control socket"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        Probe {
            guard,
            control,
            json,
        }
    }

    /// `tapflow ARGS --control SOCKET`, run to the end.
    fn ask(&self, args: &[&str]) -> std::process::Output {
        let mut c = tapflow(args);
        c.arg("--control").arg(&self.control);
        run_limited(&mut c, Duration::from_secs(30))
    }

    fn ask_ok(&self, args: &[&str]) -> String {
        let o = self.ask(args);
        assert!(
            o.status.success(),
            "tapflow {args:?}: {}{}",
            String::from_utf8_lossy(&o.stdout),
            String::from_utf8_lossy(&o.stderr)
        );
        String::from_utf8_lossy(&o.stdout).into_owned()
    }

    /// Stops the capture with SIGINT; returns its summary (checked to add up) and stderr.
    fn stop(mut self) -> (Summary, String) {
        self.guard.signal(libc::SIGINT);
        let (status, err) = self.guard.wait_output(Duration::from_secs(20));
        assert!(status.success(), "capture exited with {status}: {err}");
        let sum = Summary::read(&self.json);
        sum.assert_adds_up();
        (sum, err)
    }
}

/// The packets column of `tapflow rules list` for rule `name`.
fn listed_packets(listing: &str, name: &str) -> u64 {
    listing
        .lines()
        .find_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            (f.first() == Some(&name) && f.len() > 2)
                .then(|| f[1].parse().ok())
                .flatten()
        })
        .unwrap_or_else(|| panic!("rule {name} not in {listing}"))
}

#[test]
fn rules_choose_packets_in_the_kernel_and_count_them() {
    let p = VethPair::new("rul");
    let dir = tempfile::tempdir().unwrap();
    let rules = dir.path().join("r.rules");
    std::fs::write(
        &rules,
        "# gen sends UDP from ports 1024-1027 to port 9\n\
         a proto udp sport 1024-1025 dport 9\n\
         b proto udp sport 1026 both\n",
    )
    .unwrap();
    let out = dir.path().join("out.pcapng");
    let probe = Probe::start(
        &p,
        dir.path(),
        &["--rules", &s(&rules), "-w", &s(&out), "-s", "64"],
    );
    p.send(&["-c", "4000", "--flows", "4"], dir.path(), 4000);
    std::thread::sleep(Duration::from_millis(300));
    let listing = probe.ask_ok(&["rules", "list"]);
    assert!(
        listing.starts_with("2 rules, kernel filter exact"),
        "{listing}"
    );
    assert_eq!(listed_packets(&listing, "a"), 2000);
    assert_eq!(listed_packets(&listing, "b"), 1000);
    // A rule added while capturing: the kernel filter passes port 1027 from now on.
    let after = probe.ask_ok(&["rules", "add", "c", "proto", "udp", "sport", "1027"]);
    assert!(after.starts_with("3 rules"), "{after}");
    p.send(&["-c", "4000", "--flows", "4"], dir.path(), 4000);
    std::thread::sleep(Duration::from_millis(300));
    let (sum, err) = probe.stop();
    // Port 1027 was refused by the kernel before the change: never received, not filtered.
    assert_eq!(sum.received, 7000, "{}", sum.text);
    assert_eq!((sum.recorded, sum.filtered), (7000, 0), "{}", sum.text);
    for (i, name, packets) in [(0, "a", 4000), (1, "b", 2000), (2, "c", 1000)] {
        let rule = |key: &str| json_at(&sum.text, &format!("rules.{i}.{key}"));
        assert_eq!(rule("name"), name, "{}", sum.text);
        assert_eq!(rule("packets"), packets, "{}", sum.text);
    }
    assert_eq!(
        json_u64(&sum.text, "rules.0.bytes"),
        240_000,
        "{}",
        sum.text
    );
    assert!(
        err.contains("tapflow: rules matched packets: a 4000, b 2000, c 1000"),
        "{err}"
    );
    // tshark: every recorded packet has one of the ruled source ports, in the right numbers.
    let ports = tshark_fields(&out, &["udp.srcport"]);
    let count = |port: &str| ports.iter().filter(|r| r[0] == port).count();
    assert_eq!(
        [count("1024"), count("1025"), count("1026"), count("1027")],
        [2000, 2000, 2000, 1000]
    );
}

#[test]
fn rule_changes_under_load_lose_no_packet() {
    let p = VethPair::new("swp");
    let dir = tempfile::tempdir().unwrap();
    let (one, two) = (dir.path().join("1.rules"), dir.path().join("2.rules"));
    // Two different rule sets that both pass all of gen's traffic.
    std::fs::write(&one, "x proto udp dport 9\n").unwrap();
    std::fs::write(&two, "y src 198.18.0.0/24 sport 1024-1031\nz proto tcp\n").unwrap();
    let out = dir.path().join("out.pcapng");
    let probe = Probe::start(
        &p,
        dir.path(),
        &["--rules", &s(&one), "-w", &s(&out), "-s", "64"],
    );
    let sent = 150_000u64;
    let gen_json = dir.path().join("gen.json");
    let mut sender = p.spawn_gen(&[
        "--rate",
        "50000",
        "-c",
        "150000",
        "--flows",
        "8",
        "--summary-json",
        &s(&gen_json),
    ]);
    let mut swaps = 0;
    while sender.try_wait().is_none() {
        let file = if swaps % 2 == 0 { &two } else { &one };
        probe.ask_ok(&["rules", "load", &s(file)]);
        swaps += 1;
        std::thread::sleep(Duration::from_millis(50));
    }
    assert!(swaps >= 20, "only {swaps} rule changes while sending");
    assert_eq!(
        json_u64(&std::fs::read_to_string(&gen_json).unwrap(), "sent"),
        sent
    );
    std::thread::sleep(Duration::from_millis(500));
    let listing = probe.ask_ok(&["rules", "list"]);
    let (sum, _) = probe.stop();
    // Every packet sent is recorded or counted as dropped; none judged by the wrong rules.
    assert_eq!(sum.filtered, 0, "{}", sum.text);
    assert_eq!(
        sum.recorded + sum.dropped_kernel + sum.dropped_ours,
        sent,
        "{}",
        sum.text
    );
    assert_eq!(capinfos_count(&out), sum.recorded);
    // Counters followed the rules by name through every change.
    let names = ["x", "y"];
    let listed: u64 = names
        .iter()
        .filter(|n| listing.lines().any(|l| l.starts_with(&format!("{n} "))))
        .map(|n| listed_packets(&listing, n))
        .sum();
    assert!(listed > 0);
    assert!(
        sum.text.contains("\"rules\":["),
        "the summary lists the rules: {}",
        sum.text
    );
    eprintln!(
        "{swaps} rule changes, {} recorded, {} dropped",
        sum.recorded, sum.dropped_kernel
    );
}

/// `/metrics` fetched from inside namespace `ns`.
fn fetch_metrics(ns: &str, port: u16) -> String {
    let code = format!(
        "import urllib.request; print(urllib.request.urlopen('http://127.0.0.1:{port}/metrics')\
         .read().decode(), end='')"
    );
    run_ok(Command::new("ip").args(["netns", "exec", ns, "python3", "-c", &code]))
}

fn promtool_check(text: &str) -> (bool, String) {
    use std::io::Write;
    let mut child = Command::new("promtool")
        .args(["check", "metrics"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("promtool (Debian package prometheus; scripts/install-deps.sh installs it)");
    child
        .stdin
        .take()
        .unwrap()
        .write_all(text.as_bytes())
        .unwrap();
    let o = child.wait_with_output().unwrap();
    let said = format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
    (o.status.success(), said)
}

fn sample(text: &str, series: &str) -> f64 {
    text.lines()
        .find_map(|l| l.strip_prefix(series)?.strip_prefix(' ')?.parse().ok())
        .unwrap_or_else(|| panic!("no {series} in {text}"))
}

#[test]
fn statistics_reach_prometheus_and_tapflow_stats() {
    let p = VethPair::new("met");
    let ifb = &p.if_b;
    let dir = tempfile::tempdir().unwrap();
    run_ok(Command::new("ip").args(["-n", &p.ns_b, "link", "set", "lo", "up"]));
    let rules = dir.path().join("r.rules");
    std::fs::write(&rules, "all\n").unwrap();
    let probe = Probe::start(
        &p,
        dir.path(),
        &["--threads", "2", "--metrics", "9464", "--rules", &s(&rules)],
    );
    p.send(
        &["-c", "3000", "--flows", "16", "--proto", "tcp"],
        dir.path(),
        3000,
    );
    p.send(&["-c", "2000", "--flows", "16"], dir.path(), 2000);
    std::thread::sleep(Duration::from_millis(500));
    let text = fetch_metrics(&p.ns_b, 9464);
    let (ok, said) = promtool_check(&text);
    assert!(ok, "promtool check metrics: {said}\n{text}");
    assert!(said.trim().is_empty(), "promtool lint: {said}");
    let sum_of = |name: &str| -> f64 {
        (0..2)
            .map(|k| {
                sample(
                    &text,
                    &format!("{name}{{interface=\"{ifb}\",worker=\"{k}\"}}"),
                )
            })
            .sum()
    };
    assert_eq!(sum_of("tapflow_received_total"), 5000.0);
    assert_eq!(sum_of("tapflow_traffic_packets_total"), 5000.0);
    assert_eq!(sum_of("tapflow_traffic_tcp_total"), 3000.0);
    assert_eq!(
        sample(
            &text,
            &format!("tapflow_rule_packets_total{{interface=\"{ifb}\",rule=\"all\"}}")
        ),
        5000.0
    );
    // Both fanout members saw traffic: the per-worker split is real.
    assert!(
        sample(
            &text,
            &format!("tapflow_received_total{{interface=\"{ifb}\",worker=\"0\"}}")
        ) > 0.0
    );
    assert!(
        sample(
            &text,
            &format!("tapflow_received_total{{interface=\"{ifb}\",worker=\"1\"}}")
        ) > 0.0
    );
    // tapflow stats reads the same counters over the control socket.
    let table = probe.ask_ok(&["stats"]);
    let row = |label: &str| -> Vec<String> {
        table
            .lines()
            .find(|l| l.starts_with(label))
            .unwrap_or_else(|| panic!("no {label} in {table}"))[label.len()..]
            .split_whitespace()
            .map(String::from)
            .collect()
    };
    assert_eq!(row("received")[0], "5000", "{table}");
    assert_eq!(row("TCP ")[0], "3000", "{table}");
    assert_eq!(row("UDP")[0], "2000", "{table}");
    assert_eq!(row("IPv4")[0], "5000", "{table}");
    // The JSON has the keys of the summary, and /metrics their stems.
    let json = probe.ask_ok(&["stats", "--json"]);
    assert_eq!(json_u64(&json, "total.received"), 5000, "{json}");
    assert_eq!(json_u64(&json, "total.traffic.tcp"), 3000, "{json}");
    assert_eq!(json_u64(&json, "total.traffic.udp"), 2000, "{json}");
    for k in 0..2 {
        let w = |key: &str| json_u64(&json, &format!("workers.{k}.{key}")) as f64;
        for key in ["received", "dropped_kernel", "dropped_ours"] {
            assert_eq!(
                w(key),
                sample(
                    &text,
                    &format!("tapflow_{key}_total{{interface=\"{ifb}\",worker=\"{k}\"}}")
                ),
                "{key}: {json}\n{text}"
            );
        }
        assert_eq!(
            w("traffic.tcp_syn"),
            sample(
                &text,
                &format!("tapflow_traffic_tcp_syn_total{{interface=\"{ifb}\",worker=\"{k}\"}}")
            ),
            "{json}\n{text}"
        );
    }
    // Rules replaced: the removed rule's counters stay at their last values, the new one starts.
    let other = dir.path().join("o.rules");
    std::fs::write(&other, "other proto icmp\n").unwrap();
    probe.ask_ok(&["rules", "load", &s(&other)]);
    let text = fetch_metrics(&p.ns_b, 9464);
    let (ok, said) = promtool_check(&text);
    assert!(ok && said.trim().is_empty(), "promtool: {said}\n{text}");
    let rule = |name: &str| {
        sample(
            &text,
            &format!("tapflow_rule_packets_total{{interface=\"{ifb}\",rule=\"{name}\"}}"),
        )
    };
    assert_eq!(rule("all"), 5000.0, "{text}");
    assert_eq!(rule("other"), 0.0, "{text}");
    let (sum, _) = probe.stop();
    assert_eq!(sum.received, 5000);
}

#[test]
fn check_exits_by_thresholds() {
    let p = VethPair::new("chk");
    let dir = tempfile::tempdir().unwrap();
    let probe = Probe::start(&p, dir.path(), &[]);
    let mut sender = p.spawn_gen(&["--rate", "2000", "--duration", "12"]);
    std::thread::sleep(Duration::from_millis(500));
    let check = |args: &[&str]| {
        let mut a = vec!["check", "--interval", "1"];
        a.extend_from_slice(args);
        let o = probe.ask(&a);
        let out = String::from_utf8_lossy(&o.stdout).into_owned();
        (o.status.code(), out)
    };
    // ~2000 pkt/s and no drops.
    let (code, out) = check(&["-w", "1,100:", "-c", "5,10:"]);
    assert_eq!(code, Some(0), "{out}");
    assert!(out.starts_with("TAPFLOW OK - drop 0.000%, "), "{out}");
    assert!(out.contains("| drop=0.0000%;1;5;0;100 rate="), "{out}");
    let rate: f64 = out
        .split("rate=")
        .nth(1)
        .unwrap()
        .split(';')
        .next()
        .unwrap()
        .parse()
        .unwrap();
    assert!((1500.0..2500.0).contains(&rate), "{out}");
    assert_eq!(
        check(&["-w", ",100000:"]).0,
        Some(1),
        "rate below the warning"
    );
    assert_eq!(check(&["-w", ",100000:", "-c", ",50000:"]).0, Some(2));
    assert_eq!(check(&["-w", "@0:1"]).0, Some(1), "drop ratio inside @0:1");
    assert_eq!(check(&["-c", "@0:1"]).0, Some(2));
    let (code, out) = check(&["-w", "x"]);
    assert_eq!(code, Some(3), "{out}");
    assert!(
        out.starts_with("TAPFLOW UNKNOWN - -w: 'x' is not a Nagios range"),
        "{out}"
    );
    sender.signal(libc::SIGINT);
    let _ = sender.wait_limited(Duration::from_secs(10));
    let _ = probe.stop();
    // No capture serving the socket any more: UNKNOWN.
    let o = run_limited(
        tapflow(["check", "--control"]).arg(dir.path().join("ctl.sock")),
        Duration::from_secs(10),
    );
    assert_eq!(o.status.code(), Some(3));
    assert!(String::from_utf8_lossy(&o.stdout).contains("no tapflow capture is serving"));
    let o = run_limited(&mut tapflow(["check", "--bogus"]), Duration::from_secs(10));
    assert_eq!(o.status.code(), Some(3));
}

#[test]
fn control_socket_refuses_other_users() {
    let p = VethPair::new("ctl");
    let dir = tempfile::Builder::new()
        .prefix("tapflow-ctl")
        .tempdir()
        .unwrap();
    std::fs::set_permissions(dir.path(), PermissionsExt::from_mode(0o755)).unwrap();
    let probe = Probe::start(&p, dir.path(), &[]);
    let mode = std::fs::metadata(&probe.control)
        .unwrap()
        .permissions()
        .mode()
        & 0o777;
    assert_eq!(mode, 0o600);
    // A copy of the binary anyone may run.
    let bin_copy = dir.path().join("tapflow");
    std::fs::copy(bin(), &bin_copy).unwrap();
    std::fs::set_permissions(&bin_copy, PermissionsExt::from_mode(0o755)).unwrap();
    let as_nobody = || {
        let mut c = Command::new("setpriv");
        c.args(["--reuid=65534", "--regid=65534", "--clear-groups"])
            .arg(&bin_copy)
            .args(["rules", "list", "--control"])
            .arg(&probe.control);
        run_limited(&mut c, Duration::from_secs(10))
    };
    let o = as_nobody();
    assert_clean_error(
        &o,
        Some(1),
        &["permission denied"],
        "unprivileged, mode 0600",
    );
    // Even with the file opened to everyone, the probe checks who connects.
    std::fs::set_permissions(&probe.control, PermissionsExt::from_mode(0o666)).unwrap();
    let o = as_nobody();
    assert_clean_error(
        &o,
        Some(1),
        &["permission denied"],
        "unprivileged, mode 0666",
    );
    // Root is served.
    assert!(probe.ask_ok(&["rules", "list"]).starts_with("no rules"));
    let _ = probe.stop();
    assert!(!probe_socket_left(dir.path()));
}

fn probe_socket_left(dir: &Path) -> bool {
    dir.join("ctl.sock").exists()
}

#[test]
fn rules_on_a_file_agree_with_tcpdump() {
    let Some(corpus) = corpus() else { return };
    rules_agree_with_tcpdump_on(&corpus.join("pcapplusplus-many-protocols.pcap"));
}

/// The same on 300 built conversations: DNS, web and other services over TCP and UDP, IPv4
/// and IPv6.
#[test]
fn rules_on_a_built_file_agree_with_tcpdump() {
    let dir = tempfile::tempdir().unwrap();
    rules_agree_with_tcpdump_on(&built_trace(dir.path(), "t.pcap", 300, 10, 1_000_000));
}

/// Rules on `file` record what tcpdump's filter made of them accepts, with and without `-f`;
/// a rule file with a bad line is refused in one line naming the file and the line.
fn rules_agree_with_tcpdump_on(file: &Path) {
    let dir = tempfile::tempdir().unwrap();
    let rules = dir.path().join("r.rules");
    let text = "dns proto udp sport 53 both\nweb proto tcp dport 80-443 both\nv6 src ::/0\n";
    std::fs::write(&rules, text).unwrap();
    let expr: Vec<String> = tapflow_wire::rules::parse_rules(text)
        .unwrap()
        .iter()
        .map(|r| format!("({})", r.to_pcap()))
        .collect();
    let tcpdump_count = |filter: &str| {
        run_ok(
            Command::new("tcpdump")
                .args(["-nn", "-r"])
                .arg(file)
                .arg(filter),
        )
        .lines()
        .count() as u64
    };
    let json = dir.path().join("sum.json");
    let capture = |extra: &[&str]| {
        let o = run_limited(
            tapflow(["capture", "-q", "--rules"])
                .arg(&rules)
                .args(extra)
                .arg("-r")
                .arg(file)
                .arg("--summary-json")
                .arg(&json),
            Duration::from_secs(30),
        );
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        let sum = Summary::read(&json);
        sum.assert_adds_up();
        sum
    };
    let want = tcpdump_count(&expr.join(" or "));
    assert!(want > 0);
    let sum = capture(&[]);
    assert_eq!(sum.recorded, want, "{}", sum.text);
    assert!(sum.filtered > 0);
    // -f on a file: libpcap's program run on each packet, before the rules.
    let f = "tcp or icmp";
    let want_f = tcpdump_count(&format!("({f}) and ({})", expr.join(" or ")));
    assert!(want_f > 0 && want_f < want);
    let sum = capture(&["-f", f]);
    assert_eq!(sum.recorded, want_f, "{}", sum.text);
    // A broken rule file: one line naming the file and the line.
    std::fs::write(&rules, "ok proto udp\nbad proto udp dport 99999\n").unwrap();
    let o = run_limited(
        tapflow(["capture", "-q", "--rules"])
            .arg(&rules)
            .arg("-r")
            .arg(file),
        Duration::from_secs(30),
    );
    assert_clean_error(&o, Some(2), &["r.rules: line 2: '99999'"], "bad rule file");
}

/// The interface's promiscuity count (`ip -d link`): how many asked for promiscuous mode.
fn promiscuity(p: &VethPair) -> u32 {
    let out = run_ok(Command::new("ip").args(["-d", "-n", &p.ns_b, "link", "show", &p.if_b]));
    out.split("promiscuity ")
        .nth(1)
        .and_then(|r| r.split_whitespace().next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no promiscuity in {out}"))
}

#[test]
fn capture_is_promiscuous_unless_p() {
    let p = VethPair::new("prm");
    let dir = tempfile::tempdir().unwrap();
    assert_eq!(promiscuity(&p), 0);
    let probe = Probe::start(&p, dir.path(), &["--threads", "2"]);
    // One membership per ring socket; the kernel counts them.
    assert_eq!(promiscuity(&p), 2);
    let _ = probe.stop();
    assert_eq!(promiscuity(&p), 0);
    let probe = Probe::start(&p, dir.path(), &["-p"]);
    assert_eq!(promiscuity(&p), 0);
    let _ = probe.stop();
}

/// `ip link set IF up|down` for B's interface (`peer`: A's, which takes B's carrier).
fn set_link(p: &VethPair, peer: bool, state: &str) {
    let (ns, ifname) = if peer {
        (&p.ns_a, &p.if_a)
    } else {
        (&p.ns_b, &p.if_b)
    };
    ip(&["-n", ns, "link", "set", ifname, state]);
}

/// A link flap is a gap in the capture, not its end: with the link down for two seconds
/// between two bursts, a capture of two fanout members keeps running, counts the gap in its
/// statistics while it lasts, logs its two edges, records every packet of both bursts and
/// exits 0 on SIGTERM; each file marks the gap with an ISB at each edge and a comment on its
/// first packet after it, which tshark shows.
#[test]
fn a_link_flap_is_a_gap_in_the_capture_not_its_end() {
    const N: u64 = 2000;
    let p = VethPair::new("lfp");
    p.wait_link_up();
    run_ok(Command::new("ip").args(["-n", &p.ns_b, "link", "set", "lo", "up"]));
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("flap.pcapng");
    let mut probe = Probe::start(
        &p,
        dir.path(),
        &["--threads", "2", "-w", &s(&out), "--metrics", "9465"],
    );
    wait_capturing(&mut probe.guard, 2);
    p.send(&["-c", &N.to_string(), "--flows", "32"], dir.path(), N);
    std::thread::sleep(Duration::from_millis(300));

    set_link(&p, false, "down");
    let down = Instant::now();
    // While the link is down the capture runs, and both workers count the gap.
    let gap_seen =
        |json: &str| (0..2).all(|k| json_u64(json, &format!("workers.{k}.link_gaps")) == 1);
    let json = loop {
        let o = probe.ask(&["stats", "--json"]);
        if !o.status.success() {
            let (status, err) = probe.guard.wait_output(Duration::from_secs(20));
            panic!("the capture ended when the link went down ({status}): {err}");
        }
        let json = String::from_utf8_lossy(&o.stdout).into_owned();
        if gap_seen(&json) {
            break json;
        }
        assert!(
            down.elapsed() < Duration::from_secs(5),
            "no gap counted: {json}"
        );
        std::thread::sleep(Duration::from_millis(50));
    };
    assert_eq!(json_u64(&json, "total.link_gaps"), 1, "{json}");
    assert!(json_f64(&json, "total.link_down_seconds") > 0.0, "{json}");
    let text = fetch_metrics(&p.ns_b, 9465);
    let (ok, said) = promtool_check(&text);
    assert!(
        ok && said.trim().is_empty(),
        "promtool check metrics: {said}\n{text}"
    );
    for k in 0..2 {
        let series = |name: &str| format!("{name}{{interface=\"{}\",worker=\"{k}\"}}", p.if_b);
        assert_eq!(sample(&text, &series("tapflow_link_gaps_total")), 1.0);
        assert!(sample(&text, &series("tapflow_link_down_seconds_total")) > 0.0);
    }
    std::thread::sleep(Duration::from_secs(2).saturating_sub(down.elapsed()));
    assert!(
        probe.guard.try_wait().is_none(),
        "the capture ended in the gap"
    );

    set_link(&p, false, "up");
    let gap = down.elapsed();
    p.wait_link_up();
    // The kernel hooked both ring sockets back: no new socket, the same memberships.
    assert_eq!(bound_packet_sockets(probe.guard.pid()), 2);
    assert_eq!(promiscuity(&p), 2);
    p.send(&["-c", &N.to_string(), "--flows", "32"], dir.path(), N);
    std::thread::sleep(Duration::from_millis(500));

    probe.guard.signal(libc::SIGTERM);
    let (status, err) = probe.guard.wait_output(Duration::from_secs(20));
    assert!(status.success(), "capture exited with {status}: {err}");
    let sum = Summary::read(&probe.json);
    sum.assert_adds_up();
    sum.assert_matches_exit_line(&err);
    assert_eq!((sum.received, sum.recorded), (2 * N, 2 * N), "{}", sum.text);
    assert_eq!(json_u64(&sum.text, "link_gaps"), 1, "{}", sum.text);
    let down_s = json_f64(&sum.text, "link_down_seconds");
    assert!(
        (1.5..gap.as_secs_f64() + 1.0).contains(&down_s),
        "{down_s} s down for a gap of {gap:?}"
    );

    // One line as the link goes, one as it comes back with the gap's length.
    let lines = |prefix: &str| -> Vec<&str> {
        err.lines()
            .filter(|l| l.starts_with(&format!("tapflow: link {prefix} on {}", p.if_b)))
            .collect()
    };
    assert_eq!(
        lines("down"),
        [format!(
            "tapflow: link down on {} (set down); waiting for it to come back",
            p.if_b
        )],
        "{err}"
    );
    let up = lines("up");
    assert_eq!(up.len(), 1, "{err}");
    let secs: f64 = up[0]
        .split(" after ")
        .nth(1)
        .and_then(|r| r.strip_suffix(" s down; capturing again"))
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("{err}"));
    assert!((1.5..gap.as_secs_f64() + 1.0).contains(&secs), "{err}");
    let exit = err.lines().find(|l| l.contains(" received, ")).unwrap();
    assert!(exit.contains(", 1 link gap ("), "{exit}");

    // Each worker's file: the packets before the gap, an ISB saying the link went down, one
    // saying it came back, then the packets after, the first with the gap in its comment.
    let files = json_strings(&sum.text, "files");
    assert_eq!(files.len(), 2, "{}", sum.text);
    let (mut before, mut after) = (0, 0);
    for f in &files {
        let f = Path::new(f);
        let cap = read_capture(f);
        assert!(cap.damage.is_none(), "{:?}", cap.damage);
        let edge = |text: &str| {
            let at: Vec<_> = cap
                .isbs
                .iter()
                .filter(|i| i.comment.as_deref().is_some_and(|c| c.starts_with(text)))
                .collect();
            assert_eq!(at.len(), 1, "{text:?} in {:?}", cap.isbs);
            at[0].offset
        };
        let went = edge(&format!("link down on {} (set down)", p.if_b));
        let came = edge(&format!("link up on {} after ", p.if_b));
        assert!(went < came);
        let n_before = cap.packets.iter().filter(|k| k.offset < went).count();
        let n_after = cap.packets.iter().filter(|k| k.offset > came).count();
        assert_eq!(
            n_before + n_after,
            cap.packets.len(),
            "a packet inside the gap"
        );
        before += n_before;
        after += n_after;
        let comments: Vec<Vec<String>> = tshark_fields(f, &["frame.number", "frame.comment"])
            .into_iter()
            .filter(|r| r.len() == 2 && !r[1].is_empty())
            .collect();
        if n_after > 0 {
            assert_eq!(comments.len(), 1, "{comments:?}");
            assert_eq!(comments[0][0], (n_before + 1).to_string(), "{comments:?}");
            assert!(
                comments[0][1].starts_with(&format!(
                    "the first packet after a gap: the link on {} was down for ",
                    p.if_b
                )) && comments[0][1].ends_with(" s (set down)"),
                "{comments:?}"
            );
        }
    }
    assert_eq!((before as u64, after as u64), (N, N));
}

/// A lost carrier (the veth peer set down, as a cable pulled) is a gap too, seen from the
/// interface's flags once the packets stop.
#[test]
fn a_lost_carrier_is_a_gap_too() {
    const N: u64 = 1000;
    let p = VethPair::new("lcr");
    p.wait_link_up();
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("carrier.pcapng");
    let mut probe = Probe::start(&p, dir.path(), &["-w", &s(&out)]);
    p.send(&["-c", &N.to_string()], dir.path(), N);
    std::thread::sleep(Duration::from_millis(300));
    set_link(&p, true, "down");
    let down = Instant::now();
    let json = loop {
        let json = probe.ask_ok(&["stats", "--json"]);
        if json_u64(&json, "total.link_gaps") == 1 {
            break json;
        }
        assert!(
            down.elapsed() < Duration::from_secs(5),
            "no gap counted: {json}"
        );
        std::thread::sleep(Duration::from_millis(50));
    };
    assert!(probe.guard.try_wait().is_none(), "{json}");
    std::thread::sleep(Duration::from_millis(1500).saturating_sub(down.elapsed()));
    set_link(&p, true, "up");
    p.wait_link_up();
    p.send(&["-c", &N.to_string()], dir.path(), N);
    std::thread::sleep(Duration::from_millis(500));
    let (sum, err) = probe.stop();
    assert_eq!(sum.recorded, 2 * N, "{}", sum.text);
    assert_eq!(json_u64(&sum.text, "link_gaps"), 1, "{}", sum.text);
    let down_lines: Vec<&str> = err.lines().filter(|l| l.contains("link down on")).collect();
    assert_eq!(
        down_lines,
        [format!(
            "tapflow: link down on {} (no carrier); waiting for it to come back",
            p.if_b
        )],
        "{err}"
    );
    assert_eq!(err.matches("tapflow: link up on").count(), 1, "{err}");
    let rows = tshark_fields(&out, &["frame.comment"]);
    assert_eq!(rows.len() as u64, 2 * N);
    let noted: Vec<_> = rows.iter().filter(|r| !r[0].is_empty()).collect();
    assert_eq!(noted.len(), 1, "{noted:?}");
    assert!(noted[0][0].ends_with(" s (no carrier)"), "{noted:?}");
}

#[test]
fn stats_svg_draws_the_rates_over_time() {
    let p = VethPair::new("ssv");
    let dir = tempfile::tempdir().unwrap();
    let probe = Probe::start(&p, dir.path(), &["-w", "/dev/null"]);
    let svg = dir.path().join("rates.svg");
    // A directory is refused before the first reading, in one line.
    let o = probe.ask(&["stats", "--svg", &s(dir.path())]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(!o.status.success(), "{err}");
    assert!(
        err.contains("--svg") && err.contains("a directory"),
        "{err}"
    );
    let mut c = tapflow([
        "stats",
        "--svg",
        &s(&svg),
        "--watch",
        "200ms",
        "--count",
        "25",
    ]);
    c.arg("--control").arg(&probe.control);
    let mut stats = VethPair::spawn(&mut c);
    let start = Instant::now();
    while !svg.exists() {
        assert!(start.elapsed() < Duration::from_secs(10), "no chart yet");
        std::thread::sleep(Duration::from_millis(20));
    }
    p.send(&["-c", "4000", "--rate", "10k"], dir.path(), 4000);
    let (status, err) = stats.wait_output(Duration::from_secs(30));
    assert!(status.success(), "{err}");
    let doc = std::fs::read_to_string(&svg).unwrap();
    assert!(
        doc.starts_with("<svg") && doc.ends_with("</svg>\n"),
        "{doc}"
    );
    assert!(!dir.path().join("rates.svg.part").exists());
    // One line per counter, a point per interval between the 25 readings.
    let points = |label: &str| -> Vec<f64> {
        let line = doc
            .lines()
            .find(|l| l.contains(&format!(">{label}<")))
            .unwrap_or_else(|| panic!("no {label} line in {doc}"));
        line.split("points=\"")
            .nth(1)
            .unwrap()
            .split('"')
            .next()
            .unwrap()
            .split(' ')
            .map(|xy| xy.split(',').nth(1).unwrap().parse().unwrap())
            .collect()
    };
    let received = points("received");
    assert_eq!(received.len(), 24, "{doc}");
    // The burst shows: some interval's rate is above the axis (y grows downwards from 350).
    assert!(received.iter().any(|y| *y < 300.0), "{received:?}");
    // Nothing was dropped: those lines lie on the axis.
    assert!(
        points("dropped by kernel").iter().all(|y| *y == 350.0),
        "{doc}"
    );
    let (sum, _) = probe.stop();
    assert_eq!(sum.received, 4000);
}
