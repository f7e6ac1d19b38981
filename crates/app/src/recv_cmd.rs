//! `tapflow recv`: checks the request, runs the receiver, prints the per-probe accounting.

use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use serde::Serialize;
use tapflow_engine::pipeline::{self, CaptureConfig, Input};
use tapflow_engine::sink::file::{Format, WriterConfig};
use tapflow_engine::sink::flow::meter::FlowSummary;
use tapflow_engine::source::datagrams::{self, DatagramInput, Ledger, ProbeReport};
use tapflow_engine::stop::Stop;
use tapflow_wire::prefix::Prefix;

use crate::Failure;
use crate::capture_cmd::first_part;
use crate::cli::RecvArgs;
use crate::privileges::{Outputs, RunAs};

/// What a receiver run did: the source's ledger, and what the pipeline wrote.
#[derive(Debug, Default)]
struct ReceiverSummary {
    ledger: Ledger,
    files: Vec<PathBuf>,
    seconds: f64,
    flows: Option<FlowSummary>,
}

pub fn run(a: RecvArgs, stop: &Arc<Stop>) -> Result<ExitCode, Failure> {
    let run_as = RunAs::choose(a.user.as_deref())?;
    let ledger = Arc::new(Mutex::new(Ledger::default()));
    let mut cfg = config(&a, &ledger)?;
    if let Some(key) = &a.anonymize {
        crate::capture_cmd::anonymize(&mut cfg, crate::anonymize_cmd::read_key(key)?);
    }
    cfg.drop_privileges = run_as.hook(Outputs {
        first_file: Some((first_part(&a.write, &cfg), a.write.clone())),
        summary: a.summary_json.clone(),
    });
    let note = run_as.note();
    let quiet = a.quiet;
    let read = || {
        ledger
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    };
    let mut ready = |r: &pipeline::Ready| {
        if let Some(n) = &note {
            eprintln!("{n}");
        }
        if let Some(a) = &r.metrics {
            eprintln!("tapflow: metrics on http://{a}/metrics");
        }
        let l = read();
        // Tests and scripts wait for this line.
        eprintln!(
            "tapflow: receiving on {} (udp), receive buffer {} KiB",
            l.listen.map_or("?".into(), |a: SocketAddr| a.to_string()),
            l.rcvbuf / 1024
        );
    };
    let mut live = crate::report::LiveLine::new();
    let mut tick = |t: &pipeline::Tick| {
        if !quiet && !t.elapsed.is_zero() {
            let l = read();
            live.show(&format!(
                "tapflow recv: {:.0} s, {} probes, {} records, {} lost in transit, {} lost on probes, \
                 {} bad datagrams, {} refused",
                t.elapsed.as_secs_f64(),
                l.probes.len(),
                t.totals.recorded,
                t.totals.dropped_in_transit,
                t.totals.dropped_kernel,
                l.bad_total(),
                l.refused,
            ));
        }
        (!quiet).then_some(Duration::from_secs(1))
    };
    let (summary, err) = pipeline::run(&cfg, stop, &mut ready, &mut tick);
    live.clear();
    let summary = ReceiverSummary {
        ledger: read(),
        files: summary.sinks.file.map(|f| f.files).unwrap_or_default(),
        seconds: summary.seconds,
        flows: summary.flows,
    };
    for line in summary_lines(&summary) {
        eprintln!("{line}");
    }
    crate::anonymize_cmd::say_unread(cfg.anonymize.as_ref());
    if let Some(f) = &summary.flows {
        for line in crate::report::flow_lines(f) {
            eprintln!("{line}");
        }
    }
    let code = crate::report::finish(a.summary_json.as_deref(), || RecvJson::new(&summary), err)?;
    match summary.flows.as_ref().and_then(crate::report::flow_loss) {
        Some(lost) => Err(lost),
        None => Ok(code),
    }
}

fn config(a: &RecvArgs, ledger: &Arc<Mutex<Ledger>>) -> Result<CaptureConfig, Failure> {
    let bad = |m: String| Failure::Usage(m);
    let allow = a
        .allow
        .iter()
        .map(|s| Prefix::parse_covering(s).map_err(|e| bad(format!("--allow {e}"))))
        .collect::<Result<Vec<_>, _>>()?;
    if a.rotate_size.is_some_and(|n| n < 4096) {
        return Err(bad("--rotate-size must be at least 4K".into()));
    }
    Ok(CaptureConfig {
        input: Input::Datagrams(DatagramInput {
            listen: a.listen,
            allow,
            rcvbuf: a.rcvbuf,
            ledger: Arc::clone(ledger),
        }),
        snaplen: datagrams::SNAPLEN,
        filter: None,
        file: Some(WriterConfig {
            path: a.write.clone(),
            format: Format::Pcapng,
            worker: None,
            rotate_bytes: a.rotate_size,
            rotate_every: a.rotate_seconds,
            isb_every: Duration::from_secs(1),
            keep: None,
        }),
        count: None,
        duration: a.duration,
        print: false,
        forward: None,
        flows: crate::capture_cmd::flow_config(&a.flows, false)?,
        rules: None,
        control: None,
        metrics: a.metrics,
        drop_privileges: None,
        anonymize: None,
        detect: None,
    })
}

/// The exit lines: totals, then one per probe interface and one per bad source.
fn summary_lines(s: &ReceiverSummary) -> Vec<String> {
    let (d, r, t, p) = s.ledger.totals();
    let mut out = vec![format!(
        "tapflow: {r} records received in {d} datagrams from {} probe interfaces, \
         {t} lost in transit, {p} lost on probes, {} bad datagrams, {} refused",
        s.ledger.probes.len(),
        s.ledger.bad_total(),
        s.ledger.refused
    )];
    for x in &s.ledger.probes {
        out.push(format!(
            "tapflow:   interface {}: probe {} at {} if {}: {} records, {} lost in transit, \
             {} lost on probe, {} datagrams, {} late",
            x.index,
            x.probe,
            x.source.map_or("?".into(), |a| a.to_string()),
            x.interface,
            x.records,
            x.lost_in_transit,
            x.lost_on_probe,
            x.datagrams,
            x.late
        ));
    }
    for (src, n, why) in &s.ledger.bad {
        out.push(format!(
            "tapflow:   {n} bad datagrams from {} (last: {why})",
            src.map_or("other sources".into(), |a| a.to_string())
        ));
    }
    out
}

/// The JSON summary of a receiver run (`--summary-json`): the totals over probe interfaces,
/// then each probe interface and each bad source, and `flows` when metering was on.
#[derive(Debug, Serialize)]
struct RecvJson<'a> {
    datagrams: u64,
    records: u64,
    lost_in_transit: u64,
    lost_on_probe: u64,
    bad: u64,
    refused: u64,
    seconds: f64,
    rcvbuf: usize,
    #[serde(serialize_with = "crate::report::paths")]
    files: &'a [PathBuf],
    probes: &'a [ProbeReport],
    bad_sources: Vec<BadSource<'a>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    flows: Option<&'a FlowSummary>,
}

/// Bad datagrams from one source address (`null`: the sources past the receiver's limit).
#[derive(Debug, Serialize)]
struct BadSource<'a> {
    source: Option<IpAddr>,
    count: u64,
    last: &'a str,
}

impl<'a> RecvJson<'a> {
    fn new(s: &'a ReceiverSummary) -> RecvJson<'a> {
        let (datagrams, records, lost_in_transit, lost_on_probe) = s.ledger.totals();
        RecvJson {
            datagrams,
            records,
            lost_in_transit,
            lost_on_probe,
            bad: s.ledger.bad_total(),
            refused: s.ledger.refused,
            seconds: s.seconds,
            rcvbuf: s.ledger.rcvbuf,
            files: &s.files,
            probes: &s.ledger.probes,
            bad_sources: s
                .ledger
                .bad
                .iter()
                .map(|(source, count, last)| BadSource {
                    source: *source,
                    count: *count,
                    last,
                })
                .collect(),
            flows: s.flows.as_ref(),
        }
    }
}
