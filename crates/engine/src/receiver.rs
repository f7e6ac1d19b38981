//! The receiver behind `tapflow recv`: the paper's file-recording application. It takes batch
//! datagrams from many probes with `recvmmsg`, gives every probe interface its own pcapng
//! interface, and writes the records through the [`FileSink`] unchanged: a datagram's records
//! already are header records, so each one goes to the file sink as it is.
//!
//! Loss is exact and placed: for each (probe address, probe id, session, stream) the receiver
//! follows the sequence number and the records-before count. Records a missing datagram
//! carried are "lost in transit"; the difference of the cumulative `drops` field is "lost on
//! the probe". Both go into `epb_dropcount` of the next record of that interface. Datagrams
//! that do not parse are counted per source address and dropped; nothing a sender does can
//! stop the receiver.

use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use serde::Serialize;
use tapflow_sys::udp::{RecvBatch, UdpSocket};
use tapflow_wire::LinkType;
use tapflow_wire::datagram::{self, Datagram};
use tapflow_wire::record::Records;

use crate::EngineError;
use crate::counters::Totals;
use crate::sink::RecordSink;
use crate::sink::file::{FileSink, WriterConfig};
use crate::sink::flow::export::{Exporter, MeterClock};
use crate::sink::flow::meter::{FlowConfig, FlowMeter, FlowSummary};
use crate::source::InterfaceInfo;

/// Distinct probe interfaces accepted; more become bad datagrams.
pub const MAX_INTERFACES: usize = 4096;
/// Distinct sequence streams followed; more become bad datagrams.
pub const MAX_STREAMS: usize = 65_536;
/// Distinct source addresses whose bad datagrams are counted apart; the rest are summed.
pub const MAX_BAD_SOURCES: usize = 1024;

/// An address prefix (`--allow`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Cidr {
    /// The network address.
    pub addr: IpAddr,
    /// Prefix length in bits.
    pub prefix: u8,
}

impl Cidr {
    /// Parses `ADDR/LEN` or a bare address (a host prefix).
    pub fn parse(s: &str) -> Result<Cidr, String> {
        let (a, p) = s.split_once('/').unwrap_or((s, ""));
        let addr: IpAddr = a
            .trim()
            .parse()
            .map_err(|_| format!("'{s}' is not an address or CIDR prefix"))?;
        let max = if addr.is_ipv4() { 32 } else { 128 };
        let prefix = if p.is_empty() {
            max
        } else {
            p.parse::<u8>()
                .ok()
                .filter(|&n| n <= max)
                .ok_or_else(|| format!("'{s}': prefix length must be 0 to {max}"))?
        };
        Ok(Cidr { addr, prefix })
    }

    /// Whether `ip` lies in this prefix (IPv4-mapped IPv6 addresses count as IPv4).
    pub fn contains(&self, ip: IpAddr) -> bool {
        let bits = |ip: IpAddr| -> (u128, u32) {
            match ip.to_canonical() {
                IpAddr::V4(a) => (u128::from(u32::from(a)), 32),
                IpAddr::V6(a) => (u128::from(a), 128),
            }
        };
        let (net, w) = bits(self.addr);
        let (x, wx) = bits(ip);
        if w != wx {
            return false;
        }
        let shift = w - u32::from(self.prefix);
        if shift >= w {
            return true;
        }
        (net >> shift) == (x >> shift)
    }
}

/// What `tapflow recv` needs.
#[derive(Debug, Clone)]
pub struct ReceiverConfig {
    /// Address to bind.
    pub listen: SocketAddr,
    /// The pcapng output.
    pub file: WriterConfig,
    /// Accepted source prefixes; empty accepts everyone.
    pub allow: Vec<Cidr>,
    /// Receive buffer to ask for.
    pub rcvbuf: usize,
    /// Stop after this long.
    pub duration: Option<Duration>,
    /// Flow metering of the received records (`--export`, `--json`, `--csv`), if any.
    pub flows: Option<FlowConfig>,
}

/// One probe interface as the receiver saw it.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct ProbeReport {
    /// The probe's address.
    pub source: Option<IpAddr>,
    /// The probe's id.
    pub probe: u32,
    /// The interface index on the probe.
    #[serde(rename = "probe_interface")]
    pub interface: u32,
    /// Its LINKTYPE_.
    pub linktype: u16,
    /// Its pcapng interface index in the output.
    pub index: u32,
    /// Datagrams accepted.
    pub datagrams: u64,
    /// Records written.
    pub records: u64,
    /// Records sent to this receiver that never arrived (missing datagrams).
    pub lost_in_transit: u64,
    /// Records the probe lost before sending (its `drops`).
    pub lost_on_probe: u64,
    /// Datagrams that arrived after a later one (their records count as lost in transit).
    pub late: u64,
}

/// The outcome of a receiver run.
#[derive(Debug, Clone, Default)]
pub struct ReceiverSummary {
    /// The bound address.
    pub listen: Option<SocketAddr>,
    /// The receive buffer the kernel granted.
    pub rcvbuf: usize,
    /// Per probe interface, in pcapng interface order.
    pub probes: Vec<ProbeReport>,
    /// Bad datagrams per source address (`None`: sources past [`MAX_BAD_SOURCES`]), with the
    /// last reason.
    pub bad: Vec<(Option<IpAddr>, u64, String)>,
    /// Datagrams from sources outside `--allow`.
    pub refused: u64,
    /// Files completed.
    pub files: Vec<std::path::PathBuf>,
    /// Wall-clock seconds.
    pub seconds: f64,
    /// What flow metering counted and exported, if it was on.
    pub flows: Option<FlowSummary>,
}

impl ReceiverSummary {
    /// Sums over probes: (datagrams, records, lost in transit, lost on probe).
    pub fn totals(&self) -> (u64, u64, u64, u64) {
        self.probes.iter().fold((0, 0, 0, 0), |t, p| {
            (
                t.0 + p.datagrams,
                t.1 + p.records,
                t.2 + p.lost_in_transit,
                t.3 + p.lost_on_probe,
            )
        })
    }

    /// All bad datagrams.
    pub fn bad_total(&self) -> u64 {
        self.bad.iter().map(|b| b.1).sum()
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
struct IfKey {
    source: IpAddr,
    probe: u32,
    interface: u32,
    linktype: u16,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
struct StreamKey {
    source: IpAddr,
    probe: u32,
    session: u32,
    stream: u16,
}

#[derive(Debug, Clone, Copy, Default)]
struct StreamState {
    next_sequence: u64,
    next_records: u64,
    drops_seen: u64,
}

/// Why a well-formed datagram was still refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Reject {
    Parse(datagram::Error),
    /// Counters that go backwards within a stream.
    Inconsistent,
    TooMany,
    Truncated,
    NoAddress,
}

impl std::fmt::Display for Reject {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Reject::Parse(e) => write!(f, "{e}"),
            Reject::Inconsistent => f.write_str("records-before or drops went backwards"),
            Reject::TooMany => f.write_str("too many probe interfaces or streams"),
            Reject::Truncated => f.write_str("datagram larger than the receive slot"),
            Reject::NoAddress => f.write_str("sender address not IPv4/IPv6"),
        }
    }
}

/// The receiver's bookkeeping, apart from the socket (unit-tested without one).
#[derive(Debug)]
pub struct Collector {
    sink: FileSink,
    meter: Option<FlowMeter>,
    interfaces: HashMap<IfKey, u32>,
    streams: HashMap<StreamKey, StreamState>,
    probes: Vec<ProbeReport>,
    /// Loss noted on an interface with no record to put it before yet.
    pending: Vec<u64>,
    bad: HashMap<Option<IpAddr>, (u64, Reject)>,
    /// Counts for the statistics blocks (of interface 0, see `accept`).
    totals: Totals,
}

impl Collector {
    /// A collector writing through `file`.
    pub fn new(file: WriterConfig) -> Collector {
        Collector {
            sink: FileSink::new(file),
            meter: None,
            interfaces: HashMap::new(),
            streams: HashMap::new(),
            probes: Vec::new(),
            pending: Vec::new(),
            bad: HashMap::new(),
            totals: Totals::default(),
        }
    }

    /// Meters flows from the received records too.
    pub fn with_meter(mut self, meter: FlowMeter) -> Collector {
        self.meter = Some(meter);
        self
    }

    fn count_bad(&mut self, from: Option<IpAddr>, why: Reject) {
        let key = if self.bad.len() < MAX_BAD_SOURCES || self.bad.contains_key(&from) {
            from
        } else {
            None
        };
        let e = self.bad.entry(key).or_insert((0, why));
        e.0 += 1;
        e.1 = why;
    }

    /// Handles one datagram from `from`; a bad one is counted, never an error. Errors are the
    /// output file's.
    pub fn datagram(
        &mut self,
        bytes: &[u8],
        from: Option<SocketAddr>,
        truncated: bool,
    ) -> Result<(), EngineError> {
        let source = from.map(|a| a.ip().to_canonical());
        let Some(ip) = source else {
            self.count_bad(None, Reject::NoAddress);
            return Ok(());
        };
        if truncated {
            self.count_bad(source, Reject::Truncated);
            return Ok(());
        }
        let d = match Datagram::parse(bytes) {
            Ok(d) => d,
            Err(e) => {
                self.count_bad(source, Reject::Parse(e));
                return Ok(());
            }
        };
        let h = *d.header();
        let skey = StreamKey {
            source: ip,
            probe: h.probe,
            session: h.session,
            stream: h.stream,
        };
        let ikey = IfKey {
            source: ip,
            probe: h.probe,
            interface: h.interface,
            linktype: h.linktype,
        };
        let known = self.streams.get(&skey).copied();
        if known.is_none() && self.streams.len() >= MAX_STREAMS {
            self.count_bad(source, Reject::TooMany);
            return Ok(());
        }
        let st = known.unwrap_or_default();
        let index = match self.interfaces.get(&ikey) {
            Some(&i) => i,
            None if self.interfaces.len() >= MAX_INTERFACES => {
                self.count_bad(source, Reject::TooMany);
                return Ok(());
            }
            None => {
                let i = self.probes.len() as u32;
                let name = if h.interface == 0 {
                    format!("probe {} at {}", h.probe, ip)
                } else {
                    format!("probe {} at {} if {}", h.probe, ip, h.interface)
                };
                let info = InterfaceInfo {
                    linktype: LinkType::from_u16(h.linktype),
                    snaplen: h.snaplen,
                    name: Some(name),
                    filter: None,
                    max_frame: None,
                };
                self.sink.add_interface(&info)?;
                if let Some(m) = &mut self.meter {
                    m.add_interface(&info)?;
                }
                self.interfaces.insert(ikey, i);
                self.probes.push(ProbeReport {
                    source: Some(ip),
                    probe: h.probe,
                    interface: h.interface,
                    linktype: h.linktype,
                    index: i,
                    ..ProbeReport::default()
                });
                self.pending.push(0);
                i
            }
        };
        let p = &mut self.probes[index as usize];
        if h.sequence < st.next_sequence {
            p.late += 1;
            return Ok(());
        }
        if h.records_before < st.next_records || h.drops < st.drops_seen {
            self.count_bad(source, Reject::Inconsistent);
            return Ok(());
        }
        let transit = h.records_before - st.next_records;
        let on_probe = h.drops - st.drops_seen;
        self.streams.insert(
            skey,
            StreamState {
                next_sequence: h.sequence + 1,
                next_records: h.records_before + u64::from(h.count),
                drops_seen: h.drops,
            },
        );
        p.datagrams += 1;
        p.records += u64::from(h.count);
        p.lost_in_transit += transit;
        p.lost_on_probe += on_probe;
        let loss = self.pending[index as usize] + transit + on_probe;
        if h.count == 0 {
            self.pending[index as usize] = loss;
            return Ok(());
        }
        self.pending[index as usize] = 0;
        // Interface statistics blocks describe interface 0: its probe's counts.
        let p0 = &self.probes[0];
        self.totals = Totals {
            received: p0.records + p0.lost_in_transit + p0.lost_on_probe,
            recorded: p0.records,
            dropped_kernel: p0.lost_on_probe,
            dropped_ours: p0.lost_in_transit,
            ..Totals::default()
        };
        // The datagram parser checked every record's length against the datagram.
        let mut drops = loss;
        for r in Records::new(d.records()) {
            let Ok((ctl, data)) = r else { break };
            let drops = std::mem::take(&mut drops);
            self.sink.record(index, drops, &ctl, data)?;
            if let Some(m) = &mut self.meter {
                m.record(index, drops, &ctl, data)?;
            }
        }
        if let Some(m) = &mut self.meter {
            m.end_of_block(&self.totals, None)?;
        }
        self.sink.end_of_block(&self.totals, None)
    }

    /// Finishes the output and reports.
    pub fn close(mut self) -> Result<ReceiverSummary, EngineError> {
        let report = self.sink.close(&self.totals)?;
        let flows = match &mut self.meter {
            Some(m) => m.close(&self.totals)?.flows,
            None => None,
        };
        let mut bad: Vec<_> = self
            .bad
            .into_iter()
            .map(|(ip, (n, why))| (ip, n, why.to_string()))
            .collect();
        bad.sort_by_key(|b| b.0);
        Ok(ReceiverSummary {
            probes: self.probes,
            bad,
            files: report.files,
            flows: flows.map(|meter| FlowSummary {
                meter,
                ..Default::default()
            }),
            ..ReceiverSummary::default()
        })
    }

    /// The per-probe counts so far.
    pub fn probes(&self) -> &[ProbeReport] {
        &self.probes
    }
}

/// Runs the receiver until `stop` is raised or the duration passes. `ready` is called once the
/// socket is bound, with its address and granted receive buffer; `tick` about every second.
pub fn run(
    cfg: &ReceiverConfig,
    stop: &AtomicBool,
    ready: &mut dyn FnMut(SocketAddr, usize),
    tick: &mut dyn FnMut(&[ProbeReport], Duration),
) -> (ReceiverSummary, Option<EngineError>) {
    let started = Instant::now();
    let sock = match UdpSocket::bind(cfg.listen) {
        Ok(s) => s,
        Err(e) => return (ReceiverSummary::default(), Some(e.into())),
    };
    let setup = sock
        .set_rcvbuf(cfg.rcvbuf)
        .and_then(|r| Ok((r, sock.local_addr()?)))
        .and_then(|r| sock.set_read_timeout(Duration::from_millis(50)).map(|()| r));
    let (rcvbuf, local) = match setup {
        Ok(x) => x,
        Err(e) => return (ReceiverSummary::default(), Some(e.into())),
    };
    ready(local, rcvbuf);
    let exporter = match &cfg.flows {
        Some(f) => match Exporter::start(&f.export, MeterClock::Wall) {
            Ok(x) => Some(x),
            Err(e) => return (ReceiverSummary::default(), Some(e)),
        },
        None => None,
    };
    let mut c = Collector::new(cfg.file.clone());
    if let (Some(f), Some(x)) = (&cfg.flows, &exporter) {
        c = c.with_meter(f.meter(1, cfg.listen, MeterClock::Wall, x));
    }
    let mut refused = 0u64;
    let mut rb = RecvBatch::new();
    let mut last_tick = Instant::now();
    let mut err = None;
    let mut draining = false;
    loop {
        if !draining
            && (stop.load(Ordering::Relaxed)
                || cfg.duration.is_some_and(|d| started.elapsed() >= d))
        {
            draining = true;
        }
        let n = match sock.recv_batch(&mut rb, !draining) {
            Ok(n) => n,
            Err(e) => {
                err = Some(e.into());
                break;
            }
        };
        if n == 0 && draining {
            break;
        }
        for i in 0..n {
            let Some((bytes, from, cut)) = rb.get(i) else {
                break;
            };
            if !cfg.allow.is_empty()
                && !from.is_some_and(|a| cfg.allow.iter().any(|c| c.contains(a.ip())))
            {
                refused += 1;
                continue;
            }
            if let Err(e) = c.datagram(bytes, from, cut) {
                err = Some(e);
                break;
            }
        }
        if err.is_some() {
            break;
        }
        if last_tick.elapsed() >= Duration::from_secs(1) {
            last_tick = Instant::now();
            tick(c.probes(), started.elapsed());
        }
    }
    let mut summary = match c.close() {
        Ok(s) => s,
        Err(e) => {
            err.get_or_insert(e);
            ReceiverSummary::default()
        }
    };
    if let Some(x) = exporter {
        summary.flows.get_or_insert_with(Default::default).export = x.finish();
    }
    summary.listen = Some(local);
    summary.rcvbuf = rcvbuf;
    summary.refused = refused;
    summary.seconds = started.elapsed().as_secs_f64();
    (summary, err)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sink::file::Format;
    use tapflow_wire::datagram::{Builder, Header};
    use tapflow_wire::record::{ControlField, Flags, push_record};

    fn dg(seq: u64, before: u64, drops: u64, count: u16) -> Vec<u8> {
        let mut recs = Vec::new();
        for i in 0..count {
            let ctl = ControlField::new(before + u64::from(i), Flags::default(), 0, 0, 60);
            push_record(&mut recs, ctl, &[0u8; 20]);
        }
        let mut buf = Vec::new();
        let mut b = Builder::start(&mut buf);
        b.push_raw(&recs);
        b.seal(&Header {
            count,
            probe: 3,
            session: 1,
            linktype: 1,
            snaplen: 64,
            sequence: seq,
            records_before: before,
            drops,
            ..Header::default()
        });
        buf
    }

    fn collector(dir: &std::path::Path) -> Collector {
        Collector::new(WriterConfig {
            path: dir.join("r.pcapng"),
            format: Format::Pcapng,
            worker: None,
            rotate_bytes: None,
            rotate_every: None,
            isb_every: Duration::from_secs(3600),
        })
    }

    #[test]
    fn gaps_become_transit_loss_and_drops_probe_loss() {
        let dir = std::env::temp_dir().join(format!("tf-recv-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let mut c = collector(&dir);
        let from = Some("192.0.2.1:4000".parse().unwrap());
        c.datagram(&dg(0, 0, 0, 5), from, false).unwrap();
        // Datagram 1 (5 records) lost; datagram 2 reports 2 records lost on the probe.
        c.datagram(&dg(2, 10, 2, 5), from, false).unwrap();
        // Late arrival of datagram 1: not written twice, counted late.
        c.datagram(&dg(1, 5, 0, 5), from, false).unwrap();
        // A drops-only datagram, then records: the loss lands before the next record.
        c.datagram(&dg(3, 15, 4, 0), from, false).unwrap();
        c.datagram(&dg(4, 15, 4, 1), from, false).unwrap();
        // Garbage and counters that go backwards.
        c.datagram(b"hello", from, false).unwrap();
        c.datagram(&dg(5, 3, 4, 1), from, false).unwrap();
        let p = c.probes()[0].clone();
        assert_eq!(
            (
                p.datagrams,
                p.records,
                p.lost_in_transit,
                p.lost_on_probe,
                p.late
            ),
            (4, 11, 5, 4, 1)
        );
        let s = c.close().unwrap();
        assert_eq!(s.bad_total(), 2);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn cidr_matching() {
        let c = Cidr::parse("10.1.0.0/16").unwrap();
        assert!(c.contains("10.1.200.3".parse().unwrap()));
        assert!(!c.contains("10.2.0.1".parse().unwrap()));
        assert!(c.contains("::ffff:10.1.0.9".parse().unwrap()));
        assert!(!c.contains("2001:db8::1".parse().unwrap()));
        assert!(
            Cidr::parse("0.0.0.0/0")
                .unwrap()
                .contains("8.8.8.8".parse().unwrap())
        );
        assert!(
            Cidr::parse("192.0.2.7")
                .unwrap()
                .contains("192.0.2.7".parse().unwrap())
        );
        assert!(Cidr::parse("10.0.0.0/33").is_err());
        assert!(Cidr::parse("nonsense").is_err());
    }
}
