//! Errors at the engine's boundaries: each names what failed and where.

use std::path::PathBuf;

/// An error that stops a capture, a replay or the generator.
#[derive(Debug, thiserror::Error)]
pub enum EngineError {
    /// A Linux call failed (ring setup, filter, ...).
    #[error(transparent)]
    Sys(#[from] tapflow_sys::SysError),
    /// A capture file is damaged or not a capture file.
    #[error("{path}: {source}")]
    File {
        /// The file being read.
        path: PathBuf,
        /// What is wrong and at which byte offset.
        source: tapflow_wire::capfile::FileError,
    },
    /// A capture file is damaged after `packet - 1` good packets: they were read, and went
    /// through the run like any others.
    #[error("{path}: packet {packet}: {source} (the {} packets before it were read)", .packet - 1)]
    Damaged {
        /// The file being read.
        path: PathBuf,
        /// The number of the packet at fault, from 1.
        packet: u64,
        /// What is wrong and at which byte offset.
        source: tapflow_wire::capfile::FileError,
    },
    /// Writing an output file failed.
    #[error("cannot write {path}: {source}")]
    Write {
        /// The file being written.
        path: PathBuf,
        /// The OS error.
        source: std::io::Error,
    },
    /// An output's `.part` file is there already: a run stopped by force (SIGKILL, a power
    /// cut) left it, with the packets written until then.
    #[error(
        "{} exists: a run that was stopped by force left it, with the packets written until \
         then (tshark reads it); rename or remove it, then start again",
        .0.display()
    )]
    StalePart(PathBuf),
    /// A flow export output could not be parsed, opened or started.
    #[error(transparent)]
    Export(#[from] crate::sink::flow::export::ExportError),
    /// A stop (SIGINT, SIGTERM) came before the first packet was taken, while set-up was
    /// still under way.
    #[error("stopped before the first packet: {0}")]
    Stopped(&'static str),
    /// The requested output cannot hold this input.
    #[error("{0}")]
    Unsupported(String),
    /// A setting is out of range.
    #[error("{0}")]
    Config(String),
    /// The control socket failed, or refused a request.
    #[error("{0}")]
    Control(String),
}
