//! Record sinks: where a worker's header records go (files, collectors, flow meters). A worker
//! calls its sinks directly, one record at a time, in its own thread: no queue, no copy in
//! between. A sink that must wait for a device or a network does that in a thread of its own.
//!
//! A new output is one new file that implements [`record_sink::RecordSink`], and one line in
//! [`registry`].

pub mod file;
pub mod flow;
pub mod forward;
pub mod record_sink;
pub mod registry;
pub mod text;
