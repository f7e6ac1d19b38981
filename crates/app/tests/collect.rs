//! `tapflow collect` against real exporters and a real collector: softflowd (IPFIX, NetFlow
//! v9 and v5), pmacctd's nfprobe (IPFIX, v9) and sfprobe (sFlow), nfreplay replaying nfcapd's
//! files, and tapflow's own export over UDP and TCP. Each exporter runs twice from the same
//! input, once into nfcapd and once into `tapflow collect`, both in one private namespace: the
//! flows, packets and bytes each keeps must be equal, and nothing may be lost in the collector.
//! Hostile datagrams are counted by reason. Root needed (namespaces); these tests fail, never
//! skip, without it or without the tools (scripts/install-deps.sh installs them).

mod common;

use std::collections::BTreeMap;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus, Stdio};
use std::time::Duration;

use common::*;

/// One CSV flow record, by column name.
type Row = BTreeMap<String, String>;

fn read_csv(path: &Path) -> Vec<Row> {
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
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

/// Flows, packets and bytes (both directions) of `rows`.
fn totals(rows: &[Row]) -> (u64, u64, u64) {
    rows.iter().fold((0, 0, 0), |(f, p, b), r| {
        (
            f + 1,
            p + num(r, "packets") + num(r, "rev_packets"),
            b + num(r, "octets") + num(r, "rev_octets"),
        )
    })
}

/// A running `tapflow collect` writing CSV and a JSON summary.
struct Collector {
    guard: ChildGuard,
    dir: tempfile::TempDir,
}

/// What a collector run left.
struct Collected {
    status: ExitStatus,
    err: String,
    json: String,
    rows: Vec<Row>,
}

impl Collected {
    fn n(&self, path: &str) -> u64 {
        json_u64(&self.json, path)
    }

    /// Nothing lost in the collector: every record decoded, handed over and stored, no
    /// datagram dropped by the socket, nothing malformed or without its template.
    fn assert_nothing_lost(&self, what: &str) {
        assert!(self.status.success(), "{what}: {}", self.err);
        let records = self.n("records");
        assert!(records > 0, "{what}: nothing collected: {}", self.err);
        for k in [
            "socket_drops",
            "template_missing",
            "malformed",
            "bad_messages",
        ] {
            assert_eq!(self.n(k), 0, "{what}: {k}: {}", self.err);
        }
        assert_eq!(self.n("flows"), records, "{what}: {}", self.err);
        assert_eq!(self.n("stores.0.stored"), records, "{what}: {}", self.err);
        assert_eq!(self.rows.len() as u64, records, "{what}");
    }
}

impl Collector {
    /// Starts `tapflow collect -l LISTEN … EXTRA` in `ns`; returns once `udp_port` is bound.
    fn start(ns: &Netns, listen: &str, udp_port: u16, extra: &[&str]) -> Collector {
        let dir = tempfile::tempdir().unwrap();
        let csv = format!("csv:{}", dir.path().join("flows.csv").display());
        let child = ns
            .tapflow(&["collect", "-q", "-l", listen, "-w", &csv, "--summary-json"])
            .arg(dir.path().join("summary.json"))
            .args(extra)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("tapflow collect");
        let mut guard = ChildGuard::new(child, "tapflow collect");
        wait_udp_bound(&mut guard, udp_port);
        Collector { guard, dir }
    }

    /// SIGTERM: the collector takes what its sockets hold, closes its stores and reports.
    fn stop(mut self) -> Collected {
        self.guard.signal(libc::SIGTERM);
        let (status, err) = self.guard.wait_output(Duration::from_secs(30));
        let json = std::fs::read_to_string(self.dir.path().join("summary.json"))
            .unwrap_or_else(|e| panic!("no summary ({e}): {err}"));
        let rows = read_csv(&self.dir.path().join("flows.csv"));
        Collected {
            status,
            err,
            json,
            rows,
        }
    }
}

/// Whether every UDP socket of the namespace of process `pid` has an empty receive queue.
fn udp_queues_empty(pid: i32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/net/udp"))
        .unwrap_or_default()
        .lines()
        .skip(1)
        .all(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            f.len() <= 4 || f[4].split(':').nth(1) == Some("00000000")
        })
}

/// `nfcapd` (or `sfcapd`, its sFlow twin) with a 16 MiB socket buffer in `ns`, stopped with
/// SIGTERM so it finishes its file; `nfdump -I` reads what it stored.
struct Nfcapd {
    guard: ChildGuard,
    dir: tempfile::TempDir,
}

impl Nfcapd {
    /// nfcapd on `port`, repeating every datagram it takes to `repeat` (`-R`) when given.
    fn start(ns: &Netns, port: u16, repeat: Option<u16>) -> Nfcapd {
        Nfcapd::start_program(ns, port, "nfcapd", repeat)
    }

    fn start_program(ns: &Netns, port: u16, program: &str, repeat: Option<u16>) -> Nfcapd {
        let dir = tempfile::tempdir().unwrap();
        let mut cmd = ns.cmd(program);
        cmd.args(["-b", "127.0.0.1", "-p", &port.to_string()])
            .args(["-B", "16777216", "-t", "3600", "-w"])
            .arg(dir.path());
        if let Some(r) = repeat {
            cmd.args(["-R", &format!("127.0.0.1/{r}")]);
        }
        let child = cmd
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("nfcapd, sfcapd (apt-get install nfdump nfdump-sflow)");
        let mut guard = ChildGuard::new(child, program);
        wait_udp_bound(&mut guard, port);
        Nfcapd { guard, dir }
    }

    /// Stops it once its socket is read empty; returns `nfdump -I` by key, and the files.
    fn stop(mut self, ns: &Netns) -> (BTreeMap<String, u64>, tempfile::TempDir) {
        self.guard.wait_until(
            Duration::from_secs(30),
            "read its socket empty",
            udp_queues_empty,
        );
        assert_eq!(
            ns.udp_counter("InErrors"),
            0,
            "the kernel dropped datagrams"
        );
        self.guard.signal(libc::SIGTERM);
        let (status, err) = self.guard.wait_output(Duration::from_secs(10));
        assert!(status.success(), "nfcapd: {err}");
        let o = run_limited(
            Command::new("nfdump")
                .arg("-R")
                .arg(self.dir.path())
                .arg("-I"),
            Duration::from_secs(30),
        );
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        let stats = String::from_utf8_lossy(&o.stdout)
            .lines()
            .filter_map(|l| l.split_once(':'))
            .filter_map(|(k, v)| Some((k.trim().to_string(), v.trim().parse().ok()?)))
            .collect();
        (stats, self.dir)
    }
}

const NFCAPD: u16 = 9995;
const COLLECT: u16 = 4739;

/// Runs `exporter(port)` once into nfcapd, which repeats every datagram (`-R`) to `tapflow
/// collect` (listening on `scheme`), and checks both kept the same flows, packets and bytes,
/// with nothing lost in the collector. Returns the collector's run and nfcapd's statistics and
/// files.
///
/// One run of the exporter feeds both: two runs of one exporter over one file need not send the
/// same flows (pmacctd, with both cores busy, once sent 7980 packets in one run and 8000 in the
/// other).
fn same_as_nfcapd(
    what: &str,
    scheme: &str,
    exporter: impl FnOnce(&Netns, u16),
) -> (Collected, BTreeMap<String, u64>, tempfile::TempDir) {
    let ns = Netns::new("col");
    let col = Collector::start(
        &ns,
        &format!("{scheme}://127.0.0.1:{COLLECT}"),
        COLLECT,
        &[],
    );
    let nfcapd = Nfcapd::start(&ns, NFCAPD, Some(COLLECT));
    exporter(&ns, NFCAPD);
    let (stats, files) = nfcapd.stop(&ns);
    let got = col.stop();
    got.assert_nothing_lost(what);
    let (flows, packets, bytes) = totals(&got.rows);
    assert_eq!(
        (flows, packets, bytes),
        (stats["Flows"], stats["Packets"], stats["Bytes"]),
        "{what}: tapflow collect (flows, packets, bytes) against nfcapd's: {stats:?}\n{}",
        got.err
    );
    assert!(
        got.err.contains("tapflow: lost before the collector:"),
        "{}",
        got.err
    );
    (got, stats, files)
}

/// Runs `program ARGS` in `ns` to its end. pmacctd reading a file sometimes exits non-zero
/// after its plugin has finished and closed (its log then ends "no more plugins active"): that
/// is the end of the file too, and what it sent is checked by the caller.
fn run_in(ns: &Netns, program: &str, args: &[&str]) {
    let o = run_limited(ns.cmd(program).args(args), Duration::from_secs(120));
    let finished = program == "pmacctd"
        && String::from_utf8_lossy(&o.stderr).contains("no more plugins active. Shutting down.");
    assert!(
        o.status.success() || finished,
        "{program} {args:?}: {}",
        String::from_utf8_lossy(&o.stderr)
    );
}

/// A trace of 2000 built conversations, IPv4 and IPv6, TCP and UDP, 4 packets each.
fn trace(dir: &Path) -> PathBuf {
    built_trace(dir, "t.pcap", 2000, 4, 1_000_000)
}

#[test]
fn softflowd_ipfix_v9_v5_flows_equal_nfcapds() {
    let dir = tempfile::tempdir().unwrap();
    let pcap = trace(dir.path());
    let pcap = pcap.to_str().unwrap();
    for v in ["10", "9", "5"] {
        let (got, stats, _) = same_as_nfcapd(&format!("softflowd -v {v}"), "ipfix", |ns, port| {
            run_in(
                ns,
                "softflowd",
                &[
                    "-r",
                    pcap,
                    "-n",
                    &format!("127.0.0.1:{port}"),
                    "-v",
                    v,
                    "-d",
                ],
            )
        });
        // softflowd numbers its IPFIX messages by the flow records up to and including each
        // one (RFC 7011: before it), which nfcapd reports as sequence failures; none is lost.
        assert_eq!(got.n("sequence_lost"), 0, "v{v}: {}", got.err);
        if v != "10" {
            assert_eq!(stats["Sequence failures"], 0);
        }
        let proto = match v {
            "10" => "ipfix",
            "9" => "nfv9",
            _ => "nfv5",
        };
        assert_eq!(json_at(&got.json, "exporters.0.protocol"), proto);
        assert!(json_at(&got.json, "exporters").as_array().unwrap().len() == 1);
    }
}

/// Every flow row of the Parquet store in `dir`, and the number of files of `table`.
fn store_flows(dir: &Path) -> Vec<tapflow_store::StoredFlow> {
    use tapflow_store::parquet::partition::{Table, files, partitions};
    let mut all = Vec::new();
    for p in partitions(dir, Table::Flows).unwrap() {
        for f in files(&p.path).unwrap() {
            all.extend(tapflow_store::parquet::reader::read_flows(&f).unwrap());
        }
    }
    all
}

fn store_files(dir: &Path, table: tapflow_store::parquet::partition::Table) -> usize {
    use tapflow_store::parquet::partition::{files, partitions};
    partitions(dir, table)
        .unwrap()
        .iter()
        .map(|p| files(&p.path).unwrap().len())
        .sum()
}

#[test]
fn the_parquet_store_keeps_what_nfcapd_keeps() {
    let dir = tempfile::tempdir().unwrap();
    let pcap = trace(dir.path());
    let store = dir.path().join("store");
    let ns = Netns::new("sto");
    let col = Collector::start(
        &ns,
        "nfv9://127.0.0.1",
        2055,
        &["--store", store.to_str().unwrap(), "--stats-seconds", "1"],
    );
    let nfcapd = Nfcapd::start(&ns, NFCAPD, Some(2055));
    let to = format!("127.0.0.1:{NFCAPD}");
    run_in(
        &ns,
        "softflowd",
        &["-r", pcap.to_str().unwrap(), "-n", &to, "-v", "9", "-d"],
    );
    let (stats, _) = nfcapd.stop(&ns);
    let got = col.stop();
    got.assert_nothing_lost("softflowd -v 9");
    assert_eq!(
        json_at(&got.json, "stores.0.name"),
        format!("parquet:{}", store.display())
    );
    assert_eq!(got.n("stores.0.stored"), got.n("records"), "{}", got.err);
    let rows = store_flows(&store);
    let (packets, bytes) = rows.iter().fold((0, 0), |(p, b), f| {
        (
            p + f.flow.fwd.packets + f.flow.rev.packets,
            b + f.flow.fwd.octets + f.flow.rev.octets,
        )
    });
    assert_eq!(
        (rows.len() as u64, packets, bytes),
        (stats["Flows"], stats["Packets"], stats["Bytes"]),
        "{}",
        got.err
    );
    let loopback =
        tapflow_store::schema::addr16(false, &[127, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0]);
    assert!(
        rows.iter()
            .all(|f| f.exporter == loopback && f.sampling == 1)
    );
    assert!(
        store_files(
            &store,
            tapflow_store::parquet::partition::Table::ExporterStats
        ) > 0
    );
}

/// `tapflow flows --store DIR`: the meter's records reach the store without a network hop,
/// each one as the CSV output has it.
#[test]
fn flows_store_keeps_every_record_of_the_meter() {
    let dir = tempfile::tempdir().unwrap();
    let pcap = trace(dir.path());
    let store = dir.path().join("store");
    let csv = dir.path().join("ref.csv");
    let err = run_ok(
        Command::new(bin())
            .args(["flows", "-q", "-r"])
            .arg(&pcap)
            .arg("--csv")
            .arg(&csv)
            .arg("--store")
            .arg(&store),
    );
    let key = |proto: u8, sport: u16, dport: u16, p: u64, b: u64, rp: u64, rb: u64| {
        [
            u64::from(proto),
            u64::from(sport),
            u64::from(dport),
            p,
            b,
            rp,
            rb,
        ]
    };
    let mut want: Vec<_> = read_csv(&csv)
        .iter()
        .map(|r| {
            key(
                num(r, "proto") as u8,
                num(r, "sport") as u16,
                num(r, "dport") as u16,
                num(r, "packets"),
                num(r, "octets"),
                num(r, "rev_packets"),
                num(r, "rev_octets"),
            )
        })
        .collect();
    let mut got: Vec<_> = store_flows(&store)
        .iter()
        .map(|f| {
            let r = &f.flow;
            key(
                r.proto,
                r.sport,
                r.dport,
                r.fwd.packets,
                r.fwd.octets,
                r.rev.packets,
                r.rev.octets,
            )
        })
        .collect();
    want.sort();
    got.sort();
    assert_eq!(got.len(), 2000, "{err}");
    assert_eq!(got, want);
}

#[test]
fn nfreplay_of_nfcapd_files_equals_nfcapds() {
    let dir = tempfile::tempdir().unwrap();
    let pcap = trace(dir.path());
    // nfcapd files, made by nfcapd from softflowd's export.
    let (_, _, files) = same_as_nfcapd("softflowd -v 9", "nfv9", |ns, port| {
        run_in(
            ns,
            "softflowd",
            &[
                "-r",
                pcap.to_str().unwrap(),
                "-n",
                &format!("127.0.0.1:{port}"),
                "-v",
                "9",
                "-d",
            ],
        )
    });
    let file = std::fs::read_dir(files.path())
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| {
            p.file_name()
                .unwrap()
                .to_string_lossy()
                .starts_with("nfcapd.2")
        })
        .expect("an nfcapd file");
    for v in ["9", "5"] {
        same_as_nfcapd(&format!("nfreplay -v {v}"), "nfv9", |ns, port| {
            run_in(
                ns,
                "nfreplay",
                &[
                    "-r",
                    file.to_str().unwrap(),
                    "-H",
                    "127.0.0.1",
                    "-p",
                    &port.to_string(),
                    "-v",
                    v,
                ],
            )
        });
    }
}

/// pmacctd reading `pcap` with one plugin's lines `plugin` (`RECEIVER` replaced by the port).
fn pmacctd(ns: &Netns, dir: &Path, pcap: &Path, plugin: &str, port: u16) {
    let conf = dir.join(format!("pmacctd-{port}.conf"));
    std::fs::write(
        &conf,
        format!(
            "daemonize: false\npcap_savefile: {}\npcap_savefile_wait: false\n{}\n",
            pcap.display(),
            plugin.replace("RECEIVER", &format!("127.0.0.1:{port}"))
        ),
    )
    .unwrap();
    run_in(ns, "pmacctd", &["-f", conf.to_str().unwrap()]);
}

#[test]
fn pmacct_nfprobe_flows_equal_nfcapds() {
    let dir = tempfile::tempdir().unwrap();
    let pcap = trace(dir.path());
    for v in ["10", "9"] {
        let plugin = format!(
            "plugins: nfprobe\nnfprobe_receiver: RECEIVER\nnfprobe_version: {v}\n\
             nfprobe_timeouts: tcp=1:udp=1:maxlife=1:expint=1"
        );
        let (got, _, _) = same_as_nfcapd(&format!("pmacctd nfprobe v{v}"), "ipfix", |ns, port| {
            pmacctd(ns, dir.path(), &pcap, &plugin, port)
        });
        assert_eq!(got.n("sequence_lost"), 0, "v{v}: {}", got.err);
    }
}

/// pmacctd's sfprobe twice, into sfcapd and into `tapflow collect`: as many samples of TCP and
/// UDP packets (sfcapd counts frame bytes, tapflow IP bytes, as its meter does); and against
/// the trace itself, metered by `tapflow flows` (whose totals equal tshark's, tests/flows.rs),
/// packet for packet and byte for byte. Sampling 1: each sample is one packet.
#[test]
fn pmacct_sfprobe_samples_equal_sfcapds_and_the_trace() {
    let dir = tempfile::tempdir().unwrap();
    let pcap = trace(dir.path());
    let reference = dir.path().join("ref.csv");
    run_ok(
        Command::new(bin())
            .args(["flows", "-q", "-r"])
            .arg(&pcap)
            .arg("--csv")
            .arg(&reference),
    );
    // Per direction of each flow: (packets, bytes, time of its last packet).
    let mut want: BTreeMap<[String; 5], (u64, u64, u64)> = BTreeMap::new();
    for r in read_csv(&reference) {
        let [p, s, sp, d, dp] = ["proto", "src", "sport", "dst", "dport"].map(|k| r[k].clone());
        want.insert(
            [p.clone(), s.clone(), sp.clone(), d.clone(), dp.clone()],
            (num(&r, "packets"), num(&r, "octets"), num(&r, "last_ns")),
        );
        if num(&r, "rev_packets") > 0 {
            want.insert(
                [p, d, dp, s, sp],
                (
                    num(&r, "rev_packets"),
                    num(&r, "rev_octets"),
                    num(&r, "rev_last_ns"),
                ),
            );
        }
    }
    let ns = Netns::new("sfl");
    // One pmacctd run feeds both: sfcapd repeats every datagram (-R) to the collector.
    let col = Collector::start(&ns, "sflow://127.0.0.1", 6343, &[]);
    let sfcapd = Nfcapd::start_program(&ns, NFCAPD, "sfcapd", Some(6343));
    pmacctd(
        &ns,
        dir.path(),
        &pcap,
        "plugins: sfprobe\nsfprobe_receiver: RECEIVER\nsampling_rate: 1",
        NFCAPD,
    );
    let (stats, _) = sfcapd.stop(&ns);
    let got = col.stop();
    for (proto, name) in [("6", "tcp"), ("17", "udp")] {
        let rows: Vec<Row> = got
            .rows
            .iter()
            .filter(|r| r["proto"] == proto)
            .cloned()
            .collect();
        let (flows, packets, _) = totals(&rows);
        assert_eq!(flows, packets, "{name}: one packet per sample");
        let theirs = stats[&format!("Packets_{name}")];
        assert_eq!(
            packets, theirs,
            "{name}: samples, against sfcapd's: {stats:?}"
        );
    }
    assert_eq!(stats["Sequence failures"], 0);
    got.assert_nothing_lost("pmacctd sfprobe");
    assert_eq!(got.n("sequence_lost"), 0, "{}", got.err);
    assert!(got.rows.iter().all(|r| r["packets"] == "1"));
    let per_datagram = got.n("records").div_ceil(got.n("datagrams"));
    let mut seen: BTreeMap<[String; 5], (u64, u64)> = BTreeMap::new();
    for r in &got.rows {
        let k = ["proto", "src", "sport", "dst", "dport"].map(|k| r[k].clone());
        let e = seen.entry(k).or_default();
        e.0 += 1;
        e.1 += num(r, "octets");
    }
    // pmacctd sends a datagram when it holds a few samples, and not the last, partial one
    // when its input ends: the trace's last packets may be missing, nothing else.
    let end = want.values().map(|w| w.2).max().unwrap();
    let mut missing = 0;
    for (k, w) in &want {
        let g = seen.get(k).copied().unwrap_or_default();
        if g.0 < w.0 {
            assert!(
                w.2 + 20_000_000 >= end,
                "{k:?}: {g:?} of {w:?}, not at the end"
            );
            missing += w.0 - g.0;
        } else {
            assert_eq!((g.0, g.1), (w.0, w.1), "{k:?}");
        }
    }
    assert!(seen.keys().all(|k| want.contains_key(k)));
    assert!(missing <= per_datagram, "{missing} missing");
}

/// A GET of `/metrics` at `addr` inside `ns`.
fn scrape(ns: &Netns, port: u16) -> String {
    let script = format!(
        "import socket;s=socket.create_connection(('127.0.0.1',{port}));\
         s.sendall(b'GET /metrics HTTP/1.0\\r\\n\\r\\n');import sys;\
         d=b''\nwhile True:\n c=s.recv(65536)\n if not c: break\n d+=c\nsys.stdout.write(d.decode())"
    );
    run_ok(ns.cmd("python3").args(["-c", &script]))
}

#[test]
fn own_export_over_udp_tcp_and_v9_arrives_flow_for_flow() {
    let dir = tempfile::tempdir().unwrap();
    let pcap = trace(dir.path());
    let ns = Netns::new("own");
    let col = Collector::start(
        &ns,
        "ipfix://127.0.0.1,ipfix+tcp://127.0.0.1,nfv9://127.0.0.1",
        2055,
        &["--threads", "2", "--metrics", "9464"],
    );
    let reference = dir.path().join("ref.csv");
    let o = run_limited(
        ns.tapflow(&["flows", "-q", "-r"])
            .arg(&pcap)
            .arg("--csv")
            .arg(&reference)
            .args([
                "--export",
                "ipfix://127.0.0.1,ipfix+tcp://127.0.0.1,nfv9://127.0.0.1",
                "--export-rate",
                "max",
            ]),
        Duration::from_secs(60),
    );
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let want = read_csv(&reference);
    // The metrics count every record once the worker has published (once a second).
    let mut metrics = String::new();
    for _ in 0..50 {
        metrics = scrape(&ns, 9464);
        let line = "tapflow_collect_records_total{exporter=\"127.0.0.1\",domain=\"1\"}";
        if metrics.contains(&format!("{line} {}", 3 * want.len())) {
            break;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    assert!(
        metrics.contains(&format!(
            "tapflow_collect_records_total{{exporter=\"127.0.0.1\",domain=\"1\"}} {}",
            3 * want.len()
        )),
        "{metrics}"
    );
    let got = col.stop();
    got.assert_nothing_lost("tapflow flows --export");
    assert_eq!(got.n("sequence_lost"), 0, "{}", got.err);
    // Every flow three times (IPFIX over UDP and TCP, NetFlow v9), with its counters.
    let key = |r: &Row| {
        [
            "proto",
            "src",
            "sport",
            "dst",
            "dport",
            "packets",
            "octets",
            "rev_packets",
            "rev_octets",
        ]
        .map(|k| r[k].clone())
    };
    let mut want_keys: Vec<_> = want.iter().flat_map(|r| [key(r), key(r), key(r)]).collect();
    let mut got_keys: Vec<_> = got.rows.iter().map(key).collect();
    want_keys.sort();
    got_keys.sort();
    assert_eq!(got_keys, want_keys);
}

/// An IPFIX message header followed by `body`, its length field saying `len`.
fn ipfix_message(seq: u32, len: u16, body: &[u8]) -> Vec<u8> {
    let mut m = vec![0, 10];
    m.extend(len.to_be_bytes());
    m.extend(1_700_000_000u32.to_be_bytes());
    m.extend(seq.to_be_bytes());
    m.extend(1u32.to_be_bytes());
    m.extend(body);
    m
}

/// A NetFlow v5 message of one flow, numbered `seq`.
fn v5_message(seq: u32) -> Vec<u8> {
    let mut m = vec![0, 5, 0, 1];
    m.extend(1000u32.to_be_bytes()); // sysUptime
    m.extend(1_700_000_000u32.to_be_bytes());
    m.extend(0u32.to_be_bytes());
    m.extend(seq.to_be_bytes());
    m.extend([0, 0, 0, 0]); // engine type, id, sampling
    let mut r = vec![0u8; 48];
    r[0..4].copy_from_slice(&[192, 0, 2, 1]);
    r[4..8].copy_from_slice(&[192, 0, 2, 2]);
    r[12..14].copy_from_slice(&1u16.to_be_bytes()); // input interface
    r[14..16].copy_from_slice(&2u16.to_be_bytes()); // output interface
    r[16..20].copy_from_slice(&3u32.to_be_bytes()); // packets
    r[20..24].copy_from_slice(&300u32.to_be_bytes()); // octets
    r[24..28].copy_from_slice(&500u32.to_be_bytes()); // first
    r[28..32].copy_from_slice(&900u32.to_be_bytes()); // last
    r[32..34].copy_from_slice(&1234u16.to_be_bytes());
    r[34..36].copy_from_slice(&80u16.to_be_bytes());
    r[38] = 6;
    m.extend(r);
    m
}

#[test]
fn hostile_datagrams_are_counted_by_reason_and_a_stop_reports() {
    let ns = Netns::new("hos");
    let col = Collector::start(&ns, "ipfix://127.0.0.1", COLLECT, &[]);
    let mut datagrams: Vec<Vec<u8>> = Vec::new();
    // Random bytes (a fixed LCG), some starting like IPFIX or NetFlow.
    let mut x: u64 = 0x2545_f491_4f6c_dd1d;
    for i in 0..2000 {
        let len = (i * 37) % 1500;
        let mut d: Vec<u8> = (0..len)
            .map(|_| {
                x = x.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1);
                (x >> 56) as u8
            })
            .collect();
        if d.len() >= 2 && i % 3 == 0 {
            d[..2].copy_from_slice(&[0, [10, 9, 5][i % 9 / 3]]);
        }
        datagrams.push(d);
    }
    // A header that claims more than the datagram holds.
    datagrams.push(ipfix_message(0, 400, &[0; 20]));
    // A template with a field longer than any record, and one of 60000 fields.
    let mut t = vec![0, 2, 0, 12, 1, 0, 0, 1, 0, 1, 0xff, 0xfe];
    datagrams.push(ipfix_message(0, 16 + t.len() as u16, &t));
    t = vec![0, 2, 0, 8, 1, 1, 0xea, 0x60];
    datagrams.push(ipfix_message(0, 16 + t.len() as u16, &t));
    // NetFlow v5 numbered 0, 4,000 (3,999 flows lost before the collector), 1,000,000 (more
    // than 4096 messages of one flow could have carried: forged, not loss), then
    // 4,000,000,000: an exporter that restarted, not billions lost.
    for seq in [0, 4_000, 1_000_000, 4_000_000_000] {
        datagrams.push(v5_message(seq));
    }
    let script = format!(
        "import socket,sys;s=socket.socket(socket.AF_INET,socket.SOCK_DGRAM)\n\
         d=sys.stdin.buffer.read();i=0\n\
         while i<len(d):\n n=int.from_bytes(d[i:i+4],'big');s.sendto(d[i+4:i+4+n],('127.0.0.1',{COLLECT}));i+=4+n"
    );
    let mut stream = Vec::new();
    for d in &datagrams {
        stream.extend((d.len() as u32).to_be_bytes());
        stream.extend(d);
    }
    let mut py = ns
        .cmd("python3")
        .args(["-c", &script])
        .stdin(Stdio::piped())
        .spawn()
        .unwrap();
    py.stdin.take().unwrap().write_all(&stream).unwrap();
    assert!(py.wait().unwrap().success());
    let got = col.stop();
    assert!(got.status.success(), "{}", got.err);
    assert!(got.n("bad_messages") > 100, "{}", got.err);
    assert_eq!(got.n("records"), 4, "the v5 flows: {}", got.err);
    assert_eq!(got.n("sequence_lost"), 3_999, "{}", got.err);
    assert_eq!(got.n("sequence_resets"), 2, "{}", got.err);
    assert!(
        got.err
            .contains("3999 lost (sequence) across 2 sequence restarts"),
        "{}",
        got.err
    );
    assert_eq!(got.n("stores.0.stored"), 4);
    let reasons = json_at(&got.json, "exporters");
    let text = reasons.to_string();
    for why in [
        "unknown_version",
        "bad_length",
        "bad_set",
        "too_many_fields",
    ] {
        assert!(text.contains(why), "{why} not counted: {text}");
    }
    // The accounting lines, at a stop by SIGTERM.
    assert!(
        got.err.contains("tapflow: lost before the collector: 3999"),
        "{}",
        got.err
    );
}

#[test]
fn exporters_outside_allow_are_refused() {
    let ns = Netns::new("alw");
    let col = Collector::start(&ns, "nfv5://127.0.0.1", 2055, &["--allow", "192.0.2.0/24"]);
    run_ok(ns.cmd("python3").args([
        "-c",
        &format!(
            "import socket;s=socket.socket(socket.AF_INET,socket.SOCK_DGRAM)\n\
             for i in range(5): s.sendto(bytes.fromhex('{}'),('127.0.0.1',2055))",
            v5_message(0).iter().map(|b| format!("{b:02x}")).collect::<String>()
        ),
    ]));
    let got = col.stop();
    assert!(got.status.success(), "{}", got.err);
    assert_eq!((got.n("refused"), got.n("records")), (5, 0), "{}", got.err);
}

#[test]
fn a_full_disk_is_a_named_loss_not_a_crash() {
    let ns = Netns::new("ful");
    let dir = tempfile::tempdir().unwrap();
    let full = dir.path().join("full");
    std::fs::create_dir(&full).unwrap();
    let summary = dir.path().join("summary.json");
    // The flows go to a 16 KiB tmpfs in a mount namespace of the collector's own.
    let cmd = format!(
        "mount -t tmpfs -o size=16k tapflow-test {full} && exec {bin} collect -q \
         -l nfv5://127.0.0.1 -w csv:{full}/flows.csv --summary-json {summary}",
        full = full.display(),
        bin = bin().display(),
        summary = summary.display()
    );
    let child = ns
        .cmd("unshare")
        .args(["--mount", "--propagation", "private", "sh", "-c", &cmd])
        .stdin(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut g = ChildGuard::new(child, "tapflow collect");
    wait_udp_bound(&mut g, 2055);
    // 3000 v5 flows, about 150 bytes of CSV each: far past 16 KiB.
    let hex: String = v5_message(0).iter().map(|b| format!("{b:02x}")).collect();
    run_ok(ns.cmd("python3").args([
        "-c",
        &format!(
            "import socket;s=socket.socket(socket.AF_INET,socket.SOCK_DGRAM)\n\
             m=bytearray.fromhex('{hex}')\n\
             for i in range(3000):\n m[16:20]=i.to_bytes(4,'big');s.sendto(m,('127.0.0.1',2055))"
        ),
    ]));
    // A stop reads the socket empty first.
    g.signal(libc::SIGTERM);
    let (status, err) = g.wait_output(Duration::from_secs(30));
    assert_eq!(status.code(), Some(1), "{err}");
    assert!(err.contains("lost in the collector:"), "{err}");
    let json = std::fs::read_to_string(&summary).unwrap();
    let (flows, stored, dropped) = (
        json_u64(&json, "stores.0.flows"),
        json_u64(&json, "stores.0.stored"),
        json_u64(&json, "stores.0.dropped"),
    );
    assert_eq!(flows, 3000, "{err}");
    assert!(dropped > 0 && stored + dropped == flows, "{json}");
}

/// NetFlow v5 messages of one flow each, numbered `from..from + n`, sent to 2055 from `ns`.
fn send_v5(ns: &Netns, from: u32, n: u32) {
    run_ok(&mut v5_sender(ns, from, n));
}

/// The command that sends what [`send_v5`] sends.
fn v5_sender(ns: &Netns, from: u32, n: u32) -> Command {
    let hex: String = v5_message(0).iter().map(|b| format!("{b:02x}")).collect();
    let mut c = ns.cmd("python3");
    c.args([
        "-c",
        &format!(
            "import socket,time;s=socket.socket(socket.AF_INET,socket.SOCK_DGRAM)\n\
             m=bytearray.fromhex('{hex}')\n\
             for i in range({from},{from}+{n}):\n m[16:20]=i.to_bytes(4,'big');\
             s.sendto(m,('127.0.0.1',2055));time.sleep(0.001)"
        ),
    ]);
    c
}

/// Sets the soft descriptor limit of process `pid` (`None`: up to its hard limit).
fn set_nofile(pid: i32, soft: Option<usize>) {
    let limits = std::fs::read_to_string(format!("/proc/{pid}/limits")).unwrap();
    let hard = limits
        .lines()
        .find(|l| l.starts_with("Max open files"))
        .and_then(|l| l.split_whitespace().nth(4))
        .unwrap()
        .to_string();
    let soft = soft.map_or(hard.clone(), |n| n.to_string());
    run_ok(Command::new("prlimit").args([
        "--pid",
        &pid.to_string(),
        &format!("--nofile={soft}:{hard}"),
    ]));
}

#[test]
fn a_store_out_of_descriptors_is_retried_and_loses_nothing() {
    let ns = Netns::new("fds");
    let dir = tempfile::tempdir().unwrap();
    let store = dir.path().join("store");
    let summary = dir.path().join("summary.json");
    // Its stderr goes to a file, read while it runs: the line that says the store failed.
    let log = dir.path().join("stderr");
    let child = ns
        .tapflow(&[
            "collect",
            "-q",
            "-l",
            "nfv5://127.0.0.1",
            "--flush-seconds",
            "0.5",
            "--metrics",
            "9466",
        ])
        .arg("--store")
        .arg(&store)
        .arg("--summary-json")
        .arg(&summary)
        .stdin(Stdio::null())
        .stderr(std::fs::File::create(&log).unwrap())
        .spawn()
        .unwrap();
    let mut g = ChildGuard::new(child, "tapflow collect");
    wait_udp_bound(&mut g, 2055);
    send_v5(&ns, 0, 100);
    std::thread::sleep(Duration::from_secs(1));
    let said = |what: &str| std::fs::read_to_string(&log).unwrap().contains(what);
    // Every descriptor taken: a limit at the lowest free descriptor number makes each open
    // fail with EMFILE, as a thousand idle connections did.
    let open: Vec<usize> = std::fs::read_dir(format!("/proc/{}/fd", g.pid()))
        .unwrap()
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse().ok())
        .collect();
    let free = (0..).find(|n| !open.contains(n)).unwrap();
    set_nofile(g.pid(), Some(free));
    send_v5(&ns, 100, 200);
    // The store fails at its next flush and holds back what comes while it cannot write.
    g.wait_until(Duration::from_secs(60), "say its store failed", |_| {
        said("holding flows back and trying again")
    });
    send_v5(&ns, 300, 200);
    g.wait_until(
        Duration::from_secs(60),
        "read its socket empty",
        udp_queues_empty,
    );
    // The flows read reach the store's thread at the next flush (0.5 s): ten of those, so that
    // a loaded machine has handed them over (held back) before the store can write again.
    std::thread::sleep(Duration::from_secs(5));
    set_nofile(g.pid(), None);
    g.wait_until(Duration::from_secs(60), "say its store works again", |_| {
        said("works again after")
    });
    // /metrics says what was held back, once it has a descriptor to answer with.
    let held = |m: &str| {
        m.lines().any(|l| {
            l.starts_with("tapflow_collect_store_held_back_total{store=\"parquet:")
                && !l.ends_with(" 0")
        })
    };
    let mut metrics = String::new();
    for _ in 0..50 {
        metrics = scrape(&ns, 9466);
        if held(&metrics) {
            break;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    assert!(held(&metrics), "{metrics}");
    g.signal(libc::SIGTERM);
    let (status, _) = g.wait_output(Duration::from_secs(30));
    let err = std::fs::read_to_string(&log).unwrap();
    let json = std::fs::read_to_string(&summary).unwrap_or_else(|e| panic!("{e}: {err}"));
    assert!(status.success(), "{err}");
    assert_eq!(json_u64(&json, "stores.0.flows"), 500, "{json}");
    assert_eq!(json_u64(&json, "stores.0.stored"), 500, "{json}");
    assert_eq!(json_u64(&json, "stores.0.dropped"), 0, "{json}");
    assert_eq!(json_u64(&json, "stores.0.withheld"), 0, "{json}");
    assert!(json_u64(&json, "stores.0.held_back") > 0, "{json}");
    assert!(json_u64(&json, "stores.0.retries") > 0, "{json}");
    assert!(err.contains("held back while it failed"), "{err}");
    assert_eq!(store_flows(&store).len(), 500);
}

/// A classic pcap of `n` 60-byte Ethernet frames of the local experimental EtherType 0x88b5.
fn filler_trace(dir: &Path, n: u32) -> PathBuf {
    let mut b = Vec::new();
    b.extend_from_slice(&0xa1b2_c3d4u32.to_le_bytes());
    b.extend_from_slice(&[2, 0, 4, 0]);
    for v in [0u32, 0, 65535, 1] {
        b.extend_from_slice(&v.to_le_bytes());
    }
    for i in 0..n {
        for v in [i, 0, 60, 60] {
            b.extend_from_slice(&v.to_le_bytes());
        }
        let mut frame = [0u8; 60];
        frame[..6].fill(0xff);
        frame[6..12].copy_from_slice(&[2, 0, 0, 0, 0, 1]);
        frame[12..14].copy_from_slice(&[0x88, 0xb5]);
        b.extend_from_slice(&frame);
    }
    write_file(dir, "filler.pcap", &b)
}

/// softflowd capturing live on one end of a veth pair inside `ns`, exporting to 127.0.0.1:2055;
/// the other end is where traces are replayed. A flow ends 2 s after it began (`maxlife`),
/// found when softflowd reads the next IP packet: each trace replayed ends the flows of the
/// one before.
struct LiveSoftflowd {
    guard: ChildGuard,
    ctl: PathBuf,
}

impl LiveSoftflowd {
    fn start(ns: &Netns, dir: &Path, version: &str) -> LiveSoftflowd {
        run_ok(
            ns.cmd("ip")
                .args(["link", "add", "va", "type", "veth", "peer", "name", "vb"]),
        );
        for i in ["va", "vb"] {
            run_ok(ns.cmd("ip").args(["link", "set", i, "up"]));
        }
        let ctl = dir.join(format!("softflowd-{version}.ctl"));
        let child = ns
            .cmd("softflowd")
            .args(["-i", "vb", "-n", "127.0.0.1:2055", "-v", version, "-d"])
            .args(["-t", "maxlife=2", "-t", "expint=1", "-c"])
            .arg(&ctl)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("softflowd");
        let mut guard = ChildGuard::new(child, "softflowd");
        guard.wait_until(
            Duration::from_secs(10),
            "softflowd's control socket",
            |_| ctl.exists(),
        );
        LiveSoftflowd { guard, ctl }
    }

    fn statistics(&self, ns: &Netns) -> String {
        run_ok(
            ns.cmd("softflowctl")
                .arg("-c")
                .arg(&self.ctl)
                .arg("statistics"),
        )
    }

    /// A number from `softflowctl statistics`: the one after `key`.
    fn stat(&self, ns: &Netns, key: &str) -> u64 {
        let out = self.statistics(ns);
        let at = out
            .find(key)
            .unwrap_or_else(|| panic!("no {key:?} in {out}"));
        out[at + key.len()..]
            .split_whitespace()
            .next()
            .and_then(|n| n.trim_start_matches('(').parse().ok())
            .unwrap_or_else(|| panic!("{key:?} in {out}"))
    }

    /// Replays `pcap` (`packets` packets) onto the veth pair and waits until softflowd has
    /// read them all and sent what they ended; returns the export packets sent so far, and
    /// leaves 2 s for the new flows to reach their end. libpcap hands softflowd its packets a
    /// ring block at a time, so frames of no protocol (`filler`, which softflowd counts as
    /// ignored) follow until the block with the trace's last packet is handed over.
    fn send(&self, ns: &Netns, pcap: &Path, filler: &Path, packets: u64) -> u64 {
        let before = self.stat(ns, "Packets processed:");
        run_ok(ns.cmd("tcpreplay").args(["-q", "-i", "va"]).arg(pcap));
        let start = std::time::Instant::now();
        while self.stat(ns, "Packets processed:") < before + packets
            || self.stat(ns, "Flows exported:") < self.stat(ns, "Flows expired:")
        {
            assert!(
                start.elapsed() < Duration::from_secs(60),
                "softflowd did not read the trace: {}",
                self.statistics(ns)
            );
            run_ok(
                ns.cmd("tcpreplay")
                    .args(["-q", "-t", "-i", "va"])
                    .arg(filler),
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        std::thread::sleep(Duration::from_millis(2500));
        self.stat(ns, "records) in")
    }
}

impl Drop for LiveSoftflowd {
    fn drop(&mut self) {
        self.guard.signal(libc::SIGTERM);
        let _ = self.guard.wait_limited(Duration::from_secs(10));
    }
}

#[test]
fn a_restarted_collector_keeps_the_templates_of_a_running_exporter() {
    // softflowd sends its templates with its first export packet and then every 16th; between,
    // a collector that forgot them withholds every record. Each collector is stopped with
    // SIGTERM mid-stream, as a service manager would.
    let dir = tempfile::tempdir().unwrap();
    // 20 conversations 20 ms apart, replayed in real time: each flow starts at its own time.
    let pcap = built_trace(dir.path(), "t.pcap", 20, 4, 20_000_000);
    let filler = filler_trace(dir.path(), 3000);
    for (v, scheme) in [("9", "nfv9"), ("10", "ipfix")] {
        let ns = Netns::new("rst").without_ipv6();
        let sf = LiveSoftflowd::start(&ns, dir.path(), v);
        let state = dir.path().join(format!("state-{v}"));
        let listen = format!("{scheme}://127.0.0.1:2055");
        let with_state = ["--state-dir", state.to_str().unwrap()];
        let first = Collector::start(&ns, &listen, 2055, &with_state);
        sf.send(&ns, &pcap, &filler, 80);
        sf.send(&ns, &pcap, &filler, 80);
        let first = first.stop();
        first.assert_nothing_lost(&format!("softflowd -v {v}, first run"));
        assert!(state.join("templates.json").is_file(), "{}", first.err);

        // The control: a collector with no state withholds the records (as every collector
        // did before templates were kept).
        let empty = dir.path().join(format!("empty-{v}"));
        let forgot = Collector::start(
            &ns,
            &listen,
            2055,
            &["--state-dir", empty.to_str().unwrap()],
        );
        sf.send(&ns, &pcap, &filler, 80);
        let forgot = forgot.stop();
        assert!(
            forgot.n("template_missing") > 0,
            "v{v} control: {}",
            forgot.err
        );
        assert_eq!(forgot.n("records"), 0, "v{v} control: {}", forgot.err);

        // Restarted on the state the first run left: every record decoded at once.
        let again = Collector::start(&ns, &listen, 2055, &with_state);
        let exported = sf.send(&ns, &pcap, &filler, 80);
        assert!(
            exported < 16,
            "softflowd sent {exported} packets: one was a template refresh"
        );
        let again = again.stop();
        assert!(
            again.err.contains("templates of 1 exporters restored"),
            "v{v}: {}",
            again.err
        );
        again.assert_nothing_lost(&format!("softflowd -v {v}, restarted"));
        // The flows keep their own start times (IPFIX: from the restored
        // systemInitTimeMilliseconds; without it each would take its message's export time).
        let starts = |c: &Collected| {
            let mut t: Vec<u64> = c.rows.iter().map(|r| num(r, "first_ns")).collect();
            t.sort_unstable();
            t.dedup();
            t.len()
        };
        assert!(
            starts(&again) >= 10,
            "v{v}: {} distinct starts",
            starts(&again)
        );

        // A damaged state file: one warning, and the collector runs without it.
        std::fs::write(state.join("templates.json"), b"{\"version\":1,\"exp").unwrap();
        let damaged = Collector::start(&ns, &listen, 2055, &with_state);
        let damaged = damaged.stop();
        assert!(damaged.status.success(), "{}", damaged.err);
        let warnings: Vec<&str> = damaged
            .err
            .lines()
            .filter(|l| l.contains("warning"))
            .collect();
        assert_eq!(warnings.len(), 1, "{}", damaged.err);
        assert!(
            warnings[0].contains("templates.json ignored: EOF"),
            "{}",
            damaged.err
        );
        drop(sf);
    }
}

/// An sFlow v5 datagram from agent 192.0.2.1 with one counter sample of interface `index`
/// (expanded if `expanded`): ifInOctets `in_octets`, ifInErrors `in_errors`, the rest fixed.
fn sflow_counters(seq: u32, index: u32, expanded: bool, in_octets: u64, in_errors: u32) -> Vec<u8> {
    let w = |v: &[u32]| -> Vec<u8> { v.iter().flat_map(|x| x.to_be_bytes()).collect() };
    let mut g = w(&[index, 6, 0, 1_000_000_000, 1, 3]);
    g.extend(w(&[(in_octets >> 32) as u32, in_octets as u32]));
    g.extend(w(&[10 * seq, 0, 0, 2 * seq, in_errors, 0]));
    g.extend(w(&[0, 0, 7 * seq, 0, 0, 0, 0, 2]));
    assert_eq!(g.len(), 88);
    let mut rec = w(&[1, 88]);
    rec.extend(g);
    let mut sample = if expanded {
        w(&[seq, 0, index, 1])
    } else {
        w(&[seq, index, 1])
    };
    sample.extend(rec);
    let mut d = w(&[5, 1, 0xc000_0201, 0, seq, 1000 * seq, 1]);
    d.extend(w(&[if expanded { 4 } else { 2 }, sample.len() as u32]));
    d.extend(sample);
    d
}

#[test]
fn sflow_interface_counters_are_stored_and_queried() {
    let dir = tempfile::tempdir().unwrap();
    let store = dir.path().join("store");
    let ns = Netns::new("sfc");
    let col = Collector::start(
        &ns,
        "sflow://127.0.0.1",
        6343,
        &["--store", store.to_str().unwrap()],
    );
    // Interface 3 (expanded samples): ifInOctets past 2^32, ifInErrors wrapping at 2^32.
    // Interface 4 (flat samples): two samples.
    let msgs = [
        sflow_counters(1, 3, true, 1000, u32::MAX - 1),
        sflow_counters(1, 4, false, 10, 0),
        sflow_counters(2, 3, true, 5000, 1),
        sflow_counters(2, 4, false, 70, 9),
        sflow_counters(3, 3, true, (1 << 32) + 100, 4),
    ];
    let hex: Vec<String> = msgs
        .iter()
        .map(|m| m.iter().map(|b| format!("{b:02x}")).collect())
        .collect();
    run_ok(ns.cmd("python3").args([
        "-c",
        &format!(
            "import socket,time;s=socket.socket(socket.AF_INET,socket.SOCK_DGRAM)\n\
             for h in {hex:?}:\n s.sendto(bytes.fromhex(h),('127.0.0.1',6343));time.sleep(0.05)"
        ),
    ]));
    let got = col.stop();
    assert!(got.status.success(), "{}", got.err);
    assert_eq!(
        (got.n("records"), got.n("malformed")),
        (0, 0),
        "{}",
        got.err
    );
    let out = run_ok(
        tapflow(["query", "-R"])
            .arg(&store)
            .args(["--interfaces", "--csv"]),
    );
    let rows: Vec<Vec<&str>> = out.lines().map(|l| l.split(',').collect()).collect();
    assert_eq!(rows.len(), 3, "{out}");
    let col = |name: &str| rows[0].iter().position(|c| *c == name).unwrap();
    let pick = |r: &[&str]| {
        [
            "exporter",
            "if_index",
            "samples",
            "speed",
            "status",
            "in_bytes",
            "in_packets",
            "in_errors",
            "out_packets",
        ]
        .map(|k| r[col(k)].to_string())
    };
    assert_eq!(
        pick(&rows[1]),
        [
            "127.0.0.1",
            "3",
            "3",
            "1000000000",
            "up",
            "4294966396",
            "20",
            "6",
            "14"
        ]
        .map(String::from),
        "{out}"
    );
    assert_eq!(
        pick(&rows[2]),
        [
            "127.0.0.1",
            "4",
            "2",
            "1000000000",
            "up",
            "60",
            "10",
            "9",
            "7"
        ]
        .map(String::from),
        "{out}"
    );
}

/// `--geoip`, `--asn` and `--networks` set the places of every stored flow, and
/// `--interfaces` names the exporter's interfaces; under a stream of records the networks
/// file, then the interfaces file, is replaced by a bad one (refused with its line number, the
/// previous data staying in force), then by a good one (taken up), and no record is lost.
#[test]
fn enrichment_places_every_flow_and_reloads_under_a_stream() {
    let ns = Netns::new("enr");
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let geoip = write_file(d, "country.csv", b"192.0.2.0,192.0.2.127,DE\n");
    let asn = write_file(
        d,
        "asn.csv",
        b"192.0.2.0,192.0.2.255,64500,\"Example, Inc.\"\n",
    );
    let nets = d.join("networks.toml");
    let v1 = "\"192.0.2.0/24\" = { name = \"lab\", role = \"servers\", tenant = \"acme\" }\n\
              \"192.0.2.2/32\" = \"web\"\n";
    std::fs::write(&nets, v1).unwrap();
    let ifs = d.join("interfaces.csv");
    let ifs_v1 = "exporter,index,name,speed\n127.0.0.1,1,uplink,1G\n127.0.0.1,2,lan,\n";
    std::fs::write(&ifs, ifs_v1).unwrap();
    let store = d.join("store");
    let log = std::fs::File::create(d.join("stderr")).unwrap();
    let child = ns
        .tapflow(&[
            "collect",
            "-q",
            "-l",
            "nfv5://127.0.0.1",
            "--flush-seconds",
            "1",
        ])
        .arg("--store")
        .arg(&store)
        .arg("--geoip")
        .arg(&geoip)
        .arg("--asn")
        .arg(&asn)
        .arg("--networks")
        .arg(&nets)
        .arg("--interfaces")
        .arg(&ifs)
        .arg("--summary-json")
        .arg(d.join("summary.json"))
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(log)
        .spawn()
        .expect("tapflow collect");
    let mut guard = ChildGuard::new(child, "tapflow collect");
    wait_udp_bound(&mut guard, 2055);
    let stderr = || std::fs::read_to_string(d.join("stderr")).unwrap_or_default();
    // The first records are stored under the first file.
    send_v5(&ns, 0, 50);
    guard.wait_until(Duration::from_secs(60), "stored 50 flows", |_| {
        store_flows(&store).len() >= 50
    });
    let mut stream = ChildGuard::new(
        v5_sender(&ns, 50, 2000)
            .stdout(Stdio::null())
            .spawn()
            .unwrap(),
        "the v5 sender",
    );
    std::fs::write(
        &nets,
        "\"192.0.2.0/24\" = \"lab\"\n\"192.0.2.0/33\" = \"x\"\n",
    )
    .unwrap();
    guard.signal(libc::SIGHUP);
    guard.wait_until(Duration::from_secs(60), "refused the bad file", |_| {
        stderr().contains("networks.toml line 2: prefix length in '192.0.2.0/33'")
    });
    let v2 = v1.replace("\"lab\"", "\"lab2\"");
    std::fs::write(&nets, v2).unwrap();
    std::fs::write(&ifs, format!("{ifs_v1}127.0.0.1,3,wan,fast\n")).unwrap();
    guard.signal(libc::SIGHUP);
    guard.wait_until(Duration::from_secs(60), "refused the bad file", |_| {
        stderr().contains("interfaces.csv line 4: 'fast' is not a speed")
    });
    let reloads = stderr().matches("enrichment reloaded").count();
    std::fs::write(&ifs, ifs_v1.replace("uplink", "transit")).unwrap();
    guard.signal(libc::SIGHUP);
    guard.wait_until(Duration::from_secs(60), "reloaded", |_| {
        stderr().matches("enrichment reloaded").count() > reloads
    });
    assert!(stream.wait_limited(Duration::from_secs(120)).success());
    // Records sent after the reload are stored under the second file.
    send_v5(&ns, 2050, 10);
    guard.signal(libc::SIGTERM);
    let status = guard.wait_limited(Duration::from_secs(60));
    let err = stderr();
    assert!(status.success(), "{err}");
    let json = std::fs::read_to_string(d.join("summary.json")).unwrap();
    assert_eq!(json_u64(&json, "records"), 2060, "{err}");
    assert_eq!(json_u64(&json, "stores.0.stored"), 2060, "{err}");
    let flows = store_flows(&store);
    assert_eq!(flows.len(), 2060);
    let mut names = BTreeMap::new();
    for f in &flows {
        let (s, t) = (&f.src_place, &f.dst_place);
        assert_eq!(
            (s.asn, s.as_name, s.country_code()),
            (64500, "Example, Inc.", "DE")
        );
        assert_eq!((t.asn, t.country_code()), (64500, "DE"));
        assert_eq!((s.net.role, s.net.tenant), ("servers", "acme"));
        assert_eq!(t.net.name, "web", "the longest prefix wins");
        *names.entry(s.net.name).or_insert(0) += 1;
    }
    assert!(names.get("lab").copied().unwrap_or(0) >= 50, "{names:?}");
    assert!(names.get("lab2").copied().unwrap_or(0) >= 10, "{names:?}");
    assert_eq!(names.len(), 2, "{names:?}");
    // Asked by them: keys and filter words.
    let q = |args: &[&str]| {
        let mut c = tapflow(["query", "-R", store.to_str().unwrap(), "--csv"]);
        run_ok(c.args(args))
    };
    let top = q(&["-s", "srcas/bytes"]);
    assert!(top.contains("64500") && top.contains("2060"), "{top}");
    let top = q(&["-s", "dstcountry/flows"]);
    assert!(top.contains("DE") && top.contains("2060"), "{top}");
    let some = q(&["-s", "srcas/flows", "src as 64500 and dst country DE"]);
    assert!(some.contains("2060"), "{some}");
    let none = q(&["-s", "srcas/flows", "dst as 13335"]);
    assert!(!none.contains("64500"), "{none}");
    // AS names beside the numbers, network names as keys and filter words.
    let top = q(&["-s", "srcas/bytes"]);
    assert!(
        top.starts_with("srcas,srcas_name,flows,") && top.contains("64500,\"Example, Inc.\",2060,"),
        "{top}"
    );
    assert!(some.contains("64500,\"Example, Inc.\","), "{some}");
    let nets = q(&["-s", "srcnet/flows"]);
    let lab = nets.lines().find(|l| l.starts_with("lab,")).unwrap_or("");
    let lab2 = nets.lines().find(|l| l.starts_with("lab2,")).unwrap_or("");
    assert_eq!(
        lab.split(',').nth(1).and_then(|n| n.parse::<usize>().ok()),
        Some(names["lab"]),
        "{nets}"
    );
    assert_eq!(
        lab2.split(',').nth(1).and_then(|n| n.parse::<usize>().ok()),
        Some(names["lab2"]),
        "{nets}"
    );
    let by = q(&[
        "-a",
        "srcnet,dstnet",
        "src net-name lab2 and dst net-name web",
    ]);
    assert!(by.contains(&format!("lab2,web,{},", names["lab2"])), "{by}");
    let json = {
        let mut c = tapflow(["query", "-R", store.to_str().unwrap(), "--json"]);
        run_ok(c.args(["-a", "srcas,srcnet"]))
    };
    assert!(
        json.contains("\"srcas\":64500,\"srcas_name\":\"Example, Inc.\",\"srcnet\":\"lab\""),
        "{json}"
    );
    // Interfaces by the names the file gave them, the reloaded name the newest.
    let by = q(&["-s", "inif/flows"]);
    assert!(by.starts_with("inif,inif_name,flows,"), "{by}");
    assert!(by.contains("\n1,transit,2060,"), "{by}");
    let by = q(&["-a", "exporter,outif"]);
    assert!(by.contains("\n127.0.0.1,2,lan,2060,"), "{by}");
}
