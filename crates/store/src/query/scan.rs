//! The Parquet directory's own query engine: list the hour partitions the window touches, open
//! those files, skip row groups whose `time_start` statistics lie outside the window, decode only
//! the columns the query needs, and hand each one-way flow that passes the filter to the query's
//! [`Sink`], files spread over threads.

use std::fs::File;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};

use arrow_array::cast::AsArray;
use arrow_array::types::{
    ArrowPrimitiveType, TimestampMicrosecondType, UInt8Type, UInt16Type, UInt32Type, UInt64Type,
};
use arrow_array::{Array, RecordBatch};
use parquet::arrow::ProjectionMask;
use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;
use parquet::file::statistics::Statistics;

use super::filter::OneWay;
use super::result::{Answer, ScanStats};
use super::series::SeriesSink;
use super::sink::{ListSink, Sink, SummarySink};
use super::top::{AggregateSink, TopSink, key_columns};
use super::{Kind, Query, QueryEngine, QueryError, Window};
use crate::StoreError;

const HOUR_US: i64 = 3_600_000_000;

/// Queries a store directory (`DIR/flows/date=YYYY-MM-DD/hour=HH/*.parquet`).
#[derive(Debug, Clone)]
pub struct ParquetEngine {
    dir: PathBuf,
    threads: usize,
}

impl ParquetEngine {
    /// Reads the store at `dir` with `threads` scanning threads (at least 1).
    pub fn new(dir: impl Into<PathBuf>, threads: usize) -> ParquetEngine {
        ParquetEngine {
            dir: dir.into(),
            threads: threads.max(1),
        }
    }
}

impl QueryEngine for ParquetEngine {
    fn run(&self, q: &Query) -> Result<Answer, QueryError> {
        if !self.dir.is_dir() {
            return Err(StoreError::Other(format!(
                "store {}: not a directory",
                self.dir.display()
            ))
            .into());
        }
        let (files, listed) = flow_files(&self.dir.join("flows"), q.window)?;
        let cols = columns(q);
        let mut answer = match &q.kind {
            Kind::List { limit } => self.scan(&files, q, &cols, || ListSink::new(*limit))?,
            Kind::Top { key, order_by, n } => {
                self.scan(&files, q, &cols, || TopSink::new(*key, *order_by, *n))?
            }
            Kind::Aggregate { keys, order_by, n } => self.scan(&files, q, &cols, || {
                AggregateSink::new(keys.clone(), *order_by, *n)
            })?,
            Kind::Series {
                every_us,
                key,
                order_by,
                n,
            } => self.scan(&files, q, &cols, || {
                SeriesSink::new(*every_us, *key, *order_by, *n)
            })?,
            Kind::Summary => self.scan(&files, q, &cols, SummarySink::default)?,
        };
        answer.stats.files_listed = listed;
        Ok(answer)
    }
}

impl ParquetEngine {
    fn scan<S: Sink>(
        &self,
        files: &[PathBuf],
        q: &Query,
        cols: &[&'static str],
        make: impl Fn() -> S + Sync,
    ) -> Result<Answer, QueryError> {
        let next = AtomicUsize::new(0);
        let threads = self.threads.min(files.len()).max(1);
        let work = || -> Result<(S, ScanStats), QueryError> {
            let mut sink = make();
            let mut stats = ScanStats::default();
            loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                let Some(path) = files.get(i) else {
                    return Ok((sink, stats));
                };
                scan_file(path, q, cols, &mut sink, &mut stats)?;
            }
        };
        let parts: Vec<Result<(S, ScanStats), QueryError>> = std::thread::scope(|s| {
            let handles: Vec<_> = (0..threads).map(|_| s.spawn(work)).collect();
            handles
                .into_iter()
                .map(|h| {
                    h.join().unwrap_or_else(|_| {
                        Err(StoreError::Other("a scanning thread failed".into()).into())
                    })
                })
                .collect()
        });
        let mut sink = make();
        let mut stats = ScanStats::default();
        for part in parts {
            let (s, st) = part?;
            sink.merge(s);
            stats.files_opened += st.files_opened;
            stats.row_groups += st.row_groups;
            stats.row_groups_read += st.row_groups_read;
            stats.rows_read += st.rows_read;
        }
        Ok(Answer {
            result: sink.finish(),
            stats,
        })
    }
}

/// The flow files of the partitions whose hour overlaps `window` (all if `None`), sorted, and
/// how many flow files the store has in all.
pub fn flow_files(flows: &Path, window: Option<Window>) -> Result<(Vec<PathBuf>, u64), QueryError> {
    let mut out = Vec::new();
    let mut listed = 0u64;
    if !flows.is_dir() {
        return Ok((out, 0));
    }
    for date in read_dir(flows)? {
        let Some(day) = partition_value(&date, "date=").and_then(parse_date) else {
            continue;
        };
        for hour in read_dir(&date)? {
            let Some(h) = partition_value(&hour, "hour=").and_then(|h| h.parse::<i64>().ok())
            else {
                continue;
            };
            let start = (day * 24 + h) * HOUR_US;
            let wanted = window.is_none_or(|w| start < w.end_us && w.start_us < start + HOUR_US);
            for file in read_dir(&hour)? {
                if file.extension().is_some_and(|e| e == "parquet") {
                    listed += 1;
                    if wanted {
                        out.push(file);
                    }
                }
            }
        }
    }
    out.sort();
    Ok((out, listed))
}

fn read_dir(dir: &Path) -> Result<Vec<PathBuf>, QueryError> {
    let io = |source| StoreError::Io {
        what: "read directory",
        path: dir.to_path_buf(),
        source,
    };
    let mut v = Vec::new();
    for e in std::fs::read_dir(dir).map_err(io)? {
        v.push(e.map_err(io)?.path());
    }
    Ok(v)
}

fn partition_value<'a>(p: &'a Path, prefix: &str) -> Option<&'a str> {
    p.file_name()?.to_str()?.strip_prefix(prefix)
}

/// `YYYY-MM-DD` as days since 1970.
fn parse_date(s: &str) -> Option<i64> {
    let mut it = s.split('-').map(|p| p.parse::<i64>().ok());
    let (y, m, d) = (it.next()??, it.next()??, it.next()??);
    Some(super::time::days_from_civil(y, m, d))
}

/// The stored columns `q` needs.
fn columns(q: &Query) -> Vec<&'static str> {
    let mut c = vec![
        "time_start",
        "time_end",
        "packets",
        "bytes",
        "rev_packets",
        "rev_bytes",
    ];
    if let Some(f) = &q.filter {
        f.columns(&mut c);
    }
    match &q.kind {
        Kind::List { .. } => c.extend_from_slice(&[
            "ip_version",
            "src_addr",
            "dst_addr",
            "src_port",
            "dst_port",
            "protocol",
            "tcp_flags",
            "rev_tcp_flags",
            "exporter",
            "in_if",
            "out_if",
            "vlan",
        ]),
        Kind::Top { key, .. } => c.extend_from_slice(key_columns(*key)),
        Kind::Series { key, .. } => {
            if let Some(k) = key {
                c.extend_from_slice(key_columns(*k));
            }
        }
        Kind::Aggregate { keys, .. } => {
            for k in keys {
                c.extend_from_slice(key_columns(*k));
            }
        }
        Kind::Summary => c.push("protocol"),
    }
    c.sort_unstable();
    c.dedup();
    c
}

fn parquet_error(path: &Path, e: impl std::fmt::Display) -> QueryError {
    StoreError::Other(format!("{}: {e}", path.display())).into()
}

fn scan_file<S: Sink>(
    path: &Path,
    q: &Query,
    cols: &[&'static str],
    sink: &mut S,
    stats: &mut ScanStats,
) -> Result<(), QueryError> {
    let file = File::open(path).map_err(|source| StoreError::Io {
        what: "open",
        path: path.to_path_buf(),
        source,
    })?;
    let builder =
        ParquetRecordBatchReaderBuilder::try_new(file).map_err(|e| parquet_error(path, e))?;
    stats.files_opened += 1;
    let schema = builder.parquet_schema();
    let mut leaves = Vec::with_capacity(cols.len());
    for name in cols {
        let at = schema
            .columns()
            .iter()
            .position(|c| c.name() == *name)
            .ok_or_else(|| parquet_error(path, format!("no column {name}")))?;
        leaves.push(at);
    }
    let time_start = leaves[cols.iter().position(|c| *c == "time_start").unwrap_or(0)];
    let meta = builder.metadata().clone();
    let groups: Vec<usize> = (0..meta.num_row_groups())
        .filter(|&g| {
            let (Some(w), Some(Statistics::Int64(s))) =
                (q.window, meta.row_group(g).column(time_start).statistics())
            else {
                return true;
            };
            let (lo, hi) = (s.min_opt().copied(), s.max_opt().copied());
            lo.is_none_or(|lo| lo < w.end_us) && hi.is_none_or(|hi| hi >= w.start_us)
        })
        .collect();
    stats.row_groups += meta.num_row_groups() as u64;
    stats.row_groups_read += groups.len() as u64;
    if groups.is_empty() {
        return Ok(());
    }
    let mask = ProjectionMask::leaves(schema, leaves);
    let reader = builder
        .with_projection(mask)
        .with_row_groups(groups)
        .with_batch_size(65_536)
        .build()
        .map_err(|e| parquet_error(path, e))?;
    for batch in reader {
        let batch = batch.map_err(|e| parquet_error(path, e))?;
        stats.rows_read += batch.num_rows() as u64;
        feed(&batch, q, sink).map_err(|e| parquet_error(path, e))?;
    }
    Ok(())
}

/// A column's values if the batch has it, checked to be of type `T` and non-null.
fn prim<'a, T: ArrowPrimitiveType>(
    b: &'a RecordBatch,
    name: &str,
) -> Result<Option<&'a [T::Native]>, String> {
    let Some(a) = b.column_by_name(name) else {
        return Ok(None);
    };
    let p = a
        .as_primitive_opt::<T>()
        .ok_or_else(|| format!("column {name} is {}, not {}", a.data_type(), T::DATA_TYPE))?;
    Ok(Some(p.values()))
}

fn addrs<'a>(b: &'a RecordBatch, name: &str) -> Result<Option<&'a [[u8; 16]]>, String> {
    let Some(a) = b.column_by_name(name) else {
        return Ok(None);
    };
    let f = a
        .as_fixed_size_binary_opt()
        .filter(|f| f.value_length() == 16)
        .ok_or_else(|| format!("column {name} is {}, not 16 bytes", a.data_type()))?;
    let (chunks, _) = f.value_data().as_chunks::<16>();
    if chunks.len() < f.len() {
        return Err(format!("column {name} is short"));
    }
    Ok(Some(chunks))
}

#[inline]
fn at<T: Copy + Default>(col: Option<&[T]>, i: usize) -> T {
    col.map_or_else(T::default, |c| c[i])
}

/// Hands the batch's one-way flows that pass the window and filter to the sink.
fn feed<S: Sink>(b: &RecordBatch, q: &Query, sink: &mut S) -> Result<(), String> {
    let start = prim::<TimestampMicrosecondType>(b, "time_start")?;
    let end = prim::<TimestampMicrosecondType>(b, "time_end")?;
    let ipv = prim::<UInt8Type>(b, "ip_version")?;
    let src = addrs(b, "src_addr")?;
    let dst = addrs(b, "dst_addr")?;
    let sport = prim::<UInt16Type>(b, "src_port")?;
    let dport = prim::<UInt16Type>(b, "dst_port")?;
    let proto = prim::<UInt8Type>(b, "protocol")?;
    let flags = prim::<UInt16Type>(b, "tcp_flags")?;
    let rflags = prim::<UInt16Type>(b, "rev_tcp_flags")?;
    let pkts = prim::<UInt64Type>(b, "packets")?;
    let bytes = prim::<UInt64Type>(b, "bytes")?;
    let rpkts = prim::<UInt64Type>(b, "rev_packets")?;
    let rbytes = prim::<UInt64Type>(b, "rev_bytes")?;
    let exporter = addrs(b, "exporter")?;
    let in_if = prim::<UInt32Type>(b, "in_if")?;
    let out_if = prim::<UInt32Type>(b, "out_if")?;
    let vlan = prim::<UInt16Type>(b, "vlan")?;
    let pass = |f: &OneWay| q.filter.as_ref().is_none_or(|flt| flt.matches(f));
    for i in 0..b.num_rows() {
        let start_us = at(start, i);
        if q.window.is_some_and(|w| !w.contains(start_us)) {
            continue;
        }
        let mut f = OneWay {
            start_us,
            end_us: at(end, i),
            src: at(src, i),
            dst: at(dst, i),
            sport: at(sport, i),
            dport: at(dport, i),
            ip_version: at(ipv, i),
            protocol: at(proto, i),
            tcp_flags: at(flags, i),
            packets: at(pkts, i),
            bytes: at(bytes, i),
            exporter: at(exporter, i),
            in_if: at(in_if, i),
            out_if: at(out_if, i),
            vlan: at(vlan, i),
            reverse: false,
        };
        if pass(&f) {
            sink.add(&f);
        }
        let rp = at(rpkts, i);
        if rp > 0 {
            std::mem::swap(&mut f.src, &mut f.dst);
            std::mem::swap(&mut f.sport, &mut f.dport);
            f.packets = rp;
            f.bytes = at(rbytes, i);
            f.tcp_flags = at(rflags, i);
            f.reverse = true;
            if pass(&f) {
                sink.add(&f);
            }
        }
    }
    Ok(())
}
