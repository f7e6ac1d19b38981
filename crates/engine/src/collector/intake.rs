//! What every receive worker does with a message: decode it with the worker's own decoder,
//! count it in the worker's book, and batch its flows and new interface names for the store.
//!
//! No allocation, lock or system call per record: flows go into a reused batch, which crosses
//! to the store thread whole (one channel operation per batch) and comes back emptied.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::mpsc::{self, Receiver, Sender, SyncSender};
use std::time::{Duration, Instant};

use tapflow_store::{InterfaceCounters, InterfaceName, StoredFlow};
use tapflow_wire::flowdecode::{Decoded, Decoder, Limits, Protocol, Restored, SavedExporter};

use crate::collector::ledger::{Book, ExporterKey};

/// Flows per batch handed to the store thread.
pub const BATCH: usize = 4096;
/// The longest a flow waits in a worker's batch before it goes to the store anyway.
pub const BATCH_DELAY: Duration = Duration::from_millis(200);
/// Interface names one worker remembers (to pass on only new or changed ones).
pub const MAX_NAMES: usize = 262_144;
/// Interface names (new or changed) one worker passes on per exporter address, until the
/// exporter's state expires; more are refused, counted.
pub const MAX_NAMES_PER_EXPORTER: u32 = 65_536;
/// The longest interface name or description kept, in bytes; longer ones are cut.
pub const MAX_NAME_LEN: usize = 64;

/// A batch of flows (and interface names) from one worker.
#[derive(Debug)]
pub struct Batch {
    /// The flows.
    pub flows: Vec<StoredFlow>,
    /// New or changed interface names.
    pub interfaces: Vec<InterfaceName>,
    /// Interface counters from sFlow counter samples.
    pub counters: Vec<InterfaceCounters>,
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
    counters: Vec<InterfaceCounters>,
    names: HashMap<(ExporterKey, u32), (String, String)>,
    /// Per exporter address: names passed on, and when it last sent a message (ns since 1970).
    named: HashMap<[u8; 16], (u32, u64)>,
    since: Option<Instant>,
}

/// `s` cut to at most [`MAX_NAME_LEN`] bytes, at a character boundary.
fn cut(s: &str) -> &str {
    let mut end = s.len().min(MAX_NAME_LEN);
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    &s[..end]
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
            counters: Vec::new(),
            names: HashMap::new(),
            named: HashMap::new(),
            since: None,
        }
    }

    /// Takes exporters' saved templates (see [`Decoder::restore`]).
    pub fn restore(&mut self, saved: &[SavedExporter], now_ns: u64, idle: Duration) -> Restored {
        let idle_ns = u64::try_from(idle.as_nanos()).unwrap_or(u64::MAX);
        self.decoder.restore(saved, now_ns, idle_ns)
    }

    /// The exporters' templates, to keep across restarts (see [`Decoder::save`]).
    pub fn save(&self) -> Vec<SavedExporter> {
        self.decoder.save()
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
            counters,
            names,
            named,
            book,
            ..
        } = self;
        let mut names = Names {
            names,
            named,
            interfaces,
            book,
        };
        let r = decoder.decode(protocol, exporter, msg, now_ns, &mut |d| match d {
            Decoded::Flow(f) => flows.push(StoredFlow {
                flow: f.flow,
                egress: f.egress,
                exporter,
                domain: f.domain,
                sampling: f.sampling,
                received_ns: now_ns,
                ..StoredFlow::default()
            }),
            Decoded::Interface {
                domain,
                index,
                name,
                description,
            } => names.take(
                ExporterKey { exporter, domain },
                index,
                name,
                description,
                now_ns,
            ),
            Decoded::Counters {
                domain,
                counters: c,
            } => counters.push(InterfaceCounters {
                exporter,
                domain,
                received_ns: now_ns,
                counters: c,
            }),
        });
        // Its names live as long as its state: while it sends anything.
        if let Some(e) = self.named.get_mut(&exporter) {
            e.1 = now_ns;
        }
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
        if self.since.is_some_and(|t| t.elapsed() >= BATCH_DELAY)
            || !self.interfaces.is_empty()
            || !self.counters.is_empty()
        {
            self.send();
        }
        let idle_ns = u64::try_from(idle.as_nanos()).unwrap_or(u64::MAX);
        self.decoder.expire(now_ns, idle_ns);
        // Names go with the exporter's state.
        let before = self.named.len();
        self.named
            .retain(|_, (_, last)| now_ns.saturating_sub(*last) < idle_ns);
        if self.named.len() < before {
            let named = &self.named;
            self.names
                .retain(|(k, _), _| named.contains_key(&k.exporter));
        }
    }

    /// Interface names remembered.
    #[cfg(test)]
    fn names(&self) -> usize {
        self.names.len()
    }

    /// Hands the batch to the store thread (waiting while its queue is full: the socket's
    /// buffer then fills, and the kernel counts what it drops).
    pub fn send(&mut self) {
        self.since = None;
        if self.flows.is_empty() && self.interfaces.is_empty() && self.counters.is_empty() {
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
            counters: std::mem::take(&mut self.counters),
            back: self.back_tx.clone(),
        };
        if self.tx.send(b).is_ok() {
            self.book.flows += n;
        }
    }
}

/// The names part of an intake, borrowed while a message is decoded.
struct Names<'a> {
    names: &'a mut HashMap<(ExporterKey, u32), (String, String)>,
    named: &'a mut HashMap<[u8; 16], (u32, u64)>,
    interfaces: &'a mut Vec<InterfaceName>,
    book: &'a mut Book,
}

impl Names<'_> {
    /// Passes a new or changed name on, within the exporter's budget and the worker's.
    fn take(&mut self, key: ExporterKey, index: u32, name: &str, description: &str, now_ns: u64) {
        let (name, description) = (cut(name), cut(description));
        let k = (key, index);
        let known = self.names.get(&k);
        if known.is_some_and(|(n, d)| n == name && d == description) {
            if let Some(e) = self.named.get_mut(&key.exporter) {
                e.1 = now_ns;
            }
            return;
        }
        let full = known.is_none() && self.names.len() >= MAX_NAMES;
        let e = self.named.get(&key.exporter).map_or(0, |e| e.0);
        if full || e >= MAX_NAMES_PER_EXPORTER {
            self.book.names_refused(key);
            return;
        }
        self.named.insert(key.exporter, (e + 1, now_ns));
        self.names
            .insert(k, (name.to_string(), description.to_string()));
        self.interfaces.push(InterfaceName {
            exporter: key.exporter,
            domain: key.domain,
            index,
            name: name.to_string(),
            description: description.to_string(),
            speed: 0,
            received_ns: now_ns,
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SEC: u64 = 1_000_000_000;

    /// An intake whose batches go nowhere, and the names of its batch.
    fn intake() -> (Intake, Receiver<Batch>) {
        let (tx, rx) = mpsc::sync_channel(4);
        (Intake::new(Limits::default(), tx), rx)
    }

    fn name(i: &mut Intake, exporter: u8, index: u32, name: &str, now_ns: u64) {
        let Intake {
            names,
            named,
            interfaces,
            book,
            ..
        } = i;
        let key = ExporterKey {
            exporter: [exporter; 16],
            domain: 1,
        };
        Names {
            names,
            named,
            interfaces,
            book,
        }
        .take(key, index, name, "", now_ns);
    }

    #[test]
    fn an_exporter_renaming_its_interfaces_gets_its_share_and_no_more() {
        let (mut i, _rx) = intake();
        let n = MAX_NAMES_PER_EXPORTER + 1000;
        // One interface renamed over and over, with names far past the length kept.
        for k in 0..n {
            name(&mut i, 1, 7, &format!("{k:x<200}"), SEC);
        }
        assert_eq!(i.interfaces.len() as u32, MAX_NAMES_PER_EXPORTER);
        assert!(i.interfaces.iter().all(|f| f.name.len() == MAX_NAME_LEN));
        assert_eq!(i.book.totals().names_refused, 1000);
        // Another exporter has a share of its own.
        name(&mut i, 2, 7, "eth0", SEC);
        assert_eq!(i.interfaces.len() as u32, MAX_NAMES_PER_EXPORTER + 1);
        // Its state expires with the exporter's: the names go, and the share comes back.
        i.interfaces.clear();
        i.tick(SEC + 2 * SEC, Duration::from_secs(1));
        assert_eq!(i.names(), 0);
        name(&mut i, 1, 7, "eth1", 4 * SEC);
        assert_eq!(i.interfaces.len(), 1);
    }

    #[test]
    fn names_are_cut_at_a_character_boundary() {
        let long = "é".repeat(40);
        assert_eq!(cut(&long).len(), MAX_NAME_LEN);
        assert_eq!(cut(&"a".repeat(63)).len(), 63);
        assert_eq!(cut(&format!("a{long}")).len(), MAX_NAME_LEN - 1);
    }
}
