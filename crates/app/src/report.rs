//! What tapflow tells people: the live status line, the exit summary, the JSON summary.

use std::io::{IsTerminal, Write};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;

use serde::{Serialize, Serializer};
use tapflow_engine::counters::Totals;
use tapflow_engine::pipeline::{Summary, Tick};
use tapflow_engine::rules::{RuleListing, RuleStat};
use tapflow_engine::sink::flow::meter::FlowSummary;
use tapflow_engine::sink::forward::ForwardReport;

use crate::Failure;

/// The live line of a running command on stderr: on a terminal one line, cut to the
/// terminal's width and rewritten in place; elsewhere (a log, the journal) one line each time.
#[derive(Debug)]
pub struct LiveLine {
    tty: bool,
    shown: bool,
}

impl LiveLine {
    /// A live line on stderr.
    pub fn new() -> LiveLine {
        LiveLine {
            tty: std::io::stderr().is_terminal(),
            shown: false,
        }
    }

    /// Shows `line`.
    pub fn show(&mut self, line: &str) {
        let mut err = std::io::stderr().lock();
        if self.tty {
            // One column spare: a line filling the last one wraps on some terminals.
            let width = console::Term::stderr()
                .size_checked()
                .map_or(80, |(_, cols)| usize::from(cols))
                .saturating_sub(1)
                .max(20);
            let cut: String = line.chars().take(width).collect();
            let _ = write!(err, "\r\x1b[K{cut}");
            self.shown = true;
        } else {
            let _ = writeln!(err, "{line}");
        }
        let _ = err.flush();
    }

    /// Clears the line from a terminal, before the lines that stay.
    pub fn clear(&mut self) {
        if self.tty && self.shown {
            let _ = write!(std::io::stderr(), "\r\x1b[K");
            self.shown = false;
        }
    }
}

/// A rate in bits a second the way people read it: `950 bit/s`, `12.3 Mbit/s`, `1.49 Gbit/s`.
pub fn bits(per_second: f64) -> String {
    let n = crate::units::format_count(per_second);
    match n.chars().last() {
        Some(c @ ('k' | 'M' | 'G')) => format!("{} {c}bit/s", &n[..n.len() - 1]),
        _ => format!("{n} bit/s"),
    }
}

/// Prints one status line a second on stderr (see [`LiveLine`]).
#[derive(Debug)]
pub struct StatusLine {
    label: String,
    quiet: bool,
    line: LiveLine,
    last: Option<(Duration, Totals)>,
    bar: Option<indicatif::ProgressBar>,
}

impl StatusLine {
    /// A status line for a capture on `label`; a progress bar instead for files on a terminal.
    pub fn new(label: &str, quiet: bool, file_len: Option<u64>) -> StatusLine {
        let tty = std::io::stderr().is_terminal();
        let bar = match file_len {
            Some(len) if tty && !quiet => {
                let b = indicatif::ProgressBar::new(len);
                b.set_style(
                    indicatif::ProgressStyle::with_template(
                        "{bytes}/{total_bytes} [{bar:30}] {percent}% {msg}",
                    )
                    .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar()),
                );
                Some(b)
            }
            _ => None,
        };
        StatusLine {
            label: label.to_string(),
            quiet,
            line: LiveLine::new(),
            last: None,
            bar,
        }
    }

    /// Called by the engine; returns when it wants the next call: 100 ms for a progress bar,
    /// one second for the status line, never when quiet.
    pub fn tick(&mut self, t: &Tick) -> Option<Duration> {
        const EVERY: Duration = Duration::from_secs(1);
        if let (Some(bar), Some((done, total))) = (&self.bar, t.progress) {
            // The input's own length: a compressed file is read decompressed.
            bar.set_length(total);
            bar.set_position(done);
            bar.set_message(format!("{} packets", t.totals.recorded));
            return Some(Duration::from_millis(100));
        }
        if self.quiet || t.progress.is_some() {
            return None;
        }
        let (prev_at, prev) = self.last.unwrap_or((Duration::ZERO, Totals::default()));
        let dt = t.elapsed.saturating_sub(prev_at);
        if dt < EVERY {
            return Some(EVERY - dt);
        }
        self.last = Some((t.elapsed, t.totals));
        let secs = dt.as_secs_f64();
        let seen = |x: &Totals| x.recorded + x.dropped_kernel + x.dropped_ours;
        let pps = (seen(&t.totals) - seen(&prev).min(seen(&t.totals))) as f64 / secs;
        let bps = (t.totals.bytes.saturating_sub(prev.bytes)) as f64 * 8.0 / secs;
        let drops = t.totals.dropped_kernel + t.totals.dropped_ours;
        let total = seen(&t.totals).max(1);
        let line = format!(
            "{}: {} pkt/s, {}, {} recorded, {} dropped ({:.2}%)",
            self.label,
            crate::units::format_count(pps),
            bits(bps),
            crate::units::format_count(t.totals.recorded as f64),
            crate::units::format_count(drops as f64),
            drops as f64 * 100.0 / total as f64
        );
        self.line.show(&line);
        Some(EVERY)
    }

    /// Clears the status line or progress bar before the summary.
    pub fn finish(&mut self) {
        if let Some(bar) = &self.bar {
            bar.finish_and_clear();
        } else {
            self.line.clear();
        }
    }
}

/// The exit summary line: every packet accounted for.
pub fn summary_line(t: &Totals) -> String {
    let mut s = format!(
        "tapflow: {} received, {} recorded, {} dropped by kernel, {} dropped by tapflow",
        t.received, t.recorded, t.dropped_kernel, t.dropped_ours
    );
    if t.filtered > 0 {
        s.push_str(&format!(", {} filtered", t.filtered));
    }
    if t.past_limit > 0 {
        s.push_str(&format!(", {} past the -c limit", t.past_limit));
    }
    if t.link_gaps > 0 {
        s.push_str(&format!(
            ", {} link gap{} ({:.3} s down)",
            t.link_gaps,
            if t.link_gaps == 1 { "" } else { "s" },
            t.link_down_ns as f64 / 1e9
        ));
    }
    s.push_str(&format!(" ({:.2}% collected)", t.collected_percent()));
    s
}

/// The exit line of forwarding: what went to each collector, and what could not be sent.
pub fn forward_line(f: &ForwardReport) -> String {
    let each: Vec<String> = f
        .collectors
        .iter()
        .map(|c| format!("{}: {} in {}", c.collector, c.records, c.datagrams))
        .collect();
    let mut s = format!(
        "tapflow: forwarded {} records in {} datagrams ({}), {} failed to send",
        f.records,
        f.datagrams,
        each.join(", "),
        f.failed
    );
    if let Some(e) = f.last_errno {
        s.push_str(&format!(
            " (last error: {})",
            std::io::Error::from_raw_os_error(e)
        ));
    }
    s
}

/// The exit lines of flow metering: flows counted, records ended by reason, and what each output
/// delivered.
pub fn flow_lines(f: &FlowSummary) -> Vec<String> {
    let m = &f.meter;
    let e = &m.table.ended;
    let mut lines = vec![format!(
        "tapflow: {} flows, {} records ({} idle, {} active, {} end, {} forced, {} evicted), \
         {} packets not IP, {} later fragments joined, {} not",
        m.table.created,
        f.export.records,
        e[0],
        e[1],
        e[2],
        e[3],
        e[4],
        m.not_ip,
        m.fragments_joined,
        m.fragments_unjoined
    )];
    for o in &f.export.outputs {
        let mut l = format!("tapflow: {}: {} records", o.name, o.records);
        if o.messages > 0 {
            l.push_str(&format!(" in {} messages", o.messages));
        }
        if o.not_encodable > 0 {
            l.push_str(&format!(", {} not encodable", o.not_encodable));
        }
        if o.lost_records > 0 {
            l.push_str(&format!(", {} records lost", o.lost_records));
        }
        if o.lost_messages > 0 {
            l.push_str(&format!(", {} messages lost", o.lost_messages));
        }
        if let Some(err) = &o.error {
            l.push_str(&format!(" (error: {err})"));
        }
        lines.push(l);
    }
    lines
}

/// The failure of a run whose flow outputs lost records or messages (the exit lines say which
/// and why): `None` when every output delivered everything.
pub fn flow_loss(f: &FlowSummary) -> Option<Failure> {
    let lost: Vec<String> = f
        .export
        .outputs
        .iter()
        .filter(|o| o.lost())
        .map(|o| match (o.lost_records, o.lost_messages) {
            (0, m) => format!("{} lost {m} messages", o.name),
            (r, _) => format!("{} lost {r} records", o.name),
        })
        .collect();
    (!lost.is_empty()).then(|| Failure::Runtime(format!("flow export: {}", lost.join(", "))))
}

/// The exit line of a capture with rules: what each rule matched (the first ten).
pub fn rules_line(l: &RuleListing) -> String {
    const SHOWN: usize = 10;
    let each: Vec<String> = l
        .rules
        .iter()
        .take(SHOWN)
        .map(|r| format!("{} {}", r.rule.name, r.packets))
        .collect();
    let more = l.rules.len().saturating_sub(SHOWN);
    format!(
        "tapflow: rules matched packets: {}{}",
        if each.is_empty() {
            "no rules".to_string()
        } else {
            each.join(", ")
        },
        if more > 0 {
            format!(" and {more} more (tapflow rules list)")
        } else {
            String::new()
        }
    )
}

/// The JSON summary of a capture (`--summary-json`): the accounting's keys, `seconds`,
/// `hw_timestamps`, `files`, and `forward`, `flows` and `rules` when there are any.
#[derive(Debug, Serialize)]
pub struct CaptureJson<'a> {
    #[serde(flatten)]
    totals: &'a Totals,
    seconds: f64,
    hw_timestamps: bool,
    #[serde(serialize_with = "paths")]
    files: &'a [PathBuf],
    #[serde(skip_serializing_if = "Option::is_none")]
    forward: Option<&'a ForwardReport>,
    #[serde(skip_serializing_if = "Option::is_none")]
    flows: Option<&'a FlowSummary>,
    #[serde(skip_serializing_if = "Option::is_none")]
    rules: Option<&'a [RuleStat]>,
    /// The source's own counters (`/metrics` names without `tapflow_` and `_total`), summed
    /// over their labels.
    #[serde(skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    source: std::collections::BTreeMap<&'a str, u64>,
}

impl<'a> CaptureJson<'a> {
    /// The summary of `s`.
    pub fn new(s: &'a Summary) -> CaptureJson<'a> {
        CaptureJson {
            totals: &s.totals,
            seconds: s.seconds,
            hw_timestamps: s.hw_timestamps,
            files: s.sinks.file.as_ref().map_or(&[][..], |f| &f.files),
            forward: s.sinks.forward.as_ref(),
            flows: s.flows.as_ref(),
            rules: s.rules.as_ref().map(|l| l.rules.as_slice()),
            source: s
                .source
                .iter()
                .map(|c| {
                    let name = c
                        .name
                        .trim_start_matches("tapflow_")
                        .trim_end_matches("_total");
                    (name, c.samples.iter().map(|(_, v)| *v as u64).sum())
                })
                .collect(),
        }
    }
}

/// File names as JSON strings (not valid UTF-8: with U+FFFD in place of the bad bytes).
pub fn paths<S: Serializer>(files: &[PathBuf], s: S) -> Result<S::Ok, S::Error> {
    s.collect_seq(files.iter().map(|f| f.to_string_lossy()))
}

/// `value` as JSON on one line, with a newline.
pub fn json_line(value: &impl Serialize) -> Result<String, Failure> {
    let mut s = serde_json::to_string(value)
        .map_err(|e| Failure::Runtime(format!("cannot write the JSON: {e}")))?;
    s.push('\n');
    Ok(s)
}

/// Ends a command: writes its JSON summary if asked (`json` is only built then), and turns the
/// error that ended the run, if any, into the exit code.
pub fn finish<T: Serialize>(
    summary_json: Option<&Path>,
    json: impl FnOnce() -> T,
    err: Option<tapflow_engine::EngineError>,
) -> Result<ExitCode, Failure> {
    if let Some(path) = summary_json {
        let text = json_line(&json())?;
        tapflow_sys::outfile::create(path)
            .map_err(|e| Failure::Runtime(e.to_string()))?
            .write_all(text.as_bytes())
            .map_err(|e| Failure::Runtime(format!("cannot write {}: {e}", path.display())))?;
    }
    match err {
        None => Ok(ExitCode::SUCCESS),
        Some(e) => Err(Failure::from_engine(e)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn summary_line_adds_up() {
        let t = Totals {
            received: 100,
            recorded: 90,
            dropped_kernel: 7,
            dropped_ours: 3,
            ..Totals::default()
        };
        assert_eq!(
            summary_line(&t),
            "tapflow: 100 received, 90 recorded, 7 dropped by kernel, 3 dropped by tapflow \
             (90.00% collected)"
        );
        let gap = Totals {
            link_gaps: 1,
            link_down_ns: 2_004_000_000,
            ..t
        };
        assert_eq!(
            summary_line(&gap),
            "tapflow: 100 received, 90 recorded, 7 dropped by kernel, 3 dropped by tapflow, \
             1 link gap (2.004 s down) (90.00% collected)"
        );
    }
}
