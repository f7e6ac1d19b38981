//! Output files created so that nobody can turn them against the host: never opened through a
//! symbolic link, never put in the place of something that is not a regular file (a device,
//! a directory, a FIFO), and with the same permission bits whatever the umask.

use std::fs::{File, OpenOptions};
use std::io;
use std::os::unix::fs::{FileTypeExt, OpenOptionsExt, PermissionsExt};
use std::path::Path;

use crate::SysError;

/// Permission bits of every file tapflow writes: the owner reads and writes, the group reads.
pub const MODE: u32 = 0o640;

/// What stands at a path an output is to take.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Occupant {
    /// Nothing: the output will be new.
    Nothing,
    /// A regular file, which the output replaces as tcpdump's would.
    RegularFile,
    /// Anything else, which an output never replaces, named for the message.
    Other(&'static str),
}

/// Looks at `path` without following a link at its end.
pub fn occupant(path: &Path) -> Result<Occupant, SysError> {
    match std::fs::symlink_metadata(path) {
        Ok(m) => {
            let t = m.file_type();
            Ok(if t.is_file() {
                Occupant::RegularFile
            } else if t.is_symlink() {
                Occupant::Other("a symbolic link")
            } else if t.is_dir() {
                Occupant::Other("a directory")
            } else if t.is_block_device() || t.is_char_device() {
                Occupant::Other("a device")
            } else if t.is_fifo() {
                Occupant::Other("a FIFO")
            } else {
                Occupant::Other("not a regular file")
            })
        }
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(Occupant::Nothing),
        Err(error) => Err(file_error("stat", path, String::new(), error)),
    }
}

/// Refuses `path` as an output place unless it is free or a regular file.
pub fn check_replaceable(path: &Path) -> Result<(), SysError> {
    match occupant(path)? {
        Occupant::Other(what) => Err(refused(path, what)),
        _ => Ok(()),
    }
}

/// Creates `path`, which must not exist yet, with `extra_flags` added to the open flags
/// (`O_CREAT | O_EXCL | O_NOFOLLOW`: a file or link planted there is refused, not followed)
/// and [`MODE`] as its permission bits.
pub fn create_new(path: &Path, extra_flags: i32) -> io::Result<File> {
    let f = OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(MODE)
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC | extra_flags)
        .open(path)?;
    // The umask may have taken bits away from MODE.
    f.set_permissions(std::fs::Permissions::from_mode(MODE))?;
    Ok(f)
}

/// Creates or truncates `path` for writing: a regular file or nothing may stand there, and a
/// link at its end is refused, not followed. New files get [`MODE`].
pub fn create(path: &Path) -> Result<File, SysError> {
    check_replaceable(path)?;
    let f = OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(MODE)
        // Non-blocking: a FIFO put there since the check must not hang the open.
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC | libc::O_NONBLOCK)
        .open(path)
        .map_err(|e| file_error("open", path, String::new(), e))?;
    let m = f
        .metadata()
        .map_err(|e| file_error("fstat", path, String::new(), e))?;
    if !m.file_type().is_file() {
        return Err(refused(path, "not a regular file"));
    }
    f.set_permissions(std::fs::Permissions::from_mode(MODE))
        .map_err(|e| file_error("fchmod", path, String::new(), e))?;
    Ok(f)
}

fn refused(path: &Path, what: &str) -> SysError {
    file_error(
        "create",
        path,
        format!("{what} is there, and an output never replaces one"),
        io::Error::from_raw_os_error(libc::EEXIST),
    )
}

fn file_error(call: &'static str, path: &Path, detail: String, error: io::Error) -> SysError {
    SysError::File {
        call,
        path: path.to_path_buf(),
        detail,
        error,
    }
}

#[cfg(test)]
#[allow(unsafe_code)] // umask, to show the mode does not depend on it.
mod tests {
    use super::*;
    use std::os::unix::fs::symlink;

    fn dir(name: &str) -> std::path::PathBuf {
        let d = std::env::temp_dir().join(format!("tf-outfile-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        d
    }

    #[test]
    fn a_planted_link_is_refused_and_its_target_untouched() {
        let d = dir("link");
        let victim = d.join("victim");
        std::fs::write(&victim, b"precious").unwrap();
        let part = d.join("y.pcapng.part");
        symlink(&victim, &part).unwrap();
        let e = create_new(&part, 0).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::AlreadyExists, "{e}");
        assert!(create(&part).is_err());
        assert_eq!(std::fs::read(&victim).unwrap(), b"precious");
        // A dangling link too: nothing is created where it points.
        let dangling = d.join("z.part");
        symlink(d.join("nowhere"), &dangling).unwrap();
        assert!(create_new(&dangling, 0).is_err());
        assert!(!d.join("nowhere").exists());
        std::fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn devices_and_directories_are_never_replaced() {
        assert_eq!(
            occupant(Path::new("/dev/full")).unwrap(),
            Occupant::Other("a device")
        );
        let e = check_replaceable(Path::new("/dev/null"))
            .unwrap_err()
            .to_string();
        assert!(e.contains("/dev/null") && e.contains("a device"), "{e}");
        let d = dir("dir");
        assert!(check_replaceable(&d).is_err());
        assert!(create(&d).is_err());
        std::fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn files_get_the_same_mode_whatever_the_umask() {
        let d = dir("mode");
        // SAFETY: umask only changes this process's file creation mask; restored below.
        let old = unsafe { libc::umask(0o077) };
        let a = create_new(&d.join("a"), 0).map(|f| f.metadata().unwrap());
        let b = create(&d.join("b")).map(|f| f.metadata().unwrap());
        // SAFETY: as above.
        unsafe { libc::umask(old) };
        assert_eq!(a.unwrap().permissions().mode() & 0o777, MODE);
        assert_eq!(b.unwrap().permissions().mode() & 0o777, MODE);
        // A regular file is replaced (truncated), as tcpdump's -w does.
        std::fs::write(d.join("c"), b"old").unwrap();
        drop(create(&d.join("c")).unwrap());
        assert_eq!(std::fs::read(d.join("c")).unwrap(), b"");
        std::fs::remove_dir_all(&d).unwrap();
    }
}
