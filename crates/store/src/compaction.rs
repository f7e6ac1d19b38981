//! Merging the small files of a partition into fewer, larger ones, so a query opens few files.
//!
//! Files with fewer than half `max_rows` rows are small; runs of them (in name order, so in the
//! order they were written) are merged, up to `max_rows` rows per new file, rows sorted by
//! time. The merged file is written as `.part`, renamed, and only then are its sources removed;
//! its key-value metadata `tapflow.replaces` lists them, so a crash between the rename and the
//! removals is repaired by [`repair`] at the next start. A write that fails (a full disk) leaves
//! the sources in place: nothing stored is lost.

use std::path::{Path, PathBuf};

use parquet::file::metadata::KeyValue;
use parquet::file::reader::FileReader;
use parquet::file::serialized_reader::SerializedFileReader;

use crate::StoreError;
use crate::batch::Batch;
use crate::partition::{self, Table};
use crate::reader::{metadata_value, read_file};
use crate::writer::{FileOptions, sync_dir, write_file};

/// The key-value metadata key naming the files a merged file replaces (comma-separated names).
pub const REPLACES: &str = "tapflow.replaces";

/// The prefix of merged files' names.
pub const MERGED_PREFIX: &str = "m-";

/// What one compaction did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Compacted {
    /// Files merged away.
    pub files_in: usize,
    /// Files written.
    pub files_out: usize,
}

/// The rows a file holds, from its footer.
pub fn file_rows(path: &Path) -> Result<u64, StoreError> {
    let file = std::fs::File::open(path).map_err(|source| StoreError::Io {
        what: "open",
        path: path.to_path_buf(),
        source,
    })?;
    let r = SerializedFileReader::new(file)
        .map_err(|e| StoreError::Other(format!("read {}: {e}", path.display())))?;
    Ok(u64::try_from(r.metadata().file_metadata().num_rows()).unwrap_or(0))
}

/// Merges the small files of the partition directory `dir` of `table`; `name` gives each new
/// file's name.
pub fn compact(
    dir: &Path,
    table: Table,
    opts: &FileOptions,
    max_rows: usize,
    name: &mut dyn FnMut() -> String,
) -> Result<Compacted, StoreError> {
    let max_rows = max_rows.max(2) as u64;
    let mut runs: Vec<Vec<(PathBuf, u64)>> = vec![Vec::new()];
    for f in partition::files(dir)? {
        let rows = file_rows(&f)?;
        let run = runs.last_mut().expect("one run at least");
        if rows >= max_rows / 2 {
            runs.push(Vec::new());
            continue;
        }
        if run.iter().map(|r| r.1).sum::<u64>() + rows > max_rows {
            runs.push(Vec::new());
        }
        runs.last_mut().expect("one run at least").push((f, rows));
    }
    let mut done = Compacted::default();
    for run in runs.into_iter().filter(|r| r.len() >= 2) {
        let mut all = Batch::empty(table.columns());
        for (f, _) in &run {
            all.append(&read_file(f, table.columns())?);
        }
        let names: Vec<&str> = run
            .iter()
            .filter_map(|(f, _)| f.file_name().and_then(|n| n.to_str()))
            .collect();
        let merged = dir.join(name());
        write_file(
            &merged,
            table.columns(),
            &all.sorted_by_time(),
            opts,
            vec![KeyValue::new(REPLACES.to_owned(), names.join(","))],
        )?;
        for (f, _) in &run {
            remove(f)?;
        }
        sync_dir(dir)?;
        done.files_in += run.len();
        done.files_out += 1;
    }
    Ok(done)
}

/// Removes the sources a merged file in partition `dir` replaced that are still there (a crash
/// after the merged file's rename). Returns how many it removed.
pub fn repair(dir: &Path) -> Result<usize, StoreError> {
    let files = partition::files(dir)?;
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
        let Some(list) = metadata_value(f, REPLACES)? else {
            continue;
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
        sync_dir(dir)?;
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
