//! sFlow version 5 (sflow.org `sflow_version_5.txt`) flow samples, for collection: each
//! sampled packet becomes a one-packet flow scaled by its sampling rate.
//!
//! ```text
//! datagram: version 5 | agent address type (1 IPv4, 2 IPv6) | agent address (4 or 16)
//!           | sub-agent id | datagram sequence | uptime (ms) | sample count | samples...
//! sample:   data format (enterprise << 12 | format) | length | body
//!   flow sample (0:1):     sequence | source id | sampling rate | sample pool | drops
//!                          | input | output | record count | flow records...
//!   expanded flow (0:3):   sequence | source type | source index | sampling rate | pool
//!                          | drops | input format | input | output format | output
//!                          | record count | flow records...
//!   counter sample (0:2):  sequence | source id | record count | counter records...
//!   expanded counters (0:4): sequence | source type | source index | record count | records...
//! flow record: data format | length | body
//!   raw packet header (0:1): header protocol (1 Ethernet, 11 IPv4, 12 IPv6) | frame length
//!                            | stripped | header length | header bytes, padded to 4
//!   sampled IPv4 (0:3):      length | protocol | src | dst | src port | dst port | tcp flags | tos
//!   sampled IPv6 (0:4):      length | protocol | src (16) | dst (16) | src port | dst port
//!                            | tcp flags | priority
//!   extended switch (0:1001): src vlan | src priority | dst vlan | dst priority
//! counter record: data format | length | body
//!   generic interface (0:1): ifIndex | ifType | ifSpeed (64) | ifDirection | ifStatus
//!                            | ifInOctets (64) | ifInUcastPkts | ifInMulticastPkts
//!                            | ifInBroadcastPkts | ifInDiscards | ifInErrors
//!                            | ifInUnknownProtos | ifOutOctets (64) | ifOutUcastPkts
//!                            | ifOutMulticastPkts | ifOutBroadcastPkts | ifOutDiscards
//!                            | ifOutErrors | ifPromiscuousMode
//!   other counter records (Ethernet, VLAN, processor...): skipped
//! ```
//!
//! All integers are 32-bit big-endian (XDR). A raw packet header is parsed with the packet
//! views ([`FlowFields::of_frame`]); its octets are the IP length, as for metered flows. A
//! sample's sequence number counts samples per data source, so a gap is samples lost.

use std::collections::HashMap;

use crate::LinkType;
use crate::bytes::get_u32;
use crate::flowdecode::{DecodeError, Decoded, Emit, Exporter, Gap, Sequence};
use crate::flowkey::FlowFields;
use crate::flowrecord::{Counters, FlowRecord};

/// `version` in the datagram header.
pub const VERSION: u32 = 5;

/// Data sources (sample sequences) one agent may hold.
pub const MAX_SOURCES: usize = 1024;

const FLOW_SAMPLE: u32 = 1;
const COUNTER_SAMPLE: u32 = 2;
const EXPANDED_FLOW_SAMPLE: u32 = 3;
const EXPANDED_COUNTER_SAMPLE: u32 = 4;
const GENERIC_INTERFACE: u32 = 1;
/// Length of a generic interface counters record.
const GENERIC_INTERFACE_LEN: usize = 88;
const RAW_PACKET_HEADER: u32 = 1;
const SAMPLED_IPV4: u32 = 3;
const SAMPLED_IPV6: u32 = 4;
const EXTENDED_SWITCH: u32 = 1001;

/// The header of a datagram being decoded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Header {
    pub sub_agent_id: u32,
    /// Offset of the first sample.
    pub samples_at: usize,
    pub samples: u32,
}

impl Header {
    /// The header of `msg`, after checking the version and the sample framing.
    pub(crate) fn parse(msg: &[u8]) -> Result<Header, DecodeError> {
        let trunc = |at| DecodeError::Truncated {
            what: "sFlow datagram header",
            at,
        };
        let version = get_u32(msg, 0).ok_or(trunc(0))?;
        if version != VERSION {
            return Err(DecodeError::BadVersion {
                protocol: "sFlow",
                expected: VERSION as u16,
                found: version,
            });
        }
        let at = match get_u32(msg, 4).ok_or(trunc(4))? {
            1 => 12,
            2 => 24,
            _ => {
                return Err(DecodeError::BadSample {
                    what: "agent address type",
                    at: 4,
                });
            }
        };
        let sub_agent_id = get_u32(msg, at).ok_or(trunc(at))?;
        let samples = get_u32(msg, at + 12).ok_or(trunc(at + 12))?;
        let h = Header {
            sub_agent_id,
            samples_at: at + 16,
            samples,
        };
        for s in Items::new(msg, h.samples_at, samples) {
            s.map_err(|at| DecodeError::Truncated { what: "sample", at })?;
        }
        Ok(h)
    }
}

/// One tagged item (sample or flow record): (enterprise << 12 | format, body, body offset).
type Item<'a> = (u32, &'a [u8], usize);

/// The `count` tagged items of `b` from `at` on; an item that does not fit ends the walk with
/// its offset as the error.
struct Items<'a> {
    b: &'a [u8],
    at: usize,
    left: u32,
}

impl<'a> Items<'a> {
    fn new(b: &'a [u8], at: usize, count: u32) -> Items<'a> {
        Items { b, at, left: count }
    }
}

impl<'a> Iterator for Items<'a> {
    type Item = Result<Item<'a>, usize>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.left == 0 {
            return None;
        }
        self.left -= 1;
        let at = self.at;
        let item = (|| {
            let format = get_u32(self.b, at)?;
            let len = get_u32(self.b, at + 4)? as usize;
            let body = self.b.get(at + 8..(at + 8).checked_add(len)?)?;
            Some((format, body, at + 8))
        })();
        match item {
            Some(i) => {
                self.at = i.2 + i.1.len();
                Some(Ok(i))
            }
            None => {
                self.left = 0;
                Some(Err(at))
            }
        }
    }
}

/// Decodes the samples of `msg`, whose header `h` was checked, for agent state `ex`;
/// `now_ns` times the flows (sFlow samples carry no time of their own).
pub(crate) fn decode(
    h: &Header,
    msg: &[u8],
    ex: &mut Exporter,
    now_ns: u64,
    emit: &mut Emit<'_, '_>,
) {
    for (format, body, at) in Items::new(msg, h.samples_at, h.samples).flatten() {
        let expanded = match format {
            FLOW_SAMPLE => false,
            EXPANDED_FLOW_SAMPLE => true,
            COUNTER_SAMPLE | EXPANDED_COUNTER_SAMPLE => {
                // A sample that carries no flow, counted as such; its interface counters go out.
                emit.summary.skipped += 1;
                if let Err(e) = counter_sample(body, at, format == EXPANDED_COUNTER_SAMPLE, emit) {
                    emit.summary.refuse(e);
                }
                continue;
            }
            _ => {
                // Other enterprises' samples: no flows.
                emit.summary.skipped += 1;
                continue;
            }
        };
        match flow_sample(body, at, expanded, now_ns) {
            Ok((source, seq, flow)) => {
                source_sequence(&mut ex.sources, source, seq).add_to(emit.summary);
                match flow {
                    Some((r, egress, rate)) => emit.flow(r, egress, rate),
                    None => emit.summary.skipped += 1,
                }
            }
            Err(e) => emit.summary.refuse(e),
        }
    }
}

/// An interface's counters from an sFlow counter sample's generic interface record (0:1),
/// as the agent gave them (totals since it started, not deltas).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct IfCounters {
    /// The sample's data source: type (0 ifIndex, 1 smonVlanDataSource, 2 entPhysicalEntry)
    /// << 24 | index.
    pub source_id: u32,
    /// The sample's sequence number (per data source).
    pub sequence: u32,
    /// `ifIndex`.
    pub if_index: u32,
    /// `ifType` (IANAifType: 6 ethernetCsmacd...).
    pub if_type: u32,
    /// `ifSpeed`, bits per second.
    pub if_speed: u64,
    /// `ifDirection`: 0 unknown, 1 full-duplex, 2 half-duplex, 3 in, 4 out.
    pub if_direction: u32,
    /// `ifStatus`: bit 0 ifAdminStatus up, bit 1 ifOperStatus up.
    pub if_status: u32,
    /// `ifInOctets`.
    pub in_octets: u64,
    /// `ifInUcastPkts`.
    pub in_ucast_pkts: u32,
    /// `ifInMulticastPkts`.
    pub in_multicast_pkts: u32,
    /// `ifInBroadcastPkts`.
    pub in_broadcast_pkts: u32,
    /// `ifInDiscards`.
    pub in_discards: u32,
    /// `ifInErrors`.
    pub in_errors: u32,
    /// `ifInUnknownProtos`.
    pub in_unknown_protos: u32,
    /// `ifOutOctets`.
    pub out_octets: u64,
    /// `ifOutUcastPkts`.
    pub out_ucast_pkts: u32,
    /// `ifOutMulticastPkts`.
    pub out_multicast_pkts: u32,
    /// `ifOutBroadcastPkts`.
    pub out_broadcast_pkts: u32,
    /// `ifOutDiscards`.
    pub out_discards: u32,
    /// `ifOutErrors`.
    pub out_errors: u32,
    /// `ifPromiscuousMode` (1 true, 2 false).
    pub promiscuous_mode: u32,
}

impl IfCounters {
    /// The counters of a generic interface record's body (at least 88 bytes).
    fn parse(b: &[u8], source_id: u32, sequence: u32) -> Option<IfCounters> {
        let w = |at: usize| get_u32(b, at);
        let d = |at: usize| Some(u64::from(w(at)?) << 32 | u64::from(w(at + 4)?));
        Some(IfCounters {
            source_id,
            sequence,
            if_index: w(0)?,
            if_type: w(4)?,
            if_speed: d(8)?,
            if_direction: w(16)?,
            if_status: w(20)?,
            in_octets: d(24)?,
            in_ucast_pkts: w(32)?,
            in_multicast_pkts: w(36)?,
            in_broadcast_pkts: w(40)?,
            in_discards: w(44)?,
            in_errors: w(48)?,
            in_unknown_protos: w(52)?,
            out_octets: d(56)?,
            out_ucast_pkts: w(64)?,
            out_multicast_pkts: w(68)?,
            out_broadcast_pkts: w(72)?,
            out_discards: w(76)?,
            out_errors: w(80)?,
            promiscuous_mode: w(84)?,
        })
    }
}

/// Emits the generic interface counters of a counter sample (other records are skipped).
fn counter_sample(
    b: &[u8],
    at: usize,
    expanded: bool,
    emit: &mut Emit<'_, '_>,
) -> Result<(), DecodeError> {
    let bad = |what, at| DecodeError::BadSample { what, at };
    let word = |i: usize| get_u32(b, 4 * i).ok_or(bad("counter sample", at));
    let seq = word(0)?;
    let (source, count, first) = if expanded {
        (word(1)? << 24 | (word(2)? & 0x00ff_ffff), word(3)?, 4)
    } else {
        (word(1)?, word(2)?, 3)
    };
    for rec in Items::new(b, 4 * first, count) {
        let (format, body, rat) = rec.map_err(|r| bad("counter record", at + r))?;
        if format != GENERIC_INTERFACE {
            continue;
        }
        let c = body
            .get(..GENERIC_INTERFACE_LEN)
            .and_then(|b| IfCounters::parse(b, source, seq))
            .ok_or(bad("generic interface counters", at + rat))?;
        (emit.out)(Decoded::Counters {
            domain: emit.summary.domain,
            counters: c,
        });
    }
    Ok(())
}

/// The samples lost on data source `source` before sample `seq`.
fn source_sequence(sources: &mut HashMap<u32, Sequence>, source: u32, seq: u32) -> Gap {
    let n = sources.len();
    match sources.get_mut(&source) {
        Some(s) => s.observe(seq, 1, 0),
        None if n < MAX_SOURCES => sources.entry(source).or_default().observe(seq, 1, 0),
        None => Gap::default(),
    }
}

/// A flow sample's data source, sequence number and flow (`None` if it sampled no IP packet):
/// (flow, egress interface, sampling rate).
#[allow(clippy::type_complexity)]
fn flow_sample(
    b: &[u8],
    at: usize,
    expanded: bool,
    now_ns: u64,
) -> Result<(u32, u32, Option<(FlowRecord, u32, u32)>), DecodeError> {
    let word = |i: usize| {
        get_u32(b, 4 * i).ok_or(DecodeError::BadSample {
            what: "flow sample",
            at,
        })
    };
    let seq = word(0)?;
    // (source, rate, input, output, record count, first record's word)
    let (source, rate, input, output, count, first) = if expanded {
        let source = word(1)? << 24 | (word(2)? & 0x00ff_ffff);
        let input = if word(6)? == 0 { word(7)? } else { 0 };
        let output = if word(8)? == 0 { word(9)? } else { 0 };
        (source, word(3)?, input, output, word(10)?, 11)
    } else {
        // Compact interfaces: the top 2 bits are the format, 0 for an ifIndex.
        let iface = |v: u32| if v >> 30 == 0 { v } else { 0 };
        (
            word(1)?,
            word(2)?,
            iface(word(5)?),
            iface(word(6)?),
            word(7)?,
            8,
        )
    };
    let rate = rate.max(1);
    let mut fields: Option<FlowFields> = None;
    let mut vlan = 0u16;
    for rec in Items::new(b, 4 * first, count) {
        let (format, body, rat) = rec.map_err(|r| DecodeError::BadSample {
            what: "flow record",
            at: at + r,
        })?;
        let w = |i: usize| get_u32(body, 4 * i);
        match format {
            RAW_PACKET_HEADER if fields.is_none() => {
                let (Some(proto), Some(frame_len), Some(hlen)) = (w(0), w(1), w(3)) else {
                    return Err(DecodeError::BadSample {
                        what: "raw packet header",
                        at: at + rat,
                    });
                };
                let Some(header) = body.get(16..16 + hlen as usize) else {
                    return Err(DecodeError::BadSample {
                        what: "raw packet header",
                        at: at + rat,
                    });
                };
                let linktype = match proto {
                    1 => LinkType::Ethernet,
                    11 => LinkType::Ipv4,
                    12 => LinkType::Ipv6,
                    _ => continue,
                };
                fields = FlowFields::of_frame(linktype, header, frame_len);
            }
            SAMPLED_IPV4 | SAMPLED_IPV6 if fields.is_none() => {
                let v6 = format == SAMPLED_IPV6;
                let alen = if v6 { 16 } else { 4 };
                let bad = DecodeError::BadSample {
                    what: "sampled IP record",
                    at: at + rat,
                };
                let (Some(len), Some(proto)) = (w(0), w(1)) else {
                    return Err(bad);
                };
                let (Some(src), Some(dst)) =
                    (body.get(8..8 + alen), body.get(8 + alen..8 + 2 * alen))
                else {
                    return Err(bad);
                };
                let p = 8 + 2 * alen;
                let (Some(sport), Some(dport), Some(flags)) =
                    (get_u32(body, p), get_u32(body, p + 4), get_u32(body, p + 8))
                else {
                    return Err(bad);
                };
                let mut f = FlowFields {
                    ipv6: v6,
                    proto: proto as u8,
                    sport: sport as u16,
                    dport: dport as u16,
                    octets: len,
                    tcp_flags: flags as u16,
                    ..FlowFields::default()
                };
                f.src[..alen].copy_from_slice(src);
                f.dst[..alen].copy_from_slice(dst);
                fields = Some(f);
            }
            EXTENDED_SWITCH => vlan = w(0).unwrap_or(0) as u16 & 0x0fff,
            _ => {}
        }
    }
    let Some(f) = fields else {
        return Ok((source, seq, None));
    };
    let r = FlowRecord {
        ipv6: f.ipv6,
        proto: f.proto,
        src: f.src,
        dst: f.dst,
        sport: f.sport,
        dport: f.dport,
        vlan: if f.vlan != 0 { f.vlan } else { vlan },
        interface: input,
        fwd: Counters {
            packets: u64::from(rate),
            octets: u64::from(f.octets) * u64::from(rate),
            tcp_flags: f.tcp_flags,
            first_ns: now_ns,
            last_ns: now_ns,
        },
        ..FlowRecord::default()
    };
    Ok((source, seq, Some((r, output, rate))))
}

#[cfg(test)]
mod tests {
    use crate::flowdecode::{Decoded, DecodedFlow, Decoder, Limits, MessageSummary, Protocol};

    const NOW: u64 = 1_800_000_000_000_000_000;

    fn words(v: &[u32]) -> Vec<u8> {
        v.iter().flat_map(|x| x.to_be_bytes()).collect()
    }

    /// A tagged item: format, length, body.
    fn item(format: u32, body: &[u8]) -> Vec<u8> {
        let mut b = words(&[format, body.len() as u32]);
        b.extend_from_slice(body);
        b
    }

    /// Ethernet, IPv4 (total length 1500), TCP 10.0.0.1:40000 → 10.0.0.2:443 with SYN|ACK,
    /// cut to 54 bytes: an sFlow raw packet header record, frame length 1518, 4 stripped.
    fn raw_header() -> Vec<u8> {
        let mut h = vec![0; 12];
        h.extend_from_slice(&[0x08, 0x00]);
        h.extend_from_slice(&[0x45, 0, 0x05, 0xdc, 0, 0, 0x40, 0, 64, 6, 0, 0]);
        h.extend_from_slice(&[10, 0, 0, 1, 10, 0, 0, 2]);
        h.extend_from_slice(&[0x9c, 0x40, 0x01, 0xbb, 0, 0, 0, 0, 0, 0, 0, 0, 0x50, 0x12]);
        h.extend_from_slice(&[0; 6]);
        let mut b = words(&[1, 1518, 4, h.len() as u32]);
        b.extend_from_slice(&h);
        b.extend_from_slice(&[0, 0]); // padded to 4
        b
    }

    /// A datagram from agent 192.0.2.1, sub-agent 3, with `samples`.
    fn datagram(samples: &[Vec<u8>]) -> Vec<u8> {
        let mut d = words(&[5, 1, 0xc000_0201, 3, 77, 1000, samples.len() as u32]);
        for s in samples {
            d.extend_from_slice(s);
        }
        d
    }

    fn decode(d: &mut Decoder, msg: &[u8]) -> (Vec<DecodedFlow>, MessageSummary) {
        let mut flows = Vec::new();
        let s = d
            .decode(Protocol::Sflow5, [0; 16], msg, NOW, &mut |x| {
                if let Decoded::Flow(f) = x {
                    flows.push(f);
                }
            })
            .unwrap();
        (flows, s)
    }

    #[test]
    fn flow_samples_become_scaled_one_packet_flows() {
        // Expanded sample 9 of source 0:5, 1 in 256, in ifIndex 7, out ifIndex 8, with a
        // raw header and extended switch data (VLAN 42).
        let mut expanded = words(&[9, 0, 5, 256, 10_000, 0, 0, 7, 0, 8, 2]);
        expanded.extend_from_slice(&item(1, &raw_header()));
        expanded.extend_from_slice(&item(1001, &words(&[42, 0, 42, 0])));
        // Compact sample 4 of source 0:6, 1 in 100, with a sampled IPv4 record (UDP, 80 bytes).
        let mut compact = words(&[4, 6, 100, 400, 0, 3, 0x4000_0002, 1]);
        compact.extend_from_slice(&item(
            3,
            &words(&[80, 17, 0x0a00_0003, 0x0a00_0004, 53, 5353, 0, 0]),
        ));
        let counters = item(2, &words(&[1, 5, 0]));
        let msg = datagram(&[item(3, &expanded), item(1, &compact), counters]);
        let mut d = Decoder::new(Limits::default());
        let (flows, s) = decode(&mut d, &msg);
        assert_eq!((s.records, s.skipped, s.malformed, s.domain), (2, 1, 0, 3));
        let (a, b) = (flows[0], flows[1]);
        assert_eq!((a.sampling, a.egress, a.domain), (256, 8, 3));
        let r = a.flow;
        assert_eq!(r.src_addr().to_string(), "10.0.0.1");
        assert_eq!(
            (r.proto, r.sport, r.dport, r.vlan, r.interface),
            (6, 40000, 443, 42, 7)
        );
        assert_eq!(
            (r.fwd.packets, r.fwd.octets, r.fwd.tcp_flags),
            (256, 1500 * 256, 0x12)
        );
        assert_eq!((r.fwd.first_ns, r.fwd.last_ns), (NOW, NOW));
        assert_eq!((b.sampling, b.egress, b.flow.interface), (100, 0, 3));
        assert_eq!((b.flow.proto, b.flow.sport, b.flow.dport), (17, 53, 5353));
        assert_eq!((b.flow.fwd.packets, b.flow.fwd.octets), (100, 8000));

        // Next datagram: source 0:5 skips samples 10 and 11.
        let mut next = words(&[12, 0, 5, 256, 10_000, 0, 0, 7, 0, 8, 1]);
        next.extend_from_slice(&item(1, &raw_header()));
        let (_, s) = decode(&mut d, &datagram(&[item(3, &next)]));
        assert_eq!(s.sequence_lost, 2);
    }

    #[test]
    fn counter_samples_give_interface_counters_and_a_short_record_is_refused() {
        let mut generic: Vec<u32> = (1..=22).collect();
        generic[2] = 1; // ifSpeed high word: 2^32 + 4
        let mut flat = words(&[7, 3, 2]);
        flat.extend_from_slice(&item(2, &words(&[0; 13]))); // Ethernet counters: skipped
        flat.extend_from_slice(&item(1, &words(&generic)));
        let mut expanded = words(&[8, 0, 3, 1]);
        expanded.extend_from_slice(&item(1, &words(&generic[..21]))); // 84 bytes: too short
        let msg = datagram(&[item(2, &flat), item(4, &expanded)]);
        let mut d = Decoder::new(Limits::default());
        let mut got = Vec::new();
        let s = d
            .decode(Protocol::Sflow5, [0; 16], &msg, NOW, &mut |x| {
                if let Decoded::Counters { domain, counters } = x {
                    got.push((domain, counters));
                }
            })
            .unwrap();
        assert_eq!((s.records, s.skipped, s.malformed), (0, 2, 1));
        assert_eq!(s.refused.map(|e| e.reason()), Some("bad_sample"));
        let (domain, c) = got[0];
        assert_eq!(got.len(), 1);
        assert_eq!((domain, c.source_id, c.sequence, c.if_index), (3, 3, 7, 1));
        assert_eq!(
            (c.if_speed, c.if_status, c.in_octets),
            ((1 << 32) | 4, 6, 7 << 32 | 8)
        );
        assert_eq!(
            (c.in_errors, c.out_octets, c.promiscuous_mode),
            (13, 15 << 32 | 16, 22)
        );
    }

    #[test]
    fn malformed_samples_are_skipped_and_bad_framing_refused() {
        // A flow sample whose record count promises more than it holds.
        let bad = item(1, &words(&[1, 6, 100, 400, 0, 3, 2, 5]));
        let mut d = Decoder::new(Limits::default());
        let (flows, s) = decode(&mut d, &datagram(&[bad]));
        assert!(flows.is_empty());
        assert_eq!(s.refused.map(|e| e.reason()), Some("bad_sample"));
        let mut short = datagram(&[item(2, &[0; 8])]);
        short.truncate(short.len() - 1);
        let e = d
            .decode(Protocol::Sflow5, [0; 16], &short, NOW, &mut |_| {})
            .unwrap_err();
        assert_eq!(e.to_string(), "sample truncated at offset 28");
        let e = d
            .decode(Protocol::Sflow5, [0; 16], &words(&[4]), NOW, &mut |_| {})
            .unwrap_err();
        assert_eq!(e.to_string(), "version 4 where sFlow has 5");
    }
}
