//! Crypto-PAn anonymisation against outside oracles: tshark judges the checksums of the
//! rewritten packets and lists every address left in them, quoted and tunnelled headers
//! included; nfanon (nfdump) anonymises the same flows with the same key.

mod common;

use std::collections::{BTreeSet, HashMap};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use common::*;
use tapflow_wire::checksum;
use tapflow_wire::cryptopan::CryptoPan;

/// The key of the sample in the Crypto-PAn 1.0 distribution.
const KEY: [u8; 32] = [
    21, 34, 23, 141, 51, 164, 207, 128, 19, 10, 91, 22, 73, 144, 125, 16, 216, 152, 143, 131, 121,
    121, 101, 39, 98, 87, 76, 45, 42, 132, 34, 2,
];

fn dir(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("tf-anon-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

fn hex(key: &[u8]) -> String {
    key.iter().map(|b| format!("{b:02x}")).collect()
}

fn p(path: &Path) -> String {
    path.to_string_lossy().into_owned()
}

/// Per packet: source, destination, and the status tshark gives each checksum it checks.
fn checked(file: &Path) -> Vec<Vec<String>> {
    let mut c = Command::new("tshark");
    c.arg("-n").arg("-r").arg(file);
    for proto in ["ip", "tcp", "udp"] {
        c.args(["-o", &format!("{proto}.check_checksum:TRUE")]);
    }
    c.args(["-T", "fields", "-E", "separator=\t"]);
    for f in [
        "ip.src",
        "ip.dst",
        "ipv6.src",
        "ipv6.dst",
        "ip.checksum.status",
        "tcp.checksum.status",
        "udp.checksum.status",
    ] {
        c.args(["-e", f]);
    }
    let o = run_limited(&mut c, Duration::from_secs(120));
    assert!(
        o.status.success(),
        "tshark: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    String::from_utf8_lossy(&o.stdout)
        .lines()
        .map(|l| l.split('\t').map(str::to_string).collect())
        .collect()
}

/// A trace of IPv4 and IPv6 TCP and UDP conversations, with the transport checksum of every
/// 97th packet made wrong.
fn trace(d: &Path) -> PathBuf {
    let input = built_trace(d, "in.pcap", 300, 6, 1_000_000);
    let mut bytes = std::fs::read(&input).unwrap();
    // Classic pcap: 24-byte header, 16-byte record headers (ns, little-endian).
    let (mut at, mut i) = (24, 0);
    while at + 16 <= bytes.len() {
        let caplen = u32::from_le_bytes(bytes[at + 8..at + 12].try_into().unwrap()) as usize;
        let f = at + 16;
        if i % 97 == 0 {
            let (ip, v6) = (f + 14, bytes[f + 12..f + 14] == [0x86, 0xdd]);
            let l4 = ip + if v6 { 40 } else { 20 };
            let tcp = bytes[ip + if v6 { 6 } else { 9 }] == 6;
            bytes[l4 + if tcp { 16 } else { 6 }] ^= 0x5a;
        }
        at = f + caplen;
        i += 1;
    }
    std::fs::write(&input, bytes).unwrap();
    input
}

#[test]
fn anonymized_files_keep_each_checksum_right_or_wrong_as_it_was() {
    let d = dir("cksum");
    let input = trace(&d);
    let key = write_file(&d, "key", &KEY);
    let before = checked(&input);
    assert_eq!(before.len(), 1800);
    let bad = |rows: &[Vec<String>]| rows.iter().filter(|r| r[4..].contains(&"0".into())).count();
    assert_eq!(bad(&before), 1800 / 97 + 1, "the trace's wrong checksums");
    for out in ["out.pcapng", "out.pcap.gz", "out.pcapng.zst"] {
        let out = d.join(out);
        let mut c = tapflow(["anonymize", "-q", "-r", &p(&input), "-w", &p(&out), "-K"]);
        c.arg(&key);
        if out.to_string_lossy().contains(".pcap.") {
            c.args(["--format", "pcap"]);
        }
        let o = run_limited(&mut c, Duration::from_secs(60));
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(o.status.success(), "{err}");
        assert!(err.contains("1800 received, 1800 recorded"), "{err}");
        let after = checked(&out);
        assert_eq!(after.len(), before.len());
        let mut map: HashMap<&str, &str> = HashMap::new();
        for (b, a) in before.iter().zip(&after) {
            // The same checksum statuses (1 right, 0 wrong), packet by packet.
            assert_eq!(b[4..], a[4..], "{}: {b:?} became {a:?}", out.display());
            for k in 0..4 {
                if b[k].is_empty() {
                    assert!(a[k].is_empty());
                    continue;
                }
                assert_ne!(a[k], b[k], "{} kept", b[k]);
                // One address, one image.
                assert_eq!(*map.entry(&b[k]).or_insert(&a[k]), a[k].as_str());
            }
        }
        // The 300 clients and 13 servers of each family, each with an image of its own.
        let images: BTreeSet<&&str> = map.values().collect();
        assert_eq!(images.len(), map.len());
        assert_eq!(map.len(), 300 + 13 + 13);
    }
    std::fs::remove_dir_all(&d).unwrap();
}

/// `nfdump -q -o fmt:...` rows of the IPv4 flows in `path`: addresses, ports, protocol.
fn nfdump_v4(path: &Path) -> BTreeSet<String> {
    let o = run_limited(
        Command::new("nfdump").arg("-R").arg(path).args([
            "-q",
            "-N",
            "-o",
            "fmt:%sa,%da,%sp,%dp,%pr,%pkt",
            "ipv4",
        ]),
        Duration::from_secs(60),
    );
    String::from_utf8_lossy(&o.stdout)
        .lines()
        .map(|l| l.split(',').map(str::trim).collect::<Vec<_>>().join(","))
        .filter(|l| !l.is_empty())
        .collect()
}

/// nfpcapd's flows of `pcap`, in a directory of their own.
fn nfpcapd(pcap: &Path, out: &Path) -> PathBuf {
    std::fs::create_dir_all(out).unwrap();
    let o = run_limited(
        Command::new("nfpcapd")
            .arg("-r")
            .arg(pcap)
            .arg("-w")
            .arg(out),
        Duration::from_secs(60),
    );
    assert!(
        o.status.success(),
        "nfpcapd: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    out.to_path_buf()
}

#[test]
fn ipv4_addresses_are_those_nfanon_gives_with_the_same_key() {
    let d = dir("nfanon");
    let input = built_trace(&d, "in.pcap", 600, 4, 1_000_000);
    let key = write_file(&d, "key", &KEY);

    // nfanon on nfpcapd's flows of the original trace.
    let plain = nfpcapd(&input, &d.join("plain"));
    let nfanon_dir = d.join("nfanon");
    std::fs::create_dir_all(&nfanon_dir).unwrap();
    let o = run_limited(
        Command::new("nfanon")
            .args(["-q", "-K", &format!("0x{}", hex(&KEY)), "-r"])
            .arg(&plain)
            .arg("-w")
            .arg(nfanon_dir.join("nfcapd.anon")),
        Duration::from_secs(60),
    );
    assert!(
        o.status.success(),
        "nfanon: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    let theirs = nfdump_v4(&nfanon_dir);
    assert_eq!(theirs.len(), 800, "IPv4 flows, both directions: {theirs:?}");

    // The same flows from the packets tapflow anonymised: equal, row by row.
    let anon = d.join("anon.pcap");
    run_ok(
        tapflow([
            "anonymize",
            "-q",
            "--format",
            "pcap",
            "-r",
            &p(&input),
            "-w",
            &p(&anon),
            "-K",
        ])
        .arg(&key),
    );
    let ours = nfdump_v4(&nfpcapd(&anon, &d.join("ours")));
    assert_eq!(ours, theirs);
    assert!(nfdump_v4(&plain).is_disjoint(&theirs));

    // tapflow's own flow records, anonymised before export: the same addresses.
    let csv = d.join("flows.csv");
    run_ok(
        tapflow([
            "flows",
            "-q",
            "-r",
            &p(&input),
            "--csv",
            &p(&csv),
            "--anonymize",
        ])
        .arg(&key),
    );
    let text = std::fs::read_to_string(&csv).unwrap();
    let mut lines = text.lines();
    let head: Vec<&str> = lines.next().unwrap().split(',').collect();
    let col = |n: &str| head.iter().position(|h| *h == n).unwrap();
    let (src, dst) = (col("src"), col("dst"));
    let ours: BTreeSet<String> = lines
        .flat_map(|l| {
            let f: Vec<&str> = l.split(',').collect();
            [f[src].to_string(), f[dst].to_string()]
        })
        .filter(|a| !a.contains(':'))
        .collect();
    let theirs: BTreeSet<String> = theirs
        .iter()
        .flat_map(|r| r.split(',').take(2).map(str::to_string).collect::<Vec<_>>())
        .collect();
    assert_eq!(ours.len(), 400 + 13);
    assert_eq!(ours, theirs);
    std::fs::remove_dir_all(&d).unwrap();
}

#[test]
fn a_bad_key_file_is_refused_at_start_in_one_line() {
    let d = dir("badkey");
    let input = built_trace(&d, "in.pcap", 2, 2, 1_000);
    let key = write_file(&d, "short.key", &[1; 31]);
    for args in [
        vec![
            "anonymize",
            "-r",
            &p(&input),
            "-w",
            &p(&d.join("o.pcapng")),
            "-K",
            &p(&key),
        ],
        vec![
            "capture",
            "-r",
            &p(&input),
            "-w",
            &p(&d.join("o.pcapng")),
            "--anonymize",
            &p(&key),
        ],
        vec!["flows", "-r", &p(&input), "--anonymize", &p(&key)],
    ] {
        let o = run_limited(&mut tapflow(&args), Duration::from_secs(20));
        assert_clean_error(
            &o,
            Some(2),
            &["short.key", "32 bytes or 64 hex digits"],
            &args.join(" "),
        );
        assert!(!d.join("o.pcapng").exists() && !d.join("o.pcapng.part").exists());
    }
    std::fs::remove_dir_all(&d).unwrap();
}

#[test]
fn recv_anonymizes_forwarded_headers_as_the_file_command_does() {
    require_root();
    let ns = Netns::new("anrecv");
    let d = dir("recv");
    let input = built_trace(&d, "in.pcap", 200, 5, 1_000_000);
    let key = write_file(&d, "key", &KEY);
    let (out, json) = (d.join("r.pcapng.zst"), d.join("r.json"));
    let mut recv = VethPair::spawn(&mut ns.tapflow(&[
        "recv",
        "-q",
        "--listen",
        "127.0.0.1:6100",
        "-w",
        &p(&out),
        "--summary-json",
        &p(&json),
        "--anonymize",
        &p(&key),
    ]));
    wait_udp_bound(&mut recv, 6100);
    run_ok(&mut ns.tapflow(&[
        "capture",
        "-q",
        "-r",
        &p(&input),
        "-s",
        "128",
        "--forward",
        "127.0.0.1:6100",
    ]));
    std::thread::sleep(Duration::from_millis(300));
    recv.signal(libc::SIGINT);
    let (st, err) = recv.wait_output(Duration::from_secs(20));
    assert!(st.success(), "recv: {err}");
    assert_eq!(
        json_u64(&std::fs::read_to_string(&json).unwrap(), "records"),
        1000
    );
    let direct = d.join("direct.pcapng");
    run_ok(
        tapflow([
            "anonymize",
            "-q",
            "-s",
            "128",
            "-r",
            &p(&input),
            "-w",
            &p(&direct),
            "-K",
        ])
        .arg(&key),
    );
    let (got, want) = (checked(&out), checked(&direct));
    assert_eq!(got.len(), 1000);
    assert_eq!(got, want);
    let plain = checked(&input);
    assert!(got.iter().zip(&plain).all(|(a, b)| a[..4] != b[..4]));
    std::fs::remove_dir_all(&d).unwrap();
}

/// Per packet: every address tshark sees anywhere (outer, quoted and tunnelled headers), and
/// the status of every checksum it checks.
fn everywhere(file: &Path) -> Vec<(Vec<String>, Vec<String>)> {
    let mut c = Command::new("tshark");
    c.arg("-n").arg("-r").arg(file);
    for proto in ["ip", "tcp", "udp"] {
        c.args(["-o", &format!("{proto}.check_checksum:TRUE")]);
    }
    c.args(["-T", "fields", "-E", "separator=\t"]);
    let addresses = ["ip.src", "ip.dst", "ipv6.src", "ipv6.dst"];
    let statuses = [
        "ip.checksum.status",
        "udp.checksum.status",
        "tcp.checksum.status",
        "icmp.checksum.status",
        "icmpv6.checksum.status",
        "gre.checksum.status",
    ];
    for f in addresses.iter().chain(&statuses) {
        c.args(["-e", f]);
    }
    let o = run_limited(&mut c, Duration::from_secs(120));
    assert!(
        o.status.success(),
        "tshark: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    String::from_utf8_lossy(&o.stdout)
        .lines()
        .map(|l| {
            let f: Vec<&str> = l.split('\t').collect();
            let all = f[..4]
                .iter()
                .flat_map(|c| c.split(','))
                .filter(|a| !a.is_empty())
                .map(str::to_string)
                .collect();
            (all, f[4..].iter().map(|s| s.to_string()).collect())
        })
        .collect()
}

/// The Crypto-PAn image of an address as tshark writes it.
fn image(pan: &CryptoPan, a: &str) -> String {
    match a.parse::<IpAddr>().unwrap() {
        IpAddr::V4(v) => Ipv4Addr::from(pan.ipv4(v.octets())).to_string(),
        IpAddr::V6(v) => Ipv6Addr::from(pan.ipv6(v.octets())).to_string(),
    }
}

/// Anonymises `input` into `dir` and checks what tshark sees in it: every address in the
/// output is the image of one in the input, no original survives (but one that is its own
/// image), and every checksum has the status it had, packet by packet. Returns tapflow's
/// stderr and the number of distinct original addresses.
fn anonymized_everywhere(input: &Path, dir: &Path, key: &Path) -> (String, usize) {
    let name = input.file_name().unwrap().to_string_lossy();
    let out = dir.join(format!("{name}.anon.pcapng"));
    let o = run_limited(
        tapflow(["anonymize", "-q", "-r", &p(input), "-w", &p(&out), "-K"]).arg(key),
        Duration::from_secs(60),
    );
    let err = String::from_utf8_lossy(&o.stderr).into_owned();
    assert!(o.status.success(), "{name}: {err}");
    let pan = CryptoPan::new(&KEY);
    let (before, after) = (everywhere(input), everywhere(&out));
    assert_eq!(before.len(), after.len(), "{name}");
    let mut originals = BTreeSet::new();
    for (i, ((ab, sb), (aa, sa))) in before.iter().zip(&after).enumerate() {
        assert_eq!(sb, sa, "{name} packet {}: checksum statuses", i + 1);
        let want: Vec<String> = ab.iter().map(|a| image(&pan, a)).collect();
        assert_eq!(*aa, want, "{name} packet {}: addresses", i + 1);
        originals.extend(ab.iter().cloned());
    }
    let left: Vec<&String> = after
        .iter()
        .flat_map(|(a, _)| a)
        .filter(|a| originals.contains(*a) && image(&pan, a) != **a)
        .collect();
    assert!(left.is_empty(), "{name}: originals left: {left:?}");
    (err, originals.len())
}

fn eth(et: u16, payload: &[u8]) -> Vec<u8> {
    let mut f = vec![2, 0, 0, 0, 0, 2, 2, 0, 0, 0, 0, 1];
    f.extend(et.to_be_bytes());
    f.extend_from_slice(payload);
    f
}

fn put_checksum(b: &mut [u8], at: usize, sum: u32) {
    let c = checksum::finish(sum);
    b[at..at + 2].copy_from_slice(&if c == 0 { 0xffff } else { c }.to_be_bytes());
}

/// An IP packet (the version by the addresses) with a right header checksum.
fn ip(src: IpAddr, dst: IpAddr, proto: u8, payload: &[u8]) -> Vec<u8> {
    let mut h = match (src, dst) {
        (IpAddr::V4(s), IpAddr::V4(d)) => {
            let mut h = vec![0x45, 0, 0, 0, 0, 1, 0, 0, 64, proto, 0, 0];
            h[2..4].copy_from_slice(&((20 + payload.len()) as u16).to_be_bytes());
            h.extend(s.octets());
            h.extend(d.octets());
            let s = checksum::sum(&h);
            put_checksum(&mut h, 10, s);
            h
        }
        (IpAddr::V6(s), IpAddr::V6(d)) => {
            let mut h = vec![0x60, 0, 0, 0, 0, 0, proto, 64];
            h[4..6].copy_from_slice(&(payload.len() as u16).to_be_bytes());
            h.extend(s.octets());
            h.extend(d.octets());
            h
        }
        _ => unreachable!("one family per header"),
    };
    h.extend_from_slice(payload);
    h
}

/// A UDP (17) or TCP (6) segment with a right checksum.
fn segment(src: IpAddr, dst: IpAddr, proto: u8, payload: &[u8]) -> Vec<u8> {
    let mut s = if proto == 17 {
        let mut s = vec![0x9c, 0x40, 0, 53, 0, 0, 0, 0];
        s[4..6].copy_from_slice(&((8 + payload.len()) as u16).to_be_bytes());
        s
    } else {
        let mut s = vec![
            0x9c, 0x40, 0, 80, 0, 0, 0, 1, 0, 0, 0, 0, 0x50, 0x18, 0xff, 0xff,
        ];
        s.extend([0; 4]);
        s
    };
    s.extend_from_slice(payload);
    let len = s.len();
    let pseudo = match (src, dst) {
        (IpAddr::V4(a), IpAddr::V4(b)) => checksum::pseudo_header_v4(a, b, proto, len as u16),
        (IpAddr::V6(a), IpAddr::V6(b)) => checksum::pseudo_header_v6(a, b, proto, len as u32),
        _ => unreachable!("one family per header"),
    };
    let sum = checksum::combine(pseudo, checksum::sum(&s));
    put_checksum(&mut s, if proto == 17 { 6 } else { 16 }, sum);
    s
}

/// An ICMP error of `ty` quoting `quote`.
fn icmp_error(ty: u8, quote: &[u8]) -> Vec<u8> {
    let mut m = vec![ty, if ty == 3 { 3 } else { 0 }, 0, 0, 0, 0, 0, 0];
    m.extend_from_slice(quote);
    let s = checksum::sum(&m);
    put_checksum(&mut m, 2, s);
    m
}

/// A pcap of `frames` (Ethernet).
fn pcap_of(path: &Path, frames: &[Vec<u8>]) {
    let mut out = Vec::new();
    tapflow_wire::pcap::write_header(&mut out, tapflow_wire::LinkType::Ethernet, 65535);
    for (i, f) in frames.iter().enumerate() {
        tapflow_wire::pcap::write_record(&mut out, T0 + i as u64 * 1000, f, f.len() as u32);
    }
    std::fs::write(path, out).unwrap();
}

fn addr(a: &str) -> IpAddr {
    a.parse().unwrap()
}

#[test]
fn quoted_and_tunnelled_headers_keep_no_original_address_and_every_checksum_status() {
    let d = tempfile::tempdir().unwrap();
    let key = write_file(d.path(), "key", &KEY);
    let (a, b, c, e) = (
        addr("192.0.2.1"),
        addr("198.51.100.2"),
        addr("10.1.2.3"),
        addr("10.9.8.7"),
    );
    let (v, w) = (addr("2001:db8::1"), addr("2001:db8:1::2"));
    let udp = ip(c, e, 17, &segment(c, e, 17, &[0x55; 40]));
    let tcp = ip(c, e, 6, &segment(c, e, 6, b"GET / HTTP/1.1\r\n\r\n"));
    let mut wrong = tcp.clone();
    *wrong.last_mut().unwrap() ^= 1;
    let frames = [
        // Port unreachable quoting the UDP header, as routers cut it.
        eth(0x0800, &ip(b, a, 1, &icmp_error(3, &udp[..28]))),
        // Time exceeded quoting a whole TCP segment, then one whose checksum is wrong.
        eth(0x0800, &ip(b, a, 1, &icmp_error(11, &tcp))),
        eth(0x0800, &ip(b, a, 1, &icmp_error(11, &wrong))),
        // IP-in-IP, and IPv6 UDP in IPv4 (6in4).
        eth(0x0800, &ip(a, b, 4, &tcp)),
        eth(
            0x0800,
            &ip(a, b, 41, &ip(v, w, 17, &segment(v, w, 17, b"q"))),
        ),
    ];
    let input = d.path().join("errors-and-tunnels.pcap");
    pcap_of(&input, &frames);
    let (err, n) = anonymized_everywhere(&input, d.path(), &key);
    assert_eq!(n, 6);
    assert!(!err.contains("could not anonymise"), "{err}");

    // PPTP's GRE (version 1, PPP inside) is not read: the closing line says so.
    let mut pptp = vec![
        0x30, 0x01, 0x88, 0x0b, 0, 0, 0, 1, 0, 0, 0, 1, 0xff, 0x03, 0, 0x21,
    ];
    pptp[4..6].copy_from_slice(&((tcp.len() + 4) as u16).to_be_bytes());
    pptp.extend_from_slice(&tcp);
    let input = d.path().join("pptp.pcap");
    pcap_of(
        &input,
        &[eth(0x0800, &ip(a, b, 47, &pptp)), frames[3].clone()],
    );
    let out = d.path().join("pptp.pcapng");
    let o = run_limited(
        tapflow(["anonymize", "-q", "-r", &p(&input), "-w", &p(&out), "-K"]).arg(&key),
        Duration::from_secs(60),
    );
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success(), "{err}");
    assert!(
        err.lines().any(|l| l
            == "tapflow: 1 packet had headers it could not anonymise, their addresses kept: \
                1 in GRE payloads of another kind"),
        "{err}"
    );
}

#[test]
fn corpus_tunnels_and_icmp_errors_keep_no_original_address_and_every_checksum_status() {
    let Some(corpus) = corpus() else { return };
    let d = tempfile::tempdir().unwrap();
    let key = write_file(d.path(), "key", &KEY);
    for (name, addresses) in [
        ("chrissanders-icmp-traceroute.pcapng", 10),
        ("zeek-icmp-destunreach-udp.pcap", 2),
        ("zeek-icmp6-destunreach-ip6ext-udp.pcap", 2),
        ("nfstream-6in4tunnel.pcap", 9),
        ("zeek-gtp1-gn-normal-incl-fragmentation.pcap", 4),
        ("zeek-tunnels-gre-aruba.pcap", 14),
        ("zeek-tunnels-gre-within-gre.pcap", 9),
        ("zeek-tunnels-teredo.pcap", 17),
        ("zeek-vxlan-encapsulated-http-jumbo.pcap", 4),
        ("zeek-erspan.pcap", 9),
        ("ja4-tcpdump-geneve.pcap", 4),
    ] {
        let (err, n) = anonymized_everywhere(&corpus.join(name), d.path(), &key);
        assert_eq!(n, addresses, "{name}: distinct addresses");
        assert!(!err.contains("could not anonymise"), "{name}: {err}");
    }
}
