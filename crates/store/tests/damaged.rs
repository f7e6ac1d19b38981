//! A damaged file in the store: 150 byte-flip variants of one flows file, each read by the query
//! engine and by a compaction. Nothing panics; a file that cannot be read is moved into
//! `DIR/quarantine/`, and the answer comes from the other files. A FIFO named `*.parquet` is
//! refused at once, not waited on.

mod common;

use std::os::unix::fs::FileTypeExt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use common::{H, day0_us, flows};
use tapflow_store::parquet::ParquetEngine;
use tapflow_store::parquet::compaction::{publish_merges, stage};
use tapflow_store::parquet::partition::{Table, files_between};
use tapflow_store::parquet::reader::read_flows;
use tapflow_store::parquet::writer::FileOptions;
use tapflow_store::query::{Kind, Query, QueryEngine, QueryResult};
use tapflow_store::{FlowStore, ParquetOptions, ParquetStore};

const VARIANTS: usize = 150;

fn options() -> ParquetOptions {
    ParquetOptions {
        flush_interval: Duration::from_secs(3600),
        maintenance_interval: Duration::from_secs(3600),
        file: FileOptions {
            row_group_rows: 64,
            zstd_level: 1,
        },
        // Compactions run when a test asks for them, not at close.
        close_merge: Some(Duration::ZERO),
        ..ParquetOptions::default()
    }
}

/// A store of three fresh flows files in one hour (and its rollups), in `dir`; the store's
/// opening and compaction read them as a collector at its start does.
fn write_store(dir: &Path) {
    let mut store = Box::new(ParquetStore::open(dir, options()).unwrap());
    for seed in 1..=3 {
        store.insert(&flows(seed, 300, day0_us(), H, 40)).unwrap();
        store.flush().unwrap();
    }
    store.close().unwrap();
}

fn flow_files(dir: &Path) -> Vec<PathBuf> {
    files_between(dir, Table::Flows, i64::MIN, i64::MAX).unwrap()
}

fn summary(dir: &Path) -> QueryResult {
    let q = Query {
        window: None,
        filter: None,
        kind: Kind::Summary,
    };
    ParquetEngine::new(dir, 2)
        .prefer_rollups(false)
        .run(&q)
        .unwrap_or_else(|e| panic!("query {}: {e}", dir.display()))
        .result
}

/// Copies the store at `from` into `to` (directories and files).
fn copy_tree(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for e in std::fs::read_dir(from).unwrap() {
        let e = e.unwrap();
        let dest = to.join(e.file_name());
        if e.file_type().unwrap().is_dir() {
            copy_tree(&e.path(), &dest);
        } else {
            std::fs::copy(e.path(), dest).unwrap();
        }
    }
}

/// The victim's path in a copy of the store.
fn moved(victim: &Path, from: &Path, to: &Path) -> PathBuf {
    to.join(victim.strip_prefix(from).unwrap())
}

/// Where the store puts the victim when it cannot read it.
fn quarantined(victim: &Path, from: &Path, to: &Path) -> PathBuf {
    to.join("quarantine")
        .join(victim.strip_prefix(from).unwrap())
}

/// The bytes flipped (their lowest bit): evenly spaced over the file, its first and last byte
/// among them, and as many again over its footer (the length in its last 8 bytes), where flips
/// in the column chunk offsets make the Parquet decoder panic whatever the pages' layout.
fn offsets(bytes: &[u8]) -> impl Iterator<Item = usize> {
    let len = bytes.len();
    let footer = u32::from_le_bytes(bytes[len - 8..len - 4].try_into().unwrap()) as usize;
    let from = len.saturating_sub(footer + 8);
    let over = move |start: usize, span: usize| {
        (0..VARIANTS).map(move |i| start + i * span / (VARIANTS - 1))
    };
    over(0, len - 1).chain(over(from, len - 1 - from))
}

#[test]
fn damaged_files_are_quarantined_and_the_rest_answers() {
    let base = tempfile::tempdir().unwrap();
    let pristine = base.path().join("pristine");
    write_store(&pristine);
    let files = flow_files(&pristine);
    assert_eq!(files.len(), 3, "{files:?}");
    let victim = files[0].clone();
    let bytes = std::fs::read(&victim).unwrap();

    // The answer of the other files alone.
    let without = base.path().join("without");
    copy_tree(&pristine, &without);
    std::fs::remove_file(moved(&victim, &pristine, &without)).unwrap();
    let others = summary(&without);
    let other_flows: usize = flow_files(&without)
        .iter()
        .map(|f| read_flows(f).unwrap().len())
        .sum();

    let mut damaged = Vec::new();
    let mut panicked = Vec::new();
    for (n, at) in offsets(&bytes).enumerate() {
        let mut variant = bytes.clone();
        variant[at] ^= 0x01;

        // Read alone, outside a store (where it is not moved).
        let alone = base.path().join(format!("alone-{n}.parquet"));
        std::fs::write(&alone, &variant).unwrap();
        if let Err(e) = read_flows(&alone) {
            assert!(alone.exists(), "flip at {at}");
            if e.to_string().contains("panicked") {
                panicked.push(at);
            }
        }

        // The query engine.
        let dir = base.path().join(format!("query-{n}"));
        copy_tree(&pristine, &dir);
        std::fs::write(moved(&victim, &pristine, &dir), &variant).unwrap();
        let answer = summary(&dir);
        let q = quarantined(&victim, &pristine, &dir);
        if q.exists() {
            damaged.push(at);
            assert!(!moved(&victim, &pristine, &dir).exists(), "flip at {at}");
            assert_eq!(std::fs::read(&q).unwrap(), variant, "flip at {at}");
            assert_eq!(answer, others, "flip at {at}: not the other files' answer");
            // Gone from the store: the next query does not meet it again.
            assert_eq!(summary(&dir), others, "flip at {at}");
        }

        // A compaction of the victim's partition, as the collector's first one.
        let dir = base.path().join(format!("compact-{n}"));
        copy_tree(&pristine, &dir);
        let partition = moved(victim.parent().unwrap(), &pristine, &dir);
        std::fs::write(moved(&victim, &pristine, &dir), &variant).unwrap();
        let mut name = || "m-1.parquet".to_string();
        let merges = stage(
            &partition,
            Table::Flows,
            &options().file,
            1 << 20,
            false,
            &mut name,
        )
        .unwrap_or_else(|e| panic!("compaction with a flip at {at}: {e}"));
        publish_merges(merges).unwrap_or_else(|e| panic!("publish with a flip at {at}: {e}"));
        if quarantined(&victim, &pristine, &dir).exists() {
            let after = flow_files(&dir);
            assert_eq!(after.len(), 1, "flip at {at}: {after:?}");
            assert_eq!(
                read_flows(&after[0]).unwrap().len(),
                other_flows,
                "flip at {at}"
            );
        }
    }
    assert!(damaged.len() >= 5, "{} damaged: {damaged:?}", damaged.len());
    assert!(!panicked.is_empty(), "no flip made the decoder panic");
    eprintln!(
        "{} of {} variants quarantined: {damaged:?}",
        damaged.len(),
        2 * VARIANTS
    );
    eprintln!("the decoder panicked on {panicked:?}");
}

#[test]
fn a_fifo_or_a_symlink_named_parquet_is_refused_not_waited_on() {
    let base = tempfile::tempdir().unwrap();
    let dir = base.path().join("store");
    write_store(&dir);
    let expected = summary(&dir);
    let partition = flow_files(&dir)[0].parent().unwrap().to_path_buf();
    let fifo = partition.join("w-9.parquet");
    let made = std::process::Command::new("mkfifo")
        .arg(&fifo)
        .status()
        .unwrap();
    assert!(made.success());
    let link = partition.join("w-8.parquet");
    std::os::unix::fs::symlink(flow_files(&dir)[1].clone(), &link).unwrap();

    // A query that waits on the FIFO never answers: asked on a thread, given 60 s.
    let (tx, rx) = std::sync::mpsc::channel();
    let d = dir.clone();
    std::thread::spawn(move || {
        let _ = tx.send(summary(&d));
    });
    let answer = rx
        .recv_timeout(Duration::from_secs(60))
        .expect("the query waits on the FIFO");
    assert_eq!(answer, expected);
    let q = |p: &Path| quarantined(p, &dir, &dir);
    assert!(
        std::fs::symlink_metadata(q(&fifo))
            .unwrap()
            .file_type()
            .is_fifo()
    );
    assert!(std::fs::symlink_metadata(q(&link)).unwrap().is_symlink());
    assert!(!fifo.exists() && std::fs::symlink_metadata(&link).is_err());
}
