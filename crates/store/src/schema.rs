//! The flow schema: one row per flow record, as every store keeps it.
//!
//! A row is an RFC 5103 biflow: `flow.fwd` is the initiator's direction (columns `packets`,
//! `bytes`), `flow.rev` the responder's (`rev_packets`, `rev_bytes`); a one-way record has a
//! zero reverse. Counters are already scaled by the exporter's sampling rate.
//!
//! On disk: `DIR/flows/date=YYYY-MM-DD/hour=HH/*.parquet` (Hive-style partitions by the hour of
//! `time_start`, UTC), rows sorted by `time_start`, columns [`FLOW_COLUMNS`].

use tapflow_wire::flowrecord::FlowRecord;

/// One flow as stored.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct StoredFlow {
    /// The flow: addresses, ports, protocol, VLAN, ingress interface (`flow.interface`),
    /// counters per direction (sampling applied), TCP flags, times and end reason.
    pub flow: FlowRecord,
    /// The egress interface (IPFIX `egressInterface`, IE 14; 0 if not exported).
    pub egress: u32,
    /// The exporter's address, IPv4 as an IPv4-mapped IPv6 address (`::ffff:a.b.c.d`).
    pub exporter: [u8; 16],
    /// The IPFIX observation domain (NetFlow v9 source id; v5 engine type << 8 | engine id; sFlow
    /// sub-agent id).
    pub domain: u32,
    /// The sampling rate applied to the counters (1 when the exporter did not sample).
    pub sampling: u32,
    /// When the collector received the record, ns since 1970 (the flow meter's export time for
    /// flows stored without a network hop).
    pub received_ns: u64,
    /// What enrichment found for the source address (AS, country, network).
    pub src_place: Place,
    /// What enrichment found for the destination address.
    pub dst_place: Place,
}

/// One of the operator's own networks, as the networks file names it: the longest prefix that
/// holds an address. Text is interned ([`crate::names::intern`]), so a flow stays `Copy`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Network {
    /// Its name (`office`, `dc1-web`).
    pub name: &'static str,
    /// Its role (`servers`, `users`, `transit`).
    pub role: &'static str,
    /// Its site.
    pub site: &'static str,
    /// Its tenant or customer.
    pub tenant: &'static str,
    /// Any other attributes, `key=value` joined by `,`, in the file's order.
    pub attrs: &'static str,
}

/// The network of an address in none of the operator's networks.
pub static NO_NETWORK: Network = Network {
    name: "",
    role: "",
    site: "",
    tenant: "",
    attrs: "",
};

/// What enrichment found for one address: zero and empty where nothing is known.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Place {
    /// The origin autonomous system's number (0: unknown).
    pub asn: u32,
    /// Its name (the ASN database's organisation).
    pub as_name: &'static str,
    /// ISO 3166-1 alpha-2 country code, upper case (`[0, 0]`: unknown).
    pub country: [u8; 2],
    /// The operator's network holding the address ([`NO_NETWORK`] if none).
    pub net: &'static Network,
}

impl Default for Place {
    fn default() -> Place {
        Place {
            asn: 0,
            as_name: "",
            country: [0; 2],
            net: &NO_NETWORK,
        }
    }
}

impl Place {
    /// The country code as text (empty if unknown).
    pub fn country_code(&self) -> &str {
        if self.country[0] == 0 {
            ""
        } else {
            std::str::from_utf8(&self.country).unwrap_or("")
        }
    }

    /// A country code from text: two ASCII letters, upper-cased; anything else is unknown.
    pub fn country_from(code: &str) -> [u8; 2] {
        match code.as_bytes() {
            &[a, b] if a.is_ascii_alphabetic() && b.is_ascii_alphabetic() => {
                [a.to_ascii_uppercase(), b.to_ascii_uppercase()]
            }
            _ => [0; 2],
        }
    }
}

/// A name an exporter gave one of its interfaces (IPFIX options records with `interfaceName`,
/// IE 82, and `interfaceDescription`, IE 83; NetFlow v9 options the same way).
#[derive(Debug, Clone, PartialEq, Eq, Hash, Default)]
pub struct InterfaceName {
    /// The exporter's address, IPv4 as an IPv4-mapped IPv6 address.
    pub exporter: [u8; 16],
    /// The observation domain.
    pub domain: u32,
    /// The interface index as flows carry it (`ingressInterface` / `egressInterface`).
    pub index: u32,
    /// `interfaceName`.
    pub name: String,
    /// `interfaceDescription` (empty if not exported).
    pub description: String,
    /// The interface's speed in bits per second, from the operator's interfaces file (0:
    /// unknown; exporters send none with the names).
    pub speed: u64,
    /// When it was received, ns since 1970.
    pub received_ns: u64,
}

/// Counters for one exporter and observation domain over one interval, as the collector saw
/// them: kept beside the flows so a query can say how complete they are.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ExporterStats {
    /// The exporter's address, IPv4 as an IPv4-mapped IPv6 address.
    pub exporter: [u8; 16],
    /// The observation domain.
    pub domain: u32,
    /// The end of the interval, ns since 1970.
    pub time_ns: u64,
    /// Flow records decoded in the interval.
    pub records: u64,
    /// Records lost before the collector, from sequence numbers (IPFIX counts records, NetFlow
    /// v9 export packets, v5 flows; sFlow samples).
    pub sequence_lost: u64,
    /// Data records that arrived before their template and were dropped.
    pub template_missing: u64,
    /// Messages refused as malformed.
    pub bad_messages: u64,
}

/// An interface's counters as an sFlow agent sent them in a counter sample (totals since the
/// agent started, not deltas), with when they arrived.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct InterfaceCounters {
    /// The exporter's address, IPv4 as an IPv4-mapped IPv6 address.
    pub exporter: [u8; 16],
    /// The sub-agent id.
    pub domain: u32,
    /// When the sample was received, ns since 1970.
    pub received_ns: u64,
    /// The counters.
    pub counters: tapflow_wire::sflow::IfCounters,
}

/// The type of one column in the store's files and tables.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ColumnType {
    /// Microseconds since 1970 UTC (Parquet `TIMESTAMP(MICROS, UTC)`).
    TimestampMicros,
    /// 16 bytes (Parquet `FIXED_LEN_BYTE_ARRAY(16)`); an IPv4 address is IPv4-mapped.
    Addr16,
    /// Unsigned integers.
    U8,
    /// Unsigned 16-bit integer.
    U16,
    /// Unsigned 32-bit integer.
    U32,
    /// Unsigned 64-bit integer.
    U64,
    /// UTF-8 text (Parquet `BYTE_ARRAY` annotated `STRING`).
    Utf8,
}

/// The flow table's columns, in order, with their types. Every store (Parquet files,
/// ClickHouse tables) uses exactly these names, so a query reads the same everywhere.
pub const FLOW_COLUMNS: &[(&str, ColumnType)] = &[
    ("time_start", ColumnType::TimestampMicros),
    ("time_end", ColumnType::TimestampMicros),
    ("time_received", ColumnType::TimestampMicros),
    ("ip_version", ColumnType::U8),
    ("src_addr", ColumnType::Addr16),
    ("dst_addr", ColumnType::Addr16),
    ("src_port", ColumnType::U16),
    ("dst_port", ColumnType::U16),
    ("protocol", ColumnType::U8),
    ("tcp_flags", ColumnType::U16),
    ("rev_tcp_flags", ColumnType::U16),
    ("packets", ColumnType::U64),
    ("bytes", ColumnType::U64),
    ("rev_packets", ColumnType::U64),
    ("rev_bytes", ColumnType::U64),
    ("exporter", ColumnType::Addr16),
    ("domain", ColumnType::U32),
    ("in_if", ColumnType::U32),
    ("out_if", ColumnType::U32),
    ("vlan", ColumnType::U16),
    ("end_reason", ColumnType::U8),
    ("sampling", ColumnType::U32),
    // Enrichment (docs/enrichment.md); appended, so files written before them still read.
    ("src_as", ColumnType::U32),
    ("dst_as", ColumnType::U32),
    ("src_as_name", ColumnType::Utf8),
    ("dst_as_name", ColumnType::Utf8),
    ("src_country", ColumnType::Utf8),
    ("dst_country", ColumnType::Utf8),
    ("src_net", ColumnType::Utf8),
    ("dst_net", ColumnType::Utf8),
    ("src_net_role", ColumnType::Utf8),
    ("dst_net_role", ColumnType::Utf8),
    ("src_net_site", ColumnType::Utf8),
    ("dst_net_site", ColumnType::Utf8),
    ("src_net_tenant", ColumnType::Utf8),
    ("dst_net_tenant", ColumnType::Utf8),
    ("src_net_attrs", ColumnType::Utf8),
    ("dst_net_attrs", ColumnType::Utf8),
];

/// How many of [`FLOW_COLUMNS`] files written before enrichment hold: a reader fills the rest
/// with zero and empty text.
pub const FLOW_COLUMNS_BEFORE_ENRICHMENT: usize = 22;

/// A rollup tier's traffic table (`rollup_1m`, `rollup_5m`, `rollup_1h`): one row per bucket,
/// exporter, domain and protocol, summing the flows that started in the bucket. `flows` counts
/// rows (biflows), `rev_flows` those with `rev_packets > 0`: the one-way flows are their sum.
/// Several rows may share a key (written at different times): readers sum them. Ports are kept
/// per hour in [`PORTS_COLUMNS`], addresses in [`HOSTS_COLUMNS`].
pub const ROLLUP_COLUMNS: &[(&str, ColumnType)] = &[
    ("time", ColumnType::TimestampMicros),
    ("exporter", ColumnType::Addr16),
    ("domain", ColumnType::U32),
    ("protocol", ColumnType::U8),
    ("flows", ColumnType::U64),
    ("rev_flows", ColumnType::U64),
    ("packets", ColumnType::U64),
    ("bytes", ColumnType::U64),
    ("rev_packets", ColumnType::U64),
    ("rev_bytes", ColumnType::U64),
];

/// A rollup tier's top hosts (`hosts_1m`, `hosts_5m`, `hosts_1h`): per bucket, the K addresses
/// that sent the most bytes (`side` 0) and the K that received the most (`side` 1), counting
/// one-way flows (a row's forward direction, and its reverse when `rev_packets > 0`). `flows`,
/// `packets`, `bytes` are what that address sent (side 0) or received (side 1) in the bucket.
pub const HOSTS_COLUMNS: &[(&str, ColumnType)] = &[
    ("time", ColumnType::TimestampMicros),
    ("side", ColumnType::U8),
    ("addr", ColumnType::Addr16),
    ("flows", ColumnType::U64),
    ("packets", ColumnType::U64),
    ("bytes", ColumnType::U64),
];

/// The 1-hour ports table (`ports_1h`): per hour, every (protocol, port) that sent (`side` 0:
/// the source port) or received (`side` 1: the destination port) one-way flows (a row's forward
/// direction, and its reverse when `rev_packets > 0`, whose destination port is the row's
/// `src_port`), with the `flows`, `packets` and `bytes` of those one-way flows. Several rows may
/// share a key (written at different times): readers sum them.
pub const PORTS_COLUMNS: &[(&str, ColumnType)] = &[
    ("time", ColumnType::TimestampMicros),
    ("side", ColumnType::U8),
    ("protocol", ColumnType::U8),
    ("port", ColumnType::U16),
    ("flows", ColumnType::U64),
    ("packets", ColumnType::U64),
    ("bytes", ColumnType::U64),
];

/// The 1-hour places table (`places_1h`): per hour, every (AS number and name, country,
/// network name) that sent (`side` 0: the source's place) or received (`side` 1: the
/// destination's) one-way flows, as enrichment set them, with the `flows`, `packets` and `bytes`
/// of those one-way flows. Several rows may share a key (written at different times): readers
/// sum them.
pub const PLACES_COLUMNS: &[(&str, ColumnType)] = &[
    ("time", ColumnType::TimestampMicros),
    ("side", ColumnType::U8),
    ("asn", ColumnType::U32),
    ("as_name", ColumnType::Utf8),
    ("country", ColumnType::Utf8),
    ("net", ColumnType::Utf8),
    ("flows", ColumnType::U64),
    ("packets", ColumnType::U64),
    ("bytes", ColumnType::U64),
];

/// Interface names exporters announced ([`InterfaceName`]); the newest row per exporter,
/// domain and index holds.
pub const INTERFACE_COLUMNS: &[(&str, ColumnType)] = &[
    ("time_received", ColumnType::TimestampMicros),
    ("exporter", ColumnType::Addr16),
    ("domain", ColumnType::U32),
    ("index", ColumnType::U32),
    ("name", ColumnType::Utf8),
    ("description", ColumnType::Utf8),
    ("speed", ColumnType::U64),
];

/// How many of [`INTERFACE_COLUMNS`] an interfaces file written before `speed` was appended
/// holds.
pub const INTERFACE_COLUMNS_BEFORE_SPEED: usize = 6;

/// Per-exporter counters per interval ([`ExporterStats`]); `time` is the interval's end.
pub const EXPORTER_STATS_COLUMNS: &[(&str, ColumnType)] = &[
    ("time", ColumnType::TimestampMicros),
    ("exporter", ColumnType::Addr16),
    ("domain", ColumnType::U32),
    ("records", ColumnType::U64),
    ("sequence_lost", ColumnType::U64),
    ("template_missing", ColumnType::U64),
    ("bad_messages", ColumnType::U64),
];

/// Interface counters from sFlow counter samples ([`InterfaceCounters`]), by time received;
/// the counters are the agent's totals (a reader takes differences between rows of one
/// exporter, domain and `if_index`).
pub const IF_COUNTERS_COLUMNS: &[(&str, ColumnType)] = &[
    ("time_received", ColumnType::TimestampMicros),
    ("exporter", ColumnType::Addr16),
    ("domain", ColumnType::U32),
    ("source_id", ColumnType::U32),
    ("if_index", ColumnType::U32),
    ("if_type", ColumnType::U32),
    ("if_speed", ColumnType::U64),
    ("if_direction", ColumnType::U32),
    ("if_status", ColumnType::U32),
    ("in_octets", ColumnType::U64),
    ("in_ucast_pkts", ColumnType::U32),
    ("in_multicast_pkts", ColumnType::U32),
    ("in_broadcast_pkts", ColumnType::U32),
    ("in_discards", ColumnType::U32),
    ("in_errors", ColumnType::U32),
    ("in_unknown_protos", ColumnType::U32),
    ("out_octets", ColumnType::U64),
    ("out_ucast_pkts", ColumnType::U32),
    ("out_multicast_pkts", ColumnType::U32),
    ("out_broadcast_pkts", ColumnType::U32),
    ("out_discards", ColumnType::U32),
    ("out_errors", ColumnType::U32),
    ("promiscuous_mode", ColumnType::U32),
];

/// An address as the store keeps it: IPv6 as is, IPv4 (`ipv6 == false`, address in the first
/// four bytes, as [`FlowRecord`] holds it) IPv4-mapped (`::ffff:a.b.c.d`).
pub fn addr16(ipv6: bool, a: &[u8; 16]) -> [u8; 16] {
    if ipv6 {
        *a
    } else {
        let mut m = [0u8; 16];
        m[10] = 0xff;
        m[11] = 0xff;
        m[12..].copy_from_slice(&a[..4]);
        m
    }
}

/// Microseconds in an hour.
pub const HOUR_US: i64 = 3_600_000_000;
/// Microseconds in a day.
pub const DAY_US: i64 = 24 * HOUR_US;

/// A rollup tier, as every store keeps them: the width of its buckets.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Tier {
    /// 1-minute buckets.
    Minute,
    /// 5-minute buckets.
    FiveMinutes,
    /// 1-hour buckets.
    Hour,
}

impl Tier {
    /// Every tier, finest first.
    pub const ALL: [Tier; 3] = [Tier::Minute, Tier::FiveMinutes, Tier::Hour];

    /// The width of a bucket, µs.
    pub const fn bucket_us(self) -> i64 {
        match self {
            Tier::Minute => 60_000_000,
            Tier::FiveMinutes => 300_000_000,
            Tier::Hour => HOUR_US,
        }
    }

    /// The suffix of its tables' names (`1m`, `5m`, `1h`).
    pub const fn suffix(self) -> &'static str {
        match self {
            Tier::Minute => "1m",
            Tier::FiveMinutes => "5m",
            Tier::Hour => "1h",
        }
    }
}
