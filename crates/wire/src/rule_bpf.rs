//! Rules compiled into one classic-BPF socket filter for Ethernet or Linux cooked v2 frames.
//!
//! The program tests the EtherType once, then runs through the IPv4 (or IPv6) rules in order,
//! each rule a straight run of loads and comparisons that falls through to the next rule on the
//! first mismatch and returns the snaplen at its end. The tests are the ones libpcap emits for
//! the rule's [`to_pcap`](crate::rules::Rule::to_pcap) expression.
//!
//! A rule costs 3 to 40 instructions and the kernel takes 4096. When the rules do not fit, the
//! program is made coarser until it does — first without addresses, then without ports, then
//! by IP version alone — and the exact match runs in user space on what the kernel passes:
//! [`Precision`] says which program was built.

use std::collections::HashSet;

use crate::LinkType;
use crate::cbpf::{self, Insn};
use crate::rules::{Family, PORT_PROTOCOLS, PortRange, Prefix, Rule};

/// How closely the kernel program follows the rules.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Precision {
    /// Exactly the rules.
    Exact,
    /// Protocols and ports; addresses are matched in user space.
    Ports,
    /// Protocols only.
    Protocols,
    /// IPv4 and/or IPv6 only.
    Family,
}

impl Precision {
    /// How the filter is described to people.
    pub fn describe(self) -> &'static str {
        match self {
            Precision::Exact => "exact in the kernel",
            Precision::Ports => {
                "kernel prefilter on protocols and ports, exact match in user space"
            }
            Precision::Protocols => "kernel prefilter on protocols, exact match in user space",
            Precision::Family => "kernel prefilter on IP version, exact match in user space",
        }
    }
}

/// A compiled rule set.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RuleProgram {
    /// The socket filter; it returns `snaplen` for a packet it passes.
    pub program: Vec<Insn>,
    /// How exact it is.
    pub precision: Precision,
}

/// One direction of one rule, as far as the chosen precision keeps it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
struct Entry {
    family: Family,
    proto: Option<u8>,
    src: Option<Prefix>,
    dst: Option<Prefix>,
    sport: Option<PortRange>,
    dport: Option<PortRange>,
}

impl Entry {
    fn coarsened(mut self, p: Precision) -> Entry {
        if p >= Precision::Ports {
            (self.src, self.dst) = (None, None);
        }
        if p >= Precision::Protocols {
            (self.sport, self.dport) = (None, None);
        }
        if p >= Precision::Family {
            self.proto = None;
        }
        self
    }

    fn has_ports(&self) -> bool {
        self.sport.is_some() || self.dport.is_some()
    }

    /// Whether it passes every packet of its IP version.
    fn is_whole_family(&self) -> bool {
        crate::rules::only_family(self.proto, self.src, self.dst, self.has_ports())
    }
}

/// Compiles `rules` into a program for Ethernet frames of at most `budget` instructions (at
/// most [`cbpf::BPF_MAXINSNS`]), as exact as fits. An empty rule set passes nothing.
pub fn compile(rules: &[Rule], snaplen: u32, budget: usize) -> RuleProgram {
    compile_for(LinkType::Ethernet, rules, snaplen, budget)
}

/// [`compile`] for frames of `linktype`: Ethernet, or Linux cooked v2 (whose program a
/// `SOCK_DGRAM` socket runs after [`crate::sll::for_cooked_socket`]); any other link type is
/// compiled as Ethernet.
pub fn compile_for(linktype: LinkType, rules: &[Rule], snaplen: u32, budget: usize) -> RuleProgram {
    let frame = Frame::of(linktype);
    let budget = budget.min(cbpf::BPF_MAXINSNS);
    let entries: Vec<Entry> = rules
        .iter()
        .flat_map(Rule::directions)
        .map(|r| Entry {
            family: r.family(),
            proto: r.proto,
            src: r.src,
            dst: r.dst,
            sport: r.sport,
            dport: r.dport,
        })
        .collect();
    let levels = [
        Precision::Exact,
        Precision::Ports,
        Precision::Protocols,
        Precision::Family,
    ];
    let mut last = None;
    for precision in levels {
        let mut seen = HashSet::new();
        let kept: Vec<Entry> = entries
            .iter()
            .map(|e| e.coarsened(precision))
            .filter(|e| seen.insert(*e))
            .collect();
        let program = program(frame, &kept, snaplen);
        if program.len() <= budget {
            return RuleProgram { program, precision };
        }
        last = Some(RuleProgram { program, precision });
    }
    // By IP version alone the program has at most 8 instructions.
    last.unwrap_or(RuleProgram {
        program: vec![Insn::stmt(cbpf::RET_K, 0)],
        precision: Precision::Exact,
    })
}

/// Where a link type puts the EtherType and the IP header.
#[derive(Debug, Clone, Copy)]
struct Frame {
    ethertype_at: u32,
    ip_at: u32,
}

impl Frame {
    fn of(linktype: LinkType) -> Frame {
        match linktype {
            LinkType::LinuxSll2 => Frame {
                ethertype_at: 0,
                ip_at: crate::sll::HEADER_LEN as u32,
            },
            _ => Frame {
                ethertype_at: 12,
                ip_at: 14,
            },
        }
    }
}

fn program(frame: Frame, entries: &[Entry], snaplen: u32) -> Vec<Insn> {
    let section = |v6: bool| -> Vec<Insn> {
        let applies = |e: &&Entry| e.family.covers(v6);
        // A rule for the whole IP version passes everything the others could: the section is
        // one `ret`, and no other rule's load can refuse a short packet before it is reached.
        if entries.iter().filter(applies).any(Entry::is_whole_family) {
            return vec![Insn::stmt(cbpf::RET_K, snaplen)];
        }
        let mut code = Vec::new();
        for e in entries.iter().filter(applies) {
            code.extend(resolve(entry_code(frame.ip_at, e, v6), snaplen));
        }
        code.push(Insn::stmt(cbpf::RET_K, 0));
        code
    };
    let (v4, v6) = (section(false), section(true));
    let reject = [Insn::stmt(cbpf::RET_K, 0)];
    if v4 == reject && v6 == reject {
        return reject.to_vec();
    }
    let mut prog = vec![
        Insn::stmt(cbpf::LD_H_ABS, frame.ethertype_at),
        Insn::jump(cbpf::JEQ_K, 0x0800, 0, 1),
        Insn::stmt(cbpf::JA, 3),
        Insn::jump(cbpf::JEQ_K, 0x86dd, 0, 1),
        Insn::stmt(cbpf::JA, v4.len() as u32 + 1),
        Insn::stmt(cbpf::RET_K, 0),
    ];
    prog.extend(v4);
    prog.extend(v6);
    prog
}

/// An instruction of one rule's code, whose jumps may go to the next rule (`Fail`).
#[derive(Debug, Clone, Copy)]
enum Op {
    Stmt(Insn),
    /// A conditional jump; `None` targets the next rule.
    Jump {
        code: u16,
        k: u32,
        jt: Option<u8>,
        jf: Option<u8>,
    },
}

fn jeq_or_fail(k: u32) -> Op {
    Op::Jump {
        code: cbpf::JEQ_K,
        k,
        jt: Some(0),
        jf: None,
    }
}

/// The tests of one entry, ending in `ret #snaplen` (added by [`resolve`]).
fn entry_code(ip_at: u32, e: &Entry, v6: bool) -> Vec<Op> {
    let mut ops = Vec::new();
    let proto_at = if v6 { ip_at + 6 } else { ip_at + 9 };
    match (e.proto, v6) {
        (Some(p), true) if !e.has_ports() => {
            // As `ip6 proto P`: the next header, or the one after a fragment header.
            ops.push(Op::Stmt(Insn::stmt(cbpf::LD_B_ABS, proto_at)));
            ops.push(Op::Jump {
                code: cbpf::JEQ_K,
                k: u32::from(p),
                jt: Some(3),
                jf: Some(0),
            });
            ops.push(jeq_or_fail(44));
            ops.push(Op::Stmt(Insn::stmt(cbpf::LD_B_ABS, ip_at + 40)));
            ops.push(jeq_or_fail(u32::from(p)));
        }
        (Some(p), _) => {
            ops.push(Op::Stmt(Insn::stmt(cbpf::LD_B_ABS, proto_at)));
            ops.push(jeq_or_fail(u32::from(p)));
        }
        (None, _) if e.has_ports() => {
            ops.push(Op::Stmt(Insn::stmt(cbpf::LD_B_ABS, proto_at)));
            let n = PORT_PROTOCOLS.len();
            for (i, p) in PORT_PROTOCOLS.iter().enumerate() {
                let last = i + 1 == n;
                ops.push(Op::Jump {
                    code: cbpf::JEQ_K,
                    k: u32::from(*p),
                    jt: Some((n - i - 1) as u8),
                    jf: if last { None } else { Some(0) },
                });
            }
        }
        (None, _) => {}
    }
    let (src_at, dst_at) = if v6 {
        (ip_at + 8, ip_at + 24)
    } else {
        (ip_at + 12, ip_at + 16)
    };
    for (at, prefix) in [(src_at, e.src), (dst_at, e.dst)] {
        let Some(prefix) = prefix else { continue };
        for (w, (value, mask)) in prefix.words().enumerate() {
            ops.push(Op::Stmt(Insn::stmt(cbpf::LD_W_ABS, at + 4 * w as u32)));
            if mask != u32::MAX {
                ops.push(Op::Stmt(Insn::stmt(cbpf::AND_K, mask)));
            }
            ops.push(jeq_or_fail(value));
        }
    }
    if e.has_ports() {
        let (load, sport_at) = if v6 {
            (cbpf::LD_H_ABS, ip_at + 40)
        } else {
            ops.push(Op::Stmt(Insn::stmt(cbpf::LD_H_ABS, ip_at + 6)));
            ops.push(Op::Jump {
                code: cbpf::JSET_K,
                k: 0x1fff,
                jt: None,
                jf: Some(0),
            });
            ops.push(Op::Stmt(Insn::stmt(cbpf::LDX_MSH, ip_at)));
            (cbpf::LD_H_IND, ip_at)
        };
        for (at, range) in [(sport_at, e.sport), (sport_at + 2, e.dport)] {
            let Some(r) = range else { continue };
            ops.push(Op::Stmt(Insn::stmt(load, at)));
            if r.lo == r.hi {
                ops.push(jeq_or_fail(u32::from(r.lo)));
            } else {
                ops.push(Op::Jump {
                    code: cbpf::JGE_K,
                    k: u32::from(r.lo),
                    jt: Some(0),
                    jf: None,
                });
                ops.push(Op::Jump {
                    code: cbpf::JGT_K,
                    k: u32::from(r.hi),
                    jt: None,
                    jf: Some(0),
                });
            }
        }
    }
    ops
}

/// Turns one entry's ops into instructions: `ret #snaplen` at the end, and jumps to the next
/// rule aimed just past it. An entry is at most 40 instructions, within a jump's 255.
fn resolve(ops: Vec<Op>, snaplen: u32) -> impl Iterator<Item = Insn> {
    let n = ops.len();
    ops.into_iter()
        .enumerate()
        .map(move |(i, op)| match op {
            Op::Stmt(s) => s,
            Op::Jump { code, k, jt, jf } => {
                // From instruction i, the next rule starts after the final `ret`, at n + 1.
                let fail = (n - i) as u8;
                Insn::jump(code, k, jt.unwrap_or(fail), jf.unwrap_or(fail))
            }
        })
        .chain(std::iter::once(Insn::stmt(cbpf::RET_K, snaplen)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::LinkType;
    use crate::rules::{Tuple, parse_rules};

    fn frame(v6: bool, proto: u8, src: [u8; 16], dst: [u8; 16], ports: (u16, u16)) -> Vec<u8> {
        let mut f = vec![2u8; 12];
        if v6 {
            f.extend_from_slice(&[0x86, 0xdd, 0x60, 0, 0, 0, 0, 8, proto, 64]);
            f.extend_from_slice(&src);
            f.extend_from_slice(&dst);
        } else {
            f.extend_from_slice(&[0x08, 0, 0x45, 0, 0, 28, 0, 0, 0, 0, 64, proto, 0, 0]);
            f.extend_from_slice(&src[..4]);
            f.extend_from_slice(&dst[..4]);
        }
        f.extend_from_slice(&ports.0.to_be_bytes());
        f.extend_from_slice(&ports.1.to_be_bytes());
        f.extend_from_slice(&[0, 8, 0, 0]);
        f
    }

    fn v4(a: [u8; 4]) -> [u8; 16] {
        let mut b = [0; 16];
        b[..4].copy_from_slice(&a);
        b
    }

    const RULES: &str = "\
        web proto tcp dst 10.1.0.0/16 dport 80-443 both
        dns proto udp dport 53
        net6 src 2001:db8::/33 proto 17
        anyport sport 7
    ";

    #[test]
    fn exact_program_agrees_with_the_rules() {
        let rules = parse_rules(RULES).unwrap();
        let p = compile(&rules, 96, 4096);
        assert_eq!(p.precision, Precision::Exact);
        cbpf::validate(&p.program).unwrap();
        let a = v4([10, 1, 2, 3]);
        let b = v4([192, 0, 2, 1]);
        let mut six = [0u8; 16];
        six[..4].copy_from_slice(&[0x20, 0x01, 0x0d, 0xb8]);
        let cases = [
            (frame(false, 6, b, a, (5000, 443)), true),
            (frame(false, 6, a, b, (443, 5000)), true),
            (frame(false, 6, a, b, (5000, 443)), false),
            (frame(false, 17, a, b, (5000, 53)), true),
            (frame(false, 17, a, b, (53, 5000)), false),
            (frame(true, 17, six, a, (1, 2)), true),
            (frame(true, 6, six, a, (1, 2)), false),
            (frame(true, 132, a, a, (7, 2)), true),
            (frame(false, 1, a, b, (7, 2)), false),
        ];
        for (i, (f, want)) in cases.iter().enumerate() {
            let verdict = cbpf::run(&p.program, f, f.len() as u32);
            assert_eq!(verdict != 0, *want, "case {i}");
            assert!(verdict == 0 || verdict == 96);
            let t = Tuple::of_frame(LinkType::Ethernet, f).unwrap();
            assert_eq!(rules.iter().any(|r| r.matches(&t)), *want, "tuple case {i}");
        }
    }

    #[test]
    fn cooked_frames_get_the_same_verdicts() {
        let rules = parse_rules(RULES).unwrap();
        let eth = compile(&rules, 96, 4096);
        let sll2 = compile_for(LinkType::LinuxSll2, &rules, 96, 4096);
        assert_eq!(sll2.precision, Precision::Exact);
        assert_eq!(sll2.program.len(), eth.program.len());
        let a = v4([10, 1, 2, 3]);
        let mut six = [0u8; 16];
        six[..4].copy_from_slice(&[0x20, 0x01, 0x0d, 0xb8]);
        for f in [
            frame(false, 6, v4([192, 0, 2, 1]), a, (5000, 443)),
            frame(false, 6, a, a, (5000, 443)),
            frame(false, 17, a, a, (5000, 53)),
            frame(true, 17, six, a, (1, 2)),
            frame(true, 6, six, a, (1, 2)),
        ] {
            // The EtherType first, then interface 3, ARPHRD_ETHER, PACKET_HOST, a MAC.
            let mut cooked = f[12..14].to_vec();
            cooked.extend_from_slice(&[0, 0, 0, 0, 0, 3, 0, 1, 0, 6, 2, 2, 2, 2, 2, 2, 0, 0]);
            cooked.extend_from_slice(&f[14..]);
            let want = cbpf::run(&eth.program, &f, f.len() as u32);
            assert_eq!(cbpf::run(&sll2.program, &cooked, cooked.len() as u32), want);
        }
    }

    #[test]
    fn coarser_programs_pass_a_superset() {
        let text: String = (0..3000)
            .map(|i| {
                format!(
                    "r{i} proto tcp dst 10.{}.{}.0/24 dport 80\n",
                    i / 256,
                    i % 256
                )
            })
            .collect();
        let rules = parse_rules(&text).unwrap();
        let p = compile(&rules, 64, 4096);
        assert_eq!(p.precision, Precision::Ports);
        assert!(p.program.len() < 20, "{}", p.program.len());
        let hit = frame(false, 6, v4([1, 1, 1, 1]), v4([10, 3, 7, 9]), (9, 80));
        let port_miss = frame(false, 6, v4([1, 1, 1, 1]), v4([10, 3, 7, 9]), (9, 81));
        assert_eq!(cbpf::run(&p.program, &hit, 60), 64);
        assert_eq!(cbpf::run(&p.program, &port_miss, 60), 0);
        // Protocols: 6 for the EtherType, ldb + jeq + ret, ret #0 twice.
        assert_eq!(compile(&rules, 64, 11).precision, Precision::Protocols);
        assert_eq!(compile(&rules, 64, 10).precision, Precision::Family);
        assert_eq!(compile(&rules, 64, 10).program.len(), 8);
    }

    #[test]
    fn empty_and_everything() {
        let none = compile(&[], 64, 4096);
        assert_eq!(none.program, vec![Insn::stmt(cbpf::RET_K, 0)]);
        let all = compile(&parse_rules("all\n").unwrap(), 64, 4096);
        let f = frame(true, 0, [0; 16], [0; 16], (0, 0));
        assert_eq!(cbpf::run(&all.program, &f, 60), 64);
        let arp = [&[0u8; 12][..], &[0x08, 0x06], &[0; 28]].concat();
        assert_eq!(cbpf::run(&all.program, &arp, 42), 0);
    }

    /// An IPv4 frame cut 3 bytes into its header: a rule for the whole IP version takes it in
    /// the kernel program and in user space alike, even behind a rule that would read past its
    /// end; without such a rule neither keeps it.
    #[test]
    fn short_ip_frames_match_only_whole_family_rules() {
        use crate::rule_match::Matcher;
        let mut short = vec![2u8; 12];
        short.extend_from_slice(&[0x08, 0x00, 0x45, 0, 0]);
        assert_eq!(Tuple::of_frame(LinkType::Ethernet, &short), None);
        assert_eq!(
            Tuple::ip_version(LinkType::Ethernet, &short),
            Some((14, false))
        );
        let with_any = parse_rules("a proto tcp dport 80\nb\n").unwrap();
        let p = compile(&with_any, 96, cbpf::BPF_MAXINSNS);
        assert_eq!(p.precision, Precision::Exact);
        assert_eq!(cbpf::run(&p.program, &short, short.len() as u32), 96);
        assert_eq!(Matcher::new(with_any).classify_short(false), Some(1));
        let v6_only = parse_rules("a proto tcp\nb src ::/0\n").unwrap();
        let p = compile(&v6_only, 96, cbpf::BPF_MAXINSNS);
        assert_eq!(cbpf::run(&p.program, &short, short.len() as u32), 0);
        let m = Matcher::new(v6_only);
        assert_eq!(
            (m.classify_short(false), m.classify_short(true)),
            (None, Some(1))
        );
    }
}
