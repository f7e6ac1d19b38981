//! Merging the small files of a partition into fewer, larger ones, so a query opens few files,
//! and rewriting fresh files at the store's zstd level.
//!
//! A flush writes fresh files ([`FRESH_PREFIX`]) at a fast zstd level; a merge writes
//! [`MERGED_PREFIX`] files at the store's level. Files with fewer than an eighth of `max_rows`
//! rows are small ([`is_small`]); runs of them (in name order, so in the order they were
//! written) are merged, up to `max_rows` rows per new file, rows sorted by time. Only the fresh
//! files are merged in a partition still being written into, and in a closed one until it holds
//! [`MERGE_MERGED_AT`] small merged files, so each row is merged once there, not at every
//! round; then every small file is. In a closed partition a lone fresh file is rewritten. The
//! merged files of a round are written as `.part`, synced and renamed together, and only then
//! are their sources removed; each one's key-value metadata `tapflow.replaces` lists its
//! sources, so a crash between the rename and the removals is repaired by [`repair`] at the
//! next start. A write that fails (a full disk) leaves the sources in place: nothing stored is
//! lost.

use std::path::{Path, PathBuf};

use parquet::file::metadata::KeyValue;
use parquet::file::reader::FileReader;
use parquet::file::serialized_reader::SerializedFileReader;

use crate::StoreError;
use crate::parquet::batch::Batch;
use crate::parquet::partition::{self, FRESH_PREFIX, MERGED_PREFIX, REPLACES, Table};
use crate::parquet::reader::{metadata_value, read_file};
use crate::parquet::writer::{FileOptions, Staged, publish, sync_dirs, write_staged};

/// What one compaction did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Compacted {
    /// Files merged away.
    pub files_in: usize,
    /// Files written.
    pub files_out: usize,
}

/// The rows a file holds, from its footer. A file that cannot be read is
/// [`StoreError::Damaged`], and moved into quarantine.
pub fn file_rows(path: &Path) -> Result<u64, StoreError> {
    crate::parquet::damaged::read(path, |file| {
        let r = SerializedFileReader::new(file)
            .map_err(|e| crate::parquet::damaged::damaged(path, &e.to_string()))?;
        Ok(u64::try_from(r.metadata().file_metadata().num_rows()).unwrap_or(0))
    })
}

/// A merged file written but not yet published, and the files it replaces.
#[derive(Debug)]
pub struct Merge {
    staged: Staged,
    sources: Vec<PathBuf>,
    /// The rows it holds.
    pub rows: u64,
}

/// Whether a file of `rows` rows is small: merged with others (up to `max_rows` rows). A larger
/// one is left as it is, so a flush that has that many rows for one partition writes them at the
/// store's level at once.
pub fn is_small(rows: u64, max_rows: usize) -> bool {
    rows < (max_rows as u64 / 8).max(1)
}

/// Whether `path` is a fresh file (written by a flush at the fast level).
pub fn is_fresh(path: &Path) -> bool {
    path.file_name()
        .and_then(|n| n.to_str())
        .is_some_and(|n| n.starts_with(FRESH_PREFIX))
}

/// Small merged files a closed partition gathers before they are merged together as well:
/// flows that keep arriving for hours long past (a replay, an exporter's clock) add one at each
/// round, and merging it into the others every round would rewrite all their rows each time.
pub const MERGE_MERGED_AT: usize = 8;

/// Writes the merges of the partition directory `dir` of `table`: of its fresh files if it is
/// `open` or holds fewer than [`MERGE_MERGED_AT`] small merged files, else of all its small
/// files; `name` gives each new file's name. [`publish_merges`] makes them take effect.
pub fn stage(
    dir: &Path,
    table: Table,
    opts: &FileOptions,
    max_rows: usize,
    open: bool,
    name: &mut dyn FnMut() -> String,
) -> Result<Vec<Merge>, StoreError> {
    // Each file's rows, from its footer: of the fresh files only while the partition is open.
    let mut files = Vec::new();
    for f in partition::files(dir)? {
        if !open || is_fresh(&f) {
            match file_rows(&f) {
                Ok(rows) => files.push((f, rows)),
                // Moved into quarantine: merged without it.
                Err(StoreError::Damaged { .. }) => {}
                Err(e) => return Err(e),
            }
        }
    }
    let small_merged = files
        .iter()
        .filter(|(f, rows)| !is_fresh(f) && is_small(*rows, max_rows))
        .count();
    let fresh_only = open || small_merged < MERGE_MERGED_AT;
    let max_rows = max_rows.max(2) as u64;
    let mut runs: Vec<Vec<(PathBuf, u64)>> = vec![Vec::new()];
    for (f, rows) in files {
        if fresh_only && !is_fresh(&f) {
            continue;
        }
        let run = runs.last_mut().expect("one run at least");
        if !is_small(rows, max_rows as usize) {
            runs.push(Vec::new());
            continue;
        }
        if run.iter().map(|r| r.1).sum::<u64>() + rows > max_rows {
            runs.push(Vec::new());
        }
        runs.last_mut().expect("one run at least").push((f, rows));
    }
    let mut out = Vec::new();
    for mut run in runs {
        let rewrite = run.len() >= 2 || (!open && run.len() == 1 && is_fresh(&run[0].0));
        if !rewrite {
            continue;
        }
        let mut all = Batch::empty(table.columns());
        let mut readable = Vec::with_capacity(run.len());
        for (f, rows) in run {
            match read_file(&f, table.columns()) {
                Ok(b) => all.append(&b),
                // Moved into quarantine: merged without it.
                Err(StoreError::Damaged { .. }) => continue,
                Err(e) => return Err(e),
            }
            readable.push((f, rows));
        }
        run = readable;
        if run.is_empty() {
            continue;
        }
        let names: Vec<&str> = run
            .iter()
            .filter_map(|(f, _)| f.file_name().and_then(|n| n.to_str()))
            .collect();
        let staged = write_staged(
            &dir.join(name()),
            table.columns(),
            &all.sorted_by_time(),
            opts,
            vec![KeyValue::new(REPLACES.to_owned(), names.join(","))],
        )?;
        out.push(Merge {
            staged,
            rows: run.iter().map(|r| r.1).sum(),
            sources: run.into_iter().map(|(f, _)| f).collect(),
        });
    }
    Ok(out)
}

/// Publishes `merges` together ([`publish`]), then removes the sources of each one published
/// and syncs once more. A merge that fails to publish leaves its sources; the first error is
/// returned after the others are done.
pub fn publish_merges(merges: Vec<Merge>) -> Result<Compacted, StoreError> {
    let (staged, sources): (Vec<Staged>, Vec<Vec<PathBuf>>) =
        merges.into_iter().map(|m| (m.staged, m.sources)).unzip();
    let mut done = Compacted::default();
    let mut first_error = None;
    let mut dirs: Vec<PathBuf> = Vec::new();
    for (r, sources) in publish(staged).into_iter().zip(sources) {
        if let Err(e) = r {
            first_error.get_or_insert(e);
            continue;
        }
        for f in &sources {
            if let Err(e) = remove(f) {
                first_error.get_or_insert(e);
            }
        }
        if let Some(d) = sources.first().and_then(|f| f.parent())
            && !dirs.iter().any(|x| x == d)
        {
            dirs.push(d.to_path_buf());
        }
        done.files_in += sources.len();
        done.files_out += 1;
    }
    let dirs: Vec<&Path> = dirs.iter().map(PathBuf::as_path).collect();
    if let Err(e) = sync_dirs(&dirs) {
        first_error.get_or_insert(e);
    }
    first_error.map_or(Ok(done), Err)
}

/// Removes the sources a merged file in partition `dir` replaced that are still there (a crash
/// after the merged file's rename). Returns how many it removed.
pub fn repair(dir: &Path) -> Result<usize, StoreError> {
    let files = partition::all_files(dir)?;
    if files.len() < 2 {
        return Ok(0);
    }
    let mut removed = 0;
    for f in &files {
        let merged = f
            .file_name()
            .and_then(|n| n.to_str())
            .is_some_and(|n| n.starts_with(MERGED_PREFIX));
        if !merged || !f.exists() {
            continue;
        }
        let list = match metadata_value(f, REPLACES) {
            Ok(Some(list)) => list,
            // Moved into quarantine: its sources stay, and are read instead.
            Ok(None) | Err(StoreError::Damaged { .. }) => continue,
            Err(e) => return Err(e),
        };
        for n in list
            .split(',')
            .filter(|n| !n.is_empty() && !n.contains('/'))
        {
            let source = dir.join(n);
            if source != *f && source.exists() {
                remove(&source)?;
                removed += 1;
            }
        }
    }
    if removed > 0 {
        sync_dirs(&[dir])?;
    }
    Ok(removed)
}

fn remove(path: &Path) -> Result<(), StoreError> {
    std::fs::remove_file(path).map_err(|source| StoreError::Io {
        what: "remove",
        path: path.to_path_buf(),
        source,
    })
}
