//! Batch datagrams from probes as a packet source: the paper's file-recording receiver
//! (`tapflow recv`). It takes the datagrams of many probes with `recvmmsg` and gives every
//! probe interface an interface of its own; a datagram's records already are header records,
//! so each one reaches the sinks with its control field's time, lengths and flags.
//!
//! Loss is exact and placed: for each (probe address, probe id, session, stream) the source
//! follows the sequence number and the records-before count. Records a missing datagram
//! carried are "lost in transit"; the difference of the cumulative `drops` field is "lost on
//! the probe". Both are placed before the next record of that interface (`epb_dropcount`).
//! Datagrams that do not parse are counted per source address and dropped; nothing a sender
//! does can stop the receiver.

use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use serde::Serialize;
use tapflow_sys::udp::{RecvBatch, UdpSocket};
use tapflow_wire::datagram::{self, Datagram};
use tapflow_wire::prefix::Prefix;
use tapflow_wire::record::{self, Records};
use tapflow_wire::{Flags, LinkType};

use crate::EngineError;
use crate::source::{
    InterfaceInfo, Opened, Packet, PacketSource, Progress, SourceCounter, SourceMetrics,
    SourceStats,
};

/// Distinct probe interfaces followed at once; more become bad datagrams until idle ones
/// expire.
pub const MAX_INTERFACES: usize = 4096;
/// Probe interfaces one source address may hold at once: a sender that forges probe ids
/// fills its own share, not the table.
pub const MAX_INTERFACES_PER_SOURCE: usize = 64;
/// A probe interface or stream with no datagram for this long is forgotten: its table entry
/// is free for another, and if it comes back it is announced again as a new interface.
pub const IDLE_EXPIRY: Duration = Duration::from_secs(300);
/// The largest step a stream's `records_before` or `drops` may take between two datagrams
/// that follow each other, and per datagram missing between them: more records than one
/// datagram can carry is a forged or broken counter, not loss.
const MAX_RECORDS_PER_DATAGRAM: u64 = (datagram::MAX_DATAGRAM / record::CONTROL_LEN) as u64;
/// The largest step a stream's `drops` may take between two of its datagrams: about three
/// hours of a 100 Gbit/s link's smallest packets.
const MAX_DROPS_STEP: u64 = 1 << 40;
/// The largest step a stream's sequence number may take (a receiver started long after its
/// probes sees a large first one): 2^40 datagrams, years of a busy probe. With the steps
/// above, no count a sender can claim comes near overflowing a sum.
const MAX_SEQUENCE_STEP: u64 = 1 << 40;
/// Whether `lost` records fit in `missing` datagrams (or messages) of at most `per` records
/// each: a counter that claims more is forged or broken, and what it claims is not loss.
pub(crate) fn within_reach(lost: u64, missing: u64, per: u64) -> bool {
    lost <= missing.saturating_mul(per)
}
/// Distinct sequence streams followed; more become bad datagrams.
pub const MAX_STREAMS: usize = 65_536;
/// Distinct source addresses whose bad datagrams are counted apart; the rest are summed.
pub const MAX_BAD_SOURCES: usize = 1024;

/// How long one wait for datagrams lasts: the longest a stop waits to be seen.
const READ_TIMEOUT: Duration = Duration::from_millis(50);

/// Where and from whom to receive.
#[derive(Debug, Clone)]
pub struct DatagramInput {
    /// Address to bind.
    pub listen: SocketAddr,
    /// Accepted source prefixes; empty accepts everyone.
    pub allow: Vec<Prefix>,
    /// Receive buffer to ask for.
    pub rcvbuf: usize,
    /// Where the source keeps its per-probe accounting for the caller to read, during the run
    /// and after it.
    pub ledger: Arc<Mutex<Ledger>>,
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
    /// Records received.
    pub records: u64,
    /// Records sent to this receiver that never arrived (missing datagrams).
    pub lost_in_transit: u64,
    /// Records the probe lost before sending (its `drops`).
    pub lost_on_probe: u64,
    /// Datagrams that arrived after a later one (their records count as lost in transit).
    pub late: u64,
}

/// The receiver's accounting: per probe interface, bad and refused datagrams.
#[derive(Debug, Clone, Default)]
pub struct Ledger {
    /// The bound address.
    pub listen: Option<SocketAddr>,
    /// The receive buffer the kernel granted.
    pub rcvbuf: usize,
    /// Per probe interface, in pcapng interface order.
    pub probes: Vec<ProbeReport>,
    /// Bad datagrams per source address (`None`: sources past [`MAX_BAD_SOURCES`]), with the
    /// last reason, by address.
    pub bad: Vec<(Option<IpAddr>, u64, String)>,
    /// Datagrams from sources outside `--allow`.
    pub refused: u64,
    /// Bad datagrams per source address and reason (`malformed`, `backwards`, `impossible`,
    /// `too_many`, `truncated`, `no_address`).
    pub bad_by_reason: Vec<(Option<IpAddr>, &'static str, u64)>,
}

impl Ledger {
    /// Sums over probes: (datagrams, records, lost in transit, lost on probe), saturating (a
    /// forged sequence leap may claim almost 2^64 records lost).
    pub fn totals(&self) -> (u64, u64, u64, u64) {
        self.probes.iter().fold((0, 0, 0, 0), |t, p| {
            (
                t.0.saturating_add(p.datagrams),
                t.1.saturating_add(p.records),
                t.2.saturating_add(p.lost_in_transit),
                t.3.saturating_add(p.lost_on_probe),
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

#[derive(Debug, Clone, Copy)]
struct StreamState {
    next_sequence: u64,
    next_records: u64,
    drops_seen: u64,
    last_seen: Instant,
}

/// A probe interface being followed.
#[derive(Debug, Clone, Copy)]
struct IfState {
    /// Its pcapng interface index.
    index: u32,
    last_seen: Instant,
}

/// Why a well-formed datagram was still refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Reject {
    Parse(datagram::Error),
    /// Counters that go backwards within a stream.
    Inconsistent,
    /// Counters that leap further than the datagrams missing could have carried.
    Impossible,
    TooMany,
    Truncated,
    NoAddress,
}

impl Reject {
    /// The reason as a metric label.
    fn kind(&self) -> &'static str {
        match self {
            Reject::Parse(_) => "malformed",
            Reject::Inconsistent => "backwards",
            Reject::Impossible => "impossible",
            Reject::TooMany => "too_many",
            Reject::Truncated => "truncated",
            Reject::NoAddress => "no_address",
        }
    }
}

impl std::fmt::Display for Reject {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Reject::Parse(e) => write!(f, "{e}"),
            Reject::Inconsistent => f.write_str("records-before or drops went backwards"),
            Reject::Impossible => {
                f.write_str("records-before or drops leapt further than any loss could")
            }
            Reject::TooMany => f.write_str("too many probe interfaces or streams"),
            Reject::Truncated => f.write_str("datagram larger than the receive slot"),
            Reject::NoAddress => f.write_str("sender address not IPv4/IPv6"),
        }
    }
}

/// What one datagram gave.
#[derive(Debug)]
enum Accepted<'a> {
    /// Nothing to record (bad, late, or only counters).
    Nothing,
    /// It names a probe interface not seen before: announce it, then take the datagram again.
    NewInterface(InterfaceInfo),
    /// Its records, for pcapng interface `index`, with `loss` records lost before them.
    Records {
        index: u32,
        loss: u64,
        records: &'a [u8],
    },
}

/// The receiver's bookkeeping, apart from the socket (unit-tested without one).
#[derive(Debug, Default)]
struct Book {
    interfaces: HashMap<IfKey, IfState>,
    /// Interfaces followed per source address.
    per_source: HashMap<IpAddr, usize>,
    streams: HashMap<StreamKey, StreamState>,
    probes: Vec<ProbeReport>,
    /// Loss noted on an interface with no record to put it before yet.
    pending: Vec<u64>,
    bad: HashMap<Option<IpAddr>, (u64, Reject)>,
    /// Bad datagrams per source and reason.
    bad_by_reason: HashMap<(Option<IpAddr>, &'static str), u64>,
    refused: u64,
}

impl Book {
    fn count_bad(&mut self, from: Option<IpAddr>, why: Reject) {
        let key = if self.bad.len() < MAX_BAD_SOURCES || self.bad.contains_key(&from) {
            from
        } else {
            None
        };
        let e = self.bad.entry(key).or_insert((0, why));
        e.0 += 1;
        e.1 = why;
        *self.bad_by_reason.entry((key, why.kind())).or_insert(0) += 1;
    }

    /// Takes one datagram from `from`; a bad one is counted, never an error.
    fn accept<'a>(
        &mut self,
        bytes: &'a [u8],
        from: Option<SocketAddr>,
        truncated: bool,
        now: Instant,
    ) -> Accepted<'a> {
        let source = from.map(|a| a.ip().to_canonical());
        let Some(ip) = source else {
            self.count_bad(None, Reject::NoAddress);
            return Accepted::Nothing;
        };
        if truncated {
            self.count_bad(source, Reject::Truncated);
            return Accepted::Nothing;
        }
        let d = match Datagram::parse(bytes) {
            Ok(d) => d,
            Err(e) => {
                self.count_bad(source, Reject::Parse(e));
                return Accepted::Nothing;
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
            return Accepted::Nothing;
        }
        let st = known.unwrap_or(StreamState {
            next_sequence: 0,
            next_records: 0,
            drops_seen: 0,
            last_seen: now,
        });
        let full = self.interfaces.len() >= MAX_INTERFACES
            || self.per_source.get(&ip).copied().unwrap_or(0) >= MAX_INTERFACES_PER_SOURCE;
        let index = match self.interfaces.get_mut(&ikey) {
            Some(i) => {
                i.last_seen = now;
                i.index
            }
            None if full => {
                self.count_bad(source, Reject::TooMany);
                return Accepted::Nothing;
            }
            None => {
                let i = self.probes.len() as u32;
                let name = if h.interface == 0 {
                    format!("probe {} at {}", h.probe, ip)
                } else {
                    format!("probe {} at {} if {}", h.probe, ip, h.interface)
                };
                self.interfaces.insert(
                    ikey,
                    IfState {
                        index: i,
                        last_seen: now,
                    },
                );
                *self.per_source.entry(ip).or_insert(0) += 1;
                self.probes.push(ProbeReport {
                    source: Some(ip),
                    probe: h.probe,
                    interface: h.interface,
                    linktype: h.linktype,
                    index: i,
                    ..ProbeReport::default()
                });
                self.pending.push(0);
                return Accepted::NewInterface(InterfaceInfo {
                    linktype: LinkType::from_u16(h.linktype),
                    snaplen: h.snaplen,
                    name: Some(name),
                    filter: None,
                    max_frame: None,
                });
            }
        };
        let p = &mut self.probes[index as usize];
        if h.sequence < st.next_sequence {
            p.late += 1;
            return Accepted::Nothing;
        }
        // Counters that go backwards, or leap further than the missing datagrams could have
        // carried, are forged or broken: the datagram is refused, and its counts never reach
        // the totals.
        let missing = h.sequence - st.next_sequence;
        let (Some(transit), Some(on_probe), Some(next_sequence), Some(next_records)) = (
            h.records_before.checked_sub(st.next_records),
            h.drops.checked_sub(st.drops_seen),
            h.sequence.checked_add(1),
            h.records_before.checked_add(u64::from(h.count)),
        ) else {
            self.count_bad(source, Reject::Inconsistent);
            return Accepted::Nothing;
        };
        if missing > MAX_SEQUENCE_STEP
            || !within_reach(transit, missing, MAX_RECORDS_PER_DATAGRAM)
            || on_probe > MAX_DROPS_STEP
        {
            self.count_bad(source, Reject::Impossible);
            return Accepted::Nothing;
        }
        self.streams.insert(
            skey,
            StreamState {
                next_sequence,
                next_records,
                drops_seen: h.drops,
                last_seen: now,
            },
        );
        p.datagrams += 1;
        p.records = p.records.saturating_add(u64::from(h.count));
        p.lost_in_transit = p.lost_in_transit.saturating_add(transit);
        p.lost_on_probe = p.lost_on_probe.saturating_add(on_probe);
        let loss = self.pending[index as usize]
            .saturating_add(transit)
            .saturating_add(on_probe);
        if h.count == 0 {
            self.pending[index as usize] = loss;
            return Accepted::Nothing;
        }
        self.pending[index as usize] = 0;
        Accepted::Records {
            index,
            loss,
            records: d.records(),
        }
    }

    /// Forgets the interfaces and streams idle since before `now - IDLE_EXPIRY`.
    fn expire(&mut self, now: Instant) {
        let Some(cut) = now.checked_sub(IDLE_EXPIRY) else {
            return;
        };
        let per_source = &mut self.per_source;
        self.interfaces.retain(|k, i| {
            let keep = i.last_seen >= cut;
            if !keep && let Some(n) = per_source.get_mut(&k.source) {
                *n -= 1;
                if *n == 0 {
                    per_source.remove(&k.source);
                }
            }
            keep
        });
        self.streams.retain(|_, s| s.last_seen >= cut);
    }

    /// The counts as the run's totals: every record a probe sent or lost, the records lost on
    /// the probes and those lost in transit; saturating, like each probe's counts.
    fn stats(&self) -> SourceStats {
        let t = self.probes.iter().fold((0u64, 0u64, 0u64), |t, p| {
            (
                t.0.saturating_add(p.records),
                t.1.saturating_add(p.lost_on_probe),
                t.2.saturating_add(p.lost_in_transit),
            )
        });
        SourceStats {
            received: t.0.saturating_add(t.1).saturating_add(t.2),
            dropped: t.1,
            dropped_in_transit: t.2,
            ..SourceStats::default()
        }
    }

    fn ledger(&self, into: &mut Ledger) {
        into.probes.clone_from(&self.probes);
        into.bad = self
            .bad
            .iter()
            .map(|(ip, (n, why))| (*ip, *n, why.to_string()))
            .collect();
        into.bad.sort_by_key(|b| b.0);
        into.bad_by_reason = self
            .bad_by_reason
            .iter()
            .map(|(&(ip, why), &n)| (ip, why, n))
            .collect();
        into.bad_by_reason.sort();
        into.refused = self.refused;
    }
}

/// A UDP socket receiving batch datagrams.
#[derive(Debug)]
pub struct DatagramSource {
    sock: UdpSocket,
    allow: Vec<Prefix>,
    batch: RecvBatch,
    /// Datagrams in `batch`, and the next one to take.
    received: usize,
    next: usize,
    book: Book,
    interfaces: Vec<InterfaceInfo>,
    ledger: Arc<Mutex<Ledger>>,
    /// The intake is closed: take what is queued, then end.
    draining: bool,
    /// When idle interfaces and streams were last looked for.
    last_expiry: Instant,
}

/// Binds the socket and opens it as the input of one worker.
pub fn open(input: &DatagramInput) -> Result<Opened<DatagramSource>, EngineError> {
    let sock = UdpSocket::bind(input.listen)?;
    let rcvbuf = sock.set_rcvbuf(input.rcvbuf)?;
    let local = sock.local_addr()?;
    sock.set_read_timeout(READ_TIMEOUT)?;
    {
        let mut l = input.ledger.lock().unwrap_or_else(PoisonError::into_inner);
        l.listen = Some(local);
        l.rcvbuf = rcvbuf;
    }
    Ok(Opened {
        sources: vec![DatagramSource {
            sock,
            allow: input.allow.clone(),
            batch: RecvBatch::new(),
            received: 0,
            next: 0,
            book: Book::default(),
            interfaces: Vec::new(),
            ledger: Arc::clone(&input.ledger),
            draining: false,
            last_expiry: Instant::now(),
        }],
        input: local.to_string(),
        linktype: LinkType::Ethernet,
        ring: None,
        mode: None,
        hw_timestamps: false,
        rules: None,
        filter_in_user_space: true,
        realtime: true,
        drain_quiet: Duration::ZERO,
        progress: None,
        metrics: Some(ledger_metrics(Arc::clone(&input.ledger))),
    })
}

/// The ledger's counts as `/metrics` serves them: bad datagrams by source and reason, refused
/// ones, and each probe interface's records and losses.
fn ledger_metrics(ledger: Arc<Mutex<Ledger>>) -> SourceMetrics {
    SourceMetrics::new(move || {
        let l = ledger
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone();
        let source = |ip: Option<IpAddr>| ip.map_or("other".to_string(), |a| a.to_string());
        let probe = |p: &ProbeReport| {
            format!(
                "probe=\"{}\",source=\"{}\",probe_interface=\"{}\"",
                p.probe,
                source(p.source),
                p.interface
            )
        };
        let per_probe = |pick: fn(&ProbeReport) -> u64| {
            l.probes
                .iter()
                .map(|p| (probe(p), pick(p) as f64))
                .collect()
        };
        vec![
            SourceCounter {
                name: "tapflow_recv_bad_datagrams_total",
                help: "Datagrams refused as bad, by sender and reason.",
                samples: l
                    .bad_by_reason
                    .iter()
                    .map(|(ip, why, n)| {
                        (
                            format!("source=\"{}\",reason=\"{why}\"", source(*ip)),
                            *n as f64,
                        )
                    })
                    .collect(),
            },
            SourceCounter {
                name: "tapflow_recv_refused_datagrams_total",
                help: "Datagrams from senders outside --allow.",
                samples: vec![(String::new(), l.refused as f64)],
            },
            SourceCounter {
                name: "tapflow_recv_probe_records_total",
                help: "Header records received from each probe interface.",
                samples: per_probe(|p| p.records),
            },
            SourceCounter {
                name: "tapflow_recv_probe_lost_in_transit_total",
                help: "Records a probe interface sent that never arrived.",
                samples: per_probe(|p| p.lost_in_transit),
            },
            SourceCounter {
                name: "tapflow_recv_probe_lost_on_probe_total",
                help: "Records a probe interface lost before sending.",
                samples: per_probe(|p| p.lost_on_probe),
            },
        ]
    })
}

impl DatagramSource {
    /// Hands the records of the datagrams received to `f`, from the next one on. Stops before
    /// a datagram that names a new probe interface, so the worker announces it first.
    fn deliver<F: FnMut(&Packet<'_>)>(&mut self, f: &mut F) {
        let now = Instant::now();
        while self.next < self.received {
            let Some((bytes, from, cut)) = self.batch.get(self.next) else {
                break;
            };
            if !self.allow.is_empty()
                && !from.is_some_and(|a| self.allow.iter().any(|c| c.contains_ip(a.ip())))
            {
                self.book.refused += 1;
                self.next += 1;
                continue;
            }
            match self.book.accept(bytes, from, cut, now) {
                Accepted::NewInterface(info) => {
                    self.interfaces.push(info);
                    return;
                }
                Accepted::Nothing => {}
                Accepted::Records {
                    index,
                    loss,
                    records,
                } => {
                    // The datagram parser checked every record's length against the datagram.
                    let mut drops = loss;
                    for (ctl, data) in Records::new(records).map_while(Result::ok) {
                        f(&Packet {
                            data,
                            ts_ns: ctl.rxtime,
                            len: ctl.orig_len(),
                            // The sum and the long length are the probe's encoding: the
                            // record builder makes its own.
                            flags: Flags(ctl.flags.0 & !(Flags::CKSUM_WHOLE | Flags::LEN32)),
                            interface: index,
                            stripped_vlan: None,
                            drops_before: std::mem::take(&mut drops),
                        });
                    }
                }
            }
            self.next += 1;
        }
    }
}

impl PacketSource for DatagramSource {
    fn interfaces(&self) -> &[InterfaceInfo] {
        &self.interfaces
    }

    fn next_block<F: FnMut(&Packet<'_>)>(
        &mut self,
        _timeout_ms: i32,
        _max_packets: usize,
        mut f: F,
    ) -> Result<Progress, EngineError> {
        if self.next == self.received {
            self.next = 0;
            self.received = self.sock.recv_batch(&mut self.batch, !self.draining)?;
            if self.received == 0 {
                return Ok(if self.draining {
                    Progress::End
                } else {
                    Progress::Idle
                });
            }
        }
        self.deliver(&mut f);
        Ok(Progress::Block)
    }

    fn stats(&mut self) -> Result<SourceStats, EngineError> {
        let now = Instant::now();
        if now.duration_since(self.last_expiry) >= IDLE_EXPIRY / 10 {
            self.last_expiry = now;
            self.book.expire(now);
        }
        let mut l = self.ledger.lock().unwrap_or_else(PoisonError::into_inner);
        self.book.ledger(&mut l);
        Ok(self.book.stats())
    }

    fn stop_intake(&mut self) -> Result<(), EngineError> {
        self.draining = true;
        Ok(())
    }
}

/// Largest caplen a record can carry: the worker keeps records whole.
pub const SNAPLEN: u32 = record::MAX_CAPLEN as u32;

#[cfg(test)]
mod tests {
    use super::*;
    use tapflow_wire::datagram::{Builder, Header};
    use tapflow_wire::record::{ControlField, push_record};

    fn dg(seq: u64, before: u64, drops: u64, count: u16) -> Vec<u8> {
        dg_of(3, seq, before, drops, count)
    }

    fn dg_of(probe: u32, seq: u64, before: u64, drops: u64, count: u16) -> Vec<u8> {
        let mut recs = Vec::new();
        for i in 0..count {
            let ctl = ControlField::new(
                before.wrapping_add(u64::from(i)),
                Flags::default(),
                0,
                0,
                60,
            );
            push_record(&mut recs, ctl, &[0u8; 20]);
        }
        let mut buf = Vec::new();
        let mut b = Builder::start(&mut buf);
        b.push_raw(&recs);
        b.seal(&Header {
            count,
            probe,
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

    /// Accepts a datagram as the source does: a new interface is announced, then the datagram
    /// is taken again. Returns (records delivered, loss placed before them).
    fn take(b: &mut Book, bytes: &[u8], from: Option<SocketAddr>) -> (usize, u64) {
        loop {
            match b.accept(bytes, from, false, Instant::now()) {
                Accepted::NewInterface(_) => continue,
                Accepted::Nothing => return (0, 0),
                Accepted::Records { loss, records, .. } => {
                    return (Records::new(records).count(), loss);
                }
            }
        }
    }

    #[test]
    fn gaps_become_transit_loss_and_drops_probe_loss() {
        let mut b = Book::default();
        let from = Some("192.0.2.1:4000".parse().unwrap());
        assert_eq!(take(&mut b, &dg(0, 0, 0, 5), from), (5, 0));
        // Datagram 1 (5 records) lost; datagram 2 reports 2 records lost on the probe.
        assert_eq!(take(&mut b, &dg(2, 10, 2, 5), from), (5, 7));
        // Late arrival of datagram 1: not written twice, counted late.
        assert_eq!(take(&mut b, &dg(1, 5, 0, 5), from), (0, 0));
        // A drops-only datagram, then records: the loss lands before the next record.
        assert_eq!(take(&mut b, &dg(3, 15, 4, 0), from), (0, 0));
        assert_eq!(take(&mut b, &dg(4, 15, 4, 1), from), (1, 2));
        // Garbage and counters that go backwards.
        assert_eq!(take(&mut b, b"hello", from), (0, 0));
        assert_eq!(take(&mut b, &dg(5, 3, 4, 1), from), (0, 0));
        let p = b.probes[0].clone();
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
        let mut l = Ledger::default();
        b.ledger(&mut l);
        assert_eq!(l.bad_total(), 2);
        // Every record sent is accounted for: received, or lost on the probe or on the way.
        let s = b.stats();
        assert_eq!((s.received, s.dropped, s.dropped_in_transit), (20, 4, 5));
    }

    #[test]
    fn a_new_interface_is_announced_before_its_records() {
        let mut b = Book::default();
        let from = Some("192.0.2.1:4000".parse().unwrap());
        let d = dg(0, 0, 0, 3);
        let Accepted::NewInterface(info) = b.accept(&d, from, false, Instant::now()) else {
            panic!("the first datagram of a probe interface announces it");
        };
        assert_eq!(info.name.as_deref(), Some("probe 3 at 192.0.2.1"));
        assert_eq!(info.snaplen, 64);
        // Taken again, it delivers its records, counted once.
        assert!(matches!(
            b.accept(&d, from, false, Instant::now()),
            Accepted::Records {
                index: 0,
                loss: 0,
                ..
            }
        ));
        assert_eq!(b.probes[0].records, 3);
    }

    #[test]
    fn forged_counters_are_refused_and_never_wrap_the_sums() {
        let mut b = Book::default();
        let from = Some("192.0.2.1:4000".parse().unwrap());
        assert_eq!(take(&mut b, &dg(0, 0, 0, 5), from), (5, 0));
        // A leap of records-before no missing datagram could explain.
        assert_eq!(take(&mut b, &dg(1, u64::MAX - 4, 0, 1), from), (0, 0));
        // Drops that leap by almost 2^64.
        assert_eq!(take(&mut b, &dg(1, 5, u64::MAX - 3, 1), from), (0, 0));
        // A records-before that overflows with its own count.
        assert_eq!(take(&mut b, &dg(1, u64::MAX - 1, 0, 5), from), (0, 0));
        // A first datagram of a stream claiming records before sequence 0.
        let other = Some("192.0.2.2:4000".parse().unwrap());
        assert_eq!(take(&mut b, &dg(0, 1_000_000, 0, 1), other), (0, 0));
        // A first datagram whose sequence leaps near 2^64, with as many records as that could
        // carry: refused, so two such senders cannot fill the sums.
        let third = Some("192.0.2.3:4000".parse().unwrap());
        assert_eq!(
            take(&mut b, &dg(u64::MAX - 9, u64::MAX - 20, 0, 1), third),
            (0, 0)
        );
        // One datagram missing (its records are loss), then the stream goes on.
        assert_eq!(take(&mut b, &dg(2, 10, 0, 1), from), (1, 5));
        let p = &b.probes[0];
        assert_eq!((p.records, p.lost_in_transit, p.lost_on_probe), (6, 5, 0));
        let mut l = Ledger::default();
        b.ledger(&mut l);
        assert_eq!(l.bad_total(), 5);
        assert!(l.bad.iter().any(|x| x.2.contains("leapt")), "{:?}", l.bad);
        let s = b.stats();
        assert_eq!((s.received, s.dropped_in_transit), (11, 5));
    }

    /// Found by `fuzz/fuzz_targets/recv.rs`: a first datagram whose sequence leaps near 2^64
    /// could claim as many records lost in transit, and two such probes overflowed the sums.
    /// Such a leap is refused now, and the sums saturate whatever the probes hold.
    #[test]
    fn totals_saturate_over_forged_leaps() {
        let mut b = Book::default();
        let from = Some("192.0.2.1:4000".parse().unwrap());
        for probe in [1, 2] {
            let d = dg_of(probe, u64::MAX - 1, u64::MAX - 10, 0, 1);
            assert_eq!(take(&mut b, &d, from), (0, 0));
        }
        assert_eq!(b.stats().dropped_in_transit, 0);
        for p in &mut b.probes {
            p.lost_in_transit = u64::MAX - 10;
            p.records = 1;
        }
        let s = b.stats();
        assert_eq!((s.received, s.dropped_in_transit), (u64::MAX, u64::MAX));
        let mut l = Ledger::default();
        b.ledger(&mut l);
        assert_eq!(l.totals().2, u64::MAX);
    }

    #[test]
    fn forged_probe_ids_fill_their_sources_share_and_idle_ones_expire() {
        let mut b = Book::default();
        let t0 = Instant::now();
        let forger_addr: SocketAddr = "198.51.100.7:4000".parse().unwrap();
        let forger = Some(forger_addr);
        let mut announced = 0;
        for id in 0..5000 {
            if let Accepted::NewInterface(_) = b.accept(&dg_of(id, 0, 0, 0, 1), forger, false, t0) {
                announced += 1;
            }
        }
        assert_eq!(announced, MAX_INTERFACES_PER_SOURCE);
        // Another probe still gets in.
        let honest = Some("192.0.2.1:4000".parse().unwrap());
        assert!(matches!(
            b.accept(&dg_of(9, 0, 0, 0, 1), honest, false, t0),
            Accepted::NewInterface(_)
        ));
        // The honest probe keeps talking; the forged ids go quiet and expire.
        let later = t0 + IDLE_EXPIRY / 2;
        assert!(matches!(
            b.accept(&dg_of(9, 0, 0, 0, 1), honest, false, later),
            Accepted::Records { .. }
        ));
        b.expire(t0 + IDLE_EXPIRY + Duration::from_secs(1));
        assert_eq!(b.interfaces.len(), 1);
        assert!(!b.per_source.contains_key(&forger_addr.ip()));
        // The forger's address may announce probes again, within its share.
        assert!(matches!(
            b.accept(&dg_of(77, 0, 0, 0, 1), forger, false, later),
            Accepted::NewInterface(_)
        ));
    }

    #[test]
    fn allow_lists_read_prefixes_with_host_bits_as_their_network() {
        let c = Prefix::parse_covering("10.1.2.3/16").unwrap();
        assert!(c.contains_ip("10.1.200.3".parse().unwrap()));
        assert!(!c.contains_ip("10.2.0.1".parse().unwrap()));
        assert!(c.contains_ip("::ffff:10.1.0.9".parse().unwrap()));
        assert!(!c.contains_ip("2001:db8::1".parse().unwrap()));
        let host = Prefix::parse_covering("192.0.2.7").unwrap();
        assert!(host.contains_ip("192.0.2.7".parse().unwrap()));
        assert!(Prefix::parse_covering("10.0.0.0/33").is_err());
        assert!(Prefix::parse_covering("nonsense").is_err());
    }
}
