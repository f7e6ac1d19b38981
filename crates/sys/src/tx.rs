//! The AF_PACKET `TX_RING` (`TPACKET_V2`), for the traffic generator (like trafgen).
//!
//! Frames are fixed-size slots. We write a frame, set `tp_len` and flip `tp_status` to
//! `TP_STATUS_SEND_REQUEST` with Release; `sendto()` makes the kernel transmit every requested
//! frame in ring order, and it sets each back to `TP_STATUS_AVAILABLE` once the packet has left.
#![allow(unsafe_code)]

use std::cell::Cell;
use std::mem::{offset_of, size_of};
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::ptr::NonNull;
use std::sync::atomic::{AtomicU32, Ordering};

use crate::mmap::Mapping;
use crate::packet::{bind_to, map_ring, open_socket, page_size, phys_mem, set_version};
use crate::{SysError, iface, syscall};

pub use libc::{
    TP_STATUS_AVAILABLE, TP_STATUS_SEND_REQUEST, TP_STATUS_SENDING, TP_STATUS_WRONG_FORMAT,
};

/// Where a V2 frame's data starts: `TPACKET2_HDRLEN - sizeof(struct sockaddr_ll)`.
pub const TX_DATA_OFFSET: usize = libc::TPACKET2_HDRLEN - size_of::<libc::sockaddr_ll>();
const TP_STATUS: usize = offset_of!(libc::tpacket2_hdr, tp_status);
const TP_LEN: usize = offset_of!(libc::tpacket2_hdr, tp_len);
const _: () = assert!(TX_DATA_OFFSET == 32 && TP_STATUS == 0 && TP_LEN == 4);

/// Ethernet header length: the kernel refuses shorter frames.
const ETH_HLEN: usize = 14;
/// The smallest frame slot accepted here.
pub const MIN_FRAME_SIZE: u32 = 64;
/// The largest frame slot accepted here.
pub const MAX_FRAME_SIZE: u32 = 1 << 30;
/// How long [`TxRing::flush_wait`] waits for the kernel to release at least one frame.
pub const FLUSH_STALL_MS: u64 = 5_000;

/// The shape of a transmit ring.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TxRingConfig {
    /// Bytes per frame slot, header included: a multiple of 16, at least [`MIN_FRAME_SIZE`].
    #[doc(alias = "tp_frame_size")]
    pub frame_size: u32,
    /// Frame slots (rounded up to fill whole blocks).
    #[doc(alias = "tp_frame_nr")]
    pub frame_count: u32,
    /// Hand frames straight to the driver, skipping the qdisc (`PACKET_QDISC_BYPASS`): faster,
    /// but unbuffered, and invisible to other packet sockets on this host.
    #[doc(alias = "PACKET_QDISC_BYPASS")]
    pub qdisc_bypass: bool,
}

/// An AF_PACKET socket with a mapped transmit ring, bound to one interface.
#[doc(alias("PACKET_TX_RING", "TX_RING"))]
#[derive(Debug)]
pub struct TxRing {
    // Field order is drop order: unmap, then close.
    map: Mapping,
    fd: OwnedFd,
    iface: String,
    frame_size: usize,
    frames_per_block: usize,
    block_size: usize,
    frame_count: usize,
    max_frame: usize,
    /// The next slot to fill.
    head: usize,
    /// The oldest frame handed to the kernel and not yet seen released.
    tail: Cell<usize>,
    /// Frames handed to the kernel and not yet seen released.
    queued: Cell<usize>,
    wrong_format: Cell<u64>,
}

// SAFETY: the ring owns its socket and mapping outright; moving it moves the only access. It is
// not Sync (Cell), and slots borrow it mutably.
unsafe impl Send for TxRing {}

impl TxRing {
    /// Opens a transmit ring on `ifname`: `socket` → `PACKET_VERSION` (V2) → `PACKET_LOSS` →
    /// `PACKET_QDISC_BYPASS` → `PACKET_TX_RING` → `mmap` → `bind(ifindex, protocol 0)`.
    ///
    /// `PACKET_LOSS` makes the kernel skip a malformed frame instead of stopping the ring on it;
    /// [`TxSlot::send`] checks lengths the way the kernel does and counts refusals in
    /// [`TxRing::wrong_format`].
    pub fn open(ifname: &str, cfg: &TxRingConfig) -> Result<TxRing, SysError> {
        let shape = Shape::check(ifname, cfg)?;
        let ifindex = iface::index(ifname)?;
        let mtu = iface::mtu(ifname)? as usize;
        let fd = open_socket(ifname)?;
        set_version(fd.as_fd(), ifname, libc::tpacket_versions::TPACKET_V2)?;
        set_loss(fd.as_fd(), ifname)?;
        if cfg.qdisc_bypass {
            set_qdisc_bypass(fd.as_fd(), ifname)?;
        }
        set_tx_ring(fd.as_fd(), ifname, &shape)?;
        let map = map_ring(fd.as_fd(), ifname, shape.block_size * shape.block_count)?;
        bind_to(fd.as_fd(), ifname, ifindex, 0)?;
        Ok(TxRing {
            map,
            fd,
            iface: ifname.to_owned(),
            frame_size: shape.frame_size,
            frames_per_block: shape.frames_per_block,
            block_size: shape.block_size,
            frame_count: shape.frames_per_block * shape.block_count,
            // The kernel refuses frames longer than the slot or than MTU + link header.
            max_frame: (shape.frame_size - TX_DATA_OFFSET).min(mtu + ETH_HLEN),
            head: 0,
            tail: Cell::new(0),
            queued: Cell::new(0),
            wrong_format: Cell::new(0),
        })
    }

    fn frame_ptr(&self, index: usize) -> NonNull<u8> {
        debug_assert!(index < self.frame_count);
        let offset = (index / self.frames_per_block) * self.block_size
            + (index % self.frames_per_block) * self.frame_size;
        // SAFETY: index < frame_count, so the frame lies inside the mapping of
        // block_size * block_count bytes.
        unsafe { self.map.ptr().add(offset) }
    }

    fn status_word(&self, index: usize) -> &AtomicU32 {
        // SAFETY: the frame start is 16-byte aligned inside the live mapping (blocks are page
        // aligned, frame_size a multiple of 16) and tp_status is its first u32; the kernel and we
        // access the word only atomically, and it lives as long as `self`.
        unsafe { AtomicU32::from_ptr(self.frame_ptr(index).as_ptr().cast()) }
    }

    /// Retires frames the kernel has finished with, oldest first.
    fn reap(&self) {
        let (mut tail, mut queued) = (self.tail.get(), self.queued.get());
        while queued > 0 {
            let status = self.status_word(tail).load(Ordering::Acquire);
            if status & TP_STATUS_WRONG_FORMAT != 0 {
                self.wrong_format.set(self.wrong_format.get() + 1);
                self.status_word(tail)
                    .store(TP_STATUS_AVAILABLE, Ordering::Release);
            } else if status != TP_STATUS_AVAILABLE {
                break;
            }
            tail = self.next(tail);
            queued -= 1;
        }
        self.tail.set(tail);
        self.queued.set(queued);
    }

    /// The frame after `i`, round the ring (a compare, not a division, on the per-frame path).
    #[inline]
    fn next(&self, i: usize) -> usize {
        if i + 1 == self.frame_count { 0 } else { i + 1 }
    }

    /// The next free frame slot, or `None` while the ring is full (the kernel still sending).
    ///
    /// Sent frames are reclaimed lazily, when the ring looks full: one pass then reclaims every
    /// frame the kernel has released, instead of one check per frame.
    #[inline]
    pub fn slot(&mut self) -> Option<TxSlot<'_>> {
        if self.queued.get() == self.frame_count {
            self.reap();
            if self.queued.get() == self.frame_count {
                return None;
            }
        }
        if self.status_word(self.head).load(Ordering::Acquire) != TP_STATUS_AVAILABLE {
            return None;
        }
        Some(TxSlot { ring: self })
    }

    /// Asks the kernel to send the queued frames without waiting (`sendto(MSG_DONTWAIT)`).
    /// A full socket buffer or a busy driver (`EAGAIN`, `ENOBUFS`) is not an error: the frames
    /// stay queued for the next call.
    pub fn flush(&mut self) -> Result<(), SysError> {
        self.kick(libc::MSG_DONTWAIT)?;
        self.reap();
        Ok(())
    }

    /// Sends every queued frame and waits until the kernel has released them all; an error
    /// (`ETIMEDOUT`) if none is released for [`FLUSH_STALL_MS`].
    pub fn flush_wait(&mut self) -> Result<(), SysError> {
        let mut last = (self.queued.get(), crate::clock::monotonic_ns());
        loop {
            self.kick(0)?;
            self.reap();
            let queued = self.queued.get();
            if queued == 0 {
                return Ok(());
            }
            let now = crate::clock::monotonic_ns();
            if queued < last.0 {
                last = (queued, now);
            } else if now - last.1 > FLUSH_STALL_MS * 1_000_000 {
                return Err(SysError::call_with(
                    "sendto(TX_RING)",
                    &self.iface,
                    format!("{queued} frames not sent after {FLUSH_STALL_MS} ms"),
                    std::io::Error::from_raw_os_error(libc::ETIMEDOUT),
                ));
            }
            // ENOBUFS ends a blocking send early; give the driver a moment.
            std::thread::sleep(std::time::Duration::from_micros(50));
        }
    }

    fn kick(&self, flags: libc::c_int) -> Result<(), SysError> {
        const CALL: &str = "sendto(TX_RING)";
        loop {
            return match syscall::sendto_kick(self.fd.as_fd(), flags, CALL) {
                Ok(_) => Ok(()),
                Err(e) if e.raw_os_error() == Some(libc::EINTR) => continue,
                Err(e) if matches!(e.raw_os_error(), Some(libc::EAGAIN | libc::ENOBUFS)) => Ok(()),
                Err(e) => Err(SysError::call(CALL, &self.iface, e)),
            };
        }
    }

    /// Frames handed to the kernel and not yet released.
    pub fn pending(&self) -> usize {
        self.reap();
        self.queued.get()
    }

    /// Frames refused so far: by [`TxSlot::send`]'s length check or by the kernel
    /// (`TP_STATUS_WRONG_FORMAT`).
    #[doc(alias = "TP_STATUS_WRONG_FORMAT")]
    pub fn wrong_format(&self) -> u64 {
        self.wrong_format.get()
    }

    /// The longest frame a slot takes: the slot's data area, capped at MTU + Ethernet header.
    pub fn max_frame(&self) -> usize {
        self.max_frame
    }

    /// Frame slots in the ring.
    pub fn frame_count(&self) -> usize {
        self.frame_count
    }

    /// The interface's name.
    pub fn iface(&self) -> &str {
        &self.iface
    }

    /// The ring's size in bytes.
    pub fn ring_bytes(&self) -> usize {
        self.map.len()
    }
}

impl AsFd for TxRing {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }
}

/// A free frame slot: write the frame into [`buf`](TxSlot::buf), then [`send`](TxSlot::send)
/// it. Dropping it unsent leaves the slot free.
#[derive(Debug)]
pub struct TxSlot<'a> {
    ring: &'a mut TxRing,
}

impl TxSlot<'_> {
    /// The frame's data area, [`TxRing::max_frame`] bytes, starting at the link header.
    pub fn buf(&mut self) -> &mut [u8] {
        let frame = self.ring.frame_ptr(self.ring.head);
        // SAFETY: the slot's status is TP_STATUS_AVAILABLE, so the kernel does not touch it until
        // `send` flips it; the data area (frame + 32, max_frame <= frame_size - 32 bytes) lies
        // inside the frame, and `&mut self` makes this the only borrow.
        unsafe {
            std::slice::from_raw_parts_mut(frame.add(TX_DATA_OFFSET).as_ptr(), self.ring.max_frame)
        }
    }

    /// Queues the first `len` bytes of [`buf`](TxSlot::buf) for sending (sets `tp_len`, then
    /// `TP_STATUS_SEND_REQUEST` with Release). A length the kernel would refuse (shorter than an
    /// Ethernet header, longer than `max_frame`) is counted in `wrong_format` and not queued.
    pub fn send(self, len: usize) {
        let ring = self.ring;
        if !(ETH_HLEN..=ring.max_frame).contains(&len) {
            ring.wrong_format.set(ring.wrong_format.get() + 1);
            return;
        }
        let frame = ring.frame_ptr(ring.head);
        // SAFETY: tp_len is a 4-byte-aligned u32 inside our (AVAILABLE) frame; the kernel reads
        // it only after the Release store below.
        unsafe { frame.add(TP_LEN).cast::<u32>().write(len as u32) };
        ring.status_word(ring.head)
            .store(TP_STATUS_SEND_REQUEST, Ordering::Release);
        ring.head = ring.next(ring.head);
        ring.queued.set(ring.queued.get() + 1);
    }
}

/// A checked ring shape: `tpacket_req` for V2.
#[derive(Debug)]
struct Shape {
    frame_size: usize,
    frames_per_block: usize,
    block_size: usize,
    block_count: usize,
}

impl Shape {
    fn check(ifname: &str, cfg: &TxRingConfig) -> Result<Shape, SysError> {
        const CALL: &str = "setsockopt(PACKET_TX_RING)";
        let fs = cfg.frame_size;
        if !fs.is_multiple_of(libc::TPACKET_ALIGNMENT as u32)
            || !(MIN_FRAME_SIZE..=MAX_FRAME_SIZE).contains(&fs)
        {
            return Err(SysError::invalid(
                CALL,
                ifname,
                format!(
                    "frame size {fs} must be a multiple of {} from {MIN_FRAME_SIZE} to {MAX_FRAME_SIZE}",
                    libc::TPACKET_ALIGNMENT
                ),
            ));
        }
        if cfg.frame_count == 0 {
            return Err(SysError::invalid(
                CALL,
                ifname,
                "frame count must be at least 1",
            ));
        }
        let frame_size = fs as usize;
        let block_size = frame_size.next_power_of_two().max(page_size());
        let frames_per_block = block_size / frame_size;
        let block_count = (cfg.frame_count as usize).div_ceil(frames_per_block);
        let phys = phys_mem();
        let total = block_size.checked_mul(block_count).filter(|&t| t <= phys);
        if total.is_none() || u32::try_from(block_count * frames_per_block).is_err() {
            return Err(SysError::invalid(
                CALL,
                ifname,
                format!(
                    "{} frames of {frame_size} bytes are more than the physical memory ({phys} bytes)",
                    cfg.frame_count
                ),
            ));
        }
        Ok(Shape {
            frame_size,
            frames_per_block,
            block_size,
            block_count,
        })
    }
}

/// `PACKET_LOSS = 1`: skip malformed frames rather than stall the ring on them.
#[doc(alias = "PACKET_LOSS")]
fn set_loss(fd: BorrowedFd<'_>, ifname: &str) -> Result<(), SysError> {
    const CALL: &str = "setsockopt(PACKET_LOSS)";
    syscall::setsockopt(fd, libc::SOL_PACKET, libc::PACKET_LOSS, &1i32, CALL)
        .map_err(|e| SysError::call(CALL, ifname, e))
}

/// `PACKET_QDISC_BYPASS = 1`.
#[doc(alias = "PACKET_QDISC_BYPASS")]
fn set_qdisc_bypass(fd: BorrowedFd<'_>, ifname: &str) -> Result<(), SysError> {
    const CALL: &str = "setsockopt(PACKET_QDISC_BYPASS)";
    syscall::setsockopt(fd, libc::SOL_PACKET, libc::PACKET_QDISC_BYPASS, &1i32, CALL)
        .map_err(|e| SysError::call(CALL, ifname, e))
}

/// `PACKET_TX_RING` with a `tpacket_req`.
#[doc(alias("PACKET_TX_RING", "tpacket_req"))]
fn set_tx_ring(fd: BorrowedFd<'_>, ifname: &str, shape: &Shape) -> Result<(), SysError> {
    const CALL: &str = "setsockopt(PACKET_TX_RING)";
    let req = libc::tpacket_req {
        tp_block_size: shape.block_size as u32,
        tp_block_nr: shape.block_count as u32,
        tp_frame_size: shape.frame_size as u32,
        tp_frame_nr: (shape.block_count * shape.frames_per_block) as u32,
    };
    syscall::setsockopt(fd, libc::SOL_PACKET, libc::PACKET_TX_RING, &req, CALL).map_err(|e| {
        let ring = format!(
            "{} blocks of {} bytes, frames of {}",
            shape.block_count, shape.block_size, shape.frame_size
        );
        let detail = match e.raw_os_error() {
            Some(libc::ENOMEM) => format!("not enough kernel memory for {ring}"),
            _ => ring,
        };
        SysError::call_with(CALL, ifname, detail, e)
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::syscall::fake::Fake;

    fn cfg() -> TxRingConfig {
        TxRingConfig {
            frame_size: 2048,
            frame_count: 5,
            qdisc_bypass: true,
        }
    }

    #[test]
    fn setup_follows_the_documented_order() {
        let fake = Fake::install();
        let ring = TxRing::open("eth9", &cfg()).unwrap();
        assert_eq!(
            fake.calls(),
            [
                "if_nametoindex",
                "ioctl(SIOCGIFMTU)",
                "socket(AF_PACKET)",
                "setsockopt(PACKET_VERSION)",
                "setsockopt(PACKET_LOSS)",
                "setsockopt(PACKET_QDISC_BYPASS)",
                "setsockopt(PACKET_TX_RING)",
                "mmap(MAP_SHARED|MAP_LOCKED)",
                "bind(AF_PACKET)",
            ]
        );
        // 2 frames per 4 KiB page, rounded up to 3 blocks.
        assert_eq!(ring.frame_count(), 6);
        assert_eq!(ring.max_frame(), 1514);
    }

    #[test]
    fn bad_shapes_are_refused_before_any_syscall() {
        let fake = Fake::install();
        for (c, want) in [
            (
                TxRingConfig {
                    frame_size: 100,
                    ..cfg()
                },
                "frame size 100 must be a multiple of 16",
            ),
            (
                TxRingConfig {
                    frame_size: 32,
                    ..cfg()
                },
                "frame size 32 must be",
            ),
            (
                TxRingConfig {
                    frame_count: 0,
                    ..cfg()
                },
                "frame count must be at least 1",
            ),
            (
                TxRingConfig {
                    frame_size: 1 << 30,
                    frame_count: u32::MAX,
                    ..cfg()
                },
                "physical memory",
            ),
        ] {
            let text = TxRing::open("eth0", &c).unwrap_err().to_string();
            assert!(
                text.starts_with("setsockopt(PACKET_TX_RING) on eth0 failed: ")
                    && text.contains(want),
                "{text}"
            );
        }
        assert!(fake.calls().is_empty());
    }

    #[test]
    fn slots_fill_in_order_and_free_when_the_kernel_releases_them() {
        let _fake = Fake::install();
        let mut ring = TxRing::open(
            "eth9",
            &TxRingConfig {
                frame_size: 4096,
                frame_count: 2,
                qdisc_bypass: false,
            },
        )
        .unwrap();
        assert_eq!(ring.frame_count(), 2);
        for _ in 0..2 {
            let mut s = ring.slot().unwrap();
            s.buf()[..6].copy_from_slice(&[0xff; 6]);
            s.send(60);
        }
        assert!(ring.slot().is_none());
        assert_eq!(ring.pending(), 2);
        assert_eq!(
            ring.status_word(0).load(Ordering::Relaxed),
            TP_STATUS_SEND_REQUEST
        );
        // SAFETY: test only: reads tp_len of frame 0 of the fake ring.
        let tp_len = unsafe { ring.frame_ptr(0).add(TP_LEN).cast::<u32>().read() };
        assert_eq!(tp_len, 60);
        // The "kernel" releases frame 0 (and refuses frame 1).
        ring.status_word(0)
            .store(TP_STATUS_AVAILABLE, Ordering::Release);
        assert_eq!(ring.pending(), 1);
        ring.status_word(1)
            .store(TP_STATUS_WRONG_FORMAT, Ordering::Release);
        assert_eq!(ring.pending(), 0);
        assert_eq!(ring.wrong_format(), 1);
        // Lengths the kernel would refuse are counted, not queued.
        ring.slot().unwrap().send(10);
        ring.slot().unwrap().send(5000);
        assert_eq!((ring.wrong_format(), ring.pending()), (3, 0));
        ring.flush().unwrap();
        ring.flush_wait().unwrap();
    }
}
