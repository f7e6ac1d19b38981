//! Thresholds: how much traffic a second makes an alert, per destination host, per group of
//! prefixes and for all traffic together, with the hold time and hysteresis that keep an alert
//! from flapping. Read from a TOML file (docs/detect.md, "Thresholds file"); without one the
//! defaults catch a flood at one destination.

use serde::Deserialize;
use tapflow_wire::rules::Prefix;

use crate::detect::baseline::BaselineConfig;

/// Packets a second at one destination that make an alert by default (FastNetMon's default).
pub const DEFAULT_PACKETS: u64 = 20_000;
/// Bits a second at one destination that make an alert by default (FastNetMon's default).
pub const DEFAULT_BITS: u64 = 1_000_000_000;
/// Seconds an alert stays after the traffic falls back, by default.
pub const DEFAULT_HOLD: u64 = 10;
/// The share of the threshold the traffic must fall under before an alert may end.
pub const DEFAULT_RELEASE: f64 = 0.8;
/// Destinations kept per interval by default.
pub const DEFAULT_CAPACITY: usize = 4096;

/// Rates a second; a missing one is not checked.
#[derive(Debug, Clone, Copy, PartialEq, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Limits {
    /// Packets a second.
    pub packets: Option<u64>,
    /// Bits a second.
    pub bits: Option<u64>,
    /// Flows a second (flow streams only: a packet stream counts no flows).
    pub flows: Option<u64>,
}

impl Limits {
    /// The defaults: [`DEFAULT_PACKETS`], [`DEFAULT_BITS`].
    pub const DEFAULT: Limits = Limits {
        packets: Some(DEFAULT_PACKETS),
        bits: Some(DEFAULT_BITS),
        flows: None,
    };

    /// Which of `rates` (packets, bits, flows a second) reach `scale` × the limits, by name.
    pub fn over(&self, rates: [f64; 3], scale: f64) -> Vec<&'static str> {
        [
            ("packets", self.packets),
            ("bits", self.bits),
            ("flows", self.flows),
        ]
        .iter()
        .zip(rates)
        .filter(|((_, l), r)| l.is_some_and(|l| l > 0 && *r >= l as f64 * scale))
        .map(|((n, _), _)| *n)
        .collect()
    }

    /// Whether any limit is set.
    pub fn any(&self) -> bool {
        self.packets.is_some() || self.bits.is_some() || self.flows.is_some()
    }
}

/// A group of prefixes with its own limits.
#[derive(Debug, Clone, PartialEq)]
pub struct Group {
    /// Its name.
    pub name: String,
    /// Its prefixes.
    pub prefixes: Vec<Prefix>,
    /// Limits for each destination host in it.
    pub host: Limits,
    /// Limits for all its destinations together, if any.
    pub total: Option<Limits>,
}

/// Everything that decides when an alert starts and ends.
#[derive(Debug, Clone, PartialEq)]
pub struct Thresholds {
    /// Limits for a destination in no group.
    pub host: Limits,
    /// Limits for all traffic together, if any.
    pub total: Option<Limits>,
    /// The groups, most specific prefix first when they overlap.
    pub groups: Vec<Group>,
    /// Seconds an alert stays once the traffic is under `release` × its limits.
    pub hold: u64,
    /// The hysteresis: an alert starts at its limit and may end only under this share of it.
    pub release: f64,
    /// Destinations kept per interval (the space-saving table's K).
    pub capacity: usize,
    /// How group and total limits are learnt from a store, if they are (the `[baseline]`
    /// table or `--baseline`).
    pub baseline: Option<BaselineConfig>,
}

impl Default for Thresholds {
    fn default() -> Thresholds {
        Thresholds {
            host: Limits::DEFAULT,
            total: None,
            groups: Vec::new(),
            hold: DEFAULT_HOLD,
            release: DEFAULT_RELEASE,
            capacity: DEFAULT_CAPACITY,
            baseline: None,
        }
    }
}

/// The file as written.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ThresholdsFile {
    host: Option<Limits>,
    total: Option<Limits>,
    hold: Option<u64>,
    release: Option<f64>,
    capacity: Option<usize>,
    #[serde(default)]
    group: Vec<GroupFile>,
    baseline: Option<BaselineConfig>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct GroupFile {
    name: String,
    prefixes: Vec<String>,
    host: Option<Limits>,
    total: Option<Limits>,
}

impl ThresholdsFile {
    /// The thresholds it sets, the defaults for what it leaves out; an error names the bad
    /// value.
    pub fn thresholds(self) -> Result<Thresholds, String> {
        let d = Thresholds::default();
        let release = self.release.unwrap_or(d.release);
        if !(0.0..=1.0).contains(&release) {
            return Err(format!("release {release} is not between 0 and 1"));
        }
        let mut groups = Vec::new();
        for g in self.group {
            let prefixes = g
                .prefixes
                .iter()
                .map(|p| p.parse::<Prefix>())
                .collect::<Result<Vec<_>, _>>()
                .map_err(|e| format!("group {}: {e}", g.name))?;
            groups.push(Group {
                name: g.name,
                prefixes,
                host: g.host.unwrap_or(d.host),
                total: g.total,
            });
        }
        Ok(Thresholds {
            host: self.host.unwrap_or(d.host),
            total: self.total,
            groups,
            hold: self.hold.unwrap_or(d.hold),
            release,
            capacity: self.capacity.unwrap_or(d.capacity).max(1),
            baseline: match self.baseline {
                Some(b) => {
                    b.check()?;
                    Some(b)
                }
                None => None,
            },
        })
    }
}

impl Thresholds {
    /// The group of `addr` (its longest matching prefix), if any.
    #[inline]
    pub fn group_of(&self, ipv6: bool, addr: &[u8; 16]) -> Option<usize> {
        let mut best: Option<(usize, u8)> = None;
        for (i, g) in self.groups.iter().enumerate() {
            for p in &g.prefixes {
                if p.ipv6 == ipv6 && p.contains(addr) && best.is_none_or(|(_, l)| p.len > l) {
                    best = Some((i, p.len));
                }
            }
        }
        best.map(|(i, _)| i)
    }

    /// The limits for a host in group `g`.
    pub fn host_limits(&self, g: Option<usize>) -> Limits {
        g.map_or(self.host, |g| self.groups[g].host)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(s: &str) -> Result<Thresholds, String> {
        // The engine reads the file's structure; the app parses TOML into it. JSON here keeps
        // the engine free of a TOML parser.
        serde_json::from_str::<ThresholdsFile>(s)
            .map_err(|e| e.to_string())?
            .thresholds()
    }

    #[test]
    fn groups_match_their_longest_prefix() {
        let t = parse(
            r#"{"hold": 5, "group": [
                {"name": "net", "prefixes": ["10.0.0.0/8"], "host": {"packets": 100}},
                {"name": "dns", "prefixes": ["10.1.0.0/16", "2001:db8::/32"]}
            ]}"#,
        )
        .unwrap();
        let a = |s: &str| {
            let p: Prefix = s.parse().unwrap();
            t.group_of(p.ipv6, &p.addr)
        };
        assert_eq!(a("10.1.2.3"), Some(1));
        assert_eq!(a("10.2.2.3"), Some(0));
        assert_eq!(a("11.0.0.1"), None);
        assert_eq!(a("2001:db8::1"), Some(1));
        assert_eq!(t.host_limits(Some(0)).packets, Some(100));
        assert_eq!(t.host_limits(None), Limits::DEFAULT);
        assert_eq!(t.hold, 5);
    }

    #[test]
    fn bad_values_are_named() {
        let e = parse(r#"{"group": [{"name": "x", "prefixes": ["10.0.0.1/8"]}]}"#).unwrap_err();
        assert!(e.contains("group x") && e.contains("host bits"), "{e}");
        assert!(
            parse(r#"{"release": 2}"#)
                .unwrap_err()
                .contains("release 2")
        );
        assert!(parse(r#"{"host": {"pakets": 1}}"#).is_err());
    }

    #[test]
    fn over_names_each_limit_reached() {
        let l = Limits::DEFAULT;
        assert_eq!(l.over([25_000.0, 1e6, 0.0], 1.0), ["packets"]);
        assert_eq!(l.over([19_000.0, 2e9, 0.0], 1.0), ["bits"]);
        assert_eq!(l.over([17_000.0, 0.0, 0.0], 0.8), ["packets"]);
        assert!(l.over([15_000.0, 0.0, 0.0], 0.8).is_empty());
    }
}
