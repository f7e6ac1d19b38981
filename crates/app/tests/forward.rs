//! Header forwarding end to end: `tapflow capture --forward` on a probe, `tapflow recv` on
//! collectors, each in its own network namespace (or a private loopback). Every packet must be
//! recorded exactly once or counted as lost, with the place. Needs root; fails without it.

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::net::{SocketAddr, UdpSocket};
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::time::Duration;

use common::*;
use tapflow_wire::datagram::{Builder, Datagram, Header};
use tapflow_wire::record::{ControlField, Flags, push_record};

static N: AtomicU32 = AtomicU32::new(0);

fn s(p: &Path) -> String {
    p.to_string_lossy().into_owned()
}

/// A namespace of these tests: `tf-PID-fwTAG-N`, loopback up, IPv6 off.
fn ns(tag: &str) -> Netns {
    Netns::new(&format!("fw{tag}")).without_ipv6()
}

/// Joins `a` and `b` with a veth pair named `ia`/`ib`, addresses optional (with /24).
fn link(a: &Netns, ia: &str, b: &Netns, ib: &str, addrs: Option<(&str, &str)>) {
    ip(&[
        "-n", &a.name, "link", "add", ia, "type", "veth", "peer", "name", ib, "netns", &b.name,
    ]);
    for (ns, ifn, addr) in [(a, ia, addrs.map(|x| x.0)), (b, ib, addrs.map(|x| x.1))] {
        disable_ipv6(&ns.name, ifn);
        if let Some(addr) = addr {
            ip(&[
                "-n",
                &ns.name,
                "addr",
                "add",
                &format!("{addr}/24"),
                "dev",
                ifn,
            ]);
        }
        ip(&["-n", &ns.name, "link", "set", ifn, "up"]);
    }
}

/// Starts `tapflow recv` in `ns` on `listen`, writing `out`.
fn start_recv(ns: &Netns, listen: &str, out: &Path, json: &Path, extra: &[&str]) -> ChildGuard {
    let (o, j) = (s(out), s(json));
    let mut a = vec![
        "recv",
        "-q",
        "--listen",
        listen,
        "-w",
        &o,
        "--summary-json",
        &j,
    ];
    a.extend_from_slice(extra);
    let mut g = VethPair::spawn(&mut ns.tapflow(&a));
    let port: u16 = listen.rsplit(':').next().unwrap().parse().unwrap();
    wait_udp_bound(&mut g, port);
    g
}

fn stop(g: &mut ChildGuard) -> String {
    g.signal(libc::SIGINT);
    let (st, err) = g.wait_output(Duration::from_secs(20));
    assert!(st.success(), "{} exited with {st}: {err}", g.what);
    assert!(!err.contains("panicked"), "{err}");
    err
}

/// One frame of connection `flow` in direction `rev`, IPv4 ident `id`: 100 bytes.
fn frame(flow: u16, rev: bool, id: u16) -> Vec<u8> {
    let mut f = vec![0u8; 100];
    f[..6].copy_from_slice(&[2, 0, 0, 0, 0, 2]);
    f[6..12].copy_from_slice(&[2, 0, 0, 0, 0, 1]);
    f[12..14].copy_from_slice(&[0x08, 0x00]);
    let (a, b) = ([198, 18, (flow >> 8) as u8, flow as u8], [198, 19, 0, 1]);
    let (pa, pb) = (1024 + flow, 80u16);
    let (src, dst, sp, dp) = if rev { (b, a, pb, pa) } else { (a, b, pa, pb) };
    let ipb = &mut f[14..34];
    ipb[0] = 0x45;
    ipb[2..4].copy_from_slice(&86u16.to_be_bytes());
    ipb[4..6].copy_from_slice(&id.to_be_bytes());
    ipb[8] = 64;
    ipb[9] = 17;
    ipb[12..16].copy_from_slice(&src);
    ipb[16..20].copy_from_slice(&dst);
    let mut sum = 0u32;
    for c in ipb.chunks(2) {
        sum += u32::from(u16::from_be_bytes([c[0], c[1]]));
    }
    while sum > 0xffff {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    ipb[10..12].copy_from_slice(&(!(sum as u16)).to_be_bytes());
    f[34..36].copy_from_slice(&sp.to_be_bytes());
    f[36..38].copy_from_slice(&dp.to_be_bytes());
    f[38..40].copy_from_slice(&66u16.to_be_bytes());
    f
}

/// A pcap of `k` frames over `flows` connections, both directions in turn; ident = index.
fn trace(path: &Path, k: usize, flows: u16) {
    let mut d = Vec::new();
    d.extend_from_slice(&[0xd4, 0xc3, 0xb2, 0xa1, 2, 0, 4, 0]);
    d.extend_from_slice(&[0; 8]);
    d.extend_from_slice(&65535u32.to_le_bytes());
    d.extend_from_slice(&1u32.to_le_bytes());
    for i in 0..k {
        let f = frame(
            (i % usize::from(flows)) as u16,
            (i / usize::from(flows)) % 2 == 1,
            i as u16,
        );
        d.extend_from_slice(&(1_700_000_000u32 + (i / 1000) as u32).to_le_bytes());
        d.extend_from_slice(&((i % 1000) as u32 * 1000).to_le_bytes());
        d.extend_from_slice(&(f.len() as u32).to_le_bytes());
        d.extend_from_slice(&(f.len() as u32).to_le_bytes());
        d.extend_from_slice(&f);
    }
    std::fs::write(path, d).unwrap();
}

/// Our frames in a capture: (ident, canonical connection, dropcount), in file order.
/// A recorded frame: ident, canonical connection ((address, port) of each end), dropcount.
type Rec = (u16, ([u8; 6], [u8; 6]), Option<u64>);

fn idents(path: &Path) -> Vec<Rec> {
    let cap = read_capture(path);
    assert!(cap.damage.is_none(), "{}: {:?}", path.display(), cap.damage);
    cap.packets
        .iter()
        .filter(|p| p.data.len() >= 38 && p.data[12..14] == [8, 0] && p.data[26] == 198)
        .map(|p| {
            let d = &p.data;
            let a: [u8; 6] = [d[26], d[27], d[28], d[29], d[34], d[35]];
            let b: [u8; 6] = [d[30], d[31], d[32], d[33], d[36], d[37]];
            (
                u16::from_be_bytes([d[18], d[19]]),
                (a.min(b), a.max(b)),
                p.dropcount,
            )
        })
        .collect()
}

/// A probe (P) fed by a traffic namespace (T) and two collectors (C1, C2) on their own links.
struct Topo {
    t: Netns,
    p: Netns,
    c: [Netns; 2],
    capture_if: String,
    feed_if: String,
}

impl Topo {
    fn new() -> Topo {
        let n = N.fetch_add(1, Ordering::SeqCst);
        let pre = format!("f{}{n}", std::process::id() % 100_000);
        let topo = Topo {
            t: ns("t"),
            p: ns("p"),
            c: [ns("c1"), ns("c2")],
            capture_if: format!("{pre}p"),
            feed_if: format!("{pre}t"),
        };
        link(&topo.t, &topo.feed_if, &topo.p, &topo.capture_if, None);
        for (k, c) in topo.c.iter().enumerate() {
            let net = format!("10.77.{}", k + 1);
            link(
                &topo.p,
                &format!("{pre}p{k}"),
                c,
                &format!("{pre}c{k}"),
                Some((&format!("{net}.1"), &format!("{net}.2"))),
            );
            // A static neighbour, as the paper advises: datagrams queued behind ARP resolution
            // could be dropped without anyone counting them.
            let mac = format!("02:77:00:00:00:{:02x}", k + 1);
            ip(&[
                "-n",
                &c.name,
                "link",
                "set",
                "dev",
                &format!("{pre}c{k}"),
                "address",
                &mac,
            ]);
            ip(&[
                "-n",
                &topo.p.name,
                "neigh",
                "replace",
                &format!("{net}.2"),
                "lladdr",
                &mac,
                "dev",
                &format!("{pre}p{k}"),
                "nud",
                "permanent",
            ]);
        }
        topo
    }

    /// Forwards a replay of `k` frames over `flows` connections to both collectors; returns the
    /// collectors' files and JSON summaries and the probe's JSON summary.
    fn run(
        &self,
        dir: &Path,
        k: usize,
        flows: u16,
        extra: &[&str],
    ) -> (Vec<std::path::PathBuf>, Vec<String>, String) {
        let input = dir.join("in.pcap");
        trace(&input, k, flows);
        let mut recvs = Vec::new();
        let mut outs = Vec::new();
        let mut jsons = Vec::new();
        for (i, c) in self.c.iter().enumerate() {
            let out = dir.join(format!("c{i}.pcapng"));
            let json = dir.join(format!("c{i}.json"));
            recvs.push(start_recv(c, "0.0.0.0:5000", &out, &json, &[]));
            outs.push(out);
            jsons.push(json);
        }
        let local = dir.join("local.pcapng");
        let pj = dir.join("probe.json");
        let (l, j) = (s(&local), s(&pj));
        let mut a = vec![
            "capture",
            "-i",
            &self.capture_if,
            "-q",
            "-s",
            "64",
            "-w",
            &l,
            "--summary-json",
            &j,
            "--forward",
            "10.77.1.2:5000,10.77.2.2:5000",
            "--probe-id",
            "7",
        ];
        a.extend_from_slice(extra);
        let mut cap = VethPair::spawn(&mut self.p.tapflow(&a));
        wait_capturing(&mut cap, 1);
        let inp = s(&input);
        let o = run_limited(
            &mut self.t.tapflow(&[
                "gen",
                "-i",
                &self.feed_if,
                "-q",
                "--replay",
                &inp,
                "-c",
                &k.to_string(),
            ]),
            Duration::from_secs(30),
        );
        assert!(
            o.status.success(),
            "gen: {}",
            String::from_utf8_lossy(&o.stderr)
        );
        std::thread::sleep(Duration::from_millis(300));
        let err = stop(&mut cap);
        assert!(err.contains("tapflow: forwarded "), "{err}");
        std::thread::sleep(Duration::from_millis(200));
        for g in &mut recvs {
            stop(g);
        }
        assert_eq!(read_capture(&local).packets.len(), k, "local -w file");
        let jsons = jsons
            .iter()
            .map(|j| std::fs::read_to_string(j).unwrap())
            .collect();
        (outs, jsons, std::fs::read_to_string(&pj).unwrap())
    }
}

/// `--balance flow`: every packet reaches exactly one collector, each connection (both
/// directions) entirely at one, and the probe's and collectors' counts agree.
#[test]
fn flow_balance_keeps_connections_whole_and_delivers_every_packet_once() {
    const K: usize = 6000;
    let topo = Topo::new();
    let dir = tempfile::tempdir().unwrap();
    let (outs, jsons, probe) = topo.run(dir.path(), K, 24, &[]);
    assert_eq!(json_u64(&probe, "recorded"), K as u64, "{probe}");
    assert_eq!(json_u64(&probe, "forward.records"), K as u64, "{probe}");
    assert_eq!(json_u64(&probe, "forward.failed"), 0, "{probe}");
    let mut seen = vec![None; K];
    let mut conn_at: BTreeMap<_, BTreeSet<usize>> = BTreeMap::new();
    for (c, (out, json)) in outs.iter().zip(&jsons).enumerate() {
        let recs = idents(out);
        assert_eq!(json_u64(json, "records"), recs.len() as u64, "{json}");
        assert_eq!(json_u64(json, "lost_in_transit"), 0, "{json}");
        assert_eq!(json_u64(json, "lost_on_probe"), 0, "{json}");
        assert_eq!(json_u64(json, "bad"), 0, "{json}");
        assert!(
            !recs.is_empty(),
            "collector {c} got nothing: 24 flows all hashed to one side"
        );
        for (id, conn, drops) in recs {
            assert_eq!(drops, None);
            assert!(
                seen[usize::from(id)].replace(c).is_none(),
                "ident {id} twice"
            );
            conn_at.entry(conn).or_default().insert(c);
        }
    }
    assert!(seen.iter().all(Option::is_some), "missing idents");
    assert_eq!(conn_at.len(), 24);
    for (conn, at) in conn_at {
        assert_eq!(at.len(), 1, "connection {conn:?} split over collectors");
    }
}

/// `--balance rr`: whole datagrams alternate between the collectors.
#[test]
fn round_robin_alternates_datagrams() {
    const K: usize = 3000;
    let topo = Topo::new();
    let dir = tempfile::tempdir().unwrap();
    // 576-byte packets: 548 − 56 = 492 bytes of records, 6 records of 80 bytes per datagram.
    let (outs, jsons, probe) = topo.run(dir.path(), K, 8, &["--balance", "rr", "--mtu", "576"]);
    assert_eq!(json_u64(&probe, "forward.records"), K as u64, "{probe}");
    let mut at = vec![usize::MAX; K];
    let mut datagrams = Vec::new();
    for (c, (out, json)) in outs.iter().zip(&jsons).enumerate() {
        assert_eq!(json_u64(json, "lost_in_transit"), 0, "{json}");
        datagrams.push(json_u64(json, "datagrams"));
        for (id, _, _) in idents(out) {
            at[usize::from(id)] = c;
        }
    }
    assert!(at.iter().all(|&c| c < 2), "missing records");
    // Runs of consecutive records at one collector: one per datagram, never two datagrams in a
    // row to the same collector.
    let runs: Vec<usize> = at.chunk_by(|a, b| a == b).map(<[usize]>::len).collect();
    assert_eq!(
        runs.len() as u64,
        datagrams[0] + datagrams[1],
        "{datagrams:?}"
    );
    assert!(datagrams[0].abs_diff(datagrams[1]) <= 1, "{datagrams:?}");
    assert!(
        runs.iter().all(|&n| n <= 6),
        "a run longer than one datagram"
    );
    assert!(runs.len() >= K / 6);
}

/// A relay between probe and collector drops every 5th datagram: the collector reports exactly
/// the records lost, and `epb_dropcount` sits on the first record after each gap.
#[test]
fn relay_dropping_every_fifth_datagram_is_reported_exactly() {
    const K: usize = 4000;
    let ns = ns("r");
    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("in.pcap");
    trace(&input, K, 16);
    let out = dir.path().join("r.pcapng");
    let json = dir.path().join("r.json");
    let mut recv = start_recv(&ns, "127.0.0.1:6000", &out, &json, &[]);
    let done = Arc::new(AtomicBool::new(false));
    let (tx, rx) = std::sync::mpsc::channel();
    let relay = {
        let (name, done) = (ns.name.clone(), Arc::clone(&done));
        std::thread::spawn(move || {
            tapflow_sys::netns::enter(&name).unwrap();
            let inb = tapflow_sys::udp::UdpSocket::bind("127.0.0.1:6001".parse().unwrap()).unwrap();
            inb.set_rcvbuf(32 << 20).unwrap();
            inb.set_read_timeout(Duration::from_millis(50)).unwrap();
            tx.send(()).unwrap();
            let out = UdpSocket::bind("127.0.0.1:0").unwrap();
            let mut b = tapflow_sys::udp::RecvBatch::new();
            let mut n = 0u64;
            // (first ident after the gap is filled in later) dropped (first ident, records).
            let mut dropped: Vec<(u16, u16)> = Vec::new();
            while !done.load(Ordering::Relaxed) {
                inb.recv_batch(&mut b, true).unwrap();
                for i in 0..b.len() {
                    let (d, _, _) = b.get(i).unwrap();
                    n += 1;
                    if n.is_multiple_of(5) {
                        let dg = Datagram::parse(d).unwrap();
                        let first = tapflow_wire::record::Records::new(dg.records())
                            .next()
                            .unwrap()
                            .unwrap()
                            .1;
                        dropped.push((
                            u16::from_be_bytes([first[18], first[19]]),
                            dg.header().count,
                        ));
                    } else {
                        out.send_to(d, "127.0.0.1:6000").unwrap();
                    }
                }
            }
            (n, dropped)
        })
    };
    rx.recv().unwrap();
    let inp = s(&input);
    run_ok(&mut ns.tapflow(&[
        "capture",
        "-r",
        &inp,
        "-q",
        "-s",
        "64",
        "--forward",
        "127.0.0.1:6001",
        "--mtu",
        "1500",
    ]));
    std::thread::sleep(Duration::from_millis(300));
    done.store(true, Ordering::Relaxed);
    let (n, dropped) = relay.join().unwrap();
    std::thread::sleep(Duration::from_millis(200));
    stop(&mut recv);
    let text = std::fs::read_to_string(&json).unwrap();
    let lost: u64 = dropped.iter().map(|d| u64::from(d.1)).sum();
    assert!(
        n >= 100 && dropped.len() as u64 == n / 5,
        "{n} datagrams, {} dropped",
        dropped.len()
    );
    assert_eq!(json_u64(&text, "lost_in_transit"), lost, "{text}");
    assert_eq!(json_u64(&text, "records"), K as u64 - lost, "{text}");
    assert_eq!(json_u64(&text, "datagrams"), n - n / 5, "{text}");
    // In the file: a dropcount exactly where each dropped datagram's records would have been.
    let recs = idents(&out);
    let marks: Vec<(u16, u64)> = recs.iter().filter_map(|r| r.2.map(|d| (r.0, d))).collect();
    let want: Vec<(u16, u64)> = dropped
        .iter()
        .filter(|(first, c)| usize::from(*first) + usize::from(*c) < K)
        .map(|&(first, c)| (first + c, u64::from(c)))
        .collect();
    assert_eq!(marks, want);
    let ids: Vec<u16> = recs.iter().map(|r| r.0).collect();
    assert!(ids.windows(2).all(|w| w[0] < w[1]), "records out of order");
}

/// IPv6 end to end: a probe forwards to two collectors on `[::1]`, balanced by flow; each
/// accepts only `::1/128`; every record arrives exactly once, none lost.
#[test]
fn ipv6_collectors_receive_every_record() {
    const K: usize = 5000;
    let ns = Netns::new("fw6");
    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("in.pcap");
    trace(&input, K, 16);
    let mut recvs = Vec::new();
    for (c, port) in [6100u16, 6101].into_iter().enumerate() {
        let (out, json) = (
            dir.path().join(format!("c{c}.pcapng")),
            dir.path().join(format!("c{c}.json")),
        );
        let listen = format!("[::1]:{port}");
        let g = start_recv(&ns, &listen, &out, &json, &["--allow", "::1/128"]);
        recvs.push((g, out, json));
    }
    let probe_json = dir.path().join("p.json");
    let o = run_limited(
        ns.cmd(bin())
            .args(["capture", "-q", "-s", "64", "-r"])
            .arg(&input)
            .args(["--forward", "[::1]:6100,[::1]:6101", "--summary-json"])
            .arg(&probe_json),
        Duration::from_secs(30),
    );
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let probe = std::fs::read_to_string(&probe_json).unwrap();
    assert_eq!(json_u64(&probe, "forward.records"), K as u64, "{probe}");
    std::thread::sleep(Duration::from_millis(300));
    let mut seen = vec![0u32; K];
    for (mut g, out, json) in recvs {
        stop(&mut g);
        let text = std::fs::read_to_string(&json).unwrap();
        assert_eq!(json_u64(&text, "lost_in_transit"), 0, "{text}");
        assert_eq!(json_u64(&text, "bad"), 0, "{text}");
        let recs = idents(&out);
        assert!(!recs.is_empty(), "a collector got nothing: {text}");
        for (id, _, _) in recs {
            seen[usize::from(id)] += 1;
        }
    }
    assert!(seen.iter().all(|&n| n == 1), "a record missing or twice");
}

fn good_datagram(seq: u64, first: u16, count: u16) -> Vec<u8> {
    let mut recs = Vec::new();
    for i in 0..count {
        let f = frame(1, false, first + i);
        push_record(
            &mut recs,
            ControlField::new(1, Flags::default(), 0, 0, 100),
            &f[..64],
        );
    }
    let mut buf = Vec::new();
    let mut b = Builder::start(&mut buf);
    b.push_raw(&recs);
    b.seal(&Header {
        count,
        probe: 9,
        session: 1,
        linktype: 1,
        snaplen: 64,
        sequence: seq,
        records_before: u64::from(first),
        ..Header::default()
    });
    buf
}

/// Random and hostile datagrams are counted per source and dropped; sources outside `--allow`
/// are refused; good datagrams around them are still written.
#[test]
fn hostile_datagrams_are_counted_and_the_receiver_keeps_writing() {
    let ns = ns("h");
    ip(&["-n", &ns.name, "addr", "add", "10.99.0.1/32", "dev", "lo"]);
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("h.pcapng");
    let json = dir.path().join("h.json");
    let mut recv = start_recv(
        &ns,
        "0.0.0.0:7000",
        &out,
        &json,
        &["--allow", "127.0.0.0/8"],
    );
    let name = ns.name.clone();
    let (bad, refused) = std::thread::spawn(move || {
        tapflow_sys::netns::enter(&name).unwrap();
        let to: SocketAddr = "127.0.0.1:7000".parse().unwrap();
        let good = UdpSocket::bind("127.0.0.1:0").unwrap();
        let mut hostile: Vec<Vec<u8>> =
            vec![vec![], vec![0x54, 0x46, 0x42, 0x44, 1], b"TFBD".to_vec()];
        let g = good_datagram(0, 0, 3);
        let edits: [(usize, u8); 6] = [(0, 0), (4, 9), (5, 1), (5, 200), (7, 9), (67, 255)];
        for (at, v) in edits {
            let mut x = g.clone();
            x[at] = v;
            hostile.push(x);
        }
        hostile.push(g[..g.len() - 20].to_vec());
        let mut seed = 0x9e37_79b9_7f4a_7c15u64;
        for i in 0..200 {
            let len = 1 + (i * 37) % 1400;
            let mut x = Vec::with_capacity(len);
            for _ in 0..len {
                seed ^= seed << 13;
                seed ^= seed >> 7;
                seed ^= seed << 17;
                x.push(seed as u8);
            }
            if i % 2 == 0 {
                x[..4.min(len)].copy_from_slice(&b"TFBD"[..4.min(len)]);
            }
            hostile.push(x);
        }
        let mut first = 0u16;
        for (k, h) in hostile.iter().enumerate() {
            good.send_to(h, to).unwrap();
            if k % 20 == 0 {
                good.send_to(&good_datagram(u64::from(first / 3), first, 3), to)
                    .unwrap();
                first += 3;
            }
        }
        let other = UdpSocket::bind("10.99.0.1:0").unwrap();
        for _ in 0..5 {
            other
                .send_to(&good_datagram(0, 0, 3), "10.99.0.1:7000")
                .unwrap();
        }
        good.send_to(&good_datagram(u64::from(first / 3), first, 3), to)
            .unwrap();
        (hostile.len() as u64, 5u64)
    })
    .join()
    .unwrap();
    std::thread::sleep(Duration::from_millis(300));
    assert!(recv.try_wait().is_none(), "receiver died");
    stop(&mut recv);
    let text = std::fs::read_to_string(&json).unwrap();
    assert_eq!(json_u64(&text, "bad"), bad, "{text}");
    assert_eq!(json_u64(&text, "refused"), refused, "{text}");
    let good_records = 3 * (bad.div_ceil(20) + 1);
    assert_eq!(json_u64(&text, "records"), good_records, "{text}");
    assert_eq!(json_u64(&text, "lost_in_transit"), 0, "{text}");
    assert_eq!(capinfos_count(&out), good_records);
    let info = capinfos(&out);
    assert!(info.contains("probe 9 at 127.0.0.1"), "{info}");
}
