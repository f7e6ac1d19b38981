//! `tapflow console` in a real browser (Debian's chromium driven by chromedriver over WebDriver)
//! over a store the test fills with known flows: the top tables and totals equal `tapflow
//! query`'s, a click on a row filters every view, the chart is drawn, the page makes no
//! request elsewhere and logs no error, it fits a phone, and follows the system's dark mode;
//! the same page in Firefox (Debian's firefox-esr over Marionette). The health view with a
//! real capture probe on a veth pair (in namespaces: needs root) and one that does not answer.
//! Also the server's manners without a browser: loopback only without credentials, Basic
//! authentication, TLS.

mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use base64::Engine;
use common::webdriver::{Driver, get};
use common::{ChildGuard, free_port, tapflow};
use serde_json::{Value, json};
use tapflow_store::parquet::store::{ParquetOptions, ParquetStore};
use tapflow_store::{
    ExporterStats, FlowStore, InterfaceCounters, InterfaceName, Place, StoredFlow, schema::addr16,
};
use tapflow_wire::flowrecord::{Counters, FlowRecord};

fn now_ns() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_nanos() as u64
}

/// Known flows over the last 40 minutes: ten senders with distinct volumes, TCP to 443 and 80,
/// UDP to 53, some ICMP, two exporters.
fn fill_store(dir: &Path) -> u64 {
    let mut store = ParquetStore::open(dir, ParquetOptions::default()).expect("open store");
    let now = now_ns();
    let mut flows = Vec::new();
    for i in 0..600u64 {
        let sender = (i % 10) as u8;
        let (proto, dport) = match i % 6 {
            0..=2 => (6u8, 443u16),
            3 => (6, 80),
            4 => (17, 53),
            _ => (1, 0x0800),
        };
        let start = now - 40 * 60_000_000_000 + i * 4_000_000_000;
        let octets = 1000 * (u64::from(sender) + 1) * (1 + i % 3);
        let mut src = [0u8; 16];
        src[..4].copy_from_slice(&[10, 0, 0, sender + 1]);
        let mut dst = [0u8; 16];
        dst[..4].copy_from_slice(&[192, 0, 2, (i % 7) as u8 + 1]);
        let flow = FlowRecord {
            ipv6: false,
            proto,
            src,
            dst,
            sport: if proto == 1 {
                0
            } else {
                40_000 + (i % 1000) as u16
            },
            dport,
            vlan: 0,
            interface: 1 + (i % 2) as u32,
            fwd: Counters {
                packets: 10,
                octets,
                tcp_flags: if proto == 6 { 0x1b } else { 0 },
                first_ns: start,
                last_ns: start + 1_000_000_000,
            },
            rev: Counters {
                packets: 8,
                octets: octets / 2,
                tcp_flags: if proto == 6 { 0x1b } else { 0 },
                first_ns: start + 1_000_000,
                last_ns: start + 900_000_000,
            },
            ..FlowRecord::default()
        };
        let exporter = if i % 4 == 0 {
            [192, 0, 2, 250]
        } else {
            [192, 0, 2, 251]
        };
        let mut ex = [0u8; 16];
        ex[..4].copy_from_slice(&exporter);
        flows.push(StoredFlow {
            flow,
            egress: 3,
            exporter: addr16(false, &ex),
            domain: 1,
            sampling: 1,
            received_ns: start + 2_000_000_000,
            // Enrichment's places: two ASes with their names, one sender in no network.
            src_place: Place {
                asn: [64_500, 13_335][usize::from(sender % 2)],
                as_name: ["Example, Inc.", "Cloudflare, Inc."][usize::from(sender % 2)],
                country: *b"DE",
                net: network(["office", "dc1 web", ""][usize::from(sender % 3)]),
            },
            ..StoredFlow::default()
        });
    }
    store.insert(&flows).expect("insert");
    // The collector's counters of the two exporters: 192.0.2.250 lost 12 records on the way.
    let stats =
        [([192, 0, 2, 251], 450, 0), ([192, 0, 2, 250], 150, 12)].map(|(a, records, lost)| {
            let mut ex = [0u8; 16];
            ex[..4].copy_from_slice(&a);
            ExporterStats {
                exporter: addr16(false, &ex),
                domain: 1,
                time_ns: now - 60_000_000_000,
                records,
                sequence_lost: lost,
                template_missing: 0,
                bad_messages: 0,
            }
        });
    store
        .insert_exporter_stats(&stats)
        .expect("insert counters");
    // sFlow counters of 192.0.2.251's interface 5, 10 s apart: 12.5 MB in (10 Mb/s), 3 errors.
    let sample = |at: u64, in_octets: u64, in_errors: u32| InterfaceCounters {
        exporter: addr16(false, &[192, 0, 2, 251, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0]),
        domain: 0,
        received_ns: now - at,
        counters: tapflow_wire::sflow::IfCounters {
            if_index: 5,
            if_speed: 1_000_000_000,
            if_status: 3,
            in_octets,
            in_errors,
            ..Default::default()
        },
    };
    store
        .insert_if_counters(&[
            sample(70_000_000_000, 1_000, 7),
            sample(60_000_000_000, 12_501_000, 10),
        ])
        .expect("insert interface counters");
    // Interface names: 192.0.2.251's interface 5 as its exporter announced it, and
    // 192.0.2.250's interface 1 from an interfaces file, with a speed but no counters.
    let named = |exporter: u8, index: u32, name: &str, speed: u64| InterfaceName {
        exporter: addr16(
            false,
            &[192, 0, 2, exporter, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0],
        ),
        domain: 0,
        index,
        name: name.into(),
        description: String::new(),
        speed,
        received_ns: now - 3_000_000_000_000,
    };
    store
        .insert_interfaces(&[
            named(251, 5, "xe-0/0/5", 0),
            named(250, 1, "uplink", 100_000_000),
        ])
        .expect("insert interface names");
    let report = Box::new(store).close().expect("close");
    assert_eq!(report.stored, 600);
    600
}

/// The network named `name` (none if empty).
fn network(name: &str) -> &'static tapflow_store::Network {
    tapflow_store::names::intern_network(tapflow_store::Network {
        name: tapflow_store::names::intern(name),
        ..Default::default()
    })
}

/// `tapflow console` on a free port; returns its guard and base URL.
fn console(store: &Path, extra: &[&str]) -> (ChildGuard, String, u16) {
    let port = free_port();
    let addr = format!("127.0.0.1:{port}");
    let mut args = vec![
        "console",
        "--store",
        store.to_str().unwrap(),
        "--http",
        &addr,
    ];
    args.extend_from_slice(extra);
    let child = tapflow(&args)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn console");
    let mut guard = ChildGuard::new(child, "tapflow console");
    guard.wait_until(Duration::from_secs(30), "listens", |_| {
        std::net::TcpStream::connect(("127.0.0.1", port)).is_ok()
    });
    (guard, format!("http://{addr}"), port)
}

/// Whether chromium and chromedriver are there (else `test` is skipped, saying so).
fn chromium_or_skip(test: &str) -> bool {
    if !Path::new("/usr/bin/chromium").exists() || !Path::new("/usr/bin/chromedriver").exists() {
        eprintln!(
            "skipped: {test}: no chromium/chromedriver (scripts/install-deps.sh installs them)"
        );
        return false;
    }
    true
}

/// `tapflow query --json` rows as (key text, bytes).
fn query_top(store: &Path, stat: &str, filter: Option<&str>) -> Vec<(String, u64)> {
    let mut args = vec![
        "query".to_owned(),
        "--store".into(),
        store.to_str().unwrap().into(),
        "-t".into(),
        "last 1h".into(),
        "-s".into(),
        stat.into(),
        "-n".into(),
        "10".into(),
        "--json".into(),
    ];
    if let Some(f) = filter {
        args.push(f.into());
    }
    let out = common::run_ok(&mut tapflow(&args));
    let key = stat.split('/').next().unwrap();
    out.lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| {
            let v: Value = serde_json::from_str(l).expect("query json line");
            let text = v[key]
                .as_str()
                .map(|t| if t.is_empty() { "-" } else { t }.to_owned())
                .unwrap_or_else(|| v[key].to_string());
            // An AS as the console labels it: `AS64500 Example, Inc.`.
            let text = match v[format!("{key}_name")].as_str() {
                Some(name) => format!("AS{text} {name}"),
                None if key.ends_with("as") => format!("AS{text}"),
                None => text,
            };
            (text, v["bytes"].as_u64().expect("bytes"))
        })
        .collect()
}

fn human_bytes(v: u64) -> String {
    let units = ["B", "KiB", "MiB", "GiB", "TiB", "PiB"];
    let mut x = v as f64;
    let mut i = 0;
    while x >= 1024.0 && i < units.len() - 1 {
        x /= 1024.0;
        i += 1;
    }
    if i == 0 {
        format!("{x:.0} {}", units[i])
    } else {
        format!("{x:.1} {}", units[i])
    }
}

/// The rows of a top table as (value, total) texts.
fn page_top(d: &Driver, key: &str) -> Vec<(String, String)> {
    let v = d.run(&format!(
        "return [...document.querySelectorAll('#top-{key} tbody tr')]\
         .filter(r => r.dataset.filter)\
         .map(r => [r.cells[0].textContent, r.cells[1].textContent])"
    ));
    v.as_array()
        .expect("rows")
        .iter()
        .map(|r| {
            (
                r[0].as_str().unwrap().to_owned(),
                r[1].as_str().unwrap().to_owned(),
            )
        })
        .collect()
}

#[test]
fn the_console_shows_what_query_answers_and_filters_every_view_on_a_click() {
    if !chromium_or_skip("console browser test") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    fill_store(dir.path());
    let (_console, base, _) = console(dir.path(), &[]);
    let d = Driver::start().expect("chromedriver");

    d.go(&format!("{base}/?window=last%201h"));
    d.wait_refresh_after(0);
    assert_eq!(
        d.run("return document.getElementById('error').hidden"),
        Value::Bool(true)
    );

    // The top tables equal tapflow query's answers, row by row.
    for (key, stat) in [
        ("srcip", "srcip/bytes"),
        ("dstport", "dstport/bytes"),
        ("proto", "proto/bytes"),
        ("srcas", "srcas/bytes"),
        ("dstas", "dstas/bytes"),
        ("srcnet", "srcnet/bytes"),
        ("dstnet", "dstnet/bytes"),
    ] {
        let want: Vec<(String, String)> = query_top(dir.path(), stat, None)
            .into_iter()
            .map(|(k, b)| (k, human_bytes(b)))
            .collect();
        let got = page_top(&d, key);
        assert!(!want.is_empty());
        assert_eq!(got.len(), want.len(), "{key}: {got:?} vs {want:?}");
        for ((gk, gb), (wk, wb)) in got.iter().zip(&want) {
            assert_eq!(gb, wb, "{key}: {got:?} vs {want:?}");
            assert!(gk.eq_ignore_ascii_case(wk), "{key}: {got:?} vs {want:?}");
        }
    }

    // The chart is drawn: its canvas has coloured pixels.
    let painted = d.run(
        "const c = document.querySelector('#chart canvas');\
         if (!c) return 0;\
         const px = c.getContext('2d').getImageData(0, 0, c.width, c.height).data;\
         let n = 0; for (let i = 3; i < px.length; i += 4) if (px[i] > 0) n++;\
         return n",
    );
    assert!(
        painted.as_u64().unwrap_or(0) > 1000,
        "blank chart: {painted}"
    );
    d.show("header");
    d.screenshot("overview");

    // The health view lists the sFlow interface by name, in alarm for its input errors, its
    // input a share of its speed; and the named interface whose rates come from the flows.
    let iface = d.run(
        "return [...document.querySelectorAll('#interfaces tbody tr')].map(r =>\
         [r.className, r.cells[0].textContent, r.cells[1].textContent, r.cells[2].textContent,\
         r.querySelector('[data-key=in_errors]').textContent,\
         r.querySelector('[data-key=in_percent]').textContent])",
    );
    assert_eq!(
        iface,
        json!([
            ["alarm", "192.0.2.251", "5", "xe-0/0/5", "3", "1.0 %"],
            ["ok", "192.0.2.250", "1", "uplink", "–", "0.0 %"]
        ]),
        "{iface}"
    );

    // ASes with their names beside the numbers; every sender's network, one in none.
    let ases: Vec<String> = page_top(&d, "srcas").into_iter().map(|r| r.0).collect();
    // (The answers' reverse directions come from the receivers, of no known AS.)
    assert_eq!(
        ases,
        ["AS13335 Cloudflare, Inc.", "AS0", "AS64500 Example, Inc."],
        "{ases:?}"
    );
    let nets: Vec<String> = page_top(&d, "srcnet").into_iter().map(|r| r.0).collect();
    assert_eq!(nets.len(), 3, "{nets:?}");
    for n in ["office", "dc1 web", "-"] {
        assert!(nets.iter().any(|x| x == n), "{nets:?}");
    }
    // The group-by selector stacks the chart by network; a click on a network filters by it.
    d.run(
        "const k = document.getElementById('key'); k.value = 'srcnet';\
         k.dispatchEvent(new Event('change')); return true",
    );
    d.until(
        "the chart stacked by network",
        "return location.search.includes('key=srcnet')",
    );
    let before = d.refreshed();
    d.run(
        "[...document.querySelectorAll('#top-srcnet tbody tr')]         .find(r => r.cells[0].textContent === 'dc1 web').click(); return true",
    );
    d.wait_refresh_after(before);
    let filter = d.run("return document.getElementById('filter').value");
    assert_eq!(filter, json!("src net-name \"dc1 web\""));
    let want: Vec<(String, String)> =
        query_top(dir.path(), "srcip/bytes", Some("src net-name \"dc1 web\""))
            .into_iter()
            .map(|(k, b)| (k, human_bytes(b)))
            .collect();
    // Senders 10.0.0.2, .5 and .8 are in it.
    assert_eq!(want.len(), 3, "{want:?}");
    assert_eq!(page_top(&d, "srcip"), want);
    d.screenshot("by-network");
    // Back to the unfiltered view by protocol.
    let before = d.refreshed();
    d.run("document.getElementById('clear').click(); return true");
    d.wait_refresh_after(before);
    d.until(
        "the filter cleared",
        "return !location.search.includes('filter=')",
    );

    // A click on the top sender filters every view.
    let first = page_top(&d, "srcip")[0].0.clone();
    let before = d.refreshed();
    d.run("document.querySelector('#top-srcip tbody tr').click(); return true");
    d.wait_refresh_after(before);
    let filter = d.run("return document.getElementById('filter').value");
    assert_eq!(filter, Value::String(format!("src ip {first}")));
    let url = d.run("return location.search").as_str().unwrap().to_owned();
    assert!(url.contains("filter=src+ip"), "{url}");
    let senders = page_top(&d, "srcip");
    assert_eq!(senders.len(), 1, "{senders:?}");
    assert_eq!(senders[0].0, first);
    let filtered_ports: Vec<(String, String)> = query_top(
        dir.path(),
        "dstport/bytes",
        Some(&format!("src ip {first}")),
    )
    .into_iter()
    .map(|(k, b)| (k, human_bytes(b)))
    .collect();
    assert_eq!(page_top(&d, "dstport"), filtered_ports);
    d.show("header");
    d.screenshot("filtered");

    // Flow search lists only that sender's flows.
    d.run("document.getElementById('search-run').click(); return true");
    d.until(
        "listed flows",
        "return document.querySelectorAll('#flows tbody tr').length > 0",
    );
    let srcs = d.run(
        "return [...document.querySelectorAll('#flows tbody tr')].map(r => r.cells[1].textContent)",
    );
    let srcs = srcs.as_array().unwrap();
    assert!(
        srcs.iter().all(|s| s.as_str() == Some(first.as_str())),
        "{srcs:?}"
    );
    d.show("#search");
    d.screenshot("flows");

    // Everything came from the console itself, and nothing went wrong in the page.
    let elsewhere = d.run(&format!(
        "return performance.getEntriesByType('resource').map(e => e.name)\
         .filter(n => !n.startsWith('{base}'))"
    ));
    assert_eq!(elsewhere, json!([]));
    assert_eq!(d.severe_logs(), Vec::<String>::new());

    // Dark mode follows the system setting.
    let light = d.run("return getComputedStyle(document.body).backgroundColor");
    d.cdp(
        "Emulation.setEmulatedMedia",
        json!({ "features": [{ "name": "prefers-color-scheme", "value": "dark" }] }),
    );
    let dark = d.run("return getComputedStyle(document.body).backgroundColor");
    assert_ne!(light, dark);
    d.show("header");
    d.screenshot("dark");

    // A phone's width: nothing wider than the screen.
    d.cdp(
        "Emulation.setDeviceMetricsOverride",
        json!({ "width": 390, "height": 844, "deviceScaleFactor": 1, "mobile": true }),
    );
    let before = d.refreshed();
    d.run("location.reload(); return true");
    d.until("reloaded", "return document.readyState === 'complete'");
    let _ = before;
    d.until(
        "refreshed after reload",
        "return Number(document.body.dataset.refreshed || 0) > 0",
    );
    let fits = d.run("return document.documentElement.scrollWidth <= window.innerWidth + 1");
    assert_eq!(fits, Value::Bool(true));
    d.show("header");
    d.screenshot("phone");
}

/// The probe's `/metrics` read from loopback: each family's samples summed (the counters) and
/// their largest (the ring fills).
fn probe_metrics(port: u16) -> (f64, f64, f64, f64, f64) {
    let mut r = ureq::get(&format!("http://127.0.0.1:{port}/metrics"))
        .call()
        .expect("GET /metrics");
    let text = r.body_mut().read_to_string().expect("body");
    let samples = |family: &str| -> Vec<f64> {
        text.lines()
            .filter(|l| l.starts_with(&format!("{family}{{")))
            .map(|l| l.rsplit_once(' ').unwrap().1.parse::<f64>().unwrap())
            .collect()
    };
    let sum = |family: &str| samples(family).iter().sum::<f64>();
    let max = |family: &str| samples(family).into_iter().fold(f64::NAN, f64::max);
    let drops = sum("tapflow_dropped_kernel_total") + sum("tapflow_dropped_ours_total");
    (
        sum("tapflow_received_total"),
        sum("tapflow_recorded_total"),
        drops,
        max("tapflow_ring_fill_ratio"),
        max("tapflow_ring_fill_peak_ratio"),
    )
}

/// The probe rows of the health view: for each address, its class, state, and each counter
/// cell's text and exact value.
fn page_probes(d: &Driver) -> Value {
    d.run(
        "return Object.fromEntries([...document.querySelectorAll('#probes tbody tr')].map(r => \
         [r.dataset.address, {cls: r.className, \
          state: r.querySelector('.state').textContent, \
          cells: Object.fromEntries([...r.cells].filter(c => c.dataset.key) \
            .map(c => [c.dataset.key, [c.textContent, c.title]]))}]))",
    )
}

/// Waits until the probe's `/metrics` says `received` packets were received and the peak
/// fill has been seen, and returns what it says.
fn settled_metrics(port: u16, received: f64) -> (f64, f64, f64, f64, f64) {
    let start = Instant::now();
    loop {
        let m = probe_metrics(port);
        if m.0 == received && m.1 == received {
            return m;
        }
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "the probe says {m:?}, not {received} received and recorded"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}

#[test]
fn the_health_view_shows_a_real_probe_and_one_that_does_not_answer() {
    if !chromium_or_skip("console health view test") {
        return;
    }
    let p = common::VethPair::new("hv");
    common::ip(&["-n", &p.ns_b, "link", "set", "lo", "up"]);
    // The probe's /metrics is on B's loopback: the console, the browser and this test's own
    // requests run in B too (a thread that entered it, and the processes it starts).
    std::thread::scope(|s| {
        s.spawn(|| {
            tapflow_sys::netns::enter(&p.ns_b).unwrap();
            health_view_in_b(&p);
        })
        .join()
        .unwrap_or_else(|e| std::panic::resume_unwind(e));
    });
}

fn health_view_in_b(p: &common::VethPair) {
    let dir = tempfile::tempdir().unwrap();
    fill_store(dir.path());
    // One worker, ten blocks: fills are tenths, and each packet sent alone closes a block of its
    // own (the 10 ms retire timeout).
    let port = free_port();
    let metrics = format!("127.0.0.1:{port}");
    let mut probe = common::VethPair::spawn(&mut p.tapflow_b(&[
        "capture",
        "-i",
        &p.if_b,
        "-q",
        "--threads",
        "1",
        "--block-count",
        "10",
        "--metrics",
        &metrics,
    ]));
    common::wait_capturing(&mut probe, 1);
    probe.wait_until(Duration::from_secs(30), "serves /metrics", |_| {
        std::net::TcpStream::connect(("127.0.0.1", port)).is_ok()
    });
    p.send(&["-c", "600", "--flows", "8"], dir.path(), 600);
    let (received, recorded, drops, fill, peak) = settled_metrics(port, 600.0);
    assert_eq!(drops, 0.0);
    assert!(
        (0.1..0.9).contains(&peak) && fill >= 0.1,
        "fill {fill}, peak {peak}"
    );

    let silent = format!("127.0.0.1:{}", free_port());
    let (_console, base, _) = console(dir.path(), &["--probe", &metrics, "--probe", &silent]);
    let health = get(&format!("{base}/api/v1/health?window=last%201h"));
    let api = &health["probes"][0];
    assert_eq!(
        (&api["received"], &api["ring_fill"], &api["ring_fill_peak"]),
        (&json!(received), &json!(fill), &json!(peak)),
        "{health}"
    );
    assert_eq!(health["probes"][1]["alarm"], true, "{health}");

    let d = Driver::start().expect("chromedriver");
    d.go(&format!("{base}/?window=last%201h"));
    d.until(
        "showed both probes",
        "return document.querySelectorAll('#probes tbody tr').length === 2",
    );
    let rows = page_probes(&d);
    let row = &rows[&metrics];
    // The counters as /metrics says them, exactly (the cell's title) and as shown (600 reads
    // as is); the ring's fill in percent; no alarm.
    for (key, want) in [("received", received), ("recorded", recorded)] {
        assert_eq!(
            row["cells"][key],
            json!([format!("{want}"), format!("{want}")]),
            "{rows}"
        );
    }
    assert_eq!(row["cells"]["dropped_kernel"], json!(["0", "0"]), "{rows}");
    assert_eq!(
        (
            &row["cells"]["ring_fill"][0],
            &row["cells"]["ring_fill_peak"][0]
        ),
        (
            &json!(format!("{:.1} %", fill * 100.0)),
            &json!(format!("{:.1} %", peak * 100.0))
        ),
        "{rows}"
    );
    assert_eq!(
        (&row["cls"], &row["state"]),
        (&json!("ok"), &json!("ok")),
        "{rows}"
    );
    // The address nobody answers on is an alarm, and says why.
    let dead = &rows[&silent];
    assert_eq!(dead["cls"], "alarm", "{rows}");
    assert!(
        dead["state"].as_str().unwrap().starts_with("unreachable: "),
        "{rows}"
    );

    // A stalled probe: stopped while nine packets arrive a block apart, the kernel hands over
    // nine of the ten blocks; the first taken after it resumes sees them all. 90 % is a
    // warning, not an alarm: nothing was lost.
    probe.signal(libc::SIGSTOP);
    for _ in 0..9 {
        p.send(&["-c", "1"], dir.path(), 1);
        std::thread::sleep(Duration::from_millis(100));
    }
    probe.signal(libc::SIGCONT);
    let (received, _, drops, fill, peak) = settled_metrics(port, 609.0);
    assert_eq!(
        (drops, fill, peak),
        (0.0, 0.1, 0.9),
        "the last block taken saw itself alone, the first of the nine saw all nine"
    );
    d.go(&format!("{base}/?window=last%201h"));
    d.until(
        "showed the stalled probe",
        &format!(
            "const r = document.querySelector('#probes tr[data-address=\"{metrics}\"]'); \
             return !!r && r.className === 'warn'"
        ),
    );
    let rows = page_probes(&d);
    let row = &rows[&metrics];
    assert_eq!(row["cells"]["received"][1], json!(format!("{received}")));
    assert_eq!(row["cells"]["ring_fill_peak"][0], "90.0 %", "{rows}");
    assert_eq!(row["state"], "ring nearly full", "{rows}");
    // The collector's counters per exporter, by address: the one that lost records is the alarm.
    let exporters = d.run(
        "return [...document.querySelectorAll('#exporters tbody tr')]\
         .map(r => [r.className, ...[...r.cells].map(c => c.textContent)])",
    );
    assert_eq!(
        exporters,
        json!([
            [
                "alarm",
                "192.0.2.250",
                "1",
                "150",
                "0.04",
                "12",
                "7.41 %",
                "0",
                "0"
            ],
            [
                "ok",
                "192.0.2.251",
                "1",
                "450",
                "0.13",
                "0",
                "0.00 %",
                "0",
                "0"
            ],
        ]),
        "{exporters}"
    );
    assert_eq!(d.severe_logs(), Vec::<String>::new());
    d.show("#health");
    d.screenshot("health");
}

#[test]
fn the_health_api_serves_sflow_interface_counters() {
    let dir = tempfile::tempdir().unwrap();
    fill_store(dir.path());
    let (_console, base, _) = console(dir.path(), &[]);
    let health = get(&format!("{base}/api/v1/health?window=last%201h"));
    let i = &health["interfaces"][0];
    assert_eq!(
        health["interfaces"].as_array().unwrap().len(),
        2,
        "{health}"
    );
    assert_eq!(
        (
            &i["exporter"],
            &i["if_index"],
            &i["in_errors"],
            &i["up"],
            &i["alarm"]
        ),
        (
            &json!("192.0.2.251"),
            &json!(5),
            &json!(3),
            &json!(true),
            &json!(true)
        ),
        "{health}"
    );
    assert!(
        (i["in_bps"].as_f64().unwrap() - 10e6).abs() < 1.0,
        "{health}"
    );
    // Its name as the exporter gave it, its speed from the counters, its use a share of it.
    assert_eq!(
        (&i["name"], &i["speed"], &i["from"]),
        (
            &json!("xe-0/0/5"),
            &json!(1_000_000_000),
            &json!("counters")
        ),
        "{health}"
    );
    assert!(
        (i["in_percent"].as_f64().unwrap() - 1.0).abs() < 1e-6,
        "{health}"
    );
    // 192.0.2.250's interface 1 sends no counters: its rates come from the flows that came in
    // on it, over the hour, as a share of the interfaces file's 100 Mb/s.
    let u = &health["interfaces"][1];
    assert_eq!(
        (&u["exporter"], &u["if_index"], &u["name"], &u["from"]),
        (
            &json!("192.0.2.250"),
            &json!(1),
            &json!("uplink"),
            &json!("flows")
        ),
        "{health}"
    );
    // Flows i ≡ 0 (mod 4) came from 192.0.2.250 on interface 1, both directions of each.
    let bytes: u64 = (0..600u64)
        .filter(|i| i % 4 == 0)
        .map(|i| {
            let octets = 1000 * (i % 10 + 1) * (1 + i % 3);
            octets + octets / 2
        })
        .sum();
    let bps = bytes as f64 * 8.0 / 3600.0;
    assert!(
        (u["in_bps"].as_f64().unwrap() - bps).abs() < 1e-6 * bps,
        "{bps} {health}"
    );
    assert!(
        (u["in_percent"].as_f64().unwrap() - bps * 100.0 / 1e8).abs() < 1e-6,
        "{health}"
    );
    assert_eq!(u["out_bps"], json!(0.0), "{health}");
}

#[test]
fn the_api_refuses_bad_parameters_in_one_line() {
    let dir = tempfile::tempdir().unwrap();
    fill_store(dir.path());
    let (_console, base, _) = console(dir.path(), &[]);
    for (q, want) in [
        ("/api/v1/top?key=nope", "key 'nope'"),
        ("/api/v1/top?filter=src%20port%20banana", "banana"),
        ("/api/v1/series?window=yesterday", "yesterday"),
        ("/api/v1/top?n=0", "n 0"),
    ] {
        let mut r = ureq::get(&format!("{base}{q}"))
            .config()
            .http_status_as_error(false)
            .build()
            .call()
            .unwrap();
        assert_eq!(r.status(), 400, "{q}");
        let text = r.body_mut().read_to_string().unwrap();
        let v: Value = serde_json::from_str(&text).unwrap();
        let msg = v["error"].as_str().unwrap();
        assert!(msg.contains(want) && !msg.contains('\n'), "{q}: {msg}");
    }
    let top = get(&format!("{base}/api/v1/top?window=last%201h&key=srcip&n=3"));
    assert_eq!(top["rows"].as_array().unwrap().len(), 3);
    let total: u64 = top["total"]["flows"].as_u64().unwrap();
    assert_eq!(total, 600 * 2, "every stored biflow is two one-way flows");
}

#[test]
fn credentials_and_tls_guard_the_console() {
    let dir = tempfile::tempdir().unwrap();
    // No credentials: a non-loopback address is refused at start, in one line.
    let out = tapflow([
        "console",
        "--store",
        dir.path().to_str().unwrap(),
        "--http",
        "0.0.0.0:0",
    ])
    .output()
    .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("needs --http-auth"), "{err}");
    assert_eq!(err.trim().lines().count(), 1, "{err}");

    // With credentials: 401 without, 200 with the right password, 401 with a wrong one.
    let mut hash = tapflow(["console", "--hash-password"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    use std::io::Write;
    hash.stdin.take().unwrap().write_all(b"s3cret\n").unwrap();
    let hashed = hash.wait_with_output().unwrap();
    assert!(hashed.status.success());
    let line = String::from_utf8(hashed.stdout).unwrap();
    assert!(line.starts_with("$argon2id$"), "{line}");
    let creds = dir.path().join("users");
    std::fs::write(&creds, format!("alice:{}", line.trim())).unwrap();
    let store = dir.path().join("store");
    std::fs::create_dir(&store).unwrap();
    let (_c, base, _) = console(&store, &["--http-auth", creds.to_str().unwrap()]);
    let status = |auth: Option<&str>| {
        let mut req = ureq::get(&format!("{base}/api/v1/summary"))
            .config()
            .http_status_as_error(false)
            .build();
        if let Some(a) = auth {
            let h = base64::engine::general_purpose::STANDARD.encode(a);
            req = req.header("Authorization", &format!("Basic {h}"));
        }
        req.call().unwrap().status().as_u16()
    };
    assert_eq!(status(None), 401);
    assert_eq!(status(Some("alice:wrong")), 401);
    assert_eq!(status(Some("alice:s3cret")), 200);

    // TLS with a self-signed certificate, read by curl.
    if Command::new("openssl").arg("version").output().is_err()
        || Command::new("curl").arg("--version").output().is_err()
    {
        eprintln!("skipped: console TLS: no openssl or curl");
        return;
    }
    let (cert, key) = (dir.path().join("cert.pem"), dir.path().join("key.pem"));
    let made = Command::new("openssl")
        .args([
            "req",
            "-x509",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-days",
            "1",
            "-subj",
            "/CN=localhost",
        ])
        .arg("-keyout")
        .arg(&key)
        .arg("-out")
        .arg(&cert)
        .stderr(Stdio::null())
        .status()
        .unwrap();
    assert!(made.success());
    let (_t, base, port) = console(
        &store,
        &[
            "--tls-cert",
            cert.to_str().unwrap(),
            "--tls-key",
            key.to_str().unwrap(),
        ],
    );
    let _ = base;
    let out = Command::new("curl")
        .args(["-sS", "--cacert"])
        .arg(&cert)
        .args([
            "--resolve",
            &format!("localhost:{port}:127.0.0.1"),
            &format!("https://localhost:{port}/api/v1/summary?window=last%201h"),
        ])
        .output()
        .unwrap();
    let body = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(v["total"]["flows"], 0);
}

#[test]
fn collect_serves_the_console_over_the_store_it_fills() {
    let dir = tempfile::tempdir().unwrap();
    let store = dir.path().join("store");
    let trace = common::built_trace(dir.path(), "t.pcap", 40, 6, 1_000_000);
    let port = free_port();
    let udp = free_port();
    let http = format!("127.0.0.1:{port}");
    let listen = format!("ipfix://127.0.0.1:{udp}");
    let child = tapflow([
        "collect",
        "--listen",
        &listen,
        "--store",
        store.to_str().unwrap(),
        "--flush-seconds",
        "0.5",
        "--stats-seconds",
        "0.5",
        "--http",
        &http,
        "-q",
    ])
    .stdout(Stdio::null())
    .stderr(Stdio::piped())
    .spawn()
    .unwrap();
    let mut guard = ChildGuard::new(child, "tapflow collect --http");
    guard.wait_until(Duration::from_secs(30), "serves the console", |_| {
        std::net::TcpStream::connect(("127.0.0.1", port)).is_ok()
    });
    common::run_ok(&mut tapflow([
        "flows",
        "-r",
        trace.to_str().unwrap(),
        "--export",
        &format!("ipfix://127.0.0.1:{udp}"),
        "-q",
    ]));
    let window = "2000-01-01T00:00-2100-01-01T00:00";
    let url = format!("http://{http}/api/v1/summary?window={window}");
    let start = Instant::now();
    let flows = loop {
        let v = get(&url);
        let n = v["total"]["flows"].as_u64().unwrap();
        if n > 0 || start.elapsed() > Duration::from_secs(30) {
            break n;
        }
        std::thread::sleep(Duration::from_millis(200));
    };
    let out = common::run_ok(&mut tapflow([
        "query",
        "-R",
        store.to_str().unwrap(),
        "-t",
        window,
        "-I",
        "--json",
    ]));
    let v: Value = serde_json::from_str(out.lines().next().unwrap()).unwrap();
    assert!(flows >= 40, "{flows}");
    assert_eq!(flows, v["flows"].as_u64().unwrap());

    // The health view has the collector's counters for the one exporter: every record it sent
    // (the trace's 40 flows, one biflow record each), none lost, no template missing, once a
    // stats interval has passed.
    let url = format!("http://{http}/api/v1/health?window={window}");
    let start = Instant::now();
    let health = loop {
        let v = get(&url);
        let counted = v["exporters"][0]["records"].as_u64() == Some(40)
            && v["exporters"][0]["domain"].is_u64();
        if counted || start.elapsed() > Duration::from_secs(30) {
            break v;
        }
        std::thread::sleep(Duration::from_millis(200));
    };
    let exporters = health["exporters"].as_array().unwrap();
    assert_eq!(exporters.len(), 1, "{health}");
    let e = &exporters[0];
    assert_eq!(e["exporter"], "127.0.0.1", "{health}");
    assert_eq!(e["records"].as_u64(), Some(40), "{health}");
    assert_eq!(e["sequence_lost"], 0, "{health}");
    assert_eq!(e["template_missing"], 0, "{health}");
    assert_eq!(e["bad_messages"], 0, "{health}");
    assert_eq!(e["alarm"], false, "{health}");
    guard.signal(libc::SIGINT);
    let (status, err) = guard.wait_output(Duration::from_secs(30));
    assert!(status.success(), "{err}");
}

/// Firefox driven over Marionette, its own remote protocol (length-prefixed JSON over TCP; no
/// geckodriver in Debian), with a fresh profile whose every outbound connection goes to a
/// closed port on loopback: the browser reaches the console and nothing else.
struct Firefox {
    stream: std::net::TcpStream,
    id: u64,
    _process: ChildGuard,
    _profile: tempfile::TempDir,
}

impl Firefox {
    fn start() -> Firefox {
        let profile = tempfile::tempdir().unwrap();
        let port = free_port();
        let prefs = [
            format!("user_pref(\"marionette.port\", {port});"),
            // Every proxy on a closed loopback port, no DNS: updates, telemetry and remote
            // settings fail on the spot instead of leaving the host.
            "user_pref(\"network.proxy.type\", 1);".into(),
            "user_pref(\"network.proxy.http\", \"127.0.0.1\");".into(),
            "user_pref(\"network.proxy.http_port\", 9);".into(),
            "user_pref(\"network.proxy.ssl\", \"127.0.0.1\");".into(),
            "user_pref(\"network.proxy.ssl_port\", 9);".into(),
            "user_pref(\"network.proxy.socks\", \"127.0.0.1\");".into(),
            "user_pref(\"network.proxy.socks_port\", 9);".into(),
            "user_pref(\"network.proxy.socks_remote_dns\", true);".into(),
            "user_pref(\"network.dns.disabled\", true);".into(),
            "user_pref(\"network.trr.mode\", 5);".into(),
        ];
        std::fs::write(profile.path().join("user.js"), prefs.join("\n")).unwrap();
        let child = Command::new("firefox-esr")
            .args(["--headless", "--marionette", "--no-remote", "-profile"])
            .arg(profile.path())
            .arg("about:blank")
            .env("MOZ_HEADLESS_WIDTH", "1280")
            .env("MOZ_HEADLESS_HEIGHT", "800")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("spawn firefox-esr");
        let mut guard = ChildGuard::new(child, "firefox-esr");
        guard.wait_until(Duration::from_secs(90), "serves Marionette", |_| {
            std::net::TcpStream::connect(("127.0.0.1", port)).is_ok()
        });
        let stream = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
        stream
            .set_read_timeout(Some(Duration::from_secs(120)))
            .unwrap();
        let mut ff = Firefox {
            stream,
            id: 0,
            _process: guard,
            _profile: profile,
        };
        let hello = ff.read();
        assert_eq!(hello["marionetteProtocol"], 3, "{hello}");
        ff.call("WebDriver:NewSession", json!({ "capabilities": {} }));
        ff
    }

    fn read(&mut self) -> Value {
        use std::io::Read;
        let mut len = Vec::new();
        let mut b = [0u8; 1];
        loop {
            self.stream.read_exact(&mut b).expect("Marionette reply");
            if b[0] == b':' {
                break;
            }
            len.push(b[0]);
        }
        let n: usize = String::from_utf8(len).unwrap().parse().unwrap();
        let mut body = vec![0u8; n];
        self.stream.read_exact(&mut body).unwrap();
        serde_json::from_slice(&body).unwrap()
    }

    /// Sends a command; its result (the reply's error fails the test).
    fn call(&mut self, command: &str, params: Value) -> Value {
        use std::io::Write;
        self.id += 1;
        let msg = json!([0, self.id, command, params]).to_string();
        write!(self.stream, "{}:{msg}", msg.len()).unwrap();
        let reply = self.read();
        assert_eq!(reply[1], self.id, "{reply}");
        assert!(reply[2].is_null(), "{command}: {}", reply[2]);
        reply[3].clone()
    }

    fn run(&mut self, script: &str) -> Value {
        self.call(
            "WebDriver:ExecuteScript",
            json!({ "script": script, "args": [] }),
        )["value"]
            .clone()
    }

    fn until(&mut self, what: &str, script: &str) {
        let start = Instant::now();
        while start.elapsed() < Duration::from_secs(90) {
            if self.run(script) == Value::Bool(true) {
                return;
            }
            std::thread::sleep(Duration::from_millis(200));
        }
        let error = self.run("return document.getElementById('error')?.textContent");
        panic!("Firefox: the page never {what}; errors: {error}");
    }
}

#[test]
fn the_console_works_in_firefox() {
    if Command::new("firefox-esr")
        .arg("--version")
        .output()
        .is_err()
    {
        eprintln!(
            "skipped: console in Firefox: no firefox-esr (scripts/install-deps.sh installs it)"
        );
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    fill_store(dir.path());
    let (_console, base, _) = console(dir.path(), &[]);
    let mut ff = Firefox::start();
    ff.call(
        "WebDriver:Navigate",
        json!({ "url": format!("{base}/?window=last%201h") }),
    );
    ff.until(
        "finished refreshing",
        "return Number(document.body.dataset.refreshed || 0) > 0",
    );
    assert_eq!(
        ff.run("return document.getElementById('error').hidden"),
        Value::Bool(true)
    );
    // The module loaded and drew: the top senders equal tapflow query's, the chart is painted.
    let want: Vec<(String, String)> = query_top(dir.path(), "srcip/bytes", None)
        .into_iter()
        .map(|(k, b)| (k, human_bytes(b)))
        .collect();
    let got = ff.run(
        "return [...document.querySelectorAll('#top-srcip tbody tr')]\
         .filter(r => r.dataset.filter)\
         .map(r => [r.cells[0].textContent, r.cells[1].textContent])",
    );
    let got: Vec<(String, String)> = got
        .as_array()
        .expect("rows")
        .iter()
        .map(|r| (r[0].as_str().unwrap().into(), r[1].as_str().unwrap().into()))
        .collect();
    assert!(!want.is_empty());
    assert_eq!(got, want);
    let painted = ff.run(
        "const c = document.querySelector('#chart canvas');\
         if (!c) return 0;\
         const px = c.getContext('2d').getImageData(0, 0, c.width, c.height).data;\
         let n = 0; for (let i = 3; i < px.length; i += 4) if (px[i] > 0) n++;\
         return n",
    );
    assert!(
        painted.as_u64().unwrap_or(0) > 1000,
        "blank chart in Firefox: {painted}"
    );
    let _ = ff.call("WebDriver:DeleteSession", json!({}));
}

/// A GET answered whatever its status, within `limit`: the status, the `Retry-After` header and
/// the body (read up to 1 GiB, so an oversized answer is measured rather than cut).
fn fetch(url: &str, limit: Duration) -> (u16, Option<String>, String) {
    let mut r = ureq::get(url)
        .config()
        .http_status_as_error(false)
        .timeout_global(Some(limit))
        .build()
        .call()
        .unwrap_or_else(|e| panic!("GET {url}: {e}"));
    let retry = r
        .headers()
        .get("retry-after")
        .map(|v| v.to_str().unwrap_or("").to_owned());
    let body = r
        .body_mut()
        .with_config()
        .limit(1 << 30)
        .read_to_string()
        .unwrap_or_else(|e| panic!("GET {url}: body: {e}"));
    (r.status().as_u16(), retry, body)
}

/// The buckets a series may have at most, whatever its window (`POINTS` in the API).
const MAX_BUCKETS: usize = 240;

#[test]
fn a_series_over_any_window_has_a_bounded_number_of_buckets_and_bytes() {
    let dir = tempfile::tempdir().unwrap();
    let stored = fill_store(dir.path());
    let (_console, base, _) = console(dir.path(), &[]);
    for window in [
        "2000-01-01-2100-01-01",
        "1970-01-01-9999-12-31",
        "1970-01-01T00:00-9999-12-31T23:59:59",
        "last 4h",
        "last 1h",
        "last 100w",
    ] {
        for (key, n) in [("srcip", 20), ("proto", 100)] {
            let q = format!("window={}&key={key}&n={n}", window.replace(' ', "%20"));
            let (status, _, body) = fetch(
                &format!("{base}/api/v1/series?{q}"),
                Duration::from_secs(120),
            );
            assert_eq!(status, 200, "{q}: {}", &body[..body.len().min(300)]);
            assert!(body.len() < 1 << 20, "{q}: a body of {} bytes", body.len());
            let v: Value = serde_json::from_str(&body).unwrap();
            let times = v["times"].as_array().unwrap();
            let every = v["every_us"].as_i64().unwrap();
            let (from, to) = (v["from"].as_i64().unwrap(), v["to"].as_i64().unwrap());
            assert!(
                (1..=MAX_BUCKETS).contains(&times.len()),
                "{q}: {} buckets of {every} µs",
                times.len()
            );
            // The buckets cover the window, whole seconds wide, aligned to their width.
            let first = times[0].as_i64().unwrap();
            let last = times[times.len() - 1].as_i64().unwrap();
            assert!(every > 0 && every % 1_000_000 == 0, "{q}: every_us {every}");
            assert!(first <= from && from < first + every, "{q}");
            assert!(last < to && to <= last + every, "{q}");
            assert_eq!(first.rem_euclid(every), 0, "{q}");
            for s in v["series"].as_array().unwrap() {
                assert_eq!(s["values"].as_array().unwrap().len(), times.len(), "{q}");
            }
            assert_eq!(v["previous"].as_array().unwrap().len(), times.len(), "{q}");
            // The rates, summed back over the buckets, give the bytes: nothing lost to rounding.
            if window != "last 1h" && window != "last 4h" {
                assert_eq!(v["flows"].as_u64(), Some(stored * 2), "{q}");
            }
            let bits: f64 = v["total"]
                .as_array()
                .unwrap()
                .iter()
                .map(|x| x.as_f64().unwrap() * every as f64 / 1e6)
                .sum();
            let bytes = v["bytes"].as_u64().unwrap() as f64;
            assert!(
                (bits / 8.0 - bytes).abs() <= bytes * 1e-9 + 1.0,
                "{q}: {bits} bit against {bytes} bytes"
            );
        }
    }
}

/// The one-line JSON error of a 400 answer to `q`.
fn refused(base: &str, q: &str) -> String {
    let (status, _, body) = fetch(&format!("{base}{q}"), Duration::from_secs(60));
    assert_eq!(status, 400, "{q}: {body}");
    let v: Value = serde_json::from_str(&body).unwrap_or_else(|e| panic!("{q}: {e}: {body}"));
    let msg = v["error"].as_str().unwrap().to_owned();
    assert!(!msg.contains('\n'), "{q}: {msg}");
    msg
}

#[test]
fn times_outside_1970_to_9999_are_refused_and_the_widest_window_gives_sane_numbers() {
    let dir = tempfile::tempdir().unwrap();
    let stored = fill_store(dir.path());
    let (_console, base, _) = console(dir.path(), &[]);
    const MAX: i64 = 253_402_300_800_000_000; // 10000-01-01T00:00Z
    for (q, want) in [
        ("/api/v1/summary?window=1970-01-01T00:00%2B05:00/1h", "1970"),
        (
            "/api/v1/top?from=-9000000000000000000&to=9000000000000000000",
            "from",
        ),
        (
            "/api/v1/series?from=-9000000000000000000&to=9000000000000000000",
            "from",
        ),
        ("/api/v1/top?from=0&to=9000000000000000000", "to"),
        ("/api/v1/flows?from=-1&to=1000000", "from"),
        (
            "/api/v1/health?from=9223372036854775000&to=9223372036854775807",
            "from",
        ),
        ("/api/v1/summary?from=5&to=5", "before"),
        ("/api/v1/summary?from=banana&to=5", "from"),
        ("/api/v1/summary?from=0", "both"),
    ] {
        let msg = refused(&base, q);
        assert!(msg.contains(want), "{q}: {msg}");
    }
    // The whole accepted range: every number is finite and none negative.
    for q in [
        format!("/api/v1/top?from=0&to={MAX}&key=srcip&n=5"),
        format!("/api/v1/top?from=1&to={MAX}&key=dstport&metric=packets"),
        "/api/v1/top?window=1970-01-01-9999-12-31&key=proto".to_owned(),
    ] {
        let (status, _, body) = fetch(&format!("{base}{q}"), Duration::from_secs(120));
        assert_eq!(status, 200, "{q}: {body}");
        let v: Value = serde_json::from_str(&body).unwrap();
        assert_eq!(v["total"]["flows"].as_u64(), Some(stored * 2), "{q}");
        let rows = v["rows"].as_array().unwrap();
        assert!(!rows.is_empty(), "{q}");
        let span_s = (v["to"].as_i64().unwrap() - v["from"].as_i64().unwrap()) as f64 / 1e6;
        for r in rows {
            for f in ["average", "p95", "last"] {
                let x = r[f].as_f64().unwrap();
                assert!(x.is_finite() && x >= 0.0, "{q}: {f} {x} in {r}");
            }
            let amount = match v["metric"].as_str().unwrap() {
                "packets" => r["packets"].as_f64().unwrap(),
                _ => r["bytes"].as_f64().unwrap() * 8.0,
            };
            let average = r["average"].as_f64().unwrap();
            assert!(
                (average * span_s - amount).abs() <= amount * 1e-9,
                "{q}: {r}"
            );
        }
    }
    let (status, _, body) = fetch(
        &format!("{base}/api/v1/series?from=0&to={MAX}&key=srcip&n=100"),
        Duration::from_secs(120),
    );
    assert_eq!(status, 200, "{body}");
    let v: Value = serde_json::from_str(&body).unwrap();
    assert!(v["times"].as_array().unwrap().len() <= MAX_BUCKETS);
    for x in v["previous"].as_array().unwrap() {
        assert_eq!(x.as_f64(), Some(0.0), "nothing was stored before 1970");
    }
}

/// `n` biflows, one every 20 ms over the last `n` × 20 ms, from many senders to many ports.
fn fill_many(dir: &Path, n: u64) {
    let mut store = ParquetStore::open(dir, ParquetOptions::default()).expect("open store");
    let now = now_ns();
    let start = now - n * 20_000_000;
    let mut flows = Vec::with_capacity(50_000);
    for i in 0..n {
        let mut src = [0u8; 16];
        src[..4].copy_from_slice(&[10, (i >> 16) as u8, (i >> 8) as u8, i as u8]);
        let mut dst = [0u8; 16];
        dst[..4].copy_from_slice(&[192, 0, 2, (i % 200) as u8 + 1]);
        let first = start + i * 20_000_000;
        let counters = |octets: u64| Counters {
            packets: 4,
            octets,
            tcp_flags: 0x1b,
            first_ns: first,
            last_ns: first + 1_000_000,
        };
        let mut ex = [0u8; 16];
        ex[..4].copy_from_slice(&[192, 0, 2, 250]);
        flows.push(StoredFlow {
            flow: FlowRecord {
                ipv6: false,
                proto: 6,
                src,
                dst,
                sport: 1024 + (i % 60_000) as u16,
                dport: 443,
                interface: 1,
                fwd: counters(600 + i % 1000),
                rev: counters(300),
                ..FlowRecord::default()
            },
            egress: 2,
            exporter: addr16(false, &ex),
            domain: 1,
            sampling: 1,
            received_ns: first + 1_000_000_000,
            ..StoredFlow::default()
        });
        if flows.len() == flows.capacity() {
            store.insert(&flows).expect("insert");
            flows.clear();
        }
    }
    store.insert(&flows).expect("insert");
    Box::new(store).close().expect("close");
}

/// The peak resident memory of process `pid`, in bytes (`VmHWM`).
fn peak_rss(pid: i32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let line = status
        .lines()
        .find(|l| l.starts_with("VmHWM:"))
        .expect("VmHWM");
    let kb: u64 = line
        .trim_start_matches("VmHWM:")
        .trim()
        .trim_end_matches("kB")
        .trim()
        .parse()
        .unwrap();
    kb * 1024
}

/// Sixteen listings asking for 100,000 flows each at once, over 240,000 one-way flows: each is
/// answered (capped) or turned away with 503, and the console's peak memory stays under 400 MiB
/// (unbounded, the same crowd takes over 1 GiB).
#[test]
fn parallel_heavy_requests_are_queued_or_turned_away_within_bounded_memory() {
    let dir = tempfile::tempdir().unwrap();
    fill_many(dir.path(), 120_000);
    let (console, base, _) = console(dir.path(), &[]);
    let threads: Vec<_> = (0..16)
        .map(|i| {
            let url = if i % 4 == 3 {
                format!("{base}/api/v1/flows?window=last%2010h&limit=100000&format=csv")
            } else {
                format!("{base}/api/v1/flows?window=last%2010h&limit=100000")
            };
            std::thread::spawn(move || fetch(&url, Duration::from_secs(300)))
        })
        .collect();
    let answers: Vec<_> = threads.into_iter().map(|t| t.join().unwrap()).collect();
    let peak = peak_rss(console.pid());
    assert!(peak < 400 << 20, "the console peaked at {} MiB", peak >> 20);
    let mut served = 0;
    for (status, retry, body) in &answers {
        match status {
            200 => served += 1,
            503 => {
                let retry: u64 = retry.as_deref().unwrap_or("").parse().expect("Retry-After");
                assert!((1..=60).contains(&retry), "{retry}");
                let v: Value = serde_json::from_str(body).unwrap();
                assert!(v["error"].as_str().unwrap().contains("busy"), "{body}");
            }
            s => panic!("status {s}: {}", &body[..body.len().min(300)]),
        }
        if *status == 200 && !body.starts_with("start_us,") {
            let v: Value = serde_json::from_str(body).unwrap();
            let listed = v["flows"].as_array().unwrap().len() as u64;
            assert_eq!(listed, v["limit"].as_u64().unwrap(), "as many as the cap");
            assert!(
                listed < 100_000,
                "a JSON listing is capped below 100,000: {listed}"
            );
        }
    }
    assert!(served >= 2, "{served} of {} served", answers.len());
    // Still answering, once the crowd is gone.
    let (status, _, body) = fetch(
        &format!("{base}/api/v1/summary?window=last%2010h"),
        Duration::from_secs(60),
    );
    assert_eq!(status, 200, "{body}");
}

/// Clients that ask for large CSV listings and never read them: once the answers waiting for
/// them fill the room for answers on their way (64 MiB), the next one is turned away with 503
/// instead of piling up; when they go, answers are served again. A send timeout of two minutes
/// keeps the first stalled answers from being dropped (making room) while a loaded machine
/// lists the next ones.
#[test]
fn clients_that_do_not_read_cannot_pile_up_answers() {
    use std::io::{Read, Write};
    let dir = tempfile::tempdir().unwrap();
    fill_many(dir.path(), 120_000);
    let (console, base, port) = console(dir.path(), &["--send-timeout", "120"]);
    let csv = "/api/v1/flows?window=last%2010h&limit=100000&format=csv";
    let mut stalled = Vec::new();
    let mut turned_away = None;
    for _ in 0..40 {
        let mut s = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(120))).unwrap();
        write!(s, "GET {csv} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n\r\n").unwrap();
        // The status line only: the body stays unread.
        let mut head = [0u8; 12];
        s.read_exact(&mut head).unwrap();
        match &head[9..] {
            b"200" => stalled.push(s),
            b"503" => {
                // The rest of the refusal: its headers and its short body.
                let mut rest = Vec::new();
                let t = Instant::now();
                let mut buf = [0u8; 4096];
                while !String::from_utf8_lossy(&rest).contains("busy")
                    && t.elapsed() < Duration::from_secs(30)
                {
                    match s.read(&mut buf) {
                        Ok(0) | Err(_) => break,
                        Ok(n) => rest.extend_from_slice(&buf[..n]),
                    }
                }
                turned_away = Some(String::from_utf8_lossy(&rest).into_owned());
                break;
            }
            other => panic!("status {}", String::from_utf8_lossy(other)),
        }
    }
    let refusal = turned_away.unwrap_or_else(|| {
        panic!(
            "{} large answers held for clients that do not read",
            stalled.len()
        )
    });
    assert!(stalled.len() >= 2, "{} served", stalled.len());
    assert!(
        refusal
            .to_ascii_lowercase()
            .contains("\r\nretry-after: 2\r\n"),
        "{refusal}"
    );
    assert!(refusal.contains("busy"), "{refusal}");
    let peak = peak_rss(console.pid());
    assert!(peak < 400 << 20, "the console peaked at {} MiB", peak >> 20);
    // The clients go: their answers are dropped, and the next is served.
    drop(stalled);
    let start = Instant::now();
    loop {
        let (status, _, body) = fetch(&format!("{base}{csv}"), Duration::from_secs(60));
        if status == 200 {
            assert_eq!(body.lines().count(), 100_001);
            break;
        }
        assert!(
            start.elapsed() < Duration::from_secs(60),
            "still {status} after the clients went: {body}"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}
/// A credentials file in `dir` letting `alice` in with `s3cret` (an argon2 hash that `tapflow
/// console --hash-password` wrote).
fn alice(dir: &Path) -> PathBuf {
    use std::io::Write;
    let mut hash = tapflow(["console", "--hash-password"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    hash.stdin.take().unwrap().write_all(b"s3cret\n").unwrap();
    let hashed = hash.wait_with_output().unwrap();
    assert!(hashed.status.success());
    let path = dir.join("users");
    let line = String::from_utf8(hashed.stdout).unwrap();
    std::fs::write(&path, format!("alice:{}\n", line.trim())).unwrap();
    path
}

/// The `Authorization` value of `user:password`, under `scheme` (`Basic`, `basic`…).
fn basic(scheme: &str, user_password: &str) -> String {
    let h = base64::engine::general_purpose::STANDARD.encode(user_password);
    format!("{scheme} {h}")
}

/// Sends `request` (a whole HTTP/1.1 request, `Connection: close`) on a new connection to the
/// console and reads the whole answer.
fn exchange(port: u16, request: &str) -> std::io::Result<String> {
    use std::io::{Read, Write};
    let mut s = std::net::TcpStream::connect(("127.0.0.1", port))?;
    s.set_read_timeout(Some(Duration::from_secs(30)))?;
    s.write_all(request.as_bytes())?;
    let mut answer = Vec::new();
    s.read_to_end(&mut answer)?;
    Ok(String::from_utf8_lossy(&answer).into_owned())
}

/// [`exchange`], which must succeed; returns the status and the whole answer.
fn raw(port: u16, request: &str) -> (u16, String) {
    let answer = exchange(port, request).expect("an answer");
    let status = answer
        .split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("no status in {answer:?}"));
    (status, answer)
}

/// A GET of `path` with these extra header lines (each ending in CRLF).
fn raw_get(port: u16, path: &str, host: &str, extra: &str) -> (u16, String) {
    raw(
        port,
        &format!("GET {path} HTTP/1.1\r\nHost: {host}\r\n{extra}Connection: close\r\n\r\n"),
    )
}

/// The value of header `name` in a raw answer.
fn header_of(answer: &str, name: &str) -> Option<String> {
    let head = answer.split("\r\n\r\n").next()?;
    head.lines().skip(1).find_map(|l| {
        let (n, v) = l.split_once(':')?;
        n.eq_ignore_ascii_case(name).then(|| v.trim().to_owned())
    })
}

/// Descriptors the process holds open.
fn open_fds(pid: i32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/fd"))
        .map(|d| d.count())
        .unwrap_or(0)
}

#[test]
fn slow_clients_past_the_connection_limit_leave_the_console_bounded_and_answering() {
    let dir = tempfile::tempdir().unwrap();
    fill_store(dir.path());
    let (console, base, port) = console(dir.path(), &[]);
    let before = open_fds(console.pid());
    // 600 clients, each sending half a request line and then nothing: more than the console's
    // 256 connections.
    let mut slow = Vec::new();
    for _ in 0..600 {
        use std::io::Write;
        let Ok(mut s) = std::net::TcpStream::connect(("127.0.0.1", port)) else {
            continue;
        };
        let _ = s.write_all(b"GET /api/v1/summary HT");
        slow.push(s);
    }
    // Once it has taken them in, the console holds at most its limit of them (and its own few
    // descriptors).
    std::thread::sleep(Duration::from_secs(1));
    let start = Instant::now();
    let mut most = 0;
    while start.elapsed() < Duration::from_secs(2) {
        most = most.max(open_fds(console.pid()));
        std::thread::sleep(Duration::from_millis(50));
    }
    assert!(
        most <= before + 256 + 32,
        "the console held {most} descriptors ({before} before 600 slow clients)"
    );
    // A normal request is answered once the slow ones' deadline has cut them off.
    let start = Instant::now();
    let answered = loop {
        let r = ureq::get(&format!("{base}/api/v1/summary?window=last%201h"))
            .config()
            .timeout_global(Some(Duration::from_secs(5)))
            .build()
            .call();
        if let Ok(mut r) = r {
            break Some(r.body_mut().read_to_string().unwrap());
        }
        if start.elapsed() > Duration::from_secs(45) {
            break None;
        }
        std::thread::sleep(Duration::from_millis(200));
    };
    let answered = answered.expect("no answer within 45 s of 600 slow clients");
    let v: Value = serde_json::from_str(&answered).unwrap();
    assert_eq!(v["total"]["flows"], 1200);
    drop(slow);
}

#[test]
fn a_client_trickling_its_header_and_an_idle_one_are_cut_off() {
    use std::io::{Read, Write};
    let dir = tempfile::tempdir().unwrap();
    let (_console, _, port) = console(dir.path(), &[]);
    // One client sends a complete request, reads the answer and then keeps the connection.
    let mut idle = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
    idle.write_all(b"GET /api/v1/summary HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
        .unwrap();
    idle.set_read_timeout(Some(Duration::from_millis(500)))
        .unwrap();
    let mut answer = [0u8; 4096];
    let n = idle.read(&mut answer).expect("an answer");
    assert!(answer[..n].starts_with(b"HTTP/1.1 200"));
    // The other sends half a request line and then a byte a second: each renews nothing.
    let mut trickle = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
    trickle.write_all(b"GET / HTTP/1.1\r\nX-Slow: ").unwrap();
    trickle
        .set_read_timeout(Some(Duration::from_millis(500)))
        .unwrap();
    let start = Instant::now();
    let closed = |s: &mut std::net::TcpStream| {
        let mut b = [0u8; 4096];
        match s.read(&mut b) {
            // The end, or an answer refusing the request (408).
            Ok(n) => n == 0 || b[..n].starts_with(b"HTTP/1.1 4"),
            Err(e) => !matches!(
                e.kind(),
                std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
            ),
        }
    };
    let (mut trickle_cut, mut idle_cut) = (None, None);
    while start.elapsed() < Duration::from_secs(40) && (trickle_cut.is_none() || idle_cut.is_none())
    {
        if trickle_cut.is_none() && (trickle.write_all(b"x").is_err() || closed(&mut trickle)) {
            trickle_cut = Some(start.elapsed());
        }
        if idle_cut.is_none() && closed(&mut idle) {
            idle_cut = Some(start.elapsed());
        }
    }
    let trickle_cut = trickle_cut.expect("the trickling client was not cut off within 40 s");
    let idle_cut = idle_cut.expect("the idle connection was not closed within 40 s");
    assert!(
        trickle_cut >= Duration::from_secs(5) && trickle_cut <= Duration::from_secs(25),
        "cut off after {trickle_cut:?}"
    );
    assert!(
        idle_cut <= Duration::from_secs(25),
        "closed after {idle_cut:?}"
    );
}

#[test]
fn an_unknown_user_takes_as_long_as_a_wrong_password() {
    let dir = tempfile::tempdir().unwrap();
    let users = alice(dir.path());
    let (_c, _, port) = console(dir.path(), &["--http-auth", users.to_str().unwrap()]);
    let host = format!("127.0.0.1:{port}");
    let timed = |who: &str| {
        let auth = format!("Authorization: {}\r\n", basic("Basic", who));
        let start = Instant::now();
        let (status, _) = raw_get(port, "/api/v1/summary", &host, &auth);
        assert_eq!(status, 401, "{who}");
        start.elapsed()
    };
    // Four of each, fewer than the failures that lock a source out; the quickest of each.
    let (mut wrong, mut unknown) = (Duration::MAX, Duration::MAX);
    for _ in 0..4 {
        wrong = wrong.min(timed("alice:guess"));
        unknown = unknown.min(timed("mallory:guess"));
    }
    assert!(
        unknown >= Duration::from_millis(3),
        "an unknown user is answered in {unknown:?}, a wrong password in {wrong:?}"
    );
    assert!(
        unknown * 3 >= wrong && wrong * 3 >= unknown,
        "an unknown user is answered in {unknown:?}, a wrong password in {wrong:?}"
    );
}

#[test]
fn repeated_failures_from_one_source_are_answered_429_and_basic_is_any_case() {
    let dir = tempfile::tempdir().unwrap();
    let users = alice(dir.path());
    let (_c, _, port) = console(dir.path(), &["--http-auth", users.to_str().unwrap()]);
    let host = format!("127.0.0.1:{port}");
    let get = |auth: &str| {
        raw_get(
            port,
            "/api/v1/summary",
            &host,
            &format!("Authorization: {auth}\r\n"),
        )
    };
    // The scheme's name is matched whatever its case.
    assert_eq!(get(&basic("basic", "alice:s3cret")).0, 200);
    assert_eq!(get(&basic("BASIC", "alice:s3cret")).0, 200);
    for i in 0..10 {
        assert_eq!(get(&basic("Basic", "alice:guess")).0, 401, "failure {i}");
    }
    let (status, answer) = get(&basic("Basic", "alice:guess"));
    assert_eq!(status, 429, "{answer}");
    let retry: u64 = header_of(&answer, "Retry-After")
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("no Retry-After: {answer}"));
    assert!((1..=60).contains(&retry), "{answer}");
    // Locked out, the right password is not checked either; a header verified before still
    // works.
    assert_eq!(get(&basic("Basic", "alice:s3cret")).0, 429);
    assert_eq!(get(&basic("basic", "alice:s3cret")).0, 200);
}

#[test]
fn a_logged_in_request_is_answered_while_others_guess_passwords() {
    let dir = tempfile::tempdir().unwrap();
    fill_store(dir.path());
    let users = alice(dir.path());
    let (_c, base, port) = console(dir.path(), &["--http-auth", users.to_str().unwrap()]);
    let url = format!("{base}/api/v1/summary?window=last%201h");
    let good = basic("Basic", "alice:s3cret");
    let call = |auth: &str| {
        ureq::get(&url)
            .config()
            .http_status_as_error(false)
            .timeout_global(Some(Duration::from_secs(10)))
            .build()
            .header("Authorization", auth)
            .call()
            .map(|r| r.status().as_u16())
            .unwrap_or(0)
    };
    assert_eq!(call(&good), 200, "logs in");
    // 24 guessers, each trying up to 100 passwords on new connections until told to stop.
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let guessers: Vec<_> = (0..24)
        .map(|g| {
            let stop = std::sync::Arc::clone(&stop);
            let host = format!("127.0.0.1:{port}");
            std::thread::spawn(move || {
                for i in 0..100 {
                    if stop.load(std::sync::atomic::Ordering::Relaxed) {
                        break;
                    }
                    let auth = basic("Basic", &format!("alice:guess-{g}-{i}"));
                    let _ = exchange(
                        port,
                        &format!(
                            "GET /api/v1/summary HTTP/1.1\r\nHost: {host}\r\n\
                             Authorization: {auth}\r\nConnection: close\r\n\r\n"
                        ),
                    );
                }
            })
        })
        .collect();
    std::thread::sleep(Duration::from_millis(500));
    // Ten requests of the logged-in user, given up past 10 s.
    let start = Instant::now();
    let mut answered = 0;
    while answered < 10 && start.elapsed() < Duration::from_secs(10) {
        assert_eq!(call(&good), 200);
        answered += 1;
    }
    let took = start.elapsed();
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    for g in guessers {
        g.join().unwrap();
    }
    assert!(
        answered == 10 && took < Duration::from_secs(2),
        "{answered} logged-in requests answered in {took:?} while 24 clients guessed"
    );
}

#[test]
fn a_foreign_host_or_origin_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let (_c, _, port) = console(dir.path(), &["--http-host", "flows.example.net"]);
    // A name that cannot be a host's is refused at start, in one line.
    let out = tapflow([
        "console",
        "--store",
        dir.path().to_str().unwrap(),
        "--http-host",
        "flows.example.net:8080",
    ])
    .output()
    .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("--http-host \"flows.example.net:8080\": not a host name"),
        "{err}"
    );
    assert_eq!(err.trim().lines().count(), 1, "{err}");
    let own = format!("127.0.0.1:{port}");
    let summary = "/api/v1/summary";
    // Hosts: the address, localhost (a loopback console), the configured name.
    for host in [
        own.clone(),
        format!("localhost:{port}"),
        "FLOWS.example.net".into(),
    ] {
        assert_eq!(raw_get(port, summary, &host, "").0, 200, "{host}");
    }
    // A page that rebinds its own name to 127.0.0.1.
    let (status, answer) = raw_get(port, "/", &format!("rebind.example:{port}"), "");
    assert!(status == 421 || status == 403, "{answer}");
    let body = answer.split("\r\n\r\n").nth(1).unwrap_or("");
    assert!(
        body.contains("rebind.example") && body.trim().lines().count() == 1,
        "{answer}"
    );
    // Origins: none, the console's own, another.
    let origin = |o: &str| raw_get(port, summary, &own, &format!("Origin: {o}\r\n"));
    assert_eq!(origin(&format!("http://{own}")).0, 200);
    let (status, answer) = origin("http://evil.example");
    assert_eq!(status, 403, "{answer}");
    assert!(answer.contains("evil.example"), "{answer}");
    assert_eq!(origin(&format!("http://localhost:{port}")).0, 403);
    assert_eq!(origin("null").0, 403);
}

#[test]
fn every_answer_says_nosniff_and_its_content_security_policy() {
    let dir = tempfile::tempdir().unwrap();
    let (_c, _, port) = console(dir.path(), &[]);
    let host = format!("127.0.0.1:{port}");
    for path in ["/", "/vendor/uPlot.esm.js", "/api/v1/summary", "/nope"] {
        let (_, answer) = raw_get(port, path, &host, "");
        assert_eq!(
            header_of(&answer, "X-Content-Type-Options").as_deref(),
            Some("nosniff"),
            "{path}"
        );
        let csp = header_of(&answer, "Content-Security-Policy").unwrap_or_default();
        assert!(csp.contains("default-src 'self'"), "{path}: {csp:?}");
        assert!(
            header_of(&answer, "Strict-Transport-Security").is_none(),
            "{path}"
        );
    }
}

#[test]
fn collect_serves_its_console_over_tls_to_its_configured_name() {
    if Command::new("openssl").arg("version").output().is_err()
        || Command::new("curl").arg("--version").output().is_err()
    {
        eprintln!("skipped: collect --http over TLS: no openssl or curl");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let (cert, key) = (dir.path().join("cert.pem"), dir.path().join("key.pem"));
    let made = Command::new("openssl")
        .args([
            "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
        ])
        .args(["-subj", "/CN=flows.example.net"])
        .arg("-keyout")
        .arg(&key)
        .arg("-out")
        .arg(&cert)
        .stderr(Stdio::null())
        .status()
        .unwrap();
    assert!(made.success());
    let store = dir.path().join("store");
    let (port, udp) = (free_port(), free_port());
    let (cert_s, key_s) = (cert.to_str().unwrap(), key.to_str().unwrap());
    let collect = |extra: &[&str]| {
        let mut args = vec![
            "collect".to_owned(),
            "--listen".into(),
            format!("ipfix://127.0.0.1:{udp}"),
            "--store".into(),
            store.to_str().unwrap().into(),
            "--http".into(),
            format!("127.0.0.1:{port}"),
            "-q".into(),
        ];
        args.extend(extra.iter().map(|s| s.to_string()));
        tapflow(&args)
    };
    // A missing key is named at start, in one line.
    let out = collect(&["--tls-cert", cert_s, "--tls-key", "/nonexistent/key.pem"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("TLS key /nonexistent/key.pem"), "{err}");
    let child = collect(&[
        "--tls-cert",
        cert_s,
        "--tls-key",
        key_s,
        "--http-host",
        "flows.example.net",
    ])
    .stdout(Stdio::null())
    .stderr(Stdio::piped())
    .spawn()
    .unwrap();
    let mut guard = ChildGuard::new(child, "tapflow collect --http --tls-cert");
    guard.wait_until(Duration::from_secs(30), "serves the console", |_| {
        std::net::TcpStream::connect(("127.0.0.1", port)).is_ok()
    });
    let out = Command::new("curl")
        .args(["-sS", "-D", "-", "--cacert"])
        .arg(&cert)
        .args([
            "--resolve",
            &format!("flows.example.net:{port}:127.0.0.1"),
            &format!("https://flows.example.net:{port}/api/v1/summary?window=last%201h"),
        ])
        .output()
        .unwrap();
    let answer = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    let hsts = header_of(
        &answer.replace('\n', "\r\n").replace("\r\r", "\r"),
        "Strict-Transport-Security",
    );
    assert!(hsts.is_some_and(|v| v.starts_with("max-age=")), "{answer}");
    let body = answer.split("\r\n\r\n").nth(1).unwrap_or("");
    let v: Value = serde_json::from_str(body).unwrap();
    assert_eq!(v["total"]["flows"], 0);
    guard.signal(libc::SIGINT);
    let (status, err) = guard.wait_output(Duration::from_secs(30));
    assert!(status.success(), "{err}");
}
