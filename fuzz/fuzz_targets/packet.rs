//! Arbitrary bytes under every link type through `network_layer` and every packet view: nothing
//! may panic, and every offset handed out must lie within the input.
#![no_main]

use libfuzzer_sys::fuzz_target;
use tapflow_wire::flowkey::{FlowFields, FlowKey};
use tapflow_wire::link::{NetworkProto, network_layer};
use tapflow_wire::{LinkType, ethernet, icmp, ipv4, ipv6, tcp, udp};

const LINK_TYPES: [LinkType; 11] = [
    LinkType::Null,
    LinkType::Ethernet,
    LinkType::Ppp,
    LinkType::Raw,
    LinkType::Loop,
    LinkType::LinuxSll,
    LinkType::Ipv4,
    LinkType::Ipv6,
    LinkType::Nflog,
    LinkType::LinuxSll2,
    LinkType::Unknown(147),
];

fn transport(proto: u8, l4: &[u8]) {
    match proto {
        6 => {
            if let Ok(t) = tcp::Packet::new_checked(l4) {
                let _ = (t.src_port(), t.dst_port(), t.seq_number(), t.ack_number());
                let _ = (
                    t.flags().to_string(),
                    t.window_len(),
                    t.checksum(),
                    t.urgent_at(),
                );
                let _ = (t.options().len(), t.payload().len(), t.has_options());
            }
        }
        17 => {
            if let Ok(u) = udp::Packet::new_checked(l4) {
                let _ = (
                    u.src_port(),
                    u.dst_port(),
                    u.len(),
                    u.checksum(),
                    u.payload().len(),
                );
            }
        }
        1 | 58 => {
            if let Ok(i) = icmp::Packet::new_checked(l4) {
                let _ = (
                    i.msg_type(),
                    i.msg_code(),
                    i.checksum(),
                    i.echo_ident(),
                    i.echo_seq_no(),
                );
                let _ = i.rest().len();
            }
        }
        _ => {}
    }
}

fn exercise(lt: LinkType, data: &[u8]) {
    if let Ok(f) = ethernet::Frame::new_checked(data) {
        let _ = (f.dst_addr(), f.src_addr(), f.ethertype(), f.payload().len());
    }
    let Some(nl) = network_layer(lt, data) else {
        return;
    };
    assert!(nl.offset <= data.len());
    let ip = &data[nl.offset..];
    match nl.proto {
        NetworkProto::Ipv4 => {
            if let Ok(p) = ipv4::Packet::new_checked(ip) {
                let _ = (
                    p.total_len(),
                    p.ident(),
                    p.frag_offset(),
                    p.more_frags(),
                    p.ttl(),
                );
                let _ = (
                    p.src_addr(),
                    p.dst_addr(),
                    p.options().len(),
                    p.verify_checksum(),
                );
                let proto = p.protocol().to_u8();
                if p.frag_offset() == 0 {
                    transport(proto, p.into_payload());
                }
            }
        }
        NetworkProto::Ipv6 => {
            if let Ok(p) = ipv6::Packet::new_checked(ip) {
                let _ = (p.flow_label(), p.payload_len(), p.src_addr(), p.dst_addr());
                let _ = p.payload().len();
                if let Some((proto, off, frag)) = p.upper_layer() {
                    assert!(off <= ip.len());
                    if frag.is_none_or(|f| f.is_first()) {
                        transport(proto.to_u8(), &ip[off..]);
                    }
                }
            }
        }
    }
}

/// The flow meter's parser: both directions of a parsed packet give one symmetric key.
fn flow_fields(lt: LinkType, data: &[u8]) {
    let Some(f) = FlowFields::of_frame(lt, data, data.len() as u32) else {
        return;
    };
    let k = FlowKey::of_frame(lt, data).expect("FlowFields and FlowKey agree on what is IP");
    assert_eq!(k.proto, f.proto);
    assert_eq!(k.ipv6, f.ipv6);
}

fuzz_target!(|data: &[u8]| {
    for lt in LINK_TYPES {
        exercise(lt, data);
        flow_fields(lt, data);
    }
});
