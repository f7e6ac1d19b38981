//! Traffic the tests build themselves with the project's packet builder (`tapflow_wire::build`),
//! so that every check of real-world input also runs without the corpus: conversations of UDP
//! and TCP over IPv4 and IPv6 in both directions, the same frames under the other link types
//! tapflow reads, VLAN tags, IP fragments, and the pcap and pcapng files that hold them.
//!
//! Shared by the tests of every crate (`#[path]`); it uses `tapflow_wire` only.

#![allow(dead_code)]

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

use tapflow_wire::LinkType;
use tapflow_wire::build::{self, FrameSpec, L4};
use tapflow_wire::{ipv4, pcap, pcapng};

/// Ethernet header length; every frame built here starts with one.
const ETH: usize = 14;

/// One packet of a trace.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Packet {
    /// pcapng interface (0 in a pcap).
    pub iface: u32,
    /// Arrival time, ns since 1970.
    pub ts_ns: u64,
    /// The bytes kept.
    pub data: Vec<u8>,
    /// The length on the wire.
    pub len: u32,
}

impl Packet {
    /// A whole frame on interface 0.
    pub fn new(ts_ns: u64, data: Vec<u8>) -> Packet {
        let len = data.len() as u32;
        Packet {
            iface: 0,
            ts_ns,
            data,
            len,
        }
    }

    /// The packet with only its first `snaplen` bytes kept.
    pub fn cut(mut self, snaplen: usize) -> Packet {
        self.data.truncate(snaplen);
        self
    }
}

/// One conversation between a client and a server over UDP or TCP.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Conversation {
    /// UDP or TCP.
    pub proto: L4,
    /// The side that sends first.
    pub client: SocketAddr,
    /// The side that answers.
    pub server: SocketAddr,
}

/// Server ports the conversations use in turn.
pub const SERVICES: [u16; 6] = [53, 80, 123, 443, 4739, 8080];

impl Conversation {
    /// The `n`th of a fixed mix: TCP for even `n`, UDP for odd; every third over IPv6; a client
    /// address of its own (for `n` below 2^24) talking to one of 13 servers on one of
    /// [`SERVICES`].
    pub fn nth(n: u32) -> Conversation {
        let v6 = n % 3 == 2;
        let server_host = 1 + (n % 13) as u8;
        let (client, server) = if v6 {
            let c = Ipv6Addr::new(0x2001, 0xdb8, 1, 0, 0, 0, (n >> 16) as u16, n as u16);
            let s = Ipv6Addr::new(0x2001, 0xdb8, 2, 0, 0, 0, 0, u16::from(server_host));
            (IpAddr::V6(c), IpAddr::V6(s))
        } else {
            let c = Ipv4Addr::new(10, (n >> 16) as u8, (n >> 8) as u8, n as u8);
            (
                IpAddr::V4(c),
                IpAddr::V4(Ipv4Addr::new(192, 0, 2, server_host)),
            )
        };
        Conversation {
            proto: if n.is_multiple_of(2) {
                L4::Tcp
            } else {
                L4::Udp
            },
            client: SocketAddr::new(client, 1024 + (n % 64_000) as u16),
            server: SocketAddr::new(server, SERVICES[(n / 2) as usize % SERVICES.len()]),
        }
    }

    /// An Ethernet frame of this conversation from the client (or the server), `frame_len`
    /// bytes long or as short as its headers allow.
    pub fn frame(&self, from_client: bool, frame_len: usize, tcp_seq: u32) -> Vec<u8> {
        let (src, dst) = if from_client {
            (self.client, self.server)
        } else {
            (self.server, self.client)
        };
        let mac = |host: bool| -> tapflow_wire::ethernet::EthernetAddress {
            let last = if host { 1 } else { 2 };
            format!("02:00:00:00:00:0{last}").parse().unwrap()
        };
        let mut spec = FrameSpec {
            src_mac: mac(from_client),
            dst_mac: mac(!from_client),
            src_ip: src.ip(),
            dst_ip: dst.ip(),
            proto: self.proto,
            src_port: src.port(),
            dst_port: dst.port(),
            frame_len,
        };
        spec.frame_len = frame_len.clamp(build::min_frame_len(&spec), build::MAX_FRAME_LEN);
        let mut f = vec![0; spec.frame_len];
        build::build_with_seq(&spec, tcp_seq, &mut f).expect("a frame the builder accepts");
        f
    }
}

/// `flows` conversations ([`Conversation::nth`] from `first` on) of `packets` frames each,
/// interleaved: round `k` carries frame `k` of every conversation, `gap_ns` apart from
/// `start_ns` on. Every third frame (`k % 3 == 1`) is the server's answer; lengths spread over
/// 60..=1514 bytes.
pub fn conversations(
    first: u32,
    flows: u32,
    packets: u32,
    start_ns: u64,
    gap_ns: u64,
) -> Vec<Packet> {
    let mut out = Vec::with_capacity((flows * packets) as usize);
    for k in 0..packets {
        for n in first..first + flows {
            let c = Conversation::nth(n);
            let len = 60 + (n as usize * 131 + k as usize * 977) % 1455;
            let ts = start_ns + out.len() as u64 * gap_ns;
            out.push(Packet::new(ts, c.frame(k % 3 != 1, len, k * 1000)));
        }
    }
    out
}

/// An Ethernet frame built here (untagged) as `linktype` frames the same IP packet: Ethernet as
/// it is; raw IP; Linux cooked v1 and v2 headers; BSD loopback with the address family in host
/// (NULL, little-endian here) or network (LOOP) byte order.
pub fn relink(frame: &[u8], linktype: LinkType) -> Vec<u8> {
    let ethertype = [frame[12], frame[13]];
    let ip = &frame[ETH..];
    let v6 = ethertype == [0x86, 0xdd];
    // BSD AF_INET and AF_INET6 (NetBSD's and OpenBSD's 24; tshark and libpcap know all three).
    let af: u32 = if v6 { 24 } else { 2 };
    let mut out = match linktype {
        LinkType::Ethernet => return frame.to_vec(),
        LinkType::Raw | LinkType::Ipv4 | LinkType::Ipv6 => Vec::new(),
        LinkType::LinuxSll => {
            // Packet type (to us), ARPHRD_ETHER, address length, address (8), protocol.
            let mut h = vec![0, 0, 0, 1, 0, 6];
            h.extend_from_slice(&frame[6..12]);
            h.extend_from_slice(&[0, 0]);
            h.extend_from_slice(&ethertype);
            h
        }
        LinkType::LinuxSll2 => {
            // Protocol, reserved, ifindex, ARPHRD_ETHER, packet type, address length, address.
            let mut h = ethertype.to_vec();
            h.extend_from_slice(&[0, 0, 0, 0, 0, 1, 0, 1, 0, 6]);
            h.extend_from_slice(&frame[6..12]);
            h.extend_from_slice(&[0, 0]);
            h
        }
        LinkType::Null => af.to_le_bytes().to_vec(),
        LinkType::Loop => af.to_be_bytes().to_vec(),
        other => panic!("no framing for {other} here"),
    };
    out.extend_from_slice(ip);
    out
}

/// Every packet of `packets` (Ethernet, untagged) framed for `linktype` (see [`relink`]) and cut
/// to `snaplen` bytes.
pub fn relink_all(packets: &[Packet], linktype: LinkType, snaplen: u32) -> Vec<Packet> {
    packets
        .iter()
        .map(|p| Packet::new(p.ts_ns, relink(&p.data, linktype)).cut(snaplen as usize))
        .collect()
}

/// `packets` (Ethernet, untagged) spread over the pcapng `interfaces` (link type, snaplen) in
/// turn, each framed for its interface's link type and cut to its snaplen.
pub fn on_interfaces(packets: &[Packet], interfaces: &[(LinkType, u32)]) -> Vec<Packet> {
    packets
        .iter()
        .enumerate()
        .map(|(i, p)| {
            let (linktype, snaplen) = interfaces[i % interfaces.len()];
            let mut q = Packet::new(p.ts_ns, relink(&p.data, linktype)).cut(snaplen as usize);
            q.iface = (i % interfaces.len()) as u32;
            q
        })
        .collect()
}

/// The frame with 802.1Q tags after its addresses, outermost first (the outermost an 802.1ad
/// S-tag when there are two or more).
pub fn with_vlans(frame: &[u8], ids: &[u16]) -> Vec<u8> {
    let mut out = frame[..12].to_vec();
    for (i, id) in ids.iter().enumerate() {
        let tpid: u16 = if i == 0 && ids.len() > 1 {
            0x88a8
        } else {
            0x8100
        };
        out.extend_from_slice(&tpid.to_be_bytes());
        out.extend_from_slice(&(id & 0x0fff).to_be_bytes());
    }
    out.extend_from_slice(&frame[12..]);
    out
}

/// The frame with its IP protocol (IPv4) or next header (IPv6, no extension headers) set to
/// `proto`: an ICMP packet (1, 58) or another protocol, for filters; the transport bytes stay.
pub fn with_protocol(frame: &[u8], proto: u8) -> Vec<u8> {
    let mut f = frame.to_vec();
    if f[12..14] == [0x08, 0x00] {
        let mut ip = ipv4::Packet::new_unchecked(&mut f[ETH..]);
        ip.set_protocol(ipv4::IpProtocol::from_u8(proto));
        ip.fill_checksum();
    } else {
        f[ETH + 6] = proto;
    }
    f
}

/// An ARP request from 10.0.0.1 for 10.0.0.2: a frame that is not IP.
pub fn arp_frame() -> Vec<u8> {
    let mut f = vec![0xff; 6];
    f.extend_from_slice(&[0x02, 0, 0, 0, 0, 1, 0x08, 0x06]);
    f.extend_from_slice(&[0, 1, 0x08, 0, 6, 4, 0, 1]);
    f.extend_from_slice(&[0x02, 0, 0, 0, 0, 1, 10, 0, 0, 1]);
    f.extend_from_slice(&[0, 0, 0, 0, 0, 0, 10, 0, 0, 2]);
    f.resize(60, 0);
    f
}

/// An IPv4 frame cut into fragments of at most `chunk` bytes of IP payload (a multiple of 8),
/// each with identification `ident`; the first carries the transport header. Short fragments
/// are padded to Ethernet's 60 bytes.
pub fn fragments_v4(frame: &[u8], chunk: usize, ident: u16) -> Vec<Vec<u8>> {
    assert!(chunk > 0 && chunk.is_multiple_of(8), "chunk {chunk}");
    let ip = ipv4::Packet::new_checked(&frame[ETH..]).expect("an IPv4 frame");
    let hl = ip.header_len();
    let payload = ip.payload();
    let n = payload.len().div_ceil(chunk);
    payload
        .chunks(chunk)
        .enumerate()
        .map(|(i, part)| {
            let mut f = frame[..ETH + hl].to_vec();
            f.extend_from_slice(part);
            let mut p = ipv4::Packet::new_unchecked(&mut f[ETH..]);
            p.set_total_len((hl + part.len()) as u16);
            p.set_ident(ident);
            p.set_frag(false, i + 1 < n, (i * chunk) as u16);
            p.fill_checksum();
            f.resize(f.len().max(build::MIN_FRAME_LEN), 0);
            f
        })
        .collect()
}

/// An IPv6 frame (no extension headers) cut into fragments of at most `chunk` bytes of
/// fragmentable payload (a multiple of 8), each behind a fragment header with `ident`.
pub fn fragments_v6(frame: &[u8], chunk: usize, ident: u32) -> Vec<Vec<u8>> {
    assert!(chunk > 0 && chunk.is_multiple_of(8), "chunk {chunk}");
    assert_eq!(frame[12..14], [0x86, 0xdd], "an IPv6 frame");
    let next = frame[ETH + 6];
    let plen = usize::from(u16::from_be_bytes([frame[ETH + 4], frame[ETH + 5]]));
    let payload = &frame[ETH + 40..ETH + 40 + plen];
    let n = payload.len().div_ceil(chunk);
    payload
        .chunks(chunk)
        .enumerate()
        .map(|(i, part)| {
            let mut f = frame[..ETH + 40].to_vec();
            f[ETH + 6] = 44;
            f[ETH + 4..ETH + 6].copy_from_slice(&((8 + part.len()) as u16).to_be_bytes());
            let off_m = (i * chunk) as u16 | u16::from(i + 1 < n);
            f.extend_from_slice(&[next, 0]);
            f.extend_from_slice(&off_m.to_be_bytes());
            f.extend_from_slice(&ident.to_be_bytes());
            f.extend_from_slice(part);
            f.resize(f.len().max(build::MIN_FRAME_LEN), 0);
            f
        })
        .collect()
}

/// A classic pcap file: µs or ns timestamps, either byte order.
pub fn pcap_file(
    linktype: LinkType,
    nanos: bool,
    big_endian: bool,
    snaplen: u32,
    packets: &[Packet],
) -> Vec<u8> {
    let mut out = vec![0; pcap::HEADER_LEN];
    pcap::FileHeader {
        nanos,
        big_endian,
        version_major: pcap::VERSION_MAJOR,
        version_minor: pcap::VERSION_MINOR,
        thiszone: 0,
        sigfigs: 0,
        snaplen,
        linktype,
        link_info: 0,
    }
    .emit(&mut out);
    for p in packets {
        let sub = p.ts_ns % 1_000_000_000;
        let mut h = [0; pcap::RECORD_HEADER_LEN];
        pcap::RecordHeader {
            ts_sec: (p.ts_ns / 1_000_000_000) as u32,
            ts_frac: (if nanos { sub } else { sub / 1000 }) as u32,
            caplen: p.data.len() as u32,
            len: p.len,
        }
        .emit(&mut h, big_endian);
        out.extend_from_slice(&h);
        out.extend_from_slice(&p.data);
    }
    out
}

/// A pcap file [`pcap_file`] wrote from `packets`, cut 10 bytes into the data of packet `k`: a
/// capture cut short in the middle of a packet, with `k` whole packets before the cut.
pub fn cut_short(file: &[u8], packets: &[Packet], k: usize) -> Vec<u8> {
    let from_k: usize = packets[k..]
        .iter()
        .map(|p| pcap::RECORD_HEADER_LEN + p.data.len())
        .sum();
    file[..file.len() - from_k + pcap::RECORD_HEADER_LEN + 10].to_vec()
}

/// A pcapng file: one section, an interface `ifN` per entry of `interfaces` (link type,
/// snaplen), each packet on its `iface`.
pub fn pcapng_file(interfaces: &[(LinkType, u32)], packets: &[Packet]) -> Vec<u8> {
    let mut out = Vec::new();
    pcapng::write_shb(&mut out, "tapflow tests");
    for (i, (linktype, snaplen)) in interfaces.iter().enumerate() {
        let name = format!("if{i}");
        pcapng::write_idb(
            &mut out,
            &pcapng::IdbOptions {
                linktype: *linktype,
                snaplen: *snaplen,
                name: Some(&name),
                filter: None,
                hardware: None,
            },
        );
    }
    for p in packets {
        pcapng::write_epb(&mut out, p.iface, p.ts_ns, &p.data, p.len, None, None);
    }
    out
}
