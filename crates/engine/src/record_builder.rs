//! Turns a [`Packet`] into a header record: the control field plus the first `caplen` bytes.

use tapflow_wire::cryptopan::Anonymizer;
use tapflow_wire::record::{self, ControlField, Flags};
use tapflow_wire::{LinkType, checksum, link};

use crate::source::Packet;

/// Builds records for one interface.
#[derive(Debug, Clone, Copy)]
pub struct RecordBuilder {
    linktype: LinkType,
    snaplen: usize,
    max_frame: Option<u32>,
    ip_sum: bool,
}

impl RecordBuilder {
    /// A builder cutting packets to `snaplen` bytes.
    pub fn new(linktype: LinkType, snaplen: u32, max_frame: Option<u32>) -> RecordBuilder {
        RecordBuilder {
            linktype,
            snaplen: (snaplen as usize).min(record::MAX_CAPLEN),
            max_frame,
            ip_sum: true,
        }
    }

    /// The same builder, leaving the whole-IP checksum out when `ip_sum` is false (no
    /// consumer of the records reads it).
    pub fn with_ip_sum(self, ip_sum: bool) -> RecordBuilder {
        RecordBuilder { ip_sum, ..self }
    }

    /// The captured length of `p`'s record: its bytes (plus a restored VLAN tag), cut to the
    /// snap length.
    #[inline]
    fn caplen(&self, p: &Packet<'_>) -> usize {
        let extra = if p.stripped_vlan.is_some() && self.linktype == LinkType::Ethernet {
            4
        } else {
            0
        };
        (p.data.len() + extra).min(self.snaplen)
    }

    /// `flags`, marked [`Flags::OFFLOAD_MERGED`] if a packet of `len` bytes is larger than the
    /// interface's largest frame.
    #[inline]
    fn offload(&self, flags: Flags, len: u32) -> Flags {
        match self.max_frame {
            Some(max) if len > max => flags.with(Flags::OFFLOAD_MERGED),
            _ => flags,
        }
    }

    /// The captured bytes and control-field flags of `p`'s record, for a packet without a
    /// stripped VLAN tag and a builder without the whole-IP sum: what [`RecordBuilder::build`]
    /// puts in the record, without building it.
    #[inline]
    pub fn plain<'s>(&self, p: &Packet<'s>) -> (&'s [u8], Flags) {
        debug_assert!(p.stripped_vlan.is_none() && !self.ip_sum);
        (
            &p.data[..p.data.len().min(self.snaplen)],
            self.offload(p.flags, p.len),
        )
    }

    /// The header record of `p`: its control field and captured bytes. The bytes are `p`'s own
    /// (no copy), or, when the kernel stripped a VLAN tag, a copy in `scratch` with the tag put
    /// back where the wire had it.
    #[inline]
    pub fn build<'s>(&self, p: &Packet<'s>, scratch: &'s mut Vec<u8>) -> (ControlField, &'s [u8]) {
        let caplen = self.caplen(p);
        let mut flags = p.flags;
        let mut len = p.len;
        let data: &'s [u8] = match p.stripped_vlan {
            Some((tpid, tci)) if self.linktype == LinkType::Ethernet && p.data.len() >= 12 => {
                flags = flags.with(Flags::VLAN_RESTORED);
                len += 4;
                scratch.clear();
                scratch.extend_from_slice(&p.data[..12]);
                scratch.extend_from_slice(&tpid.to_be_bytes());
                scratch.extend_from_slice(&tci.to_be_bytes());
                scratch.extend_from_slice(&p.data[12..]);
                &scratch[..caplen]
            }
            _ => &p.data[..caplen],
        };
        flags = self.offload(flags, len);
        let whole = self.ip_sum && caplen as u32 == len;
        let cksum = match whole_ip_sum(self.linktype, data, whole) {
            Some(s) => {
                flags = flags.with(Flags::CKSUM_WHOLE);
                s
            }
            None => 0,
        };
        (
            ControlField::new(p.ts_ns, flags, caplen as u16, cksum, len),
            data,
        )
    }
}

/// A worker's Crypto-PAn stage: a record's copy with its addresses anonymised
/// ([`Anonymizer::frame`]), in a buffer made once.
#[derive(Debug)]
pub struct AnonymizedRecords {
    anonymizer: Anonymizer,
    buf: Vec<u8>,
}

impl AnonymizedRecords {
    /// A stage for records of at most `snaplen` bytes.
    pub fn new(anonymizer: Anonymizer, snaplen: u32) -> AnonymizedRecords {
        AnonymizedRecords {
            anonymizer,
            buf: Vec::with_capacity((snaplen as usize).min(record::MAX_CAPLEN)),
        }
    }

    /// The record `ctl`, `data` (of a `linktype` interface) with anonymised addresses; its
    /// whole-IP sum, if it has one, is the anonymised packet's. No allocation.
    #[inline]
    pub fn apply(
        &mut self,
        linktype: LinkType,
        ctl: &ControlField,
        data: &[u8],
    ) -> (ControlField, &[u8]) {
        self.buf.clear();
        self.buf.extend_from_slice(data);
        let mut ctl = *ctl;
        if self.anonymizer.frame(linktype, &mut self.buf)
            && ctl.flags.contains(Flags::CKSUM_WHOLE)
            && let Some(s) = whole_ip_sum(linktype, &self.buf, true)
        {
            ctl.cksum = s;
        }
        (ctl, &self.buf)
    }
}

/// The 1's-complement sum of the IP packet in `frame`, if the whole IP packet was captured.
#[inline]
fn whole_ip_sum(linktype: LinkType, frame: &[u8], whole_frame: bool) -> Option<u16> {
    if !whole_frame {
        return None;
    }
    let l3 = link::network_layer(linktype, frame)?;
    let ip = frame.get(l3.offset..)?;
    let ip_len = match ip.first()? >> 4 {
        4 => u16::from_be_bytes([*ip.get(2)?, *ip.get(3)?]) as usize,
        6 => 40 + u16::from_be_bytes([*ip.get(4)?, *ip.get(5)?]) as usize,
        _ => return None,
    };
    let ip = ip.get(..ip_len)?;
    Some(checksum::fold(checksum::sum(ip)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use tapflow_wire::TsSource;
    use tapflow_wire::record::Records;

    // Ethernet + IPv4 (20) + UDP (8) + 4 bytes payload = 46 bytes.
    fn udp_frame() -> Vec<u8> {
        let mut f = vec![
            0x02, 0, 0, 0, 0, 2, 0x02, 0, 0, 0, 0, 1, 0x08, 0x00, // ethernet
            0x45, 0, 0, 32, 0, 1, 0, 0, 64, 17, 0, 0, 198, 18, 0, 1, 198, 18, 0, 2, // ipv4
            0x30, 0x39, 0x00, 0x09, 0, 12, 0, 0, // udp
            1, 2, 3, 4,
        ];
        let ck = !checksum::fold(checksum::sum(&f[14..34]));
        f[24..26].copy_from_slice(&ck.to_be_bytes());
        f
    }

    fn packet(data: &[u8]) -> Packet<'_> {
        Packet {
            data,
            ts_ns: 7,
            len: data.len() as u32,
            flags: Flags::default().with_ts_source(TsSource::Kernel),
            interface: 0,
            stripped_vlan: None,
            drops_before: 0,
        }
    }

    #[test]
    fn whole_packet_gets_the_ip_sum() {
        let f = udp_frame();
        let b = RecordBuilder::new(LinkType::Ethernet, 128, Some(1514));
        let mut scratch = Vec::new();
        let (ctl, data) = b.build(&packet(&f), &mut scratch);
        assert_eq!(data, f.as_slice());
        assert!(ctl.flags.contains(Flags::CKSUM_WHOLE));
        assert_eq!(ctl.cksum, checksum::fold(checksum::sum(&f[14..])));
        assert_eq!(ctl.flags.ts_source(), TsSource::Kernel);
    }

    #[test]
    fn cut_packet_has_no_sum_and_keeps_its_length() {
        let f = udp_frame();
        let b = RecordBuilder::new(LinkType::Ethernet, 20, None);
        let mut scratch = Vec::new();
        let (ctl, data) = b.build(&packet(&f), &mut scratch);
        assert_eq!(data, &f[..20]);
        assert_eq!(ctl.orig_len() as usize, f.len());
        assert!(!ctl.flags.contains(Flags::CKSUM_WHOLE));
        assert_eq!(ctl.cksum, 0);
    }

    #[test]
    fn stripped_vlan_tag_is_put_back() {
        let f = udp_frame();
        let mut p = packet(&f);
        p.stripped_vlan = Some((0x8100, 42));
        let b = RecordBuilder::new(LinkType::Ethernet, 128, Some(1518));
        let mut scratch = Vec::new();
        let (ctl, data) = b.build(&p, &mut scratch);
        assert!(ctl.flags.contains(Flags::VLAN_RESTORED));
        assert_eq!(ctl.orig_len() as usize, f.len() + 4);
        assert_eq!(&data[..12], &f[..12]);
        assert_eq!(&data[12..16], &[0x81, 0x00, 0, 42]);
        assert_eq!(&data[16..], &f[12..]);
        assert!(
            ctl.flags.contains(Flags::CKSUM_WHOLE),
            "the tagged frame is still whole"
        );
    }

    #[test]
    fn oversized_frame_is_marked_offload_merged() {
        let f = udp_frame();
        let b = RecordBuilder::new(LinkType::Ethernet, 128, Some(40));
        let mut scratch = Vec::new();
        let (ctl, _) = b.build(&packet(&f), &mut scratch);
        assert!(ctl.flags.contains(Flags::OFFLOAD_MERGED));
    }

    #[test]
    fn jumbogram_keeps_its_32_bit_length() {
        let f = vec![0u8; 100];
        let p = Packet {
            data: &f,
            ts_ns: 1,
            len: 65_590,
            flags: Flags::default(),
            interface: 0,
            stripped_vlan: None,
            drops_before: 0,
        };
        let b = RecordBuilder::new(LinkType::Ethernet, 64, None);
        let mut scratch = Vec::new();
        let (built, bytes) = b.build(&p, &mut scratch);
        // Through the wire format and back: the 32-bit length survives.
        let mut out = Vec::new();
        record::push_record(&mut out, built, bytes);
        let (ctl, data) = Records::new(&out).next().unwrap().unwrap();
        assert_eq!(ctl.orig_len(), 65_590);
        assert_eq!(data.len(), 64);
    }

    #[test]
    fn no_sum_when_no_consumer_reads_it() {
        let f = udp_frame();
        let p = Packet {
            data: &f,
            ts_ns: 1,
            len: f.len() as u32,
            flags: Flags::default(),
            interface: 0,
            stripped_vlan: None,
            drops_before: 0,
        };
        let b = RecordBuilder::new(LinkType::Ethernet, 128, None);
        let mut scratch = Vec::new();
        assert!(b.build(&p, &mut scratch).0.ip_sum().is_some());
        let (ctl, data) = b.with_ip_sum(false).build(&p, &mut scratch);
        assert_eq!((ctl.ip_sum(), ctl.cksum, data.len()), (None, 0, f.len()));
    }
}
