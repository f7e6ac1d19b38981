//! Where the Parquet store keeps each table: one directory per table under the store directory,
//! Hive-style partitions by the UTC hour or day of each row's time, complete files only named
//! `*.parquet` (a file being written is `*.parquet.part` until it is renamed).
//!
//! ```text
//! DIR/flows/date=YYYY-MM-DD/hour=HH/*.parquet           FLOW_COLUMNS, by time_start
//! DIR/rollup_1m/date=YYYY-MM-DD/hour=HH/*.parquet       ROLLUP_COLUMNS, 1-minute buckets
//! DIR/rollup_5m/date=YYYY-MM-DD/hour=HH/*.parquet       ROLLUP_COLUMNS, 5-minute buckets
//! DIR/rollup_1h/date=YYYY-MM-DD/*.parquet               ROLLUP_COLUMNS, 1-hour buckets
//! DIR/hosts_1m/date=YYYY-MM-DD/hour=HH/*.parquet        HOSTS_COLUMNS
//! DIR/hosts_5m/date=YYYY-MM-DD/hour=HH/*.parquet        HOSTS_COLUMNS
//! DIR/hosts_1h/date=YYYY-MM-DD/*.parquet                HOSTS_COLUMNS
//! DIR/ports_1h/date=YYYY-MM-DD/*.parquet                PORTS_COLUMNS
//! DIR/places_1h/date=YYYY-MM-DD/*.parquet               PLACES_COLUMNS
//! DIR/interfaces/date=YYYY-MM-DD/*.parquet              INTERFACE_COLUMNS, by time_received
//! DIR/exporter_stats/date=YYYY-MM-DD/*.parquet          EXPORTER_STATS_COLUMNS, by time
//! DIR/if_counters/date=YYYY-MM-DD/*.parquet             IF_COUNTERS_COLUMNS, by time received
//! ```
//!
//! Every file's rows are sorted by its first column (the time), so row-group statistics on it
//! prune by time within a partition. A reader lists with [`files`] or [`files_between`], which
//! leave out files a merged file replaces; if a listed file is gone when opened, a compaction
//! merged it meanwhile: list again.

use std::path::{Path, PathBuf};

use crate::StoreError;
use crate::query::time::{civil_from_days, days_from_civil};
use crate::schema::{ColumnType, DAY_US, HOUR_US, Tier};
use crate::schema::{
    EXPORTER_STATS_COLUMNS, FLOW_COLUMNS, HOSTS_COLUMNS, IF_COUNTERS_COLUMNS, INTERFACE_COLUMNS,
    PLACES_COLUMNS, PORTS_COLUMNS, ROLLUP_COLUMNS,
};

/// One table of the store.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Table {
    /// The flows ([`FLOW_COLUMNS`]).
    Flows,
    /// Traffic per bucket, exporter, domain and protocol ([`ROLLUP_COLUMNS`]).
    Rollup(Tier),
    /// The top hosts per bucket ([`HOSTS_COLUMNS`]).
    Hosts(Tier),
    /// Every port of each side per hour ([`PORTS_COLUMNS`]).
    Ports,
    /// Every AS, country and network of each side per hour ([`PLACES_COLUMNS`]).
    Places,
    /// Interface names ([`INTERFACE_COLUMNS`]).
    Interfaces,
    /// Per-exporter counters ([`EXPORTER_STATS_COLUMNS`]).
    ExporterStats,
    /// Interface counters from sFlow counter samples ([`IF_COUNTERS_COLUMNS`]).
    IfCounters,
}

/// How a table's directory is split.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Span {
    /// `date=YYYY-MM-DD/hour=HH`.
    Hour,
    /// `date=YYYY-MM-DD`.
    Day,
}

impl Span {
    /// The length of one partition, µs.
    pub const fn us(self) -> i64 {
        match self {
            Span::Hour => HOUR_US,
            Span::Day => DAY_US,
        }
    }
}

impl Table {
    /// Every table, flows first.
    pub const ALL: [Table; 12] = [
        Table::Flows,
        Table::Rollup(Tier::Minute),
        Table::Rollup(Tier::FiveMinutes),
        Table::Rollup(Tier::Hour),
        Table::Hosts(Tier::Minute),
        Table::Hosts(Tier::FiveMinutes),
        Table::Hosts(Tier::Hour),
        Table::Ports,
        Table::Places,
        Table::Interfaces,
        Table::ExporterStats,
        Table::IfCounters,
    ];

    /// Its directory's name under the store directory.
    pub const fn dir_name(self) -> &'static str {
        match self {
            Table::Flows => "flows",
            Table::Rollup(Tier::Minute) => "rollup_1m",
            Table::Rollup(Tier::FiveMinutes) => "rollup_5m",
            Table::Rollup(Tier::Hour) => "rollup_1h",
            Table::Hosts(Tier::Minute) => "hosts_1m",
            Table::Hosts(Tier::FiveMinutes) => "hosts_5m",
            Table::Hosts(Tier::Hour) => "hosts_1h",
            Table::Ports => "ports_1h",
            Table::Places => "places_1h",
            Table::Interfaces => "interfaces",
            Table::ExporterStats => "exporter_stats",
            Table::IfCounters => "if_counters",
        }
    }

    /// Its columns; the first is the time it is partitioned and sorted by.
    pub const fn columns(self) -> &'static [(&'static str, ColumnType)] {
        match self {
            Table::Flows => FLOW_COLUMNS,
            Table::Rollup(_) => ROLLUP_COLUMNS,
            Table::Hosts(_) => HOSTS_COLUMNS,
            Table::Ports => PORTS_COLUMNS,
            Table::Places => PLACES_COLUMNS,
            Table::Interfaces => INTERFACE_COLUMNS,
            Table::ExporterStats => EXPORTER_STATS_COLUMNS,
            Table::IfCounters => IF_COUNTERS_COLUMNS,
        }
    }

    /// How its directory is split.
    pub const fn span(self) -> Span {
        match self {
            Table::Flows
            | Table::Rollup(Tier::Minute | Tier::FiveMinutes)
            | Table::Hosts(Tier::Minute | Tier::FiveMinutes) => Span::Hour,
            Table::Rollup(Tier::Hour)
            | Table::Hosts(Tier::Hour)
            | Table::Ports
            | Table::Places
            | Table::Interfaces
            | Table::ExporterStats
            | Table::IfCounters => Span::Day,
        }
    }
}

/// One partition directory of a table.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Partition {
    /// The first µs (since 1970 UTC) of the hour or day it holds.
    pub start_us: i64,
    /// The first µs past it.
    pub end_us: i64,
    /// Its directory.
    pub path: PathBuf,
}

/// The start of the partition of `table` that holds time `t_us`.
pub fn partition_start(table: Table, t_us: i64) -> i64 {
    t_us.div_euclid(table.span().us()) * table.span().us()
}

/// The directory of the partition of `table` that holds time `t_us`.
pub fn partition_dir(dir: &Path, table: Table, t_us: i64) -> PathBuf {
    let days = t_us.div_euclid(DAY_US);
    let (y, m, d) = civil_from_days(days);
    let mut p = dir
        .join(table.dir_name())
        .join(format!("date={y:04}-{m:02}-{d:02}"));
    if table.span() == Span::Hour {
        let hour = t_us.rem_euclid(DAY_US) / HOUR_US;
        p.push(format!("hour={hour:02}"));
    }
    p
}

/// The partitions of `table` present under `dir`, oldest first. Directories that are not
/// partitions are skipped; a table not created yet has none.
pub fn partitions(dir: &Path, table: Table) -> Result<Vec<Partition>, StoreError> {
    let root = dir.join(table.dir_name());
    let mut out = Vec::new();
    for date_dir in list_dir(&root)? {
        let Some(days) = date_dir
            .file_name()
            .and_then(|n| n.to_str())
            .and_then(|n| n.strip_prefix("date="))
            .and_then(parse_date)
        else {
            continue;
        };
        let day_us = days * DAY_US;
        match table.span() {
            Span::Day => out.push(Partition {
                start_us: day_us,
                end_us: day_us + DAY_US,
                path: date_dir,
            }),
            Span::Hour => {
                for hour_dir in list_dir(&date_dir)? {
                    let Some(hour) = hour_dir
                        .file_name()
                        .and_then(|n| n.to_str())
                        .and_then(|n| n.strip_prefix("hour="))
                        .filter(|h| h.len() == 2)
                        .and_then(|h| h.parse::<i64>().ok())
                        .filter(|h| (0..24).contains(h))
                    else {
                        continue;
                    };
                    let start_us = day_us + hour * HOUR_US;
                    out.push(Partition {
                        start_us,
                        end_us: start_us + HOUR_US,
                        path: hour_dir,
                    });
                }
            }
        }
    }
    out.sort_by_key(|p| p.start_us);
    Ok(out)
}

/// The prefix of the names of files merged from others, or written at the store's zstd level
/// when it closes ([`crate::parquet::compaction`]).
pub const MERGED_PREFIX: &str = "m-";

/// The prefix of the names of files a flush writes at the fast zstd level, to be merged or
/// rewritten ([`crate::parquet::compaction`]).
pub const FRESH_PREFIX: &str = "w-";

/// The key-value metadata key of a merged file naming the files it replaces (comma-separated
/// names in the same partition).
pub const REPLACES: &str = "tapflow.replaces";

/// The complete files (`*.parquet`, never a `.part`) of one partition, sorted by name, without
/// the files a merged file there replaces (they exist only for the moment between the merged
/// file's rename and their removal, or after a crash in that moment): each row is read once.
pub fn files(partition: &Path) -> Result<Vec<PathBuf>, StoreError> {
    let mut out = all_files(partition)?;
    if out.len() < 2 {
        return Ok(out);
    }
    let mut replaced = std::collections::HashSet::new();
    let mut gone = Vec::new();
    for f in &out {
        let merged = f
            .file_name()
            .and_then(|n| n.to_str())
            .is_some_and(|n| n.starts_with(MERGED_PREFIX));
        if merged {
            match crate::parquet::reader::metadata_value(f, REPLACES) {
                Ok(Some(list)) => replaced.extend(list.split(',').map(str::to_owned)),
                Ok(None) => {}
                // Removed by a compaction since the listing: its rows are in a newer file.
                Err(StoreError::Io { source, .. })
                    if source.kind() == std::io::ErrorKind::NotFound => {}
                // Moved into quarantine: the files it replaced are read instead.
                Err(StoreError::Damaged { .. }) => gone.push(f.clone()),
                Err(e) => return Err(e),
            }
        }
    }
    out.retain(|f| {
        !gone.contains(f)
            && f.file_name()
                .and_then(|n| n.to_str())
                .is_none_or(|n| !replaced.contains(n))
    });
    Ok(out)
}

/// Every complete file of one partition, sorted by name.
pub fn all_files(partition: &Path) -> Result<Vec<PathBuf>, StoreError> {
    let mut out: Vec<PathBuf> = list_dir(partition)?
        .into_iter()
        .filter(|p| p.extension().is_some_and(|e| e == "parquet"))
        .collect();
    out.sort();
    Ok(out)
}

/// The complete files of `table` whose partitions overlap the time range `[from_us, to_us)`,
/// oldest partition first. Rows in them may still lie outside the range: a reader filters rows
/// (or row groups, by their statistics on the first column).
pub fn files_between(
    dir: &Path,
    table: Table,
    from_us: i64,
    to_us: i64,
) -> Result<Vec<PathBuf>, StoreError> {
    let mut out = Vec::new();
    for p in partitions(dir, table)? {
        if p.end_us > from_us && p.start_us < to_us {
            out.extend(files(&p.path)?);
        }
    }
    Ok(out)
}

/// The entries of `dir`, or none if it does not exist.
fn list_dir(dir: &Path) -> Result<Vec<PathBuf>, StoreError> {
    let rd = match std::fs::read_dir(dir) {
        Ok(rd) => rd,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(source) => {
            return Err(StoreError::Io {
                what: "read directory",
                path: dir.to_path_buf(),
                source,
            });
        }
    };
    let mut out = Vec::new();
    for e in rd {
        let e = e.map_err(|source| StoreError::Io {
            what: "read directory",
            path: dir.to_path_buf(),
            source,
        })?;
        out.push(e.path());
    }
    Ok(out)
}

/// `YYYY-MM-DD` as days since 1970-01-01.
fn parse_date(s: &str) -> Option<i64> {
    let b = s.as_bytes();
    if b.len() != 10 || b[4] != b'-' || b[7] != b'-' {
        return None;
    }
    let y: i64 = s[..4].parse().ok()?;
    let m: u32 = s[5..7].parse().ok()?;
    let d: u32 = s[8..].parse().ok()?;
    if !(1..=12).contains(&m) || d == 0 || d > 31 {
        return None;
    }
    let days = days_from_civil(y, m, d);
    (civil_from_days(days) == (y, m, d)).then_some(days)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dates_round_trip() {
        assert_eq!(civil_from_days(0), (1970, 1, 1));
        assert_eq!(days_from_civil(2000, 3, 1), 11_017);
        assert_eq!(civil_from_days(days_from_civil(2024, 2, 29)), (2024, 2, 29));
        for z in (-800_000..800_000).step_by(997) {
            let (y, m, d) = civil_from_days(z);
            assert_eq!(days_from_civil(y, m, d), z);
        }
        assert_eq!(parse_date("2023-02-29"), None);
        assert_eq!(parse_date("2024-02-29"), Some(days_from_civil(2024, 2, 29)));
    }

    #[test]
    fn partitions_by_hour_and_day() {
        // 2026-11-25T10:59:59.999999Z and the next microsecond.
        let t = days_from_civil(2026, 11, 25) * DAY_US + 11 * HOUR_US - 1;
        let d = Path::new("/s");
        assert_eq!(
            partition_dir(d, Table::Flows, t),
            Path::new("/s/flows/date=2026-11-25/hour=10")
        );
        assert_eq!(
            partition_dir(d, Table::Flows, t + 1),
            Path::new("/s/flows/date=2026-11-25/hour=11")
        );
        assert_eq!(
            partition_dir(d, Table::Rollup(Tier::Hour), t),
            Path::new("/s/rollup_1h/date=2026-11-25")
        );
        assert_eq!(partition_start(Table::Flows, t + 1), t + 1);
        assert_eq!(partition_start(Table::Flows, t), t + 1 - HOUR_US);
    }

    #[test]
    fn lists_partitions_and_complete_files_in_a_window() {
        let dir = tempfile::tempdir().unwrap();
        let h10 = days_from_civil(2026, 11, 25) * DAY_US + 10 * HOUR_US;
        for (t, name) in [
            (h10, "a.parquet"),
            (h10, "b.parquet.part"),
            (h10 + HOUR_US, "c.parquet"),
            (h10 + 14 * HOUR_US, "d.parquet"),
        ] {
            let p = partition_dir(dir.path(), Table::Flows, t);
            std::fs::create_dir_all(&p).unwrap();
            std::fs::write(p.join(name), b"").unwrap();
        }
        std::fs::create_dir_all(dir.path().join("flows/notapartition")).unwrap();
        let names = |v: Vec<PathBuf>| -> Vec<String> {
            v.iter()
                .map(|p| p.file_name().unwrap().to_str().unwrap().to_owned())
                .collect()
        };
        let all = files_between(dir.path(), Table::Flows, i64::MIN, i64::MAX).unwrap();
        assert_eq!(names(all), ["a.parquet", "c.parquet", "d.parquet"]);
        let w = files_between(
            dir.path(),
            Table::Flows,
            h10 + HOUR_US - 1,
            h10 + HOUR_US + 1,
        );
        assert_eq!(names(w.unwrap()), ["a.parquet", "c.parquet"]);
        let parts = partitions(dir.path(), Table::Flows).unwrap();
        assert_eq!(parts.len(), 3);
        assert_eq!(parts[2].start_us, h10 + 14 * HOUR_US);
        assert!(
            partitions(dir.path(), Table::Interfaces)
                .unwrap()
                .is_empty()
        );
    }
}
