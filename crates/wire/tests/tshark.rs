//! tshark and capinfos as oracles for the files tapflow writes: they must see exactly the
//! interfaces, timestamps (to the nanosecond), lengths and EPB options we wrote.
//!
//! Needs Wireshark's command-line tools (`apt-get install tshark`); fails if they are missing.

use std::path::PathBuf;
use std::process::Command;

use tapflow_wire::LinkType;
use tapflow_wire::capfile::Reader;
use tapflow_wire::pcap;
use tapflow_wire::pcapng::{self, IdbOptions, InterfaceStatistics};

/// Runs a Wireshark tool and returns its stdout; panics with a clear message if it is missing
/// or fails.
fn run(tool: &str, args: &[&str]) -> String {
    let out = Command::new(tool).args(args).output().unwrap_or_else(|e| {
        panic!("cannot run `{tool}` ({e}): these tests need Wireshark's CLI tools (apt-get install tshark)")
    });
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "`{tool} {}` failed: {stderr}",
        args.join(" ")
    );
    // tshark warns when run as root; anything else on stderr means it disliked the file.
    let complaints: Vec<&str> = stderr
        .lines()
        .filter(|l| !l.contains("could be dangerous"))
        .collect();
    assert!(
        complaints.is_empty(),
        "`{tool} {}` complained: {complaints:?}",
        args.join(" ")
    );
    String::from_utf8(out.stdout).unwrap()
}

/// Writes `bytes` to a fresh file in cargo's scratch directory.
fn temp_file(name: &str, bytes: &[u8]) -> PathBuf {
    let p = PathBuf::from(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("tapflow-{}-{name}", std::process::id()));
    std::fs::write(&p, bytes).unwrap();
    p
}

/// `seconds.nanoseconds`, as tshark prints `frame.time_epoch`.
fn epoch(ts_ns: u64) -> String {
    format!("{}.{:09}", ts_ns / 1_000_000_000, ts_ns % 1_000_000_000)
}

/// One packet we write: interface, ts, data, original length, epb_flags, epb_dropcount.
type Pkt = (u32, u64, Vec<u8>, u32, Option<u32>, Option<u64>);

fn packets() -> Vec<Pkt> {
    // An Ethernet frame header (IPv4) and a raw IPv4 header, then filler.
    let eth = |n: usize| {
        let mut f = vec![0x02, 0, 0, 0, 0, 1, 0x02, 0, 0, 0, 0, 2, 0x08, 0x00];
        f.resize(n, 0xab);
        f
    };
    let ip = |n: usize| {
        let mut f = vec![
            0x45, 0, 0, 40, 0, 0, 0, 0, 64, 17, 0, 0, 10, 0, 0, 1, 10, 0, 0, 2,
        ];
        f.resize(n, 0xcd);
        f
    };
    vec![
        (
            0,
            1_700_000_000_123_456_789,
            eth(64),
            1514,
            Some(0x401),
            Some(42),
        ),
        (1, 1_700_000_000_999_999_999, ip(40), 40, Some(0x2), Some(0)),
        (
            0,
            1_700_000_001_000_000_001,
            eth(14),
            60,
            None,
            Some(u64::from(u32::MAX) + 7),
        ),
        (
            1,
            4_102_444_800_000_000_001,
            ip(20),
            9000,
            Some(0x0100_0005),
            None,
        ),
        (0, 1_000_000_001, eth(128), 128, None, None),
    ]
}

fn write_pcapng(pkts: &[Pkt]) -> Vec<u8> {
    let mut f = Vec::new();
    pcapng::write_shb(&mut f, "tapflow-test");
    let eth0 = IdbOptions {
        linktype: LinkType::Ethernet,
        snaplen: 128,
        name: Some("eth0"),
        filter: Some("udp or tcp"),
        hardware: Some("Intel X710"),
    };
    pcapng::write_idb(&mut f, &eth0);
    let tun0 = IdbOptions {
        linktype: LinkType::Raw,
        snaplen: 65535,
        name: Some("tun0"),
        filter: None,
        hardware: None,
    };
    pcapng::write_idb(&mut f, &tun0);
    for (i, ts, data, len, flags, drops) in pkts {
        pcapng::write_epb(&mut f, *i, *ts, data, *len, *flags, *drops);
    }
    let stats = InterfaceStatistics {
        starttime_ns: Some(1_000_000_001),
        endtime_ns: Some(4_102_444_800_000_000_001),
        ifrecv: Some(1000),
        ifdrop: Some(3),
        filteraccept: Some(990),
        osdrop: Some(7),
        usrdeliv: Some(980),
    };
    pcapng::write_isb(&mut f, 0, 4_102_444_800_000_000_002, &stats);
    f
}

#[test]
fn tshark_reads_our_pcapng_to_the_nanosecond() {
    let pkts = packets();
    let bytes = write_pcapng(&pkts);
    let path = temp_file("two-interfaces.pcapng", &bytes);
    let p = path.to_str().unwrap();
    let fields = [
        "frame.time_epoch",
        "frame.len",
        "frame.cap_len",
        "frame.interface_id",
        "frame.interface_name",
        "frame.drop_count",
        "frame.packet_flags",
        "frame.protocols",
    ];
    let mut args = vec!["-r", p, "-T", "fields", "-E", "separator=|"];
    fields.iter().for_each(|f| args.extend(["-e", f]));
    let out = run("tshark", &args);
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines.len(), pkts.len(), "tshark saw:\n{out}");
    for (line, (i, ts, data, len, flags, drops)) in lines.iter().zip(&pkts) {
        let f: Vec<&str> = line.split('|').collect();
        let flags = flags.map_or(String::new(), |v| format!("0x{v:08x}"));
        let drops = drops.map_or(String::new(), |v| v.to_string());
        let name = ["eth0", "tun0"][*i as usize];
        let proto = ["eth:", "raw:"][*i as usize];
        assert_eq!(
            f[..7],
            [
                epoch(*ts),
                len.to_string(),
                data.len().to_string(),
                i.to_string(),
                name.into(),
                drops,
                flags
            ],
            "tshark line {line}"
        );
        assert!(f[7].starts_with(proto), "interface {i} decoded as {}", f[7]);
    }

    // capinfos: interfaces, their options, and the ISB on interface 0.
    let info = run("capinfos", &[p]);
    let iface = |n: usize| {
        info.split(&format!("Interface #{n} info:"))
            .nth(1)
            .unwrap()
            .to_owned()
    };
    let (if0, if1) = (iface(0), iface(1));
    let if0 = if0.split("Interface #1").next().unwrap();
    for want in [
        "Number of packets:   5",
        "Capture application: tapflow-test",
        "Number of interfaces in file: 2",
        "File timestamp precision:  nanoseconds (9)",
        "Raw IP (2)",
    ] {
        assert!(info.contains(want), "capinfos lacks {want:?}:\n{info}");
    }
    for want in [
        "Name = eth0",
        "Encapsulation = Ethernet (1 - ether)",
        "Hardware = Intel X710",
        "Capture length = 128",
        "Time precision = nanoseconds (9)",
        "Filter string = udp or tcp",
        "Number of stat entries = 1",
        "Number of packets = 3",
    ] {
        assert!(
            if0.contains(want),
            "capinfos interface 0 lacks {want:?}:\n{if0}"
        );
    }
    for want in [
        "Name = tun0",
        "Encapsulation = Raw IP (7 - rawip)",
        "Capture length = 65535",
        "Time precision = nanoseconds (9)",
        "Number of stat entries = 0",
        "Number of packets = 2",
    ] {
        assert!(
            if1.contains(want),
            "capinfos interface 1 lacks {want:?}:\n{if1}"
        );
    }

    // And our reader agrees with what we wrote.
    let mut r = Reader::new(&bytes).unwrap();
    for (i, ts, data, len, flags, drops) in &pkts {
        let p = r.next_packet().unwrap().unwrap();
        assert_eq!(
            (p.interface, p.ts_ns, p.data, p.len),
            (*i, *ts, data.as_slice(), *len)
        );
        assert_eq!((p.epb_flags, p.dropcount), (*flags, *drops));
    }
    assert!(r.next_packet().is_none());
    std::fs::remove_file(path).unwrap();
}

#[test]
fn tshark_reads_our_nanosecond_pcap() {
    let pkts = packets();
    let mut bytes = Vec::new();
    pcap::write_header(&mut bytes, LinkType::Ethernet, 262_144);
    let eth: Vec<&Pkt> = pkts.iter().filter(|p| p.0 == 0).collect();
    for (_, ts, data, len, _, _) in &eth {
        pcap::write_record(&mut bytes, *ts, data, *len);
    }
    let path = temp_file("nanos.pcap", &bytes);
    let p = path.to_str().unwrap();
    let out = run(
        "tshark",
        &[
            "-r",
            p,
            "-T",
            "fields",
            "-E",
            "separator=|",
            "-e",
            "frame.time_epoch",
            "-e",
            "frame.len",
            "-e",
            "frame.cap_len",
            "-e",
            "frame.protocols",
        ],
    );
    let want: Vec<String> = eth
        .iter()
        .map(|(_, ts, data, len, _, _)| format!("{}|{len}|{}|eth:", epoch(*ts), data.len()))
        .collect();
    let got: Vec<&str> = out.lines().collect();
    assert_eq!(got.len(), want.len(), "tshark saw:\n{out}");
    for (g, w) in got.iter().zip(&want) {
        assert!(g.starts_with(w.as_str()), "tshark line {g:?}, wrote {w:?}");
    }
    let info = run("capinfos", &["-t", "-E", "-l", "-c", p]);
    for want in [
        "nanosecond pcap",
        "Ethernet",
        "262144",
        "Number of packets:   3",
    ] {
        assert!(info.contains(want), "capinfos lacks {want:?}:\n{info}");
    }
    std::fs::remove_file(path).unwrap();
}
