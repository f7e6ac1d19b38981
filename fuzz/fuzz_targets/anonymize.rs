//! Arbitrary bytes under every link type through the anonymiser (`Anonymizer::frame`, with its
//! walk into quoted and tunnelled headers): nothing may panic, and the frame keeps its length.
#![no_main]

use libfuzzer_sys::fuzz_target;
use tapflow_wire::LinkType;
use tapflow_wire::cryptopan::{Anonymizer, CryptoPan};

const LINK_TYPES: [LinkType; 10] = [
    LinkType::Null,
    LinkType::Ethernet,
    LinkType::Ppp,
    LinkType::Raw,
    LinkType::Loop,
    LinkType::LinuxSll,
    LinkType::Ipv4,
    LinkType::Ipv6,
    LinkType::Nflog,
    LinkType::LinuxSll2,
];

fuzz_target!(|data: &[u8]| {
    let Some((&pick, frame)) = data.split_first() else {
        return;
    };
    let mut anonymizer = Anonymizer::new(CryptoPan::new(&[7u8; 32]));
    let mut copy = frame.to_vec();
    anonymizer.frame(LINK_TYPES[usize::from(pick) % LINK_TYPES.len()], &mut copy);
    assert_eq!(copy.len(), frame.len());
});
