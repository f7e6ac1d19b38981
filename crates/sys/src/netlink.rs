//! The few netlink requests `doctor` makes about XDP: which program an interface has
//! attached (`RTM_GETLINK`, `IFLA_XDP`), detaching one (`RTM_SETLINK` with `IFLA_XDP_FD` -1),
//! and what XDP the driver does (`NETDEV_CMD_DEV_GET` of the `netdev` generic netlink family,
//! Linux 6.3 and later). One request and its answer at a time, on a socket of its own.
#![allow(unsafe_code)]

use std::os::fd::{AsRawFd, OwnedFd};

use crate::{SysError, syscall};

const NLMSG_ERROR: u16 = 2;
const NLM_F_REQUEST: u16 = 1;
const NLM_F_ACK: u16 = 4;
const RTM_GETLINK: u16 = 18;
const RTM_SETLINK: u16 = 19;
const IFLA_XDP: u16 = 43;
const IFLA_XDP_FD: u16 = 1;
const IFLA_XDP_ATTACHED: u16 = 2;
const IFLA_XDP_FLAGS: u16 = 3;
const IFLA_XDP_PROG_ID: u16 = 4;
const NLA_F_NESTED: u16 = 1 << 15;
const GENL_ID_CTRL: u16 = 0x10;
const CTRL_CMD_GETFAMILY: u8 = 3;
const CTRL_ATTR_FAMILY_ID: u16 = 1;
const CTRL_ATTR_FAMILY_NAME: u16 = 2;
const NETDEV_CMD_DEV_GET: u8 = 1;
const NETDEV_A_DEV_IFINDEX: u16 = 1;
const NETDEV_A_DEV_XDP_FEATURES: u16 = 3;

/// How an XDP program is attached (`XDP_ATTACHED_*`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Attached {
    /// In the driver.
    Native,
    /// In the stack, after the socket buffer (generic).
    Generic,
    /// Offloaded to the NIC.
    Offload,
    /// Several at once.
    Multi,
}

impl Attached {
    /// The mode's name, as `ip link` prints it.
    pub fn name(self) -> &'static str {
        match self {
            Attached::Native => "native",
            Attached::Generic => "generic",
            Attached::Offload => "offload",
            Attached::Multi => "multi",
        }
    }

    /// The `XDP_FLAGS_*` mode flag that names this attachment, for a detach.
    fn flags(self) -> u32 {
        match self {
            Attached::Native => 1 << 2,
            Attached::Generic | Attached::Multi => 1 << 1,
            Attached::Offload => 1 << 3,
        }
    }
}

/// A netlink request: header, fixed part, attributes.
struct Msg(Vec<u8>);

impl Msg {
    fn new(ty: u16, flags: u16, fixed: &[u8]) -> Msg {
        let mut b = vec![0u8; 16];
        b[4..6].copy_from_slice(&ty.to_ne_bytes());
        b[6..8].copy_from_slice(&(flags | NLM_F_REQUEST).to_ne_bytes());
        b[8..12].copy_from_slice(&1u32.to_ne_bytes());
        b.extend_from_slice(fixed);
        Msg(b)
    }

    fn attr(&mut self, ty: u16, value: &[u8]) {
        let len = 4 + value.len() as u16;
        self.0.extend_from_slice(&len.to_ne_bytes());
        self.0.extend_from_slice(&ty.to_ne_bytes());
        self.0.extend_from_slice(value);
        self.0.resize(self.0.len().next_multiple_of(4), 0);
    }

    /// Starts a nested attribute; [`Msg::end`] closes it.
    fn begin(&mut self, ty: u16) -> usize {
        let at = self.0.len();
        self.attr(ty | NLA_F_NESTED, &[]);
        at
    }

    fn end(&mut self, at: usize) {
        let len = (self.0.len() - at) as u16;
        self.0[at..at + 2].copy_from_slice(&len.to_ne_bytes());
    }

    fn finish(mut self) -> Vec<u8> {
        let len = self.0.len() as u32;
        self.0[0..4].copy_from_slice(&len.to_ne_bytes());
        self.0
    }
}

/// The attributes in `b` as (type without flags, value).
fn attrs(mut b: &[u8]) -> impl Iterator<Item = (u16, &[u8])> {
    std::iter::from_fn(move || {
        if b.len() < 4 {
            return None;
        }
        let len = u16::from_ne_bytes([b[0], b[1]]) as usize;
        let ty = u16::from_ne_bytes([b[2], b[3]]) & 0x3fff;
        if len < 4 || len > b.len() {
            return None;
        }
        let value = &b[4..len];
        b = &b[len.next_multiple_of(4).min(b.len())..];
        Some((ty, value))
    })
}

fn u32_of(v: &[u8]) -> Option<u32> {
    Some(u32::from_ne_bytes(v.get(..4)?.try_into().ok()?))
}

/// Sends `req` on a new socket of `protocol` and returns the answer's payload (after the
/// netlink header), or the kernel's error; an acknowledgement alone gives an empty payload.
fn ask(protocol: i32, req: Vec<u8>, what: &str) -> Result<Vec<u8>, SysError> {
    const CALL: &str = "netlink";
    let fd: OwnedFd = syscall::socket(libc::AF_NETLINK, libc::SOCK_RAW, protocol, CALL)
        .map_err(|e| SysError::call(CALL, what, e))?;
    // SAFETY: `req` is a live buffer of `req.len()` bytes that the kernel only reads; the
    // destination is the kernel (no address: an unbound netlink socket sends to it).
    let sent = unsafe { libc::send(fd.as_raw_fd(), req.as_ptr().cast(), req.len(), 0) };
    if sent < 0 {
        return Err(SysError::call(CALL, what, std::io::Error::last_os_error()));
    }
    let mut buf = vec![0u8; 1 << 16];
    // SAFETY: `buf` is writable for `buf.len()` bytes; the kernel writes at most that.
    let n = unsafe { libc::recv(fd.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len(), 0) };
    if n < 0 {
        return Err(SysError::call(CALL, what, std::io::Error::last_os_error()));
    }
    buf.truncate(n as usize);
    if buf.len() < 16 {
        return Err(SysError::invalid(CALL, what, "a short answer".to_string()));
    }
    let len = (u32::from_ne_bytes(buf[0..4].try_into().expect("4 bytes")) as usize).min(buf.len());
    let ty = u16::from_ne_bytes([buf[4], buf[5]]);
    let payload = buf[16..len].to_vec();
    if ty == NLMSG_ERROR {
        let code = payload
            .get(..4)
            .map_or(0, |b| i32::from_ne_bytes(b.try_into().expect("4 bytes")));
        if code != 0 {
            return Err(SysError::call(
                CALL,
                what,
                std::io::Error::from_raw_os_error(-code),
            ));
        }
        return Ok(Vec::new());
    }
    Ok(payload)
}

/// `struct ifinfomsg` for interface `ifindex`.
fn ifinfomsg(ifindex: u32) -> [u8; 16] {
    let mut m = [0u8; 16];
    m[4..8].copy_from_slice(&ifindex.to_ne_bytes());
    m
}

/// The XDP program attached to interface `ifindex`, as (program id, how), if any.
pub fn xdp_attached(ifname: &str, ifindex: u32) -> Result<Option<(u32, Attached)>, SysError> {
    let req = Msg::new(RTM_GETLINK, 0, &ifinfomsg(ifindex)).finish();
    let answer = ask(libc::NETLINK_ROUTE, req, ifname)?;
    let Some(link_attrs) = answer.get(16..) else {
        return Ok(None);
    };
    let Some((_, xdp)) = attrs(link_attrs).find(|(t, _)| *t == IFLA_XDP) else {
        return Ok(None);
    };
    let (mut mode, mut id) = (0u8, 0u32);
    for (t, v) in attrs(xdp) {
        match t {
            IFLA_XDP_ATTACHED => mode = v.first().copied().unwrap_or(0),
            IFLA_XDP_PROG_ID => id = u32_of(v).unwrap_or(0),
            _ => {}
        }
    }
    let how = match mode {
        1 => Attached::Native,
        2 => Attached::Generic,
        3 => Attached::Offload,
        4 => Attached::Multi,
        _ => return Ok(None),
    };
    Ok(Some((id, how)))
}

/// Detaches the XDP program attached to `ifindex` as `how` (`RTM_SETLINK`, `IFLA_XDP_FD` -1).
/// A program held by a BPF link is refused (`EBUSY`): the link's holder must close it.
pub fn xdp_detach(ifname: &str, ifindex: u32, how: Attached) -> Result<(), SysError> {
    let mut m = Msg::new(RTM_SETLINK, NLM_F_ACK, &ifinfomsg(ifindex));
    let at = m.begin(IFLA_XDP);
    m.attr(IFLA_XDP_FD, &(-1i32).to_ne_bytes());
    m.attr(IFLA_XDP_FLAGS, &how.flags().to_ne_bytes());
    m.end(at);
    ask(libc::NETLINK_ROUTE, m.finish(), ifname).map(drop)
}

/// What XDP the driver of `ifindex` does (`NETDEV_XDP_ACT_*` bits), or `None` when the
/// kernel has no `netdev` generic netlink family (before Linux 6.3).
pub fn xdp_features(ifname: &str, ifindex: u32) -> Result<Option<u64>, SysError> {
    let mut m = Msg::new(GENL_ID_CTRL, 0, &[CTRL_CMD_GETFAMILY, 1, 0, 0]);
    m.attr(CTRL_ATTR_FAMILY_NAME, b"netdev\0");
    let family = match ask(libc::NETLINK_GENERIC, m.finish(), ifname) {
        Ok(a) => a,
        Err(e) if e.errno() == Some(libc::ENOENT) => return Ok(None),
        Err(e) => return Err(e),
    };
    let Some(id) = attrs(family.get(4..).unwrap_or_default())
        .find(|(t, _)| *t == CTRL_ATTR_FAMILY_ID)
        .and_then(|(_, v)| Some(u16::from_ne_bytes(v.get(..2)?.try_into().ok()?)))
    else {
        return Ok(None);
    };
    let mut m = Msg::new(id, 0, &[NETDEV_CMD_DEV_GET, 1, 0, 0]);
    m.attr(NETDEV_A_DEV_IFINDEX, &ifindex.to_ne_bytes());
    let dev = ask(libc::NETLINK_GENERIC, m.finish(), ifname)?;
    Ok(attrs(dev.get(4..).unwrap_or_default())
        .find(|(t, _)| *t == NETDEV_A_DEV_XDP_FEATURES)
        .and_then(|(_, v)| Some(u64::from_ne_bytes(v.get(..8)?.try_into().ok()?))))
}

/// `NETDEV_XDP_ACT_*`: what the driver does with XDP.
pub mod act {
    /// XDP in the driver (native), with the basic verdicts.
    pub const BASIC: u64 = 1;
    /// `XDP_REDIRECT` (to an AF_XDP socket among others).
    pub const REDIRECT: u64 = 2;
    /// Can be the target of a redirect (`ndo_xdp_xmit`).
    pub const NDO_XMIT: u64 = 4;
    /// AF_XDP zero-copy.
    pub const XSK_ZEROCOPY: u64 = 8;
    /// Offloaded to the NIC.
    pub const HW_OFFLOAD: u64 = 16;
    /// Frames over several buffers.
    pub const RX_SG: u64 = 32;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn attributes_are_built_and_read_back() {
        let mut m = Msg::new(RTM_SETLINK, NLM_F_ACK, &ifinfomsg(7));
        let at = m.begin(IFLA_XDP);
        m.attr(IFLA_XDP_FD, &(-1i32).to_ne_bytes());
        m.attr(IFLA_XDP_FLAGS, &2u32.to_ne_bytes());
        m.end(at);
        let b = m.finish();
        assert_eq!(
            u32::from_ne_bytes(b[0..4].try_into().unwrap()) as usize,
            b.len()
        );
        let top: Vec<_> = attrs(&b[32..]).collect();
        assert_eq!(top.len(), 1);
        assert_eq!(top[0].0, IFLA_XDP);
        let inner: Vec<_> = attrs(top[0].1).collect();
        assert_eq!(inner[0], (IFLA_XDP_FD, &(-1i32).to_ne_bytes()[..]));
        assert_eq!(inner[1], (IFLA_XDP_FLAGS, &2u32.to_ne_bytes()[..]));
    }

    #[test]
    fn truncated_attributes_end_the_walk() {
        assert_eq!(attrs(&[8, 0, 1, 0, 1]).count(), 0);
        assert_eq!(attrs(&[2, 0, 1, 0]).count(), 0);
    }
}
