//! Network interfaces by name: index, MTU, flags, link state, link speed.

use std::ffi::CString;

use crate::{SysError, syscall};

/// The interface's index (`if_nametoindex`), in the calling thread's network namespace.
#[doc(alias = "if_nametoindex")]
pub fn index(name: &str) -> Result<u32, SysError> {
    let no_such = || SysError::NoSuchInterface {
        name: name.to_owned(),
    };
    if name.is_empty() || name.len() >= libc::IFNAMSIZ {
        return Err(no_such());
    }
    let c_name = CString::new(name).map_err(|_| no_such())?;
    syscall::if_nametoindex(&c_name, "if_nametoindex").map_err(|e| match e.raw_os_error() {
        Some(libc::ENODEV | libc::ENXIO | libc::ENOENT) => no_such(),
        _ => SysError::call("if_nametoindex", name, e),
    })
}

/// The interface's MTU (`SIOCGIFMTU`; unlike sysfs, correct inside another network namespace).
#[doc(alias = "SIOCGIFMTU")]
pub fn mtu(name: &str) -> Result<u32, SysError> {
    syscall::if_mtu(name, "ioctl(SIOCGIFMTU)").map_err(|e| match e.raw_os_error() {
        Some(libc::ENODEV | libc::ENXIO) => SysError::NoSuchInterface {
            name: name.to_owned(),
        },
        _ => SysError::call("ioctl(SIOCGIFMTU)", name, e),
    })
}

/// What `SIOCGIFFLAGS` says about an interface.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Flags {
    /// Administratively up (`IFF_UP`).
    pub up: bool,
    /// Up with a working link: operational state up (`IFF_RUNNING`).
    pub running: bool,
    /// Promiscuous mode set by a user (`IFF_PROMISC`, as `ip link set NAME promisc on` sets it).
    /// Promiscuity a packet socket asks for with `PACKET_MR_PROMISC` is not reported here.
    pub promisc: bool,
}

/// The interface's flags (`SIOCGIFFLAGS`; correct inside another network namespace).
#[doc(alias = "SIOCGIFFLAGS")]
pub fn flags(name: &str) -> Result<Flags, SysError> {
    const CALL: &str = "ioctl(SIOCGIFFLAGS)";
    let f = syscall::if_flags(name, CALL).map_err(|e| match e.raw_os_error() {
        Some(libc::ENODEV | libc::ENXIO) => SysError::NoSuchInterface {
            name: name.to_owned(),
        },
        _ => SysError::call(CALL, name, e),
    })?;
    let has = |flag: libc::c_int| f & flag as u32 != 0;
    Ok(Flags {
        up: has(libc::IFF_UP),
        running: has(libc::IFF_RUNNING),
        promisc: has(libc::IFF_PROMISC),
    })
}

/// Whether an interface carries packets now, as a capture bound to it sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LinkState {
    /// Administratively up with a working link (`IFF_UP` and `IFF_RUNNING`).
    Up,
    /// Set down (`ip link set NAME down`): no `IFF_UP`.
    #[doc(alias = "IFF_UP")]
    SetDown,
    /// Up without a working link (a cable out, a switch port or veth peer down): no
    /// `IFF_RUNNING`.
    #[doc(alias = "IFF_RUNNING")]
    NoCarrier,
}

/// The link state of interface `name`, which a socket is bound to by index `ifindex`.
///
/// An error if the interface was deleted: no interface has the name now, or another one has
/// it (a device made again under the same name has a new index, and a socket bound to the old
/// one never sees its packets).
pub fn link_state(name: &str, ifindex: u32) -> Result<LinkState, SysError> {
    let deleted = |now: String| {
        SysError::call_with(
            "if_nametoindex",
            name,
            format!("the interface was deleted during the capture: {now}"),
            std::io::Error::from_raw_os_error(libc::ENODEV),
        )
    };
    match index(name) {
        Ok(i) if i == ifindex => {}
        Ok(i) => return Err(deleted(format!("{name} is now another device, index {i}"))),
        Err(SysError::NoSuchInterface { .. }) => {
            return Err(deleted(format!("no interface is named {name} now")));
        }
        Err(e) => return Err(e),
    }
    match flags(name) {
        Ok(f) if !f.up => Ok(LinkState::SetDown),
        Ok(f) if !f.running => Ok(LinkState::NoCarrier),
        Ok(_) => Ok(LinkState::Up),
        // Deleted between the two calls.
        Err(SysError::NoSuchInterface { .. }) => {
            Err(deleted(format!("no interface is named {name} now")))
        }
        Err(e) => Err(e),
    }
}

/// The names of this network namespace's interfaces (`/proc/net/dev`, which is the calling
/// thread's namespace's), in its order.
pub fn names() -> Result<Vec<String>, SysError> {
    const PATH: &str = "/proc/net/dev";
    let text = std::fs::read_to_string(PATH).map_err(|e| SysError::call("read", PATH, e))?;
    // Two header lines, then `  NAME: counters...`.
    Ok(text
        .lines()
        .skip(2)
        .filter_map(|l| l.split_once(':').map(|(name, _)| name.trim().to_string()))
        .filter(|n| !n.is_empty())
        .collect())
}

/// The link speed in Mbit/s from `/sys/class/net/NAME/speed`; `None` when unknown (virtual
/// devices, link down, or an interface outside the namespace sysfs was mounted in).
pub fn speed_mbps(name: &str) -> Option<u32> {
    let text = std::fs::read_to_string(sysfs_attr(name, "speed")?).ok()?;
    let speed: i64 = text.trim().parse().ok()?;
    u32::try_from(speed).ok().filter(|&s| s > 0)
}

/// The interface's own counters of received and dropped packets (`isb_ifrecv`, `isb_ifdrop`),
/// from the files of `/sys/class/net/NAME/statistics/`, opened once: a reading is one `pread`
/// per counter, with no path lookup, no allocation and no open.
#[derive(Debug)]
pub struct LinkCounters {
    rx_packets: Option<std::fs::File>,
    rx_dropped: Option<std::fs::File>,
    rx_missed_errors: Option<std::fs::File>,
}

impl LinkCounters {
    /// The counters of `name`; those sysfs does not offer read as unknown.
    pub fn open(name: &str) -> LinkCounters {
        let open = |counter: &str| {
            std::fs::File::open(sysfs_attr(name, &format!("statistics/{counter}"))?).ok()
        };
        LinkCounters {
            rx_packets: open("rx_packets"),
            rx_dropped: open("rx_dropped"),
            rx_missed_errors: open("rx_missed_errors"),
        }
    }

    /// (received, dropped) now; dropped sums `rx_dropped` and `rx_missed_errors` (a NIC's
    /// FIFO overruns). `None` for what is unknown.
    pub fn read(&self) -> (Option<u64>, Option<u64>) {
        let dropped = match (
            read_counter(&self.rx_dropped),
            read_counter(&self.rx_missed_errors),
        ) {
            (Some(a), Some(b)) => Some(a + b),
            (a, b) => a.or(b),
        };
        (read_counter(&self.rx_packets), dropped)
    }
}

/// The path of attribute `attr` of interface `name` in sysfs; `None` for a name that is not
/// one interface's (empty, or one that would leave `/sys/class/net/`).
fn sysfs_attr(name: &str, attr: &str) -> Option<String> {
    if name.is_empty() || name.contains('/') || name.starts_with('.') {
        return None;
    }
    Some(format!("/sys/class/net/{name}/{attr}"))
}

/// A sysfs attribute is produced afresh by each read from offset 0.
fn read_counter(file: &Option<std::fs::File>) -> Option<u64> {
    use std::os::unix::fs::FileExt;
    let mut buf = [0u8; 32];
    let n = file.as_ref()?.read_at(&mut buf, 0).ok()?;
    std::str::from_utf8(&buf[..n]).ok()?.trim().parse().ok()
}

/// An interface held in promiscuous mode while this lives: a packet socket that receives
/// nothing, a member with `PACKET_MR_PROMISC` (the kernel drops the mode when the last member
/// closes, also when the process is killed).
#[derive(Debug)]
pub struct Promiscuous {
    _fd: std::os::fd::OwnedFd,
}

/// Puts `name` (index `ifindex`) in promiscuous mode for as long as the result lives.
pub fn promiscuous(name: &str, ifindex: u32) -> Result<Promiscuous, SysError> {
    use std::os::fd::AsFd;
    let fd = crate::packet::open_socket(name)?;
    crate::packet::add_promiscuous(fd.as_fd(), name, ifindex)?;
    Ok(Promiscuous { _fd: fd })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn link_counters_follow_the_interface() {
        let lo = LinkCounters::open("lo");
        let (rx0, drop0) = lo.read();
        let rx0 = rx0.expect("lo has rx_packets");
        assert!(drop0.is_some());
        // One datagram to ourselves over loopback is one more packet received on lo.
        let sock = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        sock.send_to(b"x", sock.local_addr().unwrap()).unwrap();
        let mut b = [0u8; 4];
        sock.recv(&mut b).unwrap();
        let rx1 = lo.read().0.unwrap();
        assert!(rx1 > rx0, "{rx0} then {rx1}");
        assert_eq!(LinkCounters::open("tfsys-no-such").read(), (None, None));
        assert_eq!(LinkCounters::open("../lo").read(), (None, None));
    }

    #[test]
    fn loopback_is_known_and_nonsense_is_not() {
        assert!(index("lo").unwrap() > 0);
        assert!(mtu("lo").unwrap() >= 1500);
        for bad in ["tfsys-no-such", "", "a\0b", "x234567890123456789"] {
            let err = index(bad).unwrap_err();
            assert_eq!(err.to_string(), format!("no such interface: {bad}"));
        }
        assert_eq!(
            mtu("tfsysnosuch").unwrap_err().to_string(),
            "no such interface: tfsysnosuch"
        );
        let lo = flags("lo").unwrap();
        assert!(lo.up && lo.running, "{lo:?}");
        assert_eq!(
            flags("tfsysnosuch").unwrap_err().to_string(),
            "no such interface: tfsysnosuch"
        );
        assert_eq!(
            link_state("lo", index("lo").unwrap()).unwrap(),
            LinkState::Up
        );
        for (name, ifindex) in [("lo", index("lo").unwrap() + 1000), ("tfsysnosuch", 1)] {
            let err = link_state(name, ifindex).unwrap_err().to_string();
            assert!(
                err.starts_with(&format!(
                    "if_nametoindex on {name} failed: the interface was deleted during the capture"
                )),
                "{err}"
            );
        }
        assert_eq!(speed_mbps("tfsys-no-such"), None);
        assert_eq!(speed_mbps("../lo"), None);
    }
}
