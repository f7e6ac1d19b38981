//! Reads every capture of the shared corpus and checks it against `MANIFEST.tsv`, whose packet
//! counts, link types and first/last timestamps were taken with tshark and capinfos.
//!
//! The corpus lives in `$TAPFLOW_CORPUS`, else in `shared/corpus` beside the repository.

use std::cell::Cell;
use std::collections::BTreeSet;
use std::path::PathBuf;

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

fn corpus_dir() -> PathBuf {
    let dir = std::env::var_os("TAPFLOW_CORPUS")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../../shared/corpus")
        });
    assert!(
        dir.join("MANIFEST.tsv").is_file(),
        "corpus not found: {} has no MANIFEST.tsv (set TAPFLOW_CORPUS to the corpus directory)",
        dir.display()
    );
    dir
}

/// One row of `MANIFEST.tsv`.
#[derive(Debug)]
struct Entry {
    file: String,
    packets: u64,
    link_type: String,
    file_format: String,
    first_ts: String,
    last_ts: String,
    tshark_open_status: String,
}

impl Entry {
    fn opens_cleanly(&self) -> bool {
        self.tshark_open_status == "ok"
    }

    fn bytes(&self) -> Vec<u8> {
        let p = corpus_dir().join(&self.file);
        std::fs::read(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
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
        let name = self.link_type.split_whitespace().next().unwrap();
        let known = (0..=u16::MAX)
            .map(|n| LinkType::from_u16(n).name())
            .find(|n| *n == name);
        BTreeSet::from([known.unwrap_or_else(|| panic!("{}: unknown link type {name}", self.file))])
    }
}

fn manifest() -> Vec<Entry> {
    let text = std::fs::read_to_string(corpus_dir().join("MANIFEST.tsv")).unwrap();
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
                packets: f[col("packets")].parse().unwrap(),
                link_type: f[col("link_type")].to_owned(),
                file_format: f[col("file_format")].to_owned(),
                first_ts: f[col("first_ts_utc")].to_owned(),
                last_ts: f[col("last_ts_utc")].to_owned(),
                tshark_open_status: unquote(f[col("tshark_open_status")]),
            }
        })
        .collect();
    assert!(
        rows.len() >= 50,
        "MANIFEST.tsv lists only {} files",
        rows.len()
    );
    rows
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
    let mut checked = 0;
    for e in manifest().iter().filter(|e| e.opens_cleanly()) {
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
        if let (Some(first), Some(last)) = (iso_micros(&e.first_ts), iso_micros(&e.last_ts)) {
            let us = |ns: u64| (ns / 1000) as i64;
            assert!(
                (us(o.min_ts) - first).abs() <= 1,
                "{}: first ts {} vs {}",
                e.file,
                o.min_ts,
                e.first_ts
            );
            assert!(
                (us(o.max_ts) - last).abs() <= 1,
                "{}: last ts {} vs {}",
                e.file,
                o.max_ts,
                e.last_ts
            );
        }
        checked += 1;
    }
    assert!(checked >= 50, "only {checked} clean files");
}

#[test]
fn cut_short_files_keep_every_packet_before_the_damage() {
    let mut checked = 0;
    for e in manifest()
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
    assert!(checked >= 1, "the manifest lists no cut-short file");
}

/// Offset of the last block of a pcapng file, from its trailing length.
fn last_block_type(bytes: &[u8]) -> u32 {
    let n = bytes.len();
    let len = u32::from_le_bytes(bytes[n - 4..].try_into().unwrap()) as usize;
    u32::from_le_bytes(bytes[n - len..n - len + 4].try_into().unwrap())
}

#[test]
fn damaged_copies_of_clean_files() {
    for e in manifest().iter().filter(|e| e.opens_cleanly()) {
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

        let mut zero = bytes.clone();
        zero[..4].copy_from_slice(b"\x7fELF");
        let err = Reader::new(&zero).unwrap_err();
        assert_eq!(
            err.to_string(),
            "byte offset 0: not a pcap or pcapng file: magic 0x7f454c46"
        );

        if e.file_format != "pcapng" {
            // A first record that claims a 2 GiB packet.
            let mut huge = bytes.clone();
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
    let m = manifest();
    let e = m
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
    let m = manifest();
    for e in m.iter().filter(|e| e.opens_cleanly()) {
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
        }
    }
}

/// `cargo test --release -p tapflow-wire --test corpus -- --ignored --nocapture read_speed`
#[test]
#[ignore = "timing; run in release"]
fn read_speed() {
    let files: Vec<Vec<u8>> = manifest()
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
    for name in [
        "ndpi-gnutella.pcap",
        "chrissanders-synscan.pcapng",
        "nfstream-ip-fragmented-garbage.pcap",
    ] {
        let bytes = std::fs::read(corpus_dir().join(name)).unwrap();
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
