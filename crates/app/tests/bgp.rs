//! The BGP action against real BGP speakers: ExaBGP runs `tapflow detect --bgp-exabgp -` as its
//! API process and peers over a veth with GoBGP in a second namespace (both started and stopped
//! by scripts/bgp.sh). A built NTP reflection reaches tapflow as IPFIX; the attacked /32 and
//! /128 must appear in GoBGP's RIB with the BLACKHOLE community while the alerts run and leave
//! it when they end; flowspec rules must leave it when detection stops. Without the daemons:
//! the commands written into a named pipe, a pipe nobody reads counted, and the refusals.

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use common::*;

/// ExaBGP's side (namespace A) and GoBGP's (namespace B).
const EXABGP: &str = "198.18.0.1";
const GOBGP: &str = "198.18.0.2";
/// Where tapflow collects IPFIX, on namespace A's loopback.
const IPFIX: &str = "ipfix://127.0.0.1:4739";
/// 65535:666 as GoBGP's JSON writes a community: one 32-bit number.
const BLACKHOLE: u64 = (65535 << 16) | 666;

fn script() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scripts/bgp.sh")
}

/// Two namespaces, GoBGP in B, ExaBGP in A running tapflow; both stopped, then the namespaces
/// removed, on drop.
struct Speakers {
    pair: VethPair,
    dir: tempfile::TempDir,
}

impl Speakers {
    /// GoBGP (AS 65002) in B and ExaBGP (AS 65001) in A running `tapflow detect ARGS -l IPFIX`,
    /// with the BGP connection established and tapflow collecting.
    fn start(tag: &str, args: &[&str]) -> Speakers {
        for tool in ["exabgp", "gobgpd", "gobgp"] {
            let found = Command::new("sh")
                .args(["-c", &format!("command -v {tool}")])
                .output()
                .unwrap();
            assert!(
                found.status.success(),
                "{tool} not installed: scripts/install-deps.sh installs it"
            );
        }
        let pair = VethPair::new(tag);
        pair.wait_link_up();
        for (ns, ifn, addr) in [
            (&pair.ns_a, &pair.if_a, EXABGP),
            (&pair.ns_b, &pair.if_b, GOBGP),
        ] {
            ip(&["-n", ns, "link", "set", "lo", "up"]);
            ip(&["-n", ns, "addr", "add", &format!("{addr}/30"), "dev", ifn]);
        }
        let s = Speakers {
            pair,
            dir: tempfile::tempdir().unwrap(),
        };
        let b = s.dir.path().join("b");
        s.script(
            &s.pair.ns_b,
            &[
                "gobgpd",
                b.to_str().unwrap(),
                GOBGP,
                "65002",
                EXABGP,
                "65001",
            ],
        );
        let a = s.dir.path().join("a");
        let bin = bin();
        let mut words = vec![
            "exabgp",
            a.to_str().unwrap(),
            EXABGP,
            "65001",
            GOBGP,
            "65002",
            bin.to_str().unwrap(),
            "detect",
        ];
        words.extend_from_slice(args);
        words.extend_from_slice(&["-l", IPFIX]);
        s.script(&s.pair.ns_a, &words);
        s.wait(
            Duration::from_secs(60),
            "the BGP connection is established",
            || {
                s.gobgp(&["neighbor", EXABGP])
                    .contains("BGP state = ESTABLISHED")
            },
        );
        s.wait(Duration::from_secs(30), "tapflow collects", || {
            s.log().contains("tapflow: collecting ipfix")
        });
        s
    }

    fn script(&self, ns: &str, args: &[&str]) -> String {
        let mut c = Command::new("ip");
        c.args(["netns", "exec", ns]).arg(script()).args(args);
        let what = show(&c);
        let o = run_limited(&mut c, Duration::from_secs(60));
        assert!(
            o.status.success(),
            "{what}: {}",
            String::from_utf8_lossy(&o.stderr)
        );
        String::from_utf8_lossy(&o.stdout).into_owned()
    }

    fn gobgp(&self, args: &[&str]) -> String {
        let mut c = Command::new("ip");
        c.args(["netns", "exec", &self.pair.ns_b, "gobgp"])
            .args(args);
        String::from_utf8_lossy(&run_limited(&mut c, Duration::from_secs(30)).stdout).into_owned()
    }

    /// GoBGP's RIB of `family` (`ipv4`, `ipv4-flowspec`) as JSON: prefix -> paths.
    fn rib(&self, family: &str) -> serde_json::Map<String, serde_json::Value> {
        let b = self.dir.path().join("b");
        let text = self.script(&self.pair.ns_b, &["rib", b.to_str().unwrap(), family]);
        serde_json::from_str(&text).unwrap_or_else(|e| panic!("{e}: {text}"))
    }

    /// ExaBGP's log, with tapflow's standard error.
    fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("a/exabgp.log")).unwrap_or_default()
    }

    /// Polls `done` every 100 ms; fails the test with ExaBGP's log past `limit`.
    fn wait(&self, limit: Duration, what: &str, mut done: impl FnMut() -> bool) {
        let start = Instant::now();
        while !done() {
            assert!(
                start.elapsed() < limit,
                "not so after {limit:?}: {what}\n{}",
                self.log()
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// Sends the flood (to 2001:db8::9 too if `v6`) to tapflow as IPFIX records (from
    /// namespace A).
    fn flood(&self, v6: bool) {
        let trace = reflection_trace(self.dir.path(), v6);
        run_ok(&mut VethPair::in_ns(
            &self.pair.ns_a,
            &bin(),
            &[
                "flows",
                "-q",
                "-r",
                trace.to_str().unwrap(),
                "--export",
                IPFIX,
            ],
        ));
    }

    /// The process id of tapflow under ExaBGP.
    fn tapflow_pid(&self) -> i32 {
        let pids = run_ok(Command::new("ip").args(["netns", "pids", &self.pair.ns_a]));
        pids.split_whitespace()
            .filter_map(|p| p.parse::<i32>().ok())
            .find(|p| std::fs::read_link(format!("/proc/{p}/exe")).is_ok_and(|e| e == bin()))
            .unwrap_or_else(|| panic!("no tapflow in {}", self.pair.ns_a))
    }

    fn stop(&self) {
        for (ns, d) in [(&self.pair.ns_a, "a"), (&self.pair.ns_b, "b")] {
            let dir = self.dir.path().join(d);
            let _ = Command::new("ip")
                .args(["netns", "exec", ns])
                .arg(script())
                .args(["stop", dir.to_str().unwrap()])
                .status();
        }
    }
}

impl Drop for Speakers {
    fn drop(&mut self) {
        self.stop();
    }
}

/// A pcap of 3 s of NTP replies (UDP from port 123, 482-byte frames) from 50 reflectors to
/// 192.0.2.9 at 2,000 packets/s; if `v6`, as many to 2001:db8::9 between them.
fn reflection_trace(dir: &Path, v6: bool) -> PathBuf {
    use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
    use tapflow_wire::build::{self, FrameSpec, L4};
    use tapflow_wire::ethernet::EthernetAddress;
    let mut packets = Vec::new();
    let n = if v6 { 12_000u64 } else { 6_000 };
    for i in 0..n {
        let r = (i / 2 % 50) as u8 + 1;
        let (src, dst): (IpAddr, IpAddr) = if v6 && i % 2 == 1 {
            (
                Ipv6Addr::new(0x2001, 0xdb8, 0x100, 0, 0, 0, 0, r.into()).into(),
                "2001:db8::9".parse().unwrap(),
            )
        } else {
            (
                Ipv4Addr::new(198, 51, 100, r).into(),
                Ipv4Addr::new(192, 0, 2, 9).into(),
            )
        };
        let spec = FrameSpec {
            src_mac: EthernetAddress([2, 0, 0, 0, 0, 1]),
            dst_mac: EthernetAddress([2, 0, 0, 0, 0, 2]),
            src_ip: src,
            dst_ip: dst,
            proto: L4::Udp,
            src_port: 123,
            dst_port: 40000 + (i % 1000) as u16,
            frame_len: 482,
        };
        let mut buf = vec![0; 482];
        build::build(&spec, &mut buf).unwrap();
        packets.push(traffic::Packet::new(T0 + i * 3_000_000_000 / n, buf));
    }
    let bytes = traffic::pcap_file(
        tapflow_wire::LinkType::Ethernet,
        true,
        false,
        65535,
        &packets,
    );
    write_file(dir, "ntp.pcap", &bytes)
}

fn thresholds(dir: &Path, hold: u64) -> String {
    let p = dir.join("limits.toml");
    std::fs::write(&p, format!("hold = {hold}\n[host]\npackets = 1000\n")).unwrap();
    p.display().to_string()
}

/// The communities and the next hop of GoBGP's path `route` (JSON).
fn communities_and_next_hop(route: &serde_json::Value) -> (Vec<u64>, String) {
    let attrs = route[0]["attrs"].as_array().unwrap();
    let communities = attrs
        .iter()
        .filter(|a| a["type"] == 8)
        .flat_map(|a| a["communities"].as_array().unwrap().clone())
        .map(|c| c.as_u64().unwrap())
        .collect();
    // NEXT_HOP (IPv4) or MP_REACH_NLRI's next hop (IPv6).
    let hop = attrs
        .iter()
        .find(|a| a["type"] == 3 || a["type"] == 14)
        .and_then(|a| a["nexthop"].as_str())
        .unwrap_or_default()
        .to_string();
    (communities, hop)
}

#[test]
fn the_attacked_addresses_are_blackholed_in_the_peers_rib_while_the_alerts_run() {
    // A hold of 10 s: the routes stand long enough to be seen on a loaded machine.
    let d = tempfile::tempdir().unwrap();
    let th = thresholds(d.path(), 10);
    let s = Speakers::start(
        "bgb",
        &[
            "--bgp-exabgp",
            "-",
            "--bgp-next-hop",
            "2001:db8:ffff::1",
            "--thresholds",
            &th,
        ],
    );
    assert!(s.rib("ipv4").is_empty() && s.rib("ipv6").is_empty());
    s.flood(true);
    // The alerts start as the records arrive: the /32 and the /128 come in with 65535:666, the
    // /32 to ExaBGP's address (self), the /128 to the next hop given.
    let (mut v4, mut v6) = (serde_json::Value::Null, serde_json::Value::Null);
    s.wait(
        Duration::from_secs(30),
        "both routes are in GoBGP's RIB",
        || {
            if v4.is_null() {
                v4 = s.rib("ipv4").remove("192.0.2.9/32").unwrap_or_default();
            }
            if v6.is_null() {
                v6 = s.rib("ipv6").remove("2001:db8::9/128").unwrap_or_default();
            }
            !v4.is_null() && !v6.is_null()
        },
    );
    assert_eq!((s.rib("ipv4").len(), s.rib("ipv6").len()), (1, 1));
    assert_eq!(
        communities_and_next_hop(&v4),
        (vec![BLACKHOLE], EXABGP.to_string()),
        "{v4}"
    );
    assert_eq!(
        communities_and_next_hop(&v6),
        (vec![BLACKHOLE], "2001:db8:ffff::1".to_string()),
        "{v6}"
    );
    let log = s.log();
    for target in ["192.0.2.9", "2001:db8::9"] {
        assert!(
            log.contains(&format!("tapflow: alert start {target} ntp_amplification")),
            "the alert lines go to standard error: {log}"
        );
    }
    // No record comes any more: 10 s on, the alerts end and the routes are withdrawn while the
    // BGP connection stays up.
    s.wait(Duration::from_secs(60), "both routes are withdrawn", || {
        s.rib("ipv4").is_empty() && s.rib("ipv6").is_empty()
    });
    assert!(
        s.log().contains("tapflow: alert end 192.0.2.9"),
        "{}",
        s.log()
    );
    assert!(
        s.gobgp(&["neighbor", EXABGP])
            .contains("BGP state = ESTABLISHED")
    );
    // Stopping ExaBGP closes tapflow's standard input: tapflow stops and says what it did.
    let pid = s.tapflow_pid();
    s.stop();
    s.wait(Duration::from_secs(30), "tapflow stops with ExaBGP", || {
        !Path::new(&format!("/proc/{pid}")).exists()
    });
    let log = s.log();
    assert!(
        log.contains("tapflow: bgp: 2 announced, 2 withdrawn\n"),
        "{log}"
    );
}

#[test]
fn flowspec_rules_are_withdrawn_when_detection_stops() {
    let d = tempfile::tempdir().unwrap();
    // The alerts hold for 10 minutes: only the end of detection takes the rules away.
    let th = thresholds(d.path(), 600);
    let s = Speakers::start(
        "bgf",
        &["--bgp-exabgp", "-", "--bgp-flowspec", "--thresholds", &th],
    );
    s.flood(true);
    let rule = "[destination: 192.0.2.9/32][protocol: ==udp][source-port: ==123]";
    let (mut paths, mut v6) = (serde_json::Value::Null, String::new());
    s.wait(
        Duration::from_secs(30),
        "the flowspec rules are in GoBGP's RIB",
        || {
            if paths.is_null() {
                paths = s.rib("ipv4-flowspec").remove(rule).unwrap_or_default();
            }
            if v6.is_empty() {
                v6 = s
                    .rib("ipv6-flowspec")
                    .keys()
                    .next()
                    .cloned()
                    .unwrap_or_default();
            }
            !paths.is_null() && !v6.is_empty()
        },
    );
    // discard: traffic-rate 0 (RFC 8955), an extended community.
    let ext = paths[0]["attrs"]
        .as_array()
        .unwrap()
        .iter()
        .find(|a| a["type"] == 16)
        .unwrap_or_else(|| panic!("no extended communities: {paths}"));
    assert_eq!(ext["value"][0]["rate"], 0.0, "{paths}");
    // The IPv6 rule: the /128, UDP as the next header, the reflectors' port.
    for part in ["2001:db8::9/128", "==udp", "==123"] {
        assert!(v6.contains(part), "{v6}");
    }
    assert!(
        s.rib("ipv4").is_empty() && s.rib("ipv6").is_empty(),
        "no blackhole route with --bgp-flowspec"
    );
    // Detection stops (SIGTERM to tapflow alone): the rules go while ExaBGP and its BGP
    // connection stay.
    let pid = s.tapflow_pid();
    // SAFETY: kill() with a pid read from the namespace's process list and a valid signal.
    assert_eq!(unsafe { libc::kill(pid, libc::SIGTERM) }, 0);
    s.wait(Duration::from_secs(30), "the rules are withdrawn", || {
        s.rib("ipv4-flowspec").is_empty() && s.rib("ipv6-flowspec").is_empty()
    });
    assert!(
        s.gobgp(&["neighbor", EXABGP])
            .contains("BGP state = ESTABLISHED")
    );
    s.wait(Duration::from_secs(30), "tapflow says what it did", || {
        s.log().contains("tapflow: bgp: 2 announced, 2 withdrawn\n")
    });
}

#[test]
fn a_named_pipe_gets_the_commands_and_one_nobody_reads_costs_a_counted_command() {
    let d = tempfile::tempdir().unwrap();
    let trace = reflection_trace(d.path(), false);
    let th = thresholds(d.path(), 5);
    let fifo = d.path().join("exabgp.in");
    run_ok(Command::new("mkfifo").arg(&fifo));
    // A reader on the pipe, as ExaBGP would be. It holds what tapflow writes (two lines, well
    // within the pipe's buffer) until it is read after tapflow exits.
    let mut reader = {
        use std::os::unix::fs::OpenOptionsExt;
        std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_NONBLOCK)
            .open(&fifo)
            .unwrap()
    };
    let f = fifo.to_str().unwrap();
    let t = trace.to_str().unwrap();
    let mut c = tapflow(["detect", "--json", "--thresholds", &th, "--bgp-exabgp", f]);
    c.args(["--bgp-community", "65535:666,65535:65281", "-r", t]);
    let o = run_limited(&mut c, Duration::from_secs(60));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success(), "{err}");
    // The alert lines stay on standard output: the commands go to the pipe.
    assert_eq!(String::from_utf8_lossy(&o.stdout).lines().count(), 2);
    assert!(
        err.contains("tapflow: bgp: 1 announced, 1 withdrawn\n"),
        "{err}"
    );
    let mut text = String::new();
    std::io::Read::read_to_string(&mut reader, &mut text).unwrap();
    drop(reader);
    assert_eq!(
        text.lines().collect::<Vec<_>>(),
        [
            "announce route 192.0.2.9/32 next-hop self community [65535:666 65535:65281]",
            "withdraw route 192.0.2.9/32 next-hop self",
        ]
    );
    // Nobody reads the pipe now: the announcement is not sent, counted, and said once.
    let mut c = tapflow([
        "detect",
        "--json",
        "--thresholds",
        &th,
        "--bgp-exabgp",
        f,
        "-r",
        t,
    ]);
    let o = run_limited(&mut c, Duration::from_secs(60));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success(), "{err}");
    assert!(
        err.contains("tapflow: bgp: 0 announced, 0 withdrawn, 1 commands not sent"),
        "{err}"
    );
    assert_eq!(err.matches("exabgp.in:").count(), 1, "{err}");
}

#[test]
fn conflicting_or_bad_bgp_options_are_refused() {
    let d = tempfile::tempdir().unwrap();
    let trace = reflection_trace(d.path(), false);
    let t = trace.to_str().unwrap();
    for (args, keys) in [
        (
            vec![
                "capture",
                "-r",
                t,
                "-w",
                "-",
                "--detect",
                "--bgp-exabgp",
                "-",
            ],
            &["--bgp-exabgp -", "standard output"][..],
        ),
        (
            vec!["detect", "-r", "-", "--bgp-exabgp", "-"],
            &["--bgp-exabgp -", "standard input"],
        ),
        (
            vec![
                "detect",
                "-r",
                t,
                "--bgp-exabgp",
                "-",
                "--bgp-community",
                "65536:1",
            ],
            &["--bgp-community", "65536:1"],
        ),
        (
            vec![
                "detect",
                "-r",
                t,
                "--bgp-exabgp",
                "-",
                "--bgp-next-hop",
                "router",
            ],
            &["--bgp-next-hop", "router"],
        ),
    ] {
        let o = run_limited(&mut tapflow(&args), Duration::from_secs(30));
        assert_clean_error(&o, Some(2), keys, &args.join(" "));
    }
}
