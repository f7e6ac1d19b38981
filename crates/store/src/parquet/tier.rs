//! Answering from a rollup tier: which queries a tier answers exactly, which tier (the
//! coarsest), and how its rows become one-way flows for the same sinks.
//!
//! A rollup row holds, for one bucket, exporter, domain, protocol and service port, the sums of
//! the flows that started in the bucket: `flows`/`packets`/`bytes` of their forward direction
//! and `rev_flows`/`rev_packets`/`rev_bytes` of their reverse. So a tier answers a query exactly
//! when the query needs only the protocol, the exporter and the time at the tier's bucket
//! width:
//!
//! - `-I`, `-s proto|exporter`, `-a` of those keys, or `--every` (a multiple of the bucket)
//!   with no key or one of those, ordered by flows, packets or bytes (rates need the flows'
//!   own times);
//! - a filter of `proto`, `exporter`, `and`, `or`, `not` only;
//! - a window whose ends fall on bucket boundaries;
//! - and the tier has caught up: its last bucket reaches the last flow the window holds.
//!
//! The 1-hour hosts table keeps every sender and receiver of each hour and the hour's totals
//! (side 2), so it answers `-s srcip|dstip`, `-a` of one of them, and `--every` (whole hours)
//! by one of them or by nothing (from the totals) exactly, with no filter, over whole hours; the
//! scan sums a side (the one it reads, or senders) and the totals, and the flows answer instead
//! if the two differ (a store written when that tier kept only the top hosts).
//!
//! The 1-hour ports table keeps every source and destination port (with its protocol) of each
//! hour, so it answers `-s srcport|dstport`, `-a` of one of them (with `proto` beside it or not)
//! and `--every` (whole hours) by one of them exactly, with no filter but one of protocols, over
//! whole hours; and only if it reaches back as far as the window's flows (a store written before
//! it existed has flows older than its first hour: the flows answer).
//!
//! The 1-hour places table keeps every source and destination place (AS number and name,
//! country, network name) of each hour, so it answers `-s` of `srcas`, `dstas`, `srccountry`,
//! `dstcountry`, `srcnet` or `dstnet`, `-a` of those of one side, and `--every` (whole hours) by
//! one of them exactly, with no filter, over whole hours; and only if it reaches back as far as
//! the window's flows, as the ports table.
//!
//! First and last times of a group are then its buckets' bounds.

use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};

use arrow_array::types::{TimestampMicrosecondType, UInt8Type, UInt16Type, UInt32Type, UInt64Type};
use arrow_array::{BooleanArray, RecordBatch};

use super::scan::{Read, addrs, at, countries, max_time, min_time, prim, texts};
use crate::parquet::partition::{Table, files, partitions};
use crate::parquet::rollup::TOTAL_SIDE;
use crate::query::filter::OneWay;
use crate::query::plan::{answerable, order_answerable, place_answerable};
use crate::query::sink::Sink;
use crate::query::{Filter, Key, Kind, Query, QueryError, Term, Value};
use crate::schema::{HOUR_US, Tier};

/// The hosts columns a query reads.
pub const HOST_COLUMNS: &[&str] = &["time", "side", "addr", "flows", "packets", "bytes"];

/// The places columns a query reads.
pub const PLACE_COLUMNS: &[&str] = &[
    "time", "side", "asn", "as_name", "country", "net", "flows", "packets", "bytes",
];

/// The ports columns every query reads; `protocol` is read when it needs it.
pub const PORT_COLUMNS: &[&str] = &["time", "side", "port", "flows", "packets", "bytes"];

/// The rows of a hosts or ports table a scan reads: those of `side` whose `column` holds one of
/// `values` (any value if `None`), and the buckets' totals if `totals`.
#[derive(Debug, Clone, Copy)]
pub struct Select<'a> {
    /// The side.
    pub side: u8,
    /// `addr` or `port`.
    pub column: &'static str,
    /// The values kept, or every one.
    pub values: Option<&'a [Value]>,
    /// Whether the rows of [`TOTAL_SIDE`] are kept too (what a hosts scan tallies).
    pub totals: bool,
}

/// The side and column of `table` (the hosts or ports one) whose rows answer `q`, if `q`
/// reads them by side and value.
fn side_column(table: Table, q: &Query) -> Option<(u8, &'static str)> {
    let (side, column) = match table {
        Table::Hosts(t) => (host_answerable(q, t.bucket_us())?, "addr"),
        Table::Ports => (port_answerable(q)?, "port"),
        _ => return None,
    };
    (side != TOTAL_SIDE).then_some((side, column))
}

/// The rows of `table` (the hosts or ports one) a scan of `q` reads, if `q` reads them by side
/// and value: its side's rows holding one of `values`; or, with `None`, every row of its side
/// and, for the hosts, the buckets' totals it checks them against. The other rows are then
/// skipped undecoded.
pub fn select<'a>(table: Table, q: &Query, values: Option<&'a [Value]>) -> Option<Select<'a>> {
    let (side, column) = side_column(table, q)?;
    Some(Select {
        side,
        column,
        values,
        totals: values.is_none() && matches!(table, Table::Hosts(_)),
    })
}

/// Which rows of a batch of `side` and `column` (an address or a port) `s` keeps (its values are
/// a few: searched one by one); every row if the columns are not as expected.
pub fn selected(b: &RecordBatch, s: &Select<'_>) -> BooleanArray {
    let n = b.num_rows();
    let Some(sides) = prim::<UInt8Type>(b, "side").ok().flatten() else {
        return BooleanArray::from(vec![true; n]);
    };
    let total = |i: usize| s.totals && sides[i] == TOTAL_SIDE;
    let keep: Vec<bool> = match (s.values, s.column) {
        (None, _) => (0..n).map(|i| sides[i] == s.side || total(i)).collect(),
        (Some(values), "addr") => match addrs(b, "addr").ok().flatten() {
            Some(a) => (0..n)
                .map(|i| sides[i] == s.side && values.contains(&Value::Addr(a[i])) || total(i))
                .collect(),
            None => vec![true; n],
        },
        (Some(values), column) => match prim::<UInt16Type>(b, column).ok().flatten() {
            Some(p) => (0..n)
                .map(|i| {
                    sides[i] == s.side && values.contains(&Value::Num(p[i].into())) || total(i)
                })
                .collect(),
            None => vec![true; n],
        },
    };
    BooleanArray::from(keep)
}

/// The table that answers a query instead of the flows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Pick {
    /// A rollup or hosts table.
    pub table: Table,
    /// Its tier.
    pub tier: Tier,
}

impl Pick {
    /// The columns read from it for a query that would read `flow_columns` of the flows.
    pub fn columns(self, flow_columns: &[&'static str]) -> Vec<&'static str> {
        match self.table {
            // The addresses only for an address key (the totals need none).
            Table::Hosts(_) => {
                let by_addr = flow_columns.contains(&"src_addr");
                return HOST_COLUMNS
                    .iter()
                    .copied()
                    .filter(|c| by_addr || *c != "addr")
                    .collect();
            }
            Table::Ports => {
                let mut c = PORT_COLUMNS.to_vec();
                c.extend(flow_columns.iter().filter(|k| **k == "protocol"));
                return c;
            }
            Table::Places => return PLACE_COLUMNS.to_vec(),
            _ => {}
        }
        let mut c = COLUMNS.to_vec();
        c.extend(
            ["exporter", "protocol"]
                .into_iter()
                .filter(|k| flow_columns.contains(k)),
        );
        c
    }
}

/// One-way flows counted by a hosts scan: on the side it reads, and in the buckets' totals.
#[derive(Debug, Default)]
pub struct Tally {
    side: AtomicU64,
    totals: AtomicU64,
}

impl Tally {
    /// Whether the side read summed to the totals: every host of the window was there.
    pub fn complete(&self) -> bool {
        self.side.load(Ordering::Relaxed) == self.totals.load(Ordering::Relaxed)
    }
}

/// The rollup columns every query reads; `exporter` and `protocol` are read when it needs them.
const COLUMNS: &[&str] = &[
    "time",
    "flows",
    "rev_flows",
    "packets",
    "bytes",
    "rev_packets",
    "rev_bytes",
];

/// The largest time in the last partition of `table` that starts before `before_us`.
fn last_time(
    dir: &Path,
    table: Table,
    col: &str,
    before_us: i64,
) -> Result<Option<i64>, QueryError> {
    for p in partitions(dir, table)?.iter().rev() {
        if p.start_us >= before_us {
            continue;
        }
        let mut last = None;
        for f in files(&p.path)? {
            last = last.max(max_time(&f, col)?);
        }
        if last.is_some() {
            return Ok(last);
        }
    }
    Ok(None)
}

/// The side of the hosts table holding `key`'s values: 0 senders, 1 receivers.
fn host_side(key: Key) -> Option<u8> {
    match key {
        Key::SrcAddr(None) => Some(0),
        Key::DstAddr(None) => Some(1),
        _ => None,
    }
}

/// The hosts side whose rows answer `q` exactly at `bucket_us`, if any.
fn host_answerable(q: &Query, bucket_us: i64) -> Option<u8> {
    let aligned = |t: i64| t == i64::MAX || t.rem_euclid(bucket_us) == 0;
    let side = match &q.kind {
        Kind::Top { key, order_by, .. } if order_answerable(*order_by) => host_side(*key),
        Kind::Aggregate { keys, order_by, .. } if order_answerable(*order_by) => match keys[..] {
            [k] => host_side(k),
            _ => None,
        },
        Kind::Series {
            every_us,
            key,
            order_by,
            ..
        } if every_us % bucket_us == 0 && order_answerable(*order_by) => match key {
            Some(k) => host_side(*k),
            None => Some(TOTAL_SIDE),
        },
        _ => None,
    };
    side.filter(|_| {
        q.filter.is_none()
            && q.window
                .is_none_or(|w| aligned(w.start_us) && aligned(w.end_us))
    })
}

/// The side of the ports table holding `key`'s values: 0 source ports, 1 destination ports.
fn port_side(key: Key) -> Option<u8> {
    match key {
        Key::SrcPort => Some(0),
        Key::DstPort => Some(1),
        _ => None,
    }
}

fn protocol_only(f: &Filter) -> bool {
    match f {
        Filter::And(v) | Filter::Or(v) => v.iter().all(protocol_only),
        Filter::Not(a) => protocol_only(a),
        Filter::Term(t) => matches!(t, Term::Protocol(_)),
    }
}

/// The ports side whose rows answer `q` exactly, if any.
fn port_answerable(q: &Query) -> Option<u8> {
    let hour = Tier::Hour.bucket_us();
    let aligned = |t: i64| t == i64::MAX || t.rem_euclid(hour) == 0;
    let side = match &q.kind {
        Kind::Top { key, order_by, .. } if order_answerable(*order_by) => port_side(*key),
        Kind::Aggregate { keys, order_by, .. } if order_answerable(*order_by) => {
            // One port key, and the protocol beside it or not.
            let mut side = None;
            for &k in keys {
                match (k, port_side(k)) {
                    (Key::Protocol, _) => {}
                    (_, Some(s)) if side.is_none_or(|x| x == s) => side = Some(s),
                    _ => return None,
                }
            }
            side
        }
        Kind::Series {
            every_us,
            key: Some(k),
            order_by,
            ..
        } if every_us % hour == 0 && order_answerable(*order_by) => port_side(*k),
        _ => None,
    };
    side.filter(|_| {
        q.filter.as_ref().is_none_or(protocol_only)
            && q.window
                .is_none_or(|w| aligned(w.start_us) && aligned(w.end_us))
    })
}

/// The smallest time in the first partition of `table` that ends after `after_us`.
fn first_time(
    dir: &Path,
    table: Table,
    col: &str,
    after_us: i64,
) -> Result<Option<i64>, QueryError> {
    for p in partitions(dir, table)? {
        if p.end_us <= after_us {
            continue;
        }
        let mut first: Option<i64> = None;
        for f in files(&p.path)? {
            if let Some(t) = min_time(&f, col)? {
                first = Some(first.map_or(t, |x| x.min(t)));
            }
        }
        if first.is_some() {
            return Ok(first);
        }
    }
    Ok(None)
}

/// Whether `table` (the ports or places one) reaches back to the hour of the window's first
/// flow.
fn reaches_back(dir: &Path, table: Table, q: &Query) -> Result<bool, QueryError> {
    let start = q.window.map_or(i64::MIN, |w| w.start_us);
    let Some(flow) = first_time(dir, Table::Flows, "time_start", start)? else {
        return Ok(true);
    };
    let hour = flow.max(start).div_euclid(HOUR_US) * HOUR_US;
    Ok(first_time(dir, table, "time", i64::MIN)?.is_some_and(|t| t <= hour))
}

/// The last flow's start in the window, or the window's end; `None` if the store has no flows.
fn flows_last(dir: &Path, end: i64) -> Result<Option<i64>, QueryError> {
    Ok(last_time(dir, Table::Flows, "time_start", end)?.map(|t| t.min(end - 1)))
}

/// The tables that answer `q` exactly, best first: the 1-hour hosts for an address key or the
/// totals, or the 1-hour ports for a port key; then the coarsest rollup tier.
pub fn pick(dir: &Path, q: &Query) -> Result<Vec<Pick>, QueryError> {
    let end = q.window.map_or(i64::MAX, |w| w.end_us);
    let hour = Tier::Hour;
    let mut out = Vec::new();
    for (table, yes) in [
        (Table::Ports, port_answerable(q).is_some()),
        (Table::Places, place_answerable(q).is_some()),
    ] {
        if !yes {
            continue;
        }
        let Some(target) = flows_last(dir, end)? else {
            return Ok(out);
        };
        if last_time(dir, table, "time", end)?.is_some_and(|t| t + hour.bucket_us() > target)
            && reaches_back(dir, table, q)?
        {
            out.push(Pick { table, tier: hour });
        }
    }
    if host_answerable(q, hour.bucket_us()).is_some() {
        let Some(target) = flows_last(dir, end)? else {
            return Ok(out);
        };
        if last_time(dir, Table::Hosts(hour), "time", end)?
            .is_some_and(|t| t + hour.bucket_us() > target)
        {
            out.push(Pick {
                table: Table::Hosts(hour),
                tier: hour,
            });
        }
    }
    out.extend(pick_rollup(dir, q)?.map(|tier| Pick {
        table: Table::Rollup(tier),
        tier,
    }));
    Ok(out)
}

/// The coarsest rollup tier that answers `q` exactly, if any.
fn pick_rollup(dir: &Path, q: &Query) -> Result<Option<Tier>, QueryError> {
    let end = q.window.map_or(i64::MAX, |w| w.end_us);
    let mut flows_last = None;
    for tier in Tier::ALL.into_iter().rev() {
        if !answerable(q, tier.bucket_us()) {
            continue;
        }
        if flows_last.is_none() {
            match self::flows_last(dir, end)? {
                Some(t) => flows_last = Some(t),
                None => return Ok(None),
            }
        }
        let Some(target) = flows_last else {
            return Ok(None);
        };
        let caught_up = last_time(dir, Table::Rollup(tier), "time", end)?
            .is_some_and(|t| t + tier.bucket_us() > target);
        if caught_up {
            return Ok(Some(tier));
        }
    }
    Ok(None)
}

/// Hands a rollup batch's rows to the sink, as their forward and reverse one-way flows.
pub fn feed<S: Sink>(b: &RecordBatch, read: Read<'_>, sink: &mut S) -> Result<(), String> {
    let q = read.query;
    let col = |name: &str| format!("rollup column {name} missing");
    let time = prim::<TimestampMicrosecondType>(b, "time")?.ok_or_else(|| col("time"))?;
    let exporter = addrs(b, "exporter")?;
    let proto = prim::<UInt8Type>(b, "protocol")?;
    let flows = prim::<UInt64Type>(b, "flows")?;
    let rflows = prim::<UInt64Type>(b, "rev_flows")?;
    let pkts = prim::<UInt64Type>(b, "packets")?;
    let bytes = prim::<UInt64Type>(b, "bytes")?;
    let rpkts = prim::<UInt64Type>(b, "rev_packets")?;
    let rbytes = prim::<UInt64Type>(b, "rev_bytes")?;
    for (i, &t) in time.iter().enumerate() {
        if q.window.is_some_and(|w| !w.contains(t)) {
            continue;
        }
        let mut f = OneWay {
            start_us: t,
            end_us: t + read.bucket_us,
            exporter: at(exporter, i),
            protocol: at(proto, i),
            flows: at(flows, i),
            packets: at(pkts, i),
            bytes: at(bytes, i),
            ..OneWay::default()
        };
        let pass = |f: &OneWay| q.filter.as_ref().is_none_or(|x| x.matches(f));
        if f.flows > 0 && pass(&f) {
            sink.add(&f);
        }
        f.flows = at(rflows, i);
        f.packets = at(rpkts, i);
        f.bytes = at(rbytes, i);
        f.reverse = true;
        if f.flows > 0 && pass(&f) {
            sink.add(&f);
        }
    }
    Ok(())
}

/// Hands a hosts batch's rows of the side `q` ranks to the sink, each as a one-way flow of
/// that address, and tallies that side and the buckets' totals into `read.tally`.
pub fn host_feed<S: Sink>(b: &RecordBatch, read: Read<'_>, sink: &mut S) -> Result<(), String> {
    let q = read.query;
    let col = |name: &str| format!("hosts column {name} missing");
    let side = host_answerable(q, read.bucket_us).ok_or("the hosts table cannot answer")?;
    let time = prim::<TimestampMicrosecondType>(b, "time")?.ok_or_else(|| col("time"))?;
    let sides = prim::<UInt8Type>(b, "side")?.ok_or_else(|| col("side"))?;
    let addr = addrs(b, "addr")?;
    if addr.is_none() && side != TOTAL_SIDE {
        return Err(col("addr"));
    }
    let flows = prim::<UInt64Type>(b, "flows")?.ok_or_else(|| col("flows"))?;
    let pkts = prim::<UInt64Type>(b, "packets")?;
    let bytes = prim::<UInt64Type>(b, "bytes")?;
    // The side summed against the totals: the one read, or senders when the totals are read.
    let checked = if side == TOTAL_SIDE { 0 } else { side };
    let (mut on_side, mut totals) = (0u64, 0u64);
    for (i, &t) in time.iter().enumerate() {
        if q.window.is_some_and(|w| !w.contains(t)) {
            continue;
        }
        let s = sides[i];
        if s == TOTAL_SIDE {
            totals += flows[i];
        } else if s == checked {
            on_side += flows[i];
        }
        if s != side {
            continue;
        }
        let mut f = OneWay {
            start_us: t,
            end_us: t + read.bucket_us,
            flows: flows[i],
            packets: at(pkts, i),
            bytes: at(bytes, i),
            ..OneWay::default()
        };
        match side {
            0 => f.src = at(addr, i),
            1 => f.dst = at(addr, i),
            _ => {}
        }
        sink.add(&f);
    }
    if let Some(tally) = read.tally {
        tally.side.fetch_add(on_side, Ordering::Relaxed);
        tally.totals.fetch_add(totals, Ordering::Relaxed);
    }
    Ok(())
}

/// Hands a ports batch's rows of the side `q` ranks to the sink, each as a one-way flow from
/// (side 0) or to (side 1) that port, of that protocol.
pub fn port_feed<S: Sink>(b: &RecordBatch, read: Read<'_>, sink: &mut S) -> Result<(), String> {
    let q = read.query;
    let col = |name: &str| format!("ports column {name} missing");
    let side = port_answerable(q).ok_or("the ports table cannot answer")?;
    let time = prim::<TimestampMicrosecondType>(b, "time")?.ok_or_else(|| col("time"))?;
    let sides = prim::<UInt8Type>(b, "side")?.ok_or_else(|| col("side"))?;
    let proto = prim::<UInt8Type>(b, "protocol")?;
    let port = prim::<UInt16Type>(b, "port")?.ok_or_else(|| col("port"))?;
    let flows = prim::<UInt64Type>(b, "flows")?.ok_or_else(|| col("flows"))?;
    let pkts = prim::<UInt64Type>(b, "packets")?;
    let bytes = prim::<UInt64Type>(b, "bytes")?;
    for (i, &t) in time.iter().enumerate() {
        if sides[i] != side || q.window.is_some_and(|w| !w.contains(t)) {
            continue;
        }
        let mut f = OneWay {
            start_us: t,
            end_us: t + read.bucket_us,
            protocol: at(proto, i),
            flows: flows[i],
            packets: at(pkts, i),
            bytes: at(bytes, i),
            ..OneWay::default()
        };
        match side {
            0 => f.sport = port[i],
            _ => f.dport = port[i],
        }
        if q.filter.as_ref().is_none_or(|x| x.matches(&f)) {
            sink.add(&f);
        }
    }
    Ok(())
}

/// Hands a places batch's rows of the side `q` ranks to the sink, each as a one-way flow from
/// (side 0) or to (side 1) that place.
pub fn place_feed<S: Sink>(b: &RecordBatch, read: Read<'_>, sink: &mut S) -> Result<(), String> {
    let q = read.query;
    let col = |name: &str| format!("places column {name} missing");
    let side = place_answerable(q).ok_or("the places table cannot answer")?;
    let time = prim::<TimestampMicrosecondType>(b, "time")?.ok_or_else(|| col("time"))?;
    let sides = prim::<UInt8Type>(b, "side")?.ok_or_else(|| col("side"))?;
    let asn = prim::<UInt32Type>(b, "asn")?;
    let as_name = texts(b, "as_name")?;
    let country = countries(b, "country")?;
    let net = texts(b, "net")?;
    let flows = prim::<UInt64Type>(b, "flows")?.ok_or_else(|| col("flows"))?;
    let pkts = prim::<UInt64Type>(b, "packets")?;
    let bytes = prim::<UInt64Type>(b, "bytes")?;
    for (i, &t) in time.iter().enumerate() {
        if sides[i] != side || q.window.is_some_and(|w| !w.contains(t)) {
            continue;
        }
        let mut f = OneWay {
            start_us: t,
            end_us: t + read.bucket_us,
            flows: flows[i],
            packets: at(pkts, i),
            bytes: at(bytes, i),
            ..OneWay::default()
        };
        let (a, n, c, w) = (
            at(asn, i),
            at(as_name.as_deref(), i),
            at(country.as_deref(), i),
            at(net.as_deref(), i),
        );
        if side == 0 {
            (f.src_as, f.src_as_name, f.src_country, f.src_net) = (a, n, c, w);
        } else {
            (f.dst_as, f.dst_as_name, f.dst_country, f.dst_net) = (a, n, c, w);
        }
        sink.add(&f);
    }
    Ok(())
}
