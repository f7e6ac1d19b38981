//! `tapflow recv`: checks the request, runs the receiver, prints the per-probe accounting.

use std::net::IpAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::sync::atomic::AtomicBool;
use std::time::Duration;

use serde::Serialize;
use tapflow_engine::receiver::{self, Cidr, ProbeReport, ReceiverConfig, ReceiverSummary};
use tapflow_engine::sink::file::{Format, WriterConfig};
use tapflow_engine::sink::flow::meter::FlowSummary;

use crate::Failure;
use crate::cli::RecvArgs;

pub fn run(a: RecvArgs, stop: &Arc<AtomicBool>) -> Result<ExitCode, Failure> {
    let cfg = config(&a)?;
    let quiet = a.quiet;
    let mut ready = |addr: std::net::SocketAddr, rcvbuf: usize| {
        // Tests and scripts wait for this line.
        eprintln!(
            "tapflow: receiving on {addr} (udp), receive buffer {} KiB",
            rcvbuf / 1024
        );
    };
    let mut tick = |probes: &[receiver::ProbeReport], elapsed: Duration| {
        if quiet {
            return;
        }
        let (r, t, p) = probes.iter().fold((0, 0, 0), |s, x| {
            (
                s.0 + x.records,
                s.1 + x.lost_in_transit,
                s.2 + x.lost_on_probe,
            )
        });
        eprintln!(
            "tapflow recv: {:.0} s, {} probes, {r} records, {t} lost in transit, {p} lost on probes",
            elapsed.as_secs_f64(),
            probes.len()
        );
    };
    let (summary, err) = receiver::run(&cfg, stop, &mut ready, &mut tick);
    for line in summary_lines(&summary) {
        eprintln!("{line}");
    }
    if let Some(f) = &summary.flows {
        for line in crate::report::flow_lines(f) {
            eprintln!("{line}");
        }
    }
    crate::report::finish(a.summary_json.as_deref(), || RecvJson::new(&summary), err)
}

fn config(a: &RecvArgs) -> Result<ReceiverConfig, Failure> {
    let bad = |m: String| Failure::Usage(m);
    let allow = a
        .allow
        .iter()
        .map(|s| Cidr::parse(s).map_err(|e| bad(format!("--allow {e}"))))
        .collect::<Result<Vec<_>, _>>()?;
    let secs = |v: Option<f64>, name: &str| -> Result<Option<Duration>, Failure> {
        match v {
            None => Ok(None),
            Some(s) if s.is_finite() && s > 0.0 && s < 1e9 => Ok(Some(Duration::from_secs_f64(s))),
            Some(s) => Err(bad(format!(
                "{name} {s} is not a positive number of seconds"
            ))),
        }
    };
    if a.rotate_size.is_some_and(|n| n < 4096) {
        return Err(bad("--rotate-size must be at least 4K".into()));
    }
    Ok(ReceiverConfig {
        listen: a.listen,
        file: WriterConfig {
            path: a.write.clone(),
            format: Format::Pcapng,
            worker: None,
            rotate_bytes: a.rotate_size,
            rotate_every: secs(a.rotate_seconds, "--rotate-seconds")?,
            isb_every: Duration::from_secs(1),
        },
        allow,
        rcvbuf: a.rcvbuf,
        duration: secs(a.duration, "--duration")?,
        flows: crate::capture_cmd::flow_config(&a.flows, false)?,
    })
}

/// The exit lines: totals, then one per probe interface and one per bad source.
fn summary_lines(s: &ReceiverSummary) -> Vec<String> {
    let (d, r, t, p) = s.totals();
    let mut out = vec![format!(
        "tapflow: {r} records received in {d} datagrams from {} probe interfaces, \
         {t} lost in transit, {p} lost on probes, {} bad datagrams, {} refused",
        s.probes.len(),
        s.bad_total(),
        s.refused
    )];
    for x in &s.probes {
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
    for (src, n, why) in &s.bad {
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
        let (datagrams, records, lost_in_transit, lost_on_probe) = s.totals();
        RecvJson {
            datagrams,
            records,
            lost_in_transit,
            lost_on_probe,
            bad: s.bad_total(),
            refused: s.refused,
            seconds: s.seconds,
            rcvbuf: s.rcvbuf,
            files: &s.files,
            probes: &s.probes,
            bad_sources: s
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
