//! UDP sockets for header forwarding: batched sends (`sendmmsg`) on a connected, non-blocking
//! socket, batched receives (`recvmmsg`) into one reusable buffer, receive-buffer sizing and the
//! route's MTU (`IP_MTU`).
//!
//! Plain socket setup (socket, bind, connect, non-blocking, timeouts) goes through
//! `std::net::UdpSocket`; only the calls std does not offer are made here.
#![allow(unsafe_code)]

use std::io;
use std::mem::{size_of, zeroed};
use std::net::{Ipv4Addr, Ipv6Addr, SocketAddr, SocketAddrV4, SocketAddrV6};
use std::os::fd::AsRawFd;
use std::ptr;
use std::time::Duration;

use crate::SysError;

/// Messages handed to the kernel in one `sendmmsg` / `recvmmsg` call.
pub const MMSG_BATCH: usize = 64;

/// Receive slot per datagram: any UDP payload fits (IPv6 without jumbograms: 65527 bytes).
pub const RECV_SLOT: usize = 65_536;

/// A UDP socket.
#[derive(Debug)]
pub struct UdpSocket {
    sock: std::net::UdpSocket,
    name: String,
}

/// What one [`UdpSocket::send_batch`] did.
#[derive(Debug)]
pub struct SendOutcome {
    /// Datagrams the kernel took, from the start of the slice.
    pub sent: usize,
    /// Why the datagram at index `sent` was refused, if one was.
    pub error: Option<io::Error>,
}

fn err(call: &'static str, what: &str, e: io::Error) -> SysError {
    SysError::call_with(call, what, "", e)
}

impl UdpSocket {
    /// A socket bound to `addr` (port 0 picks one), blocking.
    pub fn bind(addr: SocketAddr) -> Result<UdpSocket, SysError> {
        let name = addr.to_string();
        let sock = std::net::UdpSocket::bind(addr).map_err(|e| err("bind(UDP)", &name, e))?;
        Ok(UdpSocket { sock, name })
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
        Ok(UdpSocket { sock, name })
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
    #[doc(alias = "sendmmsg")]
    pub fn send_batch<B: AsRef<[u8]>>(&self, msgs: &[B]) -> SendOutcome {
        let mut sent = 0;
        while sent < msgs.len() {
            let chunk = &msgs[sent..msgs.len().min(sent + MMSG_BATCH)];
            // SAFETY: iovec and mmsghdr are plain C structs for which all-zero is valid (null
            // pointers, zero lengths).
            let mut iov: [libc::iovec; MMSG_BATCH] = unsafe { zeroed() };
            // SAFETY: as above.
            let mut hdr: [libc::mmsghdr; MMSG_BATCH] = unsafe { zeroed() };
            for (i, m) in chunk.iter().enumerate() {
                let m = m.as_ref();
                iov[i].iov_base = m.as_ptr().cast_mut().cast();
                iov[i].iov_len = m.len();
                hdr[i].msg_hdr.msg_iov = &mut iov[i];
                hdr[i].msg_hdr.msg_iovlen = 1;
            }
            // SAFETY: `hdr[..chunk.len()]` are initialised headers, each pointing at one iovec
            // of `iov` that points at a live borrowed slice of `msgs`; all outlive the call. The
            // kernel only reads the data (and writes `msg_len` inside `hdr`). No address is
            // given: the socket is connected.
            let n = unsafe {
                libc::sendmmsg(
                    self.sock.as_raw_fd(),
                    hdr.as_mut_ptr(),
                    chunk.len() as libc::c_uint,
                    libc::MSG_DONTWAIT | libc::MSG_NOSIGNAL,
                )
            };
            if n < 0 {
                let e = io::Error::last_os_error();
                if e.raw_os_error() == Some(libc::EINTR) {
                    continue;
                }
                return SendOutcome {
                    sent,
                    error: Some(e),
                };
            }
            sent += n as usize;
            if (n as usize) < chunk.len() {
                // The kernel stopped early; the next call reports why (or sends on).
                continue;
            }
        }
        SendOutcome { sent, error: None }
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
}
