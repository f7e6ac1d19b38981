//! An AF_XDP socket bound to one receive queue: its UMEM (frames of one page each), the fill
//! ring that lends frames to the kernel, the completion ring the kernel requires beside it,
//! and the RX ring of received descriptors, all shared with the kernel through `mmap`.
//!
//! Set up as a straight line: socket, UMEM, ring sizes, ring offsets, mmap, fill, bind
//! (zero-copy if the driver has it, else copy). Every frame is always in exactly one place:
//! the fill ring, the kernel, the RX ring, or a batch being read; a batch hands its frames
//! back to the fill ring when it is dropped, so the fill ring (as large as the UMEM) never
//! runs out of room.
#![allow(unsafe_code)]

use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};
use std::ptr::NonNull;
use std::sync::atomic::{AtomicU32, Ordering};

use crate::mmap::Mapping;
use crate::{SysError, syscall};

/// Bytes per UMEM frame: one page, enough for a 1500-byte MTU behind the kernel's 256 bytes
/// of headroom and up to about 3.7 KB.
pub const FRAME_SIZE: u32 = 4096;

/// How a socket is bound.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BindMode {
    /// The driver writes frames straight into the UMEM (`XDP_ZEROCOPY`).
    ZeroCopy,
    /// The kernel copies each frame into the UMEM (`XDP_COPY`).
    Copy,
}

/// The kernel's drop counters of a socket (`XDP_STATISTICS`), cumulative since bind.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct XskStatistics {
    /// Frames dropped for other reasons than a full RX ring: no frame from the fill ring (in
    /// copy mode), a frame too large for a UMEM frame.
    pub rx_dropped: u64,
    /// Frames dropped because the RX ring was full (the reader was behind).
    pub rx_ring_full: u64,
    /// Times the kernel found the fill ring empty.
    pub rx_fill_ring_empty_descs: u64,
    /// Descriptors put on the TX ring that the kernel refused (outside the UMEM, too long).
    pub tx_invalid_descs: u64,
}

/// One side of a ring shared with the kernel: the producer and consumer words and the
/// descriptor array, inside a mapping.
#[derive(Debug)]
pub(crate) struct RingMap {
    /// Owns the memory the pointers below point into.
    _map: Mapping,
    producer: NonNull<AtomicU32>,
    consumer: NonNull<AtomicU32>,
    pub(crate) descs: NonNull<u8>,
    pub(crate) mask: u32,
    /// The ring's flags word (`XDP_RING_NEED_WAKEUP`).
    flags: NonNull<AtomicU32>,
}

impl RingMap {
    pub(crate) fn producer(&self) -> &AtomicU32 {
        // SAFETY: points inside `self.map` (offset from XDP_MMAP_OFFSETS, 4-aligned), alive
        // as long as `self`; the kernel and we only ever access it atomically.
        unsafe { self.producer.as_ref() }
    }

    pub(crate) fn consumer(&self) -> &AtomicU32 {
        // SAFETY: as for `producer`.
        unsafe { self.consumer.as_ref() }
    }

    /// Whether the kernel asks to be woken (`XDP_RING_NEED_WAKEUP`) to work on this ring.
    pub(crate) fn needs_wakeup(&self) -> bool {
        // SAFETY: as for `producer`.
        let flags = unsafe { self.flags.as_ref() };
        flags.load(Ordering::Acquire) & libc::XDP_RING_NEED_WAKEUP != 0
    }
}

/// An AF_XDP socket receiving on one queue of an interface.
#[derive(Debug)]
pub struct XskSocket {
    fd: OwnedFd,
    ifname: String,
    queue: u32,
    mode: BindMode,
    umem: Mapping,
    fill: RingMap,
    rx: RingMap,
    /// Unused for receiving, but the kernel will not bind a UMEM without it.
    _completion: RingMap,
    /// The RX ring's producer as last read, and our consumer.
    rx_prod: u32,
    rx_cons: u32,
    /// Our fill ring producer.
    fill_prod: u32,
}

// SAFETY: the raw pointers point into mappings the socket owns; it is used by one thread at
// a time (`&mut self` for every ring access).
unsafe impl Send for XskSocket {}

impl XskSocket {
    /// Opens a socket on queue `queue` of `ifname` with a UMEM of `frames` frames (a power of
    /// two), every one of them lent to the kernel through the fill ring. Zero-copy is tried
    /// first when `try_zero_copy`, then copy mode.
    pub fn open(
        ifname: &str,
        ifindex: u32,
        queue: u32,
        frames: u32,
        try_zero_copy: bool,
    ) -> Result<XskSocket, SysError> {
        if !frames.is_power_of_two() || frames < 64 {
            return Err(SysError::invalid(
                "setsockopt(XDP_UMEM_REG)",
                ifname,
                format!("{frames} frames: the UMEM needs a power of two, at least 64"),
            ));
        }
        let fd = open_socket(ifname)?;
        let umem = register_umem(fd.as_fd(), ifname, frames)?;
        set_ring_size(fd.as_fd(), ifname, libc::XDP_UMEM_FILL_RING, frames)?;
        set_ring_size(fd.as_fd(), ifname, libc::XDP_UMEM_COMPLETION_RING, 64)?;
        set_ring_size(fd.as_fd(), ifname, libc::XDP_RX_RING, frames)?;
        let off = mmap_offsets(fd.as_fd(), ifname)?;
        let fill = map_ring(
            fd.as_fd(),
            ifname,
            &off.fr,
            frames,
            8,
            libc::XDP_UMEM_PGOFF_FILL_RING,
        )?;
        let completion = map_ring(
            fd.as_fd(),
            ifname,
            &off.cr,
            64,
            8,
            libc::XDP_UMEM_PGOFF_COMPLETION_RING,
        )?;
        let rx = map_ring(
            fd.as_fd(),
            ifname,
            &off.rx,
            frames,
            size_of::<libc::xdp_desc>(),
            libc::XDP_PGOFF_RX_RING as u64,
        )?;
        let mut s = XskSocket {
            fd,
            ifname: ifname.to_owned(),
            queue,
            mode: BindMode::Copy,
            umem,
            fill,
            rx,
            _completion: completion,
            rx_prod: 0,
            rx_cons: 0,
            fill_prod: 0,
        };
        for f in 0..frames {
            s.push_fill(u64::from(f) * u64::from(FRAME_SIZE));
        }
        s.fill.producer().store(s.fill_prod, Ordering::Release);
        s.mode = bind(s.fd.as_fd(), ifname, ifindex, queue, try_zero_copy, None)?;
        Ok(s)
    }

    /// The socket, for the XSKMAP and `poll`.
    pub fn fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }

    /// A second descriptor of the socket, for reading its statistics from another thread.
    pub fn stats_handle(&self) -> Result<XskStatsHandle, SysError> {
        let fd = self
            .fd
            .try_clone()
            .map_err(|e| SysError::call_with("dup", &self.ifname, String::new(), e))?;
        Ok(XskStatsHandle {
            fd,
            ifname: self.ifname.clone(),
        })
    }

    /// How the socket is bound.
    pub fn mode(&self) -> BindMode {
        self.mode
    }

    /// The receive queue it is bound to.
    pub fn queue(&self) -> u32 {
        self.queue
    }

    /// The kernel's drop counters (`XDP_STATISTICS`).
    pub fn statistics(&self) -> Result<XskStatistics, SysError> {
        statistics(self.fd.as_fd(), &self.ifname)
    }

    /// Whether received descriptors are waiting (one load).
    pub fn ready(&mut self) -> bool {
        self.rx_prod = self.rx.producer().load(Ordering::Acquire);
        self.rx_prod != self.rx_cons
    }

    /// Waits up to `timeout_ms` for received frames, or for `wake` to be readable. `poll`
    /// also wakes a zero-copy driver that waits for the fill ring (`XDP_RING_NEED_WAKEUP`).
    pub fn wait(
        &mut self,
        timeout_ms: i32,
        wake: Option<BorrowedFd<'_>>,
    ) -> Result<bool, SysError> {
        if self.ready() {
            return Ok(true);
        }
        syscall::poll(
            self.fd.as_fd(),
            libc::POLLIN,
            wake,
            timeout_ms,
            "poll(AF_XDP)",
        )
        .map_err(|e| SysError::call("poll(AF_XDP)", &self.ifname, e))?;
        Ok(self.ready())
    }

    /// The descriptors received, up to `max`: read them through the batch, which hands their
    /// frames back to the kernel when dropped. No system call, no allocation.
    pub fn receive(&mut self, max: u32) -> RxBatch<'_> {
        if self.rx_prod == self.rx_cons {
            self.rx_prod = self.rx.producer().load(Ordering::Acquire);
        }
        let waiting = self.rx_prod.wrapping_sub(self.rx_cons);
        RxBatch {
            start: self.rx_cons,
            n: waiting.min(max),
            waiting,
            xsk: self,
        }
    }

    fn push_fill(&mut self, addr: u64) {
        let slot = (self.fill_prod & self.fill.mask) as usize;
        // SAFETY: `slot` is within the fill ring's `mask + 1` u64 descriptors; a slot at or past
        // the producer belongs to us until the producer moves past it.
        unsafe { self.fill.descs.cast::<u64>().add(slot).write(addr) };
        self.fill_prod = self.fill_prod.wrapping_add(1);
    }
}

/// One received frame as the socket found it.
#[derive(Debug, Clone, Copy)]
pub struct RxFrame<'a> {
    /// The frame's bytes.
    pub data: &'a [u8],
    /// The 8 bytes of metadata the XDP program wrote before the frame (its arrival time), or
    /// 0 if it wrote none.
    pub meta: u64,
}

/// Frames received on a socket; their frames go back to the fill ring when it is dropped.
#[derive(Debug)]
pub struct RxBatch<'a> {
    xsk: &'a mut XskSocket,
    start: u32,
    n: u32,
    waiting: u32,
}

impl RxBatch<'_> {
    /// How full the RX ring was when the batch was taken: the descriptors waiting (the batch's
    /// own included, as far as the last read of the producer saw: it is read again only once
    /// the ones seen are all taken), and the ring's size.
    pub fn ring_fill(&self) -> (u32, u32) {
        (self.waiting, self.xsk.rx.mask + 1)
    }

    /// How many frames the batch holds.
    pub fn len(&self) -> u32 {
        self.n
    }

    /// Whether it holds none.
    pub fn is_empty(&self) -> bool {
        self.n == 0
    }

    fn desc(&self, i: u32) -> libc::xdp_desc {
        let slot = (self.start.wrapping_add(i) & self.xsk.rx.mask) as usize;
        // SAFETY: `slot` is within the RX ring's descriptors; descriptors between our consumer
        // and the producer read with Acquire are written by the kernel and ours until the
        // consumer moves past them.
        unsafe { self.xsk.rx.descs.cast::<libc::xdp_desc>().add(slot).read() }
    }

    /// The `i`th frame (`i < len()`): its bytes, clipped to the UMEM, and its metadata.
    #[inline]
    pub fn frame(&self, i: u32) -> RxFrame<'_> {
        let d = self.desc(i);
        let umem = self.xsk.umem.len() as u64;
        let addr = d.addr.min(umem);
        let len = u64::from(d.len).min(umem - addr);
        let base = self.xsk.umem.ptr().as_ptr();
        let meta = if addr % u64::from(FRAME_SIZE) >= 8 {
            // SAFETY: the 8 bytes before the frame lie within its UMEM frame (checked above),
            // which is ours until the batch hands it back.
            unsafe { base.add(addr as usize - 8).cast::<u64>().read_unaligned() }
        } else {
            0
        };
        // SAFETY: `addr..addr+len` lies within the UMEM (clipped above) and belongs to us until
        // the batch hands the frame back; the returned slice borrows the batch.
        let data = unsafe { std::slice::from_raw_parts(base.add(addr as usize), len as usize) };
        RxFrame { data, meta }
    }
}

impl Drop for RxBatch<'_> {
    fn drop(&mut self) {
        let base = self.xsk.umem.ptr().as_ptr();
        for i in 0..self.n {
            let addr = self.desc(i).addr.min(self.xsk.umem.len() as u64 - 1);
            let frame = addr & !u64::from(FRAME_SIZE - 1);
            if addr - frame >= 8 {
                // A frame whose program wrote no metadata next time reads 0, not this time.
                // SAFETY: within the frame, which is still ours.
                unsafe { base.add(addr as usize - 8).cast::<u64>().write_unaligned(0) };
            }
            self.xsk.push_fill(frame);
        }
        self.xsk.rx_cons = self.xsk.rx_cons.wrapping_add(self.n);
        self.xsk
            .rx
            .consumer()
            .store(self.xsk.rx_cons, Ordering::Release);
        self.xsk
            .fill
            .producer()
            .store(self.xsk.fill_prod, Ordering::Release);
    }
}

/// A socket's second descriptor, to read its statistics from another thread.
#[derive(Debug)]
pub struct XskStatsHandle {
    fd: OwnedFd,
    ifname: String,
}

impl XskStatsHandle {
    /// A handle on the socket `fd` (a second descriptor) of `ifname`.
    pub(crate) fn new(fd: OwnedFd, ifname: &str) -> XskStatsHandle {
        XskStatsHandle {
            fd,
            ifname: ifname.to_owned(),
        }
    }

    /// The kernel's drop counters (`XDP_STATISTICS`).
    pub fn statistics(&self) -> Result<XskStatistics, SysError> {
        statistics(self.fd.as_fd(), &self.ifname)
    }
}

#[doc(alias = "XDP_STATISTICS")]
pub(crate) fn statistics(fd: BorrowedFd<'_>, ifname: &str) -> Result<XskStatistics, SysError> {
    const CALL: &str = "getsockopt(XDP_STATISTICS)";
    // SAFETY: xdp_statistics is six u64s, for which zero is valid.
    let mut s: libc::xdp_statistics = unsafe { std::mem::zeroed() };
    syscall::getsockopt(fd, libc::SOL_XDP, libc::XDP_STATISTICS, &mut s, CALL)
        .map_err(|e| SysError::call(CALL, ifname, e))?;
    Ok(XskStatistics {
        rx_dropped: s.rx_dropped,
        rx_ring_full: s.rx_ring_full,
        rx_fill_ring_empty_descs: s.rx_fill_ring_empty_descs,
        tx_invalid_descs: s.tx_invalid_descs,
    })
}

/// `socket(AF_XDP, SOCK_RAW, 0)`.
pub(crate) fn open_socket(ifname: &str) -> Result<OwnedFd, SysError> {
    const CALL: &str = "socket(AF_XDP)";
    syscall::socket(libc::AF_XDP, libc::SOCK_RAW, 0, CALL).map_err(|e| {
        let detail = match e.raw_os_error() {
            Some(libc::EAFNOSUPPORT) => "the kernel has no AF_XDP (CONFIG_XDP_SOCKETS)",
            _ => "",
        };
        SysError::call_with(CALL, ifname, detail, e)
    })
}

/// The UMEM: `frames` pages of anonymous memory, registered with the socket.
#[doc(alias = "XDP_UMEM_REG")]
pub(crate) fn register_umem(
    fd: BorrowedFd<'_>,
    ifname: &str,
    frames: u32,
) -> Result<Mapping, SysError> {
    const CALL: &str = "setsockopt(XDP_UMEM_REG)";
    let len = frames as usize * FRAME_SIZE as usize;
    let ptr = crate::mmap::anonymous(len)
        .map_err(|e| SysError::call_with("mmap", ifname, format!("UMEM of {len} bytes"), e))?;
    // SAFETY: the fresh anonymous mapping of `len` bytes just made; only this Mapping unmaps it.
    let umem = unsafe { Mapping::from_raw(ptr, len) };
    // Huge pages where THP allows, before the registration pins the pages: the reader touches
    // a new 4 KiB frame per packet, and with small pages nearly each one is a TLB miss.
    // SAFETY: advice on our own fresh mapping; MADV_HUGEPAGE changes how it is backed, not
    // what it holds. A refusal (THP off) is harmless.
    unsafe { libc::madvise(umem.ptr().as_ptr().cast(), len, libc::MADV_HUGEPAGE) };
    let reg = libc::xdp_umem_reg {
        addr: umem.ptr().as_ptr() as u64,
        len: len as u64,
        chunk_size: FRAME_SIZE,
        headroom: 0,
        flags: 0,
        tx_metadata_len: 0,
    };
    syscall::setsockopt(fd, libc::SOL_XDP, libc::XDP_UMEM_REG, &reg, CALL).map_err(|e| {
        SysError::call_with(
            CALL,
            ifname,
            format!("{frames} frames of {FRAME_SIZE} bytes"),
            e,
        )
    })?;
    Ok(umem)
}

pub(crate) fn set_ring_size(
    fd: BorrowedFd<'_>,
    ifname: &str,
    ring: libc::c_int,
    entries: u32,
) -> Result<(), SysError> {
    let call = match ring {
        libc::XDP_UMEM_FILL_RING => "setsockopt(XDP_UMEM_FILL_RING)",
        libc::XDP_UMEM_COMPLETION_RING => "setsockopt(XDP_UMEM_COMPLETION_RING)",
        libc::XDP_TX_RING => "setsockopt(XDP_TX_RING)",
        _ => "setsockopt(XDP_RX_RING)",
    };
    syscall::setsockopt(fd, libc::SOL_XDP, ring, &entries, call)
        .map_err(|e| SysError::call_with(call, ifname, format!("{entries} entries"), e))
}

#[doc(alias = "XDP_MMAP_OFFSETS")]
pub(crate) fn mmap_offsets(
    fd: BorrowedFd<'_>,
    ifname: &str,
) -> Result<libc::xdp_mmap_offsets, SysError> {
    const CALL: &str = "getsockopt(XDP_MMAP_OFFSETS)";
    // SAFETY: integers only, for which zero is valid.
    let mut off: libc::xdp_mmap_offsets = unsafe { std::mem::zeroed() };
    syscall::getsockopt(fd, libc::SOL_XDP, libc::XDP_MMAP_OFFSETS, &mut off, CALL)
        .map_err(|e| SysError::call(CALL, ifname, e))?;
    Ok(off)
}

pub(crate) fn map_ring(
    fd: BorrowedFd<'_>,
    ifname: &str,
    off: &libc::xdp_ring_offset,
    entries: u32,
    desc_size: usize,
    pgoff: u64,
) -> Result<RingMap, SysError> {
    const CALL: &str = "mmap(AF_XDP ring)";
    let len = off.desc as usize + entries as usize * desc_size;
    let ptr = syscall::mmap_at(fd, len, libc::PROT_READ | libc::PROT_WRITE, pgoff, CALL)
        .map_err(|e| SysError::call_with(CALL, ifname, format!("{len} bytes at {pgoff:#x}"), e))?;
    // SAFETY: the fresh mapping of `len` bytes just returned; only this Mapping unmaps it.
    let map = unsafe { Mapping::from_raw(ptr, len) };
    let at = |o: u64| {
        // SAFETY: the kernel's offsets lie within the `len` bytes mapped.
        unsafe { NonNull::new_unchecked(map.ptr().as_ptr().add(o as usize)) }
    };
    Ok(RingMap {
        producer: at(off.producer).cast(),
        consumer: at(off.consumer).cast(),
        descs: at(off.desc),
        flags: at(off.flags).cast(),
        mask: entries - 1,
        _map: map,
    })
}

/// `bind(sockaddr_xdp)` to the queue, with `XDP_USE_NEED_WAKEUP`. Without `XDP_COPY` the
/// kernel binds zero-copy where the driver has it and copy mode elsewhere; `XDP_OPTIONS` says
/// which. With `shared`, the socket uses the UMEM of that socket (`XDP_SHARED_UMEM`, which
/// takes no other flag: the mode and wake-ups are the UMEM's).
pub(crate) fn bind(
    fd: BorrowedFd<'_>,
    ifname: &str,
    ifindex: u32,
    queue: u32,
    try_zero_copy: bool,
    shared: Option<BorrowedFd<'_>>,
) -> Result<BindMode, SysError> {
    const CALL: &str = "bind(AF_XDP)";
    const OPTIONS: &str = "getsockopt(XDP_OPTIONS)";
    let copy = if try_zero_copy { 0 } else { libc::XDP_COPY };
    let addr = libc::sockaddr_xdp {
        sxdp_family: libc::AF_XDP as u16,
        sxdp_flags: match shared {
            Some(_) => libc::XDP_SHARED_UMEM,
            None => copy | libc::XDP_USE_NEED_WAKEUP,
        },
        sxdp_ifindex: ifindex,
        sxdp_queue_id: queue,
        sxdp_shared_umem_fd: shared.map_or(0, |f| f.as_raw_fd() as u32),
    };
    syscall::bind(fd, &addr, CALL).map_err(|e| {
        let detail = match e.raw_os_error() {
            Some(libc::EBUSY) => format!(
                "queue {queue} is taken by another AF_XDP socket: another XDP capture runs on \
                 {ifname} (`ip link show dev {ifname}` shows its program)"
            ),
            _ => format!("queue {queue}"),
        };
        SysError::call_with(CALL, ifname, detail, e)
    })?;
    let mut o = libc::xdp_options { flags: 0 };
    syscall::getsockopt(fd, libc::SOL_XDP, libc::XDP_OPTIONS, &mut o, OPTIONS)
        .map_err(|e| SysError::call(OPTIONS, ifname, e))?;
    Ok(if o.flags & libc::XDP_OPTIONS_ZEROCOPY != 0 {
        BindMode::ZeroCopy
    } else {
        BindMode::Copy
    })
}
