//! Output files created so that nobody can turn them against the host: never opened through a
//! link another user planted, never put in the place of something that is not a regular file
//! (a device, a directory, a FIFO: those are written in place or refused), and with the same
//! permission bits whatever the umask.
#![allow(unsafe_code)] // geteuid, syncfs, and umask in the tests.

use std::fs::{File, OpenOptions};
use std::io;
use std::os::unix::fs::{FileTypeExt, MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

use crate::SysError;

/// Permission bits of every file tapflow writes: the owner reads and writes, the group reads.
pub const MODE: u32 = 0o640;

/// What an output's name leads to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Target {
    /// Nothing: the output will be new.
    Nothing,
    /// A regular file, which the output replaces as tcpdump's would.
    RegularFile,
    /// A character device or a FIFO (`/dev/null`, a named pipe): written in place, never
    /// replaced.
    Stream,
}

/// Looks at what `path` leads to. A symbolic link is followed only if it belongs to root or
/// to this process's user (the kernel's `protected_symlinks` rule, applied everywhere: a link
/// planted by another user is refused, `/dev/stdout` is not); a directory, a block device or
/// a socket is refused.
pub fn target(path: &Path) -> Result<Target, SysError> {
    let m = match std::fs::symlink_metadata(path) {
        Ok(m) => m,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Target::Nothing),
        Err(error) => return Err(file_error("stat", path, String::new(), error)),
    };
    let m = if m.file_type().is_symlink() {
        // SAFETY: geteuid has no arguments and cannot fail.
        let me = unsafe { libc::geteuid() };
        if m.uid() != 0 && m.uid() != me {
            return Err(refused(path, "a link another user owns"));
        }
        match std::fs::metadata(path) {
            Ok(m) => m,
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                return Err(refused(path, "a link to nothing"));
            }
            Err(error) => return Err(file_error("stat", path, String::new(), error)),
        }
    } else {
        m
    };
    let t = m.file_type();
    if t.is_file() {
        Ok(Target::RegularFile)
    } else if t.is_char_device() || t.is_fifo() {
        Ok(Target::Stream)
    } else if t.is_dir() {
        Err(refused(path, "a directory"))
    } else if t.is_block_device() {
        Err(refused(path, "a block device"))
    } else {
        Err(refused(path, "not a regular file"))
    }
}

/// Refuses `path` as the name a finished `.part` file is renamed to unless nothing or a
/// regular file stands there (a rename would put the file in the place of a device or link).
pub fn check_replaceable(path: &Path) -> Result<(), SysError> {
    let m = match std::fs::symlink_metadata(path) {
        Ok(m) => m,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(()),
        Err(error) => return Err(file_error("stat", path, String::new(), error)),
    };
    let t = m.file_type();
    match () {
        _ if t.is_file() => Ok(()),
        _ if t.is_symlink() => Err(refused(path, "a symbolic link")),
        _ if t.is_dir() => Err(refused(path, "a directory")),
        _ if t.is_char_device() || t.is_block_device() => Err(refused(path, "a device")),
        _ if t.is_fifo() => Err(refused(path, "a FIFO")),
        _ => Err(refused(path, "not a regular file")),
    }
}

/// A file written under a temporary name, `NAME.part`, that takes its name `NAME` only when
/// it is complete: [`PartName::publish`] renames it; dropped unpublished, for whatever reason
/// the write ended (an error, a refusal, an unwinding panic), the `.part` file is removed.
/// Held only for a `.part` file this process created, never for one found there.
#[derive(Debug)]
pub struct PartName {
    part: PathBuf,
    path: PathBuf,
    /// Whether dropping removes the `.part` file.
    armed: bool,
}

impl PartName {
    /// Takes charge of `part`, just created, which is to become `path`.
    pub fn new(part: PathBuf, path: PathBuf) -> PartName {
        PartName {
            part,
            path,
            armed: true,
        }
    }

    /// The name it is written under.
    pub fn part(&self) -> &Path {
        &self.part
    }

    /// The name it takes when complete.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Gives the complete file its name. If something other than a regular file stands
    /// there (see [`check_replaceable`]), or the rename fails, the `.part` file stays with
    /// what it holds, and the error names it.
    pub fn publish(mut self) -> Result<PathBuf, SysError> {
        self.armed = false;
        check_replaceable(&self.path)?;
        std::fs::rename(&self.part, &self.path)
            .map_err(|e| file_error("rename", &self.part, String::new(), e))?;
        Ok(std::mem::take(&mut self.path))
    }
}

impl Drop for PartName {
    fn drop(&mut self) {
        if self.armed {
            // Nothing else can be done about a failure here: the name stays free either way.
            let _ = std::fs::remove_file(&self.part);
        }
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

/// Opens `path` for writing, creating it with [`MODE`] if it does not exist, never truncating
/// it and never through a link (`O_NOFOLLOW`): a lock file, whose content does not matter.
pub fn create_or_open(path: &Path) -> io::Result<File> {
    OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(false)
        .mode(MODE)
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
        .open(path)
}

/// Opens `path` to append to it (`O_APPEND`: each write lands whole at the end, even with
/// several writers), creating it with [`MODE`] if it does not exist, never through a link: a
/// log of events.
pub fn append(path: &Path) -> io::Result<File> {
    OpenOptions::new()
        .append(true)
        .create(true)
        .mode(MODE)
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
        .open(path)
}

/// An unnamed file in `dir` (`O_TMPFILE`), readable and writable by this process only, gone
/// when closed: nothing is left behind, whatever happens to the process.
pub fn unnamed(dir: &Path) -> io::Result<File> {
    OpenOptions::new()
        .read(true)
        .write(true)
        .mode(0o600)
        .custom_flags(libc::O_TMPFILE | libc::O_CLOEXEC)
        .open(dir)
}

/// Writes every dirty page and inode of the filesystem that holds `file` to the device and
/// waits for them (`syncfs`): one call makes the data of many new files, and the renames and
/// directories made after them, durable at once, where a sync per file and per directory
/// would each wait for the device separately.
pub fn sync_filesystem(file: &File) -> io::Result<()> {
    use std::os::fd::AsRawFd;
    // SAFETY: a valid fd borrowed from `file` for the call; no memory is passed.
    if unsafe { libc::syncfs(file.as_raw_fd()) } == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// Opens a [`Target::Stream`] for writing, in place (a FIFO waits for its reader).
pub fn open_stream(path: &Path) -> Result<File, SysError> {
    let f = OpenOptions::new()
        .write(true)
        .custom_flags(libc::O_CLOEXEC)
        .open(path)
        .map_err(|e| file_error("open", path, String::new(), e))?;
    let t = f
        .metadata()
        .map_err(|e| file_error("fstat", path, String::new(), e))?
        .file_type();
    if !(t.is_char_device() || t.is_fifo()) {
        return Err(refused(path, "no longer a device or FIFO"));
    }
    Ok(f)
}

/// Creates or truncates `path` for writing an output directly (no `.part`): a new file gets
/// [`MODE`], a regular file is truncated, a device or FIFO is written in place; a link is
/// followed only as [`target`] says.
pub fn create(path: &Path) -> Result<File, SysError> {
    match target(path)? {
        Target::Stream => open_stream(path),
        Target::Nothing | Target::RegularFile => {
            let f = OpenOptions::new()
                .write(true)
                .create(true)
                .truncate(true)
                .mode(MODE)
                // Non-blocking: a FIFO put there since the look must not hang the open.
                .custom_flags(libc::O_CLOEXEC | libc::O_NONBLOCK)
                .open(path)
                .map_err(|e| file_error("open", path, String::new(), e))?;
            let m = f
                .metadata()
                .map_err(|e| file_error("fstat", path, String::new(), e))?;
            if !m.file_type().is_file() {
                return Err(refused(path, "not a regular file"));
            }
            if m.uid() == unsafe_geteuid() {
                f.set_permissions(std::fs::Permissions::from_mode(MODE))
                    .map_err(|e| file_error("fchmod", path, String::new(), e))?;
            }
            Ok(f)
        }
    }
}

fn unsafe_geteuid() -> u32 {
    // SAFETY: geteuid has no arguments and cannot fail.
    unsafe { libc::geteuid() }
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
        assert_eq!(std::fs::read(&victim).unwrap(), b"precious");
        // A dangling link too: nothing is created where it points.
        let dangling = d.join("z.part");
        symlink(d.join("nowhere"), &dangling).unwrap();
        assert!(create_new(&dangling, 0).is_err());
        assert!(!d.join("nowhere").exists());
        std::fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn a_part_file_takes_its_name_only_when_published() {
        let d = dir("publish");
        let (part, path) = (d.join("x.pcap.part"), d.join("x.pcap"));
        drop(create_new(&part, 0).unwrap());
        drop(PartName::new(part.clone(), path.clone()));
        assert!(!part.exists() && !path.exists(), "dropped: nothing is left");

        std::fs::write(&part, b"whole").unwrap();
        let name = PartName::new(part.clone(), path.clone());
        assert_eq!(name.publish().unwrap(), path);
        assert_eq!(std::fs::read(&path).unwrap(), b"whole");
        assert!(!part.exists());

        // A directory in the way: the packets stay in the .part file.
        let (part, path) = (d.join("y.part"), d.join("y"));
        std::fs::write(&part, b"kept").unwrap();
        std::fs::create_dir(&path).unwrap();
        let e = PartName::new(part.clone(), path.clone()).publish();
        assert!(e.unwrap_err().to_string().contains("a directory"));
        assert_eq!(std::fs::read(&part).unwrap(), b"kept");
        std::fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn devices_and_directories_are_never_replaced() {
        let e = check_replaceable(Path::new("/dev/null"))
            .unwrap_err()
            .to_string();
        assert!(e.contains("/dev/null") && e.contains("a device"), "{e}");
        // A character device is written in place, a directory refused.
        assert_eq!(target(Path::new("/dev/null")).unwrap(), Target::Stream);
        assert!(create(Path::new("/dev/null")).is_ok());
        let d = dir("dir");
        assert!(check_replaceable(&d).is_err());
        assert!(target(&d).is_err());
        assert!(create(&d).is_err());
        std::fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn only_links_of_our_own_are_followed() {
        let d = dir("owner");
        let victim = d.join("victim");
        std::fs::write(&victim, b"precious").unwrap();
        let link = d.join("flows.json");
        symlink(&victim, &link).unwrap();
        // Our own link is followed (as /dev/stdout is).
        assert_eq!(target(&link).unwrap(), Target::RegularFile);
        // Another user's is not.
        std::os::unix::fs::lchown(&link, Some(65534), Some(65534)).unwrap();
        let e = create(&link).unwrap_err().to_string();
        assert!(e.contains("another user"), "{e}");
        assert_eq!(std::fs::read(&victim).unwrap(), b"precious");
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
