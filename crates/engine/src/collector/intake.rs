//! What every receive worker does with a message: decode it with the worker's own decoder,
//! count it in the worker's book, and batch its flows and new interface names for the store.
//!
//! No allocation, lock or system call per record: flows go into a reused batch, which crosses
//! to the store thread whole (one channel operation per batch) and comes back emptied.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::mpsc::{self, Receiver, Sender, SyncSender};
use std::time::{Duration, Instant};

use tapflow_store::{InterfaceName, StoredFlow};
use tapflow_wire::flowdecode::{Decoded, Decoder, Limits, Protocol};

use crate::collector::ledger::{Book, ExporterKey};

/// Flows per batch handed to the store thread.
pub const BATCH: usize = 4096;
/// The longest a flow waits in a worker's batch before it goes to the store anyway.
pub const BATCH_DELAY: Duration = Duration::from_millis(200);
/// Interface names one worker remembers (to pass on only new or changed ones).
const MAX_NAMES: usize = 65_536;

/// A batch of flows (and interface names) from one worker.
#[derive(Debug)]
pub struct Batch {
    /// The flows.
    pub flows: Vec<StoredFlow>,
    /// New or changed interface names.
    pub interfaces: Vec<InterfaceName>,
    /// Where the emptied flow vector goes back for reuse.
    pub back: Sender<Vec<StoredFlow>>,
}

/// The address as the store keeps it: IPv4 IPv4-mapped.
pub fn exporter_addr(ip: IpAddr) -> [u8; 16] {
    match ip.to_canonical() {
        IpAddr::V4(a) => a.to_ipv6_mapped().octets(),
        IpAddr::V6(a) => a.octets(),
    }
}

/// One worker's decoder, book and batch.
#[derive(Debug)]
pub struct Intake {
    decoder: Decoder,
    /// The worker's counts.
    pub book: Book,
    tx: SyncSender<Batch>,
    back_tx: Sender<Vec<StoredFlow>>,
    back_rx: Receiver<Vec<StoredFlow>>,
    flows: Vec<StoredFlow>,
    interfaces: Vec<InterfaceName>,
    names: HashMap<(ExporterKey, u32), (String, String)>,
    since: Option<Instant>,
}

impl Intake {
    /// An intake sending its batches into `tx`.
    pub fn new(limits: Limits, tx: SyncSender<Batch>) -> Intake {
        let (back_tx, back_rx) = mpsc::channel();
        Intake {
            decoder: Decoder::new(limits),
            book: Book::default(),
            tx,
            back_tx,
            back_rx,
            flows: Vec::with_capacity(BATCH + 1024),
            interfaces: Vec::new(),
            names: HashMap::new(),
            since: None,
        }
    }

    /// Decodes one message from `exporter` received at `now_ns` (ns since 1970) and counts it.
    /// `protocol` is `None` when the message's version names none.
    pub fn take(
        &mut self,
        protocol: Option<Protocol>,
        exporter: [u8; 16],
        msg: &[u8],
        now_ns: u64,
    ) {
        let Some(protocol) = protocol else {
            self.book.bad(exporter, "unknown_version");
            return;
        };
        let Intake {
            decoder,
            flows,
            interfaces,
            names,
            ..
        } = self;
        let r = decoder.decode(protocol, exporter, msg, now_ns, &mut |d| match d {
            Decoded::Flow(f) => flows.push(StoredFlow {
                flow: f.flow,
                egress: f.egress,
                exporter,
                domain: f.domain,
                sampling: f.sampling,
                received_ns: now_ns,
            }),
            Decoded::Interface {
                domain,
                index,
                name,
                description,
            } => {
                let key = (ExporterKey { exporter, domain }, index);
                let known = names
                    .get(&key)
                    .is_some_and(|(n, d)| n == name && d == description);
                if !known && (names.len() < MAX_NAMES || names.contains_key(&key)) {
                    names.insert(key, (name.to_string(), description.to_string()));
                    interfaces.push(InterfaceName {
                        exporter,
                        domain,
                        index,
                        name: name.to_string(),
                        description: description.to_string(),
                        received_ns: now_ns,
                    });
                }
            }
        });
        match r {
            Ok(m) => self.book.message(exporter, &m),
            Err(e) => self.book.refused_message(exporter, &e),
        }
        if !self.flows.is_empty() && self.since.is_none() {
            self.since = Some(Instant::now());
        }
        if self.flows.len() >= BATCH {
            self.send();
        }
    }

    /// Sends the batch if its first flow has waited [`BATCH_DELAY`], and forgets exporters
    /// idle for `idle` (call about once a second).
    pub fn tick(&mut self, now_ns: u64, idle: Duration) {
        if self.since.is_some_and(|t| t.elapsed() >= BATCH_DELAY) || !self.interfaces.is_empty() {
            self.send();
        }
        self.decoder
            .expire(now_ns, u64::try_from(idle.as_nanos()).unwrap_or(u64::MAX));
    }

    /// Hands the batch to the store thread (waiting while its queue is full: the socket's
    /// buffer then fills, and the kernel counts what it drops).
    pub fn send(&mut self) {
        self.since = None;
        if self.flows.is_empty() && self.interfaces.is_empty() {
            return;
        }
        let empty = self
            .back_rx
            .try_recv()
            .unwrap_or_else(|_| Vec::with_capacity(BATCH + 1024));
        let flows = std::mem::replace(&mut self.flows, empty);
        let n = flows.len() as u64;
        let b = Batch {
            flows,
            interfaces: std::mem::take(&mut self.interfaces),
            back: self.back_tx.clone(),
        };
        if self.tx.send(b).is_ok() {
            self.book.flows += n;
        }
    }
}
