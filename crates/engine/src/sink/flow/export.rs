//! The flow exporter: one thread that takes the records every worker's flow meter ends and
//! sends them to each output (IPFIX over UDP or TCP, NetFlow v9 or v5, CSV, JSON lines, a
//! table).
//!
//! Workers hand records over in batches through a bounded queue (one channel operation per
//! batch, never per packet) and get the emptied batch back for reuse. A worker waits when the
//! queue is full, like it waits for a slow disk; nothing is dropped on the way.

use std::fs::File;
use std::io::{self, BufWriter, Write};
use std::net::{SocketAddr, TcpStream, ToSocketAddrs};
use std::path::PathBuf;
use std::sync::mpsc::{self, Receiver, Sender, SyncSender};
use std::thread::{self, JoinHandle};
use std::time::Duration;

use serde::Serialize;
use tapflow_sys::udp::UdpSocket;
use tapflow_wire::flowrecord::FlowRecord;
use tapflow_wire::{ipfix, netflow5, netflow9};

use crate::EngineError;
use crate::sink::flow::text::TextFormat;
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

/// A flow export protocol.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Protocol {
    /// IPFIX (RFC 7011) with RFC 5103 biflow elements, over UDP.
    Ipfix,
    /// IPFIX over TCP.
    IpfixTcp,
    /// NetFlow v9 (RFC 3954) over UDP.
    Netflow9,
    /// NetFlow v5 over UDP (IPv4 only, one record per direction).
    Netflow5,
}

impl Protocol {
    /// The URL scheme.
    pub const fn scheme(self) -> &'static str {
        match self {
            Protocol::Ipfix => "ipfix",
            Protocol::IpfixTcp => "ipfix+tcp",
            Protocol::Netflow9 => "nfv9",
            Protocol::Netflow5 => "nfv5",
        }
    }
}

/// Where text goes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TextDest {
    /// Standard output.
    Stdout,
    /// A file (created or truncated).
    File(PathBuf),
}

/// One output of the exporter.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ExportTarget {
    /// A collector.
    Collector {
        /// Protocol.
        protocol: Protocol,
        /// Its address.
        addr: SocketAddr,
    },
    /// Text.
    Text {
        /// Format.
        format: TextFormat,
        /// Destination.
        dest: TextDest,
    },
}

impl ExportTarget {
    /// Parses `ipfix://HOST:PORT`, `ipfix+tcp://HOST:PORT`, `nfv9://HOST:PORT` or
    /// `nfv5://HOST:PORT` (the port defaults to 4739 for IPFIX, 2055 for NetFlow).
    pub fn parse_url(url: &str) -> Result<ExportTarget, String> {
        let (scheme, rest) = url
            .split_once("://")
            .ok_or_else(|| format!("'{url}': expected SCHEME://HOST:PORT"))?;
        let protocol = match scheme {
            "ipfix" | "ipfix+udp" => Protocol::Ipfix,
            "ipfix+tcp" => Protocol::IpfixTcp,
            "nfv9" => Protocol::Netflow9,
            "nfv5" => Protocol::Netflow5,
            _ => {
                return Err(format!(
                    "'{url}': unknown scheme '{scheme}' (ipfix, ipfix+tcp, nfv9, nfv5)"
                ));
            }
        };
        let rest = rest.trim_end_matches('/');
        let default_port = match protocol {
            Protocol::Ipfix | Protocol::IpfixTcp => 4739,
            Protocol::Netflow9 | Protocol::Netflow5 => 2055,
        };
        let with_port = if rest.parse::<std::net::IpAddr>().is_ok() || !rest.contains(':') {
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
        let addr = with_port
            .to_socket_addrs()
            .map_err(|e| format!("'{url}': {e}"))?
            .next()
            .ok_or_else(|| format!("'{url}': no address"))?;
        Ok(ExportTarget::Collector { protocol, addr })
    }

    fn name(&self) -> String {
        match self {
            ExportTarget::Collector { protocol, addr } => format!("{}://{addr}", protocol.scheme()),
            ExportTarget::Text { format, dest } => {
                let f = match format {
                    TextFormat::Table => "table",
                    TextFormat::Csv => "csv",
                    TextFormat::Json => "json",
                };
                match dest {
                    TextDest::Stdout => format!("{f}:-"),
                    TextDest::File(p) => format!("{f}:{}", p.display()),
                }
            }
        }
    }
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
            .map_err(|_| EngineError::Config("the flow exporter stopped".into()))
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
            .map_err(|e| EngineError::Config(format!("cannot start the flow exporter: {e}")))?;
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

/// One opened output.
struct Output {
    report: OutputReport,
    kind: OutputKind,
}

enum OutputKind {
    Text {
        format: TextFormat,
        w: BufWriter<Box<dyn Write + Send>>,
        line: Vec<u8>,
    },
    Collector(Box<Collector>),
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

/// An encoder for one collector; NetFlow ones are made when the first records arrive, since
/// their "boot time" is the first packet's.
#[derive(Debug)]
enum Wire {
    Ipfix(ipfix::Encoder),
    V9(netflow9::Encoder),
    V5(netflow5::Encoder),
}

impl Wire {
    fn encode(&mut self, records: &[FlowRecord], now: u64, out: &mut dyn FnMut(&[u8])) {
        match self {
            Wire::Ipfix(e) => e.encode(records, now, out),
            Wire::V9(e) => e.encode(records, now, out),
            Wire::V5(e) => e.encode(records, now, out),
        }
    }

    fn tick(&mut self, now: u64, out: &mut dyn FnMut(&[u8])) {
        match self {
            Wire::Ipfix(e) => e.tick(now, out),
            Wire::V9(e) => e.tick(now, out),
            Wire::V5(e) => e.tick(now, out),
        }
    }

    fn stats(&self) -> ipfix::Stats {
        match self {
            Wire::Ipfix(e) => e.stats(),
            Wire::V9(e) => e.stats(),
            Wire::V5(e) => e.stats(),
        }
    }
}

#[derive(Debug)]
enum Link {
    Udp(UdpSocket),
    Tcp(Option<TcpStream>),
}

/// A collector: its encoder, its socket and the messages waiting to be sent.
#[derive(Debug)]
struct Collector {
    protocol: Protocol,
    addr: SocketAddr,
    max_len: usize,
    observation_domain: u32,
    wire: Option<Wire>,
    link: Link,
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
    fn open(protocol: Protocol, addr: SocketAddr, cfg: &ExportConfig) -> Result<Collector, String> {
        let (link, max_len) = match protocol {
            // A TCP stream is not cut into datagrams: messages may be as large as IPFIX allows.
            Protocol::IpfixTcp => (
                Link::Tcp(Some(
                    TcpStream::connect_timeout(&addr, Duration::from_secs(5))
                        .map_err(|e| format!("cannot connect: {e}"))?,
                )),
                ipfix::MAX_MESSAGE_LEN,
            ),
            _ => {
                let s = UdpSocket::connect(addr).map_err(|e| e.to_string())?;
                let _ = s.set_sndbuf(4 << 20);
                // RFC 7011 §10.3.3: no larger than the path MTU (as this host knows it).
                let mtu = cfg.mtu.unwrap_or_else(|| {
                    s.path_mtu()
                        .map_or(DEFAULT_MTU, |m| m.clamp(MIN_MTU, ROUTE_MTU_MAX))
                });
                (Link::Udp(s), payload_for_mtu(mtu, &addr))
            }
        };
        let mut c = Collector {
            protocol,
            addr,
            max_len,
            observation_domain: cfg.observation_domain,
            wire: None,
            link,
            pending: (0..SEND_BATCH)
                .map(|_| Vec::with_capacity(max_len))
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
        if matches!(protocol, Protocol::Ipfix | Protocol::IpfixTcp) {
            c.wire = Some(c.encoder(0)?);
        }
        Ok(c)
    }

    fn encoder(&self, start_ns: u64) -> Result<Wire, String> {
        let e = |e: ipfix::ConfigError| e.to_string();
        Ok(match self.protocol {
            Protocol::Ipfix | Protocol::IpfixTcp => {
                let mut c = ipfix::Config::new(self.observation_domain);
                c.max_message_len = self.max_len;
                if self.protocol == Protocol::IpfixTcp {
                    c.transport = ipfix::Transport::Tcp;
                }
                Wire::Ipfix(ipfix::Encoder::new(c).map_err(e)?)
            }
            Protocol::Netflow9 => {
                let mut c = netflow9::Config::new(self.observation_domain, start_ns);
                c.max_message_len = self.max_len.min(netflow9::MAX_MESSAGE_LEN);
                Wire::V9(netflow9::Encoder::new(c).map_err(e)?)
            }
            Protocol::Netflow5 => {
                let mut c = netflow5::Config::new(start_ns);
                c.max_message_len = self.max_len.min(netflow5::MAX_MESSAGE_LEN);
                Wire::V5(netflow5::Encoder::new(c).map_err(e)?)
            }
        })
    }

    fn export(&mut self, records: &[FlowRecord], now: u64, epoch: u64) {
        if self.wire.is_none() {
            match self.encoder(epoch) {
                Ok(w) => self.wire = Some(w),
                Err(e) => {
                    self.error.get_or_insert(e);
                    return;
                }
            }
        }
        self.reconnect_if_due();
        let Some(mut wire) = self.wire.take() else {
            return;
        };
        wire.encode(records, now, &mut |m| self.queue(m));
        self.wire = Some(wire);
        // Paced messages leave as they are due, never in runs.
        if self.rate.is_some() || self.queued_at.is_some_and(|t| t.elapsed() >= SEND_DELAY) {
            self.send();
        }
    }

    fn tick(&mut self, now: u64) {
        if let Some(mut wire) = self.wire.take() {
            wire.tick(now, &mut |m| self.queue(m));
            self.wire = Some(wire);
        }
        self.send();
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
        match &mut self.link {
            Link::Udp(sock) => {
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
            Link::Tcp(stream) => {
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

    /// After a broken TCP session, tries once a minute to open a new one (a new session
    /// starts with the templates and sequence 0).
    fn reconnect_if_due(&mut self) {
        let Link::Tcp(stream @ None) = &mut self.link else {
            return;
        };
        let now = tapflow_sys::clock::realtime_ns();
        if now.saturating_sub(self.last_connect_ns) < RECONNECT_EVERY_NS {
            return;
        }
        self.last_connect_ns = now;
        if let Ok(s) = TcpStream::connect_timeout(&self.addr, Duration::from_secs(5)) {
            *stream = Some(s);
            if let Some(Wire::Ipfix(e)) = &mut self.wire {
                e.reset_session();
            }
        }
    }
}

impl std::fmt::Debug for Output {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Output")
            .field("name", &self.report.name)
            .finish()
    }
}

fn open(t: &ExportTarget, cfg: &ExportConfig) -> Result<Output, EngineError> {
    let name = t.name();
    let kind = match t {
        ExportTarget::Text { format, dest } => {
            let sink: Box<dyn Write + Send> = match dest {
                TextDest::Stdout => Box::new(io::stdout()),
                TextDest::File(p) => Box::new(File::create(p).map_err(|e| {
                    EngineError::Config(format!("{}: cannot create: {e}", p.display()))
                })?),
            };
            let mut w = BufWriter::with_capacity(1 << 16, sink);
            w.write_all(format.header().as_bytes())
                .map_err(|e| EngineError::Config(format!("{name}: {e}")))?;
            OutputKind::Text {
                format: *format,
                w,
                line: Vec::with_capacity(512),
            }
        }
        ExportTarget::Collector { protocol, addr } => OutputKind::Collector(Box::new(
            Collector::open(*protocol, *addr, cfg)
                .map_err(|e| EngineError::Config(format!("--export {name}: {e}")))?,
        )),
    };
    Ok(Output {
        report: OutputReport {
            name,
            ..OutputReport::default()
        },
        kind,
    })
}

impl Output {
    fn export(&mut self, records: &[FlowRecord], now: u64, epoch: u64) {
        if self.report.error.is_some() {
            self.report.failed += records.len() as u64;
            return;
        }
        match &mut self.kind {
            OutputKind::Text { format, w, line } => {
                for r in records {
                    line.clear();
                    format.write(r, line);
                    if let Err(e) = w.write_all(line) {
                        self.report.error = Some(e.to_string());
                        self.report.failed += 1;
                        continue;
                    }
                    self.report.records += 1;
                }
            }
            OutputKind::Collector(c) => c.export(records, now, epoch),
        }
    }

    fn tick(&mut self, now: u64) {
        match &mut self.kind {
            OutputKind::Text { w, .. } => {
                if let Err(e) = w.flush() {
                    self.report.error.get_or_insert(e.to_string());
                }
            }
            OutputKind::Collector(c) => c.tick(now),
        }
    }

    fn finish(mut self) -> OutputReport {
        match &mut self.kind {
            OutputKind::Text { w, .. } => {
                if let Err(e) = w.flush() {
                    self.report.error.get_or_insert(e.to_string());
                }
            }
            OutputKind::Collector(c) => {
                c.send();
                if let Some(w) = &c.wire {
                    let st = w.stats();
                    self.report.records = st.records;
                    self.report.messages = st.messages - c.lost.min(st.messages);
                    self.report.failed = st.unencodable;
                }
                self.report.lost_messages = c.lost;
                if let Some(e) = c.error.take() {
                    self.report.error.get_or_insert(e);
                }
            }
        }
        self.report
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
        // NetFlow v5: no templates, so every datagram below is one this test queued.
        let mut c = Collector::open(Protocol::Netflow5, rx.local_addr().unwrap(), &cfg).unwrap();
        let m = vec![7u8; 8000];
        let run = SEND_BYTES / m.len();
        for _ in 0..run {
            c.queue(&m);
        }
        c.export(&[], 0, 0);
        assert_eq!(received(&rx), 0, "a run shorter than SEND_BYTES waits");
        c.queue(&m);
        assert_eq!(
            received(&rx),
            run,
            "the message that overflows the run sends it"
        );
        c.tick(0);
        assert_eq!(received(&rx), 1, "the idle tick sends the rest");
        for _ in 0..SEND_BATCH + 1 {
            c.queue(&[1; 100]);
        }
        assert_eq!(
            received(&rx),
            SEND_BATCH,
            "at most SEND_BATCH messages per run"
        );
        c.tick(0);
        assert_eq!(received(&rx), 1);

        let paced = ExportConfig {
            rate: Some(1_000_000),
            ..cfg
        };
        let mut c = Collector::open(Protocol::Netflow5, rx.local_addr().unwrap(), &paced).unwrap();
        c.queue(&m);
        c.export(&[], 0, 0);
        assert_eq!(received(&rx), 1, "paced messages do not wait for a run");
    }
}
