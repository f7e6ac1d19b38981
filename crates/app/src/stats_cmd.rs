//! `tapflow stats`: a running capture's statistics, read from its control socket (the counters
//! `/metrics` serves), as a table per worker and in total, or as JSON.

use std::io::{IsTerminal, Write};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use serde::Serialize;
use tapflow_engine::control;
use tapflow_engine::probe::{Stats, WorkerSnapshot};

use crate::Failure;
use crate::cli::{ProbeArgs, StatsArgs};
use crate::report::json_line;

/// The control socket the user means: `--control`, the interface's, or the only one there is.
pub(crate) fn control_path(p: &ProbeArgs) -> Result<PathBuf, Failure> {
    if let Some(path) = &p.control {
        return Ok(path.clone());
    }
    let iface = p.interface.as_deref();
    let found = control::find(iface);
    let on = iface.map_or(String::new(), |i| format!(" on {i}"));
    match found.as_slice() {
        [one] => Ok(one.clone()),
        [] => Err(Failure::Runtime(format!(
            "no running capture{on} in this network namespace has a control socket in {} \
             (give --control PATH for one elsewhere)",
            control::DIR
        ))),
        _ => Err(Failure::Usage(format!(
            "{} captures{on} are running: give --control PATH, one of {}{}",
            found.len(),
            found
                .iter()
                .map(|f| f.display().to_string())
                .collect::<Vec<_>>()
                .join(", "),
            if iface.is_none() {
                " (or -i IFACE)"
            } else {
                ""
            }
        ))),
    }
}

/// Asks the capture at `path` for its counters.
pub(crate) fn read(path: &Path) -> Result<Stats, Failure> {
    control::stats(path).map_err(|e| Failure::Runtime(e.to_string()))
}

type Value = fn(&WorkerSnapshot) -> f64;

/// How a row adds up over time: a counter (its rate per second is shown beside it with
/// `--watch`) or a gauge.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Counter,
    Gauge,
}

/// The table's rows: label, value, kind.
const ROWS: &[(&str, Value, Kind)] = &[
    ("received", |w| w.totals.received as f64, Kind::Counter),
    ("recorded", |w| w.totals.recorded as f64, Kind::Counter),
    ("filtered", |w| w.totals.filtered as f64, Kind::Counter),
    (
        "dropped by kernel",
        |w| w.totals.dropped_kernel as f64,
        Kind::Counter,
    ),
    (
        "dropped by tapflow",
        |w| w.totals.dropped_ours as f64,
        Kind::Counter,
    ),
    ("ring freezes", |w| w.totals.freezes as f64, Kind::Counter),
    ("ring blocks", |w| w.totals.blocks as f64, Kind::Counter),
    ("link gaps", |w| w.totals.link_gaps as f64, Kind::Counter),
    (
        "link down (s)",
        |w| w.totals.link_down_ns as f64 / 1e9,
        Kind::Counter,
    ),
    ("packets", |w| w.traffic.packets as f64, Kind::Counter),
    ("bytes", |w| w.traffic.bytes as f64, Kind::Counter),
    ("IPv4", |w| w.traffic.ipv4 as f64, Kind::Counter),
    ("IPv6", |w| w.traffic.ipv6 as f64, Kind::Counter),
    ("non-IP", |w| w.traffic.non_ip() as f64, Kind::Counter),
    ("TCP", |w| w.traffic.tcp as f64, Kind::Counter),
    ("UDP", |w| w.traffic.udp as f64, Kind::Counter),
    ("ICMP", |w| w.traffic.icmp as f64, Kind::Counter),
    (
        "other transport",
        |w| w.traffic.other_transport() as f64,
        Kind::Counter,
    ),
    ("TCP SYN", |w| w.traffic.tcp_syn as f64, Kind::Counter),
    ("TCP FIN", |w| w.traffic.tcp_fin as f64, Kind::Counter),
    ("TCP RST", |w| w.traffic.tcp_rst as f64, Kind::Counter),
    (
        "TCP with options",
        |w| w.traffic.tcp_options as f64,
        Kind::Counter,
    ),
    (
        "mean inter-arrival (s)",
        |w| w.traffic.mean_interarrival_seconds(),
        Kind::Gauge,
    ),
    (
        "mean rate (bit/s)",
        |w| w.traffic.mean_rate_bytes_per_second() * 8.0,
        Kind::Gauge,
    ),
    (
        "failed forwards",
        |w| w.live.forward_failed as f64,
        Kind::Counter,
    ),
    ("flows active", |w| w.live.flows_active as f64, Kind::Gauge),
    (
        "flows exported",
        |w| w.live.flows_exported as f64,
        Kind::Counter,
    ),
];

fn number(v: f64) -> String {
    if v.fract() == 0.0 && v.abs() < 1e15 {
        format!("{v:.0}")
    } else if v.abs() >= 1.0 {
        format!("{v:.1}")
    } else {
        format!("{v:.6}")
    }
}

/// The table: one row per counter, the total then each worker; with an earlier reading, the
/// rate per second of each counter beside it.
fn table(r: &Stats, before: Option<(&Stats, f64)>) -> String {
    let mut head = vec!["".to_string(), "total".to_string()];
    head.extend((0..r.workers.len()).map(|k| format!("w{k}")));
    if before.is_some() {
        head.push("total/s".to_string());
    }
    let total = r.total();
    let earlier = before.map(|(b, secs)| (b.total(), secs));
    let mut rows = vec![head];
    for &(label, value, kind) in ROWS {
        let mut row = vec![label.to_string(), number(value(&total))];
        row.extend(r.workers.iter().map(|w| number(value(w))));
        if let Some((b, secs)) = &earlier {
            let rate = (kind == Kind::Counter).then(|| (value(&total) - value(b)) / secs);
            row.push(rate.map_or(String::new(), |x| format!("{x:.1}")));
        }
        rows.push(row);
    }
    let widths: Vec<usize> = (0..rows[0].len())
        .map(|c| {
            rows.iter()
                .map(|r| r.get(c).map_or(0, String::len))
                .max()
                .unwrap_or(0)
        })
        .collect();
    let mut out = String::new();
    for row in rows {
        for (c, cell) in row.iter().enumerate() {
            if c == 0 {
                out += &format!("{cell:<w$}", w = widths[0]);
            } else {
                out += &format!("  {cell:>w$}", w = widths[c]);
            }
        }
        out.push('\n');
    }
    out
}

/// `--json`: the workers' counters summed, then each worker's, with the keys of the exit
/// summary and the stems of `/metrics`.
#[derive(Debug, Serialize)]
struct StatsJson<'a> {
    total: WorkerSnapshot,
    workers: &'a [WorkerSnapshot],
    start_time_seconds: f64,
}

impl<'a> StatsJson<'a> {
    fn new(r: &'a Stats) -> StatsJson<'a> {
        StatsJson {
            total: r.total(),
            workers: &r.workers,
            start_time_seconds: r.start_time_seconds,
        }
    }
}

/// Runs `tapflow stats`.
pub fn run(a: StatsArgs, stop: &Arc<AtomicBool>) -> Result<ExitCode, Failure> {
    let path = control_path(&a.probe)?;
    let every = match a.watch {
        None => None,
        Some(s) if s.is_finite() && s >= 0.1 => Some(Duration::from_secs_f64(s)),
        Some(s) => {
            return Err(Failure::Usage(format!(
                "--watch {s}: give at least 0.1 seconds"
            )));
        }
    };
    let mut before: Option<(Stats, Instant)> = None;
    // On a terminal, --watch redraws one table in place; elsewhere the tables follow each other.
    let redraw = every.is_some() && !a.json && std::io::stdout().is_terminal();
    if redraw {
        print!("\x1b[2J");
    }
    loop {
        let now = read(&path)?;
        let at = Instant::now();
        if a.json {
            print!("{}", json_line(&StatsJson::new(&now))?);
        } else {
            let prev = before
                .as_ref()
                .map(|(r, t)| (r, at.duration_since(*t).as_secs_f64()));
            let text = table(&now, prev);
            if redraw {
                // Like top: home, the table, the rest of the screen cleared.
                print!("\x1b[H{}\x1b[J", text.replace('\n', "\x1b[K\n"));
            } else {
                print!("{text}");
            }
            let _ = std::io::stdout().flush();
        }
        let Some(every) = every else {
            return Ok(ExitCode::SUCCESS);
        };
        before = Some((now, at));
        let until = Instant::now() + every;
        while Instant::now() < until {
            if stop.load(Ordering::Relaxed) {
                return Ok(ExitCode::SUCCESS);
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        if !redraw {
            println!();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tapflow_engine::counters::Totals;
    use tapflow_engine::traffic::Traffic;

    fn worker(received: u64, first_ns: u64, last_ns: u64) -> WorkerSnapshot {
        WorkerSnapshot {
            totals: Totals {
                received,
                recorded: received,
                ..Totals::default()
            },
            traffic: Traffic {
                packets: received,
                ipv6: 3,
                first_ns,
                last_ns,
                ..Traffic::default()
            },
            ..WorkerSnapshot::default()
        }
    }

    #[test]
    fn the_table_and_the_json_sum_the_workers() {
        let r = Stats {
            start_time_seconds: 1.7e9,
            // 10 packets over 5 s and 5 over 5 s, side by side: 15 over 5 s in total.
            workers: vec![worker(10, 0, 5_000_000_000), worker(5, 0, 5_000_000_000)],
        };
        let t = table(&r, None);
        let received: Vec<&str> = t.lines().nth(1).unwrap().split_whitespace().collect();
        assert_eq!(received, ["received", "15", "10", "5"], "{t}");
        let gap = t
            .lines()
            .find(|l| l.starts_with("mean inter-arrival"))
            .unwrap();
        assert!(gap.contains(" 0.357143 "), "{t}");
        let j = json_line(&StatsJson::new(&r)).unwrap();
        let v: serde_json::Value = serde_json::from_str(&j).unwrap();
        assert_eq!(v["total"]["received"], 15, "{j}");
        assert_eq!(v["total"]["traffic"]["ipv6"], 6, "{j}");
        assert_eq!(v["workers"][1]["dropped_kernel"], 0, "{j}");
        assert_eq!(v["workers"][0]["traffic"]["tcp_syn"], 0, "{j}");
        assert_eq!(
            v["total"]["traffic"]["mean_interarrival_seconds"],
            5.0 / 14.0
        );
    }
}
