//! 5-tuple rules with don't-care masks (the NetFPGA monitor's filter, without its 32-rule
//! limit): address prefixes, port ranges, a protocol, each of them `any`, and `both` for the
//! reverse direction too.
//!
//! A rule is one line of text, a name then keyword/value pairs in any order:
//!
//! ```text
//! # name   [proto P] [src PREFIX] [dst PREFIX] [sport RANGE] [dport RANGE] [both]
//! web      proto tcp dst 10.1.0.0/16 dport 80-443 both
//! dns      proto udp dport 53 both
//! v6-net   src 2001:db8::/32
//! ```
//!
//! A rule matches a packet exactly when libpcap's expression from [`Rule::to_pcap`] does, on the
//! bytes the kernel's socket filter sees: the IPv4 protocol field or the IPv6 next header (or the
//! one after a fragment header, as `ip6 proto` does), ports from TCP, UDP or SCTP only and only
//! in an IPv4 packet's first fragment or right after the IPv6 header. A rule without protocol,
//! address or port matches every IPv4 and IPv6 packet; an address gives the rule its IP version.

use std::fmt;

pub use crate::prefix::Prefix;
use crate::prefix::PrefixError;

use crate::LinkType;
use crate::bytes::{get_u16, read_u16};

/// The longest rule name.
pub const MAX_NAME: usize = 64;

const TCP: u8 = 6;
const UDP: u8 = 17;
const SCTP: u8 = 132;
/// IPv6 fragment header.
const IPV6_FRAGMENT: u8 = 44;
/// The protocols whose ports a rule can match.
pub const PORT_PROTOCOLS: [u8; 3] = [TCP, UDP, SCTP];

/// IP version a rule applies to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Family {
    /// IPv4 only.
    V4,
    /// IPv6 only.
    V6,
    /// Both.
    Any,
}

impl Family {
    /// Whether packets of this IP version (`ipv6` or not) belong to the family.
    #[inline]
    pub fn covers(self, ipv6: bool) -> bool {
        match self {
            Family::Any => true,
            Family::V4 => !ipv6,
            Family::V6 => ipv6,
        }
    }
}

/// An inclusive port range.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct PortRange {
    /// Lowest port.
    pub lo: u16,
    /// Highest port.
    pub hi: u16,
}

impl PortRange {
    /// Whether `port` is in the range.
    #[inline]
    pub fn contains(&self, port: u16) -> bool {
        self.lo <= port && port <= self.hi
    }
}

impl std::str::FromStr for PortRange {
    type Err = String;
    fn from_str(s: &str) -> Result<PortRange, String> {
        let port = |p: &str| {
            p.parse::<u16>()
                .map_err(|_| format!("'{s}' is not a port or a range LO-HI of ports"))
        };
        let (lo, hi) = match s.split_once('-') {
            Some((a, b)) => (port(a)?, port(b)?),
            None => (port(s)?, port(s)?),
        };
        if lo > hi {
            return Err(format!("port range '{s}' is backwards"));
        }
        Ok(PortRange { lo, hi })
    }
}

impl fmt::Display for PortRange {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.lo == self.hi {
            write!(f, "{}", self.lo)
        } else {
            write!(f, "{}-{}", self.lo, self.hi)
        }
    }
}

/// One rule.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Rule {
    /// Its name, unique in a rule set.
    pub name: String,
    /// IP protocol number, or any.
    pub proto: Option<u8>,
    /// Source prefix, or any.
    pub src: Option<Prefix>,
    /// Destination prefix, or any.
    pub dst: Option<Prefix>,
    /// Source ports, or any.
    pub sport: Option<PortRange>,
    /// Destination ports, or any.
    pub dport: Option<PortRange>,
    /// Whether the reverse direction (addresses and ports swapped) matches too.
    pub both: bool,
}

/// Protocol names a rule takes besides numbers.
const PROTOCOLS: [(&str, u8); 8] = [
    ("icmp", 1),
    ("igmp", 2),
    ("tcp", TCP),
    ("udp", UDP),
    ("gre", 47),
    ("esp", 50),
    ("icmp6", 58),
    ("sctp", SCTP),
];

impl Rule {
    /// Parses one rule line (no comment, not blank).
    pub fn parse(line: &str) -> Result<Rule, String> {
        let mut words = line.split_whitespace();
        let name = words.next().ok_or("a rule needs a name")?;
        if name.len() > MAX_NAME
            || !name
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || "-_.:".contains(c))
            || KEYWORDS.contains(&name)
        {
            return Err(format!(
                "'{name}' is not a rule name (letters, digits, - _ . :, at most {MAX_NAME}, \
                 not a keyword)"
            ));
        }
        let mut rule = Rule {
            name: name.to_string(),
            proto: None,
            src: None,
            dst: None,
            sport: None,
            dport: None,
            both: false,
        };
        let mut seen = Vec::new();
        while let Some(key) = words.next() {
            if seen.contains(&key) {
                return Err(format!("'{key}' given twice"));
            }
            seen.push(key);
            if key == "both" {
                rule.both = true;
                continue;
            }
            if !KEYWORDS.contains(&key) {
                return Err(format!(
                    "unknown word '{key}' (expected proto, src, dst, sport, dport or both)"
                ));
            }
            let value = words
                .next()
                .ok_or_else(|| format!("'{key}' needs a value"))?;
            if value == "any" || value == "*" {
                continue;
            }
            match key {
                "proto" => rule.proto = Some(parse_proto(value)?),
                "src" => rule.src = Some(value.parse().map_err(|e: PrefixError| e.to_string())?),
                "dst" => rule.dst = Some(value.parse().map_err(|e: PrefixError| e.to_string())?),
                "sport" => rule.sport = Some(value.parse()?),
                _ => rule.dport = Some(value.parse()?),
            }
        }
        if let (Some(s), Some(d)) = (rule.src, rule.dst)
            && s.ipv6 != d.ipv6
        {
            return Err("src and dst are of different IP versions".into());
        }
        if rule.has_ports()
            && let Some(p) = rule.proto
            && !PORT_PROTOCOLS.contains(&p)
        {
            return Err(format!(
                "protocol {} has no ports (ports need tcp, udp or sctp)",
                proto_name(p)
            ));
        }
        Ok(rule)
    }

    /// Whether the rule looks at ports.
    pub fn has_ports(&self) -> bool {
        self.sport.is_some() || self.dport.is_some()
    }

    /// The IP version(s) the rule applies to.
    pub fn family(&self) -> Family {
        match self.src.or(self.dst) {
            Some(p) if p.ipv6 => Family::V6,
            Some(_) => Family::V4,
            None => Family::Any,
        }
    }

    /// Whether it tests nothing but the IP version: no protocol, no ports, no prefix longer
    /// than /0. Such a rule matches every packet of its version, however short.
    pub fn is_whole_family(&self) -> bool {
        only_family(self.proto, self.src, self.dst, self.has_ports())
    }

    /// The same rule for the reverse direction: addresses and ports swapped.
    pub fn reversed(&self) -> Rule {
        Rule {
            src: self.dst,
            dst: self.src,
            sport: self.dport,
            dport: self.sport,
            ..self.clone()
        }
    }

    /// The directions the rule matches: itself, and reversed if `both`.
    pub fn directions(&self) -> impl Iterator<Item = Rule> {
        let rev = self.both.then(|| self.reversed());
        std::iter::once(Rule {
            both: false,
            ..self.clone()
        })
        .chain(rev.map(|r| Rule { both: false, ..r }))
    }

    /// Whether the rule matches a packet's tuple (the forward direction, or either if `both`).
    #[inline]
    pub fn matches(&self, t: &Tuple) -> bool {
        self.matches_one_way(t, false) || (self.both && self.matches_one_way(t, true))
    }

    /// Whether the rule matches `t` in its own direction, or reversed.
    #[inline]
    pub(crate) fn matches_one_way(&self, t: &Tuple, reverse: bool) -> bool {
        let (src, dst, sport, dport) = if reverse {
            (&self.dst, &self.src, &self.dport, &self.sport)
        } else {
            (&self.src, &self.dst, &self.sport, &self.dport)
        };
        if let Some(p) = self.proto {
            let direct = t.proto == p;
            // `ip6 proto P` also looks past a fragment header; ports never do.
            let after_fragment = t.ipv6 && t.proto == IPV6_FRAGMENT && t.fragment_proto == p;
            if !(direct || (after_fragment && !self.has_ports())) {
                return false;
            }
        }
        let addr_ok = |p: &Option<Prefix>, a: &[u8; 16]| match p {
            Some(p) => p.ipv6 == t.ipv6 && p.contains(a),
            None => true,
        };
        if !addr_ok(src, &t.src) || !addr_ok(dst, &t.dst) {
            return false;
        }
        if sport.is_none() && dport.is_none() {
            return true;
        }
        let Some((sp, dp)) = t.ports else {
            return false;
        };
        sport.is_none_or(|r| r.contains(sp)) && dport.is_none_or(|r| r.contains(dp))
    }

    /// The libpcap (tcpdump) expression accepting the same packets.
    pub fn to_pcap(&self) -> String {
        let one = |r: &Rule| {
            let fam = r.family();
            let mut parts = Vec::new();
            parts.push(match (fam, r.proto) {
                (Family::V4, None) => "ip".to_string(),
                (Family::V6, None) => "ip6".to_string(),
                (Family::Any, None) => "(ip or ip6)".to_string(),
                (Family::V4, Some(p)) => format!("ip proto {p}"),
                (Family::V6, Some(p)) => format!("ip6 proto {p}"),
                (Family::Any, Some(p)) => format!("(ip proto {p} or ip6 proto {p})"),
            });
            for (dir, p) in [("src", r.src), ("dst", r.dst)] {
                if let Some(p) = p.filter(|p| p.len > 0) {
                    parts.push(format!("{dir} net {p}"));
                }
            }
            for (dir, p) in [("src", r.sport), ("dst", r.dport)] {
                if let Some(p) = p {
                    parts.push(format!("{dir} portrange {}-{}", p.lo, p.hi));
                }
            }
            format!("({})", parts.join(" and "))
        };
        self.directions()
            .map(|r| one(&r))
            .collect::<Vec<_>>()
            .join(" or ")
    }
}

const KEYWORDS: [&str; 6] = ["proto", "src", "dst", "sport", "dport", "both"];

fn parse_proto(s: &str) -> Result<u8, String> {
    PROTOCOLS
        .iter()
        .find(|(n, _)| *n == s)
        .map(|&(_, p)| p)
        .or_else(|| s.parse().ok())
        .ok_or_else(|| format!("'{s}' is not a protocol name or number 0-255"))
}

fn proto_name(p: u8) -> String {
    PROTOCOLS
        .iter()
        .find(|&&(_, n)| n == p)
        .map_or_else(|| p.to_string(), |(n, _)| (*n).to_string())
}

impl fmt::Display for Rule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.name)?;
        if let Some(p) = self.proto {
            write!(f, " proto {}", proto_name(p))?;
        }
        if let Some(p) = self.src {
            write!(f, " src {p}")?;
        }
        if let Some(p) = self.dst {
            write!(f, " dst {p}")?;
        }
        if let Some(p) = self.sport {
            write!(f, " sport {p}")?;
        }
        if let Some(p) = self.dport {
            write!(f, " dport {p}")?;
        }
        if self.both {
            f.write_str(" both")?;
        }
        Ok(())
    }
}

/// A rule file's error: the line (from 1) and what is wrong.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("line {line}: {message}")]
pub struct ParseError {
    /// Line number, from 1.
    pub line: usize,
    /// What is wrong.
    pub message: String,
}

/// Parses a rule file: one rule per line, `#` starts a comment, blank lines are skipped, names
/// are unique.
pub fn parse_rules(text: &str) -> Result<Vec<Rule>, ParseError> {
    let mut rules: Vec<Rule> = Vec::new();
    let mut names = std::collections::HashSet::new();
    for (i, line) in text.lines().enumerate() {
        let line = line.split('#').next().unwrap_or("").trim();
        if line.is_empty() {
            continue;
        }
        let err = |message| ParseError {
            line: i + 1,
            message,
        };
        let rule = Rule::parse(line).map_err(err)?;
        if !names.insert(rule.name.clone()) {
            return Err(err(format!("rule '{}' is defined twice", rule.name)));
        }
        rules.push(rule);
    }
    Ok(rules)
}

/// Whether a rule (or a kernel filter entry) with these fields tests nothing but the IP
/// version: no protocol, no ports, no prefix longer than /0.
pub(crate) fn only_family(
    proto: Option<u8>,
    src: Option<Prefix>,
    dst: Option<Prefix>,
    ports: bool,
) -> bool {
    proto.is_none() && !ports && src.is_none_or(|p| p.len == 0) && dst.is_none_or(|p| p.len == 0)
}

/// What a rule looks at in a packet, read the way the kernel filter reads it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Tuple {
    /// IPv6 (else IPv4 in the first 4 bytes of the addresses).
    pub ipv6: bool,
    /// The IPv4 protocol, or the IPv6 next header of the fixed header.
    pub proto: u8,
    /// For IPv6 with a fragment header first: the header after it.
    pub fragment_proto: u8,
    /// Source address.
    pub src: [u8; 16],
    /// Destination address.
    pub dst: [u8; 16],
    /// Source and destination ports: TCP, UDP or SCTP, first IPv4 fragment, ports captured.
    pub ports: Option<(u16, u16)>,
}

impl Tuple {
    /// The tuple of a frame captured with `linktype`, or `None` if it is not IPv4 or IPv6 (at
    /// the link layer's own type field: a VLAN-tagged frame is not IP here, as for libpcap
    /// without `vlan`) or its addresses were not captured.
    #[inline]
    pub fn of_frame(linktype: LinkType, frame: &[u8]) -> Option<Tuple> {
        let (ip, v6) = Tuple::ip_version(linktype, frame)?;
        Tuple::of_ip(frame.get(ip..)?, v6)
    }

    /// The tuple of the IP packet `h` (IPv6 if `v6`), or `None` if its addresses were not
    /// captured.
    #[inline]
    pub fn of_ip(h: &[u8], v6: bool) -> Option<Tuple> {
        let mut t = Tuple {
            ipv6: v6,
            ..Tuple::default()
        };
        if v6 {
            let fixed = h.get(..40)?;
            t.proto = fixed[6];
            t.src.copy_from_slice(&fixed[8..24]);
            t.dst.copy_from_slice(&fixed[24..40]);
            if t.proto == IPV6_FRAGMENT {
                t.fragment_proto = h.get(40).copied().unwrap_or(0);
            }
            if PORT_PROTOCOLS.contains(&t.proto)
                && let Some(p) = h.get(40..44)
            {
                t.ports = Some((read_u16(p), read_u16(&p[2..])));
            }
        } else {
            let fixed = h.get(..20)?;
            t.proto = fixed[9];
            t.src[..4].copy_from_slice(&fixed[12..16]);
            t.dst[..4].copy_from_slice(&fixed[16..20]);
            let first_fragment = read_u16(&fixed[6..]) & 0x1fff == 0;
            let ihl = usize::from(fixed[0] & 0xf) * 4;
            if first_fragment
                && PORT_PROTOCOLS.contains(&t.proto)
                && let Some(p) = h.get(ihl..ihl + 4)
            {
                t.ports = Some((read_u16(p), read_u16(&p[2..])));
            }
        }
        Some(t)
    }

    /// Where the IP header of a frame captured with `linktype` starts and whether it is IPv6,
    /// if the link layer says the frame is IP (at its own type field, as the kernel filter
    /// reads it), however little of the IP header was captured.
    #[inline]
    pub fn ip_version(linktype: LinkType, frame: &[u8]) -> Option<(usize, bool)> {
        Some(match linktype {
            LinkType::Ethernet => (14, ethertype_v6(get_u16(frame, 12)?)?),
            LinkType::LinuxSll => (16, ethertype_v6(get_u16(frame, 14)?)?),
            LinkType::LinuxSll2 => (20, ethertype_v6(get_u16(frame, 0)?)?),
            LinkType::Raw => (0, frame.first()? >> 4 == 6),
            LinkType::Ipv4 => (0, false),
            LinkType::Ipv6 => (0, true),
            _ => return None,
        })
    }
}

fn ethertype_v6(et: u16) -> Option<bool> {
    match et {
        0x0800 => Some(false),
        0x86dd => Some(true),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_and_prints_canonically() {
        let r = Rule::parse("web dport 80-443 proto tcp dst 10.1.0.0/16 both").unwrap();
        assert_eq!(r.proto, Some(6));
        assert_eq!(r.family(), Family::V4);
        assert_eq!(
            r.to_string(),
            "web proto tcp dst 10.1.0.0/16 dport 80-443 both"
        );
        assert_eq!(Rule::parse(&r.to_string()).unwrap(), r);
        let any = Rule::parse("all proto any src * sport any").unwrap();
        assert_eq!(any.to_string(), "all");
        assert_eq!(any.family(), Family::Any);
        let h = Rule::parse("h src 2001:db8::1").unwrap();
        assert_eq!(h.to_string(), "h src 2001:db8::1/128");
    }

    #[test]
    fn errors_name_the_word() {
        let e = |s: &str| Rule::parse(s).unwrap_err();
        assert!(e("web proto tcp dst 10.1.0.1/16").contains("host bits"));
        assert!(e("web dst 10.0.0.0/33").contains("0 to 32"));
        assert!(e("web sport 90-80").contains("backwards"));
        assert!(e("web proto icmp dport 1").contains("no ports"));
        assert!(e("web src 10.0.0.0/8 dst ::/0").contains("different IP versions"));
        assert!(e("web port 80").contains("unknown word 'port'"));
        assert!(e("web dport").contains("needs a value"));
        assert!(e("web both both").contains("twice"));
        assert!(e("proto tcp").contains("not a rule name"));
        assert!(e("web proto xyz").contains("'xyz'"));
        let err = parse_rules("a\n# c\n\nb proto udp\na proto tcp\n").unwrap_err();
        assert_eq!(err.to_string(), "line 5: rule 'a' is defined twice");
        assert_eq!(parse_rules("a # all\n  b both\n").unwrap().len(), 2);
    }

    #[test]
    fn prefixes_contain() {
        let p: Prefix = "10.0.0.0/15".parse().unwrap();
        let a = |s: &str| {
            let mut b = [0u8; 16];
            b[..4].copy_from_slice(&s.parse::<std::net::Ipv4Addr>().unwrap().octets());
            b
        };
        assert!(p.contains(&a("10.1.255.255")));
        assert!(p.contains(&a("10.0.0.1")));
        assert!(!p.contains(&a("10.2.0.0")));
        assert_eq!(
            p.words().collect::<Vec<_>>(),
            vec![(0x0a00_0000, 0xfffe_0000)]
        );
        let z: Prefix = "::/0".parse().unwrap();
        assert!(z.contains(&[0xff; 16]));
        assert_eq!(z.words().count(), 0);
        let v6: Prefix = "2001:db8::/33".parse().unwrap();
        assert_eq!(
            v6.words().collect::<Vec<_>>(),
            vec![(0x2001_0db8, u32::MAX), (0, 0x8000_0000)]
        );
    }

    #[test]
    fn pcap_expressions() {
        let r = Rule::parse("w proto tcp dst 10.1.0.0/16 dport 80 both").unwrap();
        assert_eq!(
            r.to_pcap(),
            "(ip proto 6 and dst net 10.1.0.0/16 and dst portrange 80-80) or \
             (ip proto 6 and src net 10.1.0.0/16 and src portrange 80-80)"
        );
        assert_eq!(Rule::parse("x").unwrap().to_pcap(), "((ip or ip6))");
    }
}
