//! Sending frames on an AF_PACKET socket, a batch per `sendmmsg`, for the traffic generator.
//!
//! The caller writes frames into the batch's slots, which are reused batch after batch, then
//! flushes: one `sendmmsg` hands the kernel every filled slot, and each frame is copied once
//! into a socket buffer.
//!
//! Why not the `TX_RING` (trafgen's way, and tapflow's before): the ring lends the kernel the
//! user page a frame sits in, and a receiver on this host cannot keep such a page. On veth, or
//! anything that loops a frame back in, the kernel allocates a page per frame and copies it
//! there (`skb_copy_ubufs`), which costs more than the copy `sendmmsg` makes up front. Measured
//! on veth, same core: 2.25–2.28 Mpps against 2.12–2.17 for the ring at 60-byte frames,
//! 2.12–2.14 against 2.07 at 1514 bytes (docs/benchmarks.md, "Generator").
#![allow(unsafe_code)]

use std::os::fd::{AsFd, BorrowedFd, OwnedFd};

use crate::bpf;
use crate::packet::{attach_filter, bind_to, open_socket};
use crate::syscall::SENDMMSG_MAX;
use crate::{SysError, iface, syscall};

/// Ethernet header length: the kernel refuses shorter frames.
const ETH_HLEN: usize = 14;
/// How long [`TxBatch::flush`] retries a driver that takes no frame (`ENOBUFS`) before it
/// gives up.
pub const FLUSH_STALL_MS: u64 = 5_000;
/// Frame slots per batch: the frames one `sendmmsg` takes.
pub const BATCH_FRAMES: usize = SENDMMSG_MAX;

/// An AF_PACKET socket bound to one interface, with a batch of frame slots.
#[doc(alias("sendmmsg", "PACKET_QDISC_BYPASS"))]
#[derive(Debug)]
pub struct TxBatch {
    fd: OwnedFd,
    iface: String,
    /// [`BATCH_FRAMES`] slots of `max_frame` bytes, used round-robin.
    slots: Vec<u8>,
    /// The slot of the first filled frame.
    first: usize,
    /// The length of each filled frame, from `first` on, in order.
    lens: Vec<usize>,
    max_frame: usize,
    wrong_format: u64,
}

impl TxBatch {
    /// Opens a sender on `ifname`: `socket` → `PACKET_QDISC_BYPASS` (if asked) →
    /// `SO_ATTACH_FILTER` with a program that keeps nothing (if a protocol is given) →
    /// `bind(ifindex, protocol)`. Its slots hold frames of up to `max_frame` bytes, and never
    /// more than MTU + Ethernet header, which the kernel refuses.
    ///
    /// `qdisc_bypass` hands frames straight to the driver, skipping the qdisc: faster, but
    /// unbuffered, and invisible to other packet sockets on this host.
    ///
    /// `protocol` is the EtherType of every frame to be sent (host order), or 0 when they
    /// differ. Given, it spares the kernel reading each frame's link header to learn it
    /// (`packet_parse_headers`) and a longer flow dissection: 5% more frames per second on
    /// veth at 60 and at 1514 bytes. A socket bound to a protocol also receives it, so the
    /// filter is attached first: the socket keeps none of what arrives.
    pub fn open(
        ifname: &str,
        max_frame: usize,
        qdisc_bypass: bool,
        protocol: u16,
    ) -> Result<TxBatch, SysError> {
        let ifindex = iface::index(ifname)?;
        let mtu = iface::mtu(ifname)? as usize;
        let max_frame = max_frame.min(mtu + ETH_HLEN);
        if max_frame < ETH_HLEN {
            return Err(SysError::invalid(
                "sendmmsg",
                ifname,
                format!("frames of {max_frame} bytes are shorter than an Ethernet header"),
            ));
        }
        let fd = open_socket(ifname)?;
        if qdisc_bypass {
            set_qdisc_bypass(fd.as_fd(), ifname)?;
        }
        if protocol != 0 {
            attach_filter(fd.as_fd(), ifname, &bpf::reject_all())?;
        }
        bind_to(fd.as_fd(), ifname, ifindex, protocol)?;
        Ok(TxBatch {
            fd,
            iface: ifname.to_owned(),
            slots: vec![0; BATCH_FRAMES * max_frame],
            first: 0,
            lens: Vec::with_capacity(BATCH_FRAMES),
            max_frame,
            wrong_format: 0,
        })
    }

    /// The next free slot, or `None` when the batch is full: [`flush`](TxBatch::flush) it.
    ///
    /// Slots are used round-robin across flushes, as a ring's are: the n-th frame ever filled
    /// goes in slot n mod [`BATCH_FRAMES`], which keeps the bytes last written to it.
    #[inline]
    pub fn slot(&mut self) -> Option<TxSlot<'_>> {
        (self.lens.len() < BATCH_FRAMES).then_some(TxSlot { batch: self })
    }

    /// Sends every filled slot, in order, and empties the batch. A driver that takes nothing
    /// (`ENOBUFS`, `EAGAIN`) is retried until it does; an error (`ETIMEDOUT`) if it takes
    /// nothing for [`FLUSH_STALL_MS`].
    pub fn flush(&mut self) -> Result<(), SysError> {
        const CALL: &str = "sendmmsg(AF_PACKET)";
        let mut frames = [&[][..]; BATCH_FRAMES];
        for (i, (f, &len)) in frames.iter_mut().zip(&self.lens).enumerate() {
            let at = self.slot_offset(i);
            *f = &self.slots[at..at + len];
        }
        let frames = &frames[..self.lens.len()];
        let mut sent = 0;
        let mut last_progress = crate::clock::monotonic_ns();
        while sent < frames.len() {
            match syscall::sendmmsg_frames(self.fd.as_fd(), &frames[sent..], CALL) {
                Ok(n) if n > 0 => {
                    sent += n;
                    last_progress = crate::clock::monotonic_ns();
                }
                Err(e) if e.raw_os_error() == Some(libc::EINTR) => {}
                Ok(_) => {}
                Err(e) if matches!(e.raw_os_error(), Some(libc::EINVAL | libc::EMSGSIZE)) => {
                    // The kernel refuses this frame (its header, or its length with a tag):
                    // count it, as the length check does, and go on with the next.
                    self.wrong_format += 1;
                    sent += 1;
                }
                Err(e) if matches!(e.raw_os_error(), Some(libc::ENOBUFS | libc::EAGAIN)) => {
                    if crate::clock::monotonic_ns() - last_progress > FLUSH_STALL_MS * 1_000_000 {
                        return Err(SysError::call_with(
                            CALL,
                            &self.iface,
                            format!(
                                "{} frames not sent after {FLUSH_STALL_MS} ms",
                                frames.len() - sent
                            ),
                            std::io::Error::from_raw_os_error(libc::ETIMEDOUT),
                        ));
                    }
                    // The driver's queue is full: give it a moment.
                    std::thread::sleep(std::time::Duration::from_micros(50));
                }
                Err(e) => {
                    self.take_batch();
                    return Err(SysError::call(CALL, &self.iface, e));
                }
            }
        }
        self.take_batch();
        Ok(())
    }

    /// Where the `i`-th frame of the batch starts in `slots`.
    #[inline]
    fn slot_offset(&self, i: usize) -> usize {
        (self.first + i) % BATCH_FRAMES * self.max_frame
    }

    /// Empties the batch; the next frame goes in the slot after the last one filled.
    fn take_batch(&mut self) {
        self.first = (self.first + self.lens.len()) % BATCH_FRAMES;
        self.lens.clear();
    }

    /// Frames filled and not yet flushed.
    pub fn pending(&self) -> usize {
        self.lens.len()
    }

    /// Frames refused so far: by [`TxSlot::send`]'s length check (shorter than an Ethernet
    /// header, longer than [`max_frame`](TxBatch::max_frame)), or by the kernel (`EINVAL`,
    /// `EMSGSIZE`) when flushed.
    pub fn wrong_format(&self) -> u64 {
        self.wrong_format
    }

    /// The longest frame a slot takes.
    pub fn max_frame(&self) -> usize {
        self.max_frame
    }
}

impl AsFd for TxBatch {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }
}

/// A free slot: write the frame into [`buf`](TxSlot::buf), then [`send`](TxSlot::send) it.
/// Dropping it unsent leaves the slot free.
#[derive(Debug)]
pub struct TxSlot<'a> {
    batch: &'a mut TxBatch,
}

impl TxSlot<'_> {
    /// The slot's bytes, [`TxBatch::max_frame`] long, starting at the link header.
    #[inline]
    pub fn buf(&mut self) -> &mut [u8] {
        let b = &mut *self.batch;
        let at = b.slot_offset(b.lens.len());
        &mut b.slots[at..at + b.max_frame]
    }

    /// Queues the first `len` bytes of [`buf`](TxSlot::buf) for the next flush. A length the
    /// kernel would refuse is counted in `wrong_format` and not queued.
    #[inline]
    pub fn send(self, len: usize) {
        let b = self.batch;
        if (ETH_HLEN..=b.max_frame).contains(&len) {
            b.lens.push(len);
        } else {
            b.wrong_format += 1;
        }
    }
}

/// `PACKET_QDISC_BYPASS = 1`.
#[doc(alias = "PACKET_QDISC_BYPASS")]
fn set_qdisc_bypass(fd: BorrowedFd<'_>, ifname: &str) -> Result<(), SysError> {
    const CALL: &str = "setsockopt(PACKET_QDISC_BYPASS)";
    syscall::setsockopt(fd, libc::SOL_PACKET, libc::PACKET_QDISC_BYPASS, &1i32, CALL)
        .map_err(|e| SysError::call(CALL, ifname, e))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::syscall::fake::Fake;

    #[test]
    fn setup_follows_the_documented_order() {
        let fake = Fake::install();
        let tx = TxBatch::open("eth9", 9000, true, 0x0800).unwrap();
        assert_eq!(
            fake.calls(),
            [
                "if_nametoindex",
                "ioctl(SIOCGIFMTU)",
                "socket(AF_PACKET)",
                "setsockopt(PACKET_QDISC_BYPASS)",
                "setsockopt(SO_ATTACH_FILTER)",
                "bind(AF_PACKET)",
            ]
        );
        // The fake MTU is 1500: a slot holds at most 1514 bytes.
        assert_eq!(tx.max_frame(), 1514);
        let text = TxBatch::open("eth9", 10, false, 0).unwrap_err().to_string();
        assert!(text.contains("shorter than an Ethernet header"), "{text}");
    }

    #[test]
    fn slots_fill_in_order_and_a_flush_sends_them_all() {
        let fake = Fake::install();
        let mut tx = TxBatch::open("eth9", 128, false, 0).unwrap();
        for i in 0..BATCH_FRAMES {
            let mut s = tx.slot().unwrap();
            s.buf()[0] = i as u8;
            s.send(60);
        }
        assert!(tx.slot().is_none(), "a full batch has no free slot");
        assert_eq!(tx.pending(), BATCH_FRAMES);
        // Lengths the kernel would refuse are counted, not queued.
        tx.flush().unwrap();
        tx.slot().unwrap().send(10);
        tx.slot().unwrap().send(129);
        assert_eq!((tx.wrong_format(), tx.pending()), (2, 0));
        // Slots keep their bytes, and are used round-robin across flushes (a refused length
        // uses no slot).
        for want in 0..3u8 {
            let mut s = tx.slot().unwrap();
            assert_eq!(s.buf()[0], want);
            s.send(60);
        }
        tx.flush().unwrap();
        assert_eq!(tx.slot().unwrap().buf()[0], 3);
        let sends = || {
            fake.calls()
                .iter()
                .filter(|c| **c == "sendmmsg(AF_PACKET)")
                .count()
        };
        // One call per batch; nothing filled, nothing sent.
        assert_eq!(sends(), 2, "{:?}", fake.calls());
        tx.flush().unwrap();
        assert_eq!(sends(), 2, "{:?}", fake.calls());
        fake.fail("sendmmsg(AF_PACKET)", libc::ENETDOWN);
        tx.slot().unwrap().send(60);
        let text = tx.flush().unwrap_err().to_string();
        assert!(
            text.starts_with("sendmmsg(AF_PACKET) on eth9 failed"),
            "{text}"
        );
        assert_eq!(tx.pending(), 0);
    }

    #[test]
    fn a_frame_the_kernel_refuses_is_counted_and_skipped() {
        let fake = Fake::install();
        let mut tx = TxBatch::open("eth9", 128, false, 0).unwrap();
        fake.fail("sendmmsg(AF_PACKET)", libc::EMSGSIZE);
        tx.slot().unwrap().send(60);
        tx.slot().unwrap().send(60);
        tx.flush().unwrap();
        assert_eq!((tx.wrong_format(), tx.pending()), (2, 0));
    }
}
