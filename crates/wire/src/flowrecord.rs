//! A bidirectional flow record (RFC 5103 biflow) as the flow meter ends it and every exporter
//! (IPFIX, NetFlow v9/v5, JSON, CSV) encodes it.
//!
//! The forward direction is the initiator's: the direction of the first packet the meter saw.
//! Keys are never reversed (RFC 5103 §5.1): `src` is always the initiator. For ICMP and ICMPv6
//! `sport` is 0 and `dport` carries `type << 8 | code`, the NetFlow convention that IPFIX's
//! `icmpTypeCodeIPv4`/`icmpTypeCodeIPv6` also use.

/// Why a flow record ended (IPFIX `flowEndReason`, IE 136).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
#[repr(u8)]
pub enum EndReason {
    /// No packet for the idle timeout.
    #[default]
    IdleTimeout = 1,
    /// The record reached the active timeout; the flow continues in a new record.
    ActiveTimeout = 2,
    /// TCP FIN seen in both directions, or RST.
    EndOfFlow = 3,
    /// The meter shut down.
    ForcedEnd = 4,
    /// Evicted to make room (`--max-flows`).
    LackOfResources = 5,
}

impl EndReason {
    /// The IANA value.
    #[inline]
    pub const fn to_u8(self) -> u8 {
        self as u8
    }

    /// The value for an IANA number, if it is one of the five.
    pub const fn from_u8(v: u8) -> Option<EndReason> {
        Some(match v {
            1 => EndReason::IdleTimeout,
            2 => EndReason::ActiveTimeout,
            3 => EndReason::EndOfFlow,
            4 => EndReason::ForcedEnd,
            5 => EndReason::LackOfResources,
            _ => return None,
        })
    }

    /// A short lower-case name for text output.
    pub const fn name(self) -> &'static str {
        match self {
            EndReason::IdleTimeout => "idle",
            EndReason::ActiveTimeout => "active",
            EndReason::EndOfFlow => "end",
            EndReason::ForcedEnd => "forced",
            EndReason::LackOfResources => "evicted",
        }
    }
}

/// What one direction of a flow carried during the record.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Counters {
    /// Packets.
    pub packets: u64,
    /// IP bytes: IP header(s) and payload, as the IP length field says (IPFIX `octetDeltaCount`).
    pub octets: u64,
    /// Union of the TCP control bits (IPFIX `tcpControlBits`: the 12 bits after the data offset).
    pub tcp_flags: u16,
    /// Arrival time of the first packet, ns since 1970 (0 if `packets` is 0).
    pub first_ns: u64,
    /// Arrival time of the last packet, ns since 1970 (0 if `packets` is 0).
    pub last_ns: u64,
}

impl Counters {
    /// Adds one packet of `octets` bytes with TCP bits `tcp_flags` seen at `ts_ns`.
    #[inline]
    pub fn add(&mut self, ts_ns: u64, octets: u64, tcp_flags: u16) {
        if self.packets == 0 {
            self.first_ns = ts_ns;
            self.last_ns = ts_ns;
        } else {
            self.first_ns = self.first_ns.min(ts_ns);
            self.last_ns = self.last_ns.max(ts_ns);
        }
        self.packets += 1;
        self.octets += octets;
        self.tcp_flags |= tcp_flags;
    }
}

/// One exported flow record.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct FlowRecord {
    /// Whether the addresses are IPv6 (else IPv4 in the first 4 bytes).
    pub ipv6: bool,
    /// IP protocol number (`protocolIdentifier`).
    pub proto: u8,
    /// The initiator's address.
    pub src: [u8; 16],
    /// The responder's address.
    pub dst: [u8; 16],
    /// The initiator's port (0 for ICMP and for protocols without ports).
    pub sport: u16,
    /// The responder's port, or ICMP `type << 8 | code`.
    pub dport: u16,
    /// The outermost 802.1Q VLAN ID, 0 if untagged.
    pub vlan: u16,
    /// The capture interface: its index within the probe's source (IPFIX `ingressInterface`).
    pub interface: u32,
    /// Initiator → responder.
    pub fwd: Counters,
    /// Responder → initiator (all zero for a one-way flow).
    pub rev: Counters,
    /// Why the record ended.
    pub end_reason: EndReason,
}

impl FlowRecord {
    /// Arrival of the record's first packet, either direction, ns since 1970.
    #[inline]
    pub fn start_ns(&self) -> u64 {
        match (self.fwd.packets, self.rev.packets) {
            (_, 0) => self.fwd.first_ns,
            (0, _) => self.rev.first_ns,
            _ => self.fwd.first_ns.min(self.rev.first_ns),
        }
    }

    /// Arrival of the record's last packet, either direction, ns since 1970.
    #[inline]
    pub fn end_ns(&self) -> u64 {
        self.fwd.last_ns.max(self.rev.last_ns)
    }

    /// Whether the flow is ICMP or ICMPv6 (so `dport` is a type and code).
    #[inline]
    pub fn is_icmp(&self) -> bool {
        (!self.ipv6 && self.proto == 1) || (self.ipv6 && self.proto == 58)
    }

    /// The initiator's address as text.
    pub fn src_addr(&self) -> std::net::IpAddr {
        addr(self.ipv6, &self.src)
    }

    /// The responder's address as text.
    pub fn dst_addr(&self) -> std::net::IpAddr {
        addr(self.ipv6, &self.dst)
    }
}

fn addr(ipv6: bool, a: &[u8; 16]) -> std::net::IpAddr {
    if ipv6 {
        std::net::Ipv6Addr::from(*a).into()
    } else {
        std::net::Ipv4Addr::new(a[0], a[1], a[2], a[3]).into()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counters_track_first_and_last_even_out_of_order() {
        let mut c = Counters::default();
        c.add(200, 60, 0x02);
        c.add(100, 40, 0x10);
        c.add(300, 52, 0x01);
        assert_eq!((c.packets, c.octets, c.tcp_flags), (3, 152, 0x13));
        assert_eq!((c.first_ns, c.last_ns), (100, 300));
    }

    #[test]
    fn start_and_end_span_both_directions() {
        let mut r = FlowRecord::default();
        r.fwd.add(50, 1, 0);
        assert_eq!((r.start_ns(), r.end_ns()), (50, 50));
        r.rev.add(40, 1, 0);
        r.rev.add(90, 1, 0);
        assert_eq!((r.start_ns(), r.end_ns()), (40, 90));
    }

    #[test]
    fn end_reasons_round_trip_their_iana_values() {
        for v in 1..=5 {
            assert_eq!(EndReason::from_u8(v).map(EndReason::to_u8), Some(v));
        }
        assert_eq!(EndReason::from_u8(0), None);
        assert_eq!(EndReason::from_u8(6), None);
    }
}
