//! Interface counters over a window: from the counter samples sFlow agents sent (totals since
//! each agent started), what each interface carried between its first and last sample in the
//! window. Backend-neutral: a backend hands over the samples, sorted or not.
//!
//! A 32-bit counter that goes down wrapped (it counts on modulo 2^32, as RFC 2863 counters
//! do); a 64-bit one that goes down was reset (the agent restarted) and counts from its new
//! value on.

use std::collections::BTreeMap;

use serde::Serialize;

use crate::InterfaceCounters;

/// One interface of one exporter over a window.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize)]
pub struct InterfaceTotals {
    /// The exporter's address (IPv4-mapped for IPv4).
    #[serde(serialize_with = "crate::query::interfaces::addr")]
    pub exporter: [u8; 16],
    /// The sub-agent id.
    pub domain: u32,
    /// `ifIndex`.
    pub if_index: u32,
    /// Counter samples in the window.
    pub samples: u64,
    /// The first and last sample's arrival, ns since 1970.
    pub first_ns: u64,
    /// See `first_ns`.
    pub last_ns: u64,
    /// `ifSpeed` of the last sample, bits per second.
    pub if_speed: u64,
    /// `ifStatus` of the last sample: bit 0 admin up, bit 1 operationally up.
    pub if_status: u32,
    /// Octets in and out between the first and last sample.
    pub in_octets: u64,
    /// See `in_octets`.
    pub out_octets: u64,
    /// Packets (unicast, multicast and broadcast) in and out.
    pub in_packets: u64,
    /// See `in_packets`.
    pub out_packets: u64,
    /// `ifInErrors`, `ifInDiscards`, `ifOutErrors`, `ifOutDiscards` between the samples.
    pub in_errors: u64,
    /// See `in_errors`.
    pub in_discards: u64,
    /// See `in_errors`.
    pub out_errors: u64,
    /// See `in_errors`.
    pub out_discards: u64,
}

/// The address as text, IPv4-mapped shown as IPv4.
pub(crate) fn addr<S: serde::Serializer>(a: &[u8; 16], s: S) -> Result<S::Ok, S::Error> {
    s.collect_str(&std::net::Ipv6Addr::from(*a).to_canonical())
}

/// What a 32-bit counter counted from `a` to `b`.
fn d32(a: u32, b: u32) -> u64 {
    u64::from(b.wrapping_sub(a))
}

/// What a 64-bit counter counted from `a` to `b` (from 0 again if it went down).
fn d64(a: u64, b: u64) -> u64 {
    if b >= a { b - a } else { b }
}

/// The totals of every interface in `samples`, by exporter, domain and `ifIndex`.
pub fn totals(mut samples: Vec<InterfaceCounters>) -> Vec<InterfaceTotals> {
    samples.sort_by_key(|s| (s.exporter, s.domain, s.counters.if_index, s.received_ns));
    let mut out: BTreeMap<([u8; 16], u32, u32), (InterfaceTotals, InterfaceCounters)> =
        BTreeMap::new();
    for s in samples {
        let c = s.counters;
        let key = (s.exporter, s.domain, c.if_index);
        let Some((t, prev)) = out.get_mut(&key) else {
            let t = InterfaceTotals {
                exporter: s.exporter,
                domain: s.domain,
                if_index: c.if_index,
                samples: 1,
                first_ns: s.received_ns,
                last_ns: s.received_ns,
                if_speed: c.if_speed,
                if_status: c.if_status,
                ..InterfaceTotals::default()
            };
            out.insert(key, (t, s));
            continue;
        };
        let p = prev.counters;
        t.samples += 1;
        t.last_ns = s.received_ns;
        t.if_speed = c.if_speed;
        t.if_status = c.if_status;
        t.in_octets += d64(p.in_octets, c.in_octets);
        t.out_octets += d64(p.out_octets, c.out_octets);
        t.in_packets += d32(p.in_ucast_pkts, c.in_ucast_pkts)
            + d32(p.in_multicast_pkts, c.in_multicast_pkts)
            + d32(p.in_broadcast_pkts, c.in_broadcast_pkts);
        t.out_packets += d32(p.out_ucast_pkts, c.out_ucast_pkts)
            + d32(p.out_multicast_pkts, c.out_multicast_pkts)
            + d32(p.out_broadcast_pkts, c.out_broadcast_pkts);
        t.in_errors += d32(p.in_errors, c.in_errors);
        t.in_discards += d32(p.in_discards, c.in_discards);
        t.out_errors += d32(p.out_errors, c.out_errors);
        t.out_discards += d32(p.out_discards, c.out_discards);
        *prev = s;
    }
    out.into_values().map(|(t, _)| t).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use tapflow_wire::sflow::IfCounters;

    fn sample(index: u32, at: u64, in_octets: u64, in_errors: u32) -> InterfaceCounters {
        InterfaceCounters {
            exporter: [1; 16],
            domain: 0,
            received_ns: at,
            counters: IfCounters {
                if_index: index,
                in_octets,
                in_errors,
                in_ucast_pkts: in_errors,
                if_status: 3,
                ..IfCounters::default()
            },
        }
    }

    #[test]
    fn deltas_across_wraps_and_resets() {
        let t = totals(vec![
            sample(2, 30, 500, 5),
            sample(2, 10, 100, u32::MAX - 1),
            sample(2, 20, 300, 2),
            sample(7, 10, 1, 1),
        ]);
        assert_eq!(t.len(), 2);
        let a = t[0];
        assert_eq!(
            (a.if_index, a.samples, a.first_ns, a.last_ns),
            (2, 3, 10, 30)
        );
        // 100 → 300 → 500; errors wrap from 2^32 - 2 to 2 (4) then 3 more.
        assert_eq!((a.in_octets, a.in_errors, a.in_packets), (400, 7, 7));
        // A 64-bit counter that went down was reset: it counts from its new value.
        let r = totals(vec![sample(2, 10, 1000, 0), sample(2, 20, 40, 0)]);
        assert_eq!(r[0].in_octets, 40);
        assert_eq!((t[1].samples, t[1].in_octets), (1, 0));
    }
}
