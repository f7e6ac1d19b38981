//! IPFIX export (RFC 7011) of biflow records (RFC 5103): a stateful encoder the exporter thread
//! owns, one per collector, that writes whole messages into one reusable buffer.
//!
//! ```text
//! +--------------------------------------------------------------+
//! | header (16): version 10 | length | export time | sequence    |
//! |              | observation domain id                         |
//! +--------------------------------------------------------------+
//! | Template Set (id 2): template 256 (IPv4), 257 (IPv6)         |  when templates are due
//! +--------------------------------------------------------------+
//! | Data Set 256: IPv4 records, 83 octets each                   |  if the message has any
//! +--------------------------------------------------------------+
//! | Data Set 257: IPv6 records, 107 octets each                  |  if the message has any
//! +--------------------------------------------------------------+
//! ```
//!
//! Each call to [`Encoder::encode`] cuts its records into consecutive runs, one per message,
//! each as long as fits in `max_message_len`; within a message the IPv4 records of the run go
//! in one Data Set and the IPv6 records in another, each in input order. Over UDP, a message
//! whose unused room is shorter than one record of its last Data Set is padded with zeros to
//! exactly `max_message_len`, inside that set (RFC 7011 §3.3.1: padding shorter than any record
//! of its set): full messages are then all of one size, and a run of them leaves as one
//! segmented send (`UDP_SEGMENT`). Collectors read whole records and skip the padding. The
//! sequence number is the count of data records sent before the message in this session, so a
//! template-only message does not advance it.
//!
//! Templates ride in the same message as the data, before it (RFC 7011 §8: the Template Set
//! comes first). Over UDP they go in the first message of the session and again in the next
//! message once [`Refresh::secs`] have passed or [`Refresh::messages`] messages have gone out
//! since the last one that carried them; [`Encoder::tick`] sends a template-only message when
//! the refresh is due and there is no data. Over TCP they go once, at the start of the session.
//! Templates are never withdrawn (RFC 7011 §8.1 forbids withdrawals over UDP; over TCP the end
//! of the session withdraws them).
//!
//! The record's forward direction is the initiator (`biflowDirection` = 1); flow keys are never
//! reversed. Reverse elements are the forward ones with PEN 29305 (RFC 5103 §6.1). The reverse
//! `tcpControlBits` and times come *before* their forward counterparts: nfdump 1.7.1 decodes
//! every reverse element other than the counters as the forward one, so the forward value,
//! written last, wins there.

use crate::bytes::Put;
use crate::bytes::{get_u16, get_u32, read_u16, read_u32};
use crate::flowdecode::{DecodeError, Emit, Exporter, MessageSummary, versioned_header};
use crate::flowexport::{MessageFormat, MessageHeader, TemplateEncoder, saturate, unix_secs};
use crate::flowrecord::FlowRecord;
use crate::template::{Budget, Clock, ipfix_field};

pub use crate::flowexport::{
    ConfigError, DEFAULT_REFRESH_MESSAGES, DEFAULT_REFRESH_SECS, Refresh, SET_HEADER_LEN, Stats,
};

/// `version` in the message header.
pub const VERSION: u16 = 10;

/// Length of the message header.
pub const HEADER_LEN: usize = 16;

/// Set id of a Template Set.
pub const TEMPLATE_SET_ID: u16 = 2;

/// Template id (and Data Set id) of IPv4 records.
pub const TEMPLATE_ID_V4: u16 = 256;

/// Template id (and Data Set id) of IPv6 records.
pub const TEMPLATE_ID_V6: u16 = 257;

/// Private Enterprise Number of the reverse Information Elements (RFC 5103 §6.1).
pub const REVERSE_PEN: u32 = 29305;

/// `biflowDirection` value for "the forward direction is the initiator" (RFC 5103 §6.3).
pub const BIFLOW_INITIATOR: u8 = 1;

/// Default largest message: a 1500-byte MTU less an IPv6 (40) and a UDP (8) header, so it also
/// fits under IPv4. Use 512 when the path MTU is unknown (RFC 7011 §10.3.3).
pub const DEFAULT_MAX_MESSAGE_LEN: usize = 1452;

/// Largest message the 16-bit length field can describe.
pub const MAX_MESSAGE_LEN: usize = 65535;

/// IANA Information Element ids used in the templates (RFC 7012 names).
pub mod ie {
    /// `octetDeltaCount`.
    pub const OCTET_DELTA_COUNT: u16 = 1;
    /// `packetDeltaCount`.
    pub const PACKET_DELTA_COUNT: u16 = 2;
    /// `protocolIdentifier`.
    pub const PROTOCOL_IDENTIFIER: u16 = 4;
    /// `tcpControlBits`.
    pub const TCP_CONTROL_BITS: u16 = 6;
    /// `sourceTransportPort`.
    pub const SOURCE_TRANSPORT_PORT: u16 = 7;
    /// `sourceIPv4Address`.
    pub const SOURCE_IPV4_ADDRESS: u16 = 8;
    /// `ingressInterface`.
    pub const INGRESS_INTERFACE: u16 = 10;
    /// `destinationTransportPort`.
    pub const DESTINATION_TRANSPORT_PORT: u16 = 11;
    /// `destinationIPv4Address`.
    pub const DESTINATION_IPV4_ADDRESS: u16 = 12;
    /// `sourceIPv6Address`.
    pub const SOURCE_IPV6_ADDRESS: u16 = 27;
    /// `destinationIPv6Address`.
    pub const DESTINATION_IPV6_ADDRESS: u16 = 28;
    /// `icmpTypeCodeIPv4`.
    pub const ICMP_TYPE_CODE_IPV4: u16 = 32;
    /// `vlanId`.
    pub const VLAN_ID: u16 = 58;
    /// `flowEndReason`.
    pub const FLOW_END_REASON: u16 = 136;
    /// `icmpTypeCodeIPv6`.
    pub const ICMP_TYPE_CODE_IPV6: u16 = 139;
    /// `flowStartMilliseconds`.
    pub const FLOW_START_MILLISECONDS: u16 = 152;
    /// `flowEndMilliseconds`.
    pub const FLOW_END_MILLISECONDS: u16 = 153;
    /// `biflowDirection`.
    pub const BIFLOW_DIRECTION: u16 = 239;
}

/// One field specifier of a template: Information Element, length, enterprise number.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct FieldSpec {
    /// Information Element id (without the enterprise bit).
    pub id: u16,
    /// Length in octets.
    pub len: u16,
    /// Private Enterprise Number; 0 for an IANA element.
    pub pen: u32,
}

impl FieldSpec {
    /// Octets the specifier takes in a template record.
    pub const fn wire_len(&self) -> usize {
        if self.pen == 0 { 4 } else { 8 }
    }
}

/// Fields in each template.
pub const FIELD_COUNT: usize = 20;

const fn iana(id: u16, len: u16) -> FieldSpec {
    FieldSpec { id, len, pen: 0 }
}

const fn reverse(id: u16, len: u16) -> FieldSpec {
    FieldSpec {
        id,
        len,
        pen: REVERSE_PEN,
    }
}

const fn template(ipv6: bool) -> [FieldSpec; FIELD_COUNT] {
    let (src, dst, icmp, alen) = if ipv6 {
        (
            ie::SOURCE_IPV6_ADDRESS,
            ie::DESTINATION_IPV6_ADDRESS,
            ie::ICMP_TYPE_CODE_IPV6,
            16,
        )
    } else {
        (
            ie::SOURCE_IPV4_ADDRESS,
            ie::DESTINATION_IPV4_ADDRESS,
            ie::ICMP_TYPE_CODE_IPV4,
            4,
        )
    };
    [
        reverse(ie::TCP_CONTROL_BITS, 2),
        reverse(ie::FLOW_START_MILLISECONDS, 8),
        reverse(ie::FLOW_END_MILLISECONDS, 8),
        iana(src, alen),
        iana(dst, alen),
        iana(ie::SOURCE_TRANSPORT_PORT, 2),
        iana(ie::DESTINATION_TRANSPORT_PORT, 2),
        iana(icmp, 2),
        iana(ie::PROTOCOL_IDENTIFIER, 1),
        iana(ie::TCP_CONTROL_BITS, 2),
        iana(ie::FLOW_START_MILLISECONDS, 8),
        iana(ie::FLOW_END_MILLISECONDS, 8),
        iana(ie::OCTET_DELTA_COUNT, 8),
        // Reduced-size encoding (RFC 7011 §6.2): a record never counts more than u32::MAX
        // packets a direction (the flow table ends it there), so 4 bytes carry every value.
        iana(ie::PACKET_DELTA_COUNT, 4),
        reverse(ie::OCTET_DELTA_COUNT, 8),
        reverse(ie::PACKET_DELTA_COUNT, 4),
        iana(ie::INGRESS_INTERFACE, 4),
        iana(ie::VLAN_ID, 2),
        iana(ie::FLOW_END_REASON, 1),
        iana(ie::BIFLOW_DIRECTION, 1),
    ]
}

/// Template 256, for IPv4 records, in wire order.
pub const TEMPLATE_V4: [FieldSpec; FIELD_COUNT] = template(false);

/// Template 257, for IPv6 records, in wire order.
pub const TEMPLATE_V6: [FieldSpec; FIELD_COUNT] = template(true);

const fn record_len(t: &[FieldSpec; FIELD_COUNT]) -> usize {
    let mut n = 0;
    let mut i = 0;
    while i < FIELD_COUNT {
        n += t[i].len as usize;
        i += 1;
    }
    n
}

const fn template_record_len(t: &[FieldSpec; FIELD_COUNT]) -> usize {
    let mut n = 4;
    let mut i = 0;
    while i < FIELD_COUNT {
        n += t[i].wire_len();
        i += 1;
    }
    n
}

/// Length of an IPv4 data record.
pub const RECORD_LEN_V4: usize = record_len(&TEMPLATE_V4);

/// Length of an IPv6 data record.
pub const RECORD_LEN_V6: usize = record_len(&TEMPLATE_V6);

/// Length of the Template Set carrying both templates.
pub const TEMPLATE_SET_LEN: usize =
    SET_HEADER_LEN + template_record_len(&TEMPLATE_V4) + template_record_len(&TEMPLATE_V6);

/// Smallest `max_message_len`: a header, the templates and one Data Set with one IPv6 record,
/// so every message makes progress.
pub const MIN_MESSAGE_LEN: usize = HEADER_LEN + TEMPLATE_SET_LEN + SET_HEADER_LEN + RECORD_LEN_V6;

// The RFC 7011 §10.3.3 default when the path MTU is unknown must be usable.
const _: () = assert!(MIN_MESSAGE_LEN <= 512);

/// The transport to the collector.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum Transport {
    /// UDP: templates are resent on a timer and every few messages.
    #[default]
    Udp,
    /// TCP: templates are sent once at the start of the session.
    Tcp,
}

/// How an [`Encoder`] writes to one collector.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Config {
    /// Largest message in octets: the UDP payload the path MTU allows (the whole message over
    /// TCP). [`MIN_MESSAGE_LEN`]..=[`MAX_MESSAGE_LEN`].
    pub max_message_len: usize,
    /// Observation Domain ID in every header (RFC 7011 §3.1: unique per exporting process).
    pub observation_domain_id: u32,
    /// UDP or TCP.
    pub transport: Transport,
    /// Template resends over UDP (ignored over TCP).
    pub refresh: Refresh,
}

impl Config {
    /// UDP export with the default message size and template refresh.
    pub fn new(observation_domain_id: u32) -> Config {
        Config {
            max_message_len: DEFAULT_MAX_MESSAGE_LEN,
            observation_domain_id,
            transport: Transport::Udp,
            refresh: Refresh::default(),
        }
    }
}

/// The IPFIX encoder for one collector: a reusable message buffer, the sequence number and the
/// template schedule.
#[derive(Debug)]
pub struct Encoder(TemplateEncoder<Config>);

impl Encoder {
    /// Checks `cfg` and allocates the message buffer.
    pub fn new(cfg: Config) -> Result<Encoder, ConfigError> {
        TemplateEncoder::new(cfg).map(Encoder)
    }

    /// The configuration.
    pub fn config(&self) -> &Config {
        &self.0.cfg
    }

    /// What the encoder has done so far.
    pub fn stats(&self) -> Stats {
        self.0.stats()
    }

    /// The sequence number the next message will carry: data records sent in this session,
    /// modulo 2^32.
    pub fn sequence(&self) -> u32 {
        self.0.sequence
    }

    /// Starts a new transport session (a TCP reconnect): the sequence restarts at 0 and the
    /// next message carries the templates.
    pub fn reset_session(&mut self) {
        self.0.reset_session();
    }

    /// Encodes `records` into one or more messages of at most `max_message_len` octets and
    /// calls `out` with each; `now_ns` (ns since 1970) is the export time.
    pub fn encode(&mut self, records: &[FlowRecord], now_ns: u64, out: &mut dyn FnMut(&[u8])) {
        self.0.encode(records, now_ns, out);
    }

    /// Sends a template-only message if templates are due (none sent yet in this session, or
    /// the UDP refresh is due), so collectors learn them even when no flow ends. Call it
    /// periodically, e.g. once a second.
    pub fn tick(&mut self, now_ns: u64, out: &mut dyn FnMut(&[u8])) {
        self.0.tick(now_ns, out);
    }
}

impl MessageFormat for Config {
    const NAME: &'static str = "IPFIX";
    const HEADER_LEN: usize = HEADER_LEN;
    const TEMPLATE_SET_LEN: usize = TEMPLATE_SET_LEN;
    const DATA_SET_ID: [u16; 2] = [TEMPLATE_ID_V4, TEMPLATE_ID_V6];
    const RECORD_LEN: [usize; 2] = [RECORD_LEN_V4, RECORD_LEN_V6];
    const SET_ALIGN: usize = 1;
    const SEQUENCE_COUNTS_RECORDS: bool = true;
    const MIN_MESSAGE_LEN: usize = MIN_MESSAGE_LEN;
    const MAX_MESSAGE_LEN: usize = MAX_MESSAGE_LEN;

    fn max_message_len(&self) -> usize {
        self.max_message_len
    }

    fn refresh(&self) -> Option<Refresh> {
        match self.transport {
            Transport::Udp => Some(self.refresh),
            Transport::Tcp => None,
        }
    }

    /// Over UDP only, where it makes full messages one size; never a whole record's worth,
    /// which a collector would read as a record.
    fn end_padding(&self, room: usize, record_len: usize) -> usize {
        if self.transport == Transport::Udp && room < record_len {
            room
        } else {
            0
        }
    }

    #[inline]
    fn write_template_set(w: &mut Put<'_>) {
        write_template_set(w);
    }

    #[inline(always)]
    fn write_record(&self, w: &mut Put<'_>, r: &FlowRecord) {
        write_record(w, r);
    }

    #[inline(always)]
    fn write_header(&self, h: &mut Put<'_>, m: &MessageHeader) {
        h.u16(VERSION);
        h.u16(m.len as u16);
        h.u32(unix_secs(m.now_ns));
        h.u32(m.sequence);
        h.u32(self.observation_domain_id);
    }
}

fn write_template_set(w: &mut Put<'_>) {
    w.u16(TEMPLATE_SET_ID);
    w.u16(TEMPLATE_SET_LEN as u16);
    for (id, fields) in [
        (TEMPLATE_ID_V4, &TEMPLATE_V4),
        (TEMPLATE_ID_V6, &TEMPLATE_V6),
    ] {
        w.u16(id);
        w.u16(FIELD_COUNT as u16);
        for f in fields {
            if f.pen == 0 {
                w.u16(f.id);
                w.u16(f.len);
            } else {
                w.u16(0x8000 | f.id); // the enterprise bit
                w.u16(f.len);
                w.u32(f.pen);
            }
        }
    }
}

/// ns since 1970 to `dateTimeMilliseconds`.
#[inline]
fn millis(ns: u64) -> u64 {
    ns / 1_000_000
}

/// Writes `r` in the order of [`TEMPLATE_V4`] / [`TEMPLATE_V6`].
#[inline(always)]
fn write_record(w: &mut Put<'_>, r: &FlowRecord) {
    // Into a fixed-size array: every offset below is then a constant and no write is checked.
    if r.ipv6 {
        fill_record(w.array::<RECORD_LEN_V6>(), r, &r.src, &r.dst);
    } else {
        fill_record(w.array::<RECORD_LEN_V4>(), r, &r.src[..4], &r.dst[..4]);
    }
}

#[inline(always)]
fn fill_record<const N: usize>(rec: &mut [u8; N], r: &FlowRecord, src: &[u8], dst: &[u8]) {
    let w = &mut Put::at(rec, 0);
    let (fwd_first, fwd_last) = if r.fwd.packets > 0 {
        (r.fwd.first_ns, r.fwd.last_ns)
    } else {
        (r.start_ns(), r.end_ns())
    };
    let (rev_first, rev_last) = if r.rev.packets > 0 {
        (r.rev.first_ns, r.rev.last_ns)
    } else {
        (0, 0)
    };
    w.u16(r.rev.tcp_flags);
    w.u64(millis(rev_first));
    w.u64(millis(rev_last));
    w.bytes(src);
    w.bytes(dst);
    w.u16(r.sport);
    w.u16(r.dport);
    w.u16(if r.is_icmp() { r.dport } else { 0 });
    w.u8(r.proto);
    w.u16(r.fwd.tcp_flags);
    w.u64(millis(fwd_first));
    w.u64(millis(fwd_last));
    w.u64(r.fwd.octets);
    w.u32(saturate(r.fwd.packets));
    w.u64(r.rev.octets);
    w.u32(saturate(r.rev.packets));
    w.u32(r.interface);
    w.u16(r.vlan);
    w.u8(r.end_reason.to_u8());
    w.u8(BIFLOW_INITIATOR);
    debug_assert_eq!(w.pos(), N);
}

// Collection: decoding messages from any IPFIX exporter (see `flowdecode`).

/// Set id of an Options Template Set.
pub const OPTIONS_TEMPLATE_SET_ID: u16 = 3;

/// Smallest Data Set id: a template id.
pub const MIN_DATA_SET_ID: u16 = 256;

/// The header of a message being decoded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Header {
    /// The message length.
    pub len: usize,
    pub export_secs: u32,
    pub sequence: u32,
    pub domain: u32,
}

impl Header {
    /// The header of `msg`, after checking the version, the length and the set framing.
    pub(crate) fn parse(msg: &[u8]) -> Result<Header, DecodeError> {
        let h = versioned_header::<HEADER_LEN>(msg, "IPFIX", "IPFIX header", VERSION)?;
        let len = usize::from(read_u16(&h[2..]));
        if len < HEADER_LEN || len > msg.len() {
            return Err(DecodeError::BadLength {
                unit: "octets",
                declared: len,
                actual: msg.len(),
            });
        }
        check_sets(&msg[..len], HEADER_LEN, SET_HEADER_LEN)?;
        Ok(Header {
            len,
            export_secs: read_u32(&h[4..]),
            sequence: read_u32(&h[8..]),
            domain: read_u32(&h[12..]),
        })
    }
}

/// Checks that the sets from `at` on each have a length of at least `min` and end inside
/// `msg`. Fewer than 4 zero bytes at the end are padding (some v9 exporters pad datagrams);
/// other trailing bytes too short for a set header count as a bad set.
pub(crate) fn check_sets(msg: &[u8], mut at: usize, min: usize) -> Result<(), DecodeError> {
    while at < msg.len() {
        if msg.len() - at < SET_HEADER_LEN && msg[at..].iter().all(|&b| b == 0) {
            break;
        }
        let id = get_u16(msg, at).unwrap_or(0);
        let len = get_u16(msg, at + 2).map_or(0, usize::from);
        if len < min.max(SET_HEADER_LEN) || len > msg.len() - at {
            return Err(DecodeError::BadSet { id, at, len });
        }
        at += len;
    }
    Ok(())
}

/// The sets of a checked message: (id, body, offset of the body).
pub(crate) fn sets(msg: &[u8], from: usize) -> impl Iterator<Item = (u16, &[u8], usize)> {
    let mut at = from;
    std::iter::from_fn(move || {
        let id = get_u16(msg, at)?;
        let len = usize::from(get_u16(msg, at + 2)?);
        let body = msg.get(at + SET_HEADER_LEN..at.checked_add(len)?)?;
        let r = (id, body, at + SET_HEADER_LEN);
        at += len.max(SET_HEADER_LEN);
        Some(r)
    })
}

/// Decodes the sets of `msg`, whose header `h` was checked, for exporter state `ex`.
pub(crate) fn decode(
    h: &Header,
    msg: &[u8],
    ex: &mut Exporter,
    budget: &mut Budget,
    emit: &mut Emit<'_, '_>,
) {
    let (mut data_records, mut options_records) = (0u32, 0u32);
    for (id, body, at) in sets(msg, HEADER_LEN) {
        match id {
            TEMPLATE_SET_ID | OPTIONS_TEMPLATE_SET_ID => templates(
                id == OPTIONS_TEMPLATE_SET_ID,
                body,
                at,
                ex,
                budget,
                emit.summary,
            ),
            MIN_DATA_SET_ID.. => {
                let clock = Clock {
                    export_ns: u64::from(h.export_secs) * 1_000_000_000,
                    sys_uptime_ms: None,
                    init_ms: ex.init_ms,
                };
                let (n, options) = ex.data_set(id, body, at, clock, emit);
                data_records = data_records.wrapping_add(n);
                if options {
                    options_records = options_records.wrapping_add(n);
                }
            }
            // Reserved set ids (RFC 7011 §3.3.2): ignored.
            _ => {}
        }
    }
    if emit.summary.template_missing > 0 {
        // Records of unknown templates were not counted: the next message restarts the count.
        ex.sequence.resync();
    } else {
        ex.sequence
            .observe(h.sequence, data_records, options_records)
            .add_to(emit.summary);
    }
}

/// Reads a Template Set or Options Template Set body: adds, replaces and withdraws templates.
fn templates(
    options: bool,
    body: &[u8],
    at: usize,
    ex: &mut Exporter,
    budget: &mut Budget,
    summary: &mut MessageSummary,
) {
    let mut p = 0;
    // A record needs at least its id and field count; anything shorter is padding.
    while let (Some(id), Some(count)) = (get_u16(body, p), get_u16(body, p + 2)) {
        let rec_at = at + p;
        p += 4;
        if count == 0 {
            // Withdrawal (RFC 7011 §8.1): one template, or all of this set's kind.
            if id == TEMPLATE_SET_ID || id == OPTIONS_TEMPLATE_SET_ID {
                ex.templates.withdraw_all(options, budget);
            } else {
                ex.templates.withdraw(id, budget);
            }
            summary.templates += 1;
            continue;
        }
        let bad = |why| DecodeError::BadTemplate {
            id,
            at: rec_at,
            why,
        };
        if options {
            // Scope fields are elements like the others: their count is only checked.
            let Some(scope) = get_u16(body, p) else {
                return summary.refuse(bad("truncated"));
            };
            p += 2;
            if scope == 0 || scope > count {
                return summary.refuse(bad("scope field count is 0 or over the field count"));
            }
        }
        if id < MIN_DATA_SET_ID {
            return summary.refuse(bad("template id below 256"));
        }
        if usize::from(count) > budget.max_fields {
            return summary.refuse(DecodeError::TooManyFields {
                id,
                count: usize::from(count),
                limit: budget.max_fields,
            });
        }
        let mut fields = std::mem::take(&mut budget.scratch);
        fields.clear();
        for _ in 0..count {
            let (Some(raw), Some(len)) = (get_u16(body, p), get_u16(body, p + 2)) else {
                break;
            };
            let pen = if raw & 0x8000 != 0 {
                let Some(pen) = get_u32(body, p + 4) else {
                    break;
                };
                p += 4;
                pen
            } else {
                0
            };
            p += 4;
            fields.push(ipfix_field(raw & 0x7fff, len, pen));
        }
        let whole = fields.len() == usize::from(count);
        let r = if whole {
            ex.templates.insert(id, options, &fields, rec_at, budget)
        } else {
            Err(bad("truncated"))
        };
        budget.scratch = fields;
        match r {
            Ok(()) => summary.templates += 1,
            Err(e) => return summary.refuse(e),
        }
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::bytes::{read_u16, read_u32, read_u64};
    use crate::flowrecord::{Counters, EndReason};
    use proptest::prelude::*;

    const T0: u64 = 1_700_000_000_000_000_000;
    const SEC: u64 = 1_000_000_000;

    /// A TCP biflow 10.0.0.1:40000 → 10.0.0.2:443 (or 2001:db8::1 → 2001:db8::2).
    pub(crate) fn tcp(ipv6: bool) -> FlowRecord {
        let mut r = FlowRecord {
            ipv6,
            proto: 6,
            sport: 40000,
            dport: 443,
            vlan: 42,
            interface: 3,
            end_reason: EndReason::EndOfFlow,
            ..FlowRecord::default()
        };
        if ipv6 {
            r.src = "2001:db8::1"
                .parse::<std::net::Ipv6Addr>()
                .unwrap()
                .octets();
            r.dst = "2001:db8::2"
                .parse::<std::net::Ipv6Addr>()
                .unwrap()
                .octets();
        } else {
            r.src[..4].copy_from_slice(&[10, 0, 0, 1]);
            r.dst[..4].copy_from_slice(&[10, 0, 0, 2]);
        }
        r.fwd = Counters {
            packets: 12,
            octets: 1500,
            tcp_flags: 0x1b,
            first_ns: T0 + 1_000_000,
            last_ns: T0 + 9_000_000,
        };
        r.rev = Counters {
            packets: 70,
            octets: 90000,
            tcp_flags: 0x13,
            first_ns: T0 + 2_000_000,
            last_ns: T0 + 8_000_000,
        };
        r
    }

    /// The sets of a message: (set id, body).
    fn sets(msg: &[u8]) -> Vec<(u16, &[u8])> {
        assert_eq!(read_u16(msg), VERSION);
        assert_eq!(usize::from(read_u16(&msg[2..])), msg.len());
        let mut v = Vec::new();
        let mut p = HEADER_LEN;
        while p < msg.len() {
            let id = read_u16(&msg[p..]);
            let len = usize::from(read_u16(&msg[p + 2..]));
            assert!(
                len >= SET_HEADER_LEN && p + len <= msg.len(),
                "set overruns"
            );
            v.push((id, &msg[p + SET_HEADER_LEN..p + len]));
            p += len;
        }
        v
    }

    /// The records of a Data Set body of `record_len`-octet records, after checking that what
    /// follows the last whole record (padding) is zeros.
    fn records_in(body: &[u8], record_len: usize) -> usize {
        let padding = &body[body.len() / record_len * record_len..];
        assert!(padding.iter().all(|&b| b == 0), "padding is zeros");
        body.len() / record_len
    }

    /// (carries templates, IPv4 records, IPv6 records) of a message.
    fn shape(msg: &[u8]) -> (bool, usize, usize) {
        let mut s = (false, 0, 0);
        for (id, body) in sets(msg) {
            match id {
                TEMPLATE_SET_ID => s.0 = true,
                TEMPLATE_ID_V4 => s.1 += records_in(body, RECORD_LEN_V4),
                TEMPLATE_ID_V6 => s.2 += records_in(body, RECORD_LEN_V6),
                _ => panic!("unexpected set {id}"),
            }
        }
        s
    }

    fn collect(enc: &mut Encoder, records: &[FlowRecord], now_ns: u64) -> Vec<Vec<u8>> {
        let mut v = Vec::new();
        enc.encode(records, now_ns, &mut |m| v.push(m.to_vec()));
        v
    }

    fn udp(max: usize, refresh: Refresh) -> Encoder {
        Encoder::new(Config {
            max_message_len: max,
            observation_domain_id: 7,
            transport: Transport::Udp,
            refresh,
        })
        .unwrap()
    }

    #[test]
    fn template_sizes_follow_the_field_list() {
        assert_eq!(RECORD_LEN_V4, 83);
        assert_eq!(RECORD_LEN_V6, 107);
        // 20 specifiers, 5 of them with a PEN, per template.
        assert_eq!(TEMPLATE_SET_LEN, 4 + 2 * (4 + 20 * 4 + 5 * 4));
        assert_eq!(MIN_MESSAGE_LEN, 16 + 212 + 4 + 107);
    }

    #[test]
    fn header_and_template_set_are_as_rfc_7011_says() {
        let mut enc = udp(1400, Refresh::default());
        let msgs = collect(&mut enc, &[tcp(false)], T0 + 500_000_000);
        assert_eq!(msgs.len(), 1);
        let m = &msgs[0];
        assert_eq!(read_u16(m), 10);
        assert_eq!(usize::from(read_u16(&m[2..])), m.len());
        assert_eq!(
            read_u32(&m[4..]),
            1_700_000_000,
            "export time in whole seconds"
        );
        assert_eq!(
            read_u32(&m[8..]),
            0,
            "no data record before the first message"
        );
        assert_eq!(read_u32(&m[12..]), 7);
        assert_eq!(m.len(), HEADER_LEN + TEMPLATE_SET_LEN + 4 + RECORD_LEN_V4);

        let s = sets(m);
        assert_eq!(s.len(), 2);
        assert_eq!(s[0].0, TEMPLATE_SET_ID, "the Template Set comes first");
        let t = s[0].1;
        // Template 256, 20 fields; first a reverse tcpControlBits: E-bit | 6, length 2, 29305.
        assert_eq!(&t[..4], &[1, 0, 0, 20]);
        assert_eq!(&t[4..12], &[0x80, 6, 0, 2, 0, 0, 0x72, 0x79]);
        // Then reverse flowStartMilliseconds and flowEndMilliseconds, then sourceIPv4Address.
        assert_eq!(&t[12..20], &[0x80, 152, 0, 8, 0, 0, 0x72, 0x79]);
        assert_eq!(&t[20..28], &[0x80, 153, 0, 8, 0, 0, 0x72, 0x79]);
        assert_eq!(&t[28..32], &[0, 8, 0, 4]);
        // Template 257 starts right after 256 and carries 16-octet addresses.
        let t6 = &t[4 + 20 * 4 + 5 * 4..];
        assert_eq!(&t6[..4], &[1, 1, 0, 20]);
        assert_eq!(&t6[28..36], &[0, 27, 0, 16, 0, 28, 0, 16]);
        assert_eq!(s[1].0, TEMPLATE_ID_V4);
    }

    #[test]
    fn data_record_matches_the_fixture() {
        let mut r = tcp(false);
        r.fwd.tcp_flags = 0x0102; // a bit above the low byte survives
        let mut buf = [0u8; RECORD_LEN_V4];
        write_record(&mut Put::at(&mut buf, 0), &r);
        let ms = |ns: u64| (ns / 1_000_000).to_be_bytes();
        let mut want = Vec::new();
        want.extend_from_slice(&[0x00, 0x13]); // reverse tcpControlBits
        want.extend_from_slice(&ms(T0 + 2_000_000)); // reverse flowStartMilliseconds
        want.extend_from_slice(&ms(T0 + 8_000_000)); // reverse flowEndMilliseconds
        want.extend_from_slice(&[10, 0, 0, 1, 10, 0, 0, 2]);
        want.extend_from_slice(&[0x9c, 0x40, 0x01, 0xbb]); // 40000, 443
        want.extend_from_slice(&[0, 0]); // icmpTypeCodeIPv4: not ICMP
        want.push(6);
        want.extend_from_slice(&[0x01, 0x02]);
        want.extend_from_slice(&ms(T0 + 1_000_000));
        want.extend_from_slice(&ms(T0 + 9_000_000));
        want.extend_from_slice(&1500u64.to_be_bytes());
        want.extend_from_slice(&12u32.to_be_bytes()); // packets in 4 bytes (reduced size)
        want.extend_from_slice(&90000u64.to_be_bytes());
        want.extend_from_slice(&70u32.to_be_bytes());
        want.extend_from_slice(&[0, 0, 0, 3, 0, 42, 3, 1]); // interface, vlan, reason, direction
        assert_eq!(&buf[..], &want[..]);
        assert_eq!(
            &ms(T0 + 1_000_000)[..],
            &[0, 0, 1, 0x8b, 0xcf, 0xe5, 0x68, 0x01]
        );
    }

    #[test]
    fn icmp_one_way_and_no_forward_packets() {
        let mut r = tcp(false);
        r.proto = 1;
        r.sport = 0;
        r.dport = 0x0800;
        r.rev = Counters::default();
        let mut buf = [0u8; RECORD_LEN_V4];
        write_record(&mut Put::at(&mut buf, 0), &r);
        assert_eq!(
            &buf[..18],
            &[0; 18],
            "no reverse packets: reverse flags and times 0"
        );
        assert_eq!(&buf[26..32], &[0, 0, 8, 0, 8, 0], "ports, icmpTypeCodeIPv4");

        // Defensive: no forward packets → forward times are the record's span.
        let mut r = tcp(false);
        r.fwd = Counters::default();
        write_record(&mut Put::at(&mut buf, 0), &r);
        let ms = |at: usize| read_u64(&buf[at..]);
        assert_eq!(ms(35), (T0 + 2_000_000) / 1_000_000);
        assert_eq!(ms(43), (T0 + 8_000_000) / 1_000_000);
    }

    #[test]
    fn sequence_counts_data_records_before_each_message() {
        // Room for the templates and 2 IPv4 records, or 4 records without templates.
        let max = HEADER_LEN + TEMPLATE_SET_LEN + 4 + 2 * RECORD_LEN_V4;
        let mut enc = udp(max, Refresh::default());
        let recs = vec![tcp(false); 9];
        let msgs = collect(&mut enc, &recs, T0);
        let seqs: Vec<u32> = msgs.iter().map(|m| read_u32(&m[8..])).collect();
        let shapes: Vec<_> = msgs.iter().map(|m| shape(m)).collect();
        assert_eq!(seqs, [0, 2, 6]);
        assert_eq!(shapes, [(true, 2, 0), (false, 4, 0), (false, 3, 0)]);
        // A template-only message does not advance the sequence.
        let mut t = Vec::new();
        enc.tick(T0 + 60 * SEC, &mut |m| t.push(m.to_vec()));
        assert_eq!(t.len(), 1);
        assert_eq!(read_u32(&t[0][8..]), 9);
        assert_eq!(shape(&t[0]), (true, 0, 0));
        let msgs = collect(&mut enc, &recs[..1], T0 + 61 * SEC);
        assert_eq!(read_u32(&msgs[0][8..]), 9);
        assert_eq!(enc.sequence(), 10);
        let s = enc.stats();
        assert_eq!((s.messages, s.template_messages, s.records), (5, 2, 10));
    }

    #[test]
    fn sequence_wraps_modulo_2_32() {
        let mut enc = udp(1400, Refresh::default());
        enc.0.sequence = u32::MAX;
        let msgs = collect(&mut enc, &[tcp(false), tcp(true)], T0);
        assert_eq!(read_u32(&msgs[0][8..]), u32::MAX);
        assert_eq!(enc.sequence(), 1);
    }

    #[test]
    fn families_go_in_one_set_each_in_input_order() {
        let mut enc = udp(1400, Refresh::default());
        let mut recs = Vec::new();
        for i in 0..6u16 {
            let mut r = tcp(i % 2 == 1);
            r.sport = i;
            recs.push(r);
        }
        let msgs = collect(&mut enc, &recs, T0);
        assert_eq!(msgs.len(), 1);
        let s = sets(&msgs[0]);
        assert_eq!(s.iter().map(|x| x.0).collect::<Vec<_>>(), [2, 256, 257]);
        let sport_at = 18 + 8; // after reverse flags/times and the IPv4 addresses
        let v4: Vec<u16> = s[1]
            .1
            .chunks(RECORD_LEN_V4)
            .map(|c| read_u16(&c[sport_at..]))
            .collect();
        let v6: Vec<u16> = s[2]
            .1
            .chunks(RECORD_LEN_V6)
            .map(|c| read_u16(&c[sport_at + 24..]))
            .collect();
        assert_eq!((v4, v6), (vec![0, 2, 4], vec![1, 3, 5]));
    }

    #[test]
    fn refresh_by_time() {
        let mut enc = udp(
            1400,
            Refresh {
                secs: 60,
                messages: 0,
            },
        );
        let r = [tcp(false)];
        let with = |enc: &mut Encoder, t| shape(&collect(enc, &r, t)[0]).0;
        assert!(with(&mut enc, T0), "first message");
        assert!(!with(&mut enc, T0 + 59 * SEC));
        assert!(!with(&mut enc, T0 + 59 * SEC + 999_999_999));
        assert!(with(&mut enc, T0 + 60 * SEC));
        for _ in 0..100 {
            assert!(!with(&mut enc, T0 + 61 * SEC), "no count limit");
        }
        assert!(with(&mut enc, T0 + 30 * SEC), "the clock stepped back");
    }

    #[test]
    fn refresh_by_count() {
        let mut enc = udp(
            1400,
            Refresh {
                secs: 0,
                messages: 3,
            },
        );
        let r = [tcp(false)];
        let got: Vec<bool> = (0..10)
            .map(|i| shape(&collect(&mut enc, &r, T0 + i * 3600 * SEC)[0]).0)
            .collect();
        let want = [
            true, false, false, true, false, false, true, false, false, true,
        ];
        assert_eq!(got, want);
    }

    #[test]
    fn tick_sends_templates_only_when_due() {
        let mut enc = udp(1400, Refresh::default());
        let mut n = 0;
        enc.tick(T0, &mut |m| {
            assert_eq!(shape(m), (true, 0, 0));
            assert_eq!(m.len(), HEADER_LEN + TEMPLATE_SET_LEN);
            n += 1;
        });
        enc.tick(T0 + 59 * SEC, &mut |_| n += 1);
        assert_eq!(n, 1, "not due before 60 s");
        collect(&mut enc, &[tcp(false)], T0 + 10 * SEC);
        enc.tick(T0 + 60 * SEC, &mut |_| n += 1);
        assert_eq!(n, 2);
    }

    #[test]
    fn tcp_sends_templates_once_per_session() {
        let mut enc = Encoder::new(Config {
            transport: Transport::Tcp,
            refresh: Refresh {
                secs: 0,
                messages: 0,
            },
            ..Config::new(1)
        })
        .unwrap();
        let r = [tcp(false)];
        let got: Vec<bool> = (0..30)
            .map(|i| shape(&collect(&mut enc, &r, T0 + i * 3600 * SEC)[0]).0)
            .collect();
        assert!(got[0] && got[1..].iter().all(|t| !t));
        enc.tick(T0 + 86400 * SEC, &mut |_| panic!("nothing due over TCP"));
        enc.reset_session();
        assert_eq!(enc.sequence(), 0);
        let m = collect(&mut enc, &r, T0);
        assert_eq!(shape(&m[0]), (true, 1, 0));
        assert_eq!(read_u32(&m[0][8..]), 0);
    }

    /// Over UDP, full messages are all `max_message_len` long, padded with zeros inside their
    /// last set; the last, shorter message is not padded, and neither is anything over TCP.
    #[test]
    fn full_udp_messages_are_padded_to_one_size() {
        // 16 + 4 + 5 * 83 = 435 octets of IPv4 records: 77 short of 512, less than a record.
        let max = 512;
        let recs = vec![tcp(false); 12];
        let mut enc = udp(max, Refresh::default());
        let msgs = collect(&mut enc, &recs, T0);
        let lens: Vec<usize> = msgs.iter().map(Vec::len).collect();
        // The first also carries the templates (3 records fit), the second 5, the last 4.
        assert_eq!(lens, [512, 512, 16 + 4 + 4 * 83]);
        assert_eq!(
            msgs.iter().map(|m| shape(m).1).collect::<Vec<_>>(),
            [3, 5, 4]
        );
        let (_, body) = sets(&msgs[1])[0];
        assert_eq!(body.len(), 512 - 16 - 4);
        assert_eq!(records_in(body, RECORD_LEN_V4), 5);
        let mut tcp_enc = Encoder::new(Config {
            max_message_len: max,
            transport: Transport::Tcp,
            ..Config::new(1)
        })
        .unwrap();
        let lens: Vec<usize> = collect(&mut tcp_enc, &recs, T0)
            .iter()
            .map(Vec::len)
            .collect();
        assert!(lens.iter().all(|&l| l < max), "{lens:?}");
    }

    #[test]
    fn config_is_checked() {
        let cfg = |max| Config {
            max_message_len: max,
            ..Config::new(1)
        };
        assert!(Encoder::new(cfg(MIN_MESSAGE_LEN)).is_ok());
        assert_eq!(
            Encoder::new(cfg(MIN_MESSAGE_LEN - 1)).unwrap_err(),
            ConfigError::MessageTooShort {
                format: "IPFIX",
                len: MIN_MESSAGE_LEN - 1,
                min: MIN_MESSAGE_LEN
            }
        );
        assert!(matches!(
            Encoder::new(cfg(65536)),
            Err(ConfigError::MessageTooLong { .. })
        ));
        let none = Refresh {
            secs: 0,
            messages: 0,
        };
        assert_eq!(
            Encoder::new(Config {
                refresh: none,
                ..Config::new(1)
            })
            .unwrap_err()
            .to_string(),
            "IPFIX over UDP needs a template refresh: refresh seconds and messages are both 0"
        );
    }

    #[test]
    fn empty_input_sends_nothing() {
        let mut enc = udp(1400, Refresh::default());
        enc.encode(&[], T0, &mut |_| panic!("no message for no records"));
        assert_eq!(enc.stats(), Stats::default());
    }

    proptest! {
        #[test]
        fn messages_fit_and_carry_every_record_once(
            families in proptest::collection::vec(any::<bool>(), 0..200),
            max in MIN_MESSAGE_LEN..3000usize,
            refresh_messages in 1..5u32,
        ) {
            let mut enc = udp(max, Refresh { secs: 60, messages: refresh_messages });
            let recs: Vec<FlowRecord> = families.iter().enumerate().map(|(i, &v6)| {
                let mut r = tcp(v6);
                r.sport = i as u16;
                r
            }).collect();
            let mut seq = 0u32;
            let (mut n4, mut n6) = (0, 0);
            let mut first = true;
            enc.encode(&recs, T0, &mut |m| {
                assert!(m.len() <= max, "message of {} > {max}", m.len());
                assert_eq!(read_u32(&m[8..]), seq);
                let (t, a, b) = shape(m);
                assert!(a + b > 0);
                assert!(!first || t, "templates in the first message");
                first = false;
                seq += (a + b) as u32;
                // What the message holds before any padding; padding fills it to `max` exactly,
                // and is shorter than a record of its set (the last).
                let set = |n: usize, len: usize| if n > 0 { SET_HEADER_LEN + n * len } else { 0 };
                let content = HEADER_LEN
                    + if t { TEMPLATE_SET_LEN } else { 0 }
                    + set(a, RECORD_LEN_V4)
                    + set(b, RECORD_LEN_V6);
                if content < m.len() {
                    let last = if b > 0 { RECORD_LEN_V6 } else { RECORD_LEN_V4 };
                    assert_eq!(m.len(), max, "padded to the maximum");
                    assert!(m.len() - content < last, "padding shorter than a record");
                } else {
                    assert_eq!(content, m.len());
                }
                // A message that stops early had no room for the next record.
                if let Some(next) = recs.get(seq as usize) {
                    let open = if next.ipv6 { b > 0 } else { a > 0 };
                    let rec = if next.ipv6 { RECORD_LEN_V6 } else { RECORD_LEN_V4 };
                    let need = content + rec + if open { 0 } else { SET_HEADER_LEN };
                    assert!(need > max, "record {seq} would have fit");
                }
                n4 += a;
                n6 += b;
            });
            prop_assert_eq!(n4, families.iter().filter(|v| !**v).count());
            prop_assert_eq!(n6, families.iter().filter(|v| **v).count());
            prop_assert_eq!(enc.stats().records, recs.len() as u64);
        }
    }
}
