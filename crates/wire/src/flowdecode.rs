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

use crate::flowrecord::FlowRecord;

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

/// The collector's decoding state for all exporters.
#[derive(Debug)]
pub struct Decoder {
    limits: Limits,
}

impl Decoder {
    /// A decoder that knows no exporter yet.
    pub fn new(limits: Limits) -> Decoder {
        Decoder { limits }
    }

    /// The limits.
    pub fn limits(&self) -> &Limits {
        &self.limits
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
        let _ = (protocol, exporter, now_ns, out);
        Err(DecodeError::Truncated {
            what: "message",
            at: msg.len(),
        })
    }

    /// Forgets exporters (templates, sequence state) not heard from for `idle_ns`.
    pub fn expire(&mut self, now_ns: u64, idle_ns: u64) {
        let _ = (now_ns, idle_ns);
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
