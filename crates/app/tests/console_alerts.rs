//! Alerts kept with the flows: a built flood goes through `tapflow flows --store --detect`;
//! `tapflow query --alerts` and the console's `/api/v1/alerts` list the alert it raised, and its
//! query words show its flows. The same flood metered and exported to `tapflow collect --store
//! --detect`: in a real browser (Debian's chromium over chromedriver) the alert is highlighted
//! while it runs, and a click on it opens the views filtered to its target over its range.

mod common;

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use common::webdriver::Driver;
use common::*;
use serde_json::{Value, json};

/// The flood's window, around [`T0`] (2023-11-14T22:13:20Z).
const WINDOW: &str = "2023-11-14T22:00:00Z/1h";
const TARGET: &str = "192.0.2.9";

/// 3 s of NTP replies (UDP from port 123, 482-byte frames) from 50 reflectors to [`TARGET`] at
/// 2,000 packets/s, from `t0` (ns since 1970) on.
fn flood(dir: &Path, t0: u64) -> PathBuf {
    use tapflow_wire::build::{self, FrameSpec, L4};
    use tapflow_wire::ethernet::EthernetAddress;
    let len = 482;
    let packets: Vec<_> = (0..6000u64)
        .map(|i| {
            let spec = FrameSpec {
                src_mac: EthernetAddress([2, 0, 0, 0, 0, 1]),
                dst_mac: EthernetAddress([2, 0, 0, 0, 0, 2]),
                src_ip: std::net::Ipv4Addr::new(198, 51, 100, (i % 50) as u8 + 1).into(),
                dst_ip: TARGET.parse::<std::net::Ipv4Addr>().unwrap().into(),
                proto: L4::Udp,
                src_port: 123,
                dst_port: 40000 + (i % 1000) as u16,
                frame_len: len,
            };
            let mut buf = vec![0; len];
            build::build(&spec, &mut buf).unwrap();
            traffic::Packet::new(t0 + i * 500_000, buf)
        })
        .collect();
    let bytes = traffic::pcap_file(
        tapflow_wire::LinkType::Ethernet,
        true,
        false,
        65535,
        &packets,
    );
    write_file(dir, "ntp-flood.pcap", &bytes)
}

/// A thresholds file: 1,000 packets/s at one host, held `hold` seconds.
fn thresholds(dir: &Path, hold: u64) -> String {
    let p = dir.join("limits.toml");
    std::fs::write(&p, format!("hold = {hold}\n[host]\npackets = 1000\n")).unwrap();
    p.display().to_string()
}

/// `tapflow console` over `store` on a free port: its guard and base URL.
fn console(store: &Path) -> (ChildGuard, String) {
    console_at(store.to_str().unwrap())
}

/// `tapflow console` over the store at `at` (a directory or a URL).
fn console_at(at: &str) -> (ChildGuard, String) {
    let port = free_port();
    let addr = format!("127.0.0.1:{port}");
    let child = tapflow(["console", "--store", at, "--http", &addr])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn console");
    let mut guard = ChildGuard::new(child, "tapflow console");
    guard.wait_until(Duration::from_secs(30), "listens", |_| {
        std::net::TcpStream::connect(("127.0.0.1", port)).is_ok()
    });
    (guard, format!("http://{addr}"))
}

fn get(url: &str) -> Value {
    let mut r = ureq::get(url)
        .call()
        .unwrap_or_else(|e| panic!("GET {url}: {e}"));
    let text = r.body_mut().read_to_string().expect("body");
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("GET {url}: {e}: {text}"))
}

fn api_alerts(base: &str, window: &str) -> Value {
    get(&format!(
        "{base}/api/v1/alerts?window={}",
        window.replace(' ', "%20")
    ))
}

#[test]
fn an_alert_flows_detect_raised_is_listed_by_query_and_the_console_api() {
    let d = tempfile::tempdir().unwrap();
    let trace = flood(d.path(), T0);
    let store = d.path().join("store");
    let th = thresholds(d.path(), 5);
    let mut c = tapflow(["flows", "-q", "-r", trace.to_str().unwrap()]);
    c.args([
        "--store",
        store.to_str().unwrap(),
        "--detect",
        "--thresholds",
        &th,
    ]);
    let what = show(&c);
    let o = run_limited(&mut c, Duration::from_secs(120));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success(), "{what}: {err}");
    assert!(
        err.contains(&format!("tapflow: alert start {TARGET} ntp_amplification")),
        "{err}"
    );

    // tapflow query --alerts: the alert, put together from its start and end.
    let s = store.to_str().unwrap();
    let out = run_ok(&mut tapflow([
        "query", "--alerts", "-R", s, "-t", WINDOW, "--json",
    ]));
    let rows: Vec<Value> = out
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(rows.len(), 1, "{out}");
    let a = &rows[0];
    assert_eq!(a["target"], TARGET);
    assert_eq!(a["kind"], "ntp_amplification");
    assert_eq!(a["state"], "ended");
    assert_eq!(a["start"], "2023-11-14T22:13:20Z");
    assert!(a["end"].as_str().unwrap() > "2023-11-14T22:13:22Z", "{a}");
    assert_eq!(a["packets_per_second"], 2000.0);
    assert_eq!(a["threshold"]["packets_per_second"], 1000);
    assert_eq!(a["filter"], format!("dst host {TARGET}"));
    assert_eq!(a["top_sources"].as_array().unwrap().len(), 4);
    let text = run_ok(&mut tapflow(["query", "--alerts", "-R", s, "-t", WINDOW]));
    assert!(
        text.lines().nth(1).unwrap().contains(TARGET) && text.contains("ntp_amplification"),
        "{text}"
    );
    // Another hour holds none.
    let other = run_ok(&mut tapflow([
        "query",
        "--alerts",
        "-R",
        s,
        "-t",
        "2023-11-14T20:00:00Z/1h",
        "--json",
    ]));
    assert_eq!(other.trim(), "");

    // Its query words show the flows behind it: the ten heaviest of the 50 reflectors, with
    // 120 packets each.
    let mut q = tapflow(["query", "-R", s, "--json"]);
    q.args(a["query"].as_str().unwrap().split_whitespace());
    let top = run_ok(&mut q);
    let senders: Vec<Value> = top
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(senders.len(), 10, "{top}");
    for r in &senders {
        assert!(r.to_string().contains("198.51.100."), "{r}");
        assert!(r.to_string().contains("120"), "{r}");
    }

    // The console's API lists it, with the view that shows it.
    let (_console, base) = console(&store);
    let r = api_alerts(&base, WINDOW);
    assert_eq!(r["unreadable"], 0);
    let list = r["alerts"].as_array().unwrap();
    assert_eq!(list.len(), 1, "{r}");
    let v = &list[0];
    for k in ["target", "kind", "state", "start", "end", "filter", "query"] {
        assert_eq!(v[k], a[k], "{k}");
    }
    let start_us = v["start_us"].as_i64().unwrap();
    assert_eq!(start_us, 1_700_000_000_000_000);
    assert_eq!(v["view_from"].as_i64().unwrap(), start_us - 60_000_000);
    assert_eq!(
        v["view_to"].as_i64().unwrap(),
        v["end_us"].as_i64().unwrap() + 60_000_000
    );
    let empty = api_alerts(&base, "2023-11-14T20:00:00Z/1h");
    assert_eq!(empty["alerts"], json!([]));
}

/// The cells of the alert list's rows, and each row's class.
fn alert_rows(d: &Driver) -> Value {
    d.run(
        "return [...document.querySelectorAll('#alert-list tbody tr[data-target]')]\
         .map(r => [r.className, ...[...r.cells].map(c => c.textContent)])",
    )
}

#[test]
fn a_running_alert_is_highlighted_and_a_click_opens_its_filtered_views() {
    if !Path::new("/usr/bin/chromium").exists() || !Path::new("/usr/bin/chromedriver").exists() {
        eprintln!(
            "skipped: console alerts browser test: no chromium/chromedriver \
             (scripts/install-deps.sh installs them)"
        );
        return;
    }
    let d = tempfile::tempdir().unwrap();
    let store = d.path().join("store");
    // Held an hour: the alert runs until the collector stops.
    let th = thresholds(d.path(), 3600);
    let port = std::net::UdpSocket::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let err_path = d.path().join("collect.err");
    let mut c = tapflow([
        "collect",
        "-q",
        "--listen",
        &format!("ipfix://127.0.0.1:{port}"),
    ]);
    c.args(["--store", store.to_str().unwrap(), "--flush-seconds", "0.5"])
        .args(["--detect", "--thresholds", &th])
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&err_path).unwrap());
    let mut collect = ChildGuard::new(c.spawn().expect("spawn collect"), "tapflow collect");
    collect.wait_until(Duration::from_secs(30), "listens", |_| {
        std::fs::read_to_string(&err_path).is_ok_and(|e| e.contains("collecting ipfix"))
    });
    // A flood of a few seconds ago, metered and exported to the collector: its flows are
    // stored at their own times, the alert at the time they arrive.
    let now_ns = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos() as u64;
    let trace = flood(d.path(), now_ns - 5_000_000_000);
    run_ok(&mut tapflow([
        "flows",
        "-q",
        "-r",
        trace.to_str().unwrap(),
        "--export",
        &format!("ipfix://127.0.0.1:{port}"),
    ]));
    let log = tapflow_store::alerts::path(&store);
    collect.wait_until(Duration::from_secs(60), "records the alert", |_| {
        std::fs::read_to_string(&log).is_ok_and(|t| t.contains("\"event\":\"start\""))
    });

    let (_console, base) = console(&store);
    let page = format!("{base}/?window=last%201h");
    let d_ = Driver::start().expect("chromedriver");
    let drv = &d_;
    drv.go(&page);
    drv.wait_refresh_after(0);
    let rows = alert_rows(drv);
    assert_eq!(rows.as_array().unwrap().len(), 1, "{rows}");
    assert_eq!(
        rows[0].as_array().unwrap()[..7],
        json!([
            "running",
            rows[0][1].clone(),
            "running",
            TARGET,
            "ntp_amplification",
            "2.0 k",
            "1.0 k"
        ])
        .as_array()
        .unwrap()[..],
        "{rows}"
    );
    assert!(
        rows[0][9].as_str().unwrap().starts_with("198.51.100."),
        "{rows}"
    );
    // Highlighted: drawn in the alarm colour, unlike an ended alert's row.
    let colour = drv.run(
        "const r = document.querySelector('#alert-list tr.running');\
         return [getComputedStyle(r).color, getComputedStyle(r).fontWeight]",
    );
    let alarm = drv.run(
        "const e = document.createElement('span'); e.className = 'alarm';\
         document.body.append(e); const c = getComputedStyle(e).color; e.remove(); return c",
    );
    assert_eq!(colour[0], alarm, "{colour}");
    drv.run("document.querySelector('#traffic').scrollIntoView({block: 'start'}); return true");
    let _ = drv.screenshot("alert-running");

    // The collector stops: the alert ends, the flows are all stored.
    collect.signal(libc::SIGINT);
    let status = collect.wait_limited(Duration::from_secs(60));
    let err = std::fs::read_to_string(&err_path).unwrap();
    assert!(status.success(), "{err}");
    assert!(
        err.contains(&format!("tapflow: alert end {TARGET}")),
        "{err}"
    );
    let before = drv.refreshed();
    drv.go(&page);
    drv.until(
        "reloaded",
        "return document.readyState === 'complete' && \
         Number(document.body.dataset.refreshed || 0) > 0",
    );
    let _ = before;
    let rows = alert_rows(drv);
    assert_eq!(rows[0][0], "ended", "{rows}");
    assert!(
        rows[0][2].as_str().unwrap() >= rows[0][1].as_str().unwrap(),
        "{rows}"
    );

    // A click opens the alert's view: its time range, filtered to its target, by source.
    let api = api_alerts(&base, "last 1h");
    assert_eq!(api["alerts"][0]["state"], "ended", "{api}");
    let a = &api["alerts"][0];
    let before = drv.refreshed();
    drv.run("document.querySelector('#alert-list tbody tr[data-target]').click(); return true");
    drv.wait_refresh_after(before);
    let filter = drv.run("return document.getElementById('filter').value");
    assert_eq!(filter, format!("dst host {TARGET}"));
    let search = drv
        .run("return location.search")
        .as_str()
        .unwrap()
        .to_owned();
    let p: Vec<(String, String)> = search
        .trim_start_matches('?')
        .split('&')
        .filter_map(|kv| kv.split_once('='))
        .map(|(k, v)| (k.to_owned(), v.replace('+', " ")))
        .collect();
    let param = |k: &str| p.iter().find(|(n, _)| n == k).map(|(_, v)| v.clone());
    assert_eq!(
        param("filter").as_deref(),
        Some("dst host 192.0.2.9"),
        "{search}"
    );
    assert_eq!(param("from"), Some(a["view_from"].to_string()), "{search}");
    assert_eq!(param("to"), Some(a["view_to"].to_string()), "{search}");
    assert_eq!(param("key").as_deref(), Some("srcip"), "{search}");
    // The top views are filtered: one destination, the 50 reflectors (the ten heaviest).
    let top = |key: &str| {
        drv.run(&format!(
            "return [...document.querySelectorAll('#top-{key} tbody tr[data-filter]')]\
             .map(r => r.cells[0].textContent)"
        ))
    };
    assert_eq!(top("dstip"), json!([TARGET]));
    let senders = top("srcip");
    let senders = senders.as_array().unwrap();
    assert_eq!(senders.len(), 10, "{senders:?}");
    assert!(
        senders
            .iter()
            .all(|s| s.as_str().unwrap().starts_with("198.51.100.")),
        "{senders:?}"
    );
    // The series is stacked by source address over the alert's range.
    let legend =
        drv.run("return [...document.querySelectorAll('#chart .u-legend .u-series')].length");
    assert!(legend.as_u64().unwrap() > 2, "{legend}");
    let error = drv.run("return document.getElementById('error').hidden");
    assert_eq!(error, Value::Bool(true));
    drv.run("window.scrollTo(0, 0); return true");
    let _ = drv.screenshot("alert-opened");
}

#[test]
fn a_clickhouse_store_keeps_the_alerts_too() {
    let (_server, url) = ClickHouse::start(28750);
    let url = format!("{url}/alerts_test");
    let d = tempfile::tempdir().unwrap();
    let trace = flood(d.path(), T0);
    let th = thresholds(d.path(), 5);
    let mut c = tapflow(["flows", "-q", "-r", trace.to_str().unwrap()]);
    c.args(["--store", &url, "--detect", "--thresholds", &th]);
    let what = show(&c);
    let o = run_limited(&mut c, Duration::from_secs(120));
    assert!(
        o.status.success(),
        "{what}: {}",
        String::from_utf8_lossy(&o.stderr)
    );

    let out = run_ok(&mut tapflow([
        "query",
        "--alerts",
        "--clickhouse",
        &url,
        "-t",
        WINDOW,
        "--json",
    ]));
    let rows: Vec<Value> = out
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(rows.len(), 1, "{out}");
    assert_eq!(rows[0]["target"], TARGET);
    assert_eq!(rows[0]["kind"], "ntp_amplification");
    assert_eq!(rows[0]["state"], "ended");
    assert_eq!(rows[0]["start"], "2023-11-14T22:13:20Z");

    let (_console, base) = console_at(&url);
    let r = api_alerts(&base, WINDOW);
    assert_eq!(r["alerts"].as_array().unwrap().len(), 1, "{r}");
    assert_eq!(r["alerts"][0]["filter"], format!("dst host {TARGET}"));
}
