//! The flow exporters' messages against independent decoders: the `netflow_parser` crate in
//! process (every field of every record must come back), and tshark as the bit-level oracle
//! (the messages as UDP payloads in a pcap file: every field decoded with our values, no
//! malformed packet, no sequence-number complaint).
//!
//! The tshark tests need Wireshark's command-line tools (`apt-get install tshark`); they fail
//! if it is missing.

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::collections::BTreeMap;
use std::net::{Ipv4Addr, Ipv6Addr};
use std::path::{Path, PathBuf};
use std::process::Command;

use netflow_parser::static_versions::v5::V5;
use netflow_parser::variable_versions::ipfix::lookup::{
    IANAIPFixField as Iana, IPFixField, ReverseInformationElement as Rev,
};
use netflow_parser::variable_versions::ipfix::{FlowSetBody as IpfixBody, IPFix};
use netflow_parser::variable_versions::v9::{FlowSetBody as V9Body, V9};
use netflow_parser::{FieldValue, NetflowPacket, NetflowParser, V9Field};
use tapflow_wire::LinkType;
use tapflow_wire::checksum;
use tapflow_wire::flowrecord::{Counters, EndReason, FlowRecord};
use tapflow_wire::{ipfix, netflow5, netflow9, pcap};

// ---- allocation counting -----------------------------------------------------------------

/// The system allocator, counting allocations made on threads that ask for it.
struct Counting;

thread_local! {
    static COUNT: Cell<bool> = const { Cell::new(false) };
    static ALLOCS: Cell<u64> = const { Cell::new(0) };
}

fn counted() {
    // `try_with`: the allocator also runs while thread-locals are torn down.
    if COUNT.try_with(Cell::get).unwrap_or(false) {
        let _ = ALLOCS.try_with(|a| a.set(a.get() + 1));
    }
}

// SAFETY: forwards to the system allocator unchanged; only counts calls.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        counted();
        // SAFETY: same contract as the caller's.
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: same contract as the caller's.
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        counted();
        // SAFETY: same contract as the caller's.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

/// Allocations `f` makes on this thread.
fn allocations(f: impl FnOnce()) -> u64 {
    ALLOCS.with(|a| a.set(0));
    COUNT.with(|c| c.set(true));
    f();
    COUNT.with(|c| c.set(false));
    ALLOCS.with(Cell::get)
}

#[test]
fn encoders_allocate_nothing_after_new() {
    let recs: Vec<FlowRecord> = sample().into_iter().cycle().take(10_000).collect();
    let mut ipfix = ipfix::Encoder::new(ipfix::Config::new(1)).unwrap();
    let mut v9 = netflow9::Encoder::new(netflow9::Config::new(1, START)).unwrap();
    let mut v5 = netflow5::Encoder::new(netflow5::Config::new(START)).unwrap();
    let mut bytes = 0;
    let n = allocations(|| {
        let mut out = |m: &[u8]| bytes += m.len();
        for i in 0..3 {
            let now = NOW + i * 61 * SEC;
            ipfix.tick(now, &mut out);
            ipfix.encode(&recs, now, &mut out);
            v9.tick(now, &mut out);
            v9.encode(&recs, now, &mut out);
            v5.encode(&recs, now, &mut out);
        }
    });
    assert_eq!(
        n, 0,
        "allocations while encoding 3 × 10,000 records per format"
    );
    assert!(bytes > 3 * 10_000 * 48, "{bytes}");
    assert_eq!(ipfix.stats().records, 30_000);
    assert_eq!(v9.stats().records, 30_000);
    assert!(v5.stats().records > 30_000);
}

// ---- the records ----------------------------------------------------------------------------

/// Export time of the first message: 2023-11-14T22:13:20.5Z.
const NOW: u64 = 1_700_000_000_500_000_000;
/// The exporters' sysUptime origin (NetFlow v9/v5): one hour and a bit before `NOW`.
const START: u64 = NOW - 3_600_123_456_789;
const MS: u64 = 1_000_000;
const SEC: u64 = 1_000_000_000;

fn v4(a: [u8; 4]) -> [u8; 16] {
    let mut x = [0; 16];
    x[..4].copy_from_slice(&a);
    x
}

fn v6(s: &str) -> [u8; 16] {
    s.parse::<Ipv6Addr>().unwrap().octets()
}

/// Counters with first/last `first_ms`/`last_ms` ms (plus sub-millisecond noise) before NOW.
fn dir(packets: u64, octets: u64, tcp_flags: u16, first_ms: u64, last_ms: u64) -> Counters {
    Counters {
        packets,
        octets,
        tcp_flags,
        first_ns: NOW - first_ms * MS + 123_456,
        last_ns: NOW - last_ms * MS + 987_654,
    }
}

/// Records covering what the encoders must carry: TCP with flags in both directions (NS and
/// ECE above the low byte), UDP, ICMP and ICMPv6 type/code, IPv6, one-way flows, counters
/// beyond 32 bits, interface indexes beyond 16 bits, every end reason. Each has a unique
/// interface index to match decoded records.
fn sample() -> Vec<FlowRecord> {
    let base = FlowRecord::default();
    vec![
        FlowRecord {
            proto: 6,
            src: v4([192, 0, 2, 1]),
            dst: v4([198, 51, 100, 7]),
            sport: 40000,
            dport: 443,
            vlan: 100,
            interface: 1,
            fwd: dir(12, 1500, 0x5b, 5000, 1000),
            rev: dir(70, 90000, 0x113, 4990, 1010),
            end_reason: EndReason::EndOfFlow,
            ..base
        },
        FlowRecord {
            proto: 17,
            src: v4([10, 1, 2, 3]),
            dst: v4([10, 9, 8, 7]),
            sport: 5353,
            dport: 53,
            interface: 2,
            fwd: dir(1, 60, 0, 300, 300),
            rev: dir(1, 120, 0, 299, 299),
            end_reason: EndReason::IdleTimeout,
            ..base
        },
        FlowRecord {
            proto: 1,
            src: v4([10, 0, 0, 1]),
            dst: v4([10, 0, 0, 2]),
            dport: 0x0800,
            vlan: 7,
            interface: 3,
            fwd: dir(4, 336, 0, 4000, 1000),
            rev: dir(4, 336, 0, 3999, 999),
            end_reason: EndReason::ActiveTimeout,
            ..base
        },
        FlowRecord {
            ipv6: true,
            proto: 6,
            src: v6("2001:db8::10"),
            dst: v6("2001:db8:1::20"),
            sport: 50000,
            dport: 22,
            vlan: 4094,
            interface: 4,
            fwd: dir(30, 4000, 0x1a, 60000, 2),
            rev: dir(25, 7000, 0x1a, 59999, 1),
            end_reason: EndReason::ForcedEnd,
        },
        FlowRecord {
            proto: 17,
            src: v4([203, 0, 113, 5]),
            dst: v4([203, 0, 113, 9]),
            sport: 123,
            dport: 123,
            interface: 70_000,
            fwd: dir(3, 228, 0, 20, 10),
            end_reason: EndReason::LackOfResources,
            ..base
        },
        FlowRecord {
            ipv6: true,
            proto: 58,
            src: v6("fe80::1"),
            dst: v6("ff02::1:ff00:2"),
            dport: 135 << 8,
            interface: 6,
            fwd: dir(2, 144, 0, 1500, 500),
            end_reason: EndReason::IdleTimeout,
            ..base
        },
        FlowRecord {
            proto: 6,
            src: v4([192, 0, 2, 50]),
            dst: v4([192, 0, 2, 60]),
            sport: 33333,
            dport: 80,
            interface: 7,
            fwd: dir(4_000_000, 6_000_000_000, 0x18, 300_000, 0),
            // The most packets a record counts a direction (the flow table ends it there), and
            // octets past 32 bits.
            rev: dir(u64::from(u32::MAX), 7_000_000_000_000, 0x10, 299_999, 0),
            end_reason: EndReason::ActiveTimeout,
            ..base
        },
    ]
}

/// The record as IPFIX carries it: times in whole milliseconds.
fn ms_truncated(mut r: FlowRecord) -> FlowRecord {
    for c in [&mut r.fwd, &mut r.rev] {
        c.first_ns -= c.first_ns % MS;
        c.last_ns -= c.last_ns % MS;
    }
    r
}

/// A decoded value as an unsigned number (any width up to 16 octets) or raw bytes.
fn raw(v: &FieldValue) -> Vec<u8> {
    let mut b = Vec::new();
    v.write_be_bytes(&mut b).unwrap();
    b
}

fn num(v: &FieldValue) -> u64 {
    let b = raw(v);
    assert!(b.len() <= 8, "{v:?} is not a number");
    b.iter().fold(0, |n, x| n << 8 | u64::from(*x))
}

fn addr(v: &FieldValue) -> ([u8; 16], bool) {
    match v {
        FieldValue::Ip4Addr(a) => (v4(a.octets()), false),
        FieldValue::Ip6Addr(a) => (a.octets(), true),
        other => panic!("not an address: {other:?}"),
    }
}

/// An encoded message and its export time.
type Msg = (Vec<u8>, u64);

/// IPFIX messages for the sample: small messages (so several, one with both families, full ones
/// padded), the templates in the first only, a second batch, a template-only tick at the 60 s refresh, and a
/// third batch after it.
fn ipfix_messages() -> (Vec<Msg>, Vec<FlowRecord>) {
    let recs = sample();
    let mut enc = ipfix::Encoder::new(ipfix::Config {
        max_message_len: 512,
        ..ipfix::Config::new(4242)
    })
    .unwrap();
    let mut msgs = Vec::new();
    for (batch, t) in [(&recs[..], NOW), (&recs[..3], NOW + SEC)] {
        enc.encode(batch, t, &mut |m| msgs.push((m.to_vec(), t)));
    }
    let t = NOW + 61 * SEC;
    enc.tick(t, &mut |m| msgs.push((m.to_vec(), t)));
    let t = NOW + 62 * SEC;
    enc.encode(&recs[3..], t, &mut |m| msgs.push((m.to_vec(), t)));
    let mut all = recs.clone();
    all.extend_from_slice(&recs[..3]);
    all.extend_from_slice(&recs[3..]);
    (msgs, all)
}

fn by_interface(mut v: Vec<FlowRecord>) -> Vec<FlowRecord> {
    v.sort_by_key(|r| (r.interface, r.fwd.first_ns));
    v
}

#[test]
fn ipfix_round_trips_through_netflow_parser() {
    let (msgs, sent) = ipfix_messages();
    assert!(msgs.len() >= 4, "several messages: {}", msgs.len());
    let mut parser = NetflowParser::default();
    let mut got = Vec::new();
    let mut sequence = 0u32;
    let mut template_sets = 0;
    for (m, now) in &msgs {
        let res = parser.parse_bytes(m);
        assert!(res.error.is_none(), "{:?}", res.error);
        let [NetflowPacket::IPFix(IPFix { header, flowsets })] = &res.packets[..] else {
            panic!("not one IPFIX message: {:?}", res.packets);
        };
        assert_eq!(header.version, 10);
        assert_eq!(usize::from(header.length), m.len());
        assert_eq!(header.observation_domain_id, 4242);
        assert_eq!(u64::from(header.export_time), now / SEC);
        assert_eq!(
            header.sequence_number, sequence,
            "data records before this message"
        );
        for fs in flowsets {
            match &fs.body {
                IpfixBody::Templates(t) => {
                    template_sets += 1;
                    assert_eq!(
                        t.iter().map(|t| t.template_id).collect::<Vec<_>>(),
                        [256, 257]
                    );
                    for t in t {
                        let pens: Vec<u32> = t
                            .fields
                            .iter()
                            .filter_map(|f| f.enterprise_number)
                            .collect();
                        assert_eq!(pens, [29305; 5]);
                    }
                }
                IpfixBody::Data(d) => {
                    for rec in &d.fields {
                        got.push(ipfix_record(fs.header.header_id, rec));
                        sequence += 1;
                    }
                }
                other => panic!("unexpected set {other:?}"),
            }
        }
    }
    assert_eq!(template_sets, 2, "first message and the 61 s refresh");
    let want: Vec<FlowRecord> = sent.into_iter().map(ms_truncated).collect();
    assert_eq!(by_interface(got), by_interface(want));
}

/// Rebuilds a FlowRecord from a decoded IPFIX data record, checking the derived fields.
fn ipfix_record(set_id: u16, fields: &[(IPFixField, FieldValue)]) -> FlowRecord {
    let mut r = FlowRecord::default();
    let mut icmp = None;
    let mut direction = None;
    let mut seen = BTreeMap::new();
    for (f, v) in fields {
        *seen.entry(format!("{f:?}")).or_insert(0) += 1;
        match f {
            IPFixField::IANA(i) => match i {
                Iana::SourceIpv4address | Iana::SourceIpv6address => (r.src, r.ipv6) = addr(v),
                Iana::DestinationIpv4address | Iana::DestinationIpv6address => {
                    r.dst = addr(v).0;
                }
                Iana::SourceTransportPort => r.sport = num(v) as u16,
                Iana::DestinationTransportPort => r.dport = num(v) as u16,
                Iana::IcmpTypeCodeIpv4 | Iana::IcmpTypeCodeIpv6 => {
                    assert_eq!(*i == Iana::IcmpTypeCodeIpv6, set_id == 257);
                    icmp = Some(num(v) as u16);
                }
                Iana::ProtocolIdentifier => r.proto = num(v) as u8,
                Iana::TcpControlBits => r.fwd.tcp_flags = num(v) as u16,
                Iana::FlowStartMilliseconds => r.fwd.first_ns = num(v) * MS,
                Iana::FlowEndMilliseconds => r.fwd.last_ns = num(v) * MS,
                Iana::OctetDeltaCount => r.fwd.octets = num(v),
                Iana::PacketDeltaCount => r.fwd.packets = num(v),
                Iana::IngressInterface => r.interface = num(v) as u32,
                Iana::VlanId => r.vlan = num(v) as u16,
                Iana::FlowEndReason => {
                    r.end_reason = EndReason::from_u8(num(v) as u8).expect("an IANA reason");
                }
                Iana::BiflowDirection => direction = Some(num(v)),
                other => panic!("unexpected element {other:?}"),
            },
            IPFixField::ReverseInformationElement(e) => match e {
                Rev::ReverseTcpControlBits => r.rev.tcp_flags = num(v) as u16,
                Rev::ReverseFlowStartMilliseconds => r.rev.first_ns = num(v) * MS,
                Rev::ReverseFlowEndMilliseconds => r.rev.last_ns = num(v) * MS,
                Rev::ReverseOctetDeltaCount => r.rev.octets = num(v),
                Rev::ReversePacketDeltaCount => r.rev.packets = num(v),
                other => panic!("unexpected reverse element {other:?}"),
            },
            other => panic!("unexpected element {other:?}"),
        }
    }
    assert_eq!(fields.len(), 20, "{seen:?}");
    assert!(seen.values().all(|n| *n == 1), "an element twice: {seen:?}");
    assert_eq!(set_id, if r.ipv6 { 257 } else { 256 });
    assert_eq!(direction, Some(1), "biflowDirection initiator");
    assert_eq!(icmp, Some(if r.is_icmp() { r.dport } else { 0 }));
    r
}

/// The part of a record NetFlow v9 carries.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
struct V9View {
    interface: u32,
    ipv6: bool,
    proto: u8,
    src: [u8; 16],
    dst: [u8; 16],
    sport: u16,
    dport: u16,
    icmp_type: u16,
    vlan: u16,
    in_bytes: u64,
    in_pkts: u64,
    out_bytes: u64,
    out_pkts: u64,
    tcp_flags: u8,
    /// Absolute ms since 1970, as a collector rebuilds them from sysUptime.
    first_ms: u64,
    last_ms: u64,
}

impl V9View {
    fn of(r: &FlowRecord) -> V9View {
        V9View {
            interface: r.interface,
            ipv6: r.ipv6,
            proto: r.proto,
            src: r.src,
            dst: r.dst,
            sport: r.sport,
            dport: r.dport,
            icmp_type: if r.is_icmp() { r.dport } else { 0 },
            vlan: r.vlan,
            in_bytes: r.fwd.octets,
            in_pkts: r.fwd.packets,
            out_bytes: r.rev.octets,
            out_pkts: r.rev.packets,
            tcp_flags: r.fwd.tcp_flags as u8,
            first_ms: r.start_ns() / MS,
            last_ms: r.end_ns() / MS,
        }
    }
}

/// NetFlow v9 packets for the sample: a template-only tick, then small packets, then a second
/// batch after the 60 s refresh.
fn v9_messages() -> (Vec<Msg>, Vec<FlowRecord>) {
    let recs = sample();
    let mut enc = netflow9::Encoder::new(netflow9::Config {
        max_message_len: 400,
        ..netflow9::Config::new(77, START)
    })
    .unwrap();
    let mut msgs = Vec::new();
    let t = NOW - 10 * SEC;
    enc.tick(t, &mut |m| msgs.push((m.to_vec(), t)));
    for (batch, t) in [(&recs[..], NOW), (&recs[2..], NOW + 70 * SEC + 999 * MS)] {
        enc.encode(batch, t, &mut |m| msgs.push((m.to_vec(), t)));
    }
    let mut all = recs.clone();
    all.extend_from_slice(&recs[2..]);
    (msgs, all)
}

#[test]
fn netflow9_round_trips_through_netflow_parser() {
    let (msgs, sent) = v9_messages();
    assert!(msgs.len() >= 4, "several packets: {}", msgs.len());
    let mut parser = NetflowParser::default();
    let mut got = Vec::new();
    let mut template_flowsets = 0;
    for (i, (m, now)) in msgs.iter().enumerate() {
        let res = parser.parse_bytes(m);
        assert!(res.error.is_none(), "{:?}", res.error);
        let [NetflowPacket::V9(V9 { header, flowsets })] = &res.packets[..] else {
            panic!("not one v9 packet: {:?}", res.packets);
        };
        assert_eq!(header.version, 9);
        assert_eq!(header.sequence_number, i as u32, "packets before this one");
        assert_eq!(header.source_id, 77);
        assert_eq!(u64::from(header.unix_secs), now / SEC);
        let uptime = (now / MS - START / MS) as u32;
        assert_eq!(header.sys_up_time, uptime, "ms since START");
        let mut count = 0;
        for fs in flowsets {
            match &fs.body {
                V9Body::Template(t) => {
                    template_flowsets += 1;
                    count += t.templates.len();
                    let ids: Vec<u16> = t.templates.iter().map(|t| t.template_id).collect();
                    assert_eq!(ids, [256, 257]);
                }
                V9Body::Data(d) => {
                    for rec in &d.fields {
                        count += 1;
                        got.push(v9_record(now / MS, header.sys_up_time, rec));
                    }
                }
                other => panic!("unexpected FlowSet {other:?}"),
            }
        }
        assert_eq!(
            usize::from(header.count),
            count,
            "count: template and data records"
        );
    }
    assert_eq!(template_flowsets, 2, "the tick and the 60 s refresh");
    let mut want: Vec<V9View> = sent.iter().map(V9View::of).collect();
    want.sort();
    got.sort();
    assert_eq!(got, want);
}

/// Rebuilds what v9 carries of a record; `now_ms` is the export time (the header has only its
/// whole seconds, so the test supplies it to check the switched times to the millisecond).
fn v9_record(now_ms: u64, uptime: u32, fields: &[(V9Field, FieldValue)]) -> V9View {
    // A collector's reconstruction: export time minus how long before it the flow was seen.
    let abs = |switched: u32| now_ms - u64::from(uptime.wrapping_sub(switched));
    let mut r = V9View::of(&FlowRecord::default());
    for (f, v) in fields {
        match f {
            V9Field::InBytes => r.in_bytes = num(v),
            V9Field::InPkts => r.in_pkts = num(v),
            V9Field::OutBytes => r.out_bytes = num(v),
            V9Field::OutPkts => r.out_pkts = num(v),
            V9Field::Protocol => r.proto = num(v) as u8,
            V9Field::TcpFlags => r.tcp_flags = num(v) as u8,
            V9Field::L4SrcPort => r.sport = num(v) as u16,
            V9Field::L4DstPort => r.dport = num(v) as u16,
            V9Field::Ipv4SrcAddr | V9Field::Ipv6SrcAddr => (r.src, r.ipv6) = addr(v),
            V9Field::Ipv4DstAddr | V9Field::Ipv6DstAddr => r.dst = addr(v).0,
            V9Field::InputSnmp => r.interface = num(v) as u32,
            V9Field::FirstSwitched => r.first_ms = abs(num(v) as u32),
            V9Field::LastSwitched => r.last_ms = abs(num(v) as u32),
            V9Field::SrcVlan => r.vlan = num(v) as u16,
            V9Field::IcmpType => r.icmp_type = num(v) as u16,
            other => panic!("unexpected field {other:?}"),
        }
    }
    assert_eq!(fields.len(), 15);
    r
}

/// The part of one direction NetFlow v5 carries.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
struct V5View {
    input: u16,
    src: Ipv4Addr,
    dst: Ipv4Addr,
    sport: u16,
    dport: u16,
    proto: u8,
    tcp_flags: u8,
    packets: u32,
    octets: u32,
    first_ms: u64,
    last_ms: u64,
}

/// The v5 records of a flow record: forward, then the swapped reverse, each if it has packets.
fn v5_views(r: &FlowRecord) -> Vec<V5View> {
    if r.ipv6 {
        return Vec::new();
    }
    let a = |x: &[u8; 16]| Ipv4Addr::new(x[0], x[1], x[2], x[3]);
    let sat = |x: u64| u32::try_from(x).unwrap_or(u32::MAX);
    let mut v = Vec::new();
    for reverse in [false, true] {
        let (c, src, dst, sport, dport) = match (reverse, r.is_icmp()) {
            (false, _) => (&r.fwd, &r.src, &r.dst, r.sport, r.dport),
            (true, false) => (&r.rev, &r.dst, &r.src, r.dport, r.sport),
            // The reverse of an ICMP exchange: type and code unknown, ports 0.
            (true, true) => (&r.rev, &r.dst, &r.src, 0, 0),
        };
        if c.packets == 0 {
            continue;
        }
        v.push(V5View {
            input: u16::try_from(r.interface).unwrap_or(u16::MAX),
            src: a(src),
            dst: a(dst),
            sport,
            dport,
            proto: r.proto,
            tcp_flags: c.tcp_flags as u8,
            packets: sat(c.packets),
            octets: sat(c.octets),
            first_ms: c.first_ns / MS,
            last_ms: c.last_ns / MS,
        });
    }
    v
}

/// NetFlow v5 packets of at most 4 records for the sample, then a second batch.
fn v5_messages() -> (Vec<Msg>, Vec<FlowRecord>, netflow5::Stats) {
    let recs = sample();
    let mut enc = netflow5::Encoder::new(netflow5::Config {
        max_message_len: netflow5::HEADER_LEN + 4 * netflow5::RECORD_LEN,
        ..netflow5::Config::new(START)
    })
    .unwrap();
    let mut msgs = Vec::new();
    for (batch, t) in [(&recs[..], NOW), (&recs[..2], NOW + 1234 * MS)] {
        enc.encode(batch, t, &mut |m| msgs.push((m.to_vec(), t)));
    }
    let mut all = recs.clone();
    all.extend_from_slice(&recs[..2]);
    (msgs, all, enc.stats())
}

#[test]
fn netflow5_round_trips_through_netflow_parser() {
    let (msgs, sent, stats) = v5_messages();
    assert_eq!(stats.unencodable, 2, "the two IPv6 records");
    let mut parser = NetflowParser::default();
    let mut got = Vec::new();
    let mut sequence = 0;
    for (m, now) in &msgs {
        let res = parser.parse_bytes(m);
        assert!(res.error.is_none(), "{:?}", res.error);
        let [NetflowPacket::V5(V5 { header, flowsets })] = &res.packets[..] else {
            panic!("not one v5 packet: {:?}", res.packets);
        };
        assert_eq!(header.version, 5);
        assert_eq!(usize::from(header.count), flowsets.len());
        assert!(flowsets.len() <= 4);
        assert_eq!(header.flow_sequence, sequence, "flows before this packet");
        assert_eq!(
            (
                header.engine_type,
                header.engine_id,
                header.sampling_interval
            ),
            (0, 0, 0)
        );
        sequence += u32::from(header.count);
        assert_eq!(u64::from(header.unix_secs), now / SEC);
        assert_eq!(u64::from(header.unix_nsecs), now % SEC);
        assert_eq!(header.sys_up_time, (now / MS - START / MS) as u32);
        let now_ms = u64::from(header.unix_secs) * 1000 + u64::from(header.unix_nsecs) / 1_000_000;
        let abs = |t: u32| now_ms - u64::from(header.sys_up_time.wrapping_sub(t));
        for f in flowsets {
            assert_eq!(f.next_hop, Ipv4Addr::UNSPECIFIED);
            assert_eq!((f.output, f.tos, f.src_as, f.dst_as), (0, 0, 0, 0));
            assert_eq!((f.src_mask, f.dst_mask), (0, 0));
            got.push(V5View {
                input: f.input,
                src: f.src_addr,
                dst: f.dst_addr,
                sport: f.src_port,
                dport: f.dst_port,
                proto: f.protocol_number,
                tcp_flags: f.tcp_flags,
                packets: f.d_pkts,
                octets: f.d_octets,
                first_ms: abs(f.first),
                last_ms: abs(f.last),
            });
        }
    }
    let mut want: Vec<V5View> = sent.iter().flat_map(v5_views).collect();
    assert_eq!(got.len(), want.len());
    assert_eq!(u64::from(sequence), stats.records);
    want.sort();
    got.sort();
    assert_eq!(got, want);
}

// ---- tshark ----------------------------------------------------------------------------

/// An Ethernet/IPv4/UDP frame from 192.0.2.250:50000 to 192.0.2.251:`port`, checksums right.
fn udp_frame(port: u16, payload: &[u8]) -> Vec<u8> {
    let (src, dst) = (Ipv4Addr::new(192, 0, 2, 250), Ipv4Addr::new(192, 0, 2, 251));
    let udp_len = 8 + payload.len();
    let mut f = vec![0x02, 0, 0, 0, 0, 2, 0x02, 0, 0, 0, 0, 1, 0x08, 0x00];
    let mut ip = vec![0x45, 0, 0, 0, 0, 0, 0x40, 0, 64, 17, 0, 0];
    ip[2..4].copy_from_slice(&((20 + udp_len) as u16).to_be_bytes());
    ip.extend_from_slice(&src.octets());
    ip.extend_from_slice(&dst.octets());
    let c = checksum::finish(checksum::sum(&ip));
    ip[10..12].copy_from_slice(&c.to_be_bytes());
    let mut udp = Vec::new();
    udp.extend_from_slice(&50000u16.to_be_bytes());
    udp.extend_from_slice(&port.to_be_bytes());
    udp.extend_from_slice(&(udp_len as u16).to_be_bytes());
    udp.extend_from_slice(&[0, 0]);
    udp.extend_from_slice(payload);
    let ph = checksum::pseudo_header_v4(src, dst, 17, udp_len as u16);
    let c = match checksum::finish(checksum::combine(ph, checksum::sum(&udp))) {
        0 => 0xffff,
        c => c,
    };
    udp[6..8].copy_from_slice(&c.to_be_bytes());
    f.extend_from_slice(&ip);
    f.extend_from_slice(&udp);
    f
}

/// Writes `msgs` as UDP payloads to `port`, each frame stamped with its export time, into a
/// pcap file.
fn pcap_of(name: &str, port: u16, msgs: &[Msg]) -> PathBuf {
    let mut f = Vec::new();
    pcap::write_header(&mut f, LinkType::Ethernet, 65535);
    for (i, (m, now)) in msgs.iter().enumerate() {
        let frame = udp_frame(port, m);
        pcap::write_record(&mut f, now + i as u64, &frame, frame.len() as u32);
    }
    let p = PathBuf::from(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("tapflow-{}-{name}.pcap", std::process::id()));
    std::fs::write(&p, f).unwrap();
    p
}

/// Runs tshark on `file` with `-d` decoding `port` as NetFlow/IPFIX and returns, per frame, the
/// values of `fields` (each field's occurrences in packet order). Fails on any complaint:
/// stderr output, a malformed packet, an expert message, a sequence-number analysis hit.
fn tshark(file: &Path, port: u16, fields: &[&str]) -> Vec<Frame> {
    let (frames, complaints) = tshark_raw(file, port, fields);
    assert!(complaints.is_empty(), "tshark: {complaints:?}");
    frames
}

/// Per frame, field name to its values in packet order.
type Frame = BTreeMap<String, Vec<String>>;

/// [`tshark`] returning, instead of failing on them, the frames' complaints (malformed,
/// expert messages, sequence analysis).
fn tshark_raw(file: &Path, port: u16, fields: &[&str]) -> (Vec<Frame>, Vec<String>) {
    let decode = format!("udp.port=={port},cflow");
    let mut args = vec![
        "-n",
        "-r",
        file.to_str().unwrap(),
        "-d",
        &decode,
        "-T",
        "fields",
        "-E",
        "separator=|",
        "-E",
        "occurrence=a",
        "-E",
        "aggregator=;",
    ];
    let checks = [
        "frame.protocols",
        "_ws.malformed",
        "_ws.expert.message",
        "cflow.sequence_analysis.expected_sn",
    ];
    for f in checks.iter().chain(fields) {
        args.extend(["-e", f]);
    }
    let out = Command::new("tshark").args(&args).output().unwrap_or_else(|e| {
        panic!("cannot run `tshark` ({e}): these tests need Wireshark's CLI tools (apt-get install tshark)")
    });
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "tshark failed: {stderr}");
    let complaints: Vec<&str> = stderr
        .lines()
        .filter(|l| !l.contains("could be dangerous"))
        .collect();
    assert!(complaints.is_empty(), "tshark complained: {complaints:?}");
    let stdout = String::from_utf8(out.stdout).unwrap();
    let mut frames = Vec::new();
    let mut complaints = Vec::new();
    for (i, line) in stdout.lines().enumerate() {
        let cols: Vec<&str> = line.split('|').collect();
        assert_eq!(cols.len(), checks.len() + fields.len(), "{line}");
        assert!(
            cols[0].ends_with(":cflow"),
            "not decoded as cflow: {}",
            cols[0]
        );
        for (what, c) in ["malformed", "expert", "expected sequence"]
            .iter()
            .zip(&cols[1..4])
        {
            if !c.is_empty() {
                complaints.push(format!("frame {}: {what}: {c}", i + 1));
            }
        }
        let mut m = BTreeMap::new();
        for (f, c) in fields.iter().zip(&cols[checks.len()..]) {
            let v = if c.is_empty() {
                Vec::new()
            } else {
                c.split(';').map(str::to_owned).collect()
            };
            m.insert((*f).to_owned(), v);
        }
        frames.push(m);
    }
    (frames, complaints)
}

/// What tshark should show for a frame: every asked-for field, in packet order.
#[derive(Debug)]
struct Want(Frame);

impl Want {
    fn new(fields: &[&str]) -> Want {
        Want(
            fields
                .iter()
                .map(|f| ((*f).to_owned(), Vec::new()))
                .collect(),
        )
    }

    /// Fails listing every field of frame `n` whose values differ.
    fn check(&self, got: &Frame, n: usize) {
        let diff: Vec<String> = self
            .0
            .iter()
            .filter(|(f, want)| got.get(*f) != Some(*want))
            .map(|(f, want)| format!("{f}: tshark {:?}, want {want:?}", got.get(f)))
            .collect();
        assert!(diff.is_empty(), "frame {n}:\n{}", diff.join("\n"));
    }

    fn push(&mut self, field: &str, v: impl ToString) {
        self.0
            .get_mut(field)
            .unwrap_or_else(|| panic!("{field} not asked of tshark"))
            .push(v.to_string());
    }
}

/// ms since 1970 as tshark shows an absolute time: `Nov 14, 2023 22:13:15.510000000 UTC`.
fn tshark_time(ms: u64) -> String {
    const MONTHS: [&str; 12] = [
        "Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec",
    ];
    let secs = ms / 1000;
    let tod = secs % 86400;
    // Civil date from days since 1970 (Howard Hinnant's `civil_from_days`).
    let z = (secs / 86400) as i64 + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!(
        "{} {day:>2}, {year} {:02}:{:02}:{:02}.{:03}000000 UTC",
        MONTHS[month as usize - 1],
        tod / 3600,
        tod / 60 % 60,
        tod % 60,
        ms % 1000
    )
}

/// ms as tshark shows a relative time (NetFlow sysUptime): `3595.124000000`.
fn tshark_secs(ms: u64) -> String {
    format!("{}.{:03}000000", ms / 1000, ms % 1000)
}

/// Whether a frame has IPv4 and IPv6 records.
fn both_families(f: &Frame) -> bool {
    !f["cflow.srcaddr"].is_empty() && !f["cflow.srcaddrv6"].is_empty()
}

fn ip(a: &[u8; 16], ipv6: bool) -> String {
    if ipv6 {
        Ipv6Addr::from(*a).to_string()
    } else {
        Ipv4Addr::new(a[0], a[1], a[2], a[3]).to_string()
    }
}

#[test]
fn tshark_time_formats_like_tshark() {
    assert_eq!(tshark_time(0), "Jan  1, 1970 00:00:00.000000000 UTC");
    assert_eq!(
        tshark_time(1_700_000_000_500),
        "Nov 14, 2023 22:13:20.500000000 UTC"
    );
    assert_eq!(
        tshark_time(951_782_400_007),
        "Feb 29, 2000 00:00:00.007000000 UTC"
    );
    assert_eq!(tshark_secs(3_595_124), "3595.124000000");
}

const IPFIX_FIELDS: [&str; 26] = [
    "cflow.version",
    "cflow.len",
    "cflow.exporttime",
    "cflow.sequence",
    "cflow.od_id",
    "cflow.template_id",
    "cflow.template_ipfix_pen_provided",
    "cflow.tcpflags",
    "cflow.abstimestart",
    "cflow.abstimeend",
    "cflow.srcaddr",
    "cflow.dstaddr",
    "cflow.srcaddrv6",
    "cflow.dstaddrv6",
    "cflow.srcport",
    "cflow.dstport",
    "cflow.icmp_type_code_ipv4",
    "cflow.icmp_ipv6_type",
    "cflow.icmp_ipv6_code",
    "cflow.protocol",
    "cflow.octets",
    "cflow.packets",
    "cflow.inputint",
    "cflow.vlanid",
    "cflow.flow_end_reason",
    "cflow.biflow_direction",
];

#[test]
fn ipfix_decodes_in_tshark_with_our_values() {
    let (msgs, sent) = ipfix_messages();
    let file = pcap_of("ipfix", 4739, &msgs);
    let frames = tshark(&file, 4739, &IPFIX_FIELDS);
    assert_eq!(frames.len(), msgs.len());
    assert!(
        frames.iter().any(both_families),
        "a message with both Data Sets"
    );
    // Full messages are padded to the maximum (RFC 7011 §3.3.1); tshark reads past the padding.
    assert!(msgs.iter().any(|(m, _)| m.len() == 512), "a padded message");
    let mut rest = &sent[..];
    let mut sequence = 0;
    for (i, (got, (m, now))) in frames.iter().zip(&msgs).enumerate() {
        // Messages carry consecutive runs of the input, IPv4 records first.
        let (n4, n6) = (got["cflow.srcaddr"].len(), got["cflow.srcaddrv6"].len());
        let (run, tail) = rest.split_at(n4 + n6);
        rest = tail;
        let recs: Vec<&FlowRecord> = run
            .iter()
            .filter(|r| !r.ipv6)
            .chain(run.iter().filter(|r| r.ipv6))
            .collect();
        assert_eq!(recs.iter().filter(|r| !r.ipv6).count(), n4);

        let mut want = Want::new(&IPFIX_FIELDS);
        want.push("cflow.version", 10);
        want.push("cflow.len", m.len());
        want.push("cflow.exporttime", now / SEC);
        want.push("cflow.sequence", sequence);
        want.push("cflow.od_id", 4242);
        if i == 0 || run.is_empty() {
            // The first message and the refresh tick carry both templates.
            for id in [256, 257] {
                want.push("cflow.template_id", id);
                for pen in [1, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 0, 0, 0, 0] {
                    want.push("cflow.template_ipfix_pen_provided", pen);
                }
            }
        }
        for r in recs {
            let ms = |ns: u64| tshark_time(ns / MS);
            let (fwd_first, fwd_last) = (r.fwd.first_ns, r.fwd.last_ns);
            let (rev_first, rev_last) = if r.rev.packets > 0 {
                (r.rev.first_ns, r.rev.last_ns)
            } else {
                (0, 0)
            };
            // Reverse flags and times come first in the template, counters after the forward.
            want.push("cflow.tcpflags", format!("0x{:04x}", r.rev.tcp_flags));
            want.push("cflow.abstimestart", ms(rev_first));
            want.push("cflow.abstimeend", ms(rev_last));
            let (src, dst) = if r.ipv6 {
                ("cflow.srcaddrv6", "cflow.dstaddrv6")
            } else {
                ("cflow.srcaddr", "cflow.dstaddr")
            };
            want.push(src, ip(&r.src, r.ipv6));
            want.push(dst, ip(&r.dst, r.ipv6));
            want.push("cflow.srcport", r.sport);
            want.push("cflow.dstport", r.dport);
            let icmp = if r.is_icmp() { r.dport } else { 0 };
            if r.ipv6 {
                want.push("cflow.icmp_ipv6_type", icmp >> 8);
                want.push("cflow.icmp_ipv6_code", icmp & 0xff);
            } else {
                want.push("cflow.icmp_type_code_ipv4", format!("0x{icmp:04x}"));
            }
            want.push("cflow.protocol", r.proto);
            want.push("cflow.tcpflags", format!("0x{:04x}", r.fwd.tcp_flags));
            want.push("cflow.abstimestart", ms(fwd_first));
            want.push("cflow.abstimeend", ms(fwd_last));
            want.push("cflow.octets", r.fwd.octets);
            want.push("cflow.packets", r.fwd.packets);
            want.push("cflow.octets", r.rev.octets);
            want.push("cflow.packets", r.rev.packets);
            want.push("cflow.inputint", r.interface);
            want.push("cflow.vlanid", r.vlan);
            want.push("cflow.flow_end_reason", r.end_reason.to_u8());
            want.push("cflow.biflow_direction", 1);
        }
        want.check(got, i + 1);
        sequence += run.len();
    }
    assert!(rest.is_empty(), "{} records not seen by tshark", rest.len());
}

#[test]
fn tshark_flags_a_wrong_ipfix_sequence() {
    // The negative control for the checks above: tshark's sequence analysis is live.
    let (mut msgs, _) = ipfix_messages();
    msgs[1].0[8..12].copy_from_slice(&99u32.to_be_bytes());
    let file = pcap_of("ipfix-bad-seq", 4739, &msgs);
    let (_, complaints) = tshark_raw(&file, 4739, &["cflow.sequence"]);
    assert!(
        complaints
            .iter()
            .any(|c| c.starts_with("frame 2: expected sequence")),
        "{complaints:?}"
    );
}

const V9_FIELDS: [&str; 26] = [
    "cflow.version",
    "cflow.count",
    "cflow.sysuptime",
    "cflow.unix_secs",
    "cflow.sequence",
    "cflow.source_id",
    "cflow.template_id",
    "cflow.template_field_type",
    "cflow.octets",
    "cflow.packets",
    "cflow.post_octets",
    "cflow.post_packets",
    "cflow.protocol",
    "cflow.tcpflags",
    "cflow.srcport",
    "cflow.srcaddr",
    "cflow.srcaddrv6",
    "cflow.inputint",
    "cflow.dstport",
    "cflow.dstaddr",
    "cflow.dstaddrv6",
    "cflow.timestart",
    "cflow.timeend",
    "cflow.vlanid",
    "cflow.icmp_type_code_ipv4",
    "cflow.flowset_length",
];

#[test]
fn netflow9_decodes_in_tshark_with_our_values() {
    let (msgs, sent) = v9_messages();
    let file = pcap_of("v9", 2055, &msgs);
    let frames = tshark(&file, 2055, &V9_FIELDS);
    assert_eq!(frames.len(), msgs.len());
    assert!(
        frames.iter().any(both_families),
        "a packet with both Data FlowSets"
    );
    let uptime = |ns: u64| tshark_secs(ns / MS - START / MS);
    let refresh = msgs.iter().position(|m| m.1 > NOW + 60 * SEC).unwrap();
    let mut rest = &sent[..];
    for (i, (got, (_, now))) in frames.iter().zip(&msgs).enumerate() {
        let (n4, n6) = (got["cflow.srcaddr"].len(), got["cflow.srcaddrv6"].len());
        let (run, tail) = rest.split_at(n4 + n6);
        rest = tail;
        let recs: Vec<&FlowRecord> = run
            .iter()
            .filter(|r| !r.ipv6)
            .chain(run.iter().filter(|r| r.ipv6))
            .collect();
        assert_eq!(recs.iter().filter(|r| !r.ipv6).count(), n4);

        let mut want = Want::new(&V9_FIELDS);
        let templates = i == 0 || i == refresh;
        want.push("cflow.version", 9);
        want.push("cflow.count", run.len() + if templates { 2 } else { 0 });
        want.push("cflow.sysuptime", uptime(*now));
        want.push("cflow.unix_secs", now / SEC);
        want.push("cflow.sequence", i);
        want.push("cflow.source_id", 77);
        if templates {
            want.push("cflow.flowset_length", 132);
            for (id, addrs) in [(256, [8, 12]), (257, [27, 28])] {
                want.push("cflow.template_id", id);
                for t in [
                    1, 2, 23, 24, 4, 6, 7, addrs[0], 10, 11, addrs[1], 21, 22, 58, 32,
                ] {
                    want.push("cflow.template_field_type", t);
                }
            }
        }
        for (n, len) in [(n4, 62), (n6, 86)] {
            if n > 0 {
                want.push("cflow.flowset_length", (4 + n * len).next_multiple_of(4));
            }
        }
        for r in recs {
            want.push("cflow.octets", r.fwd.octets);
            want.push("cflow.packets", r.fwd.packets);
            want.push("cflow.post_octets", r.rev.octets);
            want.push("cflow.post_packets", r.rev.packets);
            want.push("cflow.protocol", r.proto);
            want.push("cflow.tcpflags", format!("0x{:02x}", r.fwd.tcp_flags as u8));
            want.push("cflow.srcport", r.sport);
            let v6 = if r.ipv6 { "v6" } else { "" };
            want.push(&format!("cflow.srcaddr{v6}"), ip(&r.src, r.ipv6));
            want.push("cflow.inputint", r.interface);
            want.push("cflow.dstport", r.dport);
            want.push(&format!("cflow.dstaddr{v6}"), ip(&r.dst, r.ipv6));
            want.push("cflow.timestart", uptime(r.start_ns()));
            want.push("cflow.timeend", uptime(r.end_ns()));
            want.push("cflow.vlanid", r.vlan);
            let icmp = if r.is_icmp() { r.dport } else { 0 };
            want.push("cflow.icmp_type_code_ipv4", format!("0x{icmp:04x}"));
        }
        want.check(got, i + 1);
    }
    assert!(rest.is_empty(), "{} records not seen by tshark", rest.len());
}

const V5_FIELDS: [&str; 27] = [
    "cflow.version",
    "cflow.count",
    "cflow.sysuptime",
    "cflow.unix_secs",
    "cflow.unix_nsecs",
    "cflow.sequence",
    "cflow.engine_type",
    "cflow.engine_id",
    "cflow.samplerate",
    "cflow.srcaddr",
    "cflow.dstaddr",
    "cflow.nexthop",
    "cflow.inputint",
    "cflow.outputint",
    "cflow.packets",
    "cflow.octets",
    "cflow.timestart",
    "cflow.timeend",
    "cflow.srcport",
    "cflow.dstport",
    "cflow.tcpflags",
    "cflow.protocol",
    "cflow.tos",
    "cflow.srcas",
    "cflow.dstas",
    "cflow.srcmask",
    "cflow.dstmask",
];

#[test]
fn netflow5_decodes_in_tshark_with_our_values() {
    let (msgs, sent, _) = v5_messages();
    let file = pcap_of("v5", 2055, &msgs);
    let frames = tshark(&file, 2055, &V5_FIELDS);
    assert_eq!(frames.len(), msgs.len());
    let views: Vec<V5View> = sent.iter().flat_map(v5_views).collect();
    let mut rest = &views[..];
    let mut sequence = 0;
    for (i, (got, (_, now))) in frames.iter().zip(&msgs).enumerate() {
        let n = got["cflow.srcaddr"].len();
        let (run, tail) = rest.split_at(n);
        rest = tail;
        let mut want = Want::new(&V5_FIELDS);
        want.push("cflow.version", 5);
        want.push("cflow.count", n);
        want.push("cflow.sysuptime", tshark_secs(now / MS - START / MS));
        want.push("cflow.unix_secs", now / SEC);
        want.push("cflow.unix_nsecs", now % SEC);
        want.push("cflow.sequence", sequence);
        want.push("cflow.engine_type", 0);
        want.push("cflow.engine_id", 0);
        want.push("cflow.samplerate", 0);
        for v in run {
            want.push("cflow.srcaddr", v.src);
            want.push("cflow.dstaddr", v.dst);
            want.push("cflow.nexthop", "0.0.0.0");
            want.push("cflow.inputint", v.input);
            want.push("cflow.outputint", 0);
            want.push("cflow.packets", v.packets);
            want.push("cflow.octets", v.octets);
            want.push("cflow.timestart", tshark_secs(v.first_ms - START / MS));
            want.push("cflow.timeend", tshark_secs(v.last_ms - START / MS));
            want.push("cflow.srcport", v.sport);
            want.push("cflow.dstport", v.dport);
            want.push("cflow.tcpflags", format!("0x{:02x}", v.tcp_flags));
            want.push("cflow.protocol", v.proto);
            want.push("cflow.tos", "0x00");
            want.push("cflow.srcas", 0);
            want.push("cflow.dstas", 0);
            want.push("cflow.srcmask", 0);
            want.push("cflow.dstmask", 0);
        }
        want.check(got, i + 1);
        sequence += n;
    }
    assert!(rest.is_empty(), "{} records not seen by tshark", rest.len());
}
