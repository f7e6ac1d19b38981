//! Alerts: what starts one, what keeps it, what ends it, and the evidence it carries.
//!
//! An alert starts in the first interval a target's rate reaches a limit. It stays while the
//! rate is at or above `release` × the limit (hysteresis), and ends `hold` seconds after the
//! last interval that was (the hold time): a flood that pauses for a few seconds, or a flow
//! stream that reports a long flood once per active timeout, stays one alert.

use std::collections::HashMap;

use serde::Serialize;

use crate::detect::signature::{ProtoClass, Signature, reflector};
use crate::detect::tally::{Counts, Entry};
use crate::detect::threshold::Limits;

/// What an alert is about.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Target {
    /// One destination address.
    Host(std::net::IpAddr),
    /// All destinations of a group together.
    Group(String),
    /// All traffic.
    Total,
}

impl std::fmt::Display for Target {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Target::Host(a) => write!(f, "{a}"),
            Target::Group(g) => write!(f, "group:{g}"),
            Target::Total => f.write_str("total"),
        }
    }
}

/// A share of packets, per protocol class.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Mix {
    /// TCP.
    pub tcp: f64,
    /// UDP.
    pub udp: f64,
    /// ICMP and ICMPv6.
    pub icmp: f64,
    /// Other protocols.
    pub other: f64,
}

/// Packets a second per signature.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct SignatureRates {
    /// TCP SYN without ACK.
    pub syn: f64,
    /// TCP SYN-ACK.
    pub synack: f64,
    /// UDP from an amplifying service's port.
    pub reflection: f64,
    /// IP fragments.
    pub fragment: f64,
}

/// A source (address or port) and its packets a second toward the target.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Source {
    /// The address or port.
    pub source: String,
    /// Its packets a second (an upper bound: see docs/detect.md).
    pub packets_per_second: f64,
}

/// One alert event, as every action gets it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Alert {
    /// `start` or `end`.
    pub event: &'static str,
    /// The start of the interval it was decided in (RFC 3339, UTC).
    pub time: String,
    /// What it is about.
    pub target: String,
    /// The group of the target, if any.
    pub group: Option<String>,
    /// What kind of flood it looks like: `syn_flood`, `synack_reflection`,
    /// `dns_amplification` (and the other reflectors'), `fragment_flood`, `icmp_flood`,
    /// `udp_flood`, `tcp_flood` or `flood`.
    pub kind: String,
    /// The rates of the interval that started it (or, at the end, the peak ones).
    pub packets_per_second: f64,
    /// Bits a second.
    pub bits_per_second: f64,
    /// Flows a second (0 on a packet stream).
    pub flows_per_second: f64,
    /// The limits it was measured against.
    pub threshold: LimitsOut,
    /// Where they came from: `static` (the thresholds file or the defaults) or `baseline`
    /// (learnt from the store's past days).
    pub limit: &'static str,
    /// Which limits it reached: `packets`, `bits`, `flows`.
    pub over: Vec<&'static str>,
    /// The protocol mix, shares of packets.
    pub protocols: Mix,
    /// Packets a second per signature.
    pub signatures: SignatureRates,
    /// The heaviest sources.
    pub top_sources: Vec<Source>,
    /// The heaviest source ports.
    pub top_source_ports: Vec<Source>,
    /// `tapflow query` arguments that show the flows behind it, from a store.
    pub query: String,
    /// For `end`: seconds from start to end.
    pub duration_seconds: Option<u64>,
}

/// Limits as an alert states them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct LimitsOut {
    /// Packets a second.
    pub packets_per_second: Option<u64>,
    /// Bits a second.
    pub bits_per_second: Option<u64>,
    /// Flows a second.
    pub flows_per_second: Option<u64>,
}

impl From<Limits> for LimitsOut {
    fn from(l: Limits) -> LimitsOut {
        LimitsOut {
            packets_per_second: l.packets,
            bits_per_second: l.bits,
            flows_per_second: l.flows,
        }
    }
}

/// The kind of flood `c` looks like: the signature or protocol carrying most of its packets.
pub fn kind(c: &Counts, top_port: Option<u16>) -> String {
    let half = |n: u64| n * 2 > c.packets;
    let sig = |s: Signature| c.signatures[s as usize];
    if half(sig(Signature::Syn)) {
        "syn_flood".into()
    } else if half(sig(Signature::SynAck)) {
        "synack_reflection".into()
    } else if half(sig(Signature::Reflection)) {
        match top_port.and_then(reflector) {
            Some(name) => format!("{name}_amplification"),
            None => "udp_amplification".into(),
        }
    } else if half(sig(Signature::Fragment)) {
        "fragment_flood".into()
    } else if half(c.protos[ProtoClass::Icmp as usize]) {
        "icmp_flood".into()
    } else if half(c.protos[ProtoClass::Udp as usize]) {
        "udp_flood".into()
    } else if half(c.protos[ProtoClass::Tcp as usize]) {
        "tcp_flood".into()
    } else {
        "flood".into()
    }
}

/// What one target measured in one interval.
#[derive(Debug, Clone)]
pub struct Measure<'a> {
    /// The target.
    pub target: Target,
    /// Its group's name.
    pub group: Option<&'a str>,
    /// Its counts.
    pub counts: Counts,
    /// Its entry in the table (a host's), for the evidence.
    pub entry: Option<&'a Entry>,
    /// Its limits.
    pub limits: Limits,
    /// Where they came from: `static` or `baseline`.
    pub limit: &'static str,
}

/// A running alert.
#[derive(Debug, Clone)]
struct Active {
    start_s: u64,
    /// The last interval at or above `release` × the limits.
    last_s: u64,
    first: Alert,
    peak: [f64; 3],
}

/// Every running alert, and the rules that start and end them.
#[derive(Debug)]
pub struct Alerts {
    active: HashMap<Target, Active>,
    hold: u64,
    release: f64,
    interval: u64,
}

/// `ns` as RFC 3339.
pub fn rfc3339(s: u64) -> String {
    chrono::DateTime::from_timestamp(s as i64, 0)
        .unwrap_or_default()
        .format("%Y-%m-%dT%H:%M:%SZ")
        .to_string()
}

impl Alerts {
    /// No alert yet: alerts hold `hold` seconds, end under `release` × their limits, over
    /// intervals of `interval` seconds.
    pub fn new(hold: u64, release: f64, interval: u64) -> Alerts {
        Alerts {
            active: HashMap::new(),
            hold,
            release,
            interval: interval.max(1),
        }
    }

    /// The running alerts: target and kind.
    pub fn running(&self) -> Vec<(String, String)> {
        let mut v: Vec<_> = self
            .active
            .iter()
            .map(|(t, a)| (t.to_string(), a.first.kind.clone()))
            .collect();
        v.sort();
        v
    }

    /// Whether an alert runs for `target`.
    pub fn is_running(&self, target: &Target) -> bool {
        self.active.contains_key(target)
    }

    /// Takes one target's measure for the interval at `second`; returns a start event.
    pub fn measure(&mut self, second: u64, m: &Measure<'_>) -> Option<Alert> {
        let secs = self.interval as f64;
        let rates = [
            m.counts.packets as f64 / secs,
            m.counts.bytes as f64 * 8.0 / secs,
            m.counts.flows as f64 / secs,
        ];
        if let Some(a) = self.active.get_mut(&m.target) {
            if !m.limits.over(rates, self.release).is_empty() {
                a.last_s = second;
            }
            for (p, r) in a.peak.iter_mut().zip(rates) {
                *p = p.max(r);
            }
            return None;
        }
        let over = m.limits.over(rates, 1.0);
        if over.is_empty() {
            return None;
        }
        let alert = evidence(second, m, rates, over, secs);
        self.active.insert(
            m.target.clone(),
            Active {
                start_s: second,
                last_s: second,
                first: alert.clone(),
                peak: rates,
            },
        );
        Some(alert)
    }

    /// Ends the alerts whose hold time has passed by the end of the interval at `second`
    /// (all of them if `all`); returns the end events.
    pub fn expire(&mut self, second: u64, all: bool) -> Vec<Alert> {
        let hold = self.hold;
        let interval = self.interval;
        let mut gone: Vec<Target> = self
            .active
            .iter()
            .filter(|(_, a)| all || second >= a.last_s + hold.max(interval))
            .map(|(t, _)| t.clone())
            .collect();
        gone.sort();
        gone.into_iter()
            .filter_map(|t| self.active.remove(&t))
            .map(|a| {
                let end = (a.last_s + interval).max(a.start_s + interval);
                Alert {
                    event: "end",
                    time: rfc3339(end),
                    packets_per_second: a.peak[0],
                    bits_per_second: a.peak[1],
                    flows_per_second: a.peak[2],
                    duration_seconds: Some(end - a.start_s),
                    ..a.first
                }
            })
            .collect()
    }
}

fn evidence(
    second: u64,
    m: &Measure<'_>,
    rates: [f64; 3],
    over: Vec<&'static str>,
    secs: f64,
) -> Alert {
    let c = &m.counts;
    let share = |n: u64| {
        if c.packets == 0 {
            0.0
        } else {
            (n as f64 / c.packets as f64 * 1000.0).round() / 1000.0
        }
    };
    let sources: Vec<Source> = m
        .entry
        .map(|e| e.sources.sorted())
        .unwrap_or_default()
        .into_iter()
        .map(|(a, n)| Source {
            source: a.ip().to_string(),
            packets_per_second: n as f64 / secs,
        })
        .collect();
    let ports = m.entry.map(|e| e.sports.sorted()).unwrap_or_default();
    let top_port = ports.first().map(|p| p.0);
    let kind = kind(c, top_port);
    let window = format!(
        "{}/{}s",
        rfc3339(second.saturating_sub(60)),
        120 + secs as u64
    );
    let filter = match &m.target {
        Target::Host(a) => format!(" dst host {a}"),
        Target::Group(_) | Target::Total => String::new(),
    };
    Alert {
        event: "start",
        time: rfc3339(second),
        target: m.target.to_string(),
        group: m.group.map(str::to_string),
        kind,
        packets_per_second: rates[0],
        bits_per_second: rates[1],
        flows_per_second: rates[2],
        threshold: m.limits.into(),
        limit: m.limit,
        over,
        protocols: Mix {
            tcp: share(c.protos[ProtoClass::Tcp as usize]),
            udp: share(c.protos[ProtoClass::Udp as usize]),
            icmp: share(c.protos[ProtoClass::Icmp as usize]),
            other: share(c.protos[ProtoClass::Other as usize]),
        },
        signatures: SignatureRates {
            syn: c.signatures[Signature::Syn as usize] as f64 / secs,
            synack: c.signatures[Signature::SynAck as usize] as f64 / secs,
            reflection: c.signatures[Signature::Reflection as usize] as f64 / secs,
            fragment: c.signatures[Signature::Fragment as usize] as f64 / secs,
        },
        top_sources: sources,
        top_source_ports: ports
            .into_iter()
            .map(|(p, n)| Source {
                source: p.to_string(),
                packets_per_second: n as f64 / secs,
            })
            .collect(),
        query: format!("-t {window} -s srcip/packets -n 10{filter}"),
        duration_seconds: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn m(packets: u64) -> Measure<'static> {
        Measure {
            target: Target::Host("10.0.0.1".parse().unwrap()),
            group: None,
            counts: Counts {
                packets,
                bytes: packets * 60,
                protos: [packets, 0, 0, 0],
                signatures: [packets, 0, 0, 0],
                ..Default::default()
            },
            entry: None,
            limits: Limits::DEFAULT,
            limit: "static",
        }
    }

    #[test]
    fn an_alert_starts_holds_through_a_dip_and_ends_after_the_hold_time() {
        let mut a = Alerts::new(3, 0.8, 1);
        assert!(a.measure(100, &m(19_999)).is_none());
        let start = a.measure(101, &m(30_000)).unwrap();
        assert_eq!((start.event, start.kind.as_str()), ("start", "syn_flood"));
        assert_eq!(start.over, ["packets"]);
        assert!(
            start.query.ends_with("dst host 10.0.0.1"),
            "{}",
            start.query
        );
        // 17k is under the limit but over 80% of it: the alert holds.
        assert!(a.measure(102, &m(17_000)).is_none());
        assert!(a.expire(102, false).is_empty());
        // Under 80% from 103: it ends 3 s after 102's interval.
        for s in 103..105 {
            assert!(a.measure(s, &m(1_000)).is_none());
            assert!(a.expire(s, false).is_empty(), "{s}");
        }
        let end = a.expire(105, false);
        assert_eq!(end.len(), 1);
        assert_eq!((end[0].event, end[0].duration_seconds), ("end", Some(2)));
        assert_eq!(end[0].packets_per_second, 30_000.0);
        assert!(a.running().is_empty());
    }

    #[test]
    fn kinds_follow_the_heaviest_signature() {
        let mut c = Counts {
            packets: 10,
            protos: [0, 10, 0, 0],
            signatures: [0, 0, 9, 0],
            ..Default::default()
        };
        assert_eq!(kind(&c, Some(123)), "ntp_amplification");
        assert_eq!(kind(&c, Some(11211)), "memcached_amplification");
        c.signatures = [0; 4];
        assert_eq!(kind(&c, Some(4444)), "udp_flood");
        c.protos = [0, 0, 10, 0];
        assert_eq!(kind(&c, None), "icmp_flood");
    }
}
