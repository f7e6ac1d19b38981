//! The receiver's bookkeeping (`tapflow recv`) through its public door: a `DatagramSource`,
//! opened on loopback for each input, takes the datagrams the input describes, sent from four
//! loopback addresses, and is drained.
//!
//! 127.0.0.1 is an honest probe whose datagrams may be lost (not sent) or repeated late; the
//! others forge counters, ids and bytes. Whatever they send, every datagram is accepted, late,
//! bad or refused, every record counted is delivered, and the honest probe's records, transit
//! loss, probe loss and the loss placed before its records are exact.
#![no_main]

use std::collections::HashMap;
use std::net::{IpAddr, Ipv4Addr, SocketAddr, UdpSocket};
use std::sync::{Arc, Mutex, OnceLock};

use libfuzzer_sys::fuzz_target;
use tapflow_engine::source::datagrams::{self, DatagramInput, Ledger};
use tapflow_wire::prefix::Prefix;
use tapflow_engine::source::{PacketSource, Progress};
use tapflow_wire::Flags;
use tapflow_wire::datagram::{Builder, Header};
use tapflow_wire::record::{ControlField, push_record};

/// Each input opens a source, which allocates its receive slots (4 MiB); ASan's quarantine of
/// freed memory would keep 256 MiB of them and halve the executions per second.
#[unsafe(no_mangle)]
pub extern "C" fn __asan_default_options() -> *const std::ffi::c_char {
    c"quarantine_size_mb=0".as_ptr()
}

/// Datagrams one input may send: far below the receive buffer.
const MAX_OPS: usize = 256;
const HONEST: Ipv4Addr = Ipv4Addr::new(127, 0, 0, 1);

/// One socket on each of 127.0.0.1 to 127.0.0.4, kept across inputs.
fn senders() -> &'static [UdpSocket; 4] {
    static S: OnceLock<[UdpSocket; 4]> = OnceLock::new();
    S.get_or_init(|| {
        std::array::from_fn(|i| {
            UdpSocket::bind((Ipv4Addr::new(127, 0, 0, i as u8 + 1), 0)).expect("bind a sender")
        })
    })
}

/// Reads the input a byte at a time; zeros once it runs out.
struct Input<'a>(&'a [u8]);

impl Input<'_> {
    fn u8(&mut self) -> u8 {
        let Some((&b, rest)) = self.0.split_first() else {
            return 0;
        };
        self.0 = rest;
        b
    }

    /// Mostly small (so that counters meet), sometimes any 64-bit value.
    fn counter(&mut self) -> u64 {
        let b = self.u8();
        if b < 0xf0 {
            return u64::from(b);
        }
        (0..8).fold(0, |v, _| v << 8 | u64::from(self.u8()))
    }
}

fn datagram(h: &Header) -> Vec<u8> {
    let mut recs = Vec::new();
    for k in 0..h.count {
        let ctl = ControlField::new(h.sequence << 8 | u64::from(k), Flags::default(), 0, 0, 60);
        push_record(&mut recs, ctl, &[0xab; 20]);
    }
    let mut buf = Vec::new();
    let mut b = Builder::start(&mut buf);
    b.push_raw(&recs);
    b.seal(h);
    buf
}

/// What the honest probe sent, and what the receiver must make of it.
#[derive(Default)]
struct Honest {
    /// Every datagram built, in order.
    sent: Vec<Vec<u8>>,
    records_before: u64,
    drops: u64,
    /// The receiver's next expected sequence: one past the last datagram delivered.
    next: u64,
    /// Records of datagrams not delivered since the last one delivered.
    unseen: u64,
    drops_seen: u64,
    datagrams: u64,
    records: u64,
    transit: u64,
    late: u64,
    /// Loss not yet placed before a record, and loss placed.
    pending: u64,
    placed: u64,
}

impl Honest {
    /// The next datagram: `Some` if it is sent, then updates what the receiver must count.
    fn next(&mut self, b: u8) -> Option<Vec<u8>> {
        let count = u16::from(b & 7);
        let lost = b & 8 != 0;
        let h = Header {
            count,
            probe: 1,
            session: 1,
            linktype: 1,
            snaplen: 64,
            sequence: self.sent.len() as u64,
            records_before: self.records_before,
            drops: self.drops,
            ..Header::default()
        };
        self.records_before += u64::from(count);
        self.drops += u64::from(b >> 4);
        self.sent.push(datagram(&h));
        if lost {
            self.unseen += u64::from(count);
            return None;
        }
        let loss = self.unseen + (h.drops - self.drops_seen);
        self.next = h.sequence + 1;
        self.transit += self.unseen;
        self.unseen = 0;
        self.drops_seen = h.drops;
        self.datagrams += 1;
        self.records += u64::from(count);
        self.pending += loss;
        if count > 0 {
            self.placed += self.pending;
            self.pending = 0;
        }
        self.sent.last().cloned()
    }

    /// A datagram sent before (lost or not) sent again after a later one: late.
    fn replay(&mut self, b: u8) -> Option<Vec<u8>> {
        let seq = self.next.checked_sub(1 + u64::from(b))?;
        self.late += 1;
        Some(self.sent[seq as usize].clone())
    }
}

/// A datagram from a forger: well formed, with ids and counters from the input.
fn forged(input: &mut Input<'_>) -> Vec<u8> {
    let ids = input.u8();
    datagram(&Header {
        count: u16::from(ids & 3),
        probe: u32::from(ids >> 2 & 3),
        interface: u32::from(ids >> 4 & 1),
        session: u32::from(ids >> 5 & 1),
        stream: u16::from(ids >> 6),
        linktype: u16::from(input.u8()),
        snaplen: u32::from(input.u8()),
        sequence: input.counter(),
        records_before: input.counter(),
        drops: input.counter(),
    })
}

#[derive(Default)]
struct Seen {
    packets: u64,
    drops_before: u64,
    last_rxtime: Option<u64>,
    /// A record came with a time not after the one before it.
    out_of_order: bool,
}

fuzz_target!(|data: &[u8]| {
    let mut input = Input(data);
    let flags = input.u8();
    // With an allow list, 127.0.0.4 is refused.
    let allow = if flags & 1 != 0 {
        vec!["127.0.0.0/30".parse::<Prefix>().unwrap()]
    } else {
        Vec::new()
    };
    let ledger = Arc::new(Mutex::new(Ledger::default()));
    let opened = datagrams::open(&DatagramInput {
        listen: (HONEST, 0).into(),
        allow,
        rcvbuf: 4 << 20,
        ledger: Arc::clone(&ledger),
    })
    .expect("open a receiver on loopback");
    let mut src = opened.sources.into_iter().next().unwrap();
    let to: SocketAddr = opened.input.parse().unwrap();

    let mut honest = Honest::default();
    let mut sent = 0u64;
    for _ in 0..MAX_OPS {
        if input.0.is_empty() {
            break;
        }
        let op = input.u8();
        let from = usize::from(op >> 6);
        let bytes = match op & 3 {
            0 => honest.next(input.u8()),
            1 => honest.replay(input.u8()),
            2 => Some(forged(&mut input)),
            _ => {
                let n = usize::from(input.u8()).min(input.0.len());
                let (raw, rest) = input.0.split_at(n);
                input.0 = rest;
                Some(raw.to_vec())
            }
        };
        let Some(bytes) = bytes else { continue };
        // The honest probe's datagrams come from its own address, the forgers' from the others.
        let from = if op & 3 < 2 { 0 } else { 1 + from % 3 };
        senders()[from]
            .send_to(&bytes, to)
            .expect("send on loopback");
        sent += 1;
    }

    src.stop_intake().unwrap();
    let mut seen: HashMap<u32, Seen> = HashMap::new();
    let mut interfaces_ok = true;
    loop {
        let known = src.interfaces().len();
        let progress = src
            .next_block(0, usize::MAX, |p| {
                interfaces_ok &= (p.interface as usize) < known;
                assert!(p.data.len() as u64 <= u64::from(p.len));
                let s = seen.entry(p.interface).or_default();
                s.packets += 1;
                s.drops_before = s.drops_before.saturating_add(p.drops_before);
                s.out_of_order |= s.last_rxtime.is_some_and(|t| p.ts_ns <= t);
                s.last_rxtime = Some(p.ts_ns);
            })
            .unwrap();
        if progress == Progress::End {
            break;
        }
    }
    assert!(interfaces_ok, "a packet names an interface not announced");
    let stats = src.stats().unwrap();
    let l = ledger.lock().unwrap();

    assert_eq!(src.interfaces().len(), l.probes.len());
    let (dgrams, records, transit, on_probe) = l.totals();
    let late: u64 = l.probes.iter().map(|p| p.late).sum();
    assert_eq!(
        sent,
        dgrams + late + l.bad_total() + l.refused,
        "every datagram is accepted, late, bad or refused: {l:?}"
    );
    assert_eq!(
        stats.received,
        records.saturating_add(on_probe).saturating_add(transit)
    );
    assert_eq!(stats.dropped, on_probe);
    assert_eq!(stats.dropped_in_transit, transit);
    for (i, p) in l.probes.iter().enumerate() {
        assert_eq!(p.index as usize, i);
        let s = seen.remove(&p.index).unwrap_or_default();
        assert_eq!(s.packets, p.records, "records counted are delivered: {p:?}");
        assert!(s.drops_before <= p.lost_in_transit.saturating_add(p.lost_on_probe));
        if p.source == Some(IpAddr::V4(HONEST)) {
            assert_eq!(
                (
                    p.datagrams,
                    p.records,
                    p.lost_in_transit,
                    p.lost_on_probe,
                    p.late
                ),
                (
                    honest.datagrams,
                    honest.records,
                    honest.transit,
                    honest.drops_seen,
                    honest.late
                ),
                "the honest probe's accounting"
            );
            assert_eq!(
                s.drops_before, honest.placed,
                "loss placed before its records"
            );
            assert!(
                !s.out_of_order,
                "the honest probe's records in its order, once each"
            );
        }
    }
    assert!(seen.is_empty(), "packets of an interface with no report");
    if !l
        .probes
        .iter()
        .any(|p| p.source == Some(IpAddr::V4(HONEST)))
    {
        assert_eq!(honest.datagrams, 0, "the honest probe was never announced");
    }
});
