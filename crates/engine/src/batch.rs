//! Batches: header records packed back to back, as the paper gathers headers into one buffer.
//!
//! A batch holds records of one interface; loss is only ever reported before a batch's first
//! record, so a worker starts a new batch where it learns of a drop. Buffers circulate between a
//! worker and its output thread through two bounded queues and are never freed on the packet
//! path.

use std::sync::mpsc::{Receiver, SyncSender, sync_channel};

use tapflow_wire::record;

use crate::counters::Totals;

/// Records from one worker, for one interface.
#[derive(Debug)]
pub struct Batch {
    /// Index of the interface the records came from.
    pub interface: u32,
    /// Packets lost just before the first record (kernel, tapflow's queue, or noted upstream
    /// in an input file): the place of the loss in the trace.
    pub drops_before: u64,
    /// Number of records.
    pub count: u32,
    /// The worker's totals when the batch was sent (for interface statistics blocks).
    pub totals: Totals,
    /// Interface-level (received, dropped) counters when the batch was sent, if known.
    pub if_stats: Option<(u64, u64)>,
    /// The records (see `tapflow_wire::record`).
    pub records: Vec<u8>,
}

impl Batch {
    /// An empty batch able to hold `capacity` bytes of records.
    pub fn with_capacity(capacity: usize) -> Batch {
        Batch {
            interface: 0,
            drops_before: 0,
            count: 0,
            totals: Totals::default(),
            if_stats: None,
            records: Vec::with_capacity(capacity),
        }
    }

    /// Empties the batch, keeping its buffer.
    pub fn clear(&mut self) {
        self.interface = 0;
        self.drops_before = 0;
        self.count = 0;
        self.records.clear();
    }

    /// Whether a record of `caplen` bytes still fits without growing the buffer.
    #[inline]
    pub fn fits(&self, caplen: usize) -> bool {
        self.records.len() + record::record_len(caplen) <= self.records.capacity()
    }
}

/// What a worker sends to its writer.
#[derive(Debug)]
pub enum Message {
    /// A new interface; its index is the number of interfaces announced before it.
    Interface(crate::source::InterfaceInfo),
    /// Records to write.
    Batch(Batch),
    /// The worker has drained; these are its final totals.
    Close(Totals),
}

/// The worker's end of the pipe.
#[derive(Debug)]
pub struct Producer {
    full: SyncSender<Message>,
    empty: Receiver<Batch>,
    capacity: usize,
    spare: usize,
}

/// The writer's end of the pipe.
#[derive(Debug)]
pub struct Consumer {
    full: Receiver<Message>,
    empty: SyncSender<Batch>,
}

/// Makes a pipe holding up to `depth` batches of `capacity` bytes each in flight.
pub fn pipe(depth: usize, capacity: usize) -> (Producer, Consumer) {
    let (full_tx, full_rx) = sync_channel(depth);
    let (empty_tx, empty_rx) = sync_channel(depth + 2);
    (
        Producer {
            full: full_tx,
            empty: empty_rx,
            capacity,
            spare: depth + 2,
        },
        Consumer {
            full: full_rx,
            empty: empty_tx,
        },
    )
}

impl Producer {
    /// An empty batch: a recycled one if the writer returned any, else a new one while fewer
    /// than `depth + 2` exist; `None` if all are in flight.
    pub fn take(&mut self) -> Option<Batch> {
        if let Ok(b) = self.empty.try_recv() {
            return Some(b);
        }
        if self.spare > 0 {
            self.spare -= 1;
            return Some(Batch::with_capacity(self.capacity));
        }
        None
    }

    /// An empty batch, waiting for the writer to return one if all are in flight (for inputs
    /// that can wait, like files). `None` if the writer is gone.
    pub fn take_waiting(&mut self) -> Option<Batch> {
        if let Some(b) = self.take() {
            return Some(b);
        }
        self.empty.recv().ok()
    }

    /// Hands a full batch to the writer, waiting for queue space. The batch comes back if the
    /// writer is gone.
    pub fn send_waiting(&mut self, b: Batch) -> Result<(), Batch> {
        match self.full.send(Message::Batch(b)) {
            Ok(()) => Ok(()),
            Err(std::sync::mpsc::SendError(Message::Batch(b))) => Err(b),
            Err(_) => unreachable!("only batches are sent here"),
        }
    }

    /// Tells the writer the worker is done, waiting for queue space.
    pub fn close(&self, totals: Totals) {
        self.send_control(Message::Close(totals));
    }

    /// Tells the writer about a new interface (waits for queue space: this is not per packet).
    pub fn announce(&self, info: crate::source::InterfaceInfo) {
        self.send_control(Message::Interface(info));
    }

    /// Sends a control message, waiting for queue space; a writer that is gone has already
    /// reported its own error.
    pub(crate) fn send_control(&self, m: Message) {
        let _ = self.full.send(m);
    }
}

impl Consumer {
    /// The next message, waiting for it; `None` if the worker is gone.
    pub fn recv(&self) -> Option<Message> {
        self.full.recv().ok()
    }

    /// Gives a written batch back to the worker.
    pub fn recycle(&self, mut b: Batch) {
        b.clear();
        let _ = self.empty.try_send(b);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buffers_are_bounded_recycled_and_returned_when_the_writer_is_gone() {
        let (mut p, c) = pipe(1, 64);
        let a = p.take().unwrap();
        let _b = p.take().unwrap();
        let _c = p.take().unwrap();
        assert!(p.take().is_none(), "depth + 2 buffers at most");
        assert!(p.send_waiting(a).is_ok());
        match c.recv() {
            Some(Message::Batch(x)) => c.recycle(x),
            other => panic!("expected a batch, got {other:?}"),
        }
        let again = p.take_waiting().expect("the recycled buffer");
        assert_eq!(again.records.capacity(), 64);
        drop(c);
        let back = p.send_waiting(again).unwrap_err();
        assert_eq!(back.records.capacity(), 64);
    }

    #[test]
    fn fits_accounts_for_padding() {
        let b = Batch::with_capacity(32);
        assert!(b.fits(16));
        assert!(!b.fits(17));
    }
}
