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
//! First and last times of a group are then its buckets' bounds.

use std::path::Path;

use arrow_array::RecordBatch;
use arrow_array::types::{TimestampMicrosecondType, UInt8Type, UInt64Type};

use super::filter::OneWay;
use super::scan::{Read, addrs, at, max_time, prim};
use super::sink::Sink;
use super::{Filter, Key, Kind, Metric, Query, QueryError, Term};
use crate::partition::{Table, Tier, files, partitions};

/// The rollup columns a query reads.
pub const COLUMNS: &[&str] = &[
    "time",
    "exporter",
    "protocol",
    "flows",
    "rev_flows",
    "packets",
    "bytes",
    "rev_packets",
    "rev_bytes",
];

fn filter_answerable(f: &Filter) -> bool {
    match f {
        Filter::And(a, b) | Filter::Or(a, b) => filter_answerable(a) && filter_answerable(b),
        Filter::Not(a) => filter_answerable(a),
        Filter::Term(t) => matches!(t, Term::Protocol(_) | Term::Exporter(_)),
    }
}

fn key_answerable(k: Key) -> bool {
    matches!(k, Key::Protocol | Key::Exporter)
}

fn order_answerable(m: Metric) -> bool {
    matches!(m, Metric::Flows | Metric::Packets | Metric::Bytes)
}

/// Whether a tier of `bucket_us` answers `q` exactly, its coverage aside.
fn answerable(q: &Query, bucket_us: i64) -> bool {
    let aligned = |t: i64| t == i64::MAX || t.rem_euclid(bucket_us) == 0;
    let kind = match &q.kind {
        Kind::List { .. } => false,
        Kind::Summary => true,
        Kind::Top { key, order_by, .. } => key_answerable(*key) && order_answerable(*order_by),
        Kind::Aggregate { keys, order_by, .. } => {
            keys.iter().all(|k| key_answerable(*k)) && order_answerable(*order_by)
        }
        Kind::Series {
            every_us,
            key,
            order_by,
            ..
        } => {
            every_us % bucket_us == 0
                && key.is_none_or(key_answerable)
                && order_answerable(*order_by)
        }
    };
    kind && q.filter.as_ref().is_none_or(filter_answerable)
        && q.window
            .is_none_or(|w| aligned(w.start_us) && aligned(w.end_us))
}

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

/// The coarsest tier that answers `q` exactly, if any.
pub fn pick(dir: &Path, q: &Query) -> Result<Option<Tier>, QueryError> {
    let end = q.window.map_or(i64::MAX, |w| w.end_us);
    let mut flows_last = None;
    for tier in Tier::ALL.into_iter().rev() {
        if !answerable(q, tier.bucket_us()) {
            continue;
        }
        if flows_last.is_none() {
            match last_time(dir, Table::Flows, "time_start", end)? {
                Some(t) => flows_last = Some(t.min(end - 1)),
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
