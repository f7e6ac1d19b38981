//! Frame builder for the traffic generator: Ethernet + IPv4/IPv6 + UDP/TCP with correct
//! checksums, written into a caller's buffer without allocating.
//!
//! [`build`] writes one template frame and returns its [`Layout`]; [`vary_flow`] then rewrites
//! the source port in place and patches the L4 checksum incrementally (RFC 1624), so N distinct
//! flows cost one 16-bit update each instead of a full checksum.

use crate::bytes::{read_u16, write_u16};
use crate::checksum;
use crate::ethernet::{self, EtherType, EthernetAddress};
use crate::ipv4::{self, IpProtocol};
use crate::{ipv6, tcp, udp};
use core::net::IpAddr;

/// Smallest Ethernet frame without FCS.
pub const MIN_FRAME_LEN: usize = 60;

/// Largest frame [`build`] writes (a 9000-byte jumbo frame without FCS).
pub const MAX_FRAME_LEN: usize = 9000;

/// Time to live / hop limit of built packets.
pub const TTL: u8 = 64;

/// TCP window of built segments.
pub const TCP_WINDOW: u16 = 65535;

/// The transport protocol of a built frame.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum L4 {
    /// UDP.
    Udp,
    /// TCP with ACK|PSH.
    Tcp,
}

impl L4 {
    /// The IP protocol number.
    #[inline]
    pub const fn protocol(self) -> IpProtocol {
        match self {
            L4::Udp => IpProtocol::Udp,
            L4::Tcp => IpProtocol::Tcp,
        }
    }

    /// The transport header length.
    #[inline]
    pub const fn header_len(self) -> usize {
        match self {
            L4::Udp => udp::HEADER_LEN,
            L4::Tcp => tcp::HEADER_LEN,
        }
    }
}

/// What frame to build.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FrameSpec {
    /// Ethernet source.
    pub src_mac: EthernetAddress,
    /// Ethernet destination.
    pub dst_mac: EthernetAddress,
    /// IP source; its family picks IPv4 or IPv6.
    pub src_ip: IpAddr,
    /// IP destination; must be the same family as `src_ip`.
    pub dst_ip: IpAddr,
    /// UDP or TCP.
    pub proto: L4,
    /// Transport source port.
    pub src_port: u16,
    /// Transport destination port.
    pub dst_port: u16,
    /// Frame length without FCS, [`MIN_FRAME_LEN`]..=[`MAX_FRAME_LEN`]; the payload fills the
    /// rest with [`payload_byte`].
    pub frame_len: usize,
}

/// Where the fields of a built frame are, for in-place rewriting.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Layout {
    /// Frame length written.
    pub len: usize,
    /// Offset of the IP header.
    pub l3_offset: usize,
    /// Offset of the UDP/TCP header.
    pub l4_offset: usize,
    /// Offset of the payload.
    pub payload_offset: usize,
    /// The transport protocol.
    pub proto: L4,
}

impl Layout {
    /// Offset of the source port.
    #[inline]
    pub const fn src_port_offset(&self) -> usize {
        self.l4_offset
            + match self.proto {
                L4::Udp => udp::SRC_PORT_OFFSET,
                L4::Tcp => tcp::SRC_PORT_OFFSET,
            }
    }

    /// Offset of the transport checksum.
    #[inline]
    pub const fn checksum_offset(&self) -> usize {
        self.l4_offset
            + match self.proto {
                L4::Udp => udp::CHECKSUM_OFFSET,
                L4::Tcp => tcp::CHECKSUM_OFFSET,
            }
    }
}

/// Why a frame could not be built.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum BuildError {
    /// `frame_len` is below what the headers (or Ethernet's 60-byte minimum) need.
    #[error("frame length {frame_len} is too short: this protocol stack needs at least {min}")]
    FrameTooShort {
        /// The requested length.
        frame_len: usize,
        /// The smallest length that works.
        min: usize,
    },
    /// `frame_len` is above [`MAX_FRAME_LEN`].
    #[error("frame length {frame_len} exceeds the maximum of {max}")]
    FrameTooLong {
        /// The requested length.
        frame_len: usize,
        /// [`MAX_FRAME_LEN`].
        max: usize,
    },
    /// The output buffer is shorter than `frame_len`.
    #[error("output buffer holds {have} bytes but the frame needs {need}")]
    BufferTooSmall {
        /// `frame_len`.
        need: usize,
        /// The buffer's length.
        have: usize,
    },
    /// Source and destination addresses are of different IP versions.
    #[error("source and destination IP addresses are of different families")]
    MixedFamilies,
}

/// The payload byte at `i` bytes into the payload: a deterministic counting pattern.
#[inline]
pub const fn payload_byte(i: usize) -> u8 {
    i as u8
}

/// The smallest `frame_len` that fits `spec`'s headers (at least [`MIN_FRAME_LEN`]).
#[inline]
pub const fn min_frame_len(spec: &FrameSpec) -> usize {
    let l3 = match spec.src_ip {
        IpAddr::V4(_) => ipv4::HEADER_LEN,
        IpAddr::V6(_) => ipv6::HEADER_LEN,
    };
    let n = ethernet::HEADER_LEN + l3 + spec.proto.header_len();
    if n > MIN_FRAME_LEN { n } else { MIN_FRAME_LEN }
}

/// Writes the frame `spec` describes into the start of `buf` and returns its layout; a TCP
/// segment gets sequence number 0.
#[inline]
pub fn build(spec: &FrameSpec, buf: &mut [u8]) -> Result<Layout, BuildError> {
    build_with_seq(spec, 0, buf)
}

/// [`build`] with the TCP sequence number `tcp_seq` (ignored for UDP).
pub fn build_with_seq(
    spec: &FrameSpec,
    tcp_seq: u32,
    buf: &mut [u8],
) -> Result<Layout, BuildError> {
    let len = spec.frame_len;
    let min = min_frame_len(spec);
    if len < min {
        return Err(BuildError::FrameTooShort {
            frame_len: len,
            min,
        });
    }
    if len > MAX_FRAME_LEN {
        return Err(BuildError::FrameTooLong {
            frame_len: len,
            max: MAX_FRAME_LEN,
        });
    }
    if buf.len() < len {
        return Err(BuildError::BufferTooSmall {
            need: len,
            have: buf.len(),
        });
    }
    let frame = &mut buf[..len];
    let l3_offset = ethernet::HEADER_LEN;

    let mut eth = ethernet::Frame::new_unchecked(&mut *frame);
    eth.set_dst_addr(spec.dst_mac);
    eth.set_src_addr(spec.src_mac);

    // L3 header, and the pseudo-header sum for the transport checksum.
    let (l4_offset, pseudo) = match (spec.src_ip, spec.dst_ip) {
        (IpAddr::V4(src), IpAddr::V4(dst)) => {
            eth.set_ethertype(EtherType::Ipv4);
            let l4_len = len - l3_offset - ipv4::HEADER_LEN;
            let mut ip = ipv4::Packet::new_unchecked(&mut frame[l3_offset..]);
            ip.set_version_and_header_len(ipv4::HEADER_LEN);
            ip.set_dscp_ecn(0, 0);
            ip.set_total_len((ipv4::HEADER_LEN + l4_len) as u16);
            ip.set_ident(0);
            ip.set_frag(true, false, 0);
            ip.set_ttl(TTL);
            ip.set_protocol(spec.proto.protocol());
            ip.set_src_addr(src);
            ip.set_dst_addr(dst);
            ip.fill_checksum();
            let ph =
                checksum::pseudo_header_v4(src, dst, spec.proto.protocol().to_u8(), l4_len as u16);
            (l3_offset + ipv4::HEADER_LEN, ph)
        }
        (IpAddr::V6(src), IpAddr::V6(dst)) => {
            eth.set_ethertype(EtherType::Ipv6);
            let l4_len = len - l3_offset - ipv6::HEADER_LEN;
            let mut ip = ipv6::Packet::new_unchecked(&mut frame[l3_offset..]);
            ip.set_version_tc_flow(0, 0);
            ip.set_payload_len(l4_len as u16);
            ip.set_next_header(spec.proto.protocol());
            ip.set_hop_limit(TTL);
            ip.set_src_addr(src);
            ip.set_dst_addr(dst);
            let ph =
                checksum::pseudo_header_v6(src, dst, spec.proto.protocol().to_u8(), l4_len as u32);
            (l3_offset + ipv6::HEADER_LEN, ph)
        }
        _ => return Err(BuildError::MixedFamilies),
    };

    let payload_offset = l4_offset + spec.proto.header_len();
    for (i, b) in frame[payload_offset..].iter_mut().enumerate() {
        *b = payload_byte(i);
    }

    let seg = &mut frame[l4_offset..];
    match spec.proto {
        L4::Udp => {
            let l4_len = seg.len() as u16;
            let mut u = udp::Packet::new_unchecked(&mut *seg);
            u.set_src_port(spec.src_port);
            u.set_dst_port(spec.dst_port);
            u.set_len(l4_len);
            u.set_checksum(0);
            let c = checksum::finish(checksum::combine(pseudo, checksum::sum(seg)));
            // RFC 768: a computed zero is sent as all ones (zero means "no checksum").
            udp::Packet::new_unchecked(seg).set_checksum(if c == 0 { 0xffff } else { c });
        }
        L4::Tcp => {
            let mut t = tcp::Packet::new_unchecked(&mut *seg);
            t.set_src_port(spec.src_port);
            t.set_dst_port(spec.dst_port);
            t.set_seq_number(tcp_seq);
            t.set_ack_number(0);
            t.set_header_len(tcp::HEADER_LEN);
            t.set_flags(tcp::TcpFlags(tcp::TcpFlags::ACK | tcp::TcpFlags::PSH));
            t.set_window_len(TCP_WINDOW);
            t.set_checksum(0);
            t.set_urgent_at(0);
            let c = checksum::finish(checksum::combine(pseudo, checksum::sum(seg)));
            tcp::Packet::new_unchecked(seg).set_checksum(c);
        }
    }

    Ok(Layout {
        len,
        l3_offset,
        l4_offset,
        payload_offset,
        proto: spec.proto,
    })
}

/// Rewrites the source port of a frame [`build`] wrote and patches the transport checksum
/// incrementally (RFC 1624), leaving the frame as valid as a full rebuild would.
///
/// # Panics
/// If `buf` is shorter than `layout.len` (i.e. was not written by `build` with this layout).
#[inline]
pub fn vary_flow(buf: &mut [u8], layout: &Layout, src_port: u16) {
    let p = layout.src_port_offset();
    let c = layout.checksum_offset();
    let old = read_u16(&buf[p..]);
    let ck = read_u16(&buf[c..]);
    let mut new_ck = checksum::update(ck, old, src_port);
    if layout.proto == L4::Udp && new_ck == 0 {
        new_ck = 0xffff;
    }
    write_u16(&mut buf[p..], src_port);
    write_u16(&mut buf[c..], new_ck);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::LinkType;
    use crate::link::{NetworkProto, network_layer};
    use core::net::{Ipv4Addr, Ipv6Addr};
    use etherparse::{NetSlice, SlicedPacket, TransportSlice};
    use proptest::prelude::*;

    fn spec(v6: bool, proto: L4, frame_len: usize) -> FrameSpec {
        let (src_ip, dst_ip) = if v6 {
            (
                IpAddr::V6("2001:db8::1".parse().unwrap()),
                IpAddr::V6("2001:db8:ffff::2".parse().unwrap()),
            )
        } else {
            (
                IpAddr::V4(Ipv4Addr::new(10, 0, 0, 1)),
                IpAddr::V4(Ipv4Addr::new(192, 168, 7, 9)),
            )
        };
        FrameSpec {
            src_mac: "02:00:00:00:00:01".parse().unwrap(),
            dst_mac: "02:00:00:00:00:02".parse().unwrap(),
            src_ip,
            dst_ip,
            proto,
            src_port: 40000,
            dst_port: 4739,
            frame_len,
        }
    }

    /// Recomputes the transport checksum from scratch and returns (stored, computed).
    fn l4_checksum(frame: &[u8], layout: &Layout) -> (u16, u16) {
        let seg = &frame[layout.l4_offset..layout.len];
        let c = layout.checksum_offset();
        let stored = read_u16(&frame[c..]);
        let mut z = seg.to_vec();
        z[c - layout.l4_offset..c - layout.l4_offset + 2].fill(0);
        let proto = layout.proto.protocol().to_u8();
        let ph = match frame[layout.l3_offset] >> 4 {
            4 => {
                let ip = ipv4::Packet::new_checked(&frame[layout.l3_offset..]).unwrap();
                checksum::pseudo_header_v4(ip.src_addr(), ip.dst_addr(), proto, seg.len() as u16)
            }
            _ => {
                let ip = ipv6::Packet::new_checked(&frame[layout.l3_offset..]).unwrap();
                checksum::pseudo_header_v6(ip.src_addr(), ip.dst_addr(), proto, seg.len() as u32)
            }
        };
        let mut full = checksum::finish(checksum::combine(ph, checksum::sum(&z)));
        if layout.proto == L4::Udp && full == 0 {
            full = 0xffff;
        }
        (stored, full)
    }

    /// Parses a built frame with etherparse and checks every header and checksum.
    fn check_with_etherparse(s: &FrameSpec, seq: u32, frame: &[u8]) {
        let p = SlicedPacket::from_ethernet(frame).expect("etherparse parses the frame");
        let (src, dst): ([u8; 16], [u8; 16]);
        match p.net.expect("IP layer") {
            NetSlice::Ipv4(ip) => {
                let h = ip.header();
                assert_eq!(h.to_header().calc_header_checksum(), h.header_checksum());
                assert_eq!(IpAddr::V4(h.source_addr()), s.src_ip);
                assert_eq!(IpAddr::V4(h.destination_addr()), s.dst_ip);
                assert_eq!(usize::from(h.total_len()) + 14, s.frame_len);
                src = h.source_addr().to_ipv6_mapped().octets();
                dst = h.destination_addr().to_ipv6_mapped().octets();
            }
            NetSlice::Ipv6(ip) => {
                let h = ip.header();
                assert_eq!(IpAddr::V6(h.source_addr()), s.src_ip);
                assert_eq!(usize::from(h.payload_length()) + 54, s.frame_len);
                src = h.source_addr().octets();
                dst = h.destination_addr().octets();
            }
            other => panic!("unexpected net layer {other:?}"),
        }
        let v4 = |a: [u8; 16]| [a[12], a[13], a[14], a[15]];
        match (p.transport.expect("transport layer"), s.src_ip.is_ipv4()) {
            (TransportSlice::Tcp(t), is_v4) => {
                assert_eq!(s.proto, L4::Tcp);
                assert_eq!(
                    (t.source_port(), t.destination_port()),
                    (s.src_port, s.dst_port)
                );
                assert_eq!(t.sequence_number(), seq);
                assert!(t.ack() && t.psh() && !t.syn());
                let c = if is_v4 {
                    t.calc_checksum_ipv4(v4(src), v4(dst)).unwrap()
                } else {
                    t.calc_checksum_ipv6(src, dst).unwrap()
                };
                assert_eq!(c, t.checksum());
            }
            (TransportSlice::Udp(u), is_v4) => {
                assert_eq!(s.proto, L4::Udp);
                assert_eq!(
                    (u.source_port(), u.destination_port()),
                    (s.src_port, s.dst_port)
                );
                let h = u.to_header();
                let c = if is_v4 {
                    h.calc_checksum_ipv4_raw(v4(src), v4(dst), u.payload())
                        .unwrap()
                } else {
                    h.calc_checksum_ipv6_raw(src, dst, u.payload()).unwrap()
                };
                assert_eq!(c, u.checksum());
            }
            (other, _) => panic!("unexpected transport {other:?}"),
        }
    }

    /// Parses a built frame with tapflow's own views.
    fn check_with_views(s: &FrameSpec, frame: &[u8], layout: &Layout) {
        let nl = network_layer(LinkType::Ethernet, frame).unwrap();
        assert_eq!(nl.offset, layout.l3_offset);
        let l4 = match nl.proto {
            NetworkProto::Ipv4 => {
                let ip = ipv4::Packet::new_checked(&frame[nl.offset..]).unwrap();
                assert!(ip.verify_checksum());
                assert_eq!(ip.protocol(), s.proto.protocol());
                ip.into_payload()
            }
            NetworkProto::Ipv6 => {
                let ip = ipv6::Packet::new_checked(&frame[nl.offset..]).unwrap();
                let (proto, off, frag) = ip.upper_layer().unwrap();
                assert_eq!((proto, off, frag), (s.proto.protocol(), 40, None));
                ip.into_payload()
            }
        };
        let ports = match s.proto {
            L4::Udp => {
                let u = udp::Packet::new_checked(l4).unwrap();
                assert_eq!(usize::from(u.len()), l4.len());
                (u.src_port(), u.dst_port())
            }
            L4::Tcp => {
                let t = tcp::Packet::new_checked(l4).unwrap();
                assert_eq!(t.flags().to_string(), "[P.]");
                (t.src_port(), t.dst_port())
            }
        };
        assert_eq!(ports, (s.src_port, s.dst_port));
        let (stored, full) = l4_checksum(frame, layout);
        assert_eq!(stored, full);
    }

    #[test]
    fn builds_all_four_stacks() {
        let mut buf = [0u8; MAX_FRAME_LEN];
        for v6 in [false, true] {
            for proto in [L4::Udp, L4::Tcp] {
                for frame_len in [min_frame_len(&spec(v6, proto, 0)), 61, 64, 1514, 9000] {
                    let s = spec(v6, proto, frame_len);
                    let Ok(layout) = build(&s, &mut buf) else {
                        assert!(frame_len < min_frame_len(&s));
                        continue;
                    };
                    assert_eq!(layout.len, frame_len);
                    check_with_views(&s, &buf[..frame_len], &layout);
                    check_with_etherparse(&s, 0, &buf[..frame_len]);
                }
            }
        }
    }

    #[test]
    fn construct_fixture() {
        // 60-byte IPv4/UDP frame 10.0.0.1:40000 -> 192.168.7.9:4739: 18 payload bytes 0..=17.
        static FRAME_BYTES: [u8; 60] = [
            0x02, 0x00, 0x00, 0x00, 0x00, 0x02, 0x02, 0x00, 0x00, 0x00, 0x00, 0x01, 0x08, 0x00,
            0x45, 0x00, 0x00, 0x2e, 0x00, 0x00, 0x40, 0x00, 0x40, 0x11, 0x69, 0x0d, 0x0a, 0x00,
            0x00, 0x01, 0xc0, 0xa8, 0x07, 0x09, 0x9c, 0x40, 0x12, 0x83, 0x00, 0x1a, 0x36, 0xf3,
            0x00, 0x01, 0x02, 0x03, 0x04, 0x05, 0x06, 0x07, 0x08, 0x09, 0x0a, 0x0b, 0x0c, 0x0d,
            0x0e, 0x0f, 0x10, 0x11,
        ];
        let mut buf = [0u8; 60];
        let layout = build(&spec(false, L4::Udp, 60), &mut buf).unwrap();
        assert_eq!(
            layout,
            Layout {
                len: 60,
                l3_offset: 14,
                l4_offset: 34,
                payload_offset: 42,
                proto: L4::Udp
            }
        );
        assert_eq!(
            (layout.src_port_offset(), layout.checksum_offset()),
            (34, 40)
        );
        assert_eq!(buf, FRAME_BYTES);
    }

    #[test]
    fn errors_name_the_limit() {
        let mut buf = [0u8; 100];
        let s = spec(true, L4::Tcp, 60);
        let e = build(&s, &mut buf).unwrap_err();
        assert_eq!(
            e,
            BuildError::FrameTooShort {
                frame_len: 60,
                min: 74
            }
        );
        assert_eq!(
            e.to_string(),
            "frame length 60 is too short: this protocol stack needs at least 74"
        );
        assert_eq!(
            build(&spec(false, L4::Udp, 59), &mut buf),
            Err(BuildError::FrameTooShort {
                frame_len: 59,
                min: 60
            })
        );
        assert_eq!(
            build(&spec(false, L4::Udp, 9001), &mut buf),
            Err(BuildError::FrameTooLong {
                frame_len: 9001,
                max: 9000
            })
        );
        assert_eq!(
            build(&spec(false, L4::Udp, 101), &mut buf),
            Err(BuildError::BufferTooSmall {
                need: 101,
                have: 100
            })
        );
        let mut mixed = spec(false, L4::Udp, 60);
        mixed.dst_ip = IpAddr::V6(Ipv6Addr::LOCALHOST);
        assert_eq!(build(&mixed, &mut buf), Err(BuildError::MixedFamilies));
    }

    proptest! {
        #[test]
        fn vary_flow_equals_rebuild(v6 in any::<bool>(), tcp in any::<bool>(),
                                    frame_len in 74usize..1600, base in any::<u16>(),
                                    ports in proptest::collection::vec(any::<u16>(), 1..20)) {
            let proto = if tcp { L4::Tcp } else { L4::Udp };
            let mut s = spec(v6, proto, frame_len);
            s.src_port = base;
            let mut buf = vec![0u8; frame_len];
            let layout = build(&s, &mut buf).unwrap();
            let mut fresh = vec![0u8; frame_len];
            for p in ports {
                vary_flow(&mut buf, &layout, p);
                s.src_port = p;
                build(&s, &mut fresh).unwrap();
                prop_assert_eq!(&buf, &fresh);
                let (stored, full) = l4_checksum(&buf, &layout);
                prop_assert_eq!(stored, full);
            }
        }

        #[test]
        fn built_frames_parse(v6 in any::<bool>(), tcp in any::<bool>(), frame_len in 60usize..3000,
                              sp in any::<u16>(), dp in any::<u16>(), seq in any::<u32>()) {
            let proto = if tcp { L4::Tcp } else { L4::Udp };
            let mut s = spec(v6, proto, frame_len.max(74));
            s.src_port = sp;
            s.dst_port = dp;
            let mut buf = vec![0u8; s.frame_len];
            let layout = build_with_seq(&s, seq, &mut buf).unwrap();
            check_with_views(&s, &buf, &layout);
            check_with_etherparse(&s, seq, &buf);
        }
    }
}
