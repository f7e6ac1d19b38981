//! UDP sockets for header forwarding and flow export: batched sends (`sendmmsg`, equal
//! datagrams as segmented runs) on a connected, non-blocking socket, the network's refusals of
//! sent datagrams (`IP_RECVERR`), batched receives (`recvmmsg`) into one reusable buffer,
//! receive-buffer sizing and the route's MTU (`IP_MTU`).
//!
//! Plain socket setup (socket, bind, connect, non-blocking, timeouts) goes through
//! `std::net::UdpSocket`; only the calls std does not offer are made here.
#![allow(unsafe_code)]

use std::io;
use std::mem::{size_of, zeroed};
use std::net::{Ipv4Addr, Ipv6Addr, SocketAddr, SocketAddrV4, SocketAddrV6};
use std::os::fd::{AsFd, AsRawFd};
use std::ptr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use crate::{SysError, syscall};

/// Messages handed to the kernel in one `sendmmsg` / `recvmmsg` call.
pub const MMSG_BATCH: usize = 64;

/// Datagrams handed to the kernel in one `sendmmsg` (the iovecs of all its runs).
const SEND_IOVS: usize = 256;

/// Most datagrams in one segmented send (the kernel's `UDP_MAX_SEGMENTS`, 64 before Linux 6.10).
const SEGMENTS_MAX: usize = 64;

/// Most payload bytes in one segmented send: the packet the kernel cuts up must itself be a
/// valid IP packet (64 KiB less the IPv6 and UDP headers).
const SEGMENT_BYTES_MAX: usize = 65_535 - 40 - 8;

/// A control message carrying `UDP_SEGMENT`: the size of each datagram of a run.
#[repr(C)]
struct SegmentCmsg {
    hdr: libc::cmsghdr,
    size: u16,
    _pad: [u8; 6],
}

/// `CMSG_LEN(sizeof(u16))`: the header and the 2-byte size, without the trailing padding.
const CMSG_SEGMENT_LEN: usize = size_of::<libc::cmsghdr>() + size_of::<u16>();

/// How many datagrams from the start of `msgs` go as one segmented send: the first and those
/// of its size after it, plus at most one shorter datagram to end the run, within the kernel's
/// limits and `room` iovecs. 1 means a plain send.
fn segment_run<B: AsRef<[u8]>>(msgs: &[B], room: usize) -> usize {
    let size = msgs[0].as_ref().len();
    let (mut run, mut total) = (1, size);
    for m in &msgs[1..msgs.len().min(room.min(SEGMENTS_MAX))] {
        let len = m.as_ref().len();
        if len == 0 || len > size || total + len > SEGMENT_BYTES_MAX {
            break;
        }
        run += 1;
        total += len;
        if len < size {
            break;
        }
    }
    run
}

/// Receive slot per datagram: any UDP payload fits (IPv6 without jumbograms: 65527 bytes).
pub const RECV_SLOT: usize = 65_536;

/// A UDP socket.
#[derive(Debug)]
pub struct UdpSocket {
    sock: std::net::UdpSocket,
    name: String,
    /// Whether runs of equal datagrams go as one segmented send (`UDP_SEGMENT`).
    segment: AtomicBool,
}

/// What one [`UdpSocket::send_batch`] did.
#[derive(Debug)]
pub struct SendOutcome {
    /// Datagrams the kernel took, from the start of the slice.
    pub sent: usize,
    /// Why the datagram at index `sent` was refused, if one was.
    pub error: Option<io::Error>,
}

/// What [`UdpSocket::take_refusals`] found on the error queue.
#[derive(Debug, Default)]
pub struct Refusals {
    /// Datagrams sent earlier that the network reported undelivered (an ICMP or ICMPv6 error:
    /// port unreachable when nothing listens, host unreachable, time exceeded, ...).
    pub datagrams: u64,
    /// The first one's error (`ECONNREFUSED` for port unreachable).
    pub first: Option<io::Error>,
}

/// Control room for one queued error: the extended error and the offender's address.
const ERRQUEUE_CONTROL: usize = 256;

fn err(call: &'static str, what: &str, e: io::Error) -> SysError {
    SysError::call_with(call, what, "", e)
}

impl UdpSocket {
    /// A socket bound to `addr` (port 0 picks one), blocking.
    pub fn bind(addr: SocketAddr) -> Result<UdpSocket, SysError> {
        let name = addr.to_string();
        let sock = std::net::UdpSocket::bind(addr).map_err(|e| err("bind(UDP)", &name, e))?;
        Ok(UdpSocket {
            sock,
            name,
            segment: AtomicBool::new(true),
        })
    }

    /// A socket bound to `addr` that shares its port with the other sockets bound to it this
    /// way (`SO_REUSEPORT`), blocking. The kernel spreads the datagrams over the group by a hash
    /// of each sender's address and port, so one sender's datagrams always reach one socket.
    #[doc(alias = "SO_REUSEPORT")]
    pub fn bind_shared(addr: SocketAddr) -> Result<UdpSocket, SysError> {
        let name = addr.to_string();
        let domain = if addr.is_ipv4() {
            libc::AF_INET
        } else {
            libc::AF_INET6
        };
        const SOCKET: &str = "socket(UDP)";
        const REUSE: &str = "setsockopt(SO_REUSEPORT)";
        const BIND: &str = "bind(UDP)";
        let fd = syscall::socket(domain, libc::SOCK_DGRAM, 0, SOCKET)
            .map_err(|e| err(SOCKET, &name, e))?;
        syscall::setsockopt(fd.as_fd(), libc::SOL_SOCKET, libc::SO_REUSEPORT, &1, REUSE)
            .map_err(|e| err(REUSE, &name, e))?;
        syscall::bind_inet(fd.as_fd(), addr, BIND).map_err(|e| err(BIND, &name, e))?;
        Ok(UdpSocket {
            sock: std::net::UdpSocket::from(fd),
            name,
            segment: AtomicBool::new(true),
        })
    }

    /// Datagrams the kernel dropped on their way into this socket since it opened (its
    /// receive buffer was full): the counter `SO_RXQ_OVFL` reports with each datagram, read at
    /// any time with `SO_MEMINFO`. It wraps at 2^32.
    #[doc(alias = "SO_RXQ_OVFL")]
    #[doc(alias = "SO_MEMINFO")]
    pub fn drops(&self) -> Result<u32, SysError> {
        const CALL: &str = "getsockopt(SO_MEMINFO)";
        let mut info = [0u32; 9];
        syscall::getsockopt(
            self.sock.as_fd(),
            libc::SOL_SOCKET,
            libc::SO_MEMINFO,
            &mut info,
            CALL,
        )
        .map_err(|e| err(CALL, &self.name, e))?;
        Ok(info[libc::SK_MEMINFO_DROPS as usize])
    }

    /// A non-blocking socket connected to `dest` (bound to an ephemeral port of the routed
    /// source address). Sends never wait: a full buffer is an error the caller counts.
    pub fn connect(dest: SocketAddr) -> Result<UdpSocket, SysError> {
        let name = dest.to_string();
        let any: SocketAddr = match dest {
            SocketAddr::V4(_) => (Ipv4Addr::UNSPECIFIED, 0).into(),
            SocketAddr::V6(_) => (Ipv6Addr::UNSPECIFIED, 0).into(),
        };
        let sock = std::net::UdpSocket::bind(any).map_err(|e| err("bind(UDP)", &name, e))?;
        sock.connect(dest)
            .map_err(|e| err("connect(UDP)", &name, e))?;
        sock.set_nonblocking(true)
            .map_err(|e| err("fcntl(O_NONBLOCK)", &name, e))?;
        Ok(UdpSocket {
            sock,
            name,
            segment: AtomicBool::new(true),
        })
    }

    /// The local address.
    pub fn local_addr(&self) -> Result<SocketAddr, SysError> {
        self.sock
            .local_addr()
            .map_err(|e| err("getsockname", &self.name, e))
    }

    /// How long a blocking receive waits before returning nothing.
    pub fn set_read_timeout(&self, d: Duration) -> Result<(), SysError> {
        self.sock
            .set_read_timeout(Some(d))
            .map_err(|e| err("setsockopt(SO_RCVTIMEO)", &self.name, e))
    }

    /// Asks for a receive buffer of `bytes` (`SO_RCVBUFFORCE` past `rmem_max` when privileged,
    /// else `SO_RCVBUF`, which the kernel caps); returns the size the kernel granted.
    #[doc(alias = "SO_RCVBUFFORCE")]
    pub fn set_rcvbuf(&self, bytes: usize) -> Result<usize, SysError> {
        self.set_buf(libc::SO_RCVBUFFORCE, libc::SO_RCVBUF, bytes, "SO_RCVBUF")
    }

    /// Asks for a send buffer of `bytes` (`SO_SNDBUFFORCE`, else `SO_SNDBUF`); returns the
    /// size granted.
    #[doc(alias = "SO_SNDBUFFORCE")]
    pub fn set_sndbuf(&self, bytes: usize) -> Result<usize, SysError> {
        self.set_buf(libc::SO_SNDBUFFORCE, libc::SO_SNDBUF, bytes, "SO_SNDBUF")
    }

    fn set_buf(
        &self,
        force: libc::c_int,
        plain: libc::c_int,
        bytes: usize,
        what: &'static str,
    ) -> Result<usize, SysError> {
        let v = libc::c_int::try_from(bytes / 2).unwrap_or(libc::c_int::MAX / 2);
        // The kernel doubles the value for its bookkeeping; ask for half.
        if self.setsockopt_int(libc::SOL_SOCKET, force, v).is_err() {
            self.setsockopt_int(libc::SOL_SOCKET, plain, v)
                .map_err(|e| err("setsockopt", &format!("{} ({what})", self.name), e))?;
        }
        let got = self
            .getsockopt_int(libc::SOL_SOCKET, plain)
            .map_err(|e| err("getsockopt", &format!("{} ({what})", self.name), e))?;
        Ok(usize::try_from(got).unwrap_or(0))
    }

    /// Queues every ICMP error about a datagram sent from this socket (`IP_RECVERR` /
    /// `IPV6_RECVERR`), one entry per datagram, for [`UdpSocket::take_refusals`] to count.
    /// Without it a connected socket keeps one pending error, which fails (and so hides) the
    /// next send, and many refusals collapse into one.
    #[doc(alias = "IP_RECVERR")]
    pub fn queue_refusals(&self) -> Result<(), SysError> {
        let (level, name) = if matches!(self.local_addr()?, SocketAddr::V6(_)) {
            (libc::IPPROTO_IPV6, libc::IPV6_RECVERR)
        } else {
            (libc::IPPROTO_IP, libc::IP_RECVERR)
        };
        self.setsockopt_int(level, name, 1)
            .map_err(|e| err("setsockopt(IP_RECVERR)", &self.name, e))
    }

    /// Reads the socket's error queue empty (`MSG_ERRQUEUE`, never waiting) and counts the
    /// datagrams the network refused; emptying it also clears the pending error, so the next
    /// send is not failed by an earlier datagram's. Errors the stack raised locally are left
    /// out: the send that met them already failed. Needs [`UdpSocket::queue_refusals`].
    #[doc(alias = "MSG_ERRQUEUE")]
    pub fn take_refusals(&self) -> Refusals {
        let mut found = Refusals::default();
        loop {
            let mut data = [0u8; 64];
            let mut control = [0u64; ERRQUEUE_CONTROL / 8];
            let mut iov = libc::iovec {
                iov_base: data.as_mut_ptr().cast(),
                iov_len: data.len(),
            };
            // SAFETY: msghdr is a plain C struct for which all-zero is valid.
            let mut h: libc::msghdr = unsafe { zeroed() };
            h.msg_iov = &mut iov;
            h.msg_iovlen = 1;
            h.msg_control = control.as_mut_ptr().cast();
            h.msg_controllen = ERRQUEUE_CONTROL as _;
            // SAFETY: `h` points at one iovec over `data` and at `control`, both live and
            // exclusively borrowed for the call; the kernel writes at most their lengths (and
            // the lengths and flags inside `h`).
            let n = unsafe {
                libc::recvmsg(
                    self.sock.as_raw_fd(),
                    &mut h,
                    libc::MSG_ERRQUEUE | libc::MSG_DONTWAIT,
                )
            };
            if n < 0 {
                if io::Error::last_os_error().raw_os_error() == Some(libc::EINTR) {
                    continue;
                }
                // EAGAIN: the queue is empty.
                return found;
            }
            // SAFETY: `h` was filled by the kernel: CMSG_FIRSTHDR and CMSG_NXTHDR stay within
            // `msg_controllen` bytes of `control` and return null past the last header.
            let mut c = unsafe { libc::CMSG_FIRSTHDR(&h) };
            while !c.is_null() {
                // SAFETY: `c` is a header the kernel wrote inside `control`.
                let hdr = unsafe { &*c };
                let extended = (hdr.cmsg_level == libc::SOL_IP
                    && hdr.cmsg_type == libc::IP_RECVERR)
                    || (hdr.cmsg_level == libc::SOL_IPV6 && hdr.cmsg_type == libc::IPV6_RECVERR);
                if extended {
                    // SAFETY: an IP(V6)_RECVERR message carries a sock_extended_err (and the
                    // offender's address after it); CMSG_DATA may be unaligned for it.
                    let ee: libc::sock_extended_err =
                        unsafe { ptr::read_unaligned(libc::CMSG_DATA(c).cast()) };
                    if matches!(
                        ee.ee_origin,
                        libc::SO_EE_ORIGIN_ICMP | libc::SO_EE_ORIGIN_ICMP6
                    ) {
                        found.datagrams += 1;
                        found.first.get_or_insert_with(|| {
                            io::Error::from_raw_os_error(ee.ee_errno as i32)
                        });
                    }
                }
                // SAFETY: as for CMSG_FIRSTHDR.
                c = unsafe { libc::CMSG_NXTHDR(&h, c) };
            }
        }
    }

    /// The MTU of the route to the connected peer (`IP_MTU` / `IPV6_MTU`).
    #[doc(alias = "IP_MTU")]
    pub fn path_mtu(&self) -> Result<u32, SysError> {
        let v6 = matches!(self.local_addr()?, SocketAddr::V6(_));
        let (level, name) = if v6 {
            (libc::IPPROTO_IPV6, libc::IPV6_MTU)
        } else {
            (libc::IPPROTO_IP, libc::IP_MTU)
        };
        let mtu = self
            .getsockopt_int(level, name)
            .map_err(|e| err("getsockopt(IP_MTU)", &self.name, e))?;
        u32::try_from(mtu).map_err(|_| {
            SysError::call_with(
                "getsockopt(IP_MTU)",
                &self.name,
                format!("negative MTU {mtu}"),
                io::Error::from_raw_os_error(libc::EINVAL),
            )
        })
    }

    fn setsockopt_int(
        &self,
        level: libc::c_int,
        name: libc::c_int,
        v: libc::c_int,
    ) -> io::Result<()> {
        // SAFETY: `v` is a live c_int and the length passed is its size; the kernel only reads it.
        let r = unsafe {
            libc::setsockopt(
                self.sock.as_raw_fd(),
                level,
                name,
                ptr::from_ref(&v).cast(),
                size_of::<libc::c_int>() as libc::socklen_t,
            )
        };
        if r < 0 {
            Err(io::Error::last_os_error())
        } else {
            Ok(())
        }
    }

    fn getsockopt_int(&self, level: libc::c_int, name: libc::c_int) -> io::Result<libc::c_int> {
        let mut v: libc::c_int = 0;
        let mut len = size_of::<libc::c_int>() as libc::socklen_t;
        // SAFETY: `v` is a writable c_int of `len` bytes; the kernel writes at most `len` bytes,
        // and any bit pattern is a valid c_int.
        let r = unsafe {
            libc::getsockopt(
                self.sock.as_raw_fd(),
                level,
                name,
                ptr::from_mut(&mut v).cast(),
                &mut len,
            )
        };
        if r < 0 {
            Err(io::Error::last_os_error())
        } else {
            Ok(v)
        }
    }

    /// Sends each of `msgs` as one datagram to the connected peer with as few `sendmmsg` calls
    /// as possible; stops at the first datagram the kernel refuses (`EAGAIN` when the send
    /// buffer is full, `ENOBUFS`, `ECONNREFUSED` after an ICMP port unreachable, ...).
    ///
    /// Runs of datagrams of one size (the last of a run may be shorter) go down the stack as
    /// one segmented send (`UDP_SEGMENT`, Linux 4.18): the kernel builds, routes and passes
    /// one large packet and cuts it into the datagrams at the device, or in software where the
    /// device cannot, so the per-datagram cost of the send path is paid once per run. The peer
    /// receives exactly the same datagrams. Where the route or device refuses (`EIO`, `EINVAL`),
    /// the socket falls back to one send per datagram for good.
    #[doc(alias = "sendmmsg")]
    #[doc(alias = "UDP_SEGMENT")]
    pub fn send_batch<B: AsRef<[u8]>>(&self, msgs: &[B]) -> SendOutcome {
        let mut sent = 0;
        while sent < msgs.len() {
            let segment = self.segment.load(Ordering::Relaxed);
            // SAFETY: iovec, mmsghdr and cmsghdr are plain C structs for which all-zero is
            // valid (null pointers, zero lengths).
            let mut iov: [libc::iovec; SEND_IOVS] = unsafe { zeroed() };
            // SAFETY: as above.
            let mut hdr: [libc::mmsghdr; MMSG_BATCH] = unsafe { zeroed() };
            // SAFETY: as above.
            let mut ctl: [SegmentCmsg; MMSG_BATCH] = unsafe { zeroed() };
            let mut runs = [0usize; MMSG_BATCH];
            let (mut entries, mut iovs, mut at) = (0, 0, sent);
            while at < msgs.len() && entries < MMSG_BATCH && iovs < SEND_IOVS {
                let room = SEND_IOVS - iovs;
                let run = if segment {
                    segment_run(&msgs[at..], room)
                } else {
                    1
                };
                for (v, m) in iov[iovs..iovs + run].iter_mut().zip(&msgs[at..at + run]) {
                    let m = m.as_ref();
                    v.iov_base = m.as_ptr().cast_mut().cast();
                    v.iov_len = m.len();
                }
                let h = &mut hdr[entries].msg_hdr;
                h.msg_iov = &mut iov[iovs];
                h.msg_iovlen = run as _;
                if run > 1 {
                    let c = &mut ctl[entries];
                    c.hdr.cmsg_len = CMSG_SEGMENT_LEN as _;
                    c.hdr.cmsg_level = libc::SOL_UDP;
                    c.hdr.cmsg_type = libc::UDP_SEGMENT;
                    c.size = msgs[at].as_ref().len() as u16;
                    h.msg_control = ptr::from_mut(c).cast();
                    h.msg_controllen = size_of::<SegmentCmsg>() as _;
                }
                runs[entries] = run;
                entries += 1;
                iovs += run;
                at += run;
            }
            // SAFETY: `hdr[..entries]` are initialised headers, each pointing at its run of
            // iovecs in `iov` (each pointing at a live borrowed slice of `msgs`) and, for a
            // run, at its control message in `ctl`; all outlive the call. The kernel only
            // reads them (and writes `msg_len` inside `hdr`). No address is given: the socket
            // is connected.
            let n = unsafe {
                libc::sendmmsg(
                    self.sock.as_raw_fd(),
                    hdr.as_mut_ptr(),
                    entries as libc::c_uint,
                    libc::MSG_DONTWAIT | libc::MSG_NOSIGNAL,
                )
            };
            if n < 0 {
                let e = io::Error::last_os_error();
                match e.raw_os_error() {
                    Some(libc::EINTR) => continue,
                    Some(libc::EIO | libc::EINVAL) if runs[0] > 1 => {
                        // Segmentation refused on this route: send datagram by datagram.
                        self.segment.store(false, Ordering::Relaxed);
                        continue;
                    }
                    _ => {
                        return SendOutcome {
                            sent,
                            error: Some(e),
                        };
                    }
                }
            }
            // When the kernel stopped early, the next call reports why (or sends on).
            sent += runs[..n as usize].iter().sum::<usize>();
        }
        SendOutcome { sent, error: None }
    }

    /// Sends every datagram on its own from now on, never in segmented runs: each datagram the
    /// network refuses then comes back as its own error (a segmented run refused on the host
    /// itself, before it was cut, comes back as one).
    pub fn stop_segmenting(&self) {
        self.segment.store(false, Ordering::Relaxed);
    }

    /// Whether sends still go as segmented runs (false once the route refused them).
    #[cfg(test)]
    fn segmenting(&self) -> bool {
        self.segment.load(Ordering::Relaxed)
    }

    /// Receives up to [`MMSG_BATCH`] datagrams with one `recvmmsg`. With `wait`, blocks for the
    /// first one up to the read timeout, then takes what is queued (`MSG_WAITFORONE`); else
    /// takes only what is queued. Returns how many arrived (0 on timeout or a signal).
    #[doc(alias = "recvmmsg")]
    pub fn recv_batch(&self, b: &mut RecvBatch, wait: bool) -> Result<usize, SysError> {
        b.count = 0;
        // SAFETY: plain C structs for which all-zero is valid.
        let mut iov: [libc::iovec; MMSG_BATCH] = unsafe { zeroed() };
        // SAFETY: as above.
        let mut hdr: [libc::mmsghdr; MMSG_BATCH] = unsafe { zeroed() };
        let slots = b.buf.chunks_exact_mut(RECV_SLOT);
        for (i, (slot, addr)) in slots.zip(b.addrs.iter_mut()).enumerate() {
            iov[i].iov_base = slot.as_mut_ptr().cast();
            iov[i].iov_len = RECV_SLOT;
            hdr[i].msg_hdr.msg_iov = &mut iov[i];
            hdr[i].msg_hdr.msg_iovlen = 1;
            hdr[i].msg_hdr.msg_name = ptr::from_mut(addr).cast();
            hdr[i].msg_hdr.msg_namelen = size_of::<libc::sockaddr_storage>() as libc::socklen_t;
        }
        let flags = if wait {
            libc::MSG_WAITFORONE
        } else {
            libc::MSG_DONTWAIT
        };
        // SAFETY: each of the MMSG_BATCH headers points at its own iovec (one RECV_SLOT-byte
        // slot of `b.buf`) and its own sockaddr_storage in `b.addrs`, all exclusively borrowed
        // for the call; the kernel writes at most those lengths. No timeout pointer.
        let n = unsafe {
            libc::recvmmsg(
                self.sock.as_raw_fd(),
                hdr.as_mut_ptr(),
                MMSG_BATCH as libc::c_uint,
                flags,
                ptr::null_mut(),
            )
        };
        if n < 0 {
            let e = io::Error::last_os_error();
            return match e.raw_os_error() {
                Some(libc::EAGAIN | libc::EINTR) => Ok(0),
                _ => Err(err("recvmmsg", &self.name, e)),
            };
        }
        let n = n as usize;
        for (i, h) in hdr.iter().take(n).enumerate() {
            b.lens[i] = (h.msg_len as usize).min(RECV_SLOT);
            b.truncated[i] = h.msg_hdr.msg_flags & libc::MSG_TRUNC != 0;
        }
        b.count = n;
        Ok(n)
    }
}

/// Reusable buffers for [`UdpSocket::recv_batch`]: [`MMSG_BATCH`] slots of [`RECV_SLOT`] bytes.
pub struct RecvBatch {
    buf: Vec<u8>,
    lens: Vec<usize>,
    truncated: Vec<bool>,
    addrs: Vec<libc::sockaddr_storage>,
    count: usize,
}

impl std::fmt::Debug for RecvBatch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RecvBatch")
            .field("count", &self.count)
            .finish()
    }
}

impl Default for RecvBatch {
    fn default() -> Self {
        RecvBatch::new()
    }
}

impl RecvBatch {
    /// Buffers for one full batch (4 MiB).
    pub fn new() -> RecvBatch {
        RecvBatch {
            buf: vec![0; MMSG_BATCH * RECV_SLOT],
            lens: vec![0; MMSG_BATCH],
            truncated: vec![false; MMSG_BATCH],
            // SAFETY: sockaddr_storage is plain data; all-zero is a valid (AF_UNSPEC) value.
            addrs: vec![unsafe { zeroed() }; MMSG_BATCH],
            count: 0,
        }
    }

    /// Datagrams from the last receive.
    pub fn len(&self) -> usize {
        self.count
    }

    /// Whether the last receive brought nothing.
    pub fn is_empty(&self) -> bool {
        self.count == 0
    }

    /// Datagram `i`: its bytes, its sender, and whether it was cut to fit the slot.
    pub fn get(&self, i: usize) -> Option<(&[u8], Option<SocketAddr>, bool)> {
        if i >= self.count {
            return None;
        }
        let at = i * RECV_SLOT;
        Some((
            &self.buf[at..at + self.lens[i]],
            sockaddr(&self.addrs[i]),
            self.truncated[i],
        ))
    }
}

/// A `sockaddr_storage` filled by the kernel as a Rust address (IPv4 and IPv6 only).
fn sockaddr(s: &libc::sockaddr_storage) -> Option<SocketAddr> {
    match libc::c_int::from(s.ss_family) {
        libc::AF_INET => {
            // SAFETY: the family says the storage holds a sockaddr_in, which is smaller and
            // less aligned than sockaddr_storage.
            let a: &libc::sockaddr_in = unsafe { &*ptr::from_ref(s).cast() };
            Some(SocketAddr::V4(SocketAddrV4::new(
                Ipv4Addr::from(u32::from_be(a.sin_addr.s_addr)),
                u16::from_be(a.sin_port),
            )))
        }
        libc::AF_INET6 => {
            // SAFETY: the family says the storage holds a sockaddr_in6, which is smaller and
            // less aligned than sockaddr_storage.
            let a: &libc::sockaddr_in6 = unsafe { &*ptr::from_ref(s).cast() };
            Some(SocketAddr::V6(SocketAddrV6::new(
                Ipv6Addr::from(a.sin6_addr.s6_addr),
                u16::from_be(a.sin6_port),
                a.sin6_flowinfo,
                a.sin6_scope_id,
            )))
        }
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn batched_send_and_receive_over_loopback() {
        let rx = UdpSocket::bind("127.0.0.1:0".parse().unwrap()).unwrap();
        rx.set_read_timeout(Duration::from_millis(500)).unwrap();
        assert!(rx.set_rcvbuf(1 << 20).unwrap() >= 4096);
        let to = rx.local_addr().unwrap();
        let tx = UdpSocket::connect(to).unwrap();
        let mtu = tx.path_mtu().unwrap();
        assert!(mtu >= 1280, "loopback MTU {mtu}");
        let msgs: Vec<Vec<u8>> = (0..100u8).map(|i| vec![i; usize::from(i) + 1]).collect();
        let out = tx.send_batch(&msgs);
        assert_eq!(out.sent, 100, "{:?}", out.error);
        let from = tx.local_addr().unwrap();
        let mut b = RecvBatch::new();
        let mut got = Vec::new();
        while got.len() < 100 {
            let n = rx.recv_batch(&mut b, true).unwrap();
            assert!(n > 0, "timed out after {} datagrams", got.len());
            for i in 0..n {
                let (d, src, cut) = b.get(i).unwrap();
                assert_eq!(src, Some(from));
                assert!(!cut);
                got.push(d.to_vec());
            }
        }
        assert_eq!(got, msgs);
        assert_eq!(rx.recv_batch(&mut b, false).unwrap(), 0);
    }

    /// A receiver on loopback with room for a burst, and a sender connected to it.
    fn loopback_pair() -> (UdpSocket, UdpSocket) {
        let rx = UdpSocket::bind("127.0.0.1:0".parse().unwrap()).unwrap();
        rx.set_read_timeout(Duration::from_millis(500)).unwrap();
        rx.set_rcvbuf(8 << 20).unwrap();
        let tx = UdpSocket::connect(rx.local_addr().unwrap()).unwrap();
        (rx, tx)
    }

    /// Receives `n` datagrams from `rx`, failing after the read timeout.
    fn receive(rx: &UdpSocket, n: usize) -> Vec<Vec<u8>> {
        let mut b = RecvBatch::new();
        let mut got = Vec::new();
        while got.len() < n {
            let k = rx.recv_batch(&mut b, true).unwrap();
            assert!(k > 0, "timed out after {} datagrams", got.len());
            for i in 0..k {
                let (d, _, cut) = b.get(i).unwrap();
                assert!(!cut);
                got.push(d.to_vec());
            }
        }
        got
    }

    #[test]
    fn runs_of_equal_datagrams_arrive_as_the_same_datagrams() {
        let (rx, tx) = loopback_pair();
        // Runs longer than a segmented send may carry, runs ended by a shorter datagram,
        // single ones, an empty one, and sizes that grow, each datagram numbered.
        let mut sizes = vec![1472; 150];
        sizes.extend([
            1472, 700, 700, 700, 300, 1472, 1472, 0, 9000, 9000, 9000, 9001, 20, 20,
        ]);
        sizes.extend(vec![1000; 70]);
        let msgs: Vec<Vec<u8>> = sizes
            .iter()
            .enumerate()
            .map(|(i, &n)| (0..n).map(|j| (i * 7 + j) as u8).collect())
            .collect();
        let out = tx.send_batch(&msgs);
        assert_eq!(out.sent, msgs.len(), "{:?}", out.error);
        assert_eq!(receive(&rx, msgs.len()), msgs);
        assert!(tx.segmenting(), "loopback took no segmented send");
        assert_eq!(segment_run(&msgs, SEND_IOVS), SEGMENT_BYTES_MAX / 1472);
        assert_eq!(segment_run(&msgs[164..], SEND_IOVS), SEGMENTS_MAX);
        assert_eq!(segment_run(&msgs[150..], SEND_IOVS), 2);
        assert_eq!(
            segment_run(&msgs[151..], SEND_IOVS),
            4,
            "700 ×3 and the shorter 300 ends it"
        );
        assert_eq!(
            segment_run(&msgs[156..], SEND_IOVS),
            1,
            "an empty datagram ends a run"
        );
        assert_eq!(
            segment_run(&msgs[158..], SEND_IOVS),
            3,
            "9000 ×3 then a larger one"
        );
        assert_eq!(segment_run(&msgs[..10], 4), 4);
    }

    #[test]
    fn segmented_runs_fall_back_where_the_route_refuses_them() {
        // Without UDP checksums (SO_NO_CHECK) the kernel refuses to cut a packet (EINVAL): the
        // datagrams go one by one instead, and all arrive.
        let (rx, tx) = loopback_pair();
        tx.setsockopt_int(libc::SOL_SOCKET, libc::SO_NO_CHECK, 1)
            .unwrap();
        let msgs: Vec<Vec<u8>> = (0..5u8).map(|i| vec![i; 1200]).collect();
        let out = tx.send_batch(&msgs);
        assert_eq!(out.sent, 5, "{:?}", out.error);
        assert!(!tx.segmenting());
        assert_eq!(receive(&rx, 5), msgs);
    }

    #[test]
    fn shared_sockets_keep_each_sender_on_one_and_count_their_drops() {
        let a = UdpSocket::bind_shared("127.0.0.1:0".parse().unwrap()).unwrap();
        let to = a.local_addr().unwrap();
        let b = UdpSocket::bind_shared(to).unwrap();
        for s in [&a, &b] {
            s.set_read_timeout(Duration::from_millis(200)).unwrap();
            s.set_rcvbuf(1 << 20).unwrap();
        }
        // Each sender's datagrams all reach one socket of the two.
        let senders: Vec<UdpSocket> = (0..8).map(|_| UdpSocket::connect(to).unwrap()).collect();
        for (i, tx) in senders.iter().enumerate() {
            let msgs: Vec<Vec<u8>> = (0..10).map(|_| vec![i as u8; 32]).collect();
            assert_eq!(tx.send_batch(&msgs).sent, 10);
        }
        let mut per_sender: std::collections::HashMap<SocketAddr, Vec<usize>> =
            std::collections::HashMap::new();
        let mut bat = RecvBatch::new();
        for (k, s) in [&a, &b].into_iter().enumerate() {
            while s.recv_batch(&mut bat, true).unwrap() > 0 {
                for i in 0..bat.len() {
                    per_sender
                        .entry(bat.get(i).unwrap().1.unwrap())
                        .or_default()
                        .push(k);
                }
            }
        }
        assert_eq!(per_sender.len(), 8);
        for got in per_sender.values() {
            assert_eq!(got.len(), 10);
            assert!(got.iter().all(|&k| k == got[0]), "{got:?}");
        }
        // Overflow a small buffer: the kernel counts each datagram it drops.
        let small = UdpSocket::bind("127.0.0.1:0".parse().unwrap()).unwrap();
        small.set_rcvbuf(4096).unwrap();
        assert_eq!(small.drops().unwrap(), 0);
        let tx = UdpSocket::connect(small.local_addr().unwrap()).unwrap();
        tx.stop_segmenting();
        let msgs = vec![vec![0u8; 1000]; 200];
        let sent = tx.send_batch(&msgs).sent as u32;
        small.set_read_timeout(Duration::from_millis(100)).unwrap();
        let mut got = 0;
        while small.recv_batch(&mut bat, true).unwrap() > 0 {
            got += bat.len() as u32;
        }
        assert!(got < sent);
        assert_eq!(small.drops().unwrap(), sent - got);
    }

    #[test]
    fn refused_sends_are_reported_not_waited_for() {
        // A port nobody listens on: the ICMP error comes back as ECONNREFUSED on a later send.
        let gone = UdpSocket::bind("127.0.0.1:0".parse().unwrap()).unwrap();
        let to = gone.local_addr().unwrap();
        drop(gone);
        let tx = UdpSocket::connect(to).unwrap();
        let mut refused = false;
        for _ in 0..50 {
            let out = tx.send_batch(&[[0u8; 8]]);
            if let Some(e) = out.error {
                assert_eq!(e.raw_os_error(), Some(libc::ECONNREFUSED));
                refused = true;
                break;
            }
            std::thread::sleep(Duration::from_millis(2));
        }
        assert!(refused);
    }

    #[test]
    fn every_refused_datagram_is_counted_once() {
        let gone = UdpSocket::bind("127.0.0.1:0".parse().unwrap()).unwrap();
        let to = gone.local_addr().unwrap();
        drop(gone);
        let tx = UdpSocket::connect(to).unwrap();
        tx.queue_refusals().unwrap();
        let mut refused = 0;
        for _ in 0..5 {
            // Emptying the queue clears the pending error: each send goes out.
            let out = tx.send_batch(&[[0u8; 8]]);
            assert_eq!(out.sent, 1, "{:?}", out.error);
            refused += tx.take_refusals().datagrams;
        }
        let deadline = std::time::Instant::now() + Duration::from_secs(2);
        while refused < 5 && std::time::Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(5));
            refused += tx.take_refusals().datagrams;
        }
        assert_eq!(refused, 5);
        // A refusal names its error.
        let out = tx.send_batch(&[[0u8; 8]]);
        assert_eq!(out.sent, 1);
        let mut r = tx.take_refusals();
        while r.datagrams == 0 && std::time::Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(5));
            r = tx.take_refusals();
        }
        assert_eq!(
            r.first.and_then(|e| e.raw_os_error()),
            Some(libc::ECONNREFUSED)
        );
        assert_eq!(tx.take_refusals().datagrams, 0, "read once");
    }
}
