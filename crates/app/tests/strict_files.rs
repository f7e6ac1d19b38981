//! Files written by others, read as strictly as libpcap and Wireshark read them, and files
//! tapflow writes, never left half-written under their name: a pcap link-type field with
//! reserved bits set, an FCS length in it, a write that cannot hold its input, labels stacked
//! deeper than any fixed count, and ERF files, with tshark as the oracle.

mod common;

use std::path::Path;
use std::time::Duration;

use common::traffic::{self, Packet};
use common::*;
use tapflow_wire::LinkType;

fn p(path: &Path) -> String {
    path.to_string_lossy().into_owned()
}

fn run(args: &[&str]) -> std::process::Output {
    run_limited(&mut tapflow(args), Duration::from_secs(60))
}

/// The names in `dir`, sorted.
fn names(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    v.sort();
    v
}

/// `flows -r FILE -s 0` (whole packets: 20 labels and an IPv6 header are more than the default
/// 128 bytes) as JSON lines, sorted.
fn flows(input: &Path) -> Vec<String> {
    let text = run_ok(&mut tapflow([
        "flows",
        "-q",
        "-s",
        "0",
        "-r",
        &p(input),
        "--json",
        "-",
    ]));
    let mut v: Vec<String> = text.lines().map(str::to_owned).collect();
    v.sort();
    v
}

/// A few built conversations, untagged Ethernet.
fn some_traffic() -> Vec<Packet> {
    traffic::conversations(0, 4, 6, T0, 1_000_003)
}

/// A µs Ethernet pcap of `packets` with `field` as its whole link-type field.
fn pcap_with_linktype_field(packets: &[Packet], field: u32) -> Vec<u8> {
    let mut f = traffic::pcap_file(LinkType::Ethernet, false, false, 65535, packets);
    f[20..24].copy_from_slice(&field.to_le_bytes());
    f
}

/// Every packet of a capture file: time, original length, bytes.
fn packets_of(path: &Path) -> Vec<(u64, u32, Vec<u8>)> {
    let bytes = std::fs::read(path).unwrap();
    let mut r = tapflow_wire::capfile::Reader::new(&bytes).unwrap();
    std::iter::from_fn(|| r.next_packet())
        .map(|q| q.unwrap())
        .map(|q| (q.ts_ns, q.len, q.data.to_vec()))
        .collect()
}

#[test]
fn a_pcap_with_reserved_link_type_bits_is_refused() {
    let d = tempfile::tempdir().unwrap();
    let bad = write_file(
        d.path(),
        "junk.pcap",
        &pcap_with_linktype_field(&some_traffic(), 0x0008_0001),
    );
    // The oracle refuses it too.
    let t = std::process::Command::new("tshark")
        .args(["-r", &p(&bad)])
        .output()
        .unwrap();
    assert!(!t.status.success(), "tshark read it");
    let out = d.path().join("out.pcapng");
    for args in [
        vec!["capture", "-r", &p(&bad), "-w", &p(&out), "-q"],
        vec!["flows", "-r", &p(&bad)],
    ] {
        let o = run(&args);
        assert_clean_error(&o, Some(2), &["0x00080001"], &args.join(" "));
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(err.contains(&p(&bad)), "the file is not named: {err}");
    }
    assert_eq!(names(d.path()), ["junk.pcap"]);
}

#[test]
fn a_pcap_whose_link_type_field_gives_an_fcs_length_is_read_without_the_fcs() {
    let d = tempfile::tempdir().unwrap();
    let packets = some_traffic();
    let plain = write_file(
        d.path(),
        "plain.pcap",
        &traffic::pcap_file(LinkType::Ethernet, false, false, 65535, &packets),
    );
    // Each frame with a 4-byte FCS after it; the field says so: F bit, 2 words.
    let with_fcs: Vec<Packet> = packets
        .iter()
        .map(|q| {
            let mut data = q.data.clone();
            data.extend_from_slice(&[0xfc, 0xfc, 0xfc, 0xfc]);
            Packet::new(q.ts_ns, data)
        })
        .collect();
    let fcs = write_file(
        d.path(),
        "fcs.pcap",
        &pcap_with_linktype_field(&with_fcs, 0x2400_0001),
    );
    // tshark sees the FCS as the Ethernet trailer.
    let t = tshark_fields(&fcs, &["eth.fcs"]);
    assert_eq!(t.len(), packets.len());
    assert!(t.iter().all(|r| r[0] == "0xfcfcfcfc"), "{t:?}");

    let out = d.path().join("out.pcap");
    let o = run(&["capture", "-r", &p(&fcs), "-w", &p(&out), "-s", "0", "-q"]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    // What is written is the frames without their FCS: the plain file's packets exactly.
    let (got, want) = (packets_of(&out), packets_of(&plain));
    assert_eq!(got.len(), want.len());
    for (i, (g, w)) in got.iter().zip(&want).enumerate() {
        assert!(
            g == w,
            "packet {i}: {:?} is not {:?}",
            &g.2[..20],
            &w.2[..20]
        );
    }
    assert_eq!(flows(&fcs), flows(&plain));
}

/// A big-endian pcapng (µs timestamps, the default resolution) with one interface per entry of
/// `interfaces`, each packet on its `iface`: built by hand, since tapflow writes little-endian.
fn big_endian_pcapng(interfaces: &[LinkType], packets: &[Packet]) -> Vec<u8> {
    fn block(out: &mut Vec<u8>, kind: u32, body: &[u8]) {
        let len = 12 + body.len().next_multiple_of(4) as u32;
        out.extend_from_slice(&kind.to_be_bytes());
        out.extend_from_slice(&len.to_be_bytes());
        out.extend_from_slice(body);
        out.resize(out.len().next_multiple_of(4), 0);
        out.extend_from_slice(&len.to_be_bytes());
    }
    let mut out = Vec::new();
    let mut shb = vec![0x1a, 0x2b, 0x3c, 0x4d, 0, 1, 0, 0];
    shb.extend_from_slice(&[0xff; 8]);
    block(&mut out, 0x0a0d_0d0a, &shb);
    for lt in interfaces {
        let mut idb = lt.to_u16().to_be_bytes().to_vec();
        idb.extend_from_slice(&[0, 0, 0, 0, 0xff, 0xff]);
        block(&mut out, 1, &idb);
    }
    for q in packets {
        let us = q.ts_ns / 1000;
        let mut epb = q.iface.to_be_bytes().to_vec();
        epb.extend_from_slice(&((us >> 32) as u32).to_be_bytes());
        epb.extend_from_slice(&(us as u32).to_be_bytes());
        epb.extend_from_slice(&(q.data.len() as u32).to_be_bytes());
        epb.extend_from_slice(&q.len.to_be_bytes());
        epb.extend_from_slice(&q.data);
        block(&mut out, 6, &epb);
    }
    out
}

#[test]
fn a_write_that_cannot_hold_its_input_leaves_no_file() {
    let d = tempfile::tempdir().unwrap();
    let ifaces = [(LinkType::Ethernet, 65535), (LinkType::Null, 65535)];
    let packets = traffic::on_interfaces(&some_traffic(), &ifaces);
    let input = write_file(
        d.path(),
        "two-links.pcapng",
        &big_endian_pcapng(&[LinkType::Ethernet, LinkType::Null], &packets),
    );
    // The oracle reads the input whole.
    assert_eq!(capinfos_count(&input), packets.len() as u64);
    let out = d.path().join("out.pcap");
    for format in [None, Some("pcap")] {
        let mut args = vec!["capture", "-r", input.to_str().unwrap(), "-w"];
        args.push(out.to_str().unwrap());
        args.push("-q");
        if let Some(f) = format {
            args.extend(["--format", f]);
        }
        let o = run(&args);
        assert_clean_error(&o, Some(2), &["one link type"], &args.join(" "));
        assert_eq!(
            names(d.path()),
            ["two-links.pcapng"],
            "{}: a file is left",
            args.join(" ")
        );
    }
    // A pcapng output holds both.
    let ok = d.path().join("out.pcapng");
    run_ok(&mut tapflow([
        "capture",
        "-r",
        &p(&input),
        "-w",
        &p(&ok),
        "-q",
    ]));
    assert_eq!(capinfos_count(&ok), packets.len() as u64);
}

/// The Ethernet frame with `labels` MPLS labels between its addresses and its IP packet; the
/// last has the bottom-of-stack bit unless `bottom` is false.
fn under_labels(frame: &[u8], labels: u32, bottom: bool) -> Vec<u8> {
    let mut f = frame[..12].to_vec();
    f.extend_from_slice(&[0x88, 0x47]);
    for i in 0..labels {
        let entry = (1000 + i) << 12 | u32::from(bottom && i + 1 == labels) << 8 | 64;
        f.extend_from_slice(&entry.to_be_bytes());
    }
    f.extend_from_slice(&frame[14..]);
    f
}

fn relabelled(packets: &[Packet], labels: u32, bottom: bool) -> Vec<Packet> {
    packets
        .iter()
        .map(|q| Packet::new(q.ts_ns, under_labels(&q.data, labels, bottom)))
        .collect()
}

#[test]
fn ip_under_twenty_mpls_labels_is_metered_and_anonymised() {
    let d = tempfile::tempdir().unwrap();
    // IPv4 and IPv6 conversations both.
    let packets = some_traffic();
    assert!(packets.iter().any(|q| q.data[12..14] == [0x86, 0xdd]));
    assert!(packets.iter().any(|q| q.data[12..14] == [0x08, 0x00]));
    let pcap = |name: &str, packets: &[Packet]| {
        let bytes = traffic::pcap_file(LinkType::Ethernet, true, false, 65535, packets);
        write_file(d.path(), name, &bytes)
    };
    let plain = pcap("plain.pcap", &packets);
    let deep = pcap("deep.pcap", &relabelled(&packets, 20, true));
    // The oracle finds IP under the 20 labels.
    let t = tshark_fields(&deep, &["ip.src", "ipv6.src"]);
    assert!(t.iter().all(|r| r.iter().any(|f| !f.is_empty())), "{t:?}");
    assert_eq!(flows(&deep), flows(&plain));

    let key = write_file(d.path(), "key", &[7u8; 32]);
    let anon = |input: &Path, name: &str| {
        let out = d.path().join(name);
        run_ok(&mut tapflow([
            "anonymize",
            "-r",
            &p(input),
            "-w",
            &p(&out),
            "-K",
            &p(&key),
        ]));
        out
    };
    let (a_plain, a_deep) = (anon(&plain, "a-plain.pcap"), anon(&deep, "a-deep.pcap"));
    assert_ne!(flows(&a_plain), flows(&plain));
    assert_eq!(flows(&a_deep), flows(&a_plain));
}

#[test]
fn a_label_stack_without_a_bottom_in_the_capture_is_not_ip() {
    let d = tempfile::tempdir().unwrap();
    let traffic = some_traffic();
    let n = traffic.len();
    // Labels to the end of the frame, none of them the last; and a frame of 20 labels and IP
    // cut by the snap length inside the stack.
    let endless: Vec<Packet> = traffic
        .iter()
        .map(|q| Packet::new(q.ts_ns, under_labels(&q.data[..14], 300, false)))
        .collect();
    let cut: Vec<Packet> = relabelled(&traffic, 20, true)
        .into_iter()
        .map(|q| q.cut(14 + 4 * 15 + 2))
        .collect();
    for (name, packets) in [("endless.pcap", &endless), ("cut.pcap", &cut)] {
        let bytes = traffic::pcap_file(LinkType::Ethernet, true, false, 65535, packets);
        let input = write_file(d.path(), name, &bytes);
        let o = run(&["flows", "-r", &p(&input), "--json", "-"]);
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(o.status.success(), "{name}: {err}");
        assert!(o.stdout.is_empty(), "{name}: a flow from no IP");
        assert!(
            err.contains(&format!("{n} packets not IP")),
            "{name}: {err}"
        );
    }
}
