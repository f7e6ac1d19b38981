//! The embedded store: flows in Parquet files under one directory ([`crate::parquet::partition`]
//! has the layout), with rollup tiers, compaction and retention.
//!
//! [`ParquetStore::insert`] copies flows into a buffer; the buffer is written when it holds
//! `max_buffered` flows, when `flush_interval` has passed since the last write (checked on each
//! insert and flush), and on [`FlowStore::flush`] and close: sorted by `time_start`, one file per
//! hour partition, the files of one flush synced and renamed together ([`publish`]). A flush
//! writes fresh files at the fast `fresh_zstd_level`; compaction merges them at the store's
//! level, and the last write at close is at that level already where no fresh file waits. A
//! file too large for compaction to merge ([`compaction::is_small`]: a busy collector's
//! flush) stays at the fast level, written once: the store's level would cost the collector
//! more than half again the CPU per flow for ~12% fewer bytes (docs/benchmarks.md, "Collect"). A
//! flow counts as stored once its file is renamed; a write that fails (a full disk) drops the
//! flows it held, counted, and leaves every file already written intact. Stored flows feed the
//! rollups ([`crate::parquet::rollup`]).
//! Every `maintenance_interval` (and at close) the partitions written into that are closed
//! (`compact_after` past their end) are compacted, and the fresh files of those that hold
//! [`MERGE_OPEN_AT`] of them are merged; then retention runs. One process owns a directory at
//! a time (a lock on `DIR/lock`).

use std::collections::{BTreeSet, HashMap};
use std::fs::File;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant, SystemTime};

use crate::parquet::batch::{self, Batch};
use crate::parquet::compaction;
use crate::parquet::partition::{
    self, FRESH_PREFIX, MERGED_PREFIX, Table, partition_dir, partition_start,
};
use crate::parquet::retention;
use crate::parquet::rollup::Rollups;
use crate::parquet::writer::{FileOptions, create_dirs, publish, write_staged};
use crate::schema::{ExporterStats, InterfaceCounters, InterfaceName, StoredFlow};
use crate::{FlowStore, StoreError, StoreReport};

/// How a [`ParquetStore`] writes, merges and deletes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ParquetOptions {
    /// The longest a flow waits in the buffer before it is written (so queries see it).
    pub flush_interval: Duration,
    /// Flows buffered at most before a write.
    pub max_buffered: usize,
    /// zstd level (of merged files, and of those written at close) and row-group size.
    pub file: FileOptions,
    /// The zstd level of the files a flush writes, which compaction merges or rewrites at
    /// `file.zstd_level`.
    pub fresh_zstd_level: i32,
    /// Delete partitions that ended longer ago than this.
    pub retain: Option<Duration>,
    /// Keep the store's files under this many bytes (oldest flow files go first).
    pub retain_size: Option<u64>,
    /// A partition is merged once this long past its end.
    pub compact_after: Duration,
    /// Rows per merged file at most.
    pub compact_rows: usize,
    /// Rows merged at most by one round of compaction while the store runs (1M: about a second
    /// of a core at zstd 9), so a round never holds the flows back longer than the socket
    /// buffers last; partitions left over are merged at the next flush's round. When more comes
    /// in to merge than that (flows of many past hours at a high rate) the merges fall behind:
    /// the partitions keep more files until the rate drops, and no flow is lost to a merge.
    pub compact_rows_per_round: u64,
    /// The most time closing the store spends merging (20 s), so a service stops well within
    /// its manager's stop timeout (systemd's default is 90 s): the buffered flows are always
    /// written, and partitions left unmerged are merged by the next run's maintenance. `None`
    /// merges everything (`tapflow import`).
    pub close_merge: Option<Duration>,
    /// How often compaction and retention run.
    pub maintenance_interval: Duration,
    /// Top hosts kept per rollup bucket and side.
    pub top_hosts: usize,
    /// How long past a rollup bucket's end (in flow time) flows may still arrive for it.
    pub rollup_delay: Duration,
}

impl Default for ParquetOptions {
    fn default() -> Self {
        ParquetOptions {
            flush_interval: Duration::from_secs(5),
            max_buffered: 1 << 20,
            file: FileOptions::default(),
            fresh_zstd_level: 1,
            retain: None,
            retain_size: None,
            compact_after: Duration::from_secs(600),
            compact_rows: 4 << 20,
            compact_rows_per_round: 1 << 20,
            close_merge: Some(Duration::from_secs(20)),
            maintenance_interval: Duration::from_secs(60),
            top_hosts: 50,
            rollup_delay: Duration::from_secs(120),
        }
    }
}

/// Fresh files in a partition still being written into at which they are merged anyway
/// (every flush of a live store adds one).
const MERGE_OPEN_AT: usize = 32;

/// Flows kept in Parquet files under one directory.
#[derive(Debug)]
pub struct ParquetStore {
    dir: PathBuf,
    opts: ParquetOptions,
    /// Held for the store's life: the lock on `DIR/lock`.
    _lock: File,
    flows: Vec<StoredFlow>,
    /// A flush's (start, index) pairs and its rows of one partition, kept between flushes so
    /// their memory is reused.
    keys: Vec<(u64, u32)>,
    rows: Batch,
    interfaces: Vec<InterfaceName>,
    /// The last row kept of each exporter, domain and index, its time left out.
    known_interfaces: HashMap<([u8; 16], u32, u32), InterfaceName>,
    exporter_stats: Vec<ExporterStats>,
    if_counters: Vec<InterfaceCounters>,
    rollups: Rollups,
    /// Rollup rows closed but not yet written (a write failed).
    rollup_rows: Vec<(Table, Batch)>,
    /// Partitions written into since the last compaction.
    dirty: BTreeSet<(Table, PathBuf, i64)>,
    report: StoreReport,
    last_write: Instant,
    last_maintenance: Instant,
    /// A round of compaction left partitions for the next one.
    compact_backlog: bool,
    seq: u64,
}

impl ParquetStore {
    /// Opens (creating it if needed) the store in `dir`: takes its lock, removes `.part` files
    /// a crashed writer left, repairs an interrupted compaction, applies retention.
    pub fn open(dir: &Path, opts: ParquetOptions) -> Result<ParquetStore, StoreError> {
        if opts.max_buffered == 0 || opts.compact_rows == 0 || opts.file.row_group_rows == 0 {
            return Err(StoreError::Other(
                "store: buffer, merge and row-group sizes must be above 0".into(),
            ));
        }
        create_dirs(dir)?;
        let lock_path = dir.join("lock");
        let lock =
            tapflow_sys::outfile::create_or_open(&lock_path).map_err(|source| StoreError::Io {
                what: "open",
                path: lock_path.clone(),
                source,
            })?;
        lock.try_lock().map_err(|_| {
            StoreError::Other(format!(
                "store {}: in use by another process (its lock {} is held)",
                dir.display(),
                lock_path.display()
            ))
        })?;
        let mut dirty = BTreeSet::new();
        for table in Table::ALL {
            for p in partition::partitions(dir, table)? {
                remove_stale_parts(&p.path)?;
                compaction::repair(&p.path)?;
                let files = partition::files(&p.path)?;
                if files.len() > 1 || files.iter().any(|f| compaction::is_fresh(f)) {
                    dirty.insert((table, p.path, p.end_us));
                }
            }
        }
        let mut store = ParquetStore {
            dir: dir.to_path_buf(),
            rollups: Rollups::new(opts.top_hosts, micros(opts.rollup_delay)),
            opts,
            _lock: lock,
            flows: Vec::new(),
            keys: Vec::new(),
            rows: Batch::empty(Table::Flows.columns()),
            interfaces: Vec::new(),
            known_interfaces: HashMap::new(),
            exporter_stats: Vec::new(),
            if_counters: Vec::new(),
            rollup_rows: Vec::new(),
            dirty,
            report: StoreReport::default(),
            last_write: Instant::now(),
            last_maintenance: Instant::now(),
            compact_backlog: false,
            seq: 0,
        };
        store.retention()?;
        Ok(store)
    }

    /// The store's directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// A new file name (see [`file_name`]).
    fn file_name(&mut self, prefix: &str) -> String {
        self.seq += 1;
        file_name(prefix, self.seq)
    }

    /// The options and name prefix of a file of `rows` rows a write makes in partition `dir`: a
    /// fresh one at the fast level; one at the fast level too but final (merged prefix) when
    /// compaction would leave it as it is (too large to merge: a busy collector's flush, whose
    /// buffer fills before its interval ends), so a busy collector pays the fast level once
    /// and no rewrite; one at the store's level when the store is closing (`last`) and `dir`
    /// holds no fresh file (which the merge at close would rewrite it with).
    fn file_kind(&self, rows: usize, last: bool, dir: &Path) -> (FileOptions, &'static str) {
        let merged_anyway =
            || partition::all_files(dir).is_ok_and(|f| f.iter().any(|p| compaction::is_fresh(p)));
        let fast = FileOptions {
            zstd_level: self.opts.fresh_zstd_level,
            ..self.opts.file
        };
        if !compaction::is_small(rows as u64, self.opts.compact_rows) {
            (fast, MERGED_PREFIX)
        } else if last && !merged_anyway() {
            (self.opts.file, MERGED_PREFIX)
        } else {
            (fast, FRESH_PREFIX)
        }
    }

    /// Writes the buffered flows, one file per hour partition, rows sorted by `time_start`;
    /// the files of one flush are renamed together ([`publish`]). `last`: the store is closing.
    fn write_flows(&mut self, last: bool) -> Result<(), StoreError> {
        self.last_write = Instant::now();
        if self.flows.is_empty() {
            return Ok(());
        }
        let flows = std::mem::take(&mut self.flows);
        // Sort (start, index) pairs, not the flows: the order is stable and nothing large moves.
        let mut keys = std::mem::take(&mut self.keys);
        keys.clear();
        keys.extend(
            flows
                .iter()
                .enumerate()
                .map(|(i, f)| (f.flow.start_ns(), i as u32)),
        );
        keys.sort_unstable();
        let order: Vec<u32> = keys.iter().map(|&(_, i)| i).collect();
        let mut rows = std::mem::take(&mut self.rows);
        let mut first_error = None;
        let mut staged = Vec::new();
        let mut groups = Vec::new();
        // Flows whose file could not be created for want of a descriptor, kept for the next
        // write up to the buffer's size (a full disk drops them: the files would not fit).
        let mut kept: Vec<StoredFlow> = Vec::new();
        let mut at = 0;
        while at < keys.len() {
            let hour = partition_start(Table::Flows, us(keys[at].0));
            let n = keys[at..]
                .iter()
                .take_while(|k| partition_start(Table::Flows, us(k.0)) == hour)
                .count();
            let group = &order[at..at + n];
            at += n;
            let dir = partition_dir(&self.dir, Table::Flows, hour);
            let (file, prefix) = self.file_kind(n, last, &dir);
            let path = dir.join(self.file_name(prefix));
            batch::fill_from_flows_in(&mut rows, &flows, group);
            match write_staged(&path, Table::Flows.columns(), &rows, &file, Vec::new()) {
                Ok(s) => {
                    staged.push(s);
                    groups.push((group, dir, hour));
                }
                Err(e) if e.is_out_of_descriptors() && kept.len() + n <= self.opts.max_buffered => {
                    kept.extend(group.iter().map(|&i| flows[i as usize]));
                    first_error.get_or_insert(e);
                }
                Err(e) => {
                    self.report.pending -= n as u64;
                    self.report.dropped += n as u64;
                    first_error.get_or_insert(e);
                }
            }
        }
        let now = now_us();
        for (done, (group, dir, hour)) in publish(staged).into_iter().zip(groups) {
            let n = group.len() as u64;
            self.report.pending -= n;
            match done {
                Ok(()) => {
                    self.report.stored += n;
                    self.rollups
                        .add(group.iter().map(|&i| &flows[i as usize]), now);
                    self.dirty
                        .insert((Table::Flows, dir, hour + crate::schema::HOUR_US));
                }
                Err(e) => {
                    self.report.dropped += n;
                    first_error.get_or_insert(e);
                }
            }
        }
        (self.keys, self.rows) = (keys, rows);
        if kept.is_empty() {
            let mut flows = flows;
            flows.clear();
            self.flows = flows;
        } else {
            self.flows = kept;
        }
        first_error.map_or(Ok(()), Err)
    }

    /// Writes closed rollup buckets (all of them if `all`), interface names and exporter
    /// counters, renamed together. Rows whose write fails are kept and tried again.
    fn write_tables(&mut self, all: bool) -> Result<(), StoreError> {
        let closed = self.rollups.close(all);
        self.rollup_rows.extend(closed);
        if !self.interfaces.is_empty() {
            let rows = batch::from_interfaces(&std::mem::take(&mut self.interfaces));
            self.rollup_rows.push((Table::Interfaces, rows));
        }
        if !self.exporter_stats.is_empty() {
            let rows = batch::from_exporter_stats(&std::mem::take(&mut self.exporter_stats));
            self.rollup_rows.push((Table::ExporterStats, rows));
        }
        if !self.if_counters.is_empty() {
            let rows = batch::from_if_counters(&std::mem::take(&mut self.if_counters));
            self.rollup_rows.push((Table::IfCounters, rows));
        }
        let mut first_error = None;
        let mut staged = Vec::new();
        let mut parts = Vec::new();
        for (table, rows) in std::mem::take(&mut self.rollup_rows) {
            if rows.rows() == 0 {
                continue;
            }
            let rows = rows.sorted_by_time();
            let times = rows.times().to_vec();
            let mut at = 0;
            while at < times.len() {
                let start = partition_start(table, times[at]);
                let n = times[at..]
                    .iter()
                    .take_while(|&&t| partition_start(table, t) == start)
                    .count();
                let part = rows.slice(at, n);
                at += n;
                let dir = partition_dir(&self.dir, table, start);
                let (file, prefix) = self.file_kind(part.rows(), all, &dir);
                let path = dir.join(self.file_name(prefix));
                match write_staged(&path, table.columns(), &part, &file, Vec::new()) {
                    Ok(s) => {
                        staged.push(s);
                        parts.push((table, part, dir, start));
                    }
                    Err(e) => {
                        self.rollup_rows.push((table, part));
                        first_error.get_or_insert(e);
                    }
                }
            }
        }
        for (done, (table, part, dir, start)) in publish(staged).into_iter().zip(parts) {
            match done {
                Ok(()) => {
                    self.dirty.insert((table, dir, start + table.span().us()));
                }
                Err(e) => {
                    self.rollup_rows.push((table, part));
                    first_error.get_or_insert(e);
                }
            }
        }
        first_error.map_or(Ok(()), Err)
    }

    /// Merges the partitions written into: the closed ones (every one if `all`, at close) wholly,
    /// and the fresh files of those holding [`MERGE_OPEN_AT`] of them; the merged files of all
    /// partitions are published together ([`compaction::publish_merges`]). A round while the
    /// store runs stops after `compact_rows_per_round` rows, one at close after `close_merge`.
    fn compact(&mut self, all: bool) -> Result<(), StoreError> {
        let deadline = if all {
            self.opts.close_merge.map(|d| Instant::now() + d)
        } else {
            None
        };
        let limit = now_us().saturating_sub(micros(self.opts.compact_after));
        let mut ready: Vec<((Table, PathBuf, i64), bool)> = Vec::new();
        for key in &self.dirty {
            let (_, dir, end) = key;
            if all || *end <= limit {
                ready.push((key.clone(), false));
            } else if partition::all_files(dir).is_ok_and(|f| {
                f.iter().filter(|p| compaction::is_fresh(p)).count() >= MERGE_OPEN_AT
            }) {
                ready.push((key.clone(), true));
            }
        }
        let mut merges = Vec::new();
        let mut first_error = None;
        let mut budget = if all {
            u64::MAX
        } else {
            self.opts.compact_rows_per_round
        };
        self.compact_backlog = false;
        for (key, open) in ready {
            if budget == 0 || deadline.is_some_and(|d| Instant::now() >= d) {
                self.compact_backlog = true;
                break;
            }
            let (table, dir, _) = &key;
            if dir.exists() {
                let mut seq = self.seq;
                let mut name = || {
                    seq += 1;
                    file_name(MERGED_PREFIX, seq)
                };
                let staged = compaction::stage(
                    dir,
                    *table,
                    &self.opts.file,
                    self.opts.compact_rows,
                    open,
                    &mut name,
                );
                self.seq = seq;
                match staged {
                    Ok(m) => {
                        let rows: u64 = m.iter().map(|m| m.rows).sum();
                        budget = budget.saturating_sub(rows);
                        merges.extend(m);
                    }
                    Err(e) => {
                        first_error.get_or_insert(e);
                        continue;
                    }
                }
            }
            // A partition still open stays listed, for its last merge once it closes.
            if !open {
                self.dirty.remove(&key);
            }
        }
        if !merges.is_empty()
            && let Err(e) = compaction::publish_merges(merges)
        {
            first_error.get_or_insert(e);
        }
        first_error.map_or(Ok(()), Err)
    }

    fn retention(&mut self) -> Result<(), StoreError> {
        if self.opts.retain.is_some() || self.opts.retain_size.is_some() {
            retention::apply(&self.dir, self.opts.retain, self.opts.retain_size, now_us())?;
        }
        Ok(())
    }

    /// Compaction and retention, if their interval has passed.
    fn maintain(&mut self) -> Result<(), StoreError> {
        if !self.compact_backlog && self.last_maintenance.elapsed() < self.opts.maintenance_interval
        {
            return Ok(());
        }
        self.last_maintenance = Instant::now();
        self.compact(false)?;
        self.retention()
    }

    /// Writes everything due: flows, closed rollups, small tables; then maintenance.
    fn write_all(&mut self, all: bool) -> Result<(), StoreError> {
        let flows = self.write_flows(all);
        let tables = self.write_tables(all);
        let maintenance = if all {
            self.compact(true).and_then(|()| self.retention())
        } else {
            self.maintain()
        };
        flows.and(tables).and(maintenance)
    }
}

impl FlowStore for ParquetStore {
    fn insert(&mut self, flows: &[StoredFlow]) -> Result<(), StoreError> {
        self.report.received += flows.len() as u64;
        self.report.pending += flows.len() as u64;
        let mut rest = flows;
        while !rest.is_empty() {
            let room = self
                .opts
                .max_buffered
                .saturating_sub(self.flows.len())
                .max(1);
            let (now, later) = rest.split_at(room.min(rest.len()));
            self.flows.extend_from_slice(now);
            rest = later;
            if self.flows.len() >= self.opts.max_buffered
                && let Err(e) = self.write_flows(false)
            {
                // The flows not yet buffered are dropped with the failed write's.
                self.report.pending -= rest.len() as u64;
                self.report.dropped += rest.len() as u64;
                return Err(e);
            }
        }
        if self.last_write.elapsed() >= self.opts.flush_interval {
            self.write_all(false)?;
        }
        Ok(())
    }

    fn insert_interfaces(&mut self, names: &[InterfaceName]) -> Result<(), StoreError> {
        for n in names {
            // The same names come with every options-template refresh: keep a row only when
            // an interface's name, description or speed changes.
            let now = InterfaceName {
                received_ns: 0,
                ..n.clone()
            };
            let key = (n.exporter, n.domain, n.index);
            if self.known_interfaces.get(&key) != Some(&now) {
                self.known_interfaces.insert(key, now);
                self.interfaces.push(n.clone());
            }
        }
        Ok(())
    }

    fn insert_if_counters(&mut self, rows: &[InterfaceCounters]) -> Result<(), StoreError> {
        self.if_counters.extend_from_slice(rows);
        Ok(())
    }

    fn insert_exporter_stats(&mut self, stats: &[ExporterStats]) -> Result<(), StoreError> {
        self.exporter_stats.extend_from_slice(stats);
        Ok(())
    }

    fn flush(&mut self) -> Result<(), StoreError> {
        self.write_all(false)
    }

    fn report(&self) -> StoreReport {
        self.report
    }

    /// An error names what failed and adds the final counts, which the caller cannot ask for
    /// once the store is gone.
    fn close(mut self: Box<Self>) -> Result<StoreReport, StoreError> {
        self.write_all(true).map_err(|e| {
            let r = self.report;
            StoreError::Other(format!(
                "{e} (flows: {} received, {} stored, {} dropped)",
                r.received, r.stored, r.dropped
            ))
        })?;
        Ok(self.report)
    }
}

/// Removes `.part` files in a partition (a writer that crashed left them; the lock says no
/// writer runs now).
fn remove_stale_parts(dir: &Path) -> Result<(), StoreError> {
    let rd = std::fs::read_dir(dir).map_err(|source| StoreError::Io {
        what: "read directory",
        path: dir.to_path_buf(),
        source,
    })?;
    for e in rd.flatten() {
        let p = e.path();
        if p.extension().is_some_and(|x| x == "part") {
            std::fs::remove_file(&p).map_err(|source| StoreError::Io {
                what: "remove",
                path: p.clone(),
                source,
            })?;
        }
    }
    Ok(())
}

/// A file's name: `PREFIX<µs now>-<pid>-<seq>.parquet`.
fn file_name(prefix: &str, seq: u64) -> String {
    format!("{prefix}{}-{}-{seq}.parquet", now_us(), std::process::id())
}

fn us(ns: u64) -> i64 {
    (ns / 1000) as i64
}

fn micros(d: Duration) -> i64 {
    i64::try_from(d.as_micros()).unwrap_or(i64::MAX)
}

/// Now, µs since 1970.
fn now_us() -> i64 {
    SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .map_or(0, micros)
}
