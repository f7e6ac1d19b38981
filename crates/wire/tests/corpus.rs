//! Reads every capture of the shared corpus and checks it against `MANIFEST.tsv`, whose packet
//! counts, link types and first/last timestamps were taken with tshark and capinfos; then the
//! same checks on captures built here with the packet builder, whose contents are known.
//!
//! The corpus lives in `$TAPFLOW_CORPUS`, else in `shared/corpus` beside the repository; without
//! it the corpus tests print one `skipped:` line and return, and the built ones still run.

mod support;

use std::borrow::Cow;
use std::cell::Cell;
use std::collections::BTreeSet;
use std::path::PathBuf;

use support::corpus::corpus;
use support::traffic::{self, Packet};
use tapflow_wire::LinkType;
use tapflow_wire::capfile::{FileError, FileErrorKind, Format, MAXIMUM_SNAPLEN, Reader};

/// Counts this thread's allocations, to prove the packet loop allocates nothing.
struct CountingAlloc;

thread_local! {
    static ALLOCS: Cell<u64> = const { Cell::new(0) };
}

// SAFETY: forwards every call unchanged to the system allocator; only counts.
unsafe impl std::alloc::GlobalAlloc for CountingAlloc {
    unsafe fn alloc(&self, l: std::alloc::Layout) -> *mut u8 {
        ALLOCS.with(|c| c.set(c.get() + 1));
        // SAFETY: the caller upholds `alloc`'s contract, which we pass on.
        unsafe { std::alloc::System.alloc(l) }
    }
    unsafe fn dealloc(&self, p: *mut u8, l: std::alloc::Layout) {
        // SAFETY: `p` came from `System.alloc` with layout `l`.
        unsafe { std::alloc::System.dealloc(p, l) }
    }
}

#[global_allocator]
static GLOBAL: CountingAlloc = CountingAlloc;

/// Where a capture's bytes are.
#[derive(Debug)]
enum Source {
    /// A corpus file.
    File(PathBuf),
    /// A capture built by this test.
    Built(Vec<u8>),
}

/// One capture and what it holds: a row of `MANIFEST.tsv`, or what a built capture was made of.
#[derive(Debug)]
struct Entry {
    file: String,
    source: Source,
    packets: u64,
    link_type: String,
    file_format: String,
    /// First and last timestamps, µs since 1970, where known.
    first_us: Option<i64>,
    last_us: Option<i64>,
    tshark_open_status: String,
}

impl Entry {
    fn opens_cleanly(&self) -> bool {
        self.tshark_open_status == "ok"
    }

    fn bytes(&self) -> Cow<'_, [u8]> {
        match &self.source {
            Source::File(p) => {
                Cow::Owned(std::fs::read(p).unwrap_or_else(|e| panic!("{}: {e}", p.display())))
            }
            Source::Built(b) => Cow::Borrowed(b),
        }
    }

    /// The link-type names the manifest gives: `EN10MB (ether)` or `MIXED(...) DLTs=1,113 ...`.
    fn link_types(&self) -> BTreeSet<&'static str> {
        if let Some(list) = self.link_type.split("DLTs=").nth(1) {
            let list = list.split_whitespace().next().unwrap();
            return list
                .split(',')
                .map(|n| LinkType::from_u16(n.parse().unwrap()).name())
                .collect();
        }
        let name = match self.link_type.split_whitespace().next().unwrap() {
            // Wireshark's name for link type 1, which some manifest rows give.
            "Ethernet" => "EN10MB",
            n => n,
        };
        let known = (0..=u16::MAX)
            .map(|n| LinkType::from_u16(n).name())
            .find(|n| *n == name);
        BTreeSet::from([known.unwrap_or_else(|| panic!("{}: unknown link type {name}", self.file))])
    }
}

/// The manifest's file format, unless the file's magic says it is another: some rows give
/// the name's extension (a classic pcap named `.pcapng` is listed as pcapng).
fn file_format(path: &std::path::Path, listed: &str) -> String {
    let mut magic = [0u8; 4];
    let read =
        std::fs::File::open(path).and_then(|mut f| std::io::Read::read_exact(&mut f, &mut magic));
    let found = match (read.is_ok(), u32::from_le_bytes(magic)) {
        (false, _) => return listed.to_owned(),
        (true, 0x0a0d_0d0a) => "pcapng",
        (true, 0xa1b2_c3d4 | 0xd4c3_b2a1) => "pcap",
        (true, 0xa1b2_3c4d | 0x4d3c_b2a1) => "nsecpcap",
        _ => return listed.to_owned(),
    };
    if found != listed {
        eprintln!(
            "corpus: {}: the manifest says {listed}, its magic says {found}",
            path.display()
        );
    }
    found.to_owned()
}

/// The corpus's captures, as its manifest describes them; `None` (the test is skipped) without
/// the corpus.
fn manifest() -> Option<Vec<Entry>> {
    let dir = corpus()?;
    let text = std::fs::read_to_string(dir.join("MANIFEST.tsv")).unwrap();
    let mut lines = text.lines();
    let head: Vec<&str> = lines.next().unwrap().split('\t').collect();
    let col = |name: &str| head.iter().position(|h| *h == name).expect(name);
    let unquote = |s: &str| match s.strip_prefix('"').and_then(|s| s.strip_suffix('"')) {
        Some(inner) => inner.replace("\"\"", "\""),
        None => s.to_owned(),
    };
    let rows: Vec<Entry> = lines
        .filter(|l| !l.is_empty())
        .map(|l| {
            let f: Vec<&str> = l.split('\t').collect();
            Entry {
                file: f[col("file")].to_owned(),
                source: Source::File(dir.join(f[col("file")])),
                packets: f[col("packets")].parse().unwrap(),
                link_type: f[col("link_type")].to_owned(),
                file_format: file_format(&dir.join(f[col("file")]), f[col("file_format")]),
                first_us: iso_micros(f[col("first_ts_utc")]),
                last_us: iso_micros(f[col("last_ts_utc")]),
                tshark_open_status: unquote(f[col("tshark_open_status")]),
            }
        })
        .collect();
    assert!(
        rows.len() >= 50,
        "MANIFEST.tsv lists only {} files",
        rows.len()
    );
    Some(rows)
}

/// Captures built from the same traffic in every format and byte order the reader takes, with
/// link types of several kinds, cut packets, a pcapng of three link types, and a pcap cut short
/// in the middle of a packet; described as the manifest would describe them.
fn built() -> Vec<Entry> {
    const T0: u64 = 1_700_000_000_123_456_789;
    let traffic = traffic::conversations(0, 40, 25, T0, 1_000_003);
    let entry = |file: &str, bytes, packets: &[Packet], link_type: &str, format: &str| Entry {
        file: file.to_owned(),
        source: Source::Built(bytes),
        packets: packets.len() as u64,
        link_type: link_type.to_owned(),
        file_format: format.to_owned(),
        first_us: Some((packets[0].ts_ns / 1000) as i64),
        last_us: Some((packets[packets.len() - 1].ts_ns / 1000) as i64),
        tshark_open_status: "ok".to_owned(),
    };
    let raw = traffic::relink_all(&traffic, LinkType::Raw, 96);
    let sll = traffic::relink_all(&traffic, LinkType::LinuxSll, 65535);
    let null = traffic::relink_all(&traffic, LinkType::Null, 65535);
    let ifaces = [
        (LinkType::Ethernet, 65535),
        (LinkType::LinuxSll2, 65535),
        (LinkType::Raw, 128),
    ];
    let mixed = traffic::on_interfaces(&traffic, &ifaces);
    let ether = traffic::pcap_file(LinkType::Ethernet, false, false, 65535, &traffic);
    let cut = traffic::cut_short(&ether, &traffic, 700);
    let mut e = vec![
        entry(
            "built-ether-usec.pcap",
            ether,
            &traffic,
            "EN10MB (ether)",
            "pcap",
        ),
        entry(
            "built-raw-nsec-big-endian.pcap",
            traffic::pcap_file(LinkType::Raw, true, true, 96, &raw),
            &raw,
            "RAW (rawip)",
            "nsecpcap",
        ),
        entry(
            "built-sll-usec-big-endian.pcap",
            traffic::pcap_file(LinkType::LinuxSll, false, true, 65535, &sll),
            &sll,
            "LINUX_SLL (linux-sll)",
            "pcap",
        ),
        entry(
            "built-null-nsec.pcap",
            traffic::pcap_file(LinkType::Null, true, false, 65535, &null),
            &null,
            "NULL (null)",
            "nsecpcap",
        ),
        entry(
            "built-three-link-types.pcapng",
            traffic::pcapng_file(&ifaces, &mixed),
            &mixed,
            "MIXED(built) DLTs=1,276,101",
            "pcapng",
        ),
        entry(
            "built-cut-short.pcap",
            cut,
            &traffic[..700],
            "EN10MB (ether)",
            "pcap",
        ),
    ];
    e[5].tshark_open_status = "cut short in the middle of a packet".to_owned();
    e
}

/// `2020-01-01T00:00:00.000000Z` as µs since 1970; `None` for other spellings.
fn iso_micros(s: &str) -> Option<i64> {
    let (date, time) = s.strip_suffix('Z')?.split_once('T')?;
    let d: Vec<i64> = date
        .split('-')
        .map(|x| x.parse().ok())
        .collect::<Option<_>>()?;
    let (hms, frac) = time.split_once('.')?;
    let t: Vec<i64> = hms
        .split(':')
        .map(|x| x.parse().ok())
        .collect::<Option<_>>()?;
    if frac.len() != 6 {
        return None;
    }
    // Days from civil (H. Hinnant).
    let (y, m) = if d[1] <= 2 {
        (d[0] - 1, d[1])
    } else {
        (d[0], d[1])
    };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let doy = (153 * (m + if m > 2 { -3 } else { 9 }) + 2) / 5 + d[2] - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    let days = era * 146_097 + doe - 719_468;
    Some(
        ((days * 24 + t[0]) * 60 + t[1]) * 60 * 1_000_000
            + t[2] * 1_000_000
            + frac.parse::<i64>().ok()?,
    )
}

/// Everything a reader returned for one file.
struct Outcome {
    format: Format,
    packets: u64,
    link_types: BTreeSet<&'static str>,
    min_ts: u64,
    max_ts: u64,
    error: Option<FileError>,
}

fn read_all(bytes: &[u8]) -> Result<Outcome, FileError> {
    let mut r = Reader::new(bytes)?;
    let mut o = Outcome {
        format: r.format(),
        packets: 0,
        link_types: BTreeSet::new(),
        min_ts: u64::MAX,
        max_ts: 0,
        error: None,
    };
    let mut used = BTreeSet::new();
    while let Some(p) = r.next_packet() {
        match p {
            Ok(p) => {
                assert!(p.data.len() as u64 <= u64::from(p.len), "caplen above len");
                assert!(p.data.len() as u32 <= MAXIMUM_SNAPLEN);
                used.insert(p.interface);
                o.packets += 1;
                o.min_ts = o.min_ts.min(p.ts_ns);
                o.max_ts = o.max_ts.max(p.ts_ns);
            }
            Err(e) => {
                assert_eq!(r.offset(), e.offset, "offset() stays at the damage");
                assert!(r.next_packet().is_none(), "None forever after an error");
                o.error = Some(e);
                break;
            }
        }
    }
    o.link_types = used
        .iter()
        .map(|&i| r.interfaces()[i as usize].linktype.name())
        .collect();
    Ok(o)
}

#[test]
fn clean_files_match_the_manifest() {
    let Some(m) = manifest() else { return };
    read_back_as_described(&m, 50);
}

#[test]
fn built_files_read_back_as_written() {
    read_back_as_described(&built(), 5);
}

/// Every clean capture reads without error: its packet count, link types, format and first and
/// last timestamps are as described; at least `least` were checked.
fn read_back_as_described(entries: &[Entry], least: usize) {
    let mut checked = 0;
    for e in entries.iter().filter(|e| e.opens_cleanly()) {
        let bytes = e.bytes();
        let o = read_all(&bytes).unwrap_or_else(|err| panic!("{}: {err}", e.file));
        assert_eq!(o.error, None, "{}", e.file);
        assert_eq!(o.packets, e.packets, "{}: packet count", e.file);
        assert_eq!(o.link_types, e.link_types(), "{}: link types", e.file);
        let want_format = match e.file_format.as_str() {
            "pcap" => matches!(o.format, Format::Pcap { nanos: false, .. }),
            "nsecpcap" => matches!(o.format, Format::Pcap { nanos: true, .. }),
            "pcapng" => o.format == Format::Pcapng,
            f => panic!("{}: unknown file_format {f}", e.file),
        };
        assert!(
            want_format,
            "{}: format {:?}, manifest says {}",
            e.file, o.format, e.file_format
        );
        // The manifest gives µs; allow 1 µs for its rounding of ns files.
        if let (Some(first), Some(last)) = (e.first_us, e.last_us) {
            let us = |ns: u64| (ns / 1000) as i64;
            assert!(
                (us(o.min_ts) - first).abs() <= 1,
                "{}: first ts {} vs {first} µs",
                e.file,
                o.min_ts,
            );
            assert!(
                (us(o.max_ts) - last).abs() <= 1,
                "{}: last ts {} vs {last} µs",
                e.file,
                o.max_ts,
            );
        }
        checked += 1;
    }
    assert!(checked >= least, "only {checked} clean files");
}

#[test]
fn cut_short_files_keep_every_packet_before_the_damage() {
    let Some(m) = manifest() else { return };
    keep_every_packet_before_the_cut(&m);
}

#[test]
fn built_files_cut_short_keep_every_packet_before_the_cut() {
    keep_every_packet_before_the_cut(&built());
}

/// Captures cut short in the middle of a packet give every packet before it, then a
/// truncation error at the cut packet's offset.
fn keep_every_packet_before_the_cut(entries: &[Entry]) {
    let mut checked = 0;
    for e in entries
        .iter()
        .filter(|e| e.tshark_open_status.contains("cut short"))
    {
        let bytes = e.bytes();
        let o = read_all(&bytes).unwrap();
        // capinfos: "An error occurred after reading N packets", N being the manifest's count.
        assert_eq!(o.packets, e.packets, "{}", e.file);
        let err = o.error.unwrap_or_else(|| panic!("{}: no error", e.file));
        let size = bytes.len() as u64;
        match err.kind {
            FileErrorKind::Truncated { claimed, remain } => {
                assert_eq!(remain, size - err.offset, "{}: {err}", e.file);
                assert!(claimed > remain, "{}: {err}", e.file);
            }
            FileErrorKind::ShortRecordHeader { remain, .. } => {
                assert_eq!(remain, size - err.offset, "{}: {err}", e.file)
            }
            k => panic!("{}: expected a truncation error, got {k}", e.file),
        }
        println!("{}: {err}", e.file);
        checked += 1;
    }
    assert!(
        checked >= 1,
        "no cut-short file among {} captures",
        entries.len()
    );
}

/// Offset of the last block of a pcapng file, from its trailing length.
fn last_block_type(bytes: &[u8]) -> u32 {
    let n = bytes.len();
    let len = u32::from_le_bytes(bytes[n - 4..].try_into().unwrap()) as usize;
    u32::from_le_bytes(bytes[n - len..n - len + 4].try_into().unwrap())
}

#[test]
fn damaged_copies_of_clean_files() {
    let Some(m) = manifest() else { return };
    damaged_copies(&m);
}

#[test]
fn damaged_copies_of_built_files() {
    damaged_copies(&built());
}

/// Copies of every clean capture that lack the last byte, start with another magic, or whose
/// first record claims a 2 GiB packet: the packets before the damage, then an error there.
fn damaged_copies(entries: &[Entry]) {
    for e in entries.iter().filter(|e| e.opens_cleanly()) {
        let bytes = e.bytes();
        let cut = &bytes[..bytes.len() - 1];
        let o = read_all(cut).unwrap();
        let err = o
            .error
            .unwrap_or_else(|| panic!("{}: cut file read without error", e.file));
        assert!(err.offset < cut.len() as u64, "{}: {err}", e.file);
        let lost = match e.file_format.as_str() {
            "pcapng" if last_block_type(&bytes) != 6 => 0,
            _ => 1,
        };
        assert_eq!(o.packets, e.packets - lost, "{}: {err}", e.file);

        let mut zero = bytes.to_vec();
        zero[..4].copy_from_slice(b"\x7fELF");
        let err = Reader::new(&zero).unwrap_err();
        assert_eq!(
            err.to_string(),
            "byte offset 0: not a pcap, pcapng or ERF file: magic 0x7f454c46"
        );

        if e.file_format != "pcapng" {
            // A first record that claims a 2 GiB packet.
            let mut huge = bytes.to_vec();
            let big_endian = bytes[0] == 0xa1;
            let caplen = if big_endian {
                0x7fff_ffffu32.to_be_bytes()
            } else {
                0x7fff_ffffu32.to_le_bytes()
            };
            huge[32..36].copy_from_slice(&caplen);
            let o = read_all(&huge).unwrap();
            assert_eq!(o.packets, 0);
            let err = o.error.unwrap();
            assert_eq!(err.offset, 24);
            assert_eq!(
                err.kind,
                FileErrorKind::CaplenTooLarge {
                    caplen: 0x7fff_ffff
                }
            );
        }
    }
}

#[test]
fn mixed_link_type_pcapng_names_its_interfaces() {
    let Some(m) = manifest() else { return };
    names_its_interfaces(&m);
}

#[test]
fn built_mixed_link_type_pcapng_names_its_interfaces() {
    names_its_interfaces(&built());
}

/// The pcapng of several link types lists each interface's.
fn names_its_interfaces(entries: &[Entry]) {
    let e = entries
        .iter()
        .find(|e| e.link_type.starts_with("MIXED"))
        .expect("a mixed-link-type file");
    let bytes = e.bytes();
    let mut r = Reader::new(&bytes).unwrap();
    while let Some(p) = r.next_packet() {
        p.unwrap();
    }
    let lts: BTreeSet<_> = r.interfaces().iter().map(|i| i.linktype.name()).collect();
    assert_eq!(lts, e.link_types());
}

#[test]
fn packet_loop_does_not_allocate() {
    let Some(m) = manifest() else { return };
    reads_packets_without_allocating(&m);
}

#[test]
fn packet_loop_does_not_allocate_on_built_files() {
    reads_packets_without_allocating(&built());
}

/// Reading the packets of a clean capture allocates nothing once its interfaces are known.
fn reads_packets_without_allocating(entries: &[Entry]) {
    let mut checked = 0;
    for e in entries.iter().filter(|e| e.opens_cleanly()) {
        let bytes = e.bytes();
        let mut r = Reader::new(&bytes).unwrap();
        // pcapng interfaces met later allocate their name: prime them with a first pass.
        let interfaces_later = {
            let mut r2 = r.clone();
            while r2.next_packet().is_some() {}
            r2.interfaces().len() != r.interfaces().len()
        };
        let before = ALLOCS.with(Cell::get);
        let mut n = 0u64;
        while let Some(p) = r.next_packet() {
            n += p.unwrap().data.len() as u64 & 1;
        }
        let allocs = ALLOCS.with(Cell::get) - before;
        if !interfaces_later {
            assert_eq!(
                allocs, 0,
                "{}: {allocs} allocations reading packets ({n})",
                e.file
            );
            checked += 1;
        }
    }
    assert!(
        checked > 0,
        "no capture had its interfaces before its packets"
    );
}

/// `cargo test --release -p tapflow-wire --test corpus -- --ignored --nocapture read_speed`
#[test]
#[ignore = "timing; run in release"]
fn read_speed() {
    let Some(m) = manifest() else { return };
    let files: Vec<Cow<'_, [u8]>> = m
        .iter()
        .filter(|e| e.opens_cleanly())
        .map(Entry::bytes)
        .collect();
    let start = std::time::Instant::now();
    let (mut packets, mut sum) = (0u64, 0u64);
    for _ in 0..20 {
        for f in &files {
            let mut r = Reader::new(f).unwrap();
            while let Some(Ok(p)) = r.next_packet() {
                packets += 1;
                sum = sum.wrapping_add(p.ts_ns ^ u64::from(p.len) ^ p.data.len() as u64);
            }
        }
    }
    let el = start.elapsed();
    println!(
        "{packets} packets in {el:?}: {:.1} ns/packet ({sum:x})",
        el.as_nanos() as f64 / packets as f64
    );
}

/// `cargo test --release -p tapflow-wire --test corpus -- --ignored --nocapture read_speed_in_cache`
#[test]
#[ignore = "timing; run in release"]
fn read_speed_in_cache() {
    let Some(dir) = corpus() else { return };
    for name in [
        "ndpi-gnutella.pcap",
        "chrissanders-synscan.pcapng",
        "nfstream-ip-fragmented-garbage.pcap",
    ] {
        let bytes = std::fs::read(dir.join(name)).unwrap();
        let start = std::time::Instant::now();
        let (mut packets, mut sum) = (0u64, 0u64);
        for _ in 0..200 {
            let mut r = Reader::new(&bytes).unwrap();
            while let Some(Ok(p)) = r.next_packet() {
                packets += 1;
                sum = sum.wrapping_add(p.ts_ns ^ u64::from(p.len) ^ p.data.len() as u64);
            }
        }
        let el = start.elapsed();
        println!(
            "{name}: {packets} packets, {:.1} ns/packet ({sum:x})",
            el.as_nanos() as f64 / packets as f64
        );
    }
}
