//! tapflow's engine: packet sources, the worker pipeline, record sinks, counters and the
//! traffic generator.
//!
//! One worker owns one source and everything it feeds. Workers copy header records into
//! [`batch::Batch`]es and hand them to a single-writer thread through a bounded queue; a full
//! queue is a counted drop, never a block on the capture path.
#![forbid(unsafe_code)]

pub mod batch;
pub mod capture;
pub mod counters;
pub mod error;
pub mod file_source;
pub mod forward;
pub mod generator;
pub mod live_source;
pub mod naming;
pub mod receiver;
pub mod record_builder;
pub mod sink;
pub mod source;
pub mod worker;
pub mod writer;

pub use error::EngineError;
