//! Retention: whole files deleted, oldest first, by age (every table: partitions that ended
//! longer than `retain` ago) and by size (the store's files over `retain_size`: flow files go
//! first, oldest first; then the rollup tiers, finest first; the interface and exporter tables
//! last).

use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::StoreError;
use crate::parquet::partition::{self, Table};

/// What retention deleted.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Deleted {
    /// Files deleted.
    pub files: u64,
    /// Their bytes.
    pub bytes: u64,
}

/// One complete file of the store.
#[derive(Debug)]
struct Entry {
    table: Table,
    partition_start: i64,
    path: PathBuf,
    size: u64,
}

/// Deletes what `retain` (age) and `retain_size` (bytes) say must go from the store in `dir`,
/// at time `now_us`.
pub fn apply(
    dir: &Path,
    retain: Option<Duration>,
    retain_size: Option<u64>,
    now_us: i64,
) -> Result<Deleted, StoreError> {
    let mut deleted = Deleted::default();
    let mut entries = Vec::new();
    for table in Table::ALL {
        for p in partition::partitions(dir, table)? {
            let expired = retain.is_some_and(|r| {
                p.end_us <= now_us.saturating_sub(i64::try_from(r.as_micros()).unwrap_or(i64::MAX))
            });
            for path in partition::all_files(&p.path)? {
                let size = std::fs::metadata(&path).map_or(0, |m| m.len());
                if expired {
                    remove(&path)?;
                    deleted.files += 1;
                    deleted.bytes += size;
                } else {
                    entries.push(Entry {
                        table,
                        partition_start: p.start_us,
                        path,
                        size,
                    });
                }
            }
            if expired {
                remove_empty_dirs(&p.path, dir);
            }
        }
    }
    let Some(limit) = retain_size else {
        return Ok(deleted);
    };
    let mut total: u64 = entries.iter().map(|e| e.size).sum();
    if total <= limit {
        return Ok(deleted);
    }
    // Flows first, then tiers finest first (Table's order), each oldest first.
    entries.sort_by(|a, b| {
        (a.table, a.partition_start, &a.path).cmp(&(b.table, b.partition_start, &b.path))
    });
    for e in entries {
        if total <= limit {
            break;
        }
        remove(&e.path)?;
        total -= e.size;
        deleted.files += 1;
        deleted.bytes += e.size;
        if partition::all_files(e.path.parent().unwrap_or(dir))?.is_empty() {
            remove_empty_dirs(e.path.parent().unwrap_or(dir), dir);
        }
    }
    Ok(deleted)
}

/// Removes `from` and its parents up to (not including) the table directory under `root`, as
/// long as they are empty.
fn remove_empty_dirs(from: &Path, root: &Path) {
    let mut d = Some(from);
    while let Some(p) = d {
        if p.parent() == Some(root) || p == root || std::fs::remove_dir(p).is_err() {
            break;
        }
        d = p.parent();
    }
}

fn remove(path: &Path) -> Result<(), StoreError> {
    std::fs::remove_file(path).map_err(|source| StoreError::Io {
        what: "remove",
        path: path.to_path_buf(),
        source,
    })
}

/// Parses an age: a number and a unit, `s`, `m`, `h`, `d` or `w` (`30d`, `12h`).
pub fn parse_age(s: &str) -> Result<Duration, String> {
    let t = s.trim();
    let bad = || format!("'{s}' is not an age (like 30d, 12h, 90m; units s, m, h, d, w)");
    let (num, unit) = t.split_at(t.len().saturating_sub(1));
    let mult: u64 = match unit {
        "s" => 1,
        "m" => 60,
        "h" => 3600,
        "d" => 86_400,
        "w" => 7 * 86_400,
        _ => return Err(bad()),
    };
    let n: u64 = num.parse().map_err(|_| bad())?;
    match n.checked_mul(mult) {
        Some(secs) if secs > 0 => Ok(Duration::from_secs(secs)),
        _ => Err(bad()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ages() {
        assert_eq!(parse_age("30d"), Ok(Duration::from_secs(30 * 86_400)));
        assert_eq!(parse_age("90m"), Ok(Duration::from_secs(5400)));
        assert_eq!(parse_age("2w"), Ok(Duration::from_secs(14 * 86_400)));
        for bad in ["", "d", "30", "0d", "-1d", "1y", "1.5d"] {
            assert!(parse_age(bad).is_err(), "{bad}");
        }
    }
}
