//! Where the shared corpus of real captures is, for the tests that read it.
//!
//! The corpus is `$TAPFLOW_CORPUS`, else `shared/corpus` beside the repository. CI has it; a
//! fresh clone does not, and there each test that needs it says so in one line and returns.
//! What those tests check is covered as well by tests on traffic built with the packet builder
//! (`traffic.rs` beside this file).

#![allow(dead_code)]

use std::io::Write;
use std::path::{Path, PathBuf};

/// The corpus directory, or `None` after one line on stderr, `skipped: TEST: no corpus at PATH
/// (set TAPFLOW_CORPUS)`. Call it on the test's own thread (the test harness names the thread
/// after the test). A `TAPFLOW_CORPUS` that holds no corpus fails the test instead: whoever set
/// it expects the corpus tests to run.
pub fn corpus() -> Option<PathBuf> {
    let (dir, asked) = match std::env::var_os("TAPFLOW_CORPUS") {
        Some(d) => (PathBuf::from(d), true),
        None => (beside_the_repository(), false),
    };
    if dir.join("MANIFEST.tsv").is_file() {
        return Some(dir);
    }
    assert!(
        !asked,
        "TAPFLOW_CORPUS={} holds no corpus (no MANIFEST.tsv there)",
        dir.display()
    );
    let test = std::thread::current()
        .name()
        .unwrap_or("a corpus test")
        .to_owned();
    // One write straight to stderr, past the harness's capture, so that a passing run shows it.
    let line = format!(
        "skipped: {test}: no corpus at {} (set TAPFLOW_CORPUS)\n",
        dir.display()
    );
    let _ = std::io::stderr().write_all(line.as_bytes());
    None
}

/// `shared/corpus` in the folder that holds the repository.
fn beside_the_repository() -> PathBuf {
    // This file is compiled into the tests of crates/<crate>, whose manifest directory this is.
    let repo = Path::new(env!("CARGO_MANIFEST_DIR"))
        .ancestors()
        .nth(2)
        .expect("crates/<crate> inside the repository");
    repo.parent().unwrap_or(repo).join("shared").join("corpus")
}
