//! tapflow's engine: packet sources, the worker pipeline, record sinks, counters and the
//! traffic generator.
//!
//! One worker owns one source and everything it feeds: it builds each packet's header record
//! (the control field plus the first caplen bytes) and hands it to its sinks in one pass. Loss
//! happens in one place, the kernel ring, where it is counted exactly.
#![forbid(unsafe_code)]

pub mod collector;
pub mod compress;
pub mod control;
pub mod counters;
pub mod detect;
pub mod enrich;
pub mod error;
pub mod metrics;
pub mod naming;
pub mod pipeline;
pub mod probe;
pub mod record_builder;
pub mod rules;
mod server;
pub mod sink;
pub mod source;
pub mod stop;
pub mod tools;
pub mod traffic;
pub mod worker;

pub use error::EngineError;
