//! `-i any`: one capture on every interface of a network namespace, as tcpdump's. A namespace
//! with two veth links and loopback is captured while `tapflow gen` sends on each; tshark reads
//! the Linux cooked v2 files and says which interface and direction each packet had.

mod common;

use std::collections::BTreeMap;
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use common::*;

/// A namespace `anyif-PID-N-b` joined to `anyif-PID-N-a` by two veth pairs, 10.71.1.0/24 and
/// 10.71.2.0/24, loopback up, IPv6 off; both removed on drop.
struct Hosts {
    ns_a: String,
    ns_b: String,
    /// The sending ends, in A.
    a: [String; 2],
    /// The capturing ends, in B, and their interface indexes there.
    b: [String; 2],
    b_index: [u32; 2],
}

static N: AtomicU32 = AtomicU32::new(0);

impl Hosts {
    fn new() -> Hosts {
        require_root();
        let n = N.fetch_add(1, Ordering::SeqCst);
        let pid = std::process::id() % 100_000;
        let mut h = Hosts {
            ns_a: format!("anyif-{pid}-{n}-a"),
            ns_b: format!("anyif-{pid}-{n}-b"),
            a: [1, 2].map(|k| format!("ai{pid}{n}a{k}")),
            b: [1, 2].map(|k| format!("ai{pid}{n}b{k}")),
            b_index: [0; 2],
        };
        // From here on, Drop removes whatever was made.
        ip(&["netns", "add", &h.ns_a]);
        ip(&["netns", "add", &h.ns_b]);
        for ns in [&h.ns_a, &h.ns_b] {
            for k in ["all", "default"] {
                disable_ipv6(ns, k);
            }
        }
        ip(&["-n", &h.ns_b, "link", "set", "lo", "up"]);
        for k in 0..2 {
            ip(&[
                "-n", &h.ns_a, "link", "add", &h.a[k], "type", "veth", "peer", "name", &h.b[k],
                "netns", &h.ns_b,
            ]);
            let net = k + 1;
            ip(&[
                "-n",
                &h.ns_a,
                "addr",
                "add",
                &format!("10.71.{net}.1/24"),
                "dev",
                &h.a[k],
            ]);
            ip(&[
                "-n",
                &h.ns_b,
                "addr",
                "add",
                &format!("10.71.{net}.2/24"),
                "dev",
                &h.b[k],
            ]);
            ip(&["-n", &h.ns_a, "link", "set", &h.a[k], "up"]);
            ip(&["-n", &h.ns_b, "link", "set", &h.b[k], "up"]);
            let line =
                run_ok(Command::new("ip").args(["-n", &h.ns_b, "-o", "link", "show", &h.b[k]]));
            h.b_index[k] = line.split(':').next().unwrap().trim().parse().unwrap();
        }
        h.wait_up();
        h
    }

    fn wait_up(&self) {
        let start = std::time::Instant::now();
        let up = |ns: &str, ifname: &str| {
            run_ok(Command::new("ip").args(["-n", ns, "-o", "link", "show", "dev", ifname]))
                .contains(" state UP ")
        };
        while !(0..2).all(|k| up(&self.ns_a, &self.a[k]) && up(&self.ns_b, &self.b[k])) {
            assert!(
                start.elapsed() < Duration::from_secs(10),
                "links not up after 10 s"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// `tapflow ARGS` in B.
    fn tapflow_b(&self, args: &[&str]) -> Command {
        VethPair::in_ns(&self.ns_b, &bin(), args)
    }

    /// Starts a capture in B with stderr piped, stdout discarded.
    fn spawn_b(&self, args: &[&str]) -> ChildGuard {
        VethPair::spawn(&mut self.tapflow_b(args))
    }

    /// Sends `count` UDP frames of 60 bytes to port `dport` from link `k` of A (in A, over the
    /// veth to B), addressed to a MAC no host has: B's stack drops them without an answer.
    fn send(&self, k: usize, count: u64, dport: u16, flows: u32) {
        let net = k + 1;
        let (src, dst) = (format!("10.71.{net}.1"), format!("10.71.{net}.2"));
        let (c, p, f) = (count.to_string(), dport.to_string(), flows.to_string());
        let a = [
            "gen",
            "-i",
            &self.a[k],
            "-q",
            "-c",
            &c,
            "--src-ip",
            &src,
            "--dst-ip",
            &dst,
            "--dst-port",
            &p,
            "--flows",
            &f,
            "--rate",
            "20k",
        ];
        run_ok(&mut VethPair::in_ns(&self.ns_a, &bin(), &a));
    }

    /// Sends `count` one-byte UDP datagrams to 127.0.0.1 port 9 from a socket in B (bash's
    /// `/dev/udp`): each crosses loopback going out and coming in (recorded once, coming in,
    /// as tcpdump records it). The port unreachable
    /// errors that come back cross it too, rate limited.
    fn send_lo(&self, count: u64) {
        let script = format!("for i in $(seq {count}); do echo -n x > /dev/udp/127.0.0.1/9; done");
        run_ok(Command::new("ip").args(["netns", "exec", &self.ns_b, "bash", "-c", &script]));
    }
}

impl Drop for Hosts {
    fn drop(&mut self) {
        for ns in [&self.ns_a, &self.ns_b] {
            let _ = Command::new("ip")
                .args(["netns", "del", ns])
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .status();
        }
    }
}

/// Waits until `g`'s process has `n` packet sockets bound to every interface (`/proc/net/packet`
/// shows them running, with interface index 0), and a little more for the filter.
fn wait_capturing_any(g: &mut ChildGuard, n: usize) {
    g.wait_until(
        Duration::from_secs(15),
        &format!("{n} sockets on any"),
        |pid| {
            let mut inodes = Vec::new();
            if let Ok(rd) = std::fs::read_dir(format!("/proc/{pid}/fd")) {
                for e in rd.flatten() {
                    let t = std::fs::read_link(e.path()).unwrap_or_default();
                    let t = t.to_string_lossy();
                    if let Some(i) = t.strip_prefix("socket:[").and_then(|r| r.strip_suffix(']')) {
                        inodes.push(i.to_string());
                    }
                }
            }
            let table =
                std::fs::read_to_string(format!("/proc/{pid}/net/packet")).unwrap_or_default();
            // sk RefCnt Type Proto Iface R Rmem User Inode; Type 2 is SOCK_DGRAM. A socket not
            // bound yet shows interface 0 too: R=1 (hooked into the receive path) tells them apart.
            table
                .lines()
                .skip(1)
                .map(|l| l.split_whitespace().collect::<Vec<_>>())
                .filter(|f| {
                    f.len() >= 9
                        && f[2] == "2"
                        && f[4] == "0"
                        && f[5] == "1"
                        && inodes.iter().any(|i| i == f[8])
                })
                .count()
                >= n
        },
    );
    std::thread::sleep(Duration::from_millis(300));
}

/// Waits (up to 20 s) until the capture's control socket counts at least `n` packets received:
/// on a loaded machine the kernel may still hold frames a sender has already written.
fn wait_received(h: &Hosts, g: &ChildGuard, n: u64) {
    let control = control_of(g);
    let start = std::time::Instant::now();
    loop {
        let o = run_limited(
            &mut h.tapflow_b(&["stats", "--json", "--control", &control]),
            Duration::from_secs(20),
        );
        let got = o
            .status
            .success()
            .then(|| json_u64(&String::from_utf8_lossy(&o.stdout), "total.received"));
        if got.is_some_and(|r| r >= n) {
            return;
        }
        assert!(
            start.elapsed() < Duration::from_secs(20),
            "{}: {got:?} received, waited for {n}",
            g.what
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Stops a capture with SIGINT and returns its stderr, which must show a clean end.
fn stop(mut g: ChildGuard) -> String {
    g.signal(libc::SIGINT);
    let (status, err) = g.wait_output(Duration::from_secs(30));
    assert!(status.success(), "{}: {status}: {err}", g.what);
    err
}

/// Rows of tshark fields counted by value.
fn tally(rows: Vec<Vec<String>>) -> BTreeMap<Vec<String>, u64> {
    let mut m = BTreeMap::new();
    for r in rows {
        *m.entry(r).or_default() += 1;
    }
    m
}

fn row(fields: &[&str]) -> Vec<String> {
    fields.iter().map(|s| s.to_string()).collect()
}

fn s(p: &Path) -> String {
    p.to_string_lossy().into_owned()
}

#[test]
fn any_records_every_interface_with_its_index_and_direction() {
    let h = Hosts::new();
    let dir = tempfile::tempdir().unwrap();
    let one = dir.path().join("one.pcapng");
    let two = dir.path().join("two.pcapng");
    let classic = dir.path().join("c.pcap");
    let mut caps = [
        h.spawn_b(&["capture", "-i", "any", "-q", "-w", &s(&one)]),
        h.spawn_b(&[
            "capture",
            "-i",
            "any",
            "-q",
            "--threads",
            "2",
            "-w",
            &s(&two),
        ]),
        h.spawn_b(&["capture", "-i", "any", "-q", "-s", "40", "-w", &s(&classic)]),
    ];
    for (c, n) in caps.iter_mut().zip([1, 2, 1]) {
        wait_capturing_any(c, n);
    }
    // A Nagios check finds the capture on any by its name.
    let check = run_limited(
        &mut h.tapflow_b(&["check", "--control", &control_of(&caps[0])]),
        Duration::from_secs(20),
    );
    assert!(
        String::from_utf8_lossy(&check.stdout).starts_with("TAPFLOW OK"),
        "{check:?}"
    );
    h.send(0, 30, 9, 1);
    h.send(1, 20, 9, 1);
    h.send_lo(5);
    for c in &caps {
        wait_received(&h, c, 55);
    }
    let [c1, c2, c3] = caps;
    let errs = [stop(c1), stop(c2), stop(c3)];
    for e in &errs {
        assert!(e.contains("link-type LINUX_SLL2"), "{e}");
        assert!(
            e.contains(" 0 dropped by kernel, 0 dropped by tapflow"),
            "{e}"
        );
    }
    let (b1, b2) = (h.b_index[0].to_string(), h.b_index[1].to_string());
    // PACKET_OTHERHOST (3) from the veths; loopback once, coming in (PACKET_HOST, 0): its
    // outgoing copy (4) is refused in the kernel, as tcpdump leaves it out.
    let want: BTreeMap<Vec<String>, u64> = [
        (
            row(&[&b1, "3", "10.71.1.1", "10.71.1.2", "9", "66", "66"]),
            30,
        ),
        (
            row(&[&b2, "3", "10.71.2.1", "10.71.2.2", "9", "66", "66"]),
            20,
        ),
        (
            row(&["1", "0", "127.0.0.1", "127.0.0.1", "9", "49", "49"]),
            5,
        ),
    ]
    .into_iter()
    .collect();
    let fields = [
        "sll.ifindex",
        "sll.pkttype",
        "ip.src",
        "ip.dst",
        "udp.dstport",
        "frame.len",
        "frame.cap_len",
    ];
    // Without the port unreachable errors (an ICMP packet quoting the datagram: two IP
    // sources), whose number the kernel's rate limit decides.
    let udp =
        |rows: Vec<Vec<String>>| tally(rows.into_iter().filter(|r| !r[2].contains(',')).collect());
    let all_one = tshark_fields(&one, &fields);
    assert_eq!(udp(all_one.clone()), want);
    // Every packet the kernel passed is in the file.
    assert!(
        errs[0].contains(&format!("{n} received, {n} recorded", n = all_one.len())),
        "{}",
        errs[0]
    );
    // Two workers in one fanout group on any: the same packets between their two files.
    let mut both = tshark_fields(&dir.path().join("two-w0.pcapng"), &fields);
    both.extend(tshark_fields(&dir.path().join("two-w1.pcapng"), &fields));
    assert_eq!(udp(both), want);
    // Classic pcap, snaplen 40: the 20-byte header counts, as tcpdump counts it.
    let cut: BTreeMap<Vec<String>, u64> = want
        .iter()
        .map(|(k, v)| {
            let mut k = k.clone();
            k[6] = "40".into();
            (k, *v)
        })
        .collect();
    // Cut at 40 bytes, the datagrams lose their UDP header and the errors what they quote.
    let cut: BTreeMap<Vec<String>, u64> = cut
        .into_iter()
        .map(|(mut k, v)| {
            k[4] = String::new();
            (k, v)
        })
        .collect();
    let datagrams = tshark_fields(&classic, &fields)
        .into_iter()
        .filter(|r| r[5] != "77")
        .collect();
    assert_eq!(tally(datagrams), cut);
    assert!(capinfos(&classic).contains("Linux cooked-mode capture v2"));
    // Read back: the same packets, each line naming its interface by index (a file may come
    // from another host) and its direction.
    let out = run_ok(&mut tapflow(["capture", "-r", &s(&one), "-q"]));
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines.len(), all_one.len(), "{out}");
    let with = |needle: &str| lines.iter().filter(|l| l.contains(needle)).count();
    assert_eq!(with(&format!(" ifindex {b1} P IP 10.71.1.1.")), 30, "{out}");
    assert_eq!(with(&format!(" ifindex {b2} P IP 10.71.2.1.")), 20, "{out}");
    assert_eq!(with(" ifindex 1 Out IP"), 0, "{out}");
    assert_eq!(with(" ifindex 1 In IP 127.0.0.1."), 5, "{out}");
}

/// The control socket a capture announced on its stderr (read from its `/proc` entry instead:
/// the capture still runs).
fn control_of(g: &ChildGuard) -> String {
    let pid = g.pid();
    // ip netns exec execs tapflow in place: the pid is tapflow's.
    let ns_inode = std::fs::read_link(format!("/proc/{pid}/ns/net"))
        .unwrap()
        .to_string_lossy()
        .trim_start_matches("net:[")
        .trim_end_matches(']')
        .to_string();
    format!("/run/tapflow/any.{ns_inode}.{pid}.sock")
}

#[test]
fn filters_on_any_see_the_network_header_and_the_cooked_fields() {
    let h = Hosts::new();
    let dir = tempfile::tempdir().unwrap();
    let port9 = dir.path().join("p9.pcapng");
    let only_b2 = dir.path().join("b2.pcapng");
    let not_out = dir.path().join("in.pcapng");
    let ruled = dir.path().join("r.pcapng");
    let rules = write_file(
        dir.path(),
        "rules",
        b"web proto udp dst 10.71.2.0/24 dport 10\n",
    );
    let b2 = format!("ifindex {}", h.b_index[1]);
    let mut caps = [
        h.spawn_b(&[
            "capture",
            "-i",
            "any",
            "-q",
            "-w",
            &s(&port9),
            "-f",
            "udp and port 9",
        ]),
        h.spawn_b(&["capture", "-i", "any", "-q", "-w", &s(&only_b2), &b2]),
        h.spawn_b(&[
            "capture",
            "-i",
            "any",
            "-q",
            "-w",
            &s(&not_out),
            "udp",
            "and",
            "not",
            "outbound",
        ]),
        h.spawn_b(&[
            "capture",
            "-i",
            "any",
            "-q",
            "-w",
            &s(&ruled),
            "--rules",
            &s(&rules),
            "udp",
        ]),
    ];
    for c in caps.iter_mut() {
        wait_capturing_any(c, 1);
    }
    for k in 0..2 {
        h.send(k, 10, 9, 1);
        h.send(k, 7, 10, 1);
    }
    h.send_lo(4);
    for (c, n) in caps.iter().zip([24, 17, 38, 7]) {
        wait_received(&h, c, n);
    }
    for c in caps {
        stop(c);
    }
    let fields = ["sll.ifindex", "ip.dst", "udp.dstport"];
    let count = |p: &Path| tshark_fields(p, &fields).len();
    // 10 + 10 from the veths, 4 coming in on loopback.
    assert_eq!(count(&port9), 24);
    assert!(
        tshark_fields(&port9, &fields).iter().all(|r| r[2] == "9"),
        "port 9 only"
    );
    // The interface index is an ancillary load in the kernel.
    let b2_rows = tshark_fields(&only_b2, &fields);
    assert_eq!(b2_rows.len(), 17);
    assert!(b2_rows.iter().all(|r| r[0] == h.b_index[1].to_string()));
    // So is the direction: nothing going out is left.
    assert_eq!(count(&not_out), 34 + 4);
    assert!(
        tshark_fields(&not_out, &["sll.pkttype"])
            .iter()
            .all(|r| r[0] != "4")
    );
    // Rules run behind the expression, in the kernel and in user space alike.
    let r = tshark_fields(&ruled, &fields);
    assert_eq!(r.len(), 7, "{r:?}");
    assert!(r.iter().all(|r| r[1] == "10.71.2.2" && r[2] == "10"));
    // A filter reading a part of the cooked header the kernel does not have is refused at start.
    let o = run_limited(
        &mut h.tapflow_b(&[
            "capture",
            "-i",
            "any",
            "-q",
            "-w",
            "/dev/null",
            "ether host 02:00:00:00:00:01",
        ]),
        Duration::from_secs(20),
    );
    assert_clean_error(&o, None, &["any", "filter"], "ether host on any");
    let o = run_limited(
        &mut h.tapflow_b(&["capture", "-i", "any", "-s", "20", "-w", "/dev/null"]),
        Duration::from_secs(20),
    );
    assert_clean_error(&o, Some(2), &["cooked header"], "-s 20 on any");
}

#[test]
fn flows_on_any_are_the_flows_of_each_interface() {
    let h = Hosts::new();
    let dir = tempfile::tempdir().unwrap();
    let json = |name: &str| dir.path().join(format!("{name}.json"));
    let mut caps = vec![h.spawn_b(&["flows", "-i", "any", "-q", "--json", &s(&json("any"))])];
    for k in 0..2 {
        caps.push(h.spawn_b(&["flows", "-i", &h.b[k], "-q", "--json", &s(&json(&h.b[k]))]));
    }
    wait_capturing_any(&mut caps[0], 1);
    for c in caps.iter_mut().skip(1) {
        wait_capturing(c, 1);
    }
    h.send(0, 40, 9, 4);
    h.send(1, 24, 53, 3);
    wait_received(&h, &caps[0], 64);
    std::thread::sleep(Duration::from_millis(300));
    for c in caps {
        stop(c);
    }
    let flows = |p: &Path| -> Vec<(String, u64, String, u64, u64, u64)> {
        let mut v: Vec<_> = std::fs::read_to_string(p)
            .unwrap()
            .lines()
            .map(|l| {
                let f = |k: &str| json_at(l, k);
                (
                    f("src").as_str().unwrap().to_string(),
                    f("sport").as_u64().unwrap(),
                    f("dst").as_str().unwrap().to_string(),
                    f("dport").as_u64().unwrap(),
                    f("packets").as_u64().unwrap(),
                    f("octets").as_u64().unwrap(),
                )
            })
            .collect();
        v.sort();
        v
    };
    let on_any = flows(&json("any"));
    let mut each = flows(&json(&h.b[0]));
    each.extend(flows(&json(&h.b[1])));
    each.sort();
    assert_eq!(on_any.len(), 7, "{on_any:?}");
    assert_eq!(on_any, each);
    assert_eq!(on_any.iter().map(|f| f.4).sum::<u64>(), 64);
}

#[test]
fn any_streams_into_tshark() {
    let h = Hosts::new();
    let cap = h
        .tapflow_b(&["capture", "-i", "any", "-q", "-w", "-"])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut cap = ChildGuard::new(cap, "tapflow capture -i any -w -");
    let pipe = cap.child.as_mut().unwrap().stdout.take().unwrap();
    let tshark = Command::new("tshark")
        .args([
            "-n",
            "-l",
            "-r",
            "-",
            "-T",
            "fields",
            "-e",
            "sll.ifindex",
            "-e",
            "ip.src",
        ])
        .stdin(pipe)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("tshark");
    let mut tshark = ChildGuard::new(tshark, "tshark -r -");
    let mut out = tshark.child.as_mut().unwrap().stdout.take().unwrap();
    let reader = std::thread::spawn(move || {
        let mut text = String::new();
        use std::io::Read;
        let _ = out.read_to_string(&mut text);
        text
    });
    wait_capturing_any(&mut cap, 1);
    h.send(0, 5, 9, 1);
    h.send(1, 7, 9, 1);
    wait_received(&h, &cap, 12);
    let err = stop(cap);
    assert!(err.contains("12 received, 12 recorded"), "{err}");
    tshark.wait_limited(Duration::from_secs(30));
    let out = reader.join().unwrap();
    let got = tally(
        out.lines()
            .map(|l| l.split('\t').map(str::to_string).collect())
            .collect(),
    );
    let want: BTreeMap<Vec<String>, u64> = [
        (row(&[&h.b_index[0].to_string(), "10.71.1.1"]), 5),
        (row(&[&h.b_index[1].to_string(), "10.71.2.1"]), 7),
    ]
    .into_iter()
    .collect();
    assert_eq!(got, want);
}

#[test]
fn list_interfaces_ends_with_any() {
    let h = Hosts::new();
    let out = run_ok(&mut h.tapflow_b(&["capture", "-D"]));
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines.len(), 4, "{out}");
    assert!(lines[0].starts_with("1.lo ["), "{out}");
    assert!(lines[3].starts_with("0.any ("), "{out}");
    assert!(
        out.contains(&format!("{}.{} [Up, Running]", h.b_index[0], h.b[0])),
        "{out}"
    );
}

#[test]
fn forwarded_records_keep_the_cooked_link_type() {
    let h = Hosts::new();
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("recv.pcapng");
    let mut recv = h.spawn_b(&["recv", "-q", "--listen", "127.0.0.1:5400", "-w", &s(&out)]);
    wait_udp_bound(&mut recv, 5400);
    // The datagrams to the receiver cross loopback too: the filter leaves them out.
    let mut cap = h.spawn_b(&[
        "capture",
        "-i",
        "any",
        "-q",
        "--forward",
        "127.0.0.1:5400",
        "udp",
        "port",
        "9",
    ]);
    wait_capturing_any(&mut cap, 1);
    h.send(0, 10, 9, 1);
    h.send(1, 6, 9, 1);
    wait_received(&h, &cap, 16);
    let err = stop(cap);
    assert!(err.contains("16 recorded"), "{err}");
    std::thread::sleep(Duration::from_millis(300));
    stop(recv);
    let got = tally(tshark_fields(&out, &["sll.ifindex", "ip.src", "frame.len"]));
    let want: BTreeMap<Vec<String>, u64> = [
        (row(&[&h.b_index[0].to_string(), "10.71.1.1", "66"]), 10),
        (row(&[&h.b_index[1].to_string(), "10.71.2.1", "66"]), 6),
    ]
    .into_iter()
    .collect();
    assert_eq!(got, want);
}
