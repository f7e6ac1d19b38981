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

use tapflow_wire::flowrecord::FlowRecord;

use crate::EngineError;
use crate::flow_text::TextFormat;

/// Records per batch from a worker.
pub const BATCH: usize = 512;

/// Batches in flight between the workers and the exporter.
const QUEUE: usize = 32;

/// Which clock "now" is for a meter: the packets' own (files: a trace from last year ends its
/// flows by trace time) or the wall clock (live: flows end while the link is quiet).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MeterClock {
    /// The newest packet time seen.
    Packets,
    /// `CLOCK_REALTIME`.
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
    /// Largest IP packet to a UDP collector (default 1500: the IPFIX messages are sized to it).
    pub mtu: u32,
    /// IPFIX observation domain / NetFlow v9 source id.
    pub observation_domain: u32,
    /// Which clock stamps the messages.
    pub clock: MeterClock,
}

/// What one output did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct OutputReport {
    /// The output, as a URL or `format:path`.
    pub name: String,
    /// Flow records written or sent.
    pub records: u64,
    /// Messages (datagrams, TCP messages) sent; 0 for text.
    pub messages: u64,
    /// Records that could not be delivered (send errors, IPv6 in NetFlow v5).
    pub failed: u64,
    /// The first delivery error, if any.
    pub error: Option<String>,
}

/// What the exporter did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
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

/// A running exporter.
#[derive(Debug)]
pub struct Exporter {
    tx: SyncSender<Batch>,
    thread: JoinHandle<ExportReport>,
}

impl Exporter {
    /// Opens every output (so a bad address or path fails before capture starts) and starts
    /// the exporter thread.
    pub fn start(cfg: &ExportConfig) -> Result<Exporter, EngineError> {
        let mut outputs = Vec::with_capacity(cfg.targets.len());
        for t in &cfg.targets {
            outputs.push(open(t, cfg)?);
        }
        let (tx, rx) = mpsc::sync_channel(QUEUE);
        let clock = cfg.clock;
        let thread = thread::Builder::new()
            .name("tapflow-export".into())
            .spawn(move || run(rx, outputs, clock))
            .map_err(|e| EngineError::Config(format!("cannot start the flow exporter: {e}")))?;
        Ok(Exporter { tx, thread })
    }

    /// A queue for one worker's meter.
    pub fn queue(&self) -> ExportQueue {
        let (back_tx, back_rx) = mpsc::channel();
        ExportQueue {
            tx: self.tx.clone(),
            back_tx,
            back_rx,
        }
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
        line: String,
    },
}

impl std::fmt::Debug for Output {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Output")
            .field("name", &self.report.name)
            .finish()
    }
}

fn open(t: &ExportTarget, _cfg: &ExportConfig) -> Result<Output, EngineError> {
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
                line: String::with_capacity(512),
            }
        }
        ExportTarget::Collector { protocol, addr } => {
            let _ = (
                protocol,
                TcpStream::connect_timeout(addr, Duration::from_secs(5)),
            );
            return Err(EngineError::Config(format!("{name}: not implemented yet")));
        }
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
    fn export(&mut self, records: &[FlowRecord], _now: u64, _epoch: u64) {
        if self.report.error.is_some() {
            self.report.failed += records.len() as u64;
            return;
        }
        match &mut self.kind {
            OutputKind::Text { format, w, line } => {
                for r in records {
                    line.clear();
                    format.write(r, line);
                    if let Err(e) = w.write_all(line.as_bytes()) {
                        self.report.error = Some(e.to_string());
                        self.report.failed += 1;
                        continue;
                    }
                    self.report.records += 1;
                }
            }
        }
    }

    fn tick(&mut self, _now: u64) {
        match &mut self.kind {
            OutputKind::Text { w, .. } => {
                if let Err(e) = w.flush() {
                    self.report.error.get_or_insert(e.to_string());
                }
            }
        }
    }

    fn finish(mut self) -> OutputReport {
        match &mut self.kind {
            OutputKind::Text { w, .. } => {
                if let Err(e) = w.flush() {
                    self.report.error.get_or_insert(e.to_string());
                }
            }
        }
        self.report
    }
}
