//! The alerts a store keeps: flood detection (`--detect`) appends each alert's start and end
//! to `DIR/alerts/alerts.jsonl` (a ClickHouse store: to its `alerts` table), the JSON lines
//! `tapflow detect --json` prints, and the console and `tapflow query --alerts` read them back
//! as alerts with a start and an end.
//!
//! The log is only ever appended to (`O_APPEND`, one write per event), so several writers and
//! any number of readers share it. A line that cannot be read (the last one, cut short by a
//! crash) is counted and left out; a writer that finds the log ending inside a line starts on
//! a new one.

use std::collections::HashMap;
use std::io::{Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::StoreError;
use crate::query::Window;
use crate::query::time::parse_time;

/// The log, under the store directory.
pub const FILE: &str = "alerts/alerts.jsonl";

/// The log of `dir`.
pub fn path(dir: &Path) -> PathBuf {
    dir.join(FILE)
}

/// Appends alert events to a store's log.
#[derive(Debug)]
pub struct AlertLog {
    file: std::fs::File,
    path: PathBuf,
}

impl AlertLog {
    /// Opens (or creates) the log of the store in `dir`.
    pub fn open(dir: &Path) -> Result<AlertLog, StoreError> {
        let path = path(dir);
        let io = |what, source| StoreError::Io {
            what,
            path: path.clone(),
            source,
        };
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent).map_err(|e| io("create", e))?;
        }
        let mut file = tapflow_sys::outfile::append(&path).map_err(|e| io("open", e))?;
        // A line cut short by a crash: the next event starts on a line of its own.
        let len = file.metadata().map_err(|e| io("stat", e))?.len();
        if len > 0 {
            let mut last = [0u8; 1];
            let mut r = std::fs::File::open(&path).map_err(|e| io("open", e))?;
            r.seek(SeekFrom::Start(len - 1))
                .and_then(|_| r.read_exact(&mut last))
                .map_err(|e| io("read", e))?;
            if last[0] != b'\n' {
                file.write_all(b"\n").map_err(|e| io("write", e))?;
            }
        }
        Ok(AlertLog { file, path })
    }

    /// Appends one event: `event` as one JSON line, written at once.
    pub fn append(&mut self, event: &impl Serialize) -> Result<(), StoreError> {
        let mut line = serde_json::to_vec(event).map_err(|e| StoreError::Other(e.to_string()))?;
        line.push(b'\n');
        self.file.write_all(&line).map_err(|source| StoreError::Io {
            what: "write",
            path: self.path.clone(),
            source,
        })
    }
}

/// Where a store keeps alert events: a Parquet store's log, a ClickHouse store's `alerts`
/// table ([`crate::clickhouse::alerts`]).
#[derive(Debug)]
pub enum AlertSink {
    /// `DIR/alerts/alerts.jsonl`.
    Log(AlertLog),
    /// `DB.alerts`.
    ClickHouse(crate::clickhouse::ClickHouseAlerts),
}

impl AlertSink {
    /// Opens where the store at `at` keeps its alerts.
    pub fn open(at: &crate::open::Location) -> Result<AlertSink, StoreError> {
        Ok(match at {
            crate::open::Location::Parquet(dir) => AlertSink::Log(AlertLog::open(dir)?),
            crate::open::Location::ClickHouse(url) => {
                AlertSink::ClickHouse(crate::clickhouse::ClickHouseAlerts::open(url)?)
            }
        })
    }

    /// Keeps one event.
    pub fn append(&mut self, event: &impl Serialize) -> Result<(), StoreError> {
        match self {
            AlertSink::Log(l) => l.append(event),
            AlertSink::ClickHouse(c) => c.append(event),
        }
    }
}

/// Limits an alert was measured against (per second; `None`: no such limit).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Limits {
    /// Packets a second.
    pub packets_per_second: Option<u64>,
    /// Bits a second.
    pub bits_per_second: Option<u64>,
    /// Flows a second.
    pub flows_per_second: Option<u64>,
}

/// A source address or port and its packets a second toward the target.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Source {
    /// The address or port.
    pub source: String,
    /// Its packets a second.
    #[serde(default)]
    pub packets_per_second: f64,
}

/// One line of the log: an alert's start or end, as the detector said it.
#[derive(Debug, Clone, PartialEq, Deserialize)]
pub struct AlertEvent {
    /// `start` or `end`.
    pub event: String,
    /// RFC 3339, UTC: the start of the interval it was decided in (for `end`, the alert's end).
    pub time: String,
    /// The destination address, `group:NAME` or `total`.
    pub target: String,
    /// The target's group.
    #[serde(default)]
    pub group: Option<String>,
    /// `syn_flood`, `dns_amplification`, …
    #[serde(default)]
    pub kind: String,
    /// Packets a second (at the start: the first interval's; at the end: the peak).
    #[serde(default)]
    pub packets_per_second: f64,
    /// Bits a second.
    #[serde(default)]
    pub bits_per_second: f64,
    /// Flows a second.
    #[serde(default)]
    pub flows_per_second: f64,
    /// The limits.
    #[serde(default)]
    pub threshold: Limits,
    /// The limits reached: `packets`, `bits`, `flows`.
    #[serde(default)]
    pub over: Vec<String>,
    /// The heaviest sources.
    #[serde(default)]
    pub top_sources: Vec<Source>,
    /// The heaviest source ports.
    #[serde(default)]
    pub top_source_ports: Vec<Source>,
    /// `tapflow query` arguments that show the flows behind it.
    #[serde(default)]
    pub query: String,
    /// For `end`: seconds from start to end.
    #[serde(default)]
    pub duration_seconds: Option<u64>,
}

/// One alert, its start and end events put together.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Alert {
    /// When it started, RFC 3339.
    pub start: String,
    /// When it ended, RFC 3339; `None` while it runs or if it never ended.
    pub end: Option<String>,
    /// µs since 1970 of `start`.
    pub start_us: i64,
    /// µs since 1970 of `end`.
    pub end_us: Option<i64>,
    /// `running`; `ended`; or `unended`: its detector stopped without ending it (a crash), as
    /// a later start for the same target shows.
    pub state: &'static str,
    /// The destination address, `group:NAME` or `total`.
    pub target: String,
    /// The target's group.
    pub group: Option<String>,
    /// What kind of flood it looks like.
    pub kind: String,
    /// The peak packets a second (while it runs: its first interval's).
    pub packets_per_second: f64,
    /// The peak bits a second.
    pub bits_per_second: f64,
    /// The peak flows a second.
    pub flows_per_second: f64,
    /// The limits.
    pub threshold: Limits,
    /// The limits it reached when it started.
    pub over: Vec<String>,
    /// The heaviest sources when it started.
    pub top_sources: Vec<Source>,
    /// The heaviest source ports when it started.
    pub top_source_ports: Vec<Source>,
    /// `tapflow query` arguments that show the flows behind it.
    pub query: String,
    /// The filter of `query` (`dst host ADDR`), empty for a group or the total.
    pub filter: String,
}

/// The filter words of a `tapflow query` argument line: what is left after its options and
/// their values.
pub fn filter_of(query: &str) -> String {
    let mut words = query.split_whitespace();
    let mut rest = Vec::new();
    while let Some(w) = words.next() {
        if w.starts_with('-') && w.len() > 1 {
            words.next();
        } else {
            rest.push(w);
        }
    }
    rest.join(" ")
}

/// What a log holds.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Alerts {
    /// The alerts, by start time.
    pub alerts: Vec<Alert>,
    /// Lines that could not be read (a line cut short by a crash), left out.
    pub unreadable: u64,
}

/// Puts the events of a log's text together into alerts.
pub fn parse(text: &str) -> Alerts {
    let mut out = Alerts::default();
    let mut open: HashMap<String, usize> = HashMap::new();
    for line in text.lines().filter(|l| !l.trim().is_empty()) {
        let Some((e, at)) = serde_json::from_str::<AlertEvent>(line)
            .ok()
            .and_then(|e| Some((parse_time(&e.time).ok()?, e)))
            .map(|(t, e)| (e, t))
        else {
            out.unreadable += 1;
            continue;
        };
        match e.event.as_str() {
            "start" => {
                if let Some(i) = open.remove(&e.target) {
                    out.alerts[i].state = "unended";
                }
                open.insert(e.target.clone(), out.alerts.len());
                out.alerts.push(Alert {
                    start: e.time,
                    end: None,
                    start_us: at,
                    end_us: None,
                    state: "running",
                    filter: filter_of(&e.query),
                    target: e.target,
                    group: e.group,
                    kind: e.kind,
                    packets_per_second: e.packets_per_second,
                    bits_per_second: e.bits_per_second,
                    flows_per_second: e.flows_per_second,
                    threshold: e.threshold,
                    over: e.over,
                    top_sources: e.top_sources,
                    top_source_ports: e.top_source_ports,
                    query: e.query,
                });
            }
            "end" => {
                // An end whose start is not in the log (an older log cut away) is left out.
                let Some(i) = open.remove(&e.target) else {
                    continue;
                };
                let a = &mut out.alerts[i];
                a.state = "ended";
                a.end = Some(e.time);
                a.end_us = Some(at);
                a.packets_per_second = a.packets_per_second.max(e.packets_per_second);
                a.bits_per_second = a.bits_per_second.max(e.bits_per_second);
                a.flows_per_second = a.flows_per_second.max(e.flows_per_second);
            }
            _ => out.unreadable += 1,
        }
    }
    out.alerts.sort_by_key(|a| a.start_us);
    out
}

/// The alerts of the store in `dir` that overlap `window` (a running one reaches to the end of
/// time), by start time. No log: no alert.
pub fn read(dir: &Path, window: Window) -> Result<Alerts, StoreError> {
    let path = path(dir);
    let text = match std::fs::read(&path) {
        Ok(b) => String::from_utf8_lossy(&b).into_owned(),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Alerts::default()),
        Err(source) => {
            return Err(StoreError::Io {
                what: "read",
                path,
                source,
            });
        }
    };
    Ok(within(parse(&text), window))
}

/// The alerts of `all` that overlap `window` (a running one reaches to the end of time).
pub fn within(mut all: Alerts, window: Window) -> Alerts {
    all.alerts.retain(|a| {
        let end = a.end_us.unwrap_or(if a.state == "running" {
            i64::MAX
        } else {
            a.start_us + 1
        });
        a.start_us < window.end_us && end > window.start_us
    });
    all
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::Strategy;

    fn line(event: &str, time: &str, target: &str, pps: f64) -> String {
        format!(
            r#"{{"event":"{event}","time":"{time}","target":"{target}","group":null,"kind":"syn_flood","packets_per_second":{pps},"bits_per_second":1.0,"flows_per_second":0.0,"threshold":{{"packets_per_second":20000,"bits_per_second":1000000000,"flows_per_second":null}},"over":["packets"],"top_sources":[{{"source":"192.0.2.9","packets_per_second":5.0}}],"top_source_ports":[],"query":"-t 2026-11-29T08:59:00Z/121s -s srcip/packets -n 10 dst host {target}","duration_seconds":null}}"#
        )
    }

    #[test]
    fn starts_and_ends_pair_up_and_a_torn_line_is_counted() {
        let text = [
            line("start", "2026-11-29T09:00:00Z", "10.0.0.1", 30_000.0),
            line("start", "2026-11-29T09:00:05Z", "10.0.0.2", 25_000.0),
            line("end", "2026-11-29T09:00:09Z", "10.0.0.1", 45_000.0),
            line("start", "2026-11-29T09:01:00Z", "10.0.0.2", 21_000.0),
            r#"{"event":"end","time":"2026-11-29T09:0"#.to_string(),
        ]
        .join("\n");
        let a = parse(&text);
        assert_eq!(a.unreadable, 1);
        let got: Vec<_> = a
            .alerts
            .iter()
            .map(|a| (a.target.as_str(), a.state, a.end.as_deref()))
            .collect();
        assert_eq!(
            got,
            [
                ("10.0.0.1", "ended", Some("2026-11-29T09:00:09Z")),
                ("10.0.0.2", "unended", None),
                ("10.0.0.2", "running", None),
            ]
        );
        assert_eq!(a.alerts[0].packets_per_second, 45_000.0);
        assert_eq!(a.alerts[0].filter, "dst host 10.0.0.1");
        assert_eq!(a.alerts[0].top_sources[0].source, "192.0.2.9");
    }

    #[test]
    fn the_log_is_appended_to_after_a_torn_line_and_read_by_window() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(dir.path().join("alerts")).unwrap();
        std::fs::write(
            path(dir.path()),
            &line("start", "2026-11-29T09:00:00Z", "10.0.0.1", 30_000.0)[..40],
        )
        .unwrap();
        let mut log = AlertLog::open(dir.path()).unwrap();
        let v = |s: String| serde_json::from_str::<serde_json::Value>(&s).unwrap();
        log.append(&v(line("start", "2026-11-29T09:00:00Z", "10.0.0.1", 3e4)))
            .unwrap();
        log.append(&v(line("end", "2026-11-29T09:00:10Z", "10.0.0.1", 4e4)))
            .unwrap();
        log.append(&v(line("start", "2026-11-29T10:00:00Z", "10.0.0.3", 3e4)))
            .unwrap();
        let w = |a: &str, b: &str| Window {
            start_us: parse_time(a).unwrap(),
            end_us: parse_time(b).unwrap(),
        };
        let all = read(dir.path(), w("2026-11-29", "2026-11-30")).unwrap();
        assert_eq!((all.alerts.len(), all.unreadable), (2, 1));
        let early = read(dir.path(), w("2026-11-29T09:00:05", "2026-11-29T09:30")).unwrap();
        assert_eq!(early.alerts.len(), 1);
        assert_eq!(early.alerts[0].state, "ended");
        // A running alert reaches to now.
        let late = read(dir.path(), w("2026-11-29T11:00", "2026-11-29T12:00")).unwrap();
        assert_eq!(late.alerts[0].target, "10.0.0.3");
        let none = read(&dir.path().join("nothing"), w("2026-11-29", "2026-11-30")).unwrap();
        assert!(none.alerts.is_empty());
    }

    proptest::proptest! {
        /// Whatever the log holds, reading it never panics and accounts for every line.
        #[test]
        fn any_log_reads_without_panicking(lines in proptest::collection::vec(
            proptest::prop_oneof![
                proptest::string::string_regex(".{0,80}").unwrap(),
                (0u8..3, 0u8..60).prop_map(|(t, s)| line(
                    ["start", "end", "other"][t as usize],
                    &format!("2026-11-29T09:00:{s:02}Z"),
                    "10.0.0.1",
                    1.0,
                )),
            ],
            0..20,
        )) {
            let text = lines.join("\n");
            let a = parse(&text);
            let events = text.lines().filter(|l| !l.trim().is_empty()).count() as u64;
            proptest::prop_assert!(a.alerts.len() as u64 + a.unreadable <= events);
        }
    }

    #[test]
    fn the_filter_is_the_query_without_its_options() {
        assert_eq!(
            filter_of("-t 2026-11-29T08:59:00Z/121s -s srcip/packets -n 10 dst host ::1"),
            "dst host ::1"
        );
        assert_eq!(filter_of("-t X/121s -s srcip/packets -n 10"), "");
    }
}
