//! `tapflow flows` and `tapflow capture` on inputs whose time goes wrong, and on fragments of
//! different datagrams that look alike: files written here with the project's packet builder
//! and pcap/pcapng writers.

mod common;

use std::collections::BTreeMap;
use std::net::UdpSocket;
use std::path::Path;
use std::time::Duration;

use common::*;
use tapflow_wire::build::{self, FrameSpec, L4};
use tapflow_wire::datagram::Datagram;
use tapflow_wire::ethernet::EthernetAddress;
use tapflow_wire::record::Records;
use tapflow_wire::{LinkType, TsSource, pcap, pcapng};

const S: u64 = 1_000_000_000;
/// 2012-06-29: a capture's own time.
const T: u64 = 1_340_954_905 * S;

/// One CSV flow record, by column name.
type Row = BTreeMap<String, String>;

/// A TCP segment 192.0.2.1:40000 → 192.0.2.2:80, or the other way when `back`.
fn segment(back: bool) -> Vec<u8> {
    let (a, b) = ("192.0.2.1".parse().unwrap(), "192.0.2.2".parse().unwrap());
    let spec = FrameSpec {
        src_mac: EthernetAddress([2, 0, 0, 0, 0, 1]),
        dst_mac: EthernetAddress([2, 0, 0, 0, 0, 2]),
        src_ip: if back { b } else { a },
        dst_ip: if back { a } else { b },
        proto: L4::Tcp,
        src_port: if back { 80 } else { 40000 },
        dst_port: if back { 40000 } else { 80 },
        frame_len: 80,
    };
    let mut f = vec![0u8; spec.frame_len];
    build::build(&spec, &mut f).unwrap();
    f
}

/// A pcap of Ethernet frames at these times (ns).
fn write_pcap(path: &Path, frames: &[(u64, Vec<u8>)]) {
    let mut out = Vec::new();
    pcap::write_header(&mut out, LinkType::Ethernet, 65535);
    for (ts, f) in frames {
        pcap::write_record(&mut out, *ts, f, f.len() as u32);
    }
    std::fs::write(path, out).unwrap();
}

/// A pcapng of one Ethernet interface: an EPB at `T`, a Simple Packet Block (no time), an EPB
/// at `T + 1 s`, all of one TCP connection.
fn write_pcapng_with_spb(path: &Path) {
    let mut out = Vec::new();
    pcapng::write_shb(&mut out, "flows_hard");
    pcapng::write_idb(
        &mut out,
        &pcapng::IdbOptions {
            linktype: LinkType::Ethernet,
            snaplen: 0,
            name: None,
            filter: None,
            hardware: None,
        },
    );
    let (a, b) = (segment(false), segment(true));
    pcapng::write_epb(&mut out, 0, T, &a, a.len() as u32, None, None);
    pcapng::write_spb(&mut out, &b, b.len() as u32);
    pcapng::write_epb(&mut out, 0, T + S, &a, a.len() as u32, None, None);
    std::fs::write(path, out).unwrap();
}

/// `tapflow flows -r FILE -q --csv CSV`: the records, in the order written.
fn flows(file: &Path) -> Vec<Row> {
    let csv = file.with_extension("csv");
    let mut c = tapflow(["flows", "-q", "-r"]);
    c.arg(file).arg("--csv").arg(&csv);
    let o = run_limited(&mut c, Duration::from_secs(60));
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let text = std::fs::read_to_string(&csv).unwrap();
    let mut lines = text.lines();
    let header: Vec<&str> = lines.next().unwrap().split(',').collect();
    lines
        .map(|l| {
            header
                .iter()
                .map(|h| h.to_string())
                .zip(l.split(',').map(String::from))
                .collect()
        })
        .collect()
}

fn num(r: &Row, k: &str) -> u64 {
    r[k].parse().unwrap_or_else(|_| panic!("{k} = {:?}", r[k]))
}

/// A record's (start, end, packets both ways), times in ns.
fn span(r: &Row) -> (u64, u64, u64) {
    let (n, rn) = (num(r, "packets"), num(r, "rev_packets"));
    let firsts = [(n, "first_ns"), (rn, "rev_first_ns")];
    let lasts = [(n, "last_ns"), (rn, "rev_last_ns")];
    let start = firsts.iter().filter(|x| x.0 > 0).map(|x| num(r, x.1)).min();
    let end = lasts.iter().filter(|x| x.0 > 0).map(|x| num(r, x.1)).max();
    (start.unwrap(), end.unwrap(), n + rn)
}

/// Item 17: a packet dated 1970 and a jump 700 s back in the middle of a connection (a
/// merged file) end the record before them instead of stretching it; no record lasts the
/// active timeout (300 s), and the packet dated 0 is alone in its record.
#[test]
fn time_going_back_ends_the_record_and_none_lasts_the_active_timeout() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("back.pcap");
    let (a, b) = (segment(false), segment(true));
    let at = |s: u64| T + s * S;
    write_pcap(
        &file,
        &[
            (at(1000), a.clone()),
            (at(1001), b.clone()),
            (0, a.clone()),
            (at(1002), b.clone()),
            (at(1003), a.clone()),
            (at(300), b.clone()),
            (at(301), a.clone()),
            (at(1100), a.clone()),
        ],
    );
    let rows = flows(&file);
    let spans: Vec<_> = rows.iter().map(span).collect();
    assert_eq!(
        spans.iter().map(|s| s.2).sum::<u64>(),
        8,
        "every packet counted once: {rows:?}"
    );
    for (r, (start, end, n)) in rows.iter().zip(&spans) {
        assert!(
            end - start < 300 * S,
            "record lasts the active timeout: {r:?}"
        );
        assert!(
            *start != 0 || *n == 1,
            "a record of good packets from 1970: {r:?}"
        );
    }
    let ends: Vec<_> = rows
        .iter()
        .map(|r| (span(r).0, r["end_reason"].as_str()))
        .collect();
    assert_eq!(
        ends,
        [
            (at(1000), "forced"),
            (0, "idle"),
            (at(1002), "forced"),
            (at(300), "idle"),
            (at(1100), "forced"),
        ]
    );
}

/// Item 18: an IPv6 later fragment whose address bytes and identification mirror an IPv4 first
/// fragment's (a.b.c.d vs a.b.c.d::) is another datagram: it does not take the IPv4 ports.
#[test]
fn an_ipv6_fragment_does_not_take_the_ports_of_a_mirroring_ipv4_fragment() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("frag.pcap");
    let eth = |ethertype: [u8; 2], ip: &[u8]| {
        let mut f = vec![2, 0, 0, 0, 0, 2, 2, 0, 0, 0, 0, 1];
        f.extend_from_slice(&ethertype);
        f.extend_from_slice(ip);
        f
    };
    // IPv4 UDP first fragment 1.2.3.4:1000 → 5.6.7.8:53, identification 0x1234, MF.
    let mut v4 = vec![0u8; 28];
    v4[0] = 0x45;
    v4[2..4].copy_from_slice(&28u16.to_be_bytes());
    v4[4..6].copy_from_slice(&0x1234u16.to_be_bytes());
    v4[6] = 0x20;
    v4[8] = 64;
    v4[9] = 17;
    v4[12..16].copy_from_slice(&[1, 2, 3, 4]);
    v4[16..20].copy_from_slice(&[5, 6, 7, 8]);
    v4[20..22].copy_from_slice(&1000u16.to_be_bytes());
    v4[22..24].copy_from_slice(&53u16.to_be_bytes());
    v4[24..26].copy_from_slice(&16u16.to_be_bytes());
    // IPv6 later fragment 102:304:: → 506:708::, UDP, offset 8, identification 0x1234.
    let mut v6 = vec![0u8; 40 + 8 + 8];
    v6[0] = 0x60;
    v6[4..6].copy_from_slice(&16u16.to_be_bytes());
    v6[6] = 44;
    v6[7] = 64;
    v6[8..12].copy_from_slice(&[1, 2, 3, 4]);
    v6[24..28].copy_from_slice(&[5, 6, 7, 8]);
    v6[40] = 17;
    v6[42..44].copy_from_slice(&8u16.to_be_bytes());
    v6[44..48].copy_from_slice(&0x1234u32.to_be_bytes());
    write_pcap(
        &file,
        &[(T, eth([0x08, 0x00], &v4)), (T, eth([0x86, 0xdd], &v6))],
    );
    let rows = flows(&file);
    let got: Vec<_> = rows
        .iter()
        .map(|r| (r["src"].as_str(), num(r, "sport"), num(r, "dport")))
        .collect();
    assert_eq!(
        got,
        [("1.2.3.4", 1000, 53), ("102:304::", 0, 0)],
        "{rows:?}"
    );
}

/// Item 19 (and 17): a Simple Packet Block has no timestamp; it takes the previous packet's,
/// so the connection is one record from the capture's own time, not one from 1970.
#[test]
fn a_simple_packet_block_is_metered_at_the_previous_packets_time() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("spb.pcapng");
    write_pcapng_with_spb(&file);
    let rows = flows(&file);
    assert_eq!(rows.len(), 1, "{rows:?}");
    let r = &rows[0];
    assert_eq!(span(r), (T, T + S, 3), "{r:?}");
    assert_eq!(
        (num(r, "rev_first_ns"), num(r, "rev_packets")),
        (T, 1),
        "{r:?}"
    );
}

/// Item 19: `tapflow capture` writes the Simple Packet Block's packet with the previous
/// packet's time, and a forwarded header record says the time was copied (timestamp source 3).
#[test]
fn a_simple_packet_block_is_written_and_forwarded_with_the_previous_time_flagged() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("spb.pcapng");
    write_pcapng_with_spb(&file);

    let out = dir.path().join("out.pcapng");
    let mut c = tapflow(["capture", "-q", "-r"]);
    c.arg(&file).arg("-w").arg(&out);
    let o = run_limited(&mut c, Duration::from_secs(60));
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let times: Vec<u128> = read_capture(&out).packets.iter().map(|p| p.ts_ns).collect();
    let t = u128::from(T);
    assert_eq!(times, [t, t, t + u128::from(S)]);

    let sock = UdpSocket::bind("127.0.0.1:0").unwrap();
    sock.set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    let to = sock.local_addr().unwrap().to_string();
    let mut c = tapflow(["capture", "-q", "-r"]);
    c.arg(&file).args(["--forward", &to]);
    let o = run_limited(&mut c, Duration::from_secs(60));
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let mut got = Vec::new();
    let mut buf = vec![0u8; 65536];
    while got.len() < 3 {
        let n = sock.recv(&mut buf).expect("forwarded datagram");
        let d = Datagram::parse(&buf[..n]).unwrap();
        for rec in Records::new(d.records()) {
            let (ctl, _) = rec.unwrap();
            got.push((ctl.rxtime, ctl.flags.ts_source()));
        }
    }
    assert_eq!(
        got,
        [
            (T, TsSource::File),
            (T, TsSource::Copied),
            (T + S, TsSource::File),
        ]
    );
}
