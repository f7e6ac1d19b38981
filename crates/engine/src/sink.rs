//! Record sinks: where a worker's batches of header records go (files, collectors, ...), and
//! the output thread that feeds them. A new output is one new `RecordSink`.

use std::path::PathBuf;

use crate::EngineError;
use crate::batch::{Batch, Consumer, Message};
use crate::counters::Totals;
use crate::source::InterfaceInfo;

/// A consumer of batches of header records. Runs on its worker's output thread.
pub trait RecordSink: Send + std::fmt::Debug {
    /// A new interface; its index is the number of interfaces announced before it.
    fn add_interface(&mut self, info: &InterfaceInfo) -> Result<(), EngineError>;

    /// Records to handle. The batch goes back to the worker afterwards.
    fn write_batch(&mut self, b: &Batch) -> Result<(), EngineError>;

    /// The worker has drained; `totals` are its final counts. Finish everything.
    fn close(&mut self, totals: &Totals) -> Result<SinkReport, EngineError>;
}

/// What a sink did.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct SinkReport {
    /// Files completed, in order.
    pub files: Vec<PathBuf>,
    /// Records the sink handled.
    pub records: u64,
    /// Records the sink could not deliver (counted, never retried).
    pub failed: u64,
    /// What a forwarding sink sent, per collector.
    pub forward: Option<crate::forward::ForwardReport>,
}

/// What an output thread did.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct OutputReport {
    /// Records received from the worker.
    pub records: u64,
    /// Each sink's report, in order.
    pub sinks: Vec<SinkReport>,
    /// The worker's final totals.
    pub totals: Totals,
}

/// Feeds every batch of a worker to each sink until the worker closes the pipe.
///
/// On a sink error the thread stops; the worker then finds the queue full and counts its drops.
pub fn run(
    consumer: Consumer,
    mut sinks: Vec<Box<dyn RecordSink>>,
) -> Result<OutputReport, EngineError> {
    let mut report = OutputReport::default();
    while let Some(m) = consumer.recv() {
        match m {
            Message::Interface(info) => {
                for s in sinks.iter_mut() {
                    s.add_interface(&info)?;
                }
            }
            Message::Batch(b) => {
                report.records += u64::from(b.count);
                let r = sinks.iter_mut().try_for_each(|s| s.write_batch(&b));
                consumer.recycle(b);
                r?;
            }
            Message::Close(totals) => {
                close(&mut sinks, totals, &mut report)?;
                return Ok(report);
            }
        }
    }
    // The worker vanished without closing (it panicked): keep what was written.
    let totals = report.totals;
    close(&mut sinks, totals, &mut report)?;
    Ok(report)
}

/// Closes every sink with the worker's final totals.
fn close(
    sinks: &mut [Box<dyn RecordSink>],
    totals: Totals,
    report: &mut OutputReport,
) -> Result<(), EngineError> {
    report.totals = totals;
    for s in sinks.iter_mut() {
        report.sinks.push(s.close(&totals)?);
    }
    Ok(())
}
