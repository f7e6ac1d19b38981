//! A BPF ring buffer (`BPF_MAP_TYPE_RINGBUF`) read from user space: one multi-producer ring all
//! CPUs' programs reserve records in, mapped here as the consumer position (read-write) and
//! the producer position with the data (read-only, the data mapped twice in a row so that a
//! record that wraps around the end reads as one piece).
//!
//! Each record starts with an 8-byte header: its length with two flags (`BUSY` while the
//! program writes it, `DISCARD` if it gave it up), then the record, padded to 8 bytes.
#![allow(unsafe_code)]

use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};

use crate::mmap::Mapping;
use crate::xdp::Map;
use crate::{SysError, syscall};

const BUSY: u32 = 1 << 31;
const DISCARD: u32 = 1 << 30;
const HEADER: u64 = 8;

/// The reading end of a BPF ring buffer.
#[derive(Debug)]
pub struct RingBuf {
    fd: OwnedFd,
    ifname: String,
    /// The consumer position's page.
    consumer: Mapping,
    /// The producer position's page, then the data twice.
    data: Mapping,
    page: usize,
    mask: u64,
    /// Our consumer position.
    pos: u64,
    /// Bytes committed or reserved and not read when the last read began.
    waiting: u64,
}

// SAFETY: the mappings are owned; the ring is read by one thread at a time (`&mut self`).
unsafe impl Send for RingBuf {}

impl RingBuf {
    /// Maps the ring buffer `map` of `size` bytes (as made by [`Map::ring_buffer`]).
    pub fn open(map: &Map, ifname: &str, size: usize) -> Result<RingBuf, SysError> {
        const CALL: &str = "mmap(BPF ring buffer)";
        let page = crate::packet::page_size();
        let fd = map
            .fd()
            .try_clone_to_owned()
            .map_err(|e| SysError::call_with("dup", ifname, String::new(), e))?;
        let at = |len: usize, prot, off: usize| {
            let p = syscall::mmap_at(fd.as_fd(), len, prot, off as u64, CALL)
                .map_err(|e| SysError::call_with(CALL, ifname, format!("{len} bytes"), e))?;
            // SAFETY: the fresh mapping of `len` bytes just returned; only this Mapping
            // unmaps it.
            Ok::<_, SysError>(unsafe { Mapping::from_raw(p, len) })
        };
        let consumer = at(page, libc::PROT_READ | libc::PROT_WRITE, 0)?;
        let data = at(page + 2 * size, libc::PROT_READ, page)?;
        Ok(RingBuf {
            fd,
            ifname: ifname.to_owned(),
            consumer,
            data,
            page,
            mask: size as u64 - 1,
            pos: 0,
            waiting: 0,
        })
    }

    fn producer_pos(&self) -> u64 {
        // SAFETY: the first word of the producer page, 8-aligned, written by the kernel with
        // release semantics; alive as long as `self`.
        unsafe { &*self.data.ptr().as_ptr().cast::<AtomicU64>() }.load(Ordering::Acquire)
    }

    fn set_consumer_pos(&self, pos: u64) {
        // SAFETY: the first word of the consumer page, 8-aligned, ours to write; the kernel
        // reads it to know how much room is left.
        unsafe { &*self.consumer.ptr().as_ptr().cast::<AtomicU64>() }.store(pos, Ordering::Release);
    }

    /// Whether a record is waiting (one load).
    pub fn ready(&self) -> bool {
        self.producer_pos() != self.pos
    }

    /// Waits up to `timeout_ms` for a record, or for `wake` to be readable.
    pub fn wait(&self, timeout_ms: i32, wake: Option<BorrowedFd<'_>>) -> Result<bool, SysError> {
        if self.ready() {
            return Ok(true);
        }
        syscall::poll(
            self.fd.as_fd(),
            libc::POLLIN,
            wake,
            timeout_ms,
            "poll(BPF ring buffer)",
        )
        .map_err(|e| SysError::call("poll(BPF ring buffer)", &self.ifname, e))?;
        Ok(self.ready())
    }

    /// How full the ring was when the last [`RingBuf::read`] began: the bytes the producers
    /// had filled and not got back, and the ring's size in bytes.
    pub fn ring_fill(&self) -> (u64, u64) {
        (self.waiting, self.mask + 1)
    }

    /// Calls `f` with each committed record, up to `max`, then gives their room back to the
    /// producers. Returns how many records were read. No system call, no allocation.
    pub fn read(&mut self, max: usize, mut f: impl FnMut(&[u8])) -> usize {
        let end = self.producer_pos();
        self.waiting = end.wrapping_sub(self.pos);
        let base = self.data.ptr().as_ptr();
        let mut n = 0;
        while self.pos < end && n < max {
            let at = self.page + (self.pos & self.mask) as usize;
            // SAFETY: `at` is within the first copy of the data (8-aligned, as every record
            // is); the header word is written by the kernel with release semantics.
            let header = unsafe { &*base.add(at).cast::<AtomicU32>() }.load(Ordering::Acquire);
            if header & BUSY != 0 {
                break;
            }
            let len = header & !(BUSY | DISCARD);
            if header & DISCARD == 0 {
                let len = (len as usize).min(self.mask as usize + 1);
                // SAFETY: the record follows its header; with the data mapped twice it lies
                // within the mapping even where it wraps; committed, it is not written again
                // until the consumer position passes it.
                f(unsafe { std::slice::from_raw_parts(base.add(at + HEADER as usize), len) });
                n += 1;
            }
            self.pos += (u64::from(len) + HEADER).next_multiple_of(8);
        }
        self.set_consumer_pos(self.pos);
        n
    }
}
