//! The run every input shares: one worker per source (a fanout member, a file, a datagram
//! socket), each feeding its own sinks; the exporter, the control socket and `/metrics`; and a
//! monitor on the caller's thread for the status line and the stop conditions.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, mpsc};
use std::thread;
use std::time::{Duration, Instant};

use tapflow_wire::LinkType;
use tapflow_wire::cryptopan::{Anonymizer, CryptoPan};
use tapflow_wire::rules::Rule;

use crate::EngineError;
use crate::control::ControlServer;
use crate::counters::{SharedTotals, Totals};
use crate::metrics::MetricsServer;
use crate::probe::ProbeState;
use crate::rules::RuleListing;
use crate::sink::file::{FileSink, WriterConfig};
use crate::sink::flow::export::{Exporter, MeterClock};
use crate::sink::flow::meter::{FlowConfig, FlowSummary};
use crate::sink::forward::{ForwardConfig, ForwardSink};
use crate::sink::registry::{Sink, SinkReports};
use crate::sink::text::TextSink;
use crate::source::bridge::BridgeInput;
use crate::source::datagrams::DatagramInput;
use crate::source::ring::RingInput;
use crate::source::xdp::XdpInput;
use crate::source::{self, Opened, PacketSource, SourceCounter};
use crate::stop::Stop;
use crate::traffic::SharedStats;
use crate::worker::{Worker, WorkerConfig, WorkerReport};

pub use crate::tools::plan::RingGeometry;

/// Where packets come from.
#[derive(Debug, Clone)]
pub enum Input {
    /// A live interface.
    Live(RingInput),
    /// A pcap, pcapng or ERF file.
    File(PathBuf),
    /// Batch datagrams from probes (`tapflow recv`).
    Datagrams(DatagramInput),
    /// A live interface through AF_XDP.
    Xdp(XdpInput),
    /// Two interfaces bridged through AF_XDP, each direction recorded.
    Bridge(BridgeInput),
}

/// Everything a capture needs.
#[derive(Debug, Clone)]
pub struct CaptureConfig {
    /// The input.
    pub input: Input,
    /// Bytes of each packet to keep.
    pub snaplen: u32,
    /// A tcpdump filter expression, compiled by libpcap: in the kernel for a live capture, run
    /// on each packet (by `cbpf::run`) for a file.
    pub filter: Option<String>,
    /// File output (`-w`), if any; the worker index is filled in per worker.
    pub file: Option<WriterConfig>,
    /// Stop after this many records (`-c`).
    pub count: Option<u64>,
    /// Stop after this long.
    pub duration: Option<Duration>,
    /// Print a line per packet on standard output (`capture` without any output).
    pub print: bool,
    /// Header forwarding (`--forward`), if any; the stream is filled in per worker.
    pub forward: Option<ForwardConfig>,
    /// Flow metering and export (`--export`, `tapflow flows`), if any.
    pub flows: Option<FlowConfig>,
    /// The rules a packet must match (`--rules`); a live capture without them can get them
    /// later through the control socket.
    pub rules: Option<Vec<Rule>>,
    /// Where to serve the control socket, if anywhere.
    pub control: Option<PathBuf>,
    /// Where to serve `/metrics`, if anywhere.
    pub metrics: Option<SocketAddr>,
    /// Called once the inputs are open, in the run's only thread, before any output is opened
    /// or any other thread started, so that every thread of the run inherits what it does: the
    /// privilege drop (`-Z`). An error ends the run before the first packet is taken.
    pub drop_privileges: Option<Hook>,
    /// Anonymise the addresses in the records the file and forwarding sinks get (the flow
    /// meter's records are anonymised by the exporter, [`ExportConfig::anonymize`]).
    ///
    /// [`ExportConfig::anonymize`]: crate::sink::flow::export::ExportConfig::anonymize
    pub anonymize: Option<CryptoPan>,
    /// Flood detection on the packets (`--detect`), if any: every worker counts into it.
    pub detect: Option<crate::detect::Hub>,
}

/// A call the caller makes the run do at a given moment (see
/// [`CaptureConfig::drop_privileges`]).
#[derive(Clone)]
pub struct Hook(pub Arc<dyn Fn() -> Result<(), EngineError> + Send + Sync>);

impl std::fmt::Debug for Hook {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Hook")
    }
}

/// A moment of a running capture, for status lines and progress bars.
#[derive(Debug, Clone, Copy)]
pub struct Tick {
    /// Sum over workers of their last published totals.
    pub totals: Totals,
    /// Bytes of input file done and total, for file input.
    pub progress: Option<(u64, u64)>,
    /// Time since the capture started.
    pub elapsed: Duration,
}

/// What a capture opened, reported once before the first packet is taken.
#[derive(Debug, Clone)]
pub struct Ready {
    /// Interface name, or the file path.
    pub input: String,
    /// Link type of the (first) interface.
    pub linktype: LinkType,
    /// Snap length applied.
    pub snaplen: u32,
    /// Workers (fanout members).
    pub workers: usize,
    /// Ring geometry of each worker, for live capture.
    pub ring: Option<RingGeometry>,
    /// How a live source other than a ring runs, in words.
    pub mode: Option<String>,
    /// Whether the NIC's clock stamps packets.
    pub hw_timestamps: bool,
    /// The rules and how the kernel filter follows them, if the capture has rules.
    pub rules: Option<RuleListing>,
    /// The control socket's path, if served.
    pub control: Option<PathBuf>,
    /// The metrics endpoint's address, if served.
    pub metrics: Option<SocketAddr>,
}

/// The outcome of a capture.
#[derive(Debug, Clone, Default)]
pub struct Summary {
    /// Final totals over all workers.
    pub totals: Totals,
    /// What the sinks reported, summed over workers per kind of sink.
    pub sinks: SinkReports,
    /// Wall-clock duration.
    pub seconds: f64,
    /// Whether the NIC's clock stamped the packets.
    pub hw_timestamps: bool,
    /// What flow metering counted (the meters' reports) and exported.
    pub flows: Option<FlowSummary>,
    /// The rules at the end, with their counters, if the capture had active rules.
    pub rules: Option<RuleListing>,
    /// What the source counted of itself at the end (its `/metrics` counters).
    pub source: Vec<SourceCounter>,
}

/// Runs a capture until its input ends, `count` or `duration` is reached, or `stop` is raised.
///
/// Returns the summary and, if the capture ended badly, the error; everything collected before
/// the error is written and counted in the summary.
///
/// `cfg.drop_privileges` is called first, once the inputs are open. `ready` is called once, when
/// every ring is open and in its fanout group (or the file header is read), before the first
/// packet is taken. `tick` is called at the start, then whenever the wait it returned has
/// passed, until it returns `None`.
pub fn run(
    cfg: &CaptureConfig,
    stop: &Arc<Stop>,
    ready: &mut dyn FnMut(&Ready),
    tick: &mut dyn FnMut(&Tick) -> Option<Duration>,
) -> (Summary, Option<EngineError>) {
    let started = Instant::now();
    // Each source opens itself; the rest of the run is the same for all of them.
    macro_rules! go {
        ($opened:expr) => {
            match $opened {
                Ok(o) => run_opened(cfg, o, stop, ready, tick, started),
                Err(e) => (Summary::default(), Some(e)),
            }
        };
    }
    match &cfg.input {
        Input::Live(ring) => {
            let filter = cfg.filter.as_deref();
            go!(source::ring::open(
                ring,
                cfg.snaplen,
                filter,
                cfg.rules.clone(),
                stop
            ))
        }
        Input::File(path) if writes_over(cfg, path) => (
            Summary::default(),
            Some(EngineError::Config(format!(
                "{}: the output would replace the input it is read from",
                path.display()
            ))),
        ),
        Input::File(path) => match source::file::map(path) {
            Ok(map) => go!(source::file::open(&map, cfg.snaplen, cfg.rules.clone())),
            Err(e) => (Summary::default(), Some(e)),
        },
        Input::Datagrams(d) => go!(source::datagrams::open(d)),
        Input::Xdp(x) => go!(source::xdp::open(
            x,
            cfg.snaplen,
            cfg.filter.as_deref(),
            cfg.rules.clone(),
            stop
        )),
        Input::Bridge(b) => go!(source::bridge::open(
            b,
            cfg.snaplen,
            cfg.filter.as_deref(),
            cfg.rules.clone(),
            stop
        )),
    }
}

/// Whether a file output of `cfg` is the input file itself (the same inode).
fn writes_over(cfg: &CaptureConfig, input: &std::path::Path) -> bool {
    use std::os::unix::fs::MetadataExt;
    let (Some(out), Ok(inp)) = (&cfg.file, std::fs::metadata(input)) else {
        return false;
    };
    std::fs::metadata(&out.path).is_ok_and(|o| (o.dev(), o.ino()) == (inp.dev(), inp.ino()))
}

/// The control socket and metrics endpoint a capture asked for.
type Servers = (Option<ControlServer>, Option<MetricsServer>);

fn start_servers(cfg: &CaptureConfig, probe: &Arc<ProbeState>) -> Result<Servers, EngineError> {
    let control = match &cfg.control {
        Some(path) => Some(ControlServer::start(path, Arc::clone(probe))?),
        None => None,
    };
    let metrics = match cfg.metrics {
        Some(addr) => Some(MetricsServer::start(addr, Arc::clone(probe))?),
        None => None,
    };
    Ok((control, metrics))
}

/// Runs an opened input: [`run`]'s work once the sources exist, for any kind of source.
pub fn run_opened<S: PacketSource + Send>(
    cfg: &CaptureConfig,
    opened: Opened<S>,
    stop: &Arc<Stop>,
    ready: &mut dyn FnMut(&Ready),
    tick: &mut dyn FnMut(&Tick) -> Option<Duration>,
    started: Instant,
) -> (Summary, Option<EngineError>) {
    let Opened {
        sources,
        input,
        linktype,
        ring,
        mode,
        hw_timestamps,
        rules,
        filter_in_user_space,
        realtime,
        drain_quiet,
        progress,
        metrics,
    } = opened;
    if let Some(Hook(drop_privileges)) = &cfg.drop_privileges
        && let Err(e) = drop_privileges()
    {
        return (Summary::default(), Some(e));
    }
    // A file's flows end by the file's own clock; a live input's also while it is quiet.
    let clock = if realtime {
        MeterClock::Wall
    } else {
        MeterClock::Packets
    };
    let exporter = match &cfg.flows {
        Some(f) => match Exporter::start(&f.export, clock) {
            Ok(x) => Some(x),
            Err(e) => return (Summary::default(), Some(e)),
        },
        None => None,
    };
    let workers = sources.len();
    let shared: Vec<(Arc<SharedTotals>, Arc<SharedStats>)> =
        (0..workers).map(|_| Default::default()).collect();
    let source_metrics = metrics.clone();
    let probe = Arc::new(
        ProbeState::new(shared.clone(), rules.clone())
            .with_source_metrics(metrics)
            .with_interface(&input)
            .with_alerts(
                cfg.detect
                    .as_ref()
                    .map(|h| h.lock().unwrap_or_else(|e| e.into_inner()).gauge()),
            ),
    );
    let servers = match start_servers(cfg, &probe) {
        Ok(s) => s,
        Err(e) => return finish(Summary::default(), Some(e), exporter, started),
    };
    ready(&Ready {
        input,
        linktype,
        snaplen: cfg.snaplen,
        workers,
        ring,
        mode,
        hw_timestamps,
        rules: rules
            .as_ref()
            .filter(|_| cfg.rules.is_some())
            .map(|r| r.list()),
        control: servers.0.as_ref().map(|c| c.path().to_path_buf()),
        metrics: servers.1.as_ref().map(MetricsServer::addr),
    });
    if let Some(hub) = &cfg.detect {
        hub.lock()
            .unwrap_or_else(|e| e.into_inner())
            .set_workers(workers);
    }
    let multi = workers > 1;
    let mut all_sinks = Vec::with_capacity(workers);
    for k in 0..workers {
        match sinks_for(
            cfg,
            multi.then_some(k),
            workers,
            exporter.as_ref(),
            clock,
            realtime,
        ) {
            Ok(s) => all_sinks.push(s),
            Err(e) => return finish(Summary::default(), Some(e), exporter, started),
        }
    }
    let limit = cfg.count.map(|n| Arc::new(AtomicU64::new(n)));
    let wcfg = WorkerConfig {
        snaplen: cfg.snaplen,
        drain_quiet,
    };
    // Traffic statistics cost a few ns per packet: paid only when they are served.
    let served = servers.0.is_some() || servers.1.is_some();
    let (done_tx, done_rx) = mpsc::channel();
    let (mut summary, err) = thread::scope(|s| {
        let mut handles = Vec::with_capacity(workers);
        for ((k, source), sinks) in sources.into_iter().enumerate().zip(all_sinks) {
            let mut worker = Worker::new(
                source,
                sinks,
                wcfg.clone(),
                Arc::clone(&shared[k].0),
                limit.clone(),
                Arc::clone(stop),
            );
            if served {
                worker = worker.with_stats(Arc::clone(&shared[k].1));
            }
            if let Some(r) = &rules {
                worker = worker.with_rules(r.reader(k));
            }
            if let (true, Some(expr)) = (filter_in_user_space, &cfg.filter) {
                worker = worker.with_filter(expr);
            }
            if let Some(pan) = &cfg.anonymize {
                worker = worker.with_anonymizer(Anonymizer::new(pan.clone()));
            }
            let w = thread::Builder::new()
                .name(format!("tapflow-w{k}"))
                .spawn_scoped(s, {
                    let done = done_tx.clone();
                    move || run_worker(worker, &done)
                })
                .expect("spawning a worker thread");
            handles.push(w);
        }
        let totals: Vec<_> = shared.iter().map(|(t, _)| Arc::clone(t)).collect();
        let progress = progress
            .as_ref()
            .map(|(done, total)| (Arc::clone(done), *total));
        monitor(cfg, stop, tick, started, &totals, progress, &done_rx);
        collect(handles)
    });
    drop(servers);
    summary.rules = rules.map(|r| r.list()).filter(|l| l.active);
    summary.source = source_metrics.map(|m| m.read()).unwrap_or_default();
    summary.hw_timestamps = hw_timestamps;
    finish(summary, err, exporter, started)
}

/// Waits for the exporter to send everything, and completes the summary.
fn finish(
    mut summary: Summary,
    err: Option<EngineError>,
    exporter: Option<Exporter>,
    started: Instant,
) -> (Summary, Option<EngineError>) {
    if let Some(x) = exporter {
        summary.flows = Some(FlowSummary {
            meter: summary.sinks.flows.unwrap_or_default(),
            export: x.finish(),
        });
    }
    summary.seconds = started.elapsed().as_secs_f64();
    (summary, err)
}

/// The sinks of one worker's output thread.
fn sinks_for(
    cfg: &CaptureConfig,
    worker: Option<usize>,
    workers: usize,
    exporter: Option<&Exporter>,
    clock: MeterClock,
    write_ahead: bool,
) -> Result<Vec<Sink>, EngineError> {
    let mut sinks = Vec::new();
    if let Some(file) = &cfg.file {
        let mut wc = file.clone();
        wc.worker = worker;
        let sink = FileSink::new(wc);
        sinks.push(Sink::File(if write_ahead {
            sink.with_write_ahead()
        } else {
            sink
        }));
    }
    if cfg.print {
        let text = TextSink::new();
        // Interface indexes name this namespace's interfaces only while capturing live.
        sinks.push(Sink::Text(if write_ahead {
            text.naming_interfaces()
        } else {
            text
        }));
    }
    if let Some(fwd) = &cfg.forward {
        let mut fc = fwd.clone();
        fc.stream = worker.unwrap_or(0) as u16;
        sinks.push(Sink::Forward(ForwardSink::new(fc)?));
    }
    if let (Some(flows), Some(x)) = (&cfg.flows, exporter) {
        sinks.push(Sink::Flows(flows.meter(workers, worker, clock, x)));
    }
    if let Some(hub) = &cfg.detect {
        let meter = crate::detect::meter::Meter::new(Arc::clone(hub), worker.unwrap_or(0));
        sinks.push(Sink::Detect(crate::detect::sink::DetectSink::new(
            meter,
            write_ahead,
        )));
    }
    Ok(sinks)
}

type Handles<'s> = Vec<thread::ScopedJoinHandle<'s, WorkerReport>>;

/// Runs a worker and says so on `done` when it has finished, even by a panic.
fn run_worker<S: PacketSource>(worker: Worker<S>, done: &mpsc::Sender<()>) -> WorkerReport {
    struct Done<'a>(&'a mpsc::Sender<()>);
    impl Drop for Done<'_> {
        fn drop(&mut self) {
            let _ = self.0.send(());
        }
    }
    let _done = Done(done);
    worker.run()
}

/// Calls `tick` when it last asked to be called again (it returns the wait, or `None` for no
/// more calls) until every worker has said it is done on `done`, raising `stop` at the
/// duration limit. Between those moments the thread sleeps: an idle capture costs nothing here.
fn monitor(
    cfg: &CaptureConfig,
    stop: &Stop,
    tick: &mut dyn FnMut(&Tick) -> Option<Duration>,
    started: Instant,
    shared: &[Arc<SharedTotals>],
    progress: Option<(Arc<AtomicU64>, u64)>,
    done: &mpsc::Receiver<()>,
) {
    let deadline = cfg.duration.map(|d| started + d);
    let mut next_tick = Some(started);
    let mut running = shared.len();
    while running > 0 {
        // The next tick or the duration's end, whichever comes first (the end only until it
        // has raised stop).
        let wake = [next_tick, deadline.filter(|_| !stop.is_raised())]
            .into_iter()
            .flatten()
            .min();
        let got = match wake {
            Some(at) => done.recv_timeout(at.saturating_duration_since(Instant::now())),
            None => done
                .recv()
                .map_err(|_| mpsc::RecvTimeoutError::Disconnected),
        };
        match got {
            Ok(()) => {
                running -= 1;
                continue;
            }
            Err(mpsc::RecvTimeoutError::Timeout) => {}
            Err(mpsc::RecvTimeoutError::Disconnected) => break,
        }
        let now = Instant::now();
        if deadline.is_some_and(|d| now >= d) {
            stop.raise();
        }
        if next_tick.is_none_or(|t| now < t) {
            continue;
        }
        let mut totals = Totals::default();
        for s in shared {
            totals.add(&s.load());
        }
        next_tick = tick(&Tick {
            totals,
            progress: progress
                .as_ref()
                .map(|(done, total)| (done.load(Ordering::Relaxed), *total)),
            elapsed: started.elapsed(),
        })
        .map(|wait| now + wait);
    }
}

fn collect(handles: Handles<'_>) -> (Summary, Option<EngineError>) {
    let mut summary = Summary::default();
    let mut first_err = None;
    for w in handles {
        let report = w.join().unwrap_or_else(|_| WorkerReport {
            totals: Totals::default(),
            sinks: Vec::new(),
            error: Some(EngineError::Config("a worker thread panicked".into())),
        });
        summary.totals.add(&report.totals);
        if let Some(e) = report.error {
            first_err.get_or_insert(e);
        }
        for r in &report.sinks {
            summary.sinks.add(r);
        }
    }
    (summary, first_err)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(duration: Option<Duration>) -> CaptureConfig {
        CaptureConfig {
            input: Input::File(PathBuf::from("unused")),
            snaplen: 64,
            filter: None,
            file: None,
            count: None,
            duration,
            print: false,
            forward: None,
            flows: None,
            rules: None,
            control: None,
            metrics: None,
            drop_privileges: None,
            anonymize: None,
            detect: None,
        }
    }

    /// Runs `monitor` over one pretend worker that says it is done after `work`, or once `stop`
    /// is raised; returns the elapsed time of each tick.
    fn watch(cfg: &CaptureConfig, work: Duration, waits: &[Option<Duration>]) -> Vec<Duration> {
        let stop = Arc::new(Stop::new().unwrap());
        let (tx, rx) = mpsc::channel();
        let worker = {
            let stop = Arc::clone(&stop);
            thread::spawn(move || {
                let t0 = Instant::now();
                while t0.elapsed() < work && !stop.is_raised() {
                    thread::sleep(Duration::from_millis(5));
                }
                tx.send(()).unwrap();
            })
        };
        let mut calls = Vec::new();
        let mut tick = |t: &Tick| {
            calls.push(t.elapsed);
            waits.get(calls.len() - 1).copied().flatten()
        };
        let shared = [Arc::new(SharedTotals::default())];
        monitor(cfg, &stop, &mut tick, Instant::now(), &shared, None, &rx);
        worker.join().unwrap();
        calls
    }

    /// A run of a one-packet file into pcapng, flow JSON and a control socket in `dir`, with
    /// `hook` as its privilege drop.
    fn run_with_hook(dir: &std::path::Path, hook: Hook) -> (Summary, Option<EngineError>) {
        use crate::sink::file::Format;
        use crate::sink::flow::export::{ExportConfig, ExportRate, ExportTarget};
        use crate::sink::flow::table::{DEFAULT_IDLE_SECS, TableConfig};
        let input = dir.join("in.pcap");
        let mut bytes = Vec::new();
        tapflow_wire::pcap::write_header(&mut bytes, LinkType::Ethernet, 65535);
        tapflow_wire::pcap::write_record(&mut bytes, 1_700_000_000_000_000_000, &[0; 60], 60);
        std::fs::write(&input, bytes).unwrap();
        let mut cfg = config(None);
        cfg.input = Input::File(input);
        cfg.file = Some(WriterConfig {
            path: dir.join("out.pcapng"),
            format: Format::Pcapng,
            worker: None,
            rotate_bytes: None,
            rotate_every: None,
            isb_every: Duration::from_secs(1),
            keep: None,
        });
        cfg.flows = Some(FlowConfig {
            table: TableConfig {
                max_flows: 16,
                active_ns: 1,
                idle_ns: DEFAULT_IDLE_SECS,
                seed: 0,
            },
            export: ExportConfig {
                targets: vec![
                    ExportTarget::parse_url(&format!("json:{}", dir.join("flows.json").display()))
                        .unwrap(),
                ],
                mtu: None,
                observation_domain: 1,
                rate: ExportRate::Unpaced,
                anonymize: None,
                store: None,
                enrich: None,
            },
        });
        cfg.control = Some(dir.join("ctl.sock"));
        cfg.drop_privileges = Some(hook);
        let stop = Arc::new(Stop::new().unwrap());
        run(&cfg, &stop, &mut |_| {}, &mut |_| None)
    }

    #[test]
    fn privileges_drop_on_the_callers_thread_before_any_output_opens() {
        let dir = std::env::temp_dir().join(format!("tf-pipeline-hook-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let outputs = ["flows.json", "ctl.sock", "out.pcapng", "out.pcapng.part"];
        let seen = Arc::new(std::sync::Mutex::new(Vec::new()));
        let caller = thread::current().id();
        let hook = {
            let (dir, seen) = (dir.clone(), Arc::clone(&seen));
            Hook(Arc::new(move || {
                assert_eq!(thread::current().id(), caller);
                let there: Vec<_> = outputs.iter().filter(|o| dir.join(o).exists()).collect();
                seen.lock().unwrap().push(format!("{there:?}"));
                Ok(())
            }))
        };
        let (summary, err) = run_with_hook(&dir, hook);
        assert!(err.is_none(), "{err:?}");
        assert_eq!(summary.totals.recorded, 1);
        // Called once, when no output existed yet; all of them were made after it.
        assert_eq!(*seen.lock().unwrap(), ["[]"]);
        assert!(dir.join("out.pcapng").exists() && dir.join("flows.json").exists());

        // A failed drop ends the run before any output or packet.
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let refuse = Hook(Arc::new(|| Err(EngineError::Config("no drop".into()))));
        let (summary, err) = run_with_hook(&dir, refuse);
        assert_eq!(err.map(|e| e.to_string()).as_deref(), Some("no drop"));
        assert_eq!(summary.totals.received, 0);
        for o in outputs {
            assert!(!dir.join(o).exists(), "{o} was created");
        }
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn the_monitor_ticks_only_when_the_tick_asks() {
        let ms = Duration::from_millis;
        // Asked again after 100 ms, then 50 ms, then never: three calls in a 600 ms run.
        let calls = watch(&config(None), ms(600), &[Some(ms(100)), Some(ms(50)), None]);
        assert_eq!(calls.len(), 3, "{calls:?}");
        assert!(calls[1] >= ms(100) && calls[2] >= ms(150), "{calls:?}");
        // A quiet capture: one call at the start, none after.
        assert_eq!(watch(&config(None), ms(300), &[None]).len(), 1);
    }

    #[test]
    fn the_monitor_raises_stop_at_the_duration_without_ticks() {
        let ms = Duration::from_millis;
        let t0 = Instant::now();
        // The pretend worker would run for a minute; the duration ends it.
        let calls = watch(&config(Some(ms(150))), ms(60_000), &[None]);
        assert_eq!(calls.len(), 1);
        let took = t0.elapsed();
        assert!(took >= ms(150) && took < ms(30_000), "{took:?}");
    }
}
