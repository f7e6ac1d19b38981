//! Flow collection: decodes IPFIX (RFC 7011), NetFlow v9 (RFC 3954), NetFlow v5 and sFlow v5
//! messages from many exporters into [`FlowRecord`]s.
//!
//! One [`Decoder`] keeps the state a collector needs between messages: the templates each
//! exporter announced, keyed by (exporter address, protocol, observation domain, template id),
//! the sampling rates its options records gave, and the sequence numbers it counts, keyed by
//! (exporter address, protocol, observation domain). `docs/wire-formats.md` lists the elements
//! understood, the limits and the sequence rules. The protocols' own decoding lives beside their
//! encoders (`ipfix.rs`, `netflow9.rs`, `netflow5.rs`) and in `sflow.rs`; templates and what
//! each field means to a [`FlowRecord`] in `template.rs`.
//!
//! Contract: [`Decoder::decode`] never panics on any bytes, allocates only when a new or changed
//! template, a new exporter or a new sFlow data source arrives, and when it returns an error it
//! has emitted nothing and changed no state.

mod saved;

use std::collections::HashMap;

pub use saved::{Restored, SavedExporter, SavedField, SavedTemplate};

use crate::flowrecord::FlowRecord;
use crate::template::{Budget, Clock, Templates, read_record, text};

/// The export protocol a listener speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Protocol {
    /// IPFIX (RFC 7011), over UDP or one message cut from a TCP stream.
    Ipfix,
    /// NetFlow version 9 (RFC 3954).
    NetflowV9,
    /// NetFlow version 5.
    NetflowV5,
    /// sFlow version 5 flow samples.
    Sflow5,
}

impl Protocol {
    /// A short lower-case name for metrics labels and messages.
    pub const fn name(self) -> &'static str {
        match self {
            Protocol::Ipfix => "ipfix",
            Protocol::NetflowV9 => "nfv9",
            Protocol::NetflowV5 => "nfv5",
            Protocol::Sflow5 => "sflow",
        }
    }
}

/// One flow record decoded from a message.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct DecodedFlow {
    /// The flow, counters already scaled by `sampling`.
    pub flow: FlowRecord,
    /// The output interface (`egressInterface`, IE 14), 0 if the exporter sent none.
    pub egress: u32,
    /// The observation domain (IPFIX), source id (v9), engine type and id (v5:
    /// `engine_type << 8 | engine_id`) or sub-agent id (sFlow).
    pub domain: u32,
    /// The sampling interval the counters were multiplied by (1 if unsampled).
    pub sampling: u32,
}

/// What one message yields, in message order.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Decoded<'a> {
    /// A flow record.
    Flow(DecodedFlow),
    /// An interface's name and description from an options record (IE 82/83).
    Interface {
        /// The observation domain.
        domain: u32,
        /// The interface index (`ingressInterface`/`egressInterface` scope, or SNMP index).
        index: u32,
        /// `interfaceName` (IE 82), up to the first NUL or invalid UTF-8; empty if absent.
        name: &'a str,
        /// `interfaceDescription` (IE 83), likewise.
        description: &'a str,
    },
    /// An interface's counters from an sFlow counter sample.
    Counters {
        /// The sub-agent id.
        domain: u32,
        /// The counters.
        counters: crate::sflow::IfCounters,
    },
}

/// What one successfully decoded message held.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MessageSummary {
    /// The protocol decoded.
    pub protocol: Protocol,
    /// The observation domain (see [`DecodedFlow::domain`]).
    pub domain: u32,
    /// Flow records emitted.
    pub records: u32,
    /// Records (IPFIX, v5, sFlow samples) or export packets (v9) the sequence numbers say were
    /// lost between the previous message of this exporter and domain and this one.
    pub sequence_lost: u64,
    /// Times the sequence numbers started again (an exporter that restarted, or a jump too
    /// long to be loss): what was lost across them cannot be known.
    pub sequence_resets: u32,
    /// Data records skipped because their template is not known (yet).
    pub template_missing: u32,
    /// Template and options template records accepted (new, refreshed or withdrawn).
    pub templates: u32,
    /// Records, templates or samples skipped as malformed or over a limit; `refused` says why
    /// for the first of them.
    pub malformed: u32,
    /// Why the first of the `malformed` things was refused.
    pub refused: Option<DecodeError>,
    /// sFlow samples that carry no flow: counter samples, unknown formats, non-IP packets.
    pub skipped: u32,
}

/// Why a message (or a part of it, see [`MessageSummary::refused`]) was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum DecodeError {
    /// The message ends before a header or structure it announces.
    #[error("{what} truncated at offset {at}")]
    Truncated {
        /// The structure cut short.
        what: &'static str,
        /// Its offset in the message.
        at: usize,
    },
    /// The version field is not the protocol's.
    #[error("version {found} where {protocol} has {expected}")]
    BadVersion {
        /// The protocol decoded.
        protocol: &'static str,
        /// Its version number.
        expected: u16,
        /// What the message says.
        found: u32,
    },
    /// The header's length or count disagrees with the message.
    #[error("header says {declared} {unit}, the message has {actual}")]
    BadLength {
        /// What the header counts ("octets", "records").
        unit: &'static str,
        /// What the header says.
        declared: usize,
        /// What the message holds.
        actual: usize,
    },
    /// A set (FlowSet) header with a length too short or past the end of the message.
    #[error("set {id} at offset {at} has length {len}")]
    BadSet {
        /// The set id.
        id: u16,
        /// Its offset.
        at: usize,
        /// Its length field.
        len: usize,
    },
    /// A malformed template or options template record.
    #[error("template {id} at offset {at}: {why}")]
    BadTemplate {
        /// The template id.
        id: u16,
        /// Its offset.
        at: usize,
        /// What is wrong.
        why: &'static str,
    },
    /// A data record that runs past the end of its set.
    #[error("record of template {id} at offset {at} runs past its set")]
    BadRecord {
        /// The template id.
        id: u16,
        /// Its offset.
        at: usize,
    },
    /// An sFlow sample or record that is malformed.
    #[error("sFlow {what} at offset {at} is malformed")]
    BadSample {
        /// The structure.
        what: &'static str,
        /// Its offset.
        at: usize,
    },
    /// A new exporter while [`Limits::max_exporters`] are known and none has been idle for
    /// [`EVICT_IDLE_NS`].
    #[error("exporter refused (domain {domain}): {limit} exporters already known, none idle")]
    TooManyExporters {
        /// The observation domain refused.
        domain: u32,
        /// The limit.
        limit: usize,
    },
    /// A new template while the exporter (or the decoder) holds its limit.
    #[error("template {id} refused: {limit} templates already known")]
    TooManyTemplates {
        /// The template id refused.
        id: u16,
        /// The limit reached.
        limit: usize,
    },
    /// A template with more fields than [`Limits::max_fields`].
    #[error("template {id} refused: {count} fields, limit {limit}")]
    TooManyFields {
        /// The template id.
        id: u16,
        /// Its field count.
        count: usize,
        /// The limit.
        limit: usize,
    },
}

impl DecodeError {
    /// A short snake_case reason, for metrics labels.
    pub const fn reason(&self) -> &'static str {
        match self {
            DecodeError::Truncated { .. } => "truncated",
            DecodeError::BadVersion { .. } => "bad_version",
            DecodeError::BadLength { .. } => "bad_length",
            DecodeError::BadSet { .. } => "bad_set",
            DecodeError::BadTemplate { .. } => "bad_template",
            DecodeError::BadRecord { .. } => "bad_record",
            DecodeError::BadSample { .. } => "bad_sample",
            DecodeError::TooManyExporters { .. } => "too_many_exporters",
            DecodeError::TooManyTemplates { .. } => "too_many_templates",
            DecodeError::TooManyFields { .. } => "too_many_fields",
        }
    }
}

/// Caps that keep hostile input from growing the decoder's memory without bound.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Templates (data and options) one exporter and domain may hold.
    pub max_templates_per_exporter: usize,
    /// (exporter, protocol, domain) states held at once.
    pub max_exporters: usize,
    /// (exporter, protocol, domain) states one exporter address holds at once; a new one past
    /// this replaces the address's state idle longest.
    pub max_exporters_per_address: usize,
    /// Templates held by all exporters together.
    pub max_templates: usize,
    /// Fields in one template.
    pub max_fields: usize,
}

impl Default for Limits {
    fn default() -> Limits {
        Limits {
            max_templates_per_exporter: 512,
            max_exporters: 4096,
            max_exporters_per_address: 64,
            max_templates: 65536,
            max_fields: 256,
        }
    }
}

/// A new exporter past [`Limits::max_exporters`] replaces the state idle longest if it has been
/// idle this long (ns); otherwise it is refused.
pub const EVICT_IDLE_NS: u64 = 60_000_000_000;

/// Largest forward jump of a sequence number counted as loss; a longer one (an exporter that
/// restarted, or a hostile number) restarts the count instead of adding billions.
pub const MAX_SEQUENCE_GAP: u32 = 1 << 22;

/// Samplers (IE 48 → interval) and sFlow data sources one exporter may hold.
pub const MAX_SAMPLERS: usize = 64;

/// What one message's sequence number says.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[must_use]
pub(crate) struct Gap {
    /// Units lost before the message.
    pub(crate) lost: u64,
    /// The count started again at this message.
    pub(crate) reset: bool,
}

impl Gap {
    /// Adds the gap to a message's summary.
    pub(crate) fn add_to(self, s: &mut MessageSummary) {
        s.sequence_lost = s.sequence_lost.saturating_add(self.lost);
        s.sequence_resets += u32::from(self.reset);
    }
}

/// The sequence numbers of one exporter and domain (or sFlow data source).
///
/// Exporters read the RFCs differently: RFC 7011 numbers a message by the data records sent
/// *before* it, options records included; softflowd and pmacctd number it by the flow records
/// sent *up to and including* it. A message is in order if its number fits any of the four
/// readings, and the reading that fitted last measures any gap.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Sequence {
    /// The previous message: (number, units, units that are options records).
    last: Option<(u32, u32, u32)>,
    /// The reading that fitted last (index into [`Sequence::readings`]).
    reading: u8,
    /// Messages in a row that came from behind.
    behind: u8,
}

impl Sequence {
    /// The numbers an in-order message of `count` units (`options` of them options records)
    /// may carry after the previous one.
    fn readings(last: (u32, u32, u32), count: u32, options: u32) -> [u32; 4] {
        let (seq, n, o) = last;
        [
            seq.wrapping_add(n),
            seq.wrapping_add(n - o),
            seq.wrapping_add(count),
            seq.wrapping_add(count - options),
        ]
    }

    /// Takes a message numbered `seq` that carries `count` units (records or packets),
    /// `options` of them options records, and returns the units lost before it. A message from
    /// behind is late (reordered) and counts nothing; a second one in a row, or a jump of more
    /// than [`MAX_SEQUENCE_GAP`] either way, means the exporter restarted: the count starts
    /// again from it.
    pub(crate) fn observe(&mut self, seq: u32, count: u32, options: u32) -> Gap {
        let options = options.min(count);
        let Some(last) = self.last else {
            self.last = Some((seq, count, options));
            return Gap::default();
        };
        let readings = Sequence::readings(last, count, options);
        if let Some(i) = readings.iter().position(|&r| r == seq) {
            self.reading = i as u8;
            self.last = Some((seq, count, options));
            self.behind = 0;
            return Gap::default();
        }
        let next = readings[usize::from(self.reading)];
        let ahead = seq.wrapping_sub(next);
        let behind = next.wrapping_sub(seq);
        if ahead <= MAX_SEQUENCE_GAP {
            self.last = Some((seq, count, options));
            self.behind = 0;
            Gap {
                lost: u64::from(ahead),
                reset: false,
            }
        } else if behind <= MAX_SEQUENCE_GAP && self.behind == 0 {
            self.behind = 1;
            Gap::default()
        } else {
            self.last = Some((seq, count, options));
            self.behind = 0;
            Gap {
                lost: 0,
                reset: true,
            }
        }
    }

    /// Forgets the previous message: the next one starts the count again.
    pub(crate) fn resync(&mut self) {
        self.last = None;
        self.behind = 0;
    }
}

/// What the decoder keeps for one (exporter, protocol, domain).
#[derive(Debug, Default)]
pub(crate) struct Exporter {
    last_ns: u64,
    pub(crate) templates: Templates,
    pub(crate) sequence: Sequence,
    /// `systemInitTimeMilliseconds` from an options record, 0 if none came.
    pub(crate) init_ms: u64,
    /// The last sampling interval an options record gave, 0 if none.
    sampling: u32,
    /// Sampler id → interval, from options records.
    samplers: Vec<(u64, u32)>,
    /// sFlow: data source → sample sequence.
    pub(crate) sources: HashMap<u32, Sequence>,
}

/// Key of an [`Exporter`].
type ExporterKey = ([u8; 16], Protocol, u32);

impl MessageSummary {
    fn new(protocol: Protocol, domain: u32) -> MessageSummary {
        MessageSummary {
            protocol,
            domain,
            records: 0,
            sequence_lost: 0,
            sequence_resets: 0,
            template_missing: 0,
            templates: 0,
            malformed: 0,
            refused: None,
            skipped: 0,
        }
    }

    /// Counts something refused inside an otherwise good message.
    pub(crate) fn refuse(&mut self, e: DecodeError) {
        self.malformed = self.malformed.saturating_add(1);
        self.refused.get_or_insert(e);
    }
}

/// Where the records of one message go.
pub(crate) struct Emit<'o, 'f> {
    pub(crate) out: &'o mut dyn FnMut(Decoded<'_>),
    pub(crate) summary: &'f mut MessageSummary,
}

impl Emit<'_, '_> {
    /// Emits a flow.
    #[inline]
    pub(crate) fn flow(&mut self, flow: FlowRecord, egress: u32, sampling: u32) {
        self.summary.records += 1;
        (self.out)(Decoded::Flow(DecodedFlow {
            flow,
            egress,
            domain: self.summary.domain,
            sampling,
        }));
    }
}

impl Exporter {
    /// The interval to scale a record by: its own, its sampler's, the exporter's, or 1.
    #[inline]
    pub(crate) fn sampling(&self, own: u32, sampler: Option<u64>) -> u32 {
        if own > 0 {
            return own;
        }
        if let Some(id) = sampler
            && let Some(&(_, n)) = self.samplers.iter().find(|s| s.0 == id)
        {
            return n;
        }
        self.sampling.max(1)
    }

    /// Decodes the records of data set `id` (`at`: the body's offset in the message) and
    /// returns how many there were and whether they were options records.
    pub(crate) fn data_set(
        &mut self,
        id: u16,
        body: &[u8],
        at: usize,
        clock: Clock,
        emit: &mut Emit<'_, '_>,
    ) -> (u32, bool) {
        let Some(t) = self.templates.get(id) else {
            emit.summary.template_missing += 1;
            return (0, false);
        };
        let mut clock = clock;
        let mut n = 0u32;
        let mut p = 0;
        while body.len() - p >= t.min_len {
            if body.len() - p < 4 && body[p..].iter().all(|&b| b == 0) {
                break; // padding to a 4-octet boundary
            }
            let Some((acc, len)) = read_record(t, &body[p..]) else {
                emit.summary
                    .refuse(DecodeError::BadRecord { id, at: at + p });
                break;
            };
            p += len;
            n += 1;
            if t.options {
                let (init_ms, s) = acc.options();
                if init_ms > 0 {
                    self.init_ms = init_ms;
                    clock.init_ms = init_ms;
                }
                if s.interval > 0 {
                    self.sampling = s.interval;
                    if let Some(id) = s.sampler {
                        let full = self.samplers.len() >= MAX_SAMPLERS;
                        match self.samplers.iter_mut().find(|x| x.0 == id) {
                            Some(x) => x.1 = s.interval,
                            None if !full => self.samplers.push((id, s.interval)),
                            None => {}
                        }
                    }
                }
                if let (Some(index), true) =
                    (acc.if_index, acc.if_name.is_some() || acc.if_desc.is_some())
                {
                    (emit.out)(Decoded::Interface {
                        domain: emit.summary.domain,
                        index,
                        name: text(acc.if_name),
                        description: text(acc.if_desc),
                    });
                }
            } else {
                let sampling = self.sampling(acc.interval(), acc.sampler);
                let egress = acc.egress;
                emit.flow(acc.finish(&clock, sampling), egress, sampling);
            }
        }
        (n, t.options)
    }
}

/// The collector's decoding state for all exporters.
#[derive(Debug)]
pub struct Decoder {
    limits: Limits,
    exporters: HashMap<ExporterKey, Exporter>,
    /// States held per exporter address.
    per_address: HashMap<[u8; 16], usize>,
    budget: Budget,
}

impl Decoder {
    /// A decoder that knows no exporter yet.
    pub fn new(limits: Limits) -> Decoder {
        Decoder {
            limits,
            exporters: HashMap::new(),
            per_address: HashMap::new(),
            budget: Budget {
                per_exporter: limits.max_templates_per_exporter,
                total: limits.max_templates,
                held: 0,
                max_fields: limits.max_fields,
                scratch: Vec::new(),
            },
        }
    }

    /// The limits.
    pub fn limits(&self) -> &Limits {
        &self.limits
    }

    /// (Exporter, protocol, domain) states held.
    pub fn exporters(&self) -> usize {
        self.exporters.len()
    }

    /// Templates held, all exporters together.
    pub fn templates(&self) -> usize {
        self.budget.held
    }

    /// The state of `key`, created if new. A new state past the address's share replaces the
    /// address's state idle longest; past the limit of all, the state idle longest if it has
    /// been idle [`EVICT_IDLE_NS`], else the new one is refused.
    fn exporter(
        &mut self,
        key: ExporterKey,
        now_ns: u64,
    ) -> Result<(&mut Exporter, &mut Budget), DecodeError> {
        if !self.exporters.contains_key(&key) {
            let oldest = |of: Option<[u8; 16]>| {
                self.exporters
                    .iter()
                    .filter(|(k, _)| of.is_none_or(|a| k.0 == a))
                    .min_by_key(|(_, e)| e.last_ns)
                    .map(|(k, e)| (*k, e.last_ns))
            };
            let held = self.per_address.get(&key.0).copied().unwrap_or(0);
            let evict = if held >= self.limits.max_exporters_per_address {
                oldest(Some(key.0))
            } else if self.exporters.len() >= self.limits.max_exporters {
                match oldest(None) {
                    Some((k, last)) if now_ns.saturating_sub(last) >= EVICT_IDLE_NS => {
                        Some((k, last))
                    }
                    _ => {
                        return Err(DecodeError::TooManyExporters {
                            domain: key.2,
                            limit: self.limits.max_exporters,
                        });
                    }
                }
            } else {
                None
            };
            if let Some((k, _)) = evict {
                self.forget(&k);
            }
            *self.per_address.entry(key.0).or_insert(0) += 1;
        }
        let ex = self.exporters.entry(key).or_default();
        ex.last_ns = now_ns;
        Ok((ex, &mut self.budget))
    }

    /// Drops the state of `key` and its templates.
    fn forget(&mut self, key: &ExporterKey) {
        if let Some(mut ex) = self.exporters.remove(key) {
            ex.templates.clear(&mut self.budget);
            release(&mut self.per_address, key.0);
        }
    }

    /// Decodes one message (a datagram, or one IPFIX message cut from a TCP stream) from
    /// `exporter` (IPv4 as IPv4-mapped IPv6), calling `out` once per flow record and per
    /// interface name. `now_ns` (ns since 1970) is the arrival time.
    pub fn decode(
        &mut self,
        protocol: Protocol,
        exporter: [u8; 16],
        msg: &[u8],
        now_ns: u64,
        out: &mut dyn FnMut(Decoded<'_>),
    ) -> Result<MessageSummary, DecodeError> {
        match protocol {
            Protocol::Ipfix => {
                let h = crate::ipfix::Header::parse(msg)?;
                let (ex, budget) = self.exporter((exporter, protocol, h.domain), now_ns)?;
                let mut summary = MessageSummary::new(protocol, h.domain);
                let mut emit = Emit {
                    out,
                    summary: &mut summary,
                };
                crate::ipfix::decode(&h, &msg[..h.len], ex, budget, &mut emit);
                Ok(summary)
            }
            Protocol::NetflowV9 => {
                let h = crate::netflow9::Header::parse(msg)?;
                let (ex, budget) = self.exporter((exporter, protocol, h.source_id), now_ns)?;
                let mut summary = MessageSummary::new(protocol, h.source_id);
                let mut emit = Emit {
                    out,
                    summary: &mut summary,
                };
                crate::netflow9::decode(&h, msg, ex, budget, &mut emit);
                Ok(summary)
            }
            Protocol::NetflowV5 => {
                let h = crate::netflow5::Header::parse(msg)?;
                let domain = h.domain();
                let (ex, _) = self.exporter((exporter, protocol, domain), now_ns)?;
                let mut summary = MessageSummary::new(protocol, domain);
                let mut emit = Emit {
                    out,
                    summary: &mut summary,
                };
                crate::netflow5::decode(&h, msg, ex, &mut emit);
                Ok(summary)
            }
            Protocol::Sflow5 => {
                let h = crate::sflow::Header::parse(msg)?;
                let (ex, _) = self.exporter((exporter, protocol, h.sub_agent_id), now_ns)?;
                let mut summary = MessageSummary::new(protocol, h.sub_agent_id);
                let mut emit = Emit {
                    out,
                    summary: &mut summary,
                };
                crate::sflow::decode(&h, msg, ex, now_ns, &mut emit);
                Ok(summary)
            }
        }
    }

    /// Forgets exporters (templates, sequence state) not heard from for `idle_ns`.
    pub fn expire(&mut self, now_ns: u64, idle_ns: u64) {
        let (budget, per_address) = (&mut self.budget, &mut self.per_address);
        self.exporters.retain(|k, ex| {
            let keep = now_ns.saturating_sub(ex.last_ns) < idle_ns;
            if !keep {
                ex.templates.clear(budget);
                release(per_address, k.0);
            }
            keep
        });
    }
}

/// One state of `address` fewer.
fn release(per_address: &mut HashMap<[u8; 16], usize>, address: [u8; 16]) {
    if let Some(n) = per_address.get_mut(&address) {
        *n -= 1;
        if *n == 0 {
            per_address.remove(&address);
        }
    }
}

/// The first `N` bytes of `msg`, a `protocol` header whose first 16 bits are `version`.
pub(crate) fn versioned_header<'a, const N: usize>(
    msg: &'a [u8],
    protocol: &'static str,
    what: &'static str,
    version: u16,
) -> Result<&'a [u8; N], DecodeError> {
    let h = msg
        .first_chunk::<N>()
        .ok_or(DecodeError::Truncated { what, at: 0 })?;
    let found = crate::bytes::read_u16(h);
    if found != version {
        return Err(DecodeError::BadVersion {
            protocol,
            expected: version,
            found: u32::from(found),
        });
    }
    Ok(h)
}

/// For IPFIX over TCP: the length of the message at the start of `buf` once its header is
/// there (`None` before), or why the stream cannot be IPFIX.
pub fn ipfix_message_len(buf: &[u8]) -> Option<Result<usize, DecodeError>> {
    let version = crate::bytes::get_u16(buf, 0)?;
    let len = usize::from(crate::bytes::get_u16(buf, 2)?);
    if version != crate::ipfix::VERSION {
        return Some(Err(DecodeError::BadVersion {
            protocol: "IPFIX",
            expected: crate::ipfix::VERSION,
            found: u32::from(version),
        }));
    }
    if len < crate::ipfix::HEADER_LEN {
        return Some(Err(DecodeError::BadLength {
            unit: "octets",
            declared: len,
            actual: crate::ipfix::HEADER_LEN,
        }));
    }
    Some(Ok(len))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::flowrecord::{Counters, EndReason};
    use crate::{ipfix, netflow5, netflow9};
    use proptest::prelude::*;

    pub(crate) const T0: u64 = 1_700_000_000_000_000_000;
    const MS: u64 = 1_000_000;
    pub(crate) const SEC: u64 = 1_000_000_000;
    const EXPORTER: [u8; 16] = [0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 192, 0, 2, 1];

    /// Decodes `msgs` in order and returns the flows, interfaces (index, name, description)
    /// and summaries.
    #[allow(clippy::type_complexity)]
    fn run(
        d: &mut Decoder,
        p: Protocol,
        msgs: &[Vec<u8>],
    ) -> (
        Vec<DecodedFlow>,
        Vec<(u32, String, String)>,
        Vec<Result<MessageSummary, DecodeError>>,
    ) {
        let (mut flows, mut ifs, mut sums) = (Vec::new(), Vec::new(), Vec::new());
        for m in msgs {
            sums.push(d.decode(p, EXPORTER, m, T0, &mut |x| match x {
                Decoded::Flow(f) => flows.push(f),
                Decoded::Interface {
                    index,
                    name,
                    description,
                    ..
                } => ifs.push((index, name.to_string(), description.to_string())),
                Decoded::Counters { .. } => {}
            }));
        }
        (flows, ifs, sums)
    }

    fn record(ipv6: bool, proto: u8, i: u64) -> FlowRecord {
        let mut r = ipfix::tests::tcp(ipv6);
        r.proto = proto;
        if r.is_icmp() {
            r.sport = 0;
            r.dport = 0x0800;
        }
        r.fwd.first_ns = T0 + i * MS;
        r.fwd.last_ns = T0 + (i + 5) * MS;
        r
    }

    prop_compose! {
        fn counters(packets: std::ops::Range<u64>)(
            packets in packets, octets in any::<u64>(), tcp_flags in any::<u16>(),
            first in 0..1_000_000u64, len in 0..1_000_000u64,
        ) -> Counters {
            if packets == 0 {
                return Counters::default();
            }
            Counters { packets, octets, tcp_flags, first_ns: T0 + first * MS,
                       last_ns: T0 + (first + len) * MS }
        }
    }

    prop_compose! {
        fn flow()(
            ipv6 in any::<bool>(), proto in prop_oneof![Just(6u8), Just(17), Just(1), Just(58), Just(47)],
            src in any::<[u8; 16]>(), dst in any::<[u8; 16]>(),
            sport in any::<u16>(), dport in any::<u16>(), vlan in 0..4096u16,
            interface in any::<u32>(), reason in 1..=5u8,
            fwd in counters(1..u64::from(u32::MAX)), rev in counters(0..u64::from(u32::MAX)),
        ) -> FlowRecord {
            let mut r = FlowRecord { ipv6, proto, src, dst, sport, dport, vlan, interface, fwd, rev,
                                     end_reason: EndReason::from_u8(reason).unwrap() };
            if !ipv6 {
                r.src[4..].fill(0);
                r.dst[4..].fill(0);
            }
            if r.is_icmp() {
                r.sport = 0;
            }
            r
        }
    }

    /// Records in a fixed order: encoders group them by address family.
    fn sorted(mut v: Vec<FlowRecord>) -> Vec<FlowRecord> {
        v.sort_by_key(|r| format!("{r:?}"));
        v
    }

    fn ipfix_messages(recs: &[FlowRecord], max: usize) -> Vec<Vec<u8>> {
        let mut enc = ipfix::Encoder::new(ipfix::Config {
            max_message_len: max,
            ..ipfix::Config::new(7)
        })
        .unwrap();
        let mut v = Vec::new();
        enc.encode(recs, T0 + 2000 * SEC, &mut |m| v.push(m.to_vec()));
        v
    }

    proptest! {
        /// tapflow's IPFIX export decodes to the records it encoded.
        #[test]
        fn ipfix_round_trip(recs in proptest::collection::vec(flow(), 0..60), max in 400..3000usize) {
            let msgs = ipfix_messages(&recs, max);
            let mut d = Decoder::new(Limits::default());
            let (flows, ifs, sums) = run(&mut d, Protocol::Ipfix, &msgs);
            prop_assert!(ifs.is_empty());
            let got: Vec<FlowRecord> = flows.iter().map(|f| f.flow).collect();
            prop_assert_eq!(sorted(got), sorted(recs.clone()));
            for s in &sums {
                let s = s.as_ref().unwrap();
                prop_assert_eq!((s.sequence_lost, s.template_missing, s.malformed), (0, 0, 0));
                prop_assert_eq!(s.domain, 7);
            }
            prop_assert!(flows.iter().all(|f| f.sampling == 1 && f.domain == 7));
        }

        /// tapflow's NetFlow v9 export decodes to what v9 carries of the records: initiator
        /// TCP flags' low byte, one time span for both directions, no end reason.
        #[test]
        fn netflow9_round_trip(recs in proptest::collection::vec(flow(), 0..60)) {
            let mut enc = netflow9::Encoder::new(netflow9::Config::new(9, T0 - 3600 * SEC)).unwrap();
            let mut msgs = Vec::new();
            enc.encode(&recs, T0 + 2000 * SEC, &mut |m| msgs.push(m.to_vec()));
            let mut d = Decoder::new(Limits::default());
            let (flows, _, sums) = run(&mut d, Protocol::NetflowV9, &msgs);
            let want: Vec<FlowRecord> = recs.iter().map(|r| {
                let mut w = *r;
                let (start, end) = (r.start_ns(), r.end_ns());
                w.fwd.tcp_flags &= 0xff;
                w.fwd.first_ns = start;
                w.fwd.last_ns = end;
                if w.rev.packets > 0 {
                    w.rev.tcp_flags = 0;
                    w.rev.first_ns = start;
                    w.rev.last_ns = end;
                }
                w.end_reason = EndReason::default();
                w
            }).collect();
            let got: Vec<FlowRecord> = flows.iter().map(|f| f.flow).collect();
            prop_assert_eq!(sorted(got), sorted(want));
            prop_assert!(sums.iter().all(|s| s.unwrap().sequence_lost == 0));
        }

        /// tapflow's NetFlow v5 export decodes to one uniflow per direction with packets.
        #[test]
        fn netflow5_round_trip(recs in proptest::collection::vec(flow(), 0..80)) {
            let mut enc = netflow5::Encoder::new(netflow5::Config::new(T0 - 3600 * SEC)).unwrap();
            let mut msgs = Vec::new();
            enc.encode(&recs, T0 + 2000 * SEC + 7 * MS, &mut |m| msgs.push(m.to_vec()));
            let mut d = Decoder::new(Limits::default());
            let (flows, _, sums) = run(&mut d, Protocol::NetflowV5, &msgs);
            let mut want = Vec::new();
            for r in recs.iter().filter(|r| !r.ipv6) {
                let uni = |c: &Counters, rev: bool| {
                    let mut w = FlowRecord { ipv6: false, proto: r.proto, vlan: 0,
                        interface: r.interface.min(65535), ..FlowRecord::default() };
                    (w.src, w.dst, w.sport, w.dport) = if rev {
                        (r.dst, r.src, if r.is_icmp() { 0 } else { r.dport }, if r.is_icmp() { 0 } else { r.sport })
                    } else {
                        (r.src, r.dst, r.sport, r.dport)
                    };
                    w.fwd = Counters { packets: c.packets.min(u32::MAX.into()),
                        octets: c.octets.min(u32::MAX.into()), tcp_flags: c.tcp_flags & 0xff, ..*c };
                    w
                };
                want.push(uni(&r.fwd, false));
                if r.rev.packets > 0 {
                    want.push(uni(&r.rev, true));
                }
            }
            let got: Vec<FlowRecord> = flows.iter().map(|f| f.flow).collect();
            prop_assert_eq!(got, want);
            prop_assert!(sums.iter().all(|s| s.unwrap().sequence_lost == 0));
        }

        /// No bytes make any decoder panic, and state from earlier messages does not either.
        #[test]
        fn arbitrary_bytes_never_panic(msgs in proptest::collection::vec(
            (0..4usize, proptest::collection::vec(any::<u8>(), 0..300)), 0..20)) {
            let mut d = Decoder::new(Limits { max_templates_per_exporter: 4, max_exporters: 4,
                                              max_exporters_per_address: 2,
                                              max_templates: 8, max_fields: 16 });
            let protocols = [Protocol::Ipfix, Protocol::NetflowV9, Protocol::NetflowV5, Protocol::Sflow5];
            for (p, m) in &msgs {
                let _ = d.decode(protocols[*p], EXPORTER, m, T0, &mut |_| {});
            }
        }

        /// Valid messages with one byte changed never make the decoder panic.
        #[test]
        fn mutated_messages_never_panic(at in any::<prop::sample::Index>(), byte in any::<u8>(),
                                        recs in proptest::collection::vec(flow(), 1..10)) {
            let mut msgs = ipfix_messages(&recs, 1400);
            let m = &mut msgs[0];
            let i = at.index(m.len());
            m[i] = byte;
            let mut d = Decoder::new(Limits::default());
            let _ = run(&mut d, Protocol::Ipfix, &msgs);
        }
    }

    #[test]
    fn sequence_counts_gaps_and_survives_reorder_and_restart() {
        let mut s = Sequence::default();
        assert_eq!(
            s.observe(100, 10, 0).lost,
            0,
            "the first message sets the count"
        );
        assert_eq!(s.observe(110, 10, 0).lost, 0);
        assert_eq!(s.observe(125, 5, 0).lost, 5, "five lost");
        assert_eq!(s.observe(120, 5, 0), Gap::default(), "late: counts nothing");
        assert_eq!(s.observe(130, 5, 0).lost, 0, "back in order");
        assert_eq!(s.observe(3, 5, 0), Gap::default(), "behind");
        assert_eq!(
            s.observe(8, 5, 0),
            Gap {
                lost: 0,
                reset: true
            },
            "behind twice: a restart"
        );
        assert_eq!(s.observe(15, 1, 0).lost, 2);
        assert_eq!(
            s.observe(16 + MAX_SEQUENCE_GAP + 1, 1, 0),
            Gap {
                lost: 0,
                reset: true
            },
            "a huge jump resets"
        );
        assert_eq!(s.observe(17 + MAX_SEQUENCE_GAP + 1, 1, 0), Gap::default());
        let mut w = Sequence::default();
        let _ = w.observe(u32::MAX - 1, 1, 0);
        assert_eq!(w.observe(1, 1, 0).lost, 2, "wraps modulo 2^32");
    }

    #[test]
    fn sequence_readings_of_other_exporters() {
        // softflowd: flow records up to and including the message, options records apart.
        let mut s = Sequence::default();
        assert_eq!(s.observe(19, 20, 1).lost, 0);
        assert_eq!(s.observe(41, 22, 0).lost, 0);
        assert_eq!(s.observe(63, 22, 0).lost, 0);
        assert_eq!(s.observe(90, 22, 0).lost, 5, "a gap in that reading");
        // RFC 7011 with options records counted, and an exporter that leaves them out.
        let mut r = Sequence::default();
        let _ = r.observe(0, 5, 2);
        assert_eq!(r.observe(5, 4, 0).lost, 0);
        let mut o = Sequence::default();
        let _ = o.observe(0, 5, 2);
        assert_eq!(o.observe(3, 4, 0).lost, 0);
        assert_eq!(o.observe(7, 4, 0).lost, 0);
        assert_eq!(o.observe(14, 1, 0).lost, 3);
    }

    #[test]
    fn ipfix_sequence_loss_is_records() {
        let recs: Vec<FlowRecord> = (0..40).map(|i| record(false, 6, i)).collect();
        let msgs = ipfix_messages(&recs, 600);
        assert!(msgs.len() >= 4);
        let mut d = Decoder::new(Limits::default());
        let dropped = msgs[2].clone();
        let kept: Vec<Vec<u8>> = msgs
            .iter()
            .enumerate()
            .filter(|(i, _)| *i != 2)
            .map(|(_, m)| m.clone())
            .collect();
        let (flows, _, sums) = run(&mut d, Protocol::Ipfix, &kept);
        let mut nd = Decoder::new(Limits::default());
        let (lost, _, _) = run(&mut nd, Protocol::Ipfix, &[msgs[0].clone(), dropped]);
        let lost_records = lost.len() as u64
            - run(
                &mut Decoder::new(Limits::default()),
                Protocol::Ipfix,
                &msgs[..1],
            )
            .0
            .len() as u64;
        let total: u64 = sums.iter().map(|s| s.unwrap().sequence_lost).sum();
        assert_eq!(total, lost_records);
        assert_eq!(flows.len() as u64 + lost_records, 40);
    }

    #[test]
    fn data_before_its_template_is_missing_then_decodes() {
        let recs = [record(false, 6, 0), record(true, 17, 1)];
        let msgs = ipfix_messages(&recs, 1400);
        // The same message without its Template Set.
        let m = &msgs[0];
        let tlen = usize::from(crate::bytes::read_u16(&m[18..]));
        let mut bare = m[..16].to_vec();
        bare.extend_from_slice(&m[16 + tlen..]);
        let len = bare.len() as u16;
        bare[2..4].copy_from_slice(&len.to_be_bytes());
        let mut d = Decoder::new(Limits::default());
        let (flows, _, sums) = run(&mut d, Protocol::Ipfix, &[bare.clone(), m.clone(), bare]);
        let sums: Vec<MessageSummary> = sums.into_iter().map(Result::unwrap).collect();
        assert_eq!(sums[0].template_missing, 2);
        assert_eq!(
            (sums[0].records, sums[1].records, sums[2].records),
            (0, 2, 2)
        );
        assert_eq!(sums[1].templates, 2);
        assert_eq!(flows.len(), 4);
    }

    /// Builds an IPFIX message of domain 1 from sets (id, body).
    pub(crate) fn ipfix_msg(seq: u32, sets: &[(u16, Vec<u8>)]) -> Vec<u8> {
        let mut m = vec![0, 10, 0, 0];
        m.extend_from_slice(&1_700_000_000u32.to_be_bytes());
        m.extend_from_slice(&seq.to_be_bytes());
        m.extend_from_slice(&1u32.to_be_bytes());
        for (id, body) in sets {
            m.extend_from_slice(&id.to_be_bytes());
            m.extend_from_slice(&(body.len() as u16 + 4).to_be_bytes());
            m.extend_from_slice(body);
        }
        let len = m.len() as u16;
        m[2..4].copy_from_slice(&len.to_be_bytes());
        m
    }

    fn be(v: &[u32]) -> Vec<u8> {
        v.iter().flat_map(|x| x.to_be_bytes()).collect()
    }

    /// Field specifiers: (id, len) pairs, an id with the top bit set followed by its PEN.
    pub(crate) fn specs(fields: &[(u16, u16, u32)]) -> Vec<u8> {
        let mut b = Vec::new();
        for &(id, len, pen) in fields {
            let raw = if pen != 0 { id | 0x8000 } else { id };
            b.extend_from_slice(&raw.to_be_bytes());
            b.extend_from_slice(&len.to_be_bytes());
            if pen != 0 {
                b.extend_from_slice(&pen.to_be_bytes());
            }
        }
        b
    }

    pub(crate) fn template_record(id: u16, fields: &[(u16, u16, u32)]) -> Vec<u8> {
        let mut b = id.to_be_bytes().to_vec();
        b.extend_from_slice(&(fields.len() as u16).to_be_bytes());
        b.extend_from_slice(&specs(fields));
        b
    }

    #[test]
    fn ipfix_elements_a_third_party_exporter_sends() {
        // softflowd-like: uptime times with systemInitTimeMilliseconds from an options record,
        // reduced-size counters, an enterprise element to skip, a variable-length one, a reverse
        // octet count, dot1qVlanId, egressInterface, icmp type and code apart.
        let tmpl = template_record(
            300,
            &[
                (8, 4, 0),
                (12, 4, 0),
                (4, 1, 0),
                (176, 1, 0),
                (177, 1, 0),
                (2, 2, 0),
                (1, 4, 0),
                (1, 4, ipfix::REVERSE_PEN),
                (22, 4, 0),
                (21, 4, 0),
                (999, 3, 9),
                (96, 0xffff, 0), // applicationName, variable length
                (243, 2, 0),
                (14, 4, 0),
                (10, 2, 0),
            ],
        );
        let mut opts = 400u16.to_be_bytes().to_vec();
        opts.extend_from_slice(&[0, 2, 0, 1]);
        opts.extend_from_slice(&specs(&[(144, 4, 0), (160, 8, 0)]));
        let init_ms = 1_699_999_000_000u64;
        let mut odata = 7u32.to_be_bytes().to_vec();
        odata.extend_from_slice(&init_ms.to_be_bytes());
        let mut data = vec![10, 1, 2, 3, 10, 9, 8, 7, 1, 3, 1, 0, 4];
        data.extend_from_slice(&be(&[1500, 2200, 5000, 6000]));
        data.extend_from_slice(&[1, 2, 3, 5, b'h', b't', b't', b'p', b's']);
        data.extend_from_slice(&[0x10, 0x64]); // VLAN 100 with a priority bit
        data.extend_from_slice(&be(&[4]));
        data.extend_from_slice(&[0, 3]);
        data.extend_from_slice(&[0, 0, 0]); // padding
        let m = ipfix_msg(0, &[(2, tmpl), (3, opts), (400, odata), (300, data)]);
        let mut d = Decoder::new(Limits::default());
        let (flows, _, sums) = run(&mut d, Protocol::Ipfix, &[m]);
        let s = sums[0].unwrap();
        assert_eq!((s.records, s.templates, s.malformed), (1, 2, 0), "{s:?}");
        let f = flows[0];
        assert_eq!((f.egress, f.domain, f.sampling), (4, 1, 1));
        let r = f.flow;
        assert_eq!(r.src_addr().to_string(), "10.1.2.3");
        assert_eq!((r.proto, r.sport, r.dport), (1, 0, 0x0301));
        assert_eq!((r.vlan, r.interface), (100, 3));
        assert_eq!((r.fwd.packets, r.fwd.octets, r.rev.octets), (4, 1500, 2200));
        assert_eq!(r.fwd.first_ns, (init_ms + 5000) * MS);
        assert_eq!(r.fwd.last_ns, (init_ms + 6000) * MS);
        // No reverse packets: the reverse direction takes the record's times.
        assert_eq!(
            (r.rev.first_ns, r.rev.last_ns),
            (r.fwd.first_ns, r.fwd.last_ns)
        );
    }

    #[test]
    fn ipfix_withdrawal_refresh_and_interface_names() {
        let t1 = template_record(256, &[(8, 4, 0), (12, 4, 0), (2, 4, 0)]);
        let d1 = vec![1, 1, 1, 1, 2, 2, 2, 2, 0, 0, 0, 9];
        let mut d = Decoder::new(Limits::default());
        let (flows, _, _) = run(
            &mut d,
            Protocol::Ipfix,
            &[ipfix_msg(0, &[(2, t1.clone()), (256, d1.clone())])],
        );
        assert_eq!(flows[0].flow.fwd.packets, 9);
        assert_eq!(d.templates(), 1);
        // Refresh with another layout: the same id now has the counter first.
        let t2 = template_record(256, &[(2, 4, 0), (8, 4, 0), (12, 4, 0)]);
        let (flows, _, _) = run(
            &mut d,
            Protocol::Ipfix,
            &[ipfix_msg(1, &[(2, t2), (256, d1.clone())])],
        );
        assert_eq!(flows[0].flow.fwd.packets, 0x01010101);
        assert_eq!(d.templates(), 1);
        // Withdraw 256; its data is then missing.
        let (_, _, sums) = run(
            &mut d,
            Protocol::Ipfix,
            &[ipfix_msg(2, &[(2, vec![1, 0, 0, 0]), (256, d1.clone())])],
        );
        assert_eq!(sums[0].unwrap().template_missing, 1);
        assert_eq!(d.templates(), 0);
        // Withdraw all: template id 2, field count 0.
        run(&mut d, Protocol::Ipfix, &[ipfix_msg(3, &[(2, t1.clone())])]);
        assert_eq!(d.templates(), 1);
        run(
            &mut d,
            Protocol::Ipfix,
            &[ipfix_msg(4, &[(2, vec![0, 2, 0, 0])])],
        );
        assert_eq!(d.templates(), 0);
        // Interface names: scope ingressInterface, interfaceName variable, interfaceDescription.
        let mut opts = 500u16.to_be_bytes().to_vec();
        opts.extend_from_slice(&[0, 3, 0, 1]);
        opts.extend_from_slice(&specs(&[(10, 4, 0), (82, 0xffff, 0), (83, 8, 0)]));
        let mut od = be(&[7]);
        od.extend_from_slice(b"\x04eth0lan side");
        od.extend_from_slice(&be(&[8]));
        od.extend_from_slice(b"\x03wanuplink\0\0");
        let (_, ifs, _) = run(
            &mut d,
            Protocol::Ipfix,
            &[ipfix_msg(5, &[(3, opts), (500, od)])],
        );
        assert_eq!(
            ifs,
            [
                (7, "eth0".into(), "lan side".into()),
                (8, "wan".into(), "uplink".into())
            ]
        );
    }

    #[test]
    fn sampling_scales_counters() {
        // Options: samplerId 5 → samplerRandomInterval 100; then a record naming sampler 5,
        // one with its own samplingPacketInterval/Space 1 in 10, one naming no sampler.
        let mut opts = 600u16.to_be_bytes().to_vec();
        opts.extend_from_slice(&[0, 2, 0, 1]);
        opts.extend_from_slice(&specs(&[(48, 1, 0), (50, 4, 0)]));
        let od = vec![5, 0, 0, 0, 100];
        let t = template_record(
            601,
            &[(2, 4, 0), (1, 4, 0), (48, 1, 0), (305, 4, 0), (306, 4, 0)],
        );
        let mut data = be(&[2, 100]);
        data.extend_from_slice(&[5, 0, 0, 0, 0, 0, 0, 0, 0]);
        data.extend_from_slice(&be(&[2, 100]));
        data.extend_from_slice(&[0]);
        data.extend_from_slice(&be(&[1, 9]));
        let t2 = template_record(602, &[(2, 4, 0)]);
        let m = ipfix_msg(
            0,
            &[
                (3, opts),
                (600, od),
                (2, t),
                (2, t2),
                (601, data),
                (602, be(&[3])),
            ],
        );
        let mut d = Decoder::new(Limits::default());
        let (flows, _, _) = run(&mut d, Protocol::Ipfix, &[m]);
        let got: Vec<(u64, u64, u32)> = flows
            .iter()
            .map(|f| (f.flow.fwd.packets, f.flow.fwd.octets, f.sampling))
            .collect();
        assert_eq!(got, [(200, 10000, 100), (20, 1000, 10), (300, 0, 100)]);
    }

    /// An IPFIX message of no set from observation domain `domain`.
    fn from_domain(domain: u32) -> Vec<u8> {
        let mut m = ipfix_msg(0, &[]);
        m[12..16].copy_from_slice(&domain.to_be_bytes());
        m
    }

    #[test]
    fn one_address_forging_domains_holds_its_share_and_locks_no_one_out() {
        let mut d = Decoder::new(Limits::default());
        let limits = Limits::default();
        for domain in 0..10_000u32 {
            let at = T0 + u64::from(domain) * MS;
            assert!(
                d.decode(
                    Protocol::Ipfix,
                    EXPORTER,
                    &from_domain(domain),
                    at,
                    &mut |_| {}
                )
                .is_ok()
            );
        }
        // The address keeps its newest 64 domains, not 4096.
        assert_eq!(d.exporters(), limits.max_exporters_per_address);
        let newest = d.decode(
            Protocol::Ipfix,
            EXPORTER,
            &from_domain(9_999),
            T0 + 10 * SEC,
            &mut |_| {},
        );
        assert!(newest.is_ok());
        // A new exporter is taken at once.
        let other = [7; 16];
        let s = d.decode(
            Protocol::Ipfix,
            other,
            &from_domain(1),
            T0 + 10 * SEC,
            &mut |_| {},
        );
        assert_eq!(s.unwrap().domain, 1);
    }

    #[test]
    fn past_the_limit_the_state_idle_longest_makes_room_and_a_refusal_names_the_domain() {
        let limits = Limits {
            max_exporters: 4,
            ..Limits::default()
        };
        let mut d = Decoder::new(limits);
        for a in 0..4u8 {
            let t = T0 + u64::from(a) * SEC;
            assert!(
                d.decode(Protocol::Ipfix, [a; 16], &from_domain(1), t, &mut |_| {})
                    .is_ok()
            );
        }
        // None idle for a minute: refused, naming the domain.
        let e = d
            .decode(
                Protocol::Ipfix,
                [9; 16],
                &from_domain(42),
                T0 + 5 * SEC,
                &mut |_| {},
            )
            .unwrap_err();
        assert_eq!(
            e,
            DecodeError::TooManyExporters {
                domain: 42,
                limit: 4
            }
        );
        // The one idle longest gives way once it has been idle that long; the rest stay.
        let later = T0 + EVICT_IDLE_NS + SEC;
        assert!(
            d.decode(
                Protocol::Ipfix,
                [9; 16],
                &from_domain(42),
                later,
                &mut |_| {}
            )
            .is_ok()
        );
        assert_eq!(d.exporters(), 4);
        let e = d.decode(
            Protocol::Ipfix,
            [8; 16],
            &from_domain(1),
            later,
            &mut |_| {},
        );
        assert!(e.is_ok(), "[1; 16] was idle as long: {e:?}");
        assert!(d.exporters.contains_key(&([3; 16], Protocol::Ipfix, 1)));
        assert!(!d.exporters.contains_key(&([0; 16], Protocol::Ipfix, 1)));
    }

    #[test]
    fn limits_refuse_what_does_not_fit() {
        let limits = Limits {
            max_templates_per_exporter: 2,
            max_exporters: 1,
            max_exporters_per_address: 1,
            max_templates: 3,
            max_fields: 3,
        };
        let mut d = Decoder::new(limits);
        let sets: Vec<(u16, Vec<u8>)> = (256..260)
            .map(|id| (2, template_record(id, &[(2, 4, 0)])))
            .collect();
        let (_, _, sums) = run(&mut d, Protocol::Ipfix, &[ipfix_msg(0, &sets)]);
        let s = sums[0].unwrap();
        assert_eq!((s.templates, s.malformed), (2, 2));
        assert_eq!(s.refused.unwrap().reason(), "too_many_templates");
        let wide = template_record(300, &[(2, 4, 0); 4]);
        let (_, _, sums) = run(&mut d, Protocol::Ipfix, &[ipfix_msg(1, &[(2, wide)])]);
        assert_eq!(
            sums[0].unwrap().refused.unwrap().reason(),
            "too_many_fields"
        );
        // A second exporter is refused whole.
        let e = d
            .decode(
                Protocol::Ipfix,
                [1; 16],
                &ipfix_msg(0, &[]),
                T0,
                &mut |_| {},
            )
            .unwrap_err();
        assert_eq!(e.reason(), "too_many_exporters");
        assert_eq!(
            e.to_string(),
            "exporter refused (domain 1): 1 exporters already known, none idle"
        );
        // Expiry forgets the exporter and its templates.
        d.expire(T0 + 10 * SEC, 5 * SEC);
        assert_eq!((d.exporters(), d.templates()), (0, 0));
        assert!(
            d.decode(
                Protocol::Ipfix,
                [1; 16],
                &ipfix_msg(0, &[]),
                T0,
                &mut |_| {}
            )
            .is_ok()
        );
    }

    #[test]
    fn bad_framing_is_an_error_and_emits_nothing() {
        let mut d = Decoder::new(Limits::default());
        let t = template_record(256, &[(2, 4, 0)]);
        let mut m = ipfix_msg(0, &[(2, t), (256, be(&[1]))]);
        let n = m.len();
        m[n - 6] = 0xff; // the data set's length
        let e = d
            .decode(Protocol::Ipfix, EXPORTER, &m, T0, &mut |_| {
                panic!("emitted")
            })
            .unwrap_err();
        assert_eq!(e.reason(), "bad_set");
        assert_eq!(
            d.templates(),
            0,
            "the template before the bad set is not applied either"
        );
        let e = d
            .decode(Protocol::NetflowV5, EXPORTER, &[0, 9], T0, &mut |_| {})
            .unwrap_err();
        assert_eq!(e.to_string(), "NetFlow v5 header truncated at offset 0");
        let e = d
            .decode(
                Protocol::NetflowV9,
                EXPORTER,
                &[0, 10, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0],
                T0,
                &mut |_| {},
            )
            .unwrap_err();
        assert_eq!(e.to_string(), "version 10 where NetFlow v9 has 9");
    }

    #[test]
    fn ipfix_message_len_reads_the_header() {
        assert_eq!(ipfix_message_len(&[0, 10, 1]), None);
        assert_eq!(ipfix_message_len(&[0, 10, 1, 0]), Some(Ok(256)));
        assert_eq!(
            ipfix_message_len(&[0, 9, 1, 0])
                .unwrap()
                .unwrap_err()
                .reason(),
            "bad_version"
        );
        assert_eq!(
            ipfix_message_len(&[0, 10, 0, 15])
                .unwrap()
                .unwrap_err()
                .reason(),
            "bad_length"
        );
    }
}
