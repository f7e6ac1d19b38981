//! The Parquet directory's own query engine: list the hour partitions the window touches, open
//! those files, skip row groups whose `time_start` statistics lie outside the window, decode only
//! the columns the query needs, and hand each one-way flow that passes the filter to the query's
//! [`Sink`], files spread over threads.

use std::fs::File;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Mutex, PoisonError};

use arrow_array::cast::AsArray;
use arrow_array::types::ArrowPrimitiveType;
use arrow_array::{Array, BooleanArray, RecordBatch};
use parquet::arrow::ProjectionMask;
use parquet::arrow::arrow_reader::{
    ArrowPredicateFn, ArrowReaderMetadata, ArrowReaderOptions, ParquetRecordBatchReaderBuilder,
    RowFilter,
};
use parquet::file::statistics::Statistics;
use parquet::schema::types::SchemaDescriptor;

use super::tier::{self, Pick, Select, Tally};
use super::vector::{self, ColumnSink, Columns, Dir};
use crate::StoreError;
use crate::parquet::partition::{files, partitions};
use crate::query::result::{Answer, QueryResult, ScanStats, Value};
use crate::query::series::SeriesSink;
use crate::query::sink::{ListSink, SummarySink};
use crate::query::top::{AggregateSink, TopSink, key_columns, label_columns};
use crate::query::{Filter, Key, Kind, Query, QueryEngine, QueryError, Side, Term, Window};
use crate::schema::{FLOW_COLUMNS, FLOW_COLUMNS_BEFORE_ENRICHMENT};

/// Queries a store directory (`DIR/flows/date=YYYY-MM-DD/hour=HH/*.parquet` and the rollup
/// tiers beside it).
#[derive(Debug, Clone)]
pub struct ParquetEngine {
    dir: PathBuf,
    threads: usize,
    rollups: bool,
}

impl ParquetEngine {
    /// Reads the store at `dir` with `threads` scanning threads (at least 1), from the coarsest
    /// rollup tier that answers a query exactly, else from the flows.
    pub fn new(dir: impl Into<PathBuf>, threads: usize) -> ParquetEngine {
        ParquetEngine {
            dir: dir.into(),
            threads: threads.max(1),
            rollups: true,
        }
    }

    /// Whether rollup tiers may answer (`false`: always the flows).
    pub fn prefer_rollups(mut self, yes: bool) -> ParquetEngine {
        self.rollups = yes;
        self
    }
}

/// What one file's reader needs besides the batch.
#[derive(Debug, Clone, Copy)]
pub struct Read<'a> {
    /// The query.
    pub query: &'a Query,
    /// The width of a rollup row's bucket (0 for flows).
    pub bucket_us: i64,
    /// What a hosts scan counts to check it saw every host.
    pub tally: Option<&'a Tally>,
    /// The only rows of a hosts or ports table decoded past their side and value.
    pub select: Option<Select<'a>>,
}

/// Turns one decoded batch into one-way flows for the sink.
type Feed<S> = fn(&RecordBatch, Read<'_>, &mut S) -> Result<(), String>;

impl QueryEngine for ParquetEngine {
    fn run(&self, q: &Query) -> Result<Answer, QueryError> {
        if !self.dir.is_dir() {
            return Err(StoreError::Other(format!(
                "store {}: not a directory",
                self.dir.display()
            ))
            .into());
        }
        let mut answer = None;
        if self.rollups {
            for p in tier::pick(&self.dir, q)? {
                let tally = Tally::default();
                let a = self.answer(q, Some(p), &tally)?;
                if tally.complete() {
                    answer = Some(a);
                    break;
                }
            }
        }
        let mut answer = match answer {
            Some(a) => a,
            None => self.answer(q, None, &Tally::default())?,
        };
        crate::query::name_interfaces(self, &mut answer)?;
        Ok(answer)
    }

    fn interface_names(&self) -> Result<Vec<crate::InterfaceName>, QueryError> {
        let table = crate::parquet::partition::Table::Interfaces;
        let mut rows = Vec::new();
        for path in crate::parquet::partition::files_between(&self.dir, table, i64::MIN, i64::MAX)?
        {
            match crate::parquet::reader::read_file(&path, table.columns()) {
                Ok(b) => rows.extend(crate::parquet::batch::to_interfaces(&b)),
                // Moved into quarantine: left out.
                Err(StoreError::Damaged { .. }) => {}
                Err(e) => return Err(e.into()),
            }
        }
        Ok(rows)
    }

    fn alerts(&self, window: Window) -> Result<crate::alerts::Alerts, QueryError> {
        Ok(crate::alerts::read(&self.dir, window)?)
    }

    fn exporter_stats(&self, window: Window) -> Result<Vec<crate::ExporterStats>, QueryError> {
        let table = crate::parquet::partition::Table::ExporterStats;
        let mut sums = std::collections::BTreeMap::new();
        for path in crate::parquet::partition::files_between(
            &self.dir,
            table,
            window.start_us,
            window.end_us,
        )? {
            let batch = match crate::parquet::reader::read_file(&path, table.columns()) {
                Ok(b) => b,
                // Moved into quarantine: left out.
                Err(StoreError::Damaged { .. }) => continue,
                Err(e) => return Err(e.into()),
            };
            let rows = crate::parquet::batch::to_exporter_stats(&batch);
            for row in rows.iter().filter(|r| {
                let t = i64::try_from(r.time_ns / 1000).unwrap_or(i64::MAX);
                (window.start_us..window.end_us).contains(&t)
            }) {
                sum_exporter_stats(&mut sums, row);
            }
        }
        Ok(sums.into_values().collect())
    }

    fn interfaces(
        &self,
        window: Window,
    ) -> Result<Vec<crate::query::interfaces::InterfaceTotals>, QueryError> {
        let table = crate::parquet::partition::Table::IfCounters;
        let mut samples = Vec::new();
        for path in crate::parquet::partition::files_between(
            &self.dir,
            table,
            window.start_us,
            window.end_us,
        )? {
            let batch = match crate::parquet::reader::read_file(&path, table.columns()) {
                Ok(b) => b,
                // Moved into quarantine: left out.
                Err(StoreError::Damaged { .. }) => continue,
                Err(e) => return Err(e.into()),
            };
            samples.extend(
                crate::parquet::batch::to_if_counters(&batch)
                    .into_iter()
                    .filter(|r| {
                        window.contains(i64::try_from(r.received_ns / 1000).unwrap_or(i64::MAX))
                    }),
            );
        }
        Ok(crate::query::interfaces::totals(samples))
    }

    fn newest(&self) -> Result<Option<i64>, QueryError> {
        // The newest partition holding a file; the largest start in its row-group statistics.
        let table = crate::parquet::partition::Table::Flows;
        for p in crate::parquet::partition::partitions(&self.dir, table)?
            .iter()
            .rev()
        {
            let mut newest = None;
            for path in crate::parquet::partition::files(&p.path)? {
                newest = newest.max(max_time(&path, "time_start")?);
            }
            if newest.is_some() {
                return Ok(newest);
            }
        }
        Ok(None)
    }
}

impl ParquetEngine {
    /// Answers `q` from the table `pick` names, or from the flows.
    fn answer(&self, q: &Query, pick: Option<Pick>, tally: &Tally) -> Result<Answer, QueryError> {
        let table = pick.map_or(crate::parquet::partition::Table::Flows, |p| p.table);
        let (files, listed) = table_files(&self.dir, table, q.window)?;
        let t = Table {
            files: &files,
            cols: match pick {
                Some(p) => p.columns(&columns(q)),
                None => columns(q),
            },
            read: Read {
                query: q,
                bucket_us: pick.map_or(0, |p| p.tier.bucket_us()),
                tally: Some(tally),
                select: pick.and_then(|p| tier::select(p.table, q, None)),
            },
        };
        let mut answer = match &q.kind {
            Kind::List { limit } => self.scan(&t, feed, || ListSink::new(*limit))?,
            Kind::Top { key, order_by, n } => {
                self.scan(&t, pick_feed(pick), || TopSink::new(*key, *order_by, *n))?
            }
            Kind::Aggregate { keys, order_by, n } => self.scan(&t, pick_feed(pick), || {
                AggregateSink::new(keys.clone(), *order_by, *n)
            })?,
            Kind::Series {
                every_us,
                key,
                order_by,
                n,
            } => {
                // From the hosts or ports table (every address or port of every hour), the top
                // `n` first, then the buckets of those alone rather than of every value: only
                // their rows decoded past the side and value columns, the totals from the first.
                // From the flows too, for a key of many values: the buckets of every value
                // would be a table of values × buckets.
                let two_passes = match (pick, key) {
                    (Some(p), Some(_)) => tier::select(p.table, q, Some(&[])).is_some(),
                    (None, Some(k)) => !matches!(
                        k,
                        Key::Protocol | Key::Vlan | Key::SrcCountry | Key::DstCountry
                    ),
                    (_, None) => false,
                };
                let first = match key {
                    Some(k) if *n > 0 && two_passes => {
                        let top =
                            self.scan(&t, pick_feed(pick), || TopSink::new(*k, *order_by, *n))?;
                        match top.result {
                            QueryResult::Table { rows, total, .. } => Some((
                                rows.into_iter()
                                    .filter_map(|r| r.values.first().copied())
                                    .collect::<Vec<_>>(),
                                total,
                            )),
                            _ => None,
                        }
                    }
                    _ => None,
                };
                match first {
                    Some((only, total)) => {
                        let second = Table {
                            files: t.files,
                            cols: t.cols.clone(),
                            read: Read {
                                select: pick.and_then(|p| tier::select(p.table, q, Some(&only))),
                                tally: None,
                                ..t.read
                            },
                        };
                        let mut a = self.scan(&second, pick_feed(pick), || {
                            SeriesSink::new(*every_us, *key, *order_by, *n).only(Some(only.clone()))
                        })?;
                        if let QueryResult::Table { total: t, .. } = &mut a.result {
                            *t = total;
                        }
                        a
                    }
                    None => self.scan(&t, pick_feed(pick), || {
                        SeriesSink::new(*every_us, *key, *order_by, *n)
                    })?,
                }
            }
            Kind::Summary => self.scan(&t, pick_feed(pick), SummarySink::default)?,
        };
        answer.stats.files_listed = listed;
        answer.stats.tier_seconds = pick.map_or(0, |p| (p.tier.bucket_us() / 1_000_000) as u32);
        answer.stats.table = pick.map_or("flows", |p| p.table.dir_name());
        Ok(answer)
    }
}

/// Adds `row` to the sums of its exporter and domain.
fn sum_exporter_stats(
    sums: &mut std::collections::BTreeMap<([u8; 16], u32), crate::ExporterStats>,
    row: &crate::ExporterStats,
) {
    let s = sums
        .entry((row.exporter, row.domain))
        .or_insert(crate::ExporterStats {
            exporter: row.exporter,
            domain: row.domain,
            time_ns: 0,
            records: 0,
            sequence_lost: 0,
            template_missing: 0,
            bad_messages: 0,
        });
    s.time_ns = s.time_ns.max(row.time_ns);
    s.records += row.records;
    s.sequence_lost += row.sequence_lost;
    s.template_missing += row.template_missing;
    s.bad_messages += row.bad_messages;
}

/// The files to read, their columns, and what their reader needs.
struct Table<'a> {
    files: &'a [PathBuf],
    cols: Vec<&'static str>,
    read: Read<'a>,
}

fn pick_feed<S: ColumnSink>(pick: Option<Pick>) -> Feed<S> {
    match pick.map(|p| p.table) {
        Some(crate::parquet::partition::Table::Hosts(_)) => tier::host_feed::<S>,
        Some(crate::parquet::partition::Table::Ports) => tier::port_feed::<S>,
        Some(crate::parquet::partition::Table::Places) => tier::place_feed::<S>,
        Some(_) => tier::feed::<S>,
        None => feed::<S>,
    }
}

impl ParquetEngine {
    /// Scans `t`'s files into one sink per thread, merged. A sink takes every file its thread
    /// reads, so a file found damaged halfway (and moved into quarantine) has added part of
    /// itself: the scan then starts again without it.
    fn scan<S: ColumnSink>(
        &self,
        t: &Table<'_>,
        feed: Feed<S>,
        make: impl Fn() -> S + Sync,
    ) -> Result<Answer, QueryError> {
        let mut damaged: Vec<PathBuf> = Vec::new();
        loop {
            let files: Vec<&Path> = t
                .files
                .iter()
                .map(PathBuf::as_path)
                .filter(|f| !damaged.iter().any(|d| d == f))
                .collect();
            let found = Mutex::new(Vec::new());
            let mut answer = self.scan_round(&files, t, feed, &make, &found)?;
            let found = found.into_inner().unwrap_or_else(PoisonError::into_inner);
            if found.is_empty() {
                answer.stats.files_quarantined = damaged.len() as u64;
                return Ok(answer);
            }
            damaged.extend(found);
        }
    }

    /// One pass of [`ParquetEngine::scan`] over `files`; the threads stop at the first file
    /// found damaged, its path in `found`.
    fn scan_round<S: ColumnSink>(
        &self,
        files: &[&Path],
        t: &Table<'_>,
        feed: Feed<S>,
        make: &(impl Fn() -> S + Sync),
        found: &Mutex<Vec<PathBuf>>,
    ) -> Result<Answer, QueryError> {
        let next = AtomicUsize::new(0);
        let stop = AtomicBool::new(false);
        let threads = self.threads.min(files.len()).max(1);
        let work = || -> Result<(S, ScanStats), QueryError> {
            let mut sink = make();
            let mut stats = ScanStats::default();
            while !stop.load(Ordering::Relaxed) {
                let i = next.fetch_add(1, Ordering::Relaxed);
                let Some(path) = files.get(i) else {
                    break;
                };
                match scan_file(path, &t.cols, t.read, feed, &mut sink, &mut stats) {
                    Ok(()) => {}
                    Err(StoreError::Damaged { .. }) => {
                        stop.store(true, Ordering::Relaxed);
                        found
                            .lock()
                            .unwrap_or_else(PoisonError::into_inner)
                            .push(path.to_path_buf());
                    }
                    Err(e) => return Err(e.into()),
                }
            }
            Ok((sink, stats))
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
        // The first thread's groups are the base the others merge into.
        let mut sink: Option<S> = None;
        let mut stats = ScanStats::default();
        for part in parts {
            let (s, st) = part?;
            match &mut sink {
                Some(base) => base.merge(s),
                None => sink = Some(s),
            }
            stats.files_opened += st.files_opened;
            stats.row_groups += st.row_groups;
            stats.row_groups_read += st.row_groups_read;
            stats.rows_read += st.rows_read;
        }
        Ok(Answer {
            result: sink.unwrap_or_else(make).finish(),
            stats,
        })
    }
}

/// The files of `table` in the partitions that overlap `window` (all if `None`), oldest first,
/// and how many files the table has in all.
pub fn table_files(
    dir: &Path,
    table: crate::parquet::partition::Table,
    window: Option<Window>,
) -> Result<(Vec<PathBuf>, u64), QueryError> {
    let mut out = Vec::new();
    let mut listed = 0u64;
    for p in partitions(dir, table)? {
        let f = files(&p.path)?;
        listed += f.len() as u64;
        if window.is_none_or(|w| p.start_us < w.end_us && w.start_us < p.end_us) {
            out.extend(f);
        }
    }
    Ok((out, listed))
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
        Kind::Top { key, .. } => {
            c.extend_from_slice(key_columns(*key));
            c.extend_from_slice(label_columns(*key));
        }
        Kind::Series { key, .. } => {
            if let Some(k) = key {
                c.extend_from_slice(key_columns(*k));
                c.extend_from_slice(label_columns(*k));
            }
        }
        Kind::Aggregate { keys, .. } => {
            for k in keys {
                c.extend_from_slice(key_columns(*k));
                c.extend_from_slice(label_columns(*k));
            }
        }
        Kind::Summary => c.push("protocol"),
    }
    c.sort_unstable();
    c.dedup();
    c
}

/// Of the columns `cols` that `q` reads, those its forward directions need: no reverse
/// counters or flags, and an address or port column only if a key, a filter term or the
/// listing looks at that end.
fn forward_columns(q: &Query, cols: &[&'static str]) -> Vec<&'static str> {
    // Which ends (source, destination) of addresses and ports the query looks at.
    let mut addr = [false; 2];
    let mut port = [false; 2];
    let mut key = |k: Key| match k {
        Key::SrcAddr(_) => addr[0] = true,
        Key::DstAddr(_) => addr[1] = true,
        Key::Addr(_) => addr = [true; 2],
        Key::SrcPort => port[0] = true,
        Key::DstPort => port[1] = true,
        Key::Port => port = [true; 2],
        _ => {}
    };
    match &q.kind {
        Kind::List { .. } => {
            key(Key::Addr(None));
            key(Key::Port);
        }
        Kind::Top { key: k, .. } | Kind::Series { key: Some(k), .. } => key(*k),
        Kind::Aggregate { keys, .. } => keys.iter().for_each(|k| key(*k)),
        Kind::Series { key: None, .. } | Kind::Summary => {}
    }
    fn terms(f: &Filter, addr: &mut [bool; 2], port: &mut [bool; 2]) {
        let ends = |s: Side| match s {
            Side::Src => [true, false],
            Side::Dst => [false, true],
            Side::Any => [true, true],
        };
        match f {
            Filter::And(v) | Filter::Or(v) => v.iter().for_each(|a| terms(a, addr, port)),
            Filter::Not(a) => terms(a, addr, port),
            Filter::Term(Term::Addr(s, _)) => {
                let e = ends(*s);
                addr[0] |= e[0];
                addr[1] |= e[1];
            }
            Filter::Term(Term::Port(s, ..)) => {
                let e = ends(*s);
                port[0] |= e[0];
                port[1] |= e[1];
            }
            Filter::Term(_) => {}
        }
    }
    if let Some(f) = &q.filter {
        terms(f, &mut addr, &mut port);
    }
    cols.iter()
        .copied()
        .filter(|c| match *c {
            "rev_packets" | "rev_bytes" | "rev_tcp_flags" => false,
            "src_addr" => addr[0],
            "dst_addr" => addr[1],
            "src_port" => port[0],
            "dst_port" => port[1],
            _ => true,
        })
        .collect()
}

/// A file that does not read as a file of its table: damaged.
fn parquet_error(path: &Path, e: impl std::fmt::Display) -> StoreError {
    crate::parquet::damaged::damaged(path, &e.to_string())
}

/// Feeds the rows of the file at `path` to `sink`. A file that cannot be read is
/// [`StoreError::Damaged`], and moved into quarantine ([`crate::parquet::damaged::read`]).
fn scan_file<S: ColumnSink>(
    path: &Path,
    cols: &[&'static str],
    read: Read<'_>,
    feed: Feed<S>,
    sink: &mut S,
    stats: &mut ScanStats,
) -> Result<(), StoreError> {
    crate::parquet::damaged::read(path, |file| {
        decode_file(path, file, cols, read, feed, sink, stats)
    })
}

fn decode_file<S: ColumnSink>(
    path: &Path,
    file: File,
    cols: &[&'static str],
    read: Read<'_>,
    feed: Feed<S>,
    sink: &mut S,
    stats: &mut ScanStats,
) -> Result<(), StoreError> {
    let q = read.query;
    let loaded = ArrowReaderMetadata::load(&file, ArrowReaderOptions::default())
        .map_err(|e| parquet_error(path, e))?;
    stats.files_opened += 1;
    let meta = loaded.metadata().clone();
    let schema = meta.file_metadata().schema_descr();
    let leaves = leaves_of(path, schema, cols)?;
    // The table's time: its first column.
    let time = schema
        .columns()
        .iter()
        .position(|c| c.name() == "time_start" || c.name() == "time")
        .unwrap_or(0);
    let groups: Vec<usize> = (0..meta.num_row_groups())
        .filter(|&g| {
            let (Some(w), Some(Statistics::Int64(s))) =
                (q.window, meta.row_group(g).column(time).statistics())
            else {
                return true;
            };
            let (lo, hi) = (s.min_opt().copied(), s.max_opt().copied());
            lo.is_none_or(|lo| lo < w.end_us) && hi.is_none_or(|hi| hi >= w.start_us)
        })
        .collect();
    stats.row_groups += meta.num_row_groups() as u64;
    stats.row_groups_read += groups.len() as u64;
    // Row groups whose statistics say no row has a reverse direction (`rev_packets` at most
    // 0) decode only what the forward direction needs.
    let rev = schema
        .columns()
        .iter()
        .position(|c| c.name() == "rev_packets");
    let one_way = |g: usize| {
        read.bucket_us == 0
            && rev.is_some_and(|r| match meta.row_group(g).column(r).statistics() {
                Some(Statistics::Int64(s)) => s.max_opt() == Some(&0),
                _ => false,
            })
    };
    let (forward, both): (Vec<usize>, Vec<usize>) = groups.into_iter().partition(|&g| one_way(g));
    if !both.is_empty() {
        let reader = ParquetRecordBatchReaderBuilder::new_with_metadata(
            file.try_clone().map_err(|e| parquet_error(path, e))?,
            loaded.clone(),
        );
        read_groups(path, reader, leaves, both, read, feed, sink, stats)?;
    }
    if !forward.is_empty() {
        let reader = ParquetRecordBatchReaderBuilder::new_with_metadata(file, loaded);
        let leaves = leaves_of(path, schema, &forward_columns(q, cols))?;
        read_groups(path, reader, leaves, forward, read, feed, sink, stats)?;
    }
    Ok(())
}

/// The leaf index of each column in `cols`. A file written before the enrichment columns has
/// none of them: they read as if they held 0 and "".
fn leaves_of(
    path: &Path,
    schema: &SchemaDescriptor,
    cols: &[&'static str],
) -> Result<Vec<usize>, StoreError> {
    let enrichment = &FLOW_COLUMNS[FLOW_COLUMNS_BEFORE_ENRICHMENT..];
    let mut leaves = Vec::with_capacity(cols.len());
    for name in cols {
        match schema.columns().iter().position(|c| c.name() == *name) {
            Some(at) => leaves.push(at),
            None if enrichment.iter().any(|(c, _)| c == name) => {}
            None => return Err(parquet_error(path, format!("no column {name}"))),
        }
    }
    Ok(leaves)
}

/// Feeds the rows of row groups `groups` to the sink, decoding the columns `leaves`.
#[allow(clippy::too_many_arguments)]
fn read_groups<S: ColumnSink>(
    path: &Path,
    builder: ParquetRecordBatchReaderBuilder<File>,
    leaves: Vec<usize>,
    groups: Vec<usize>,
    read: Read<'_>,
    feed: Feed<S>,
    sink: &mut S,
    stats: &mut ScanStats,
) -> Result<(), StoreError> {
    let q = read.query;
    let schema = builder.parquet_schema();
    let mask = ProjectionMask::leaves(schema, leaves);
    let builder = match read.select {
        Some(s) => {
            let at = |name: &str| schema.columns().iter().position(|c| c.name() == name);
            let (Some(side), Some(value)) = (at("side"), at(s.column)) else {
                return Err(parquet_error(
                    path,
                    "no side or value column to select rows by",
                ));
            };
            // The value column is read first only if values are picked.
            let leaves = match s.values {
                Some(_) => vec![side, value],
                None => vec![side],
            };
            let wanted = s.values.map(<[Value]>::to_vec);
            let (side_value, column, totals) = (s.side, s.column, s.totals);
            let predicate = ArrowPredicateFn::new(
                ProjectionMask::leaves(schema, leaves),
                move |b: RecordBatch| {
                    let s = Select {
                        side: side_value,
                        column,
                        values: wanted.as_deref(),
                        totals,
                    };
                    Ok(tier::selected(&b, &s))
                },
            );
            builder.with_row_filter(RowFilter::new(vec![Box::new(predicate)]))
        }
        // The flows table under a filter: late materialisation. The filter's columns (with
        // the start time and both directions' packets) are decoded first; the rest only for the
        // rows a direction of which passes.
        None => match (&q.filter, read.bucket_us) {
            (Some(f), 0) => {
                let mut names = vec!["time_start", "packets", "rev_packets"];
                f.columns(&mut names);
                let mut leaves = Vec::with_capacity(names.len());
                for name in names {
                    let at = schema.columns().iter().position(|c| c.name() == name);
                    leaves.extend(at.filter(|a| !leaves.contains(a)));
                }
                let (f, window) = (f.clone(), q.window);
                let predicate = ArrowPredicateFn::new(
                    ProjectionMask::leaves(schema, leaves),
                    move |b: RecordBatch| {
                        let c = Columns::of(&b).map_err(parquet::errors::ParquetError::General)?;
                        let mut keep = vector::keep(&c, Dir::Forward, window, Some(&f));
                        if !c.one_way_only() {
                            keep = &keep | &vector::keep(&c, Dir::Reverse, window, Some(&f));
                        }
                        Ok(BooleanArray::new(keep, None))
                    },
                );
                builder.with_row_filter(RowFilter::new(vec![Box::new(predicate)]))
            }
            _ => builder,
        },
    };
    let reader = builder
        .with_projection(mask)
        .with_row_groups(groups)
        .with_batch_size(65_536)
        .build()
        .map_err(|e| parquet_error(path, e))?;
    for batch in reader {
        let batch = batch.map_err(|e| parquet_error(path, e))?;
        stats.rows_read += batch.num_rows() as u64;
        crate::parquet::damaged::uncontained(|| feed(&batch, read, sink))
            .map_err(|e| parquet_error(path, e))?;
    }
    Ok(())
}

/// A column's values if the batch has it, checked to be of type `T`.
pub(crate) fn prim<'a, T: ArrowPrimitiveType>(
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

pub(crate) fn addrs<'a>(b: &'a RecordBatch, name: &str) -> Result<Option<&'a [[u8; 16]]>, String> {
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

/// A country column (two letters or empty) as [`crate::query::country_code`] numbers.
pub(crate) fn countries(b: &RecordBatch, name: &str) -> Result<Option<Vec<u16>>, String> {
    let Some(a) = b.column_by_name(name) else {
        return Ok(None);
    };
    let s = a
        .as_string_opt::<i32>()
        .ok_or_else(|| format!("column {name} is {}, not text", a.data_type()))?;
    Ok(Some(
        (0..s.len())
            .map(|i| crate::query::country_code(s.value(i).as_bytes()))
            .collect(),
    ))
}

/// A text column as interned text ([`crate::names::intern`]), one lock per distinct value in
/// the batch rather than per row.
pub(crate) fn texts(b: &RecordBatch, name: &str) -> Result<Option<Vec<&'static str>>, String> {
    let Some(a) = b.column_by_name(name) else {
        return Ok(None);
    };
    let s = a
        .as_string_opt::<i32>()
        .ok_or_else(|| format!("column {name} is {}, not text", a.data_type()))?;
    let mut seen: hashbrown::HashMap<&str, &'static str> = hashbrown::HashMap::new();
    let mut last: (&str, &'static str) = ("", "");
    Ok(Some(
        (0..s.len())
            .map(|i| {
                let v = s.value(i);
                if v != last.0 {
                    let k = *seen.entry(v).or_insert_with(|| crate::names::intern(v));
                    last = (v, k);
                }
                last.1
            })
            .collect(),
    ))
}

#[inline]
pub(crate) fn at<T: Copy + Default>(col: Option<&[T]>, i: usize) -> T {
    col.map_or_else(T::default, |c| c[i])
}

/// Hands the batch's one-way flows that pass the window and filter to the sink: each direction's
/// rows picked by a bitmap over the columns ([`vector::keep`]), then counted from the columns.
fn feed<S: ColumnSink>(b: &RecordBatch, read: Read<'_>, sink: &mut S) -> Result<(), String> {
    let q = read.query;
    let c = Columns::of(b)?;
    let forward = vector::keep(&c, Dir::Forward, q.window, q.filter.as_ref());
    sink.add_columns(&c, Dir::Forward, &forward);
    if !c.one_way_only() {
        let reverse = vector::keep(&c, Dir::Reverse, q.window, q.filter.as_ref());
        sink.add_columns(&c, Dir::Reverse, &reverse);
    }
    Ok(())
}

/// The largest value of the time column `col` in the file's row-group statistics.
pub(crate) fn max_time(path: &Path, col: &str) -> Result<Option<i64>, QueryError> {
    Ok(time_bounds(path, col)?.map(|(_, hi)| hi))
}

/// The smallest value of the time column `col` in the file's row-group statistics.
pub(crate) fn min_time(path: &Path, col: &str) -> Result<Option<i64>, QueryError> {
    Ok(time_bounds(path, col)?.map(|(lo, _)| lo))
}

/// The smallest and largest values of the time column `col` in the file's row-group
/// statistics; none if the file cannot be read (moved into quarantine).
fn time_bounds(path: &Path, col: &str) -> Result<Option<(i64, i64)>, QueryError> {
    match crate::parquet::damaged::read(path, |file| file_time_bounds(path, file, col)) {
        Err(StoreError::Damaged { .. }) => Ok(None),
        r => Ok(r?),
    }
}

fn file_time_bounds(path: &Path, file: File, col: &str) -> Result<Option<(i64, i64)>, StoreError> {
    let builder =
        ParquetRecordBatchReaderBuilder::try_new(file).map_err(|e| parquet_error(path, e))?;
    let Some(at) = builder
        .parquet_schema()
        .columns()
        .iter()
        .position(|c| c.name() == col)
    else {
        return Ok(None);
    };
    let bounds =
        builder
            .metadata()
            .row_groups()
            .iter()
            .filter_map(|g| match g.column(at).statistics() {
                Some(Statistics::Int64(s)) => Some((*s.min_opt()?, *s.max_opt()?)),
                _ => None,
            });
    Ok(bounds.reduce(|a, b| (a.0.min(b.0), a.1.max(b.1))))
}
