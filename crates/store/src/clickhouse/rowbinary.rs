//! Rows in ClickHouse's RowBinary format, appended to a caller's buffer: integers little-endian,
//! `FixedString(16)` and `IPv6` as their 16 bytes in network order, `DateTime64(6)` as the
//! `Int64` of µs (the same 8 bytes as the `UInt64` µs of old servers), strings as a LEB128
//! length and the bytes. No allocation per row.

use crate::schema::{ExporterStats, InterfaceCounters, InterfaceName, StoredFlow, addr16};

/// Appends one flow in [`FLOW_COLUMNS`](crate::schema::FLOW_COLUMNS)' order.
pub fn encode_flow(buf: &mut Vec<u8>, s: &StoredFlow) {
    let f = &s.flow;
    buf.extend_from_slice(&(f.start_ns() / 1000).to_le_bytes());
    buf.extend_from_slice(&(f.end_ns() / 1000).to_le_bytes());
    buf.extend_from_slice(&(s.received_ns / 1000).to_le_bytes());
    buf.push(if f.ipv6 { 6 } else { 4 });
    buf.extend_from_slice(&addr16(f.ipv6, &f.src));
    buf.extend_from_slice(&addr16(f.ipv6, &f.dst));
    buf.extend_from_slice(&f.sport.to_le_bytes());
    buf.extend_from_slice(&f.dport.to_le_bytes());
    buf.push(f.proto);
    buf.extend_from_slice(&f.fwd.tcp_flags.to_le_bytes());
    buf.extend_from_slice(&f.rev.tcp_flags.to_le_bytes());
    buf.extend_from_slice(&f.fwd.packets.to_le_bytes());
    buf.extend_from_slice(&f.fwd.octets.to_le_bytes());
    buf.extend_from_slice(&f.rev.packets.to_le_bytes());
    buf.extend_from_slice(&f.rev.octets.to_le_bytes());
    buf.extend_from_slice(&s.exporter);
    buf.extend_from_slice(&s.domain.to_le_bytes());
    buf.extend_from_slice(&f.interface.to_le_bytes());
    buf.extend_from_slice(&s.egress.to_le_bytes());
    buf.extend_from_slice(&f.vlan.to_le_bytes());
    buf.push(f.end_reason.to_u8());
    buf.extend_from_slice(&s.sampling.to_le_bytes());
    let (a, b) = (&s.src_place, &s.dst_place);
    buf.extend_from_slice(&a.asn.to_le_bytes());
    buf.extend_from_slice(&b.asn.to_le_bytes());
    for (x, y) in [
        (a.as_name, b.as_name),
        (a.country_code(), b.country_code()),
        (a.net.name, b.net.name),
        (a.net.role, b.net.role),
        (a.net.site, b.net.site),
        (a.net.tenant, b.net.tenant),
        (a.net.attrs, b.net.attrs),
    ] {
        string(buf, x);
        string(buf, y);
    }
}

/// Appends one interface name in the `interfaces` table's column order.
pub fn encode_interface(buf: &mut Vec<u8>, n: &InterfaceName) {
    buf.extend_from_slice(&(n.received_ns / 1000).to_le_bytes());
    buf.extend_from_slice(&n.exporter);
    buf.extend_from_slice(&n.domain.to_le_bytes());
    buf.extend_from_slice(&n.index.to_le_bytes());
    string(buf, &n.name);
    string(buf, &n.description);
    buf.extend_from_slice(&n.speed.to_le_bytes());
}

/// Appends one interval of exporter counters in the `exporter_stats` table's column order.
pub fn encode_stats(buf: &mut Vec<u8>, s: &ExporterStats) {
    buf.extend_from_slice(&(s.time_ns / 1000).to_le_bytes());
    buf.extend_from_slice(&s.exporter);
    buf.extend_from_slice(&s.domain.to_le_bytes());
    buf.extend_from_slice(&s.records.to_le_bytes());
    buf.extend_from_slice(&s.sequence_lost.to_le_bytes());
    buf.extend_from_slice(&s.template_missing.to_le_bytes());
    buf.extend_from_slice(&s.bad_messages.to_le_bytes());
}

/// Appends one counter sample in [`IF_COUNTERS_COLUMNS`](crate::schema::IF_COUNTERS_COLUMNS)'
/// order.
pub fn encode_if_counters(buf: &mut Vec<u8>, s: &InterfaceCounters) {
    let c = &s.counters;
    buf.extend_from_slice(&(s.received_ns / 1000).to_le_bytes());
    buf.extend_from_slice(&s.exporter);
    for w in [s.domain, c.source_id, c.if_index, c.if_type] {
        buf.extend_from_slice(&w.to_le_bytes());
    }
    buf.extend_from_slice(&c.if_speed.to_le_bytes());
    for w in [c.if_direction, c.if_status] {
        buf.extend_from_slice(&w.to_le_bytes());
    }
    buf.extend_from_slice(&c.in_octets.to_le_bytes());
    for w in [
        c.in_ucast_pkts,
        c.in_multicast_pkts,
        c.in_broadcast_pkts,
        c.in_discards,
        c.in_errors,
        c.in_unknown_protos,
    ] {
        buf.extend_from_slice(&w.to_le_bytes());
    }
    buf.extend_from_slice(&c.out_octets.to_le_bytes());
    for w in [
        c.out_ucast_pkts,
        c.out_multicast_pkts,
        c.out_broadcast_pkts,
        c.out_discards,
        c.out_errors,
        c.promiscuous_mode,
    ] {
        buf.extend_from_slice(&w.to_le_bytes());
    }
}

fn string(buf: &mut Vec<u8>, s: &str) {
    let mut n = s.len();
    while n >= 0x80 {
        buf.push((n as u8 & 0x7f) | 0x80);
        n >>= 7;
    }
    buf.push(n as u8);
    buf.extend_from_slice(s.as_bytes());
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::schema::{ColumnType, FLOW_COLUMNS, IF_COUNTERS_COLUMNS};

    #[test]
    fn a_flow_is_as_wide_as_its_columns() {
        // Empty strings: one length byte each.
        let width: usize = FLOW_COLUMNS
            .iter()
            .map(|(_, t)| match t {
                ColumnType::TimestampMicros | ColumnType::U64 => 8,
                ColumnType::Addr16 => 16,
                ColumnType::U8 => 1,
                ColumnType::U16 => 2,
                ColumnType::U32 => 4,
                ColumnType::Utf8 => 1,
            })
            .sum();
        let mut buf = Vec::new();
        encode_flow(&mut buf, &StoredFlow::default());
        assert_eq!(buf.len(), width);
        let mut f = StoredFlow::default();
        f.src_place.as_name = "Cloudflare, Inc.";
        f.dst_place.country = *b"DE";
        buf.clear();
        encode_flow(&mut buf, &f);
        assert_eq!(buf.len(), width + 16 + 2);
    }

    #[test]
    fn a_counter_sample_is_as_wide_as_its_columns() {
        let width: usize = IF_COUNTERS_COLUMNS
            .iter()
            .map(|(_, t)| match t {
                ColumnType::TimestampMicros | ColumnType::U64 => 8,
                ColumnType::Addr16 => 16,
                ColumnType::U32 => 4,
                _ => panic!("only times, addresses, u32 and u64 among the counter columns"),
            })
            .sum();
        let mut buf = Vec::new();
        encode_if_counters(&mut buf, &InterfaceCounters::default());
        assert_eq!(buf.len(), width);
    }

    #[test]
    fn strings_carry_a_leb128_length() {
        let mut buf = Vec::new();
        string(&mut buf, &"x".repeat(300));
        assert_eq!(&buf[..2], &[0xac, 0x02]);
        assert_eq!(buf.len(), 302);
    }
}
