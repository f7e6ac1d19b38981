//! Rows of one table held column by column, as they go into and come out of a Parquet file, and
//! the conversions between them and the records the store takes.
//!
//! Physical types: times and `U64` are INT64 (a `U64` keeps its bits), `U8`/`U16`/`U32` are
//! INT32 (a `U32` keeps its bits), addresses 16-byte arrays, text strings.

use tapflow_wire::flowrecord::{EndReason, FlowRecord};

use std::borrow::Cow;
use std::collections::HashMap;

use crate::schema::{
    ColumnType, ExporterStats, FLOW_COLUMNS, FLOW_COLUMNS_BEFORE_ENRICHMENT, InterfaceCounters,
    InterfaceName, Network, Place, StoredFlow, addr16,
};

/// One text value: borrowed when it is an interned name (enrichment's, written per row without
/// a copy), owned when read from a file.
pub type Text = Cow<'static, str>;

/// The values of one column.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Column {
    /// `U8`, `U16`, `U32` (bits kept).
    I32(Vec<i32>),
    /// `TimestampMicros`, `U64` (bits kept).
    I64(Vec<i64>),
    /// `Addr16`.
    Addr(Vec<[u8; 16]>),
    /// `Utf8`.
    Text(Vec<Text>),
}

impl Column {
    /// An empty column for values of type `t`.
    pub fn empty(t: ColumnType) -> Column {
        match t {
            ColumnType::U8 | ColumnType::U16 | ColumnType::U32 => Column::I32(Vec::new()),
            ColumnType::TimestampMicros | ColumnType::U64 => Column::I64(Vec::new()),
            ColumnType::Addr16 => Column::Addr(Vec::new()),
            ColumnType::Utf8 => Column::Text(Vec::new()),
        }
    }

    /// Appends `rows` zeros or empty texts (a column a file written before it lacks).
    pub fn pad(&mut self, rows: usize) {
        match self {
            Column::I32(v) => v.resize(v.len() + rows, 0),
            Column::I64(v) => v.resize(v.len() + rows, 0),
            Column::Addr(v) => v.resize(v.len() + rows, [0; 16]),
            Column::Text(v) => v.resize(v.len() + rows, Text::Borrowed("")),
        }
    }

    /// How many values it holds.
    pub fn len(&self) -> usize {
        match self {
            Column::I32(v) => v.len(),
            Column::I64(v) => v.len(),
            Column::Addr(v) => v.len(),
            Column::Text(v) => v.len(),
        }
    }

    /// Whether it holds none.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Whether every value is the first one (an empty column is).
    pub fn is_constant(&self) -> bool {
        fn same<T: PartialEq>(v: &[T]) -> bool {
            v.first().is_none_or(|a| v.iter().all(|b| b == a))
        }
        match self {
            Column::I32(v) => same(v),
            Column::I64(v) => same(v),
            Column::Addr(v) => same(v),
            Column::Text(v) => same(v),
        }
    }

    /// Appends `other`'s values (of the same type).
    fn append(&mut self, other: &Column) {
        match (self, other) {
            (Column::I32(a), Column::I32(b)) => a.extend_from_slice(b),
            (Column::I64(a), Column::I64(b)) => a.extend_from_slice(b),
            (Column::Addr(a), Column::Addr(b)) => a.extend_from_slice(b),
            (Column::Text(a), Column::Text(b)) => a.extend_from_slice(b),
            (a, b) => unreachable!("columns of one table differ: {a:?} {b:?}"),
        }
    }

    /// The values at `order`, in that order.
    fn take(&self, order: &[usize]) -> Column {
        match self {
            Column::I32(v) => Column::I32(order.iter().map(|&i| v[i]).collect()),
            Column::I64(v) => Column::I64(order.iter().map(|&i| v[i]).collect()),
            Column::Addr(v) => Column::Addr(order.iter().map(|&i| v[i]).collect()),
            Column::Text(v) => Column::Text(order.iter().map(|&i| v[i].clone()).collect()),
        }
    }

    /// The values from `at` to `at + len`.
    pub fn slice(&self, at: usize, len: usize) -> Column {
        match self {
            Column::I32(v) => Column::I32(v[at..at + len].to_vec()),
            Column::I64(v) => Column::I64(v[at..at + len].to_vec()),
            Column::Addr(v) => Column::Addr(v[at..at + len].to_vec()),
            Column::Text(v) => Column::Text(v[at..at + len].to_vec()),
        }
    }
}

/// Rows of one table, column by column in the table's order.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Batch {
    /// One entry per column of the table, all of one length.
    pub columns: Vec<Column>,
}

impl Batch {
    /// An empty batch for a table of `columns`.
    pub fn empty(columns: &[(&str, ColumnType)]) -> Batch {
        Batch {
            columns: columns.iter().map(|&(_, t)| Column::empty(t)).collect(),
        }
    }

    /// How many rows it holds.
    pub fn rows(&self) -> usize {
        self.columns.first().map_or(0, Column::len)
    }

    /// The first column (every table's time), µs.
    pub fn times(&self) -> &[i64] {
        match self.columns.first() {
            Some(Column::I64(v)) => v,
            _ => &[],
        }
    }

    /// Appends `other`'s rows.
    pub fn append(&mut self, other: &Batch) {
        for (a, b) in self.columns.iter_mut().zip(&other.columns) {
            a.append(b);
        }
    }

    /// The rows sorted by the first column (stable: rows of one time keep their order).
    pub fn sorted_by_time(&self) -> Batch {
        let t = self.times();
        if t.is_sorted() {
            return self.clone();
        }
        let mut order: Vec<usize> = (0..t.len()).collect();
        order.sort_by_key(|&i| t[i]);
        Batch {
            columns: self.columns.iter().map(|c| c.take(&order)).collect(),
        }
    }

    /// Rows `at..at + len`.
    pub fn slice(&self, at: usize, len: usize) -> Batch {
        Batch {
            columns: self.columns.iter().map(|c| c.slice(at, len)).collect(),
        }
    }

    fn i32(&self, k: usize) -> &[i32] {
        match &self.columns[k] {
            Column::I32(v) => v,
            c => unreachable!("column {k} is not INT32: {c:?}"),
        }
    }

    fn i64(&self, k: usize) -> &[i64] {
        match &self.columns[k] {
            Column::I64(v) => v,
            c => unreachable!("column {k} is not INT64: {c:?}"),
        }
    }

    fn addr(&self, k: usize) -> &[[u8; 16]] {
        match &self.columns[k] {
            Column::Addr(v) => v,
            c => unreachable!("column {k} is not an address: {c:?}"),
        }
    }

    fn text(&self, k: usize) -> &[Text] {
        match &self.columns[k] {
            Column::Text(v) => v,
            c => unreachable!("column {k} is not text: {c:?}"),
        }
    }
}

/// µs from ns, as the store keeps times.
#[inline]
fn us(ns: u64) -> i64 {
    (ns / 1000) as i64
}

/// ns from stored µs (a negative time, which no writer here stores, reads as 0; one past
/// `u64::MAX` ns, which only a damaged file holds, as `u64::MAX`).
#[inline]
fn ns(us: i64) -> u64 {
    u64::try_from(us).unwrap_or(0).saturating_mul(1000)
}

/// `flows` as rows of [`crate::schema::FLOW_COLUMNS`], in the order given.
pub fn from_flows(flows: &[StoredFlow]) -> Batch {
    let mut out = Batch::empty(FLOW_COLUMNS);
    rows_of_flows(&mut out, flows.len(), flows.iter());
    out
}

/// The flows `flows[order[0]], flows[order[1]], ...` as rows of
/// [`crate::schema::FLOW_COLUMNS`]: a sorted file's rows without moving the flows themselves.
pub fn from_flows_in(flows: &[StoredFlow], order: &[u32]) -> Batch {
    let mut out = Batch::empty(FLOW_COLUMNS);
    fill_from_flows_in(&mut out, flows, order);
    out
}

/// [`from_flows_in`] into `out`, whose rows it replaces: its columns' memory is reused, so a
/// store that writes every few seconds does not map and fault in new pages each time.
pub fn fill_from_flows_in(out: &mut Batch, flows: &[StoredFlow], order: &[u32]) {
    if out.columns.len() != FLOW_COLUMNS.len() {
        *out = Batch::empty(FLOW_COLUMNS);
    }
    rows_of_flows(out, order.len(), order.iter().map(|&i| &flows[i as usize]));
}

fn i64s(c: &mut Column) -> &mut Vec<i64> {
    match c {
        Column::I64(v) => v,
        c => unreachable!("a flow column is not INT64: {c:?}"),
    }
}

fn i32s(c: &mut Column) -> &mut Vec<i32> {
    match c {
        Column::I32(v) => v,
        c => unreachable!("a flow column is not INT32: {c:?}"),
    }
}

fn addrs(c: &mut Column) -> &mut Vec<[u8; 16]> {
    match c {
        Column::Addr(v) => v,
        c => unreachable!("a flow column is not an address: {c:?}"),
    }
}

/// Replaces the rows of `out` (a batch of [`FLOW_COLUMNS`]) by `n` flows.
fn rows_of_flows<'a>(out: &mut Batch, n: usize, flows: impl Iterator<Item = &'a StoredFlow>) {
    for c in &mut out.columns {
        match c {
            Column::I32(v) => (v.clear(), v.reserve(n)),
            Column::I64(v) => (v.clear(), v.reserve(n)),
            Column::Addr(v) => (v.clear(), v.reserve(n)),
            Column::Text(v) => (v.clear(), v.reserve(n)),
        };
    }
    let (base, places) = out.columns.split_at_mut(FLOW_COLUMNS_BEFORE_ENRICHMENT);
    let [
        t_start,
        t_end,
        t_recv,
        version,
        src,
        dst,
        sport,
        dport,
        proto,
        flags,
        rev_flags,
        packets,
        bytes,
        rev_packets,
        rev_bytes,
        exporter,
        domain,
        in_if,
        out_if,
        vlan,
        reason,
        sampling,
    ] = base
    else {
        unreachable!("a batch of flows has {} columns", FLOW_COLUMNS.len());
    };
    let (t_start, t_end, t_recv) = (i64s(t_start), i64s(t_end), i64s(t_recv));
    let (version, src, dst) = (i32s(version), addrs(src), addrs(dst));
    let (sport, dport, proto) = (i32s(sport), i32s(dport), i32s(proto));
    let (flags, rev_flags) = (i32s(flags), i32s(rev_flags));
    let (packets, bytes) = (i64s(packets), i64s(bytes));
    let (rev_packets, rev_bytes) = (i64s(rev_packets), i64s(rev_bytes));
    let (exporter, domain, in_if, out_if) =
        (addrs(exporter), i32s(domain), i32s(in_if), i32s(out_if));
    let (vlan, reason, sampling) = (i32s(vlan), i32s(reason), i32s(sampling));
    for s in flows {
        let f = &s.flow;
        t_start.push(us(f.start_ns()));
        t_end.push(us(f.end_ns()));
        t_recv.push(us(s.received_ns));
        version.push(if f.ipv6 { 6 } else { 4 });
        src.push(addr16(f.ipv6, &f.src));
        dst.push(addr16(f.ipv6, &f.dst));
        sport.push(i32::from(f.sport));
        dport.push(i32::from(f.dport));
        proto.push(i32::from(f.proto));
        flags.push(i32::from(f.fwd.tcp_flags));
        rev_flags.push(i32::from(f.rev.tcp_flags));
        packets.push(f.fwd.packets as i64);
        bytes.push(f.fwd.octets as i64);
        rev_packets.push(f.rev.packets as i64);
        rev_bytes.push(f.rev.octets as i64);
        exporter.push(s.exporter);
        domain.push(s.domain as i32);
        in_if.push(f.interface as i32);
        out_if.push(s.egress as i32);
        vlan.push(i32::from(f.vlan));
        reason.push(i32::from(f.end_reason.to_u8()));
        sampling.push(s.sampling as i32);
        push_places(places, &s.src_place, &s.dst_place);
    }
}

/// Appends the places of one flow to the enrichment columns of [`FLOW_COLUMNS`], source and
/// destination in turn: AS number, AS name, country, network name, role, site, tenant, other
/// attributes.
fn push_places(columns: &mut [Column], src: &Place, dst: &Place) {
    for (side, p) in [src, dst].into_iter().enumerate() {
        i32s(&mut columns[side]).push(p.asn as i32);
        let values = [
            p.as_name,
            country_code(p.country),
            p.net.name,
            p.net.role,
            p.net.site,
            p.net.tenant,
            p.net.attrs,
        ];
        for (c, v) in values.into_iter().enumerate() {
            match &mut columns[2 + 2 * c + side] {
                Column::Text(t) => t.push(Text::Borrowed(v)),
                c => unreachable!("an enrichment column is not text: {c:?}"),
            }
        }
    }
}

/// Every two-letter upper-case code, `AA` to `ZZ`, one after the other.
static COUNTRY_CODES: [u8; 26 * 26 * 2] = {
    let mut t = [0u8; 26 * 26 * 2];
    let mut i = 0;
    while i < 26 * 26 {
        t[2 * i] = b'A' + (i / 26) as u8;
        t[2 * i + 1] = b'A' + (i % 26) as u8;
        i += 1;
    }
    t
};

/// A country code as text that lives as long as the program: from the table of every code, or
/// interned for a code that is not two upper-case letters.
fn country_code(c: [u8; 2]) -> &'static str {
    if c[0] == 0 {
        return "";
    }
    if c.iter().all(u8::is_ascii_uppercase) {
        let i = 2 * (usize::from(c[0] - b'A') * 26 + usize::from(c[1] - b'A'));
        if let Ok(s) = std::str::from_utf8(&COUNTRY_CODES[i..i + 2]) {
            return s;
        }
    }
    crate::names::intern(&String::from_utf8_lossy(&c))
}

/// The places of row `i` of a batch of [`crate::schema::FLOW_COLUMNS`] rows, their text
/// interned through `seen` (one lock per distinct value, not per row).
fn places(b: &Batch, i: usize, seen: &mut HashMap<String, &'static str>) -> [Place; 2] {
    let k = FLOW_COLUMNS_BEFORE_ENRICHMENT;
    let mut text = |c: usize, side: usize| -> &'static str {
        let s = &b.text(k + 2 + 2 * c + side)[i];
        if s.is_empty() {
            return "";
        }
        if let Some(&v) = seen.get(s.as_ref()) {
            return v;
        }
        let v = crate::names::intern(s);
        seen.insert(s.to_string(), v);
        v
    };
    std::array::from_fn(|side| {
        let net = Network {
            name: text(2, side),
            role: text(3, side),
            site: text(4, side),
            tenant: text(5, side),
            attrs: text(6, side),
        };
        Place {
            asn: b.i32(k + side)[i] as u32,
            as_name: text(0, side),
            country: Place::country_from(text(1, side)),
            net: crate::names::intern_network(net),
        }
    })
}

/// The flows of a batch of [`crate::schema::FLOW_COLUMNS`] rows, as far as the columns hold
/// them: each direction with packets gets `time_start` and `time_end` as its first and last
/// times (ns, from µs), an end reason outside 1..=5 reads as idle.
pub fn to_flows(b: &Batch) -> Vec<StoredFlow> {
    let (t_start, t_end, t_recv) = (b.i64(0), b.i64(1), b.i64(2));
    let (version, src, dst) = (b.i32(3), b.addr(4), b.addr(5));
    let (sport, dport, proto, flags, rev_flags) =
        (b.i32(6), b.i32(7), b.i32(8), b.i32(9), b.i32(10));
    let (packets, bytes, rev_packets, rev_bytes) = (b.i64(11), b.i64(12), b.i64(13), b.i64(14));
    let (exporter, domain, in_if, out_if) = (b.addr(15), b.i32(16), b.i32(17), b.i32(18));
    let (vlan, reason, sampling) = (b.i32(19), b.i32(20), b.i32(21));
    let mut seen = HashMap::new();
    (0..b.rows())
        .map(|i| {
            let ipv6 = version[i] == 6;
            let unmapped = |a: &[u8; 16]| {
                if ipv6 {
                    *a
                } else {
                    let mut v4 = [0u8; 16];
                    v4[..4].copy_from_slice(&a[12..]);
                    v4
                }
            };
            let (first, last) = (ns(t_start[i]), ns(t_end[i]));
            let mut f = FlowRecord {
                ipv6,
                proto: proto[i] as u8,
                src: unmapped(&src[i]),
                dst: unmapped(&dst[i]),
                sport: sport[i] as u16,
                dport: dport[i] as u16,
                vlan: vlan[i] as u16,
                interface: in_if[i] as u32,
                end_reason: EndReason::from_u8(reason[i] as u8).unwrap_or_default(),
                ..FlowRecord::default()
            };
            f.fwd.packets = packets[i] as u64;
            f.fwd.octets = bytes[i] as u64;
            f.fwd.tcp_flags = flags[i] as u16;
            (f.fwd.first_ns, f.fwd.last_ns) = (first, last);
            f.rev.packets = rev_packets[i] as u64;
            f.rev.octets = rev_bytes[i] as u64;
            f.rev.tcp_flags = rev_flags[i] as u16;
            if f.rev.packets > 0 {
                (f.rev.first_ns, f.rev.last_ns) = (first, last);
            }
            let [src_place, dst_place] = places(b, i, &mut seen);
            StoredFlow {
                flow: f,
                egress: out_if[i] as u32,
                exporter: exporter[i],
                domain: domain[i] as u32,
                sampling: sampling[i] as u32,
                received_ns: ns(t_recv[i]),
                src_place,
                dst_place,
            }
        })
        .collect()
}

/// `names` as rows of [`crate::schema::INTERFACE_COLUMNS`].
pub fn from_interfaces(names: &[InterfaceName]) -> Batch {
    Batch {
        columns: vec![
            Column::I64(names.iter().map(|n| us(n.received_ns)).collect()),
            Column::Addr(names.iter().map(|n| n.exporter).collect()),
            Column::I32(names.iter().map(|n| n.domain as i32).collect()),
            Column::I32(names.iter().map(|n| n.index as i32).collect()),
            Column::Text(names.iter().map(|n| n.name.clone().into()).collect()),
            Column::Text(names.iter().map(|n| n.description.clone().into()).collect()),
            Column::I64(names.iter().map(|n| n.speed as i64).collect()),
        ],
    }
}

/// The interface names of a batch of [`crate::schema::INTERFACE_COLUMNS`] rows.
pub fn to_interfaces(b: &Batch) -> Vec<InterfaceName> {
    let (t, exporter, domain, index) = (b.i64(0), b.addr(1), b.i32(2), b.i32(3));
    let (name, description, speed) = (b.text(4), b.text(5), b.i64(6));
    (0..b.rows())
        .map(|i| InterfaceName {
            exporter: exporter[i],
            domain: domain[i] as u32,
            index: index[i] as u32,
            name: name[i].to_string(),
            description: description[i].to_string(),
            speed: speed[i] as u64,
            received_ns: ns(t[i]),
        })
        .collect()
}

/// `stats` as rows of [`crate::schema::EXPORTER_STATS_COLUMNS`].
pub fn from_exporter_stats(stats: &[ExporterStats]) -> Batch {
    let col =
        |f: fn(&ExporterStats) -> u64| Column::I64(stats.iter().map(|s| f(s) as i64).collect());
    Batch {
        columns: vec![
            Column::I64(stats.iter().map(|s| us(s.time_ns)).collect()),
            Column::Addr(stats.iter().map(|s| s.exporter).collect()),
            Column::I32(stats.iter().map(|s| s.domain as i32).collect()),
            col(|s| s.records),
            col(|s| s.sequence_lost),
            col(|s| s.template_missing),
            col(|s| s.bad_messages),
        ],
    }
}

/// The exporter counters of a batch of [`crate::schema::EXPORTER_STATS_COLUMNS`] rows.
pub fn to_exporter_stats(b: &Batch) -> Vec<ExporterStats> {
    let (t, exporter, domain) = (b.i64(0), b.addr(1), b.i32(2));
    let (records, lost, missing, bad) = (b.i64(3), b.i64(4), b.i64(5), b.i64(6));
    (0..b.rows())
        .map(|i| ExporterStats {
            exporter: exporter[i],
            domain: domain[i] as u32,
            time_ns: ns(t[i]),
            records: records[i] as u64,
            sequence_lost: lost[i] as u64,
            template_missing: missing[i] as u64,
            bad_messages: bad[i] as u64,
        })
        .collect()
}

/// `rows` as rows of [`crate::schema::IF_COUNTERS_COLUMNS`].
pub fn from_if_counters(rows: &[InterfaceCounters]) -> Batch {
    use tapflow_wire::sflow::IfCounters;
    let w = |f: fn(&IfCounters) -> u32| {
        Column::I32(rows.iter().map(|r| f(&r.counters) as i32).collect())
    };
    let d = |f: fn(&IfCounters) -> u64| {
        Column::I64(rows.iter().map(|r| f(&r.counters) as i64).collect())
    };
    Batch {
        columns: vec![
            Column::I64(rows.iter().map(|r| us(r.received_ns)).collect()),
            Column::Addr(rows.iter().map(|r| r.exporter).collect()),
            Column::I32(rows.iter().map(|r| r.domain as i32).collect()),
            w(|c| c.source_id),
            w(|c| c.if_index),
            w(|c| c.if_type),
            d(|c| c.if_speed),
            w(|c| c.if_direction),
            w(|c| c.if_status),
            d(|c| c.in_octets),
            w(|c| c.in_ucast_pkts),
            w(|c| c.in_multicast_pkts),
            w(|c| c.in_broadcast_pkts),
            w(|c| c.in_discards),
            w(|c| c.in_errors),
            w(|c| c.in_unknown_protos),
            d(|c| c.out_octets),
            w(|c| c.out_ucast_pkts),
            w(|c| c.out_multicast_pkts),
            w(|c| c.out_broadcast_pkts),
            w(|c| c.out_discards),
            w(|c| c.out_errors),
            w(|c| c.promiscuous_mode),
        ],
    }
}

/// The interface counters of a batch of [`crate::schema::IF_COUNTERS_COLUMNS`] rows.
pub fn to_if_counters(b: &Batch) -> Vec<InterfaceCounters> {
    let (t, exporter, domain) = (b.i64(0), b.addr(1), b.i32(2));
    let w = |c: usize, i: usize| b.i32(c)[i] as u32;
    let d = |c: usize, i: usize| b.i64(c)[i] as u64;
    (0..b.rows())
        .map(|i| InterfaceCounters {
            exporter: exporter[i],
            domain: domain[i] as u32,
            received_ns: ns(t[i]),
            counters: tapflow_wire::sflow::IfCounters {
                source_id: w(3, i),
                sequence: 0,
                if_index: w(4, i),
                if_type: w(5, i),
                if_speed: d(6, i),
                if_direction: w(7, i),
                if_status: w(8, i),
                in_octets: d(9, i),
                in_ucast_pkts: w(10, i),
                in_multicast_pkts: w(11, i),
                in_broadcast_pkts: w(12, i),
                in_discards: w(13, i),
                in_errors: w(14, i),
                in_unknown_protos: w(15, i),
                out_octets: d(16, i),
                out_ucast_pkts: w(17, i),
                out_multicast_pkts: w(18, i),
                out_broadcast_pkts: w(19, i),
                out_discards: w(20, i),
                out_errors: w(21, i),
                promiscuous_mode: w(22, i),
            },
        })
        .collect()
}

/// `f` as the store keeps it: times in whole µs, each direction with packets spanning the
/// record's start and end, so `to_flows(&from_flows(&[f])) == [as_stored(f)]`.
pub fn as_stored(f: &StoredFlow) -> StoredFlow {
    to_flows(&from_flows(std::slice::from_ref(f)))[0]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stored_times_past_the_ns_range_saturate() {
        assert_eq!(ns(i64::MAX), u64::MAX);
        assert_eq!(ns(-5), 0);
        assert_eq!(ns(1_710_028_800_000_000), 1_710_028_800_000_000_000);
    }
}
