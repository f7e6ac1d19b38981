//! The habits people bring from tcpdump: `-w -` into tshark, `-r -`, `-s 0`, the format from the
//! file name, a filter as trailing words, `-C`/`-G`/`-W` rotation with time-named files, `-D`,
//! a line per packet without any output, and the files a run wrote named at its end. tshark and
//! capinfos are the oracles.

mod common;

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use common::*;

fn s(p: &Path) -> String {
    p.to_string_lossy().into_owned()
}

#[test]
fn whole_packets_stream_on_stdout_into_tshark() {
    let p = VethPair::new("wd");
    p.wait_link_up();
    let dir = tempfile::tempdir().unwrap();
    let mut cap = VethPair::in_ns(
        &p.ns_b,
        &bin(),
        &[
            "capture", "-i", &p.if_b, "-q", "-s", "0", "-c", "20", "-w", "-",
        ],
    );
    let cap = cap
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut cap = ChildGuard::new(cap, "tapflow capture -w -");
    let pipe = cap.child.as_mut().unwrap().stdout.take().unwrap();
    let tshark = Command::new("tshark")
        .args([
            "-l",
            "-r",
            "-",
            "-T",
            "fields",
            "-e",
            "frame.len",
            "-e",
            "frame.cap_len",
        ])
        .stdin(pipe)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("tshark");
    let mut tshark = ChildGuard::new(tshark, "tshark -r -");
    let out = tshark.child.as_mut().unwrap().stdout.take().unwrap();
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for l in BufReader::new(out).lines().map_while(Result::ok) {
            let _ = tx.send(l);
        }
    });
    wait_capturing(&mut cap, 1);
    // The first ten reach tshark while the capture still runs: the stream is not held back
    // until the end.
    p.send(&["-c", "10", "--size", "1400"], dir.path(), 10);
    let mut lines = Vec::new();
    while lines.len() < 10 {
        let l = rx
            .recv_timeout(Duration::from_secs(20))
            .unwrap_or_else(|_| panic!("tshark saw {} of 10 packets while capturing", lines.len()));
        lines.push(l);
    }
    assert!(cap.child.as_mut().unwrap().try_wait().unwrap().is_none());
    p.send(&["-c", "10", "--size", "1400"], dir.path(), 10);
    let (status, err) = cap.wait_output(Duration::from_secs(30));
    assert!(status.success(), "capture: {status}: {err}");
    assert!(err.contains("20 recorded"), "{err}");
    tshark.wait_limited(Duration::from_secs(30));
    lines.extend(rx.try_iter());
    assert_eq!(lines.len(), 20, "{lines:?}");
    // -s 0: whole packets, 1400 bytes each, none cut.
    for l in &lines {
        assert_eq!(l, "1400\t1400", "{lines:?}");
    }
}

#[test]
fn stdout_is_one_stream() {
    let dir = tempfile::tempdir().unwrap();
    let t = s(&built_trace(dir.path(), "t.pcap", 3, 3, 1000));
    for (args, key) in [
        (vec!["flows", "-r", &t, "-w", "-"], "standard output"),
        (
            vec!["capture", "-r", &t, "-w", "-", "--json", "-"],
            "standard output",
        ),
        (
            vec!["capture", "-i", "lo", "--threads", "2", "-w", "-"],
            "one worker",
        ),
    ] {
        let o = run_limited(&mut tapflow(&args), Duration::from_secs(20));
        assert_clean_error(&o, Some(2), &[key], &args.join(" "));
    }
}

#[test]
fn format_follows_the_name_and_stdin_is_read() {
    let dir = tempfile::tempdir().unwrap();
    let t = built_trace(dir.path(), "t.pcap", 10, 5, 1_000_000);
    let kind = |name: &str, extra: &[&str]| {
        let out = dir.path().join(name);
        let mut a = vec![
            "capture",
            "-r",
            t.to_str().unwrap(),
            "-q",
            "-w",
            out.to_str().unwrap(),
        ];
        a.extend_from_slice(extra);
        run_ok(&mut tapflow(&a));
        assert_eq!(capinfos_count(&out), 50);
        let info = capinfos(&out);
        info.lines()
            .find(|l| l.starts_with("File type"))
            .unwrap()
            .to_string()
    };
    assert!(
        kind("a.pcap", &[]).contains("- nanosecond pcap"),
        "classic pcap for .pcap"
    );
    assert!(kind("a.pcapng", &[]).contains("pcapng"));
    assert!(kind("a.out", &[]).contains("pcapng"));
    assert!(kind("b.pcap", &["--format", "pcapng"]).contains("pcapng"));
    // -r - from a pipe (read to its end) and from a file the shell opened.
    let out = dir.path().join("stdin.pcapng");
    let mut cat = Command::new("cat")
        .arg(&t)
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let o = tapflow(["capture", "-r", "-", "-q", "-w", out.to_str().unwrap()])
        .stdin(cat.stdout.take().unwrap())
        .output()
        .unwrap();
    assert!(cat.wait().unwrap().success());
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert_eq!(capinfos_count(&out), 50);
    let o = tapflow(["capture", "-r", "-", "-c", "3"])
        .stdin(std::fs::File::open(&t).unwrap())
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert_eq!(String::from_utf8_lossy(&o.stdout).lines().count(), 3);
}

#[test]
fn trailing_words_are_the_filter() {
    let dir = tempfile::tempdir().unwrap();
    let t = s(&built_trace(dir.path(), "t.pcap", 10, 5, 1_000_000));
    let recorded = |extra: &[&str]| {
        let sum = dir.path().join("s.json");
        let _ = std::fs::remove_file(&sum);
        let mut a = vec!["capture", "-r", &t, "-q", "-w", "/dev/null"];
        a.extend(["--summary-json", sum.to_str().unwrap()]);
        a.extend_from_slice(extra);
        run_ok(&mut tapflow(&a));
        json_u64(&std::fs::read_to_string(&sum).unwrap(), "recorded")
    };
    let words = recorded(&["greater", "800"]);
    assert_eq!(words, recorded(&["-f", "greater 800"]));
    assert!(words > 0 && words < 50, "{words}");
    let o = run_limited(
        &mut tapflow(["capture", "-r", &t, "-f", "udp", "tcp"]),
        Duration::from_secs(10),
    );
    assert_clean_error(
        &o,
        Some(2),
        &["--filter", "expression"],
        "both -f and words",
    );
}

#[test]
fn without_output_each_packet_is_a_line() {
    let dir = tempfile::tempdir().unwrap();
    let t = built_trace(dir.path(), "t.pcap", 4, 3, 1_000_000);
    let out = run_ok(&mut tapflow(["capture", "-r", t.to_str().unwrap(), "-q"]));
    let lines: Vec<&str> = out.lines().collect();
    let want = tshark_fields(
        &t,
        &[
            "ip.src",
            "ip.dst",
            "udp.srcport",
            "udp.dstport",
            "tcp.srcport",
            "tcp.dstport",
            "frame.len",
            "ipv6.src",
            "ipv6.dst",
        ],
    );
    assert!(
        want.iter().any(|w| w[0].is_empty()),
        "the trace has IPv6 too"
    );
    assert_eq!(lines.len(), want.len(), "{out}");
    for (line, w) in lines.iter().zip(&want) {
        let (sport, dport, proto) = if w[2].is_empty() {
            (&w[4], &w[5], "TCP")
        } else {
            (&w[2], &w[3], "UDP")
        };
        let body = line.split_once(' ').unwrap().1;
        let expect = if w[0].is_empty() {
            format!("IP6 {}.{sport} > {}.{dport}: {proto}", w[7], w[8])
        } else {
            format!("IP {}.{sport} > {}.{dport}: {proto}", w[0], w[1])
        };
        assert!(body.starts_with(&expect), "{line:?} is not {expect:?}");
        assert!(line.ends_with(&format!(", length {}", w[6])), "{line}");
        // HH:MM:SS.nnnnnnnnn
        let time = line.split(' ').next().unwrap();
        assert_eq!(time.len(), 18, "{line}");
    }
}

#[test]
fn size_rotation_keeps_a_ring_of_files_and_names_them() {
    let dir = tempfile::tempdir().unwrap();
    let t = built_trace(dir.path(), "t.pcap", 20, 20, 1_000_000);
    let base = dir.path().join("r.pcapng");
    let o = run_limited(
        &mut tapflow([
            "capture",
            "-r",
            t.to_str().unwrap(),
            "-q",
            "-C",
            "16K",
            "-W",
            "3",
            "-w",
            base.to_str().unwrap(),
        ]),
        Duration::from_secs(30),
    );
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success(), "{err}");
    let mut left: Vec<String> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with("r-"))
        .collect();
    left.sort();
    assert_eq!(left.len(), 3, "{left:?}");
    // The newest three, and the exit line names exactly them.
    let line = err
        .lines()
        .find(|l| l.contains("wrote 3 files"))
        .unwrap_or_else(|| panic!("{err}"));
    for n in &left {
        assert!(line.contains(n.as_str()), "{line} lacks {n}");
        assert!(capinfos_count(&dir.path().join(n)) > 0);
    }
    assert!(!left.contains(&"r-00000.pcapng".to_string()), "{left:?}");
    // -W without rotation is refused.
    let o = run_limited(
        &mut tapflow([
            "capture",
            "-r",
            t.to_str().unwrap(),
            "-W",
            "3",
            "-w",
            base.to_str().unwrap(),
        ]),
        Duration::from_secs(10),
    );
    assert_clean_error(&o, Some(2), &["-W"], "-W alone");
}

#[test]
fn time_rotation_names_files_by_the_clock_and_workers_files_are_named_at_exit() {
    let p = VethPair::new("tr");
    p.wait_link_up();
    let dir = tempfile::tempdir().unwrap();
    let pattern = dir.path().join("t-%H%M%S.pcap");
    let mut cap = VethPair::spawn(&mut p.tapflow_b(&[
        "capture",
        "-i",
        &p.if_b,
        "-q",
        "-G",
        "1s",
        "-W",
        "2",
        "--threads",
        "2",
        "-w",
        &s(&pattern),
    ]));
    wait_capturing(&mut cap, 2);
    let mut gen_ = p.spawn_gen(&["--rate", "500", "--flows", "16", "--duration", "3.5s"]);
    gen_.wait_limited(Duration::from_secs(30));
    std::thread::sleep(Duration::from_millis(300));
    cap.signal(libc::SIGINT);
    let (status, err) = cap.wait_output(Duration::from_secs(20));
    assert!(status.success(), "{err}");
    let mut names: Vec<String> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    // Two workers, each keeping its newest two: t-HHMMSS-w0.pcap and -w1.
    assert_eq!(names.len(), 4, "{names:?} {err}");
    for n in &names {
        let (stamp, rest) = n.strip_prefix("t-").unwrap().split_at(6);
        assert!(stamp.bytes().all(|b| b.is_ascii_digit()), "{n}");
        assert!(rest == "-w0.pcap" || rest == "-w1.pcap", "{n}");
        assert!(
            capinfos(&dir.path().join(n)).contains("- nanosecond pcap"),
            "{n}"
        );
    }
    let line = err
        .lines()
        .find(|l| l.contains("wrote 4 files"))
        .unwrap_or_else(|| panic!("{err}"));
    for n in &names {
        assert!(line.contains(n.as_str()), "{line} lacks {n}");
    }
}

#[test]
fn interfaces_are_listed_with_their_state() {
    let p = VethPair::new("ls");
    p.wait_link_up();
    // A second pair, left down.
    ip(&[
        "-n", &p.ns_b, "link", "add", "tfdown0", "type", "veth", "peer", "name", "tfdown1",
    ]);
    let out = run_ok(&mut p.tapflow_b(&["capture", "-D"]));
    let index = |name: &str| {
        run_ok(Command::new("ip").args(["-n", &p.ns_b, "-o", "link", "show", "dev", name]))
            .split(':')
            .next()
            .unwrap()
            .to_string()
    };
    assert!(
        out.contains(&format!("{}.lo [Down, Loopback]", index("lo"))),
        "{out}"
    );
    assert!(
        out.contains(&format!("{}.{} [Up, Running]", index(&p.if_b), p.if_b)),
        "{out}"
    );
    assert!(
        out.contains(&format!("{}.tfdown0 [Down]", index("tfdown0"))),
        "{out}"
    );
    assert!(
        out.contains(&format!("{}.tfdown1 [Down]", index("tfdown1"))),
        "{out}"
    );
    // Then `any`, as tcpdump lists it last.
    assert!(out.lines().last().unwrap().starts_with("0.any ("), "{out}");
    assert_eq!(out.lines().count(), 5, "{out}");
}
