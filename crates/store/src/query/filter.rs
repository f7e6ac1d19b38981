//! The filter language: nfdump's words and tapflow's rule words, parsed into a [`Filter`], and
//! its test of one one-way flow.
//!
//! ```text
//! expr  := and ("or" and)*
//! and   := unary (["and"] unary)*          juxtaposed terms are and-ed, as in a rule line
//! unary := ("not" | "!") unary | "(" expr ")" | term
//! term  := [src|dst] [ip|host|net] PREFIX  src net 10.0.0.0/8, dst host 2001:db8::1, net 10.1.0.0/16
//!        | [src|dst] port [OP] PORT        dst port 443, port > 1023, src port 1024-2048
//!        | sport RANGE | dport RANGE       the rule words
//!        | proto NAME|NUMBER | tcp | udp | icmp | icmp6 | sctp | gre | esp
//!        | ipv4 | inet | ipv6 | inet6
//!        | exporter PREFIX | router ip PREFIX
//!        | [in|out] if N | vlan N
//!        | [src|dst] as N | [src|dst] country CC   src as 13335, dst country DE (enrichment)
//!        | [src|dst] net-name NAME         src net-name office: the networks file's name
//!        | [src|dst] net-role|net-site|net-tenant VALUE   its role, site, tenant
//!                                          (`-`: in none of its networks; "a b" quotes
//!                                          a name with spaces)
//!        | packets [OP] N | bytes [OP] N   N may end in k, M or G (×1000)
//!        | flags LETTERS                   every one of F S R P A U E C set
//!        | any
//! OP    := = | == | != | < | <= | > | >= | eq | ne | lt | le | gt | ge
//! ```
//!
//! A chain of `or`s (or of `and`s) is one node with a list of operands, so a long flat filter
//! stays a shallow tree; `not` and `(` nest, at most [`MAX_DEPTH`] deep, and the text is at most
//! [`MAX_LEN`] bytes. Within both limits parsing, matching, the SQL built from a filter and
//! ClickHouse's parser of that SQL stay far from their stacks' ends.

use tapflow_wire::prefix::{Prefix, PrefixError};

use super::{Cmp, Filter, IfSide, Net, NetAttr, QueryError, Side, Term};
use crate::query::result::PROTOCOLS;

/// How deep `not`s and parentheses may nest: far above a filter a person writes, far below
/// what overflows a 2 MiB thread stack or ClickHouse's parser (500 nested `NOT`s).
pub const MAX_DEPTH: usize = 64;

/// The longest filter text, in bytes.
pub const MAX_LEN: usize = 16 * 1024;

/// Parses filter text (the words after `tapflow query`'s options, joined by spaces).
pub fn parse(text: &str) -> Result<Filter, QueryError> {
    if text.len() > MAX_LEN {
        return Err(err(format!("filter: longer than {MAX_LEN} bytes")));
    }
    let tokens = lex(text);
    if tokens.is_empty() {
        return Err(err("the filter is empty"));
    }
    let mut p = Parser {
        tokens,
        at: 0,
        depth: 0,
    };
    let f = p.expr()?;
    match p.peek() {
        None => Ok(f),
        Some(t) => Err(err(format!("filter: unexpected '{t}'"))),
    }
}

fn err(m: impl Into<String>) -> QueryError {
    QueryError::Parse(m.into())
}

fn lex(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut chars = text.chars().peekable();
    while let Some(&c) = chars.peek() {
        if c.is_whitespace() {
            chars.next();
        } else if c == '"' {
            // A quoted word ("New York"), for names with spaces or brackets.
            chars.next();
            let mut w = String::new();
            for c in chars.by_ref() {
                if c == '"' {
                    break;
                }
                w.push(c);
            }
            out.push(w);
        } else if c == '(' || c == ')' {
            out.push(c.to_string());
            chars.next();
        } else if matches!(c, '<' | '>' | '=' | '!') {
            let mut op = String::new();
            while let Some(&c) = chars.peek() {
                if !matches!(c, '<' | '>' | '=' | '!') || (op.len() == 1 && c == '!') {
                    break;
                }
                op.push(c);
                chars.next();
            }
            out.push(op);
        } else {
            let mut w = String::new();
            while let Some(&c) = chars.peek() {
                if c.is_whitespace() || matches!(c, '(' | ')' | '<' | '>' | '=' | '!') {
                    break;
                }
                w.push(c);
                chars.next();
            }
            out.push(w);
        }
    }
    out
}

struct Parser {
    tokens: Vec<String>,
    at: usize,
    /// The `not`s and `(`s open around the token at `at`.
    depth: usize,
}

impl Parser {
    fn peek(&self) -> Option<&str> {
        self.tokens.get(self.at).map(String::as_str)
    }

    fn peek_is(&self, word: &str) -> bool {
        self.peek().is_some_and(|t| t.eq_ignore_ascii_case(word))
    }

    fn next(&mut self, what: &str) -> Result<String, QueryError> {
        let t = self
            .tokens
            .get(self.at)
            .cloned()
            .ok_or_else(|| err(format!("filter: {what} expected at the end")))?;
        self.at += 1;
        Ok(t)
    }

    fn eat(&mut self, word: &str) -> bool {
        let yes = self.peek_is(word);
        if yes {
            self.at += 1;
        }
        yes
    }

    fn expr(&mut self) -> Result<Filter, QueryError> {
        let mut any = vec![self.and()?];
        while self.eat("or") || self.eat("||") {
            any.push(self.and()?);
        }
        Ok(one_or(any, Filter::Or))
    }

    fn and(&mut self) -> Result<Filter, QueryError> {
        let mut all = vec![self.unary()?];
        loop {
            // `and`, or nothing between two terms.
            let joined = self.eat("and")
                || self.eat("&&")
                || self
                    .peek()
                    .is_some_and(|t| t != ")" && t != "||" && !t.eq_ignore_ascii_case("or"));
            if !joined {
                return Ok(one_or(all, Filter::And));
            }
            all.push(self.unary()?);
        }
    }

    fn unary(&mut self) -> Result<Filter, QueryError> {
        if self.eat("not") || self.eat("!") {
            let f = self.nested(Self::unary)?;
            return Ok(Filter::Not(Box::new(f)));
        }
        if self.eat("(") {
            let f = self.nested(Self::expr)?;
            if !self.eat(")") {
                return Err(err("filter: ')' expected"));
            }
            return Ok(f);
        }
        self.term()
    }

    /// Parses with `inner` one level deeper, refusing to go past [`MAX_DEPTH`].
    fn nested(
        &mut self,
        inner: fn(&mut Self) -> Result<Filter, QueryError>,
    ) -> Result<Filter, QueryError> {
        if self.depth == MAX_DEPTH {
            return Err(err(format!(
                "filter: nested deeper than {MAX_DEPTH} levels"
            )));
        }
        self.depth += 1;
        let f = inner(self);
        self.depth -= 1;
        f
    }

    fn term(&mut self) -> Result<Filter, QueryError> {
        let word = self.next("a term")?.to_ascii_lowercase();
        let t = match word.as_str() {
            "src" | "dst" => {
                let side = if word == "src" { Side::Src } else { Side::Dst };
                return self.sided(side);
            }
            "ip" | "host" | "net" => return Ok(Filter::Term(Term::Addr(Side::Any, self.net()?))),
            "port" => return self.port(Side::Any),
            "sport" => return self.port(Side::Src),
            "dport" => return self.port(Side::Dst),
            "proto" => {
                let p = self.next("a protocol after 'proto'")?;
                Term::Protocol(protocol(&p)?)
            }
            "ipv4" | "inet" => Term::IpVersion(4),
            "ipv6" | "inet6" => Term::IpVersion(6),
            "exporter" => Term::Exporter(self.net()?),
            "router" => {
                self.eat("ip");
                Term::Exporter(self.net()?)
            }
            "in" | "out" => {
                let side = if word == "in" {
                    IfSide::In
                } else {
                    IfSide::Out
                };
                if !self.eat("if") {
                    return Err(err(format!("filter: 'if' expected after '{word}'")));
                }
                Term::Interface(side, self.number("an interface index")?)
            }
            "if" => Term::Interface(IfSide::Any, self.number("an interface index")?),
            "vlan" => Term::Vlan(self.number("a VLAN id")?),
            "as" => Term::As(Side::Any, self.as_number()?),
            "country" => Term::Country(Side::Any, self.country()?),
            "net-name" => Term::NetName(Side::Any, self.net_name()?),
            "net-role" | "net-site" | "net-tenant" => {
                Term::NetAttr(Side::Any, net_attr(&word), self.net_name()?)
            }
            "packets" => {
                let op = self.cmp();
                Term::Packets(op, self.count("a packet count")?)
            }
            "bytes" => {
                let op = self.cmp();
                Term::Bytes(op, self.count("a byte count")?)
            }
            "flags" => Term::TcpFlags(flags(&self.next("TCP flags after 'flags'")?)?),
            // Always true: every one-way flow has at least 0 bytes.
            "any" => Term::Bytes(Cmp::Ge, 0),
            w => match protocol(w) {
                Ok(p) if w.parse::<u8>().is_err() => Term::Protocol(p),
                _ => return Err(err(format!("filter: unknown word '{w}'"))),
            },
        };
        Ok(Filter::Term(t))
    }

    fn sided(&mut self, side: Side) -> Result<Filter, QueryError> {
        if self.eat("port") {
            return self.port(side);
        }
        if self.eat("as") {
            return Ok(Filter::Term(Term::As(side, self.as_number()?)));
        }
        if self.eat("country") {
            return Ok(Filter::Term(Term::Country(side, self.country()?)));
        }
        if self.eat("net-name") {
            return Ok(Filter::Term(Term::NetName(side, self.net_name()?)));
        }
        for word in ["net-role", "net-site", "net-tenant"] {
            if self.eat(word) {
                let value = self.net_name()?;
                return Ok(Filter::Term(Term::NetAttr(side, net_attr(word), value)));
            }
        }
        let _ = self.eat("ip") || self.eat("host") || self.eat("net");
        Ok(Filter::Term(Term::Addr(side, self.net()?)))
    }

    /// An AS number, `13335` or `AS13335`.
    fn as_number(&mut self) -> Result<u32, QueryError> {
        let text = self.next("an AS number")?;
        let digits = text
            .strip_prefix("AS")
            .or_else(|| text.strip_prefix("as"))
            .unwrap_or(&text);
        digits
            .parse()
            .map_err(|_| err(format!("filter: '{text}' is not an AS number")))
    }

    /// A country, two ISO 3166 letters.
    fn country(&mut self) -> Result<u16, QueryError> {
        let text = self.next("a country code")?;
        match super::country_code(text.as_bytes()) {
            0 => Err(err(format!(
                "filter: '{text}' is not a country code (two letters, as DE)"
            ))),
            c => Ok(c),
        }
    }

    /// A network's name as the networks file gives it (one word, matched exactly); `-` is
    /// no network, as query output shows it.
    fn net_name(&mut self) -> Result<&'static str, QueryError> {
        let text = self.next("a network name")?;
        if text == "(" || text == ")" {
            return Err(err(format!("filter: '{text}' is not a network name")));
        }
        if text == "-" {
            return Ok("");
        }
        Ok(crate::names::intern(&text))
    }

    fn port(&mut self, side: Side) -> Result<Filter, QueryError> {
        let op = self.cmp();
        let text = self.next("a port")?;
        let port = |p: &str| {
            p.parse::<u16>()
                .map_err(|_| err(format!("filter: '{text}' is not a port or a range LO-HI")))
        };
        if let (Cmp::Eq, Some((lo, hi))) = (op, text.split_once('-')) {
            let (lo, hi) = (port(lo)?, port(hi)?);
            if lo > hi {
                return Err(err(format!("filter: port range '{text}' is backwards")));
            }
            return Ok(Filter::And(vec![
                Filter::Term(Term::Port(side, Cmp::Ge, lo)),
                Filter::Term(Term::Port(side, Cmp::Le, hi)),
            ]));
        }
        Ok(Filter::Term(Term::Port(side, op, port(&text)?)))
    }

    fn cmp(&mut self) -> Cmp {
        let op = match self.peek().map(str::to_ascii_lowercase).as_deref() {
            Some("=" | "==" | "eq") => Cmp::Eq,
            Some("!=" | "ne") => Cmp::Ne,
            Some("<" | "lt") => Cmp::Lt,
            Some("<=" | "le") => Cmp::Le,
            Some(">" | "gt") => Cmp::Gt,
            Some(">=" | "ge") => Cmp::Ge,
            _ => return Cmp::Eq,
        };
        self.at += 1;
        op
    }

    fn net(&mut self) -> Result<Net, QueryError> {
        let t = self.next("an address or prefix")?;
        parse_net(&t).map_err(|m| err(format!("filter: {m}")))
    }

    fn number<T: std::str::FromStr>(&mut self, what: &str) -> Result<T, QueryError> {
        let t = self.next(what)?;
        t.parse()
            .map_err(|_| err(format!("filter: '{t}' is not {what}")))
    }

    fn count(&mut self, what: &str) -> Result<u64, QueryError> {
        let t = self.next(what)?;
        let (digits, scale) = match t.char_indices().last() {
            Some((i, 'k' | 'K')) => (&t[..i], 1_000),
            Some((i, 'm' | 'M')) => (&t[..i], 1_000_000),
            Some((i, 'g' | 'G')) => (&t[..i], 1_000_000_000),
            _ => (t.as_str(), 1),
        };
        digits
            .parse::<u64>()
            .ok()
            .and_then(|n| n.checked_mul(scale))
            .ok_or_else(|| err(format!("filter: '{t}' is not {what}")))
    }
}

/// The attribute a `net-role`, `net-site` or `net-tenant` word names.
fn net_attr(word: &str) -> NetAttr {
    match word {
        "net-role" => NetAttr::Role,
        "net-site" => NetAttr::Site,
        _ => NetAttr::Tenant,
    }
}

/// The one operand itself, or `join` of them all.
fn one_or(mut operands: Vec<Filter>, join: fn(Vec<Filter>) -> Filter) -> Filter {
    if operands.len() == 1 {
        operands.swap_remove(0)
    } else {
        join(operands)
    }
}

/// Parses an address or prefix (`10.0.0.0/8`, `2001:db8::/32`, `192.0.2.1`) into the store's
/// 16-byte form; host bits past the length are an error.
pub fn parse_net(s: &str) -> Result<Net, String> {
    let p: Prefix = s.parse().map_err(|e: PrefixError| e.to_string())?;
    let (addr, len) = p.mapped();
    Ok(Net { addr, len })
}

/// A protocol by name (any case) or number.
pub fn protocol(s: &str) -> Result<u8, QueryError> {
    if let Ok(n) = s.parse::<u8>() {
        return Ok(n);
    }
    let alias = match s.to_ascii_lowercase().as_str() {
        "icmpv6" | "ipv6-icmp" => "icmp6".to_string(),
        other => other.to_string(),
    };
    PROTOCOLS
        .iter()
        .find(|(_, name)| name.eq_ignore_ascii_case(&alias))
        .map(|(n, _)| *n)
        .ok_or_else(|| err(format!("filter: unknown protocol '{s}'")))
}

fn flags(s: &str) -> Result<u16, QueryError> {
    s.chars().try_fold(0u16, |m, c| {
        let bit = match c.to_ascii_uppercase() {
            'F' => 0x01,
            'S' => 0x02,
            'R' => 0x04,
            'P' => 0x08,
            'A' => 0x10,
            'U' => 0x20,
            'E' => 0x40,
            'C' => 0x80,
            _ => {
                return Err(err(format!(
                    "filter: '{c}' in '{s}' is not a TCP flag (FSRPAUEC)"
                )));
            }
        };
        Ok(m | bit)
    })
}

/// One one-way flow as filters, keys and sinks see it (see the module doc of [`super`]), or
/// the one-way flows of a rollup row that share its exporter, protocol and bucket. Columns a
/// query does not read hold 0. [`super::Kind::List`] returns these, one per stored direction.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct OneWay {
    /// `time_start`, µs.
    pub start_us: i64,
    /// `time_end`, µs.
    pub end_us: i64,
    /// The sender's address.
    pub src: [u8; 16],
    /// The receiver's address.
    pub dst: [u8; 16],
    /// The sender's port.
    pub sport: u16,
    /// The receiver's port.
    pub dport: u16,
    /// 4 or 6.
    pub ip_version: u8,
    /// The IP protocol.
    pub protocol: u8,
    /// TCP flags of this direction.
    pub tcp_flags: u16,
    /// Packets of this direction.
    pub packets: u64,
    /// Bytes of this direction.
    pub bytes: u64,
    /// The exporter's address.
    pub exporter: [u8; 16],
    /// `in_if`.
    pub in_if: u32,
    /// `out_if`.
    pub out_if: u32,
    /// `vlan`.
    pub vlan: u16,
    /// The sender's AS number (0: unknown).
    pub src_as: u32,
    /// The receiver's AS number.
    pub dst_as: u32,
    /// The sender's country ([`super::country_code`]; 0: unknown).
    pub src_country: u16,
    /// The receiver's country.
    pub dst_country: u16,
    /// The sender's AS name (empty: unknown).
    pub src_as_name: &'static str,
    /// The receiver's AS name.
    pub dst_as_name: &'static str,
    /// The name of the operator's network holding the sender's address (empty: none).
    pub src_net: &'static str,
    /// The receiver's network name.
    pub dst_net: &'static str,
    /// The sender's network's role, site and tenant (empty: none).
    pub src_net_attrs: [&'static str; 3],
    /// The receiver's network's role, site and tenant.
    pub dst_net_attrs: [&'static str; 3],
    /// Whether it is the stored row's reverse direction.
    pub reverse: bool,
    /// How many one-way flows it stands for: 1 for a stored flow, a rollup row's count.
    pub flows: u64,
}

impl Filter {
    /// Whether the one-way flow passes.
    pub fn matches(&self, f: &OneWay) -> bool {
        match self {
            Filter::And(all) => all.iter().all(|a| a.matches(f)),
            Filter::Or(any) => any.iter().any(|a| a.matches(f)),
            Filter::Not(a) => !a.matches(f),
            Filter::Term(t) => t.matches(f),
        }
    }

    /// Adds the stored columns the filter reads to `out`.
    pub fn columns(&self, out: &mut Vec<&'static str>) {
        match self {
            Filter::And(v) | Filter::Or(v) => v.iter().for_each(|a| a.columns(out)),
            Filter::Not(a) => a.columns(out),
            Filter::Term(t) => out.extend_from_slice(t.columns()),
        }
    }

    /// The nodes on the longest path from the root to a term (a term alone: 1).
    pub fn depth(&self) -> usize {
        match self {
            Filter::And(v) | Filter::Or(v) => 1 + v.iter().map(Filter::depth).max().unwrap_or(0),
            Filter::Not(a) => 1 + a.depth(),
            Filter::Term(_) => 1,
        }
    }
}

impl Term {
    /// Whether the one-way flow passes this test.
    #[inline]
    pub fn matches(&self, f: &OneWay) -> bool {
        match *self {
            Term::Addr(Side::Src, n) => n.contains(&f.src),
            Term::Addr(Side::Dst, n) => n.contains(&f.dst),
            Term::Addr(Side::Any, n) => n.contains(&f.src) || n.contains(&f.dst),
            Term::Port(Side::Src, op, p) => op.holds(f.sport, p),
            Term::Port(Side::Dst, op, p) => op.holds(f.dport, p),
            Term::Port(Side::Any, op, p) => op.holds(f.sport, p) || op.holds(f.dport, p),
            Term::Protocol(p) => f.protocol == p,
            Term::IpVersion(v) => f.ip_version == v,
            Term::Exporter(n) => n.contains(&f.exporter),
            Term::Interface(IfSide::In, i) => f.in_if == i,
            Term::Interface(IfSide::Out, i) => f.out_if == i,
            Term::Interface(IfSide::Any, i) => f.in_if == i || f.out_if == i,
            Term::Vlan(v) => f.vlan == v,
            Term::As(Side::Src, n) => f.src_as == n,
            Term::As(Side::Dst, n) => f.dst_as == n,
            Term::As(Side::Any, n) => f.src_as == n || f.dst_as == n,
            Term::Country(Side::Src, c) => f.src_country == c,
            Term::Country(Side::Dst, c) => f.dst_country == c,
            Term::Country(Side::Any, c) => f.src_country == c || f.dst_country == c,
            Term::NetName(Side::Src, n) => f.src_net == n,
            Term::NetName(Side::Dst, n) => f.dst_net == n,
            Term::NetName(Side::Any, n) => f.src_net == n || f.dst_net == n,
            Term::NetAttr(Side::Src, a, v) => f.src_net_attrs[a as usize] == v,
            Term::NetAttr(Side::Dst, a, v) => f.dst_net_attrs[a as usize] == v,
            Term::NetAttr(Side::Any, a, v) => {
                f.src_net_attrs[a as usize] == v || f.dst_net_attrs[a as usize] == v
            }
            Term::Packets(op, n) => op.holds(f.packets, n),
            Term::Bytes(op, n) => op.holds(f.bytes, n),
            Term::TcpFlags(m) => f.tcp_flags & m == m,
        }
    }

    /// The stored columns this test reads (both directions' where they differ).
    pub fn columns(&self) -> &'static [&'static str] {
        match self {
            Term::Addr(..) => &["src_addr", "dst_addr"],
            Term::Port(..) => &["src_port", "dst_port"],
            Term::Protocol(_) => &["protocol"],
            Term::IpVersion(_) => &["ip_version"],
            Term::Exporter(_) => &["exporter"],
            Term::Interface(..) => &["in_if", "out_if"],
            Term::Vlan(_) => &["vlan"],
            Term::As(..) => &["src_as", "dst_as"],
            Term::Country(..) => &["src_country", "dst_country"],
            Term::NetName(..) => &["src_net", "dst_net"],
            Term::NetAttr(_, NetAttr::Role, _) => &["src_net_role", "dst_net_role"],
            Term::NetAttr(_, NetAttr::Site, _) => &["src_net_site", "dst_net_site"],
            Term::NetAttr(_, NetAttr::Tenant, _) => &["src_net_tenant", "dst_net_tenant"],
            Term::Packets(..) => &["packets", "rev_packets"],
            Term::Bytes(..) => &["bytes", "rev_bytes"],
            Term::TcpFlags(_) => &["tcp_flags", "rev_tcp_flags"],
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::in_child::survives;

    fn v4(a: [u8; 4]) -> [u8; 16] {
        std::net::Ipv4Addr::from(a).to_ipv6_mapped().octets()
    }

    fn flow() -> OneWay {
        OneWay {
            src: v4([10, 1, 2, 3]),
            dst: v4([192, 0, 2, 9]),
            sport: 40000,
            dport: 443,
            ip_version: 4,
            protocol: 6,
            tcp_flags: 0x12,
            packets: 10,
            bytes: 5000,
            in_if: 3,
            out_if: 7,
            vlan: 100,
            src_net: crate::names::intern("office"),
            dst_net_attrs: ["servers", "fra1", "acme"],
            flows: 1,
            ..OneWay::default()
        }
    }

    fn yes(text: &str) -> bool {
        parse(text)
            .unwrap_or_else(|e| panic!("{text}: {e}"))
            .matches(&flow())
    }

    #[test]
    fn nfdump_and_rule_words_select_what_they_say() {
        for t in [
            "src net 10.0.0.0/8 and dst port 443",
            "src 10.0.0.0/8 dport 443",
            "proto tcp and not dst port 80",
            "tcp",
            "host 192.0.2.9",
            "ip 10.1.2.3",
            "net 192.0.2.0/24",
            "port > 1023 and port < 444",
            "dst port 400-500",
            "dport 443",
            "sport 40000-40010",
            "bytes > 4k and packets >= 10",
            "bytes<5001",
            "in if 3 and out if 7 and vlan 100",
            "if 7",
            "flags SA",
            "ipv4",
            "(udp or tcp) and !(src host 10.1.2.4)",
            "any",
            "proto 6",
            "src net-name office",
            "net-name office and dst net-name -",
            "dst net-role servers and net-site fra1 and net-tenant acme and src net-role -",
            "not dst net-name office",
            "src net-name \"office\" and (src net-name \"a (b)\" or tcp)",
        ] {
            assert!(yes(t), "{t} should match");
        }
        for t in [
            "src net 11.0.0.0/8",
            "dst port 80",
            "udp",
            "src port 443",
            "bytes > 5k",
            "flags F",
            "ipv6",
            "net 2001:db8::/32",
            "in if 7",
            "tcp and not port 443",
            "dst net-name office",
            "src net-name Office",
            "src net-name -",
            "src net-role servers",
            "net-tenant fra1",
        ] {
            assert!(!yes(t), "{t} should not match");
        }
    }

    #[test]
    fn bad_filters_name_the_word() {
        for (t, says) in [
            ("src net 10.0.0.1/8", "host bits"),
            ("dst port 70000", "70000"),
            ("proto xyz", "xyz"),
            ("frobnicate", "frobnicate"),
            ("(tcp", "')'"),
            ("tcp )", "')'"),
            ("flags SX", "'X'"),
            ("", "empty"),
            ("port 90-80", "backwards"),
            ("src net-name", "a network name"),
        ] {
            let e = parse(t).expect_err(t).to_string();
            assert!(e.contains(says), "{t}: {e}");
        }
    }

    /// `name`, a test of this module, as the test binary names it.
    fn this(name: &str) -> String {
        let module = module_path!().split_once("::").map_or("", |m| m.1);
        format!("{module}::{name}")
    }

    /// A stack smaller than a thread's default 2 MiB.
    const STACK: usize = 512 * 1024;

    fn nested(open: &str, close: &str, levels: usize) -> String {
        format!("{}tcp{}", open.repeat(levels), close.repeat(levels))
    }

    #[test]
    fn nesting_to_the_limit_parses_and_past_it_is_refused() {
        // Each `not` and each `(` is a level.
        for (open, close, levels) in [
            ("(", ")", 1),
            ("not ", "", 1),
            ("!", "", 1),
            ("not (", ")", 2),
            ("! ( udp or ", ")", 2),
        ] {
            let deepest = nested(open, close, MAX_DEPTH / levels);
            parse(&deepest).unwrap_or_else(|e| panic!("{deepest}: {e}"));
            let deeper = nested(open, close, MAX_DEPTH / levels + 1);
            let e = parse(&deeper).expect_err(&deeper).to_string();
            assert_eq!(e, "filter: nested deeper than 64 levels", "{deeper}");
        }
        assert!(yes(&nested("(", ")", MAX_DEPTH)));
        assert!(yes(&nested("not ", "", MAX_DEPTH)));
    }

    #[test]
    fn ten_thousand_nots_are_refused_without_overflowing() {
        survives(
            &this("ten_thousand_nots_are_refused_without_overflowing"),
            STACK,
            || {
                let e = parse(&nested("!", "", 10_000)).unwrap_err().to_string();
                assert_eq!(e, "filter: nested deeper than 64 levels");
                let e = parse(&nested("not ", "", 10_000)).unwrap_err().to_string();
                assert_eq!(e, "filter: longer than 16384 bytes");
            },
        );
    }

    #[test]
    fn four_thousand_parentheses_are_refused_without_overflowing() {
        survives(
            &this("four_thousand_parentheses_are_refused_without_overflowing"),
            STACK,
            || {
                let e = parse(&nested("(", ")", 4_000)).unwrap_err().to_string();
                assert_eq!(e, "filter: nested deeper than 64 levels");
            },
        );
    }

    #[test]
    fn the_deepest_filter_matches_and_drops_on_a_small_stack() {
        survives(
            &this("the_deepest_filter_matches_and_drops_on_a_small_stack"),
            STACK,
            || {
                let f = parse(&nested("not ( udp or ", ")", MAX_DEPTH / 2)).unwrap();
                assert!(f.matches(&flow()));
                drop(f);
            },
        );
    }

    #[test]
    fn a_flat_chain_to_the_length_limit_is_a_shallow_tree() {
        let mut text = "udp or ".repeat(MAX_LEN / 7 - 1);
        text.push_str("tcp");
        assert!(text.len() <= MAX_LEN);
        let f = parse(&text).unwrap();
        assert!(f.matches(&flow()));
        assert_eq!(f.depth(), 2, "an or-chain is one node over its terms");
        let f = parse(&format!("{}tcp", "tcp and ".repeat(99))).unwrap();
        assert_eq!(f.depth(), 2, "an and-chain is one node over its terms");
        let padded = format!("{text}{}", " ".repeat(MAX_LEN + 1 - text.len()));
        let e = parse(&padded).expect_err("one byte too long").to_string();
        assert_eq!(e, "filter: longer than 16384 bytes");
    }

    #[test]
    fn ipv4_prefixes_match_only_ipv4_mapped_addresses() {
        let n = parse_net("0.0.0.0/0").unwrap();
        assert_eq!(n.len, 96);
        assert!(n.contains(&v4([1, 2, 3, 4])));
        let v6: [u8; 16] = "2001:db8::1"
            .parse::<std::net::Ipv6Addr>()
            .unwrap()
            .octets();
        assert!(!n.contains(&v6));
        assert!(parse_net("2001:db8::/32").unwrap().contains(&v6));
    }
}
