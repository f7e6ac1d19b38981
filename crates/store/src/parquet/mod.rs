//! The Parquet backend, flows on one machine: Hive-style hour partitions of Parquet files under
//! one directory ([`partition`]), written in sorted batches ([`writer`], [`batch`]), rolled up
//! into coarser tiers ([`rollup`]), compacted and aged out ([`compaction`], [`retention`]),
//! damaged files quarantined ([`damaged`]), and its own scan that answers queries ([`scan`],
//! [`tier`]).

pub mod batch;
pub mod compaction;
pub mod damaged;
pub mod partition;
pub mod reader;
pub mod retention;
pub mod rollup;
pub mod scan;
pub mod store;
pub mod tier;
pub mod vector;
pub mod writer;

pub use scan::ParquetEngine;
pub use store::{ParquetOptions, ParquetStore};
