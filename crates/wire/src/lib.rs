//! tapflow's wire formats: pure views and encoders over bytes.
//!
//! Nothing here performs I/O, allocates on the packet path or uses `unsafe`. Every parser takes
//! untrusted bytes and returns an error instead of panicking.
#![forbid(unsafe_code)]

pub mod bytes;
pub mod linktype;
pub mod record;

// Packet views (one file per protocol).
pub mod build;
pub mod checksum;
pub mod cryptopan;
pub mod ethernet;
pub mod icmp;
pub mod inner;
pub mod ipv4;
pub mod ipv6;
pub mod link;
pub mod tcp;
pub mod udp;

// Flows.
pub mod flowdecode;
pub mod flowexport;
pub mod flowrecord;
pub mod ipfix;
pub mod netflow5;
pub mod netflow9;
pub mod sflow;
pub mod template;

// Capture files.
pub mod capfile;
pub mod cbpf;
pub mod datagram;
pub mod erf;
pub mod flowkey;
pub mod pcap;
pub mod pcapng;
pub mod prefix;
pub mod rule_bpf;
pub mod rule_match;
pub mod rules;
pub mod sll;

pub use linktype::LinkType;
pub use record::{ControlField, Direction, Flags, TsSource};
