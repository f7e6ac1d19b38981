//! NetFlow version 9 export (RFC 3954): the IPFIX encoder's older sibling, for collectors that
//! speak only v9.
//!
//! ```text
//! +--------------------------------------------------------------+
//! | header (20): version 9 | count | sysUptime | unix secs       |
//! |              | sequence | source id                          |
//! +--------------------------------------------------------------+
//! | Template FlowSet (id 0): template 256 (IPv4), 257 (IPv6)     |  when templates are due
//! +--------------------------------------------------------------+
//! | Data FlowSet 256: IPv4 records, 62 octets each, padded to 4  |  if the packet has any
//! +--------------------------------------------------------------+
//! | Data FlowSet 257: IPv6 records, 86 octets each, padded to 4  |  if the packet has any
//! +--------------------------------------------------------------+
//! ```
//!
//! Packing, template placement and refresh are shared with IPFIX ([`crate::flowexport`]);
//! v9 differs in the header: `count` is the number of records in the packet, template records
//! included, and `sequence` counts export packets sent before this one (template-only ones
//! too). Data FlowSets are zero-padded to a multiple of 4 octets (RFC 3954 §5.3).
//!
//! One biflow is one record: `IN_*` counters are the initiator's direction, `OUT_*` the
//! responder's (the convention nfdump and nProbe read), `TCP_FLAGS` is the initiator's low 8
//! bits, and `FIRST_SWITCHED`/`LAST_SWITCHED` span both directions. Times are sysUptime
//! milliseconds, counted from [`Config::start_ns`] and wrapping at 2^32 (49.7 days) as on a
//! router. The header's unix secs are whole seconds, so a collector's
//! `unix_secs * 1000 - (sysUptime - FIRST_SWITCHED)` comes out early by the export time's
//! milliseconds (< 1 s); that is v9's resolution. RFC 3954 has no flow end reason, so the
//! record carries none.

use crate::bytes::Put;
use crate::bytes::{get_u16, read_u16, read_u32};
use crate::flowdecode::{DecodeError, Emit, Exporter, MessageSummary, versioned_header};
use crate::flowexport::{MessageFormat, MessageHeader, SET_HEADER_LEN, TemplateEncoder, unix_secs};
use crate::flowrecord::FlowRecord;
use crate::ipfix::{MIN_DATA_SET_ID, check_sets, sets};
use crate::template::{Budget, Clock, Elem, Field, VARLEN, elem};

pub use crate::flowexport::{ConfigError, Refresh, Stats};

/// `version` in the packet header.
pub const VERSION: u16 = 9;

/// Length of the packet header.
pub const HEADER_LEN: usize = 20;

/// Length of a FlowSet header (FlowSet id, length).
pub const FLOWSET_HEADER_LEN: usize = SET_HEADER_LEN;

/// FlowSet id of a Template FlowSet.
pub const TEMPLATE_FLOWSET_ID: u16 = 0;

/// Template id (and Data FlowSet id) of IPv4 records.
pub const TEMPLATE_ID_V4: u16 = 256;

/// Template id (and Data FlowSet id) of IPv6 records.
pub const TEMPLATE_ID_V6: u16 = 257;

/// Default largest packet (see [`crate::ipfix::DEFAULT_MAX_MESSAGE_LEN`]).
pub const DEFAULT_MAX_MESSAGE_LEN: usize = crate::ipfix::DEFAULT_MAX_MESSAGE_LEN;

/// Largest packet: what one UDP datagram carries.
pub const MAX_MESSAGE_LEN: usize = 65535;

/// Field type numbers used in the templates (RFC 3954 §8 names).
pub mod field_type {
    /// `IN_BYTES`.
    pub const IN_BYTES: u16 = 1;
    /// `IN_PKTS`.
    pub const IN_PKTS: u16 = 2;
    /// `PROTOCOL`.
    pub const PROTOCOL: u16 = 4;
    /// `TCP_FLAGS`.
    pub const TCP_FLAGS: u16 = 6;
    /// `L4_SRC_PORT`.
    pub const L4_SRC_PORT: u16 = 7;
    /// `IPV4_SRC_ADDR`.
    pub const IPV4_SRC_ADDR: u16 = 8;
    /// `INPUT_SNMP`.
    pub const INPUT_SNMP: u16 = 10;
    /// `L4_DST_PORT`.
    pub const L4_DST_PORT: u16 = 11;
    /// `IPV4_DST_ADDR`.
    pub const IPV4_DST_ADDR: u16 = 12;
    /// `LAST_SWITCHED`.
    pub const LAST_SWITCHED: u16 = 21;
    /// `FIRST_SWITCHED`.
    pub const FIRST_SWITCHED: u16 = 22;
    /// `OUT_BYTES`.
    pub const OUT_BYTES: u16 = 23;
    /// `OUT_PKTS`.
    pub const OUT_PKTS: u16 = 24;
    /// `IPV6_SRC_ADDR`.
    pub const IPV6_SRC_ADDR: u16 = 27;
    /// `IPV6_DST_ADDR`.
    pub const IPV6_DST_ADDR: u16 = 28;
    /// `ICMP_TYPE` (type × 256 + code).
    pub const ICMP_TYPE: u16 = 32;
    /// `SRC_VLAN`.
    pub const SRC_VLAN: u16 = 58;
}

/// One field of a template: type and length in octets.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct TemplateField {
    /// Field type number.
    pub field_type: u16,
    /// Length in octets.
    pub len: u16,
}

/// Fields in each template.
pub const FIELD_COUNT: usize = 15;

const fn field(field_type: u16, len: u16) -> TemplateField {
    TemplateField { field_type, len }
}

const fn template(ipv6: bool) -> [TemplateField; FIELD_COUNT] {
    use field_type::*;
    let (src, dst, alen) = if ipv6 {
        (IPV6_SRC_ADDR, IPV6_DST_ADDR, 16)
    } else {
        (IPV4_SRC_ADDR, IPV4_DST_ADDR, 4)
    };
    [
        field(IN_BYTES, 8),
        field(IN_PKTS, 8),
        field(OUT_BYTES, 8),
        field(OUT_PKTS, 8),
        field(PROTOCOL, 1),
        field(TCP_FLAGS, 1),
        field(L4_SRC_PORT, 2),
        field(src, alen),
        field(INPUT_SNMP, 4),
        field(L4_DST_PORT, 2),
        field(dst, alen),
        field(LAST_SWITCHED, 4),
        field(FIRST_SWITCHED, 4),
        field(SRC_VLAN, 2),
        field(ICMP_TYPE, 2),
    ]
}

/// Template 256, for IPv4 records, in wire order.
pub const TEMPLATE_V4: [TemplateField; FIELD_COUNT] = template(false);

/// Template 257, for IPv6 records, in wire order.
pub const TEMPLATE_V6: [TemplateField; FIELD_COUNT] = template(true);

const fn record_len(t: &[TemplateField; FIELD_COUNT]) -> usize {
    let mut n = 0;
    let mut i = 0;
    while i < FIELD_COUNT {
        n += t[i].len as usize;
        i += 1;
    }
    n
}

/// Length of an IPv4 data record.
pub const RECORD_LEN_V4: usize = record_len(&TEMPLATE_V4);

/// Length of an IPv6 data record.
pub const RECORD_LEN_V6: usize = record_len(&TEMPLATE_V6);

/// Length of the Template FlowSet carrying both templates.
pub const TEMPLATE_FLOWSET_LEN: usize = FLOWSET_HEADER_LEN + 2 * (4 + 4 * FIELD_COUNT);

/// Records in the Template FlowSet.
const TEMPLATE_RECORDS: u16 = 2;

/// Length of a Data FlowSet of `n` records of `record_len` octets, padding included.
pub const fn data_flowset_len(n: usize, record_len: usize) -> usize {
    if n == 0 {
        0
    } else {
        (FLOWSET_HEADER_LEN + n * record_len).next_multiple_of(4)
    }
}

/// Smallest `max_message_len`: a header, the templates and one Data FlowSet with one IPv6
/// record, so every packet makes progress.
pub const MIN_MESSAGE_LEN: usize =
    HEADER_LEN + TEMPLATE_FLOWSET_LEN + data_flowset_len(1, RECORD_LEN_V6);

/// How an [`Encoder`] writes to one collector.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Config {
    /// Largest packet in octets (the UDP payload), [`MIN_MESSAGE_LEN`]..=[`MAX_MESSAGE_LEN`].
    pub max_message_len: usize,
    /// Source ID in every header (the exporting device's observation domain).
    pub source_id: u32,
    /// When the exporter "booted", ns since 1970: sysUptime and the switched times count
    /// from here.
    pub start_ns: u64,
    /// Template resends.
    pub refresh: Refresh,
}

impl Config {
    /// Export with the default packet size and template refresh.
    pub fn new(source_id: u32, start_ns: u64) -> Config {
        Config {
            max_message_len: DEFAULT_MAX_MESSAGE_LEN,
            source_id,
            start_ns,
            refresh: Refresh::default(),
        }
    }
}

/// Milliseconds from `start_ns` to `ns`, modulo 2^32: the sysUptime clock.
#[inline]
pub(crate) fn uptime_ms(ns: u64, start_ns: u64) -> u32 {
    // A difference of whole milliseconds: `uptime(a) - uptime(b)` is then exactly the
    // difference of `a` and `b` in whole milliseconds, which a collector relies on.
    ((ns / 1_000_000) as u32).wrapping_sub((start_ns / 1_000_000) as u32)
}

/// The NetFlow v9 encoder for one collector: a reusable packet buffer, the sequence number
/// and the template schedule.
#[derive(Debug)]
pub struct Encoder(TemplateEncoder<Config>);

impl Encoder {
    /// Checks `cfg` and allocates the packet buffer.
    pub fn new(cfg: Config) -> Result<Encoder, ConfigError> {
        TemplateEncoder::new(cfg).map(Encoder)
    }

    /// The configuration.
    pub fn config(&self) -> &Config {
        &self.0.cfg
    }

    /// Moves the sysUptime origin ([`Config::start_ns`]), for an exporter that learns its "boot
    /// time" only with the first flow; meant for before the first packet.
    pub fn set_start_ns(&mut self, start_ns: u64) {
        self.0.cfg.start_ns = start_ns;
    }

    /// What the encoder has done so far.
    pub fn stats(&self) -> Stats {
        self.0.stats()
    }

    /// The sequence number the next packet will carry: export packets sent, modulo 2^32.
    pub fn sequence(&self) -> u32 {
        self.0.sequence
    }

    /// Encodes `records` into one or more packets of at most `max_message_len` octets and
    /// calls `out` with each; `now_ns` (ns since 1970) is the export time.
    pub fn encode(&mut self, records: &[FlowRecord], now_ns: u64, out: &mut dyn FnMut(&[u8])) {
        self.0.encode(records, now_ns, out);
    }

    /// Sends a template-only packet if templates are due (none sent yet, or the refresh is
    /// due), so collectors learn them even when no flow ends. Call it periodically.
    pub fn tick(&mut self, now_ns: u64, out: &mut dyn FnMut(&[u8])) {
        self.0.tick(now_ns, out);
    }
}

impl MessageFormat for Config {
    const NAME: &'static str = "NetFlow v9";
    const HEADER_LEN: usize = HEADER_LEN;
    const TEMPLATE_SET_LEN: usize = TEMPLATE_FLOWSET_LEN;
    const DATA_SET_ID: [u16; 2] = [TEMPLATE_ID_V4, TEMPLATE_ID_V6];
    const RECORD_LEN: [usize; 2] = [RECORD_LEN_V4, RECORD_LEN_V6];
    // RFC 3954 §5.3: FlowSets are padded to a 32-bit boundary.
    const SET_ALIGN: usize = 4;
    const SEQUENCE_COUNTS_RECORDS: bool = false;
    const MIN_MESSAGE_LEN: usize = MIN_MESSAGE_LEN;
    const MAX_MESSAGE_LEN: usize = MAX_MESSAGE_LEN;

    fn max_message_len(&self) -> usize {
        self.max_message_len
    }

    fn refresh(&self) -> Option<Refresh> {
        Some(self.refresh)
    }

    fn end_padding(&self, _room: usize, _record_len: usize) -> usize {
        0
    }

    #[inline]
    fn write_template_set(w: &mut Put<'_>) {
        write_template_flowset(w);
    }

    #[inline(always)]
    fn write_record(&self, w: &mut Put<'_>, r: &FlowRecord) {
        write_record(w, r, self.start_ns);
    }

    #[inline(always)]
    fn write_header(&self, h: &mut Put<'_>, m: &MessageHeader) {
        let templates = if m.templates { TEMPLATE_RECORDS } else { 0 };
        h.u16(VERSION);
        h.u16(m.records as u16 + templates);
        h.u32(uptime_ms(m.now_ns, self.start_ns));
        h.u32(unix_secs(m.now_ns));
        h.u32(m.sequence);
        h.u32(self.source_id);
    }
}

fn write_template_flowset(w: &mut Put<'_>) {
    w.u16(TEMPLATE_FLOWSET_ID);
    w.u16(TEMPLATE_FLOWSET_LEN as u16);
    for (id, fields) in [
        (TEMPLATE_ID_V4, &TEMPLATE_V4),
        (TEMPLATE_ID_V6, &TEMPLATE_V6),
    ] {
        w.u16(id);
        w.u16(FIELD_COUNT as u16);
        for f in fields {
            w.u16(f.field_type);
            w.u16(f.len);
        }
    }
}

/// Writes `r` in the order of [`TEMPLATE_V4`] / [`TEMPLATE_V6`].
#[inline(always)]
fn write_record(w: &mut Put<'_>, r: &FlowRecord, start_ns: u64) {
    let start = w.pos();
    w.u64(r.fwd.octets);
    w.u64(r.fwd.packets);
    w.u64(r.rev.octets);
    w.u64(r.rev.packets);
    w.u8(r.proto);
    w.u8(r.fwd.tcp_flags as u8);
    w.u16(r.sport);
    if r.ipv6 {
        w.bytes(&r.src);
    } else {
        w.bytes(&r.src[..4]);
    }
    w.u32(r.interface);
    w.u16(r.dport);
    if r.ipv6 {
        w.bytes(&r.dst);
    } else {
        w.bytes(&r.dst[..4]);
    }
    w.u32(uptime_ms(r.end_ns(), start_ns));
    w.u32(uptime_ms(r.start_ns(), start_ns));
    w.u16(r.vlan);
    w.u16(if r.is_icmp() { r.dport } else { 0 });
    debug_assert_eq!(
        w.pos() - start,
        if r.ipv6 { RECORD_LEN_V6 } else { RECORD_LEN_V4 }
    );
}

// Collection: decoding packets from any NetFlow v9 exporter (see `flowdecode`).

/// FlowSet id of an Options Template FlowSet.
pub const OPTIONS_TEMPLATE_FLOWSET_ID: u16 = 1;

/// Option scope type `Interface` (RFC 3954 §6.1): the scope value is an interface index.
const SCOPE_INTERFACE: u16 = 2;

/// The header of a packet being decoded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Header {
    pub sys_uptime_ms: u32,
    pub unix_secs: u32,
    pub sequence: u32,
    pub source_id: u32,
}

impl Header {
    /// The header of `msg`, after checking the version and the FlowSet framing.
    pub(crate) fn parse(msg: &[u8]) -> Result<Header, DecodeError> {
        let h = versioned_header::<HEADER_LEN>(msg, "NetFlow v9", "NetFlow v9 header", VERSION)?;
        check_sets(msg, HEADER_LEN, FLOWSET_HEADER_LEN)?;
        Ok(Header {
            sys_uptime_ms: read_u32(&h[4..]),
            unix_secs: read_u32(&h[8..]),
            sequence: read_u32(&h[12..]),
            source_id: read_u32(&h[16..]),
        })
    }
}

/// Decodes the FlowSets of `msg`, whose header `h` was checked, for exporter state `ex`.
pub(crate) fn decode(
    h: &Header,
    msg: &[u8],
    ex: &mut Exporter,
    budget: &mut Budget,
    emit: &mut Emit<'_, '_>,
) {
    let clock = Clock {
        export_ns: u64::from(h.unix_secs) * 1_000_000_000,
        sys_uptime_ms: Some(h.sys_uptime_ms),
        init_ms: 0,
    };
    for (id, body, at) in sets(msg, HEADER_LEN) {
        match id {
            TEMPLATE_FLOWSET_ID => templates(body, at, ex, budget, emit.summary),
            OPTIONS_TEMPLATE_FLOWSET_ID => options_templates(body, at, ex, budget, emit.summary),
            MIN_DATA_SET_ID.. => {
                ex.data_set(id, body, at, clock, emit);
            }
            _ => {}
        }
    }
    // v9 numbers export packets, not records (RFC 3954 §5.1).
    ex.sequence.observe(h.sequence, 1, 0).add_to(emit.summary);
}

/// Reads a Template FlowSet body.
fn templates(
    body: &[u8],
    at: usize,
    ex: &mut Exporter,
    budget: &mut Budget,
    summary: &mut MessageSummary,
) {
    let mut p = 0;
    while let (Some(id), Some(count)) = (get_u16(body, p), get_u16(body, p + 2)) {
        let rec_at = at + p;
        p += 4;
        if id == 0 && count == 0 {
            break; // padding
        }
        let Some(specs) = body.get(p..p + 4 * usize::from(count)) else {
            return summary.refuse(DecodeError::BadTemplate {
                id,
                at: rec_at,
                why: "truncated",
            });
        };
        p += specs.len();
        let fields = specs.chunks_exact(4).map(|f| {
            let (e, rev) = elem(read_u16(f), true);
            Field {
                elem: e,
                rev,
                len: read_u16(&f[2..]),
            }
        });
        add(id, count, fields, false, rec_at, ex, budget, summary);
    }
}

/// Reads an Options Template FlowSet body.
fn options_templates(
    body: &[u8],
    at: usize,
    ex: &mut Exporter,
    budget: &mut Budget,
    summary: &mut MessageSummary,
) {
    let mut p = 0;
    while let (Some(id), Some(scope_len), Some(option_len)) =
        (get_u16(body, p), get_u16(body, p + 2), get_u16(body, p + 4))
    {
        let rec_at = at + p;
        p += 6;
        if scope_len == 0 && option_len == 0 {
            break; // padding
        }
        let (scope_len, option_len) = (usize::from(scope_len), usize::from(option_len));
        let bad = |why| DecodeError::BadTemplate {
            id,
            at: rec_at,
            why,
        };
        if scope_len % 4 != 0 || option_len % 4 != 0 {
            return summary.refuse(bad("scope or option length not a multiple of 4"));
        }
        let Some(specs) = body.get(p..p + scope_len + option_len) else {
            return summary.refuse(bad("truncated"));
        };
        p += specs.len();
        let (scope, option) = specs.split_at(scope_len);
        let scope = scope.chunks_exact(4).map(|f| Field {
            elem: if read_u16(f) == SCOPE_INTERFACE {
                Elem::InIf
            } else {
                Elem::Skip
            },
            rev: false,
            len: read_u16(&f[2..]),
        });
        let option = option.chunks_exact(4).map(|f| {
            let (e, rev) = elem(read_u16(f), true);
            Field {
                elem: e,
                rev,
                len: read_u16(&f[2..]),
            }
        });
        let count = (specs.len() / 4).min(usize::from(u16::MAX)) as u16;
        add(
            id,
            count,
            scope.chain(option),
            true,
            rec_at,
            ex,
            budget,
            summary,
        );
    }
}

/// Adds template `id` of `count` `fields`.
#[allow(clippy::too_many_arguments)]
fn add(
    id: u16,
    count: u16,
    fields: impl Iterator<Item = Field>,
    options: bool,
    at: usize,
    ex: &mut Exporter,
    budget: &mut Budget,
    summary: &mut MessageSummary,
) {
    if id < MIN_DATA_SET_ID {
        return summary.refuse(DecodeError::BadTemplate {
            id,
            at,
            why: "template id below 256",
        });
    }
    if usize::from(count) > budget.max_fields {
        return summary.refuse(DecodeError::TooManyFields {
            id,
            count: usize::from(count),
            limit: budget.max_fields,
        });
    }
    // v9 has no variable-length fields: a length of 65535 is just long.
    let mut scratch = std::mem::take(&mut budget.scratch);
    scratch.clear();
    scratch.extend(fields.map(|f| Field {
        len: f.len.min(VARLEN - 1),
        ..f
    }));
    let r = ex.templates.insert(id, options, &scratch, at, budget);
    budget.scratch = scratch;
    match r {
        Ok(()) => summary.templates += 1,
        Err(e) => summary.refuse(e),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bytes::{read_u16, read_u32};
    use crate::flowrecord::Counters;
    use crate::ipfix::tests::tcp;
    use proptest::prelude::*;

    const T0: u64 = 1_700_000_000_000_000_000;
    const SEC: u64 = 1_000_000_000;
    /// The exporter started 1000.25 s before T0.
    const START: u64 = T0 - 1_000_250_000_000;

    /// The FlowSets of a packet: (id, body with padding).
    fn flowsets(p: &[u8]) -> Vec<(u16, &[u8])> {
        assert_eq!(read_u16(p), VERSION);
        let mut v = Vec::new();
        let mut at = HEADER_LEN;
        while at < p.len() {
            let id = read_u16(&p[at..]);
            let len = usize::from(read_u16(&p[at + 2..]));
            assert!(
                len >= 4 && len % 4 == 0,
                "FlowSet length {len} not padded to 4"
            );
            assert!(at + len <= p.len(), "FlowSet overruns");
            v.push((id, &p[at + 4..at + len]));
            at += len;
        }
        v
    }

    /// (carries templates, IPv4 records, IPv6 records); checks the padding and `count`.
    fn shape(p: &[u8]) -> (bool, usize, usize) {
        let mut s = (false, 0, 0);
        for (id, body) in flowsets(p) {
            let rec = match id {
                TEMPLATE_FLOWSET_ID => {
                    s.0 = true;
                    continue;
                }
                TEMPLATE_ID_V4 => RECORD_LEN_V4,
                TEMPLATE_ID_V6 => RECORD_LEN_V6,
                _ => panic!("unexpected FlowSet {id}"),
            };
            let n = body.len() / rec;
            let pad = &body[n * rec..];
            assert!(
                pad.len() < 4 && pad.iter().all(|b| *b == 0),
                "padding {pad:?}"
            );
            if id == TEMPLATE_ID_V4 {
                s.1 += n;
            } else {
                s.2 += n;
            }
        }
        let templates = if s.0 { 2 } else { 0 };
        assert_eq!(
            usize::from(read_u16(&p[2..])),
            templates + s.1 + s.2,
            "count"
        );
        s
    }

    fn encoder(max: usize, refresh: Refresh) -> Encoder {
        Encoder::new(Config {
            max_message_len: max,
            source_id: 9,
            start_ns: START,
            refresh,
        })
        .unwrap()
    }

    fn collect(enc: &mut Encoder, records: &[FlowRecord], now_ns: u64) -> Vec<Vec<u8>> {
        let mut v = Vec::new();
        enc.encode(records, now_ns, &mut |m| v.push(m.to_vec()));
        v
    }

    #[test]
    fn sizes_follow_the_field_list() {
        assert_eq!(RECORD_LEN_V4, 62);
        assert_eq!(RECORD_LEN_V6, 86);
        assert_eq!(TEMPLATE_FLOWSET_LEN, 4 + 2 * (4 + 15 * 4));
        assert_eq!(data_flowset_len(1, RECORD_LEN_V4), 68);
        assert_eq!(data_flowset_len(2, RECORD_LEN_V4), 128);
        assert_eq!(MIN_MESSAGE_LEN, 20 + 132 + 92);
    }

    #[test]
    fn header_fields() {
        let mut enc = encoder(1400, Refresh::default());
        let now = T0 + 5 * SEC + 700_000_000;
        let p = &collect(&mut enc, &[tcp(false), tcp(true)], now)[0];
        assert_eq!(read_u16(p), 9);
        assert_eq!(read_u16(&p[2..]), 4, "2 template records + 2 data records");
        // sysUptime at the export time: 1000.25 s + 5.7 s.
        assert_eq!(read_u32(&p[4..]), 1_005_950);
        assert_eq!(read_u32(&p[8..]), 1_700_000_005);
        assert_eq!(read_u32(&p[12..]), 0);
        assert_eq!(read_u32(&p[16..]), 9);
        assert_eq!(shape(p), (true, 1, 1));
        let fs = flowsets(p);
        assert_eq!(fs.iter().map(|f| f.0).collect::<Vec<_>>(), [0, 256, 257]);
        // Template 256: 15 fields, IN_BYTES/8 first, ICMP_TYPE/2 last.
        let t = fs[0].1;
        assert_eq!(&t[..8], &[1, 0, 0, 15, 0, 1, 0, 8]);
        assert_eq!(&t[60..64], &[0, 32, 0, 2]);
        assert_eq!(&t[64..68], &[1, 1, 0, 15]);
    }

    #[test]
    fn data_record_matches_the_fixture() {
        let mut r = tcp(false);
        r.fwd.tcp_flags = 0x0112; // only the low 8 bits fit
        let mut buf = [0u8; RECORD_LEN_V4];
        write_record(&mut Put::at(&mut buf, 0), &r, START);
        let mut want = Vec::new();
        for v in [1500u64, 12, 90000, 70] {
            want.extend_from_slice(&v.to_be_bytes());
        }
        want.extend_from_slice(&[6, 0x12, 0x9c, 0x40, 10, 0, 0, 1, 0, 0, 0, 3, 0x01, 0xbb]);
        want.extend_from_slice(&[10, 0, 0, 2]);
        // LAST then FIRST: 1000.25 s + 9 ms and + 1 ms.
        want.extend_from_slice(&1_000_259u32.to_be_bytes());
        want.extend_from_slice(&1_000_251u32.to_be_bytes());
        want.extend_from_slice(&[0, 42, 0, 0]);
        assert_eq!(&buf[..], &want[..]);
    }

    #[test]
    fn icmp_type_and_times_before_start_wrap() {
        let mut r = tcp(false);
        r.proto = 1;
        r.sport = 0;
        r.dport = 0x0303;
        r.rev = Counters::default();
        let mut buf = [0u8; RECORD_LEN_V4];
        // Started 1 ms after the flow's first packet: sysUptime wraps like a router's.
        write_record(&mut Put::at(&mut buf, 0), &r, T0 + 2_000_000);
        assert_eq!(&buf[60..62], &[3, 3]);
        assert_eq!(
            read_u32(&buf[54..]),
            u32::MAX,
            "first switched 1 ms before start"
        );
        assert_eq!(read_u32(&buf[50..]), 7, "last switched");
    }

    #[test]
    fn padding_is_zero_and_to_4() {
        let mut enc = encoder(1400, Refresh::default());
        for n in 1..6 {
            let p = &collect(&mut enc, &vec![tcp(false); n], T0)[0];
            let fs = flowsets(p);
            let d = fs.iter().find(|f| f.0 == TEMPLATE_ID_V4).unwrap();
            assert_eq!(d.1.len() + 4, data_flowset_len(n, RECORD_LEN_V4));
            assert_eq!(
                d.1.len() - n * RECORD_LEN_V4,
                if n % 2 == 1 { 2 } else { 0 }
            );
            assert_eq!(p.len() % 4, 0);
            shape(p);
        }
    }

    #[test]
    fn sequence_counts_packets_before() {
        let max = HEADER_LEN + TEMPLATE_FLOWSET_LEN + data_flowset_len(2, RECORD_LEN_V4);
        let mut enc = encoder(max, Refresh::default());
        let mut seqs = Vec::new();
        let mut shapes = Vec::new();
        let mut f = |p: &[u8]| {
            seqs.push(read_u32(&p[12..]));
            shapes.push(shape(p));
        };
        enc.encode(&vec![tcp(false); 9], T0, &mut f);
        enc.tick(T0 + 60 * SEC, &mut f);
        enc.encode(&[tcp(true)], T0 + 60 * SEC, &mut f);
        assert_eq!(seqs, [0, 1, 2, 3, 4]);
        // With the templates 2 records fit, without them 4; the tick's packet counts too.
        assert_eq!(
            shapes,
            [
                (true, 2, 0),
                (false, 4, 0),
                (false, 3, 0),
                (true, 0, 0),
                (false, 0, 1)
            ]
        );
        assert_eq!(enc.sequence(), 5);
        let s = enc.stats();
        assert_eq!((s.messages, s.template_messages, s.records), (5, 2, 10));
    }

    #[test]
    fn refresh_by_time_and_count() {
        let mut enc = encoder(
            1400,
            Refresh {
                secs: 60,
                messages: 4,
            },
        );
        let r = [tcp(false)];
        let got: Vec<bool> = [0, 1, 2, 3, 4, 5, 70, 71]
            .iter()
            .map(|&s| shape(&collect(&mut enc, &r, T0 + s * SEC)[0]).0)
            .collect();
        assert_eq!(got, [true, false, false, false, true, false, true, false]);
    }

    #[test]
    fn config_is_checked() {
        let cfg = |max| Config {
            max_message_len: max,
            ..Config::new(1, T0)
        };
        assert!(Encoder::new(cfg(MIN_MESSAGE_LEN)).is_ok());
        assert!(matches!(
            Encoder::new(cfg(MIN_MESSAGE_LEN - 1)),
            Err(ConfigError::MessageTooShort { .. })
        ));
        assert!(matches!(
            Encoder::new(cfg(MAX_MESSAGE_LEN + 1)),
            Err(ConfigError::MessageTooLong { .. })
        ));
        let none = Config {
            refresh: Refresh {
                secs: 0,
                messages: 0,
            },
            ..Config::new(1, T0)
        };
        assert!(matches!(
            Encoder::new(none),
            Err(ConfigError::NoRefresh { .. })
        ));
    }

    proptest! {
        #[test]
        fn packets_fit_and_carry_every_record_once(
            families in proptest::collection::vec(any::<bool>(), 0..200),
            max in MIN_MESSAGE_LEN..3000usize,
        ) {
            let mut enc = encoder(max, Refresh { secs: 60, messages: 3 });
            let recs: Vec<FlowRecord> = families.iter().map(|&v6| tcp(v6)).collect();
            let (mut seq, mut done) = (0u32, 0usize);
            enc.encode(&recs, T0, &mut |p| {
                assert!(p.len() <= max, "packet of {} > {max}", p.len());
                assert_eq!(read_u32(&p[12..]), seq);
                let (t, a, b) = shape(p);
                assert_eq!(t, seq % 3 == 0, "templates in one packet of every 3");
                seq += 1;
                done += a + b;
                if let Some(next) = recs.get(done) {
                    let (a, b) = if next.ipv6 { (a, b + 1) } else { (a + 1, b) };
                    let need = HEADER_LEN
                        + if t { TEMPLATE_FLOWSET_LEN } else { 0 }
                        + data_flowset_len(a, RECORD_LEN_V4)
                        + data_flowset_len(b, RECORD_LEN_V6);
                    assert!(need > max, "record {done} would have fit");
                }
            });
            prop_assert_eq!(done, recs.len());
        }
    }

    /// An exporter's v9 options: interface names (scope: interface) and a sampler, then data
    /// naming the sampler, with uptime times and padding.
    #[test]
    fn decodes_options_and_sampled_data() {
        use crate::flowdecode::{Decoded, Decoder, Limits, Protocol};
        let be16 = |v: &[u16]| v.iter().flat_map(|x| x.to_be_bytes()).collect::<Vec<u8>>();
        let flowset = |id: u16, body: &[u8]| {
            let mut b = be16(&[id, body.len() as u16 + 4]);
            b.extend_from_slice(body);
            b
        };
        let mut m = be16(&[9, 0]);
        for v in [3_600_000u32, 1_800_000_000, 0, 77] {
            m.extend_from_slice(&v.to_be_bytes());
        }
        // Options template 300: scope interface (2, 4), IF_NAME (82, 8); template 301:
        // FLOW_SAMPLER_ID (48, 1), FLOW_SAMPLER_RANDOM_INTERVAL (50, 4), padded.
        let mut ot = be16(&[300, 4, 4, 2, 4, 82, 8]);
        ot.extend_from_slice(&be16(&[301, 0, 8, 48, 1, 50, 4, 0]));
        // The second options template record has no scope: legal in practice, kept.
        m.extend_from_slice(&flowset(1, &ot));
        let mut names = 5u32.to_be_bytes().to_vec();
        names.extend_from_slice(b"ge-0/0/5");
        m.extend_from_slice(&flowset(300, &names));
        m.extend_from_slice(&flowset(301, &[7, 0, 0, 0, 50, 0, 0, 0]));
        // Template 256: IPV4_SRC_ADDR, IPV4_DST_ADDR, IN_PKTS (4), IN_BYTES (4),
        // FIRST_SWITCHED, LAST_SWITCHED, FLOW_SAMPLER_ID (1).
        let t = be16(&[256, 7, 8, 4, 12, 4, 2, 4, 1, 4, 22, 4, 21, 4, 48, 1]);
        m.extend_from_slice(&flowset(0, &t));
        let mut rec = vec![10, 0, 0, 1, 10, 0, 0, 2];
        for v in [3u32, 180, 3_590_000, 3_599_000] {
            rec.extend_from_slice(&v.to_be_bytes());
        }
        rec.push(7);
        rec.extend_from_slice(&[0, 0, 0]); // padding to 4
        m.extend_from_slice(&flowset(256, &rec));
        let mut d = Decoder::new(Limits::default());
        let (mut flows, mut names) = (Vec::new(), Vec::new());
        let s = d
            .decode(Protocol::NetflowV9, [0; 16], &m, 0, &mut |x| match x {
                Decoded::Flow(f) => flows.push(f),
                Decoded::Interface { index, name, .. } => names.push((index, name.to_string())),
                Decoded::Counters { .. } => {}
            })
            .unwrap();
        assert_eq!(
            (s.records, s.templates, s.malformed, s.domain),
            (1, 3, 0, 77)
        );
        assert_eq!(names, [(5, "ge-0/0/5".to_string())]);
        let f = flows[0];
        assert_eq!(f.sampling, 50);
        assert_eq!((f.flow.fwd.packets, f.flow.fwd.octets), (150, 9000));
        let export = 1_800_000_000_000_000_000u64;
        assert_eq!(f.flow.fwd.first_ns, export - 10_000_000_000);
        assert_eq!(f.flow.fwd.last_ns, export - 1_000_000_000);
    }
}
