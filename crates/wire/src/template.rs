//! Templates a collector keeps (RFC 7011 §3.4, RFC 3954 §5.2) and what each field of a data
//! record means to a [`FlowRecord`].
//!
//! A template arrives once and is turned into a list of [`Field`]s, each with the [`Elem`] it
//! sets, so decoding a data record is one pass over the fields with no look-up per field.
//! IPFIX and NetFlow v9 share the field numbers below 128 (v9's `OUT_BYTES`/`OUT_PKTS`, 23/24,
//! are the responder's counters here, as tapflow's and nProbe's v9 exporters mean them);
//! IPFIX reverse elements (PEN 29305, RFC 5103) set the responder's counters, flags and times.
//! Enterprise elements other than those are skipped by their length.

use std::collections::HashMap;

use crate::flowdecode::DecodeError;
use crate::flowrecord::{EndReason, FlowRecord};
use crate::ipfix::REVERSE_PEN;

/// The length of a variable-length field (RFC 7011 §7).
pub(crate) const VARLEN: u16 = 0xffff;

/// What a field sets. Direction-aware elements have a `rev` flag in [`Field`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Elem {
    Skip,
    Octets,
    Packets,
    Proto,
    TcpFlags,
    Sport,
    Dport,
    SrcV4,
    DstV4,
    SrcV6,
    DstV6,
    IcmpTypeCode,
    IcmpType,
    IcmpCode,
    InIf,
    OutIf,
    Vlan,
    EndReason,
    StartSecs,
    EndSecs,
    StartMs,
    EndMs,
    /// `dateTimeMicroseconds`/`dateTimeNanoseconds`: NTP timestamps (RFC 7011 §6.1.9).
    StartNtp,
    EndNtp,
    StartUptime,
    EndUptime,
    StartDeltaUs,
    EndDeltaUs,
    SysInitMs,
    SamplingInterval,
    SamplingPacketInterval,
    SamplingPacketSpace,
    SamplerId,
    IfName,
    IfDesc,
    BiflowDirection,
}

/// One field of a template.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Field {
    pub elem: Elem,
    /// Sets the responder's direction.
    pub rev: bool,
    /// Octets, or [`VARLEN`].
    pub len: u16,
}

/// The meaning of IANA element `id` (IPFIX) or field type `id` (v9, `v9` set): (element,
/// responder's direction).
pub(crate) fn elem(id: u16, v9: bool) -> (Elem, bool) {
    use Elem::*;
    let e = match id {
        1 | 85 => Octets,
        2 | 86 => Packets,
        4 => Proto,
        6 => TcpFlags,
        7 => Sport,
        8 => SrcV4,
        10 => InIf,
        11 => Dport,
        12 => DstV4,
        14 => OutIf,
        21 => EndUptime,
        22 => StartUptime,
        23 if v9 => return (Octets, true),
        24 if v9 => return (Packets, true),
        27 => SrcV6,
        28 => DstV6,
        32 | 139 => IcmpTypeCode,
        34 | 50 => SamplingInterval,
        48 => SamplerId,
        58 | 243 => Vlan,
        82 => IfName,
        83 => IfDesc,
        136 => EndReason,
        150 => StartSecs,
        151 => EndSecs,
        152 => StartMs,
        153 => EndMs,
        154 | 156 => StartNtp,
        155 | 157 => EndNtp,
        158 => StartDeltaUs,
        159 => EndDeltaUs,
        160 => SysInitMs,
        176 | 178 => IcmpType,
        177 | 179 => IcmpCode,
        231 => Octets,
        232 => return (Octets, true),
        239 => BiflowDirection,
        298 => Packets,
        299 => return (Packets, true),
        305 => SamplingPacketInterval,
        306 => SamplingPacketSpace,
        _ => Skip,
    };
    (e, false)
}

/// The meaning of an IPFIX field specifier with enterprise number `pen` (0: IANA).
pub(crate) fn ipfix_field(id: u16, len: u16, pen: u32) -> Field {
    let (elem, rev) = match pen {
        0 => elem(id, false),
        REVERSE_PEN => match elem(id, false).0 {
            e @ (Elem::Octets
            | Elem::Packets
            | Elem::TcpFlags
            | Elem::StartSecs
            | Elem::EndSecs
            | Elem::StartMs
            | Elem::EndMs
            | Elem::StartNtp
            | Elem::EndNtp
            | Elem::StartUptime
            | Elem::EndUptime
            | Elem::StartDeltaUs
            | Elem::EndDeltaUs) => (e, true),
            _ => (Elem::Skip, false),
        },
        _ => (Elem::Skip, false),
    };
    Field { elem, rev, len }
}

/// A template or options template as the exporter announced it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Template {
    pub fields: Box<[Field]>,
    /// An options template: its records describe the exporter, not flows.
    pub options: bool,
    /// The shortest record (variable-length fields count their 1-octet length).
    pub min_len: usize,
}

impl Template {
    /// A template of `fields`, or why not: records of no octets would never end a set.
    pub(crate) fn new(
        fields: Box<[Field]>,
        options: bool,
        id: u16,
        at: usize,
    ) -> Result<Template, DecodeError> {
        let min_len = fields
            .iter()
            .map(|f| {
                if f.len == VARLEN {
                    1
                } else {
                    usize::from(f.len)
                }
            })
            .sum();
        if min_len == 0 {
            return Err(DecodeError::BadTemplate {
                id,
                at,
                why: "its records have no octets",
            });
        }
        Ok(Template {
            fields,
            options,
            min_len,
        })
    }
}

/// The templates of one exporter and domain, within the decoder's limits.
#[derive(Debug, Default)]
pub(crate) struct Templates {
    map: HashMap<u16, Template>,
}

/// The decoder-wide template limits and count.
#[derive(Debug)]
pub(crate) struct Budget {
    pub per_exporter: usize,
    pub total: usize,
    pub held: usize,
    pub max_fields: usize,
    /// Where a template's fields are read before they are compared or kept.
    pub scratch: Vec<Field>,
}

impl Templates {
    /// The template `id`.
    #[inline]
    pub(crate) fn get(&self, id: u16) -> Option<&Template> {
        self.map.get(&id)
    }

    /// Adds or replaces template `id` of `fields`, unless it is malformed or a limit forbids a
    /// new one. A refresh that changes nothing allocates nothing.
    pub(crate) fn insert(
        &mut self,
        id: u16,
        options: bool,
        fields: &[Field],
        at: usize,
        budget: &mut Budget,
    ) -> Result<(), DecodeError> {
        if let Some(old) = self.map.get_mut(&id) {
            if old.options != options || *old.fields != *fields {
                *old = Template::new(fields.into(), options, id, at)?;
            }
            return Ok(());
        }
        if self.map.len() >= budget.per_exporter {
            return Err(DecodeError::TooManyTemplates {
                id,
                limit: budget.per_exporter,
            });
        }
        if budget.held >= budget.total {
            return Err(DecodeError::TooManyTemplates {
                id,
                limit: budget.total,
            });
        }
        let t = Template::new(fields.into(), options, id, at)?;
        budget.held += 1;
        self.map.insert(id, t);
        Ok(())
    }

    /// Withdraws template `id` (IPFIX); whether it was there.
    pub(crate) fn withdraw(&mut self, id: u16, budget: &mut Budget) -> bool {
        let had = self.map.remove(&id).is_some();
        budget.held -= usize::from(had);
        had
    }

    /// Withdraws all data templates, or all options templates (IPFIX "withdraw all").
    pub(crate) fn withdraw_all(&mut self, options: bool, budget: &mut Budget) {
        let before = self.map.len();
        self.map.retain(|_, t| t.options != options);
        budget.held -= before - self.map.len();
    }

    /// Every template, by id (to save them between runs).
    pub(crate) fn iter(&self) -> impl Iterator<Item = (u16, &Template)> {
        self.map.iter().map(|(&id, t)| (id, t))
    }

    /// Forgets every template.
    pub(crate) fn clear(&mut self, budget: &mut Budget) {
        budget.held -= self.map.len();
        self.map.clear();
    }
}

/// An unsigned integer of 0 to 8 octets, big-endian (reduced-size encoding, RFC 7011 §6.2);
/// a longer field gives its last 8 octets.
#[inline]
pub(crate) fn uint(b: &[u8]) -> u64 {
    match *b {
        [a] => u64::from(a),
        [a, b] => u64::from(u16::from_be_bytes([a, b])),
        [a, b, c, d] => u64::from(u32::from_be_bytes([a, b, c, d])),
        _ => {
            if let Ok(a) = <[u8; 8]>::try_from(b) {
                return u64::from_be_bytes(a);
            }
            let b = &b[b.len().saturating_sub(8)..];
            b.iter().fold(0, |v, &x| v << 8 | u64::from(x))
        }
    }
}

/// A time as a field gave it, before the header's clock turns it into ns since 1970.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) enum Time {
    #[default]
    None,
    Ns(u64),
    /// Milliseconds of the exporter's uptime (sysUpTime).
    Uptime(u32),
    /// Microseconds before the export time.
    DeltaUs(u64),
}

/// Seconds from 1900 (NTP) to 1970.
const NTP_UNIX_OFFSET: u64 = 2_208_988_800;

/// The clock of one message, to place record times.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Clock {
    /// Export time, ns since 1970.
    pub export_ns: u64,
    /// NetFlow v9: the header's sysUptime in ms (uptime times count back from export time).
    pub sys_uptime_ms: Option<u32>,
    /// IPFIX: the exporter's `systemInitTimeMilliseconds` (ms since 1970), 0 if unknown.
    pub init_ms: u64,
}

impl Clock {
    #[inline]
    fn resolve(&self, t: Time, init_ms: u64) -> Option<u64> {
        Some(match t {
            Time::None => return None,
            Time::Ns(ns) => ns,
            Time::Uptime(ms) => match self.sys_uptime_ms {
                // v9: the flow was `sysUptime - ms` (modulo 2^32) before the export time.
                Some(up) => self
                    .export_ns
                    .saturating_sub(u64::from(up.wrapping_sub(ms)) * 1_000_000),
                None if init_ms > 0 => init_ms
                    .saturating_add(u64::from(ms))
                    .saturating_mul(1_000_000),
                None => self.export_ns,
            },
            Time::DeltaUs(us) => self.export_ns.saturating_sub(us.saturating_mul(1000)),
        })
    }
}

/// The sampling an options record announced.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) struct Sampling {
    /// `samplerId` (IE 48), if the record named one.
    pub sampler: Option<u64>,
    /// The interval (1 in N), 0 if the record gave none.
    pub interval: u32,
}

/// What one data record said, as it is read field by field.
#[derive(Debug, Default)]
pub(crate) struct Acc<'a> {
    pub flow: FlowRecord,
    pub egress: u32,
    has_v4: bool,
    has_v6: bool,
    src4: [u8; 4],
    dst4: [u8; 4],
    src6: [u8; 16],
    dst6: [u8; 16],
    icmp: u16,
    icmp_type: Option<u8>,
    icmp_code: u8,
    end_reason: u8,
    /// [direction][start, end].
    times: [[Time; 2]; 2],
    init_ms: u64,
    interval: u32,
    packet_interval: u32,
    packet_space: u32,
    pub sampler: Option<u64>,
    biflow_direction: u8,
    /// The interface an options record describes: its ingress, else egress interface.
    pub if_index: Option<u32>,
    pub if_name: Option<&'a [u8]>,
    pub if_desc: Option<&'a [u8]>,
}

impl<'a> Acc<'a> {
    #[inline]
    fn set(&mut self, f: Field, v: &'a [u8]) {
        let d = usize::from(f.rev);
        let c = if f.rev {
            &mut self.flow.rev
        } else {
            &mut self.flow.fwd
        };
        match f.elem {
            Elem::Skip => {}
            Elem::Octets => c.octets = uint(v),
            Elem::Packets => c.packets = uint(v),
            Elem::TcpFlags => c.tcp_flags = uint(v) as u16,
            Elem::Proto => self.flow.proto = uint(v) as u8,
            Elem::Sport => self.flow.sport = uint(v) as u16,
            Elem::Dport => self.flow.dport = uint(v) as u16,
            Elem::SrcV4 => {
                if let Ok(a) = v.try_into() {
                    self.src4 = a;
                    self.has_v4 = true;
                }
            }
            Elem::DstV4 => {
                if let Ok(a) = v.try_into() {
                    self.dst4 = a;
                }
            }
            Elem::SrcV6 => {
                if let Ok(a) = v.try_into() {
                    self.src6 = a;
                    self.has_v6 = true;
                }
            }
            Elem::DstV6 => {
                if let Ok(a) = v.try_into() {
                    self.dst6 = a;
                }
            }
            Elem::IcmpTypeCode => self.icmp = uint(v) as u16,
            Elem::IcmpType => self.icmp_type = Some(uint(v) as u8),
            Elem::IcmpCode => self.icmp_code = uint(v) as u8,
            Elem::InIf => {
                self.flow.interface = uint(v) as u32;
                self.if_index = Some(self.flow.interface);
            }
            Elem::OutIf => {
                self.egress = uint(v) as u32;
                self.if_index = self.if_index.or(Some(self.egress));
            }
            Elem::Vlan => {
                let vlan = uint(v) as u16 & 0x0fff;
                if vlan != 0 {
                    self.flow.vlan = vlan;
                }
            }
            Elem::EndReason => self.end_reason = uint(v) as u8,
            Elem::StartSecs => self.times[d][0] = Time::Ns(uint(v).saturating_mul(1_000_000_000)),
            Elem::EndSecs => self.times[d][1] = Time::Ns(uint(v).saturating_mul(1_000_000_000)),
            Elem::StartMs => self.times[d][0] = Time::Ns(uint(v).saturating_mul(1_000_000)),
            Elem::EndMs => self.times[d][1] = Time::Ns(uint(v).saturating_mul(1_000_000)),
            Elem::StartNtp => self.times[d][0] = ntp(v),
            Elem::EndNtp => self.times[d][1] = ntp(v),
            Elem::StartUptime => self.times[d][0] = Time::Uptime(uint(v) as u32),
            Elem::EndUptime => self.times[d][1] = Time::Uptime(uint(v) as u32),
            Elem::StartDeltaUs => self.times[d][0] = Time::DeltaUs(uint(v)),
            Elem::EndDeltaUs => self.times[d][1] = Time::DeltaUs(uint(v)),
            Elem::SysInitMs => self.init_ms = uint(v),
            Elem::SamplingInterval => self.interval = uint(v).min(u64::from(u32::MAX)) as u32,
            Elem::SamplingPacketInterval => self.packet_interval = uint(v) as u32,
            Elem::SamplingPacketSpace => self.packet_space = uint(v) as u32,
            Elem::SamplerId => self.sampler = Some(uint(v)),
            Elem::IfName => self.if_name = Some(v),
            Elem::IfDesc => self.if_desc = Some(v),
            Elem::BiflowDirection => self.biflow_direction = uint(v) as u8,
        }
    }

    /// The record's own sampling interval (IE 34/50, or 305/306), 0 if it gave none.
    pub(crate) fn interval(&self) -> u32 {
        if self.interval > 0 {
            self.interval
        } else if self.packet_interval > 0 {
            let n = u64::from(self.packet_interval) + u64::from(self.packet_space);
            (n / u64::from(self.packet_interval)).min(u64::from(u32::MAX)) as u32
        } else {
            0
        }
    }

    /// What an options record announced: its `systemInitTimeMilliseconds` (0 if none) and its
    /// sampling.
    pub(crate) fn options(&self) -> (u64, Sampling) {
        (
            self.init_ms,
            Sampling {
                sampler: self.sampler,
                interval: self.interval(),
            },
        )
    }

    /// The flow record, times placed by `clock`, counters scaled by `sampling` (≥ 1).
    pub(crate) fn finish(mut self, clock: &Clock, sampling: u32) -> FlowRecord {
        let init_ms = if self.init_ms > 0 {
            self.init_ms
        } else {
            clock.init_ms
        };
        let mut r = self.flow;
        // Addresses: the family the record carries (both, if its template has both: the one
        // with a source address).
        r.ipv6 = self.has_v6 && (!self.has_v4 || (self.src4 == [0; 4] && self.src6 != [0; 16]));
        if r.ipv6 {
            r.src = self.src6;
            r.dst = self.dst6;
        } else {
            r.src = [0; 16];
            r.dst = [0; 16];
            r.src[..4].copy_from_slice(&self.src4);
            r.dst[..4].copy_from_slice(&self.dst4);
        }
        if r.is_icmp() {
            let tc = match (self.icmp, self.icmp_type) {
                (0, Some(t)) => u16::from(t) << 8 | u16::from(self.icmp_code),
                (0, None) if r.dport == 0 => r.sport,
                (0, None) => r.dport,
                (tc, _) => tc,
            };
            r.sport = 0;
            r.dport = tc;
        }
        r.end_reason = EndReason::from_u8(self.end_reason).unwrap_or_default();
        if self.biflow_direction == 2 {
            // reverseInitiator: the reverse direction started the flow (RFC 5103 §6.3).
            std::mem::swap(&mut r.src, &mut r.dst);
            std::mem::swap(&mut r.sport, &mut r.dport);
            std::mem::swap(&mut r.fwd, &mut r.rev);
            self.times.swap(0, 1);
            if r.is_icmp() {
                r.sport = 0;
            }
        }
        // Times: each direction's own; a direction without them takes the other's (v9 and
        // uniflow exporters time the record, not the direction); none at all: export time.
        let mut t = [[None; 2]; 2];
        for (d, dir) in self.times.iter().enumerate() {
            for (i, &x) in dir.iter().enumerate() {
                t[d][i] = clock.resolve(x, init_ms);
            }
            t[d] = match t[d] {
                [None, None] => [None, None],
                [Some(a), None] => [Some(a), Some(a)],
                [None, Some(b)] => [Some(b), Some(b)],
                both => both,
            };
        }
        let any = t[0][0].or(t[1][0]).unwrap_or(clock.export_ns);
        let any_end = t[0][1].or(t[1][1]).unwrap_or(any);
        for (c, d) in [(&mut r.fwd, 0), (&mut r.rev, 1)] {
            c.first_ns = t[d][0].unwrap_or(any);
            c.last_ns = t[d][1].unwrap_or(any_end).max(c.first_ns);
        }
        if r.rev.packets == 0 && r.rev.octets == 0 {
            r.rev = Default::default();
        }
        if sampling > 1 {
            let s = u64::from(sampling);
            for c in [&mut r.fwd, &mut r.rev] {
                c.packets = c.packets.saturating_mul(s);
                c.octets = c.octets.saturating_mul(s);
            }
        }
        r
    }
}

/// An NTP timestamp field (8 octets: seconds since 1900, fraction) as a time.
fn ntp(v: &[u8]) -> Time {
    if v.len() != 8 {
        return Time::None;
    }
    let secs = uint(&v[..4]);
    let frac = uint(&v[4..]);
    Time::Ns(secs.saturating_sub(NTP_UNIX_OFFSET) * 1_000_000_000 + ((frac * 1_000_000_000) >> 32))
}

/// Reads one data record of `t` at the start of `b`: what it says and its length, or `None`
/// if it runs past the end of `b`.
#[inline]
pub(crate) fn read_record<'a>(t: &Template, b: &'a [u8]) -> Option<(Acc<'a>, usize)> {
    let mut acc = Acc::default();
    let mut p = 0;
    for &f in t.fields.iter() {
        let len = if f.len == VARLEN {
            let l0 = *b.get(p)?;
            p += 1;
            if l0 < 255 {
                usize::from(l0)
            } else {
                let l = usize::from(crate::bytes::get_u16(b, p)?);
                p += 2;
                l
            }
        } else {
            usize::from(f.len)
        };
        let v = b.get(p..p.checked_add(len)?)?;
        acc.set(f, v);
        p += len;
    }
    Some((acc, p))
}

/// A NUL-terminated or padded string field as text: up to the first NUL, and up to the first
/// byte that is not UTF-8.
pub(crate) fn text(b: Option<&[u8]>) -> &str {
    let b = b.unwrap_or_default();
    let b = &b[..b.iter().position(|&c| c == 0).unwrap_or(b.len())];
    match std::str::from_utf8(b) {
        Ok(s) => s,
        Err(e) => std::str::from_utf8(&b[..e.valid_up_to()]).unwrap_or_default(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reduced_size_integers() {
        assert_eq!(uint(&[]), 0);
        assert_eq!(uint(&[1, 2]), 0x0102);
        assert_eq!(uint(&[9, 0, 0, 0, 0, 0, 0, 0, 1]), 1);
        assert_eq!(uint(&[1, 2, 3]), 0x010203);
        assert_eq!(uint(&[0, 0, 0, 0, 0, 0, 1, 2]), 0x0102);
    }

    #[test]
    fn ntp_times() {
        // 2023-11-14T22:13:20.5Z
        let secs = (1_700_000_000 + NTP_UNIX_OFFSET) as u32;
        let mut v = secs.to_be_bytes().to_vec();
        v.extend_from_slice(&0x8000_0000u32.to_be_bytes());
        assert_eq!(ntp(&v), Time::Ns(1_700_000_000_500_000_000));
        assert_eq!(ntp(&v[..7]), Time::None);
    }

    #[test]
    fn hostile_times_saturate() {
        let c = Clock::default();
        assert_eq!(c.resolve(Time::Uptime(5), u64::MAX), Some(u64::MAX));
        assert_eq!(c.resolve(Time::DeltaUs(u64::MAX), 0), Some(0));
        assert_eq!(ntp(&[0xff; 8]), Time::Ns(2_085_978_495_999_999_999));
    }

    #[test]
    fn text_stops_at_nul_and_bad_utf8() {
        assert_eq!(text(Some(b"eth0\0\0")), "eth0");
        assert_eq!(text(Some(b"ab\xffcd")), "ab");
        assert_eq!(text(None), "");
    }

    #[test]
    fn varlen_record_runs_past_its_end() {
        let t = Template::new(
            vec![Field {
                elem: Elem::IfName,
                rev: false,
                len: VARLEN,
            }]
            .into(),
            true,
            256,
            0,
        )
        .unwrap();
        let (a, n) = read_record(&t, &[3, b'a', b'b', b'c', 9]).unwrap();
        assert_eq!((a.if_name, n), (Some(&b"abc"[..]), 4));
        let (a, n) = read_record(&t, &[255, 0, 1, b'x']).unwrap();
        assert_eq!((a.if_name, n), (Some(&b"x"[..]), 4));
        assert!(read_record(&t, &[4, b'a']).is_none());
        assert!(read_record(&t, &[255, 0]).is_none());
    }

    #[test]
    fn zero_length_templates_are_refused() {
        let f = Field {
            elem: Elem::Skip,
            rev: false,
            len: 0,
        };
        assert!(Template::new(vec![f].into(), false, 300, 20).is_err());
    }
}
