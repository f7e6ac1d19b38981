//! Live capture on a real kernel: a veth pair between two private network namespaces, `tapflow
//! gen` sending in one, `tapflow capture` recording in the other, and tshark, capinfos and tcpdump
//! as oracles for what was written. Needs root; fails (never skips) without it.

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::time::Duration;

use common::*;

/// Starts `tapflow capture -i IF_B -q ARGS` in namespace B and waits until its `sockets` packet
/// sockets are bound.
fn start_capture(p: &VethPair, args: &[&str], sockets: usize) -> ChildGuard {
    let mut a = vec!["capture", "-i", &p.if_b, "-q"];
    a.extend_from_slice(args);
    let mut g = VethPair::spawn(&mut p.tapflow_b(&a));
    wait_capturing(&mut g, sockets);
    g
}

/// Stops a capture with `sig` and returns its exit status and stderr.
fn stop(g: &mut ChildGuard, sig: i32) -> (std::process::ExitStatus, String) {
    g.signal(sig);
    g.wait_output(Duration::from_secs(20))
}

/// Captures on `p` with `args` plus `-w OUT --summary-json` while `tapflow gen GEN` sends `k`
/// frames, stops with SIGINT, and returns the summary (checked to add up) and stderr.
fn capture_while_sending(
    p: &VethPair,
    dir: &Path,
    out: &Path,
    args: &[&str],
    sockets: usize,
    gen_args: &[&str],
    k: u64,
) -> (Summary, String) {
    let json = dir.join("sum.json");
    let (out, json_s) = (s(out), s(&json));
    let mut all = args.to_vec();
    all.extend(["-w", &out, "--summary-json", &json_s]);
    let mut cap = start_capture(p, &all, sockets);
    p.send(gen_args, dir, k);
    std::thread::sleep(Duration::from_millis(700));
    let (status, err) = stop(&mut cap, libc::SIGINT);
    assert!(status.success(), "capture exited with {status}: {err}");
    let sum = Summary::read(&json);
    sum.assert_adds_up();
    (sum, err)
}

fn s(p: &Path) -> String {
    p.to_string_lossy().into_owned()
}

fn names(dir: &Path) -> BTreeSet<String> {
    std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect()
}

fn file_names(files: &[String]) -> BTreeSet<String> {
    files
        .iter()
        .map(|f| {
            Path::new(f)
                .file_name()
                .unwrap()
                .to_string_lossy()
                .into_owned()
        })
        .collect()
}

/// The hex lines of `tshark -x` for the first packet.
fn first_packet_hex(file: &Path) -> Vec<String> {
    let out = run_ok(
        std::process::Command::new("tshark")
            .args(["-n", "-c", "1", "-x", "-r"])
            .arg(file),
    );
    out.lines()
        .filter(|l| {
            l.len() > 6 && l[..4].chars().all(|c| c.is_ascii_hexdigit()) && &l[4..6] == "  "
        })
        .map(|l| l.split("  ").take(2).collect::<Vec<_>>().join("  "))
        .collect()
}

/// Test 1: K frames sent → exactly K recorded, header bytes identical to a tcpdump capture of the
/// same frames, lengths, addresses and flows as sent.
#[test]
fn k_frames_sent_are_k_recorded_with_the_sent_bytes() {
    const K: u64 = 20_000;
    let p = VethPair::new("k");
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("out.pcapng");
    let json = dir.path().join("sum.json");
    let reference = dir.path().join("tcpdump.pcap");
    let mut cap = start_capture(
        &p,
        &[
            "-s",
            "96",
            "-w",
            &s(&out),
            "--summary-json",
            &s(&json),
            "-f",
            "udp",
        ],
        1,
    );
    let tcpdump = PathBuf::from("tcpdump");
    let mut td = VethPair::spawn(&mut VethPair::in_ns(
        &p.ns_b,
        &tcpdump,
        &[
            "-i",
            &p.if_b,
            "-n",
            "-Z",
            "root",
            "-s",
            "96",
            "-B",
            "65536",
            "-w",
            &s(&reference),
            "udp",
        ],
    ));
    wait_capturing(&mut td, 1);
    p.send(
        &[
            "--count",
            &K.to_string(),
            "--flows",
            "16",
            "--size",
            "200",
            "--rate",
            "200000",
        ],
        dir.path(),
        K,
    );
    std::thread::sleep(Duration::from_millis(500));
    let (status, err) = stop(&mut cap, libc::SIGINT);
    let (td_status, td_err) = stop(&mut td, libc::SIGINT);
    assert!(status.success(), "capture exited with {status}: {err}");
    assert!(
        td_status.success(),
        "tcpdump exited with {td_status}: {td_err}"
    );

    let sum = Summary::read(&json);
    sum.assert_adds_up();
    sum.assert_matches_exit_line(&err);
    assert_eq!(sum.recorded, K, "{}", sum.text);
    assert_eq!(sum.dropped_kernel + sum.dropped_ours, 0, "{}", sum.text);
    assert_eq!(
        file_names(&sum.files),
        BTreeSet::from(["out.pcapng".to_string()]),
        "{}",
        sum.text
    );
    assert!(
        !dir.path().join("out.pcapng.part").exists(),
        ".part left behind"
    );
    assert_eq!(capinfos_count(&out), K);
    let info = capinfos(&out);
    assert!(
        info.contains("Capture length = 96"),
        "IDB snaplen is not 96: {info}"
    );
    assert!(
        info.contains("nanoseconds (9)"),
        "IDB if_tsresol is not 9: {info}"
    );
    assert!(
        info.contains("Filter string = udp"),
        "IDB has no if_filter 'udp': {info}"
    );

    // What tshark sees in our file.
    let rows = tshark_fields(
        &out,
        &[
            "frame.len",
            "frame.cap_len",
            "ip.src",
            "ip.dst",
            "udp.srcport",
            "udp.dstport",
        ],
    );
    assert_eq!(rows.len() as u64, K);
    let mut per_port: BTreeMap<String, u64> = BTreeMap::new();
    for r in &rows {
        assert_eq!(
            (&r[0][..], &r[1][..], &r[2][..], &r[3][..], &r[5][..]),
            ("200", "96", "198.18.0.1", "198.18.0.2", "9"),
            "row {r:?}"
        );
        *per_port.entry(r[4].clone()).or_default() += 1;
    }
    assert_eq!(per_port.len(), 16, "source ports {per_port:?}");
    assert!(
        per_port.values().all(|&n| n == K / 16),
        "packets per flow {per_port:?}"
    );

    // The oracle: tcpdump captured the same frames in the same namespace.
    assert_eq!(
        first_packet_hex(&out),
        first_packet_hex(&reference),
        "first frame differs from tcpdump's"
    );
    assert!(!first_packet_hex(&out).is_empty());
    let ours = read_capture(&out);
    let theirs = read_capture(&reference);
    assert!(
        ours.damage.is_none() && theirs.damage.is_none(),
        "{:?} {:?}",
        ours.damage,
        theirs.damage
    );
    assert!(
        theirs.packets.len() as u64 >= K / 2,
        "tcpdump got only {} frames: oracle too weak",
        theirs.packets.len()
    );
    let mut count: BTreeMap<&[u8], i64> = BTreeMap::new();
    for q in &ours.packets {
        *count.entry(&q.data).or_default() += 1;
    }
    for q in &theirs.packets {
        let c = count.entry(&q.data).or_default();
        *c -= 1;
        assert!(
            *c >= 0,
            "tcpdump saw a frame we did not record: {:02x?}",
            q.data
        );
    }
    if theirs.packets.len() as u64 == K {
        let a: Vec<_> = ours.packets.iter().map(|q| (&q.data, q.len)).collect();
        let b: Vec<_> = theirs.packets.iter().map(|q| (&q.data, q.len)).collect();
        assert!(a == b, "same frames as tcpdump but in another order");
    }
}

/// Test 2: two workers in one fanout group: each file's timestamps never go back, every frame
/// is in exactly one file, every flow in only one.
#[test]
fn timestamps_are_monotone_per_worker_and_flows_stay_on_one_worker() {
    const K: u64 = 20_000;
    let p = VethPair::new("thr");
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("out.pcapng");
    let (sum, _) = capture_while_sending(
        &p,
        dir.path(),
        &out,
        &["--threads", "2", "-s", "96", "-f", "udp"],
        2,
        &[
            "--count",
            &K.to_string(),
            "--flows",
            "16",
            "--size",
            "200",
            "--rate",
            "200000",
        ],
        K,
    );
    assert_eq!(sum.recorded, K, "{}", sum.text);
    let want: BTreeSet<String> = ["out-w0.pcapng", "out-w1.pcapng"].map(String::from).into();
    assert_eq!(file_names(&sum.files), want, "{}", sum.text);
    assert_eq!(
        names(dir.path()),
        want.iter()
            .cloned()
            .chain(["gen.json".into(), "sum.json".into()])
            .collect()
    );

    let mut total = 0u64;
    let mut ports: Vec<BTreeSet<String>> = Vec::new();
    for w in ["out-w0.pcapng", "out-w1.pcapng"] {
        let rows = tshark_fields(&dir.path().join(w), &["frame.time_epoch", "udp.srcport"]);
        assert!(
            !rows.is_empty(),
            "{w} is empty: the fanout did not spread 16 flows"
        );
        let mut last = i128::MIN;
        for (i, r) in rows.iter().enumerate() {
            let t = epoch_ns(&r[0]).unwrap();
            assert!(
                t >= last,
                "{w}: frame {} at {} ns is earlier than the one before ({last})",
                i + 1,
                t
            );
            last = t;
        }
        total += rows.len() as u64;
        ports.push(rows.iter().map(|r| r[1].clone()).collect());
    }
    assert_eq!(total, K);
    let both: Vec<_> = ports[0].intersection(&ports[1]).collect();
    assert!(
        both.is_empty(),
        "flows split across workers: source ports {both:?}"
    );
    assert_eq!(ports[0].len() + ports[1].len(), 16);
}

/// Test 3: a ring made too small on purpose: the drops are reported, add up, and are in the
/// file (epb_dropcount, and the closing ISB's isb_osdrop).
#[test]
fn drops_in_a_tiny_ring_are_reported_exactly() {
    const K: u64 = 200_000;
    let p = VethPair::new("drp");
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("out.pcapng");
    let (sum, err) = capture_while_sending(
        &p,
        dir.path(),
        &out,
        &["--block-size", "4K", "--block-count", "2", "-f", "udp"],
        1,
        &["--count", &K.to_string(), "--size", "60"],
        K,
    );
    sum.assert_matches_exit_line(&err);
    let drops = sum.dropped_kernel + sum.dropped_ours;
    assert!(
        sum.dropped_kernel > 0,
        "an 8 KiB ring at top speed dropped nothing? {}",
        sum.text
    );
    assert!(sum.recorded > 0, "{}", sum.text);
    assert!(
        sum.received <= K,
        "received more than was sent: {}",
        sum.text
    );
    assert_eq!(capinfos_count(&out), sum.recorded);

    // tshark's view of the drop counts in the file.
    let rows = tshark_fields(&out, &["frame.drop_count"]);
    assert_eq!(rows.len() as u64, sum.recorded);
    let in_epbs: u64 = rows
        .iter()
        .filter(|r| !r[0].is_empty())
        .map(|r| r[0].parse::<u64>().unwrap())
        .sum();
    assert!(
        in_epbs > 0,
        "no epb_dropcount anywhere though {drops} were dropped"
    );
    // Drops after the last packet cannot be placed before a packet; the closing ISB has them all.
    assert!(
        in_epbs <= drops,
        "epb_dropcount sums to {in_epbs}, more than the {drops} dropped"
    );

    let f = read_capture(&out);
    assert!(f.damage.is_none(), "{:?}", f.damage);
    let mine: u64 = f.packets.iter().filter_map(|q| q.dropcount).sum();
    assert_eq!(
        mine, in_epbs,
        "tshark and a plain reader disagree on epb_dropcount"
    );
    let last = f
        .isbs
        .last()
        .expect("no Interface Statistics Block in the file");
    assert_eq!(
        last.get(ISB_OSDROP),
        Some(drops),
        "closing ISB osdrop vs {}",
        sum.text
    );
    assert_eq!(
        last.get(ISB_USRDELIV),
        Some(sum.recorded),
        "closing ISB usrdeliv vs {}",
        sum.text
    );
    assert_eq!(
        last.get(ISB_FILTERACCEPT),
        Some(sum.received),
        "closing ISB filteraccept vs {}",
        sum.text
    );
    // The interface's own count (sysfs rx_packets) saw every frame, those the ring lost too.
    let ifrecv = last.get(ISB_IFRECV).expect("closing ISB has isb_ifrecv");
    assert!(
        ifrecv >= sum.received,
        "closing ISB ifrecv {ifrecv} < received, {}",
        sum.text
    );
}

/// Test 4: SIGTERM in the middle of a capture: the file is finished, renamed and complete.
#[test]
fn sigterm_mid_capture_finishes_the_file() {
    let p = VethPair::new("trm");
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("out.pcapng");
    let json = dir.path().join("sum.json");
    let mut cap = start_capture(
        &p,
        &[
            "-s",
            "96",
            "-w",
            &s(&out),
            "--summary-json",
            &s(&json),
            "-f",
            "udp",
        ],
        1,
    );
    let gen_json = dir.path().join("gen.json");
    let mut generator = p.spawn_gen(&[
        "--count",
        "100000",
        "--rate",
        "100000",
        "--size",
        "200",
        "--summary-json",
        &s(&gen_json),
    ]);
    std::thread::sleep(Duration::from_millis(400));
    assert!(
        generator.try_wait().is_none(),
        "gen finished too early for a mid-capture stop"
    );
    assert!(
        dir.path().join("out.pcapng.part").exists(),
        "no .part while capturing: {:?}",
        names(dir.path())
    );
    let (status, err) = stop(&mut cap, libc::SIGTERM);
    let (gstatus, gerr) = generator.wait_output(Duration::from_secs(30));
    assert!(gstatus.success(), "gen: {gerr}");
    assert!(
        status.success(),
        "capture stopped by SIGTERM exited with {status}: {err}"
    );

    let sum = Summary::read(&json);
    sum.assert_adds_up();
    sum.assert_matches_exit_line(&err);
    assert!(
        out.exists(),
        "no {} after SIGTERM: {:?}",
        out.display(),
        names(dir.path())
    );
    assert!(
        !dir.path().join("out.pcapng.part").exists(),
        ".part left after SIGTERM"
    );
    assert!(
        sum.recorded > 0 && sum.recorded < 100_000,
        "not stopped mid-capture? {}",
        sum.text
    );
    let rows = tshark_fields(&out, &["frame.len"]);
    assert_eq!(
        rows.len() as u64,
        sum.recorded,
        "tshark count vs {}",
        sum.text
    );
    let f = read_capture(&out);
    assert!(f.damage.is_none(), "{:?}", f.damage);
    assert_eq!(
        f.isbs.last().and_then(|i| i.get(ISB_USRDELIV)),
        Some(sum.recorded),
        "no closing ISB with isb_usrdeliv = recorded"
    );
}

/// Test 5: rotation by size: numbered files, none left as .part, every packet in exactly one.
#[test]
fn rotation_by_size_writes_numbered_complete_files() {
    const K: u64 = 6000;
    let p = VethPair::new("rot");
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("out.pcapng");
    let (sum, _) = capture_while_sending(
        &p,
        dir.path(),
        &out,
        &["-s", "96", "--rotate-size", "64K", "-f", "udp"],
        1,
        &[
            "--count",
            &K.to_string(),
            "--size",
            "200",
            "--rate",
            "100000",
        ],
        K,
    );
    assert_eq!(sum.recorded, K, "{}", sum.text);

    let files: Vec<String> = names(dir.path())
        .into_iter()
        .filter(|n| n.starts_with("out"))
        .collect();
    assert!(
        files.iter().all(|n| !n.ends_with(".part")),
        ".part left: {files:?}"
    );
    assert!(
        files.len() >= 3,
        "{K} frames of ~140 B at 64K a file made only {files:?}"
    );
    let want: Vec<String> = (0..files.len())
        .map(|i| format!("out-{i:05}.pcapng"))
        .collect();
    assert_eq!(
        files, want,
        "rotated files are not out-00000.pcapng, out-00001.pcapng, ..."
    );
    assert_eq!(
        file_names(&sum.files),
        want.iter().cloned().collect(),
        "{}",
        sum.text
    );

    let mut total = 0;
    let mut last_ts = i128::MIN;
    let mut sizes = Vec::new();
    for n in &files {
        let path = dir.path().join(n);
        let c = capinfos_count(&path);
        total += c;
        let rows = tshark_fields(&path, &["frame.time_epoch"]);
        assert_eq!(rows.len() as u64, c);
        if let Some(first) = rows.first() {
            let t = epoch_ns(&first[0]).unwrap();
            assert!(t >= last_ts, "{n} starts before the previous file ends");
            last_ts = epoch_ns(&rows.last().unwrap()[0]).unwrap();
        }
        sizes.push(std::fs::metadata(&path).unwrap().len());
    }
    // Every file but the last is about the limit: within one ring block's worth of records.
    let (last, full) = sizes.split_last().unwrap();
    assert!(
        full.iter().all(|b| (56 << 10..=72 << 10).contains(b)) && *last <= 72 << 10,
        "file sizes {sizes:?} with --rotate-size 64K (65536)"
    );
    assert_eq!(total, sum.recorded);
}

/// Test 6: `--format pcap` writes nanosecond classic pcap.
#[test]
fn pcap_format_is_nanosecond_pcap() {
    const K: u64 = 2000;
    let p = VethPair::new("fmt");
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("out.pcap");
    let (sum, _) = capture_while_sending(
        &p,
        dir.path(),
        &out,
        &["-s", "96", "--format", "pcap", "-f", "udp"],
        1,
        &[
            "--count",
            &K.to_string(),
            "--size",
            "200",
            "--rate",
            "100000",
        ],
        K,
    );
    assert_eq!(sum.recorded, K, "{}", sum.text);
    let info = capinfos(&out);
    assert!(
        info.contains("Wireshark/tcpdump/... - nanosecond pcap"),
        "capinfos: {info}"
    );
    assert_eq!(capinfos_count(&out), K);
    let bytes = std::fs::read(&out).unwrap();
    assert_eq!(&bytes[..4], &0xa1b2_3c4du32.to_le_bytes(), "magic");
    assert_eq!(
        u32::from_le_bytes(bytes[16..20].try_into().unwrap()),
        96,
        "snaplen in the file header"
    );
    let rows = tshark_fields(&out, &["frame.len", "frame.cap_len"]);
    assert_eq!(rows.len() as u64, K);
    assert!(
        rows.iter().all(|r| r[0] == "200" && r[1] == "96"),
        "{:?}",
        &rows[..3]
    );
}

/// The voluntary context switches of the capture's worker thread so far.
fn worker_wakeups(pid: i32) -> u64 {
    for t in std::fs::read_dir(format!("/proc/{pid}/task")).unwrap() {
        let t = t.unwrap().path();
        if std::fs::read_to_string(t.join("comm")).unwrap().trim() == "tapflow-w0" {
            let status = std::fs::read_to_string(t.join("status")).unwrap();
            let line = status
                .lines()
                .find(|l| l.starts_with("voluntary_ctxt_switches:"))
                .unwrap();
            return line.split_whitespace().nth(1).unwrap().parse().unwrap();
        }
    }
    panic!("no worker thread in /proc/{pid}/task");
}

/// On a quiet link the worker sleeps until a timer is due (the kernel's counters every half
/// second, an ISB every second), not in short polls, and the timers still run while it sleeps.
#[test]
fn an_idle_capture_sleeps_between_its_timers() {
    let p = VethPair::new("idl");
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("out.pcapng");
    let json = dir.path().join("sum.json");
    let mut cap = start_capture(
        &p,
        &["-w", &s(&out), "--summary-json", &s(&json), "-f", "udp"],
        1,
    );
    // A few packets open the file; then the link stays quiet.
    p.send(&["--count", "10", "--size", "100"], dir.path(), 10);
    std::thread::sleep(Duration::from_millis(300));
    let before = worker_wakeups(cap.pid());
    std::thread::sleep(Duration::from_secs(3));
    let woke = worker_wakeups(cap.pid()) - before;
    let (status, err) = stop(&mut cap, libc::SIGINT);
    assert!(status.success(), "capture exited with {status}: {err}");
    // Three seconds: about six wake-ups for the counters and three for ISBs (a worker that
    // polled every 100 ms woke 30 times).
    assert!(woke <= 15, "the idle worker woke {woke} times in 3 s");
    let sum = Summary::read(&json);
    sum.assert_adds_up();
    assert_eq!(sum.recorded, 10, "{}", sum.text);
    let f = read_capture(&out);
    assert!(f.damage.is_none(), "{:?}", f.damage);
    // One a second while idle, and the closing one.
    assert!(f.isbs.len() >= 4, "{} ISBs in {} s idle", f.isbs.len(), 3);
}

/// Live, the plain lane (one pcapng file and nothing else) writes the same packet blocks as
/// the general path, forced in a second capture of the same link by a flow meter beside the
/// file: the same lengths and bytes and the same direction and checksum flags (each socket
/// takes its own arrival time).
#[test]
fn live_the_plain_lane_writes_the_packet_blocks_the_general_path_writes() {
    const K: u64 = 5000;
    let p = VethPair::new("pln");
    let dir = tempfile::tempdir().unwrap();
    let (plain, general) = (
        dir.path().join("plain.pcapng"),
        dir.path().join("general.pcapng"),
    );
    let mut a = start_capture(&p, &["-w", &s(&plain), "-f", "udp"], 1);
    let mut b = start_capture(
        &p,
        &[
            "-w",
            &s(&general),
            "-f",
            "udp",
            "--csv",
            "/dev/null",
            "--control",
            "none",
        ],
        1,
    );
    p.send(
        &[
            "--count",
            &K.to_string(),
            "--size",
            "300",
            "--rate",
            "100000",
            "--flows",
            "50",
        ],
        dir.path(),
        K,
    );
    std::thread::sleep(Duration::from_millis(300));
    for g in [&mut a, &mut b] {
        let (status, err) = stop(g, libc::SIGINT);
        assert!(status.success(), "capture exited with {status}: {err}");
    }
    let (mut x, mut y) = (epbs(&plain), epbs(&general));
    assert_eq!((x.len() as u64, y.len() as u64), (K, K), "packet blocks");
    // Each socket takes its own arrival time: compare the times apart, then the rest.
    for (i, (m, n)) in x.iter_mut().zip(&mut y).enumerate() {
        let ts = |b: &mut Vec<u8>| {
            let t = u64::from(u32::from_le_bytes(b[12..16].try_into().unwrap())) << 32
                | u64::from(u32::from_le_bytes(b[16..20].try_into().unwrap()));
            b[12..20].fill(0);
            t
        };
        let (tm, tn) = (ts(m), ts(n));
        assert!(
            tm.abs_diff(tn) < 1_000_000_000,
            "packet {i}: times {tm} and {tn}"
        );
        assert!(
            m == n,
            "packet block {i} differs:\n plain   {m:02x?}\n general {n:02x?}"
        );
    }
    // The flags word is there: direction "inbound" at least.
    assert!(
        x.iter().all(|b| b.len() > 32 + 64),
        "EPBs without epb_flags"
    );
}
