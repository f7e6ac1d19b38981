//! `tapflow stats`: a running capture's statistics, read from its control socket (the same
//! Prometheus text `/metrics` serves), as a table per worker and in total.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use tapflow_engine::control;

use crate::Failure;
use crate::cli::{ProbeArgs, StatsArgs};
use crate::report::json_string;

/// The control socket the user means: `--control`, the interface's, or the only one there is.
pub(crate) fn control_path(p: &ProbeArgs) -> Result<PathBuf, Failure> {
    if let Some(path) = &p.control {
        return Ok(path.clone());
    }
    if let Some(ifname) = &p.interface {
        return Ok(control::default_path(ifname));
    }
    let dir = control::default_path("x")
        .parent()
        .map(Path::to_path_buf)
        .unwrap_or_default();
    let found: Vec<PathBuf> = std::fs::read_dir(&dir)
        .map(|d| {
            d.filter_map(|e| e.ok().map(|e| e.path()))
                .filter(|p| p.extension().is_some_and(|x| x == "sock"))
                .collect()
        })
        .unwrap_or_default();
    match found.as_slice() {
        [one] => Ok(one.clone()),
        [] => Err(Failure::Runtime(format!(
            "no running capture found in {} (give -i IFACE or --control PATH)",
            dir.display()
        ))),
        _ => Err(Failure::Usage(format!(
            "{} captures are running: give -i IFACE or --control PATH",
            found.len()
        ))),
    }
}

/// One reading of a capture's counters: per metric (name and labels other than `worker`),
/// the value of each worker.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct Reading {
    pub series: BTreeMap<String, Vec<f64>>,
    pub workers: usize,
}

impl Reading {
    /// Parses Prometheus text as tapflow writes it.
    pub(crate) fn parse(text: &str) -> Reading {
        let mut r = Reading::default();
        for line in text.lines().filter(|l| !l.starts_with('#')) {
            let Some((key, value)) = line.rsplit_once(' ') else {
                continue;
            };
            let Ok(value) = value.parse::<f64>() else {
                continue;
            };
            let (name, labels) = match key.split_once('{') {
                Some((n, l)) => (n, l.trim_end_matches('}')),
                None => (key, ""),
            };
            let mut worker = None;
            let mut rest = Vec::new();
            for l in labels.split(',').filter(|l| !l.is_empty()) {
                match l.strip_prefix("worker=\"") {
                    Some(w) => worker = w.trim_end_matches('"').parse::<usize>().ok(),
                    None => rest.push(l),
                }
            }
            let id = if rest.is_empty() {
                name.to_string()
            } else {
                format!("{name}{{{}}}", rest.join(","))
            };
            let k = worker.unwrap_or(0);
            let v = r.series.entry(id).or_default();
            if v.len() <= k {
                v.resize(k + 1, 0.0);
            }
            v[k] = value;
            if worker.is_some() {
                r.workers = r.workers.max(k + 1);
            }
        }
        r
    }

    /// A series' value for each worker.
    pub(crate) fn each(&self, id: &str) -> Vec<f64> {
        let mut v = self.series.get(id).cloned().unwrap_or_default();
        v.resize(self.workers.max(1), 0.0);
        v
    }

    /// A series summed over the workers.
    pub(crate) fn total(&self, id: &str) -> f64 {
        self.each(id).iter().sum()
    }
}

/// Asks the capture at `path` for its counters.
pub(crate) fn read(path: &Path) -> Result<Reading, Failure> {
    let text = control::request(path, "stats", "").map_err(|e| Failure::Runtime(e.to_string()))?;
    Ok(Reading::parse(&text))
}

/// The table's rows: label, series, and how a total is formed from the workers' values.
const ROWS: &[(&str, &str, Total)] = &[
    ("received", "tapflow_received_packets_total", Total::Sum),
    ("recorded", "tapflow_recorded_packets_total", Total::Sum),
    ("filtered", "tapflow_filtered_packets_total", Total::Sum),
    (
        "dropped by kernel",
        "tapflow_kernel_dropped_packets_total",
        Total::Sum,
    ),
    (
        "dropped by tapflow",
        "tapflow_dropped_packets_total",
        Total::Sum,
    ),
    ("ring freezes", "tapflow_ring_freezes_total", Total::Sum),
    ("ring blocks", "tapflow_ring_blocks_total", Total::Sum),
    ("packets", "tapflow_traffic_packets_total", Total::Sum),
    ("bytes", "tapflow_traffic_bytes_total", Total::Sum),
    (
        "IPv4",
        "tapflow_network_packets_total{network=\"ipv4\"}",
        Total::Sum,
    ),
    (
        "IPv6",
        "tapflow_network_packets_total{network=\"ipv6\"}",
        Total::Sum,
    ),
    (
        "non-IP",
        "tapflow_network_packets_total{network=\"non_ip\"}",
        Total::Sum,
    ),
    (
        "TCP",
        "tapflow_transport_packets_total{transport=\"tcp\"}",
        Total::Sum,
    ),
    (
        "UDP",
        "tapflow_transport_packets_total{transport=\"udp\"}",
        Total::Sum,
    ),
    (
        "ICMP",
        "tapflow_transport_packets_total{transport=\"icmp\"}",
        Total::Sum,
    ),
    (
        "other transport",
        "tapflow_transport_packets_total{transport=\"other\"}",
        Total::Sum,
    ),
    (
        "TCP SYN",
        "tapflow_tcp_flag_packets_total{flag=\"syn\"}",
        Total::Sum,
    ),
    (
        "TCP FIN",
        "tapflow_tcp_flag_packets_total{flag=\"fin\"}",
        Total::Sum,
    ),
    (
        "TCP RST",
        "tapflow_tcp_flag_packets_total{flag=\"rst\"}",
        Total::Sum,
    ),
    (
        "TCP with options",
        "tapflow_tcp_options_packets_total",
        Total::Sum,
    ),
    (
        "mean inter-arrival (s)",
        "tapflow_mean_interarrival_seconds",
        Total::Parallel,
    ),
    (
        "mean rate (byte/s)",
        "tapflow_mean_rate_bytes_per_second",
        Total::Sum,
    ),
    (
        "failed forwards",
        "tapflow_forward_failed_records_total",
        Total::Sum,
    ),
    ("flows active", "tapflow_flows_active", Total::Sum),
    ("flows exported", "tapflow_flows_exported_total", Total::Sum),
];

/// How the workers' values of a row add up.
#[derive(Debug, Clone, Copy)]
enum Total {
    Sum,
    /// Gaps between packets of workers running side by side: 1 / Σ (1 / gap).
    Parallel,
}

fn total(r: &Reading, id: &str, how: Total) -> f64 {
    match how {
        Total::Sum => r.total(id),
        Total::Parallel => {
            let rate: f64 = r
                .each(id)
                .iter()
                .filter(|&&g| g > 0.0)
                .map(|g| 1.0 / g)
                .sum();
            if rate > 0.0 { 1.0 / rate } else { 0.0 }
        }
    }
}

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
fn table(r: &Reading, before: Option<(&Reading, f64)>) -> String {
    let mut head = vec!["".to_string(), "total".to_string()];
    head.extend((0..r.workers).map(|k| format!("w{k}")));
    if before.is_some() {
        head.push("total/s".to_string());
    }
    let mut rows = vec![head];
    for &(label, id, how) in ROWS {
        let mut row = vec![label.to_string(), number(total(r, id, how))];
        row.extend(r.each(id).into_iter().map(number));
        if let Some((b, secs)) = before {
            let rate = id
                .contains("_total")
                .then(|| (r.total(id) - b.total(id)) / secs);
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

fn json(r: &Reading) -> String {
    let key =
        |label: &str| json_string(&label.replace([' ', '-'], "_").replace(['(', ')', '/'], ""));
    let obj = |values: Vec<(String, f64)>| {
        let fields: Vec<String> = values
            .into_iter()
            .map(|(k, v)| format!("{k}:{}", number(v)))
            .collect();
        format!("{{{}}}", fields.join(","))
    };
    let total = obj(ROWS
        .iter()
        .map(|&(l, id, how)| (key(l), total(r, id, how)))
        .collect());
    let workers: Vec<String> = (0..r.workers)
        .map(|k| {
            obj(ROWS
                .iter()
                .map(|&(l, id, _)| (key(l), r.each(id)[k]))
                .collect())
        })
        .collect();
    format!(
        "{{\"total\":{total},\"workers\":[{}]}}\n",
        workers.join(",")
    )
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
    let mut before: Option<(Reading, Instant)> = None;
    loop {
        let now = read(&path)?;
        let at = Instant::now();
        if a.json {
            print!("{}", json(&now));
        } else {
            let prev = before
                .as_ref()
                .map(|(r, t)| (r, at.duration_since(*t).as_secs_f64()));
            print!("{}", table(&now, prev));
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
        println!();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const TEXT: &str = "# HELP x y\n# TYPE tapflow_received_packets_total counter\n\
        tapflow_received_packets_total{worker=\"0\"} 10\n\
        tapflow_received_packets_total{worker=\"1\"} 5\n\
        tapflow_network_packets_total{worker=\"1\",network=\"ipv6\"} 3\n\
        tapflow_mean_interarrival_seconds{worker=\"0\"} 0.5\n\
        tapflow_mean_interarrival_seconds{worker=\"1\"} 0.5\n\
        tapflow_rule_packets_total{rule=\"web\"} 7\n\
        tapflow_start_time_seconds 1700000000\n";

    #[test]
    fn readings_sum_workers() {
        let r = Reading::parse(TEXT);
        assert_eq!(r.workers, 2);
        assert_eq!(r.each("tapflow_received_packets_total"), vec![10.0, 5.0]);
        assert_eq!(
            r.total("tapflow_network_packets_total{network=\"ipv6\"}"),
            3.0
        );
        assert_eq!(r.total("tapflow_rule_packets_total{rule=\"web\"}"), 7.0);
        assert_eq!(
            total(&r, "tapflow_mean_interarrival_seconds", Total::Parallel),
            0.25
        );
        let t = table(&r, None);
        assert!(t.lines().nth(1).unwrap().starts_with("received"), "{t}");
        let received: Vec<&str> = t.lines().nth(1).unwrap().split_whitespace().collect();
        assert_eq!(received, ["received", "15", "10", "5"], "{t}");
        let j = json(&r);
        assert!(j.starts_with("{\"total\":{\"received\":15,"), "{j}");
        assert!(j.contains("\"mean_inter_arrival_s\":0.25"), "{j}");
    }
}
