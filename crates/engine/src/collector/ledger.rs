//! The collector's accounting, per exporter and observation domain: records, records lost
//! before the collector (sequence numbers), data records without their template, templates,
//! bad messages by reason; and per receive worker, what its socket dropped.
//!
//! Each worker (a UDP socket's thread, a TCP session) counts in a [`Book`] of its own, with no
//! lock, and copies it into its shared slot about once a second; readers merge the slots.

use std::collections::{BTreeMap, HashMap};
use std::net::{IpAddr, Ipv6Addr};
use std::sync::{Arc, Mutex, PoisonError};

use serde::Serialize;
use tapflow_wire::flowdecode::{DecodeError, MessageSummary};

use crate::metrics::escape;
use crate::source::SourceCounter;
use crate::source::datagrams::within_reach;

/// Exporters (address and domain) one worker counts apart; the rest are summed under the
/// unspecified address, so forged sources cannot grow the table without bound.
pub const MAX_EXPORTERS: usize = 4096;
/// Observation domains of one address one worker counts apart; the rest of the address's are
/// summed under its domain [`OTHER_DOMAINS`], so one host forging domains fills only its share.
pub const MAX_DOMAINS_PER_ADDRESS: usize = 64;
/// The most messages one sequence jump may say were lost, each the size of the message that
/// shows the jump: a longer jump is counted as a restart of the numbers, not as loss, so
/// forged numbers claim at most this many times what the exporter delivered.
pub const MAX_MISSING_MESSAGES: u64 = 4096;
/// The domain an address's domains past [`MAX_DOMAINS_PER_ADDRESS`] are counted under.
pub const OTHER_DOMAINS: u32 = u32::MAX;

/// One exporter and observation domain.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ExporterKey {
    /// The exporter's address, IPv4 as IPv4-mapped IPv6.
    pub exporter: [u8; 16],
    /// The observation domain (0 for messages too broken to name one).
    pub domain: u32,
}

impl ExporterKey {
    /// The exporter's address as text (IPv4 dotted).
    pub fn address(&self) -> IpAddr {
        Ipv6Addr::from(self.exporter).to_canonical()
    }
}

/// What one exporter and domain sent.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct ExporterCounts {
    /// The last protocol it spoke (`ipfix`, `nfv9`, `nfv5`, `sflow`).
    pub protocol: &'static str,
    /// Messages decoded.
    pub messages: u64,
    /// Flow records decoded.
    pub records: u64,
    /// Records (IPFIX, NetFlow v5, sFlow samples) or export packets (NetFlow v9) lost before
    /// the collector, from the sequence numbers.
    pub sequence_lost: u64,
    /// Times its sequence numbers started again (a restart, or a jump too long to be loss):
    /// what was lost across them is not in `sequence_lost`.
    pub sequence_resets: u64,
    /// Data records dropped because their template was not known.
    pub template_missing: u64,
    /// Template and options template records taken.
    pub templates: u64,
    /// Records, templates or samples inside good messages refused as malformed.
    pub malformed: u64,
    /// sFlow samples that carry no flow (counter samples, non-IP packets, unknown formats).
    pub skipped: u64,
    /// Messages refused whole.
    pub bad_messages: u64,
    /// Interface names (new or changed) refused: the exporter passed on its share already.
    pub names_refused: u64,
    /// Refused messages and parts, by reason.
    pub bad: BTreeMap<&'static str, u64>,
}

impl ExporterCounts {
    fn add(&mut self, o: &ExporterCounts) {
        if !o.protocol.is_empty() {
            self.protocol = o.protocol;
        }
        self.messages += o.messages;
        self.records += o.records;
        self.sequence_lost = self.sequence_lost.saturating_add(o.sequence_lost);
        self.sequence_resets += o.sequence_resets;
        self.template_missing += o.template_missing;
        self.templates += o.templates;
        self.malformed += o.malformed;
        self.skipped += o.skipped;
        self.bad_messages += o.bad_messages;
        self.names_refused += o.names_refused;
        for (k, v) in &o.bad {
            *self.bad.entry(k).or_insert(0) += v;
        }
    }
}

/// What the store thread held back for one store while it failed.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct StoreHold {
    /// Flows held back, in all (handed over once the store recovered, or dropped).
    pub held_back: u64,
    /// Flows held back now.
    pub waiting: u64,
    /// Flows dropped because the store failed longer than the collector could hold them.
    pub dropped: u64,
    /// Times the store was tried again.
    pub retries: u64,
}

/// What became of the IPFIX-over-TCP sessions.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct SessionCounts {
    /// Sessions accepted and served.
    pub served: u64,
    /// Sessions closed at once: too many open, or too many from the same address.
    pub refused: u64,
    /// Sessions ended because a message was not whole in time.
    pub timed_out: u64,
}

/// One worker's counts.
#[derive(Debug, Clone, Default)]
pub struct Book {
    /// Per exporter and domain.
    pub exporters: HashMap<ExporterKey, ExporterCounts>,
    /// Datagrams (UDP) or messages (TCP) received.
    pub datagrams: u64,
    /// Datagrams from senders outside `--allow`.
    pub refused: u64,
    /// Datagrams the kernel dropped because the socket's buffer was full.
    pub socket_drops: u64,
    /// Flow records handed to the store.
    pub flows: u64,
    /// Per store (by name), what the store thread held back; only in a [`Ledger::snapshot`].
    pub stores: BTreeMap<String, StoreHold>,
    /// IPFIX-over-TCP sessions; only in a [`Ledger::snapshot`].
    pub sessions: SessionCounts,
    /// Domains counted apart per address.
    per_address: HashMap<[u8; 16], usize>,
}

impl Book {
    fn entry(&mut self, key: ExporterKey) -> &mut ExporterCounts {
        let mut key = key;
        if !self.exporters.contains_key(&key) {
            let held = self.per_address.entry(key.exporter).or_insert(0);
            if *held >= MAX_DOMAINS_PER_ADDRESS {
                key.domain = OTHER_DOMAINS;
            }
            if !self.exporters.contains_key(&key) {
                if self.exporters.len() < MAX_EXPORTERS {
                    *held += 1;
                } else {
                    key = ExporterKey {
                        exporter: [0; 16],
                        domain: 0,
                    };
                }
            }
        }
        self.exporters.entry(key).or_default()
    }

    /// Counts a decoded message from `exporter`.
    pub fn message(&mut self, exporter: [u8; 16], m: &MessageSummary) {
        let e = self.entry(ExporterKey {
            exporter,
            domain: m.domain,
        });
        e.protocol = m.protocol.name();
        e.messages += 1;
        e.records += u64::from(m.records);
        let per = u64::from(m.records.max(1));
        if within_reach(m.sequence_lost, MAX_MISSING_MESSAGES, per) {
            e.sequence_lost = e.sequence_lost.saturating_add(m.sequence_lost);
        } else {
            e.sequence_resets += 1;
        }
        e.sequence_resets += u64::from(m.sequence_resets);
        e.template_missing += u64::from(m.template_missing);
        e.templates += u64::from(m.templates);
        e.malformed += u64::from(m.malformed);
        e.skipped += u64::from(m.skipped);
        if let Some(why) = m.refused {
            *e.bad.entry(why.reason()).or_insert(0) += u64::from(m.malformed);
        }
    }

    /// Counts a message from `exporter` refused whole, with its reason.
    pub fn bad(&mut self, exporter: [u8; 16], why: &'static str) {
        let e = self.entry(ExporterKey {
            exporter,
            domain: 0,
        });
        e.bad_messages += 1;
        *e.bad.entry(why).or_insert(0) += 1;
    }

    /// Counts an interface name refused for `key`.
    pub fn names_refused(&mut self, key: ExporterKey) {
        self.entry(key).names_refused += 1;
    }

    /// Counts a message the decoder refused (a refused exporter under its own domain).
    pub fn refused_message(&mut self, exporter: [u8; 16], e: &DecodeError) {
        let domain = match *e {
            DecodeError::TooManyExporters { domain, .. } => domain,
            _ => 0,
        };
        let c = self.entry(ExporterKey { exporter, domain });
        c.bad_messages += 1;
        *c.bad.entry(e.reason()).or_insert(0) += 1;
    }

    /// Adds `o`'s counts.
    pub fn add(&mut self, o: &Book) {
        for (k, v) in &o.exporters {
            self.exporters.entry(*k).or_default().add(v);
        }
        self.datagrams += o.datagrams;
        self.refused += o.refused;
        self.socket_drops += o.socket_drops;
        self.flows += o.flows;
    }

    /// The sums over exporters.
    pub fn totals(&self) -> ExporterCounts {
        let mut t = ExporterCounts::default();
        for v in self.exporters.values() {
            t.add(v);
        }
        t.protocol = "";
        t
    }
}

/// Every worker's slot, for the status line, `/metrics`, the store's exporter counters and
/// the summary.
#[derive(Debug, Default)]
pub struct Ledger {
    slots: Mutex<Vec<Arc<Mutex<Book>>>>,
    /// Sessions that ended, summed.
    ended: Mutex<Book>,
    /// The store thread's holds.
    stores: Mutex<BTreeMap<String, StoreHold>>,
    /// The TCP listeners' sessions.
    sessions: Mutex<SessionCounts>,
}

impl Ledger {
    /// A new worker's slot.
    pub fn slot(&self) -> Arc<Mutex<Book>> {
        let s = Arc::new(Mutex::new(Book::default()));
        self.slots
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(Arc::clone(&s));
        s
    }

    /// Folds a finished worker's slot into the ended sum, so slots of ended TCP sessions do
    /// not pile up.
    pub fn retire(&self, slot: &Arc<Mutex<Book>>) {
        let mut slots = self.slots.lock().unwrap_or_else(PoisonError::into_inner);
        slots.retain(|s| !Arc::ptr_eq(s, slot));
        let b = slot.lock().unwrap_or_else(PoisonError::into_inner);
        self.ended
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .add(&b);
    }

    /// Everything counted so far, over every worker.
    pub fn snapshot(&self) -> Book {
        let slots = self.slots.lock().unwrap_or_else(PoisonError::into_inner);
        let mut all = self
            .ended
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone();
        for s in slots.iter() {
            all.add(&s.lock().unwrap_or_else(PoisonError::into_inner));
        }
        all.stores
            .clone_from(&self.stores.lock().unwrap_or_else(PoisonError::into_inner));
        all.sessions = *self.sessions.lock().unwrap_or_else(PoisonError::into_inner);
        all
    }

    /// Publishes what became of the TCP sessions, over every listener.
    pub fn set_sessions(&self, s: SessionCounts) {
        *self.sessions.lock().unwrap_or_else(PoisonError::into_inner) = s;
    }

    /// Publishes what the store thread holds back, per store.
    pub fn set_stores(&self, stores: BTreeMap<String, StoreHold>) {
        *self.stores.lock().unwrap_or_else(PoisonError::into_inner) = stores;
    }
}

/// The counts as `/metrics` serves them: per exporter and domain, and per reason for what
/// was refused.
pub fn metrics(b: &Book) -> Vec<SourceCounter> {
    let mut keys: Vec<(&ExporterKey, &ExporterCounts)> = b.exporters.iter().collect();
    keys.sort_by_key(|(k, _)| **k);
    let label = |k: &ExporterKey| format!("exporter=\"{}\",domain=\"{}\"", k.address(), k.domain);
    let per = |pick: fn(&ExporterCounts) -> u64| -> Vec<(String, f64)> {
        keys.iter()
            .map(|(k, c)| (label(k), pick(c) as f64))
            .collect()
    };
    let one = |v: u64| vec![(String::new(), v as f64)];
    let per_store = |pick: fn(&StoreHold) -> u64| -> Vec<(String, f64)> {
        b.stores
            .iter()
            .map(|(name, h)| (format!("store=\"{}\"", escape(name)), pick(h) as f64))
            .collect()
    };
    vec![
        SourceCounter {
            name: "tapflow_collect_records_total",
            help: "Flow records decoded, by exporter and observation domain.",
            samples: per(|c| c.records),
        },
        SourceCounter {
            name: "tapflow_collect_sequence_lost_total",
            help: "Records (NetFlow v9: export packets) lost before the collector, from the \
                   sequence numbers.",
            samples: per(|c| c.sequence_lost),
        },
        SourceCounter {
            name: "tapflow_collect_sequence_resets_total",
            help: "Times an exporter's sequence numbers started again (a restart, or a jump too \
                   long to be loss; what was lost across it is not counted).",
            samples: per(|c| c.sequence_resets),
        },
        SourceCounter {
            name: "tapflow_collect_template_missing_total",
            help: "Data records dropped because their template was not known.",
            samples: per(|c| c.template_missing),
        },
        SourceCounter {
            name: "tapflow_collect_interface_names_refused_total",
            help: "Interface names (new or changed) refused past an exporter's share.",
            samples: per(|c| c.names_refused),
        },
        SourceCounter {
            name: "tapflow_collect_bad_total",
            help: "Messages, records and templates refused as malformed, by reason.",
            samples: keys
                .iter()
                .flat_map(|(k, c)| {
                    c.bad
                        .iter()
                        .map(move |(why, n)| (format!("{},reason=\"{why}\"", label(k)), *n as f64))
                })
                .collect(),
        },
        SourceCounter {
            name: "tapflow_collect_datagrams_total",
            help: "Datagrams (and IPFIX messages over TCP) received.",
            samples: one(b.datagrams),
        },
        SourceCounter {
            name: "tapflow_collect_socket_drops_total",
            help: "Datagrams the kernel dropped because a socket's receive buffer was full.",
            samples: one(b.socket_drops),
        },
        SourceCounter {
            name: "tapflow_collect_refused_total",
            help: "Datagrams and sessions from senders outside --allow.",
            samples: one(b.refused),
        },
        SourceCounter {
            name: "tapflow_collect_flows_total",
            help: "Flows handed to the stores.",
            samples: one(b.flows),
        },
        SourceCounter {
            name: "tapflow_collect_tcp_sessions_total",
            help: "IPFIX-over-TCP sessions served.",
            samples: one(b.sessions.served),
        },
        SourceCounter {
            name: "tapflow_collect_tcp_sessions_refused_total",
            help: "IPFIX-over-TCP sessions closed at once: 256 open, or 16 from the address.",
            samples: one(b.sessions.refused),
        },
        SourceCounter {
            name: "tapflow_collect_tcp_sessions_timed_out_total",
            help: "IPFIX-over-TCP sessions ended because a message was not whole 10 s after its \
                   first byte.",
            samples: one(b.sessions.timed_out),
        },
        SourceCounter {
            name: "tapflow_collect_store_held_back_total",
            help: "Flows held back in the collector while a store failed (no descriptor, a \
                   full disk), handed over once it recovered.",
            samples: per_store(|h| h.held_back),
        },
        SourceCounter {
            name: "tapflow_collect_store_held_dropped_total",
            help: "Flows dropped because a store failed longer than the collector could hold \
                   them back.",
            samples: per_store(|h| h.dropped),
        },
        SourceCounter {
            name: "tapflow_collect_store_retries_total",
            help: "Times a failing store was tried again.",
            samples: per_store(|h| h.retries),
        },
    ]
}

/// Publishes a worker's book into its slot.
pub fn publish(slot: &Mutex<Book>, b: &Book) {
    slot.lock()
        .unwrap_or_else(PoisonError::into_inner)
        .clone_from(b);
}

#[cfg(test)]
mod tests {
    use super::*;
    use tapflow_wire::flowdecode::Protocol;

    fn summary(domain: u32, records: u32, lost: u64) -> MessageSummary {
        MessageSummary {
            protocol: Protocol::Ipfix,
            domain,
            records,
            sequence_lost: lost,
            sequence_resets: u32::from(lost > 0),
            template_missing: 2,
            templates: 1,
            malformed: 0,
            refused: None,
            skipped: 0,
        }
    }

    #[test]
    fn counts_merge_over_workers_and_ended_sessions() {
        let ledger = Ledger::default();
        let (a, b) = (ledger.slot(), ledger.slot());
        let x = [1u8; 16];
        let mut ba = Book::default();
        ba.message(x, &summary(7, 10, 3));
        ba.bad(x, "truncated");
        ba.socket_drops = 4;
        publish(&a, &ba);
        let mut bb = Book::default();
        bb.message(x, &summary(7, 5, 0));
        bb.message(x, &summary(8, 1, 0));
        publish(&b, &bb);
        ledger.retire(&b);
        let all = ledger.snapshot();
        let k7 = &all.exporters[&ExporterKey {
            exporter: x,
            domain: 7,
        }];
        assert_eq!(
            (
                k7.records,
                k7.sequence_lost,
                k7.sequence_resets,
                k7.messages
            ),
            (15, 3, 1, 2)
        );
        let t = all.totals();
        assert_eq!((t.records, t.template_missing, t.bad_messages), (16, 6, 1));
        assert_eq!(t.bad["truncated"], 1);
        assert_eq!(all.socket_drops, 4);
    }

    #[test]
    fn a_sequence_jump_claims_no_more_than_its_messages_could_carry() {
        let mut b = Book::default();
        let x = [5; 16];
        // 1,120 messages of one record, each numbered 2^22 past the last: 4.7 billion claimed.
        for _ in 0..1120 {
            let mut m = summary(1, 1, 1 << 22);
            m.sequence_resets = 0;
            b.message(x, &m);
        }
        let t = b.totals();
        assert_eq!((t.sequence_lost, t.sequence_resets), (0, 1120));
        // 100 messages of 30 records lost is loss.
        let mut m = summary(1, 30, 3000);
        m.sequence_resets = 0;
        b.message(x, &m);
        assert_eq!(b.totals().sequence_lost, 3000);
    }

    #[test]
    fn forged_exporters_are_summed_past_the_limit() {
        let mut b = Book::default();
        for i in 0..(MAX_EXPORTERS as u32 + 100) {
            let mut a = [9; 16];
            a[12..].copy_from_slice(&i.to_be_bytes());
            b.message(a, &summary(1, 1, 0));
        }
        assert_eq!(b.exporters.len(), MAX_EXPORTERS + 1);
        assert_eq!(b.totals().records, MAX_EXPORTERS as u64 + 100);
    }

    #[test]
    fn one_address_forging_domains_fills_its_share_and_a_refusal_is_named() {
        let mut b = Book::default();
        let (forger, other) = ([9; 16], [7; 16]);
        for i in 0..10_000 {
            b.message(forger, &summary(i, 1, 0));
        }
        let of = |b: &Book, a| b.exporters.keys().filter(|k| k.exporter == a).count();
        assert_eq!(of(&b, forger), MAX_DOMAINS_PER_ADDRESS + 1);
        let rest = ExporterKey {
            exporter: forger,
            domain: OTHER_DOMAINS,
        };
        assert_eq!(
            b.exporters[&rest].records,
            10_000 - MAX_DOMAINS_PER_ADDRESS as u64
        );
        // Another exporter is counted under its own name, a refusal under its domain.
        b.message(other, &summary(3, 1, 0));
        b.refused_message(
            other,
            &DecodeError::TooManyExporters {
                domain: 5,
                limit: 4096,
            },
        );
        let k = |domain| ExporterKey {
            exporter: other,
            domain,
        };
        assert_eq!(b.exporters[&k(3)].records, 1);
        assert_eq!(b.exporters[&k(5)].bad["too_many_exporters"], 1);
    }
}
