//! One line per packet on standard output, the way tcpdump prints them without `-w`, so a quick
//! look needs no other tool:
//!
//! ```text
//! 22:10:01.123456789 IP 10.0.0.1.5000 > 10.0.0.2.9: UDP, length 60
//! 22:10:01.123460100 IP6 fd00::1.443 > fd00::2.51000: TCP [S.], length 74
//! 22:10:01.200000000 IP 10.0.0.1 > 10.0.0.2: ICMP type 8 code 0, length 98
//! 22:10:01.300000000 ethertype 0x0806, length 42
//! ```
//!
//! The time is the local time of day, in ns; `length` is the packet's length on the wire. A
//! capture on every interface (`-i any`) names the interface and the direction first, as
//! tcpdump does (`veth0 In IP ...`, `lo Out IP ...`; `ifindex 2 In IP ...` from a file). Lines are gathered in a buffer and written
//! once per block: no system call per packet (an interface's name is looked up once).

use std::io::Write;
use std::net::{Ipv4Addr, Ipv6Addr};

use tapflow_wire::LinkType;
use tapflow_wire::flowkey::FlowFields;
use tapflow_wire::ipv4::IpProtocol;
use tapflow_wire::record::ControlField;
use tapflow_wire::sll;

use crate::EngineError;
use crate::counters::Totals;
use crate::sink::record_sink::{Outcome, RecordSink};
use crate::source::InterfaceInfo;

/// What the text sink printed.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct TextReport {
    /// Lines printed.
    pub lines: u64,
}

impl Outcome for TextReport {
    fn add(&mut self, o: &TextReport) {
        self.lines += o.lines;
    }
}

/// Prints a summary line per packet on standard output.
#[derive(Debug, Default)]
pub struct TextSink {
    linktypes: Vec<LinkType>,
    /// Interface names by index, for cooked frames.
    names: std::collections::HashMap<u32, String>,
    /// Cooked frames' interfaces are named from this namespace (a live capture), not
    /// printed as `ifindex N` (a file's, from wherever it was captured).
    naming: bool,
    out: Vec<u8>,
    /// The local time's offset from UTC in seconds, read at each block's end.
    utc_offset: i64,
    report: TextReport,
}

/// Bytes gathered before a write, whatever the block.
const FLUSH_AT: usize = 64 << 10;

impl TextSink {
    /// A sink printing to standard output.
    pub fn new() -> TextSink {
        TextSink {
            out: Vec::with_capacity(2 * FLUSH_AT),
            utc_offset: local_offset(),
            ..TextSink::default()
        }
    }

    /// Names the interfaces of cooked frames from this network namespace.
    pub fn naming_interfaces(mut self) -> TextSink {
        self.naming = true;
        self
    }

    /// The name of interface `ifindex`, looked up in the namespace the first time it is seen
    /// (`if5` if it has none now).
    #[cold]
    fn lookup(&mut self, ifindex: u32) {
        if !self.naming {
            self.names.insert(ifindex, format!("ifindex {ifindex}"));
            return;
        }
        for n in tapflow_sys::iface::names().unwrap_or_default() {
            if let Ok(i) = tapflow_sys::iface::index(&n) {
                self.names.insert(i, n);
            }
        }
        self.names
            .entry(ifindex)
            .or_insert_with(|| format!("if{ifindex}"));
    }

    fn flush(&mut self) -> Result<(), EngineError> {
        if self.out.is_empty() {
            return Ok(());
        }
        let mut stdout = std::io::stdout().lock();
        let done = stdout.write_all(&self.out).and_then(|()| stdout.flush());
        self.out.clear();
        done.map_err(|source| EngineError::Write {
            path: "-".into(),
            source,
        })
    }
}

/// The local time's offset from UTC now, in seconds.
fn local_offset() -> i64 {
    use chrono::Offset;
    i64::from(chrono::Local::now().offset().fix().local_minus_utc())
}

/// Writes the summary of one packet (without the time) to `out`.
pub fn describe(out: &mut Vec<u8>, linktype: LinkType, data: &[u8], wire_len: u32) {
    let Some(f) = FlowFields::of_frame(linktype, data, wire_len) else {
        let _ = match (linktype, data.get(12..14), data.get(..2)) {
            (LinkType::LinuxSll2, _, Some(t)) | (LinkType::Ethernet, Some(t), _) => write!(
                out,
                "ethertype 0x{:04x}, length {wire_len}",
                u16::from_be_bytes([t[0], t[1]])
            ),
            _ => write!(out, "{linktype}, length {wire_len}"),
        };
        return;
    };
    let _ = out.write_all(if f.ipv6 { b"IP6 " } else { b"IP " });
    let ports = matches!(f.proto, 6 | 17 | 33 | 132 | 136) && f.fragment.is_none_or(|x| x.first);
    for (i, (addr, port)) in [(&f.src, f.sport), (&f.dst, f.dport)]
        .into_iter()
        .enumerate()
    {
        if i == 1 {
            let _ = out.write_all(b" > ");
        }
        let _ = if f.ipv6 {
            write!(out, "{}", Ipv6Addr::from(*addr))
        } else {
            write!(out, "{}", Ipv4Addr::new(addr[0], addr[1], addr[2], addr[3]))
        };
        if ports {
            let _ = write!(out, ".{port}");
        }
    }
    let _ = out.write_all(b": ");
    let proto = IpProtocol::from_u8(f.proto);
    let _ = match proto.keyword() {
        Some(k) => {
            for b in k.bytes() {
                out.push(b.to_ascii_uppercase());
            }
            Ok(())
        }
        None => write!(out, "proto {}", f.proto),
    };
    let _ = match proto {
        IpProtocol::Tcp if ports => {
            let _ = out.write_all(b" [");
            for (bit, c) in [
                (0x02, b'S'),
                (0x01, b'F'),
                (0x04, b'R'),
                (0x08, b'P'),
                (0x10, b'.'),
            ] {
                if f.tcp_flags & bit != 0 {
                    out.push(c);
                }
            }
            out.write_all(b"]")
        }
        IpProtocol::Icmp | IpProtocol::Icmpv6 if f.fragment.is_none() => {
            write!(out, " type {} code {}", f.dport >> 8, f.dport & 0xff)
        }
        _ => Ok(()),
    };
    if f.fragment.is_some() {
        let _ = out.write_all(b" (fragment)");
    }
    let _ = write!(out, ", length {wire_len}");
}

impl RecordSink for TextSink {
    type Report = TextReport;

    fn add_interface(&mut self, info: &InterfaceInfo) -> Result<(), EngineError> {
        self.linktypes.push(info.linktype);
        Ok(())
    }

    fn record(
        &mut self,
        interface: u32,
        _drops_before: u64,
        ctl: &ControlField,
        data: &[u8],
    ) -> Result<(), EngineError> {
        let local = (ctl.rxtime / 1_000_000_000) as i64 + self.utc_offset;
        let day = local.rem_euclid(86_400);
        let _ = write!(
            self.out,
            "{:02}:{:02}:{:02}.{:09} ",
            day / 3600,
            day / 60 % 60,
            day % 60,
            ctl.rxtime % 1_000_000_000
        );
        let linktype = self
            .linktypes
            .get(interface as usize)
            .copied()
            .unwrap_or(LinkType::Ethernet);
        if linktype == LinkType::LinuxSll2
            && let Ok(h) = sll::Header::new_checked(data)
        {
            if !self.names.contains_key(&h.ifindex()) {
                self.lookup(h.ifindex());
            }
            let name = self.names.get(&h.ifindex()).map_or("?", String::as_str);
            let _ = write!(self.out, "{name} {} ", sll::direction_name(h.pkttype()));
        }
        describe(&mut self.out, linktype, data, ctl.orig_len());
        self.out.push(b'\n');
        self.report.lines += 1;
        if self.out.len() >= FLUSH_AT {
            self.flush()?;
        }
        Ok(())
    }

    fn end_of_block(
        &mut self,
        _totals: &Totals,
        _if_stats: Option<(u64, u64)>,
    ) -> Result<(), EngineError> {
        self.utc_offset = local_offset();
        self.flush()
    }

    fn close(
        &mut self,
        _totals: &Totals,
        _if_stats: Option<(u64, u64)>,
    ) -> Result<TextReport, EngineError> {
        self.flush()?;
        Ok(std::mem::take(&mut self.report))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn line(linktype: LinkType, frame: &[u8]) -> String {
        let mut out = Vec::new();
        describe(&mut out, linktype, frame, frame.len() as u32);
        String::from_utf8(out).unwrap()
    }

    #[test]
    fn cooked_frames_read_like_ethernet_ones() {
        let mut f = vec![
            0x08, 0x00, 0, 0, 0, 0, 0, 2, 0, 1, 0, 6, 2, 0, 0, 0, 0, 1, 0, 0,
        ];
        f.extend_from_slice(&[
            0x45, 0, 0, 32, 0, 0, 0x40, 0, 64, 17, 0, 0, 10, 0, 0, 1, 10, 0, 0, 2,
        ]);
        f.extend_from_slice(&[0x13, 0x88, 0, 9, 0, 12, 0, 0, 1, 2, 3, 4]);
        assert_eq!(
            line(LinkType::LinuxSll2, &f),
            "IP 10.0.0.1.5000 > 10.0.0.2.9: UDP, length 52"
        );
        f[..2].copy_from_slice(&[0x08, 0x06]);
        assert_eq!(line(LinkType::LinuxSll2, &f), "ethertype 0x0806, length 52");
    }

    #[test]
    fn lines_read_like_tcpdumps() {
        // Ethernet + IPv4 + UDP 10.0.0.1:5000 -> 10.0.0.2:9, 4 bytes of payload.
        let mut f = vec![0u8; 12];
        f.extend_from_slice(&[0x08, 0x00]);
        f.extend_from_slice(&[
            0x45, 0, 0, 32, 0, 0, 0x40, 0, 64, 17, 0, 0, 10, 0, 0, 1, 10, 0, 0, 2,
        ]);
        f.extend_from_slice(&[0x13, 0x88, 0, 9, 0, 12, 0, 0, 1, 2, 3, 4]);
        assert_eq!(
            line(LinkType::Ethernet, &f),
            "IP 10.0.0.1.5000 > 10.0.0.2.9: UDP, length 46"
        );
        // The same as TCP with SYN|ACK.
        let mut t = f[..23].to_vec();
        t[23 - 1] = 64;
        t.push(6);
        t.extend_from_slice(&f[24..34]);
        t.extend_from_slice(&[
            0x13, 0x88, 0, 9, 0, 0, 0, 0, 0, 0, 0, 0, 0x50, 0x12, 0, 0, 0, 0, 0, 0,
        ]);
        assert_eq!(
            line(LinkType::Ethernet, &t),
            format!(
                "IP 10.0.0.1.5000 > 10.0.0.2.9: TCP [S.], length {}",
                t.len()
            )
        );
        // ARP.
        let mut arp = vec![0u8; 12];
        arp.extend_from_slice(&[0x08, 0x06]);
        arp.resize(42, 0);
        assert_eq!(
            line(LinkType::Ethernet, &arp),
            "ethertype 0x0806, length 42"
        );
        // Cut short: never a panic, still a line.
        assert!(line(LinkType::Ethernet, &f[..20]).ends_with("length 20"));
    }
}
