//! `tapflow flows`: the flow meter against real traces, traces built with the packet builder,
//! and a real kernel. tshark is the oracle for what the traces hold; live tests run `tapflow gen`
//! and `tapflow flows` across a veth pair in private namespaces (root needed; they fail, never
//! skip, without it). Tests of the corpus's real traces print one `skipped:` line without it.

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::net::Ipv4Addr;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use common::traffic::{self, Packet};
use common::*;
use tapflow_wire::LinkType;
use tapflow_wire::build::{self, FrameSpec, L4};
use tapflow_wire::ethernet::EthernetAddress;
use tapflow_wire::{ipfix, pcap};

/// One CSV flow record, by column name.
type Row = BTreeMap<String, String>;

fn read_csv(path: &Path) -> Vec<Row> {
    let text = std::fs::read_to_string(path).unwrap();
    let mut lines = text.lines();
    let header: Vec<String> = lines.next().unwrap().split(',').map(String::from).collect();
    lines
        .map(|l| {
            let f: Vec<&str> = l.split(',').collect();
            assert_eq!(f.len(), header.len(), "CSV line {l:?}");
            header
                .iter()
                .cloned()
                .zip(f.iter().map(|s| s.to_string()))
                .collect()
        })
        .collect()
}

fn num(r: &Row, k: &str) -> u64 {
    r[k].parse().unwrap_or_else(|_| panic!("{k} = {:?}", r[k]))
}

/// Runs `tapflow flows -r FILE -q --csv CSV EXTRA…`.
fn run_flows(file: &Path, csv: &Path, extra: &[&str]) -> std::process::Output {
    run_flows_with(Command::new(bin()), file, csv, extra)
}

/// [`run_flows`] with `tapflow` as given (here, or in a namespace).
fn run_flows_with(
    mut tapflow: Command,
    file: &Path,
    csv: &Path,
    extra: &[&str],
) -> std::process::Output {
    tapflow
        .args(["flows", "-q", "-r"])
        .arg(file)
        .arg("--csv")
        .arg(csv)
        .args(extra);
    run_limited(&mut tapflow, Duration::from_secs(120))
}

/// Runs `tapflow flows -r FILE -q --csv OUT EXTRA…` and returns the records and stderr.
fn flows_of(file: &Path, extra: &[&str]) -> (Vec<Row>, String) {
    flows_of_with(Command::new(bin()), file, extra)
}

/// [`flows_of`] with `tapflow` as given (here, or in a namespace).
fn flows_of_with(tapflow: Command, file: &Path, extra: &[&str]) -> (Vec<Row>, String) {
    let dir = tempfile::tempdir().unwrap();
    let csv = dir.path().join("f.csv");
    let o = run_flows_with(tapflow, file, &csv, extra);
    let err = String::from_utf8_lossy(&o.stderr).into_owned();
    assert!(o.status.success(), "tapflow flows {extra:?}: {err}");
    (read_csv(&csv), err)
}

/// A loopback UDP port nobody uses: bind, read it, let go.
fn free_udp_port() -> u16 {
    std::net::UdpSocket::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// Packets and IP bytes per (IPv6?, protocol).
type Totals = BTreeMap<(bool, u8), (u64, u64)>;

fn our_totals(rows: &[Row]) -> Totals {
    let mut t = Totals::new();
    for r in rows {
        let e = t
            .entry((r["src"].contains(':'), num(r, "proto") as u8))
            .or_default();
        e.0 += num(r, "packets") + num(r, "rev_packets");
        e.1 += num(r, "octets") + num(r, "rev_octets");
    }
    t
}

/// tshark's view: the outermost IP header's protocol and length, fragments not reassembled.
fn tshark_totals(file: &Path) -> Totals {
    let o = run_limited(
        std::process::Command::new("tshark")
            .arg("-n")
            .arg("-r")
            .arg(file)
            .args(["-o", "ip.defragment:FALSE", "-o", "ipv6.defragment:FALSE"])
            .args(["-T", "fields", "-E", "separator=\t", "-E", "occurrence=f"])
            .args([
                "-e",
                "ip.proto",
                "-e",
                "ip.len",
                "-e",
                "ipv6.nxt",
                "-e",
                "ipv6.plen",
            ]),
        Duration::from_secs(120),
    );
    let text = String::from_utf8_lossy(&o.stdout);
    let rows = text.lines().map(|l| l.split('\t').collect::<Vec<_>>());
    let mut t = Totals::new();
    for r in rows {
        let (v6, proto, len) = match (r[0], r[2]) {
            ("", "") => continue,
            ("", nxt) => (true, nxt, r[3].parse::<u64>().unwrap() + 40),
            (p, _) => (false, p, r[1].parse().unwrap()),
        };
        let e = t.entry((v6, proto.parse().unwrap())).or_default();
        e.0 += 1;
        e.1 += len;
    }
    t
}

/// Corpus files whose per-protocol totals differ from tshark's, and why (docs/flows.md has
/// the same list). Any other difference fails the test, and so does one of these agreeing.
const EXPLAINED: &[(&str, &str)] = &[
    (
        "composite-nfstream-163apps-backtoback.pcap",
        "IPv6 extension headers (we count the upper layer, tshark's ipv6.nxt is the first next \
         header) and IPv4-in-IPv6 (tshark's first ip.proto is the inner header's)",
    ),
    (
        "ndpi-gnutella.pcap",
        "IPv6 hop-by-hop headers before ICMPv6",
    ),
    (
        "ustc-tfc2016-tinba-malware.pcap",
        "IPv6 hop-by-hop headers before ICMPv6",
    ),
    (
        "pcapplusplus-ip6-fragments.pcap",
        "IPv6 fragment headers before UDP",
    ),
    (
        "zeek-ipv6-fragmented-dns.pcap",
        "IPv6 fragment headers before UDP",
    ),
    (
        "tcpdump-ipv6-jumbogram-1.pcap",
        "a jumbogram: payload length 0, we count the wire length",
    ),
    (
        "ndpi-fuzz-2006-06-26-2594.pcap",
        "a fuzzed IPv4 header tshark does not decode, with IPv6 inside",
    ),
    (
        "tcpreplay-test.pcap",
        "Ethernet over MPLS pseudowires with a control word: tshark decodes them by heuristic, \
         we count them as not IP",
    ),
    (
        "zeek-ip-bogus-header-len.pcap",
        "an IPv4 total length below the header length: we count the header's (bogus) value",
    ),
];

/// Traces built from 200 conversations, in `dir`: Ethernet with VLAN tags, ICMP, IPv4
/// fragments and ARP among the conversations' frames; the conversations alone under Linux
/// cooked v2, raw IP and BSD loopback framing; a pcapng of three link types; and the Ethernet
/// trace cut short in the middle of a packet.
fn built_traces(dir: &Path) -> Vec<PathBuf> {
    let plain = traffic::conversations(0, 200, 10, T0, 1_000_000);
    let mut ether = Vec::new();
    for (i, p) in plain.iter().enumerate() {
        let f = &p.data;
        let v6 = f[12..14] == [0x86, 0xdd];
        let frames = match i % 20 {
            3 => vec![traffic::with_vlans(f, &[10 + i as u16 % 3])],
            4 => vec![traffic::with_vlans(f, &[20, 30])],
            5 => vec![traffic::with_protocol(f, if v6 { 58 } else { 1 })],
            6 if !v6 && f.len() > 600 => traffic::fragments_v4(f, 256, i as u16),
            7 => vec![traffic::arp_frame(), f.clone()],
            _ => vec![f.clone()],
        };
        ether.extend(frames.into_iter().map(|d| Packet::new(p.ts_ns, d)));
    }
    let pcap = |lt, p: &[Packet]| traffic::pcap_file(lt, true, false, 65535, p);
    let relinked = |lt| pcap(lt, &traffic::relink_all(&plain, lt, 65535));
    let ifaces = [
        (LinkType::Ethernet, 65535),
        (LinkType::LinuxSll, 65535),
        (LinkType::Raw, 65535),
    ];
    let ether_pcap = pcap(LinkType::Ethernet, &ether);
    [
        ("built-ether.pcap", ether_pcap.clone()),
        ("built-sll2.pcap", relinked(LinkType::LinuxSll2)),
        ("built-raw.pcap", relinked(LinkType::Raw)),
        ("built-null.pcap", relinked(LinkType::Null)),
        (
            "built-three.pcapng",
            traffic::pcapng_file(&ifaces, &traffic::on_interfaces(&plain, &ifaces)),
        ),
        (
            "built-cut-short.pcap",
            traffic::cut_short(&ether_pcap, &ether, 900),
        ),
    ]
    .iter()
    .map(|(name, bytes)| write_file(dir, name, bytes))
    .collect()
}

/// Every corpus capture: per-protocol packet and byte totals equal tshark's, except the
/// documented cases; damaged files end with a one-line error after their good records.
#[test]
fn corpus_totals_per_protocol_match_tshark() {
    let Some(dir) = corpus() else { return };
    let files: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    let checked = totals_match_tshark(&files, EXPLAINED);
    assert!(checked > 40, "only {checked} corpus files read");
}

/// The built traces: per-protocol totals equal tshark's, with no exception.
#[test]
fn built_totals_per_protocol_match_tshark() {
    let dir = tempfile::tempdir().unwrap();
    let files = built_traces(dir.path());
    let checked = totals_match_tshark(&files, &[]);
    assert_eq!(checked, files.len() - 1, "the cut one is damaged");
}

/// Meters each capture of `files`: per-protocol totals equal tshark's except for the files
/// `explained`, each of which must differ; a damaged file gives one clean error after the
/// flows before the damage. Returns how many files were read whole.
fn totals_match_tshark(files: &[PathBuf], explained: &[(&str, &str)]) -> usize {
    let mut differing = BTreeSet::new();
    let mut checked = 0;
    for path in files {
        let name = path.file_name().unwrap().to_string_lossy().into_owned();
        if !(name.ends_with(".pcap") || name.ends_with(".pcapng")) {
            continue;
        }
        let dir = tempfile::tempdir().unwrap();
        let csv = dir.path().join("f.csv");
        let o = run_flows(path, &csv, &[]);
        if !o.status.success() {
            // A damaged file: the accounting of the packets before the damage, then one error
            // line that names the file, the packet and the byte offset; their flows are written.
            let err = String::from_utf8_lossy(&o.stderr);
            assert_eq!(o.status.code(), Some(2), "{name}: {err}");
            let lines: Vec<&str> = err.lines().collect();
            let last = lines.last().copied().unwrap_or_default();
            assert!(
                last.starts_with("tapflow: error: ")
                    && last.contains(&name)
                    && last.contains("packet ")
                    && last.contains("byte offset"),
                "{name}: {err}"
            );
            assert_eq!(
                lines.iter().filter(|l| l.contains("error")).count(),
                1,
                "{err}"
            );
            let summary = lines
                .iter()
                .find(|l| l.contains(" received, "))
                .unwrap_or_else(|| panic!("{name}: no accounting line: {err}"));
            let n = |what: &str| -> u64 {
                let at = summary.find(what).unwrap();
                let head = summary[..at].trim_end();
                head.rsplit(' ').next().unwrap().parse().unwrap()
            };
            assert_eq!(n(" received"), n(" recorded"), "{name}: {summary}");
            assert!(csv.exists(), "{name}: no CSV after the error");
            continue;
        }
        let ours = our_totals(&read_csv(&csv));
        if ours != tshark_totals(path) {
            differing.insert(name);
        }
        checked += 1;
    }
    let explained: BTreeSet<String> = explained.iter().map(|(f, _)| f.to_string()).collect();
    assert_eq!(
        differing, explained,
        "files whose totals differ from tshark's vs the explained list"
    );
    checked
}

/// Later fragments join the flow of their datagram's first fragment (IPv4 and IPv6).
#[test]
fn fragments_join_their_first_fragments_flow() {
    let Some(dir) = corpus() else { return };
    let (rows, err) = flows_of(&dir.join("pcapplusplus-ip6-fragments.pcap"), &[]);
    let udp: Vec<&Row> = rows.iter().filter(|r| r["proto"] == "17").collect();
    assert!(!udp.is_empty());
    assert!(
        udp.iter().all(|r| r["sport"] != "0" && r["dport"] != "0"),
        "a fragment fell into a port-less flow: {udp:?}"
    );
    let packets: u64 = udp
        .iter()
        .map(|r| num(r, "packets") + num(r, "rev_packets"))
        .sum();
    assert_eq!(packets, 36, "{err}");
    assert!(err.contains("later fragments joined"), "{err}");

    let (rows, err) = flows_of(&dir.join("pcapplusplus-ip-frag.pcap"), &[]);
    let portless: u64 = rows
        .iter()
        .filter(|r| r["proto"] == "17" && r["sport"] == "0")
        .map(|r| num(r, "packets") + num(r, "rev_packets"))
        .sum();
    let joined: u64 = err
        .split(", ")
        .find_map(|p| p.strip_suffix(" later fragments joined"))
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no joined count in {err}"));
    assert!(joined > 1000, "{err}");
    assert!(portless <= 1, "{portless} UDP packets without ports: {err}");
}

/// The same with built datagrams, IPv4 and IPv6, each cut into six fragments: every fragment
/// is counted in its datagram's flow, under its ports, and each later one is counted as joined.
#[test]
fn built_fragments_join_their_first_fragments_flow() {
    let dir = tempfile::tempdir().unwrap();
    let mut packets = Vec::new();
    // Odd conversations are UDP; every third is IPv6.
    for n in (1..48).step_by(2) {
        let c = traffic::Conversation::nth(n);
        let f = c.frame(true, 1400, 0);
        let frags = match c.client {
            std::net::SocketAddr::V4(_) => traffic::fragments_v4(&f, 256, n as u16),
            std::net::SocketAddr::V6(_) => traffic::fragments_v6(&f, 256, n),
        };
        assert_eq!(frags.len(), 6);
        let ts = T0 + u64::from(n) * 1_000_000;
        packets.extend(frags.into_iter().map(|d| Packet::new(ts, d)));
    }
    let file = write_file(
        dir.path(),
        "fragments.pcap",
        &traffic::pcap_file(LinkType::Ethernet, true, false, 65535, &packets),
    );
    let (rows, err) = flows_of(&file, &[]);
    assert_eq!(rows.len(), 24, "{rows:?}");
    for r in &rows {
        assert_eq!(r["proto"], "17", "{r:?}");
        assert!(
            r["sport"] != "0" && r["dport"] != "0",
            "a port-less flow: {r:?}"
        );
        assert_eq!(num(r, "packets"), 6, "{r:?}");
    }
    assert!(err.contains("120 later fragments joined"), "{err}");
}

/// With a short active timeout a long trace is cut into records that each span less than it;
/// no packet is lost or counted twice by the cutting.
#[test]
fn no_record_spans_more_than_the_active_timeout() {
    let Some(dir) = corpus() else { return };
    active_timeout_cuts_records(&dir.join("nfstream-skype.pcap"));
}

/// The same over built conversations that each last a minute.
#[test]
fn no_record_of_a_built_trace_spans_more_than_the_active_timeout() {
    let dir = tempfile::tempdir().unwrap();
    active_timeout_cuts_records(&built_trace(dir.path(), "long.pcap", 30, 200, 10_000_000));
}

/// `--active-timeout 10` on `file`: more records, some ended by it, none spanning 10 s, the
/// same totals.
fn active_timeout_cuts_records(file: &Path) {
    let (whole, _) = flows_of(file, &[]);
    let (cut, err) = flows_of(file, &["--active-timeout", "10"]);
    let span = |r: &Row| {
        let first = match num(r, "rev_packets") {
            0 => num(r, "first_ns"),
            _ => num(r, "first_ns").min(num(r, "rev_first_ns")),
        };
        num(r, "last_ns").max(num(r, "rev_last_ns")) - first
    };
    assert!(cut.len() > whole.len(), "nothing was cut: {err}");
    assert!(cut.iter().any(|r| r["end_reason"] == "active"));
    for r in &cut {
        assert!(
            span(r) < 10_000_000_000,
            "record spans {} ns: {r:?}",
            span(r)
        );
    }
    assert_eq!(our_totals(&cut), our_totals(&whole));
}

#[test]
fn bad_flow_options_give_one_line_errors() {
    let dir = tempfile::tempdir().unwrap();
    let trace = built_trace(dir.path(), "t.pcap", 10, 5, 1_000_000);
    let t = trace.to_string_lossy();
    for (args, keys) in [
        (
            vec!["--export", "sflow://127.0.0.1:6343"],
            vec!["--export", "unknown scheme 'sflow'"],
        ),
        (vec!["--export", "ipfix://"], vec!["--export"]),
        (
            vec!["--idle-timeout", "sctp=5"],
            vec!["--idle-timeout", "unknown class 'sctp'"],
        ),
        (vec!["--idle-timeout", "udp=0"], vec!["--idle-timeout"]),
        (vec!["--active-timeout", "0"], vec!["--active-timeout"]),
        (vec!["--json", "-", "--csv", "-"], vec!["stdout"]),
        (
            vec!["--csv", "/nonexistent-dir/f.csv"],
            vec!["/nonexistent-dir/f.csv"],
        ),
    ] {
        let mut a = vec!["flows", "-r", &t, "-q"];
        a.extend(&args);
        let o = run_limited(&mut tapflow(&a), Duration::from_secs(30));
        assert_clean_error(&o, Some(2), &keys, &format!("{args:?}"));
    }
}

/// Live: two workers in one fanout group meter K packets of F UDP flows; every packet is in
/// exactly one record, each flow is one record, and the accounting line adds up.
#[test]
fn live_flows_on_two_workers_count_every_packet() {
    const K: u64 = 20_000;
    const F: usize = 16;
    let p = VethPair::new("flw");
    let dir = tempfile::tempdir().unwrap();
    let csv = dir.path().join("live.csv");
    let json = dir.path().join("sum.json");
    let (csv_s, json_s) = (
        csv.to_string_lossy().into_owned(),
        json.to_string_lossy().into_owned(),
    );
    let mut g = VethPair::spawn(&mut p.tapflow_b(&[
        "flows",
        "-i",
        &p.if_b,
        "-q",
        "--threads",
        "2",
        "--csv",
        &csv_s,
        "--summary-json",
        &json_s,
    ]));
    wait_capturing(&mut g, 2);
    p.send(
        &[
            "--count",
            &K.to_string(),
            "--flows",
            &F.to_string(),
            "--size",
            "128",
            "--rate",
            "200000",
        ],
        dir.path(),
        K,
    );
    std::thread::sleep(Duration::from_millis(500));
    g.signal(libc::SIGINT);
    let (status, err) = g.wait_output(Duration::from_secs(20));
    assert!(status.success(), "{err}");
    let sum = Summary::read(&json);
    sum.assert_adds_up();
    assert_eq!(sum.recorded, K, "{}", sum.text);
    let rows = read_csv(&csv);
    let udp: Vec<&Row> = rows.iter().filter(|r| r["proto"] == "17").collect();
    assert_eq!(udp.len(), F, "{rows:?}");
    let packets: u64 = udp.iter().map(|r| num(r, "packets")).sum();
    assert_eq!(packets, K);
    assert!(udp.iter().all(|r| r["end_reason"] == "forced"));
    assert_eq!(
        json_u64(&sum.text, "flows.records"),
        rows.len() as u64,
        "{}",
        sum.text
    );
}

/// A real collector as it comes: `nfcapd` with its default socket buffer (Linux's
/// `rmem_default`, 212992 bytes: 12 datagrams of 9000 bytes), in the foreground, alone in a
/// private namespace (so that namespace's UDP counters are its own), stopped with SIGTERM so it
/// finishes its file; `nfdump -I` reads what it stored.
struct Nfcapd {
    guard: ChildGuard,
    dir: tempfile::TempDir,
    ns: Netns,
}

/// nfcapd's port in its namespace.
const NFCAPD_PORT: u16 = 2055;

/// What nfcapd stored (`nfdump -I`, by key) and the datagrams the kernel dropped before it
/// read them.
struct Stored {
    stats: BTreeMap<String, String>,
    dropped: u64,
}

impl Stored {
    fn get(&self, k: &str) -> u64 {
        self.stats
            .get(k)
            .unwrap_or_else(|| panic!("no {k} in {:?}", self.stats))
            .parse()
            .unwrap()
    }
}

impl Nfcapd {
    fn start() -> Nfcapd {
        let ns = Netns::new("nfc");
        let dir = tempfile::tempdir().unwrap();
        let child = ns
            .cmd("nfcapd")
            .args(["-b", "127.0.0.1", "-p", &NFCAPD_PORT.to_string()])
            .args(["-t", "3600", "-w"])
            .arg(dir.path())
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .expect("nfcapd (apt-get install nfdump)");
        let mut guard = ChildGuard::new(child, "nfcapd");
        wait_udp_bound(&mut guard, NFCAPD_PORT);
        Nfcapd { guard, dir, ns }
    }

    /// Runs `tapflow flows -r FILE -q --csv … EXTRA…` in the collector's namespace.
    fn feed(&self, file: &Path, extra: &[&str]) -> (Vec<Row>, String) {
        flows_of_with(self.ns.tapflow(&[]), file, extra)
    }

    /// Waits until nfcapd has read every datagram queued on its socket (`rx_queue` 0 in its
    /// namespace's `/proc/net/udp`): a datagram still queued at SIGTERM would be lost.
    fn wait_drained(&mut self) {
        let port = format!(":{NFCAPD_PORT:04X}");
        self.guard
            .wait_until(Duration::from_secs(30), "read its socket empty", |pid| {
                std::fs::read_to_string(format!("/proc/{pid}/net/udp"))
                    .unwrap_or_default()
                    .lines()
                    .skip(1)
                    .any(|l| {
                        // sl local_address rem_address st tx_queue:rx_queue …
                        let f: Vec<&str> = l.split_whitespace().collect();
                        f.len() > 4
                            && f[1].ends_with(&port)
                            && f[4].split(':').nth(1) == Some("00000000")
                    })
            });
    }

    /// Stops the collector once it has read everything sent.
    fn stop(mut self) -> Stored {
        self.wait_drained();
        // InErrors: a full socket buffer (RcvbufErrors), memory pressure (MemErrors), bad sums.
        let dropped = self.ns.udp_counter("InErrors");
        self.guard.signal(libc::SIGTERM);
        let (status, err) = self.guard.wait_output(Duration::from_secs(10));
        assert!(status.success(), "nfcapd: {err}");
        let o = run_limited(
            std::process::Command::new("nfdump")
                .arg("-R")
                .arg(self.dir.path())
                .arg("-I"),
            Duration::from_secs(30),
        );
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        let stats = String::from_utf8_lossy(&o.stdout)
            .lines()
            .filter_map(|l| l.split_once(':'))
            .map(|(k, v)| (k.trim().to_string(), v.trim().to_string()))
            .collect();
        Stored { stats, dropped }
    }
}

/// Runs of [`export_by_default`] before it fails.
const RUNS: u32 = 3;

/// Exports `trace` in `scheme` with tapflow's defaults (pacing included) into a default
/// nfcapd; returns our records, our stderr and what nfcapd stored. Unpaced, every run drops
/// most datagrams. Paced by default, nfcapd's buffer lasts 72 ms (12 datagrams of 9000 bytes);
/// on a loaded machine it is now and then off the CPU for longer (this VM stalls a sleeping
/// process for over 100 ms about once a minute with both cores busy), so a run whose datagrams
/// the kernel dropped is run again, and [`RUNS`] such runs in a row fail.
fn export_by_default(trace: &Path, scheme: &str) -> (Vec<Row>, String, Stored) {
    let url = format!("{scheme}://127.0.0.1:{NFCAPD_PORT}");
    for run in 1..=RUNS {
        let col = Nfcapd::start();
        let (rows, err) = col.feed(trace, &["--export", &url]);
        let stored = col.stop();
        if stored.dropped == 0 {
            return (rows, err, stored);
        }
        eprintln!(
            "{scheme}, run {run}: the kernel dropped {} datagrams before nfcapd read them",
            stored.dropped
        );
    }
    panic!("{scheme}: nfcapd's socket buffer overflowed in {RUNS} runs at the default rate");
}

/// IPFIX, NetFlow v9 and v5 from `tapflow flows` at its defaults into a default nfcapd: no
/// datagram dropped, no sequence failure, and the flows, packets and bytes nfcapd stored are
/// ours; for 4000 built conversations, IPv4 and IPv6, TCP and UDP, most both ways.
#[test]
fn nfcapd_stores_our_export_with_no_sequence_failure() {
    let dir = tempfile::tempdir().unwrap();
    nfcapd_stores_the_export_of(&built_trace(dir.path(), "t.pcap", 4000, 3, 100_000));
}

/// The same for a real trace of 8507 flows: a DGA's DNS storm, ICMP, ARP, IPv6, a runt.
#[test]
fn nfcapd_stores_our_export_of_a_real_trace_with_no_sequence_failure() {
    let Some(dir) = corpus() else { return };
    nfcapd_stores_the_export_of(&dir.join("ustc-tfc2016-tinba-malware.pcap"));
}

/// Meters `trace` into nfcapd in IPFIX, NetFlow v9 and v5 and compares what it stored. The
/// export is paced and nfcapd's buffer large; a run in which the kernel still dropped
/// datagrams before nfcapd read them (its socket buffer full while it was starved of CPU,
/// counted in its namespace's UDP `InErrors`) proves nothing either way and is run again.
fn nfcapd_stores_the_export_of(trace: &Path) {
    for scheme in ["ipfix", "nfv9", "nfv5"] {
        let url = format!("{scheme}://127.0.0.1:{NFCAPD_PORT}");
        let (rows, err, stored) = export_by_default(trace, scheme);
        let stats = &stored.stats;
        assert_eq!(
            stored.get("Sequence failures"),
            0,
            "{scheme}: {stats:?}\n{err}"
        );
        let v4: Vec<&Row> = rows.iter().filter(|r| !r["src"].contains(':')).collect();
        // nfcapd counts both directions of a biflow (reverse counters as "out"); v5 carries
        // IPv4 only.
        let counted: Vec<&Row> = match scheme {
            "nfv5" => v4.clone(),
            _ => rows.iter().collect(),
        };
        let (packets, bytes) = counted.iter().fold((0, 0), |(p, b), r| {
            (
                p + num(r, "packets") + num(r, "rev_packets"),
                b + num(r, "octets") + num(r, "rev_octets"),
            )
        });
        let flows = match scheme {
            "nfv5" => v4
                .iter()
                .map(|r| 1 + u64::from(num(r, "rev_packets") > 0))
                .sum(),
            _ => rows.len() as u64,
        };
        assert_eq!(stored.get("Flows"), flows, "{scheme}: {stats:?}\n{err}");
        assert_eq!(stored.get("Packets"), packets, "{scheme}: {stats:?}");
        assert_eq!(stored.get("Bytes"), bytes, "{scheme}: {stats:?}");
        assert!(
            err.contains(&format!(
                "{url}: {} records",
                match scheme {
                    "nfv5" => flows,
                    _ => rows.len() as u64,
                }
            )),
            "{scheme}: {err}"
        );
    }
}

/// Writes a pcap of `n` one-packet UDP flows (each from its own address and port), built with
/// the project's frame builder, 1 µs apart.
fn many_flows(path: &Path, n: u32) {
    let mut out = Vec::new();
    pcap::write_header(&mut out, LinkType::Ethernet, 65535);
    let mut frame = [0u8; 64];
    for i in 0..n {
        let spec = FrameSpec {
            src_mac: EthernetAddress([2, 0, 0, 0, 0, 1]),
            dst_mac: EthernetAddress([2, 0, 0, 0, 0, 2]),
            src_ip: Ipv4Addr::from(0x0a00_0000 | i).into(),
            dst_ip: Ipv4Addr::new(192, 0, 2, 1).into(),
            proto: L4::Udp,
            src_port: 1024 + (i % 60_000) as u16,
            dst_port: 53,
            frame_len: frame.len(),
        };
        build::build(&spec, &mut frame).unwrap();
        let ns = 1_700_000_000_000_000_000 + u64::from(i) * 1000;
        pcap::write_record(&mut out, ns, &frame, 64);
    }
    std::fs::write(path, out).unwrap();
}

/// The flows of a big trace end at once, at the end of the file: by default the export is
/// paced so that a default nfcapd takes every record of 50,000 flows (unpaced, it stored 6–41%
/// of the records of real captures).
#[test]
fn default_export_of_many_flows_reaches_a_default_nfcapd_whole() {
    const FLOWS: u32 = 50_000;
    let dir = tempfile::tempdir().unwrap();
    let trace = dir.path().join("many.pcap");
    many_flows(&trace, FLOWS);
    let (rows, err, stored) = export_by_default(&trace, "ipfix");
    assert_eq!(rows.len() as u64, u64::from(FLOWS), "{err}");
    assert_eq!(
        stored.get("Sequence failures"),
        0,
        "{:?}\n{err}",
        stored.stats
    );
    assert_eq!(
        stored.get("Flows"),
        u64::from(FLOWS),
        "{:?}\n{err}",
        stored.stats
    );
    assert_eq!(
        stored.get("Packets"),
        u64::from(FLOWS),
        "{:?}",
        stored.stats
    );
    // 64-byte frames: 50 bytes of IP each.
    assert_eq!(
        stored.get("Bytes"),
        u64::from(FLOWS) * 50,
        "{:?}",
        stored.stats
    );
}

/// Nothing listens on the collector's port: every datagram comes back refused, the exit line
/// counts them as lost messages, the summary carries the count, and the run fails (exit 1)
/// naming the output, paced or not.
#[test]
fn export_to_a_port_where_nothing_listens_fails_naming_the_loss() {
    let ns = Netns::new("nol");
    let dir = tempfile::tempdir().unwrap();
    let trace = dir.path().join("some.pcap");
    many_flows(&trace, 2000);
    let url = "ipfix://127.0.0.1:4739";
    for rate in ["max", "2000"] {
        let json = dir.path().join(format!("sum-{rate}.json"));
        let o = run_limited(
            ns.tapflow(&["flows", "-q", "-r"])
                .arg(&trace)
                .args(["--export", url, "--export-rate", rate, "--summary-json"])
                .arg(&json),
            Duration::from_secs(60),
        );
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(1), "{rate}: {err}");
        let text = std::fs::read_to_string(&json).unwrap();
        let lost = json_u64(&text, "flows.outputs.0.lost_messages");
        assert!(lost > 0, "{rate}: {text}");
        assert!(
            err.contains(&format!("{lost} messages lost (error: Connection refused")),
            "{rate}: {err}"
        );
        assert_eq!(
            err.lines().last(),
            Some(format!("tapflow: error: flow export: {url} lost {lost} messages").as_str()),
            "{rate}: {err}"
        );
        if rate != "max" {
            // Paced, each datagram is refused on its own: all of them are counted.
            let sent = json_u64(&text, "flows.outputs.0.messages");
            assert_eq!(sent, 0, "{text}");
            assert!(lost >= 2000 / 107, "{text}");
        }
    }
}

/// A tmpfs of 64 KiB, unmounted (and its directory removed) on drop.
struct SmallDisk {
    dir: tempfile::TempDir,
}

impl SmallDisk {
    fn new() -> SmallDisk {
        require_root();
        let dir = tempfile::tempdir().unwrap();
        run_ok(
            Command::new("mount")
                .args(["-t", "tmpfs", "-o", "size=64k", "tapflow-test"])
                .arg(dir.path()),
        );
        SmallDisk { dir }
    }
}

impl Drop for SmallDisk {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg(self.dir.path()).status();
    }
}

/// `--json` and `--csv` to a full disk: the lines that reached it are the records the exit lines
/// report written, the rest are counted lost (in the exit lines and the summary), and the run
/// fails (exit 1) naming both outputs.
#[test]
fn text_outputs_to_a_full_disk_fail_naming_the_lost_records() {
    let disk = SmallDisk::new();
    let dir = tempfile::tempdir().unwrap();
    let trace = dir.path().join("some.pcap");
    many_flows(&trace, 5000);
    let (json, csv) = (
        disk.dir.path().join("f.json"),
        disk.dir.path().join("f.csv"),
    );
    let sum = dir.path().join("sum.json");
    let o = run_limited(
        tapflow(["flows", "-q", "-r"])
            .arg(&trace)
            .arg("--json")
            .arg(&json)
            .arg("--csv")
            .arg(&csv)
            .arg("--summary-json")
            .arg(&sum),
        Duration::from_secs(60),
    );
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(1), "{err}");
    let text = std::fs::read_to_string(&sum).unwrap();
    let mut named = Vec::new();
    for (i, (path, head)) in [(&json, 0), (&csv, 1)].into_iter().enumerate() {
        let at = |k: &str| json_u64(&text, &format!("flows.outputs.{i}.{k}"));
        let whole = std::fs::read(path)
            .unwrap()
            .iter()
            .filter(|&&b| b == b'\n')
            .count() as u64;
        let (written, lost) = (at("records"), at("lost_records"));
        assert_eq!(
            written,
            whole.saturating_sub(head),
            "{}: {text}",
            path.display()
        );
        assert_eq!(written + lost, 5000, "{text}");
        assert!(lost > 0, "{text}");
        let name = json_at(&text, &format!("flows.outputs.{i}.output"));
        let name = name.as_str().unwrap();
        assert!(
            err.contains(&format!(
                "{name}: {written} records, {lost} records lost (error: "
            )),
            "{err}"
        );
        named.push(format!("{name} lost {lost} records"));
    }
    assert_eq!(
        err.lines().last(),
        Some(format!("tapflow: error: flow export: {}", named.join(", ")).as_str()),
        "{err}"
    );
}

/// When the kernel queued the datagram last received on `sock` (`SIOCGSTAMPNS`; over loopback,
/// when it was sent): a reader that falls behind still sees when each one arrived. The first
/// call, before any datagram, turns the stamping on and returns `None`.
fn arrival(sock: &std::net::UdpSocket) -> Option<Duration> {
    use std::os::fd::AsRawFd;
    /// `SIOCGSTAMPNS` (`SIOCGSTAMPNS_OLD` in the kernel's headers, a 64-bit timespec here).
    const SIOCGSTAMPNS: libc::c_ulong = 0x8907;
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: the ioctl writes one timespec into `ts`, which is live and writable.
    let r = unsafe { libc::ioctl(sock.as_raw_fd(), SIOCGSTAMPNS, &mut ts) };
    (r == 0).then(|| Duration::new(ts.tv_sec as u64, ts.tv_nsec as u32))
}

/// `--export-rate N` spaces the messages 1/N s apart, one by one: never a run of them at once
/// after a wait.
#[test]
fn paced_export_spaces_its_messages_evenly() {
    const RATE: u32 = 100;
    let dir = tempfile::tempdir().unwrap();
    let trace = dir.path().join("some.pcap");
    // About 60 messages of 1500 bytes, all ready at once at the end of the file.
    many_flows(&trace, 1000);
    let sock = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    sock.set_read_timeout(Some(Duration::from_millis(100)))
        .unwrap();
    assert_eq!(arrival(&sock), None);
    let url = format!("ipfix://{}", sock.local_addr().unwrap());
    let done = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let receiver = std::thread::spawn({
        let done = std::sync::Arc::clone(&done);
        move || {
            let mut buf = vec![0u8; 65536];
            let mut at = Vec::new();
            loop {
                match sock.recv(&mut buf) {
                    Ok(_) => at.push(arrival(&sock).expect("SIOCGSTAMPNS")),
                    Err(_) if done.load(std::sync::atomic::Ordering::Acquire) => break,
                    Err(_) => {}
                }
            }
            at
        }
    });
    let rate = RATE.to_string();
    let args = [
        "--export",
        &url,
        "--export-rate",
        &rate,
        "--export-mtu",
        "1500",
    ];
    let (_, err) = flows_of(&trace, &args);
    done.store(true, std::sync::atomic::Ordering::Release);
    let at = receiver.join().unwrap();
    let n = at.len();
    assert!(n >= 50, "{n} messages\n{err}");
    let interval = Duration::from_secs(1) / RATE;
    // Each message is due one interval after the one before. One that leaves late (the
    // exporter was off the CPU) may be followed at once by the next if that one is less than an
    // interval late; later than that, the schedule restarts. So a window of k intervals holds
    // at most k + 3: k + 2 dues, and one message sent long after it was due.
    let window = interval * 5;
    for (i, t) in at.iter().enumerate() {
        let inside = at[i..].iter().take_while(|&&u| u - *t < window).count();
        assert!(
            inside <= 8,
            "{inside} messages within {window:?} from message {i}: {:?}",
            at.iter().map(|u| *u - at[0]).collect::<Vec<_>>()
        );
    }
    let span = at[n - 1] - at[0];
    assert!(
        span >= interval * (n as u32 - 4),
        "{n} messages in {span:?} at {RATE}/s"
    );
}

/// UDP messages fill the route's MTU to the collector, at most 9000, unless --export-mtu says
/// otherwise. To 127.0.0.1 the route says 65536, so the cap applies.
#[test]
fn udp_messages_fit_the_route_or_the_mtu_given() {
    // 10,000 records, IPv4 and IPv6: many full messages of either size. A full message is
    // within two records (at most 107 bytes each) of the largest payload.
    let dir = tempfile::tempdir().unwrap();
    let trace = built_trace(dir.path(), "t.pcap", 10_000, 2, 10_000);
    for (extra, most) in [
        (&[][..], 9000 - 28),
        (&["--export-mtu", "1500"][..], 1500 - 28),
    ] {
        let sock = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        sock.set_read_timeout(Some(Duration::from_millis(100)))
            .unwrap();
        let url = format!("ipfix://{}", sock.local_addr().unwrap());
        let args = [&["--export", &url, "--export-rate", "2000"][..], extra].concat();
        let done = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let receiver = std::thread::spawn({
            let done = std::sync::Arc::clone(&done);
            move || {
                let mut buf = vec![0u8; 65536];
                let mut sizes = Vec::new();
                // Until tapflow has exited and the socket has nothing more.
                loop {
                    match sock.recv(&mut buf) {
                        Ok(n) => sizes.push(n),
                        Err(_) if done.load(std::sync::atomic::Ordering::Acquire) => break,
                        Err(_) => {}
                    }
                }
                sizes
            }
        });
        let (_, err) = flows_of(&trace, &args);
        done.store(true, std::sync::atomic::Ordering::Release);
        let sizes = receiver.join().unwrap();
        let largest = sizes.iter().copied().max().unwrap_or(0);
        let least = most - 2 * ipfix::RECORD_LEN_V6;
        assert!(
            (least..=most).contains(&largest),
            "{extra:?}: largest of {} messages is {largest} bytes, want {least}..={most}\n{err}",
            sizes.len()
        );
    }
}

/// IPFIX over TCP: one session, messages back to back; every data record arrives, and each
/// message's sequence number is the count of data records before it.
#[test]
fn ipfix_over_tcp_delivers_every_record_in_sequence() {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let reader = std::thread::spawn(move || {
        use std::io::Read;
        let (mut s, _) = listener.accept().unwrap();
        let mut all = Vec::new();
        s.read_to_end(&mut all).unwrap();
        all
    });
    let dir = tempfile::tempdir().unwrap();
    let trace = built_trace(dir.path(), "t.pcap", 2000, 5, 100_000);
    let url = format!("ipfix+tcp://127.0.0.1:{port}");
    let (rows, err) = flows_of(&trace, &["--export", &url]);
    let bytes = reader.join().unwrap();
    let (mut at, mut records, mut messages) = (0usize, 0u64, 0u64);
    while at < bytes.len() {
        let m = &bytes[at..];
        assert_eq!(u16::from_be_bytes([m[0], m[1]]), 10, "version at {at}");
        let len = usize::from(u16::from_be_bytes([m[2], m[3]]));
        let seq = u32::from_be_bytes([m[8], m[9], m[10], m[11]]);
        assert_eq!(u64::from(seq), records, "sequence of message {messages}");
        // Sets: template (2) or data (256, 257: IPv4 and IPv6 records).
        let mut s = 16;
        while s < len {
            let id = u16::from_be_bytes([m[s], m[s + 1]]);
            let slen = usize::from(u16::from_be_bytes([m[s + 2], m[s + 3]]));
            match id {
                2 => {}
                256 => records += ((slen - 4) / ipfix::RECORD_LEN_V4) as u64,
                257 => records += ((slen - 4) / ipfix::RECORD_LEN_V6) as u64,
                _ => panic!("set {id} in message {messages}"),
            }
            s += slen;
        }
        at += len;
        messages += 1;
    }
    assert_eq!(records, rows.len() as u64, "{err}");
    assert!(
        err.contains(&format!("{url}: {records} records in {messages} messages")),
        "{err}"
    );
}

/// Per flow, tapflow agrees with an independent meter (nfpcapd through
/// scripts/flow-oracle.sh): packets, bytes, first and last ms, TCP flags and initiator, on
/// captures of several link types; docs/flows.md explains the pcaps where they differ.
#[test]
fn per_flow_results_agree_with_nfpcapd() {
    let Some(dir) = corpus() else { return };
    let pcaps: Vec<PathBuf> = [
        "nfstream-skype.pcap",
        "stratosphere-slips-test-cc-capture-1.pcap",
        "zeek-http-1000-requests-one-dropped-response.pcap",
        "tcpreplay-test.pcap",
        "nfstream-kakaotalk-talk-linux-sll.pcap",
        "ndpi-ocs-rawip.pcap",
        "suricata-smb-length-5770-null-loopback.pcap",
        "nfstream-http-ipv6.pcap",
    ]
    .iter()
    .map(|name| dir.join(name))
    .collect();
    agrees_with_nfpcapd(&pcaps);
}

/// The same for 300 built conversations, IPv4 and IPv6, TCP and UDP, under Ethernet, Linux
/// cooked, raw IP and BSD loopback framing.
#[test]
fn per_flow_results_of_built_traces_agree_with_nfpcapd() {
    let dir = tempfile::tempdir().unwrap();
    let plain = traffic::conversations(0, 300, 10, T0, 1_000_000);
    let pcaps: Vec<PathBuf> = [
        LinkType::Ethernet,
        LinkType::LinuxSll,
        LinkType::Raw,
        LinkType::Null,
    ]
    .into_iter()
    .map(|lt| {
        let p = traffic::relink_all(&plain, lt, 65535);
        let name = format!("built-{}.pcap", lt.name().to_lowercase());
        write_file(
            dir.path(),
            &name,
            &traffic::pcap_file(lt, true, false, 65535, &p),
        )
    })
    .collect();
    agrees_with_nfpcapd(&pcaps);
}

/// Meters each of `pcaps` and compares every flow with nfpcapd's through the oracle script.
fn agrees_with_nfpcapd(pcaps: &[PathBuf]) {
    let script =
        std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../scripts/flow-oracle.sh");
    for pcap in pcaps {
        let name = pcap.file_name().unwrap().to_string_lossy();
        let dir = tempfile::tempdir().unwrap();
        let csv = dir.path().join("t.csv");
        let o = run_flows(
            pcap,
            &csv,
            &["--active-timeout", "3600", "--idle-timeout", "3600"],
        );
        assert!(
            o.status.success(),
            "{name}: {}",
            String::from_utf8_lossy(&o.stderr)
        );
        let o = run_limited(
            std::process::Command::new("bash")
                .arg(&script)
                .args(["--active", "3600", "--idle", "3600", "--compare"])
                .arg(&csv)
                .arg(pcap),
            Duration::from_secs(120),
        );
        assert!(
            o.status.success(),
            "{name}: tapflow and nfpcapd disagree:\n{}{}",
            String::from_utf8_lossy(&o.stdout),
            String::from_utf8_lossy(&o.stderr)
        );
    }
}

/// `tapflow recv --csv` meters the records probes forward: the same flows as metering the
/// probe's input directly (loopback only).
#[test]
fn recv_meters_forwarded_records_like_the_probe_input() {
    let dir = tempfile::tempdir().unwrap();
    let trace = built_trace(dir.path(), "t.pcap", 300, 10, 1_000_000);
    let (direct, _) = flows_of(&trace, &[]);
    let csv = dir.path().join("recv.csv");
    let json = dir.path().join("recv.json");
    let port = free_udp_port();
    let listen = format!("127.0.0.1:{port}");
    let mut g = VethPair::spawn(&mut tapflow([
        "recv",
        "--listen",
        &listen,
        "-w",
        &dir.path().join("r.pcapng").to_string_lossy(),
        "-q",
        "--csv",
        &csv.to_string_lossy(),
        "--summary-json",
        &json.to_string_lossy(),
    ]));
    wait_udp_bound(&mut g, port);
    run_ok(&mut tapflow([
        "capture",
        "-r",
        &trace.to_string_lossy(),
        "-q",
        "--forward",
        &listen,
        "--mtu",
        "9000",
    ]));
    std::thread::sleep(Duration::from_millis(500));
    g.signal(libc::SIGINT);
    let (status, err) = g.wait_output(Duration::from_secs(20));
    assert!(status.success(), "{err}");
    let received = read_csv(&csv);
    assert_eq!(our_totals(&received), our_totals(&direct), "{err}");
    let keys = |rows: &[Row]| -> BTreeSet<String> {
        rows.iter()
            .map(|r| {
                format!(
                    "{} {}:{} {}:{}",
                    r["proto"], r["src"], r["sport"], r["dst"], r["dport"]
                )
            })
            .collect()
    };
    assert_eq!(keys(&received), keys(&direct));
    assert!(
        err.contains(&format!(
            "csv:{}: {} records",
            csv.display(),
            received.len()
        )),
        "{err}"
    );
    // The receiver's JSON summary carries the flow counts too.
    let text = std::fs::read_to_string(&json).unwrap();
    assert_eq!(
        json_u64(&text, "flows.records"),
        received.len() as u64,
        "{text}"
    );
}
