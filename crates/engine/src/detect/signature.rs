//! What one unit of traffic (a packet, or one direction of a flow record) is, as detection
//! sees it: its destination, its source, and the signatures that tell floods apart.
//!
//! The signatures are the ones DDoS mitigation sorts traffic by: a TCP SYN without ACK (SYN
//! flood, and the SYNs of a scan); a TCP SYN-ACK (reflection off TCP servers); UDP from a
//! port of a service that answers small queries with large replies (amplification); IP
//! fragments (a fragment flood, or the tail of an amplified reply); ICMP.

use tapflow_wire::flowkey::FlowFields;
use tapflow_wire::flowrecord::{Counters, FlowRecord};

const TCP: u8 = 6;
const UDP: u8 = 17;
const SYN: u16 = 0x02;
const ACK: u16 = 0x10;

/// UDP source ports of amplifying services, and each one's name (the alert kind's prefix).
pub const REFLECTORS: [(u16, &str); 9] = [
    (19, "chargen"),
    (53, "dns"),
    (123, "ntp"),
    (161, "snmp"),
    (389, "cldap"),
    (500, "isakmp"),
    (1900, "ssdp"),
    (4500, "isakmp"),
    (11211, "memcached"),
];

/// The name of an amplifying service's UDP port.
pub fn reflector(port: u16) -> Option<&'static str> {
    REFLECTORS
        .iter()
        .find(|(p, _)| *p == port)
        .map(|(_, name)| *name)
}

/// The protocol classes the mix is told in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ProtoClass {
    /// TCP.
    Tcp = 0,
    /// UDP.
    Udp = 1,
    /// ICMP or ICMPv6.
    Icmp = 2,
    /// Anything else.
    Other = 3,
}

/// The signatures, as indexes into a count array.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Signature {
    /// A TCP segment with SYN and without ACK.
    Syn = 0,
    /// A TCP segment with SYN and ACK.
    SynAck = 1,
    /// UDP from one of [`REFLECTORS`]' ports.
    Reflection = 2,
    /// An IP fragment.
    Fragment = 3,
}

/// Number of [`Signature`]s.
pub const SIGNATURES: usize = 4;
/// Number of [`ProtoClass`]es.
pub const PROTOS: usize = 4;

/// One unit of traffic toward one destination.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Observation {
    /// Whether the addresses are IPv6.
    pub ipv6: bool,
    /// IP protocol number.
    pub proto: u8,
    /// Source address (IPv4 in the first 4 bytes).
    pub src: [u8; 16],
    /// Destination address.
    pub dst: [u8; 16],
    /// Source port (0 without one).
    pub sport: u16,
    /// TCP control bits.
    pub tcp_flags: u16,
    /// Whether it is (or was made of) IP fragments.
    pub fragment: bool,
    /// Packets.
    pub packets: u64,
    /// IP bytes.
    pub bytes: u64,
    /// Flows it stands for (1 for a flow record's direction, 0 for a packet).
    pub flows: u64,
}

impl Observation {
    /// One packet.
    #[inline]
    pub fn packet(f: &FlowFields) -> Observation {
        Observation {
            ipv6: f.ipv6,
            proto: f.proto,
            src: f.src,
            dst: f.dst,
            sport: f.sport,
            tcp_flags: f.tcp_flags,
            fragment: f.fragment.is_some(),
            packets: 1,
            bytes: u64::from(f.octets),
            flows: 0,
        }
    }

    /// The directions of a flow record that carried packets: the forward one toward the
    /// responder, the reverse one toward the initiator. Each counts its whole packets and
    /// bytes scaled to its last `interval_ns` (a long flow reported once adds its mean rate,
    /// not everything it carried over its life).
    pub fn of_flow(r: &FlowRecord, interval_ns: u64) -> [Option<Observation>; 2] {
        let one = |c: &Counters, src: &[u8; 16], dst: &[u8; 16], sport: u16| {
            (c.packets > 0).then(|| {
                let life = c.last_ns.saturating_sub(c.first_ns);
                let (packets, bytes) = if life > interval_ns {
                    let share = |n: u64| {
                        (u128::from(n) * u128::from(interval_ns) / u128::from(life)).max(1) as u64
                    };
                    (share(c.packets), share(c.octets))
                } else {
                    (c.packets, c.octets)
                };
                Observation {
                    ipv6: r.ipv6,
                    proto: r.proto,
                    src: *src,
                    dst: *dst,
                    sport,
                    tcp_flags: c.tcp_flags,
                    fragment: false,
                    packets,
                    bytes,
                    flows: 1,
                }
            })
        };
        let rev_sport = if r.is_icmp() { 0 } else { r.dport };
        [
            one(&r.fwd, &r.src, &r.dst, r.sport),
            one(&r.rev, &r.dst, &r.src, rev_sport),
        ]
    }

    /// Its protocol class.
    #[inline]
    pub fn class(&self) -> ProtoClass {
        match (self.proto, self.ipv6) {
            (TCP, _) => ProtoClass::Tcp,
            (UDP, _) => ProtoClass::Udp,
            (1, false) | (58, true) => ProtoClass::Icmp,
            _ => ProtoClass::Other,
        }
    }

    /// Its signatures, as a bit per [`Signature`].
    #[inline]
    pub fn signatures(&self) -> u8 {
        let mut s = 0u8;
        if self.proto == TCP && self.tcp_flags & SYN != 0 {
            s |= if self.tcp_flags & ACK == 0 {
                1 << Signature::Syn as u8
            } else {
                1 << Signature::SynAck as u8
            };
        }
        if self.proto == UDP && reflector(self.sport).is_some() {
            s |= 1 << Signature::Reflection as u8;
        }
        if self.fragment {
            s |= 1 << Signature::Fragment as u8;
        }
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn obs(proto: u8, sport: u16, flags: u16) -> Observation {
        Observation {
            proto,
            sport,
            tcp_flags: flags,
            packets: 1,
            ..Default::default()
        }
    }

    #[test]
    fn signatures_tell_syn_synack_and_reflection_apart() {
        assert_eq!(obs(TCP, 1234, SYN).signatures(), 1);
        assert_eq!(obs(TCP, 80, SYN | ACK).signatures(), 2);
        assert_eq!(obs(TCP, 80, ACK).signatures(), 0);
        assert_eq!(obs(UDP, 53, 0).signatures(), 4);
        assert_eq!(obs(UDP, 11211, 0).signatures(), 4);
        assert_eq!(obs(UDP, 5353, 0).signatures(), 0);
        // A TCP segment from port 53 is not UDP amplification.
        assert_eq!(obs(TCP, 53, ACK).signatures(), 0);
        let mut f = obs(UDP, 0, 0);
        f.fragment = true;
        assert_eq!(f.signatures(), 8);
        assert_eq!(obs(1, 0, 0).class(), ProtoClass::Icmp);
    }

    #[test]
    fn a_long_flow_adds_its_mean_rate_not_its_whole_life() {
        let mut r = FlowRecord {
            proto: UDP,
            sport: 123,
            dport: 4444,
            ..Default::default()
        };
        // 60 s at 1000 packets/s, reported once.
        r.fwd = Counters {
            packets: 60_000,
            octets: 60_000 * 468,
            tcp_flags: 0,
            first_ns: 0,
            last_ns: 60_000_000_000,
        };
        let [fwd, rev] = Observation::of_flow(&r, 1_000_000_000);
        let fwd = fwd.unwrap();
        assert_eq!((fwd.packets, fwd.bytes, fwd.flows), (1000, 468_000, 1));
        assert!(rev.is_none());
        assert_eq!(fwd.signatures(), 1 << Signature::Reflection as u8);
    }
}
