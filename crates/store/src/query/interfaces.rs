//! Interface counters over a window: from the counter samples sFlow agents sent (totals since
//! each agent started), what each interface carried between its first and last sample in the
//! window. Backend-neutral: a backend hands over the samples, sorted or not.
//!
//! A 32-bit counter that goes down wrapped (it counts on modulo 2^32, as RFC 2863 counters
//! do); a 64-bit one that goes down was reset (the agent restarted) and counts from its new
//! value on.
//!
//! And the interfaces' names ([`IfNames`]): what exporters announced in options records and
//! what the operator's interfaces file says, kept in the store's `interfaces` table.

use std::collections::BTreeMap;

use serde::Serialize;

use crate::{InterfaceCounters, InterfaceName};

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

/// What is known of one interface.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct IfName {
    /// Its name (`interfaceName`, or the interfaces file's).
    pub name: String,
    /// Its description (`interfaceDescription`).
    pub description: String,
    /// Its speed in bits per second (0: unknown).
    pub speed: u64,
}

/// The names of interfaces by exporter and `ifIndex`, whatever the observation domain: each of
/// name, description and speed from the newest row of the `interfaces` table that gives it, so
/// a speed from the interfaces file stays when an exporter names the interface later.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct IfNames(BTreeMap<([u8; 16], u32), IfName>);

impl IfNames {
    /// The names `rows` give (in any order).
    pub fn new(mut rows: Vec<InterfaceName>) -> IfNames {
        rows.sort_by_key(|r| r.received_ns);
        let mut m: BTreeMap<([u8; 16], u32), IfName> = BTreeMap::new();
        for r in rows {
            let e = m.entry((r.exporter, r.index)).or_default();
            if !r.name.is_empty() {
                e.name = r.name;
            }
            if !r.description.is_empty() {
                e.description = r.description;
            }
            if r.speed > 0 {
                e.speed = r.speed;
            }
        }
        IfNames(m)
    }

    /// Whether it names none.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// Every interface it knows: exporter, index, what is known.
    pub fn iter(&self) -> impl Iterator<Item = (&[u8; 16], u32, &IfName)> {
        self.0.iter().map(|((e, i), n)| (e, *i, n))
    }

    /// The speed of interface `index` of `exporter`: `reported` (an agent's `ifSpeed`), or,
    /// where that is 0, the one known here.
    pub fn speed(&self, exporter: &[u8; 16], index: u32, reported: u64) -> u64 {
        match reported {
            0 => self.get(exporter, index).map_or(0, |n| n.speed),
            s => s,
        }
    }

    /// What is known of interface `index` of `exporter`.
    pub fn get(&self, exporter: &[u8; 16], index: u32) -> Option<&IfName> {
        self.0.get(&(*exporter, index))
    }

    /// The name of interface `index`: of `exporter`'s if given; otherwise the one name every
    /// exporter that names an interface `index` gives it (none if they differ). Index 0 is no
    /// interface and has no name.
    pub fn name(&self, exporter: Option<&[u8; 16]>, index: u32) -> Option<&str> {
        if index == 0 {
            return None;
        }
        if let Some(e) = exporter {
            return self
                .get(e, index)
                .map(|n| n.name.as_str())
                .filter(|n| !n.is_empty());
        }
        let mut names = self
            .0
            .iter()
            .filter(|((_, i), n)| *i == index && !n.name.is_empty())
            .map(|(_, n)| n.name.as_str());
        let first = names.next()?;
        names.all(|n| n == first).then_some(first)
    }
}

/// What an interface of known speed whose exporter sends no counters carried over a window,
/// from the flows: in, the bytes of the flows that came in on it (`in_if`); out, of those that
/// went out on it (`out_if`).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct FlowTotals {
    /// The exporter's address (IPv4-mapped for IPv4).
    #[serde(serialize_with = "crate::query::interfaces::addr")]
    pub exporter: [u8; 16],
    /// `ifIndex`.
    pub if_index: u32,
    /// Its name, description and speed.
    #[serde(flatten)]
    pub name: IfName,
    /// Bytes in and out in the window.
    pub in_bytes: u64,
    /// See `in_bytes`.
    pub out_bytes: u64,
}

/// `bps` as a percentage of `speed` (none when the speed is unknown).
pub fn utilisation(bps: f64, speed: u64) -> Option<f64> {
    (speed > 0).then(|| bps * 100.0 / speed as f64)
}

/// The interfaces `names` gives a speed whose exporter sent no counters (none in `counted`),
/// with what the flows of `window` carried on them ([`FlowTotals`]).
pub fn from_flows(
    engine: &dyn super::QueryEngine,
    window: super::Window,
    names: &IfNames,
    counted: &[InterfaceTotals],
) -> Result<Vec<FlowTotals>, super::QueryError> {
    use super::{Key, Kind, Metric, Query, QueryResult, Value};
    let uncounted: Vec<FlowTotals> = names
        .iter()
        .filter(|(e, i, n)| {
            n.speed > 0
                && !counted
                    .iter()
                    .any(|t| t.exporter == **e && t.if_index == *i)
        })
        .map(|(e, i, n)| FlowTotals {
            exporter: *e,
            if_index: i,
            name: n.clone(),
            in_bytes: 0,
            out_bytes: 0,
        })
        .collect();
    if uncounted.is_empty() {
        return Ok(uncounted);
    }
    let mut by = Vec::new();
    for key in [Key::InIf, Key::OutIf] {
        let answer = engine.run(&Query {
            window: Some(window),
            filter: None,
            kind: Kind::Aggregate {
                keys: vec![Key::Exporter, key],
                order_by: Metric::Bytes,
                n: 0,
            },
        })?;
        let mut bytes = std::collections::HashMap::new();
        if let QueryResult::Table { rows, .. } = answer.result {
            for r in rows {
                if let [Value::Addr(e), Value::Num(i)] = r.values[..] {
                    bytes.insert((e, i), r.counters.bytes);
                }
            }
        }
        by.push(bytes);
    }
    Ok(uncounted
        .into_iter()
        .map(|mut t| {
            let k = (t.exporter, t.if_index);
            t.in_bytes = by[0].get(&k).copied().unwrap_or(0);
            t.out_bytes = by[1].get(&k).copied().unwrap_or(0);
            t
        })
        .collect())
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

    fn named(exporter: u8, index: u32, name: &str, speed: u64, at: u64) -> InterfaceName {
        InterfaceName {
            exporter: [exporter; 16],
            domain: 0,
            index,
            name: name.into(),
            description: String::new(),
            speed,
            received_ns: at,
        }
    }

    #[test]
    fn names_take_each_field_from_the_newest_row_that_gives_it() {
        let n = IfNames::new(vec![
            named(1, 3, "ge-0/0/3", 0, 30),
            named(1, 3, "uplink", 10_000_000_000, 10),
            named(1, 3, "old", 0, 5),
            named(2, 3, "ge-0/0/3", 0, 10),
            named(2, 4, "", 1_000_000_000, 10),
        ]);
        let e1 = n.get(&[1; 16], 3).unwrap();
        assert_eq!((e1.name.as_str(), e1.speed), ("ge-0/0/3", 10_000_000_000));
        assert_eq!(n.name(Some(&[2; 16]), 4), None);
        assert_eq!(n.get(&[2; 16], 4).unwrap().speed, 1_000_000_000);
        // Without the exporter: the name all exporters agree on.
        assert_eq!(n.name(None, 3), Some("ge-0/0/3"));
        assert_eq!(n.name(None, 0), None);
        let n = IfNames::new(vec![named(1, 3, "a", 0, 1), named(2, 3, "b", 0, 1)]);
        assert_eq!(n.name(None, 3), None);
        assert_eq!(n.name(Some(&[2; 16]), 3), Some("b"));
    }
}
