//! A full disk: the store keeps every file it already wrote, counts every flow it drops, and
//! says which file failed. Runs on a 2 MiB tmpfs the test mounts (root).

mod common;

use std::path::PathBuf;
use std::time::Duration;

use common::{H, day0_us, flows};
use tapflow_store::parquet::partition::{Table, files_between};
use tapflow_store::parquet::reader::read_flows;
use tapflow_store::{FlowStore, ParquetOptions, ParquetStore};

/// A 2 MiB tmpfs, unmounted and removed on drop.
struct SmallDisk(PathBuf);

impl SmallDisk {
    fn new() -> SmallDisk {
        let d = std::env::temp_dir().join(format!("tapflow-store-full-{}", std::process::id()));
        std::fs::create_dir_all(&d).unwrap();
        let ok = std::process::Command::new("mount")
            .args(["-t", "tmpfs", "-o", "size=2M", "tapflow-test"])
            .arg(&d)
            .status()
            .unwrap()
            .success();
        assert!(ok, "mount a tmpfs on {} (needs root)", d.display());
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
fn a_full_disk_loses_nothing_stored_and_counts_what_it_drops() {
    let disk = SmallDisk::new();
    let dir = disk.0.join("store");
    let opts = ParquetOptions {
        flush_interval: Duration::from_secs(3600),
        maintenance_interval: Duration::from_secs(3600),
        ..ParquetOptions::default()
    };
    let mut store = Box::new(ParquetStore::open(&dir, opts).unwrap());
    // Random hosts and ports compress badly: 2 MiB fills within a few hundred thousand flows.
    let mut errors = Vec::new();
    for k in 0..60u64 {
        let batch = flows(100 + k, 5000, day0_us() + (k as i64 % 3) * H, H, 1 << 20);
        if let Err(e) = store.insert(&batch).and_then(|()| store.flush()) {
            errors.push(e.to_string());
        }
        if errors.len() >= 3 {
            break;
        }
    }
    let r = store.report();
    assert!(!errors.is_empty(), "the disk never filled: {r:?}");
    for e in &errors {
        assert!(e.contains(&disk.0.display().to_string()), "{e}");
        assert!(!e.contains('\n'), "{e}");
    }
    assert!(
        errors.iter().any(|e| e.contains("No space left on device")),
        "{errors:?}"
    );
    assert_eq!(r.received, r.stored + r.dropped + r.pending, "{r:?}");
    assert!(r.stored > 0 && r.dropped > 0, "{r:?}");
    assert_eq!(r.pending, 0);

    // Closing on a full disk may fail (rollups, merging); it loses nothing already stored.
    let closed = store.close();
    if let Err(e) = &closed {
        assert!(e.to_string().contains(&disk.0.display().to_string()), "{e}");
    }
    let files = files_between(&dir, Table::Flows, i64::MIN, i64::MAX).unwrap();
    let rows: usize = files.iter().map(|f| read_flows(f).unwrap().len()).sum();
    assert_eq!(
        rows as u64, r.stored,
        "every stored flow is in a complete file"
    );
    let parts = walk(&dir)
        .into_iter()
        .filter(|p| p.extension().is_some_and(|e| e == "part"))
        .count();
    assert_eq!(parts, 0, "no .part left behind");
}

fn walk(dir: &std::path::Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir).unwrap().flatten() {
        let p = e.path();
        if p.is_dir() {
            out.extend(walk(&p));
        } else {
            out.push(p);
        }
    }
    out
}
