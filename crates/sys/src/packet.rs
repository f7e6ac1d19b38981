//! Setup steps shared by the RX ring and the sender: one small named function per step.
#![allow(unsafe_code)]

use std::os::fd::{BorrowedFd, OwnedFd};

use crate::bpf;
use crate::mmap::Mapping;
use crate::{SysError, syscall};

/// The page size (`sysconf(_SC_PAGESIZE)`).
pub(crate) fn page_size() -> usize {
    // SAFETY: sysconf takes no pointers.
    match unsafe { libc::sysconf(libc::_SC_PAGESIZE) } {
        n if n > 0 => n as usize,
        _ => 4096,
    }
}

/// Physical memory in bytes, or `usize::MAX` if unknown.
pub(crate) fn phys_mem() -> usize {
    // SAFETY: sysconf takes no pointers.
    let pages = unsafe { libc::sysconf(libc::_SC_PHYS_PAGES) };
    usize::try_from(pages)
        .ok()
        .and_then(|p| p.checked_mul(page_size()))
        .unwrap_or(usize::MAX)
}

/// `socket(AF_PACKET, SOCK_RAW, 0)`: protocol 0, so nothing is queued before `bind`.
pub(crate) fn open_socket(ifname: &str) -> Result<OwnedFd, SysError> {
    open_socket_of(ifname, libc::SOCK_RAW)
}

/// `socket(AF_PACKET, ty, 0)`: `SOCK_RAW` gives packets from the link-layer header on,
/// `SOCK_DGRAM` from the network header on.
pub(crate) fn open_socket_of(ifname: &str, ty: libc::c_int) -> Result<OwnedFd, SysError> {
    const CALL: &str = "socket(AF_PACKET)";
    syscall::socket(libc::AF_PACKET, ty, 0, CALL).map_err(|e| SysError::call(CALL, ifname, e))
}

/// `PACKET_VERSION`: must precede the ring (the kernel answers `EBUSY` after).
#[doc(alias = "PACKET_VERSION")]
pub(crate) fn set_version(
    fd: BorrowedFd<'_>,
    ifname: &str,
    version: libc::tpacket_versions,
) -> Result<(), SysError> {
    const CALL: &str = "setsockopt(PACKET_VERSION)";
    let v = version as libc::c_int;
    syscall::setsockopt(fd, libc::SOL_PACKET, libc::PACKET_VERSION, &v, CALL)
        .map_err(|e| SysError::call_with(CALL, ifname, format!("TPACKET_V{}", v + 1), e))
}

/// `mmap` of the socket's ring(s): `MAP_SHARED | MAP_LOCKED` if permitted (no page faults on
/// the packet path), otherwise `MAP_SHARED` alone.
pub(crate) fn map_ring(fd: BorrowedFd<'_>, ifname: &str, len: usize) -> Result<Mapping, SysError> {
    const LOCKED: &str = "mmap(MAP_SHARED|MAP_LOCKED)";
    const SHARED: &str = "mmap(MAP_SHARED)";
    let ptr = match syscall::mmap_ring(fd, len, libc::MAP_SHARED | libc::MAP_LOCKED, LOCKED) {
        Ok(p) => p,
        Err(e)
            if matches!(
                e.raw_os_error(),
                Some(libc::EPERM | libc::EAGAIN | libc::ENOMEM)
            ) =>
        {
            syscall::mmap_ring(fd, len, libc::MAP_SHARED, SHARED).map_err(|e| {
                SysError::call_with(SHARED, ifname, format!("ring of {len} bytes"), e)
            })?
        }
        Err(e) => {
            return Err(SysError::call_with(
                LOCKED,
                ifname,
                format!("ring of {len} bytes"),
                e,
            ));
        }
    };
    // SAFETY: `ptr` is the fresh mapping of `len` bytes just returned by mmap; only the
    // returned `Mapping` unmaps it.
    Ok(unsafe { Mapping::from_raw(ptr, len) })
}

/// `bind(sockaddr_ll { protocol, ifindex })`: from here on the socket sees (or sends on) the
/// interface.
/// `PACKET_ADD_MEMBERSHIP` with `PACKET_MR_PROMISC`: the interface is promiscuous while the
/// socket is open (the kernel counts members and drops the mode when the last one closes).
#[doc(alias("PACKET_ADD_MEMBERSHIP", "PACKET_MR_PROMISC"))]
pub(crate) fn add_promiscuous(
    fd: BorrowedFd<'_>,
    ifname: &str,
    ifindex: u32,
) -> Result<(), SysError> {
    const CALL: &str = "setsockopt(PACKET_ADD_MEMBERSHIP)";
    let mreq = libc::packet_mreq {
        mr_ifindex: ifindex as libc::c_int,
        mr_type: libc::PACKET_MR_PROMISC as u16,
        mr_alen: 0,
        mr_address: [0; 8],
    };
    syscall::setsockopt(
        fd,
        libc::SOL_PACKET,
        libc::PACKET_ADD_MEMBERSHIP,
        &mreq,
        CALL,
    )
    .map_err(|e| SysError::call(CALL, ifname, e))
}

pub(crate) fn bind_to(
    fd: BorrowedFd<'_>,
    ifname: &str,
    ifindex: u32,
    protocol: u16,
) -> Result<(), SysError> {
    const CALL: &str = "bind(AF_PACKET)";
    let addr = libc::sockaddr_ll {
        sll_family: libc::AF_PACKET as u16,
        sll_protocol: protocol.to_be(),
        sll_ifindex: ifindex as libc::c_int,
        sll_hatype: 0,
        sll_pkttype: 0,
        sll_halen: 0,
        sll_addr: [0; 8],
    };
    syscall::bind(fd, &addr, CALL).map_err(|e| match e.raw_os_error() {
        Some(libc::ENODEV | libc::ENXIO) => SysError::call_with(
            CALL,
            ifname,
            format!("interface index {ifindex} is gone"),
            e,
        ),
        _ => SysError::call(CALL, ifname, e),
    })
}

/// `SO_ATTACH_FILTER`.
#[doc(alias = "SO_ATTACH_FILTER")]
pub(crate) fn attach_filter(
    fd: BorrowedFd<'_>,
    ifname: &str,
    prog: &[bpf::Instruction],
) -> Result<(), SysError> {
    const CALL: &str = "setsockopt(SO_ATTACH_FILTER)";
    let fprog = libc::sock_fprog {
        len: prog.len() as u16,
        // The kernel only reads the program.
        filter: prog.as_ptr().cast_mut(),
    };
    syscall::setsockopt(fd, libc::SOL_SOCKET, libc::SO_ATTACH_FILTER, &fprog, CALL).map_err(|e| {
        let detail = match e.raw_os_error() {
            Some(libc::EINVAL) => {
                format!("the kernel rejected the {}-instruction program", prog.len())
            }
            _ => String::new(),
        };
        SysError::call_with(CALL, ifname, detail, e)
    })
}
