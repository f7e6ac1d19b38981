//! `tapflow gen`: builds the frame, runs the generator, reports what was sent. A run that sent
//! nothing, or left frames unsent, fails with the reason (exit code 1).

use std::num::NonZeroU64;
use std::process::ExitCode;
use std::sync::Arc;
use std::sync::atomic::AtomicBool;
use std::time::Duration;

use serde::Serialize;
use tapflow_engine::tools::generator::{self, GenConfig, GenReport, Traffic};
use tapflow_wire::build::{FrameSpec, L4};
use tapflow_wire::ethernet::EthernetAddress;

use crate::Failure;
use crate::cli::{GenArgs, ProtoArg};

pub fn run(a: GenArgs, stop: &Arc<AtomicBool>) -> Result<ExitCode, Failure> {
    let bad = Failure::Usage;
    if !(60..=9000).contains(&a.size) {
        return Err(bad(format!(
            "--size {} is out of range: 60 to 9000 bytes",
            a.size
        )));
    }
    let mac = |s: &str, name: &str| -> Result<EthernetAddress, Failure> {
        s.parse().map_err(|_| {
            bad(format!(
                "{name} '{s}' is not a MAC address like 02:00:00:00:00:01"
            ))
        })
    };
    if a.src_ip.is_ipv4() != a.dst_ip.is_ipv4() {
        return Err(bad(
            "--src-ip and --dst-ip must both be IPv4 or both IPv6".into()
        ));
    }
    let duration = a.duration;
    if a.rate == Some(0) {
        return Err(bad("--rate 0 would send nothing".into()));
    }
    if a.count == Some(0) {
        return Err(bad("--count 0 would send nothing".into()));
    }
    if a.count.is_none() && duration.is_none() && a.replay.is_none() {
        return Err(bad(
            "say how much to send: --count N or --duration SECS".into()
        ));
    }
    let traffic = match &a.replay {
        Some(p) => Traffic::Replay {
            path: p.clone(),
            loops: NonZeroU64::new(a.loops),
        },
        None => Traffic::Synthetic {
            spec: FrameSpec {
                src_mac: mac(&a.src_mac, "--src-mac")?,
                dst_mac: mac(&a.dst_mac, "--dst-mac")?,
                src_ip: a.src_ip,
                dst_ip: a.dst_ip,
                proto: match a.proto {
                    ProtoArg::Udp => L4::Udp,
                    ProtoArg::Tcp => L4::Tcp,
                },
                src_port: a.src_port,
                dst_port: a.dst_port,
                frame_len: a.size,
            },
            flows: a.flows,
        },
    };
    let cfg = GenConfig {
        ifname: a.interface.clone(),
        traffic,
        count: a.count,
        duration,
        rate: a.rate,
    };
    let quiet = a.quiet;
    let mut last = (Duration::ZERO, 0);
    let mut live = crate::report::LiveLine::new();
    let report = generator::run(&cfg, stop, &mut |sent, at| {
        if !quiet && at - last.0 >= Duration::from_secs(1) {
            let pps = (sent - last.1) as f64 / (at - last.0).as_secs_f64();
            last = (at, sent);
            live.show(&format!(
                "tapflow gen: {} frames queued after {:.1} s, {} frames/s",
                crate::units::format_count(sent as f64),
                at.as_secs_f64(),
                crate::units::format_count(pps)
            ));
        }
    });
    live.clear();
    let report = report.map_err(Failure::from_engine)?;
    let pps = report.sent as f64 / report.seconds.max(1e-9);
    let mbps = report.bytes as f64 * 8.0 / report.seconds.max(1e-9) / 1e6;
    let reasons = failure_reasons(&report);
    eprintln!(
        "tapflow gen: sent {} packets ({} bytes) in {:.3} s: {:.0} pps, {:.1} Mbit/s{}",
        report.sent,
        report.bytes,
        report.seconds,
        pps,
        mbps,
        if report.failed > 0 {
            format!(", {} failed: {reasons}", report.failed)
        } else {
            String::new()
        }
    );
    let json = || GenJson {
        report: &report,
        pps,
    };
    let code = crate::report::finish(a.summary_json.as_deref(), json, None)?;
    if report.failed > 0 {
        return Err(Failure::Runtime(format!(
            "{} of {} frames not sent on {}: {reasons}",
            report.failed,
            report.sent + report.failed,
            a.interface
        )));
    }
    if report.sent == 0 {
        return Err(Failure::Runtime(
            "nothing sent: stopped before the first frame".into(),
        ));
    }
    Ok(code)
}

/// Why frames were not sent, each reason with its count: `2 too large for the MTU (1500 + 14-byte
/// Ethernet header), 1 refused by the kernel`.
fn failure_reasons(r: &GenReport) -> String {
    let reasons = [
        (
            r.too_large,
            format!(
                "too large for the MTU ({} + 14-byte Ethernet header)",
                r.mtu
            ),
        ),
        (
            r.too_short,
            "shorter than an Ethernet header (14 bytes)".to_string(),
        ),
        (
            r.refused,
            "refused by the kernel (EINVAL or EMSGSIZE)".to_string(),
        ),
    ];
    let named: Vec<String> = reasons
        .iter()
        .filter(|(n, _)| *n > 0)
        .map(|(n, why)| format!("{n} {why}"))
        .collect();
    named.join(", ")
}

/// The JSON summary of `gen` (`--summary-json`): what was sent, and the mean packet rate.
#[derive(Debug, Serialize)]
struct GenJson<'a> {
    #[serde(flatten)]
    report: &'a GenReport,
    pps: f64,
}
