//! Differential test: tapflow's link walker and IP/TCP/UDP views against etherparse's
//! `LaxSlicedPacket` on every packet of the real-capture corpus, and on frames built here with
//! the packet builder under every link type etherparse decodes, VLAN tags and IP fragments
//! included.
//!
//! The corpus is `$TAPFLOW_CORPUS`, else `shared/corpus` beside the repository; without it the
//! corpus test prints one `skipped:` line and returns. Only its classic pcap files are read (a
//! tiny reader below); pcapng files are skipped.
//!
//! Where the two may legitimately differ, the packet is counted under an explained category
//! instead of as a disagreement:
//! - `ours_only`: MPLS, PPPoE, PPP, NFLOG and more than 3 VLAN tags, which etherparse does not
//!   decode. Anything etherparse does decode (see `plain_link`) must agree.
//! - `first_fragment`: etherparse never decodes a transport header inside a fragmented
//!   payload; we read the ports of a first fragment.
//! - `tcp_options_cut`: TCP headers whose options are cut by the snap length. etherparse needs
//!   the whole header; we need only the fixed 20 bytes for ports and flags.
//! - `version_mismatch`: the EtherType says IPv4 but the version nibble says 6 (or the other
//!   way round; a fuzzed nDPI capture has one). We reject it, etherparse follows the nibble.

mod support;

use etherparse::{LaxNetSlice, LaxSlicedPacket, TransportSlice};
use std::collections::BTreeMap;
use std::net::IpAddr;
use support::corpus::corpus;
use support::traffic;
use tapflow_wire::link::{NetworkProto, network_layer};
use tapflow_wire::{LinkType, ipv4, ipv6, tcp, udp};

/// What both parsers are asked to find.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Summary {
    src: IpAddr,
    dst: IpAddr,
    /// Final upper-layer protocol number (after IPv6 extension headers).
    proto: u8,
    /// Transport ports, when a TCP/UDP header was decoded.
    ports: Option<(u16, u16)>,
}

/// Our side: link walk + views.
#[derive(Debug)]
struct Ours {
    sum: Summary,
    fragment: bool,
    tcp_options_cut: bool,
}

fn ours(lt: LinkType, frame: &[u8]) -> Option<Ours> {
    let nl = network_layer(lt, frame)?;
    let ip = &frame[nl.offset..];
    let (src, dst, proto, l4, fragment, first) = match nl.proto {
        NetworkProto::Ipv4 => {
            let p = ipv4::Packet::new_checked(ip).ok()?;
            let first = p.frag_offset() == 0;
            (
                IpAddr::V4(p.src_addr()),
                IpAddr::V4(p.dst_addr()),
                p.protocol().to_u8(),
                p.into_payload(),
                p.is_fragment(),
                first,
            )
        }
        NetworkProto::Ipv6 => {
            let p = ipv6::Packet::new_checked(ip).ok()?;
            let (proto, off, frag) = p.upper_layer()?;
            let end = ip.len().min(match p.payload_len() {
                0 => usize::MAX,
                n => ipv6::HEADER_LEN + usize::from(n),
            });
            let l4 = ip.get(off..end).unwrap_or(&[]);
            (
                IpAddr::V6(p.src_addr()),
                IpAddr::V6(p.dst_addr()),
                proto.to_u8(),
                l4,
                frag.is_some(),
                frag.is_none_or(|f| f.is_first()),
            )
        }
    };
    let mut tcp_options_cut = false;
    let ports = match proto {
        6 if first => tcp::Packet::new_checked(l4).ok().map(|t| {
            tcp_options_cut = t.header_len() > l4.len();
            (t.src_port(), t.dst_port())
        }),
        17 if first => udp::Packet::new_checked(l4)
            .ok()
            .map(|u| (u.src_port(), u.dst_port())),
        _ => None,
    };
    Some(Ours {
        sum: Summary {
            src,
            dst,
            proto,
            ports,
        },
        fragment,
        tcp_options_cut,
    })
}

/// etherparse's side, or `None` if it does not decode an IP layer.
fn theirs(lt: LinkType, frame: &[u8]) -> Option<Summary> {
    let p = match lt {
        LinkType::Ethernet => LaxSlicedPacket::from_ethernet(frame).ok()?,
        LinkType::LinuxSll => {
            let et = u16::from_be_bytes([*frame.get(14)?, *frame.get(15)?]);
            LaxSlicedPacket::from_ether_type(et.into(), frame.get(16..)?)
        }
        LinkType::LinuxSll2 => {
            let et = u16::from_be_bytes([*frame.first()?, *frame.get(1)?]);
            LaxSlicedPacket::from_ether_type(et.into(), frame.get(20..)?)
        }
        LinkType::Raw | LinkType::Ipv4 | LinkType::Ipv6 => LaxSlicedPacket::from_ip(frame).ok()?,
        LinkType::Null | LinkType::Loop => LaxSlicedPacket::from_ip(frame.get(4..)?).ok()?,
        _ => return None,
    };
    let (src, dst, proto) = match p.net? {
        LaxNetSlice::Ipv4(ip) => (
            IpAddr::V4(ip.header().source_addr()),
            IpAddr::V4(ip.header().destination_addr()),
            ip.payload().ip_number.0,
        ),
        LaxNetSlice::Ipv6(ip) => (
            IpAddr::V6(ip.header().source_addr()),
            IpAddr::V6(ip.header().destination_addr()),
            ip.payload().ip_number.0,
        ),
        LaxNetSlice::Arp(_) => return None,
    };
    let ports = match p.transport {
        Some(TransportSlice::Tcp(t)) => Some((t.source_port(), t.destination_port())),
        Some(TransportSlice::Udp(u)) => Some((u.source_port(), u.destination_port())),
        _ => None,
    };
    Some(Summary {
        src,
        dst,
        proto,
        ports,
    })
}

/// Classic pcap files: (link type, packets).
fn read_pcap(bytes: &[u8]) -> Option<(LinkType, Vec<&[u8]>)> {
    let magic = bytes.get(..4)?;
    let le = match magic {
        [0xd4, 0xc3, 0xb2, 0xa1] | [0x4d, 0x3c, 0xb2, 0xa1] => true,
        [0xa1, 0xb2, 0xc3, 0xd4] | [0xa1, 0xb2, 0x3c, 0x4d] => false,
        _ => return None,
    };
    let u32_at = |b: &[u8], o: usize| -> Option<u32> {
        let w: [u8; 4] = b.get(o..o + 4)?.try_into().ok()?;
        Some(if le {
            u32::from_le_bytes(w)
        } else {
            u32::from_be_bytes(w)
        })
    };
    let lt = LinkType::from_u16((u32_at(bytes, 20)? & 0xffff) as u16);
    let mut out = Vec::new();
    let mut off = 24;
    while let Some(incl) = u32_at(bytes, off + 8) {
        let start = off + 16;
        let Some(data) = bytes.get(start..start + incl as usize) else {
            break;
        };
        out.push(data);
        off = start + incl as usize;
    }
    Some((lt, out))
}

/// Whether the link layer is one etherparse decodes too: Ethernet with at most 3 VLAN tags,
/// Linux cooked v1/v2 with an IP protocol, raw IP, or BSD loopback.
fn plain_link(lt: LinkType, frame: &[u8]) -> bool {
    let et = |o: usize| {
        frame
            .get(o..o + 2)
            .map(|b| u16::from_be_bytes([b[0], b[1]]))
    };
    let is_ip = |e: Option<u16>| matches!(e, Some(0x0800 | 0x86dd));
    match lt {
        LinkType::Ethernet => (0..=3).any(|tags| {
            (0..tags).all(|k| matches!(et(12 + 4 * k), Some(0x8100 | 0x88a8 | 0x9100)))
                && is_ip(et(12 + 4 * tags))
        }),
        LinkType::LinuxSll => is_ip(et(14)),
        LinkType::LinuxSll2 => is_ip(et(0)),
        LinkType::Raw | LinkType::Ipv4 | LinkType::Ipv6 | LinkType::Null | LinkType::Loop => true,
        _ => false,
    }
}

/// Whether the link layer announces one IP version and the header carries the other: we
/// trust the link layer and reject the packet, etherparse trusts the version nibble.
fn version_mismatch(lt: LinkType, frame: &[u8]) -> bool {
    let Some(nl) = network_layer(lt, frame) else {
        return false;
    };
    let want = match nl.proto {
        NetworkProto::Ipv4 => 4,
        NetworkProto::Ipv6 => 6,
    };
    frame.get(nl.offset).is_some_and(|b| b >> 4 != want)
}

#[test]
fn agrees_with_etherparse_on_corpus() {
    let Some(dir) = corpus() else { return };
    let mut files: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .filter_map(|e| e.ok().map(|e| e.path()))
        .collect();
    files.sort();
    let mut captures = Vec::new();
    for path in files {
        let Ok(bytes) = std::fs::read(&path) else {
            continue;
        };
        let Some((lt, packets)) = read_pcap(&bytes) else {
            continue;
        };
        let name = path.file_name().unwrap().to_string_lossy().into_owned();
        let packets = packets.into_iter().map(<[u8]>::to_vec).collect();
        captures.push((name, lt, packets));
    }
    let tally = agrees_with_etherparse(&captures);
    assert!(
        tally["packets"] > 0,
        "no classic pcap files in {}",
        dir.display()
    );
}

/// Frames built with the packet builder: both IP versions, TCP and UDP both ways, under every
/// link type both parsers decode, with one to three VLAN tags, as first and later fragments, as
/// ICMP, cut short, and ARP.
#[test]
fn agrees_with_etherparse_on_built_frames() {
    let ether: Vec<Vec<u8>> = traffic::conversations(0, 60, 6, 0, 1)
        .into_iter()
        .map(|p| p.data)
        .collect();
    let mut captures = Vec::new();
    for lt in [
        LinkType::Ethernet,
        LinkType::LinuxSll,
        LinkType::LinuxSll2,
        LinkType::Raw,
        LinkType::Null,
        LinkType::Loop,
    ] {
        let frames = ether.iter().map(|f| traffic::relink(f, lt)).collect();
        captures.push((format!("built {lt}"), lt, frames));
    }
    let mut odd = Vec::new();
    for (i, f) in ether.iter().enumerate() {
        odd.push(traffic::with_vlans(f, &[7, 100, 4000][..1 + i % 3]));
        odd.push(traffic::with_protocol(
            f,
            if f[12] == 0x86 { 58 } else { 1 },
        ));
        odd.push(f[..f.len().min(14 + 40 + 10)].to_vec());
        if f.len() > 300 {
            let frags = match f[12..14] {
                [0x08, 0x00] => traffic::fragments_v4(f, 128, i as u16),
                _ => traffic::fragments_v6(f, 128, i as u32),
            };
            odd.extend(frags);
        }
    }
    odd.push(traffic::arp_frame());
    captures.push(("built odd Ethernet".into(), LinkType::Ethernet, odd));
    let tally = agrees_with_etherparse(&captures);
    for category in ["agree", "first_fragment", "neither"] {
        assert!(
            tally.contains_key(category),
            "no {category} frame: {tally:?}"
        );
    }
}

/// Compares both parsers on every frame of `captures` (name, link type, frames) and returns
/// the tally of categories; fails on any disagreement, or unless most frames agree.
fn agrees_with_etherparse(
    captures: &[(String, LinkType, Vec<Vec<u8>>)],
) -> BTreeMap<&'static str, usize> {
    let mut tally: BTreeMap<&str, usize> = BTreeMap::new();
    let mut disagreements = Vec::new();
    for (name, lt, packets) in captures {
        let lt = *lt;
        for (i, frame) in packets.iter().enumerate() {
            *tally.entry("packets").or_default() += 1;
            let o = ours(lt, frame);
            let t = theirs(lt, frame);
            let category = match (&o, &t) {
                (None, None) => "neither",
                (Some(o), Some(t)) if o.sum == *t => "agree",
                (Some(o), Some(t))
                    if o.sum.src == t.src
                        && o.sum.dst == t.dst
                        && o.sum.proto == t.proto
                        && o.sum.ports.is_some()
                        && t.ports.is_none() =>
                {
                    if o.fragment {
                        "first_fragment"
                    } else if o.tcp_options_cut {
                        "tcp_options_cut"
                    } else {
                        "DISAGREE"
                    }
                }
                (Some(_), None) if !plain_link(lt, frame) => "ours_only",
                (None, Some(_)) if version_mismatch(lt, frame) => "version_mismatch",
                _ => "DISAGREE",
            };
            if category == "DISAGREE" {
                disagreements.push(format!("{name}#{}: ours {o:?} theirs {t:?}", i + 1));
            }
            *tally.entry(category).or_default() += 1;
        }
    }
    eprintln!("differential tally: {tally:?}");
    for d in disagreements.iter().take(20) {
        eprintln!("{d}");
    }
    let packets = tally.get("packets").copied().unwrap_or(0);
    let agree = tally.get("agree").copied().unwrap_or(0);
    assert!(
        agree * 10 > packets * 8,
        "only {agree} of {packets} packets agree"
    );
    assert!(
        disagreements.is_empty(),
        "{} disagreements",
        disagreements.len()
    );
    tally
}
