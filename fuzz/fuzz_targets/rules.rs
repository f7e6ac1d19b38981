//! Arbitrary bytes as a rule file and a frame (Ethernet, raw IP, SLL or SLL2). Parsing never
//! panics; a parsed rule prints and parses back to itself; on the frame, the tuple-space
//! matcher picks the first rule a linear scan matches; on Ethernet, the compiled socket filter
//! passes every frame the rules match, and, when it is exact, only those.
#![no_main]

use libfuzzer_sys::fuzz_target;
use tapflow_wire::LinkType;
use tapflow_wire::cbpf;
use tapflow_wire::rule_bpf::{self, Precision};
use tapflow_wire::rule_match::Matcher;
use tapflow_wire::rules::{self, Rule, Tuple};

fuzz_target!(|data: &[u8]| {
    // The text is everything up to the first NUL; the byte after it picks the link type, the
    // frame is what follows.
    let (text, rest) = match data.iter().position(|&b| b == 0) {
        Some(i) => (&data[..i], &data[i + 1..]),
        None => (data, &[][..]),
    };
    let (linktype, frame) = match rest.split_first() {
        Some((&b, f)) => (
            match b % 4 {
                0 => LinkType::Ethernet,
                1 => LinkType::Raw,
                2 => LinkType::LinuxSll,
                _ => LinkType::LinuxSll2,
            },
            f,
        ),
        None => (LinkType::Ethernet, rest),
    };
    let Ok(text) = std::str::from_utf8(text) else {
        return;
    };
    let Ok(rules) = rules::parse_rules(text) else {
        return;
    };
    if rules.is_empty() || rules.len() > 64 {
        return;
    }
    for r in &rules {
        let again = Rule::parse(&r.to_string()).expect("a printed rule parses");
        assert_eq!(&again, r);
    }
    let tuple = Tuple::of_frame(linktype, frame);
    let version = Tuple::ip_version(linktype, frame).map(|(_, v6)| v6);
    // The rules' meaning: the first that matches the tuple; for an IP frame too short for
    // its addresses, the first that tests nothing but the IP version.
    let linear = match &tuple {
        Some(t) => rules.iter().position(|r| r.matches(t)),
        None => version.and_then(|v6| {
            rules
                .iter()
                .position(|r| r.is_whole_family() && r.family().covers(v6))
        }),
    };
    let matcher = Matcher::new(rules.clone());
    assert_eq!(matcher.classify_frame(linktype, frame), linear);
    // The socket filter is written for Ethernet, the link type of live captures.
    if linktype != LinkType::Ethernet {
        return;
    }
    // A frame that holds every byte a rule's program may load (the longest IPv4 header and
    // the ports after it), or one that is not IP: the kernel program agrees. A shorter IP
    // frame may be refused at the first load past its end, as by libpcap's own programs,
    // unless a rule for the whole IP version took it.
    let complete = frame.len() >= 14 + 60 + 8 || version.is_none();
    let whole = linear.is_some_and(|i| rules[i].is_whole_family());
    for budget in [cbpf::BPF_MAXINSNS, 64] {
        let prog = rule_bpf::compile(&rules, 96, budget);
        let passed = cbpf::run(&prog.program, frame, frame.len() as u32) != 0;
        if linear.is_some() && (complete || whole) {
            assert!(
                passed,
                "the filter ({:?}) refuses a frame a rule matches",
                prog.precision
            );
        }
        if prog.precision == Precision::Exact && complete {
            assert_eq!(
                passed,
                linear.is_some(),
                "the exact filter disagrees with the rules"
            );
        }
    }
});
