//! `--source xdp` on a real kernel: a veth pair between two namespaces (native XDP on veth,
//! copy-mode AF_XDP sockets), `tapflow gen` sending in one, the capture in the other, the
//! AF_PACKET source and tshark as oracles. Needs root; fails (never skips) without it.

mod common;

use std::collections::BTreeMap;
use std::path::Path;
use std::time::{Duration, Instant};

use common::*;

fn s(p: &Path) -> String {
    p.to_string_lossy().into_owned()
}

/// `ip -d link show` of B's interface.
fn link_b(p: &VethPair) -> String {
    run_ok(
        std::process::Command::new("ip")
            .args(["-n", &p.ns_b, "-d", "link", "show", "dev", &p.if_b]),
    )
}

/// Whether an XDP program is attached to B's interface.
fn has_xdp(p: &VethPair) -> bool {
    link_b(p).contains("prog/xdp")
}

/// Starts `tapflow ARGS` in B and waits until its XDP program is attached (the last step of
/// its set-up).
fn start_xdp(p: &VethPair, args: &[&str]) -> ChildGuard {
    let mut g = VethPair::spawn(&mut p.tapflow_b(args));
    g.wait_until(Duration::from_secs(15), "attached its XDP program", |_| {
        has_xdp(p)
    });
    std::thread::sleep(Duration::from_millis(200));
    g
}

/// Waits until nothing is attached to B's interface; fails past 5 s.
fn assert_detached(p: &VethPair, after: &str) {
    let start = Instant::now();
    while has_xdp(p) {
        assert!(
            start.elapsed() < Duration::from_secs(5),
            "an XDP program is still attached {after}: {}",
            link_b(p)
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Stops a capture with SIGINT; it must exit cleanly. Returns stderr.
fn stop_ok(g: &mut ChildGuard) -> String {
    g.signal(libc::SIGINT);
    let (status, err) = g.wait_output(Duration::from_secs(20));
    assert!(status.success(), "capture exited with {status}: {err}");
    err
}

const GEN: [&str; 8] = [
    "--flows", "8", "--size", "200", "--rate", "50000", "--count", "4000",
];

/// Records (bytes, original length) as a multiset.
fn records(file: &Path) -> BTreeMap<(Vec<u8>, u32), u64> {
    let c = read_capture(file);
    assert!(c.damage.is_none(), "{}: {:?}", file.display(), c.damage);
    let mut m = BTreeMap::new();
    for q in c.packets {
        *m.entry((q.data, q.len)).or_default() += 1;
    }
    m
}

/// The same frames captured by the XDP source and by the AF_PACKET source give the same
/// records (times aside); tshark reads the XDP file; the summary, the file's statistics block
/// and the source's counters agree; and the program is gone after the run.
#[test]
fn xdp_records_what_af_packet_records_and_accounts_for_every_frame() {
    let p = VethPair::new("xdp");
    p.wait_link_up();
    let dir = tempfile::tempdir().unwrap();
    let (xo, xj) = (dir.path().join("xdp.pcapng"), dir.path().join("xdp.json"));
    let mut g = start_xdp(
        &p,
        &[
            "capture",
            "-i",
            &p.if_b,
            "-q",
            "--source",
            "xdp",
            "-s",
            "96",
            "-w",
            &s(&xo),
            "--summary-json",
            &s(&xj),
            "--control",
            "none",
        ],
    );
    assert!(link_b(&p).contains("xdp"), "{}", link_b(&p));
    p.send(&GEN, dir.path(), 4000);
    std::thread::sleep(Duration::from_millis(500));
    let err = stop_ok(&mut g);
    assert_detached(&p, "after SIGINT");
    assert!(
        err.contains("XDP native mode") && err.contains("frames taken from the stack"),
        "no mode in the start line: {err}"
    );
    let sum = Summary::read(&xj);
    sum.assert_adds_up();
    sum.assert_matches_exit_line(&err);
    assert_eq!((sum.received, sum.recorded), (4000, 4000), "{}", sum.text);
    assert_eq!(json_u64(&sum.text, "source.xdp_seen"), 4000, "{}", sum.text);
    assert_eq!(
        json_u64(&sum.text, "source.xdp_redirected"),
        4000,
        "{}",
        sum.text
    );
    let cap = read_capture(&xo);
    let isb = cap.isbs.last().expect("a statistics block");
    assert_eq!(isb.get(ISB_USRDELIV), Some(4000), "{isb:?}");
    assert_eq!(isb.get(ISB_OSDROP), Some(0), "{isb:?}");

    let rows = tshark_fields(
        &xo,
        &["frame.len", "frame.cap_len", "ip.src", "udp.dstport"],
    );
    assert_eq!(rows.len(), 4000);
    assert!(
        rows.iter()
            .all(|r| r[..] == ["200", "96", "198.18.0.1", "9"]),
        "{:?}",
        rows.iter()
            .find(|r| r[..] != ["200", "96", "198.18.0.1", "9"])
    );
    // Times are the kernel's, in order, and close to now.
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos();
    assert!(cap.packets.windows(2).all(|w| w[0].ts_ns <= w[1].ts_ns));
    assert!(
        cap.packets
            .iter()
            .all(|q| q.ts_ns + 120_000_000_000 > now && q.ts_ns < now)
    );

    // The same frames again through the AF_PACKET source.
    let (po, pj) = (dir.path().join("pkt.pcapng"), dir.path().join("pkt.json"));
    let mut g = VethPair::spawn(&mut p.tapflow_b(&[
        "capture",
        "-i",
        &p.if_b,
        "-q",
        "-s",
        "96",
        "-w",
        &s(&po),
        "--summary-json",
        &s(&pj),
        "--control",
        "none",
    ]));
    wait_capturing(&mut g, 1);
    p.send(&GEN, dir.path(), 4000);
    std::thread::sleep(Duration::from_millis(500));
    stop_ok(&mut g);
    assert_eq!(Summary::read(&pj).recorded, 4000);
    assert!(
        records(&xo) == records(&po),
        "the two sources recorded different frames"
    );
}

/// `flows --source xdp` meters the same flows, packets and bytes as were sent.
#[test]
fn flows_from_xdp_count_what_was_sent() {
    let p = VethPair::new("xdf");
    p.wait_link_up();
    let dir = tempfile::tempdir().unwrap();
    let (fj, sj) = (dir.path().join("flows.json"), dir.path().join("sum.json"));
    let mut g = start_xdp(
        &p,
        &[
            "flows",
            "-i",
            &p.if_b,
            "-q",
            "--source",
            "xdp",
            "--json",
            &s(&fj),
            "--summary-json",
            &s(&sj),
            "--control",
            "none",
        ],
    );
    p.send(&GEN, dir.path(), 4000);
    std::thread::sleep(Duration::from_millis(500));
    stop_ok(&mut g);
    Summary::read(&sj).assert_adds_up();
    let text = std::fs::read_to_string(&fj).unwrap();
    let (mut flows, mut packets, mut bytes) = (0, 0, 0);
    for line in text.lines() {
        flows += 1;
        packets += json_u64(line, "packets");
        bytes += json_u64(line, "octets");
    }
    assert_eq!((flows, packets, bytes), (8, 4000, 4000 * 186), "{text}");
}

/// A stalled reader (SIGSTOP while frames arrive): the kernel's drops are counted exactly
/// (`received = recorded + dropped_kernel`), named by the socket's statistics or the ring
/// buffer's counter, and placed before the first frame recorded after the stall.
#[test]
fn a_stalled_reader_loses_frames_and_counts_every_one() {
    let p = VethPair::new("xdl");
    p.wait_link_up();
    let dir = tempfile::tempdir().unwrap();
    for pass in [false, true] {
        let (o, j) = (
            dir.path().join(format!("{pass}.pcapng")),
            dir.path().join(format!("{pass}.json")),
        );
        let mut args = vec![
            "capture",
            "-i",
            &p.if_b,
            "-q",
            "--source",
            "xdp",
            "--xdp-frames",
            "64",
            "-s",
            "64",
            "-w",
            o.to_str().unwrap(),
            "--summary-json",
            j.to_str().unwrap(),
            "--control",
            "none",
        ];
        if pass {
            args.push("--pass");
        }
        let mut g = start_xdp(&p, &args);
        g.signal(libc::SIGSTOP);
        p.send(
            &["--count", "5000", "--size", "64", "--rate", "50000"],
            dir.path(),
            5000,
        );
        g.signal(libc::SIGCONT);
        std::thread::sleep(Duration::from_millis(300));
        p.send(
            &["--count", "1000", "--size", "64", "--rate", "2000"],
            dir.path(),
            1000,
        );
        std::thread::sleep(Duration::from_millis(500));
        stop_ok(&mut g);
        let sum = Summary::read(&j);
        sum.assert_adds_up();
        assert_eq!(sum.received, 6000, "{}", sum.text);
        assert!(
            sum.dropped_kernel > 0 && sum.recorded >= 500,
            "{}",
            sum.text
        );
        let named = if pass {
            json_u64(&sum.text, "source.xdp_ring_full")
        } else {
            json_u64(&sum.text, "source.xsk_rx_dropped")
                + json_u64(&sum.text, "source.xsk_rx_ring_full")
                + json_u64(&sum.text, "source.xdp_no_socket")
        };
        assert_eq!(named, sum.dropped_kernel, "{}", sum.text);
        // The stall filled the RX ring (or the ring buffer): the first read after it saw it so.
        let peak = json_f64(&sum.text, "ring_fill_peak_ratio");
        assert!(peak > 0.9 && peak <= 1.0, "pass {pass}: {}", sum.text);
        let cap = read_capture(&o);
        assert_eq!(cap.packets.len() as u64, sum.recorded);
        let placed: Vec<_> = cap
            .packets
            .iter()
            .enumerate()
            .filter(|(_, q)| q.dropcount.unwrap_or(0) > 0)
            .collect();
        // The stall's loss comes right after the frames that fit before it: together they
        // are the frames sent during the stall.
        let (at, first) = placed.first().expect("the loss is placed in the file");
        assert_eq!(
            *at as u64 + first.dropcount.unwrap(),
            5000,
            "pass {pass}: {placed:?}"
        );
        let total: u64 = placed.iter().map(|(_, q)| q.dropcount.unwrap()).sum();
        assert!(total <= sum.dropped_kernel, "{total} placed: {}", sum.text);
        assert_eq!(
            cap.isbs.last().unwrap().get(ISB_OSDROP),
            Some(sum.dropped_kernel)
        );
    }
}

/// `-f` and the rules judge the frames the program hands over, and count what they refuse.
#[test]
fn filters_and_rules_keep_what_they_match() {
    let p = VethPair::new("xdr");
    p.wait_link_up();
    let dir = tempfile::tempdir().unwrap();
    let rules = write_file(dir.path(), "r.rules", b"two proto udp sport 1024-1025\n");
    let (o, j) = (dir.path().join("o.pcapng"), dir.path().join("o.json"));
    let mut g = start_xdp(
        &p,
        &[
            "capture",
            "-i",
            &p.if_b,
            "-q",
            "--source",
            "xdp",
            "-f",
            "udp and src port 1024 or src port 1026",
            "--rules",
            &s(&rules),
            "-w",
            &s(&o),
            "--summary-json",
            &s(&j),
            "--control",
            "none",
        ],
    );
    p.send(&GEN, dir.path(), 4000);
    std::thread::sleep(Duration::from_millis(500));
    stop_ok(&mut g);
    let sum = Summary::read(&j);
    sum.assert_adds_up();
    // Eight flows from ports 1024..1031: the filter keeps 1024 and 1026, the rule 1024-1025.
    assert_eq!(
        (sum.received, sum.recorded, sum.filtered),
        (4000, 500, 3500),
        "{}",
        sum.text
    );
    let rows = tshark_fields(&o, &["udp.srcport"]);
    assert!(rows.iter().all(|r| r[0] == "1024"), "{rows:?}");
}

/// SIGTERM ends a capture cleanly and detaches the program; so does SIGKILL (the kernel
/// closes the link with the process); a second capture on an interface that has a program
/// fails at start with a clear error (its queue is taken; an XDP program of another tool is
/// refused as clearly, see the sys crate's tests).
#[test]
fn every_ending_detaches_and_a_second_program_is_refused() {
    let p = VethPair::new("xdk");
    p.wait_link_up();
    let dir = tempfile::tempdir().unwrap();
    let o = dir.path().join("o.pcapng");
    let args = [
        "capture",
        "-i",
        &p.if_b,
        "-q",
        "--source",
        "xdp",
        "-w",
        &s(&o),
        "--control",
        "none",
    ];
    let mut g = start_xdp(&p, &args);
    let second = run_limited(
        &mut p.tapflow_b(&[
            "capture",
            "-i",
            &p.if_b,
            "-q",
            "--source",
            "xdp",
            "--control",
            "none",
        ]),
        Duration::from_secs(30),
    );
    assert_clean_error(
        &second,
        Some(1),
        &["another XDP", "ip link show"],
        "second capture",
    );
    g.signal(libc::SIGTERM);
    let (status, err) = g.wait_output(Duration::from_secs(20));
    assert!(status.success(), "SIGTERM: {status}: {err}");
    assert_detached(&p, "after SIGTERM");
    assert!(o.exists() && !dir.path().join("o.pcapng.part").exists());

    std::fs::remove_file(&o).unwrap();
    let mut g = start_xdp(&p, &args);
    g.signal(libc::SIGKILL);
    g.wait_limited(Duration::from_secs(10));
    assert_detached(&p, "after SIGKILL");
}

/// B's `Udp: NoPorts` count: datagrams the stack received for a port nobody listens on.
fn no_ports(p: &VethPair) -> u64 {
    let text = run_ok(&mut VethPair::in_ns(
        &p.ns_b,
        Path::new("cat"),
        &["/proc/net/snmp"],
    ));
    let mut udp = text.lines().filter(|l| l.starts_with("Udp: "));
    let (names, values) = (udp.next().unwrap(), udp.next().unwrap());
    let at = names
        .split_whitespace()
        .position(|n| n == "NoPorts")
        .unwrap();
    values.split_whitespace().nth(at).unwrap().parse().unwrap()
}

/// Without `--pass` the frames are taken from the stack; with it they reach the stack (its UDP
/// layer counts them) and their copies are recorded all the same.
#[test]
fn pass_leaves_the_frames_to_the_stack() {
    let p = VethPair::new("xdp");
    p.wait_link_up();
    ip(&[
        "-n",
        &p.ns_b,
        "addr",
        "add",
        "198.18.0.2/24",
        "dev",
        &p.if_b,
    ]);
    let link = run_ok(
        std::process::Command::new("ip")
            .args(["-n", &p.ns_b, "-j", "link", "show", "dev", &p.if_b]),
    );
    let mac = json_at(&link, "0.address").as_str().unwrap().to_string();
    let dir = tempfile::tempdir().unwrap();
    for pass in [false, true] {
        let (o, j) = (
            dir.path().join(format!("{pass}.pcapng")),
            dir.path().join(format!("{pass}.json")),
        );
        let mut args = vec![
            "capture",
            "-i",
            &p.if_b,
            "-q",
            "--source",
            "xdp",
            "-s",
            "80",
            "-w",
            o.to_str().unwrap(),
            "--summary-json",
            j.to_str().unwrap(),
            "--control",
            "none",
        ];
        if pass {
            args.push("--pass");
        }
        let mut g = start_xdp(&p, &args);
        let before = no_ports(&p);
        p.send(
            &[
                "--count",
                "1000",
                "--size",
                "300",
                "--rate",
                "20000",
                "--dst-mac",
                &mac,
            ],
            dir.path(),
            1000,
        );
        std::thread::sleep(Duration::from_millis(500));
        let err = stop_ok(&mut g);
        assert_detached(&p, "after SIGINT");
        let reached = no_ports(&p) - before;
        let sum = Summary::read(&j);
        sum.assert_adds_up();
        assert_eq!((sum.received, sum.recorded), (1000, 1000), "{}", sum.text);
        assert_eq!(reached, if pass { 1000 } else { 0 }, "pass {pass}: {err}");
        let rows = tshark_fields(&o, &["frame.len", "frame.cap_len", "ip.dst"]);
        assert_eq!(rows.len(), 1000);
        assert!(
            rows.iter().all(|r| r[..] == ["300", "80", "198.18.0.2"]),
            "{:?}",
            rows[0]
        );
        if pass {
            assert!(err.contains("frames passed on to the stack"), "{err}");
            assert_eq!(
                json_u64(&sum.text, "source.xdp_copied"),
                1000,
                "{}",
                sum.text
            );
        }
    }
}

/// One worker per receive queue: on a two-queue veth, two sockets and two files whose records
/// together are every frame sent, counted per queue.
#[test]
fn each_receive_queue_has_its_worker() {
    let p = VethPair::new("xdq");
    for (ns, ifname) in [(&p.ns_a, &p.if_a), (&p.ns_b, &p.if_b)] {
        run_ok(&mut VethPair::in_ns(
            ns,
            Path::new("ethtool"),
            &["-L", ifname, "rx", "2", "tx", "2"],
        ));
    }
    p.wait_link_up();
    let dir = tempfile::tempdir().unwrap();
    let (o, j) = (dir.path().join("q.pcapng"), dir.path().join("q.json"));
    let mut g = start_xdp(
        &p,
        &[
            "capture",
            "-i",
            &p.if_b,
            "-q",
            "--source",
            "xdp",
            "-w",
            &s(&o),
            "--summary-json",
            &s(&j),
            "--control",
            "none",
        ],
    );
    p.send(&GEN, dir.path(), 4000);
    std::thread::sleep(Duration::from_millis(500));
    let err = stop_ok(&mut g);
    assert!(
        err.contains("2 workers") && err.contains("2 queues"),
        "{err}"
    );
    let sum = Summary::read(&j);
    sum.assert_adds_up();
    assert_eq!(sum.recorded, 4000, "{}", sum.text);
    let files: Vec<_> = ["q-w0.pcapng", "q-w1.pcapng"]
        .map(|f| dir.path().join(f))
        .into();
    let in_files: usize = files.iter().map(|f| read_capture(f).packets.len()).sum();
    assert_eq!(in_files, 4000);
}
