//! The forwarding sink: packs a worker's header records into batch datagrams and sends them to
//! one or more collectors over UDP (`header-collection-gigabit` §3.3.3, "header forwarding").
//!
//! - `--balance flow` sends each record to the collector its symmetric 5-tuple hash picks, so
//!   both directions of a connection reach the same collector (frames without a 5-tuple go to
//!   the first); `--balance rr` hands whole datagrams to the collectors in turn, as the paper.
//! - A datagram leaves when the next record would not fit, or when its first record is older
//!   than the flush interval (checked at the end of every block: the worker polls at least that
//!   often), so quiet links are not held back.
//! - Sends are batched with `sendmmsg` on non-blocking sockets. A refused send (`EAGAIN`,
//!   `ENOBUFS`, `ECONNREFUSED`, ...) never waits: its records are counted as failed and added
//!   to the `drops` the next datagram to that collector carries, so the collector still knows
//!   exactly how many records are missing and where.
//! - Sequence numbers and record counts are kept per collector, so a collector only sees a gap
//!   for datagrams it should have received.
//!
//! Buffers are pooled per collector; the steady state allocates nothing.

use std::net::SocketAddr;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use serde::Serialize;
use tapflow_sys::udp::{MMSG_BATCH, UdpSocket};
use tapflow_wire::LinkType;
use tapflow_wire::datagram::{self, Header};
use tapflow_wire::flowkey;
use tapflow_wire::record::{CONTROL_LEN, ControlField, MAX_CAPLEN, emit_record, record_len};

use crate::EngineError;
use crate::counters::Totals;
use crate::sink::record_sink::{Outcome, RecordSink, SinkLive};
use crate::source::InterfaceInfo;

/// How records are spread over collectors.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Balance {
    /// By the symmetric 5-tuple hash: a connection stays at one collector.
    Flow,
    /// Whole datagrams in turn (the paper's load balancing).
    RoundRobin,
}

/// Where and how to forward.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ForwardConfig {
    /// The collectors.
    pub destinations: Vec<SocketAddr>,
    /// How records are spread over them.
    pub balance: Balance,
    /// Largest UDP payload, i.e. datagram size (see [`payload_for_mtu`]).
    pub payload_max: usize,
    /// A datagram leaves at the latest this long after its first record.
    pub flush_after: Duration,
    /// The probe's id.
    pub probe: u32,
    /// This run's session number.
    pub session: u32,
    /// The worker's stream number (filled in per worker).
    pub stream: u16,
}

/// Per-collector send buffer asked for: room for bursts between two ends of block.
const SNDBUF: usize = 4 << 20;

/// The least MTU every IPv4 host takes (RFC 791): the floor of `--mtu` and `--export-mtu`.
pub const MIN_MTU: u32 = 576;

/// The UDP payload that fits an IP packet of `mtu` bytes to `dest` (IPv4: − 28, IPv6: − 48),
/// at most [`datagram::MAX_DATAGRAM`].
pub fn payload_for_mtu(mtu: u32, dest: &SocketAddr) -> usize {
    let overhead = if dest.is_ipv4() { 28 } else { 48 };
    (mtu as usize)
        .saturating_sub(overhead)
        .min(datagram::MAX_DATAGRAM)
}

/// The MTU of the route to `dest` (`IP_MTU` on a connected socket).
pub fn route_mtu(dest: SocketAddr) -> Result<u32, EngineError> {
    Ok(UdpSocket::connect(dest)?.path_mtu()?)
}

/// Whether a datagram of `payload_max` bytes carries the record of `caplen` packet bytes beside
/// the datagram header.
#[inline]
pub fn carries(payload_max: usize, caplen: usize) -> bool {
    datagram::HEADER_LEN + record_len(caplen) <= payload_max
}

/// Whether every record of a capture keeping `snaplen` bytes fits a datagram of `payload_max`
/// bytes (a record carries at most [`MAX_CAPLEN`] bytes, whatever the snaplen).
pub fn snaplen_fits(snaplen: u32, payload_max: usize) -> bool {
    carries(payload_max, (snaplen as usize).min(MAX_CAPLEN))
}

/// A session number for this run, never 0: the wall clock's nanoseconds folded to 32 bits and
/// mixed with the process id, so a collector tells a restarted probe from the one before.
pub fn session_id() -> u32 {
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64);
    ((now ^ now >> 32) as u32 ^ std::process::id().rotate_left(16)).max(1)
}

/// What a forwarding sink sent to one collector.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct CollectorReport {
    /// The collector's address.
    pub collector: SocketAddr,
    /// Datagrams the kernel accepted for it.
    pub datagrams: u64,
    /// Records in them.
    pub records: u64,
}

/// What a forwarding sink did, per collector and in total.
///
/// As JSON: `{"records":…,"datagrams":…,"failed":…,"send_errors":…,"last_errno":…,
/// "collectors":[{"collector":"ADDR:PORT","datagrams":…,"records":…},…]}`.
#[derive(Debug, Default, Clone, PartialEq, Eq, Serialize)]
pub struct ForwardReport {
    /// Records sent, over all collectors.
    pub records: u64,
    /// Datagrams the kernel accepted, over all collectors.
    pub datagrams: u64,
    /// Records that could not be sent (refused sends, records larger than a datagram).
    pub failed: u64,
    /// Refused `sendmmsg` calls.
    pub send_errors: u64,
    /// The errno of the last refused send.
    pub last_errno: Option<i32>,
    /// Per collector, in the order given.
    pub collectors: Vec<CollectorReport>,
}

impl Outcome for ForwardReport {
    /// Adds another worker's report (collectors matched by position).
    fn add(&mut self, o: &ForwardReport) {
        for (i, d) in o.collectors.iter().enumerate() {
            match self.collectors.get_mut(i) {
                Some(m) => {
                    m.datagrams += d.datagrams;
                    m.records += d.records;
                }
                None => self.collectors.push(*d),
            }
        }
        self.datagrams += o.datagrams;
        self.records += o.records;
        self.failed += o.failed;
        self.send_errors += o.send_errors;
        self.last_errno = o.last_errno.or(self.last_errno);
    }
}

/// A datagram buffer of fixed size, filled in place: records are written where they go, with
/// no growth check and no zero-fill per record.
#[derive(Debug)]
struct DatagramBuf {
    buf: Box<[u8]>,
    len: usize,
}

impl DatagramBuf {
    fn new(size: usize) -> DatagramBuf {
        DatagramBuf {
            buf: vec![0; size].into_boxed_slice(),
            len: 0,
        }
    }

    /// Starts a datagram: room for the header, filled in when it is sealed.
    fn start(&mut self) {
        self.len = datagram::HEADER_LEN;
    }

    /// Appends one header record; the caller checked that it fits.
    #[inline]
    fn push_record(&mut self, ctl: &ControlField, data: &[u8]) {
        let total = record_len(data.len());
        emit_record(&mut self.buf[self.len..self.len + total], *ctl, data);
        self.len += total;
    }
}

impl AsRef<[u8]> for DatagramBuf {
    fn as_ref(&self) -> &[u8] {
        &self.buf[..self.len]
    }
}

/// One collector's state.
#[derive(Debug)]
struct Dest {
    addr: SocketAddr,
    sock: UdpSocket,
    /// The datagram being filled (header room included).
    open: DatagramBuf,
    open_count: u16,
    open_interface: u32,
    open_since: Instant,
    /// Records lost on the probe so far, for this collector: every one of them precedes the
    /// open datagram's first record. Sent cumulatively in `drops`.
    lost: u64,
    /// The largest `drops` value the kernel took.
    lost_sent: u64,
    /// Sealed datagrams waiting for `sendmmsg`, with (records, drops) of each.
    queue: Vec<DatagramBuf>,
    queue_meta: Vec<(u16, u64)>,
    free: Vec<DatagramBuf>,
    /// Datagrams and records sent to this collector so far (the next header's values).
    sequence: u64,
    records_before: u64,
    datagrams: u64,
    records: u64,
}

/// The forwarding sink of one worker.
#[derive(Debug)]
pub struct ForwardSink {
    cfg: ForwardConfig,
    dests: Vec<Dest>,
    rr_next: usize,
    /// (link type, snaplen) per announced interface.
    interfaces: Vec<(LinkType, u32)>,
    /// Losses not yet placed before a record in a datagram.
    drops: u64,
    failed: u64,
    send_errors: u64,
    last_errno: Option<i32>,
}

impl ForwardSink {
    /// Opens one connected, non-blocking socket per collector.
    pub fn new(cfg: ForwardConfig) -> Result<ForwardSink, EngineError> {
        if cfg.destinations.is_empty() {
            return Err(EngineError::Config(
                "--forward needs at least one HOST:PORT".into(),
            ));
        }
        if cfg.payload_max < datagram::HEADER_LEN + CONTROL_LEN || cfg.payload_max > 65_527 {
            return Err(EngineError::Config(format!(
                "datagram size {} is out of range: {} to 65527",
                cfg.payload_max,
                datagram::HEADER_LEN + CONTROL_LEN
            )));
        }
        let mut dests = Vec::new();
        for &addr in &cfg.destinations {
            let sock = UdpSocket::connect(addr)?;
            // Best effort: a smaller buffer only means more refused sends, which are counted.
            let _ = sock.set_sndbuf(SNDBUF);
            dests.push(Dest {
                addr,
                sock,
                open: DatagramBuf::new(cfg.payload_max),
                open_count: 0,
                open_interface: 0,
                open_since: Instant::now(),
                lost: 0,
                lost_sent: 0,
                queue: Vec::with_capacity(MMSG_BATCH),
                queue_meta: Vec::with_capacity(MMSG_BATCH),
                free: Vec::with_capacity(MMSG_BATCH),
                sequence: 0,
                records_before: 0,
                datagrams: 0,
                records: 0,
            });
        }
        Ok(ForwardSink {
            cfg,
            dests,
            rr_next: 0,
            interfaces: Vec::new(),
            drops: 0,
            failed: 0,
            send_errors: 0,
            last_errno: None,
        })
    }
}

impl RecordSink for ForwardSink {
    type Report = ForwardReport;

    fn wants_ip_sum(&self) -> bool {
        true
    }

    fn add_interface(&mut self, info: &InterfaceInfo) -> Result<(), EngineError> {
        self.interfaces.push((info.linktype, info.snaplen));
        Ok(())
    }

    #[inline]
    fn record(
        &mut self,
        interface: u32,
        drops_before: u64,
        ctl: &ControlField,
        data: &[u8],
    ) -> Result<(), EngineError> {
        self.drops += drops_before;
        let len = record_len(data.len());
        let payload_max = self.cfg.payload_max;
        if !carries(payload_max, data.len()) {
            // Cannot be carried at all: lost on the probe, reported before the next record.
            self.failed += 1;
            self.drops += 1;
            return Ok(());
        }
        let n = self.dests.len();
        let mut d = match self.cfg.balance {
            Balance::RoundRobin => self.rr_next,
            Balance::Flow if n == 1 => 0,
            Balance::Flow => {
                let linktype = self
                    .interfaces
                    .get(interface as usize)
                    .map_or(LinkType::Unknown(0), |&(l, _)| l);
                flowkey::pick(flowkey::symmetric_hash(linktype, data), n)
            }
        };
        let dest = &self.dests[d];
        if dest.open_count > 0
            && (dest.open_interface != interface
                || self.drops > 0
                || dest.open.len + len > payload_max)
        {
            self.seal(d);
            if self.cfg.balance == Balance::RoundRobin {
                d = self.rr_next;
            }
        }
        let dest = &mut self.dests[d];
        if dest.open_count == 0 {
            dest.open.start();
            dest.open_interface = interface;
            dest.open_since = Instant::now();
        }
        dest.lost += std::mem::take(&mut self.drops);
        dest.open.push_record(ctl, data);
        dest.open_count += 1;
        if dest.open_count == u16::MAX {
            self.seal(d);
        }
        Ok(())
    }

    fn end_of_block(
        &mut self,
        _totals: &Totals,
        _if_stats: Option<(u64, u64)>,
    ) -> Result<(), EngineError> {
        self.flush_old(self.cfg.flush_after);
        Ok(())
    }

    fn wake_within(&self) -> Option<Duration> {
        self.dests
            .iter()
            .filter(|d| d.open_count > 0)
            .map(|d| self.cfg.flush_after.saturating_sub(d.open_since.elapsed()))
            .min()
    }

    fn live(&self) -> SinkLive {
        SinkLive {
            forward_failed: self.failed,
            ..SinkLive::default()
        }
    }

    fn close(
        &mut self,
        _totals: &Totals,
        _if_stats: Option<(u64, u64)>,
    ) -> Result<ForwardReport, EngineError> {
        // Losses after the last record that reached a datagram go out with a datagram of their
        // own.
        if self.drops > 0 {
            let d = if self.cfg.balance == Balance::RoundRobin {
                self.rr_next
            } else {
                0
            };
            if self.dests[d].open_count > 0 {
                self.seal(d);
            }
            self.dests[d].lost += std::mem::take(&mut self.drops);
        }
        self.finish();
        Ok(self.report())
    }
}

impl ForwardSink {
    /// Writes the open datagram's header and queues it; sends the queue when it is full.
    fn seal(&mut self, d: usize) {
        let linktype_snap = |i: u32| {
            self.interfaces
                .get(i as usize)
                .map_or((0, 0), |&(l, s)| (l.to_u16(), s))
        };
        let (linktype, snaplen) = linktype_snap(self.dests[d].open_interface);
        let dest = &mut self.dests[d];
        if dest.open_count == 0 && dest.lost == dest.lost_sent {
            return;
        }
        if dest.open.len < datagram::HEADER_LEN {
            // A datagram that only carries drops (no record followed them).
            dest.open.start();
        }
        let h = Header {
            count: dest.open_count,
            probe: self.cfg.probe,
            session: self.cfg.session,
            stream: self.cfg.stream,
            linktype,
            snaplen,
            interface: dest.open_interface,
            sequence: dest.sequence,
            records_before: dest.records_before,
            drops: dest.lost,
        };
        h.emit(&mut dest.open.buf);
        dest.sequence += 1;
        dest.records_before += u64::from(dest.open_count);
        let fresh = dest
            .free
            .pop()
            .unwrap_or_else(|| DatagramBuf::new(self.cfg.payload_max));
        let full = std::mem::replace(&mut dest.open, fresh);
        dest.queue.push(full);
        dest.queue_meta.push((dest.open_count, dest.lost));
        dest.open_count = 0;
        if self.cfg.balance == Balance::RoundRobin {
            self.rr_next = (d + 1) % self.dests.len();
        }
        if self.dests[d].queue.len() >= MMSG_BATCH {
            self.send(d);
        }
    }

    /// Sends collector `d`'s queue. What the kernel refuses is dropped, its sequence numbers are
    /// taken back and its records join the losses the next datagram reports: all of them
    /// precede every record of the open datagram.
    fn send(&mut self, d: usize) {
        let dest = &mut self.dests[d];
        if dest.queue.is_empty() {
            return;
        }
        let out = dest.sock.send_batch(&dest.queue);
        for &(count, lost) in &dest.queue_meta[..out.sent] {
            dest.datagrams += 1;
            dest.records += u64::from(count);
            dest.lost_sent = dest.lost_sent.max(lost);
        }
        if let Some(e) = out.error {
            self.send_errors += 1;
            self.last_errno = e.raw_os_error();
            for &(count, _) in &dest.queue_meta[out.sent..] {
                dest.sequence -= 1;
                dest.records_before -= u64::from(count);
                dest.lost += u64::from(count);
                self.failed += u64::from(count);
            }
        }
        dest.queue_meta.clear();
        for b in dest.queue.drain(..) {
            dest.free.push(b);
        }
    }

    fn send_all(&mut self) {
        for d in 0..self.dests.len() {
            self.send(d);
        }
    }

    /// Seals datagrams whose first record waited `after` or longer, and sends everything queued.
    fn flush_old(&mut self, after: Duration) {
        for d in 0..self.dests.len() {
            let dest = &self.dests[d];
            if dest.open_count > 0 && dest.open_since.elapsed() >= after {
                self.seal(d);
            }
        }
        self.send_all();
    }

    /// Sends everything, including datagrams that only carry drops.
    fn finish(&mut self) {
        for d in 0..self.dests.len() {
            self.seal(d);
        }
        self.send_all();
        // Losses of sends refused just now: one last try to tell the collector (if this one is
        // refused too, the records are counted as failed here and nowhere else).
        for d in 0..self.dests.len() {
            self.seal(d);
            self.send(d);
        }
    }

    fn report(&self) -> ForwardReport {
        ForwardReport {
            collectors: self
                .dests
                .iter()
                .map(|d| CollectorReport {
                    collector: d.addr,
                    datagrams: d.datagrams,
                    records: d.records,
                })
                .collect(),
            datagrams: self.dests.iter().map(|d| d.datagrams).sum(),
            records: self.dests.iter().map(|d| d.records).sum(),
            failed: self.failed,
            send_errors: self.send_errors,
            last_errno: self.last_errno,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tapflow_sys::udp::RecvBatch;
    use tapflow_wire::datagram::Datagram;

    #[test]
    fn a_datagram_carries_a_record_if_header_and_record_fit() {
        // 56-byte header + 16-byte control field + 64 bytes = 136.
        assert!(carries(136, 64) && !carries(135, 64));
        // 1500-byte MTU over IPv4: 1472 bytes of payload, snaplen up to 1400 fits.
        let p = payload_for_mtu(1500, &"10.0.0.1:5000".parse().unwrap());
        assert!(snaplen_fits(1400, p) && !snaplen_fits(1401, p));
        // A record keeps at most 65535 bytes, which no datagram carries beside the header.
        assert!(!snaplen_fits(262_144, datagram::MAX_DATAGRAM));
        assert_eq!(
            snaplen_fits(262_144, 1 << 20),
            snaplen_fits(65_535, 1 << 20)
        );
    }

    #[test]
    fn sessions_are_never_zero() {
        assert_ne!(session_id(), 0);
    }

    #[test]
    fn reports_serialize_with_collectors() {
        let mut r = ForwardReport {
            records: 3,
            datagrams: 2,
            collectors: vec![CollectorReport {
                collector: "10.0.0.2:5000".parse().unwrap(),
                datagrams: 2,
                records: 3,
            }],
            ..ForwardReport::default()
        };
        r.add(&r.clone());
        assert_eq!(
            serde_json::to_string(&r).unwrap(),
            "{\"records\":6,\"datagrams\":4,\"failed\":0,\"send_errors\":0,\"last_errno\":null,\
             \"collectors\":[{\"collector\":\"10.0.0.2:5000\",\"datagrams\":4,\"records\":6}]}"
        );
    }
    use tapflow_wire::record::{Flags, Records};

    fn frame(sport: u16, dport: u16, rev: bool) -> Vec<u8> {
        let mut f = vec![0u8; 42];
        f[12..14].copy_from_slice(&[0x08, 0x00]);
        f[14] = 0x45;
        f[23] = 17;
        let (a, b) = ([10, 0, 0, 1], [10, 0, 0, 2]);
        let (s, d, sp, dp) = if rev {
            (b, a, dport, sport)
        } else {
            (a, b, sport, dport)
        };
        f[26..30].copy_from_slice(&s);
        f[30..34].copy_from_slice(&d);
        f[34..36].copy_from_slice(&sp.to_be_bytes());
        f[36..38].copy_from_slice(&dp.to_be_bytes());
        f
    }

    /// Hands `frames` to the sink as a worker would, `drops` lost before the first.
    fn feed(s: &mut ForwardSink, frames: &[Vec<u8>], first_ts: u64, drops: u64) {
        for (i, f) in frames.iter().enumerate() {
            let ctl =
                ControlField::new(first_ts + i as u64, Flags::default(), f.len() as u16, 0, 60);
            let d = if i == 0 { drops } else { 0 };
            s.record(0, d, &ctl, f).unwrap();
        }
        s.end_of_block(&Totals::default(), None).unwrap();
    }

    fn listeners(n: usize) -> Vec<UdpSocket> {
        (0..n)
            .map(|_| {
                let s = UdpSocket::bind("127.0.0.1:0".parse().unwrap()).unwrap();
                s.set_read_timeout(Duration::from_millis(200)).unwrap();
                s
            })
            .collect()
    }

    fn drain(s: &UdpSocket) -> Vec<(Header, Vec<u64>)> {
        let mut b = RecvBatch::new();
        let mut out = Vec::new();
        while s.recv_batch(&mut b, true).unwrap() > 0 {
            for i in 0..b.len() {
                let (bytes, _, _) = b.get(i).unwrap();
                let d = Datagram::parse(bytes).unwrap();
                let ts = Records::new(d.records())
                    .map(|r| r.unwrap().0.rxtime)
                    .collect();
                out.push((*d.header(), ts));
            }
        }
        out
    }

    fn sink(ls: &[UdpSocket], balance: Balance, payload_max: usize) -> ForwardSink {
        let mut s = ForwardSink::new(ForwardConfig {
            destinations: ls.iter().map(|l| l.local_addr().unwrap()).collect(),
            balance,
            payload_max,
            flush_after: Duration::from_secs(10),
            probe: 7,
            session: 99,
            stream: 0,
        })
        .unwrap();
        s.add_interface(&InterfaceInfo {
            linktype: LinkType::Ethernet,
            snaplen: 64,
            name: None,
            filter: None,
            max_frame: None,
        })
        .unwrap();
        s
    }

    #[test]
    fn flow_balance_keeps_both_directions_together_and_numbers_per_collector() {
        let ls = listeners(2);
        let mut s = sink(&ls, Balance::Flow, 1472);
        let frames: Vec<Vec<u8>> = (0..400u16)
            .map(|i| frame(1000 + i % 20, 80, i % 2 == 1))
            .collect();
        feed(&mut s, &frames, 0, 3);
        let r = s.close(&Totals::default(), None).unwrap();
        let fw = r;
        assert_eq!((fw.records, fw.failed), (400, 0));
        let got: Vec<_> = ls.iter().map(drain).collect();
        let mut seen = vec![None; 400];
        let mut drops = 0;
        for (c, dgs) in got.iter().enumerate() {
            drops += dgs.last().map_or(0, |(h, _)| h.drops);
            let mut before = 0;
            for (seq, (h, ts)) in dgs.iter().enumerate() {
                assert_eq!((h.sequence, h.records_before), (seq as u64, before));
                assert_eq!((h.probe, h.session, h.linktype, h.snaplen), (7, 99, 1, 64));
                assert!(datagram::HEADER_LEN + ts.len() * 64 <= 1472);
                before += u64::from(h.count);
                for &t in ts {
                    assert!(seen[t as usize].is_none());
                    seen[t as usize] = Some(c);
                }
            }
        }
        assert_eq!(drops, 3, "the drops reach exactly one collector");
        assert!(seen.iter().all(Option::is_some));
        for port in 0..20 {
            let at: std::collections::BTreeSet<_> = (0..400)
                .filter(|i| i % 20 == port)
                .map(|i| seen[i])
                .collect();
            assert_eq!(at.len(), 1, "flow {port} split over collectors");
        }
        assert!(
            got.iter().all(|g| !g.is_empty()),
            "20 flows all hashed to one collector"
        );
    }

    #[test]
    fn round_robin_alternates_whole_datagrams() {
        let ls = listeners(2);
        // Room for 4 records of 64 bytes per datagram.
        let mut s = sink(&ls, Balance::RoundRobin, datagram::HEADER_LEN + 4 * 64);
        let frames: Vec<Vec<u8>> = (0..40u16).map(|i| frame(i, 80, false)).collect();
        feed(&mut s, &frames, 0, 0);
        s.close(&Totals::default(), None).unwrap();
        let got: Vec<_> = ls.iter().map(drain).collect();
        assert_eq!((got[0].len(), got[1].len()), (5, 5));
        for (c, dgs) in got.iter().enumerate() {
            for (k, (_, ts)) in dgs.iter().enumerate() {
                let first = ((2 * k + c) * 4) as u64;
                assert_eq!(ts, &(first..first + 4).collect::<Vec<_>>());
            }
        }
    }

    #[test]
    fn refused_sends_become_drops_of_the_next_datagram() {
        let ls = listeners(1);
        let to = ls[0].local_addr().unwrap();
        let mut s = sink(&ls, Balance::Flow, 1472);
        // Close the collector: sends are refused (ECONNREFUSED) once the ICMP error is back.
        drop(ls);
        let mut failed_once = false;
        for k in 0..50u64 {
            let frames = vec![frame(1, 2, false); 3];
            feed(&mut s, &frames, k * 3, 0);
            s.flush_old(Duration::ZERO);
            if s.failed > 0 {
                failed_once = true;
                break;
            }
            std::thread::sleep(Duration::from_millis(2));
        }
        assert!(failed_once);
        // The collector comes back on the same port.
        let back = UdpSocket::bind(to).unwrap();
        back.set_read_timeout(Duration::from_millis(200)).unwrap();
        let failed = s.failed;
        let sent_before = s.dests[0].records;
        feed(&mut s, &[frame(1, 2, false)], 1000, 0);
        let r = s.close(&Totals::default(), None).unwrap();
        let got = drain(&back);
        let (h, ts) = got.last().unwrap();
        assert_eq!(ts, &vec![1000]);
        assert_eq!(
            h.drops, failed,
            "refused records reported before the next record"
        );
        assert_eq!(h.records_before, sent_before);
        assert_eq!(r.failed, failed);
    }
}
