//! The decoder's state as a collector keeps it between runs: each exporter's templates and
//! options templates, and what its options records said (`systemInitTimeMilliseconds`, the
//! sampling intervals), so a restarted collector decodes data records at once instead of
//! withholding them until the exporter resends its templates.
//!
//! Only IPFIX and NetFlow v9 over UDP have such state worth keeping (NetFlow v5 and sFlow carry
//! everything in each message; over TCP the exporter sends its templates on every connection).
//! Sequence numbers are not kept: the count starts again with the first message after the
//! restart. A restored state goes through the same limits as one learnt from the wire, and the
//! exporter's next template replaces the restored one as any refresh does.

use super::{DecodeError, Decoder, Protocol};
use crate::template::{Elem, Field};

/// One exporter and domain's state, saved.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SavedExporter {
    /// The exporter's address (IPv4 IPv4-mapped).
    pub address: [u8; 16],
    /// The protocol it speaks.
    pub protocol: Protocol,
    /// The observation domain (IPFIX) or source id (v9).
    pub domain: u32,
    /// When its last message arrived, ns since 1970: its templates stood as saved then.
    pub heard_ns: u64,
    /// `systemInitTimeMilliseconds` from an options record, 0 if none came.
    pub init_ms: u64,
    /// The last sampling interval an options record gave, 0 if none.
    pub sampling: u32,
    /// Sampler id → interval, from options records.
    pub samplers: Vec<(u64, u32)>,
    /// Its templates and options templates.
    pub templates: Vec<SavedTemplate>,
}

/// One template, saved.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SavedTemplate {
    /// The template id.
    pub id: u16,
    /// An options template.
    pub options: bool,
    /// Its fields, in record order.
    pub fields: Vec<SavedField>,
}

/// One field of a template, as the decoder reads it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SavedField {
    /// What the field sets (a stable name, see [`SavedField::elem`]).
    pub elem: String,
    /// It sets the responder's direction.
    pub reverse: bool,
    /// Octets, or 65535 for a variable-length field.
    pub len: u16,
}

/// What a restore took and refused.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Restored {
    /// Exporter and domain states restored.
    pub exporters: usize,
    /// Templates restored.
    pub templates: usize,
    /// States older than the age given, left out.
    pub stale: usize,
    /// States or templates refused (a limit, an unknown field, a malformed template).
    pub refused: usize,
    /// Why the first of them was refused.
    pub first_refusal: Option<String>,
}

macro_rules! elem_names {
    ($($e:ident),* $(,)?) => {
        /// Every element, to read names back.
        const ELEMS: &[Elem] = &[$(Elem::$e),*];

        /// The name an element is saved under (an exhaustive match: a new element needs one).
        const fn elem_name(e: Elem) -> &'static str {
            match e {
                $(Elem::$e => stringify!($e)),*
            }
        }
    };
}

elem_names!(
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
);

impl SavedField {
    fn from_field(f: &Field) -> SavedField {
        SavedField {
            elem: elem_name(f.elem).to_string(),
            reverse: f.rev,
            len: f.len,
        }
    }

    /// The field, if its element's name is known.
    fn to_field(&self) -> Option<Field> {
        let elem = *ELEMS.iter().find(|e| elem_name(**e) == self.elem)?;
        Some(Field {
            elem,
            rev: self.reverse,
            len: self.len,
        })
    }
}

impl Restored {
    fn refuse(&mut self, why: impl FnOnce() -> String) {
        self.refused += 1;
        if self.first_refusal.is_none() {
            self.first_refusal = Some(why());
        }
    }
}

impl Decoder {
    /// The state of every IPFIX and NetFlow v9 exporter that holds a template.
    pub fn save(&self) -> Vec<SavedExporter> {
        let mut out: Vec<SavedExporter> = self
            .exporters
            .iter()
            .filter(|(k, _)| matches!(k.1, Protocol::Ipfix | Protocol::NetflowV9))
            .filter(|(_, ex)| ex.templates.iter().next().is_some())
            .map(|(&(address, protocol, domain), ex)| {
                let mut templates: Vec<SavedTemplate> = ex
                    .templates
                    .iter()
                    .map(|(id, t)| SavedTemplate {
                        id,
                        options: t.options,
                        fields: t.fields.iter().map(SavedField::from_field).collect(),
                    })
                    .collect();
                templates.sort_by_key(|t| t.id);
                SavedExporter {
                    address,
                    protocol,
                    domain,
                    heard_ns: ex.last_ns,
                    init_ms: ex.init_ms,
                    sampling: ex.sampling,
                    samplers: ex.samplers.clone(),
                    templates,
                }
            })
            .collect();
        out.sort_by_key(|e| (e.address, e.protocol.name(), e.domain));
        out
    }

    /// Takes saved states heard from less than `max_age_ns` before `now_ns`, within the
    /// decoder's limits (exporters, states per address, templates per exporter and in all,
    /// fields per template). A state the decoder already holds keeps what it learnt itself.
    pub fn restore(&mut self, saved: &[SavedExporter], now_ns: u64, max_age_ns: u64) -> Restored {
        let mut r = Restored::default();
        for s in saved {
            if !matches!(s.protocol, Protocol::Ipfix | Protocol::NetflowV9) {
                r.refuse(|| format!("{} has no templates to restore", s.protocol.name()));
                continue;
            }
            if now_ns.saturating_sub(s.heard_ns) >= max_age_ns || s.heard_ns > now_ns {
                r.stale += 1;
                continue;
            }
            let key = (s.address, s.protocol, s.domain);
            if self.exporters.contains_key(&key) {
                continue;
            }
            let max_fields = self.limits.max_fields;
            let (ex, budget) = match self.exporter(key, s.heard_ns) {
                Ok(x) => x,
                Err(e) => {
                    r.refuse(|| e.to_string());
                    continue;
                }
            };
            r.exporters += 1;
            ex.init_ms = s.init_ms;
            ex.sampling = s.sampling;
            ex.samplers = s
                .samplers
                .iter()
                .copied()
                .take(super::MAX_SAMPLERS)
                .collect();
            for t in &s.templates {
                if t.fields.len() > max_fields {
                    let e = DecodeError::TooManyFields {
                        id: t.id,
                        count: t.fields.len(),
                        limit: max_fields,
                    };
                    r.refuse(|| e.to_string());
                    continue;
                }
                let fields: Option<Vec<Field>> =
                    t.fields.iter().map(SavedField::to_field).collect();
                let Some(fields) = fields else {
                    r.refuse(|| format!("template {}: a field of unknown meaning", t.id));
                    continue;
                };
                match ex.templates.insert(t.id, t.options, &fields, 0, budget) {
                    Ok(()) => r.templates += 1,
                    Err(e) => r.refuse(|| e.to_string()),
                }
            }
        }
        r
    }
}

#[cfg(test)]
mod tests {
    use super::super::tests::{SEC, T0, ipfix_msg, template_record};
    use super::super::{Decoded, Limits};
    use super::*;

    const A: [u8; 16] = [0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 192, 0, 2, 7];

    /// Decodes `m` from `A` and returns (flows, templates missing).
    fn decode(d: &mut Decoder, m: &[u8], at: u64) -> (usize, u32) {
        let mut flows = 0;
        let s = d
            .decode(Protocol::Ipfix, A, m, at, &mut |x| {
                flows += usize::from(matches!(x, Decoded::Flow(_)));
            })
            .unwrap();
        (flows, s.template_missing)
    }

    #[test]
    fn every_element_has_a_name_read_back_as_itself() {
        for &e in ELEMS {
            let f = Field {
                elem: e,
                rev: true,
                len: 3,
            };
            assert_eq!(SavedField::from_field(&f).to_field(), Some(f));
        }
        let mut names: Vec<&str> = ELEMS.iter().map(|&e| elem_name(e)).collect();
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), ELEMS.len());
    }

    #[test]
    fn a_restored_decoder_reads_data_at_once_and_the_next_template_wins() {
        let t = template_record(256, &[(8, 4, 0), (12, 4, 0), (2, 4, 0)]);
        let data = vec![1, 1, 1, 1, 2, 2, 2, 2, 0, 0, 0, 9];
        let mut d = Decoder::new(Limits::default());
        assert_eq!(decode(&mut d, &ipfix_msg(0, &[(2, t)]), T0), (0, 0));
        let saved = d.save();
        assert_eq!(saved.len(), 1);
        assert_eq!(saved[0].heard_ns, T0);

        // A new decoder misses the template; a restored one does not.
        let mut fresh = Decoder::new(Limits::default());
        assert_eq!(
            decode(&mut fresh, &ipfix_msg(1, &[(256, data.clone())]), T0),
            (0, 1)
        );
        let mut d = Decoder::new(Limits::default());
        let r = d.restore(&saved, T0 + 10 * SEC, 3600 * SEC);
        assert_eq!((r.exporters, r.templates, r.refused), (1, 1, 0));
        assert_eq!(
            decode(&mut d, &ipfix_msg(1, &[(256, data.clone())]), T0 + 11 * SEC),
            (1, 0)
        );
        assert_eq!(d.save()[0].templates, saved[0].templates);

        // The exporter's next template replaces the restored one.
        let t2 = template_record(256, &[(2, 4, 0)]);
        decode(&mut d, &ipfix_msg(2, &[(2, t2)]), T0 + 12 * SEC);
        assert_eq!(d.save()[0].templates[0].fields.len(), 1);

        // Too old: left out.
        let mut d = Decoder::new(Limits::default());
        let r = d.restore(&saved, T0 + 3600 * SEC, 3600 * SEC);
        assert_eq!((r.exporters, r.stale), (0, 1));
    }

    #[test]
    fn restored_state_keeps_to_the_limits_and_refuses_unknown_fields() {
        let limits = Limits {
            max_templates_per_exporter: 2,
            max_exporters_per_address: 1,
            max_fields: 2,
            ..Limits::default()
        };
        let field = |e: &str| SavedField {
            elem: e.into(),
            reverse: false,
            len: 4,
        };
        let template = |id, fields: Vec<SavedField>| SavedTemplate {
            id,
            options: false,
            fields,
        };
        let state = |domain, templates| SavedExporter {
            address: A,
            protocol: Protocol::Ipfix,
            domain,
            heard_ns: T0,
            init_ms: 0,
            sampling: 0,
            samplers: vec![(1, 10); 1000],
            templates,
        };
        let saved = vec![
            state(
                1,
                vec![
                    template(256, vec![field("Octets")]),
                    template(257, vec![field("Nonsense")]),
                    template(258, vec![field("Octets"); 3]),
                    template(
                        261,
                        vec![SavedField {
                            len: 0,
                            ..field("Packets")
                        }],
                    ),
                    template(259, vec![field("Packets")]),
                    template(260, vec![field("Packets")]),
                ],
            ),
            state(2, vec![template(256, vec![field("Octets")])]),
        ];
        let mut d = Decoder::new(limits);
        let r = d.restore(&saved, T0, 3600 * SEC);
        // Domain 2 takes the address's one state in place of domain 1.
        assert_eq!(r.exporters, 2);
        assert_eq!(d.exporters(), 1);
        assert_eq!(r.templates, 3);
        assert_eq!(r.refused, 4, "{r:?}");
        assert_eq!(d.templates(), 1);
        let s = d.save();
        assert_eq!(
            (s[0].domain, s[0].samplers.len()),
            (2, super::super::MAX_SAMPLERS)
        );
    }
}
