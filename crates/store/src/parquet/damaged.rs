//! Store files that cannot be read: a file damaged on disk, or something that is not a regular
//! file (a FIFO, a device, a symbolic link) under a `*.parquet` name. Every reader of a store
//! file goes through [`read`]: it opens only regular files, without blocking, and decodes inside
//! [`contain`], so a damaged file is an error naming it, never a hang or a panic that ends the
//! process. [`read`] moves such a file into `DIR/quarantine/` (keeping its path below the store
//! directory), says so on stderr and counts it; the readers then go on with the other files.
//!
//! The Parquet library panics on some damaged files. The release build unwinds
//! (`panic = "unwind"`) so that [`contain`] can catch those; [`install_panic_hook`] makes every
//! other panic abort the process as before, including one in our own code that decoded rows are
//! handed to ([`uncontained`]).

use std::cell::Cell;
use std::fs::File;
use std::os::unix::fs::{FileTypeExt, OpenOptionsExt};
use std::panic::{AssertUnwindSafe, catch_unwind, resume_unwind};
use std::path::{Path, PathBuf};
use std::sync::Once;
use std::sync::atomic::{AtomicU64, Ordering};

use crate::StoreError;

/// The directory under the store directory that damaged files are moved into.
pub const QUARANTINE_DIR: &str = "quarantine";

thread_local! {
    /// Whether this thread runs inside [`contain`].
    static CONTAINED: Cell<bool> = const { Cell::new(false) };
}

/// Files this process moved into quarantine.
static QUARANTINED: AtomicU64 = AtomicU64::new(0);

/// How many files this process moved into quarantine.
pub fn quarantined() -> u64 {
    QUARANTINED.load(Ordering::Relaxed)
}

/// Makes a panic abort the process, as `panic = "abort"` did, unless it happens inside
/// [`contain`]: then it only unwinds to there, silently (the error names the file). Call it at
/// the start of `main`; calling it again does nothing.
pub fn install_panic_hook() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        let previous = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            if CONTAINED.with(Cell::get) {
                return;
            }
            previous(info);
            std::process::abort();
        }));
    });
}

/// Runs `decode`; a panic inside it becomes `Err` with the panic's message, except one inside
/// [`uncontained`].
pub fn contain<T>(decode: impl FnOnce() -> T) -> Result<T, String> {
    let outer = CONTAINED.with(|c| c.replace(true));
    let r = catch_unwind(AssertUnwindSafe(decode));
    CONTAINED.with(|c| c.set(outer));
    r.map_err(|payload| match payload.downcast::<Escaped>() {
        Ok(escaped) => resume_unwind(escaped.0),
        Err(payload) => payload
            .downcast_ref::<&str>()
            .map(|s| (*s).to_owned())
            .or_else(|| payload.downcast_ref::<String>().cloned())
            .unwrap_or_else(|| "a panic".to_owned()),
    })
}

/// A panic inside [`uncontained`], on its way through [`contain`].
struct Escaped(Box<dyn std::any::Any + Send>);

/// Runs `f`, our own code called back from inside [`contain`] (a sink fed decoded rows): a
/// panic in it is a bug, not a damaged file, and is not contained (the hook aborts).
pub fn uncontained<T>(f: impl FnOnce() -> T) -> T {
    let outer = CONTAINED.with(|c| c.replace(false));
    let r = catch_unwind(AssertUnwindSafe(f));
    CONTAINED.with(|c| c.set(outer));
    r.unwrap_or_else(|payload| resume_unwind(Box::new(Escaped(payload))))
}

/// Opens the store file at `path` for reading if it is a regular file: a symbolic link is
/// refused by the open, a FIFO is opened without waiting for a writer and then refused.
pub fn open(path: &Path) -> Result<File, StoreError> {
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK | libc::O_NOFOLLOW)
        .open(path)
        .map_err(|source| match source.raw_os_error() {
            Some(libc::ELOOP) => damaged(path, "a symbolic link, not a regular file"),
            _ => StoreError::Io {
                what: "open",
                path: path.to_path_buf(),
                source,
            },
        })?;
    let kind = file
        .metadata()
        .map_err(|source| StoreError::Io {
            what: "stat",
            path: path.to_path_buf(),
            source,
        })?
        .file_type();
    if !kind.is_file() {
        let what = if kind.is_fifo() {
            "a FIFO"
        } else if kind.is_dir() {
            "a directory"
        } else if kind.is_socket() {
            "a socket"
        } else if kind.is_block_device() || kind.is_char_device() {
            "a device"
        } else {
            "something"
        };
        return Err(damaged(path, &format!("{what}, not a regular file")));
    }
    Ok(file)
}

/// The error for a store file that cannot be read: what is wrong with it.
pub fn damaged(path: &Path, why: &str) -> StoreError {
    StoreError::Damaged {
        path: path.to_path_buf(),
        why: why.to_owned(),
    }
}

/// Opens the store file at `path` ([`open`]) and runs `decode` on it inside [`contain`]. If the
/// file is not a regular file, or `decode` panics or returns [`StoreError::Damaged`], the file
/// is moved into quarantine ([`quarantine`]) and the error returned names it; the caller skips
/// the file.
pub fn read<T>(
    path: &Path,
    decode: impl FnOnce(File) -> Result<T, StoreError>,
) -> Result<T, StoreError> {
    let r = open(path).and_then(|file| {
        contain(|| decode(file)).unwrap_or_else(|panic| {
            Err(damaged(
                path,
                &format!("the Parquet decoder panicked: {panic}"),
            ))
        })
    });
    if let Err(StoreError::Damaged { why, .. }) = &r {
        quarantine(path, why);
    }
    r
}

/// Moves the damaged store file at `path` to `DIR/quarantine/` under its path below the store
/// directory `DIR`, and says so on stderr; a file outside a store's partitions stays where it
/// is. Returns where it went.
pub fn quarantine(path: &Path, why: &str) -> Option<PathBuf> {
    let dest = quarantine_path(path);
    let moved = dest.as_ref().map(|dest| {
        dest.parent()
            .map_or(Ok(()), std::fs::create_dir_all)
            .and_then(|()| std::fs::rename(path, dest))
    });
    match moved {
        Some(Ok(())) => {
            QUARANTINED.fetch_add(1, Ordering::Relaxed);
            let dest = dest.as_deref().unwrap_or(path);
            eprintln!(
                "tapflow: store file {}: {why}; moved to {} and skipped",
                path.display(),
                dest.display()
            );
        }
        // Moved by another reader of the store meanwhile.
        Some(Err(e)) if e.kind() == std::io::ErrorKind::NotFound => return None,
        Some(Err(e)) => eprintln!(
            "tapflow: store file {}: {why}; skipped (not moved to quarantine: {e})",
            path.display()
        ),
        None => eprintln!("tapflow: store file {}: {why}; skipped", path.display()),
    }
    dest
}

/// `DIR/quarantine/TABLE/date=…/hour=…/NAME` for `DIR/TABLE/date=…/hour=…/NAME`.
fn quarantine_path(path: &Path) -> Option<PathBuf> {
    let partition = |d: &Path| {
        d.file_name()
            .and_then(|n| n.to_str())
            .is_some_and(|n| n.starts_with("date=") || n.starts_with("hour="))
    };
    let mut table = path.parent()?;
    if !partition(table) {
        return None;
    }
    while partition(table) {
        table = table.parent()?;
    }
    let root = table.parent()?;
    Some(
        root.join(QUARANTINE_DIR)
            .join(path.strip_prefix(root).ok()?),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quarantine_keeps_the_path_below_the_store() {
        let p = Path::new("/s/flows/date=2024-03-10/hour=00/w-1.parquet");
        assert_eq!(
            quarantine_path(p).unwrap(),
            Path::new("/s/quarantine/flows/date=2024-03-10/hour=00/w-1.parquet")
        );
        let p = Path::new("/s/rollup_1h/date=2024-03-10/m-2.parquet");
        assert_eq!(
            quarantine_path(p).unwrap(),
            Path::new("/s/quarantine/rollup_1h/date=2024-03-10/m-2.parquet")
        );
        assert_eq!(quarantine_path(Path::new("/tmp/x/f.parquet")), None);
        assert_eq!(quarantine_path(Path::new("f.parquet")), None);
    }

    #[test]
    fn contain_turns_a_panic_into_its_message() {
        assert_eq!(contain(|| 7), Ok(7));
        let e = contain(|| -> u8 { panic!("index {} out of range", 9) }).unwrap_err();
        assert_eq!(e, "index 9 out of range");
        assert!(!CONTAINED.with(Cell::get));
    }

    #[test]
    fn a_panic_in_uncontained_code_goes_through_contain() {
        let through = catch_unwind(|| contain(|| uncontained(|| panic!("a bug"))));
        let payload = through.expect_err("contained");
        assert_eq!(payload.downcast_ref::<&str>(), Some(&"a bug"));
        assert_eq!(contain(|| uncontained(|| 3)), Ok(3));
        assert!(!CONTAINED.with(Cell::get));
    }

    #[test]
    fn with_the_hook_a_contained_panic_is_caught_and_any_other_aborts() {
        const CHILD: &str = "TAPFLOW_STORE_HOOK_CHILD";
        if std::env::var_os(CHILD).is_some() {
            install_panic_hook();
            assert_eq!(contain(|| -> u8 { panic!("inside") }), Err("inside".into()));
            eprintln!("contained");
            let _ = std::thread::spawn(|| panic!("outside")).join();
            eprintln!("went on");
            return;
        }
        use std::os::unix::process::ExitStatusExt;
        let test = "parquet::damaged::tests::with_the_hook_a_contained_panic_is_caught_and_any_other_aborts";
        let out = std::process::Command::new(std::env::current_exe().unwrap())
            .args([test, "--exact", "--nocapture", "--test-threads=1"])
            .env(CHILD, "1")
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.signal(), Some(libc::SIGABRT), "{stderr}");
        assert!(stderr.contains("contained"), "{stderr}");
        assert!(
            stderr.contains("panicked at") && stderr.contains("outside"),
            "{stderr}"
        );
        assert!(
            !stderr.contains("went on") && !stderr.contains("inside"),
            "{stderr}"
        );
    }
}
