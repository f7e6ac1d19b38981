//! The flow decoders against real exporters: what softflowd, pmacctd (nfprobe, sfprobe) and
//! nfreplay sent for one trace, captured in `tests/fixtures/*.pcap`, must decode to the totals
//! nfcapd/sfcapd + nfdump 1.7.1 found in the same datagrams, with no sequence loss, no missing
//! template and nothing malformed; the `netflow_parser` crate, a second decoder, must count the
//! same records. `tests/fixtures/make-exports.sh` made the fixtures and printed the totals.
//!
//! Decoding allocates nothing per record: a second pass over the same datagrams, templates
//! known, allocates nothing at all.

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;

use netflow_parser::variable_versions::ipfix::{FlowSetBody as IpfixBody, IPFix};
use netflow_parser::variable_versions::v9::{FlowSetBody as V9Body, V9};
use netflow_parser::{NetflowPacket, NetflowParser};
use tapflow_wire::capfile::Reader;
use tapflow_wire::flowdecode::{Decoded, Decoder, Limits, MessageSummary, Protocol};
use tapflow_wire::link::network_layer;
use tapflow_wire::{LinkType, ipv4, udp};

struct Counting;

thread_local! {
    static COUNT: Cell<bool> = const { Cell::new(false) };
    static ALLOCS: Cell<u64> = const { Cell::new(0) };
}

fn counted() {
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

/// One capture and what `nfdump -R DIR -I` said of it.
struct Export {
    fixture: &'static str,
    protocol: Protocol,
    datagrams: usize,
    flows: u64,
    packets: u64,
    bytes: u64,
    /// The sampling interval the exporter announced and tapflow applies to the counters, where
    /// nfdump does not: softflowd -s 4 says 1 in 4 with samplingPacketInterval 1 and
    /// samplingPacketSpace 3 (IE 305/306), which nfcapd 1.7.1 ignores (sfcapd applies sFlow's
    /// own rate, so it agrees there).
    sampling: u64,
    /// Where nfdump counts other bytes than IP bytes (sfcapd: the sampled frame's length, with
    /// its Ethernet header and FCS), the IP bytes an independent reader found:
    /// `python3 tests/fixtures/sflow-ip-bytes.py tests/fixtures/FIXTURE.pcap`.
    ip_bytes: Option<u64>,
}

const EXPORTS: &[Export] = &[
    Export {
        fixture: "softflowd-v10",
        protocol: Protocol::Ipfix,
        datagrams: 4,
        flows: 85,
        packets: 889,
        bytes: 325_277,
        sampling: 1,
        ip_bytes: None,
    },
    Export {
        fixture: "softflowd-v10-bidir",
        protocol: Protocol::Ipfix,
        datagrams: 3,
        flows: 59,
        packets: 889,
        bytes: 325_277,
        sampling: 1,
        ip_bytes: None,
    },
    Export {
        fixture: "softflowd-v9",
        protocol: Protocol::NetflowV9,
        datagrams: 4,
        flows: 85,
        packets: 889,
        bytes: 325_277,
        sampling: 1,
        ip_bytes: None,
    },
    Export {
        fixture: "softflowd-v5",
        protocol: Protocol::NetflowV5,
        datagrams: 2,
        flows: 38,
        packets: 579,
        bytes: 205_208,
        sampling: 1,
        ip_bytes: None,
    },
    Export {
        fixture: "softflowd-v10-sampled",
        protocol: Protocol::Ipfix,
        datagrams: 3,
        flows: 58,
        packets: 223,
        bytes: 80_085,
        sampling: 4,
        ip_bytes: None,
    },
    Export {
        fixture: "pmacctd-nfprobe-v10",
        protocol: Protocol::Ipfix,
        datagrams: 15,
        flows: 87,
        packets: 891,
        bytes: 325_339,
        sampling: 1,
        ip_bytes: None,
    },
    Export {
        fixture: "pmacctd-nfprobe-v9",
        protocol: Protocol::NetflowV9,
        datagrams: 15,
        flows: 87,
        packets: 891,
        bytes: 325_339,
        sampling: 1,
        ip_bytes: None,
    },
    Export {
        fixture: "pmacctd-sfprobe",
        protocol: Protocol::Sflow5,
        datagrams: 9,
        flows: 54,
        packets: 864,
        bytes: 280_960,
        sampling: 16,
        ip_bytes: Some(265_856),
    },
    Export {
        fixture: "nfreplay-v9",
        protocol: Protocol::NetflowV9,
        datagrams: 6,
        flows: 85,
        packets: 889,
        bytes: 325_277,
        sampling: 1,
        ip_bytes: None,
    },
];

/// The UDP payloads of a fixture capture, in order, with their source addresses.
fn datagrams(name: &str) -> Vec<([u8; 16], Vec<u8>)> {
    let path = format!("{}/tests/fixtures/{name}.pcap", env!("CARGO_MANIFEST_DIR"));
    let bytes = std::fs::read(&path).unwrap_or_else(|e| panic!("{path}: {e}"));
    let mut r = Reader::new(&bytes).unwrap();
    let mut v = Vec::new();
    while let Some(p) = r.next_packet() {
        let p = p.unwrap();
        let nl = network_layer(LinkType::Ethernet, p.data).unwrap();
        let ip = ipv4::Packet::new_checked(&p.data[nl.offset..]).unwrap();
        let u = udp::Packet::new_checked(ip.payload()).unwrap();
        let mut src = [0u8; 16];
        src[10..12].fill(0xff);
        src[12..].copy_from_slice(&ip.src_addr().octets());
        v.push((src, u.payload().to_vec()));
    }
    v
}

#[derive(Debug, Default, PartialEq, Eq)]
struct Totals {
    flows: u64,
    packets: u64,
    bytes: u64,
    /// Flows by the sampling they were scaled by: (unsampled, sampled).
    sampled: (u64, u64),
}

/// Decodes `msgs` with `d`: the totals, and the summaries.
fn decode(
    d: &mut Decoder,
    protocol: Protocol,
    msgs: &[([u8; 16], Vec<u8>)],
) -> (Totals, Vec<MessageSummary>) {
    let mut t = Totals::default();
    let mut sums = Vec::new();
    for (i, (src, m)) in msgs.iter().enumerate() {
        let s = d
            .decode(protocol, *src, m, 1_800_000_000_000_000_000, &mut |x| {
                if let Decoded::Flow(f) = x {
                    t.flows += 1;
                    t.packets += f.flow.fwd.packets + f.flow.rev.packets;
                    t.bytes += f.flow.fwd.octets + f.flow.rev.octets;
                    if f.sampling == 1 {
                        t.sampled.0 += 1;
                    } else {
                        t.sampled.1 += 1;
                    }
                }
            })
            .unwrap_or_else(|e| panic!("message {i}: {e}"));
        sums.push(s);
    }
    (t, sums)
}

#[test]
fn real_exporters_decode_to_nfdumps_totals() {
    for e in EXPORTS {
        let msgs = datagrams(e.fixture);
        assert_eq!(msgs.len(), e.datagrams, "{}", e.fixture);
        let mut d = Decoder::new(Limits::default());
        let (t, sums) = decode(&mut d, e.protocol, &msgs);
        let s = e.sampling;
        // sfcapd scales sFlow samples itself; nfcapd ignores IPFIX sampling options.
        let (packets, bytes) = if e.protocol == Protocol::Sflow5 {
            (e.packets, e.bytes)
        } else {
            (e.packets * s, e.bytes * s)
        };
        let bytes = e.ip_bytes.unwrap_or(bytes);
        let want = Totals {
            flows: e.flows,
            packets,
            bytes,
            sampled: if s == 1 { (e.flows, 0) } else { (0, e.flows) },
        };
        assert_eq!(t, want, "{}", e.fixture);
        for (i, s) in sums.iter().enumerate() {
            assert_eq!(
                (s.sequence_lost, s.template_missing, s.malformed),
                (0, 0, 0),
                "{} message {i}: {s:?}",
                e.fixture
            );
        }
        // Templates known, decoding the same datagrams again allocates nothing.
        let n = allocations(|| {
            decode(&mut d, e.protocol, &msgs);
        });
        let vec_allocs = 1 + msgs.len().ilog2() as u64 + 1; // the summaries' Vec growing
        assert!(n <= vec_allocs, "{}: {n} allocations", e.fixture);
    }
}

#[test]
fn netflow_parser_counts_the_same_records() {
    for e in EXPORTS.iter().filter(|e| e.protocol != Protocol::Sflow5) {
        let mut parser = NetflowParser::default();
        let mut records = 0u64;
        for (_, m) in datagrams(e.fixture) {
            let res = parser.parse_bytes(&m);
            assert!(res.error.is_none(), "{}: {:?}", e.fixture, res.error);
            for p in &res.packets {
                records += match p {
                    NetflowPacket::V5(v5) => v5.flowsets.len() as u64,
                    NetflowPacket::V9(V9 { flowsets, .. }) => flowsets
                        .iter()
                        .map(|fs| match &fs.body {
                            V9Body::Data(d) => d.fields.len() as u64,
                            _ => 0,
                        })
                        .sum(),
                    NetflowPacket::IPFix(IPFix { flowsets, .. }) => flowsets
                        .iter()
                        .map(|fs| match &fs.body {
                            IpfixBody::Data(d) => d.fields.len() as u64,
                            _ => 0,
                        })
                        .sum(),
                    other => panic!("{}: {other:?}", e.fixture),
                };
            }
        }
        assert_eq!(records, e.flows, "{}", e.fixture);
    }
}
