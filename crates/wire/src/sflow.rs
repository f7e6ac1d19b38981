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
//!   counters (0:2, 0:4):   counted and skipped
//! flow record: data format | length | body
//!   raw packet header (0:1): header protocol (1 Ethernet, 11 IPv4, 12 IPv6) | frame length
//!                            | stripped | header length | header bytes, padded to 4
//!   sampled IPv4 (0:3):      length | protocol | src | dst | src port | dst port | tcp flags | tos
//!   sampled IPv6 (0:4):      length | protocol | src (16) | dst (16) | src port | dst port
//!                            | tcp flags | priority
//!   extended switch (0:1001): src vlan | src priority | dst vlan | dst priority
//! ```
//!
//! All integers are 32-bit big-endian (XDR). A raw packet header is parsed with the packet
//! views ([`FlowFields::of_frame`]); its octets are the IP length, as for metered flows. A
//! sample's sequence number counts samples per data source, so a gap is samples lost.

use std::collections::HashMap;

use crate::LinkType;
use crate::bytes::get_u32;
use crate::flowdecode::{DecodeError, Emit, Exporter, Sequence};
use crate::flowkey::FlowFields;
use crate::flowrecord::{Counters, FlowRecord};

/// `version` in the datagram header.
pub const VERSION: u32 = 5;

/// Data sources (sample sequences) one agent may hold.
pub const MAX_SOURCES: usize = 1024;

const FLOW_SAMPLE: u32 = 1;
const EXPANDED_FLOW_SAMPLE: u32 = 3;
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
            _ => {
                // Counter samples and other enterprises' samples: no flows.
                emit.summary.skipped += 1;
                continue;
            }
        };
        match flow_sample(body, at, expanded, now_ns) {
            Ok((source, seq, flow)) => {
                emit.summary.sequence_lost = emit
                    .summary
                    .sequence_lost
                    .saturating_add(source_sequence(&mut ex.sources, source, seq));
                match flow {
                    Some((r, egress, rate)) => emit.flow(r, egress, rate),
                    None => emit.summary.skipped += 1,
                }
            }
            Err(e) => emit.summary.refuse(e),
        }
    }
}

/// The samples lost on data source `source` before sample `seq`.
fn source_sequence(sources: &mut HashMap<u32, Sequence>, source: u32, seq: u32) -> u64 {
    let n = sources.len();
    match sources.get_mut(&source) {
        Some(s) => s.observe(seq, 1, 0),
        None if n < MAX_SOURCES => sources.entry(source).or_default().observe(seq, 1, 0),
        None => 0,
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
