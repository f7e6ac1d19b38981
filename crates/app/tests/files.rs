//! `tapflow capture -r FILE` over the shared corpus of real captures and over captures built here
//! with the packet builder, with tshark and capinfos as oracles for what is written, and damaged
//! copies of both for the error path. Without the corpus its tests print one `skipped:` line.

mod common;

use std::path::{Path, PathBuf};
use std::process::Output;
use std::time::Duration;

use common::traffic;
use common::*;
use tapflow_wire::LinkType;

/// A capture to replay and what it holds: a row of the corpus MANIFEST.tsv, or a built file.
#[derive(Debug, Clone)]
struct Entry {
    file: String,
    input: PathBuf,
    packets: u64,
    tshark_ok: bool,
}

fn manifest(dir: &Path) -> Vec<Entry> {
    let text = std::fs::read_to_string(dir.join("MANIFEST.tsv")).unwrap();
    let mut lines = text.lines();
    let head: Vec<&str> = lines.next().unwrap().split('\t').collect();
    let col = |name: &str| {
        head.iter()
            .position(|h| *h == name)
            .unwrap_or_else(|| panic!("no {name} column"))
    };
    let (f, p, t) = (col("file"), col("packets"), col("tshark_open_status"));
    lines
        .filter(|l| !l.trim().is_empty())
        .map(|l| {
            let c: Vec<&str> = l.split('\t').collect();
            Entry {
                file: c[f].to_string(),
                input: dir.join(c[f]),
                packets: c[p].parse().unwrap(),
                tshark_ok: c[t] == "ok",
            }
        })
        .collect()
}

/// Captures built from the same 2500 packets, written to `dir`: Ethernet in a ns pcap, Linux
/// cooked v1 in a big-endian µs pcap, Linux cooked v2 cut to 96 bytes, BSD loopback, a pcapng
/// with an Ethernet, a cooked and a raw-IP interface; and the Ethernet pcap cut short in the
/// middle of packet 1000.
fn built(dir: &Path) -> Vec<Entry> {
    let traffic = traffic::conversations(0, 100, 25, T0, 1_000_003);
    let pcap = |lt, nanos, big_endian, snaplen| {
        let p = traffic::relink_all(&traffic, lt, snaplen);
        traffic::pcap_file(lt, nanos, big_endian, snaplen, &p)
    };
    let ifaces = [
        (LinkType::Ethernet, 65535),
        (LinkType::LinuxSll, 65535),
        (LinkType::Raw, 128),
    ];
    let ether = pcap(LinkType::Ethernet, true, false, 65535);
    let files = [
        ("built-ether.pcap", ether.clone(), 2500, true),
        (
            "built-sll-usec-big-endian.pcap",
            pcap(LinkType::LinuxSll, false, true, 65535),
            2500,
            true,
        ),
        (
            "built-sll2-cut.pcap",
            pcap(LinkType::LinuxSll2, true, false, 96),
            2500,
            true,
        ),
        (
            "built-null-usec.pcap",
            pcap(LinkType::Null, false, false, 65535),
            2500,
            true,
        ),
        (
            "built-three-link-types.pcapng",
            traffic::pcapng_file(&ifaces, &traffic::on_interfaces(&traffic, &ifaces)),
            2500,
            true,
        ),
        (
            "built-cut-short.pcap",
            traffic::cut_short(&ether, &traffic, 1000),
            1000,
            false,
        ),
    ];
    files
        .into_iter()
        .map(|(name, bytes, packets, tshark_ok)| Entry {
            file: name.to_string(),
            input: write_file(dir, name, &bytes),
            packets,
            tshark_ok,
        })
        .collect()
}

/// Runs `tapflow capture -r INPUT -s SNAP -w OUT -q --summary-json J [extra]`.
fn capture_file(input: &Path, out: &Path, json: &Path, snap: u32, extra: &[&str]) -> Output {
    let mut c = tapflow(["capture", "-r"]);
    c.arg(input)
        .arg("-s")
        .arg(snap.to_string())
        .arg("-w")
        .arg(out);
    c.args(["-q", "--summary-json"]).arg(json).args(extra);
    run_limited(&mut c, Duration::from_secs(120))
}

fn no_panic(o: &Output, what: &str) -> Result<(), String> {
    let err = String::from_utf8_lossy(&o.stderr);
    for bad in ["panicked", "RUST_BACKTRACE", "stack backtrace"] {
        if err.contains(bad) {
            return Err(format!("{what}: stderr has {bad:?}: {err}"));
        }
    }
    match o.status.code() {
        Some(0) | Some(2) => Ok(()),
        c => Err(format!(
            "{what}: exit {c:?} (want 0, or 2 for a damaged file): {err}"
        )),
    }
}

/// The error line of a failed file capture: exactly one `tapflow: error:` line, which names the
/// file and a byte offset; returns the offset.
fn damage_offset(o: &Output, input: &Path, what: &str) -> Result<u64, String> {
    let err = String::from_utf8_lossy(&o.stderr);
    if o.status.code() != Some(2) {
        return Err(format!(
            "{what}: exit {:?}, want 2 for a damaged file: {err}",
            o.status.code()
        ));
    }
    let errors: Vec<&str> = err
        .lines()
        .filter(|l| l.starts_with("tapflow: error: "))
        .collect();
    if errors.len() != 1 || err.lines().any(|l| !l.starts_with("tapflow: ")) {
        return Err(format!(
            "{what}: want one 'tapflow: error:' line (and the summary): {err:?}"
        ));
    }
    let line = errors[0];
    let name = input.file_name().unwrap().to_string_lossy();
    if !line.contains(&*name) {
        return Err(format!(
            "{what}: error does not name the file {name}: {line:?}"
        ));
    }
    let at = line
        .find("byte offset")
        .ok_or_else(|| format!("{what}: no 'byte offset' in {line:?}"))?;
    let rest = line[at + "byte offset".len()..].trim_start_matches([' ', ':']);
    let digits: String = rest.chars().take_while(|c| c.is_ascii_digit()).collect();
    digits
        .parse()
        .map_err(|_| format!("{what}: no number after 'byte offset' in {line:?}"))
}

const FIELDS: [&str; 4] = [
    "frame.len",
    "frame.cap_len",
    "frame.time_epoch",
    "frame.encap_type",
];

/// Compares what tshark and a plain reader see in OUT with the first `n` packets of INPUT.
fn compare(input: &Path, out: &Path, n: usize, snap: u32, what: &str) -> Result<(), String> {
    let (inp, _) = tshark_fields_lenient(input, &FIELDS);
    let (got, err) = tshark_fields_lenient(out, &FIELDS);
    if !err.is_empty() {
        return Err(format!(
            "{what}: tshark cannot read our output cleanly: {err}"
        ));
    }
    if got.len() != n || inp.len() < n {
        return Err(format!(
            "{what}: tshark reads {} packets in our output, want {n} (input has {})",
            got.len(),
            inp.len()
        ));
    }
    for (i, (a, b)) in inp.iter().zip(&got).enumerate() {
        let frame = i + 1;
        if a[0] != b[0] {
            return Err(format!(
                "{what}: frame {frame}: frame.len {} in the input, {} in ours",
                a[0], b[0]
            ));
        }
        let want_cap = a[1].parse::<u32>().unwrap().min(snap);
        if b[1].parse::<u32>().unwrap() != want_cap {
            return Err(format!(
                "{what}: frame {frame}: cap_len {} (input {}, snaplen {snap})",
                b[1], a[1]
            ));
        }
        if a[3] != b[3] {
            return Err(format!(
                "{what}: frame {frame}: encapsulation {} in the input, {} in ours",
                a[3], b[3]
            ));
        }
        // rxtime is u64 ns since 1970: only comparable where the input time fits.
        let ta = epoch_ns(&a[2]);
        if ta.is_some_and(|t| (0..=u64::MAX as i128).contains(&t)) && ta != epoch_ns(&b[2]) {
            return Err(format!(
                "{what}: frame {frame}: time {} in the input, {} in ours",
                a[2], b[2]
            ));
        }
    }
    // Header bytes, by a reader that is not tapflow's.
    let ic = read_capture(input);
    let oc = read_capture(out);
    if let Some(d) = &oc.damage {
        return Err(format!("{what}: our output is damaged: {d:?}"));
    }
    if oc.packets.len() != n {
        return Err(format!(
            "{what}: {} packet blocks in our output, want {n}",
            oc.packets.len()
        ));
    }
    for (i, (a, b)) in ic.packets.iter().zip(&oc.packets).enumerate() {
        let k = (a.caplen.min(snap)) as usize;
        // (Link types are compared by tshark's encapsulation above: a pcap's DLT_RAW 12 may
        // rightly become LINKTYPE_RAW 101.)
        if b.data != a.data[..k] {
            return Err(format!(
                "{what}: frame {}: bytes differ from the input's first {k}",
                i + 1
            ));
        }
    }
    Ok(())
}

fn check_file(e: &Entry, tmp: &Path) -> Result<(), String> {
    let input = &e.input;
    let out = tmp.join(format!("{}.pcapng", e.file));
    let json = tmp.join(format!("{}.json", e.file));
    let o = capture_file(input, &out, &json, 64, &[]);
    let what = format!("tapflow capture -r {} -s 64", e.file);
    no_panic(&o, &what)?;
    let err = String::from_utf8_lossy(&o.stderr).into_owned();
    if e.tshark_ok {
        if o.status.code() != Some(0) {
            return Err(format!("{what}: a file tshark reads cleanly failed: {err}"));
        }
        let sum = Summary::read(&json);
        if sum.recorded != e.packets
            || sum.received != sum.recorded + sum.dropped_kernel + sum.dropped_ours
        {
            return Err(format!(
                "{what}: want {} recorded, all accounted for; got {}",
                e.packets, sum.text
            ));
        }
        if capinfos_count(&out) != e.packets {
            return Err(format!("{what}: capinfos count differs from {}", e.packets));
        }
        compare(input, &out, e.packets as usize, 64, &what)
    } else {
        damage_offset(&o, input, &what)?;
        // Keep every record before the damage: as many as tshark can read.
        let (before, _) = tshark_fields_lenient(input, &["frame.len"]);
        if before.is_empty() {
            return Ok(());
        }
        if !out.exists() {
            let part = tmp.join(format!("{}.pcapng.part", e.file));
            return Err(format!(
                "{what}: the {} packets before the damage are not in {} (.part exists: {})",
                before.len(),
                out.display(),
                part.exists()
            ));
        }
        compare(input, &out, before.len(), 64, &what)
    }
}

/// Test 7: every corpus file replays without panic; clean ones are copied whole (lengths, times,
/// link types and the first 64 bytes of every packet); damaged ones give a clear error and keep
/// the packets before the damage.
#[test]
fn every_corpus_file_replays_without_panic_and_round_trips() {
    let Some(dir) = corpus() else { return };
    let entries = manifest(&dir);
    assert!(
        entries.len() >= 50,
        "MANIFEST lists {} files",
        entries.len()
    );
    assert!(
        entries.iter().any(|e| !e.tshark_ok),
        "no damaged file in the corpus?"
    );
    replays_and_round_trips(&entries);
}

/// Test 7 on the built captures: every link type, format and byte order, cut packets, and a
/// file cut short.
#[test]
fn every_built_file_replays_and_round_trips() {
    let dir = tempfile::tempdir().unwrap();
    replays_and_round_trips(&built(dir.path()));
}

/// Replays every entry, two at a time; fails with every entry that did not round-trip.
fn replays_and_round_trips(entries: &[Entry]) {
    let tmp = tempfile::tempdir().unwrap();
    let next = std::sync::atomic::AtomicUsize::new(0);
    let failures = std::sync::Mutex::new(Vec::new());
    std::thread::scope(|sc| {
        for _ in 0..2 {
            sc.spawn(|| {
                loop {
                    let i = next.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                    let Some(e) = entries.get(i) else { break };
                    let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                        check_file(e, tmp.path())
                    }));
                    let msg = match r {
                        Ok(Ok(())) => continue,
                        Ok(Err(m)) => m,
                        Err(p) => format!(
                            "{}: {}",
                            e.file,
                            p.downcast_ref::<String>()
                                .cloned()
                                .unwrap_or_else(|| "check panicked".into())
                        ),
                    };
                    failures.lock().unwrap().push(msg);
                }
            });
        }
    });
    let failures = failures.into_inner().unwrap();
    assert!(
        failures.is_empty(),
        "{} of {} files failed:\n{}",
        failures.len(),
        entries.len(),
        failures.join("\n")
    );
}

/// The plain lane (one pcapng file, nothing else: ring or file packets straight into EPBs)
/// writes the same packet blocks as the general path, which a second sink (a flow meter)
/// forces: every clean corpus file, with its link types, interfaces, directions and lengths.
#[test]
fn the_plain_lane_writes_the_packet_blocks_the_general_path_writes() {
    let Some(dir) = corpus() else { return };
    plain_lane_equals_general_path(&manifest(&dir));
}

/// The same for the built captures.
#[test]
fn the_plain_lane_writes_the_packet_blocks_the_general_path_writes_for_built_files() {
    let dir = tempfile::tempdir().unwrap();
    plain_lane_equals_general_path(&built(dir.path()));
}

/// Each clean entry captured by the plain lane and by the general path gives the same packet
/// blocks; over 10,000 in all.
fn plain_lane_equals_general_path(entries: &[Entry]) {
    let tmp = tempfile::tempdir().unwrap();
    let mut compared = 0;
    for e in entries.iter().filter(|e| e.tshark_ok) {
        let input = &e.input;
        let (plain, general) = (
            tmp.path().join("plain.pcapng"),
            tmp.path().join("general.pcapng"),
        );
        let json = tmp.path().join("sum.json");
        for (out, extra) in [(&plain, &[][..]), (&general, &["--csv", "/dev/null"][..])] {
            let o = capture_file(input, out, &json, 64, extra);
            assert!(
                o.status.success(),
                "{}: {}",
                e.file,
                String::from_utf8_lossy(&o.stderr)
            );
        }
        let (a, b) = (epbs(&plain), epbs(&general));
        assert_eq!(a.len() as u64, e.packets, "{}: packet blocks", e.file);
        if let Some(i) = a.iter().zip(&b).position(|(x, y)| x != y) {
            panic!(
                "{}: packet block {i} differs:\n plain   {:02x?}\n general {:02x?}",
                e.file, a[i], b[i]
            );
        }
        assert_eq!(a.len(), b.len(), "{}", e.file);
        compared += a.len();
    }
    assert!(compared > 10_000, "only {compared} packets compared");
}

/// A copy of a capture with some damage, in `dir`.
fn damaged_copy(dir: &Path, name: &str, from: &Path, edit: impl FnOnce(&mut Vec<u8>)) -> PathBuf {
    let mut d = std::fs::read(from).unwrap();
    edit(&mut d);
    let p = dir.join(name);
    std::fs::write(&p, d).unwrap();
    p
}

/// Runs a damaged file and checks: exit 2, one error naming the file and an offset in `range`,
/// the `keep` packets before the damage in a finished output file.
fn check_damaged(input: &Path, keep: usize, range: std::ops::RangeInclusive<u64>) {
    let dir = input.parent().unwrap();
    let out = dir.join("out.pcapng");
    let json = dir.join("sum.json");
    let _ = std::fs::remove_file(&out);
    let o = capture_file(input, &out, &json, 64, &[]);
    let what = format!("tapflow capture -r {}", input.display());
    no_panic(&o, &what).unwrap();
    let at = damage_offset(&o, input, &what).unwrap();
    assert!(
        range.contains(&at),
        "{what}: damage reported at byte offset {at}, want within {range:?}"
    );
    assert!(
        out.exists(),
        "{what}: the {keep} good packets are not in {}",
        out.display()
    );
    assert!(!dir.join("out.pcapng.part").exists(), "{what}: .part left");
    assert_eq!(capinfos_count(&out), keep as u64, "{what}");
    compare(input, &out, keep, 64, &what).unwrap();
}

/// Test 7b: damage made on purpose in real files, at known places.
#[test]
fn damaged_files_give_the_offset_and_keep_what_came_before() {
    let Some(dir) = corpus() else { return };
    damage_at_known_places(
        &dir.join("tcpreplay-test.pcap"),
        &dir.join("chrissanders-icmp-traceroute.pcapng"),
    );
}

/// Test 7b on a built pcap and pcapng.
#[test]
fn damaged_built_files_give_the_offset_and_keep_what_came_before() {
    let dir = tempfile::tempdir().unwrap();
    let e = built(dir.path());
    let file = |name: &str| e.iter().find(|e| e.file == name).unwrap().input.clone();
    damage_at_known_places(
        &file("built-ether.pcap"),
        &file("built-three-link-types.pcapng"),
    );
}

/// Damage at known places in copies of `pcap` (a little-endian pcap of over 100 packets) and
/// `pcapng` (a little-endian pcapng of over 20): a cut in a packet's data, a record claiming a
/// 2 GiB packet, a block length that is not a multiple of 4.
fn damage_at_known_places(pcap: &Path, pcapng: &Path) {
    let tmp = tempfile::tempdir().unwrap();
    let src = pcap;
    let recs = read_capture(src).packets;
    assert!(recs.len() > 100);

    // Cut in the middle of record 100's data.
    let cut = recs[100].offset as usize + 16 + 10;
    let d1 = tmp.path().join("cut");
    std::fs::create_dir(&d1).unwrap();
    let p = damaged_copy(&d1, "cut-mid-packet.pcap", src, |d| d.truncate(cut));
    check_damaged(&p, 100, recs[100].offset..=cut as u64);

    // Record 50 claims a 2 GiB packet; the file goes on.
    let at = recs[50].offset as usize;
    let d2 = tmp.path().join("huge");
    std::fs::create_dir(&d2).unwrap();
    let p = damaged_copy(&d2, "huge-caplen.pcap", src, |d| {
        d[at + 8..at + 12].copy_from_slice(&0x7fff_ffffu32.to_le_bytes());
    });
    check_damaged(&p, 50, at as u64..=at as u64 + 16);

    // pcapng: the 20th Enhanced Packet Block's total length is not a multiple of 4.
    let ng = read_capture(pcapng).packets;
    let blk = ng[20].offset as usize;
    let d3 = tmp.path().join("ng");
    std::fs::create_dir(&d3).unwrap();
    let p = damaged_copy(&d3, "bad-block-length.pcapng", pcapng, |d| {
        assert_eq!(
            &d[8..12],
            &[0x4d, 0x3c, 0x2b, 0x1a],
            "expected a little-endian section"
        );
        d[blk + 4..blk + 8].copy_from_slice(&13u32.to_le_bytes());
    });
    check_damaged(&p, 20, blk as u64..=blk as u64 + 8);
}

/// Test 8: a pcapng whose interfaces have different link types keeps each packet's link type.
#[test]
fn several_interfaces_keep_their_link_types() {
    let Some(dir) = corpus() else { return };
    keeps_each_interfaces_link_type(
        &dir.join("pcapplusplus-pcapng-example-multi-if.pcapng"),
        159,
        &["Linux cooked-mode capture v1", "Ethernet (1"],
    );
}

/// Test 8 on the built pcapng of an Ethernet, a Linux cooked and a raw-IP interface.
#[test]
fn several_built_interfaces_keep_their_link_types() {
    let dir = tempfile::tempdir().unwrap();
    let e = built(dir.path());
    let input = &e
        .iter()
        .find(|e| e.file == "built-three-link-types.pcapng")
        .unwrap()
        .input;
    keeps_each_interfaces_link_type(
        input,
        2500,
        &["Linux cooked-mode capture v1", "Ethernet (1", "Raw IP"],
    );
}

/// Captures `input`, a pcapng of `packets` packets on interfaces of several link types, and
/// checks that each packet keeps its link type, each input interface has an output interface
/// of its own with statistics of its own, and capinfos names every link type in `names`.
fn keeps_each_interfaces_link_type(input: &Path, packets: usize, names: &[&str]) {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("out.pcapng");
    let json = tmp.path().join("sum.json");
    let o = capture_file(input, &out, &json, 64, &[]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let fields = ["frame.interface_id", "frame.encap_type"];
    let a = tshark_fields(input, &fields);
    let b = tshark_fields(&out, &fields);
    assert_eq!(a.len(), packets);
    assert_eq!(b.len(), a.len());
    let encaps = |v: &[Vec<String>]| v.iter().map(|r| r[1].clone()).collect::<Vec<_>>();
    assert_eq!(encaps(&b), encaps(&a), "per-packet link types differ");
    // One output interface per input interface, consistently.
    let mut map = std::collections::BTreeMap::new();
    for (x, y) in a.iter().zip(&b) {
        let prev = map.insert(x[0].clone(), y[0].clone());
        assert!(
            prev.is_none() || prev.as_ref() == Some(&y[0]),
            "input interface {} maps to two outputs",
            x[0]
        );
    }
    let outs: std::collections::BTreeSet<_> = map.values().collect();
    assert_eq!(
        outs.len(),
        map.len(),
        "two input interfaces merged into one: {map:?}"
    );
    let info = capinfos(&out);
    assert!(names.iter().all(|n| info.contains(n)), "{info}");
    // Each interface's closing statistics count its own packets, not the whole file's; the
    // capture-wide counters (packets read, dropped) describe no single interface of several.
    let cap = read_capture(&out);
    let n_ifaces = cap.ifaces.len() as u32;
    assert!(n_ifaces > 1);
    for id in 0..n_ifaces {
        let isb = cap
            .isbs
            .iter()
            .rev()
            .find(|i| i.iface == id)
            .unwrap_or_else(|| panic!("no ISB for interface {id}"));
        let written = cap.packets.iter().filter(|p| p.iface == id).count() as u64;
        assert_eq!(isb.get(ISB_USRDELIV), Some(written), "interface {id}");
        assert_eq!(isb.get(ISB_FILTERACCEPT), None, "interface {id}");
        assert_eq!(isb.get(ISB_OSDROP), None, "interface {id}");
    }
}

/// Test 9: `-c 100` on a file records exactly the first 100 packets.
#[test]
fn count_limit_on_a_file_records_exactly_that_many() {
    let tmp = tempfile::tempdir().unwrap();
    let input = built_trace(tmp.path(), "in.pcap", 50, 10, 1_000_000);
    let out = tmp.path().join("out.pcapng");
    let json = tmp.path().join("sum.json");
    let o = capture_file(&input, &out, &json, 64, &["-c", "100"]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success(), "{err}");
    let sum = Summary::read(&json);
    assert_eq!(sum.recorded, 100, "{}", sum.text);
    sum.assert_adds_up();
    sum.assert_matches_exit_line(&err);
    assert_eq!(capinfos_count(&out), 100);
    compare(&input, &out, 100, 64, "-c 100").unwrap();
}
