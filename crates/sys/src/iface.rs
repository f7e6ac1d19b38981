//! Network interfaces by name: index, MTU, flags, link speed.

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

/// The link speed in Mbit/s from `/sys/class/net/NAME/speed`; `None` when unknown (virtual
/// devices, link down, or an interface outside the namespace sysfs was mounted in).
pub fn speed_mbps(name: &str) -> Option<u32> {
    if name.is_empty() || name.contains('/') || name.starts_with('.') {
        return None;
    }
    let text = std::fs::read_to_string(format!("/sys/class/net/{name}/speed")).ok()?;
    let speed: i64 = text.trim().parse().ok()?;
    u32::try_from(speed).ok().filter(|&s| s > 0)
}

#[cfg(test)]
mod tests {
    use super::*;

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
        assert_eq!(speed_mbps("tfsys-no-such"), None);
        assert_eq!(speed_mbps("../lo"), None);
    }
}
