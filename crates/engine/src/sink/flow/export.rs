//! The flow exporter: one thread that takes the records every worker's flow meter ends and
//! sends them to each output (IPFIX over UDP or TCP, NetFlow v9 or v5, CSV, JSON lines, a
//! table).
//!
//! Workers hand records over in batches through a bounded queue (one channel operation per
//! batch, never per packet) and get the emptied batch back for reuse. A worker waits when the
//! queue is full, like it waits for a slow disk; nothing is dropped on the way.

use std::fmt;
use std::io::{self, Write};
use std::net::{SocketAddr, TcpStream, ToSocketAddrs};
use std::num::NonZeroU32;
use std::path::{Path, PathBuf};
use std::str::FromStr;
use std::sync::Arc;
use std::sync::mpsc::{self, Receiver, Sender, SyncSender};
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

use serde::Serialize;
use tapflow_store::open::{self, Location};
use tapflow_store::{FlowStore, ParquetOptions, StoreReport, StoredFlow};
use tapflow_sys::udp::UdpSocket;
use tapflow_sys::{SysError, outfile};
use tapflow_wire::cryptopan::{Anonymizer, CryptoPan};
use tapflow_wire::flowexport::ConfigError;
use tapflow_wire::flowrecord::FlowRecord;

use crate::EngineError;
use crate::sink::flow::encoder::{self, EncoderConfig, ExportFormat, FlowEncoder, Transport};
use crate::sink::forward::{MIN_MTU, payload_for_mtu};

/// Records per batch from a worker. Each batch handed over wakes the exporter (two context
/// switches when it shares the worker's core), so batches are large: with 8192 instead of
/// 2048, the flows benchmark's context switches fell from 511 to 160 (docs/design.md).
pub const BATCH: usize = 8192;

/// Batches in flight between the workers and the exporter: with [`BATCH`], at most 65,536
/// records (8 MiB) wait in the queue.
const QUEUE: usize = 8;

/// The largest datagram size taken from a route when `--export-mtu` is not given: a jumbo
/// frame. A loopback route says 65536, but collectors commonly read into 9000-byte buffers
/// (goflow2 does) and would cut longer messages.
pub const ROUTE_MTU_MAX: u32 = 9000;
/// The size used when the route's MTU cannot be read.
const DEFAULT_MTU: u32 = 1500;

/// Which clock "now" is for a meter: the packets' own (files: a trace from last year ends its
/// flows by trace time), or the packets' advanced by the wall clock while none arrive (live
/// capture and `tapflow recv`: flows end while the link is quiet, even when the probe replays
/// an old trace).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MeterClock {
    /// The newest packet time seen.
    Packets,
    /// The newest packet time plus the time (`CLOCK_MONOTONIC`) since it was seen; the
    /// exporter stamps its messages with `CLOCK_REALTIME`.
    Wall,
}

/// Why an export output could not be parsed, opened or started.
#[derive(Debug, thiserror::Error)]
pub enum ExportError {
    /// No `SCHEME:` at the start.
    #[error("'{url}': expected SCHEME://HOST[:PORT] or SCHEME:PATH")]
    NotUrl {
        /// The text given.
        url: String,
    },
    /// No format is registered for the scheme.
    #[error("'{url}': unknown scheme '{scheme}' ({})", encoder::schemes())]
    UnknownScheme {
        /// The text given.
        url: String,
        /// Its scheme.
        scheme: String,
    },
    /// A collector format given a path, or a file format given a host.
    #[error("'{url}': {scheme} {}", if *.to_file {
        "writes to a file: expected SCHEME:PATH"
    } else {
        "sends to a collector: expected SCHEME://HOST[:PORT]"
    })]
    WrongDestination {
        /// The text given.
        url: String,
        /// Its scheme.
        scheme: &'static str,
        /// Whether the format writes to a file.
        to_file: bool,
    },
    /// The host did not resolve.
    #[error("'{url}': cannot resolve {host}: {source}")]
    Resolve {
        /// The text given.
        url: String,
        /// `HOST:PORT` as looked up.
        host: String,
        /// The resolver's error.
        source: io::Error,
    },
    /// The host resolved to no address.
    #[error("'{url}': {host} has no address")]
    NoAddress {
        /// The text given.
        url: String,
        /// `HOST:PORT` as looked up.
        host: String,
    },
    /// The TCP connection to a collector failed.
    #[error("{output}: cannot connect: {source}")]
    Connect {
        /// The output, as a URL.
        output: String,
        /// The OS error.
        source: io::Error,
    },
    /// The UDP socket to a collector could not be opened.
    #[error("{output}: {source}")]
    Socket {
        /// The output, as a URL.
        output: String,
        /// The failed call.
        source: SysError,
    },
    /// An output file could not be created (or what stands at its name is not a regular
    /// file).
    #[error("{}: cannot create: {source}", .path.display())]
    Create {
        /// The file.
        path: PathBuf,
        /// The failed call.
        source: SysError,
    },
    /// The format's encoder refused the settings (a message size below its least).
    #[error("{output}: {source}")]
    Encoder {
        /// The output, as a URL.
        output: String,
        /// What the encoder refused.
        source: ConfigError,
    },
    /// The Parquet store could not be opened.
    #[error("--store {0}")]
    Store(tapflow_store::StoreError),
    /// The exporter thread could not be started.
    #[error("cannot start the flow exporter: {0}")]
    Thread(io::Error),
    /// The exporter thread is gone, so a meter cannot hand records over.
    #[error("the flow exporter stopped")]
    Stopped,
}

/// Where an output's bytes go.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Dest {
    /// A collector (UDP or TCP, as the format says).
    Collector(SocketAddr),
    /// Standard output.
    Stdout,
    /// A file (created or truncated).
    File(PathBuf),
}

/// One output of the exporter: a registered format and where it goes, which always suit each
/// other (a collector for a format sent over UDP or TCP, a file or standard output for text).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExportTarget {
    format: &'static ExportFormat,
    dest: Dest,
}

impl ExportTarget {
    /// Parses `SCHEME://HOST[:PORT]` for a collector (`ipfix://HOST:PORT`,
    /// `ipfix+tcp://HOST:PORT`, `nfv9://HOST:PORT`, `nfv5://HOST:PORT`; the port defaults to
    /// the format's, 4739 for IPFIX, 2055 for NetFlow) or `SCHEME:PATH` for a file
    /// (`csv:flows.csv`, `json:-` for standard output). The schemes are those of
    /// [`encoder::FORMATS`].
    pub fn parse_url(url: &str) -> Result<ExportTarget, ExportError> {
        let (scheme, rest) = url.split_once(':').ok_or_else(|| ExportError::NotUrl {
            url: url.to_owned(),
        })?;
        let format = encoder::format(scheme).ok_or_else(|| ExportError::UnknownScheme {
            url: url.to_owned(),
            scheme: scheme.to_owned(),
        })?;
        let wrong = || ExportError::WrongDestination {
            url: url.to_owned(),
            scheme: format.scheme,
            to_file: format.transport == Transport::File,
        };
        let dest = match (format.transport, rest.strip_prefix("//")) {
            (Transport::File, None) => file_dest(Path::new(rest)),
            (Transport::Udp | Transport::Tcp, Some(host)) => {
                Dest::Collector(resolve(url, host, format.default_port)?)
            }
            _ => return Err(wrong()),
        };
        Ok(ExportTarget { format, dest })
    }

    /// The file format `scheme` (`csv`, `json`, `table`) written to `path`; `-` is standard
    /// output.
    pub fn file(scheme: &str, path: &Path) -> Result<ExportTarget, ExportError> {
        let url = format!("{scheme}:{}", path.display());
        let format = encoder::format(scheme).ok_or_else(|| ExportError::UnknownScheme {
            url: url.clone(),
            scheme: scheme.to_owned(),
        })?;
        if format.transport != Transport::File {
            return Err(ExportError::WrongDestination {
                url,
                scheme: format.scheme,
                to_file: false,
            });
        }
        Ok(ExportTarget {
            format,
            dest: file_dest(path),
        })
    }

    /// The collector format `scheme` (`ipfix`, `nfv9`, ...) sent to `addr`.
    pub fn collector(scheme: &str, addr: SocketAddr) -> Result<ExportTarget, ExportError> {
        ExportTarget::parse_url(&format!("{scheme}://{addr}"))
    }

    /// The format.
    pub fn format(&self) -> &'static ExportFormat {
        self.format
    }

    /// Where the bytes go.
    pub fn dest(&self) -> &Dest {
        &self.dest
    }

    /// The target as a URL: `ipfix://192.0.2.1:4739`, `csv:flows.csv`, `json:-`.
    pub fn name(&self) -> String {
        let scheme = self.format.scheme;
        match &self.dest {
            Dest::Collector(addr) => format!("{scheme}://{addr}"),
            Dest::Stdout => format!("{scheme}:-"),
            Dest::File(p) => format!("{scheme}:{}", p.display()),
        }
    }
}

/// `-` is standard output, anything else a file.
fn file_dest(path: &Path) -> Dest {
    if path.as_os_str() == "-" {
        Dest::Stdout
    } else {
        Dest::File(path.to_owned())
    }
}

/// The first address of `host` (`HOST`, `HOST:PORT`, `[IPV6]`, `[IPV6]:PORT`), with
/// `default_port` when it names none.
fn resolve(url: &str, host: &str, default_port: u16) -> Result<SocketAddr, ExportError> {
    let rest = host.trim_end_matches('/');
    let bare = rest.parse::<std::net::IpAddr>().is_ok()
        || !rest.contains(':')
        || (rest.starts_with('[') && rest.ends_with(']'));
    let with_port = if bare {
        // A bare address or host name (an IPv6 address needs [brackets] with a port).
        let host = rest.trim_start_matches('[').trim_end_matches(']');
        if host.contains(':') {
            format!("[{host}]:{default_port}")
        } else {
            format!("{host}:{default_port}")
        }
    } else {
        rest.to_owned()
    };
    with_port
        .to_socket_addrs()
        .map_err(|source| ExportError::Resolve {
            url: url.to_owned(),
            host: with_port.clone(),
            source,
        })?
        .next()
        .ok_or_else(|| ExportError::NoAddress {
            url: url.to_owned(),
            host: with_port.clone(),
        })
}

/// Everything the exporter needs.
#[derive(Debug, Clone)]
pub struct ExportConfig {
    /// The outputs.
    pub targets: Vec<ExportTarget>,
    /// Largest IP packet to a UDP collector: the IPFIX and NetFlow messages are sized to it.
    /// `None`: the MTU of the route to each collector, at most [`ROUTE_MTU_MAX`].
    pub mtu: Option<u32>,
    /// IPFIX observation domain / NetFlow v9 source id.
    pub observation_domain: u32,
    /// How fast messages leave for each UDP collector.
    pub rate: ExportRate,
    /// Anonymise the addresses of every record (Crypto-PAn) before any output gets it.
    pub anonymize: Option<CryptoPan>,
    /// A Parquet store directory the records also go into, without a network hop.
    pub store: Option<PathBuf>,
    /// Enrichment of the records the store keeps (AS, country, networks).
    pub enrich: Option<Arc<crate::enrich::Source>>,
}

/// Bytes of messages a second to a UDP collector by default (`--export-rate auto`): what a
/// default `nfcapd` on the same host receives without loss with both cores busy, with a margin
/// (docs/flows.md, "Pacing"): 166 messages of 9000 bytes a second, 1,000 of 1500.
pub const DEFAULT_BYTES_PER_SECOND: u32 = 1_500_000;

/// How fast messages leave for a UDP collector (`--export-rate`).
///
/// A collector's socket buffer is small (Linux's default, 212992 bytes, holds 12 datagrams of
/// 9000 bytes, 92 of 1500) and an offline run ends 300k flows in a fraction of a second:
/// unpaced, most of them are dropped before the collector reads them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ExportRate {
    /// [`DEFAULT_BYTES_PER_SECOND`]: each message takes the time its length is worth, so a
    /// collector's buffer fills no faster with small messages than with large ones.
    #[default]
    Auto,
    /// At most this many messages a second, evenly spaced.
    PerSecond(NonZeroU32),
    /// As fast as the socket takes them, in runs of up to 128 KiB.
    Unpaced,
}

/// `auto`, `N` messages a second, or `max` (unpaced).
impl fmt::Display for ExportRate {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ExportRate::Auto => f.write_str("auto"),
            ExportRate::PerSecond(n) => write!(f, "{n}"),
            ExportRate::Unpaced => f.write_str("max"),
        }
    }
}

/// `auto`; `N` messages a second; `max` or `0`: unpaced.
impl FromStr for ExportRate {
    type Err = String;

    fn from_str(s: &str) -> Result<ExportRate, String> {
        match s {
            "auto" => return Ok(ExportRate::Auto),
            "max" => return Ok(ExportRate::Unpaced),
            _ => {}
        }
        match s.parse::<u32>() {
            Ok(n) => Ok(NonZeroU32::new(n).map_or(ExportRate::Unpaced, ExportRate::PerSecond)),
            Err(_) => Err(format!(
                "'{s}' is not a number of messages a second, 'auto' or 'max'"
            )),
        }
    }
}

/// What one output did.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct OutputReport {
    /// The output, as a URL or `format:path`.
    #[serde(rename = "output")]
    pub name: String,
    /// Flow records encoded into messages (to a collector), or written as lines (text).
    pub records: u64,
    /// Messages (datagrams, TCP messages) sent and not refused; 0 for text.
    pub messages: u64,
    /// Records the format cannot carry (IPv6 in NetFlow v5).
    pub not_encodable: u64,
    /// Text: records whose lines could not be written (a full disk, a closed pipe).
    pub lost_records: u64,
    /// Collectors: messages that could not be sent (no buffer room after waiting a second, a
    /// broken TCP session) or that the network refused (no collector listening); the collector
    /// sees them as a sequence gap. A host that refuses does not always say so (ICMP errors are
    /// rate-limited), so over UDP this is a lower bound.
    pub lost_messages: u64,
    /// The first delivery error, if any.
    pub error: Option<String>,
}

impl OutputReport {
    /// Whether records or messages were lost on the way out.
    pub fn lost(&self) -> bool {
        self.lost_records > 0 || self.lost_messages > 0
    }
}

/// What the exporter did.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct ExportReport {
    /// Records received from the meters.
    pub records: u64,
    /// Per output, in the order given.
    pub outputs: Vec<OutputReport>,
}

/// A batch of records from one worker.
#[derive(Debug)]
struct Batch {
    records: Vec<FlowRecord>,
    clock_ns: u64,
    epoch_ns: u64,
    back: Sender<Vec<FlowRecord>>,
}

/// A worker's end of the queue to the exporter.
#[derive(Debug)]
pub struct ExportQueue {
    tx: SyncSender<Batch>,
    back_tx: Sender<Vec<FlowRecord>>,
    back_rx: Receiver<Vec<FlowRecord>>,
}

impl ExportQueue {
    /// A worker's queue into `tx`, with its own channel for emptied batches coming back.
    fn new(tx: SyncSender<Batch>) -> ExportQueue {
        let (back_tx, back_rx) = mpsc::channel();
        ExportQueue {
            tx,
            back_tx,
            back_rx,
        }
    }

    /// Hands `batch` to the exporter and leaves an empty one (a returned batch when there is
    /// one) in its place. `clock_ns` is the meter's "now"; `epoch_ns` its first packet time
    /// (the NetFlow "boot" time for traces).
    pub fn send(
        &self,
        batch: &mut Vec<FlowRecord>,
        clock_ns: u64,
        epoch_ns: u64,
    ) -> Result<(), EngineError> {
        let empty = self
            .back_rx
            .try_recv()
            .unwrap_or_else(|_| Vec::with_capacity(BATCH));
        let records = std::mem::replace(batch, empty);
        self.tx
            .send(Batch {
                records,
                clock_ns,
                epoch_ns,
                back: self.back_tx.clone(),
            })
            .map_err(|_| ExportError::Stopped.into())
    }
}

#[cfg(test)]
impl ExportQueue {
    /// A queue with no exporter behind it, and a function that counts the records handed over
    /// so far.
    pub(crate) fn detached() -> (ExportQueue, impl FnMut() -> usize) {
        let (tx, rx) = mpsc::sync_channel(QUEUE);
        let mut n = 0;
        let count = move || {
            n += rx.try_iter().map(|b: Batch| b.records.len()).sum::<usize>();
            n
        };
        (ExportQueue::new(tx), count)
    }
}

/// A running exporter.
#[derive(Debug)]
pub struct Exporter {
    tx: SyncSender<Batch>,
    thread: JoinHandle<ExportReport>,
}

impl Exporter {
    /// Opens every output (so a bad address or path fails before capture starts) and starts
    /// the exporter thread; its "now" follows the meters' `clock`.
    pub fn start(cfg: &ExportConfig, clock: MeterClock) -> Result<Exporter, EngineError> {
        let mut outputs = Vec::with_capacity(cfg.targets.len());
        for t in &cfg.targets {
            outputs.push(open(t, cfg)?);
        }
        let store = match &cfg.store {
            Some(dir) => Some(StoreOutput::open(
                dir,
                cfg.observation_domain,
                cfg.enrich.clone(),
            )?),
            None => None,
        };
        let (tx, rx) = mpsc::sync_channel(QUEUE);
        let thread = thread::Builder::new()
            .name("tapflow-export".into())
            .spawn({
                let anon = cfg.anonymize.clone().map(Anonymizer::new);
                move || run(rx, outputs, store, clock, anon)
            })
            .map_err(ExportError::Thread)?;
        Ok(Exporter { tx, thread })
    }

    /// A queue for one worker's meter.
    pub fn queue(&self) -> ExportQueue {
        ExportQueue::new(self.tx.clone())
    }

    /// Waits until every queue is dropped and everything is exported; finishes the outputs.
    pub fn finish(self) -> ExportReport {
        drop(self.tx);
        self.thread.join().unwrap_or_else(|_| ExportReport {
            records: 0,
            outputs: vec![OutputReport {
                name: "exporter".into(),
                error: Some("the flow exporter panicked".into()),
                ..OutputReport::default()
            }],
        })
    }
}

fn run(
    rx: Receiver<Batch>,
    mut outputs: Vec<Output>,
    mut store: Option<StoreOutput>,
    clock: MeterClock,
    mut anon: Option<Anonymizer>,
) -> ExportReport {
    let mut report = ExportReport::default();
    let mut now = 0u64;
    let wall = || tapflow_sys::clock::realtime_ns();
    loop {
        match rx.recv_timeout(Duration::from_millis(100)) {
            Ok(mut b) => {
                now = match clock {
                    MeterClock::Packets => now.max(b.clock_ns),
                    MeterClock::Wall => wall(),
                };
                report.records += b.records.len() as u64;
                if let Some(a) = &mut anon {
                    b.records.iter_mut().for_each(|r| a.flow_record(r));
                }
                for o in &mut outputs {
                    o.export(&b.records, now, b.epoch_ns);
                }
                if let Some(s) = &mut store {
                    s.insert(&b.records, tapflow_sys::clock::realtime_ns());
                }
                b.records.clear();
                let _ = b.back.send(b.records);
            }
            Err(mpsc::RecvTimeoutError::Timeout) => {
                if clock == MeterClock::Wall {
                    now = wall();
                }
                for o in &mut outputs {
                    o.tick(now);
                }
                if let Some(s) = &mut store {
                    s.tick();
                }
            }
            Err(mpsc::RecvTimeoutError::Disconnected) => break,
        }
    }
    report.outputs = outputs.into_iter().map(Output::finish).collect();
    report.outputs.extend(store.map(StoreOutput::finish));
    report
}

/// The Parquet store output: the meters' records as the store keeps them, written by the
/// exporter thread.
struct StoreOutput {
    name: String,
    store: Box<dyn FlowStore>,
    /// Reused for each batch.
    rows: Vec<StoredFlow>,
    domain: u32,
    /// Records not handed to the store because it had failed.
    withheld: u64,
    error: Option<String>,
    last_flush: Instant,
}

impl StoreOutput {
    fn open(
        dir: &Path,
        domain: u32,
        enrich: Option<Arc<crate::enrich::Source>>,
    ) -> Result<StoreOutput, ExportError> {
        let at = Location::parse(dir).map_err(ExportError::Store)?;
        let store = open::store(&at, &open::Options::default()).map_err(ExportError::Store)?;
        let store = match enrich {
            Some(source) => Box::new(crate::enrich::store::EnrichedStore::new(
                store,
                crate::enrich::Enricher::new(source),
            )),
            None => store,
        };
        Ok(StoreOutput {
            name: at.name(),
            store,
            rows: Vec::with_capacity(BATCH),
            domain,
            withheld: 0,
            error: None,
            last_flush: Instant::now(),
        })
    }

    /// Hands `records`, ended at `now_ns`, to the store: flows metered here have no exporter
    /// address (`::`) and no sampling.
    fn insert(&mut self, records: &[FlowRecord], now_ns: u64) {
        if self.error.is_some() {
            self.withheld += records.len() as u64;
            return;
        }
        self.rows.clear();
        self.rows.extend(records.iter().map(|r| StoredFlow {
            flow: *r,
            egress: 0,
            exporter: [0; 16],
            domain: self.domain,
            sampling: 1,
            received_ns: now_ns,
            ..StoredFlow::default()
        }));
        if let Err(e) = self.store.insert(&self.rows) {
            self.error = Some(e.to_string());
        }
    }

    /// Makes what the store holds visible every few seconds.
    fn tick(&mut self) {
        if self.error.is_none()
            && self.last_flush.elapsed() >= ParquetOptions::default().flush_interval
        {
            self.last_flush = Instant::now();
            if let Err(e) = self.store.flush() {
                self.error = Some(e.to_string());
            }
        }
    }

    fn finish(self) -> OutputReport {
        let mut error = self.error;
        let before = self.store.report();
        let r = self.store.close().unwrap_or_else(|e| {
            error.get_or_insert_with(|| e.to_string());
            StoreReport {
                dropped: before.received - before.stored.min(before.received),
                pending: 0,
                ..before
            }
        });
        OutputReport {
            name: self.name,
            records: r.stored,
            lost_records: r.dropped + r.pending + self.withheld,
            error,
            ..OutputReport::default()
        }
    }
}

/// One opened output: its encoder and where the encoded bytes go.
struct Output {
    name: String,
    encoder: Box<dyn FlowEncoder>,
    link: Link,
    /// Lines the encoder wrote before any record (a header).
    head_lines: u64,
}

/// Where an output's messages go.
#[derive(Debug)]
enum Link {
    /// A collector over UDP or TCP.
    Collector(Box<Collector>),
    /// A file or standard output.
    Text(TextSink),
}

/// Messages queued for one unpaced `sendmmsg`.
const SEND_BATCH: usize = 32;
/// Bytes queued for one unpaced `sendmmsg`: a run this long fits an idle collector's socket
/// buffer at Linux's default size (`net.core.rmem_default`, 212992 bytes).
const SEND_BYTES: usize = 128 << 10;
/// How long an unpaced message may wait for a full run before it is sent anyway. Every send
/// wakes the collector, so unpaced messages leave in runs, not one worker batch at a time
/// (offline, 3,346 messages took 768 sends before). The exporter's idle tick (100 ms) sends the
/// rest.
const SEND_DELAY: Duration = Duration::from_millis(100);
/// How long a UDP send waits for room in the socket buffer before the message counts as lost.
const SEND_PATIENCE: Duration = Duration::from_secs(1);
/// RFC 7011 §10.4.2.3: reconnect a TCP session at most once a minute.
const RECONNECT_EVERY_NS: u64 = 60_000_000_000;

/// A collector's socket; a broken TCP session is `None` until it reconnects.
#[derive(Debug)]
enum Socket {
    Udp(UdpSocket),
    Tcp(Option<TcpStream>),
}

/// How long a message holds the line: a fixed interval, or the time its bytes are worth.
#[derive(Debug, Clone, Copy)]
enum Pace {
    Interval(Duration),
    BytesPerSecond(u32),
}

/// Spaces messages evenly: each leaves when the one before has had its time. A message late
/// for its slot (the exporter was busy or off the CPU) leaves at once, and the schedule restarts
/// from it once it is more than its own time behind: lateness is never made up by a burst.
#[derive(Debug)]
struct Pacer {
    pace: Pace,
    /// When the next message may leave.
    next: Option<Instant>,
}

impl Pacer {
    fn new(pace: Pace) -> Pacer {
        Pacer { pace, next: None }
    }

    /// How long a message of `len` bytes ready at `now` waits before it leaves; books its slot.
    fn delay(&mut self, now: Instant, len: usize) -> Duration {
        let time = match self.pace {
            Pace::Interval(d) => d,
            Pace::BytesPerSecond(b) => {
                Duration::from_nanos(len as u64 * 1_000_000_000 / u64::from(b.max(1)))
            }
        };
        let due = match self.next {
            Some(t) if now <= t + time => t,
            _ => now,
        };
        self.next = Some(due + time);
        due.saturating_duration_since(now)
    }

    /// Sleeps until a message of `len` bytes may leave.
    fn wait(&mut self, len: usize) {
        let d = self.delay(Instant::now(), len);
        if !d.is_zero() {
            thread::sleep(d);
        }
    }
}

/// A collector: its socket and the messages waiting to be sent.
#[derive(Debug)]
struct Collector {
    addr: SocketAddr,
    socket: Socket,
    pending: Vec<Vec<u8>>,
    queued: usize,
    /// When the oldest queued message was queued.
    queued_at: Option<Instant>,
    /// Messages the network refused, or that could not be sent or written.
    lost: u64,
    last_connect_ns: u64,
    error: Option<String>,
    /// UDP under `--export-rate`: each message leaves alone, when it is due.
    pacer: Option<Pacer>,
}

impl Collector {
    /// Connects to `addr` over `transport` and returns the collector with the largest message
    /// the transport takes.
    fn open(
        name: &str,
        transport: Transport,
        addr: SocketAddr,
        cfg: &ExportConfig,
    ) -> Result<(Collector, usize), ExportError> {
        let (socket, max_len) = if transport == Transport::Tcp {
            let s =
                TcpStream::connect_timeout(&addr, Duration::from_secs(5)).map_err(|source| {
                    ExportError::Connect {
                        output: name.to_owned(),
                        source,
                    }
                })?;
            // A stream is not cut into datagrams: the format's own limit applies.
            (Socket::Tcp(Some(s)), usize::MAX)
        } else {
            let fail = |source| ExportError::Socket {
                output: name.to_owned(),
                source,
            };
            let s = UdpSocket::connect(addr).map_err(fail)?;
            s.queue_refusals().map_err(fail)?;
            let _ = s.set_sndbuf(4 << 20);
            // RFC 7011 §10.3.3: no larger than the path MTU (as this host knows it).
            let mtu = cfg.mtu.unwrap_or_else(|| {
                s.path_mtu()
                    .map_or(DEFAULT_MTU, |m| m.clamp(MIN_MTU, ROUTE_MTU_MAX))
            });
            (Socket::Udp(s), payload_for_mtu(mtu, &addr))
        };
        // Room for the largest message a 16-bit length field describes, without reallocating.
        let capacity = max_len.min(usize::from(u16::MAX));
        let pacer = match (transport, cfg.rate) {
            (Transport::Udp, ExportRate::PerSecond(r)) => {
                Some(Pacer::new(Pace::Interval(Duration::from_secs(1) / r.get())))
            }
            (Transport::Udp, ExportRate::Auto) => {
                Some(Pacer::new(Pace::BytesPerSecond(DEFAULT_BYTES_PER_SECOND)))
            }
            _ => None,
        };
        let c = Collector {
            addr,
            socket,
            pending: (0..SEND_BATCH)
                .map(|_| Vec::with_capacity(capacity))
                .collect(),
            queued: 0,
            queued_at: None,
            lost: 0,
            last_connect_ns: tapflow_sys::clock::realtime_ns(),
            error: None,
            pacer,
        };
        Ok((c, max_len))
    }

    /// After a batch is encoded: unpaced messages leave once the oldest has waited
    /// [`SEND_DELAY`].
    fn batch_done(&mut self) {
        if self.queued_at.is_some_and(|t| t.elapsed() >= SEND_DELAY) {
            self.send();
        }
    }

    /// Takes one finished message. Paced, it leaves alone when it is due; unpaced, it joins the
    /// send queue, which is sent first when the message would overfill it ([`SEND_BATCH`]
    /// messages, [`SEND_BYTES`] bytes).
    fn queue(&mut self, m: &[u8]) {
        if let (Some(pacer), Socket::Udp(sock)) = (&mut self.pacer, &self.socket) {
            pacer.wait(m.len());
            send_udp(sock, &[m], &mut self.lost, &mut self.error);
            return;
        }
        let queued_bytes: usize = self.pending[..self.queued].iter().map(Vec::len).sum();
        if self.queued == SEND_BATCH || queued_bytes + m.len() > SEND_BYTES {
            self.send();
        }
        let buf = &mut self.pending[self.queued];
        buf.clear();
        buf.extend_from_slice(m);
        self.queued += 1;
        self.queued_at.get_or_insert_with(Instant::now);
    }

    /// Sends the queued messages (UDP in `sendmmsg` runs, TCP with blocking writes), and counts
    /// the datagrams sent earlier that the network has refused since.
    fn send(&mut self) {
        let msgs = &self.pending[..self.queued];
        self.queued = 0;
        self.queued_at = None;
        match &mut self.socket {
            Socket::Udp(sock) => send_udp(sock, msgs, &mut self.lost, &mut self.error),
            Socket::Tcp(stream) => {
                for m in msgs {
                    let Some(s) = stream else {
                        self.lost += 1;
                        continue;
                    };
                    if let Err(e) = s.write_all(m) {
                        self.error.get_or_insert_with(|| e.to_string());
                        self.lost += 1;
                        *stream = None;
                    }
                }
            }
        }
    }

    /// After a broken TCP session, tries once a minute to open a new one; true if it did (a
    /// new session starts with the templates and sequence 0).
    fn reconnect_if_due(&mut self) -> bool {
        let Socket::Tcp(stream @ None) = &mut self.socket else {
            return false;
        };
        let now = tapflow_sys::clock::realtime_ns();
        if now.saturating_sub(self.last_connect_ns) < RECONNECT_EVERY_NS {
            return false;
        }
        self.last_connect_ns = now;
        let Ok(s) = TcpStream::connect_timeout(&self.addr, Duration::from_secs(5)) else {
            return false;
        };
        *stream = Some(s);
        true
    }
}

/// Sends `msgs` to a UDP collector and adds to `lost` every datagram that did not reach it as
/// far as this host can tell: a send that failed (no room after [`SEND_PATIENCE`], no route),
/// and every datagram the network refused (an ICMP error: port unreachable when no collector
/// listens). A send failed by an earlier datagram's refusal is counted once, as that refusal,
/// and tried again. A segmented run refused before it was cut (a collector on this host) is
/// one refusal: the first is counted so, the socket then sends datagram by datagram.
fn send_udp<B: AsRef<[u8]>>(
    sock: &UdpSocket,
    msgs: &[B],
    lost: &mut u64,
    error: &mut Option<String>,
) {
    let refused = |lost: &mut u64, error: &mut Option<String>| {
        let r = sock.take_refusals();
        *lost += r.datagrams;
        if let Some(e) = r.first {
            error.get_or_insert_with(|| e.to_string());
            // From now on each refused datagram is counted, not each refused run.
            sock.stop_segmenting();
        }
        r.datagrams
    };
    let mut done = 0;
    let mut waited = Duration::ZERO;
    let mut retried = false;
    while done < msgs.len() {
        let o = sock.send_batch(&msgs[done..]);
        done += o.sent;
        let Some(e) = o.error else { continue };
        if e.kind() == io::ErrorKind::WouldBlock && waited < SEND_PATIENCE {
            thread::sleep(Duration::from_micros(200));
            waited += Duration::from_micros(200);
            continue;
        }
        if refused(lost, error) > 0 && !retried {
            retried = true;
            continue;
        }
        *lost += 1;
        error.get_or_insert_with(|| e.to_string());
        done += 1;
        retried = false;
    }
    refused(lost, error);
}

/// Bytes gathered before a text output is written: one `write` per 64 KiB of lines.
const TEXT_BUFFER: usize = 1 << 16;

/// A text output: lines gathered in a buffer and written to a file or standard output, with an
/// exact count of the lines that reached it. After a failed write nothing more is written.
struct TextSink {
    out: Box<dyn Write + Send>,
    buf: Vec<u8>,
    /// Lines wholly written.
    written: u64,
    error: Option<String>,
}

impl std::fmt::Debug for TextSink {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TextSink")
            .field("written", &self.written)
            .field("error", &self.error)
            .finish()
    }
}

impl TextSink {
    /// Creates the file at `path`, or writes to standard output if there is none.
    fn open(path: Option<&Path>) -> Result<TextSink, ExportError> {
        let out: Box<dyn Write + Send> = match path {
            Some(p) => Box::new(outfile::create(p).map_err(|source| ExportError::Create {
                path: p.to_owned(),
                source,
            })?),
            None => Box::new(io::stdout()),
        };
        Ok(TextSink {
            out,
            buf: Vec::with_capacity(TEXT_BUFFER),
            written: 0,
            error: None,
        })
    }

    /// Appends `bytes` (whole lines), unless a write failed.
    fn write(&mut self, bytes: &[u8]) {
        if self.error.is_none() {
            self.buf.extend_from_slice(bytes);
            if self.buf.len() >= TEXT_BUFFER {
                self.flush();
            }
        }
    }

    /// Writes the buffer out. A write that fails (a full disk, a closed pipe) ends the output:
    /// the lines it did not wholly write, and every one after, are lost.
    fn flush(&mut self) {
        let mut done = 0;
        let mut failed = None;
        while done < self.buf.len() {
            match self.out.write(&self.buf[done..]) {
                Ok(0) => failed = Some(io::Error::from(io::ErrorKind::WriteZero)),
                Ok(n) => done += n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => failed = Some(e),
            }
            if failed.is_some() {
                break;
            }
        }
        if failed.is_none()
            && let Err(e) = self.out.flush()
        {
            failed = Some(e);
        }
        self.written += lines(&self.buf[..done]);
        self.buf.clear();
        if let Some(e) = failed {
            self.error.get_or_insert_with(|| e.to_string());
        }
    }
}

/// The complete lines in `bytes`, counted 255 bytes at a time in 8-bit sums, which the
/// compiler turns into wide compares (a count in 64-bit lanes took an eighth of a CSV
/// output's CPU).
fn lines(bytes: &[u8]) -> u64 {
    bytes
        .chunks(255)
        .map(|c| u64::from(c.iter().fold(0u8, |n, &b| n + u8::from(b == b'\n'))))
        .sum()
}

impl std::fmt::Debug for Output {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Output").field("name", &self.name).finish()
    }
}

/// Opens `t`: its link first (a bad address or path fails here), then its encoder for the
/// message size the link takes.
fn open(t: &ExportTarget, cfg: &ExportConfig) -> Result<Output, ExportError> {
    let name = t.name();
    let (mut link, max_message_len) = match (t.format.transport, &t.dest) {
        (transport @ (Transport::Udp | Transport::Tcp), Dest::Collector(addr)) => {
            let (c, max_len) = Collector::open(&name, transport, *addr, cfg)?;
            (Link::Collector(Box::new(c)), max_len)
        }
        (Transport::File, Dest::Stdout) => (Link::Text(TextSink::open(None)?), usize::MAX),
        (Transport::File, Dest::File(p)) => (Link::Text(TextSink::open(Some(p))?), usize::MAX),
        // ExportTarget's constructors pair every format with a destination it can use.
        (_, _) => {
            return Err(ExportError::WrongDestination {
                url: name,
                scheme: t.format.scheme,
                to_file: t.format.transport == Transport::File,
            });
        }
    };
    let ecfg = EncoderConfig {
        max_message_len,
        observation_domain: cfg.observation_domain,
        transport: t.format.transport,
    };
    let mut encoder = (t.format.build)(&ecfg).map_err(|source| ExportError::Encoder {
        output: name.clone(),
        source,
    })?;
    let mut head_lines = 0;
    match &mut link {
        Link::Collector(c) => encoder.begin(&mut |m| c.queue(m)),
        Link::Text(t) => encoder.begin(&mut |b| {
            head_lines += lines(b);
            t.write(b);
        }),
    }
    Ok(Output {
        name,
        encoder,
        link,
        head_lines,
    })
}

impl Output {
    fn export(&mut self, records: &[FlowRecord], now: u64, epoch: u64) {
        let enc = &mut self.encoder;
        match &mut self.link {
            Link::Collector(c) => {
                if c.reconnect_if_due() {
                    enc.reset_session();
                }
                enc.encode(records, now, epoch, &mut |m| c.queue(m));
                c.batch_done();
            }
            Link::Text(t) => enc.encode(records, now, epoch, &mut |line| t.write(line)),
        }
    }

    fn tick(&mut self, now: u64) {
        let enc = &mut self.encoder;
        match &mut self.link {
            Link::Collector(c) => {
                enc.tick(now, &mut |m| c.queue(m));
                c.send();
            }
            Link::Text(t) => t.flush(),
        }
    }

    fn finish(mut self) -> OutputReport {
        let st = self.encoder.stats();
        let mut report = OutputReport {
            name: self.name,
            ..OutputReport::default()
        };
        match &mut self.link {
            Link::Collector(c) => {
                c.send();
                report.records = st.records;
                report.messages = st.messages - c.lost.min(st.messages);
                report.not_encodable = st.unencodable;
                report.lost_messages = c.lost;
                report.error = c.error.take();
            }
            Link::Text(t) => {
                t.flush();
                // A text format hands over one line per record, after its header.
                let written = t.written.saturating_sub(self.head_lines).min(st.records);
                report.records = written;
                report.not_encodable = st.unencodable;
                report.lost_records = st.records - written;
                report.error = t.error.take();
            }
        }
        report
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn received(rx: &std::net::UdpSocket) -> usize {
        let mut buf = [0u8; 65536];
        std::iter::from_fn(|| rx.recv(&mut buf).ok()).count()
    }

    #[test]
    fn unpaced_messages_leave_in_runs_and_paced_ones_as_they_come() {
        let rx = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        rx.set_nonblocking(true).unwrap();
        let cfg = ExportConfig {
            targets: Vec::new(),
            mtu: Some(9000),
            observation_domain: 0,
            rate: ExportRate::Unpaced,
            anonymize: None,
            store: None,
            enrich: None,
        };
        let addr = rx.local_addr().unwrap();
        let (mut c, _) = Collector::open("test", Transport::Udp, addr, &cfg).unwrap();
        let m = vec![7u8; 8000];
        let run = SEND_BYTES / m.len();
        for _ in 0..run {
            c.queue(&m);
        }
        c.batch_done();
        assert_eq!(received(&rx), 0, "a run shorter than SEND_BYTES waits");
        c.queue(&m);
        assert_eq!(
            received(&rx),
            run,
            "the message that overflows the run sends it"
        );
        c.send();
        assert_eq!(received(&rx), 1, "the idle tick sends the rest");
        for _ in 0..SEND_BATCH + 1 {
            c.queue(&[1; 100]);
        }
        assert_eq!(
            received(&rx),
            SEND_BATCH,
            "at most SEND_BATCH messages per run"
        );
        c.send();
        assert_eq!(received(&rx), 1);

        let paced = ExportConfig {
            rate: ExportRate::PerSecond(NonZeroU32::new(1_000_000).unwrap()),
            anonymize: None,
            ..cfg
        };
        let (mut c, _) = Collector::open("test", Transport::Udp, addr, &paced).unwrap();
        c.queue(&m);
        c.batch_done();
        assert_eq!(received(&rx), 1, "paced messages do not wait for a run");
    }

    #[test]
    fn paced_messages_are_spaced_evenly_and_lateness_is_not_made_up_in_a_burst() {
        let ms = Duration::from_millis;
        let mut p = Pacer::new(Pace::Interval(ms(10)));
        let t0 = Instant::now();
        assert_eq!(
            p.delay(t0, 9000),
            Duration::ZERO,
            "the first leaves at once"
        );
        // Seventeen messages ready at once leave one interval apart, not together.
        for k in 1..17 {
            assert_eq!(p.delay(t0 + ms(10) * (k - 1), 9000), ms(10), "message {k}");
        }
        // Slightly late (less than an interval): the schedule holds, the next comes sooner.
        assert_eq!(p.delay(t0 + ms(174), 9000), Duration::ZERO);
        assert_eq!(p.delay(t0 + ms(174), 9000), ms(6));
        // Far behind (the exporter was off the CPU): one leaves now, the next an interval later.
        assert_eq!(p.delay(t0 + ms(500), 9000), Duration::ZERO);
        assert_eq!(p.delay(t0 + ms(500), 9000), ms(10));
    }

    #[test]
    fn by_default_a_message_takes_the_time_its_bytes_are_worth() {
        let ms = Duration::from_millis;
        // 1 MB/s: 9000 bytes take 9 ms, 1500 bytes 1.5 ms.
        let mut p = Pacer::new(Pace::BytesPerSecond(1_000_000));
        let t0 = Instant::now();
        assert_eq!(p.delay(t0, 9000), Duration::ZERO);
        assert_eq!(p.delay(t0, 1500), ms(9));
        assert_eq!(p.delay(t0 + ms(9), 1500), Duration::from_micros(1500));
        let nine_thousand = Duration::from_secs(1) * 9000 / DEFAULT_BYTES_PER_SECOND;
        assert!(
            nine_thousand >= ms(3),
            "{nine_thousand:?} per 9000-byte message"
        );
    }

    #[test]
    fn export_rates_parse_and_print_back() {
        assert_eq!("max".parse(), Ok(ExportRate::Unpaced));
        assert_eq!("0".parse(), Ok(ExportRate::Unpaced));
        assert_eq!("auto".parse(), Ok(ExportRate::Auto));
        let r: ExportRate = "250".parse().unwrap();
        assert_eq!(r, ExportRate::PerSecond(NonZeroU32::new(250).unwrap()));
        for r in [r, ExportRate::Unpaced, ExportRate::default()] {
            assert_eq!(r.to_string().parse(), Ok(r));
        }
        assert_eq!(ExportRate::default(), ExportRate::Auto);
        assert!("fast".parse::<ExportRate>().unwrap_err().contains("'fast'"));
    }

    #[test]
    fn datagrams_to_a_port_where_nothing_listens_count_as_lost() {
        let gone = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        let addr = gone.local_addr().unwrap();
        drop(gone);
        for rate in [ExportRate::Unpaced, "1000".parse().unwrap()] {
            let cfg = ExportConfig {
                targets: Vec::new(),
                mtu: Some(1500),
                observation_domain: 0,
                rate,
                anonymize: None,
                store: None,
                enrich: None,
            };
            let (mut c, _) = Collector::open("test", Transport::Udp, addr, &cfg).unwrap();
            // Loopback answers at once; elsewhere the ICMP errors may come later, or not at all.
            for _ in 0..10 {
                c.queue(&[1; 100]);
            }
            c.send();
            assert!(c.lost >= 1, "{rate}: {:?}", c.error);
            if rate != ExportRate::Unpaced {
                assert_eq!(c.lost, 10, "paced messages leave one by one");
            }
            // Once refused, unpaced messages no longer leave as one segmented run either.
            let before = c.lost;
            for _ in 0..10 {
                c.queue(&[1; 100]);
            }
            c.send();
            assert_eq!(c.lost - before, 10, "{rate}: {:?}", c.error);
            assert!(
                c.error.as_deref().unwrap_or_default().contains("refused"),
                "{:?}",
                c.error
            );
        }
    }

    #[test]
    fn lines_are_counted_across_the_8_bit_sums() {
        let text: Vec<u8> = (0..3000)
            .flat_map(|i| {
                [b'x'; 7]
                    .into_iter()
                    .chain([if i % 3 == 0 { b'y' } else { b'\n' }])
            })
            .collect();
        let want = text.iter().filter(|&&b| b == b'\n').count() as u64;
        assert_eq!(want, 2000);
        assert_eq!(lines(&text), want);
        assert_eq!(lines(&[b'\n'; 1000]), 1000);
        assert_eq!(lines(&[]), 0);
    }

    #[test]
    fn a_text_output_that_fails_counts_every_line_it_did_not_write() {
        /// Takes `room` bytes, then fails as a full disk does.
        struct Full {
            room: usize,
        }
        impl Write for Full {
            fn write(&mut self, b: &[u8]) -> io::Result<usize> {
                if self.room == 0 {
                    return Err(io::Error::from(io::ErrorKind::StorageFull));
                }
                let n = b.len().min(self.room);
                self.room -= n;
                Ok(n)
            }
            fn flush(&mut self) -> io::Result<()> {
                Ok(())
            }
        }
        let mut t = TextSink {
            out: Box::new(Full { room: 25 }),
            buf: Vec::new(),
            written: 0,
            error: None,
        };
        for _ in 0..10 {
            t.write(b"0123456789\n");
        }
        t.flush();
        // Two whole lines and three bytes of the third reached the disk.
        assert_eq!(t.written, 2);
        assert!(
            t.error.as_deref().unwrap_or_default().contains("storage"),
            "{:?}",
            t.error
        );
        t.write(b"more\n");
        t.flush();
        assert_eq!(t.written, 2, "nothing is written after a failure");
    }

    #[test]
    fn urls_parse_into_targets_whose_names_parse_back() {
        for (url, name) in [
            ("ipfix://127.0.0.1", "ipfix://127.0.0.1:4739"),
            ("ipfix+tcp://127.0.0.1:9995/", "ipfix+tcp://127.0.0.1:9995"),
            ("nfv9://[::1]", "nfv9://[::1]:2055"),
            ("nfv9://::1", "nfv9://[::1]:2055"),
            ("nfv5://[::1]:2056", "nfv5://[::1]:2056"),
            ("csv:flows.csv", "csv:flows.csv"),
            ("json:-", "json:-"),
        ] {
            let t = ExportTarget::parse_url(url).unwrap();
            assert_eq!(t.name(), name);
            assert_eq!(ExportTarget::parse_url(&t.name()).unwrap(), t);
        }
        let t = ExportTarget::file("table", Path::new("-")).unwrap();
        assert_eq!((t.format().scheme, t.dest()), ("table", &Dest::Stdout));
    }

    #[test]
    fn bad_urls_say_what_is_wrong_with_which_value() {
        let err = |url: &str| ExportTarget::parse_url(url).unwrap_err().to_string();
        assert!(
            err("sflow://127.0.0.1:6343")
                .starts_with("'sflow://127.0.0.1:6343': unknown scheme 'sflow' (ipfix, "),
            "{}",
            err("sflow://127.0.0.1:6343")
        );
        assert_eq!(
            err("127.0.0.1"),
            "'127.0.0.1': expected SCHEME://HOST[:PORT] or SCHEME:PATH"
        );
        assert_eq!(
            err("csv://127.0.0.1"),
            "'csv://127.0.0.1': csv writes to a file: expected SCHEME:PATH"
        );
        assert_eq!(
            err("nfv9:flows.bin"),
            "'nfv9:flows.bin': nfv9 sends to a collector: expected SCHEME://HOST[:PORT]"
        );
        assert!(err("ipfix://").starts_with("'ipfix://': cannot resolve :4739: "));
        assert!(matches!(
            ExportTarget::file("ipfix", Path::new("-")),
            Err(ExportError::WrongDestination { to_file: false, .. })
        ));
    }

    #[test]
    fn an_encoder_that_refuses_the_route_mtu_fails_at_start_naming_the_output() {
        let rx = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        let t = ExportTarget::collector("nfv9", rx.local_addr().unwrap()).unwrap();
        let cfg = ExportConfig {
            targets: vec![t.clone()],
            mtu: Some(200),
            observation_domain: 1,
            rate: ExportRate::Unpaced,
            anonymize: None,
            store: None,
            enrich: None,
        };
        let e = Exporter::start(&cfg, MeterClock::Packets).unwrap_err();
        assert!(matches!(
            e,
            EngineError::Export(ExportError::Encoder {
                source: ConfigError::MessageTooShort { len: 172, .. },
                ..
            })
        ));
        assert!(
            e.to_string().starts_with(&format!(
                "{}: NetFlow v9: maximum message length 172 is below",
                t.name()
            )),
            "{e}"
        );
    }
}
