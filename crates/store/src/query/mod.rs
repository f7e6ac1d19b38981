//! Queries over stored flows: what `tapflow query` asks, whichever store answers it (the Parquet
//! directory's own scan, or SQL on a ClickHouse server), and the one result both return.
//!
//! # The one-way view
//!
//! A stored row is an RFC 5103 biflow. Every query reads it as up to two **one-way flows**, the
//! way nfdump's uniflow records read:
//!
//! - the forward flow, only when `packets > 0`: `src_addr → dst_addr`, `src_port → dst_port`,
//!   counters `packets`, `bytes`, flags `tcp_flags`;
//! - the reverse flow, only when `rev_packets > 0`: the addresses and ports swapped
//!   (`dst_addr → src_addr`, `dst_port → src_port`), counters `rev_packets`, `rev_bytes`, flags
//!   `rev_tcp_flags`.
//!
//! Both take the row's `time_start`, `time_end`, `ip_version`, `protocol`, `exporter`, `domain`,
//! `in_if`, `out_if` and `vlan` as stored (interfaces are not swapped). Filters, keys and metrics
//! all apply to one-way flows: `-s srcip/bytes` ranks senders by the bytes they sent, `dst port
//! 443` selects what went to port 443 and not the answers, and a count of flows counts one-way
//! flows. A direction with no packets is not a flow (a connection seen from its SYN-ACK in a
//! capture that starts mid-connection has an empty forward direction): it is neither listed nor
//! counted, in the flows or in the rollups. In SQL the view is the table `WHERE packets > 0`
//! `UNION ALL` the table with the columns swapped `WHERE rev_packets > 0`.
//!
//! # Times
//!
//! Times are microseconds since 1970 UTC. A flow is in a [`Window`] when its `time_start` is
//! (nfdump's `-t` keeps flows that lie wholly in the window; here a flow belongs to the window it
//! started in, so windows side by side split the flows between them exactly).

pub mod filter;
pub mod groups;
pub mod interfaces;
pub mod output;
pub mod plan;
pub mod result;
pub mod series;
pub mod sink;
pub mod time;
pub mod top;

pub use filter::OneWay;
pub use result::{Answer, Counters, QueryResult, Row, ScanStats, Summary, Value};

/// One query.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Query {
    /// The flows whose `time_start` lies in it; every stored flow if `None`.
    pub window: Option<Window>,
    /// The one-way flows it keeps; all of them if `None`.
    pub filter: Option<Filter>,
    /// What to compute over the flows kept.
    pub kind: Kind,
}

/// A half-open time range `[start_us, end_us)`, µs since 1970 UTC.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Window {
    /// The first microsecond in the window.
    pub start_us: i64,
    /// The first microsecond past the window.
    pub end_us: i64,
}

impl Window {
    /// Whether `t_us` lies in the window.
    #[inline]
    pub fn contains(&self, t_us: i64) -> bool {
        self.start_us <= t_us && t_us < self.end_us
    }
}

/// What a query computes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Kind {
    /// The one-way flows themselves, by `time_start` ascending (ties by `time_end`, then the
    /// addresses and ports), the first `limit` of them (all if `None`). Result:
    /// [`QueryResult::Flows`].
    List {
        /// How many flows at most.
        limit: Option<u64>,
    },
    /// nfdump's `-s KEY/ORDER -n N`: the `n` values of `key` with the largest `order_by`. A flow
    /// counts under each value its key takes: under both its addresses for [`Key::Addr`], both
    /// its ports for [`Key::Port`] (twice if they are equal, as nfdump counts). Result:
    /// [`QueryResult::Table`] with one key column.
    Top {
        /// The key ranked.
        key: Key,
        /// The metric ranked by, largest first; ties by key value ascending.
        order_by: Metric,
        /// How many values at most (0: all).
        n: usize,
    },
    /// nfdump's `-a`: one row per distinct tuple of `keys` (directional keys only: not
    /// [`Key::Addr`] or [`Key::Port`]), the `n` largest by `order_by` (0: all). Result:
    /// [`QueryResult::Table`] with one key column per key.
    Aggregate {
        /// The grouping keys, in output order.
        keys: Vec<Key>,
        /// The metric ordered by, largest first; ties by the key tuple ascending.
        order_by: Metric,
        /// How many rows at most (0: all).
        n: usize,
    },
    /// A time series: the flows' counters in buckets of `every_us` by `time_start` (buckets
    /// aligned to multiples of `every_us` since 1970), split by `key` if given, keeping the `n`
    /// values of the key largest by `order_by` over the whole window (0: all); the rest are not
    /// shown. Result: [`QueryResult::Table`] whose rows carry `time_us`, by time then by
    /// `order_by` descending within a bucket. Buckets with no flow have no row.
    Series {
        /// The bucket width in µs (> 0).
        every_us: i64,
        /// The key each bucket is split by (directional keys or [`Key::Addr`]/[`Key::Port`],
        /// counted as in [`Kind::Top`]).
        key: Option<Key>,
        /// The metric that picks the `n` keys shown.
        order_by: Metric,
        /// How many key values at most (0: all).
        n: usize,
    },
    /// nfdump's `-I`: totals and per protocol. Result: [`QueryResult::Summary`].
    Summary,
}

/// A value a flow can be grouped by.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Key {
    /// The source address (nfdump `srcip`), masked to `prefix` bits if given: an IPv4 length
    /// (0–32) for IPv4 flows, an IPv6 length (0–128) for IPv6 flows.
    SrcAddr(Option<Prefixes>),
    /// The destination address (`dstip`), masked the same way.
    DstAddr(Option<Prefixes>),
    /// Either address (`ip`): a flow counts under both.
    Addr(Option<Prefixes>),
    /// The source port (`srcport`); ICMP flows keep type and code here as exporters do (0).
    SrcPort,
    /// The destination port (`dstport`; ICMP type × 256 + code for ICMP flows).
    DstPort,
    /// Either port (`port`): a flow counts under both.
    Port,
    /// The IP protocol number (`proto`).
    Protocol,
    /// The exporter's address (`exporter`).
    Exporter,
    /// The ingress interface index (`inif`).
    InIf,
    /// The egress interface index (`outif`).
    OutIf,
    /// The VLAN id (`vlan`).
    Vlan,
    /// The source address's AS number (`srcas`), as enrichment set it (0: unknown).
    SrcAs,
    /// The destination address's AS number (`dstas`).
    DstAs,
    /// The source address's country (`srccountry`), ISO 3166 letters as [`country_code`].
    SrcCountry,
    /// The destination address's country (`dstcountry`).
    DstCountry,
    /// The name of the operator's network holding the source address (`srcnet`), as the
    /// networks file gives it (empty: in none).
    SrcNet,
    /// The name of the network holding the destination address (`dstnet`).
    DstNet,
}

/// Two ISO 3166 letters as one number (first letter × 256 + second; 0: unknown), as country
/// keys and filters hold them.
pub fn country_code(letters: &[u8]) -> u16 {
    match letters {
        &[a, b] if a.is_ascii_alphabetic() && b.is_ascii_alphabetic() => {
            u16::from(a.to_ascii_uppercase()) << 8 | u16::from(b.to_ascii_uppercase())
        }
        _ => 0,
    }
}

/// The letters of a [`country_code`] number (empty for 0).
pub fn country_letters(code: u16) -> String {
    if code == 0 {
        return String::new();
    }
    let [a, b] = code.to_be_bytes();
    String::from_utf8_lossy(&[a, b]).into_owned()
}

impl Key {
    /// Whether the key takes two values per flow (either address, either port).
    pub fn is_either(self) -> bool {
        matches!(self, Key::Addr(_) | Key::Port)
    }

    /// The key's name as `-s` and `-a` take it and output headers show it.
    pub fn name(self) -> &'static str {
        match self {
            Key::SrcAddr(_) => "srcip",
            Key::DstAddr(_) => "dstip",
            Key::Addr(_) => "ip",
            Key::SrcPort => "srcport",
            Key::DstPort => "dstport",
            Key::Port => "port",
            Key::Protocol => "proto",
            Key::Exporter => "exporter",
            Key::InIf => "inif",
            Key::OutIf => "outif",
            Key::Vlan => "vlan",
            Key::SrcAs => "srcas",
            Key::DstAs => "dstas",
            Key::SrcCountry => "srccountry",
            Key::DstCountry => "dstcountry",
            Key::SrcNet => "srcnet",
            Key::DstNet => "dstnet",
        }
    }

    /// Whether the key is an AS number, whose rows carry the AS's name beside it.
    pub fn is_as(self) -> bool {
        matches!(self, Key::SrcAs | Key::DstAs)
    }

    /// Whether the key's values carry a name beside them: an AS's, an interface's.
    pub fn is_named(self) -> bool {
        self.is_as() || matches!(self, Key::InIf | Key::OutIf)
    }
}

/// Address prefix lengths for a masked address key: `v4` bits of an IPv4 address, `v6` bits of
/// an IPv6 address (nfdump's `-a srcip4/24` and `srcip6/64`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Prefixes {
    /// Bits kept of an IPv4 address, 0–32.
    pub v4: u8,
    /// Bits kept of an IPv6 address, 0–128.
    pub v6: u8,
}

/// What rows are counted and ordered by (nfdump's `/ORDER`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Metric {
    /// One-way flows.
    Flows,
    /// Packets.
    Packets,
    /// Bytes (IP bytes, as exporters count `octetDeltaCount`).
    Bytes,
    /// Bits per second: bytes × 8 over the span from the group's earliest `time_start` to its
    /// latest `time_end` (0 when the span is 0).
    Bps,
    /// Packets per second over the same span.
    Pps,
}

impl Metric {
    /// The metric's name as `/ORDER` takes it.
    pub fn name(self) -> &'static str {
        match self {
            Metric::Flows => "flows",
            Metric::Packets => "packets",
            Metric::Bytes => "bytes",
            Metric::Bps => "bps",
            Metric::Pps => "pps",
        }
    }
}

/// A filter over one-way flows: a tree of terms, a chain of `and`s or of `or`s one node.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Filter {
    /// Every one holds (two or more).
    And(Vec<Filter>),
    /// At least one holds (two or more).
    Or(Vec<Filter>),
    /// It does not hold.
    Not(Box<Filter>),
    /// One test.
    Term(Term),
}

/// Which end of a one-way flow a term looks at.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Side {
    /// The sender's (`src`).
    Src,
    /// The receiver's (`dst`).
    Dst,
    /// Either (no word, or `src or dst`).
    Any,
}

/// One test on a one-way flow.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Term {
    /// The address at `side` lies in `net`.
    Addr(Side, Net),
    /// The port at `side` compares to `value` by `op` (with [`Side::Any`]: either port does).
    Port(Side, Cmp, u16),
    /// The IP protocol is this number.
    Protocol(u8),
    /// The IP version is 4 or 6 (`ipv4`/`inet`, `ipv6`/`inet6`).
    IpVersion(u8),
    /// The exporter's address lies in `net`.
    Exporter(Net),
    /// The interface index at this end is `index` (`in if N`, `out if N`, `if N` for either).
    Interface(IfSide, u32),
    /// The VLAN id is this.
    Vlan(u16),
    /// The AS number at `side` is this (`src as 13335`; with [`Side::Any`]: either's is).
    As(Side, u32),
    /// The country at `side` is this ([`country_code`]; `dst country DE`).
    Country(Side, u16),
    /// The name of the operator's network holding the address at `side` is this
    /// (`src net-name office`), exactly; the text is interned ([`crate::names::intern`]).
    NetName(Side, &'static str),
    /// The role, site or tenant of the operator's network holding the address at `side` is this
    /// (`dst net-role servers`, `net-site fra1`, `src net-tenant acme`), exactly; interned.
    NetAttr(Side, NetAttr, &'static str),
    /// The one-way flow's packets compare to the value.
    Packets(Cmp, u64),
    /// The one-way flow's bytes compare to the value.
    Bytes(Cmp, u64),
    /// Every TCP flag in the mask is set in the one-way flow's flags (`flags S`, nfdump letters
    /// `FSRPAUEC` for FIN SYN RST PSH ACK URG ECE CWR); the flags of non-TCP flows are 0.
    TcpFlags(u16),
}

/// Which attribute of a network a [`Term::NetAttr`] looks at.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum NetAttr {
    /// Its role (`net-role`).
    Role,
    /// Its site (`net-site`).
    Site,
    /// Its tenant (`net-tenant`).
    Tenant,
}

/// Which interface a term looks at.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum IfSide {
    /// `in_if`.
    In,
    /// `out_if`.
    Out,
    /// Either.
    Any,
}

/// A comparison.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Cmp {
    /// `=` (the default when no operator is written).
    Eq,
    /// `!=`.
    Ne,
    /// `<`.
    Lt,
    /// `<=`.
    Le,
    /// `>`.
    Gt,
    /// `>=`.
    Ge,
}

impl Cmp {
    /// Whether `a OP b` holds.
    #[inline]
    pub fn holds<T: PartialOrd>(self, a: T, b: T) -> bool {
        match self {
            Cmp::Eq => a == b,
            Cmp::Ne => a != b,
            Cmp::Lt => a < b,
            Cmp::Le => a <= b,
            Cmp::Gt => a > b,
            Cmp::Ge => a >= b,
        }
    }

    /// The operator as SQL and the filter language write it.
    pub fn symbol(self) -> &'static str {
        match self {
            Cmp::Eq => "=",
            Cmp::Ne => "!=",
            Cmp::Lt => "<",
            Cmp::Le => "<=",
            Cmp::Gt => ">",
            Cmp::Ge => ">=",
        }
    }
}

/// An address prefix as the store keeps addresses: 16 bytes, IPv4 IPv4-mapped, so an IPv4 `/n`
/// is `len = 96 + n` here and only matches IPv4 flows.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Net {
    /// The address, bits past `len` cleared.
    pub addr: [u8; 16],
    /// Prefix length over the 16 bytes, 0–128 (an IPv4 prefix: 96–128).
    pub len: u8,
}

impl Net {
    /// Whether the 16-byte address lies in the prefix.
    #[inline]
    pub fn contains(&self, a: &[u8; 16]) -> bool {
        let full = usize::from(self.len / 8);
        if a[..full] != self.addr[..full] {
            return false;
        }
        let rest = self.len % 8;
        rest == 0 || (a[full] ^ self.addr[full]) & (0xffu8 << (8 - rest)) == 0
    }
}

/// Why a query could not be parsed or answered.
#[derive(Debug, thiserror::Error)]
pub enum QueryError {
    /// The query's text (window, filter, key, order) is wrong; the message names the word.
    #[error("{0}")]
    Parse(String),
    /// Reading the store failed.
    #[error(transparent)]
    Store(#[from] crate::StoreError),
}

/// A store that answers queries (the Parquet directory, a ClickHouse server).
pub trait QueryEngine: std::fmt::Debug {
    /// Answers `query`.
    fn run(&self, query: &Query) -> Result<Answer, QueryError>;

    /// The collector's counters per exporter and observation domain over the intervals that
    /// ended in `window`, summed, by exporter then domain; `time_ns` is the last interval's end.
    fn exporter_stats(&self, window: Window) -> Result<Vec<crate::ExporterStats>, QueryError>;

    /// What each interface carried in `window`, from sFlow counter samples
    /// ([`interfaces::totals`]), by exporter, domain and `ifIndex`.
    fn interfaces(&self, window: Window) -> Result<Vec<interfaces::InterfaceTotals>, QueryError>;

    /// Every row of the `interfaces` table: the names exporters announced and the operator's
    /// interfaces file gave ([`interfaces::IfNames`] makes one name of them).
    fn interface_names(&self) -> Result<Vec<crate::InterfaceName>, QueryError>;

    /// The start time of the newest stored flow, if any: where a view whose window is empty
    /// can go to find the data.
    fn newest(&self) -> Result<Option<i64>, QueryError>;

    /// The flood alerts kept beside the flows that overlap `window` ([`crate::alerts`]).
    fn alerts(&self, window: Window) -> Result<crate::alerts::Alerts, QueryError>;
}

/// Gives a table whose keys hold an interface ([`Key::InIf`], [`Key::OutIf`]) the names of
/// its interfaces from `engine`'s `interfaces` table; any other answer is left as it is.
pub fn name_interfaces(engine: &dyn QueryEngine, answer: &mut Answer) -> Result<(), QueryError> {
    if let QueryResult::Table { keys, if_names, .. } = &mut answer.result
        && keys.iter().any(|k| matches!(k, Key::InIf | Key::OutIf))
    {
        *if_names = interfaces::IfNames::new(engine.interface_names()?);
    }
    Ok(())
}

impl std::str::FromStr for Key {
    type Err = QueryError;

    /// A key as `-s` and `-a` name it: `srcip`, `dstip`, `ip`, `srcport`, `dstport`, `port`,
    /// `proto`, `exporter` (or `router`), `inif`, `outif`, `vlan`, `srcas`, `dstas`,
    /// `srccountry`, `dstcountry`, `srcnet`, `dstnet`; an address key masked as
    /// nfdump's `-A` writes it: `srcip4/24`, `dstip6/64`, `ip4/16`.
    fn from_str(s: &str) -> Result<Key, QueryError> {
        let bad = || {
            QueryError::Parse(format!(
                "unknown key '{s}' (srcip, dstip, ip, srcport, dstport, port, proto, exporter, inif, outif, vlan, srcas, dstas, srccountry, dstcountry, srcnet, dstnet; srcip4/24, dstip6/64)"
            ))
        };
        let lower = s.to_ascii_lowercase();
        if let Some((name, len)) = lower.split_once('/') {
            let len: u8 = len.parse().map_err(|_| bad())?;
            let (base, v6) = if let Some(b) = name.strip_suffix('4') {
                (b, false)
            } else if let Some(b) = name.strip_suffix('6') {
                (b, true)
            } else {
                return Err(bad());
            };
            let p = if v6 {
                Prefixes { v4: 32, v6: len }
            } else {
                Prefixes { v4: len, v6: 128 }
            };
            if (v6 && len > 128) || (!v6 && len > 32) {
                return Err(QueryError::Parse(format!(
                    "prefix length in key '{s}' is too long"
                )));
            }
            return match base {
                "srcip" => Ok(Key::SrcAddr(Some(p))),
                "dstip" => Ok(Key::DstAddr(Some(p))),
                "ip" => Ok(Key::Addr(Some(p))),
                _ => Err(bad()),
            };
        }
        Ok(match lower.as_str() {
            "srcip" | "srcaddr" => Key::SrcAddr(None),
            "dstip" | "dstaddr" => Key::DstAddr(None),
            "ip" | "addr" => Key::Addr(None),
            "srcport" => Key::SrcPort,
            "dstport" => Key::DstPort,
            "port" => Key::Port,
            "proto" | "protocol" => Key::Protocol,
            "exporter" | "router" => Key::Exporter,
            "inif" | "in_if" => Key::InIf,
            "outif" | "out_if" => Key::OutIf,
            "vlan" => Key::Vlan,
            "srcas" => Key::SrcAs,
            "dstas" => Key::DstAs,
            "srccountry" => Key::SrcCountry,
            "dstcountry" => Key::DstCountry,
            "srcnet" => Key::SrcNet,
            "dstnet" => Key::DstNet,
            _ => return Err(bad()),
        })
    }
}

impl std::str::FromStr for Metric {
    type Err = QueryError;

    /// `flows`, `packets`, `bytes`, `bps` or `pps`.
    fn from_str(s: &str) -> Result<Metric, QueryError> {
        Ok(match s.to_ascii_lowercase().as_str() {
            "flows" | "records" => Metric::Flows,
            "packets" => Metric::Packets,
            "bytes" => Metric::Bytes,
            "bps" => Metric::Bps,
            "pps" => Metric::Pps,
            _ => {
                return Err(QueryError::Parse(format!(
                    "unknown order '{s}' (flows, packets, bytes, bps, pps)"
                )));
            }
        })
    }
}
