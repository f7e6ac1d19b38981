//! `tapflow detect` and `--detect`: real DDoS captures raise the alert of their kind at their
//! target, attack-free captures raise none, and alerts reach a webhook (a local HTTP listener
//! that fails the first POST), a command, and the flow path through a store. Tests of the
//! corpus's captures print one `skipped:` line without it.

mod common;

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpListener;
use std::path::Path;
use std::time::Duration;

use common::*;

/// The alert events `tapflow detect --json` printed.
fn alerts(stdout: &str) -> Vec<serde_json::Value> {
    stdout
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
        .collect()
}

fn detect(args: &[&str]) -> (Vec<serde_json::Value>, String) {
    let mut c = tapflow(["detect", "--json"]);
    c.args(args);
    let what = show(&c);
    let o = run_limited(&mut c, Duration::from_secs(120));
    let err = String::from_utf8_lossy(&o.stderr).into_owned();
    assert!(o.status.success(), "{what}: {err}");
    (alerts(&String::from_utf8_lossy(&o.stdout)), err)
}

fn limit(dir: &Path, packets: u64) -> String {
    let p = dir.join(format!("limit-{packets}.toml"));
    std::fs::write(&p, format!("hold = 5\n[host]\npackets = {packets}\n")).unwrap();
    p.display().to_string()
}

#[test]
fn corpus_attacks_raise_their_kind_at_their_target() {
    let Some(corpus) = corpus() else { return };
    let d = tempfile::tempdir().unwrap();
    // The captures are cut from attacks: under a second, or slow. Their limits sit under
    // their rate a second; the kind and the target are the capture's own.
    for (file, packets, target, kinds) in [
        (
            "stopddos-amp-tcp-reflection-synack.pcap",
            1000,
            "10.10.10.10",
            &["synack_reflection"][..],
        ),
        (
            "stopddos-amp-udp-isakmp.pcap",
            1000,
            "10.10.10.10",
            &["isakmp_amplification"],
        ),
        (
            "stopddos-amp-udp-snmp-src161.pcapng",
            1000,
            "10.10.10.10",
            &["snmp_amplification"],
        ),
        (
            "stopddos-amp-tcp-syn-optionallyack-optionallysameport.pcapng",
            10,
            "10.10.10.10",
            &["syn_flood", "synack_reflection"],
        ),
        (
            "chrissanders-synscan.pcapng",
            50,
            "64.13.134.52",
            &["syn_flood"],
        ),
    ] {
        let path = corpus.join(file);
        let th = limit(d.path(), packets);
        let (v, err) = detect(&["--thresholds", &th, "-r", path.to_str().unwrap()]);
        let starts: Vec<_> = v.iter().filter(|a| a["event"] == "start").collect();
        assert_eq!(starts.len(), 1, "{file}: {v:#?}\n{err}");
        let a = starts[0];
        assert_eq!(a["target"], target, "{file}");
        let kind = a["kind"].as_str().unwrap();
        assert!(kinds.contains(&kind), "{file}: {kind}");
        assert!(a["packets_per_second"].as_f64().unwrap() >= packets as f64);
        assert_eq!(a["over"][0], "packets");
        assert!(!a["top_sources"].as_array().unwrap().is_empty(), "{file}");
        assert!(
            a["query"]
                .as_str()
                .unwrap()
                .ends_with(&format!("dst host {target}")),
            "{file}"
        );
        // Every alert that starts ends, at the latest with the capture.
        assert_eq!(
            v.iter().filter(|a| a["event"] == "end").count(),
            1,
            "{file}"
        );
        assert!(err.contains("1 alerts"), "{file}: {err}");
    }
}

#[test]
fn attack_free_corpus_captures_raise_nothing_at_the_defaults() {
    let Some(corpus) = corpus() else { return };
    let mut read = 0;
    for e in std::fs::read_dir(&corpus).unwrap() {
        let p = e.unwrap().path();
        let name = p.file_name().unwrap().to_string_lossy().into_owned();
        let capture = [".pcap", ".pcapng"].iter().any(|x| name.ends_with(x));
        if !capture || name.starts_with("stopddos-") || name.contains("synscan") {
            continue;
        }
        let mut c = tapflow(["detect", "--json", "-r", p.to_str().unwrap()]);
        let o = run_limited(&mut c, Duration::from_secs(120));
        // Broken captures end with an error after what they hold; none may alert.
        let out = String::from_utf8_lossy(&o.stdout);
        assert!(out.trim().is_empty(), "{name}: {out}");
        read += 1;
    }
    assert!(read > 40, "only {read} captures read");
}

/// A one-connection HTTP server: answers the first POST 503 and the next ones 200, and sends
/// each body it takes to the test.
fn webhook_server() -> (String, std::sync::mpsc::Receiver<String>) {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}/alert", l.local_addr().unwrap());
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for (n, s) in l.incoming().enumerate() {
            let Ok(mut s) = s else { return };
            let mut r = BufReader::new(s.try_clone().unwrap());
            let mut len = 0;
            let mut first = String::new();
            r.read_line(&mut first).unwrap();
            loop {
                let mut h = String::new();
                r.read_line(&mut h).unwrap();
                if h.trim().is_empty() {
                    break;
                }
                if let Some(v) = h.to_ascii_lowercase().strip_prefix("content-length:") {
                    len = v.trim().parse().unwrap();
                }
            }
            let mut body = vec![0; len];
            r.read_exact(&mut body).unwrap();
            let status = if n == 0 { "503 Busy" } else { "200 OK" };
            let _ = write!(
                s,
                "HTTP/1.1 {status}\r\ncontent-length: 0\r\nconnection: close\r\n\r\n"
            );
            if n > 0 {
                assert!(first.starts_with("POST /alert "), "{first}");
                let _ = tx.send(String::from_utf8(body).unwrap());
            }
        }
    });
    (url, rx)
}

#[test]
fn alerts_reach_a_webhook_that_fails_once_and_a_command() {
    let d = tempfile::tempdir().unwrap();
    // 3 s of a 2,000 packets/s NTP reflection to 192.0.2.9 (built: no corpus needed).
    let trace = reflection_trace(d.path());
    let th = limit(d.path(), 1000);
    let (url, bodies) = webhook_server();
    let log = d.path().join("hook.log");
    let cmd = format!(
        "{{ echo \"$TAPFLOW_ALERT_EVENT $TAPFLOW_ALERT_TARGET $TAPFLOW_ALERT_KIND\"; cat; }} >> {}",
        log.display()
    );
    let (v, err) = detect(&[
        "--thresholds",
        &th,
        "--webhook",
        &url,
        "--alert-exec",
        &cmd,
        "-r",
        trace.to_str().unwrap(),
    ]);
    assert_eq!(v.len(), 2, "{v:#?}\n{err}");
    assert_eq!(v[0]["kind"], "ntp_amplification");
    // The first POST was refused: the retry carried the start; then the end.
    let got: Vec<serde_json::Value> = (0..2)
        .map(|_| {
            serde_json::from_str(&bodies.recv_timeout(Duration::from_secs(30)).unwrap()).unwrap()
        })
        .collect();
    assert_eq!(got[0]["event"], "start");
    assert_eq!(got[0]["target"], "192.0.2.9");
    assert_eq!(got[1]["event"], "end");
    let text = std::fs::read_to_string(&log).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 4, "{text}");
    assert_eq!(lines[0], "start 192.0.2.9 ntp_amplification");
    assert_eq!(lines[2], "end 192.0.2.9 ntp_amplification");
    assert_eq!(
        serde_json::from_str::<serde_json::Value>(lines[1]).unwrap(),
        v[0]
    );
}

/// A pcap of 3 s of NTP replies (UDP from port 123, 468 bytes) from 50 reflectors to
/// 192.0.2.9 at 2,000 packets/s.
fn reflection_trace(dir: &Path) -> std::path::PathBuf {
    amplification_trace(dir, 123, 482)
}

/// 3 s of replies from UDP port `sport`, frames of `len` bytes, from 50 reflectors to
/// 192.0.2.9 at 2,000 packets/s.
fn amplification_trace(dir: &Path, sport: u16, len: usize) -> std::path::PathBuf {
    use tapflow_wire::build::{self, FrameSpec, L4};
    use tapflow_wire::ethernet::EthernetAddress;
    let mut packets = Vec::new();
    let t0 = 1_700_000_000_000_000_000u64;
    for i in 0..6000u64 {
        let spec = FrameSpec {
            src_mac: EthernetAddress([2, 0, 0, 0, 0, 1]),
            dst_mac: EthernetAddress([2, 0, 0, 0, 0, 2]),
            src_ip: std::net::Ipv4Addr::new(198, 51, 100, (i % 50) as u8 + 1).into(),
            dst_ip: std::net::Ipv4Addr::new(192, 0, 2, 9).into(),
            proto: L4::Udp,
            src_port: sport,
            dst_port: 40000 + (i % 1000) as u16,
            frame_len: len,
        };
        let mut buf = vec![0; len];
        build::build(&spec, &mut buf).unwrap();
        packets.push(traffic::Packet::new(t0 + i * 500_000, buf));
    }
    let bytes = traffic::pcap_file(
        tapflow_wire::LinkType::Ethernet,
        true,
        false,
        65535,
        &packets,
    );
    write_file(dir, &format!("amp-{sport}.pcap"), &bytes)
}

#[test]
fn a_flood_over_the_exact_rate_is_sampled_and_still_measured() {
    use tapflow_wire::build::{self, FrameSpec, L4};
    use tapflow_wire::ethernet::EthernetAddress;
    let d = tempfile::tempdir().unwrap();
    // 3 s of a UDP flood at 400,000 packets/s, four times the rate a worker counts one by one:
    // after the first 4,096 packets, each second is counted from a sample of one in four.
    const RATE: u64 = 400_000;
    let mut packets = Vec::new();
    let t0 = 1_700_000_000_000_000_000u64;
    for i in 0..3 * RATE {
        let spec = FrameSpec {
            src_mac: EthernetAddress([2, 0, 0, 0, 0, 1]),
            dst_mac: EthernetAddress([2, 0, 0, 0, 0, 2]),
            src_ip: std::net::Ipv4Addr::new(198, 51, 100, (i % 200) as u8 + 1).into(),
            dst_ip: std::net::Ipv4Addr::new(192, 0, 2, 77).into(),
            proto: L4::Udp,
            src_port: 1024 + (i % 7) as u16,
            dst_port: 80,
            frame_len: 60,
        };
        let mut buf = vec![0; 60];
        build::build(&spec, &mut buf).unwrap();
        packets.push(traffic::Packet::new(t0 + i * 1_000_000_000 / RATE, buf));
    }
    let bytes = traffic::pcap_file(
        tapflow_wire::LinkType::Ethernet,
        true,
        false,
        65535,
        &packets,
    );
    drop(packets);
    let trace = write_file(d.path(), "flood.pcap", &bytes);
    drop(bytes);
    let th = limit(d.path(), 100_000);
    let (v, err) = detect(&["--thresholds", &th, "-r", trace.to_str().unwrap()]);
    assert_eq!(v.len(), 2, "{v:#?}\n{err}");
    assert_eq!(v[0]["target"], "192.0.2.77");
    let pps = v[0]["packets_per_second"].as_f64().unwrap();
    assert!((pps - RATE as f64).abs() / (RATE as f64) < 0.02, "{pps}");
    assert!(
        err.contains("3 worker-seconds over 100000 packets/s counted a sample"),
        "{err}"
    );
    // The packets detection counted, sampled ones weighing four: within 2% of the flood's.
    let counted: f64 = err
        .split("seconds measured, ")
        .nth(1)
        .and_then(|r| r.split(' ').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no packet count in {err}"));
    let all = (3 * RATE) as f64;
    assert!(
        (counted - all).abs() / all < 0.02,
        "{counted} of {all}: {err}"
    );
}

#[test]
fn built_amplifications_are_named_by_their_reflectors_port() {
    let d = tempfile::tempdir().unwrap();
    let th = limit(d.path(), 1000);
    // Reply sizes from the services' documented shapes: a DNS ANY answer split over full
    // frames, NTP monlist's 468-byte entries, a memcached stats reply, an SSDP answer, a CLDAP
    // search reply.
    for (port, len, kind) in [
        (53, 1514, "dns_amplification"),
        (123, 482, "ntp_amplification"),
        (11211, 1442, "memcached_amplification"),
        (1900, 330, "ssdp_amplification"),
        (389, 1514, "cldap_amplification"),
        (4444, 500, "udp_flood"),
    ] {
        let trace = amplification_trace(d.path(), port, len);
        let (v, err) = detect(&["--thresholds", &th, "-r", trace.to_str().unwrap()]);
        assert_eq!(v.len(), 2, "{port}: {v:#?}\n{err}");
        assert_eq!(v[0]["kind"], kind, "{port}");
        assert_eq!(v[0]["packets_per_second"], 2000.0, "{port}");
        assert_eq!(v[0]["top_source_ports"][0]["source"], port.to_string());
        assert_eq!(v[0]["top_sources"].as_array().unwrap().len(), 4);
    }
}

#[test]
fn the_flows_a_store_kept_raise_the_alert_too() {
    let d = tempfile::tempdir().unwrap();
    let trace = reflection_trace(d.path());
    let store = d.path().join("store");
    run_ok(&mut tapflow([
        "flows",
        "-q",
        "-r",
        trace.to_str().unwrap(),
        "--store",
        store.to_str().unwrap(),
    ]));
    let th = limit(d.path(), 1000);
    let (v, err) = detect(&[
        "--thresholds",
        &th,
        "--store",
        store.to_str().unwrap(),
        "-t",
        "2023-11-14T22:00:00Z/1h",
    ]);
    let starts: Vec<_> = v.iter().filter(|a| a["event"] == "start").collect();
    assert_eq!(starts.len(), 1, "{v:#?}\n{err}");
    assert_eq!(starts[0]["target"], "192.0.2.9");
    assert_eq!(starts[0]["kind"], "ntp_amplification");
    assert!(starts[0]["flows_per_second"].as_f64().unwrap() > 0.0);
}

#[test]
fn flows_from_an_exporter_raise_the_alert_and_the_gauge_shows_it() {
    let d = tempfile::tempdir().unwrap();
    let trace = reflection_trace(d.path());
    let th = limit(d.path(), 1000);
    let port = std::net::UdpSocket::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let err_path = d.path().join("detect.err");
    let mut c = tapflow([
        "detect",
        "--json",
        "--thresholds",
        &th,
        "--metrics",
        "127.0.0.1:0",
        "--duration",
        "60",
        "-l",
        &format!("ipfix://127.0.0.1:{port}"),
    ]);
    c.stdout(std::process::Stdio::piped())
        .stderr(std::fs::File::create(&err_path).unwrap());
    let what = show(&c);
    let mut g = ChildGuard::new(c.spawn().unwrap(), &what);
    let metrics = std::cell::RefCell::new(String::new());
    g.wait_until(Duration::from_secs(30), "serves /metrics", |_| {
        let err = std::fs::read_to_string(&err_path).unwrap_or_default();
        match err.split("metrics on http://").nth(1) {
            Some(rest) if err.contains("collecting ipfix") => {
                *metrics.borrow_mut() = rest.split('/').next().unwrap().to_string();
                true
            }
            _ => false,
        }
    });
    run_ok(&mut tapflow([
        "flows",
        "-q",
        "-r",
        trace.to_str().unwrap(),
        "--export",
        &format!("ipfix://127.0.0.1:{port}"),
    ]));
    let mut out = BufReader::new(g.child.as_mut().unwrap().stdout.take().unwrap());
    let mut line = String::new();
    out.read_line(&mut line).unwrap();
    let start: serde_json::Value = serde_json::from_str(&line).unwrap();
    assert_eq!(start["event"], "start");
    assert_eq!(start["target"], "192.0.2.9");
    assert_eq!(start["kind"], "ntp_amplification");
    assert!(start["flows_per_second"].as_f64().unwrap() >= 1.0);
    // The alert runs for its hold time: the gauge says so.
    let mut s = std::net::TcpStream::connect(metrics.borrow().as_str()).unwrap();
    write!(s, "GET /metrics HTTP/1.0\r\n\r\n").unwrap();
    let mut text = String::new();
    s.read_to_string(&mut text).unwrap();
    assert!(
        text.contains("tapflow_alert_active{target=\"192.0.2.9\",kind=\"ntp_amplification\"} 1"),
        "{text}"
    );
    g.signal(libc::SIGINT);
    let mut rest = String::new();
    out.read_to_string(&mut rest).unwrap();
    g.wait_limited(Duration::from_secs(30));
    assert!(rest.contains("\"event\":\"end\""), "{rest}");
}

#[test]
fn capture_and_flows_keep_everything_with_detect_on() {
    let d = tempfile::tempdir().unwrap();
    let trace = amplification_trace(d.path(), 53, 1514);
    let th = limit(d.path(), 1000);
    let t = trace.to_str().unwrap();
    let mut counts = Vec::new();
    for (i, detect) in [false, true].into_iter().enumerate() {
        let out = d.path().join(format!("out{i}.pcapng"));
        let csv = d.path().join(format!("flows{i}.csv"));
        let mut c = tapflow(["capture", "-q", "-r", t, "-w", out.to_str().unwrap()]);
        c.args(["--csv", csv.to_str().unwrap()]);
        if detect {
            c.args(["--detect", "--thresholds", &th]);
        }
        let o = run_limited(&mut c, Duration::from_secs(120));
        let err = String::from_utf8_lossy(&o.stderr).into_owned();
        assert!(o.status.success(), "{err}");
        assert_eq!(
            err.contains("tapflow: alert start 192.0.2.9 dns_amplification"),
            detect,
            "{err}"
        );
        let flows = std::fs::read_to_string(&csv).unwrap().lines().count();
        counts.push((capinfos_count(&out), flows));
    }
    assert_eq!(counts[0], counts[1]);
    assert_eq!(counts[0].0, 6000);
}

/// `secs` seconds of UDP to 192.0.2.1–10 (100-byte frames) at `pps` packets a second, starting
/// at `t0_s`.
fn steady_trace(dir: &Path, t0_s: u64, pps: u64, secs: u64) -> std::path::PathBuf {
    use tapflow_wire::build::{self, FrameSpec, L4};
    use tapflow_wire::ethernet::EthernetAddress;
    let mut packets = Vec::new();
    for i in 0..pps * secs {
        let spec = FrameSpec {
            src_mac: EthernetAddress([2, 0, 0, 0, 0, 1]),
            dst_mac: EthernetAddress([2, 0, 0, 0, 0, 2]),
            src_ip: std::net::Ipv4Addr::new(203, 0, 113, (i % 200) as u8 + 1).into(),
            dst_ip: std::net::Ipv4Addr::new(192, 0, 2, (i % 10) as u8 + 1).into(),
            proto: L4::Udp,
            src_port: 40000 + (i % 2000) as u16,
            dst_port: 443,
            frame_len: 100,
        };
        let mut buf = vec![0; 100];
        build::build(&spec, &mut buf).unwrap();
        packets.push(traffic::Packet::new(
            t0_s * 1_000_000_000 + i * 1_000_000_000 / pps,
            buf,
        ));
    }
    let bytes = traffic::pcap_file(
        tapflow_wire::LinkType::Ethernet,
        true,
        false,
        65535,
        &packets,
    );
    write_file(dir, &format!("steady-{pps}-{secs}.pcap"), &bytes)
}

/// The past 3 days of 22:00–23:00 UTC, every minute 2,000 packets/s of 100 bytes to the group's
/// hosts (192.0.2.1 and .2) and 100 packets/s elsewhere, as `tapflow flows --csv` writes them.
fn past_days_csv(dir: &Path, hour: u64) -> std::path::PathBuf {
    let mut csv = String::from(
        "proto,src,sport,dst,dport,vlan,interface,first_ns,last_ns,packets,octets,tcp_flags,\
         rev_first_ns,rev_last_ns,rev_packets,rev_octets,rev_tcp_flags,end_reason\n",
    );
    for day in 1..=3u64 {
        for minute in 0..60u64 {
            let start = (hour - day * 86_400 + minute * 60) * 1_000_000_000;
            let end = start + 59_000_000_000;
            for (dst, packets) in [
                ("192.0.2.1", 60_000u64),
                ("192.0.2.2", 60_000),
                ("10.9.9.9", 6_000),
            ] {
                csv += &format!(
                    "17,203.0.113.7,{},{dst},443,0,0,{start},{end},{packets},{},0,0,0,0,0,0,active\n",
                    40000 + minute,
                    packets * 100
                );
            }
        }
    }
    write_file(dir, "past.csv", csv.as_bytes())
}

/// Imports the past days into `store` (a directory or a ClickHouse URL), then checks that 8 s at
/// 5× the level alert on the group and the total against their learnt limits, and 8 s at the
/// level do not.
fn baseline_alerts(d: &Path, store: &str) {
    // 2023-11-14T22:13:20Z; the hour is 22:00.
    let t0 = 1_700_000_000u64;
    let past = past_days_csv(d, t0 - t0 % 3600);
    run_ok(&mut tapflow([
        "import",
        "--store",
        store,
        past.to_str().unwrap(),
    ]));
    let th = d.join("baseline.toml");
    std::fs::write(
        &th,
        "hold = 3\n[[group]]\nname = \"web\"\nprefixes = [\"192.0.2.0/24\"]\n",
    )
    .unwrap();
    let th = th.to_str().unwrap();
    // 5× the group's level (10,000 packets/s, 1,000 at each host) for 8 s at 22:13: over the
    // learnt limits of the group (3 × 2,000 packets/s) and of all traffic (3 × 2,100); the
    // alerts start once the limits were reached 5 s in a row.
    let five = steady_trace(d, t0, 10_000, 8);
    let (v, err) = detect(&[
        "--thresholds",
        th,
        "--baseline",
        store,
        "-r",
        five.to_str().unwrap(),
    ]);
    assert!(
        err.contains("baseline for 2023-11-14T22:00:00Z from 180 minutes: total 6300 packets/s"),
        "{err}"
    );
    assert!(err.contains("group web 6000 packets/s"), "{err}");
    let starts: Vec<_> = v.iter().filter(|a| a["event"] == "start").collect();
    let targets: Vec<_> = starts
        .iter()
        .map(|a| a["target"].as_str().unwrap())
        .collect();
    assert_eq!(targets, ["group:web", "total"], "{v:#?}\n{err}");
    for a in &starts {
        assert_eq!(a["limit"], "baseline", "{a}");
        assert_eq!(a["over"][0], "packets");
        assert_eq!(a["packets_per_second"], 10_000.0);
        assert_eq!(a["time"], "2023-11-14T22:13:24Z");
    }
    assert_eq!(starts[0]["threshold"]["packets_per_second"], 6000);
    assert_eq!(starts[1]["threshold"]["packets_per_second"], 6300);
    // At the hour's own level: nothing.
    let one = steady_trace(d, t0, 2_000, 8);
    let (v, err) = detect(&[
        "--thresholds",
        th,
        "--baseline",
        store,
        "-r",
        one.to_str().unwrap(),
    ]);
    assert!(v.is_empty(), "{v:#?}\n{err}");
    assert!(err.contains("group web 6000 packets/s"), "{err}");
}

#[test]
fn a_learnt_baseline_alerts_at_five_times_the_hours_level_and_not_at_it() {
    let d = tempfile::tempdir().unwrap();
    let store = d.path().join("store");
    let store = store.to_str().unwrap();
    baseline_alerts(d.path(), store);
    let th = d.path().join("baseline.toml");
    let th = th.to_str().unwrap();
    let five = steady_trace(d.path(), 1_700_000_000, 10_000, 8);
    // Without the baseline nothing limits a group or the total, and no host reaches 20,000/s.
    let (v, err) = detect(&["--thresholds", th, "-r", five.to_str().unwrap()]);
    assert!(v.is_empty(), "{v:#?}\n{err}");
    // 3 s of it is a burst, shorter than the 5 s a learnt limit must hold.
    let burst = steady_trace(d.path(), 1_700_000_000, 10_000, 3);
    let (v, err) = detect(&[
        "--thresholds",
        th,
        "--baseline",
        store,
        "-r",
        burst.to_str().unwrap(),
    ]);
    assert!(v.is_empty(), "{v:#?}\n{err}");
}

#[test]
fn a_baseline_learns_from_clickhouse_as_from_a_directory() {
    let d = tempfile::tempdir().unwrap();
    let (_server, url) = ClickHouse::start(28660);
    let url = format!("{url}/baseline");
    baseline_alerts(d.path(), &url);
}

#[test]
fn a_baseline_without_a_store_is_refused_in_one_line() {
    let d = tempfile::tempdir().unwrap();
    let th = d.path().join("b.toml");
    std::fs::write(&th, "[baseline]\ndays = 3\n").unwrap();
    let trace = reflection_trace(d.path());
    let mut c = tapflow(["detect", "--thresholds", th.to_str().unwrap()]);
    c.args(["-r", trace.to_str().unwrap()]);
    let o = run_limited(&mut c, Duration::from_secs(60));
    assert_clean_error(&o, Some(2), &["[baseline]", "--baseline STORE"], "no store");
    std::fs::write(&th, "[baseline]\nfactor = 0\nstore = \"x\"\n").unwrap();
    let o = run_limited(&mut c, Duration::from_secs(60));
    assert_clean_error(&o, Some(2), &["baseline factor 0"], "factor 0");
    std::fs::write(&th, "[baseline]\nstore = \"/nonexistent/flows\"\n").unwrap();
    let o = run_limited(&mut c, Duration::from_secs(60));
    assert_clean_error(
        &o,
        Some(2),
        &["/nonexistent/flows", "no store directory"],
        "no dir",
    );
}
