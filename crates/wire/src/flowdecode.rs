//! Flow collection: decodes IPFIX (RFC 7011), NetFlow v9 (RFC 3954), NetFlow v5 and sFlow v5
//! messages from many exporters into [`FlowRecord`]s.
//!
//! One [`Decoder`] keeps the state a collector needs between messages: the templates each
//! exporter announced, keyed by (exporter address, observation domain, template id), the
//! sampling rates its options records gave, and the sequence numbers it counts, keyed by
//! (exporter address, observation domain). The protocols' own decoding lives beside their
//! encoders (`ipfix.rs`, `netflow9.rs`, `netflow5.rs`) and in `sflow.rs`; templates and what
//! each field means to a [`FlowRecord`] in `template.rs`.
//!
//! Contract: [`Decoder::decode`] never panics on any bytes, allocates only when a template or a
//! new exporter arrives, and when it returns an error it has emitted nothing and changed no
//! state other than the exporter's last-heard time.

use std::collections::HashMap;

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
    /// A new exporter while [`Limits::max_exporters`] are known.
    #[error("exporter refused: {limit} exporters already known")]
    TooManyExporters {
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
            max_templates: 65536,
            max_fields: 256,
        }
    }
}

/// Largest forward jump of a sequence number counted as loss; a longer one (an exporter that
/// restarted, or a hostile number) restarts the count instead of adding billions.
pub const MAX_SEQUENCE_GAP: u32 = 1 << 22;

/// Samplers (IE 48 → interval) and sFlow data sources one exporter may hold.
pub const MAX_SAMPLERS: usize = 64;

/// The sequence number an exporter and domain should send next.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Sequence {
    next: Option<u32>,
    /// Messages in a row that came from behind `next`.
    behind: u8,
}

impl Sequence {
    /// Takes a message numbered `seq` that carries `count` units (records or packets) and
    /// returns the units lost before it. A message from behind is late (reordered) and counts
    /// nothing; a second one in a row, or a jump of more than [`MAX_SEQUENCE_GAP`] either way,
    /// means the exporter restarted: the count starts again from it.
    pub(crate) fn observe(&mut self, seq: u32, count: u32) -> u64 {
        let Some(next) = self.next else {
            self.next = Some(seq.wrapping_add(count));
            return 0;
        };
        let ahead = seq.wrapping_sub(next);
        let behind = next.wrapping_sub(seq);
        if ahead <= MAX_SEQUENCE_GAP {
            self.next = Some(seq.wrapping_add(count));
            self.behind = 0;
            u64::from(ahead)
        } else if behind <= MAX_SEQUENCE_GAP && self.behind == 0 {
            self.behind = 1;
            0
        } else {
            self.next = Some(seq.wrapping_add(count));
            self.behind = 0;
            0
        }
    }

    /// Forgets the expected number: the next message starts the count again.
    pub(crate) fn resync(&mut self) {
        self.next = None;
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

    /// Decodes the records of a data set of template `t` (`at`: the body's offset in the
    /// message) and returns how many there were.
    pub(crate) fn data_set(
        &mut self,
        id: u16,
        body: &[u8],
        at: usize,
        clock: Clock,
        emit: &mut Emit<'_, '_>,
    ) -> u32 {
        let Some(t) = self.templates.get(id) else {
            emit.summary.template_missing += 1;
            return 0;
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
        n
    }
}

/// The collector's decoding state for all exporters.
#[derive(Debug)]
pub struct Decoder {
    limits: Limits,
    exporters: HashMap<ExporterKey, Exporter>,
    budget: Budget,
}

impl Decoder {
    /// A decoder that knows no exporter yet.
    pub fn new(limits: Limits) -> Decoder {
        Decoder {
            limits,
            exporters: HashMap::new(),
            budget: Budget {
                per_exporter: limits.max_templates_per_exporter,
                total: limits.max_templates,
                held: 0,
                max_fields: limits.max_fields,
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

    /// The state of `key`, created if new and the limit allows.
    fn exporter(
        &mut self,
        key: ExporterKey,
        now_ns: u64,
    ) -> Result<(&mut Exporter, &mut Budget), DecodeError> {
        let n = self.exporters.len();
        let ex = match self.exporters.entry(key) {
            std::collections::hash_map::Entry::Occupied(e) => e.into_mut(),
            std::collections::hash_map::Entry::Vacant(_) if n >= self.limits.max_exporters => {
                return Err(DecodeError::TooManyExporters {
                    limit: self.limits.max_exporters,
                });
            }
            std::collections::hash_map::Entry::Vacant(e) => e.insert(Exporter::default()),
        };
        ex.last_ns = now_ns;
        Ok((ex, &mut self.budget))
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
        let budget = &mut self.budget;
        self.exporters.retain(|_, ex| {
            let keep = now_ns.saturating_sub(ex.last_ns) < idle_ns;
            if !keep {
                ex.templates.clear(budget);
            }
            keep
        });
    }
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
