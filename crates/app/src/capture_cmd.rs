//! `tapflow capture`: checks the request, runs the engine, prints the accounting.

use std::io::IsTerminal;
use std::net::ToSocketAddrs;
use std::os::fd::AsFd;
use std::os::unix::fs::{FileTypeExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use tapflow_engine::control;
use tapflow_engine::naming::{is_stdout, is_timed, output_path, part_path, timed_path};
use tapflow_engine::pipeline::{self, CaptureConfig, Input, RingGeometry};
use tapflow_engine::sink::file::{Format, WriterConfig};
use tapflow_engine::sink::flow::encoder::Transport;
use tapflow_engine::sink::flow::export::{
    DEFAULT_BYTES_PER_SECOND, Dest, ExportConfig, ExportRate, ExportTarget,
};
use tapflow_engine::sink::flow::meter::FlowConfig;
use tapflow_engine::sink::flow::table::{Class, DEFAULT_IDLE_SECS, TableConfig};
use tapflow_engine::sink::forward::{self, Balance, ForwardConfig};
use tapflow_engine::source::SourceCounter;
use tapflow_engine::source::ring::RingInput;
use tapflow_engine::source::xdp::{self, XdpInput};
use tapflow_engine::stop::Stop;
use tapflow_engine::tools::plan;
use tapflow_wire::capfile::MAXIMUM_SNAPLEN;
use tapflow_wire::rules::{Rule, parse_rules};

use crate::cli::{BalanceArg, CaptureArgs, FlowArgs, FormatArg, SourceArg};
use crate::privileges::{Outputs, RunAs, creatable};
use crate::report::{
    CaptureJson, StatusLine, finish, flow_lines, flow_loss, forward_line, rules_line, summary_line,
};
use crate::{Failure, in_range};

/// Ring memory the defaults aim to hold, per worker.
const HOLD: Duration = Duration::from_millis(50);
const NS: u64 = 1_000_000_000;

/// Runs `tapflow capture`, or `tapflow flows` when `flows` is set (metering always on, a
/// table on stdout unless another flow output is given).
pub fn run(a: CaptureArgs, stop: &Arc<Stop>, flows: bool) -> Result<ExitCode, Failure> {
    run_input(a, stop, flows, None)
}

/// Runs `capture` (or `flows`) on `input` instead of the one the arguments name, if given.
pub(crate) fn run_input(
    mut a: CaptureArgs,
    stop: &Arc<Stop>,
    flows: bool,
    input: Option<Input>,
) -> Result<ExitCode, Failure> {
    if a.list_interfaces {
        return list_interfaces();
    }
    let run_as = RunAs::choose(a.user.as_deref())?;
    let dash = |p: &Option<PathBuf>| p.as_deref().is_some_and(is_stdout);
    crate::detect_cmd::check_bgp_stdio(
        &a.detect.alerts,
        dash(&a.write)
            || dash(&a.flows.json)
            || dash(&a.flows.csv)
            || (flows && !a.flows.any_output()),
        dash(&a.read),
    )?;
    let _stdin = stdin_input(&mut a)?;
    let mut cfg = config(&a)?;
    if let Some(input) = input {
        cfg.input = input;
    }
    cfg.flows = flow_config(&a.flows, flows)?;
    let stores = match &a.flows.store {
        Some(d) => vec![
            tapflow_store::open::Location::parse(d)
                .map_err(|e| Failure::Usage(format!("--store {e}")))?,
        ],
        None => Vec::new(),
    };
    cfg.detect = crate::detect_cmd::hub(&a.detect, stop, stores)?;
    if let Some(key) = &a.anonymize {
        anonymize(&mut cfg, crate::anonymize_cmd::read_key(key)?);
    }
    // Without any output, a capture shows its packets, as tcpdump does (unless they would go
    // to /dev/null: a probe run only for its statistics spends nothing on them).
    cfg.print = !flows
        && cfg.file.is_none()
        && cfg.forward.is_none()
        && cfg.flows.is_none()
        && cfg.detect.is_none()
        && !stdout_is_null();
    let file = a.write.as_ref().filter(|b| !is_stdout(b));
    if a.write.as_deref().is_some_and(is_stdout) {
        check_stdout_free(&a.flows, flows, a.threads)?;
    }
    if let Some(base) = file {
        check_writable(base, &cfg)?;
    }
    run_as.prepare_control(cfg.control.as_deref())?;
    cfg.drop_privileges = run_as.hook(Outputs {
        first_file: file.map(|b| (first_part(b, &cfg), b.clone())),
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
        Input::Xdp(x) => (format!("capturing on {}", x.ifname), None),
        Input::Bridge(b) => (
            format!("bridging {} <-> {}", b.ifnames[0], b.ifnames[1]),
            None,
        ),
    };
    let ring = match &cfg.input {
        Input::Live(r) => Some((r.ifname.clone(), r.threads, r.ring)),
        _ => None,
    };
    let paced = match &cfg.flows {
        Some(f) if matches!(cfg.input, Input::File(_)) => paced_export_lines(&f.export),
        _ => Vec::new(),
    };
    // Packet lines, a flow table or records on a terminal would tangle with a status line.
    let dash = |p: &Option<PathBuf>| p.as_deref().is_some_and(is_stdout);
    let to_stdout = (flows && !a.flows.any_output())
        || dash(&a.flows.json)
        || dash(&a.flows.csv)
        || dash(&a.write);
    let tangled = cfg.print || (to_stdout && std::io::stdout().is_terminal());
    let mut status = StatusLine::new(&label, a.quiet || tangled, file_len);
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
        } else if let Some(mode) = &r.mode {
            eprintln!(
                "tapflow: listening on {}, link-type {}, snaplen {}, {} worker{}, {mode}",
                r.input,
                r.linktype,
                r.snaplen,
                r.workers,
                if r.workers == 1 { "" } else { "s" },
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
    crate::detect_cmd::close(cfg.detect.as_ref(), quiet);
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
        crate::anonymize_cmd::say_unread(cfg.anonymize.as_ref());
        for line in source_lines(&summary.source) {
            eprintln!("{line}");
        }
        if let Some(line) = summary
            .sinks
            .file
            .as_ref()
            .and_then(|f| files_line(&f.files, &a))
        {
            eprintln!("{line}");
        }
        for line in loss_advice(&summary.totals, summary.seconds, ring.as_ref()) {
            eprintln!("{line}");
        }
    }
    let lost = summary.totals.dropped_kernel + summary.totals.dropped_ours;
    if a.strict && lost > 0 && err.is_none() {
        return Err(Failure::Runtime(format!(
            "--strict: {lost} packets lost ({:.2}% collected)",
            summary.totals.collected_percent()
        )));
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
    // -s 0: the whole packet, as tcpdump.
    let snaplen = if a.snaplen == 0 {
        MAXIMUM_SNAPLEN
    } else {
        a.snaplen
    };
    in_range("snaplen", snaplen, 1, MAXIMUM_SNAPLEN)?;
    in_range("--threads", a.threads, 1, plan::MAX_THREADS)?;
    in_range("--retire-ms", a.retire_ms, 1, 1000)?;
    if a.count == Some(0) {
        return Err(bad(
            "-c 0 would record nothing: give a count of at least 1".into()
        ));
    }
    let (duration, rotate_every) = (a.duration, a.rotate_seconds);
    if a.rotate_size.or(a.file_size).is_some_and(|n| n < 4096) {
        return Err(bad("--rotate-size (-C) must be at least 4K".into()));
    }
    if a.pass && a.source != SourceArg::Xdp {
        return Err(bad("--pass applies to --source xdp".into()));
    }
    let input = match (&a.interface, &a.read) {
        (Some(ifname), None) if ifname == tapflow_sys::ring::ANY && a.source == SourceArg::Xdp => {
            return Err(bad(
                "--source xdp attaches to one interface: -i any needs --source packet".into(),
            ));
        }
        (Some(ifname), None) if ifname == tapflow_sys::ring::ANY && snaplen <= SLL2_LEN => {
            return Err(bad(format!(
                "snaplen {snaplen} leaves nothing after the {SLL2_LEN}-byte cooked header of \
                 -i any: give at least {}",
                SLL2_LEN + 1
            )));
        }
        (Some(ifname), None) => {
            let speed = tapflow_sys::iface::speed_mbps(ifname).unwrap_or(10_000);
            let mut ring = RingGeometry::for_line_rate(speed, snaplen, HOLD, a.retire_ms);
            if let Some(bs) = a.block_size {
                // The ring keeps its total size unless the block count is given too.
                ring = ring.with_block_size(crate::plan_cmd::block_size(bs).map_err(bad)?);
            }
            if let Some(n) = a.block_count {
                in_range("--block-count", n, 1, plan::MAX_BLOCK_COUNT)?;
                ring.block_count = n;
            }
            let fanout_group = a
                .fanout_group
                .unwrap_or((std::process::id() & 0xffff) as u16);
            match a.source {
                SourceArg::Packet => Input::Live(RingInput {
                    ifname: ifname.clone(),
                    threads: a.threads,
                    ring,
                    fanout_group,
                    promiscuous: !a.no_promiscuous,
                }),
                SourceArg::Xdp => xdp_input(a, ifname)?,
            }
        }
        (None, Some(_)) if a.source == SourceArg::Xdp => {
            return Err(bad(
                "--source xdp captures on an interface (-i), not a file".into(),
            ));
        }
        (None, Some(path)) => {
            if a.threads != 1 {
                return Err(bad("--threads applies to live capture only".into()));
            }
            Input::File(path.clone())
        }
        _ => return Err(bad("give exactly one of -i IFACE or -r FILE".into())),
    };
    let rotate_bytes = a.rotate_size.or(a.file_size);
    if a.file_count.is_some() && rotate_bytes.is_none() && rotate_every.is_none() {
        return Err(bad(
            "-W keeps a number of rotated files: give -C, -G, --rotate-size or --rotate-seconds too"
                .into(),
        ));
    }
    if a.file_count == Some(0) {
        return Err(bad("-W 0 would keep no file: give at least 1".into()));
    }
    if let Some(w) = a.write.as_deref().filter(|w| is_timed(w)) {
        timed_path(w, std::time::SystemTime::now()).map_err(|e| bad(format!("-w {e}")))?;
    }
    let filter = match (&a.filter, a.expression.is_empty()) {
        (Some(f), _) => Some(f.clone()),
        (None, false) => Some(a.expression.join(" ")),
        (None, true) => None,
    };
    Ok(CaptureConfig {
        input,
        snaplen,
        filter,
        file: a.write.clone().map(|path| WriterConfig {
            format: match a.format {
                Some(FormatArg::Pcapng) => Format::Pcapng,
                Some(FormatArg::Pcap) => Format::Pcap,
                None => format_of(&path),
            },
            path,
            worker: None,
            rotate_bytes,
            rotate_every,
            isb_every: Duration::from_secs(1),
            keep: a.file_count,
        }),
        count: a.count,
        duration,
        print: false,
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
        metrics: a.metrics,
        drop_privileges: None,
        anonymize: None,
        detect: None,
    })
}

/// The AF_XDP input: one worker per receive queue, so no `--threads`.
fn xdp_input(a: &CaptureArgs, ifname: &str) -> Result<Input, Failure> {
    if a.threads != 1 {
        return Err(Failure::Usage(
            "--source xdp runs one worker per receive queue: drop --threads".into(),
        ));
    }
    if !a.xdp_frames.is_power_of_two() || !(64..=1 << 20).contains(&a.xdp_frames) {
        return Err(Failure::Usage(format!(
            "--xdp-frames {} is not a power of two from 64 to 1048576",
            a.xdp_frames
        )));
    }
    Ok(Input::Xdp(XdpInput {
        ifname: ifname.to_string(),
        frames: a.xdp_frames,
        promiscuous: !a.no_promiscuous,
        pass: a.pass,
    }))
}

/// The source's own counters at the end, summed over their labels, on one line.
/// The source's own counters: one line, or one per direction for counters labelled
/// `direction="..."` (a bridge's), each as `received N, forwarded N, ...`.
fn source_lines(counters: &[SourceCounter]) -> Vec<String> {
    let mut directions: Vec<&str> = Vec::new();
    for (label, _) in counters.iter().flat_map(|c| &c.samples) {
        if let Some(d) = label.strip_prefix("direction=")
            && !directions.contains(&d)
        {
            directions.push(d);
        }
    }
    if directions.is_empty() {
        return source_line(counters).into_iter().collect();
    }
    directions
        .iter()
        .map(|d| {
            let parts: Vec<String> = counters
                .iter()
                .filter_map(|c| {
                    let (_, v) = c.samples.iter().find(|(l, _)| l.ends_with(d))?;
                    let name = c
                        .name
                        .trim_start_matches("tapflow_")
                        .trim_end_matches("_total");
                    let name = name.split_once('_').map_or(name, |(_, n)| n);
                    Some(format!("{name} {v}"))
                })
                .collect();
            format!("tapflow: {}: {}", d.trim_matches('"'), parts.join(", "))
        })
        .collect()
}

fn source_line(counters: &[SourceCounter]) -> Option<String> {
    if counters.is_empty() {
        return None;
    }
    let parts: Vec<String> = counters
        .iter()
        .map(|c| {
            let name = c
                .name
                .trim_start_matches("tapflow_")
                .trim_end_matches("_total");
            let v: f64 = c.samples.iter().map(|(_, v)| v).sum();
            format!("{name} {v}")
        })
        .collect();
    Some(format!("tapflow: source: {}", parts.join(", ")))
}

/// Anonymises the records of every sink of `cfg`: the packets', and the flow meter's.
pub(crate) fn anonymize(cfg: &mut CaptureConfig, pan: tapflow_wire::cryptopan::CryptoPan) {
    if let Some(f) = &mut cfg.flows {
        f.export.anonymize = Some(pan.clone());
    }
    cfg.anonymize = Some(pan);
}

/// Reads a rule file; errors name the file and line.
pub(crate) fn read_rules(path: &std::path::Path) -> Result<Vec<Rule>, Failure> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| Failure::Usage(format!("cannot read {}: {e}", path.display())))?;
    parse_rules(&text).map_err(|e| Failure::Usage(format!("{}: {e}", path.display())))
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
        let secs: u64 = crate::units::secs_u64(secs)
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
            anonymize: None,
            store: a.store.clone(),
            enrich: if a.store.is_some() {
                crate::enrich_source(&a.enrich)?
            } else {
                None
            },
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
    let snaplen = if a.snaplen == 0 {
        MAXIMUM_SNAPLEN
    } else {
        a.snaplen
    };
    if !forward::snaplen_fits(snaplen, payload_max) {
        return Err(bad(format!(
            "a datagram of {payload_max} bytes (MTU {mtu}) cannot carry a record of snaplen \
             {snaplen}: lower -s or raise --mtu"
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
        flush_after: Duration::from_millis(a.flush_ms.into()),
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

/// The format `-w NAME` writes without `--format`: classic pcap for `.pcap` (and `.cap`,
/// `.dmp`), pcapng otherwise.
fn format_of(path: &Path) -> Format {
    let ext = path
        .extension()
        .map(|e| e.to_string_lossy().to_ascii_lowercase());
    match ext.as_deref() {
        Some("pcap" | "cap" | "dmp") => Format::Pcap,
        _ => Format::Pcapng,
    }
}

/// `-w -` writes standard output: no other output may, and one worker writes it.
fn check_stdout_free(f: &FlowArgs, flows_cmd: bool, threads: usize) -> Result<(), Failure> {
    let dash = |p: &Option<PathBuf>| p.as_deref().is_some_and(is_stdout);
    if dash(&f.json) || dash(&f.csv) || (flows_cmd && !f.any_output()) {
        return Err(Failure::Usage(
            "-w - writes packets to standard output, where a flow table, --json - or --csv - \
             would go too: write one of them to a file"
                .into(),
        ));
    }
    if threads > 1 {
        return Err(Failure::Usage(
            "-w - is one stream: it takes one worker (--threads 1)".into(),
        ));
    }
    Ok(())
}

/// `-r -`: standard input, as a file the source can map. A regular file (`< trace.pcap`) is
/// mapped where it is; a pipe is read to its end into an unnamed temporary file first. The
/// returned file keeps that open for the run.
fn stdin_input(a: &mut CaptureArgs) -> Result<Option<std::fs::File>, Failure> {
    use std::os::fd::AsRawFd;
    if !a.read.as_deref().is_some_and(is_stdout) {
        return Ok(None);
    }
    let fail = |e: std::io::Error| Failure::Runtime(format!("cannot read standard input: {e}"));
    let stdin = std::io::stdin();
    let meta = std::fs::File::from(stdin.as_fd().try_clone_to_owned().map_err(fail)?)
        .metadata()
        .map_err(fail)?;
    if meta.is_file() {
        a.read = Some(PathBuf::from("/proc/self/fd/0"));
        return Ok(None);
    }
    let dir = std::env::temp_dir();
    let mut spool = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .custom_flags(O_TMPFILE)
        .open(&dir)
        .map_err(|e| {
            Failure::Runtime(format!(
                "cannot hold standard input in {}: {e}",
                dir.display()
            ))
        })?;
    std::io::copy(&mut stdin.lock(), &mut spool).map_err(fail)?;
    a.read = Some(PathBuf::from(format!(
        "/proc/self/fd/{}",
        spool.as_raw_fd()
    )));
    Ok(Some(spool))
}

/// `O_TMPFILE` (`__O_TMPFILE | O_DIRECTORY`, include/uapi/asm-generic/fcntl.h): an unnamed
/// file in a directory, gone when closed.
const O_TMPFILE: i32 = 0o20_000_000 | 0o200_000;

/// What to change after a run that lost packets: the ring (`tapflow plan` sizes one for the
/// rate seen) where the kernel dropped, the output where tapflow did.
fn loss_advice(
    t: &tapflow_engine::counters::Totals,
    seconds: f64,
    ring: Option<&(String, usize, RingGeometry)>,
) -> Vec<String> {
    let mut lines = Vec::new();
    if t.dropped_kernel > 0 {
        let rate = crate::units::format_count(t.received as f64 / seconds.max(1e-3));
        lines.push(match ring {
            Some((ifname, threads, g)) => format!(
                "tapflow: advice: the ring ({} blocks of {} per worker) overflowed: `tapflow plan \
                 --rate {rate} --threads {threads}` sizes one for {ifname} that holds (then \
                 --block-size/--block-count), or add workers (--threads) or keep fewer bytes (-s)",
                g.block_count,
                crate::units::format_size(g.block_size.into()),
            ),
            None => "tapflow: advice: the kernel dropped packets: a bigger ring \
                     (--block-count) or more workers (--threads)"
                .to_string(),
        });
    }
    if t.dropped_ours > 0 {
        lines.push(
            "tapflow: advice: the outputs did not keep up with the capture: a faster disk, \
             fewer bytes a packet (-s), more workers (--threads) or fewer outputs"
                .to_string(),
        );
    }
    lines
}

/// The exit line naming the files written when they are not just the one `-w` named
/// (workers, rotation, time patterns): the first and last few and how many.
fn files_line(files: &[PathBuf], a: &CaptureArgs) -> Option<String> {
    const SHOWN: usize = 6;
    if files.is_empty() || (files.len() == 1 && a.write.as_deref() == Some(files[0].as_path())) {
        return None;
    }
    let names: Vec<String> = files.iter().map(|f| f.display().to_string()).collect();
    let list = if names.len() <= SHOWN {
        names.join(", ")
    } else {
        format!(
            "{}, ... {}",
            names[..SHOWN / 2].join(", "),
            names[names.len() - SHOWN / 2..].join(", ")
        )
    };
    Some(format!(
        "tapflow: wrote {} file{}: {list}",
        files.len(),
        if files.len() == 1 { "" } else { "s" }
    ))
}

/// Whether standard output is `/dev/null`.
fn stdout_is_null() -> bool {
    use std::os::unix::fs::MetadataExt;
    let out = std::io::stdout()
        .as_fd()
        .try_clone_to_owned()
        .and_then(|fd| std::fs::File::from(fd).metadata());
    match (out, std::fs::metadata("/dev/null")) {
        (Ok(o), Ok(n)) => o.file_type().is_char_device() && o.rdev() == n.rdev(),
        _ => false,
    }
}

/// The Linux cooked v2 header of `-i any`, which the snaplen counts.
const SLL2_LEN: u32 = tapflow_wire::sll::HEADER_LEN as u32;

/// `-D`: every interface of this network namespace with its index and state, then `any`
/// (index 0, which a socket binds to for all of them).
fn list_interfaces() -> Result<ExitCode, Failure> {
    use tapflow_sys::iface;
    let names = iface::names().map_err(|e| Failure::Runtime(e.to_string()))?;
    let mut rows: Vec<(u32, String)> = names
        .into_iter()
        .filter_map(|n| iface::index(&n).ok().map(|i| (i, n)))
        .collect();
    rows.sort();
    let mut out = String::new();
    for (i, name) in &rows {
        let mut state = Vec::new();
        if let Ok(f) = iface::flags(name) {
            state.push(if f.up { "Up" } else { "Down" });
            if f.running {
                state.push("Running");
            }
            if f.promisc {
                state.push("Promiscuous");
            }
        }
        if name == "lo" {
            state.push("Loopback");
        }
        let speed = iface::speed_mbps(name).map_or(String::new(), |s| format!(" {s} Mbit/s"));
        out.push_str(&format!("{i}.{name} [{}]{speed}\n", state.join(", ")));
    }
    out.push_str("0.any (every interface, Linux cooked v2 headers) [Up, Running]\n");
    print!("{out}");
    Ok(ExitCode::SUCCESS)
}

/// The `.part` file a run with output `base` creates first.
pub(crate) fn first_part(base: &std::path::Path, cfg: &CaptureConfig) -> PathBuf {
    if is_timed(base) {
        let named = timed_path(base, std::time::SystemTime::now()).unwrap_or(base.to_path_buf());
        let multi = matches!(&cfg.input, Input::Live(r) if r.threads > 1);
        return part_path(&output_path(&named, multi.then_some(0), None));
    }
    let rotating = cfg
        .file
        .as_ref()
        .is_some_and(|f| f.rotate_bytes.is_some() || f.rotate_every.is_some());
    let multi = match &cfg.input {
        Input::Live(r) => r.threads > 1,
        Input::Xdp(x) => !x.pass && xdp::rx_queues(&x.ifname) > 1,
        Input::Bridge(_) => true,
        _ => false,
    };
    part_path(&output_path(
        base,
        multi.then_some(0),
        rotating.then_some(0),
    ))
}
