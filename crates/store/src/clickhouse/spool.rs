//! The batches waiting for the server, in order: the first ones in memory, the rest (when a spool
//! directory is given) in files `SEQ-TABLE-ROWS.rowbinary` under it, written as `.part` and
//! renamed. A batch that fits neither is dropped and counted. Files left by an earlier run are
//! taken up again, first, at start.

use std::collections::VecDeque;
use std::io::Write;
use std::path::{Path, PathBuf};

use crate::StoreError;

/// The table a batch goes into.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Table {
    /// `flows`: its rows are the flows the store accounts for.
    Flows,
    /// `interfaces`.
    Interfaces,
    /// `exporter_stats`.
    ExporterStats,
    /// `if_counters`.
    IfCounters,
}

impl Table {
    fn name(self) -> &'static str {
        match self {
            Table::Flows => "flows",
            Table::Interfaces => "interfaces",
            Table::ExporterStats => "exporter_stats",
            Table::IfCounters => "if_counters",
        }
    }

    fn from_name(s: &str) -> Option<Table> {
        [
            Table::Flows,
            Table::Interfaces,
            Table::ExporterStats,
            Table::IfCounters,
        ]
        .into_iter()
        .find(|t| t.name() == s)
    }
}

/// Rows of one table in RowBinary.
#[derive(Debug)]
pub struct Batch {
    /// Where they go.
    pub table: Table,
    /// How many rows `data` holds.
    pub rows: u64,
    /// The rows.
    pub data: Vec<u8>,
}

/// Where a queued batch is held.
#[derive(Debug)]
enum Held {
    Memory(Vec<u8>),
    Disk(PathBuf),
}

/// A queued batch.
#[derive(Debug)]
pub struct Entry {
    /// Where it goes.
    pub table: Table,
    /// Its rows.
    pub rows: u64,
    /// Whether an earlier run received it (its rows are not in this run's counts).
    pub resumed: bool,
    seq: u64,
    len: u64,
    held: Held,
}

impl Entry {
    /// The rows' bytes (read from the file for a spooled batch).
    pub fn data(&self) -> Result<std::borrow::Cow<'_, [u8]>, StoreError> {
        match &self.held {
            Held::Memory(d) => Ok(d.into()),
            Held::Disk(p) => std::fs::read(p)
                .map(Into::into)
                .map_err(|e| StoreError::Io {
                    what: "read",
                    path: p.clone(),
                    source: e,
                }),
        }
    }
}

/// The queue.
#[derive(Debug)]
pub struct Spool {
    dir: Option<PathBuf>,
    disk_limit: u64,
    memory_limit: u64,
    entries: VecDeque<Entry>,
    /// Batches taken out to be sent and not yet done or put back.
    taken: usize,
    memory_bytes: u64,
    disk_bytes: u64,
    next_seq: u64,
}

impl Spool {
    /// A queue keeping up to `memory_limit` bytes in memory and, with `dir`, `disk_limit` bytes
    /// in files there; batches left in `dir` by an earlier run come first.
    pub fn open(
        dir: Option<&Path>,
        disk_limit: u64,
        memory_limit: u64,
    ) -> Result<Spool, StoreError> {
        let mut spool = Spool {
            dir: dir.map(Path::to_path_buf),
            disk_limit,
            memory_limit,
            entries: VecDeque::new(),
            taken: 0,
            memory_bytes: 0,
            disk_bytes: 0,
            next_seq: 0,
        };
        let Some(dir) = dir else { return Ok(spool) };
        let io = |what, path: &Path| {
            let path = path.to_path_buf();
            move |source| StoreError::Io { what, path, source }
        };
        std::fs::create_dir_all(dir).map_err(io("create", dir))?;
        let mut found = Vec::new();
        for e in std::fs::read_dir(dir).map_err(io("read", dir))? {
            let path = e.map_err(io("read", dir))?.path();
            let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("");
            if name.ends_with(".rowbinary.part") {
                // A batch being written when an earlier run ended: never acknowledged, never
                // counted as pending by that run.
                std::fs::remove_file(&path).map_err(io("remove", &path))?;
                continue;
            }
            let Some(stem) = name.strip_suffix(".rowbinary") else {
                continue;
            };
            let mut parts = stem.splitn(3, '-');
            let (Some(seq), Some(table), Some(rows)) = (parts.next(), parts.next(), parts.next())
            else {
                continue;
            };
            let (Ok(seq), Some(table), Ok(rows)) = (
                u64::from_str_radix(seq, 16),
                Table::from_name(table),
                rows.parse(),
            ) else {
                continue;
            };
            let len = std::fs::metadata(&path).map_err(io("stat", &path))?.len();
            found.push(Entry {
                table,
                rows,
                resumed: true,
                seq,
                len,
                held: Held::Disk(path),
            });
        }
        found.sort_by_key(|e| e.seq);
        spool.next_seq = found.last().map_or(0, |e| e.seq + 1);
        for e in found {
            spool.disk_bytes += e.len;
            spool.entries.push_back(e);
        }
        Ok(spool)
    }

    /// Queues `batch`; returns it back if it fits nowhere (the caller counts the drop).
    pub fn push(&mut self, batch: Batch) -> Result<Option<Batch>, StoreError> {
        let len = batch.data.len() as u64;
        let seq = self.next_seq;
        let held = if self.memory_bytes + len <= self.memory_limit {
            self.memory_bytes += len;
            Held::Memory(batch.data)
        } else if let Some(path) = self.write(&batch, seq)? {
            self.disk_bytes += len;
            Held::Disk(path)
        } else {
            return Ok(Some(batch));
        };
        self.next_seq += 1;
        self.entries.push_back(Entry {
            table: batch.table,
            rows: batch.rows,
            resumed: false,
            seq,
            len,
            held,
        });
        Ok(None)
    }

    /// Writes `batch` as number `seq` to a new file in the directory, if there is one and room
    /// in it.
    fn write(&self, batch: &Batch, seq: u64) -> Result<Option<PathBuf>, StoreError> {
        let Some(dir) = &self.dir else {
            return Ok(None);
        };
        if self.disk_bytes + batch.data.len() as u64 > self.disk_limit {
            return Ok(None);
        }
        let name = format!("{seq:016x}-{}-{}.rowbinary", batch.table.name(), batch.rows);
        let path = dir.join(&name);
        let part = dir.join(format!("{name}.part"));
        let err = |what, source| StoreError::Io {
            what,
            path: part.clone(),
            source,
        };
        let mut f = tapflow_sys::outfile::create_new(&part, 0).map_err(|e| err("create", e))?;
        f.write_all(&batch.data).map_err(|e| err("write", e))?;
        f.sync_data().map_err(|e| err("sync", e))?;
        std::fs::rename(&part, &path).map_err(|e| err("rename", e))?;
        Ok(Some(path))
    }

    /// Takes the oldest batch out to send it; it still counts against the limits until
    /// [`Spool::done`] or [`Spool::put_back`].
    pub fn take_front(&mut self) -> Option<Entry> {
        let e = self.entries.pop_front();
        self.taken += usize::from(e.is_some());
        e
    }

    /// The batch taken is in the server: forgets it (removing its file).
    pub fn done(&mut self, e: Entry) -> Result<(), StoreError> {
        self.taken -= 1;
        match e.held {
            Held::Memory(_) => self.memory_bytes -= e.len,
            Held::Disk(path) => {
                self.disk_bytes -= e.len;
                std::fs::remove_file(&path).map_err(|source| StoreError::Io {
                    what: "remove",
                    path,
                    source,
                })?;
            }
        }
        Ok(())
    }

    /// The batch taken was not sent: it is the oldest again.
    pub fn put_back(&mut self, e: Entry) {
        self.taken -= 1;
        self.entries.push_front(e);
    }

    /// At the end of a run: writes the batches held in memory to files under their own
    /// numbers, so the order stays, and returns the rows of this run's flows left pending on disk
    /// and the batches that did not fit (to be counted as dropped).
    pub fn persist(&mut self) -> Result<(u64, Vec<Entry>), StoreError> {
        let mut dropped = Vec::new();
        let mut kept = VecDeque::new();
        while let Some(mut e) = self.entries.pop_front() {
            if let Held::Memory(data) = e.held {
                self.memory_bytes -= e.len;
                let batch = Batch {
                    table: e.table,
                    rows: e.rows,
                    data,
                };
                match self.write(&batch, e.seq)? {
                    Some(path) => {
                        self.disk_bytes += e.len;
                        e.held = Held::Disk(path);
                    }
                    None => {
                        e.held = Held::Memory(Vec::new());
                        dropped.push(e);
                        continue;
                    }
                }
            }
            kept.push_back(e);
        }
        self.entries = kept;
        let pending = self
            .entries
            .iter()
            .filter(|e| e.table == Table::Flows && !e.resumed)
            .map(|e| e.rows)
            .sum();
        Ok((pending, dropped))
    }

    /// Whether nothing waits and no batch is out being sent (one that fails comes back).
    pub fn is_idle(&self) -> bool {
        self.entries.is_empty() && self.taken == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn batch(table: Table, rows: u64) -> Batch {
        Batch {
            table,
            rows,
            data: vec![rows as u8; rows as usize],
        }
    }

    #[test]
    fn batches_keep_their_order_across_memory_disk_and_runs() {
        let dir = tempfile::tempdir().unwrap();
        let mut s = Spool::open(Some(dir.path()), 24, 10).unwrap();
        // 10 bytes fit in memory, then 24 on disk; the rest is refused.
        assert!(s.push(batch(Table::Flows, 6)).unwrap().is_none());
        assert!(s.push(batch(Table::Interfaces, 4)).unwrap().is_none());
        assert!(s.push(batch(Table::Flows, 7)).unwrap().is_none());
        assert!(s.push(batch(Table::Flows, 8)).unwrap().is_none());
        assert_eq!(s.push(batch(Table::Flows, 11)).unwrap().unwrap().rows, 11);
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 2);
        // The oldest is taken, fails, comes back first; the run ends. While one is out being
        // sent, the spool is not idle even if nothing else waits.
        let first = s.take_front().unwrap();
        assert!(!s.is_idle());
        s.put_back(first);
        // At the end the memory batches go to disk in their places while they fit: the 6-row one
        // (15 + 6 bytes), not the 4-row one (25 > 24), which is dropped.
        let (pending, dropped) = s.persist().unwrap();
        assert_eq!(pending, 6 + 7 + 8);
        assert_eq!(
            dropped
                .iter()
                .map(|e| (e.table, e.rows))
                .collect::<Vec<_>>(),
            [(Table::Interfaces, 4)]
        );
        std::fs::write(
            dir.path().join("0000000000000009-flows-3.rowbinary.part"),
            b"xyz",
        )
        .unwrap();

        let mut next = Spool::open(Some(dir.path()), 24, 10).unwrap();
        let mut order = Vec::new();
        while let Some(e) = next.take_front() {
            assert!(e.resumed);
            assert_eq!(
                e.data().unwrap().as_ref(),
                vec![e.rows as u8; e.rows as usize].as_slice()
            );
            order.push(e.rows);
            next.done(e).unwrap();
        }
        assert_eq!(order, [6, 7, 8]);
        assert!(next.is_idle());
        assert_eq!(
            std::fs::read_dir(dir.path()).unwrap().count(),
            0,
            "files removed, .part too"
        );
        // Numbering goes on after the files found.
        assert!(next.push(batch(Table::Flows, 20)).unwrap().is_none());
    }
}
