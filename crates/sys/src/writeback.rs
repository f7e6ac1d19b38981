//! Steady write-back for large output files: start writing dirty pages to disk as the file grows
//! and let the page cache forget what is already on disk, so that the final `fdatasync` is short
//! and a long capture does not fill memory with its own output.
#![allow(unsafe_code)]

use std::fs::File;
use std::os::fd::AsRawFd;

/// Asks the kernel to start writing `len` bytes at `offset` of `file` to disk, without waiting
/// (`sync_file_range(SYNC_FILE_RANGE_WRITE)`). Advisory: errors are ignored.
#[doc(alias = "sync_file_range")]
pub fn start(file: &File, offset: u64, len: u64) {
    // SAFETY: sync_file_range takes a valid open fd (borrowed from `file` for the call) and plain
    // integers; it touches no user memory.
    unsafe {
        libc::sync_file_range(
            file.as_raw_fd(),
            offset as libc::off64_t,
            len as libc::off64_t,
            libc::SYNC_FILE_RANGE_WRITE,
        );
    }
}

/// Waits until `len` bytes at `offset` are on disk, then drops them from the page cache
/// (`sync_file_range(WAIT_BEFORE|WRITE|WAIT_AFTER)` + `posix_fadvise(DONTNEED)`). Advisory.
#[doc(alias = "posix_fadvise")]
pub fn finish_and_forget(file: &File, offset: u64, len: u64) {
    let fd = file.as_raw_fd();
    // SAFETY: as above: a valid fd and integers only.
    unsafe {
        libc::sync_file_range(
            fd,
            offset as libc::off64_t,
            len as libc::off64_t,
            libc::SYNC_FILE_RANGE_WAIT_BEFORE
                | libc::SYNC_FILE_RANGE_WRITE
                | libc::SYNC_FILE_RANGE_WAIT_AFTER,
        );
        libc::posix_fadvise(
            fd,
            offset as libc::off_t,
            len as libc::off_t,
            libc::POSIX_FADV_DONTNEED,
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    #[test]
    fn advice_keeps_the_file_intact() {
        let path = std::env::temp_dir().join(format!("tapflow-wb-{}", std::process::id()));
        let mut f = File::create(&path).unwrap();
        let data = vec![0x5au8; 3 << 20];
        f.write_all(&data).unwrap();
        start(&f, 0, 1 << 20);
        finish_and_forget(&f, 0, 1 << 20);
        drop(f);
        assert_eq!(std::fs::read(&path).unwrap(), data);
        std::fs::remove_file(&path).unwrap();
    }
}
