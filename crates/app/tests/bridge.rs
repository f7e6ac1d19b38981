//! `tapflow bridge` on a real kernel: host 1 and host 2 in namespaces of their own, each joined
//! by a veth pair to a middle namespace with no Linux bridge and no IP forwarding, where the
//! bridge runs between its two veth ends. ping and an iperf3 TCP transfer cross it; tcpdump on
//! host 1's interface is the oracle of what crossed. Needs root; fails (never skips) without.

mod common;

use std::collections::BTreeMap;
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use common::*;

static N: AtomicU32 = AtomicU32::new(0);

/// host 1 ←veth→ middle ←veth→ host 2, IPv6 off (no stray solicitations), hosts at
/// 10.88.N.1 and .2; removed on drop.
struct Lane {
    ns: [String; 3],
    /// host 1's interface, the middle's two ends, host 2's interface.
    ifs: [String; 4],
    addr: [String; 2],
}

impl Lane {
    fn new() -> Lane {
        require_root();
        let n = N.fetch_add(1, Ordering::SeqCst);
        let pid = std::process::id();
        let l = Lane {
            ns: ["h1", "mid", "h2"].map(|s| format!("brg-{pid}-{n}-{s}")),
            ifs: ["h", "a", "b", "k"].map(|s| format!("brg{pid}{n}{s}")),
            addr: [1, 2].map(|h| format!("10.88.{n}.{h}")),
        };
        assert!(l.ifs[0].len() <= 15);
        for ns in &l.ns {
            ip(&["netns", "add", ns]);
            for k in ["all", "default"] {
                disable_ipv6(ns, k);
            }
            ip(&["-n", ns, "link", "set", "lo", "up"]);
        }
        let [h1, mid, h2] = &l.ns;
        let [i1, ma, mb, i2] = &l.ifs;
        ip(&[
            "-n", h1, "link", "add", i1, "type", "veth", "peer", "name", ma, "netns", mid,
        ]);
        ip(&[
            "-n", h2, "link", "add", i2, "type", "veth", "peer", "name", mb, "netns", mid,
        ]);
        for (ns, i) in [(h1, i1), (mid, ma), (mid, mb), (h2, i2)] {
            disable_ipv6(ns, i);
            ip(&["-n", ns, "link", "set", i, "up"]);
        }
        for (ns, i, a) in [(h1, i1, &l.addr[0]), (h2, i2, &l.addr[1])] {
            ip(&["-n", ns, "addr", "add", &format!("{a}/24"), "dev", i]);
            // A veth leaves checksums and segmentation to a NIC that is not there; a frame
            // crossing the bridge must carry what a wire would.
            run_ok(&mut in_ns(
                ns,
                "ethtool",
                &["-K", i, "tx", "off", "tso", "off", "gso", "off"],
            ));
        }
        // Each host knows the other's MAC for good: no ARP request (nor its retries, which
        // would outlast the first ping tried without a bridge) crosses at a moment tcpdump on
        // host 1 and the bridge do not both see.
        let mac = |ns: &str, i: &str| {
            run_ok(&mut in_ns(
                ns,
                "cat",
                &[&format!("/sys/class/net/{i}/address")],
            ))
            .trim()
            .to_string()
        };
        let (m1, m2) = (mac(h1, i1), mac(h2, i2));
        for (ns, i, peer, m) in [(h1, i1, &l.addr[1], &m2), (h2, i2, &l.addr[0], &m1)] {
            ip(&[
                "-n",
                ns,
                "neigh",
                "replace",
                peer,
                "lladdr",
                m,
                "nud",
                "permanent",
                "dev",
                i,
            ]);
        }
        l
    }

    fn cmd(&self, host: usize, program: &str, args: &[&str]) -> Command {
        in_ns(&self.ns[host], program, args)
    }

    /// Whether one ping from host 1 reaches host 2 within a second.
    fn ping_once(&self) -> bool {
        self.cmd(0, "ping", &["-c", "1", "-W", "1", "-q", &self.addr[1]])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .unwrap()
            .success()
    }

    /// `ip -d link show` in the middle.
    fn middle_links(&self) -> String {
        run_ok(Command::new("ip").args(["-n", &self.ns[1], "-d", "link", "show"]))
    }
}

impl Drop for Lane {
    fn drop(&mut self) {
        for ns in &self.ns {
            let _ = Command::new("ip")
                .args(["netns", "del", ns])
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .status();
        }
    }
}

fn in_ns(ns: &str, program: &str, args: &[&str]) -> Command {
    VethPair::in_ns(ns, Path::new(program), args)
}

fn s(p: &Path) -> String {
    p.to_string_lossy().into_owned()
}

/// What identifies a frame that crossed, as tshark reads it.
const FIELDS: [&str; 11] = [
    "frame.len",
    "eth.src",
    "eth.dst",
    "arp.opcode",
    "ip.src",
    "ip.dst",
    "ip.id",
    "tcp.srcport",
    "tcp.dstport",
    "tcp.seq_raw",
    "tcp.ack_raw",
];

fn frames(files: &[&Path]) -> BTreeMap<Vec<String>, u64> {
    let mut m = BTreeMap::new();
    for f in files {
        for row in tshark_fields(f, &FIELDS) {
            *m.entry(row).or_default() += 1;
        }
    }
    m
}

/// A direction's counters from the summary line `tapflow: A->B: received N, forwarded N, ...`.
fn direction(err: &str, from: &str, to: &str) -> BTreeMap<String, u64> {
    let head = format!("tapflow: {from}->{to}: ");
    let line = err
        .lines()
        .find_map(|l| l.strip_prefix(&head))
        .unwrap_or_else(|| panic!("no {head:?} line in {err}"));
    line.split(", ")
        .map(|kv| {
            let (k, v) = kv.split_once(' ').unwrap();
            (k.to_string(), v.parse().unwrap())
        })
        .collect()
}

/// Pings cross only while the bridge runs; a TCP transfer completes through it; the headers it
/// recorded are, frame for frame, what tcpdump saw on host 1's interface; each direction's
/// counters add up, in the summary and on `/metrics`; no program is left afterwards.
#[test]
fn hosts_talk_through_the_bridge_and_it_records_what_crossed() {
    let l = Lane::new();
    let dir = tempfile::tempdir().unwrap();
    let [_, a, b, _] = &l.ifs;
    assert!(!l.ping_once(), "host 2 answers with no bridge in between");

    let out = dir.path().join("b.pcapng");
    let json = dir.path().join("b.json");
    let port = 19000 + (std::process::id() % 1000) as u16;
    let listen = format!("127.0.0.1:{port}");
    let mut bridge = VethPair::spawn(&mut in_ns(
        &l.ns[1],
        &s(&bin()),
        &[
            "bridge",
            "-i",
            a,
            "-o",
            b,
            "-q",
            "-w",
            &s(&out),
            "--summary-json",
            &s(&json),
            "--control",
            "none",
            "--metrics",
            &listen,
        ],
    ));
    bridge.wait_until(Duration::from_secs(15), "attached its programs", |_| {
        l.middle_links().matches("prog/xdp").count() == 2
    });
    let links = l.middle_links();
    assert!(links.contains("name tapflow_bridge"), "{links}");

    let seen = dir.path().join("h1.pcap");
    let mut dump = VethPair::spawn(&mut l.cmd(
        0,
        "tcpdump",
        &[
            "-i",
            &l.ifs[0],
            "-s",
            "128",
            "-B",
            "65536",
            "-U",
            "-w",
            &s(&seen),
        ],
    ));
    let start = Instant::now();
    while !std::fs::metadata(&seen).is_ok_and(|m| m.len() > 0) {
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "tcpdump did not start"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    std::thread::sleep(Duration::from_millis(300));

    let ping = run_ok(&mut l.cmd(0, "ping", &["-c", "5", "-i", "0.2", "-W", "2", &l.addr[1]]));
    assert!(ping.contains("5 received"), "{ping}");
    let mut server = VethPair::spawn(&mut l.cmd(2, "iperf3", &["-s", "-1", "-B", &l.addr[1]]));
    std::thread::sleep(Duration::from_millis(500));
    let client = run_limited(
        &mut l.cmd(
            0,
            "iperf3",
            &[
                "-c",
                &l.addr[1],
                "-n",
                "8M",
                "-b",
                "100M",
                "--connect-timeout",
                "5000",
            ],
        ),
        Duration::from_secs(60),
    );
    let text = String::from_utf8_lossy(&client.stdout);
    assert!(
        client.status.success() && text.contains("iperf Done"),
        "iperf3: {text}"
    );
    let (st, err) = server.wait_output(Duration::from_secs(20));
    assert!(st.success(), "iperf3 server: {err}");

    let metrics = run_ok(&mut in_ns(
        &l.ns[1],
        "curl",
        &["-sf", &format!("http://{listen}/metrics")],
    ));
    let fwd = format!("tapflow_bridge_forwarded_total{{direction=\"{a}->{b}\"}}");
    let n: f64 = metrics
        .lines()
        .find_map(|m| m.strip_prefix(&fwd))
        .unwrap_or_else(|| panic!("no {fwd} in {metrics}"))
        .trim()
        .parse()
        .unwrap();
    assert!(n > 1000.0, "{metrics}");

    // tcpdump writes each frame as it reads it (-U): stopped once its file has not grown for a
    // second, it has read everything (on a loaded machine it can be seconds behind).
    let mut size = 0;
    loop {
        std::thread::sleep(Duration::from_millis(1000));
        let now = std::fs::metadata(&seen).unwrap().len();
        if now == size {
            break;
        }
        size = now;
    }
    dump.signal(libc::SIGINT);
    let (st, dump_err) = dump.wait_output(Duration::from_secs(10));
    assert!(st.success(), "tcpdump: {dump_err}");
    assert!(
        dump_err.lines().any(|l| l == "0 packets dropped by kernel"),
        "{dump_err}"
    );

    bridge.signal(libc::SIGINT);
    let (st, err) = bridge.wait_output(Duration::from_secs(20));
    assert!(st.success(), "bridge exited with {st}: {err}");
    assert!(
        !l.ping_once(),
        "host 2 still answers after the bridge ended"
    );
    let links = l.middle_links();
    assert!(!links.contains("xdp"), "a program is left: {links}");

    // Every frame is counted, per direction, and nothing is lost at this rate.
    let mut total = 0;
    for (from, to) in [(a, b), (b, a)] {
        let c = direction(&err, from, to);
        let losses: u64 = [
            "no_socket",
            "rx_dropped",
            "rx_ring_full",
            "tx_ring_full",
            "tx_invalid",
            "in_flight",
        ]
        .iter()
        .map(|k| c[*k])
        .sum();
        assert_eq!(
            c["received"],
            c["forwarded"] + losses,
            "{from}->{to}: {err}"
        );
        assert_eq!(losses, 0, "{from}->{to}: {err}");
        total += c["received"];
    }
    let sum = Summary::read(&json);
    sum.assert_adds_up();
    assert_eq!(sum.received, total, "{}", sum.text);
    assert_eq!(sum.recorded, total, "{}", sum.text);

    // What was recorded is what crossed: host 1 sent what arrived on a, and received what
    // left b towards it... and what host 1's interface saw, frame for frame.
    let recorded = frames(&[
        &dir.path().join("b-w0.pcapng"),
        &dir.path().join("b-w1.pcapng"),
    ]);
    let crossed = frames(&[&seen]);
    let count = |m: &BTreeMap<Vec<String>, u64>| m.values().sum::<u64>();
    assert!(count(&crossed) > 5000, "{}", count(&crossed));
    assert_eq!(count(&recorded), total);
    assert!(
        recorded == crossed,
        "recorded {} frames, host 1 saw {}; first difference: {:?}",
        count(&recorded),
        count(&crossed),
        recorded.iter().zip(&crossed).find(|(x, y)| x != y)
    );
}

/// Bad requests fail at start with one clear line.
#[test]
fn a_bridge_needs_two_interfaces() {
    let l = Lane::new();
    let [_, a, _, _] = &l.ifs;
    let o = run_limited(
        &mut in_ns(
            &l.ns[1],
            &s(&bin()),
            &["bridge", "-i", a, "-o", a, "--control", "none"],
        ),
        Duration::from_secs(20),
    );
    assert_clean_error(&o, None, &["both sides"], "bridge -i A -o A");
    let o = run_limited(
        &mut in_ns(
            &l.ns[1],
            &s(&bin()),
            &["bridge", "-i", a, "-o", "brgnosuch0", "--control", "none"],
        ),
        Duration::from_secs(20),
    );
    assert_clean_error(&o, None, &["brgnosuch0"], "bridge to a missing interface");
    assert!(!l.middle_links().contains("xdp"), "{}", l.middle_links());
}

/// `-f` chooses what is recorded, not what crosses: with `-f icmp` a TCP transfer still
/// completes, and the records are the pings, each request and reply once.
#[test]
fn a_filter_chooses_the_records_not_what_crosses() {
    let l = Lane::new();
    let dir = tempfile::tempdir().unwrap();
    let [_, a, b, _] = &l.ifs;
    let out = dir.path().join("f.pcapng");
    let json = dir.path().join("f.json");
    let mut bridge = VethPair::spawn(&mut in_ns(
        &l.ns[1],
        &s(&bin()),
        &[
            "bridge",
            "-i",
            a,
            "-o",
            b,
            "-q",
            "-f",
            "icmp",
            "-w",
            &s(&out),
            "--summary-json",
            &s(&json),
            "--control",
            "none",
        ],
    ));
    bridge.wait_until(Duration::from_secs(15), "attached its programs", |_| {
        l.middle_links().matches("prog/xdp").count() == 2
    });
    let ping = run_ok(&mut l.cmd(0, "ping", &["-c", "3", "-i", "0.2", "-W", "2", &l.addr[1]]));
    assert!(ping.contains("3 received"), "{ping}");
    let mut server = VethPair::spawn(&mut l.cmd(2, "iperf3", &["-s", "-1", "-B", &l.addr[1]]));
    std::thread::sleep(Duration::from_millis(500));
    let client = run_limited(
        &mut l.cmd(
            0,
            "iperf3",
            &["-c", &l.addr[1], "-n", "2M", "--connect-timeout", "5000"],
        ),
        Duration::from_secs(60),
    );
    let text = String::from_utf8_lossy(&client.stdout);
    assert!(
        client.status.success() && text.contains("iperf Done"),
        "iperf3: {text}"
    );
    server.wait_output(Duration::from_secs(20));
    bridge.signal(libc::SIGINT);
    let (st, err) = bridge.wait_output(Duration::from_secs(20));
    assert!(st.success(), "{err}");
    let sum = Summary::read(&json);
    sum.assert_adds_up();
    assert_eq!(sum.recorded, 6, "{}", sum.text);
    // The transfer's frames crossed and were counted: 2 MiB is more than 32 frames of any size
    // a veth carries. How many frames it takes varies with what the kernel coalesces (829 in
    // one run, below the ~2,200 full-size segments and their acknowledgements).
    assert!(sum.received > 6 + 32, "{}", sum.text);
    for (f, kind) in [("f-w0.pcapng", "8"), ("f-w1.pcapng", "0")] {
        let rows = tshark_fields(&dir.path().join(f), &["icmp.type"]);
        assert_eq!(rows, vec![vec![kind.to_string()]; 3], "{f}");
    }
}
