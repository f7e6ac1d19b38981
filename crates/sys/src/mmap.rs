//! Memory mappings: the owned region behind a ring, and read-only capture files.
#![allow(unsafe_code)]

use std::fs::File;
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};
use std::ptr::{self, NonNull};

use crate::SysError;

/// A region returned by `mmap`, unmapped on drop.
#[derive(Debug)]
pub(crate) struct Mapping {
    ptr: NonNull<u8>,
    len: usize,
}

impl Mapping {
    /// Takes ownership of `len` bytes at `ptr`.
    ///
    /// # Safety
    /// `ptr..ptr+len` must be a mapping made by `mmap` that nothing else unmaps.
    pub(crate) unsafe fn from_raw(ptr: NonNull<u8>, len: usize) -> Mapping {
        Mapping { ptr, len }
    }

    pub(crate) fn ptr(&self) -> NonNull<u8> {
        self.ptr
    }

    pub(crate) fn len(&self) -> usize {
        self.len
    }
}

impl Drop for Mapping {
    fn drop(&mut self) {
        // SAFETY: by `from_raw`'s contract this is our own mapping of exactly `len` bytes, and no
        // borrow of it outlives `self` (users borrow through `&self` of the owner).
        unsafe { libc::munmap(self.ptr.as_ptr().cast(), self.len) };
    }
}

/// Size and alignment of a transparent huge page (x86-64 and arm64 with 4 KiB pages).
pub const HUGE_PAGE: usize = 2 << 20;

/// Zeroed private anonymous memory of `len` bytes (`mmap`); the caller unmaps it, usually by
/// handing it to a [`Mapping`].
pub(crate) fn anonymous(len: usize) -> std::io::Result<NonNull<u8>> {
    // SAFETY: a fresh anonymous mapping overlaps no Rust object; checked for MAP_FAILED.
    let p = unsafe {
        libc::mmap(
            ptr::null_mut(),
            len,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
            -1,
            0,
        )
    };
    if p == libc::MAP_FAILED {
        return Err(std::io::Error::last_os_error());
    }
    NonNull::new(p.cast()).ok_or_else(|| std::io::Error::from_raw_os_error(libc::EFAULT))
}

/// Asks for transparent huge pages behind `buf` (`MADV_HUGEPAGE` on the pages wholly inside
/// it), for a large table read at random: in 4 KiB pages nearly every access to it misses the
/// TLB, and in a VM each miss is a two-dimensional page walk. Only the 2 MiB-aligned stretches
/// of the range can get huge pages, when first touched. A hint: where THP is off (or `buf` is
/// smaller than one huge page) nothing changes.
pub fn advise_huge<T>(buf: &[T]) {
    let start = buf.as_ptr() as usize;
    let end = start + size_of_val(buf);
    let (from, to) = (start.next_multiple_of(4096), end & !4095);
    if to.saturating_sub(from) < HUGE_PAGE {
        return;
    }
    // SAFETY: advice on whole pages inside memory `buf` borrows; MADV_HUGEPAGE changes how the
    // memory is backed, never what it holds. Failure (THP off) is harmless and ignored.
    unsafe { libc::madvise(from as *mut libc::c_void, to - from, libc::MADV_HUGEPAGE) };
}

/// A capture file mapped read-only (`MAP_PRIVATE`, `MADV_SEQUENTIAL`).
///
/// If another process truncates the file while it is mapped, reading past the new end raises
/// SIGBUS; capture files are written as `NAME.part` and renamed, so finished files do not shrink.
#[derive(Debug)]
pub struct MappedFile {
    map: Option<Mapping>,
    path: PathBuf,
}

// SAFETY: the mapping is read-only and private; it is never written, so sharing or moving it
// between threads is like sharing a `&[u8]`.
unsafe impl Send for MappedFile {}
// SAFETY: as above, only shared reads happen.
unsafe impl Sync for MappedFile {}

impl MappedFile {
    /// Maps the whole file. An empty file gives an empty slice.
    pub fn open(path: &Path) -> Result<MappedFile, SysError> {
        let file = File::open(path).map_err(|error| SysError::File {
            call: "open",
            path: path.to_owned(),
            detail: String::new(),
            error,
        })?;
        MappedFile::from_file(&file, path)
    }

    /// Maps the whole of an open file (a decompressed copy, say), known by `path` in errors.
    pub fn from_file(file: &File, path: &Path) -> Result<MappedFile, SysError> {
        let file_err = |call, error| SysError::File {
            call,
            path: path.to_owned(),
            detail: String::new(),
            error,
        };
        let len = file.metadata().map_err(|e| file_err("stat", e))?.len();
        let len = usize::try_from(len).map_err(|_| SysError::File {
            call: "mmap",
            path: path.to_owned(),
            detail: format!("{len} bytes do not fit in the address space"),
            error: std::io::Error::from_raw_os_error(libc::EFBIG),
        })?;
        if len == 0 {
            return Ok(MappedFile {
                map: None,
                path: path.to_owned(),
            });
        }
        // SAFETY: a fresh read-only private mapping chosen by the kernel overlaps no Rust
        // object; checked against MAP_FAILED below.
        let p = unsafe {
            libc::mmap(
                ptr::null_mut(),
                len,
                libc::PROT_READ,
                libc::MAP_PRIVATE,
                file.as_raw_fd(),
                0,
            )
        };
        if p == libc::MAP_FAILED {
            return Err(file_err("mmap", std::io::Error::last_os_error()));
        }
        let ptr = NonNull::new(p.cast())
            .ok_or_else(|| file_err("mmap", std::io::Error::from_raw_os_error(libc::EFAULT)))?;
        // SAFETY: `ptr` is the mapping of `len` bytes just made; only this value unmaps it.
        let map = unsafe { Mapping::from_raw(ptr, len) };
        // SAFETY: advice on our own mapping; failure is harmless and ignored.
        unsafe { libc::madvise(p, len, libc::MADV_SEQUENTIAL) };
        Ok(MappedFile {
            map: Some(map),
            path: path.to_owned(),
        })
    }

    /// The file's bytes.
    pub fn bytes(&self) -> &[u8] {
        match &self.map {
            // SAFETY: the mapping is `len` readable bytes, alive as long as `self`, never written.
            Some(m) => unsafe { std::slice::from_raw_parts(m.ptr().as_ptr(), m.len()) },
            None => &[],
        }
    }

    /// The path the file was opened with.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Drops the page tables of the mapping (`MADV_DONTNEED`), for a reader that is done with
    /// it: the same work the process would do at exit (`munmap`), done while other work (the
    /// output draining to disk) still runs. A later read faults the file's pages back in,
    /// unchanged: the mapping is private and never written.
    pub fn release(&self) {
        if let Some(m) = &self.map {
            // SAFETY: advice on our own page-aligned mapping of `len` bytes; it changes no byte
            // a reader can see (see above). Failure is harmless and ignored.
            unsafe { libc::madvise(m.ptr().as_ptr().cast(), m.len(), libc::MADV_DONTNEED) };
        }
    }
}

/// Prefetches a buffer read (or filled) front to back a fixed distance ahead of the cursor,
/// each cache line once. The hardware prefetchers stop at page boundaries and start late on
/// lines another CPU wrote (a ring block); this does neither.
#[derive(Debug, Clone, Copy)]
pub struct ReadAhead {
    /// Bytes before this offset have been prefetched.
    done: usize,
}

impl ReadAhead {
    /// How far ahead: about ten packets of a typical trace, far enough to hide a memory access,
    /// near enough to stay in the cache (1 KiB to 8 KiB measured alike).
    pub const DISTANCE: usize = 2048;

    /// A read-ahead for bytes read from offset `from` on.
    pub fn from(from: usize) -> ReadAhead {
        ReadAhead { done: from }
    }

    /// The cursor is at `at` in `bytes`: prefetch what lies within [`Self::DISTANCE`] of it.
    /// (Near the end that may be past `bytes`: harmless, a prefetch never faults, and cheaper
    /// than a bound on every line.)
    #[inline(always)]
    pub fn advance(&mut self, bytes: &[u8], at: usize) {
        let end = at + Self::DISTANCE;
        while self.done < end {
            crate::cpu::prefetch_line(bytes.as_ptr().wrapping_add(self.done));
            self.done += 64;
        }
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use std::io::Write;

    /// The value of `field` (`Rss`, `THPeligible`, ...) for the mapping in /proc/self/smaps
    /// that holds `addr`.
    fn smaps_field(addr: usize, field: &str) -> Option<String> {
        let smaps = std::fs::read_to_string("/proc/self/smaps").unwrap();
        let mut inside = false;
        for line in smaps.lines() {
            let range = line.split_once(' ').and_then(|(r, _)| r.split_once('-'));
            if let Some((a, b)) = range
                && let (Ok(a), Ok(b)) = (usize::from_str_radix(a, 16), usize::from_str_radix(b, 16))
            {
                inside = (a..b).contains(&addr);
            } else if inside
                && let Some(v) = line.strip_prefix(field).and_then(|v| v.strip_prefix(':'))
            {
                return Some(v.trim().to_string());
            }
        }
        None
    }

    /// Whether the kernel offers transparent huge pages (`madvise` or `always`).
    pub(crate) fn thp_offered() -> bool {
        std::fs::read_to_string("/sys/kernel/mm/transparent_hugepage/enabled")
            .is_ok_and(|t| !t.contains("[never]"))
    }

    /// The `THPeligible` value of the mapping that holds `addr`.
    pub(crate) fn thp_eligible(addr: usize) -> Option<String> {
        smaps_field(addr, "THPeligible")
    }

    #[test]
    fn advised_tables_are_eligible_for_huge_pages() {
        if !thp_offered() {
            return;
        }
        let mut v = Vec::<u64>::with_capacity(1 << 20); // 8 MiB
        let spare = v.spare_capacity_mut();
        let mid = (spare.as_ptr() as usize).next_multiple_of(HUGE_PAGE);
        advise_huge(spare);
        assert_eq!(thp_eligible(mid).as_deref(), Some("1"));
    }

    #[test]
    fn maps_files_and_names_missing_ones() {
        let dir = std::env::temp_dir().join(format!("tfsys-mmap-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let full = dir.join("full");
        std::fs::File::create(&full)
            .unwrap()
            .write_all(b"hello ring")
            .unwrap();
        assert_eq!(MappedFile::open(&full).unwrap().bytes(), b"hello ring");
        let empty = dir.join("empty");
        std::fs::File::create(&empty).unwrap();
        assert_eq!(MappedFile::open(&empty).unwrap().bytes(), b"");
        let missing = dir.join("missing");
        let err = MappedFile::open(&missing).unwrap_err().to_string();
        assert!(
            err.starts_with("open ") && err.contains("missing") && err.contains("No such file"),
            "{err}"
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// Resident kB of the mapping that holds `at`.
    fn resident_kb(at: usize) -> u64 {
        let rss = smaps_field(at, "Rss").expect("the file's mapping");
        rss.trim_end_matches("kB").trim().parse().unwrap()
    }

    #[test]
    fn release_drops_the_page_tables_and_keeps_the_bytes() {
        let dir = std::env::temp_dir().join(format!("tfsys-release-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("f");
        let want: Vec<u8> = (0..1 << 20).map(|i: u32| (i * 7 % 251) as u8).collect();
        std::fs::write(&path, &want).unwrap();
        let m = MappedFile::open(&path).unwrap();
        let at = m.bytes().as_ptr() as usize;
        assert_eq!(m.bytes(), &want[..]);
        assert!(resident_kb(at) > 0);
        m.release();
        assert_eq!(resident_kb(at), 0);
        assert_eq!(
            m.bytes(),
            &want[..],
            "the bytes read the same after release"
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
