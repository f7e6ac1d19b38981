//! Rule semantics against libpcap as the oracle: for rules made from the packets themselves (so
//! that they match some and miss others), the program libpcap compiles from each rule's tcpdump
//! expression, our kernel program and our user-space matcher accept the same packets. The
//! packets are the corpus's real ones (the test prints one `skipped:` line without the corpus)
//! and frames built here with the packet builder.

#[path = "../../wire/tests/support/corpus.rs"]
mod corpus;
#[path = "../../wire/tests/support/traffic.rs"]
mod traffic;

use std::path::Path;

use corpus::corpus;
use tapflow_sys::bpf;
use tapflow_wire::LinkType;
use tapflow_wire::capfile::Reader;
use tapflow_wire::cbpf::{self, Insn};
use tapflow_wire::rule_bpf::{self, Precision};
use tapflow_wire::rule_match::Matcher;
use tapflow_wire::rules::{PortRange, Prefix, Rule, Tuple};

const SNAPLEN: u32 = 96;

/// Whole (not truncated) Ethernet frames from the corpus in `dir`, at most `per_file` from each
/// file.
fn frames(dir: &Path, per_file: usize) -> Vec<Vec<u8>> {
    let mut out = Vec::new();
    let mut names: Vec<_> = std::fs::read_dir(dir)
        .expect("corpus directory")
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "pcap" || x == "pcapng"))
        .collect();
    names.sort();
    for path in names {
        let bytes = std::fs::read(&path).unwrap();
        let Ok(mut r) = Reader::new(&bytes) else {
            continue;
        };
        let mut n = 0;
        while let Some(Ok(p)) = r.next_packet() {
            let eth = r.interfaces()[p.interface as usize].linktype == LinkType::Ethernet;
            if eth && p.data.len() as u32 == p.len {
                out.push(p.data.to_vec());
                n += 1;
                if n == per_file {
                    break;
                }
            }
        }
    }
    assert!(
        out.len() > 3000,
        "only {} frames from the corpus",
        out.len()
    );
    out
}

/// Over 3000 Ethernet frames built with the packet builder: 400 conversations of TCP and UDP
/// over IPv4 and IPv6, both ways; among them frames with a VLAN tag, ICMP, first and later IP
/// fragments, and an ARP frame.
fn built_frames() -> Vec<Vec<u8>> {
    let mut out = vec![traffic::arp_frame()];
    for (i, p) in traffic::conversations(0, 400, 8, 0, 1)
        .into_iter()
        .enumerate()
    {
        let f = p.data;
        let v6 = f[12..14] == [0x86, 0xdd];
        match i % 10 {
            0 => out.push(traffic::with_vlans(&f, &[5])),
            1 => out.push(traffic::with_protocol(&f, if v6 { 58 } else { 1 })),
            2 if f.len() > 300 && v6 => out.extend(traffic::fragments_v6(&f, 128, i as u32)),
            2 if f.len() > 300 => out.extend(traffic::fragments_v4(&f, 128, i as u16)),
            _ => {}
        }
        out.push(f);
    }
    assert!(out.len() > 3000, "only {} built frames", out.len());
    out
}

/// A small deterministic generator (xorshift), so failures reproduce.
struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
    fn chance(&mut self, percent: u64) -> bool {
        self.below(100) < percent
    }
}

fn prefix_of(addr: &[u8; 16], ipv6: bool, len: u8) -> Prefix {
    let text = if ipv6 {
        std::net::Ipv6Addr::from(*addr).to_string()
    } else {
        std::net::Ipv4Addr::new(addr[0], addr[1], addr[2], addr[3]).to_string()
    };
    let mut p: Prefix = text.parse().unwrap();
    // Clear the host bits by reparsing the masked address.
    for (i, b) in p.addr.iter_mut().enumerate() {
        let bits = u32::from(len).saturating_sub(i as u32 * 8).min(8);
        *b &= (0xff00u16 >> bits) as u8;
    }
    p.len = len;
    p
}

/// A rule around one packet's tuple: each field kept, widened or dropped at random.
fn rule_near(t: &Tuple, name: String, rng: &mut Rng) -> Rule {
    let max = if t.ipv6 { 128 } else { 32 };
    let prefix = |a: &[u8; 16], rng: &mut Rng| {
        rng.chance(60)
            .then(|| prefix_of(a, t.ipv6, rng.below(max + 1) as u8))
    };
    let src = prefix(&t.src, rng);
    let dst = prefix(&t.dst, rng);
    let range = |p: u16, rng: &mut Rng| -> Option<PortRange> {
        match rng.below(4) {
            0 => None,
            1 => Some(PortRange { lo: p, hi: p }),
            2 => Some(PortRange {
                lo: p.saturating_sub(rng.below(100) as u16),
                hi: p.saturating_add(rng.below(100) as u16),
            }),
            _ => Some(PortRange {
                lo: p.wrapping_add(1).max(1),
                hi: p.wrapping_add(1).max(1),
            }),
        }
    };
    let (sport, dport) = match t.ports {
        Some((s, d)) if rng.chance(70) => (range(s, rng), range(d, rng)),
        _ => (None, None),
    };
    let ports = sport.is_some() || dport.is_some();
    let proto = if rng.chance(60) {
        Some(t.proto)
    } else if rng.chance(20) && !ports {
        Some(if t.ipv6 { 58 } else { 1 })
    } else {
        None
    };
    let proto = match proto {
        Some(p) if ports && ![6, 17, 132].contains(&p) => None,
        p => p,
    };
    Rule {
        name,
        proto,
        src,
        dst,
        sport,
        dport,
        both: rng.chance(40),
    }
}

fn libpcap(expr: &str) -> Vec<Insn> {
    bpf::compile(expr, bpf::LINKTYPE_ETHERNET, SNAPLEN)
        .unwrap_or_else(|e| panic!("libpcap refused '{expr}': {e}"))
        .iter()
        .map(|i| Insn {
            code: i.code,
            jt: i.jt,
            jf: i.jf,
            k: i.k,
        })
        .collect()
}

fn accepts(prog: &[Insn], f: &[u8]) -> bool {
    cbpf::run(prog, f, f.len() as u32) != 0
}

fn tuples(frames: &[Vec<u8>]) -> Vec<Tuple> {
    frames
        .iter()
        .filter_map(|f| Tuple::of_frame(LinkType::Ethernet, f))
        .collect()
}

#[test]
fn each_rule_accepts_what_libpcap_accepts() {
    let Some(dir) = corpus() else { return };
    each_rule_accepts_what_libpcap_accepts_on(&frames(&dir, 400));
}

#[test]
fn each_rule_accepts_what_libpcap_accepts_on_built_frames() {
    each_rule_accepts_what_libpcap_accepts_on(&built_frames());
}

/// 200 rules, each near one frame's tuple: libpcap's program, ours and the user-space matcher
/// accept the same frames, some but not all.
fn each_rule_accepts_what_libpcap_accepts_on(frames: &[Vec<u8>]) {
    let ts = tuples(frames);
    let mut rng = Rng(0x5eed_1234_abcd_0001);
    let mut checked = 0;
    let mut accepted = 0;
    for n in 0..200 {
        let t = ts[rng.below(ts.len() as u64) as usize];
        let rule = rule_near(&t, format!("r{n}"), &mut rng);
        let oracle = libpcap(&rule.to_pcap());
        let ours = rule_bpf::compile(std::slice::from_ref(&rule), SNAPLEN, 4096);
        assert_eq!(ours.precision, Precision::Exact);
        cbpf::validate(&ours.program).unwrap();
        for f in frames {
            let want = accepts(&oracle, f);
            assert_eq!(
                accepts(&ours.program, f),
                want,
                "rule '{rule}' ({}) on frame {:02x?}",
                rule.to_pcap(),
                &f[..f.len().min(64)]
            );
            let user = Tuple::of_frame(LinkType::Ethernet, f).is_some_and(|t| rule.matches(&t));
            assert_eq!(
                user,
                want,
                "user-space match of '{rule}' on {:02x?}",
                &f[..64.min(f.len())]
            );
            accepted += u64::from(want);
            checked += 1;
        }
    }
    eprintln!("{accepted} of {checked} rule × frame pairs accepted");
    // The rules were drawn from the packets: a real share must match, and not all.
    assert!(
        accepted * 1000 > checked && accepted < checked,
        "{accepted} of {checked}"
    );
}

#[test]
fn a_large_set_matches_first_rule_like_libpcap() {
    let Some(dir) = corpus() else { return };
    a_large_set_matches_first_rule_like_libpcap_on(&frames(&dir, 150));
}

#[test]
fn a_large_set_matches_first_rule_like_libpcap_on_built_frames() {
    a_large_set_matches_first_rule_like_libpcap_on(&built_frames());
}

/// 120 rules near the frames' tuples: the matcher picks the first rule libpcap accepts, and the
/// whole set's kernel program (when exact) accepts what any rule does.
fn a_large_set_matches_first_rule_like_libpcap_on(frames: &[Vec<u8>]) {
    let ts = tuples(frames);
    let mut rng = Rng(0x0dd_ba11_5eed_0002);
    let rules: Vec<Rule> = (0..120)
        .map(|n| {
            rule_near(
                &ts[rng.below(ts.len() as u64) as usize],
                format!("r{n}"),
                &mut rng,
            )
        })
        .collect();
    let matcher = Matcher::new(rules.clone());
    let singles: Vec<Vec<Insn>> = rules.iter().map(|r| libpcap(&r.to_pcap())).collect();
    let whole = rule_bpf::compile(&rules, SNAPLEN, 4096);
    let mut hits = 0;
    for f in frames {
        let first = singles.iter().position(|p| accepts(p, f));
        let t = Tuple::of_frame(LinkType::Ethernet, f);
        assert_eq!(
            t.and_then(|t| matcher.classify(&t)),
            first,
            "frame {:02x?}",
            &f[..64.min(f.len())]
        );
        if whole.precision == Precision::Exact {
            assert_eq!(accepts(&whole.program, f), first.is_some());
        }
        hits += u64::from(first.is_some());
    }
    eprintln!("{hits} of {} frames matched a rule", frames.len());
    assert!(hits > 0 && hits < frames.len() as u64, "{hits}");
}

#[test]
fn ten_thousand_prefix_rules_prefilter_and_match() {
    let mut text = String::new();
    for i in 0..10_000u32 {
        text += &format!(
            "p{i} proto {} dst 10.{}.{}.0/24 dport {} both\n",
            if i % 2 == 0 { "tcp" } else { "udp" },
            i / 256,
            i % 256,
            1000 + i % 50
        );
    }
    let rules = tapflow_wire::rules::parse_rules(&text).unwrap();
    let prog = rule_bpf::compile(&rules, SNAPLEN, 4096);
    assert_ne!(prog.precision, Precision::Exact);
    assert!(prog.program.len() <= 4096);
    cbpf::validate(&prog.program).unwrap();
    let matcher = Matcher::new(rules.clone());
    let mut rng = Rng(0x1000_0000_0003);
    let mut hits = 0;
    for _ in 0..5_000 {
        let i = rng.below(10_050) as u32;
        // Mostly the protocol and port of rule i; sometimes not.
        let near = rng.chance(70);
        let mut t = Tuple {
            proto: if i.is_multiple_of(2) == near { 6 } else { 17 },
            ports: Some((
                rng.below(2000) as u16,
                if near {
                    1000 + (i % 50) as u16
                } else {
                    1000 + rng.below(60) as u16
                },
            )),
            ..Tuple::default()
        };
        t.dst[..4].copy_from_slice(&[10, (i / 256) as u8, (i % 256) as u8, 7]);
        t.src[..4].copy_from_slice(&[192, 0, 2, rng.below(255) as u8]);
        if rng.chance(30) {
            std::mem::swap(&mut t.src, &mut t.dst);
            t.ports = t.ports.map(|(a, b)| (b, a));
        }
        let linear = rules.iter().position(|r| r.matches(&t));
        assert_eq!(matcher.classify(&t), linear, "{t:?}");
        hits += usize::from(linear.is_some());
    }
    assert!(hits > 1_250 && hits < 3_750, "{hits} of 5000 matched");
}
