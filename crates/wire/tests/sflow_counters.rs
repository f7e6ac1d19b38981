//! tshark's sFlow dissector as the oracle for the interface counters `tapflow collect` keeps
//! from sFlow v5 counter samples: datagrams built here, flat (0:2) and expanded (0:4) counter
//! samples with 64-bit counters past 2^32, an Ethernet counters record beside each (skipped),
//! are decoded by both, and every field must be equal; so are the datagrams a real agent
//! (pmacctd's sfprobe, capturing live) sent, flow samples and a counter sample.
//!
//! Needs Wireshark's command-line tools (`apt-get install tshark`); fails if they are missing.

use std::path::PathBuf;
use std::process::Command;

use tapflow_wire::flowdecode::{Decoded, Decoder, Limits, Protocol};
use tapflow_wire::sflow::IfCounters;

fn words(v: &[u32]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_be_bytes()).collect()
}

fn item(format: u32, body: &[u8]) -> Vec<u8> {
    let mut b = words(&[format, body.len() as u32]);
    b.extend_from_slice(body);
    b
}

/// A small deterministic generator (xorshift), so the values are varied and reproducible.
struct Rng(u64);

impl Rng {
    fn u32(&mut self) -> u32 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        (self.0 >> 16) as u32
    }
}

/// Datagram `n`: one counter sample (expanded if `n` is odd) of interface `n + 1`.
fn datagram(n: u32, rng: &mut Rng) -> Vec<u8> {
    let mut generic = Vec::new();
    generic.extend_from_slice(&words(&[n + 1, 6]));
    generic.extend_from_slice(&words(&[rng.u32() % 4, rng.u32()])); // ifSpeed, 64 bits
    generic.extend_from_slice(&words(&[rng.u32() % 5, rng.u32() % 4]));
    generic.extend_from_slice(&words(&[rng.u32() % 16, rng.u32()])); // ifInOctets
    for _ in 0..6 {
        generic.extend_from_slice(&words(&[rng.u32()]));
    }
    generic.extend_from_slice(&words(&[rng.u32() % 16, rng.u32()])); // ifOutOctets
    for _ in 0..5 {
        generic.extend_from_slice(&words(&[rng.u32()]));
    }
    generic.extend_from_slice(&words(&[1 + rng.u32() % 2]));
    assert_eq!(generic.len(), 88);
    let ethernet = item(2, &words(&[rng.u32(); 13]));
    let records = [item(1, &generic), ethernet].concat();
    let sample = if n % 2 == 1 {
        let mut s = words(&[100 + n, 0, n + 1, 2]);
        s.extend_from_slice(&records);
        item(4, &s)
    } else {
        let mut s = words(&[100 + n, n + 1, 2]);
        s.extend_from_slice(&records);
        item(2, &s)
    };
    let mut d = words(&[5, 1, 0xc000_0201, 0, n, 1000 * n, 1]);
    d.extend_from_slice(&sample);
    d
}

/// A classic pcap of the datagrams, each in Ethernet/IPv4/UDP to port 6343.
fn pcap(datagrams: &[Vec<u8>]) -> Vec<u8> {
    let mut b = Vec::new();
    b.extend_from_slice(&0xa1b2_c3d4u32.to_le_bytes());
    b.extend_from_slice(&[2, 0, 4, 0]);
    for v in [0u32, 0, 65535, 1] {
        b.extend_from_slice(&v.to_le_bytes());
    }
    for (i, d) in datagrams.iter().enumerate() {
        let mut f = vec![2, 0, 0, 0, 0, 2, 2, 0, 0, 0, 0, 1, 0x08, 0x00];
        let ip_len = (20 + 8 + d.len()) as u16;
        f.extend_from_slice(&[0x45, 0]);
        f.extend_from_slice(&ip_len.to_be_bytes());
        f.extend_from_slice(&[0, 0, 0x40, 0, 64, 17, 0, 0, 192, 0, 2, 1, 192, 0, 2, 2]);
        f.extend_from_slice(&6343u16.to_be_bytes());
        f.extend_from_slice(&6343u16.to_be_bytes());
        f.extend_from_slice(&(8 + d.len() as u16).to_be_bytes());
        f.extend_from_slice(&[0, 0]);
        f.extend_from_slice(d);
        for v in [i as u32, 0, f.len() as u32, f.len() as u32] {
            b.extend_from_slice(&v.to_le_bytes());
        }
        b.extend_from_slice(&f);
    }
    b
}

const FIELDS: [&str; 20] = [
    "sflow_245.ifindex",
    "sflow_245.iftype",
    "sflow_245.ifspeed",
    "sflow_245.ifdirection",
    "sflow_245.ifadmin_status",
    "sflow_245.ifoper_status",
    "sflow_245.ifinoct",
    "sflow_245.ifinpkt",
    "sflow_245.ifinmcast",
    "sflow_245.ifinbcast",
    "sflow_245.ifindisc",
    "sflow_245.ifinerr",
    "sflow_245.ifinunk",
    "sflow_245.ifoutoct",
    "sflow_245.ifoutpkt",
    "sflow_245.ifoutmcast",
    "sflow_245.ifoutbcast",
    "sflow_245.ifoutdisc",
    "sflow_245.ifouterr",
    "sflow_245.ifpromisc",
];

/// Our values in the order of [`FIELDS`], as tshark prints them.
fn ours(c: &IfCounters) -> Vec<String> {
    let v = [
        u64::from(c.if_index),
        u64::from(c.if_type),
        c.if_speed,
        u64::from(c.if_direction),
        u64::from(c.if_status & 1),
        u64::from(c.if_status >> 1 & 1),
        c.in_octets,
        u64::from(c.in_ucast_pkts),
        u64::from(c.in_multicast_pkts),
        u64::from(c.in_broadcast_pkts),
        u64::from(c.in_discards),
        u64::from(c.in_errors),
        u64::from(c.in_unknown_protos),
        c.out_octets,
        u64::from(c.out_ucast_pkts),
        u64::from(c.out_multicast_pkts),
        u64::from(c.out_broadcast_pkts),
        u64::from(c.out_discards),
        u64::from(c.out_errors),
        u64::from(c.promiscuous_mode),
    ];
    v.iter().map(u64::to_string).collect()
}

/// The interface counters tshark reads from `file`, one row per counters record, as [`ours`].
fn tshark_counters(file: &std::path::Path) -> Vec<Vec<String>> {
    let mut args = vec![
        "-r".to_string(),
        file.display().to_string(),
        "-T".into(),
        "fields".into(),
    ];
    args.extend(["-Y".into(), "sflow_245.ifindex".into()]);
    for f in FIELDS {
        args.extend(["-e".to_string(), f.to_string()]);
    }
    args.extend(["-E".into(), "separator=,".into()]);
    let out = Command::new("tshark")
        .args(&args)
        .output()
        .unwrap_or_else(|e| {
            panic!(
                "cannot run tshark ({e}): this test needs Wireshark's CLI (apt-get install tshark)"
            )
        });
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(|l| {
            l.split(',')
                .map(|f| f.replace("True", "1").replace("False", "0"))
                .collect()
        })
        .collect()
}

/// The UDP payloads of a classic pcap of Ethernet/IPv4/UDP frames.
fn udp_payloads(file: &[u8]) -> Vec<Vec<u8>> {
    let mut out = Vec::new();
    let mut p = 24;
    while let Some(h) = file.get(p..p + 16) {
        let caplen = u32::from_le_bytes(h[8..12].try_into().unwrap()) as usize;
        let frame = &file[p + 16..p + 16 + caplen];
        let ihl = usize::from(frame[14] & 0x0f) * 4;
        out.push(frame[14 + ihl + 8..].to_vec());
        p += 16 + caplen;
    }
    out
}

#[test]
fn a_real_agents_counters_equal_tsharks() {
    let file = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/pmacctd-sfprobe-counters.pcap");
    let want = tshark_counters(&file);
    assert_eq!(want.len(), 1, "the fixture holds one counter sample");
    let mut d = Decoder::new(Limits::default());
    let (mut got, mut flows) = (Vec::new(), 0);
    for m in udp_payloads(&std::fs::read(&file).unwrap()) {
        let s = d
            .decode(Protocol::Sflow5, [0; 16], &m, 0, &mut |x| match x {
                Decoded::Counters { counters, .. } => got.push(ours(&counters)),
                Decoded::Flow(_) => flows += 1,
                Decoded::Interface { .. } => {}
            })
            .unwrap();
        assert_eq!(s.malformed, 0);
    }
    assert!(flows > 0);
    assert_eq!(got, want);
}

#[test]
fn interface_counters_equal_tsharks() {
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    let datagrams: Vec<Vec<u8>> = (0..40).map(|n| datagram(n, &mut rng)).collect();
    let mut d = Decoder::new(Limits::default());
    let mut got = Vec::new();
    for m in &datagrams {
        let s = d
            .decode(Protocol::Sflow5, [0; 16], m, 0, &mut |x| {
                if let Decoded::Counters { counters, .. } = x {
                    got.push(counters);
                }
            })
            .unwrap();
        assert_eq!((s.records, s.skipped, s.malformed), (0, 1, 0));
    }
    assert_eq!(got.len(), datagrams.len());
    assert_eq!(
        got.iter()
            .map(|c| (c.source_id, c.sequence))
            .collect::<Vec<_>>()[..2],
        [(1, 100), (2, 101)]
    );

    let file = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(format!(
        "tapflow-{}-sflow-counters.pcap",
        std::process::id()
    ));
    std::fs::write(&file, pcap(&datagrams)).unwrap();
    let mut args = vec![
        "-r".to_string(),
        file.display().to_string(),
        "-T".into(),
        "fields".into(),
    ];
    for f in FIELDS {
        args.extend(["-e".to_string(), f.to_string()]);
    }
    args.extend(["-E".into(), "separator=,".into()]);
    let out = Command::new("tshark")
        .args(&args)
        .output()
        .unwrap_or_else(|e| {
            panic!(
                "cannot run tshark ({e}): this test needs Wireshark's CLI (apt-get install tshark)"
            )
        });
    std::fs::remove_file(&file).unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8(out.stdout).unwrap();
    let rows: Vec<Vec<String>> = text
        .lines()
        .map(|l| {
            l.split(',')
                .map(|f| f.replace("True", "1").replace("False", "0"))
                .collect()
        })
        .collect();
    assert_eq!(rows.len(), got.len(), "{text}");
    for (c, row) in got.iter().zip(&rows) {
        assert_eq!(&ours(c), row, "{c:?}");
    }
}
