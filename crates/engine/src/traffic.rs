//! What crossed the link, by kind (the NetFPGA monitor's statistics daemon): packets and bytes,
//! IP or not, IPv4/IPv6, TCP/UDP/ICMP/other, TCP SYN/FIN/RST and TCP with options, and the first
//! and last arrival times from which the mean inter-arrival time and bit rate follow.
//!
//! Counted by each worker in plain integers on the packet path and published once per block,
//! like [`Totals`](crate::counters::Totals).

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

use serde::ser::SerializeStruct;
use serde::{Deserialize, Serialize, Serializer};

use tapflow_wire::LinkType;
use tapflow_wire::link::{NetworkProto, network_layer};

use crate::sink::record_sink::SinkLive;

const TCP: u8 = 6;
const UDP: u8 = 17;
const ICMP: u8 = 1;
const ICMPV6: u8 = 58;

/// One worker's traffic counters.
///
/// Serialized with the field names as keys, plus the values that follow from them (`non_ip`,
/// `other_transport`, `mean_interarrival_seconds`, `mean_rate_bytes_per_second`), which
/// deserializing ignores; `/metrics` names each `tapflow_traffic_KEY`.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq, Deserialize)]
pub struct Traffic {
    /// Packets counted (those that passed the filters).
    pub packets: u64,
    /// Their original bytes.
    pub bytes: u64,
    /// IPv4 packets.
    pub ipv4: u64,
    /// IPv6 packets.
    pub ipv6: u64,
    /// TCP segments.
    pub tcp: u64,
    /// UDP datagrams.
    pub udp: u64,
    /// ICMP and ICMPv6 messages.
    pub icmp: u64,
    /// TCP segments with SYN.
    pub tcp_syn: u64,
    /// TCP segments with FIN.
    pub tcp_fin: u64,
    /// TCP segments with RST.
    pub tcp_rst: u64,
    /// TCP segments whose header has options (data offset > 5).
    pub tcp_options: u64,
    /// Arrival time of the first packet, ns.
    pub first_ns: u64,
    /// Arrival time of the last packet, ns.
    pub last_ns: u64,
}

impl Traffic {
    /// Counts one packet of `len` original bytes captured as `frame` with `linktype`.
    #[inline(always)]
    pub fn count(&mut self, linktype: LinkType, frame: &[u8], len: u32, ts_ns: u64) {
        if self.packets == 0 {
            self.first_ns = ts_ns;
        }
        self.packets += 1;
        self.bytes += u64::from(len);
        self.last_ns = ts_ns;
        // `network_layer` finds untagged IPv4 over Ethernet in place; only other frames walk.
        let Some(nl) = network_layer(linktype, frame) else {
            return;
        };
        let ip = &frame[nl.offset..];
        match nl.proto {
            NetworkProto::Ipv4 => self.ipv4(ip),
            NetworkProto::Ipv6 => self.ipv6(ip),
        }
    }

    /// Counts an IPv4 packet whose header starts `ip`.
    #[inline(always)]
    fn ipv4(&mut self, ip: &[u8]) {
        self.ipv4 += 1;
        let Some(h) = ip.get(..20) else { return };
        let first = u16::from_be_bytes([h[6], h[7]]) & 0x1fff == 0;
        let ihl = usize::from(h[0] & 0xf) * 4;
        self.transport(h[9], if first { ip.get(ihl..) } else { None });
    }

    /// Counts an IPv6 packet whose header starts `ip` (out of line: rare on most links).
    #[inline(never)]
    fn ipv6(&mut self, ip: &[u8]) {
        self.ipv6 += 1;
        let Some(h) = ip.get(..40) else { return };
        self.transport(h[6], ip.get(40..));
    }

    /// Counts the transport protocol `proto`, whose header (if this is a first fragment)
    /// starts `l4`.
    #[inline(always)]
    fn transport(&mut self, proto: u8, l4: Option<&[u8]>) {
        match proto {
            TCP => {
                self.tcp += 1;
                if let Some(&[.., off, flags]) = l4.and_then(|t| t.get(..14)) {
                    self.tcp_syn += u64::from(flags & 0x02 != 0);
                    self.tcp_fin += u64::from(flags & 0x01 != 0);
                    self.tcp_rst += u64::from(flags & 0x04 != 0);
                    self.tcp_options += u64::from(off >> 4 > 5);
                }
            }
            UDP => self.udp += 1,
            ICMP | ICMPV6 => self.icmp += 1,
            _ => {}
        }
    }

    /// IP packets (IPv4 and IPv6).
    pub fn ip(&self) -> u64 {
        self.ipv4 + self.ipv6
    }

    /// Packets that are not IP.
    pub fn non_ip(&self) -> u64 {
        self.packets - self.ip()
    }

    /// IP packets that are neither TCP, UDP nor ICMP.
    pub fn other_transport(&self) -> u64 {
        self.ip().saturating_sub(self.tcp + self.udp + self.icmp)
    }

    /// Mean time between packets, in seconds (0 before the second packet).
    pub fn mean_interarrival_seconds(&self) -> f64 {
        if self.packets < 2 {
            0.0
        } else {
            self.last_ns.saturating_sub(self.first_ns) as f64 / 1e9 / (self.packets - 1) as f64
        }
    }

    /// Mean rate from the first to the last packet, in bytes/s (0 before the second packet).
    pub fn mean_rate_bytes_per_second(&self) -> f64 {
        let span = self.last_ns.saturating_sub(self.first_ns);
        if self.packets < 2 || span == 0 {
            0.0
        } else {
            self.bytes as f64 * 1e9 / span as f64
        }
    }

    /// Adds another worker's counters; the time span becomes the union of both.
    pub fn add(&mut self, o: &Traffic) {
        if o.packets == 0 {
            return;
        }
        if self.packets == 0 {
            *self = *o;
            return;
        }
        self.first_ns = self.first_ns.min(o.first_ns);
        self.last_ns = self.last_ns.max(o.last_ns);
        self.packets += o.packets;
        self.bytes += o.bytes;
        self.ipv4 += o.ipv4;
        self.ipv6 += o.ipv6;
        self.tcp += o.tcp;
        self.udp += o.udp;
        self.icmp += o.icmp;
        self.tcp_syn += o.tcp_syn;
        self.tcp_fin += o.tcp_fin;
        self.tcp_rst += o.tcp_rst;
        self.tcp_options += o.tcp_options;
    }
}

impl Serialize for Traffic {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut st = s.serialize_struct("Traffic", 17)?;
        st.serialize_field("packets", &self.packets)?;
        st.serialize_field("bytes", &self.bytes)?;
        st.serialize_field("ipv4", &self.ipv4)?;
        st.serialize_field("ipv6", &self.ipv6)?;
        st.serialize_field("non_ip", &self.non_ip())?;
        st.serialize_field("tcp", &self.tcp)?;
        st.serialize_field("udp", &self.udp)?;
        st.serialize_field("icmp", &self.icmp)?;
        st.serialize_field("other_transport", &self.other_transport())?;
        st.serialize_field("tcp_syn", &self.tcp_syn)?;
        st.serialize_field("tcp_fin", &self.tcp_fin)?;
        st.serialize_field("tcp_rst", &self.tcp_rst)?;
        st.serialize_field("tcp_options", &self.tcp_options)?;
        st.serialize_field(
            "mean_interarrival_seconds",
            &self.mean_interarrival_seconds(),
        )?;
        st.serialize_field(
            "mean_rate_bytes_per_second",
            &self.mean_rate_bytes_per_second(),
        )?;
        st.serialize_field("first_ns", &self.first_ns)?;
        st.serialize_field("last_ns", &self.last_ns)?;
        st.end()
    }
}

/// A worker's published traffic counters.
#[derive(Debug, Default)]
pub struct SharedTraffic([AtomicU64; 13]);

impl SharedTraffic {
    /// Publishes a snapshot (single writer).
    pub fn publish(&self, t: &Traffic) {
        for (a, v) in self.0.iter().zip(fields(t)) {
            a.store(v, Relaxed);
        }
    }

    /// Reads the last published snapshot.
    pub fn load(&self) -> Traffic {
        let v: [u64; 13] = std::array::from_fn(|i| self.0[i].load(Relaxed));
        Traffic {
            packets: v[0],
            bytes: v[1],
            ipv4: v[2],
            ipv6: v[3],
            tcp: v[4],
            udp: v[5],
            icmp: v[6],
            tcp_syn: v[7],
            tcp_fin: v[8],
            tcp_rst: v[9],
            tcp_options: v[10],
            first_ns: v[11],
            last_ns: v[12],
        }
    }
}

/// Everything a worker publishes for statistics besides its [`Totals`](crate::counters::Totals):
/// its traffic and its sinks' counters.
#[derive(Debug, Default)]
pub struct SharedStats {
    traffic: SharedTraffic,
    live: [AtomicU64; 3],
}

impl SharedStats {
    /// Publishes a snapshot (single writer).
    pub fn publish(&self, t: &Traffic, l: &SinkLive) {
        self.traffic.publish(t);
        for (a, v) in self
            .live
            .iter()
            .zip([l.forward_failed, l.flows_active, l.flows_exported])
        {
            a.store(v, Relaxed);
        }
    }

    /// Reads the last published snapshot.
    pub fn load(&self) -> (Traffic, SinkLive) {
        let [f, a, e] = std::array::from_fn(|i| self.live[i].load(Relaxed));
        (
            self.traffic.load(),
            SinkLive {
                forward_failed: f,
                flows_active: a,
                flows_exported: e,
            },
        )
    }
}

fn fields(t: &Traffic) -> [u64; 13] {
    [
        t.packets,
        t.bytes,
        t.ipv4,
        t.ipv6,
        t.tcp,
        t.udp,
        t.icmp,
        t.tcp_syn,
        t.tcp_fin,
        t.tcp_rst,
        t.tcp_options,
        t.first_ns,
        t.last_ns,
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tcp_frame(flags: u8, doff: u8) -> Vec<u8> {
        let mut f = vec![0u8; 12];
        f.extend_from_slice(&[0x08, 0x00, 0x45, 0, 0, 40, 0, 0, 0x40, 0, 64, 6, 0, 0]);
        f.extend_from_slice(&[10, 0, 0, 1, 10, 0, 0, 2]);
        f.extend_from_slice(&[0, 1, 0, 2, 0, 0, 0, 0, 0, 0, 0, 0, doff << 4, flags, 0, 0]);
        f.extend_from_slice(&[0; 4]);
        f
    }

    #[test]
    fn counts_by_kind_and_means() {
        let mut t = Traffic::default();
        t.count(LinkType::Ethernet, &tcp_frame(0x02, 6), 1000, 1_000_000_000);
        t.count(LinkType::Ethernet, &tcp_frame(0x11, 5), 1000, 1_500_000_000);
        t.count(LinkType::Ethernet, &tcp_frame(0x04, 5), 500, 2_000_000_000);
        let arp = [&[0u8; 12][..], &[0x08, 0x06], &[0; 28]].concat();
        t.count(LinkType::Ethernet, &arp, 42, 2_000_000_000);
        assert_eq!(
            (t.packets, t.ip(), t.non_ip(), t.ipv4, t.ipv6),
            (4, 3, 1, 3, 0)
        );
        assert_eq!(
            (t.tcp, t.tcp_syn, t.tcp_fin, t.tcp_rst, t.tcp_options),
            (3, 1, 1, 1, 1)
        );
        assert_eq!(t.other_transport(), 0);
        // 3 gaps over 1 s; 2542 bytes over 1 s.
        assert!((t.mean_interarrival_seconds() - 1.0 / 3.0).abs() < 1e-12);
        assert!((t.mean_rate_bytes_per_second() - 2542.0).abs() < 1e-9);
        let s = SharedTraffic::default();
        s.publish(&t);
        assert_eq!(s.load(), t);
        let mut sum = Traffic::default();
        sum.add(&t);
        sum.add(&Traffic {
            packets: 1,
            first_ns: 500_000_000,
            last_ns: 500_000_000,
            ..Traffic::default()
        });
        assert_eq!(
            (sum.packets, sum.first_ns, sum.last_ns),
            (5, 500_000_000, 2_000_000_000)
        );
    }

    #[test]
    fn the_in_place_read_of_ipv4_counts_what_the_walk_counts() {
        let mut frames = vec![tcp_frame(0x02, 6), tcp_frame(0x11, 5), tcp_frame(0x04, 5)];
        let mut more_fragments = tcp_frame(0x02, 6);
        more_fragments[20] = 0x20; // MF, offset 0: a first fragment
        let mut later = tcp_frame(0x02, 6);
        later[21] = 0x10;
        let mut udp = tcp_frame(0, 5);
        udp[23] = 17;
        let mut icmp = tcp_frame(0, 5);
        icmp[23] = 1;
        let mut options = tcp_frame(0x12, 5);
        options[14] = 0x46; // IHL 6: the TCP header starts 4 bytes later
        frames.extend([more_fragments, later, udp, icmp, options]);
        frames.push(tcp_frame(0x02, 6)[..33].to_vec());
        frames.push(tcp_frame(0x02, 6)[..40].to_vec());
        for (i, f) in frames.iter().enumerate() {
            let mut fast = Traffic::default();
            fast.count(LinkType::Ethernet, f, 60, 7);
            // The same IP packet without its Ethernet header: found by the walk.
            let mut walked = Traffic::default();
            walked.count(LinkType::Ipv4, &f[14..], 60, 7);
            assert_eq!(fast, walked, "frame {i}");
        }
    }

    #[test]
    fn later_fragments_and_short_frames_are_not_misread() {
        let mut frag = tcp_frame(0x02, 6);
        frag[20] = 0x00;
        frag[21] = 0x10; // offset 16 × 8 bytes
        let mut t = Traffic::default();
        t.count(LinkType::Ethernet, &frag, 60, 0);
        t.count(LinkType::Ethernet, &tcp_frame(0x02, 6)[..40], 60, 0);
        assert_eq!((t.tcp, t.tcp_syn, t.tcp_options), (2, 0, 0));
    }
}
