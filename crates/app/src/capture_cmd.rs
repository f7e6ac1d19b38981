//! `tapflow capture`: checks the request, runs the engine, prints the accounting.

use std::net::{SocketAddr, ToSocketAddrs};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use tapflow_engine::control;
use tapflow_engine::naming::{output_path, part_path};
use tapflow_engine::pipeline::{self, CaptureConfig, Input, RingGeometry};
use tapflow_engine::sink::file::{Format, WriterConfig};
use tapflow_engine::sink::flow::encoder::Transport;
use tapflow_engine::sink::flow::export::{
    DEFAULT_BYTES_PER_SECOND, Dest, ExportConfig, ExportRate, ExportTarget,
};
use tapflow_engine::sink::flow::meter::FlowConfig;
use tapflow_engine::sink::flow::table::{Class, DEFAULT_IDLE_SECS, TableConfig};
use tapflow_engine::sink::forward::{self, Balance, ForwardConfig};
use tapflow_engine::source::ring::RingInput;
use tapflow_engine::stop::Stop;
use tapflow_engine::tools::plan;
use tapflow_wire::capfile::MAXIMUM_SNAPLEN;
use tapflow_wire::rules::{Rule, parse_rules};

use crate::cli::{BalanceArg, CaptureArgs, FlowArgs, FormatArg};
use crate::privileges::{Outputs, RunAs, creatable};
use crate::report::{
    CaptureJson, StatusLine, finish, flow_lines, flow_loss, forward_line, rules_line, summary_line,
};
use crate::size;
use crate::{Failure, in_range};

/// Ring memory the defaults aim to hold, per worker.
const HOLD: Duration = Duration::from_millis(50);
const NS: u64 = 1_000_000_000;

/// Runs `tapflow capture`, or `tapflow flows` when `flows` is set (metering always on, a
/// table on stdout unless another flow output is given).
pub fn run(a: CaptureArgs, stop: &Arc<Stop>, flows: bool) -> Result<ExitCode, Failure> {
    let run_as = RunAs::choose(a.user.as_deref())?;
    let mut cfg = config(&a)?;
    cfg.flows = flow_config(&a.flows, flows)?;
    if let Some(base) = &a.write {
        check_writable(base, &cfg)?;
    }
    run_as.prepare_control(cfg.control.as_deref())?;
    cfg.drop_privileges = run_as.hook(Outputs {
        first_file: a.write.as_ref().map(|b| (first_part(b, &cfg), b.clone())),
        summary: a.summary_json.clone(),
    });
    let note = run_as.note();
    let (label, file_len) = match &cfg.input {
        Input::Live(RingInput { ifname, .. }) => (format!("capturing on {ifname}"), None),
        Input::File(p) => (
            format!("reading {}", p.display()),
            std::fs::metadata(p).ok().map(|m| m.len()),
        ),
        Input::Datagrams(d) => (format!("receiving on {}", d.listen), None),
    };
    let paced = match &cfg.flows {
        Some(f) if matches!(cfg.input, Input::File(_)) => paced_export_lines(&f.export),
        _ => Vec::new(),
    };
    let mut status = StatusLine::new(&label, a.quiet, file_len);
    let quiet = a.quiet;
    let mut announce = |r: &pipeline::Ready| {
        // Part of the start banner, which a quiet file run does not print.
        if let Some(n) = note.as_ref().filter(|_| r.ring.is_some() || !quiet) {
            eprintln!("{n}");
        }
        // Like tcpdump's "listening on" line; tests and scripts wait for it. Files say nothing.
        if let Some(ring) = r.ring {
            eprintln!(
                "tapflow: listening on {}, link-type {}, snaplen {}, {} worker{}, ring {} x {} KiB, \
                 retire {} ms, {} timestamps",
                r.input,
                r.linktype,
                r.snaplen,
                r.workers,
                if r.workers == 1 { "" } else { "s" },
                ring.block_count,
                ring.block_size / 1024,
                ring.retire_ms,
                if r.hw_timestamps {
                    "hardware"
                } else {
                    "kernel"
                },
            );
        } else if !quiet {
            eprintln!("tapflow: reading {}, link-type {}", r.input, r.linktype);
            for line in &paced {
                eprintln!("{line}");
            }
        }
        if let Some(l) = &r.rules {
            eprintln!(
                "tapflow: {} rules, filter {} ({} instructions)",
                l.rules.len(),
                l.precision.describe(),
                l.instructions
            );
        }
        if let Some(p) = &r.control {
            eprintln!("tapflow: control socket {}", p.display());
        }
        if let Some(a) = &r.metrics {
            eprintln!("tapflow: metrics on http://{a}/metrics");
        }
    };
    let (summary, err) = pipeline::run(&cfg, stop, &mut announce, &mut |t| status.tick(t));
    status.finish();
    if err.is_none() || summary.totals.received > 0 {
        eprintln!("{}", summary_line(&summary.totals));
        if let Some(f) = &summary.sinks.forward {
            eprintln!("{}", forward_line(f));
        }
        if let Some(f) = &summary.flows {
            for line in flow_lines(f) {
                eprintln!("{line}");
            }
        }
        if let Some(l) = &summary.rules {
            eprintln!("{}", rules_line(l));
        }
    }
    let code = finish(
        a.summary_json.as_deref(),
        || CaptureJson::new(&summary),
        err,
    )?;
    match summary.flows.as_ref().and_then(flow_loss) {
        Some(lost) => Err(lost),
        None => Ok(code),
    }
}

fn config(a: &CaptureArgs) -> Result<CaptureConfig, Failure> {
    let bad = |m: String| Failure::Usage(m);
    in_range("snaplen", a.snaplen, 1, MAXIMUM_SNAPLEN)?;
    in_range("--threads", a.threads, 1, plan::MAX_THREADS)?;
    in_range("--retire-ms", a.retire_ms, 1, 1000)?;
    if a.count == Some(0) {
        return Err(bad(
            "-c 0 would record nothing: give a count of at least 1".into()
        ));
    }
    let secs = |v: Option<f64>, name: &str| -> Result<Option<Duration>, Failure> {
        match v {
            None => Ok(None),
            Some(s) if s.is_finite() && s > 0.0 && s < 1e9 => Ok(Some(Duration::from_secs_f64(s))),
            Some(s) => Err(bad(format!(
                "{name} {s} is not a positive number of seconds"
            ))),
        }
    };
    let duration = secs(a.duration, "--duration")?;
    let rotate_every = secs(a.rotate_seconds, "--rotate-seconds")?;
    if a.rotate_size.is_some_and(|n| n < 4096) {
        return Err(bad("--rotate-size must be at least 4K".into()));
    }
    let input = match (&a.interface, &a.read) {
        (Some(ifname), None) => {
            let speed = tapflow_sys::iface::speed_mbps(ifname).unwrap_or(10_000);
            let mut ring = RingGeometry::for_line_rate(speed, a.snaplen, HOLD, a.retire_ms);
            if let Some(bs) = a.block_size {
                // The ring keeps its total size unless the block count is given too.
                ring = ring.with_block_size(size::block_size(bs).map_err(bad)?);
            }
            if let Some(n) = a.block_count {
                in_range("--block-count", n, 1, plan::MAX_BLOCK_COUNT)?;
                ring.block_count = n;
            }
            let fanout_group = a
                .fanout_group
                .unwrap_or((std::process::id() & 0xffff) as u16);
            Input::Live(RingInput {
                ifname: ifname.clone(),
                threads: a.threads,
                ring,
                fanout_group,
                promiscuous: !a.no_promiscuous,
            })
        }
        (None, Some(path)) => {
            if a.threads != 1 {
                return Err(bad("--threads applies to live capture only".into()));
            }
            Input::File(path.clone())
        }
        _ => return Err(bad("give exactly one of -i IFACE or -r FILE".into())),
    };
    Ok(CaptureConfig {
        input,
        snaplen: a.snaplen,
        filter: a.filter.clone(),
        file: a.write.clone().map(|path| WriterConfig {
            path,
            format: match a.format {
                FormatArg::Pcapng => Format::Pcapng,
                FormatArg::Pcap => Format::Pcap,
            },
            worker: None,
            rotate_bytes: a.rotate_size,
            rotate_every,
            isb_every: Duration::from_secs(1),
        }),
        count: a.count,
        duration,
        forward: forward_config(a)?,
        flows: None,
        rules: match &a.rules {
            Some(path) => Some(read_rules(path)?),
            None => None,
        },
        control: match (a.control.as_deref(), &a.interface) {
            (Some("none"), _) => None,
            (Some(p), _) => Some(PathBuf::from(p)),
            (None, Some(ifname)) => Some(control::default_path(ifname)),
            (None, None) => None,
        },
        metrics: match &a.metrics {
            Some(m) => Some(metrics_addr(m)?),
            None => None,
        },
        drop_privileges: None,
    })
}

/// Reads a rule file; errors name the file and line.
pub(crate) fn read_rules(path: &std::path::Path) -> Result<Vec<Rule>, Failure> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| Failure::Usage(format!("cannot read {}: {e}", path.display())))?;
    parse_rules(&text).map_err(|e| Failure::Usage(format!("{}: {e}", path.display())))
}

/// `--metrics PORT` listens on loopback; `ADDR:PORT` where told.
pub fn metrics_addr(s: &str) -> Result<SocketAddr, Failure> {
    if let Ok(port) = s.parse::<u16>() {
        return Ok(SocketAddr::from(([127, 0, 0, 1], port)));
    }
    s.parse().map_err(|_| {
        Failure::Usage(format!(
            "--metrics '{s}' is not PORT or ADDR:PORT (e.g. 9100 or [::1]:9100)"
        ))
    })
}

/// The flow meter's settings and outputs, if metering is on.
pub(crate) fn flow_config(a: &FlowArgs, flows_cmd: bool) -> Result<Option<FlowConfig>, Failure> {
    if !flows_cmd && !a.any_output() {
        return Ok(None);
    }
    let bad = |m: String| Failure::Usage(m);
    const SECS_MAX: u64 = 30 * 86_400;
    if a.active_timeout == 0 || a.active_timeout > SECS_MAX {
        return Err(bad(format!(
            "--active-timeout {} is out of range: 1 to {SECS_MAX} seconds",
            a.active_timeout
        )));
    }
    let mut idle = DEFAULT_IDLE_SECS;
    for spec in &a.idle_timeout {
        let (classes, secs) = match spec.split_once('=') {
            None => (&Class::ALL[..], spec.as_str()),
            Some((name, secs)) => match Class::ALL.iter().position(|c| c.name() == name) {
                Some(i) => (&Class::ALL[i..=i], secs),
                None => {
                    return Err(bad(format!(
                        "--idle-timeout {spec}: unknown class '{name}' (tcp, udp, icmp, other, closed)"
                    )));
                }
            },
        };
        let secs: u64 = secs
            .parse()
            .ok()
            .filter(|&n| n > 0 && n <= SECS_MAX)
            .ok_or_else(|| {
                bad(format!(
                    "--idle-timeout {spec}: not a number of seconds from 1 to {SECS_MAX}"
                ))
            })?;
        for c in classes {
            idle[*c as usize] = secs;
        }
    }
    in_range("--max-flows", a.max_flows, 1, u32::MAX as usize - 2)?;
    if let Some(mtu) = a.export_mtu {
        in_range("--export-mtu", mtu, forward::MIN_MTU, 65_535)?;
    }
    let mut targets = Vec::new();
    for url in &a.export {
        targets.push(ExportTarget::parse_url(url).map_err(|m| bad(format!("--export {m}")))?);
    }
    let text = |scheme, p: &Path| ExportTarget::file(scheme, p).map_err(|e| bad(e.to_string()));
    if let Some(p) = &a.json {
        targets.push(text("json", p)?);
    }
    if let Some(p) = &a.csv {
        targets.push(text("csv", p)?);
    }
    if !a.any_output() {
        targets.push(text("table", Path::new("-"))?);
    }
    let stdout = targets.iter().filter(|t| *t.dest() == Dest::Stdout).count();
    if stdout > 1 {
        return Err(bad(
            "only one of --json and --csv can write to stdout".into()
        ));
    }
    Ok(Some(FlowConfig {
        table: TableConfig {
            max_flows: a.max_flows,
            active_ns: a.active_timeout * NS,
            idle_ns: idle.map(|s| s * NS),
            seed: 0,
        },
        export: ExportConfig {
            targets,
            mtu: a.export_mtu,
            observation_domain: a.observation_domain,
            rate: a.export_rate,
            store: a.store.clone(),
        },
    }))
}

/// For an offline run, one line per UDP collector saying that its export is paced, so a big
/// trace takes time (seconds after its packets are read).
fn paced_export_lines(e: &ExportConfig) -> Vec<String> {
    let pace = match e.rate {
        ExportRate::Unpaced => return Vec::new(),
        ExportRate::PerSecond(n) => format!("{n} messages/s"),
        ExportRate::Auto => format!(
            "{:.2} MB/s ({} messages of 9000 bytes a second)",
            f64::from(DEFAULT_BYTES_PER_SECOND) / 1e6,
            DEFAULT_BYTES_PER_SECOND / 9000
        ),
    };
    e.targets
        .iter()
        .filter(|t| t.format().transport == Transport::Udp)
        .map(|t| {
            format!(
                "tapflow: {}: export paced at {pace} so that the collector loses nothing; a big \
                 trace takes a while (--export-rate max: unpaced)",
                t.name()
            )
        })
        .collect()
}

/// The forwarding settings: collectors resolved, datagram size from `--mtu` or the route.
fn forward_config(a: &CaptureArgs) -> Result<Option<ForwardConfig>, Failure> {
    if a.forward.is_empty() {
        return Ok(None);
    }
    let bad = |m: String| Failure::Usage(m);
    let mut destinations = Vec::new();
    for d in &a.forward {
        let addr = d
            .to_socket_addrs()
            .ok()
            .and_then(|mut it| it.next())
            .ok_or_else(|| bad(format!("--forward {d}: not a HOST:PORT that resolves")))?;
        if addr.port() == 0 {
            return Err(bad(format!("--forward {d}: port 0")));
        }
        destinations.push(addr);
    }
    let first = destinations[0];
    let mtu = match a.mtu {
        Some(m) => {
            in_range("--mtu", m, forward::MIN_MTU, 65_535)?;
            m
        }
        None => forward::route_mtu(first).map_err(Failure::from_engine)?,
    };
    let payload_max = forward::payload_for_mtu(mtu, &first);
    if !forward::snaplen_fits(a.snaplen, payload_max) {
        return Err(bad(format!(
            "a datagram of {payload_max} bytes (MTU {mtu}) cannot carry a record of snaplen {}: \
             lower -s or raise --mtu",
            a.snaplen
        )));
    }
    in_range("--flush-ms", a.flush_ms, 1, 60_000)?;
    Ok(Some(ForwardConfig {
        destinations,
        balance: match a.balance {
            BalanceArg::Flow => Balance::Flow,
            BalanceArg::Rr => Balance::RoundRobin,
        },
        payload_max,
        flush_after: Duration::from_millis(a.flush_ms),
        probe: a.probe_id,
        session: forward::session_id(),
        stream: 0,
    }))
}

/// Fails early, before any packet is taken, if the output cannot be created.
fn check_writable(base: &std::path::Path, cfg: &CaptureConfig) -> Result<(), Failure> {
    match creatable(&first_part(base, cfg)) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => Ok(()),
        Err(e) => Err(Failure::Usage(format!(
            "cannot write {}: {e}",
            base.display()
        ))),
    }
}

/// The `.part` file a run with output `base` creates first.
pub(crate) fn first_part(base: &std::path::Path, cfg: &CaptureConfig) -> PathBuf {
    let rotating = cfg
        .file
        .as_ref()
        .is_some_and(|f| f.rotate_bytes.is_some() || f.rotate_every.is_some());
    let multi = matches!(&cfg.input, Input::Live(r) if r.threads > 1);
    part_path(&output_path(
        base,
        multi.then_some(0),
        rotating.then_some(0),
    ))
}
