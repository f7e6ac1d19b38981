//! NetFlow version 5 export, for the collectors that take nothing newer: a fixed 24-byte
//! header and up to 30 fixed 48-byte records, uniflow and IPv4 only.
//!
//! ```text
//! header (24)                                  record (48)
//! +-----------------------------------+        +-----------------------------------+
//! | version 5        | count          |        | srcaddr                           |
//! | sys_uptime (ms)                   |        | dstaddr                           |
//! | unix_secs                         |        | nexthop (0)                       |
//! | unix_nsecs                        |        | input          | output (0)       |
//! | flow_sequence                     |        | dPkts                             |
//! | engine_type | engine_id | sampling|        | dOctets                           |
//! +-----------------------------------+        | First (sysUptime ms)              |
//!                                              | Last (sysUptime ms)               |
//!                                              | srcport        | dstport          |
//!                                              | pad1 | tcp_flags | prot | tos (0) |
//!                                              | src_as (0)     | dst_as (0)       |
//!                                              | src_mask | dst_mask | pad2        |
//!                                              +-----------------------------------+
//! ```
//!
//! A biflow becomes one record per direction that has packets; the reverse record swaps
//! addresses and ports (for ICMP its ports are 0: the flow record keeps only the initiator's
//! type and code, and the usual reply, an echo reply, is type 0 code 0). IPv6 records and
//! records without packets cannot be carried and are counted in [`Stats::unencodable`].
//! Counters saturate at `u32::MAX`, the interface index at `u16::MAX`. `flow_sequence` counts
//! the records sent before the packet. Times are sysUptime milliseconds from
//! [`Config::start_ns`], wrapping at 2^32 like a router's.

use crate::bytes::{Put, read_u16, read_u32};
use crate::flowdecode::{DecodeError, Emit, Exporter, versioned_header};
use crate::flowexport::{saturate, unix_secs};
use crate::flowrecord::{Counters, FlowRecord};
use crate::netflow9::uptime_ms;

pub use crate::flowexport::{ConfigError, Stats};

/// `version` in the packet header.
pub const VERSION: u16 = 5;

/// Length of the packet header.
pub const HEADER_LEN: usize = 24;

/// Length of a flow record.
pub const RECORD_LEN: usize = 48;

/// Most records in one packet.
pub const MAX_RECORDS: usize = 30;

/// Length of a full packet (1464 octets); a larger `max_message_len` changes nothing.
pub const MAX_MESSAGE_LEN: usize = HEADER_LEN + MAX_RECORDS * RECORD_LEN;

/// Smallest `max_message_len`: the header and one record.
pub const MIN_MESSAGE_LEN: usize = HEADER_LEN + RECORD_LEN;

/// How an [`Encoder`] writes to one collector.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Config {
    /// Largest packet in octets (the UDP payload), at least [`MIN_MESSAGE_LEN`].
    pub max_message_len: usize,
    /// When the exporter "booted", ns since 1970: sys_uptime and First/Last count from here.
    pub start_ns: u64,
}

impl Config {
    /// Full packets of 30 records.
    pub fn new(start_ns: u64) -> Config {
        Config {
            max_message_len: MAX_MESSAGE_LEN,
            start_ns,
        }
    }
}

/// The NetFlow v5 encoder for one collector: a reusable packet buffer and the flow sequence.
#[derive(Debug)]
pub struct Encoder {
    cfg: Config,
    buf: Box<[u8]>,
    /// Records per packet: 30, or fewer if `max_message_len` is small.
    capacity: usize,
    /// Records sent, modulo 2^32.
    flow_sequence: u32,
    stats: Stats,
}

impl Encoder {
    /// Checks `cfg` and allocates the packet buffer.
    pub fn new(cfg: Config) -> Result<Encoder, ConfigError> {
        // Longer packets are fine: at most MAX_RECORDS records go in one.
        ConfigError::check_len(
            "NetFlow v5",
            cfg.max_message_len,
            MIN_MESSAGE_LEN,
            usize::MAX,
        )?;
        let capacity = ((cfg.max_message_len - HEADER_LEN) / RECORD_LEN).min(MAX_RECORDS);
        Ok(Encoder {
            cfg,
            buf: vec![0; HEADER_LEN + capacity * RECORD_LEN].into_boxed_slice(),
            capacity,
            flow_sequence: 0,
            stats: Stats::default(),
        })
    }

    /// The configuration.
    pub fn config(&self) -> &Config {
        &self.cfg
    }

    /// Moves the sysUptime origin ([`Config::start_ns`]), for an exporter that learns its "boot
    /// time" only with the first flow; meant for before the first packet.
    pub fn set_start_ns(&mut self, start_ns: u64) {
        self.cfg.start_ns = start_ns;
    }

    /// What the encoder has done so far.
    pub fn stats(&self) -> Stats {
        self.stats
    }

    /// The flow sequence the next packet will carry.
    pub fn sequence(&self) -> u32 {
        self.flow_sequence
    }

    /// Encodes `records` into packets of at most 30 records and `max_message_len` octets and
    /// calls `out` with each; `now_ns` (ns since 1970) is the export time.
    pub fn encode(&mut self, records: &[FlowRecord], now_ns: u64, out: &mut dyn FnMut(&[u8])) {
        let mut n = 0;
        for r in records {
            if r.ipv6 || (r.fwd.packets == 0 && r.rev.packets == 0) {
                self.stats.unencodable += 1;
                continue;
            }
            for reverse in [false, true] {
                let c = if reverse { &r.rev } else { &r.fwd };
                if c.packets == 0 {
                    continue;
                }
                let mut w = Put::at(&mut self.buf, HEADER_LEN + n * RECORD_LEN);
                write_record(&mut w, r, c, reverse, self.cfg.start_ns);
                n += 1;
                if n == self.capacity {
                    self.flush(n, now_ns, out);
                    n = 0;
                }
            }
        }
        if n > 0 {
            self.flush(n, now_ns, out);
        }
    }

    /// Does nothing: v5 has no templates to refresh. Here so every encoder is driven alike.
    pub fn tick(&mut self, _now_ns: u64, _out: &mut dyn FnMut(&[u8])) {}

    /// Writes the header for `n` records and hands the packet to `out`.
    fn flush(&mut self, n: usize, now_ns: u64, out: &mut dyn FnMut(&[u8])) {
        let mut h = Put::at(&mut self.buf, 0);
        h.u16(VERSION);
        h.u16(n as u16);
        h.u32(uptime_ms(now_ns, self.cfg.start_ns));
        h.u32(unix_secs(now_ns));
        h.u32((now_ns % 1_000_000_000) as u32);
        h.u32(self.flow_sequence);
        h.u8(0); // engine_type
        h.u8(0); // engine_id
        h.u16(0); // sampling_interval: not sampled
        out(&self.buf[..HEADER_LEN + n * RECORD_LEN]);
        self.flow_sequence = self.flow_sequence.wrapping_add(n as u32);
        self.stats.messages += 1;
        self.stats.records += n as u64;
    }
}

/// Writes the direction `c` of `r` (the responder's if `reverse`) as one record.
fn write_record(w: &mut Put<'_>, r: &FlowRecord, c: &Counters, reverse: bool, start_ns: u64) {
    let (src, dst, sport, dport) = match (reverse, r.is_icmp()) {
        (false, _) => (&r.src, &r.dst, r.sport, r.dport),
        (true, false) => (&r.dst, &r.src, r.dport, r.sport),
        (true, true) => (&r.dst, &r.src, 0, 0),
    };
    w.bytes(&src[..4]);
    w.bytes(&dst[..4]);
    w.u32(0); // nexthop
    w.u16(u16::try_from(r.interface).unwrap_or(u16::MAX));
    w.u16(0); // output
    w.u32(saturate(c.packets));
    w.u32(saturate(c.octets));
    w.u32(uptime_ms(c.first_ns, start_ns));
    w.u32(uptime_ms(c.last_ns, start_ns));
    w.u16(sport);
    w.u16(dport);
    w.u8(0); // pad1
    w.u8(c.tcp_flags as u8);
    w.u8(r.proto);
    w.u8(0); // tos
    w.u16(0); // src_as
    w.u16(0); // dst_as
    w.u8(0); // src_mask
    w.u8(0); // dst_mask
    w.u16(0); // pad2
}

// Collection: decoding packets from any NetFlow v5 exporter (see `flowdecode`).

/// The header of a packet being decoded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Header {
    pub count: usize,
    pub sys_uptime_ms: u32,
    pub export_ns: u64,
    pub flow_sequence: u32,
    pub engine_type: u8,
    pub engine_id: u8,
    /// The 14-bit sampling interval (the top two bits, the mode, dropped).
    pub sampling: u16,
}

impl Header {
    /// The header of `msg`, after checking the version and that its records are there.
    pub(crate) fn parse(msg: &[u8]) -> Result<Header, DecodeError> {
        let h = versioned_header::<HEADER_LEN>(msg, "NetFlow v5", "NetFlow v5 header", VERSION)?;
        let count = usize::from(read_u16(&h[2..]));
        let room = (msg.len() - HEADER_LEN) / RECORD_LEN;
        if count > room {
            return Err(DecodeError::BadLength {
                unit: "records",
                declared: count,
                actual: room,
            });
        }
        Ok(Header {
            count,
            sys_uptime_ms: read_u32(&h[4..]),
            export_ns: u64::from(read_u32(&h[8..])) * 1_000_000_000
                + u64::from(read_u32(&h[12..]).min(999_999_999)),
            flow_sequence: read_u32(&h[16..]),
            engine_type: h[20],
            engine_id: h[21],
            sampling: read_u16(&h[22..]) & 0x3fff,
        })
    }

    /// The domain: `engine_type << 8 | engine_id`.
    pub(crate) fn domain(&self) -> u32 {
        u32::from(self.engine_type) << 8 | u32::from(self.engine_id)
    }
}

/// Decodes the records of `msg`, whose header `h` was checked, for exporter state `ex`.
pub(crate) fn decode(h: &Header, msg: &[u8], ex: &mut Exporter, emit: &mut Emit<'_, '_>) {
    let sampling = u32::from(h.sampling.max(1));
    let at = |up: u32| {
        h.export_ns
            .saturating_sub(u64::from(h.sys_uptime_ms.wrapping_sub(up)) * 1_000_000)
    };
    let records = msg[HEADER_LEN..].chunks_exact(RECORD_LEN).take(h.count);
    for rec in records {
        let Some(rec) = rec.first_chunk::<RECORD_LEN>() else {
            break;
        };
        let mut r = FlowRecord {
            proto: rec[38],
            sport: read_u16(&rec[32..]),
            dport: read_u16(&rec[34..]),
            interface: u32::from(read_u16(&rec[12..])),
            ..FlowRecord::default()
        };
        r.src[..4].copy_from_slice(&rec[0..4]);
        r.dst[..4].copy_from_slice(&rec[4..8]);
        if r.is_icmp() {
            // Type and code in the destination port; some exporters use the source port.
            if r.dport == 0 {
                r.dport = r.sport;
            }
            r.sport = 0;
        }
        let s = u64::from(sampling);
        r.fwd = Counters {
            packets: u64::from(read_u32(&rec[16..])) * s,
            octets: u64::from(read_u32(&rec[20..])) * s,
            tcp_flags: u16::from(rec[37]),
            first_ns: at(read_u32(&rec[24..])),
            last_ns: at(read_u32(&rec[28..])),
        };
        r.fwd.last_ns = r.fwd.last_ns.max(r.fwd.first_ns);
        emit.flow(r, u32::from(read_u16(&rec[14..])), sampling);
    }
    ex.sequence
        .observe(h.flow_sequence, h.count as u32, 0)
        .add_to(emit.summary);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bytes::{read_u16, read_u32};
    use crate::ipfix::tests::tcp;
    use proptest::prelude::*;

    const T0: u64 = 1_700_000_000_000_000_000;
    /// The exporter started 1000.25 s before T0.
    const START: u64 = T0 - 1_000_250_000_000;

    fn encoder(max: usize) -> Encoder {
        Encoder::new(Config {
            max_message_len: max,
            start_ns: START,
        })
        .unwrap()
    }

    fn collect(enc: &mut Encoder, records: &[FlowRecord], now_ns: u64) -> Vec<Vec<u8>> {
        let mut v = Vec::new();
        enc.encode(records, now_ns, &mut |m| v.push(m.to_vec()));
        v
    }

    fn records(p: &[u8]) -> Vec<&[u8]> {
        assert_eq!(
            p.len(),
            HEADER_LEN + usize::from(read_u16(&p[2..])) * RECORD_LEN
        );
        p[HEADER_LEN..].chunks(RECORD_LEN).collect()
    }

    #[test]
    fn header_fields() {
        let mut enc = encoder(MAX_MESSAGE_LEN);
        let now = T0 + 5_123_456_789;
        let p = &collect(&mut enc, &[tcp(false)], now)[0];
        assert_eq!(p.len(), HEADER_LEN + 2 * RECORD_LEN);
        assert_eq!(read_u16(p), 5);
        assert_eq!(read_u16(&p[2..]), 2, "a biflow is two records");
        assert_eq!(read_u32(&p[4..]), 1_005_373, "1000.25 s + 5.123 s");
        assert_eq!(read_u32(&p[8..]), 1_700_000_005);
        assert_eq!(read_u32(&p[12..]), 123_456_789);
        assert_eq!(read_u32(&p[16..]), 0);
        assert_eq!(&p[20..24], &[0, 0, 0, 0], "engine type, id, not sampled");
    }

    #[test]
    fn biflow_becomes_forward_then_swapped_reverse_record() {
        let mut enc = encoder(MAX_MESSAGE_LEN);
        let p = &collect(&mut enc, &[tcp(false)], T0)[0];
        let r = records(p);
        let mut fwd = vec![10, 0, 0, 1, 10, 0, 0, 2, 0, 0, 0, 0, 0, 3, 0, 0];
        fwd.extend_from_slice(&12u32.to_be_bytes());
        fwd.extend_from_slice(&1500u32.to_be_bytes());
        fwd.extend_from_slice(&1_000_251u32.to_be_bytes());
        fwd.extend_from_slice(&1_000_259u32.to_be_bytes());
        fwd.extend_from_slice(&[
            0x9c, 0x40, 0x01, 0xbb, 0, 0x1b, 6, 0, 0, 0, 0, 0, 0, 0, 0, 0,
        ]);
        assert_eq!(r[0], &fwd[..]);
        let mut rev = vec![10, 0, 0, 2, 10, 0, 0, 1, 0, 0, 0, 0, 0, 3, 0, 0];
        rev.extend_from_slice(&70u32.to_be_bytes());
        rev.extend_from_slice(&90000u32.to_be_bytes());
        rev.extend_from_slice(&1_000_252u32.to_be_bytes());
        rev.extend_from_slice(&1_000_258u32.to_be_bytes());
        rev.extend_from_slice(&[
            0x01, 0xbb, 0x9c, 0x40, 0, 0x13, 6, 0, 0, 0, 0, 0, 0, 0, 0, 0,
        ]);
        assert_eq!(r[1], &rev[..]);
    }

    #[test]
    fn one_way_icmp_ipv6_and_empty_records() {
        let mut enc = encoder(MAX_MESSAGE_LEN);
        let mut icmp = tcp(false);
        icmp.proto = 1;
        icmp.sport = 0;
        icmp.dport = 0x0800;
        let mut one_way = tcp(false);
        one_way.rev = Counters::default();
        let mut empty = tcp(false);
        empty.fwd = Counters::default();
        empty.rev = Counters::default();
        let p = &collect(&mut enc, &[icmp, tcp(true), one_way, empty], T0)[0];
        let r = records(p);
        assert_eq!(r.len(), 3);
        assert_eq!(
            &r[0][32..36],
            &[0, 0, 8, 0],
            "ICMP type and code in dstport"
        );
        assert_eq!(&r[1][32..36], &[0, 0, 0, 0], "reverse ICMP: ports 0");
        assert_eq!(&r[1][..8], &[10, 0, 0, 2, 10, 0, 0, 1]);
        assert_eq!(&r[2][..4], &[10, 0, 0, 1], "one-way: forward only");
        let s = enc.stats();
        assert_eq!((s.messages, s.records, s.unencodable), (1, 3, 2));
    }

    #[test]
    fn counters_and_interface_saturate() {
        let mut r = tcp(false);
        r.fwd.packets = u64::from(u32::MAX) + 1;
        r.fwd.octets = u64::MAX;
        r.interface = 70_000;
        r.rev = Counters::default();
        let mut enc = encoder(MAX_MESSAGE_LEN);
        let p = &collect(&mut enc, &[r], T0)[0];
        let rec = records(p)[0];
        assert_eq!(read_u16(&rec[12..]), u16::MAX);
        assert_eq!(read_u32(&rec[16..]), u32::MAX);
        assert_eq!(read_u32(&rec[20..]), u32::MAX);
    }

    #[test]
    fn flow_sequence_counts_records_before_across_packets() {
        let mut enc = encoder(MAX_MESSAGE_LEN);
        let msgs = collect(&mut enc, &vec![tcp(false); 40], T0);
        let got: Vec<(u16, u32)> = msgs
            .iter()
            .map(|p| (read_u16(&p[2..]), read_u32(&p[16..])))
            .collect();
        assert_eq!(got, [(30, 0), (30, 30), (20, 60)]);
        let msgs = collect(&mut enc, &[tcp(false)], T0);
        assert_eq!(read_u32(&msgs[0][16..]), 80);
        assert_eq!(enc.sequence(), 82);
    }

    #[test]
    fn small_max_and_config() {
        // Room for 5 records and a bit: packets of 5.
        let max = HEADER_LEN + 5 * RECORD_LEN + 47;
        let mut enc = encoder(max);
        let msgs = collect(&mut enc, &vec![tcp(false); 6], T0);
        assert_eq!(
            msgs.iter().map(|p| read_u16(&p[2..])).collect::<Vec<_>>(),
            [5, 5, 2]
        );
        assert!(msgs.iter().all(|p| p.len() <= max));
        assert!(Encoder::new(Config::new(0)).is_ok());
        assert!(encoder(100_000).capacity == MAX_RECORDS);
        assert!(matches!(
            Encoder::new(Config {
                max_message_len: MIN_MESSAGE_LEN - 1,
                start_ns: 0
            }),
            Err(ConfigError::MessageTooShort { .. })
        ));
        enc.tick(T0, &mut |_| panic!("v5 has nothing to refresh"));
    }

    proptest! {
        #[test]
        fn packets_fit_and_count_every_direction(
            kinds in proptest::collection::vec(0..4u8, 0..200),
            max in MIN_MESSAGE_LEN..2000usize,
        ) {
            // 0: biflow, 1: one-way, 2: IPv6, 3: no packets.
            let recs: Vec<FlowRecord> = kinds.iter().map(|k| {
                let mut r = tcp(*k == 2);
                if *k == 1 || *k == 3 {
                    r.rev = Counters::default();
                }
                if *k == 3 {
                    r.fwd = Counters::default();
                }
                r
            }).collect();
            let want: usize = kinds.iter().map(|k| [2, 1, 0, 0][usize::from(*k)]).sum();
            let mut enc = encoder(max);
            let mut seq = 0u32;
            enc.encode(&recs, T0, &mut |p| {
                assert!(p.len() <= max.min(MAX_MESSAGE_LEN));
                assert_eq!(read_u32(&p[16..]), seq);
                let n = records(p).len();
                assert!((1..=MAX_RECORDS).contains(&n));
                seq += n as u32;
            });
            prop_assert_eq!(seq as usize, want);
            prop_assert_eq!(enc.stats().unencodable as usize, kinds.iter().filter(|k| **k >= 2).count());
        }
    }

    /// A v5 packet as a router writes it: sampled 1 in 10 (mode 1), one ICMP echo record with
    /// type and code in the destination port.
    #[test]
    fn decodes_a_sampled_router_packet() {
        use crate::flowdecode::{Decoded, Decoder, Limits, Protocol};
        let mut m = vec![0, 5, 0, 1];
        m.extend_from_slice(&100_000u32.to_be_bytes()); // sys_uptime 100 s
        m.extend_from_slice(&1_800_000_000u32.to_be_bytes());
        m.extend_from_slice(&500_000_000u32.to_be_bytes());
        m.extend_from_slice(&4242u32.to_be_bytes());
        m.extend_from_slice(&[1, 2, 0x40, 10]);
        m.extend_from_slice(&[192, 0, 2, 1, 198, 51, 100, 7, 0, 0, 0, 0, 0, 3, 0, 4]);
        for v in [5u32, 420, 90_000, 99_000] {
            m.extend_from_slice(&v.to_be_bytes());
        }
        m.extend_from_slice(&[0, 0, 8, 0, 0, 0, 1, 0, 0, 0, 0, 0, 24, 24, 0, 0]);
        let mut d = Decoder::new(Limits::default());
        let mut got = Vec::new();
        let s = d
            .decode(Protocol::NetflowV5, [0; 16], &m, 0, &mut |x| {
                if let Decoded::Flow(f) = x {
                    got.push(f);
                }
            })
            .unwrap();
        assert_eq!((s.records, s.domain), (1, 0x0102));
        let f = got[0];
        assert_eq!((f.sampling, f.egress, f.flow.interface), (10, 4, 3));
        let r = f.flow;
        assert_eq!(r.dst_addr().to_string(), "198.51.100.7");
        assert_eq!((r.proto, r.sport, r.dport), (1, 0, 0x0800));
        assert_eq!((r.fwd.packets, r.fwd.octets), (50, 4200));
        let export = 1_800_000_000_500_000_000;
        assert_eq!(r.fwd.first_ns, export - 10_000_000_000);
        assert_eq!(r.fwd.last_ns, export - 1_000_000_000);
        // The next packet should say 4243: 3 flows lost.
        m[16..20].copy_from_slice(&4246u32.to_be_bytes());
        let s = d
            .decode(Protocol::NetflowV5, [0; 16], &m, 0, &mut |_| {})
            .unwrap();
        assert_eq!(s.sequence_lost, 3);
        // A count the packet cannot hold.
        m[3] = 2;
        let e = d
            .decode(Protocol::NetflowV5, [0; 16], &m, 0, &mut |_| {})
            .unwrap_err();
        assert_eq!(e.to_string(), "header says 2 records, the message has 1");
    }
}
