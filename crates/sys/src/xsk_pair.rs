//! Two AF_XDP sockets on two interfaces sharing one UMEM (`XDP_SHARED_UMEM` across devices,
//! Linux 5.10 and later): a frame received into the UMEM on one interface leaves on the other
//! from the same memory, never copied.
//!
//! The kernel wants a fill and a completion ring for each (interface, queue) using the UMEM.
//! The pair is split into two [`Crossing`]s, one per direction, each owning the rings it uses:
//! the RX and fill rings of the interface it receives on, the TX and completion rings of the
//! one it sends on. A frame sent on the other interface comes back through that interface's
//! completion ring and goes to the fill ring it was received through, so each direction keeps
//! its half of the frames, and every ring has one owner.
#![allow(unsafe_code)]

use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use crate::mmap::Mapping;
use crate::xsk::{self, BindMode, FRAME_SIZE, RingMap, RxFrame, XskStatistics, XskStatsHandle};
use crate::{SysError, syscall};

/// One interface of the pair.
#[derive(Debug, Clone)]
pub struct Port {
    /// Interface name.
    pub ifname: String,
    /// Interface index.
    pub ifindex: u32,
}

/// The UMEM and both sockets, shared by the two crossings.
#[derive(Debug)]
struct Shared {
    umem: Mapping,
    sockets: [OwnedFd; 2],
    names: [String; 2],
}

// SAFETY: after set-up `Shared` is only read (the UMEM's address and length, the descriptors,
// the names); the UMEM's bytes are written by one owner at a time, the crossing that holds the
// frame, never through `Shared`.
unsafe impl Send for Shared {}
// SAFETY: as for `Send`: nothing in it is written through a shared reference.
unsafe impl Sync for Shared {}

/// What a crossing counted of the frames it sent, readable from another thread.
#[derive(Debug, Default)]
pub struct CrossingCounters {
    /// Frames the other interface's driver took (returned on its completion ring).
    pub forwarded: AtomicU64,
    /// Frames not sent because the other interface's TX ring was full.
    pub tx_ring_full: AtomicU64,
    /// Frames put on the TX ring, not yet completed.
    pub in_flight: AtomicU64,
}

/// Frames received on one interface of a pair and sent on the other.
#[derive(Debug)]
pub struct Crossing {
    shared: Arc<Shared>,
    /// Index of the receiving socket (0 or 1); the other sends.
    from: usize,
    mode: BindMode,
    rx: RingMap,
    fill: RingMap,
    tx: RingMap,
    completion: RingMap,
    rx_cons: u32,
    fill_prod: u32,
    tx_prod: u32,
    /// The TX ring's consumer as last read.
    tx_cons: u32,
    comp_cons: u32,
    forwarded: u64,
    tx_ring_full: u64,
    counters: Arc<CrossingCounters>,
}

// SAFETY: the raw pointers point into mappings the crossing (or `shared`) owns; a crossing is
// used by one thread at a time (`&mut self` for every ring access) and no two crossings touch
// the same ring or UMEM frame at once (a frame belongs to one ring or one crossing).
unsafe impl Send for Crossing {}

/// Opens one socket on queue 0 of each of `ports`, sharing one UMEM of `frames` frames (a
/// power of two), half of them lent to each interface's fill ring. Zero-copy is tried first
/// (the second socket takes the first's mode). Returns the crossing from `ports[0]` to
/// `ports[1]` and the one back.
pub fn open(ports: &[Port; 2], frames: u32) -> Result<[Crossing; 2], SysError> {
    let [a, b] = ports;
    if !frames.is_power_of_two() || frames < 128 {
        return Err(SysError::invalid(
            "setsockopt(XDP_UMEM_REG)",
            &a.ifname,
            format!("{frames} frames: the UMEM needs a power of two, at least 128"),
        ));
    }
    let fd_a = xsk::open_socket(&a.ifname)?;
    let umem = xsk::register_umem(fd_a.as_fd(), &a.ifname, frames)?;
    let fd_b = xsk::open_socket(&b.ifname)?;
    // Every ring as large as the UMEM: none can overflow, wherever the frames are.
    for (fd, p) in [(&fd_a, a), (&fd_b, b)] {
        for ring in [
            libc::XDP_UMEM_FILL_RING,
            libc::XDP_UMEM_COMPLETION_RING,
            libc::XDP_RX_RING,
            libc::XDP_TX_RING,
        ] {
            xsk::set_ring_size(fd.as_fd(), &p.ifname, ring, frames)?;
        }
    }
    let rings = |fd: &OwnedFd, p: &Port| -> Result<[RingMap; 4], SysError> {
        let off = xsk::mmap_offsets(fd.as_fd(), &p.ifname)?;
        let desc = size_of::<libc::xdp_desc>();
        Ok([
            xsk::map_ring(
                fd.as_fd(),
                &p.ifname,
                &off.rx,
                frames,
                desc,
                libc::XDP_PGOFF_RX_RING as u64,
            )?,
            xsk::map_ring(
                fd.as_fd(),
                &p.ifname,
                &off.fr,
                frames,
                8,
                libc::XDP_UMEM_PGOFF_FILL_RING,
            )?,
            xsk::map_ring(
                fd.as_fd(),
                &p.ifname,
                &off.tx,
                frames,
                desc,
                libc::XDP_PGOFF_TX_RING as u64,
            )?,
            xsk::map_ring(
                fd.as_fd(),
                &p.ifname,
                &off.cr,
                frames,
                8,
                libc::XDP_UMEM_PGOFF_COMPLETION_RING,
            )?,
        ])
    };
    let [rx_a, fill_a, tx_a, comp_a] = rings(&fd_a, a)?;
    let [rx_b, fill_b, tx_b, comp_b] = rings(&fd_b, b)?;
    let shared = Arc::new(Shared {
        umem,
        sockets: [fd_a, fd_b],
        names: [a.ifname.clone(), b.ifname.clone()],
    });
    let crossing = |from, rx, fill, tx, completion| Crossing {
        shared: Arc::clone(&shared),
        from,
        mode: BindMode::Copy,
        rx,
        fill,
        tx,
        completion,
        rx_cons: 0,
        fill_prod: 0,
        tx_prod: 0,
        tx_cons: 0,
        comp_cons: 0,
        forwarded: 0,
        tx_ring_full: 0,
        counters: Arc::default(),
    };
    let mut ab = crossing(0, rx_a, fill_a, tx_b, comp_b);
    let mut ba = crossing(1, rx_b, fill_b, tx_a, comp_a);
    let half = frames / 2;
    for f in 0..half {
        ab.push_fill(u64::from(f) * u64::from(FRAME_SIZE));
        ba.push_fill(u64::from(f + half) * u64::from(FRAME_SIZE));
    }
    for c in [&ab, &ba] {
        c.fill.producer().store(c.fill_prod, Ordering::Release);
    }
    let mode = xsk::bind(
        shared.sockets[0].as_fd(),
        &a.ifname,
        a.ifindex,
        0,
        true,
        None,
    )?;
    xsk::bind(
        shared.sockets[1].as_fd(),
        &b.ifname,
        b.ifindex,
        0,
        true,
        Some(shared.sockets[0].as_fd()),
    )
    .map_err(|e| match e.errno() {
        Some(libc::EINVAL) => SysError::invalid(
            "bind(AF_XDP, XDP_SHARED_UMEM)",
            &b.ifname,
            "the kernel cannot share a UMEM between two interfaces (Linux 5.10 and later can)"
                .to_string(),
        ),
        _ => e,
    })?;
    ab.mode = mode;
    ba.mode = mode;
    Ok([ab, ba])
}

impl Crossing {
    /// The receiving socket, for its interface's `XSKMAP`.
    pub fn rx_fd(&self) -> BorrowedFd<'_> {
        self.shared.sockets[self.from].as_fd()
    }

    /// The receiving interface's name.
    pub fn ifname(&self) -> &str {
        &self.shared.names[self.from]
    }

    /// How the UMEM is bound.
    pub fn mode(&self) -> BindMode {
        self.mode
    }

    /// The counters of what was sent, shared.
    pub fn counters(&self) -> Arc<CrossingCounters> {
        Arc::clone(&self.counters)
    }

    /// Second descriptors of the receiving and the sending socket, for their statistics
    /// from another thread.
    pub fn stats_handles(&self) -> Result<[XskStatsHandle; 2], SysError> {
        let h = |i: usize| -> Result<XskStatsHandle, SysError> {
            let name = &self.shared.names[i];
            let fd = self.shared.sockets[i]
                .try_clone()
                .map_err(|e| SysError::call_with("dup", name, String::new(), e))?;
            Ok(XskStatsHandle::new(fd, name))
        };
        Ok([h(self.from)?, h(1 - self.from)?])
    }

    /// The receiving socket's drop counters, and the sending socket's (its
    /// `tx_invalid_descs`).
    pub fn statistics(&self) -> Result<[XskStatistics; 2], SysError> {
        let to = 1 - self.from;
        Ok([
            xsk::statistics(
                self.shared.sockets[self.from].as_fd(),
                &self.shared.names[self.from],
            )?,
            xsk::statistics(self.shared.sockets[to].as_fd(), &self.shared.names[to])?,
        ])
    }

    /// Whether received descriptors are waiting (one load).
    pub fn ready(&self) -> bool {
        self.rx.producer().load(Ordering::Acquire) != self.rx_cons
    }

    /// Waits up to `timeout_ms` for received frames, or for `wake` to be readable.
    pub fn wait(
        &mut self,
        timeout_ms: i32,
        wake: Option<BorrowedFd<'_>>,
    ) -> Result<bool, SysError> {
        if self.ready() {
            return Ok(true);
        }
        syscall::poll(self.rx_fd(), libc::POLLIN, wake, timeout_ms, "poll(AF_XDP)")
            .map_err(|e| SysError::call("poll(AF_XDP)", self.ifname(), e))?;
        Ok(self.ready())
    }

    /// Takes up to `max` received frames: shows each to `f`, then puts it on the other
    /// interface's TX ring (or, with that ring full, back on the fill ring, counted), and asks
    /// the kernel to send. Returns how many frames it took. No allocation; one system call
    /// per kernel batch sent.
    pub fn cross(&mut self, max: u32, mut f: impl FnMut(RxFrame<'_>)) -> Result<u32, SysError> {
        self.reap();
        let prod = self.rx.producer().load(Ordering::Acquire);
        let n = prod.wrapping_sub(self.rx_cons).min(max);
        let size = self.tx.mask + 1;
        if self.tx_prod.wrapping_sub(self.tx_cons) + n > size {
            self.tx_cons = self.tx.consumer().load(Ordering::Acquire);
        }
        let mut room = size - self.tx_prod.wrapping_sub(self.tx_cons);
        let umem = self.shared.umem.len() as u64;
        let base = self.shared.umem.ptr().as_ptr();
        for i in 0..n {
            let slot = (self.rx_cons.wrapping_add(i) & self.rx.mask) as usize;
            // SAFETY: `slot` is within the RX ring; descriptors between our consumer and the
            // producer read with Acquire are written by the kernel and ours until we move the
            // consumer past them.
            let d = unsafe { self.rx.descs.cast::<libc::xdp_desc>().add(slot).read() };
            let addr = d.addr.min(umem - 1);
            let len = u64::from(d.len).min(umem - addr);
            let meta = if addr % u64::from(FRAME_SIZE) >= 8 {
                // SAFETY: the 8 bytes before the frame lie within its UMEM frame, ours until
                // it is put on a ring.
                unsafe { base.add(addr as usize - 8).cast::<u64>().read_unaligned() }
            } else {
                0
            };
            // SAFETY: `addr..addr+len` lies within the UMEM (clipped above) and is ours until
            // it is put on a ring below; the slice does not outlive this iteration.
            let data = unsafe { std::slice::from_raw_parts(base.add(addr as usize), len as usize) };
            f(RxFrame { data, meta });
            if room > 0 {
                let slot = (self.tx_prod & self.tx.mask) as usize;
                let desc = libc::xdp_desc {
                    addr,
                    len: len as u32,
                    options: 0,
                };
                // SAFETY: `slot` is within the TX ring; a slot at or past our producer and
                // fewer than the ring's size ahead of the consumer is ours to write.
                unsafe { self.tx.descs.cast::<libc::xdp_desc>().add(slot).write(desc) };
                self.tx_prod = self.tx_prod.wrapping_add(1);
                room -= 1;
            } else {
                self.tx_ring_full += 1;
                self.recycle(addr);
            }
        }
        self.rx_cons = self.rx_cons.wrapping_add(n);
        self.rx.consumer().store(self.rx_cons, Ordering::Release);
        self.tx.producer().store(self.tx_prod, Ordering::Release);
        self.fill
            .producer()
            .store(self.fill_prod, Ordering::Release);
        self.kick()?;
        self.publish();
        Ok(n)
    }

    /// Returns the frames the other interface finished sending to the fill ring, and asks
    /// the kernel to send what still waits on the TX ring.
    pub fn flush(&mut self) -> Result<(), SysError> {
        self.reap();
        self.kick()?;
        self.reap();
        self.publish();
        Ok(())
    }

    /// Frames put on the TX ring and not yet returned on the completion ring.
    pub fn in_flight(&self) -> u64 {
        u64::from(self.tx_prod.wrapping_sub(self.comp_cons))
    }

    fn publish(&self) {
        self.counters
            .forwarded
            .store(self.forwarded, Ordering::Relaxed);
        self.counters
            .tx_ring_full
            .store(self.tx_ring_full, Ordering::Relaxed);
        self.counters
            .in_flight
            .store(self.in_flight(), Ordering::Relaxed);
    }

    /// Moves completed frames to the fill ring.
    fn reap(&mut self) {
        let prod = self.completion.producer().load(Ordering::Acquire);
        let n = prod.wrapping_sub(self.comp_cons);
        if n == 0 {
            return;
        }
        for i in 0..n {
            let slot = (self.comp_cons.wrapping_add(i) & self.completion.mask) as usize;
            // SAFETY: `slot` is within the completion ring, between our consumer and the
            // producer read with Acquire: written by the kernel, ours to read.
            let addr = unsafe { self.completion.descs.cast::<u64>().add(slot).read() };
            self.recycle(addr);
        }
        self.comp_cons = self.comp_cons.wrapping_add(n);
        self.completion
            .consumer()
            .store(self.comp_cons, Ordering::Release);
        self.fill
            .producer()
            .store(self.fill_prod, Ordering::Release);
        self.forwarded += u64::from(n);
    }

    /// Hands the frame holding `addr` back to the fill ring (not yet published), its
    /// metadata cleared so that a frame the program cannot stamp reads 0.
    fn recycle(&mut self, addr: u64) {
        let umem = self.shared.umem.len() as u64;
        let addr = addr.min(umem - 1);
        let frame = addr & !u64::from(FRAME_SIZE - 1);
        if addr - frame >= 8 {
            let base = self.shared.umem.ptr().as_ptr();
            // SAFETY: within the frame, which is ours until it is on the fill ring.
            unsafe { base.add(addr as usize - 8).cast::<u64>().write_unaligned(0) };
        }
        self.push_fill(frame);
    }

    fn push_fill(&mut self, addr: u64) {
        let slot = (self.fill_prod & self.fill.mask) as usize;
        // SAFETY: `slot` is within the fill ring, as large as the UMEM: a slot at or past the
        // producer is ours, since the ring never holds more frames than exist.
        unsafe { self.fill.descs.cast::<u64>().add(slot).write(addr) };
        self.fill_prod = self.fill_prod.wrapping_add(1);
    }

    /// Asks the kernel to send the TX ring's frames where it needs asking (copy mode, or a
    /// driver that sleeps): a copy-mode send stops after a batch (`EAGAIN`) or at a frame the
    /// device dropped (`EBUSY`), so it is asked again while it makes progress.
    fn kick(&mut self) -> Result<(), SysError> {
        const CALL: &str = "sendto(AF_XDP)";
        let fd = self.shared.sockets[1 - self.from].as_fd();
        loop {
            let before = self.tx.consumer().load(Ordering::Acquire);
            self.tx_cons = before;
            if before == self.tx_prod
                || (self.mode == BindMode::ZeroCopy && !self.tx.needs_wakeup())
            {
                return Ok(());
            }
            match syscall::kick_tx(fd, CALL) {
                Ok(()) => {}
                Err(e) if matches!(e.raw_os_error(), Some(libc::EAGAIN | libc::EBUSY)) => {}
                // The device's queue is full or the link is down: the frames wait.
                Err(e)
                    if matches!(
                        e.raw_os_error(),
                        Some(libc::ENOBUFS | libc::ENETDOWN | libc::ENXIO)
                    ) =>
                {
                    return Ok(());
                }
                Err(e) => {
                    return Err(SysError::call(CALL, &self.shared.names[1 - self.from], e));
                }
            }
            if self.tx.consumer().load(Ordering::Acquire) == before {
                return Ok(());
            }
        }
    }
}
