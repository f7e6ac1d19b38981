//! The one funnel for the syscalls that set sockets up (aya's `sys` idea).
//!
//! Every call carries a label (`"setsockopt(PACKET_RX_RING)"`) that names it in errors and lets
//! unit tests, through [`fake`], record the order of calls and inject an errno without root.
//! In non-test builds the funnel is a direct call into libc.
#![allow(unsafe_code)]

use std::ffi::CStr;
use std::io;
use std::mem::size_of;
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd};
use std::ptr::{self, NonNull};

fn check(ret: libc::c_int) -> io::Result<libc::c_int> {
    if ret < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(ret)
    }
}

macro_rules! intercept {
    ($call:expr, $fake:expr) => {
        #[cfg(not(test))]
        let _ = $call;
        #[cfg(test)]
        if let Some(result) = fake::intercept($call) {
            return result.and_then(|()| $fake);
        }
    };
}

/// `socket(domain, ty | SOCK_CLOEXEC, protocol)`.
pub(crate) fn socket(
    domain: libc::c_int,
    ty: libc::c_int,
    protocol: libc::c_int,
    call: &'static str,
) -> io::Result<OwnedFd> {
    intercept!(call, fake::dummy_fd());
    // SAFETY: socket() takes no pointers; the result is checked before use.
    let fd = check(unsafe { libc::socket(domain, ty | libc::SOCK_CLOEXEC, protocol) })?;
    // SAFETY: `fd` was just returned by socket(), is valid and owned by nobody else.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// `setsockopt(fd, level, name, value, sizeof value)`.
///
/// The kernel only reads `value` (and memory it points to, copying with fault checks), so a
/// plain `&T` is enough for soundness.
pub(crate) fn setsockopt<T>(
    fd: BorrowedFd<'_>,
    level: libc::c_int,
    name: libc::c_int,
    value: &T,
    call: &'static str,
) -> io::Result<()> {
    intercept!(call, Ok(()));
    // SAFETY: `value` is a live `T` of `size_of::<T>()` bytes for the duration of the call, and
    // the kernel only reads it.
    check(unsafe {
        libc::setsockopt(
            fd.as_raw_fd(),
            level,
            name,
            ptr::from_ref(value).cast(),
            size_of::<T>() as libc::socklen_t,
        )
    })
    .map(drop)
}

/// Plain-old-data the kernel may fill in: every bit pattern is a valid value.
///
/// # Safety
/// Implement only for `#[repr(C)]` integer-only structs and integers.
pub(crate) unsafe trait Pod: Copy {}
// SAFETY: three `c_uint`s.
unsafe impl Pod for libc::tpacket_stats_v3 {}
// SAFETY: an integer.
unsafe impl Pod for libc::c_int {}
// SAFETY: three integers (pid, uid, gid).
unsafe impl Pod for libc::ucred {}
// SAFETY: six `__u64`s.
unsafe impl Pod for libc::xdp_statistics {}
// SAFETY: sixteen `__u64`s (four `xdp_ring_offset`s).
unsafe impl Pod for libc::xdp_mmap_offsets {}
// SAFETY: one `__u32`.
unsafe impl Pod for libc::xdp_options {}
// SAFETY: integers (`SO_MEMINFO`'s counters).
unsafe impl Pod for [u32; 9] {}

/// `getsockopt(fd, level, name, out, sizeof out)`. Under the fake, `out` is left unchanged.
pub(crate) fn getsockopt<T: Pod>(
    fd: BorrowedFd<'_>,
    level: libc::c_int,
    name: libc::c_int,
    out: &mut T,
    call: &'static str,
) -> io::Result<()> {
    intercept!(call, Ok(()));
    let mut len = size_of::<T>() as libc::socklen_t;
    // SAFETY: `out` is a writable `T` of `len` bytes and `T: Pod`, so any bytes the kernel
    // writes (at most `len`) leave a valid `T`.
    check(unsafe {
        libc::getsockopt(
            fd.as_raw_fd(),
            level,
            name,
            ptr::from_mut(out).cast(),
            &mut len,
        )
    })
    .map(drop)
}

/// `bind(fd, addr)` for an IPv4 or IPv6 address.
pub(crate) fn bind_inet(
    fd: BorrowedFd<'_>,
    addr: std::net::SocketAddr,
    call: &'static str,
) -> io::Result<()> {
    intercept!(call, Ok(()));
    // SAFETY: sockaddr_storage is plain data; all-zero is a valid (AF_UNSPEC) value.
    let mut ss: libc::sockaddr_storage = unsafe { std::mem::zeroed() };
    let len = match addr {
        std::net::SocketAddr::V4(a) => {
            // SAFETY: sockaddr_storage is larger and more aligned than sockaddr_in.
            let sin: &mut libc::sockaddr_in = unsafe { &mut *ptr::from_mut(&mut ss).cast() };
            sin.sin_family = libc::AF_INET as libc::sa_family_t;
            sin.sin_port = a.port().to_be();
            sin.sin_addr.s_addr = u32::from(*a.ip()).to_be();
            size_of::<libc::sockaddr_in>()
        }
        std::net::SocketAddr::V6(a) => {
            // SAFETY: sockaddr_storage is larger and more aligned than sockaddr_in6.
            let sin6: &mut libc::sockaddr_in6 = unsafe { &mut *ptr::from_mut(&mut ss).cast() };
            sin6.sin6_family = libc::AF_INET6 as libc::sa_family_t;
            sin6.sin6_port = a.port().to_be();
            sin6.sin6_addr.s6_addr = a.ip().octets();
            sin6.sin6_flowinfo = a.flowinfo();
            sin6.sin6_scope_id = a.scope_id();
            size_of::<libc::sockaddr_in6>()
        }
    };
    // SAFETY: `ss` holds a valid sockaddr of `len` bytes, live for the call; the kernel only
    // reads it.
    check(unsafe {
        libc::bind(
            fd.as_raw_fd(),
            ptr::from_ref(&ss).cast(),
            len as libc::socklen_t,
        )
    })
    .map(drop)
}

/// `geteuid()`.
pub(crate) fn geteuid() -> u32 {
    // SAFETY: geteuid has no arguments and cannot fail.
    unsafe { libc::geteuid() }
}

/// `shutdown(fd, SHUT_RDWR)`.
pub(crate) fn shutdown(fd: BorrowedFd<'_>, call: &'static str) -> io::Result<()> {
    intercept!(call, Ok(()));
    // SAFETY: shutdown on a borrowed, open descriptor; no memory is passed.
    check(unsafe { libc::shutdown(fd.as_raw_fd(), libc::SHUT_RDWR) }).map(drop)
}

/// A socket address `bind` takes as it is: a packet socket's or an AF_XDP socket's.
pub(crate) trait SockAddr {}
impl SockAddr for libc::sockaddr_ll {}
impl SockAddr for libc::sockaddr_xdp {}

/// `bind(fd, addr)` for a `sockaddr_ll` or `sockaddr_xdp`.
pub(crate) fn bind<A: SockAddr>(
    fd: BorrowedFd<'_>,
    addr: &A,
    call: &'static str,
) -> io::Result<()> {
    intercept!(call, Ok(()));
    // SAFETY: `addr` is a live socket address of one of the kinds above and the length passed
    // is its size.
    check(unsafe {
        libc::bind(
            fd.as_raw_fd(),
            ptr::from_ref(addr).cast(),
            size_of::<A>() as libc::socklen_t,
        )
    })
    .map(drop)
}

/// `bpf(cmd, attr, size_of::<T>())`: returns the kernel's non-negative answer (a new
/// descriptor for the commands that make one, else 0).
///
/// # Safety
/// `attr` must be the `union bpf_attr` member for `cmd`, `#[repr(C)]` with the kernel's
/// layout, and every pointer in it must be valid for what the kernel reads or writes through
/// it during the call.
pub(crate) unsafe fn bpf<T>(cmd: libc::c_int, attr: &mut T, call: &'static str) -> io::Result<i32> {
    intercept!(call, Ok(0));
    // SAFETY: by the caller's contract `attr` and what it points to are valid for `cmd`;
    // the size passed is `T`'s.
    let r = unsafe {
        libc::syscall(
            libc::SYS_bpf,
            cmd,
            ptr::from_mut(attr),
            size_of::<T>() as libc::c_uint,
        )
    };
    if r < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(r as i32)
    }
}

/// `mmap(NULL, len, prot, MAP_SHARED|MAP_POPULATE, fd, offset)` of one of an AF_XDP socket's
/// rings or a BPF ring buffer. Under the fake, zeroed anonymous memory of the same length.
pub(crate) fn mmap_at(
    fd: BorrowedFd<'_>,
    len: usize,
    prot: libc::c_int,
    offset: u64,
    call: &'static str,
) -> io::Result<NonNull<u8>> {
    intercept!(call, crate::mmap::anonymous(len));
    // SAFETY: a fresh mapping chosen by the kernel (addr NULL) overlaps no Rust object; the
    // result is checked against MAP_FAILED before use.
    let p = unsafe {
        libc::mmap(
            ptr::null_mut(),
            len,
            prot,
            libc::MAP_SHARED | libc::MAP_POPULATE,
            fd.as_raw_fd(),
            offset as libc::off_t,
        )
    };
    if p == libc::MAP_FAILED {
        return Err(io::Error::last_os_error());
    }
    NonNull::new(p.cast()).ok_or_else(|| io::Error::from_raw_os_error(libc::EFAULT))
}

/// `mmap(NULL, len, PROT_READ|PROT_WRITE, flags, fd, 0)` of a packet socket's rings. Under the
/// fake, zeroed anonymous memory of the same length.
pub(crate) fn mmap_ring(
    fd: BorrowedFd<'_>,
    len: usize,
    flags: libc::c_int,
    call: &'static str,
) -> io::Result<NonNull<u8>> {
    intercept!(call, crate::mmap::anonymous(len));
    // SAFETY: a fresh mapping chosen by the kernel (addr NULL) overlaps no Rust object; the
    // result is checked against MAP_FAILED before use.
    let p = unsafe {
        libc::mmap(
            ptr::null_mut(),
            len,
            libc::PROT_READ | libc::PROT_WRITE,
            flags,
            fd.as_raw_fd(),
            0,
        )
    };
    if p == libc::MAP_FAILED {
        return Err(io::Error::last_os_error());
    }
    NonNull::new(p.cast()).ok_or_else(|| io::Error::from_raw_os_error(libc::EFAULT))
}

/// `poll()` on `fd` for `events`, and on `wake` (if given) for `POLLIN`, up to `timeout_ms`.
/// Returns `fd`'s `revents` (0 on timeout, on EINTR, or when only `wake` is ready). The fake
/// always times out.
pub(crate) fn poll(
    fd: BorrowedFd<'_>,
    events: libc::c_short,
    wake: Option<BorrowedFd<'_>>,
    timeout_ms: i32,
    call: &'static str,
) -> io::Result<libc::c_short> {
    intercept!(call, Ok(0));
    let mut pfds = [fd, wake.unwrap_or(fd)].map(|f| libc::pollfd {
        fd: f.as_raw_fd(),
        events: libc::POLLIN,
        revents: 0,
    });
    pfds[0].events = events;
    let n = if wake.is_some() { 2 } else { 1 };
    // SAFETY: `n` valid pollfds in `pfds`.
    match check(unsafe { libc::poll(pfds.as_mut_ptr(), n, timeout_ms) }) {
        Ok(0) => Ok(0),
        Ok(_) => Ok(pfds[0].revents),
        Err(e) if e.raw_os_error() == Some(libc::EINTR) => Ok(0),
        Err(e) => Err(e),
    }
}

/// `sendto(fd, NULL, 0, MSG_DONTWAIT, NULL, 0)`: asks the kernel to send what an AF_XDP
/// socket's TX ring holds. `EAGAIN` means it stopped after a batch with more to send.
pub(crate) fn kick_tx(fd: BorrowedFd<'_>, call: &'static str) -> io::Result<()> {
    intercept!(call, Ok(()));
    // SAFETY: no buffer and no address: the kernel reads nothing from us.
    let r = unsafe {
        libc::sendto(
            fd.as_raw_fd(),
            ptr::null(),
            0,
            libc::MSG_DONTWAIT,
            ptr::null(),
            0,
        )
    };
    if r < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(())
    }
}

/// `sendmmsg(fd, frames, 0)`: each of the first [`SENDMMSG_MAX`] frames one message on the
/// bound socket (no address). Returns how many the kernel took, from the first.
pub(crate) fn sendmmsg_frames(
    fd: BorrowedFd<'_>,
    frames: &[&[u8]],
    call: &'static str,
) -> io::Result<usize> {
    use std::mem::MaybeUninit;
    intercept!(call, Ok(frames.len().min(SENDMMSG_MAX)));
    let n = frames.len().min(SENDMMSG_MAX);
    let mut iov = [const { MaybeUninit::<libc::iovec>::uninit() }; SENDMMSG_MAX];
    let mut hdr = [const { MaybeUninit::<libc::mmsghdr>::uninit() }; SENDMMSG_MAX];
    for i in 0..n {
        let v = iov[i].write(libc::iovec {
            iov_base: frames[i].as_ptr().cast_mut().cast(),
            iov_len: frames[i].len(),
        });
        // SAFETY: mmsghdr is a plain C struct for which all-zero is valid (no name, no
        // control data, no flags).
        let mut h: libc::mmsghdr = unsafe { std::mem::zeroed() };
        h.msg_hdr.msg_iov = v;
        h.msg_hdr.msg_iovlen = 1;
        hdr[i].write(h);
    }
    // SAFETY: `hdr[..n]` are initialised, each pointing at its initialised iovec in `iov`,
    // each at a live borrowed frame; all outlive the call. The kernel reads them and writes
    // only `msg_len` inside `hdr[..n]`.
    let r = unsafe {
        libc::sendmmsg(
            fd.as_raw_fd(),
            hdr.as_mut_ptr().cast(),
            n as libc::c_uint,
            0,
        )
    };
    if r < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(r as usize)
    }
}

/// The most frames [`sendmmsg_frames`] passes in one call.
pub(crate) const SENDMMSG_MAX: usize = 256;

/// An `ifreq` for `name`, or `ENODEV` if the name does not fit.
fn ifreq(name: &str) -> io::Result<libc::ifreq> {
    // SAFETY: ifreq is plain old data (a name array and a union of integers, sockaddrs and a
    // pointer), for which all-zero bytes are a valid value.
    let mut req: libc::ifreq = unsafe { std::mem::zeroed() };
    if name.is_empty() || name.len() >= req.ifr_name.len() || name.contains('\0') {
        return Err(io::Error::from_raw_os_error(libc::ENODEV));
    }
    for (dst, src) in req.ifr_name.iter_mut().zip(name.bytes()) {
        *dst = src as libc::c_char;
    }
    Ok(req)
}

/// `ioctl(fd, SIOCSHWTSTAMP)` asking the NIC for raw hardware stamps on every received packet.
pub(crate) fn ioctl_hwtstamp(
    fd: BorrowedFd<'_>,
    ifname: &str,
    call: &'static str,
) -> io::Result<()> {
    intercept!(call, Ok(()));
    let mut cfg = libc::hwtstamp_config {
        flags: 0,
        tx_type: libc::HWTSTAMP_TX_OFF as libc::c_int,
        rx_filter: libc::HWTSTAMP_FILTER_ALL as libc::c_int,
    };
    let mut req = ifreq(ifname)?;
    req.ifr_ifru.ifru_data = ptr::from_mut(&mut cfg).cast();
    // SAFETY: `req` is a valid ifreq whose data pointer refers to `cfg`, which outlives the call.
    check(unsafe { libc::ioctl(fd.as_raw_fd(), libc::SIOCSHWTSTAMP as _, &mut req) }).map(drop)
}

/// `ioctl(request)` with an `ifreq` for `ifname` on a fresh AF_INET datagram socket (which works
/// in the calling thread's namespace); returns the `ifreq` as the kernel left it.
fn ifreq_query(ifname: &str, request: libc::c_ulong) -> io::Result<libc::ifreq> {
    let mut req = ifreq(ifname)?;
    // SAFETY: socket() takes no pointers; the result is checked.
    let fd =
        check(unsafe { libc::socket(libc::AF_INET, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0) })?;
    // SAFETY: `fd` was just returned by socket() and is owned only here.
    let fd = unsafe { OwnedFd::from_raw_fd(fd) };
    // SAFETY: `req` is a valid ifreq the kernel fills in; the requests used here (SIOCGIF*) read
    // and write nothing beyond it.
    check(unsafe { libc::ioctl(fd.as_raw_fd(), request as _, &mut req) })?;
    Ok(req)
}

/// The MTU of `ifname` by `ioctl(SIOCGIFMTU)` (works in the calling thread's namespace).
pub(crate) fn if_mtu(ifname: &str, call: &'static str) -> io::Result<u32> {
    intercept!(call, Ok(1500));
    let req = ifreq_query(ifname, libc::SIOCGIFMTU)?;
    // SAFETY: SIOCGIFMTU succeeded, so the kernel wrote `ifru_mtu`.
    let mtu = unsafe { req.ifr_ifru.ifru_mtu };
    u32::try_from(mtu).map_err(|_| io::Error::from_raw_os_error(libc::EINVAL))
}

/// The `IFF_*` flags of `ifname` by `ioctl(SIOCGIFFLAGS)`. The fake answers up and running.
pub(crate) fn if_flags(ifname: &str, call: &'static str) -> io::Result<u32> {
    intercept!(call, Ok((libc::IFF_UP | libc::IFF_RUNNING) as u32));
    let req = ifreq_query(ifname, libc::SIOCGIFFLAGS)?;
    // SAFETY: SIOCGIFFLAGS succeeded, so the kernel wrote `ifru_flags`.
    let flags = unsafe { req.ifr_ifru.ifru_flags };
    // The flags are a 16-bit field; reinterpret, don't sign-extend (IFF_DYNAMIC is bit 15).
    Ok(u32::from(flags as u16))
}

/// `ioctl(fd, SIOCETHTOOL)` on `ifname`, the `ifreq`'s data pointing at `cmd`, whose first `u32`
/// is the `ETHTOOL_*` command. Returns the ioctl's result, which is not always 0:
/// `ETHTOOL_SFEATURES` answers with `ETHTOOL_F_*` flags. Under the fake, `cmd` is left unchanged
/// and the result is 0.
///
/// # Safety
/// `cmd` must point to writable memory, valid for the whole call, at least as large as what the
/// kernel reads and writes for the command it holds: the command's struct plus the trailing
/// array its header announces.
pub(crate) unsafe fn ioctl_ethtool(
    fd: BorrowedFd<'_>,
    ifname: &str,
    cmd: *mut libc::c_void,
    call: &'static str,
) -> io::Result<libc::c_int> {
    intercept!(call, Ok(0));
    let mut req = ifreq(ifname)?;
    req.ifr_ifru.ifru_data = cmd.cast();
    // SAFETY: `req` is a valid ifreq; its data pointer refers to memory the caller guarantees is
    // large enough for the command (see above) and alive for the call.
    check(unsafe { libc::ioctl(fd.as_raw_fd(), libc::SIOCETHTOOL as _, &mut req) })
}

/// `if_nametoindex(name)`; 0 from libc becomes the errno it set.
pub(crate) fn if_nametoindex(name: &CStr, call: &'static str) -> io::Result<u32> {
    intercept!(call, Ok(7));
    // SAFETY: `name` is a valid NUL-terminated string.
    match unsafe { libc::if_nametoindex(name.as_ptr()) } {
        0 => {
            let e = io::Error::last_os_error();
            Err(if e.raw_os_error() == Some(0) {
                io::Error::from_raw_os_error(libc::ENODEV)
            } else {
                e
            })
        }
        index => Ok(index),
    }
}

/// The number of threads of this process (the entries of `/proc/self/task`). The fake
/// answers one.
pub(crate) fn threads(call: &'static str) -> io::Result<usize> {
    intercept!(call, Ok(1));
    Ok(std::fs::read_dir("/proc/self/task")?.count())
}

/// `prctl(option, arg, 0, 0, 0)`: the unused arguments are passed as zero, which some options
/// (`PR_SET_NO_NEW_PRIVS`) require.
pub(crate) fn prctl(option: libc::c_int, arg: libc::c_ulong, call: &'static str) -> io::Result<()> {
    intercept!(call, Ok(()));
    // SAFETY: the options used here take integers only, no pointers; all four are passed.
    check(unsafe {
        libc::prctl(
            option,
            arg,
            0 as libc::c_ulong,
            0 as libc::c_ulong,
            0 as libc::c_ulong,
        )
    })
    .map(drop)
}

/// `setgroups(groups)`: glibc sets the supplementary groups of every thread of the process.
pub(crate) fn setgroups(groups: &[libc::gid_t], call: &'static str) -> io::Result<()> {
    intercept!(call, Ok(()));
    // SAFETY: `groups` is a live slice of `groups.len()` gids; the kernel only reads it.
    check(unsafe { libc::setgroups(groups.len(), groups.as_ptr()) }).map(drop)
}

/// `setresgid(gid, gid, gid)`: glibc changes every thread of the process.
pub(crate) fn setresgid(gid: libc::gid_t, call: &'static str) -> io::Result<()> {
    intercept!(call, Ok(()));
    // SAFETY: integers only.
    check(unsafe { libc::setresgid(gid, gid, gid) }).map(drop)
}

/// `setresuid(uid, uid, uid)`: glibc changes every thread of the process.
pub(crate) fn setresuid(uid: libc::uid_t, call: &'static str) -> io::Result<()> {
    intercept!(call, Ok(()));
    // SAFETY: integers only.
    check(unsafe { libc::setresuid(uid, uid, uid) }).map(drop)
}

/// `capset()` with every set (effective, permitted, inheritable) of the calling thread empty;
/// the ambient set empties with them.
pub(crate) fn capset_empty(call: &'static str) -> io::Result<()> {
    intercept!(call, Ok(()));
    /// `struct __user_cap_header_struct`.
    #[repr(C)]
    struct Header {
        version: u32,
        pid: libc::c_int,
    }
    /// `struct __user_cap_data_struct`.
    #[repr(C)]
    struct Data {
        effective: u32,
        permitted: u32,
        inheritable: u32,
    }
    const LINUX_CAPABILITY_VERSION_3: u32 = 0x2008_0522;
    let header = Header {
        version: LINUX_CAPABILITY_VERSION_3,
        pid: 0,
    };
    // Version 3 takes two words per set: capabilities 0-31, then 32-63.
    let data = [0, 1].map(|_| Data {
        effective: 0,
        permitted: 0,
        inheritable: 0,
    });
    // SAFETY: `header` is a version-3 header for the calling thread (pid 0) and `data` the two
    // data structs version 3 reads; both outlive the call, which only reads them.
    let r = unsafe { libc::syscall(libc::SYS_capset, ptr::from_ref(&header), data.as_ptr()) };
    if r < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(())
    }
}

/// A test double for the funnel: records every call's label and fails chosen ones.
#[cfg(test)]
pub(crate) mod fake {
    use std::cell::RefCell;
    use std::io;
    use std::os::fd::OwnedFd;

    #[derive(Default)]
    struct State {
        calls: Vec<&'static str>,
        fail: Vec<(&'static str, i32)>,
    }

    thread_local! {
        static STATE: RefCell<Option<State>> = const { RefCell::new(None) };
    }

    /// While alive, funnel calls on this thread go to the fake.
    pub(crate) struct Fake(());

    impl Fake {
        pub(crate) fn install() -> Fake {
            STATE.with(|s| *s.borrow_mut() = Some(State::default()));
            Fake(())
        }

        /// Every later call labelled `call` fails with `errno`.
        pub(crate) fn fail(&self, call: &'static str, errno: i32) {
            STATE.with(|s| s.borrow_mut().as_mut().unwrap().fail.push((call, errno)));
        }

        /// The labels of the calls made so far, in order.
        pub(crate) fn calls(&self) -> Vec<&'static str> {
            STATE.with(|s| s.borrow().as_ref().unwrap().calls.clone())
        }
    }

    impl Drop for Fake {
        fn drop(&mut self) {
            STATE.with(|s| *s.borrow_mut() = None);
        }
    }

    pub(super) fn intercept(call: &'static str) -> Option<io::Result<()>> {
        STATE.with(|s| {
            let mut s = s.borrow_mut();
            let s = s.as_mut()?;
            s.calls.push(call);
            match s.fail.iter().find(|(c, _)| *c == call) {
                Some(&(_, errno)) => Some(Err(io::Error::from_raw_os_error(errno))),
                None => Some(Ok(())),
            }
        })
    }

    /// A real descriptor (on /dev/null) so `OwnedFd`'s close stays honest.
    pub(super) fn dummy_fd() -> io::Result<OwnedFd> {
        Ok(std::fs::File::open("/dev/null")?.into())
    }
}
