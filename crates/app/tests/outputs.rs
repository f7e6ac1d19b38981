//! What a run leaves behind, in every ending. Outputs cannot be turned against the host: no
//! planted link is followed, nothing that is not a regular file is replaced, the input is never
//! written over, and a `.part` file left by a killed run is named, not overwritten; every
//! refusal comes before a packet is taken, with exit code 2 and one line. A full disk, a
//! damaged input or a stop during set-up still ends with every packet accounted for.

mod common;

use std::os::unix::fs::{PermissionsExt, symlink};
use std::path::{Path, PathBuf};
use std::time::Duration;

use common::*;
use tapflow_wire::LinkType;
use tapflow_wire::build::{self, FrameSpec, L4};
use tapflow_wire::ethernet::EthernetAddress;
use tapflow_wire::pcap;

/// A fresh directory for one test.
fn dir(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("tf-out-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// Writes a pcap of `n` UDP frames made with the project's packet builder.
fn trace(path: &Path, n: u16) {
    let mut out = Vec::new();
    pcap::write_header(&mut out, LinkType::Ethernet, 65535);
    let mut frame = [0u8; 100];
    for i in 0..n {
        let spec = FrameSpec {
            src_mac: EthernetAddress([2, 0, 0, 0, 0, 1]),
            dst_mac: EthernetAddress([2, 0, 0, 0, 0, 2]),
            src_ip: "192.0.2.1".parse().unwrap(),
            dst_ip: "192.0.2.2".parse().unwrap(),
            proto: L4::Udp,
            src_port: 1000 + i,
            dst_port: 53,
            frame_len: frame.len(),
        };
        build::build(&spec, &mut frame).unwrap();
        let at = out.len();
        out.resize(at + pcap::record_len(frame.len()), 0);
        pcap::emit_record(&mut out[at..], 1_000_000_000 + u64::from(i), &frame, 100);
    }
    std::fs::write(path, out).unwrap();
}

fn p(path: &Path) -> String {
    path.to_string_lossy().into_owned()
}

fn refused(args: &[&str], keys: &[&str]) {
    let o = run_limited(&mut tapflow(args), Duration::from_secs(20));
    assert_clean_error(&o, Some(2), keys, &format!("tapflow {}", args.join(" ")));
}

#[test]
fn a_device_is_written_in_place_and_never_replaced() {
    let d = dir("dev");
    let input = d.join("in.pcap");
    trace(&input, 10);
    // /dev/null takes every packet; /dev/full refuses them, and the accounting says so.
    let o = run_limited(
        &mut tapflow(["capture", "-r", &p(&input), "-w", "/dev/null"]),
        Duration::from_secs(20),
    );
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        o.status.success() && err.contains("10 received, 10 recorded"),
        "{err}"
    );
    let o = run_limited(
        &mut tapflow(["capture", "-r", &p(&input), "-w", "/dev/full"]),
        Duration::from_secs(20),
    );
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(err.contains("10 received, 0 recorded"), "{err}");
    assert!(err.lines().last().unwrap().contains("/dev/full"), "{err}");
    for dev in ["/dev/full", "/dev/null"] {
        let m = std::fs::symlink_metadata(dev).unwrap();
        assert!(
            std::os::unix::fs::FileTypeExt::is_char_device(&m.file_type()),
            "{dev} is still a device"
        );
        assert!(!Path::new(&format!("{dev}.part")).exists());
    }
    std::fs::remove_dir_all(&d).unwrap();
}

#[test]
fn a_directory_as_output_is_refused_at_start() {
    let d = dir("dir");
    let input = d.join("in.pcap");
    trace(&input, 10);
    let out = d.join("out");
    std::fs::create_dir(&out).unwrap();
    refused(
        &["capture", "-r", &p(&input), "-w", &p(&out), "-q"],
        &[&p(&out), "directory"],
    );
    assert!(out.is_dir());
    assert!(!d.join("out.part").exists(), "nothing is left behind");
    std::fs::remove_dir_all(&d).unwrap();
}

#[test]
fn a_planted_part_link_is_not_followed() {
    let d = dir("link");
    let input = d.join("in.pcap");
    trace(&input, 10);
    let victim = d.join("victim");
    std::fs::write(&victim, b"root's file").unwrap();
    symlink(&victim, d.join("y.pcapng.part")).unwrap();
    let out = d.join("y.pcapng");
    refused(
        &["capture", "-r", &p(&input), "-w", &p(&out), "-q"],
        &["y.pcapng.part"],
    );
    assert_eq!(std::fs::read(&victim).unwrap(), b"root's file");
    assert!(!out.exists());
    std::fs::remove_dir_all(&d).unwrap();
}

#[test]
fn a_part_left_by_a_killed_run_is_named_and_kept() {
    let d = dir("stale");
    let input = d.join("in.pcap");
    trace(&input, 10);
    let part = d.join("t.pcapng.part");
    std::fs::write(&part, b"packets of the run that was killed").unwrap();
    refused(
        &[
            "capture",
            "-r",
            &p(&input),
            "-w",
            &p(&d.join("t.pcapng")),
            "-q",
        ],
        &["t.pcapng.part", "rename or remove"],
    );
    assert_eq!(
        std::fs::read(&part).unwrap(),
        b"packets of the run that was killed"
    );
    std::fs::remove_dir_all(&d).unwrap();
}

#[test]
fn the_input_is_never_written_over() {
    let d = dir("same");
    let input = d.join("in.pcap");
    trace(&input, 10);
    let before = std::fs::read(&input).unwrap();
    refused(
        &["capture", "-r", &p(&input), "-w", &p(&input), "-q"],
        &["in.pcap", "input"],
    );
    assert_eq!(std::fs::read(&input).unwrap(), before);
    std::fs::remove_dir_all(&d).unwrap();
}

#[test]
fn outputs_are_0640_whatever_the_umask_and_replace_regular_files() {
    let d = dir("mode");
    let input = d.join("in.pcap");
    trace(&input, 10);
    let out = d.join("o.pcapng");
    std::fs::write(&out, b"an old trace").unwrap();
    // A umask that takes the group's bits away: the file still gets 0640.
    let o = run_limited(
        std::process::Command::new("sh")
            .args(["-c", "umask 077 && exec \"$0\" \"$@\""])
            .arg(bin())
            .args(["capture", "-r", &p(&input), "-w", &p(&out), "-q"]),
        Duration::from_secs(20),
    );
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let mode = std::fs::metadata(&out).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o640);
    assert_eq!(capinfos_count(&out), 10);
    std::fs::remove_dir_all(&d).unwrap();
}

#[test]
fn each_rotated_file_counts_its_own_packets_in_its_statistics() {
    let d = dir("isb");
    let input = d.join("in.pcap");
    trace(&input, 200);
    let out = d.join("t.pcapng");
    let o = run_limited(
        &mut tapflow([
            "capture",
            "-r",
            &p(&input),
            "-w",
            &p(&out),
            "--rotate-size",
            "4K",
            "-q",
        ]),
        Duration::from_secs(20),
    );
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let mut files: Vec<PathBuf> = std::fs::read_dir(&d)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|f| f.extension().is_some_and(|x| x == "pcapng"))
        .collect();
    files.sort();
    assert!(files.len() >= 4, "{files:?}");
    let (mut accepted, mut delivered) = (0, 0);
    for f in &files {
        let c = read_capture(f);
        let last = c
            .isbs
            .last()
            .unwrap_or_else(|| panic!("{}: no ISB", f.display()));
        let (fa, ud) = (
            last.get(ISB_FILTERACCEPT).unwrap(),
            last.get(ISB_USRDELIV).unwrap(),
        );
        // The file's own packets, and no fewer accepted than kept.
        assert_eq!(ud, c.packets.len() as u64, "{}", f.display());
        assert!(
            fa >= ud,
            "{}: filteraccept {fa} < usrdeliv {ud}",
            f.display()
        );
        accepted += fa;
        delivered += ud;
    }
    assert_eq!((accepted, delivered), (200, 200));
    std::fs::remove_dir_all(&d).unwrap();
}

#[test]
fn a_cut_short_input_is_accounted_for_up_to_the_damage() {
    let d = dir("cut");
    let input = d.join("in.pcap");
    trace(&input, 50);
    // Cut the file inside the 31st record's header.
    let bytes = std::fs::read(&input).unwrap();
    let at = pcap::HEADER_LEN + 30 * pcap::record_len(100) + 7;
    std::fs::write(&input, &bytes[..at]).unwrap();
    let out = d.join("o.pcapng");
    let json = d.join("s.json");
    let o = run_limited(
        &mut tapflow([
            "capture",
            "-r",
            &p(&input),
            "-w",
            &p(&out),
            "--summary-json",
            &p(&json),
        ]),
        Duration::from_secs(20),
    );
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(err.contains("30 received, 30 recorded"), "{err}");
    let last = err.lines().last().unwrap();
    assert!(
        last.starts_with("tapflow: error: ")
            && last.contains("packet 31")
            && last.contains("byte offset"),
        "{err}"
    );
    let s = std::fs::read_to_string(&json).unwrap();
    assert_eq!(
        (json_u64(&s, "received"), json_u64(&s, "recorded")),
        (30, 30),
        "{s}"
    );
    assert_eq!(capinfos_count(&out), 30);
    std::fs::remove_dir_all(&d).unwrap();
}

/// A small tmpfs, unmounted and removed on drop.
struct SmallDisk(PathBuf);

impl SmallDisk {
    fn new(name: &str, size: &str) -> SmallDisk {
        let d = dir(name);
        let ok = std::process::Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={size}"), "tapflow-test"])
            .arg(&d)
            .status()
            .unwrap()
            .success();
        assert!(ok, "mount a tmpfs on {}", d.display());
        SmallDisk(d)
    }
}

impl Drop for SmallDisk {
    fn drop(&mut self) {
        let _ = std::process::Command::new("umount").arg(&self.0).status();
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

#[test]
fn a_full_disk_keeps_every_packet_accounted_for() {
    require_root();
    let d = dir("full-in");
    let input = d.join("in.pcap");
    trace(&input, 20_000);
    let disk = SmallDisk::new("full", "1M");
    let out = disk.0.join("o.pcapng");
    let o = run_limited(
        &mut tapflow(["capture", "-r", &p(&input), "-w", &p(&out), "-q"]),
        Duration::from_secs(30),
    );
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(1), "{err}");
    let last = err.lines().last().unwrap();
    assert!(
        last.starts_with("tapflow: error: ") && last.contains("o.pcapng"),
        "{err}"
    );
    // received = recorded + dropped, and recorded is what the file holds.
    let line = err.lines().find(|l| l.contains(" received, ")).expect(&err);
    let n = |what: &str| -> u64 {
        let at = line.find(what).unwrap();
        line[..at]
            .trim_end()
            .rsplit(' ')
            .next()
            .unwrap()
            .parse()
            .unwrap()
    };
    let (received, recorded, ours) = (n(" received"), n(" recorded"), n(" dropped by tapflow"));
    assert_eq!(received, 20_000, "{line}");
    assert_eq!(recorded + ours, received, "{line}");
    assert!(recorded > 1000 && ours > 1000, "{line}");
    assert_eq!(capinfos_count(&out), recorded, "{line}");
    drop(disk);
    std::fs::remove_dir_all(&d).unwrap();
}

#[test]
fn a_stop_while_libpcap_compiles_a_long_filter_ends_the_run_at_once() {
    let d = dir("slowfilter");
    let input = d.join("in.pcap");
    trace(&input, 10);
    // Two thousand alternatives keep libpcap's optimizer busy for minutes.
    let expr = (1..=2000)
        .map(|p| format!("port {p}"))
        .collect::<Vec<_>>()
        .join(" or ");
    let out = d.join("o.pcapng");
    let child = tapflow([
        "capture",
        "-r",
        &p(&input),
        "-w",
        &p(&out),
        "-q",
        "-f",
        &expr,
    ])
    .stderr(std::process::Stdio::piped())
    .spawn()
    .unwrap();
    let mut g = ChildGuard::new(child, "capture with a long filter");
    std::thread::sleep(Duration::from_secs(1));
    assert!(
        g.try_wait().is_none(),
        "the filter compiled within a second"
    );
    let sent = std::time::Instant::now();
    g.signal(libc::SIGTERM);
    let (_, err) = g.wait_output(Duration::from_secs(10));
    let took = sent.elapsed();
    assert!(took < Duration::from_secs(5), "exit took {took:?}: {err}");
    assert!(err.contains("stopped before the first packet"), "{err}");
    assert!(
        err.len() < 400,
        "the error quotes the whole expression: {} bytes",
        err.len()
    );
    std::fs::remove_dir_all(&d).unwrap();
}
