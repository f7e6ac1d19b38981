//! What a query returns, whichever store answered it; one printer formats it (`output.rs`).

use super::filter::OneWay;
use super::{Key, Metric};

/// Counters summed over one-way flows.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Counters {
    /// One-way flows.
    pub flows: u64,
    /// Packets.
    pub packets: u64,
    /// Bytes.
    pub bytes: u64,
    /// The earliest `time_start`, µs since 1970 (`i64::MAX` when `flows == 0`).
    pub first_us: i64,
    /// The latest `time_end`, µs since 1970 (`i64::MIN` when `flows == 0`).
    pub last_us: i64,
}

impl Counters {
    /// Nothing counted yet.
    pub const EMPTY: Counters = Counters {
        flows: 0,
        packets: 0,
        bytes: 0,
        first_us: i64::MAX,
        last_us: i64::MIN,
    };

    /// Counts `flows` one-way flows (one, or a rollup row's count).
    #[inline]
    pub fn add(&mut self, flows: u64, packets: u64, bytes: u64, start_us: i64, end_us: i64) {
        self.flows += flows;
        self.packets += packets;
        self.bytes += bytes;
        self.first_us = self.first_us.min(start_us);
        self.last_us = self.last_us.max(end_us);
    }

    /// Adds another group's counters.
    #[inline]
    pub fn merge(&mut self, o: &Counters) {
        self.flows += o.flows;
        self.packets += o.packets;
        self.bytes += o.bytes;
        self.first_us = self.first_us.min(o.first_us);
        self.last_us = self.last_us.max(o.last_us);
    }

    /// The span from the first start to the last end in µs (0 if nothing counted).
    pub fn span_us(&self) -> i64 {
        if self.flows == 0 {
            0
        } else {
            (self.last_us - self.first_us).max(0)
        }
    }

    /// Bits per second over [`Counters::span_us`] (0 when the span is 0).
    pub fn bps(&self) -> f64 {
        rate(self.bytes as f64 * 8.0, self.span_us())
    }

    /// Packets per second over [`Counters::span_us`] (0 when the span is 0).
    pub fn pps(&self) -> f64 {
        rate(self.packets as f64, self.span_us())
    }

    /// The value of `metric`, for ordering.
    pub fn metric(&self, metric: Metric) -> f64 {
        match metric {
            Metric::Flows => self.flows as f64,
            Metric::Packets => self.packets as f64,
            Metric::Bytes => self.bytes as f64,
            Metric::Bps => self.bps(),
            Metric::Pps => self.pps(),
        }
    }
}

fn rate(amount: f64, span_us: i64) -> f64 {
    if span_us <= 0 {
        0.0
    } else {
        amount * 1e6 / span_us as f64
    }
}

/// One key value.
// Equality is the derived one's (the same variant and content), only faster for texts, so the
// derived hash agrees with it.
#[allow(clippy::derived_hash_with_manual_eq)]
#[derive(Debug, Clone, Copy, Eq, Hash, PartialOrd, Ord)]
pub enum Value {
    /// An address, 16 bytes, IPv4 IPv4-mapped (a masked key keeps the prefix's bits).
    Addr([u8; 16]),
    /// A port, protocol number, interface index, VLAN id, AS number or country.
    Num(u32),
    /// A network name, interned ([`crate::names::intern`]; empty: in none of the networks).
    Text(&'static str),
}

impl PartialEq for Value {
    /// An interned text compares first by its pointer (then no bytes are compared), and empty
    /// texts without a call: a scan compares a key value per row.
    #[inline(always)]
    fn eq(&self, o: &Value) -> bool {
        match (self, o) {
            (Value::Addr(a), Value::Addr(b)) => a == b,
            (Value::Num(a), Value::Num(b)) => a == b,
            (Value::Text(a), Value::Text(b)) => {
                std::ptr::eq(*a, *b) || (a.len() == b.len() && (a.is_empty() || a == b))
            }
            _ => false,
        }
    }
}

impl Value {
    /// The value as text: an address as `a.b.c.d` or IPv6 text, a number in decimal (a protocol
    /// by name when `key` is [`Key::Protocol`] and the name is known).
    pub fn show(&self, key: Key) -> String {
        match *self {
            Value::Addr(a) => addr_text(&a),
            Value::Num(n) if key == Key::Protocol => proto_name(n as u8)
                .map(str::to_owned)
                .unwrap_or_else(|| n.to_string()),
            Value::Num(n) if matches!(key, Key::SrcCountry | Key::DstCountry) => {
                match super::country_letters(n as u16) {
                    l if l.is_empty() => "-".to_owned(),
                    l => l,
                }
            }
            Value::Num(n) => n.to_string(),
            Value::Text("") => "-".to_owned(),
            Value::Text(t) => t.to_owned(),
        }
    }
}

/// The AS names seen beside the AS numbers of a table's rows (one of them, if the ASN database
/// named an AS differently over the window); an AS without a name is not in it.
pub type AsNames = std::collections::BTreeMap<u32, &'static str>;

/// The names a table's rows carry beside their values ([`Key::is_named`]).
#[derive(Debug, Clone, Copy)]
pub struct Names<'a> {
    /// AS names by number.
    pub as_names: &'a AsNames,
    /// Interface names by exporter and index.
    pub if_names: &'a super::interfaces::IfNames,
}

impl Names<'_> {
    /// The name beside the value of `keys[i]` in a row of `values`: an AS number's; an
    /// interface's, of the row's exporter if a key holds it.
    pub fn of(&self, keys: &[Key], values: &[Value], i: usize) -> Option<&str> {
        match (keys.get(i)?, values.get(i)?) {
            (k, Value::Num(n)) if k.is_as() => self.as_names.get(n).copied(),
            (Key::InIf | Key::OutIf, Value::Num(n)) => {
                let exporter = keys.iter().zip(values).find_map(|(k, v)| match (k, v) {
                    (Key::Exporter, Value::Addr(a)) => Some(a),
                    _ => None,
                });
                self.if_names.name(exporter, *n)
            }
            _ => None,
        }
    }
}

/// A 16-byte stored address as text: IPv4-mapped ones as dotted quads.
pub fn addr_text(a: &[u8; 16]) -> String {
    let v6 = std::net::Ipv6Addr::from(*a);
    match v6.to_ipv4_mapped() {
        Some(v4) => v4.to_string(),
        None => v6.to_string(),
    }
}

/// The protocol names nfdump prints and the filter takes.
pub const PROTOCOLS: &[(u8, &str)] = &[
    (1, "ICMP"),
    (2, "IGMP"),
    (4, "IPIP"),
    (6, "TCP"),
    (17, "UDP"),
    (41, "IPv6"),
    (47, "GRE"),
    (50, "ESP"),
    (51, "AH"),
    (58, "ICMP6"),
    (89, "OSPF"),
    (103, "PIM"),
    (112, "VRRP"),
    (132, "SCTP"),
];

/// The name of protocol `p`, if it has one here.
pub fn proto_name(p: u8) -> Option<&'static str> {
    PROTOCOLS.iter().find(|(n, _)| *n == p).map(|(_, s)| *s)
}

/// One row of a [`QueryResult::Table`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Row {
    /// The bucket's start for a series (µs since 1970), `None` otherwise.
    pub time_us: Option<i64>,
    /// One value per key column, in the table's key order.
    pub values: Vec<Value>,
    /// The counters of the flows under these values.
    pub counters: Counters,
}

/// nfdump's `-I`: totals and per protocol.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Summary {
    /// Everything kept.
    pub total: Counters,
    /// TCP flows.
    pub tcp: Counters,
    /// UDP flows.
    pub udp: Counters,
    /// ICMP flows (protocol 1; ICMPv6 counts as other, as in nfdump).
    pub icmp: Counters,
    /// Every other protocol.
    pub other: Counters,
}

impl Default for Summary {
    fn default() -> Self {
        Summary {
            total: Counters::EMPTY,
            tcp: Counters::EMPTY,
            udp: Counters::EMPTY,
            icmp: Counters::EMPTY,
            other: Counters::EMPTY,
        }
    }
}

/// What the store did to answer, for `--stats` and tests.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ScanStats {
    /// Files in the tier that answered, in every partition.
    pub files_listed: u64,
    /// Files opened (their footer read).
    pub files_opened: u64,
    /// Row groups in the opened files.
    pub row_groups: u64,
    /// Row groups read (the others pruned by their statistics).
    pub row_groups_read: u64,
    /// Stored rows decoded.
    pub rows_read: u64,
    /// Files that could not be read, moved into the store's quarantine and left out.
    pub files_quarantined: u64,
    /// The tier that answered: 0 for the flows themselves, else the rollup's bucket in seconds.
    pub tier_seconds: u32,
    /// The name of the table that answered (`flows`, `rollup_1h`, `hosts_1h`, `ports_1h`…;
    /// empty when the store does not say).
    pub table: &'static str,
}

/// The answer to a query.
#[derive(Debug, Clone, PartialEq)]
pub enum QueryResult {
    /// [`super::Kind::List`]'s flows, by time.
    Flows(Vec<OneWay>),
    /// [`super::Kind::Top`], [`super::Kind::Aggregate`] and [`super::Kind::Series`].
    Table {
        /// The key columns, in order.
        keys: Vec<Key>,
        /// The rows, in the query's order.
        rows: Vec<Row>,
        /// Every flow kept, counted once (the base of percentages; for [`Key::Addr`] and
        /// [`Key::Port`] a flow appears under two rows but once here).
        total: Counters,
        /// The metric the rows are ordered by.
        order_by: Metric,
        /// The names of the AS numbers in the rows, for keys [`Key::is_as`].
        as_names: AsNames,
        /// The names of the interfaces, for keys [`Key::InIf`] and [`Key::OutIf`] (empty for
        /// other keys).
        if_names: super::interfaces::IfNames,
    },
    /// [`super::Kind::Summary`].
    Summary(Summary),
}

impl QueryResult {
    /// Whether no flow was kept.
    pub fn is_empty(&self) -> bool {
        match self {
            QueryResult::Flows(f) => f.is_empty(),
            QueryResult::Table { rows, total, .. } => rows.is_empty() && total.flows == 0,
            QueryResult::Summary(s) => s.total.flows == 0,
        }
    }
}

/// A result and what it took.
#[derive(Debug, Clone, PartialEq)]
pub struct Answer {
    /// The result.
    pub result: QueryResult,
    /// What the store read to get it.
    pub stats: ScanStats,
}
