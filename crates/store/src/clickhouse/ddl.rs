//! The tables, chosen by the server's version: the flow table (a MergeTree ordered time first,
//! partitioned by day), its rollups (1 min, 5 min, 1 h SummingMergeTrees fed by materialized
//! views), interface names, exporter counters and sFlow interface counters; on a cluster each as a per-shard `_local` table
//! with a `Distributed` table of the plain name over them.

use super::Version;
use crate::schema::{
    ColumnType, FLOW_COLUMNS, FLOW_COLUMNS_BEFORE_ENRICHMENT, IF_COUNTERS_COLUMNS,
};

/// The flow table's hidden columns the rollups count flows by, and their expressions.
const FLOW_MARKS: [(&str, &str); 2] =
    [("rev_flow", "rev_packets > 0"), ("fwd_flow", "packets > 0")];

/// What the server understands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Dialect {
    /// Before 20.3 (Debian's 18.16): no TTL, no codecs, no `LowCardinality` by default, no
    /// `DateTime64`, no `IPv6` type: times are `UInt64` µs, addresses `FixedString(16)`.
    Legacy,
    /// 20.3 and later: `DateTime64(6, 'UTC')` times, `IPv6` addresses, codecs (DoubleDelta,
    /// T64, ZSTD), `LowCardinality` names, TTL on every table.
    Current,
}

impl Dialect {
    /// The dialect for a server version.
    pub fn for_version(v: Version) -> Dialect {
        if v >= (Version {
            major: 20,
            minor: 3,
        }) {
            Dialect::Current
        } else {
            Dialect::Legacy
        }
    }

    /// A `DateTime` (seconds, UTC) expression for the time column `col`.
    pub fn seconds(self, col: &str) -> String {
        match self {
            Dialect::Legacy => format!("toDateTime(intDiv({col}, 1000000), 'UTC')"),
            Dialect::Current => format!("toDateTime({col}, 'UTC')"),
        }
    }

    /// A time literal comparable with a time column, for `us` µs since 1970.
    pub fn time_literal(self, us: u64) -> String {
        match self {
            Dialect::Legacy => us.to_string(),
            Dialect::Current => format!("fromUnixTimestamp64Micro(toInt64({us}), 'UTC')"),
        }
    }

    /// An address literal comparable with an address column (16 bytes, network order).
    pub fn addr_literal(self, a: &[u8; 16]) -> String {
        let hex: String = a.iter().map(|b| format!("{b:02X}")).collect();
        match self {
            Dialect::Legacy => format!("toFixedString(unhex('{hex}'), 16)"),
            Dialect::Current => {
                format!("toIPv6(IPv6NumToString(toFixedString(unhex('{hex}'), 16)))")
            }
        }
    }

    /// The address column `col` with the bits past the first `bits` (a constant) cleared.
    pub fn masked(self, col: &str, bits: u8) -> String {
        let (full, rest) = (usize::from(bits.min(128) / 8), bits.min(128) % 8);
        match self {
            // Whole bytes kept, then the partial byte masked; toFixedString pads with zeros.
            Dialect::Legacy if rest == 0 => {
                format!("toFixedString(substring({col}, 1, {full}), 16)")
            }
            Dialect::Legacy => format!(
                "toFixedString(concat(substring({col}, 1, {full}), reinterpretAsString(toUInt8(\
                 bitAnd(reinterpretAsUInt8(substring({col}, {}, 1)), {})))), 16)",
                full + 1,
                0xffu8 << (8 - rest)
            ),
            Dialect::Current => format!("tupleElement(IPv6CIDRToRange({col}, {bits}), 1)"),
        }
    }

    /// The µs since 1970 (`UInt64`) of the time column `col`.
    pub fn micros(self, col: &str) -> String {
        match self {
            Dialect::Legacy => col.to_string(),
            Dialect::Current => format!("toUInt64(toUnixTimestamp64Micro({col}))"),
        }
    }

    fn column_type(self, t: ColumnType) -> &'static str {
        match (self, t) {
            (Dialect::Legacy, ColumnType::TimestampMicros) => "UInt64",
            (Dialect::Legacy, ColumnType::Addr16) => "FixedString(16)",
            (Dialect::Current, ColumnType::TimestampMicros) => {
                "DateTime64(6, 'UTC') CODEC(DoubleDelta, ZSTD(1))"
            }
            (Dialect::Current, ColumnType::Addr16) => "IPv6 CODEC(ZSTD(1))",
            (_, ColumnType::U8) => "UInt8",
            (Dialect::Legacy, ColumnType::U16) => "UInt16",
            (Dialect::Legacy, ColumnType::U32) => "UInt32",
            (Dialect::Legacy, ColumnType::U64) => "UInt64",
            (Dialect::Current, ColumnType::U16) => "UInt16 CODEC(T64, ZSTD(1))",
            (Dialect::Current, ColumnType::U32) => "UInt32 CODEC(T64, ZSTD(1))",
            (Dialect::Current, ColumnType::U64) => "UInt64 CODEC(T64, ZSTD(1))",
            (Dialect::Legacy, ColumnType::Utf8) => "String",
            (Dialect::Current, ColumnType::Utf8) => "LowCardinality(String)",
        }
    }
}

/// One server, or the shards of a cluster.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Layout {
    /// The tables themselves.
    Single,
    /// `NAME_local` tables on every shard, `Distributed` tables named `NAME` over them.
    Cluster(String),
}

/// The rollup tiers: table, the function that starts a bucket, how long it is kept at least
/// (days, where the server has TTL). Each sums the flows that started in a bucket per exporter,
/// domain and protocol, the same columns as the Parquet store's rollups: `flows` counts rows
/// whose forward direction has packets, `rev_flows` those whose reverse direction has.
pub const ROLLUPS: &[(&str, &str, u32)] = &[
    ("rollup_1m", "toStartOfMinute", 30),
    ("rollup_5m", "toStartOfFiveMinute", 90),
    ("rollup_1h", "toStartOfHour", 730),
];

/// The tables of one database on servers of one dialect.
#[derive(Debug, Clone)]
pub struct Schema {
    /// What the servers understand.
    pub dialect: Dialect,
    /// One server or a cluster.
    pub layout: Layout,
    /// The database.
    pub database: String,
    /// Days raw flows are kept (TTL, current servers only).
    pub retain_days: u32,
}

impl Schema {
    /// The name of the table `name` on one shard (`flows_local` in a cluster, else `flows`).
    pub fn local(&self, name: &str) -> String {
        match self.layout {
            Layout::Single => format!("{}.{name}", self.database),
            Layout::Cluster(_) => format!("{}.{name}_local", self.database),
        }
    }

    /// The name queries use for `name` (the `Distributed` table in a cluster).
    pub fn table(&self, name: &str) -> String {
        format!("{}.{name}", self.database)
    }

    /// Every statement that creates the database and the tables on one server (each shard
    /// runs them all). Each is idempotent (`IF NOT EXISTS`).
    pub fn statements(&self) -> Vec<String> {
        let d = self.dialect;
        let ttl = |col: String, days: u32| match d {
            Dialect::Legacy => String::new(),
            Dialect::Current => format!(" TTL {col} + INTERVAL {days} DAY"),
        };
        let addr = d.column_type(ColumnType::Addr16);
        let time = d.column_type(ColumnType::TimestampMicros);
        let mut cols: Vec<String> = FLOW_COLUMNS
            .iter()
            .map(|(n, t)| format!("{n} {}", d.column_type(*t)))
            .collect();
        // For the rollups' flows and rev_flows (a direction with no packets is not a flow): a
        // view's `countIf(rev_packets > 0)` beside `sum(rev_packets) AS rev_packets` reads the
        // alias on 18.16. Hidden from `SELECT *`.
        cols.extend(
            FLOW_MARKS
                .iter()
                .map(|(n, e)| format!("{n} UInt8 MATERIALIZED {e}")),
        );
        let start = d.seconds("time_start");
        let mut s = vec![format!("CREATE DATABASE IF NOT EXISTS {}", self.database)];
        s.push(format!(
            "CREATE TABLE IF NOT EXISTS {} ({}) ENGINE = MergeTree \
             PARTITION BY toYYYYMMDD({start}) \
             ORDER BY (toStartOfFiveMinute({start}), exporter, in_if, out_if, time_start){}",
            self.local("flows"),
            cols.join(", "),
            ttl(start.clone(), self.retain_days),
        ));
        for (name, bucket, days) in ROLLUPS {
            let partition = match *name {
                "rollup_1m" => format!("toYYYYMMDD({})", d.seconds("time")),
                _ => format!("toYYYYMM({})", d.seconds("time")),
            };
            let time = match d {
                Dialect::Legacy => format!("toUInt64({bucket}({start})) * 1000000"),
                Dialect::Current => format!("toDateTime64({bucket}({start}), 6, 'UTC')"),
            };
            let sums = [
                "flows",
                "rev_flows",
                "packets",
                "bytes",
                "rev_packets",
                "rev_bytes",
            ];
            s.push(format!(
                "CREATE TABLE IF NOT EXISTS {} (time {time_type}, exporter {addr}, domain UInt32, \
                 protocol UInt8, {}) ENGINE = SummingMergeTree \
                 PARTITION BY {partition} ORDER BY (time, exporter, domain, protocol){}",
                self.local(name),
                sums.map(|c| format!("{c} UInt64")).join(", "),
                ttl(d.seconds("time"), self.retain_days.max(*days)),
                time_type = d.column_type(ColumnType::TimestampMicros),
            ));
            s.push(format!(
                "CREATE MATERIALIZED VIEW IF NOT EXISTS {}.{name}_mv TO {} AS \
                 SELECT {time} AS time, exporter, domain, protocol, \
                 toUInt64(sum(fwd_flow)) AS flows, toUInt64(sum(rev_flow)) AS rev_flows, \
                 sum(packets) AS packets, sum(bytes) AS bytes, sum(rev_packets) AS rev_packets, \
                 sum(rev_bytes) AS rev_bytes FROM {} GROUP BY time, exporter, domain, protocol",
                self.database,
                self.local(name),
                self.local("flows"),
            ));
        }
        s.push(format!(
            "CREATE TABLE IF NOT EXISTS {} (time_received {time}, exporter {addr}, domain UInt32, \
             `index` UInt32, name {str}, description {str}, speed UInt64) \
             ENGINE = ReplacingMergeTree(time_received) ORDER BY (exporter, domain, `index`)",
            self.local("interfaces"),
            str = d.column_type(ColumnType::Utf8),
        ));
        s.push(format!(
            "CREATE TABLE IF NOT EXISTS {} (time {time}, exporter {addr}, domain UInt32, \
             records UInt64, sequence_lost UInt64, template_missing UInt64, bad_messages UInt64) \
             ENGINE = MergeTree PARTITION BY toYYYYMM({sec}) ORDER BY (time, exporter, domain){}",
            self.local("exporter_stats"),
            ttl(d.seconds("time"), self.retain_days.max(ROLLUPS[2].2)),
            sec = d.seconds("time"),
        ));
        // A flow table made before the enrichment columns gets them (servers from 20.3 have
        // `ADD COLUMN IF NOT EXISTS`; an older server's old table must be made anew).
        if d == Dialect::Current {
            for (n, t) in &FLOW_COLUMNS[FLOW_COLUMNS_BEFORE_ENRICHMENT..] {
                s.push(format!(
                    "ALTER TABLE {} ADD COLUMN IF NOT EXISTS {n} {}",
                    self.local("flows"),
                    d.column_type(*t)
                ));
            }
        }
        // Every place (AS, country, network) of each hour and side, over one-way flows: the
        // forward direction's sender is the source, the reverse's the destination. After the
        // enrichment columns, which its view reads.
        let text = d.column_type(ColumnType::Utf8);
        s.push(format!(
            "CREATE TABLE IF NOT EXISTS {} (time {time}, side UInt8, asn UInt32, as_name {text}, \
             country {text}, net {text}, flows UInt64, pkts UInt64, octets UInt64) \
             ENGINE = SummingMergeTree PARTITION BY toYYYYMM({sec}) \
             ORDER BY (time, side, asn, as_name, country, net){}",
            self.local("places_1h"),
            ttl(d.seconds("time"), self.retain_days.max(ROLLUPS[2].2)),
            sec = d.seconds("time"),
        ));
        let hour = match d {
            Dialect::Legacy => format!("toUInt64(toStartOfHour({start})) * 1000000"),
            Dialect::Current => format!("toDateTime64(toStartOfHour({start}), 6, 'UTC')"),
        };
        let place = |side: u8, end: &str, flow: &str, counters: &str| {
            format!(
                "(toUInt8({side}), {end}_as, toString({end}_as_name), toString({end}_country), \
                 toString({end}_net), toUInt64({flow}), {counters})"
            )
        };
        let places = [
            place(0, "src", "fwd_flow", "packets, bytes"),
            place(1, "dst", "fwd_flow", "packets, bytes"),
            place(0, "dst", "rev_flow", "rev_packets, rev_bytes"),
            place(1, "src", "rev_flow", "rev_packets, rev_bytes"),
        ];
        // One level, no subquery (18.16 does not see a subquery's columns in a view); the
        // sums are named apart from the flow columns the array reads (`packets AS packets`
        // inside it would be a cycle).
        let at = |i: u8| format!("tupleElement(p, {i})");
        s.push(format!(
            "CREATE MATERIALIZED VIEW IF NOT EXISTS {}.places_1h_mv TO {} AS \
             SELECT {hour} AS time, {} AS side, {} AS asn, {} AS as_name, {} AS country, \
             {} AS net, sum({}) AS flows, sum({}) AS pkts, sum({}) AS octets \
             FROM {} ARRAY JOIN [{}] AS p WHERE {} > 0 \
             GROUP BY time, side, asn, as_name, country, net",
            self.database,
            self.local("places_1h"),
            at(1),
            at(2),
            at(3),
            at(4),
            at(5),
            at(6),
            at(7),
            at(8),
            self.local("flows"),
            places.join(", "),
            at(6),
        ));
        let counters: Vec<String> = IF_COUNTERS_COLUMNS
            .iter()
            .map(|(n, t)| format!("{n} {}", d.column_type(*t)))
            .collect();
        s.push(format!(
            "CREATE TABLE IF NOT EXISTS {} ({}) ENGINE = MergeTree PARTITION BY toYYYYMM({sec}) \
             ORDER BY (exporter, domain, if_index, time_received){}",
            self.local("if_counters"),
            counters.join(", "),
            ttl(
                d.seconds("time_received"),
                self.retain_days.max(ROLLUPS[2].2)
            ),
            sec = d.seconds("time_received"),
        ));
        if let Layout::Cluster(cluster) = &self.layout {
            let distributed = |name: &str, columns: String| {
                format!(
                    "CREATE TABLE IF NOT EXISTS {} {columns} \
                     ENGINE = Distributed({cluster}, {}, {name}_local, rand())",
                    self.table(name),
                    self.database,
                )
            };
            // The flow columns without rev_flow and fwd_flow: a Distributed insert would send it along, and
            // a shard refuses a value for a MATERIALIZED column.
            s.push(distributed(
                "flows",
                format!("({})", cols[..FLOW_COLUMNS.len()].join(", ")),
            ));
            let mut names: Vec<&str> = ROLLUPS.iter().map(|(name, _, _)| *name).collect();
            names.extend(["places_1h", "interfaces", "exporter_stats", "if_counters"]);
            for name in names {
                s.push(distributed(name, format!("AS {}", self.local(name))));
            }
            if d == Dialect::Current {
                for (n, t) in &FLOW_COLUMNS[FLOW_COLUMNS_BEFORE_ENRICHMENT..] {
                    s.push(format!(
                        "ALTER TABLE {} ADD COLUMN IF NOT EXISTS {n} {}",
                        self.table("flows"),
                        d.column_type(*t)
                    ));
                }
            }
        }
        s
    }

    /// The statements that bring tables an older tapflow created up to [`Schema::statements`],
    /// given the columns its flow table and its interfaces table have (none if it has no such
    /// table yet): a flow table without `fwd_flow` gets it, and its rollups' views, which
    /// counted every row as a forward flow, are dropped for [`Schema::statements`] to create
    /// again (rows already rolled up keep their counts); an interfaces table without `speed`
    /// gets it.
    pub fn migrations(&self, flow_columns: &[String], interface_columns: &[String]) -> Vec<String> {
        let mut s = Vec::new();
        if !interface_columns.is_empty() && !interface_columns.iter().any(|c| c == "speed") {
            s.push(format!(
                "ALTER TABLE {} ADD COLUMN speed UInt64",
                self.local("interfaces")
            ));
            if let Layout::Cluster(_) = self.layout {
                s.push(format!(
                    "ALTER TABLE {} ADD COLUMN speed UInt64",
                    self.table("interfaces")
                ));
            }
        }
        if flow_columns.is_empty() {
            return s;
        }
        let marks = s.len();
        for (name, expr) in FLOW_MARKS {
            if !flow_columns.iter().any(|c| c == name) {
                s.push(format!(
                    "ALTER TABLE {} ADD COLUMN {name} UInt8 MATERIALIZED {expr}",
                    self.local("flows")
                ));
            }
        }
        if s.len() > marks {
            for (name, _, _) in ROLLUPS {
                s.push(format!("DROP TABLE IF EXISTS {}.{name}_mv", self.database));
            }
        }
        s
    }

    /// The name of table `name` (`flows`, `interfaces`) on one server, as `system.columns`
    /// has it: its database and table.
    pub fn local_name(&self, name: &str) -> (&str, String) {
        let table = match self.layout {
            Layout::Single => name.to_string(),
            Layout::Cluster(_) => format!("{name}_local"),
        };
        (&self.database, table)
    }

    /// The `INSERT` statement for the flow table.
    pub fn insert_flows(&self) -> String {
        let cols: Vec<&str> = FLOW_COLUMNS.iter().map(|(n, _)| *n).collect();
        format!(
            "INSERT INTO {} ({}) FORMAT RowBinary",
            self.local("flows"),
            cols.join(", ")
        )
    }

    /// The `INSERT` statement for interface names.
    pub fn insert_interfaces(&self) -> String {
        format!(
            "INSERT INTO {} (time_received, exporter, domain, `index`, name, description, speed) \
             FORMAT RowBinary",
            self.local("interfaces")
        )
    }

    /// The `INSERT` statement for exporter counters.
    pub fn insert_exporter_stats(&self) -> String {
        format!(
            "INSERT INTO {} (time, exporter, domain, records, sequence_lost, template_missing, \
             bad_messages) FORMAT RowBinary",
            self.local("exporter_stats")
        )
    }

    /// The `INSERT` statement for sFlow interface counters.
    pub fn insert_if_counters(&self) -> String {
        let cols: Vec<&str> = IF_COUNTERS_COLUMNS.iter().map(|(n, _)| *n).collect();
        format!(
            "INSERT INTO {} ({}) FORMAT RowBinary",
            self.local("if_counters"),
            cols.join(", ")
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn schema(dialect: Dialect, layout: Layout) -> Schema {
        Schema {
            dialect,
            layout,
            database: "db".into(),
            retain_days: 30,
        }
    }

    #[test]
    fn old_servers_get_no_ttl_codecs_or_new_types() {
        let all = schema(Dialect::Legacy, Layout::Single)
            .statements()
            .join("\n");
        for absent in [
            "TTL",
            "CODEC",
            "LowCardinality",
            "DateTime64",
            "IPv6",
            "Distributed",
        ] {
            assert!(!all.contains(absent), "{absent} in {all}");
        }
        assert!(all.contains("ORDER BY (toStartOfFiveMinute(toDateTime(intDiv(time_start"));
    }

    #[test]
    fn current_servers_get_ttl_codecs_and_low_cardinality() {
        let all = schema(Dialect::Current, Layout::Single)
            .statements()
            .join("\n");
        for present in [
            "TTL",
            "DoubleDelta",
            "T64",
            "ZSTD",
            "LowCardinality",
            "IPv6",
        ] {
            assert!(all.contains(present), "{present} missing");
        }
        assert_eq!(
            Dialect::for_version(Version {
                major: 18,
                minor: 16
            }),
            Dialect::Legacy
        );
        assert_eq!(
            Dialect::for_version(Version {
                major: 24,
                minor: 8
            }),
            Dialect::Current
        );
    }

    #[test]
    fn a_cluster_gets_local_tables_and_distributed_ones_over_them() {
        let s = schema(Dialect::Legacy, Layout::Cluster("c".into())).statements();
        let distributed: Vec<_> = s
            .iter()
            .filter(|s| s.contains("Distributed(c, db,"))
            .collect();
        assert_eq!(distributed.len(), 8);
        for table in ["rollup_1m", "places_1h"] {
            assert!(
                s.iter()
                    .any(|s| s.contains(&format!("TO db.{table}_local AS"))
                        && s.contains("FROM db.flows_local"))
            );
        }
    }

    #[test]
    fn an_older_flow_table_gets_fwd_flow_and_its_views_again() {
        let s = schema(Dialect::Legacy, Layout::Single);
        assert!(s.migrations(&[], &[]).is_empty());
        let old: Vec<String> = FLOW_COLUMNS
            .iter()
            .map(|(n, _)| n.to_string())
            .chain(["rev_flow".to_string()])
            .collect();
        let m = s.migrations(&old, &[]);
        assert!(
            m[0].contains("ADD COLUMN fwd_flow UInt8 MATERIALIZED packets > 0"),
            "{m:?}"
        );
        assert_eq!(m.len(), 1 + ROLLUPS.len(), "{m:?}");
        assert!(m[1].starts_with("DROP TABLE IF EXISTS") && m[1].ends_with("rollup_1m_mv"));
        let mut new = old.clone();
        new.push("fwd_flow".into());
        assert!(s.migrations(&new, &[]).is_empty());
        let interfaces = [
            "time_received",
            "exporter",
            "domain",
            "index",
            "name",
            "description",
        ]
        .map(String::from);
        let m = s.migrations(&new, &interfaces);
        assert_eq!(m, ["ALTER TABLE db.interfaces ADD COLUMN speed UInt64"]);
        let mut interfaces = interfaces.to_vec();
        interfaces.push("speed".into());
        assert!(s.migrations(&new, &interfaces).is_empty());
        let all = s.statements().join("\n");
        assert!(all.contains("sum(fwd_flow)) AS flows") && !all.contains("count()"));
    }
}
