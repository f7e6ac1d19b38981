//! The Linux cooked capture v2 header (`LINKTYPE_LINUX_SLL2`, 276), which captures on all
//! interfaces at once (`-i any`) carry instead of a link-layer header, and the socket filter
//! such a capture runs in the kernel.
//!
//! ```text
//! +-----------------+-----------------+
//! |  Protocol (2)   |  Reserved (2)   |   EtherType of the payload; 0
//! +-----------------+-----------------+
//! |        Interface index (4)        |   the interface the packet crossed
//! +-----------------+--------+--------+
//! |  ARPHRD_ (2)    |pkttype | addrlen|   link type; PACKET_HOST ... PACKET_OUTGOING
//! +-----------------+--------+--------+
//! |        Link-layer address (8)     |   the sender's, padded or cut to 8 bytes
//! +-----------------------------------+
//! ```
//!
//! All fields are big-endian (tcpdump.org's LINKTYPE_LINUX_SLL2 page). The kernel fills the
//! same facts into the `sockaddr_ll` it puts before each packet of a `SOCK_DGRAM` packet
//! socket, whose packets start at the network header.

use crate::bytes::{read_u16, read_u32, write_u16, write_u32};
use crate::cbpf::{self, Insn};

/// The buffer is shorter than the 20-byte header.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("Linux cooked v2 header truncated: shorter than 20 bytes")]
pub struct Truncated;

mod field {
    use core::ops::Range;
    pub const PROTOCOL: Range<usize> = 0..2;
    pub const RESERVED: Range<usize> = 2..4;
    pub const IFINDEX: Range<usize> = 4..8;
    pub const HATYPE: Range<usize> = 8..10;
    pub const PKTTYPE: usize = 10;
    pub const HALEN: usize = 11;
    pub const ADDR: Range<usize> = 12..20;
}

/// Length of the header.
pub const HEADER_LEN: usize = field::ADDR.end;

/// Bytes of the link-layer address field.
pub const ADDR_LEN: usize = field::ADDR.end - field::ADDR.start;

/// `PACKET_HOST`: to this host.
pub const PACKET_HOST: u8 = 0;
/// `PACKET_BROADCAST`: to everyone on the link.
pub const PACKET_BROADCAST: u8 = 1;
/// `PACKET_MULTICAST`: to a group.
pub const PACKET_MULTICAST: u8 = 2;
/// `PACKET_OTHERHOST`: to another host, seen in promiscuous mode.
pub const PACKET_OTHERHOST: u8 = 3;
/// `PACKET_OUTGOING`: sent by this host.
pub const PACKET_OUTGOING: u8 = 4;

/// The direction word tcpdump prints for a packet type (`In`, `Out`, `B`, `M`, `P`).
pub fn direction_name(pkttype: u8) -> &'static str {
    match pkttype {
        PACKET_HOST => "In",
        PACKET_BROADCAST => "B",
        PACKET_MULTICAST => "M",
        PACKET_OTHERHOST => "P",
        PACKET_OUTGOING => "Out",
        _ => "?",
    }
}

/// A view of a cooked v2 header and what follows it.
#[derive(Debug, Clone, Copy)]
pub struct Header<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> Header<T> {
    /// Wraps a buffer without checks; getters may panic if it is short.
    #[inline]
    pub const fn new_unchecked(buffer: T) -> Header<T> {
        Header { buffer }
    }

    /// Wraps a buffer after [`check_len`](Self::check_len).
    #[inline]
    pub fn new_checked(buffer: T) -> Result<Header<T>, Truncated> {
        let h = Header::new_unchecked(buffer);
        h.check_len()?;
        Ok(h)
    }

    /// Checks that the 20 header bytes are present; after this no getter panics.
    #[inline]
    pub fn check_len(&self) -> Result<(), Truncated> {
        if self.buffer.as_ref().len() < HEADER_LEN {
            Err(Truncated)
        } else {
            Ok(())
        }
    }

    /// The EtherType of the payload (`sll_protocol`).
    #[inline]
    pub fn protocol(&self) -> u16 {
        read_u16(&self.buffer.as_ref()[field::PROTOCOL])
    }

    /// The interface index (`sll_ifindex`).
    #[inline]
    pub fn ifindex(&self) -> u32 {
        read_u32(&self.buffer.as_ref()[field::IFINDEX])
    }

    /// The interface's `ARPHRD_` type (`sll_hatype`: 1 Ethernet, 772 loopback, ...).
    #[inline]
    pub fn hatype(&self) -> u16 {
        read_u16(&self.buffer.as_ref()[field::HATYPE])
    }

    /// `PACKET_HOST` ... `PACKET_OUTGOING` (`sll_pkttype`).
    #[inline]
    pub fn pkttype(&self) -> u8 {
        self.buffer.as_ref()[field::PKTTYPE]
    }

    /// The length of the link-layer address (`sll_halen`; may exceed the 8 bytes kept).
    #[inline]
    pub fn halen(&self) -> u8 {
        self.buffer.as_ref()[field::HALEN]
    }

    /// The sender's link-layer address, as far as the header keeps it.
    #[inline]
    pub fn addr(&self) -> &[u8] {
        let n = usize::from(self.halen()).min(ADDR_LEN);
        &self.buffer.as_ref()[field::ADDR.start..field::ADDR.start + n]
    }

    /// The bytes after the header: the network-layer packet.
    #[inline]
    pub fn payload(&self) -> &[u8] {
        &self.buffer.as_ref()[HEADER_LEN..]
    }
}

/// The fields of a cooked v2 header, as `sockaddr_ll` gives them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Repr {
    /// EtherType of the payload.
    pub protocol: u16,
    /// Interface index.
    pub ifindex: u32,
    /// `ARPHRD_` type of the interface.
    pub hatype: u16,
    /// `PACKET_HOST` ... `PACKET_OUTGOING`.
    pub pkttype: u8,
    /// Length of the address (kept up to 8 bytes in `addr`).
    pub halen: u8,
    /// The sender's link-layer address, zero-padded.
    pub addr: [u8; ADDR_LEN],
}

impl Repr {
    /// Reads a header (the reserved field is not checked).
    pub fn parse<T: AsRef<[u8]>>(h: &Header<T>) -> Repr {
        let mut addr = [0; ADDR_LEN];
        addr.copy_from_slice(&h.buffer.as_ref()[field::ADDR]);
        Repr {
            protocol: h.protocol(),
            ifindex: h.ifindex(),
            hatype: h.hatype(),
            pkttype: h.pkttype(),
            halen: h.halen(),
            addr,
        }
    }

    /// Writes the 20 header bytes.
    #[inline]
    pub fn emit(&self, out: &mut [u8; HEADER_LEN]) {
        write_u16(&mut out[field::PROTOCOL], self.protocol);
        out[field::RESERVED].fill(0);
        write_u32(&mut out[field::IFINDEX], self.ifindex);
        write_u16(&mut out[field::HATYPE], self.hatype);
        out[field::PKTTYPE] = self.pkttype;
        out[field::HALEN] = self.halen;
        out[field::ADDR].copy_from_slice(&self.addr);
    }
}

/// `SKF_AD_OFF`: ancillary loads start here (-0x1000 as the kernel's u32 `k`).
const SKF_AD_OFF: u32 = 0xffff_f000;
/// `SKF_AD_PROTOCOL`: `skb->protocol`, in host order.
const SKF_AD_PROTOCOL: u32 = 0;
/// `SKF_AD_PKTTYPE`: `skb->pkt_type`.
const SKF_AD_PKTTYPE: u32 = 4;
/// `SKF_AD_IFINDEX`: `skb->dev->ifindex`.
const SKF_AD_IFINDEX: u32 = 8;
/// `SKF_AD_HATYPE`: `skb->dev->type`, the interface's `ARPHRD_` type.
const SKF_AD_HATYPE: u32 = 28;
/// `ARPHRD_LOOPBACK`.
const ARPHRD_LOOPBACK: u32 = 772;

/// What every cooked socket's program starts with: the copy of a loopback packet going out is
/// refused. Loopback hands each packet to `any` twice, going out and coming in; tcpdump shows
/// it once (libpcap drops the outgoing copy in user space), and so does tapflow, in the kernel.
pub const LOOPBACK_OUTGOING_SKIPPED: [Insn; 5] = [
    Insn::stmt(cbpf::LD_W_ABS, SKF_AD_OFF + SKF_AD_PKTTYPE),
    Insn::jump(cbpf::JEQ_K, PACKET_OUTGOING as u32, 0, 3),
    Insn::stmt(cbpf::LD_W_ABS, SKF_AD_OFF + SKF_AD_HATYPE),
    Insn::jump(cbpf::JEQ_K, ARPHRD_LOOPBACK, 0, 1),
    Insn::stmt(cbpf::RET_K, 0),
];

/// A load a socket filter on a cooked socket cannot make.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error(
    "instruction {at} reads byte {offset} of the cooked header, which the kernel shows only \
     for the protocol, interface index and packet type"
)]
pub struct HeaderLoad {
    /// The instruction.
    pub at: usize,
    /// The offset it reads in the header.
    pub offset: u32,
}

/// Rewrites a program written for cooked v2 frames into the program a `SOCK_DGRAM` packet
/// socket runs, where the packet starts at the network header: loads of the payload move 20
/// bytes down, and loads of the protocol, interface index and packet type become the kernel's
/// ancillary loads (`SKF_AD_PROTOCOL`, `SKF_AD_IFINDEX`, `SKF_AD_PKTTYPE`), as libpcap does for
/// `-i any`. Any other read of the header cannot run in the kernel: an error names it. The
/// result starts with [`LOOPBACK_OUTGOING_SKIPPED`].
pub fn for_cooked_socket(prog: &[Insn]) -> Result<Vec<Insn>, HeaderLoad> {
    let header = HEADER_LEN as u32;
    let moved: Result<Vec<Insn>, HeaderLoad> = prog
        .iter()
        .enumerate()
        .map(|(at, &i)| {
            let moved = |i: Insn| Insn {
                k: i.k - header,
                ..i
            };
            let bad = HeaderLoad { at, offset: i.k };
            match i.code {
                // Ancillary loads already (as libpcap, whatever the mode).
                _ if i.k >= SKF_AD_OFF => Ok(i),
                cbpf::LD_W_ABS
                | cbpf::LD_H_ABS
                | cbpf::LD_B_ABS
                | cbpf::LD_W_IND
                | cbpf::LD_H_IND
                | cbpf::LD_B_IND
                | cbpf::LDX_MSH
                    if i.k >= header =>
                {
                    Ok(moved(i))
                }
                cbpf::LD_H_ABS if i.k == field::PROTOCOL.start as u32 => {
                    Ok(ancillary(i, SKF_AD_PROTOCOL))
                }
                cbpf::LD_W_ABS if i.k == field::IFINDEX.start as u32 => {
                    Ok(ancillary(i, SKF_AD_IFINDEX))
                }
                cbpf::LD_B_ABS if i.k == field::PKTTYPE as u32 => Ok(ancillary(i, SKF_AD_PKTTYPE)),
                cbpf::LD_W_ABS
                | cbpf::LD_H_ABS
                | cbpf::LD_B_ABS
                | cbpf::LD_W_IND
                | cbpf::LD_H_IND
                | cbpf::LD_B_IND
                | cbpf::LDX_MSH => Err(bad),
                _ => Ok(i),
            }
        })
        .collect();
    Ok([&LOOPBACK_OUTGOING_SKIPPED[..], &moved?].concat())
}

fn ancillary(i: Insn, what: u32) -> Insn {
    Insn {
        k: SKF_AD_OFF + what,
        ..i
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::LinkType;
    use crate::link::{NetworkProto, network_layer};

    // tcpdump 4.99 -i any (LINKTYPE_LINUX_SLL2) in a namespace: a UDP datagram 10.9.0.1 → .2
    // port 9 arriving on veth ifindex 2, and the ICMP port unreachable going out on it; tshark
    // reads sll.pkttype 0 and 4, sll.ifindex 2, sll.hatype 1, sll.halen 6.
    static UDP_IN: [u8; 53] = [
        0x08, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x02, 0x00, 0x01, 0x00, 0x06, 0x7a, 0xd1, 0xc6,
        0x34, 0x9a, 0x5f, 0x00, 0x00, 0x45, 0x00, 0x00, 0x21, 0xbc, 0x1e, 0x40, 0x00, 0x40, 0x11,
        0x6a, 0x99, 0x0a, 0x09, 0x00, 0x01, 0x0a, 0x09, 0x00, 0x02, 0xbc, 0x6d, 0x00, 0x09, 0x00,
        0x0d, 0x14, 0x33, 0x68, 0x65, 0x6c, 0x6c, 0x6f,
    ];
    static ICMP_OUT_HEAD: [u8; 24] = [
        0x08, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x02, 0x00, 0x01, 0x04, 0x06, 0x6e, 0xf9, 0x8d,
        0x01, 0xfe, 0x02, 0x00, 0x00, 0x45, 0xc0, 0x00, 0x3d,
    ];
    // The same on loopback (ARPHRD_LOOPBACK 772, ifindex 1, an all-zero address).
    static LO_HEAD: [u8; 20] = [
        0x08, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x01, 0x03, 0x04, 0x00, 0x06, 0, 0, 0, 0, 0, 0,
        0, 0,
    ];

    #[test]
    fn deconstruct_tcpdump_headers() {
        let h = Header::new_checked(&UDP_IN[..]).unwrap();
        assert_eq!(
            (
                h.protocol(),
                h.ifindex(),
                h.hatype(),
                h.pkttype(),
                h.halen()
            ),
            (0x0800, 2, 1, PACKET_HOST, 6)
        );
        assert_eq!(h.addr(), [0x7a, 0xd1, 0xc6, 0x34, 0x9a, 0x5f]);
        assert_eq!(h.payload()[0], 0x45);
        assert_eq!(direction_name(h.pkttype()), "In");
        let o = Header::new_checked(&ICMP_OUT_HEAD[..]).unwrap();
        assert_eq!(
            (o.pkttype(), direction_name(o.pkttype())),
            (PACKET_OUTGOING, "Out")
        );
        let lo = Header::new_checked(&LO_HEAD[..]).unwrap();
        assert_eq!(
            (lo.ifindex(), lo.hatype(), lo.addr()),
            (1, 772, &[0u8; 6][..])
        );
        assert_eq!(Header::new_checked(&UDP_IN[..19]).unwrap_err(), Truncated);
    }

    #[test]
    fn parse_and_emit_round_trip_byte_for_byte() {
        for bytes in [&UDP_IN[..20], &ICMP_OUT_HEAD[..20], &LO_HEAD[..]] {
            let r = Repr::parse(&Header::new_checked(bytes).unwrap());
            let mut out = [0xaa; HEADER_LEN];
            r.emit(&mut out);
            assert_eq!(&out[..], bytes);
        }
    }

    #[test]
    fn the_flow_parser_finds_ip_behind_it() {
        let nl = network_layer(LinkType::LinuxSll2, &UDP_IN).unwrap();
        assert_eq!(
            (nl.offset, nl.proto, nl.vlan),
            (20, NetworkProto::Ipv4, None)
        );
        let f = crate::flowkey::FlowFields::of_frame(LinkType::LinuxSll2, &UDP_IN, 53).unwrap();
        assert_eq!((f.proto, f.sport, f.dport), (17, 48237, 9));
        assert_eq!(&f.src[..4], &[10, 9, 0, 1]);
    }

    #[test]
    fn a_cooked_program_moves_to_the_network_header() {
        // `udp port 9` as libpcap compiles it for LINUX_SLL2: the EtherType at 0, IPv4's
        // protocol at 29, the ports behind `ldxb 4*([20]&0xf)`.
        let prog = [
            Insn::stmt(cbpf::LD_H_ABS, 0),
            Insn::jump(cbpf::JEQ_K, 0x0800, 0, 8),
            Insn::stmt(cbpf::LD_B_ABS, 29),
            Insn::jump(cbpf::JEQ_K, 17, 0, 6),
            Insn::stmt(cbpf::LDX_MSH, 20),
            Insn::stmt(cbpf::LD_H_IND, 20),
            Insn::jump(cbpf::JEQ_K, 9, 2, 0),
            Insn::stmt(cbpf::LD_H_IND, 22),
            Insn::jump(cbpf::JEQ_K, 9, 0, 1),
            Insn::stmt(cbpf::RET_K, 96),
            Insn::stmt(cbpf::RET_K, 0),
        ];
        // On the frame itself, as a file reader runs it.
        assert_eq!(cbpf::run(&prog, &UDP_IN, 53), 96);
        let kernel = for_cooked_socket(&prog).unwrap();
        let (skip, kernel) = kernel.split_at(LOOPBACK_OUTGOING_SKIPPED.len());
        assert_eq!(skip, LOOPBACK_OUTGOING_SKIPPED);
        assert_eq!(kernel[0].k, SKF_AD_OFF + SKF_AD_PROTOCOL);
        assert_eq!(
            kernel[2..9].iter().map(|i| i.k).collect::<Vec<_>>(),
            [9, 17, 0, 0, 9, 2, 9]
        );
        assert_eq!(kernel[9..], prog[9..]);
        // The ancillary load is the only change that depends on the socket: with it made a
        // constant, the program accepts the bare IP packet.
        let mut bare = kernel.to_vec();
        bare[0] = Insn::stmt(cbpf::LD_IMM, 0x0800);
        assert_eq!(cbpf::run(&bare, &UDP_IN[20..], 33), 96);
    }

    #[test]
    fn ifindex_and_direction_become_ancillary_loads() {
        let prog = [
            Insn::stmt(cbpf::LD_W_ABS, 4),
            Insn::stmt(cbpf::LD_B_ABS, 10),
            Insn::stmt(cbpf::LD_W_ABS, SKF_AD_OFF + 32),
            Insn::stmt(cbpf::RET_K, 1),
        ];
        let k: Vec<u32> = for_cooked_socket(&prog).unwrap()[LOOPBACK_OUTGOING_SKIPPED.len()..]
            .iter()
            .map(|i| i.k)
            .collect();
        assert_eq!(k, [SKF_AD_OFF + 8, SKF_AD_OFF + 4, SKF_AD_OFF + 32, 1]);
        // The link type and the address are not in the socket buffer's metadata.
        for (code, offset) in [
            (cbpf::LD_H_ABS, 8),
            (cbpf::LD_W_ABS, 12),
            (cbpf::LD_B_ABS, 4),
            (cbpf::LD_B_IND, 3),
            (cbpf::LDX_MSH, 0),
        ] {
            let prog = [Insn::stmt(cbpf::LD_IMM, 0), Insn::stmt(code, offset)];
            assert_eq!(
                for_cooked_socket(&prog),
                Err(HeaderLoad { at: 1, offset }),
                "{code:#x} [{offset}]"
            );
        }
    }

    #[test]
    fn loopback_copies_going_out_are_refused_first() {
        let pass = [Insn::stmt(cbpf::RET_K, 96)];
        let k = for_cooked_socket(&pass).unwrap();
        assert_eq!(k.len(), LOOPBACK_OUTGOING_SKIPPED.len() + 1);
        // The ancillary loads made constants: (packet type, ARPHRD_ type) → verdict.
        let verdict = |pkttype: u32, hatype: u32| {
            let mut p = k.clone();
            p[0] = Insn::stmt(cbpf::LD_IMM, pkttype);
            p[2] = Insn::stmt(cbpf::LD_IMM, hatype);
            cbpf::run(&p, &UDP_IN[20..], 33)
        };
        assert_eq!(verdict(4, 772), 0, "loopback, going out");
        assert_eq!(verdict(0, 772), 96, "loopback, coming in");
        assert_eq!(verdict(4, 1), 96, "Ethernet, going out");
        assert_eq!(verdict(3, 1), 96, "Ethernet, to another host");
    }
}
