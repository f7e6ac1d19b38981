//! Direct I/O output files: full, aligned chunks go from our buffer to the device with
//! `O_DIRECT`, skipping the page-cache copy that dominates the cost of writing a trace, from an
//! I/O thread so that the device works while the next chunk is filled; the tail of the file is
//! written through the cache at the end. Where the filesystem refuses `O_DIRECT`
//! (tmpfs, some FUSE), the file is written through the cache.
//!
//! A file with a [`ChunkEncoder`] (compression) is written through the cache: the I/O thread
//! encodes each chunk, cut where a record ends, into pieces that decode on their own once
//! written (zstd blocks, a gzip member), whose length is no multiple of anything `O_DIRECT`
//! asks for.
#![allow(unsafe_code)]

use std::fs::File;
use std::io::{self, Write};
use std::os::fd::{AsFd, AsRawFd};
use std::path::Path;
use std::ptr::NonNull;
use std::sync::mpsc;
use std::thread;

use crate::SysError;
use crate::mmap::{HUGE_PAGE, Mapping, ReadAhead};
use crate::outfile;

/// Alignment of buffers, lengths and offsets for `O_DIRECT` (the logical block size is at most
/// this on any device tapflow writes to).
pub const ALIGN: usize = 4096;

/// A chunk buffer: anonymous memory on a [`HUGE_PAGE`] boundary, advised `MADV_HUGEPAGE` and
/// populated up front. In huge pages a chunk is one physically contiguous segment, so a 2 MiB
/// direct write goes to a virtio disk as one request; in 4 KiB pages the device's segment limit
/// (254 on virtio-blk) splits each MiB into two, and every request costs a doorbell (a VM exit)
/// and a completion interrupt. Where huge pages are not available it is ordinary memory.
struct AlignedBuf {
    map: Mapping,
    cap: usize,
}

// SAFETY: the buffer is plain bytes owned by this value alone.
unsafe impl Send for AlignedBuf {}

impl AlignedBuf {
    fn new(cap: usize) -> io::Result<AlignedBuf> {
        let cap = cap.next_multiple_of(ALIGN).max(ALIGN);
        let span = cap.next_multiple_of(HUGE_PAGE);
        // Map a huge page more than needed, then unmap what lies outside the aligned span.
        let len = span + HUGE_PAGE;
        let p = crate::mmap::anonymous(len)?.as_ptr();
        let start = p as usize;
        let head = start.next_multiple_of(HUGE_PAGE) - start;
        let aligned = p.wrapping_add(head);
        // SAFETY: both ranges lie inside the mapping just made, and nothing refers to them.
        unsafe {
            if head > 0 {
                libc::munmap(p.cast(), head);
            }
            libc::munmap(aligned.add(span).cast(), len - head - span);
        }
        let ptr =
            NonNull::new(aligned).ok_or_else(|| io::Error::from_raw_os_error(libc::EFAULT))?;
        // SAFETY: `ptr..ptr+span` is what remains of the mapping, owned by the `Mapping` alone.
        let map = unsafe { Mapping::from_raw(ptr, span) };
        let buf = AlignedBuf { map, cap };
        crate::mmap::advise_huge(buf.as_slice());
        // SAFETY: advice on our own mapping. It may fail (a kernel before 5.14): the memory is
        // then faulted in on first use.
        unsafe { libc::madvise(ptr.as_ptr().cast(), span, libc::MADV_POPULATE_WRITE) };
        Ok(buf)
    }

    fn as_slice(&self) -> &[u8] {
        // SAFETY: `cap` <= the mapping's length; anonymous memory reads as zeroes until written,
        // and `&self` keeps it alive.
        unsafe { std::slice::from_raw_parts(self.map.ptr().as_ptr(), self.cap) }
    }

    fn as_mut_slice(&mut self) -> &mut [u8] {
        // SAFETY: as above, and `&mut self` makes the access unique.
        unsafe { std::slice::from_raw_parts_mut(self.map.ptr().as_ptr(), self.cap) }
    }
}

/// Turns a chunk of the file into what is written to the device (a compressed frame), in the
/// I/O thread. Each chunk ends where a record ends.
pub trait ChunkEncoder: Send {
    /// Appends the encoded form of `chunk` to `out`.
    fn encode(&mut self, chunk: &[u8], out: &mut Vec<u8>) -> io::Result<()>;

    /// Appends what ends the file after the last chunk (a stream's epilogue), if anything.
    fn finish(&mut self, out: &mut Vec<u8>) -> io::Result<()> {
        let _ = out;
        Ok(())
    }
}

/// A file written sequentially, by direct I/O where the filesystem allows it.
///
/// Three chunk buffers take turns: while an I/O thread writes one to the device, the caller
/// fills another, so encoding and device time overlap; the third lets a full chunk wait for
/// the device, so that the next write starts the moment the last one ends (with two, the device
/// sat idle while the I/O thread handed a buffer back and waited for the caller's next one:
/// offline, 54 ms of wall time against 49, median of 8).
pub struct DirectFile {
    buf: AlignedBuf,
    len: usize,
    /// The buffer brought into the cache ahead of the encoder, if asked for.
    ahead: Option<ReadAhead>,
    /// Full chunks on their way to the I/O thread, and empty ones coming back.
    to_io: Option<mpsc::SyncSender<(AlignedBuf, usize)>>,
    from_io: mpsc::Receiver<AlignedBuf>,
    io: Option<thread::JoinHandle<io::Result<File>>>,
    direct: bool,
    /// A regular file (synced at the end), not a device or FIFO.
    regular: bool,
    /// Chunks go whole to a [`ChunkEncoder`] in the I/O thread, not aligned to the device.
    encoded: bool,
}

impl std::fmt::Debug for DirectFile {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DirectFile")
            .field("direct", &self.direct)
            .field("len", &self.len)
            .finish()
    }
}

impl DirectFile {
    /// Creates `path`, which must not exist yet (a file or link planted there is refused, see
    /// [`outfile::create_new`]), writing to the device in chunks of `chunk` bytes.
    pub fn create(path: &Path, chunk: usize) -> Result<DirectFile, SysError> {
        // The buffers first: a file is not left behind for want of memory.
        let bufs = buffers(path, chunk)?;
        // A filesystem without O_DIRECT refuses it at open (EINVAL), after creating the file.
        let (file, direct) = match outfile::create_new(path, libc::O_DIRECT) {
            Ok(f) => (f, true),
            Err(e) if e.raw_os_error() == Some(libc::EINVAL) => {
                let _ = std::fs::remove_file(path);
                let f = outfile::create_new(path, 0).map_err(|error| open_error(path, error))?;
                (f, false)
            }
            Err(error) => return Err(open_error(path, error)),
        };
        DirectFile::start(file, path, bufs, direct, true, None)
    }

    /// Creates `path` as [`DirectFile::create`] does, for a file whose chunks `encoder` turns
    /// into what is written (through the cache).
    pub fn create_encoded(
        path: &Path,
        chunk: usize,
        encoder: Box<dyn ChunkEncoder>,
    ) -> Result<DirectFile, SysError> {
        let bufs = buffers(path, chunk)?;
        let file = outfile::create_new(path, 0).map_err(|error| open_error(path, error))?;
        DirectFile::start(file, path, bufs, false, true, Some(encoder))
    }

    /// Writes an open device or FIFO as [`DirectFile::stream`] does, its chunks encoded.
    pub fn stream_encoded(
        path: &Path,
        chunk: usize,
        encoder: Box<dyn ChunkEncoder>,
    ) -> Result<DirectFile, SysError> {
        let bufs = buffers(path, chunk)?;
        DirectFile::start(
            outfile::open_stream(path)?,
            path,
            bufs,
            false,
            false,
            Some(encoder),
        )
    }

    /// Writes an open device or FIFO (`/dev/null`, a named pipe: [`outfile::Target::Stream`])
    /// the same way, through the cache and without a final sync.
    pub fn stream(path: &Path, chunk: usize) -> Result<DirectFile, SysError> {
        let bufs = buffers(path, chunk)?;
        DirectFile::start(outfile::open_stream(path)?, path, bufs, false, false, None)
    }

    /// Writes this process's standard output (`-w -`) the same way as [`DirectFile::stream`],
    /// whatever it is: a pipe, a terminal, a file the shell opened.
    pub fn stdout(chunk: usize) -> Result<DirectFile, SysError> {
        let path = Path::new("-");
        let bufs = buffers(path, chunk)?;
        let fd = std::io::stdout()
            .as_fd()
            .try_clone_to_owned()
            .map_err(|error| SysError::File {
                call: "dup",
                path: path.to_path_buf(),
                detail: "standard output".into(),
                error,
            })?;
        DirectFile::start(File::from(fd), path, bufs, false, false, None)
    }

    /// Starts the I/O thread over `file`.
    fn start(
        file: File,
        path: &Path,
        [buf, spare0, spare1]: [AlignedBuf; 3],
        direct: bool,
        regular: bool,
        mut encoder: Option<Box<dyn ChunkEncoder>>,
    ) -> Result<DirectFile, SysError> {
        let encoded = encoder.is_some();
        let spares = [spare0, spare1];
        let (to_io, io_rx) = mpsc::sync_channel::<(AlignedBuf, usize)>(2);
        let (io_tx, from_io) = mpsc::sync_channel::<AlignedBuf>(3);
        for spare in spares {
            io_tx.send(spare).expect("the receiver is here");
        }
        let io = thread::Builder::new()
            .name("tapflow-io".into())
            .spawn(move || {
                let mut out = Vec::new();
                let mut written = 0u64;
                for (buf, n) in io_rx {
                    match &mut encoder {
                        Some(e) => {
                            out.clear();
                            e.encode(&buf.as_slice()[..n], &mut out)?;
                            (&file).write_all(&out)?;
                            if regular {
                                start_writeback(&file, written, out.len());
                            }
                            written += out.len() as u64;
                        }
                        None => (&file).write_all(&buf.as_slice()[..n])?,
                    }
                    let _ = io_tx.send(buf);
                }
                if let Some(e) = &mut encoder {
                    out.clear();
                    e.finish(&mut out)?;
                    (&file).write_all(&out)?;
                }
                Ok(file)
            })
            .map_err(|error| SysError::File {
                call: "spawn I/O thread for",
                path: path.to_path_buf(),
                detail: String::new(),
                error,
            })?;
        Ok(DirectFile {
            buf,
            len: 0,
            ahead: None,
            to_io: Some(to_io),
            from_io,
            io: Some(io),
            direct,
            regular,
            encoded,
        })
    }

    /// The same file, with (if `on`) the chunk buffer past what was appended brought into the
    /// cache as it fills ([`ReadAhead`]): the I/O thread's write of a buffer leaves its lines out of the
    /// cache, and a store to a missing line waits for it. A gain where the input does not
    /// stream from memory itself (a capture ring, filled from another CPU's cache: −10% CPU);
    /// a loss where it does (a file: +20% and more, the prefetches compete for the same line
    /// fill buffers).
    pub fn with_write_ahead(mut self, on: bool) -> DirectFile {
        self.ahead = on.then(|| ReadAhead::from(self.len));
        self
    }

    /// Appends `data`.
    pub fn write_all(&mut self, mut data: &[u8]) -> io::Result<()> {
        let piece = self.buf.cap - ALIGN;
        while !data.is_empty() {
            let n = data.len().min(piece);
            self.append(n)?.copy_from_slice(&data[..n]);
            data = &data[n..];
        }
        Ok(())
    }

    /// The next `n` bytes of the file, to be filled by the caller (encoders write in place).
    /// `n` may be at most the chunk size less 4 KiB.
    #[inline(always)]
    pub fn append(&mut self, n: usize) -> io::Result<&mut [u8]> {
        if self.len + n > self.buf.cap {
            self.next_chunk(n)?;
        }
        let start = self.len;
        self.len += n;
        if let Some(ahead) = &mut self.ahead {
            ahead.advance(self.buf.as_slice(), self.len);
        }
        Ok(&mut self.buf.as_mut_slice()[start..start + n])
    }

    /// Makes room for `n` bytes: the full chunk goes to the I/O thread. Out of line: once per
    /// chunk.
    #[cold]
    #[inline(never)]
    fn next_chunk(&mut self, n: usize) -> io::Result<()> {
        self.hand_over()?;
        if self.len + n > self.buf.cap {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("{n} bytes do not fit a {}-byte chunk", self.buf.cap),
            ));
        }
        Ok(())
    }

    /// Gives the aligned part of the buffer to the I/O thread and continues in the other
    /// buffer, starting with the unaligned rest (< 4 KiB). Out of line: once per chunk.
    #[cold]
    #[inline(never)]
    fn hand_over(&mut self) -> io::Result<()> {
        let aligned = self.handed_len();
        if aligned == 0 {
            return Ok(());
        }
        let Ok(mut next) = self.from_io.recv() else {
            return Err(self.io_failure());
        };
        let rest = self.len - aligned;
        next.as_mut_slice()[..rest].copy_from_slice(&self.buf.as_slice()[aligned..self.len]);
        let full = std::mem::replace(&mut self.buf, next);
        self.len = rest;
        if let Some(ahead) = &mut self.ahead {
            *ahead = ReadAhead::from(0);
        }
        let sent = self.to_io.as_ref().map(|tx| tx.send((full, aligned)));
        match sent {
            Some(Ok(())) => Ok(()),
            _ => Err(self.io_failure()),
        }
    }

    /// How much of the buffer goes to the I/O thread: its aligned part, or all of it when
    /// encoded (a chunk then ends where the caller's last record does).
    fn handed_len(&self) -> usize {
        if self.encoded {
            self.len
        } else {
            self.len / ALIGN * ALIGN
        }
    }

    /// Hands everything appended so far to the I/O thread, for a stream whose reader should
    /// not wait for a whole chunk (`-w -` into tshark). Does nothing for a direct-I/O file,
    /// which is written in aligned chunks.
    pub fn flush(&mut self) -> io::Result<()> {
        if self.direct || self.len == 0 {
            return Ok(());
        }
        let Ok(next) = self.from_io.recv() else {
            return Err(self.io_failure());
        };
        let full = std::mem::replace(&mut self.buf, next);
        let n = std::mem::take(&mut self.len);
        if let Some(ahead) = &mut self.ahead {
            *ahead = ReadAhead::from(0);
        }
        match self.to_io.as_ref().map(|tx| tx.send((full, n))) {
            Some(Ok(())) => Ok(()),
            _ => Err(self.io_failure()),
        }
    }

    /// The I/O thread's error, once it has stopped.
    fn io_failure(&mut self) -> io::Error {
        self.to_io = None;
        match self.io.take().map(|h| h.join()) {
            Some(Ok(Err(e))) => e,
            _ => io::Error::other("the I/O thread stopped"),
        }
    }

    /// Writes what is buffered (its aligned part directly, the rest through the cache), syncs
    /// the data to disk and closes the file.
    pub fn finish(mut self) -> io::Result<()> {
        let aligned = self.handed_len();
        let rest = self.len - aligned;
        if aligned > 0 {
            self.hand_over()?;
        }
        // Let the I/O thread finish and give the file back.
        self.to_io = None;
        let file = match self.io.take().map(|h| h.join()) {
            Some(Ok(r)) => r?,
            _ => return Err(io::Error::other("the I/O thread stopped")),
        };
        if rest > 0 {
            if self.direct {
                clear_direct(&file)?;
            }
            (&file).write_all(&self.buf.as_slice()[..rest])?;
        }
        if self.regular {
            file.sync_data()?;
        }
        Ok(())
    }
}

/// Starts writing `len` bytes at `offset` of `file` from the page cache to the device, without
/// waiting (`sync_file_range(SYNC_FILE_RANGE_WRITE)`): a file written through the cache then
/// goes to the device as it is written, as a direct one does, and the final sync has little
/// left to wait for. A hint: failure changes nothing and is ignored.
fn start_writeback(file: &File, offset: u64, len: usize) {
    let (Ok(offset), Ok(len)) = (i64::try_from(offset), i64::try_from(len)) else {
        return;
    };
    // SAFETY: a hint on a valid fd borrowed from `file`; no memory is passed.
    unsafe { libc::sync_file_range(file.as_raw_fd(), offset, len, libc::SYNC_FILE_RANGE_WRITE) };
}

/// The three chunk buffers of a file at `path`.
fn buffers(path: &Path, chunk: usize) -> Result<[AlignedBuf; 3], SysError> {
    let buffer = || {
        AlignedBuf::new(chunk).map_err(|error| SysError::File {
            call: "map a buffer for",
            path: path.to_path_buf(),
            detail: format!("{chunk} bytes"),
            error,
        })
    };
    Ok([buffer()?, buffer()?, buffer()?])
}

/// Turns `O_DIRECT` off for the unaligned tail (`fcntl(F_SETFL)`).
fn clear_direct(file: &File) -> io::Result<()> {
    let fd = file.as_raw_fd();
    // SAFETY: F_GETFL/F_SETFL on a valid fd borrowed from `file`; no memory is passed.
    let r = unsafe {
        let flags = libc::fcntl(fd, libc::F_GETFL);
        if flags < 0 {
            flags
        } else {
            libc::fcntl(fd, libc::F_SETFL, flags & !libc::O_DIRECT)
        }
    };
    if r < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(())
    }
}

fn open_error(path: &Path, error: io::Error) -> SysError {
    SysError::File {
        call: "open",
        path: path.to_path_buf(),
        detail: String::new(),
        error,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn round_trip(dir: &Path, sizes: &[usize]) {
        let path = dir.join(format!("direct-{sizes:?}"));
        let mut f = DirectFile::create(&path, 3 * ALIGN).unwrap();
        let mut want = Vec::new();
        for (i, &n) in sizes.iter().enumerate() {
            let piece: Vec<u8> = (0..n).map(|j| (i * 31 + j) as u8).collect();
            if i % 2 == 1 && n <= 2 * ALIGN {
                f.append(n).unwrap().copy_from_slice(&piece);
            } else {
                f.write_all(&piece).unwrap();
            }
            want.extend_from_slice(&piece);
        }
        f.finish().unwrap();
        assert_eq!(std::fs::read(&path).unwrap(), want);
    }

    #[test]
    fn chunk_buffers_sit_on_huge_page_boundaries() {
        let mut b = AlignedBuf::new(HUGE_PAGE).unwrap();
        let at = b.as_slice().as_ptr() as usize;
        assert_eq!(at % HUGE_PAGE, 0);
        assert_eq!(b.as_slice().len(), HUGE_PAGE);
        assert!(b.as_slice().iter().all(|&x| x == 0));
        b.as_mut_slice()[HUGE_PAGE - 1] = 7;
        assert_eq!(b.as_slice()[HUGE_PAGE - 1], 7);
        // Where the kernel offers THP, the mapping is eligible for it.
        if crate::mmap::tests::thp_offered() {
            let eligible = crate::mmap::tests::thp_eligible(at);
            assert_eq!(eligible.as_deref(), Some("1"));
        }
        // A small buffer is still exactly its size.
        assert_eq!(
            AlignedBuf::new(3 * ALIGN).unwrap().as_slice().len(),
            3 * ALIGN
        );
    }

    #[test]
    fn files_hold_exactly_what_was_written() {
        // The target directory lives on the real disk (O_DIRECT), unlike a tmpfs /tmp.
        let dir = Path::new(env!("CARGO_MANIFEST_DIR"))
            .join(format!("../../target/direct-test-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        round_trip(&dir, &[]);
        round_trip(&dir, &[1]);
        round_trip(&dir, &[ALIGN]);
        round_trip(&dir, &[5000, 7000, 1, ALIGN * 3, 12345]);
        round_trip(&dir, &[3 * ALIGN, 3 * ALIGN]);
        round_trip(&dir, &[100, 2 * ALIGN, 7, ALIGN + 1, 3, 2 * ALIGN - 5]);
        let mut f = DirectFile::create(&dir.join("too-big"), 3 * ALIGN).unwrap();
        assert!(f.append(3 * ALIGN + 1).is_err());
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
