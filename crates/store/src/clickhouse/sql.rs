//! A [`Query`] as SQL over the flow table, so `tapflow query --clickhouse URL` answers what the
//! Parquet scan answers: the one-way view (the table `UNION ALL` its reverse directions), the
//! filter as a `WHERE`, keys as `GROUP BY` (`arrayJoin` for either-address and either-port keys,
//! counting a flow under both), ranking in SQL with `LIMIT`, then the same tie order as the scan
//! (`top::rank`) on the rows returned. A query the rollups answer exactly (the same rule as the
//! Parquet tiers: protocol, exporter and time at the bucket's width) reads the coarsest rollup
//! table instead: its materialized views keep it level with the flows. A query the 1-hour places
//! table answers exactly ([`plan::place_answerable`]) reads it, if its first hour reaches back
//! to the window's first flow (a table older than it has flows before it).

use super::{Dialect, Layout, Schema, Server, Target};
use crate::StoreError;
use crate::query::OneWay;
use crate::query::plan;
use crate::query::result::{
    Answer, AsNames, Counters, QueryResult, Row, ScanStats, Summary, Value,
};
use crate::query::top::rank;
use crate::query::{
    Filter, IfSide, Key, Kind, Metric, Net, NetAttr, Query, QueryEngine, QueryError, Side, Term,
    Window,
};
use crate::schema::{ColumnType, IF_COUNTERS_COLUMNS, Tier};

/// Answers queries on a ClickHouse server (or a cluster's `Distributed` tables).
#[derive(Debug)]
pub struct ClickHouseEngine {
    server: Server,
    schema: Schema,
    rollups: bool,
}

impl ClickHouseEngine {
    /// Connects to the URL's first server and learns its dialect; the tables must exist (a
    /// [`ClickHouseStore`](super::ClickHouseStore) created them).
    pub fn open(url: &str) -> Result<ClickHouseEngine, StoreError> {
        let target = Target::parse(url)?;
        let server = target.servers().swap_remove(0);
        let dialect = Dialect::for_version(server.version()?);
        let layout = target
            .cluster
            .clone()
            .map_or(Layout::Single, Layout::Cluster);
        let schema = Schema {
            dialect,
            layout,
            database: target.database.clone(),
            retain_days: target.retain_days,
        };
        Ok(ClickHouseEngine {
            server,
            schema,
            rollups: true,
        })
    }

    /// Whether queries the rollups answer exactly read them (the default) or the flows.
    pub fn prefer_rollups(mut self, yes: bool) -> ClickHouseEngine {
        self.rollups = yes;
        self
    }

    /// The coarsest rollup table that answers `q` exactly, and its bucket in µs.
    fn rollup(&self, q: &Query) -> Option<(Tier, &'static str)> {
        if !self.rollups {
            return None;
        }
        [
            (Tier::Hour, "rollup_1h"),
            (Tier::FiveMinutes, "rollup_5m"),
            (Tier::Minute, "rollup_1m"),
        ]
        .into_iter()
        .find(|(t, _)| plan::answerable(q, t.bucket_us()))
    }

    /// The side of the places table that answers `q`, if it does and reaches back to the
    /// hour of the window's first flow (a server the table is missing from, or any other error
    /// asking, leaves the answer to the flows).
    fn places(&self, q: &Query) -> Option<u8> {
        if !self.rollups {
            return None;
        }
        let side = plan::place_answerable(q)?;
        let d = self.schema.dialect;
        let start = q.window.map_or(0, |w| w.start_us.max(0));
        let first = |sql: String| -> Option<Option<i64>> {
            match self.rows(&sql).ok()?.first().map(Vec::as_slice) {
                Some([n, _]) if n == "0" => Some(None),
                Some([_, t]) => Some(Some(t.parse().ok()?)),
                _ => None,
            }
        };
        let flow = first(format!(
            "SELECT count(), min({}) FROM {} WHERE time_start >= {}",
            d.micros("time_start"),
            self.schema.table("flows"),
            d.time_literal(start as u64),
        ))?;
        let Some(flow) = flow else {
            return Some(side);
        };
        let hour = flow.div_euclid(crate::schema::HOUR_US) * crate::schema::HOUR_US;
        let places = first(format!(
            "SELECT count(), min({}) FROM {}",
            d.micros("time"),
            self.schema.table("places_1h"),
        ))??;
        (places <= hour).then_some(side)
    }

    /// The one-way view of the places table's `side`: each row's sums as one-way flows from
    /// (side 0) or to (side 1) its place, timed by its hour's bounds.
    fn places_view(&self, q: &Query, side: u8) -> String {
        let d = self.schema.dialect;
        let window = match q.window {
            None => String::new(),
            Some(w) => format!(
                " AND time >= {} AND time < {}",
                d.time_literal(w.start_us.max(0) as u64),
                d.time_literal(w.end_us.max(0) as u64)
            ),
        };
        let t0 = d.micros("time");
        let (asn, name, country, net) = if side == 0 {
            ("sas", "sasn", "scc", "snet")
        } else {
            ("das", "dasn", "dcc", "dnet")
        };
        format!(
            "SELECT {t0} AS t0, {t0} + {} AS t1, flows AS n, pkts, octets, \
             asn AS {asn}, as_name AS {name}, \
             toUInt16(reinterpretAsUInt16(reverse(country))) AS {country}, net AS {net} \
             FROM {} WHERE side = {side} AND flows > 0{window}",
            crate::schema::HOUR_US,
            self.schema.table("places_1h"),
        )
    }

    fn rows(&self, sql: &str) -> Result<Vec<Vec<String>>, QueryError> {
        let text = self.server.query(&format!("{sql} FORMAT TabSeparated"))?;
        Ok(text
            .lines()
            .map(|l| l.split('\t').map(str::to_string).collect())
            .collect())
    }
}

impl QueryEngine for ClickHouseEngine {
    fn run(&self, q: &Query) -> Result<Answer, QueryError> {
        let places = self.places(q);
        let rollup = match places {
            Some(_) => Some((Tier::Hour, "places_1h")),
            None => self.rollup(q),
        };
        let view = match (places, rollup) {
            (Some(side), _) => self.places_view(q, side),
            (None, Some((tier, table))) => self.rollup_view(q, tier, table),
            (None, None) => self.view(q),
        };
        let filter = q
            .filter
            .as_ref()
            .map_or("1".to_string(), |f| filter_sql(f, self.schema.dialect));
        let from = format!("FROM ({view}) WHERE {filter}");
        let result = match &q.kind {
            Kind::List { limit } => {
                let limit = limit.map_or(String::new(), |l| format!(" LIMIT {l}"));
                let sql = format!(
                    "SELECT t0, t1, hex(src), hex(dst), sport, dport, proto, flags, pkts, octets, \
                     hex(exp), iif, oif, vl, rev {from} \
                     ORDER BY t0, t1, src, dst, sport, dport, rev{limit}"
                );
                let rows = self.rows(&sql)?;
                QueryResult::Flows(rows.iter().map(|r| flow_row(r)).collect::<Result<_, _>>()?)
            }
            Kind::Top { key, order_by, n } => {
                self.table(&from, std::slice::from_ref(key), *order_by, *n)?
            }
            Kind::Aggregate { keys, order_by, n } => self.table(&from, keys, *order_by, *n)?,
            Kind::Series {
                every_us,
                key,
                order_by,
                n,
            } => self.series(&from, *every_us, *key, *order_by, *n)?,
            Kind::Summary => {
                let sql = format!(
                    "SELECT multiIf(proto = 6, 1, proto = 17, 2, proto IN (1, 58), 3, 4) AS c, \
                     {COUNTERS} {from} GROUP BY c WITH TOTALS"
                );
                let mut s = Summary::default();
                for r in self.rows(&sql)?.iter().filter(|r| r.len() > 1) {
                    let c = counters(&r[1..])?;
                    match r[0].as_str() {
                        "1" => s.tcp = c,
                        "2" => s.udp = c,
                        "3" => s.icmp = c,
                        "4" => s.other = c,
                        // The totals row.
                        _ => s.total = c,
                    }
                }
                QueryResult::Summary(s)
            }
        };
        let mut answer = Answer {
            result,
            stats: ScanStats {
                tier_seconds: rollup.map_or(0, |(t, _)| (t.bucket_us() / 1_000_000) as u32),
                table: rollup.map_or("flows", |(_, table)| table),
                ..ScanStats::default()
            },
        };
        crate::query::name_interfaces(self, &mut answer)?;
        Ok(answer)
    }

    fn interface_names(&self) -> Result<Vec<crate::InterfaceName>, QueryError> {
        let sql = format!(
            "SELECT {}, hex(exporter), domain, `index`, hex(name), hex(description), speed FROM {}",
            self.schema.dialect.micros("time_received"),
            self.schema.table("interfaces"),
        );
        self.rows(&sql)?
            .iter()
            .map(|r| {
                let [t, exporter, domain, index, name, description, speed] = &r[..] else {
                    return Err(answer_error(r));
                };
                let num = |s: &str| s.parse::<u64>().map_err(|_| answer_error(r));
                Ok(crate::InterfaceName {
                    exporter: hex16(exporter)?,
                    domain: num(domain)? as u32,
                    index: num(index)? as u32,
                    name: unhex_text(name)?,
                    description: unhex_text(description)?,
                    speed: num(speed)?,
                    received_ns: num(t)?.saturating_mul(1000),
                })
            })
            .collect()
    }

    /// The counter samples received in the window, totalled as the Parquet store's are.
    fn interfaces(
        &self,
        window: Window,
    ) -> Result<Vec<crate::query::interfaces::InterfaceTotals>, QueryError> {
        let d = self.schema.dialect;
        let cols: Vec<String> = IF_COUNTERS_COLUMNS
            .iter()
            .map(|(n, t)| match t {
                ColumnType::TimestampMicros => d.micros(n),
                ColumnType::Addr16 => format!("hex({n})"),
                _ => (*n).to_string(),
            })
            .collect();
        // Bounds only where the window has them: the open ends of "all time" are past the
        // range of DateTime64.
        let mut bounds = vec!["1".to_string()];
        if window.start_us > 0 {
            bounds.push(format!(
                "time_received >= {}",
                d.time_literal(window.start_us as u64)
            ));
        }
        if window.end_us < i64::MAX {
            bounds.push(format!(
                "time_received < {}",
                d.time_literal(window.end_us.max(0) as u64)
            ));
        }
        let sql = format!(
            "SELECT {} FROM {} WHERE {}",
            cols.join(", "),
            self.schema.table("if_counters"),
            bounds.join(" AND "),
        );
        let samples = self
            .rows(&sql)?
            .iter()
            .map(|r| if_counters_row(r))
            .collect::<Result<Vec<_>, _>>()?;
        Ok(crate::query::interfaces::totals(samples))
    }

    fn exporter_stats(&self, window: Window) -> Result<Vec<crate::ExporterStats>, QueryError> {
        let d = self.schema.dialect;
        let sql = format!(
            "SELECT hex(exporter), domain, sum(records), sum(sequence_lost), \
             sum(template_missing), sum(bad_messages), max({}) FROM {} \
             WHERE time >= {} AND time < {} GROUP BY exporter, domain ORDER BY exporter, domain",
            d.micros("time"),
            self.schema.table("exporter_stats"),
            d.time_literal(window.start_us.max(0) as u64),
            d.time_literal(window.end_us.max(0) as u64),
        );
        self.rows(&sql)?
            .iter()
            .map(|r| {
                if r.len() != 7 {
                    return Err(answer_error(r));
                }
                Ok(crate::ExporterStats {
                    exporter: hex16(&r[0])?,
                    domain: num(&r[1])?,
                    records: num(&r[2])?,
                    sequence_lost: num(&r[3])?,
                    template_missing: num(&r[4])?,
                    bad_messages: num(&r[5])?,
                    time_ns: num::<u64>(&r[6])?.saturating_mul(1000),
                })
            })
            .collect()
    }

    fn alerts(&self, window: Window) -> Result<crate::alerts::Alerts, QueryError> {
        let text = super::alerts::log_text(&self.server, &self.schema.database)?;
        Ok(crate::alerts::within(crate::alerts::parse(&text), window))
    }

    fn newest(&self) -> Result<Option<i64>, QueryError> {
        let sql = format!(
            "SELECT count(), max({}) FROM {}",
            self.schema.dialect.micros("time_start"),
            self.schema.table("flows"),
        );
        let rows = self.rows(&sql)?;
        match rows.first().map(Vec::as_slice) {
            Some([n, _]) if num::<u64>(n)? == 0 => Ok(None),
            Some([_, t]) => Ok(Some(num::<i64>(t)?)),
            _ => Err(answer_error(rows.first().map_or(&[][..], Vec::as_slice))),
        }
    }
}

/// The counters of a group, in [`counters`]' order (`n`: the one-way flows a view's row
/// stands for, 1 for a flow, the count of a rollup's row).
const COUNTERS: &str = "sum(n) AS c_flows, sum(pkts) AS c_pkts, sum(octets) AS c_bytes, \
                        min(t0) AS c_first, max(t1) AS c_last";

impl ClickHouseEngine {
    /// The one-way view: the forward direction of every row in the window, and the reverse of
    /// every row with reverse packets, addresses and ports swapped.
    fn view(&self, q: &Query) -> String {
        let d = self.schema.dialect;
        let window = match q.window {
            None => String::new(),
            Some(w) => format!(
                " AND time_start >= {} AND time_start < {}",
                d.time_literal(w.start_us.max(0) as u64),
                d.time_literal(w.end_us.max(0) as u64)
            ),
        };
        let (t0, t1) = (d.micros("time_start"), d.micros("time_end"));
        // Only the columns the query reads: a server may not prune a UNION's unused columns.
        let needed = needed(q);
        let (mut fwd, mut rev) = (Vec::new(), Vec::new());
        for (name, forward, reverse) in [
            ("t0", t0.as_str(), t0.as_str()),
            ("t1", &t1, &t1),
            ("ver", "ip_version", "ip_version"),
            ("src", "src_addr", "dst_addr"),
            ("dst", "dst_addr", "src_addr"),
            ("sport", "src_port", "dst_port"),
            ("dport", "dst_port", "src_port"),
            ("proto", "protocol", "protocol"),
            ("flags", "tcp_flags", "rev_tcp_flags"),
            ("pkts", "packets", "rev_packets"),
            ("octets", "bytes", "rev_bytes"),
            ("exp", "exporter", "exporter"),
            ("iif", "in_if", "in_if"),
            ("oif", "out_if", "out_if"),
            ("vl", "vlan", "vlan"),
            ("sas", "src_as", "dst_as"),
            ("das", "dst_as", "src_as"),
            // Countries as their number (`country_code`): the two letters' bytes.
            ("scc", SRC_COUNTRY, DST_COUNTRY),
            ("dcc", DST_COUNTRY, SRC_COUNTRY),
            ("sasn", "src_as_name", "dst_as_name"),
            ("dasn", "dst_as_name", "src_as_name"),
            ("snet", "src_net", "dst_net"),
            ("dnet", "dst_net", "src_net"),
            ("srole", "src_net_role", "dst_net_role"),
            ("drole", "dst_net_role", "src_net_role"),
            ("ssite", "src_net_site", "dst_net_site"),
            ("dsite", "dst_net_site", "src_net_site"),
            ("stenant", "src_net_tenant", "dst_net_tenant"),
            ("dtenant", "dst_net_tenant", "src_net_tenant"),
            // Full columns, not constants: a Distributed table's remote parts send them as
            // such, and 18.16 refuses to merge them with a local constant (code 171).
            ("rev", "materialize(toUInt8(0))", "materialize(toUInt8(1))"),
            ("n", "materialize(toUInt64(1))", "materialize(toUInt64(1))"),
        ] {
            if needed.contains(&name) {
                fwd.push(format!("{forward} AS {name}"));
                rev.push(reverse.to_string());
            }
        }
        let table = self.schema.table("flows");
        format!(
            "SELECT {} FROM {table} WHERE packets > 0{window} UNION ALL \
             SELECT {} FROM {table} WHERE rev_packets > 0{window}",
            fwd.join(", "),
            rev.join(", ")
        )
    }

    /// The one-way view of a rollup table: each row's forward and reverse sums, timed by their
    /// bucket's bounds. It has only the columns a rollup-answerable query reads.
    fn rollup_view(&self, q: &Query, tier: Tier, table: &str) -> String {
        let d = self.schema.dialect;
        let window = match q.window {
            None => String::new(),
            Some(w) => format!(
                " AND time >= {} AND time < {}",
                d.time_literal(w.start_us.max(0) as u64),
                d.time_literal(w.end_us.max(0) as u64)
            ),
        };
        let t0 = d.micros("time");
        let common = format!(
            "{t0} AS t0, {t0} + {} AS t1, protocol AS proto, exporter AS exp",
            tier.bucket_us()
        );
        let table = self.schema.table(table);
        format!(
            "SELECT {common}, flows AS n, packets AS pkts, bytes AS octets FROM {table} \
             WHERE flows > 0{window} UNION ALL \
             SELECT {common}, rev_flows AS n, rev_packets AS pkts, rev_bytes AS octets \
             FROM {table} WHERE rev_flows > 0{window}"
        )
    }

    /// The SQL of one key's value, and what kind of value it is.
    fn key(&self, k: Key) -> (String, ValueKind) {
        let d = self.schema.dialect;
        let addr = |col: &str, p: Option<crate::query::Prefixes>| match p {
            None => col.to_string(),
            Some(p) => format!(
                "if(ver = 6, {}, {})",
                d.masked(col, p.v6),
                d.masked(col, 96 + p.v4.min(32))
            ),
        };
        let num = |c: &str| (c.to_string(), ValueKind::Num);
        match k {
            Key::SrcAddr(p) => (addr("src", p), ValueKind::Addr),
            Key::DstAddr(p) => (addr("dst", p), ValueKind::Addr),
            Key::Addr(p) => (
                format!("arrayJoin([{}, {}])", addr("src", p), addr("dst", p)),
                ValueKind::Addr,
            ),
            Key::SrcPort => num("sport"),
            Key::DstPort => num("dport"),
            Key::Port => num("arrayJoin([sport, dport])"),
            Key::Protocol => num("proto"),
            Key::Exporter => ("exp".into(), ValueKind::Addr),
            Key::InIf => num("iif"),
            Key::OutIf => num("oif"),
            Key::Vlan => num("vl"),
            Key::SrcAs => num("sas"),
            Key::DstAs => num("das"),
            Key::SrcCountry => num("scc"),
            Key::DstCountry => num("dcc"),
            Key::SrcNet => ("snet".into(), ValueKind::Text),
            Key::DstNet => ("dnet".into(), ValueKind::Text),
        }
    }

    /// `SELECT` items for `keys` (each shown as hex or a number, its value named `k0`, `k1`, …
    /// for `GROUP BY` and `ORDER BY`), those names, and the items that follow the counters:
    /// one AS name (hex) per AS key.
    fn keys(&self, keys: &[Key]) -> (String, String, String) {
        let mut select = Vec::new();
        let mut names = Vec::new();
        let mut labels = String::new();
        for (i, k) in keys.iter().enumerate() {
            let (expr, kind) = self.key(*k);
            let show = if kind == ValueKind::Num {
                "toUInt32"
            } else {
                "hex"
            };
            select.push(format!("{show}({expr} AS k{i}) AS o{i}"));
            names.push(format!("k{i}"));
            match k {
                Key::SrcAs => labels.push_str(&format!(", hex(any(sasn)) AS l{i}")),
                Key::DstAs => labels.push_str(&format!(", hex(any(dasn)) AS l{i}")),
                _ => {}
            }
        }
        (select.join(", "), names.join(", "), labels)
    }

    /// Top-N and aggregation: one row per key tuple, the `n` largest (all if 0).
    fn table(
        &self,
        from: &str,
        keys: &[Key],
        order_by: Metric,
        n: usize,
    ) -> Result<QueryResult, QueryError> {
        let (select, names, labels) = self.keys(keys);
        let kinds: Vec<ValueKind> = keys.iter().map(|k| self.key(*k).1).collect();
        let width = keys.len() + 5 + keys.iter().filter(|k| k.is_as()).count();
        let limit = if n > 0 {
            format!(" LIMIT {n}")
        } else {
            String::new()
        };
        let either = keys.iter().any(|k| k.is_either());
        let totals = if either { "" } else { " WITH TOTALS" };
        let sql = format!(
            "SELECT {select}, {COUNTERS}{labels} {from} GROUP BY {names}{totals} \
             ORDER BY {} DESC, {names}{limit}",
            metric(order_by)
        );
        let got = self.rows(&sql)?;
        let mut groups = Vec::new();
        let mut total = Counters::EMPTY;
        let mut in_totals = false;
        let mut as_names = AsNames::new();
        for r in &got {
            if r.len() == 1 && r[0].is_empty() {
                in_totals = true;
                continue;
            }
            if r.len() != width {
                return Err(answer_error(r));
            }
            let c = counters(&r[keys.len()..])?;
            if in_totals {
                total = c;
                continue;
            }
            let values = values(&r[..keys.len()], &kinds)?;
            labelled(keys, &values, &r[keys.len() + 5..], &mut as_names)?;
            groups.push((values, c));
        }
        if either {
            let r = self.rows(&format!("SELECT {COUNTERS} {from}"))?;
            total = counters(r.first().map_or(&[][..], |r| &r[..]))?;
        }
        let rows: Vec<Row> = rank(groups, order_by, n)
            .into_iter()
            .map(|(values, counters)| Row {
                time_us: None,
                values,
                counters,
            })
            .collect();
        Ok(QueryResult::Table {
            keys: keys.to_vec(),
            as_names: shown_names(keys, &rows, as_names),
            if_names: Default::default(),
            rows,
            total,
            order_by,
        })
    }

    /// A time series in buckets of `every_us`, split by `key`, its `n` largest values shown.
    fn series(
        &self,
        from: &str,
        every_us: i64,
        key: Option<Key>,
        order_by: Metric,
        n: usize,
    ) -> Result<QueryResult, QueryError> {
        let every = every_us.max(1);
        let keys: Vec<Key> = key.into_iter().collect();
        let (select, names, labels) = self.keys(&keys);
        let kinds: Vec<ValueKind> = keys.iter().map(|k| self.key(*k).1).collect();
        let width = keys.len() + 6 + keys.iter().filter(|k| k.is_as()).count();
        let bucket = format!("t0 - t0 % {every} AS bucket");
        let (select, group) = if keys.is_empty() {
            (bucket, "bucket".to_string())
        } else {
            (format!("{bucket}, {select}"), format!("bucket, {names}"))
        };
        let shown = if keys.is_empty() || n == 0 {
            String::new()
        } else {
            let (key, _) = self.key(keys[0]);
            format!(
                " HAVING k0 IN (SELECT k0 FROM (SELECT {key} AS k0, {COUNTERS} {from} \
                 GROUP BY k0 ORDER BY {} DESC, k0 LIMIT {n}))",
                metric(order_by)
            )
        };
        let sql = format!("SELECT {select}, {COUNTERS}{labels} {from} GROUP BY {group}{shown}");
        let mut buckets = Vec::new();
        let mut as_names = AsNames::new();
        for r in self.rows(&sql)? {
            if r.len() != width {
                return Err(answer_error(&r));
            }
            let t: i64 = num(&r[0])?;
            let values = values(&r[1..=keys.len()], &kinds)?;
            labelled(&keys, &values, &r[keys.len() + 6..], &mut as_names)?;
            buckets.push((t, values, counters(&r[keys.len() + 1..])?));
        }
        let r = self.rows(&format!("SELECT {COUNTERS} {from}"))?;
        let total = counters(r.first().map_or(&[][..], |r| &r[..]))?;
        // The shown keys' order: their totals over the window, ranked as the scan ranks them.
        let mut per_key: std::collections::HashMap<Vec<Value>, Counters> = Default::default();
        for (_, v, c) in &buckets {
            per_key.entry(v.clone()).or_insert(Counters::EMPTY).merge(c);
        }
        let place: std::collections::HashMap<Vec<Value>, usize> =
            rank(per_key.into_iter().collect(), order_by, 0)
                .into_iter()
                .enumerate()
                .map(|(i, (v, _))| (v, i))
                .collect();
        buckets.sort_by(|a, b| {
            a.0.cmp(&b.0).then_with(|| {
                b.2.metric(order_by)
                    .total_cmp(&a.2.metric(order_by))
                    .then(place[&a.1].cmp(&place[&b.1]))
            })
        });
        let rows: Vec<Row> = buckets
            .into_iter()
            .map(|(t, values, counters)| Row {
                time_us: Some(t),
                values,
                counters,
            })
            .collect();
        Ok(QueryResult::Table {
            as_names: shown_names(&keys, &rows, as_names),
            if_names: Default::default(),
            keys,
            rows,
            total,
            order_by,
        })
    }
}

/// The one-way view's columns a query reads.
fn needed(q: &Query) -> Vec<&'static str> {
    let mut v = vec!["t0", "t1", "pkts", "octets", "n"];
    if let Some(f) = &q.filter {
        filter_columns(f, &mut v);
    }
    let keys: &[Key] = match &q.kind {
        Kind::List { .. } => {
            v.extend([
                "ver", "src", "dst", "sport", "dport", "proto", "flags", "exp", "iif", "oif", "vl",
                "rev",
            ]);
            &[]
        }
        Kind::Top { key, .. } => std::slice::from_ref(key),
        Kind::Aggregate { keys, .. } => keys,
        Kind::Series { key, .. } => key.as_slice(),
        Kind::Summary => {
            v.push("proto");
            &[]
        }
    };
    for k in keys {
        if let Key::SrcAddr(Some(_)) | Key::DstAddr(Some(_)) | Key::Addr(Some(_)) = k {
            v.push("ver");
        }
        v.extend_from_slice(match k {
            Key::SrcAddr(_) => &["src"][..],
            Key::DstAddr(_) => &["dst"],
            Key::Addr(_) => &["src", "dst"],
            Key::SrcPort | Key::DstPort | Key::Port => &["sport", "dport"],
            Key::Protocol => &["proto"],
            Key::Exporter => &["exp"],
            Key::InIf => &["iif"],
            Key::OutIf => &["oif"],
            Key::Vlan => &["vl"],
            Key::SrcAs | Key::DstAs => &["sas", "das"],
            Key::SrcCountry | Key::DstCountry => &["scc", "dcc"],
            Key::SrcNet | Key::DstNet => &["snet", "dnet"],
        });
        if k.is_as() {
            v.extend(["sasn", "dasn"]);
        }
    }
    v
}

/// The filter as a SQL condition over the one-way view's columns. A chain of `and`s or `or`s
/// is one flat `AND`/`OR` list, so the SQL nests no deeper than the filter's `not`s and
/// parentheses ([`MAX_DEPTH`](crate::query::filter::MAX_DEPTH)).
pub fn filter_sql(f: &Filter, d: Dialect) -> String {
    let list = |v: &[Filter], op: &str| {
        let parts: Vec<String> = v.iter().map(|a| filter_sql(a, d)).collect();
        format!("({})", parts.join(op))
    };
    match f {
        Filter::And(v) => list(v, " AND "),
        Filter::Or(v) => list(v, " OR "),
        Filter::Not(a) => format!("NOT ({})", filter_sql(a, d)),
        Filter::Term(t) => term_sql(t, d),
    }
}

/// A country column as its number ([`crate::query::country_code`]): first letter × 256 +
/// second, 0 when empty.
const SRC_COUNTRY: &str = "toUInt16(reinterpretAsUInt16(reverse(src_country)))";
/// The destination's.
const DST_COUNTRY: &str = "toUInt16(reinterpretAsUInt16(reverse(dst_country)))";

fn term_sql(t: &Term, d: Dialect) -> String {
    let either = |a: String, b: String| format!("({a} OR {b})");
    match *t {
        Term::Addr(Side::Src, n) => within("src", n, d),
        Term::Addr(Side::Dst, n) => within("dst", n, d),
        Term::Addr(Side::Any, n) => either(within("src", n, d), within("dst", n, d)),
        Term::Port(side, op, p) => {
            let c = |col| format!("{col} {} {p}", op.symbol());
            match side {
                Side::Src => c("sport"),
                Side::Dst => c("dport"),
                Side::Any => either(c("sport"), c("dport")),
            }
        }
        Term::Protocol(p) => format!("proto = {p}"),
        Term::IpVersion(v) => format!("ver = {v}"),
        Term::Exporter(n) => within("exp", n, d),
        Term::Interface(IfSide::In, i) => format!("iif = {i}"),
        Term::Interface(IfSide::Out, i) => format!("oif = {i}"),
        Term::Interface(IfSide::Any, i) => either(format!("iif = {i}"), format!("oif = {i}")),
        Term::Vlan(v) => format!("vl = {v}"),
        Term::As(side, n) => match side {
            Side::Src => format!("sas = {n}"),
            Side::Dst => format!("das = {n}"),
            Side::Any => either(format!("sas = {n}"), format!("das = {n}")),
        },
        Term::Country(side, c) => match side {
            Side::Src => format!("scc = {c}"),
            Side::Dst => format!("dcc = {c}"),
            Side::Any => either(format!("scc = {c}"), format!("dcc = {c}")),
        },
        Term::NetName(side, name) => {
            // The name as hex: no quoting to get wrong whatever it holds.
            let c = |col| format!("{col} = unhex('{}')", hex_text(name.as_bytes()));
            match side {
                Side::Src => c("snet"),
                Side::Dst => c("dnet"),
                Side::Any => either(c("snet"), c("dnet")),
            }
        }
        Term::NetAttr(side, a, value) => {
            let [s, t] = net_attr_columns(a);
            let c = |col| format!("{col} = unhex('{}')", hex_text(value.as_bytes()));
            match side {
                Side::Src => c(s),
                Side::Dst => c(t),
                Side::Any => either(c(s), c(t)),
            }
        }
        Term::Packets(op, n) => format!("pkts {} {n}", op.symbol()),
        Term::Bytes(op, n) => format!("octets {} {n}", op.symbol()),
        Term::TcpFlags(m) => format!("bitAnd(flags, {m}) = {m}"),
    }
}

/// The one-way view's columns of a network attribute: the sender's and the receiver's.
const fn net_attr_columns(a: NetAttr) -> &'static [&'static str; 2] {
    match a {
        NetAttr::Role => &["srole", "drole"],
        NetAttr::Site => &["ssite", "dsite"],
        NetAttr::Tenant => &["stenant", "dtenant"],
    }
}

/// `col` lies in `net`: between its first and last address, as 16-byte strings compare.
fn within(col: &str, n: Net, d: Dialect) -> String {
    let mut last = n.addr;
    for (i, b) in last.iter_mut().enumerate() {
        let kept = u32::from(n.len).saturating_sub(i as u32 * 8).min(8);
        *b |= (0xffu16 >> kept) as u8;
    }
    format!(
        "({col} >= {} AND {col} <= {})",
        d.addr_literal(&n.addr),
        d.addr_literal(&last)
    )
}

fn filter_columns(f: &Filter, v: &mut Vec<&'static str>) {
    match f {
        Filter::And(all) | Filter::Or(all) => all.iter().for_each(|a| filter_columns(a, v)),
        Filter::Not(a) => filter_columns(a, v),
        Filter::Term(t) => v.extend_from_slice(match t {
            Term::Addr(..) => &["src", "dst"][..],
            Term::Port(..) => &["sport", "dport"],
            Term::Protocol(_) => &["proto"],
            Term::IpVersion(_) => &["ver"],
            Term::Exporter(_) => &["exp"],
            Term::Interface(..) => &["iif", "oif"],
            Term::Vlan(_) => &["vl"],
            Term::As(..) => &["sas", "das"],
            Term::Country(..) => &["scc", "dcc"],
            Term::NetName(..) => &["snet", "dnet"],
            Term::NetAttr(_, a, _) => &net_attr_columns(*a)[..],
            Term::Packets(..) | Term::Bytes(..) => &[],
            Term::TcpFlags(_) => &["flags"],
        }),
    }
}

/// The SQL of a metric over [`COUNTERS`]' names, computed as [`Counters::metric`] computes it.
fn metric(m: Metric) -> &'static str {
    match m {
        Metric::Flows => "c_flows",
        Metric::Packets => "c_pkts",
        Metric::Bytes => "c_bytes",
        Metric::Bps => {
            "if(c_last <= c_first, 0., toFloat64(c_bytes) * 8. * 1000000. / toFloat64(c_last - c_first))"
        }
        Metric::Pps => {
            "if(c_last <= c_first, 0., toFloat64(c_pkts) * 1000000. / toFloat64(c_last - c_first))"
        }
    }
}

fn answer_error(r: &[String]) -> QueryError {
    StoreError::Other(format!(
        "ClickHouse: unexpected answer row {:?}",
        r.join("\t")
    ))
    .into()
}

fn num<T: std::str::FromStr>(s: &str) -> Result<T, QueryError> {
    s.parse()
        .map_err(|_| StoreError::Other(format!("ClickHouse: {s:?} is not a number")).into())
}

fn hex16(s: &str) -> Result<[u8; 16], QueryError> {
    let bad = || {
        QueryError::from(StoreError::Other(format!(
            "ClickHouse: {s:?} is not an address"
        )))
    };
    if s.len() != 32 || !s.is_ascii() {
        return Err(bad());
    }
    let mut a = [0u8; 16];
    for (i, b) in a.iter_mut().enumerate() {
        *b = u8::from_str_radix(&s[2 * i..2 * i + 2], 16).map_err(|_| bad())?;
    }
    Ok(a)
}

/// One row of `if_counters` in [`IF_COUNTERS_COLUMNS`]' order.
fn if_counters_row(r: &[String]) -> Result<crate::InterfaceCounters, QueryError> {
    let [
        time,
        exporter,
        domain,
        source_id,
        if_index,
        if_type,
        if_speed,
        if_direction,
        if_status,
        in_octets,
        in_ucast_pkts,
        in_multicast_pkts,
        in_broadcast_pkts,
        in_discards,
        in_errors,
        in_unknown_protos,
        out_octets,
        out_ucast_pkts,
        out_multicast_pkts,
        out_broadcast_pkts,
        out_discards,
        out_errors,
        promiscuous_mode,
    ] = r
    else {
        return Err(answer_error(r));
    };
    Ok(crate::InterfaceCounters {
        exporter: hex16(exporter)?,
        domain: num(domain)?,
        received_ns: num::<u64>(time)?.saturating_mul(1000),
        counters: tapflow_wire::sflow::IfCounters {
            source_id: num(source_id)?,
            sequence: 0,
            if_index: num(if_index)?,
            if_type: num(if_type)?,
            if_speed: num(if_speed)?,
            if_direction: num(if_direction)?,
            if_status: num(if_status)?,
            in_octets: num(in_octets)?,
            in_ucast_pkts: num(in_ucast_pkts)?,
            in_multicast_pkts: num(in_multicast_pkts)?,
            in_broadcast_pkts: num(in_broadcast_pkts)?,
            in_discards: num(in_discards)?,
            in_errors: num(in_errors)?,
            in_unknown_protos: num(in_unknown_protos)?,
            out_octets: num(out_octets)?,
            out_ucast_pkts: num(out_ucast_pkts)?,
            out_multicast_pkts: num(out_multicast_pkts)?,
            out_broadcast_pkts: num(out_broadcast_pkts)?,
            out_discards: num(out_discards)?,
            out_errors: num(out_errors)?,
            promiscuous_mode: num(promiscuous_mode)?,
        },
    })
}

/// What kind of value a key's SQL gives.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum ValueKind {
    /// An address, answered as 32 hex digits.
    Addr,
    /// A number.
    Num,
    /// Text, answered as hex.
    Text,
}

/// A key value of `kind` as the server answered it.
fn value(s: &str, kind: ValueKind) -> Result<Value, QueryError> {
    match kind {
        ValueKind::Addr => hex16(s).map(Value::Addr),
        ValueKind::Num => num(s).map(Value::Num),
        ValueKind::Text => unhex_text(s).map(|t| Value::Text(crate::names::intern(&t))),
    }
}

/// The key values of one answer row.
fn values(r: &[String], kinds: &[ValueKind]) -> Result<Vec<Value>, QueryError> {
    r.iter().zip(kinds).map(|(v, k)| value(v, *k)).collect()
}

/// Notes the AS names (hex, one per AS key, in `labels`) beside the row's AS numbers.
fn labelled(
    keys: &[Key],
    values: &[Value],
    labels: &[String],
    names: &mut AsNames,
) -> Result<(), QueryError> {
    let mut labels = labels.iter();
    for (k, v) in keys.iter().zip(values) {
        if !k.is_as() {
            continue;
        }
        let name = unhex_text(labels.next().map_or("", String::as_str))?;
        if let (Value::Num(n), false) = (v, name.is_empty()) {
            names
                .entry(*n)
                .or_insert_with(|| crate::names::intern(&name));
        }
    }
    Ok(())
}

/// Of `names`, those of the AS numbers in the rows kept.
fn shown_names(keys: &[Key], rows: &[Row], names: AsNames) -> AsNames {
    let names: hashbrown::HashMap<u32, &'static str> = names.into_iter().collect();
    crate::query::top::as_names_of(keys, rows, &names)
}

/// Bytes as hex digits, as ClickHouse's `unhex` takes them.
fn hex_text(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02X}")).collect()
}

/// Text from ClickHouse's `hex` of it.
fn unhex_text(s: &str) -> Result<String, QueryError> {
    let bad = || {
        QueryError::from(StoreError::Other(format!(
            "ClickHouse: {s:?} is not hex text"
        )))
    };
    if !s.len().is_multiple_of(2) || !s.is_ascii() {
        return Err(bad());
    }
    let bytes = (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&s[i..i + 2], 16).map_err(|_| bad()))
        .collect::<Result<Vec<u8>, _>>()?;
    String::from_utf8(bytes).map_err(|_| bad())
}

/// Counters from `flows, packets, bytes, first, last` (empty when no flow).
fn counters(r: &[String]) -> Result<Counters, QueryError> {
    if r.len() < 5 {
        return Err(answer_error(r));
    }
    let flows: u64 = num(&r[0])?;
    if flows == 0 {
        return Ok(Counters::EMPTY);
    }
    Ok(Counters {
        flows,
        packets: num(&r[1])?,
        bytes: num(&r[2])?,
        first_us: num(&r[3])?,
        last_us: num(&r[4])?,
    })
}

fn flow_row(r: &[String]) -> Result<OneWay, QueryError> {
    if r.len() != 15 {
        return Err(answer_error(r));
    }
    let (src, dst) = (hex16(&r[2])?, hex16(&r[3])?);
    Ok(OneWay {
        start_us: num(&r[0])?,
        end_us: num(&r[1])?,
        src,
        dst,
        sport: num(&r[4])?,
        dport: num(&r[5])?,
        protocol: num(&r[6])?,
        tcp_flags: num(&r[7])?,
        packets: num(&r[8])?,
        bytes: num(&r[9])?,
        exporter: hex16(&r[10])?,
        in_if: num(&r[11])?,
        out_if: num(&r[12])?,
        vlan: num(&r[13])?,
        reverse: r[14] == "1",
        ip_version: if std::net::Ipv6Addr::from(src).to_ipv4_mapped().is_some() {
            4
        } else {
            6
        },
        flows: 1,
        ..OneWay::default()
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::in_child::survives;
    use crate::query::filter::{MAX_DEPTH, parse};

    /// How deep the SQL's parentheses nest.
    fn parens(sql: &str) -> usize {
        let mut depth = 0usize;
        let mut deepest = 0;
        for c in sql.chars() {
            match c {
                '(' => depth += 1,
                ')' => depth -= 1,
                _ => continue,
            }
            deepest = deepest.max(depth);
        }
        deepest
    }

    #[test]
    fn the_deepest_filter_gives_sql_no_deeper_than_it() {
        let name = module_path!().split_once("::").map_or("", |m| m.1);
        let name = format!("{name}::the_deepest_filter_gives_sql_no_deeper_than_it");
        survives(&name, 512 * 1024, || {
            // Each level opens an OR and an AND inside it, the term two more.
            let levels = MAX_DEPTH / 2;
            let text = format!(
                "{}host 10.0.0.1 port 80{}",
                "not ( udp or tcp and ".repeat(levels),
                ")".repeat(levels)
            );
            let f = parse(&text).unwrap();
            for d in [Dialect::Legacy, Dialect::Current] {
                let sql = filter_sql(&f, d);
                assert!(parens(&sql) <= 2 * MAX_DEPTH + 3, "{}", parens(&sql));
            }
        });
    }

    #[test]
    fn a_flat_chain_is_flat_sql() {
        let text = format!("{}tcp", "udp or icmp and vlan 3 or ".repeat(600));
        let sql = filter_sql(&parse(&text).unwrap(), Dialect::Legacy);
        assert_eq!(parens(&sql), 2, "{}", &sql[..200]);
        assert_eq!(sql.matches(" OR ").count(), 1200);
    }

    #[test]
    fn answers_parse_back() {
        assert_eq!(
            value("00000000000000000000FFFF0A000001", ValueKind::Addr).unwrap(),
            Value::Addr([0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 255, 255, 10, 0, 0, 1])
        );
        assert_eq!(value("443", ValueKind::Num).unwrap(), Value::Num(443));
        assert!(value("xyz", ValueKind::Num).is_err());
        assert!(value(&"é".repeat(16), ValueKind::Addr).is_err());
        let name = "o'ffice\t\"";
        let hex = hex_text(name.as_bytes());
        assert_eq!(value(&hex, ValueKind::Text).unwrap(), Value::Text(name));
        assert_eq!(value("", ValueKind::Text).unwrap(), Value::Text(""));
        assert!(value("6", ValueKind::Text).is_err());
        let r: Vec<String> = ["0", "0", "0", "0", "0"].map(String::from).to_vec();
        assert_eq!(counters(&r).unwrap(), Counters::EMPTY);
    }
}
