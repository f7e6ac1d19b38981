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
use tapflow_wire::erf::{self, RecordType};

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

/// 802.1Q-tagged (VLAN 100) Ethernet frames of built conversations, each IPv4 one cut into
/// fragments of 64 bytes of payload, times from [`T0`] a little under a µs apart so that
/// every ERF timestamp has a nanosecond part.
fn vlan_fragments() -> Vec<Packet> {
    let mut out = Vec::new();
    for (i, q) in traffic::conversations(0, 3, 4, T0, 1_000_003)
        .iter()
        .enumerate()
    {
        let frames = if q.data[12..14] == [0x08, 0x00] {
            traffic::fragments_v4(&q.data, 64, 0x4000 + i as u16)
        } else {
            vec![q.data.clone()]
        };
        for f in frames {
            let ts = T0 + out.len() as u64 * 987_654_321 + 123;
            out.push(Packet::new(ts, traffic::with_vlans(&f, &[100])));
        }
    }
    out
}

/// The ERF file of Ethernet `packets`, every record `ERF_TYPE_ETH` on port 0.
fn erf_of(packets: &[Packet]) -> Vec<u8> {
    let mut out = Vec::new();
    for q in packets {
        erf::write_record(
            &mut out,
            RecordType::Eth,
            0,
            q.ts_ns,
            0,
            &q.data,
            q.len as u16,
        );
    }
    out
}

/// Every packet tapflow read from `input`, as it wrote them to a pcapng file.
fn through_tapflow(input: &Path, dir: &Path) -> (Capture, String) {
    let out = dir.join(format!(
        "{}.pcapng",
        input.file_name().unwrap().to_string_lossy()
    ));
    let o = run(&["capture", "-r", &p(input), "-w", &p(&out), "-s", "0"]);
    let err = String::from_utf8_lossy(&o.stderr).into_owned();
    assert!(o.status.success(), "{err}");
    (read_capture(&out), err)
}

#[test]
fn an_erf_file_reads_as_tshark_reads_it_and_meters_as_its_pcap() {
    let d = tempfile::tempdir().unwrap();
    let packets = vlan_fragments();
    assert!(packets.len() > 20);
    let pcap = write_file(
        d.path(),
        "vlan-frag.pcap",
        &traffic::pcap_file(LinkType::Ethernet, true, false, 65535, &packets),
    );
    let erf = write_file(d.path(), "vlan-frag.erf", &erf_of(&packets));
    // The oracle takes it for ERF and reads every packet at its time.
    let t = tshark_fields(
        &erf,
        &["frame.time_epoch", "frame.len", "frame.cap_len", "vlan.id"],
    );
    assert_eq!(t.len(), packets.len());
    let (cap, _) = through_tapflow(&erf, d.path());
    assert_eq!(cap.packets.len(), packets.len());
    for ((q, row), got) in packets.iter().zip(&t).zip(&cap.packets) {
        assert_eq!(epoch_ns(&row[0]), Some(q.ts_ns as i128));
        assert_eq!(got.ts_ns, q.ts_ns as u128);
        assert_eq!(row[1..3], [q.len.to_string(), q.data.len().to_string()]);
        assert_eq!(row[3], "100");
        assert!(got.data == q.data, "packet at {} differs", q.ts_ns);
    }
    // anonymize reads it too: the same flows, anonymised, as from the pcap.
    let key = write_file(d.path(), "key", &[9u8; 32]);
    let anon = |input: &Path| {
        let out = d.path().join(format!(
            "a-{}.pcap",
            input.file_name().unwrap().to_string_lossy()
        ));
        run_ok(&mut tapflow([
            "anonymize",
            "-r",
            &p(input),
            "-w",
            &p(&out),
            "-K",
            &p(&key),
        ]));
        flows(&out)
    };
    assert_eq!(anon(&erf), anon(&pcap));
    assert_eq!(flows(&erf), flows(&pcap));
    let flows_seen = flows(&erf);
    assert!(flows_seen.len() >= 3, "{flows_seen:?}");
}

#[test]
fn erf_record_types_extension_headers_and_loss_counters() {
    let d = tempfile::tempdir().unwrap();
    let packets = vlan_fragments();
    let mut f = Vec::new();
    let eth_types = [
        RecordType::Eth,
        RecordType::ColorEth,
        RecordType::DsmColorEth,
        RecordType::ColorHashEth,
    ];
    // (ERF type, what tapflow should deliver: link type, data, drops before it)
    let mut want: Vec<(u8, u16, Vec<u8>, u64)> = Vec::new();
    for (i, q) in packets.iter().enumerate() {
        let t = eth_types[i % eth_types.len()];
        // The plain Ethernet type counts losses; the coloured ones carry a colour there.
        let lctr = if i == 4 {
            5
        } else {
            0x00aa * u16::from(!t.has_loss_counter())
        };
        let at = f.len();
        erf::write_record(&mut f, t, 0, q.ts_ns, lctr, &q.data, q.len as u16);
        if i % 5 == 1 {
            // An extension header (a made-up type 0x21, more to follow, then 0x05).
            let mut rec = f.split_off(at);
            let rlen = u16::from_be_bytes([rec[10], rec[11]]) + 16;
            rec[8] |= 0x80;
            rec[10..12].copy_from_slice(&rlen.to_be_bytes());
            let ext = [0xa1, 1, 2, 3, 4, 5, 6, 7, 0x05, 1, 2, 3, 4, 5, 6, 7];
            rec.splice(16..16, ext);
            f.extend_from_slice(&rec);
        }
        let drops = if t.has_loss_counter() {
            u64::from(lctr)
        } else {
            0
        };
        want.push((t.to_u8(), 1, q.data.clone(), drops));
        if i == 6 {
            // HDLC PoS and AAL5: skipped and counted, not fatal.
            erf::write_record(
                &mut f,
                RecordType::HdlcPos,
                0,
                q.ts_ns,
                0,
                &[0xff, 3, 0, 0x21],
                4,
            );
            erf::write_record(&mut f, RecordType::Aal5, 1, q.ts_ns, 0, &[0; 48], 48);
            erf::write_record(&mut f, RecordType::Aal5, 1, q.ts_ns, 0, &[0; 48], 48);
        }
    }
    // Raw IP records on port 1: the IP packets of the first frames, untagged.
    for q in packets.iter().take(4) {
        let ip = q.data[18..].to_vec();
        let t = if q.data[16..18] == [0x86, 0xdd] {
            RecordType::Ipv6
        } else {
            RecordType::Ipv4
        };
        erf::write_record(&mut f, t, 1, q.ts_ns + 1, 0, &ip, ip.len() as u16);
        want.push((t.to_u8(), 101, ip, 0));
    }
    let input = write_file(d.path(), "mixed.erf", &f);

    let t = tshark_fields(
        &input,
        &[
            "erf.types.type",
            "frame.time_epoch",
            "frame.len",
            "frame.cap_len",
            "erf.lctr",
        ],
    );
    let rows: Vec<&Vec<String>> = t
        .iter()
        .filter(|r| {
            ![1, 4, 27].contains(&(r[0].split(',').next().unwrap().parse::<u8>().unwrap() & 0x7f))
        })
        .collect();
    assert_eq!(rows.len(), want.len(), "{t:?}");
    let (cap, err) = through_tapflow(&input, d.path());
    assert!(
        err.contains("skipped ERF records: 1 of unsupported type 1, 2 of unsupported type 4"),
        "{err}"
    );
    assert_eq!(cap.packets.len(), want.len());
    for ((w, row), got) in want.iter().zip(&rows).zip(&cap.packets) {
        let what = format!("ERF type {}, tshark row {row:?}", w.0);
        assert_eq!(cap.ifaces[got.iface as usize].0, w.1, "{what}");
        assert!(got.data == w.2, "{what}: bytes differ");
        assert_eq!(epoch_ns(&row[1]), Some(got.ts_ns as i128), "{what}");
        assert_eq!(
            row[2..4],
            [got.len.to_string(), got.caplen.to_string()],
            "{what}"
        );
        assert_eq!(got.dropcount.unwrap_or(0), w.3, "{what}");
    }
}

/// Real captures (802.1Q-tagged Ethernet; IPv4 fragments) written as ERF: read as tshark reads
/// them, metered as their pcap.
#[test]
fn corpus_captures_as_erf_read_as_tshark_reads_them() {
    let Some(corpus) = corpus() else { return };
    let d = tempfile::tempdir().unwrap();
    for name in ["libtrace-vlan.pcap", "pcapplusplus-ip-frag.pcap"] {
        let pcap = corpus.join(name);
        let bytes = std::fs::read(&pcap).unwrap();
        let mut r = tapflow_wire::capfile::Reader::new(&bytes).unwrap();
        assert_eq!(r.interfaces()[0].linktype, LinkType::Ethernet, "{name}");
        let mut f = Vec::new();
        let mut n = 0;
        while let Some(q) = r.next_packet() {
            let q = q.unwrap();
            erf::write_record(&mut f, RecordType::Eth, 0, q.ts_ns, 0, q.data, q.len as u16);
            n += 1;
        }
        let input = write_file(d.path(), &format!("{name}.erf"), &f);
        let fields = [
            "frame.time_epoch",
            "frame.len",
            "frame.cap_len",
            "vlan.id",
            "ip.id",
        ];
        let want = tshark_fields(&pcap, &fields);
        assert_eq!(want.len(), n, "{name}");
        assert_eq!(
            tshark_fields(&input, &fields),
            want,
            "{name}: tshark reads the ERF copy"
        );
        let (cap, _) = through_tapflow(&input, d.path());
        let got = tshark_fields(&d.path().join(format!("{name}.erf.pcapng")), &fields);
        assert_eq!(cap.packets.len(), n, "{name}");
        assert_eq!(got, want, "{name}: what tapflow read of the ERF copy");
        assert_eq!(flows(&input), flows(&pcap), "{name}");
    }
}
