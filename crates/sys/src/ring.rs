//! The AF_PACKET `TPACKET_V3` receive ring.
//!
//! The kernel fills blocks of `block_size` bytes with packets and hands each over by setting
//! `block_status` to `TP_STATUS_USER`; we read it with Acquire, walk its packets, and give it
//! back with a Release store of `TP_STATUS_KERNEL`. Blocks go strictly round the ring: the
//! kernel only ever tries the next block and freezes the whole socket (dropping everything) while
//! that block is still ours, so hold as few blocks as possible, as briefly as possible.
#![allow(unsafe_code)]

use std::cell::Cell;
use std::io;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::ptr::NonNull;
use std::sync::atomic::{AtomicU32, Ordering};

use crate::bpf::{self, BPF_MAXINSNS};
use crate::mmap::Mapping;
use crate::packet::{
    add_promiscuous, attach_filter, bind_to, map_ring, open_socket_of, page_size, phys_mem,
    set_version,
};
use crate::tpacket::{self, BD_STATUS};
pub use crate::tpacket::{BLOCK_DESC_LEN, ETHERNET_MAC_OFFSET};
use crate::{SysError, iface, syscall};

pub use crate::tpacket::{Packets, RingPacket};
pub use libc::{
    PACKET_BROADCAST, PACKET_HOST, PACKET_LOOPBACK, PACKET_MULTICAST, PACKET_OTHERHOST,
    PACKET_OUTGOING, TP_STATUS_BLK_TMO, TP_STATUS_COPY, TP_STATUS_CSUM_VALID,
    TP_STATUS_CSUMNOTREADY, TP_STATUS_KERNEL, TP_STATUS_LOSING, TP_STATUS_TS_RAW_HARDWARE,
    TP_STATUS_TS_SOFTWARE, TP_STATUS_TS_SYS_HARDWARE, TP_STATUS_USER, TP_STATUS_VLAN_TPID_VALID,
    TP_STATUS_VLAN_VALID,
};

/// The packet was merged by GRO from TCP segments (`TP_STATUS_GSO_TCP`, not in libc).
pub const TP_STATUS_GSO_TCP: u32 = 1 << 8;

/// The name that captures on every interface of the network namespace at once, as tcpdump's
/// `-i any`: a `SOCK_DGRAM` socket bound to interface index 0, whose packets the ring gives
/// with a Linux cooked v2 header (`LINKTYPE_LINUX_SLL2`) in place of their link-layer header.
pub const ANY: &str = "any";

/// The largest block the kernel accepts: `tp_block_size` must be positive as an `int`, and a
/// power of two below 2^31 is at most 2^30.
pub const MAX_BLOCK_SIZE: u32 = 1 << 30;

/// How a fanout group spreads packets over its member sockets.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FanoutMode {
    /// By the symmetric flow hash: both directions of a flow land on one socket.
    #[doc(alias = "PACKET_FANOUT_HASH")]
    Hash,
    /// Round robin.
    #[doc(alias = "PACKET_FANOUT_LB")]
    Lb,
    /// By the CPU the packet arrived on (pair with RSS and IRQ pinning).
    #[doc(alias = "PACKET_FANOUT_CPU")]
    Cpu,
}

impl FanoutMode {
    fn kernel(self) -> u32 {
        match self {
            FanoutMode::Hash => libc::PACKET_FANOUT_HASH,
            FanoutMode::Lb => libc::PACKET_FANOUT_LB,
            FanoutMode::Cpu => libc::PACKET_FANOUT_CPU,
        }
    }
}

/// Membership of a `PACKET_FANOUT` group (per network namespace, per interface).
#[doc(alias = "PACKET_FANOUT")]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Fanout {
    /// The group; every member must use the same mode and flags.
    pub group_id: u16,
    /// How packets are spread.
    pub mode: FanoutMode,
    /// Reassemble IP fragments before hashing so they follow their flow
    /// (`PACKET_FANOUT_FLAG_DEFRAG`).
    #[doc(alias = "PACKET_FANOUT_FLAG_DEFRAG")]
    pub defrag: bool,
}

/// What [`RxRing::wait`] found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Wait {
    /// The next block is handed over.
    Ready,
    /// The timeout passed, or `wake` turned readable, with no block.
    Nothing,
    /// The interface went down (`ENETDOWN` on the socket): no packet arrives until it is up
    /// again.
    #[doc(alias = "ENETDOWN")]
    LinkDown,
}

/// The shape of a receive ring and what is set on its socket.
#[derive(Debug, Clone)]
pub struct RxRingConfig {
    /// Bytes per block: a power-of-two multiple of the page size, at most [`MAX_BLOCK_SIZE`].
    #[doc(alias = "tp_block_size")]
    pub block_size: u32,
    /// Blocks in the ring, at least 1.
    #[doc(alias = "tp_block_nr")]
    pub block_count: u32,
    /// The longest a block stays open before the kernel hands it over anyway, in ms; 0 lets the
    /// kernel choose from the link speed (8 ms if unknown).
    #[doc(alias = "tp_retire_blk_tov")]
    pub retire_tov_ms: u32,
    /// Socket filter attached before the ring sees traffic; its return value is the snaplen.
    /// Empty means no filter: whole packets.
    #[doc(alias = "SO_ATTACH_FILTER")]
    pub filter: Vec<bpf::Instruction>,
    /// Join a fanout group after binding.
    pub fanout: Option<Fanout>,
    /// Try raw hardware timestamps (`SIOCSHWTSTAMP` + `PACKET_TIMESTAMP`); falls back silently
    /// to the kernel's software stamps.
    pub hw_timestamps: bool,
    /// Ask the kernel to fill `tp_rxhash` (`TP_FT_REQ_FILL_RXHASH`).
    #[doc(alias = "TP_FT_REQ_FILL_RXHASH")]
    pub fill_rxhash: bool,
    /// Put the interface in promiscuous mode while the ring is open, as tcpdump does unless
    /// `-p`: without it a NIC drops frames for other hosts before any capture sees them.
    #[doc(alias = "PACKET_MR_PROMISC")]
    pub promiscuous: bool,
}

impl Default for RxRingConfig {
    /// 64 blocks of 1 MiB, 10 ms retire timeout, snaplen 128, no fanout.
    fn default() -> RxRingConfig {
        RxRingConfig {
            block_size: 1 << 20,
            block_count: 64,
            retire_tov_ms: 10,
            filter: bpf::accept_all(128),
            fanout: None,
            hw_timestamps: false,
            fill_rxhash: false,
            promiscuous: false,
        }
    }
}

/// `struct tpacket_stats_v3`: counts since the previous read (the kernel clears them on read).
#[doc(alias("tpacket_stats_v3", "PACKET_STATISTICS"))]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct TpacketStats {
    /// Packets that passed the filter: delivered to the ring plus dropped.
    #[doc(alias = "tp_packets")]
    pub packets: u32,
    /// Packets dropped because the ring had no room.
    #[doc(alias = "tp_drops")]
    pub drops: u32,
    /// Times the ring froze waiting for user space to return a block.
    #[doc(alias = "tp_freeze_q_cnt")]
    pub freeze_q_cnt: u32,
}

/// An AF_PACKET socket with a mapped TPACKET_V3 receive ring, bound to one interface.
///
/// `Send`, not `Sync`: one thread reads it. Dropping it unmaps the ring and closes the socket.
#[doc(alias("PACKET_RX_RING", "TPACKET_V3"))]
#[derive(Debug)]
pub struct RxRing {
    // Field order is drop order: unmap, then close.
    map: Mapping,
    fd: OwnedFd,
    iface: String,
    ifindex: u32,
    block_size: usize,
    block_count: usize,
    /// The block the kernel will hand over next.
    next: Cell<usize>,
    /// Blocks currently lent out as `Block`s.
    held: Box<[Cell<bool>]>,
    /// How many blocks are lent out.
    lent: Cell<usize>,
    /// Blocks from `next` on known to be handed over (seen by the last look ahead and not
    /// taken since): the kernel hands blocks over in ring order and only we hand them back,
    /// so they stay ours until taken.
    run: Cell<usize>,
    hw_timestamps: bool,
    /// Bound to every interface ([`ANY`]): blocks are cooked before they are lent out.
    cooked: bool,
}

// SAFETY: the ring owns its socket and its mapping outright; moving it moves the only access to
// both. It is not Sync (Cell), so blocks are only ever read by the thread holding the ring.
unsafe impl Send for RxRing {}

impl RxRing {
    /// Opens a receive ring on `ifname`, in netsniff-ng's order: `socket` → `SO_ATTACH_FILTER` →
    /// `PACKET_VERSION` → (`PACKET_TIMESTAMP`) → `PACKET_RX_RING` → `mmap` → `bind` →
    /// (`PACKET_ADD_MEMBERSHIP`) → `PACKET_FANOUT`. Sizes are checked before any call.
    ///
    /// [`ANY`] opens a `SOCK_DGRAM` socket bound to every interface (index 0) and hands out
    /// blocks of cooked frames (see [`crate::tpacket::cook_block`]); its filter sees packets
    /// from the network header on, and neither promiscuous mode nor hardware timestamps apply.
    pub fn open(ifname: &str, cfg: &RxRingConfig) -> Result<RxRing, SysError> {
        check_geometry(ifname, cfg)?;
        if !cfg.filter.is_empty() {
            check_filter(ifname, &cfg.filter)?;
        }
        let cooked = ifname == ANY;
        let (ifindex, ty) = if cooked {
            (0, libc::SOCK_DGRAM)
        } else {
            (iface::index(ifname)?, libc::SOCK_RAW)
        };
        let fd = open_socket_of(ifname, ty)?;
        if !cfg.filter.is_empty() {
            attach_filter(fd.as_fd(), ifname, &cfg.filter)?;
        }
        set_version(fd.as_fd(), ifname, libc::tpacket_versions::TPACKET_V3)?;
        let hw_timestamps =
            cfg.hw_timestamps && !cooked && enable_hw_timestamps(fd.as_fd(), ifname);
        set_rx_ring(fd.as_fd(), ifname, cfg)?;
        let block_size = cfg.block_size as usize;
        let block_count = cfg.block_count as usize;
        let map = map_ring(fd.as_fd(), ifname, block_size * block_count)?;
        bind_to(fd.as_fd(), ifname, ifindex, libc::ETH_P_ALL as u16)?;
        if cfg.promiscuous && !cooked {
            add_promiscuous(fd.as_fd(), ifname, ifindex)?;
        }
        if let Some(fanout) = &cfg.fanout {
            join_fanout(fd.as_fd(), ifname, fanout)?;
        }
        Ok(RxRing {
            map,
            fd,
            iface: ifname.to_owned(),
            ifindex,
            block_size,
            block_count,
            next: Cell::new(0),
            held: (0..block_count).map(|_| Cell::new(false)).collect(),
            lent: Cell::new(0),
            run: Cell::new(0),
            hw_timestamps,
            cooked,
        })
    }

    /// The next block in ring order if the kernel has handed it over; otherwise waits in
    /// `poll()` up to `timeout_ms` (0: don't wait, negative: forever), or until `wake` turns
    /// readable, and checks once more. `None` if nothing arrived. An error if the interface
    /// went down (`ENETDOWN`; [`RxRing::wait`] reports it as [`Wait::LinkDown`] instead), or if
    /// the next block is still held (every block lent out).
    pub fn next_block(
        &self,
        timeout_ms: i32,
        wake: Option<BorrowedFd<'_>>,
    ) -> Result<Option<Block<'_>>, SysError> {
        let index = self.next.get();
        if self.held[index].get() {
            return Err(SysError::call_with(
                "next_block",
                &self.iface,
                format!(
                    "block {index} of {} is still held; drop blocks before the ring wraps",
                    self.block_count
                ),
                io::Error::from_raw_os_error(libc::EBUSY),
            ));
        }
        if let Some(block) = self.take(index) {
            return Ok(Some(block));
        }
        if timeout_ms == 0 {
            return Ok(None);
        }
        if self.wait(timeout_ms, wake)? == Wait::LinkDown {
            return Err(SysError::call(
                "poll",
                &self.iface,
                io::Error::from_raw_os_error(libc::ENETDOWN),
            ));
        }
        Ok(self.take(index))
    }

    /// Whether the kernel has handed over the next block, without taking it.
    pub fn ready(&self) -> bool {
        let index = self.next.get();
        !self.held[index].get()
            && status_word(self.block_ptr(index)).load(Ordering::Acquire) & TP_STATUS_USER != 0
    }

    /// Waits in `poll()` up to `timeout_ms` (negative: forever) until the next block is handed
    /// over, `wake` turns readable, or the interface goes down, without taking a block.
    ///
    /// The interface going down (`ip link set NAME down`, or deleted) is reported once: the
    /// kernel unhooks the socket, sets `ENETDOWN` on it, and clears it when it is read here.
    /// When the interface comes up again the kernel hooks the socket back by itself, fanout
    /// members included: the ring needs no new bind. A deleted interface never comes back to
    /// this socket, even under the same name (see [`iface::link_state`]).
    pub fn wait(&self, timeout_ms: i32, wake: Option<BorrowedFd<'_>>) -> Result<Wait, SysError> {
        // The kernel documents check-status-then-poll as race free for V3.
        if self.ready() {
            return Ok(Wait::Ready);
        }
        let revents = syscall::poll(
            self.fd.as_fd(),
            libc::POLLIN | libc::POLLERR,
            wake,
            timeout_ms,
            "poll",
        )
        .map_err(|e| SysError::call("poll", &self.iface, e))?;
        if revents & libc::POLLERR != 0 {
            match self.socket_error()? {
                0 => {}
                libc::ENETDOWN => return Ok(Wait::LinkDown),
                e => {
                    return Err(SysError::call(
                        "poll",
                        &self.iface,
                        io::Error::from_raw_os_error(e),
                    ));
                }
            }
        }
        Ok(if self.ready() {
            Wait::Ready
        } else {
            Wait::Nothing
        })
    }

    fn block_ptr(&self, index: usize) -> NonNull<u8> {
        debug_assert!(index < self.block_count);
        // SAFETY: index < block_count, so the offset stays inside the mapping of
        // block_size * block_count bytes.
        unsafe { self.map.ptr().add(index * self.block_size) }
    }

    /// Lends out block `index` if the kernel has handed it over.
    fn take(&self, index: usize) -> Option<Block<'_>> {
        let base = self.block_ptr(index);
        let status = status_word(base).load(Ordering::Acquire);
        if status & TP_STATUS_USER == 0 {
            return None;
        }
        let run = match self.run.get() {
            0 => self.ready_from(index),
            known => known,
        };
        self.run.set(run - 1);
        let fill = run + self.lent.get();
        self.held[index].set(true);
        self.lent.set(self.lent.get() + 1);
        self.next.set((index + 1) % self.block_count);
        let mut block = Block {
            ring: self,
            index,
            base,
            status,
            fill,
        };
        if self.cooked {
            tpacket::cook_block(block.bytes_mut());
        }
        Some(block)
    }

    /// How many blocks from `index` on, in ring order, the kernel has handed over and we have
    /// not taken: block `index` (handed over) and the run behind it. One load per block of
    /// the run, and a run is looked at once, so a full ring costs one load per block taken.
    fn ready_from(&self, index: usize) -> usize {
        let mut run = 1;
        while run < self.block_count {
            let i = (index + run) % self.block_count;
            if self.held[i].get()
                || status_word(self.block_ptr(i)).load(Ordering::Acquire) & TP_STATUS_USER == 0
            {
                break;
            }
            run += 1;
        }
        run
    }

    /// The pending socket error (`SO_ERROR`, cleared by reading it): `ENETDOWN` when the
    /// interface went down, 0 if none.
    fn socket_error(&self) -> Result<libc::c_int, SysError> {
        const CALL: &str = "getsockopt(SO_ERROR)";
        let mut err: libc::c_int = 0;
        syscall::getsockopt(
            self.fd.as_fd(),
            libc::SOL_SOCKET,
            libc::SO_ERROR,
            &mut err,
            CALL,
        )
        .map_err(|e| SysError::call(CALL, &self.iface, e))?;
        Ok(err)
    }

    /// `PACKET_STATISTICS`: packets and drops since the previous call (the kernel clears the
    /// counters on read; they are u32, so read at least every few seconds and sum in u64).
    #[doc(alias("PACKET_STATISTICS", "tpacket_stats_v3"))]
    pub fn statistics(&self) -> Result<TpacketStats, SysError> {
        const CALL: &str = "getsockopt(PACKET_STATISTICS)";
        let mut s = libc::tpacket_stats_v3 {
            tp_packets: 0,
            tp_drops: 0,
            tp_freeze_q_cnt: 0,
        };
        syscall::getsockopt(
            self.fd.as_fd(),
            libc::SOL_PACKET,
            libc::PACKET_STATISTICS,
            &mut s,
            CALL,
        )
        .map_err(|e| SysError::call(CALL, &self.iface, e))?;
        Ok(TpacketStats {
            packets: s.tp_packets,
            drops: s.tp_drops,
            freeze_q_cnt: s.tp_freeze_q_cnt,
        })
    }

    /// Replaces the socket filter on the live socket (`SO_ATTACH_FILTER`; the kernel swaps it
    /// atomically).
    #[doc(alias = "SO_ATTACH_FILTER")]
    pub fn set_filter(&self, prog: &[bpf::Instruction]) -> Result<(), SysError> {
        check_filter(&self.iface, prog)?;
        attach_filter(self.fd.as_fd(), &self.iface, prog)
    }

    /// A second handle on the ring's socket, for replacing its filter from another thread
    /// while this one reads the ring.
    pub fn filter_handle(&self) -> Result<FilterHandle, SysError> {
        let fd = self
            .fd
            .try_clone()
            .map_err(|e| SysError::call_with("dup", &self.iface, String::new(), e))?;
        Ok(FilterHandle {
            fd,
            iface: self.iface.clone(),
        })
    }

    /// Whether the ring captures on every interface ([`ANY`]) and gives cooked frames.
    pub fn cooked(&self) -> bool {
        self.cooked
    }

    /// The interface's index (0 for [`ANY`]).
    pub fn ifindex(&self) -> u32 {
        self.ifindex
    }

    /// The interface's name.
    pub fn iface(&self) -> &str {
        &self.iface
    }

    /// Whether raw hardware timestamps were enabled (else the kernel stamps in software).
    pub fn hw_timestamps(&self) -> bool {
        self.hw_timestamps
    }

    /// The ring's size in bytes.
    pub fn ring_bytes(&self) -> usize {
        self.map.len()
    }

    /// Bytes per block.
    pub fn block_size(&self) -> usize {
        self.block_size
    }

    /// Blocks in the ring.
    pub fn block_count(&self) -> usize {
        self.block_count
    }
}

impl AsFd for RxRing {
    /// The packet socket, for an outside `poll`/`epoll`.
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }
}

/// The `block_status` word of the block at `base`.
fn status_word<'a>(base: NonNull<u8>) -> &'a AtomicU32 {
    // SAFETY: `base` is a block start inside a live ring mapping (page aligned, block sizes are
    // page multiples, BD_STATUS is 8), so the word is 4-byte aligned and valid for as long as the
    // ring, which outlives every caller's use. The kernel and we access it only atomically
    // (the kernel with barriers around plain u32 stores, as libpcap and netring assume).
    unsafe { AtomicU32::from_ptr(base.add(BD_STATUS).as_ptr().cast()) }
}

/// A block lent out by [`RxRing::next_block`]; dropping it hands it back to the kernel.
#[derive(Debug)]
pub struct Block<'a> {
    ring: &'a RxRing,
    index: usize,
    base: NonNull<u8>,
    status: u32,
    fill: usize,
}

impl<'a> Block<'a> {
    /// The whole block as bytes: header, then packets (the kernel's TPACKET_V3 layout).
    pub fn bytes(&self) -> &[u8] {
        // SAFETY: the block is block_size bytes inside the live mapping; its status is
        // TP_STATUS_USER (read with Acquire), so the kernel does not write it until our Drop
        // stores TP_STATUS_KERNEL, and the returned borrow ends before that.
        unsafe { std::slice::from_raw_parts(self.base.as_ptr(), self.ring.block_size) }
    }

    /// The whole block, writable: it is ours until it is handed back.
    fn bytes_mut(&mut self) -> &mut [u8] {
        // SAFETY: as for `bytes`; `&mut self` makes this the only borrow of the block, and
        // the kernel does not touch a block whose status is TP_STATUS_USER.
        unsafe { std::slice::from_raw_parts_mut(self.base.as_ptr(), self.ring.block_size) }
    }

    /// The kernel had dropped packets when it closed this block (`TP_STATUS_LOSING`; stays set
    /// until the statistics are read).
    #[doc(alias = "TP_STATUS_LOSING")]
    pub fn losing(&self) -> bool {
        self.status & TP_STATUS_LOSING != 0
    }

    /// The block was closed by the retire timer rather than by filling up (`TP_STATUS_BLK_TMO`).
    #[doc(alias = "TP_STATUS_BLK_TMO")]
    pub fn timed_out(&self) -> bool {
        self.status & TP_STATUS_BLK_TMO != 0
    }

    /// `block_status` as read when the block was taken.
    #[doc(alias = "block_status")]
    pub fn status(&self) -> u32 {
        self.status
    }

    /// The kernel's running block number (`seq_num`): a gap means nothing, a repeat means a bug.
    pub fn seq_num(&self) -> u64 {
        tpacket::block_seq_num(self.bytes())
    }

    /// Packets in the block (`num_pkts`).
    pub fn num_pkts(&self) -> u32 {
        tpacket::block_num_pkts(self.bytes())
    }

    /// The block's position in the ring.
    pub fn index(&self) -> usize {
        self.index
    }

    /// How full the ring was when this block was taken: the blocks the kernel had handed over
    /// and not got back (this one, the ones still lent out, and those waiting behind it), out
    /// of [`RxRing::block_count`]. The waiting ones are looked for only when the ones seen at
    /// the last look are all taken, so between two looks this is a lower bound: a block
    /// handed over since the last look is counted at the next.
    pub fn ring_fill(&self) -> usize {
        self.fill
    }

    /// The block's packets in order. They borrow the block, so none outlives its return to the
    /// kernel.
    pub fn packets(&self) -> Packets<'_> {
        Packets::from_block_bytes(self.bytes())
    }
}

impl Drop for Block<'_> {
    fn drop(&mut self) {
        status_word(self.base).store(TP_STATUS_KERNEL, Ordering::Release);
        self.ring.held[self.index].set(false);
        self.ring.lent.set(self.ring.lent.get() - 1);
    }
}

/// Refuses ring shapes the kernel would refuse (or silently waste), in plain words.
fn check_geometry(ifname: &str, cfg: &RxRingConfig) -> Result<(), SysError> {
    const CALL: &str = "setsockopt(PACKET_RX_RING)";
    let page = page_size();
    let size = cfg.block_size as usize;
    if size == 0 || !size.is_multiple_of(page) {
        return Err(SysError::invalid(
            CALL,
            ifname,
            format!("block size {size} is not a multiple of the page size {page}"),
        ));
    }
    if !size.is_power_of_two() {
        return Err(SysError::invalid(
            CALL,
            ifname,
            format!(
                "block size {size} is not a power-of-two multiple of the page size {page} \
                 (try {})",
                size.next_power_of_two()
            ),
        ));
    }
    if cfg.block_size > MAX_BLOCK_SIZE {
        return Err(SysError::invalid(
            CALL,
            ifname,
            format!("block size {size} is over the kernel's limit of {MAX_BLOCK_SIZE}"),
        ));
    }
    if cfg.block_count == 0 {
        return Err(SysError::invalid(
            CALL,
            ifname,
            "block count must be at least 1",
        ));
    }
    let phys = phys_mem();
    match size.checked_mul(cfg.block_count as usize) {
        Some(total) if total <= phys => Ok(()),
        _ => Err(SysError::invalid(
            CALL,
            ifname,
            format!(
                "{} blocks of {size} bytes are more than the physical memory ({phys} bytes)",
                cfg.block_count
            ),
        )),
    }
}

/// The socket of a ring, for its filter only (see [`RxRing::filter_handle`]).
#[derive(Debug)]
pub struct FilterHandle {
    fd: OwnedFd,
    iface: String,
}

impl FilterHandle {
    /// Replaces the socket filter (`SO_ATTACH_FILTER`): the kernel swaps the program at once,
    /// each packet is judged by the old or the new one.
    #[doc(alias = "SO_ATTACH_FILTER")]
    pub fn set_filter(&self, prog: &[bpf::Instruction]) -> Result<(), SysError> {
        check_filter(&self.iface, prog)?;
        attach_filter(self.fd.as_fd(), &self.iface, prog)
    }
}

fn check_filter(ifname: &str, prog: &[bpf::Instruction]) -> Result<(), SysError> {
    if prog.is_empty() || prog.len() > BPF_MAXINSNS {
        return Err(SysError::invalid(
            "setsockopt(SO_ATTACH_FILTER)",
            ifname,
            format!(
                "filter has {} instructions; the kernel takes 1 to {BPF_MAXINSNS} \
                 (bpf::accept_all passes everything)",
                prog.len()
            ),
        ));
    }
    Ok(())
}

/// `SIOCSHWTSTAMP` then `PACKET_TIMESTAMP = SOF_TIMESTAMPING_RAW_HARDWARE`; false (software
/// stamps) if either is refused.
#[doc(alias("PACKET_TIMESTAMP", "SIOCSHWTSTAMP"))]
fn enable_hw_timestamps(fd: BorrowedFd<'_>, ifname: &str) -> bool {
    if syscall::ioctl_hwtstamp(fd, ifname, "ioctl(SIOCSHWTSTAMP)").is_err() {
        return false;
    }
    let flags = libc::SOF_TIMESTAMPING_RAW_HARDWARE as libc::c_int;
    syscall::setsockopt(
        fd,
        libc::SOL_PACKET,
        libc::PACKET_TIMESTAMP,
        &flags,
        "setsockopt(PACKET_TIMESTAMP)",
    )
    .is_ok()
}

/// `PACKET_RX_RING` with a `tpacket_req3`.
#[doc(alias("PACKET_RX_RING", "tpacket_req3"))]
fn set_rx_ring(fd: BorrowedFd<'_>, ifname: &str, cfg: &RxRingConfig) -> Result<(), SysError> {
    const CALL: &str = "setsockopt(PACKET_RX_RING)";
    let req = libc::tpacket_req3 {
        tp_block_size: cfg.block_size,
        tp_block_nr: cfg.block_count,
        // V3 packs variable-size packets; the kernel only checks frames tile the blocks.
        tp_frame_size: cfg.block_size,
        tp_frame_nr: cfg.block_count,
        tp_retire_blk_tov: cfg.retire_tov_ms,
        tp_sizeof_priv: 0,
        tp_feature_req_word: if cfg.fill_rxhash {
            libc::TP_FT_REQ_FILL_RXHASH
        } else {
            0
        },
    };
    syscall::setsockopt(fd, libc::SOL_PACKET, libc::PACKET_RX_RING, &req, CALL).map_err(|e| {
        let ring = format!("{} blocks of {} bytes", cfg.block_count, cfg.block_size);
        let detail = match e.raw_os_error() {
            Some(libc::ENOMEM) => format!("not enough kernel memory for {ring}"),
            Some(libc::EBUSY) => "the socket already has a ring".to_owned(),
            _ => ring,
        };
        SysError::call_with(CALL, ifname, detail, e)
    })
}

/// `PACKET_FANOUT`, argument `group_id | (mode | flags) << 16`.
#[doc(alias = "PACKET_FANOUT")]
fn join_fanout(fd: BorrowedFd<'_>, ifname: &str, fanout: &Fanout) -> Result<(), SysError> {
    const CALL: &str = "setsockopt(PACKET_FANOUT)";
    let flags = if fanout.defrag {
        libc::PACKET_FANOUT_FLAG_DEFRAG
    } else {
        0
    };
    let arg = (u32::from(fanout.group_id) | (fanout.mode.kernel() | flags) << 16) as libc::c_int;
    syscall::setsockopt(fd, libc::SOL_PACKET, libc::PACKET_FANOUT, &arg, CALL).map_err(|e| {
        let g = fanout.group_id;
        let detail = match e.raw_os_error() {
            Some(libc::EINVAL) => {
                format!("group {g} exists with another mode, flags, interface or protocol")
            }
            Some(libc::EALREADY) => "the socket is already in a fanout group".to_owned(),
            Some(libc::ENOSPC) => format!("group {g} is full"),
            _ => format!("group {g}"),
        };
        SysError::call_with(CALL, ifname, detail, e)
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::syscall::fake::Fake;
    use crate::tpacket::build;

    fn cfg() -> RxRingConfig {
        RxRingConfig {
            block_size: 4 * page_size() as u32,
            block_count: 4,
            retire_tov_ms: 10,
            filter: bpf::accept_all(64),
            fanout: Some(Fanout {
                group_id: 7,
                mode: FanoutMode::Hash,
                defrag: true,
            }),
            hw_timestamps: false,
            fill_rxhash: true,
            promiscuous: false,
        }
    }

    #[test]
    fn setup_follows_the_documented_order() {
        let fake = Fake::install();
        let ring = RxRing::open("eth9", &cfg()).unwrap();
        assert_eq!(
            fake.calls(),
            [
                "if_nametoindex",
                "socket(AF_PACKET)",
                "setsockopt(SO_ATTACH_FILTER)",
                "setsockopt(PACKET_VERSION)",
                "setsockopt(PACKET_RX_RING)",
                "mmap(MAP_SHARED|MAP_LOCKED)",
                "bind(AF_PACKET)",
                "setsockopt(PACKET_FANOUT)",
            ]
        );
        assert_eq!(ring.ring_bytes(), 16 * page_size());
        assert_eq!(ring.ifindex(), 7);
        assert!(!ring.hw_timestamps());
    }

    #[test]
    fn hw_timestamps_come_between_version_and_ring_and_fall_back_silently() {
        let fake = Fake::install();
        let c = RxRingConfig {
            hw_timestamps: true,
            fanout: None,
            filter: vec![],
            ..cfg()
        };
        let ring = RxRing::open("eth9", &c).unwrap();
        assert!(ring.hw_timestamps());
        assert_eq!(
            fake.calls()[1..5],
            [
                "socket(AF_PACKET)",
                "setsockopt(PACKET_VERSION)",
                "ioctl(SIOCSHWTSTAMP)",
                "setsockopt(PACKET_TIMESTAMP)",
            ]
        );
        drop(ring);
        let fake = Fake::install();
        fake.fail("ioctl(SIOCSHWTSTAMP)", libc::EOPNOTSUPP);
        let ring = RxRing::open("eth9", &c).unwrap();
        assert!(!ring.hw_timestamps());
        assert!(!fake.calls().contains(&"setsockopt(PACKET_TIMESTAMP)"));
    }

    #[test]
    fn any_binds_every_interface_without_promiscuous_mode_or_hw_timestamps() {
        let fake = Fake::install();
        let c = RxRingConfig {
            hw_timestamps: true,
            promiscuous: true,
            ..cfg()
        };
        let ring = RxRing::open(ANY, &c).unwrap();
        assert_eq!(
            fake.calls(),
            [
                "socket(AF_PACKET)",
                "setsockopt(SO_ATTACH_FILTER)",
                "setsockopt(PACKET_VERSION)",
                "setsockopt(PACKET_RX_RING)",
                "mmap(MAP_SHARED|MAP_LOCKED)",
                "bind(AF_PACKET)",
                "setsockopt(PACKET_FANOUT)",
            ]
        );
        assert_eq!(
            (ring.ifindex(), ring.cooked(), ring.hw_timestamps()),
            (0, true, false)
        );
    }

    #[test]
    fn eperm_on_socket_says_what_is_needed() {
        let fake = Fake::install();
        fake.fail("socket(AF_PACKET)", libc::EPERM);
        let err = RxRing::open("eth9", &cfg()).unwrap_err();
        assert!(err.is_permission());
        assert_eq!(
            err.to_string(),
            "socket(AF_PACKET) on eth9 failed: needs root or CAP_NET_RAW (Operation not permitted)"
        );
        assert_eq!(fake.calls(), ["if_nametoindex", "socket(AF_PACKET)"]);
    }

    #[test]
    fn unknown_interface_is_named() {
        let fake = Fake::install();
        fake.fail("if_nametoindex", libc::ENODEV);
        let err = RxRing::open("nope0", &cfg()).unwrap_err();
        assert_eq!(err.to_string(), "no such interface: nope0");
        assert_eq!(fake.calls(), ["if_nametoindex"]);
    }

    #[test]
    fn bad_sizes_are_refused_before_any_syscall() {
        let fake = Fake::install();
        let page = page_size() as u32;
        let cases = [
            (
                RxRingConfig {
                    block_size: 3000,
                    ..cfg()
                },
                "is not a multiple of the page size",
            ),
            (
                RxRingConfig {
                    block_size: 0,
                    ..cfg()
                },
                "is not a multiple of the page size",
            ),
            (
                RxRingConfig {
                    block_size: 3 * page,
                    ..cfg()
                },
                "is not a power-of-two multiple",
            ),
            (
                RxRingConfig {
                    block_size: 1 << 31,
                    ..cfg()
                },
                "over the kernel's limit",
            ),
            (
                RxRingConfig {
                    block_count: 0,
                    ..cfg()
                },
                "block count must be at least 1",
            ),
            (
                RxRingConfig {
                    block_size: 1 << 30,
                    block_count: u32::MAX,
                    ..cfg()
                },
                "physical memory",
            ),
            (
                RxRingConfig {
                    filter: vec![bpf::accept_all(1)[0]; 4097],
                    ..cfg()
                },
                "4097 instructions",
            ),
        ];
        for (c, want) in cases {
            let err = RxRing::open("eth0", &c).unwrap_err();
            let text = err.to_string();
            assert!(
                text.contains(want) && text.contains(" on eth0 failed: "),
                "{text}"
            );
            assert_eq!(err.errno(), Some(libc::EINVAL));
        }
        assert_eq!(
            RxRing::open(
                "eth0",
                &RxRingConfig {
                    block_size: 3000,
                    ..cfg()
                }
            )
            .unwrap_err()
            .to_string(),
            format!(
                "setsockopt(PACKET_RX_RING) on eth0 failed: block size 3000 is not a multiple of \
                 the page size {page} (Invalid argument)"
            )
        );
        assert!(fake.calls().is_empty(), "{:?}", fake.calls());
    }

    #[test]
    fn kernel_refusals_name_the_step_and_value() {
        let fake = Fake::install();
        fake.fail("setsockopt(PACKET_RX_RING)", libc::ENOMEM);
        let err = RxRing::open("eth9", &cfg()).unwrap_err().to_string();
        assert!(err.starts_with("setsockopt(PACKET_RX_RING) on eth9 failed: not enough kernel memory for 4 blocks of"), "{err}");
        let fake = Fake::install();
        fake.fail("setsockopt(PACKET_FANOUT)", libc::EINVAL);
        let err = RxRing::open("eth9", &cfg()).unwrap_err().to_string();
        assert!(err.contains("group 7 exists with another mode"), "{err}");
        drop(fake);
    }

    #[test]
    fn mmap_falls_back_without_map_locked() {
        let fake = Fake::install();
        fake.fail("mmap(MAP_SHARED|MAP_LOCKED)", libc::EPERM);
        RxRing::open("eth9", &cfg()).unwrap();
        let calls = fake.calls();
        let at = calls
            .iter()
            .position(|c| *c == "mmap(MAP_SHARED|MAP_LOCKED)")
            .unwrap();
        assert_eq!(calls[at + 1], "mmap(MAP_SHARED)");
        assert_eq!(calls[at + 2], "bind(AF_PACKET)");
    }

    /// Writes a block as the kernel would into the (fake, anonymous) ring memory.
    fn fill(ring: &RxRing, index: usize, block: &[u8]) {
        // SAFETY: test only: the block is kernel-owned (not lent out) and the fake "kernel" is
        // this thread; the copy stays inside the block.
        unsafe {
            std::ptr::copy_nonoverlapping(
                block.as_ptr(),
                ring.block_ptr(index).as_ptr(),
                block.len(),
            )
        };
    }

    #[test]
    fn blocks_are_lent_in_ring_order_and_handed_back_on_drop() {
        let _fake = Fake::install();
        let ring = RxRing::open("eth9", &cfg()).unwrap();
        let size = ring.block_size();
        assert!(ring.next_block(0, None).unwrap().is_none());
        assert!(ring.next_block(5, None).unwrap().is_none()); // fake poll times out
        let frame = [0xaa; 60];
        // Block 1 ready but block 0 not: nothing, order is strict.
        fill(
            &ring,
            1,
            &build::block(size, TP_STATUS_USER, 2, &[(&frame, 60, 1)]),
        );
        assert!(ring.next_block(0, None).unwrap().is_none());
        assert!(!ring.ready());
        assert_eq!(ring.wait(5, None).unwrap(), Wait::Nothing);
        fill(
            &ring,
            0,
            &build::block(
                size,
                TP_STATUS_USER | TP_STATUS_LOSING,
                1,
                &[(&frame, 60, 1), (&frame, 99, 2)],
            ),
        );
        // Ready, and a wait says so without taking it.
        assert!(ring.ready());
        assert_eq!(ring.wait(5, None).unwrap(), Wait::Ready);
        let b0 = ring.next_block(0, None).unwrap().unwrap();
        assert_eq!(
            (b0.index(), b0.seq_num(), b0.num_pkts(), b0.losing()),
            (0, 1, 2, true)
        );
        assert_eq!(b0.packets().map(|p| p.len).collect::<Vec<_>>(), [60, 99]);
        // Two blocks may be held at once, still in order.
        let b1 = ring.next_block(0, None).unwrap().unwrap();
        assert_eq!((b1.index(), b1.seq_num(), b1.losing()), (1, 2, false));
        drop(b0);
        assert_eq!(
            tpacket::block_status(ring_block(&ring, 0)),
            TP_STATUS_KERNEL
        );
        assert_eq!(tpacket::block_status(ring_block(&ring, 1)), TP_STATUS_USER);
        drop(b1);
        assert_eq!(
            tpacket::block_status(ring_block(&ring, 1)),
            TP_STATUS_KERNEL
        );
        assert!(ring.next_block(0, None).unwrap().is_none());
    }

    #[test]
    fn ring_fill_counts_the_blocks_handed_over_and_not_returned() {
        let _fake = Fake::install();
        let ring = RxRing::open("eth9", &cfg()).unwrap();
        let size = ring.block_size();
        let ready = |i| fill(&ring, i, &build::block(size, TP_STATUS_USER, 1, &[]));
        // Three of four handed over: the first taken sees all three.
        (0..3).for_each(ready);
        let b0 = ring.next_block(0, None).unwrap().unwrap();
        assert_eq!(b0.ring_fill(), 3);
        // Still lent out, block 0 counts while block 1 is taken.
        let b1 = ring.next_block(0, None).unwrap().unwrap();
        assert_eq!(b1.ring_fill(), 3);
        drop((b0, b1));
        // Block 3 handed over after the look: counted at the next look, not before.
        ready(3);
        let b2 = ring.next_block(0, None).unwrap().unwrap();
        assert_eq!(b2.ring_fill(), 1);
        drop(b2);
        // The next look wraps round to block 0, handed over again.
        ready(0);
        let b3 = ring.next_block(0, None).unwrap().unwrap();
        assert_eq!(b3.ring_fill(), 2);
        ready(1);
        let b0 = ring.next_block(0, None).unwrap().unwrap();
        assert_eq!((b0.index(), b0.ring_fill()), (0, 2));
        drop((b3, b0));
        // A full ring: every block handed over, then taken one by one.
        [2, 3, 0].into_iter().for_each(ready);
        let fills: Vec<(usize, usize)> = (0..4)
            .map(|_| {
                let b = ring.next_block(0, None).unwrap().unwrap();
                (b.index(), b.ring_fill())
            })
            .collect();
        assert_eq!(fills, [(1, 4), (2, 3), (3, 2), (0, 1)]);
    }

    #[test]
    fn wrapping_onto_a_held_block_is_an_error_not_an_alias() {
        let _fake = Fake::install();
        let ring = RxRing::open(
            "eth9",
            &RxRingConfig {
                block_count: 1,
                ..cfg()
            },
        )
        .unwrap();
        fill(
            &ring,
            0,
            &build::block(ring.block_size(), TP_STATUS_USER, 1, &[]),
        );
        let held = ring.next_block(0, None).unwrap().unwrap();
        let err = ring.next_block(0, None).unwrap_err();
        assert!(
            err.to_string().contains("block 0 of 1 is still held"),
            "{err}"
        );
        drop(held);
        assert!(ring.next_block(0, None).unwrap().is_none());
    }

    fn ring_block(ring: &RxRing, index: usize) -> &[u8] {
        // SAFETY: test only: reads a block of the fake ring while no Block borrows it mutably.
        unsafe { std::slice::from_raw_parts(ring.block_ptr(index).as_ptr(), ring.block_size()) }
    }

    #[test]
    fn ring_is_send() {
        fn send<T: Send>() {}
        send::<RxRing>();
    }
}
