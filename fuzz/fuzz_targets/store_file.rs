//! Arbitrary bytes as a Parquet file of the store's flows table, read by the store's reader
//! (`reader::read_flows`, the footer by `compaction::file_rows`) and the query engine's scan of a
//! one-file store. The Parquet decoder may panic on such bytes: the store's containment turns
//! that into an error naming the file, the scan moves the file into `quarantine/` and answers
//! from nothing; the process never aborts.
#![no_main]

use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use libfuzzer_sys::fuzz_target;
use tapflow_store::StoreError;
use tapflow_store::parquet::compaction::file_rows;
use tapflow_store::parquet::ParquetEngine;
use tapflow_store::query::{Kind, Query, QueryEngine};
use tapflow_store::parquet::reader::read_flows;

/// A store directory for this process, and its one partition.
fn dirs() -> &'static (tempfile::TempDir, PathBuf) {
    static DIRS: OnceLock<(tempfile::TempDir, PathBuf)> = OnceLock::new();
    DIRS.get_or_init(|| {
        // The store's hook, as `tapflow`'s main installs it: it keeps libFuzzer's hook for
        // panics outside the containment.
        tapflow_store::parquet::damaged::install_panic_hook();
        let dir = tempfile::tempdir().expect("a temporary directory");
        let partition = dir.path().join("flows/date=2024-03-10/hour=00");
        std::fs::create_dir_all(&partition).expect("the partition directory");
        (dir, partition)
    })
}

fuzz_target!(|data: &[u8]| {
    let (dir, partition) = dirs();
    let _ = std::fs::remove_dir_all(dir.path().join("quarantine"));
    let path = partition.join("w-1.parquet");
    std::fs::write(&path, data).expect("write the input");

    let reads: [fn(&Path) -> Result<(), StoreError>; 2] =
        [|p| read_flows(p).map(|_| ()), |p| file_rows(p).map(|_| ())];
    for read in reads {
        match read(&path) {
            Ok(()) => {}
            Err(StoreError::Damaged { path: p, why }) => {
                assert_eq!(p, path);
                assert!(!why.is_empty());
                // Moved aside: put it back for the next reader.
                if !path.exists() {
                    std::fs::write(&path, data).expect("write the input again");
                }
            }
            Err(e) => panic!("not a damaged file: {e}"),
        }
    }

    let q = Query {
        window: None,
        filter: None,
        kind: Kind::Summary,
    };
    let answer = ParquetEngine::new(dir.path(), 1)
        .prefer_rollups(false)
        .run(&q)
        .expect("a damaged file is left out, not an error");
    if answer.stats.files_quarantined == 1 {
        assert!(!path.exists());
        assert!(
            dir.path()
                .join("quarantine/flows/date=2024-03-10/hour=00/w-1.parquet")
                .exists()
        );
    }
});
