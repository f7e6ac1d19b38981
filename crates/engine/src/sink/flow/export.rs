//! The flow exporter: one thread that takes the records every worker's flow meter ends and
//! sends them to each output (IPFIX over UDP or TCP, NetFlow v9 or v5, CSV, JSON lines, a
//! table).
//!
//! Workers hand records over in batches through a bounded queue (one channel operation per
//! batch, never per packet) and get the emptied batch back for reuse. A worker waits when the
//! queue is full, like it waits for a slow disk; nothing is dropped on the way.

use std::io::{self, BufWriter, Write};
use std::net::{SocketAddr, TcpStream, ToSocketAddrs};
use std::path::{Path, PathBuf};
use std::sync::mpsc::{self, Receiver, Sender, SyncSender};
use std::thread::{self, JoinHandle};
use std::time::Duration;

use serde::Serialize;
use tapflow_sys::udp::UdpSocket;
use tapflow_sys::{SysError, outfile};
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
    /// The first bytes of a text output (a header line) could not be written.
    #[error("{output}: cannot write: {source}")]
    Write {
        /// The output, as a URL.
        output: String,
        /// The OS error.
        source: io::Error,
    },
    /// The format's encoder refused the settings (a message size below its least).
    #[error("{output}: {source}")]
    Encoder {
        /// The output, as a URL.
        output: String,
        /// What the encoder refused.
        source: ConfigError,
    },
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
    /// Most messages per second to each UDP collector (`None`: as fast as the socket takes
    /// them). A collector's receive buffer holds a burst of a few thousand datagrams at best;
    /// a trace replayed at full speed ends 300k flows in a second.
    pub rate: Option<u32>,
}

/// What one output did.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct OutputReport {
    /// The output, as a URL or `format:path`.
    #[serde(rename = "output")]
    pub name: String,
    /// Flow records written or sent.
    pub records: u64,
    /// Messages (datagrams, TCP messages) sent; 0 for text.
    pub messages: u64,
    /// Records the format cannot carry (IPv6 in NetFlow v5), or text that could not be written.
    pub failed: u64,
    /// Messages the network refused (no collector listening, no buffer room after waiting a
    /// second, a broken TCP session); the collector sees them as a sequence gap.
    pub lost_messages: u64,
    /// The first delivery error, if any.
    pub error: Option<String>,
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
        let (tx, rx) = mpsc::sync_channel(QUEUE);
        let thread = thread::Builder::new()
            .name("tapflow-export".into())
            .spawn(move || run(rx, outputs, clock))
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

fn run(rx: Receiver<Batch>, mut outputs: Vec<Output>, clock: MeterClock) -> ExportReport {
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
                for o in &mut outputs {
                    o.export(&b.records, now, b.epoch_ns);
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
            }
            Err(mpsc::RecvTimeoutError::Disconnected) => break,
        }
    }
    report.outputs = outputs.into_iter().map(Output::finish).collect();
    report
}

/// One opened output: its encoder and where the encoded bytes go.
struct Output {
    name: String,
    encoder: Box<dyn FlowEncoder>,
    link: Link,
}

/// Where an output's messages go.
#[derive(Debug)]
enum Link {
    /// A collector over UDP or TCP.
    Collector(Box<Collector>),
    /// A file or standard output.
    Text(TextSink),
}

/// Messages queued for one `sendmmsg`.
const SEND_BATCH: usize = 32;
/// Bytes queued for one `sendmmsg`: a run this long fits an idle collector's socket buffer at
/// Linux's default size (`net.core.rmem_default`, 212992 bytes).
const SEND_BYTES: usize = 128 << 10;
/// How long a message may wait for a full run before it is sent anyway. Every send wakes the
/// collector, so unpaced messages leave in runs, not one worker batch at a time (offline,
/// 3,346 messages took 768 sends before). The exporter's idle tick (100 ms) sends the rest.
const SEND_DELAY: Duration = Duration::from_millis(100);
/// How long a UDP send waits for room in the socket buffer before the messages count as lost.
const SEND_PATIENCE: Duration = Duration::from_secs(1);
/// RFC 7011 §10.4.2.3: reconnect a TCP session at most once a minute.
const RECONNECT_EVERY_NS: u64 = 60_000_000_000;

/// A collector's socket; a broken TCP session is `None` until it reconnects.
#[derive(Debug)]
enum Socket {
    Udp(UdpSocket),
    Tcp(Option<TcpStream>),
}

/// A collector: its socket and the messages waiting to be sent.
#[derive(Debug)]
struct Collector {
    addr: SocketAddr,
    socket: Socket,
    pending: Vec<Vec<u8>>,
    queued: usize,
    /// When the oldest queued message was queued.
    queued_at: Option<std::time::Instant>,
    /// Messages the socket refused or that could not be written.
    lost: u64,
    last_connect_ns: u64,
    error: Option<String>,
    /// Pacing: messages per second, the time the first paced message left, and messages since.
    rate: Option<u32>,
    paced_since: Option<std::time::Instant>,
    paced: u64,
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
            let s = UdpSocket::connect(addr).map_err(|source| ExportError::Socket {
                output: name.to_owned(),
                source,
            })?;
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
            rate: cfg.rate.filter(|&r| r > 0),
            paced_since: None,
            paced: 0,
        };
        Ok((c, max_len))
    }

    /// After a batch is queued: paced messages leave as they are due, never in runs; unpaced
    /// ones once the oldest has waited [`SEND_DELAY`].
    fn batch_done(&mut self) {
        if self.rate.is_some() || self.queued_at.is_some_and(|t| t.elapsed() >= SEND_DELAY) {
            self.send();
        }
    }

    /// Copies one finished message into the send queue, sending the queue first when the message
    /// would overfill it ([`SEND_BATCH`] messages, [`SEND_BYTES`] bytes).
    fn queue(&mut self, m: &[u8]) {
        let queued_bytes: usize = self.pending[..self.queued].iter().map(Vec::len).sum();
        if self.queued == SEND_BATCH || queued_bytes + m.len() > SEND_BYTES {
            self.send();
        }
        let buf = &mut self.pending[self.queued];
        buf.clear();
        buf.extend_from_slice(m);
        self.queued += 1;
        self.queued_at.get_or_insert_with(std::time::Instant::now);
    }

    /// Sends the queued messages: UDP in `sendmmsg` batches, waiting up to [`SEND_PATIENCE`]
    /// for room in the socket buffer; TCP with blocking writes.
    fn send(&mut self) {
        self.pace();
        let msgs = &self.pending[..self.queued];
        self.queued = 0;
        self.queued_at = None;
        match &mut self.socket {
            Socket::Udp(sock) => {
                let mut done = 0;
                let mut waited = Duration::ZERO;
                while done < msgs.len() {
                    let o = sock.send_batch(&msgs[done..]);
                    done += o.sent;
                    let Some(e) = o.error else { continue };
                    if e.kind() == io::ErrorKind::WouldBlock && waited < SEND_PATIENCE {
                        thread::sleep(Duration::from_micros(200));
                        waited += Duration::from_micros(200);
                        continue;
                    }
                    // Refused (no collector yet) or no room after waiting: this one is lost,
                    // and the collector sees it in the sequence numbers.
                    self.lost += 1;
                    self.error.get_or_insert_with(|| e.to_string());
                    done += 1;
                }
            }
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

    /// Waits until the queued messages may leave under `--export-rate`.
    fn pace(&mut self) {
        let Some(rate) = self.rate else { return };
        if self.queued == 0 {
            return;
        }
        let start = *self.paced_since.get_or_insert_with(std::time::Instant::now);
        self.paced += self.queued as u64;
        let due = Duration::from_secs_f64(self.paced as f64 / f64::from(rate));
        if let Some(wait) = due.checked_sub(start.elapsed()) {
            thread::sleep(wait);
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

/// A text output: a buffered file or standard output.
struct TextSink {
    w: BufWriter<Box<dyn Write + Send>>,
    /// Lines not written: the one that failed and every one after it.
    lost: u64,
    error: Option<String>,
}

impl std::fmt::Debug for TextSink {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TextSink")
            .field("lost", &self.lost)
            .field("error", &self.error)
            .finish()
    }
}

impl TextSink {
    /// Creates the file at `path`, or writes to standard output if there is none.
    fn open(path: Option<&Path>) -> Result<TextSink, ExportError> {
        let sink: Box<dyn Write + Send> = match path {
            Some(p) => Box::new(outfile::create(p).map_err(|source| ExportError::Create {
                path: p.to_owned(),
                source,
            })?),
            None => Box::new(io::stdout()),
        };
        Ok(TextSink {
            w: BufWriter::with_capacity(1 << 16, sink),
            lost: 0,
            error: None,
        })
    }

    /// Appends one line, unless an earlier one failed.
    fn write(&mut self, line: &[u8]) {
        if self.error.is_some() {
            self.lost += 1;
        } else if let Err(e) = self.w.write_all(line) {
            self.error = Some(e.to_string());
            self.lost += 1;
        }
    }

    fn flush(&mut self) {
        if let Err(e) = self.w.flush() {
            self.error.get_or_insert(e.to_string());
        }
    }
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
    match &mut link {
        Link::Collector(c) => encoder.begin(&mut |m| c.queue(m)),
        Link::Text(t) => {
            let mut head = Vec::new();
            encoder.begin(&mut |b| head.extend_from_slice(b));
            t.w.write_all(&head).map_err(|source| ExportError::Write {
                output: name.clone(),
                source,
            })?;
        }
    }
    Ok(Output {
        name,
        encoder,
        link,
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
                report.failed = st.unencodable;
                report.lost_messages = c.lost;
                report.error = c.error.take();
            }
            Link::Text(t) => {
                t.flush();
                // A text format hands over one line per record.
                report.records = st.records - t.lost.min(st.records);
                report.failed = st.unencodable + t.lost;
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
            rate: None,
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
            rate: Some(1_000_000),
            ..cfg
        };
        let (mut c, _) = Collector::open("test", Transport::Udp, addr, &paced).unwrap();
        c.queue(&m);
        c.batch_done();
        assert_eq!(received(&rx), 1, "paced messages do not wait for a run");
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
            rate: None,
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
