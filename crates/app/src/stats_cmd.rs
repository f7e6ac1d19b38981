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
use crate::svg;
use tapflow_sys::outfile;

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
    (
        "ring fill (%)",
        |w| w.totals.ring_fill_ppm as f64 / 1e4,
        Kind::Gauge,
    ),
    (
        "ring fill peak (%)",
        |w| w.totals.ring_fill_peak_ppm as f64 / 1e4,
        Kind::Gauge,
    ),
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

/// The counters `--svg` draws, as rates per second.
const CHARTED: &[(&str, Value)] = &[
    ("received", |w| w.totals.received as f64),
    ("recorded", |w| w.totals.recorded as f64),
    ("filtered", |w| w.totals.filtered as f64),
    ("dropped by kernel", |w| w.totals.dropped_kernel as f64),
    ("dropped by tapflow", |w| w.totals.dropped_ours as f64),
];

/// `--svg`: every reading's time and total counters, drawn as rates between readings.
struct Chart {
    path: PathBuf,
    /// The file is a device or FIFO: written once, at the end, in place.
    stream: bool,
    readings: Vec<(f64, WorkerSnapshot)>,
}

impl Chart {
    fn new(path: PathBuf) -> Result<Chart, Failure> {
        let stream = outfile::target(&path)
            .map_err(|e| Failure::Usage(format!("--svg {}: {e}", path.display())))?
            == outfile::Target::Stream;
        Ok(Chart {
            path,
            stream,
            readings: Vec::new(),
        })
    }

    /// The chart: one line per counter, its rate from each reading to the next.
    fn svg(&self) -> String {
        let lines: Vec<svg::Line> = CHARTED
            .iter()
            .map(|&(label, value)| svg::Line {
                label: label.to_string(),
                points: self
                    .readings
                    .windows(2)
                    .map(|p| {
                        let ((t0, a), (t1, b)) = (&p[0], &p[1]);
                        (*t1, ((value(b) - value(a)) / (t1 - t0)).max(0.0))
                    })
                    .collect(),
                dashed: label.starts_with("dropped"),
            })
            .collect();
        let title = format!("Packets per second, {}", self.path.display());
        svg::chart(&title, "time (s)", "packets/s", &lines)
    }

    /// Adds a reading and, for a regular file, puts the chart so far in its place (written
    /// aside as `FILE.part`, then renamed: a reader never sees half a chart).
    fn add(&mut self, seconds: f64, total: WorkerSnapshot) -> Result<(), Failure> {
        self.readings.push((seconds, total));
        if self.stream || self.readings.len() < 2 {
            return Ok(());
        }
        let fail = |e: String| Failure::Runtime(format!("--svg {}: {e}", self.path.display()));
        let mut part = self.path.clone().into_os_string();
        part.push(".part");
        let part = PathBuf::from(part);
        if std::fs::symlink_metadata(&part).is_ok_and(|m| m.file_type().is_file()) {
            std::fs::remove_file(&part).map_err(|e| fail(e.to_string()))?;
        }
        let mut f =
            outfile::create_new(&part, 0).map_err(|e| fail(format!("{}: {e}", part.display())))?;
        f.write_all(self.svg().as_bytes())
            .map_err(|e| fail(e.to_string()))?;
        drop(f);
        outfile::check_replaceable(&self.path).map_err(|e| fail(e.to_string()))?;
        std::fs::rename(&part, &self.path).map_err(|e| fail(e.to_string()))
    }

    /// At the end: a device or FIFO gets the chart now.
    fn finish(&self) -> Result<(), Failure> {
        if !self.stream {
            return Ok(());
        }
        let fail = |e: String| Failure::Runtime(format!("--svg {}: {e}", self.path.display()));
        let mut f = outfile::open_stream(&self.path).map_err(|e| fail(e.to_string()))?;
        f.write_all(self.svg().as_bytes())
            .map_err(|e| fail(e.to_string()))
    }
}

/// Runs `tapflow stats`.
pub fn run(a: StatsArgs, stop: &Arc<AtomicBool>) -> Result<ExitCode, Failure> {
    let path = control_path(&a.probe)?;
    let watch = a.watch.or(a.svg.as_ref().map(|_| 1.0));
    let every = match watch {
        None => None,
        Some(s) if s.is_finite() && s >= 0.1 => Some(Duration::from_secs_f64(s)),
        Some(s) => {
            return Err(Failure::Usage(format!(
                "--watch {s}: give at least 0.1 seconds"
            )));
        }
    };
    if a.count == Some(0) {
        return Err(Failure::Usage(
            "--count 0: give at least one reading".into(),
        ));
    }
    let mut chart = a.svg.map(Chart::new).transpose()?;
    let result = watch_loop(a.json, a.count, every, &path, chart.as_mut(), stop);
    // The chart keeps every reading taken, also when the capture went away mid-way.
    let drawn = chart.as_ref().map_or(Ok(()), Chart::finish);
    let code = result?;
    drawn?;
    Ok(code)
}

fn watch_loop(
    json: bool,
    count: Option<u64>,
    every: Option<Duration>,
    path: &Path,
    mut chart: Option<&mut Chart>,
    stop: &Arc<AtomicBool>,
) -> Result<ExitCode, Failure> {
    let mut before: Option<(Stats, Instant)> = None;
    let started = Instant::now();
    // On a terminal, --watch redraws one table in place; elsewhere the tables follow each other.
    let redraw = every.is_some() && !json && std::io::stdout().is_terminal();
    if redraw {
        print!("\x1b[2J");
    }
    let mut readings = 0u64;
    loop {
        let now = read(path)?;
        let at = Instant::now();
        readings += 1;
        if let Some(c) = chart.as_deref_mut() {
            c.add(at.duration_since(started).as_secs_f64(), now.total())?;
        }
        if json {
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
        }
        let _ = std::io::stdout().flush();
        let Some(every) = every else {
            return Ok(ExitCode::SUCCESS);
        };
        if count.is_some_and(|n| readings >= n) {
            return Ok(ExitCode::SUCCESS);
        }
        before = Some((now, at));
        let until = Instant::now() + every;
        while Instant::now() < until {
            if stop.load(Ordering::Relaxed) {
                return Ok(ExitCode::SUCCESS);
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        if !redraw && !json {
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

    #[test]
    fn the_chart_draws_rates_between_readings() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("c.svg");
        let mut c = Chart::new(path.clone()).unwrap();
        c.add(0.0, worker(0, 0, 0)).unwrap();
        assert!(!path.exists(), "one reading makes no line yet");
        c.add(1.0, worker(100, 0, 0)).unwrap();
        c.add(3.0, worker(500, 0, 0)).unwrap();
        let svg = std::fs::read_to_string(&path).unwrap();
        assert_eq!(svg, c.svg());
        // received: 100/s then 200/s; the y axis ticks to 200, so the second point is on top.
        let received = svg.lines().find(|l| l.contains(">received<")).unwrap();
        let pts: Vec<&str> = received
            .split("points=\"")
            .nth(1)
            .unwrap()
            .split('"')
            .next()
            .unwrap()
            .split(' ')
            .collect();
        assert_eq!(pts.len(), 2, "{received}");
        assert!(pts[1].ends_with(",40.0"), "{received}");
        assert!(pts[0].ends_with(",195.0"), "{received}");
        assert_eq!(svg.matches("<polyline").count(), CHARTED.len());
        assert!(!dir.path().join("c.svg.part").exists());
    }
}
