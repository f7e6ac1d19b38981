//! tapflow's flow store: the one flow schema, the stores that keep flows (Parquet partitions on
//! one machine, a ClickHouse cluster past it) and the query engine that reads them back.
//!
//! It knows nothing of packets: the collector and the flow meter hand it [`StoredFlow`]s through
//! the [`FlowStore`] trait.
#![forbid(unsafe_code)]

pub mod alerts;
pub mod anonymized;
pub mod clickhouse;
pub mod import;
#[cfg(test)]
mod in_child;
pub mod names;
pub mod open;
pub mod parquet;
pub mod query;
pub mod rewritten;
pub mod schema;

pub use self::parquet::damaged::install_panic_hook;
pub use self::parquet::retention::parse_age;
pub use self::parquet::{ParquetOptions, ParquetStore};
pub use schema::{ExporterStats, InterfaceCounters, InterfaceName, Network, Place, StoredFlow};

/// Why a store could not take or keep flows.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// A file or directory operation failed.
    #[error("{what} {path}: {source}")]
    Io {
        /// What was being done ("create", "rename", "write").
        what: &'static str,
        /// The file or directory.
        path: std::path::PathBuf,
        /// The underlying error.
        source: std::io::Error,
    },
    /// A store file that cannot be read: damaged, or not a regular file. The reader that met it
    /// moved it into quarantine ([`damaged`]) and went on without it.
    #[error("store file {path}: {why}")]
    Damaged {
        /// The file, where it was found.
        path: std::path::PathBuf,
        /// What is wrong with it.
        why: String,
    },
    /// Anything else, said in one line.
    #[error("{0}")]
    Other(String),
}

impl StoreError {
    /// Whether the process or the system had no descriptor left (`EMFILE`, `ENFILE`): the
    /// Parquet store keeps the flows of a file it could not create so, to write them later.
    pub fn is_out_of_descriptors(&self) -> bool {
        matches!(self, StoreError::Io { source, .. } if tapflow_sys::rlimit::is_out_of_descriptors(source))
    }

    /// Whether the failure may pass: no descriptor or memory left, a full disk or quota. The
    /// collector tries such a store again.
    pub fn is_transient(&self) -> bool {
        let StoreError::Io { source, .. } = self else {
            return false;
        };
        self.is_out_of_descriptors()
            || matches!(
                source.kind(),
                std::io::ErrorKind::OutOfMemory
                    | std::io::ErrorKind::StorageFull
                    | std::io::ErrorKind::QuotaExceeded
            )
    }
}

/// How many flows a store kept and lost, for the summary and `/metrics`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct StoreReport {
    /// Flows handed to [`FlowStore::insert`].
    pub received: u64,
    /// Flows durably written (in a renamed Parquet file, or acknowledged by the server).
    pub stored: u64,
    /// Flows dropped because the store could not take them (disk full, buffer limit reached).
    pub dropped: u64,
    /// Flows accepted but not yet durable (buffered). `received = stored + dropped + pending`.
    pub pending: u64,
}

/// A place flows are kept: one implementation per back end (Parquet directory, ClickHouse).
///
/// The collector and the flow meter call it once per batch (hundreds to thousands of flows),
/// never per packet. A store batches, sorts and writes on its own schedule; `flush` makes what
/// it holds visible to queries; `close` writes everything and reports.
pub trait FlowStore: Send + std::fmt::Debug {
    /// Takes `flows`. An error here means the store can take no more (its report counts them).
    fn insert(&mut self, flows: &[StoredFlow]) -> Result<(), StoreError>;

    /// Keeps interface names an exporter announced.
    fn insert_interfaces(&mut self, names: &[InterfaceName]) -> Result<(), StoreError>;

    /// Keeps one interval of per-exporter counters.
    fn insert_exporter_stats(&mut self, stats: &[ExporterStats]) -> Result<(), StoreError>;

    /// Keeps interface counters from sFlow counter samples.
    fn insert_if_counters(&mut self, rows: &[InterfaceCounters]) -> Result<(), StoreError>;

    /// Makes everything inserted so far visible to queries (called every flush interval).
    fn flush(&mut self) -> Result<(), StoreError>;

    /// The counts so far.
    fn report(&self) -> StoreReport;

    /// Writes everything still held and returns the final counts.
    fn close(self: Box<Self>) -> Result<StoreReport, StoreError>;
}
