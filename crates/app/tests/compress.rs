//! Compressed capture files (`.zst`, `.gz`): tshark and capinfos read what tapflow writes, a
//! file cut short reads up to the cut, `-r` reads both formats by their magic, and a full disk
//! still leaves every packet accounted for.

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use common::*;

fn dir(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("tf-zst-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

fn p(path: &Path) -> String {
    path.to_string_lossy().into_owned()
}

const FIELDS: [&str; 5] = [
    "frame.time_epoch",
    "frame.len",
    "frame.cap_len",
    "ip.src",
    "ipv6.dst",
];

/// `tapflow capture -q -r IN -w OUT ARGS...`; returns stderr, which must show success.
fn capture(input: &Path, out: &Path, args: &[&str]) -> String {
    let o = run_limited(
        tapflow(["capture", "-q", "-r", &p(input), "-w", &p(out)]).args(args),
        Duration::from_secs(120),
    );
    let err = String::from_utf8_lossy(&o.stderr).into_owned();
    assert!(o.status.success(), "{err}");
    err
}

#[test]
fn tshark_and_capinfos_read_compressed_outputs_as_the_plain_one() {
    let d = dir("read");
    let input = built_trace(&d, "in.pcap", 500, 100, 1_000);
    let plain = d.join("o.pcapng");
    capture(&input, &plain, &["-s", "64"]);
    let want = tshark_fields(&plain, &FIELDS);
    assert_eq!(want.len(), 50_000);
    for name in ["o.pcapng.zst", "o.pcapng.gz", "o.pcap.zst"] {
        let out = d.join(name);
        let pcap = name.starts_with("o.pcap.");
        capture(
            &input,
            &out,
            &["-s", "64", "--format", if pcap { "pcap" } else { "pcapng" }],
        );
        assert_eq!(capinfos_count(&out), 50_000, "{name}");
        if !pcap {
            assert_eq!(tshark_fields(&out, &FIELDS), want, "{name}");
        }
        let (z, u) = (
            std::fs::metadata(&out).unwrap().len(),
            std::fs::metadata(&plain).unwrap().len(),
        );
        assert!(z * 3 < u, "{name}: {z} bytes against {u} uncompressed");
    }
    // Rotated: the index goes before both extensions.
    capture(
        &input,
        &d.join("r.pcapng.zst"),
        &["-s", "64", "--rotate-size", "2M"],
    );
    let mut total = 0;
    for i in 0.. {
        let f = d.join(format!("r-{i:05}.pcapng.zst"));
        if !f.exists() {
            assert!(i >= 2, "{i} files");
            break;
        }
        total += capinfos_count(&f);
    }
    assert_eq!(total, 50_000);
    std::fs::remove_dir_all(&d).unwrap();
}

#[test]
fn compressed_inputs_are_known_by_their_magic_and_read_as_the_plain_one() {
    let d = dir("input");
    let input = built_trace(&d, "in.pcap", 100, 50, 1_000);
    let want = tshark_fields(&input, &FIELDS);
    for (name, tool) in [("in.pcap.zst", "zstd"), ("in.pcap.gz", "gzip")] {
        let packed = d.join(name);
        let o = Command::new(tool).arg("-c").arg(&input).output().unwrap();
        assert!(o.status.success());
        std::fs::write(&packed, &o.stdout).unwrap();
        // The name says nothing: the first bytes do.
        let anon = d.join(format!("{tool}-noext"));
        std::fs::copy(&packed, &anon).unwrap();
        for src in [&packed, &anon] {
            let out = d.join(format!(
                "back-{tool}-{}.pcap",
                src.file_name().unwrap().len()
            ));
            let err = capture(src, &out, &["-s", "65535", "--format", "pcap"]);
            assert!(err.contains("5000 received, 5000 recorded"), "{err}");
            assert_eq!(tshark_fields(&out, &FIELDS), want, "{}", src.display());
        }
    }
    std::fs::remove_dir_all(&d).unwrap();
}

#[test]
fn a_zst_file_cut_short_reads_up_to_the_cut() {
    let d = dir("cut");
    let input = built_trace(&d, "in.pcap", 1000, 200, 1_000);
    let out = d.join("o.pcapng.zst");
    capture(&input, &out, &["-s", "64"]);
    let full = d.join("full.pcapng");
    capture(&out, &full, &["-s", "64"]);
    let all = tshark_fields(&full, &FIELDS);
    assert_eq!(all.len(), 200_000);
    let bytes = std::fs::read(&out).unwrap();
    let cut = d.join("cut.pcapng.zst");
    std::fs::write(&cut, &bytes[..bytes.len() * 3 / 5]).unwrap();

    // The zstd tool decodes up to the cut, and says the stream is cut.
    let o = Command::new("zstd")
        .args(["-d", "-c"])
        .arg(&cut)
        .output()
        .unwrap();
    assert!(!o.status.success());
    let decoded = d.join("decoded.pcapng");
    std::fs::write(&decoded, &o.stdout).unwrap();
    let (theirs, complaint) = tshark_fields_lenient(&decoded, &FIELDS);
    assert!(complaint.contains("cut short"), "{complaint}");
    // tshark reads the cut file itself too.
    let (direct, _) = tshark_fields_lenient(&cut, &FIELDS);

    // tapflow reads the packets before the cut, then names the damage.
    let back = d.join("back.pcapng");
    let o = run_limited(
        &mut tapflow(["capture", "-q", "-r", &p(&cut), "-w", &p(&back)]),
        Duration::from_secs(60),
    );
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(err.contains("cut.pcapng.zst: packet "), "{err}");
    let ours = tshark_fields(&back, &FIELDS);
    for (who, got) in [
        ("zstd -d", &theirs),
        ("tshark", &direct),
        ("tapflow", &ours),
    ] {
        // At most one zstd block (128 KiB) of records before the cut is lost.
        assert!(
            got.len() > 200_000 * 3 / 5 - 2000,
            "{who}: {} packets",
            got.len()
        );
        assert_eq!(got[..], all[..got.len()], "{who}");
    }
    std::fs::remove_dir_all(&d).unwrap();
}

/// A small tmpfs, unmounted and removed on drop.
struct SmallDisk(PathBuf);

impl SmallDisk {
    fn new(name: &str, size: &str) -> SmallDisk {
        let d = dir(name);
        let ok = Command::new("mount")
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
        let _ = Command::new("umount").arg(&self.0).status();
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

#[test]
fn a_full_disk_under_a_compressed_file_keeps_every_packet_accounted_for() {
    require_root();
    let d = dir("full-in");
    let input = built_trace(&d, "in.pcap", 1000, 300, 1_000);
    for name in ["o.pcapng.zst", "o.pcapng.gz"] {
        let disk = SmallDisk::new("full", "1M");
        let out = disk.0.join(name);
        let o = run_limited(
            &mut tapflow(["capture", "-q", "-r", &p(&input), "-w", &p(&out)]),
            Duration::from_secs(60),
        );
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(1), "{err}");
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
        // The run stops at the failed write, between two blocks of the input.
        assert!(received <= 300_000, "{line}");
        assert_eq!(recorded + ours, received, "{line}");
        assert!(recorded > 1000 && ours > 1000, "{name}: {line}");
        // The file is whole: cut back to its last whole record, and closed.
        assert_eq!(capinfos_count(&out), recorded, "{name}: {line}");
        let tool = if name.ends_with("zst") {
            "zstd"
        } else {
            "gzip"
        };
        let t = Command::new(tool)
            .args(["-t", "-q"])
            .arg(&out)
            .status()
            .unwrap();
        assert!(t.success(), "{tool} -t {name}");
        drop(disk);
    }
    std::fs::remove_dir_all(&d).unwrap();
}
