//! What happens when an alert starts or ends: a line on the terminal (text or JSON), an HTTP
//! POST of the alert as JSON (with retries), a command run with the alert on its standard
//! input, a gauge on `/metrics`.
//!
//! Actions that wait on the outside world (the webhook, the command) run on their own thread,
//! fed through a bounded queue: a slow receiver never holds detection up. An alert the queue
//! cannot take is counted and said at the end.

use std::io::Write;
use std::sync::mpsc::{self, Receiver, SyncSender};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

use crate::detect::alert::Alert;

/// Something done with every alert event.
pub trait Action: Send + std::fmt::Debug {
    /// An alert started or ended.
    fn alert(&mut self, a: &Alert);
    /// Detection ended: finish what is queued.
    fn close(&mut self) {}
}

/// One line per event on standard output or standard error.
#[derive(Debug)]
pub struct Print {
    /// JSON lines rather than text.
    pub json: bool,
    /// Standard error rather than standard output.
    pub stderr: bool,
}

/// The text line of an event.
pub fn text_line(a: &Alert) -> String {
    let mut s = format!("tapflow: alert {} {} {}", a.event, a.target, a.kind);
    if let Some(g) = &a.group {
        s += &format!(" (group {g})");
    }
    let limit = |l: Option<u64>| l.map_or(String::from("-"), |l| l.to_string());
    if a.event == "start" {
        s += &format!(
            " at {}: {:.0} packets/s ({w}limit {}), {:.0} bit/s ({w}limit {})",
            a.time,
            a.packets_per_second,
            limit(a.threshold.packets_per_second),
            a.bits_per_second,
            limit(a.threshold.bits_per_second),
            w = if a.limit == "baseline" { "learnt " } else { "" },
        );
        if a.flows_per_second > 0.0 {
            s += &format!(
                ", {:.0} flows/s (limit {})",
                a.flows_per_second,
                limit(a.threshold.flows_per_second)
            );
        }
        let p = &a.protocols;
        s += &format!(
            "; tcp {:.0}% udp {:.0}% icmp {:.0}% other {:.0}%",
            p.tcp * 100.0,
            p.udp * 100.0,
            p.icmp * 100.0,
            p.other * 100.0
        );
        let list = |v: &[crate::detect::alert::Source]| {
            v.iter()
                .map(|x| format!("{} {:.0}/s", x.source, x.packets_per_second))
                .collect::<Vec<_>>()
                .join(", ")
        };
        if !a.top_sources.is_empty() {
            s += &format!("; sources {}", list(&a.top_sources));
        }
        if !a.top_source_ports.is_empty() {
            s += &format!("; source ports {}", list(&a.top_source_ports));
        }
        s += &format!("; tapflow query {}", a.query);
    } else {
        s += &format!(
            " at {} after {} s: peak {:.0} packets/s, {:.0} bit/s",
            a.time,
            a.duration_seconds.unwrap_or(0),
            a.packets_per_second,
            a.bits_per_second
        );
    }
    s
}

impl Action for Print {
    fn alert(&mut self, a: &Alert) {
        let line = if self.json {
            serde_json::to_string(a).unwrap_or_default()
        } else {
            text_line(a)
        };
        // A closed pipe loses the line, never the detection.
        if self.stderr {
            let _ = writeln!(std::io::stderr(), "{line}");
        } else {
            let mut out = std::io::stdout().lock();
            let _ = writeln!(out, "{line}");
            let _ = out.flush();
        }
    }
}

/// The alerts running now, for `tapflow_alert_active{target,kind}` on `/metrics`.
#[derive(Debug, Clone, Default)]
pub struct Gauge(pub Arc<Mutex<Vec<(String, String)>>>);

impl Gauge {
    /// Target and kind of every running alert.
    pub fn read(&self) -> Vec<(String, String)> {
        self.0.lock().map(|v| v.clone()).unwrap_or_default()
    }

    /// The Prometheus text of the gauge.
    pub fn exposition(&self) -> String {
        let mut s = String::from(
            "# HELP tapflow_alert_active An alert is running for this target and kind.\n\
             # TYPE tapflow_alert_active gauge\n",
        );
        for (t, k) in self.read() {
            let (t, k) = (crate::metrics::escape(&t), crate::metrics::escape(&k));
            s += &format!("tapflow_alert_active{{target=\"{t}\",kind=\"{k}\"}} 1\n");
        }
        s
    }
}

impl Action for Gauge {
    fn alert(&mut self, a: &Alert) {
        let Ok(mut v) = self.0.lock() else { return };
        let key = (a.target.clone(), a.kind.clone());
        v.retain(|x| *x != key);
        if a.event == "start" {
            v.push(key);
        }
    }
}

/// Alerts the outside world waits on, queued.
const QUEUE: usize = 1024;
/// Tries of one webhook POST.
pub const WEBHOOK_TRIES: u32 = 4;

/// Where a queued alert goes.
#[derive(Debug, Clone)]
pub enum Hook {
    /// POST it as JSON to this URL.
    Webhook(String),
    /// Run this command with `sh -c`, the alert as JSON on its standard input and
    /// `TAPFLOW_ALERT_EVENT`, `TAPFLOW_ALERT_TARGET` and `TAPFLOW_ALERT_KIND` in its
    /// environment.
    Exec(String),
}

/// A hook on its own thread.
#[derive(Debug)]
pub struct Hooked {
    tx: Option<SyncSender<Alert>>,
    thread: Option<JoinHandle<Vec<String>>>,
    /// Alerts the queue could not take.
    pub dropped: u64,
}

impl Hooked {
    /// Starts the thread of `hook`.
    pub fn start(hook: Hook) -> Hooked {
        let (tx, rx) = mpsc::sync_channel(QUEUE);
        let thread = std::thread::Builder::new()
            .name("tapflow-alert".into())
            .spawn(move || run_hook(&hook, &rx))
            .ok();
        Hooked {
            tx: Some(tx),
            thread,
            dropped: 0,
        }
    }
}

impl Action for Hooked {
    fn alert(&mut self, a: &Alert) {
        if let Some(tx) = &self.tx
            && tx.try_send(a.clone()).is_err()
        {
            self.dropped += 1;
        }
    }

    fn close(&mut self) {
        self.tx = None;
        if let Some(t) = self.thread.take() {
            for e in t.join().unwrap_or_default() {
                eprintln!("tapflow: {e}");
            }
        }
        if self.dropped > 0 {
            eprintln!(
                "tapflow: {} alert events not passed on: the hook fell behind",
                self.dropped
            );
        }
    }
}

fn run_hook(hook: &Hook, rx: &Receiver<Alert>) -> Vec<String> {
    let mut errors = Vec::new();
    for a in rx {
        let body = serde_json::to_string(&a).unwrap_or_default();
        let r = match hook {
            Hook::Webhook(url) => post(url, &body),
            Hook::Exec(cmd) => exec(cmd, &a, &body),
        };
        if let Err(e) = r {
            eprintln!("tapflow: alert {} {}: {e}", a.event, a.target);
            errors.push(e);
        }
    }
    errors
}

/// POSTs `body` to `url`, trying [`WEBHOOK_TRIES`] times with a doubling wait.
pub fn post(url: &str, body: &str) -> Result<(), String> {
    let agent: ureq::Agent = ureq::Agent::config_builder()
        .timeout_global(Some(Duration::from_secs(5)))
        .build()
        .into();
    let mut wait = Duration::from_millis(200);
    let mut last = String::new();
    for _ in 0..WEBHOOK_TRIES {
        match agent
            .post(url)
            .header("content-type", "application/json")
            .send(body)
        {
            Ok(_) => return Ok(()),
            Err(e) => last = e.to_string(),
        }
        std::thread::sleep(wait);
        wait *= 2;
    }
    Err(format!(
        "webhook {url} failed {WEBHOOK_TRIES} times, last: {last}"
    ))
}

fn exec(cmd: &str, a: &Alert, body: &str) -> Result<(), String> {
    let mut child = std::process::Command::new("sh")
        .arg("-c")
        .arg(cmd)
        .env("TAPFLOW_ALERT_EVENT", a.event)
        .env("TAPFLOW_ALERT_TARGET", &a.target)
        .env("TAPFLOW_ALERT_KIND", &a.kind)
        .stdin(std::process::Stdio::piped())
        .spawn()
        .map_err(|e| format!("exec hook '{cmd}': {e}"))?;
    if let Some(mut i) = child.stdin.take() {
        let _ = writeln!(i, "{body}");
    }
    let status = child
        .wait()
        .map_err(|e| format!("exec hook '{cmd}': {e}"))?;
    if status.success() {
        Ok(())
    } else {
        Err(format!("exec hook '{cmd}' exited with {status}"))
    }
}
