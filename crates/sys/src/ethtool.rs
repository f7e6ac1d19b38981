//! NIC settings through `ioctl(SIOCETHTOOL)`, as `ethtool` reads and changes them: offload
//! features by name (`-k` / `-K`), ring sizes (`-g` / `-G`), channels, i.e. RSS queues (`-l`),
//! and the driver (`-i`).
//!
//! A query the driver does not implement (`EOPNOTSUPP`: ring sizes on veth or loopback) comes
//! back as [`Support::NotSupported`], not as an error. Reading needs no privilege; changing needs
//! `CAP_NET_ADMIN`.
#![allow(unsafe_code)]

use std::os::fd::{AsFd, OwnedFd};
use std::ptr;

use crate::{SysError, iface, syscall};

const ETHTOOL_GDRVINFO: u32 = 0x03;
const ETHTOOL_GRINGPARAM: u32 = 0x10;
const ETHTOOL_SRINGPARAM: u32 = 0x11;
const ETHTOOL_GSTRINGS: u32 = 0x1b;
const ETHTOOL_GSSET_INFO: u32 = 0x37;
const ETHTOOL_GFEATURES: u32 = 0x3a;
const ETHTOOL_SFEATURES: u32 = 0x3b;
const ETHTOOL_GCHANNELS: u32 = 0x3c;
/// The string set of feature names (`enum ethtool_stringset`).
const ETH_SS_FEATURES: u32 = 4;
const ETH_GSTRING_LEN: usize = 32;
/// `ETHTOOL_SFEATURES` result: some bits asked for are not changeable.
const ETHTOOL_F_UNSUPPORTED: i32 = 1 << 0;
/// `ETHTOOL_SFEATURES` result: some changes were recorded but are not in effect.
const ETHTOOL_F_WISH: i32 = 1 << 1;

/// The answer to a query a driver may not implement.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Support<T> {
    /// The driver answered.
    Supported(T),
    /// The driver does not implement the operation (`EOPNOTSUPP`).
    NotSupported,
}

impl<T> Support<T> {
    /// The answer, if there is one.
    pub fn supported(self) -> Option<T> {
        match self {
            Support::Supported(t) => Some(t),
            Support::NotSupported => None,
        }
    }

    /// The answer by reference.
    pub fn as_ref(&self) -> Support<&T> {
        match self {
            Support::Supported(t) => Support::Supported(t),
            Support::NotSupported => Support::NotSupported,
        }
    }

    fn map<U>(self, f: impl FnOnce(T) -> U) -> Support<U> {
        match self {
            Support::Supported(t) => Support::Supported(f(t)),
            Support::NotSupported => Support::NotSupported,
        }
    }
}

/// `struct ethtool_drvinfo`.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
#[doc(alias = "ethtool_drvinfo")]
#[allow(dead_code)] // the kernel's layout: sized and offset, not every field read
struct RawDrvinfo {
    cmd: u32,
    driver: [u8; 32],
    version: [u8; 32],
    fw_version: [u8; 32],
    bus_info: [u8; 32],
    erom_version: [u8; 32],
    reserved2: [u8; 12],
    n_priv_flags: u32,
    n_stats: u32,
    testinfo_len: u32,
    eedump_len: u32,
    regdump_len: u32,
}

/// `struct ethtool_ringparam`.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
#[doc(alias = "ethtool_ringparam")]
struct RawRingparam {
    cmd: u32,
    rx_max_pending: u32,
    rx_mini_max_pending: u32,
    rx_jumbo_max_pending: u32,
    tx_max_pending: u32,
    rx_pending: u32,
    rx_mini_pending: u32,
    rx_jumbo_pending: u32,
    tx_pending: u32,
}

/// `struct ethtool_channels`.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
#[doc(alias = "ethtool_channels")]
struct RawChannels {
    cmd: u32,
    max_rx: u32,
    max_tx: u32,
    max_other: u32,
    max_combined: u32,
    rx_count: u32,
    tx_count: u32,
    other_count: u32,
    combined_count: u32,
}

/// `struct ethtool_sset_info` asking for one string set: its `data[]` has one entry.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
#[doc(alias = "ethtool_sset_info")]
struct RawSsetInfoOne {
    cmd: u32,
    reserved: u32,
    sset_mask: u64,
    data: [u32; 1],
}

/// Header of `struct ethtool_gstrings`; `len * ETH_GSTRING_LEN` bytes of names follow.
#[repr(C)]
#[doc(alias = "ethtool_gstrings")]
#[allow(dead_code)] // the kernel's layout: sized and offset, not every field read
struct RawGstringsHead {
    cmd: u32,
    string_set: u32,
    len: u32,
}

/// Header of `struct ethtool_gfeatures` and `struct ethtool_sfeatures`; `size` blocks follow.
#[repr(C)]
#[doc(alias("ethtool_gfeatures", "ethtool_sfeatures"))]
#[allow(dead_code)] // the kernel's layout: sized and offset, not every field read
struct RawFeaturesHead {
    cmd: u32,
    size: u32,
}

/// `struct ethtool_get_features_block`: 32 features, one bit each.
#[repr(C)]
#[doc(alias = "ethtool_get_features_block")]
#[allow(dead_code)] // the kernel's layout: sized and offset, not every field read
struct RawGetFeaturesBlock {
    available: u32,
    requested: u32,
    active: u32,
    never_changed: u32,
}

/// `struct ethtool_set_features_block`.
#[repr(C)]
#[doc(alias = "ethtool_set_features_block")]
#[allow(dead_code)] // the kernel's layout: sized and offset, not every field read
struct RawSetFeaturesBlock {
    valid: u32,
    requested: u32,
}

/// `u32` words in a struct of `bytes` bytes.
const fn words(bytes: usize) -> usize {
    bytes / 4
}
const GSTRINGS_HEAD: usize = words(size_of::<RawGstringsHead>());
const FEATURES_HEAD: usize = words(size_of::<RawFeaturesHead>());
const GET_BLOCK: usize = words(size_of::<RawGetFeaturesBlock>());
const SET_BLOCK: usize = words(size_of::<RawSetFeaturesBlock>());

/// The driver, as `ethtool -i` shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DriverInfo {
    /// Driver name, e.g. `ixgbe`, `veth`.
    pub driver: String,
    /// Driver version.
    pub version: String,
    /// Firmware version (empty for virtual devices).
    pub firmware: String,
    /// Bus address, e.g. `0000:03:00.0` (empty for virtual devices).
    pub bus: String,
}

/// The NIC's receive and transmit descriptor rings (`ethtool -g`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Rings {
    /// Receive descriptors in use (`rx_pending`).
    pub rx: u32,
    /// Most receive descriptors the NIC takes (`rx_max_pending`).
    pub rx_max: u32,
    /// Transmit descriptors in use (`tx_pending`).
    pub tx: u32,
    /// Most transmit descriptors (`tx_max_pending`).
    pub tx_max: u32,
}

/// The NIC's channels, i.e. its interrupt-driven queues (`ethtool -l`). A combined channel has
/// one receive and one transmit queue.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Channels {
    /// Receive-only channels.
    pub rx: u32,
    /// Transmit-only channels.
    pub tx: u32,
    /// Other channels (link interrupts and the like).
    pub other: u32,
    /// Combined receive + transmit channels.
    pub combined: u32,
    /// Most receive-only channels.
    pub max_rx: u32,
    /// Most transmit-only channels.
    pub max_tx: u32,
    /// Most other channels.
    pub max_other: u32,
    /// Most combined channels.
    pub max_combined: u32,
}

impl Channels {
    /// Receive queues: combined plus receive-only channels.
    pub fn rx_queues(&self) -> u32 {
        self.combined.saturating_add(self.rx)
    }
}

/// One offload feature (`ethtool -k` line) by its kernel name, e.g. `rx-gro`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Feature {
    /// The kernel's name (`netdev_features_strings`), e.g. `rx-gro`, `tx-tcp-segmentation`.
    pub name: String,
    /// The driver lets it be changed (`hw_features`).
    pub available: bool,
    /// What was last asked for.
    pub requested: bool,
    /// Whether it is in effect.
    pub active: bool,
    /// The kernel never changes it (`NETIF_F_NEVER_CHANGE`).
    pub never_changed: bool,
    /// Its bit in the feature words.
    bit: usize,
}

impl Feature {
    /// Whether it can be switched: available and not never-changed (`ethtool -k` prints
    /// `[fixed]` otherwise).
    pub fn changeable(&self) -> bool {
        self.available && !self.never_changed
    }
}

/// The interface's offload features, in the kernel's order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Features {
    list: Vec<Feature>,
    /// Feature words (`ETHTOOL_DEV_FEATURE_WORDS`): 32 features each.
    words: usize,
}

impl Features {
    /// The feature named `name` (kernel name), if the kernel has it.
    pub fn get(&self, name: &str) -> Option<&Feature> {
        self.list.iter().find(|f| f.name == name)
    }

    /// Every feature, in the kernel's order.
    pub fn iter(&self) -> impl Iterator<Item = &Feature> {
        self.list.iter()
    }
}

/// What the kernel said to `ETHTOOL_SFEATURES` (the re-read features say what took effect).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct SetOutcome {
    /// Some features asked for cannot be changed on this device (`ETHTOOL_F_UNSUPPORTED`).
    pub unsupported: bool,
    /// Some changes were recorded but are not in effect (`ETHTOOL_F_WISH`): another feature
    /// or the driver holds them.
    pub wish: bool,
}

/// An `ioctl(SIOCETHTOOL)` channel to one interface.
#[derive(Debug)]
pub struct Ethtool {
    fd: OwnedFd,
    ifname: String,
}

impl Ethtool {
    /// Opens a datagram socket for ethtool requests on `ifname` (in the calling thread's network
    /// namespace); fails with [`SysError::NoSuchInterface`] for an unknown name.
    pub fn open(ifname: &str) -> Result<Ethtool, SysError> {
        const CALL: &str = "socket(AF_INET)";
        iface::index(ifname)?;
        let fd = syscall::socket(libc::AF_INET, libc::SOCK_DGRAM, 0, CALL)
            .map_err(|e| SysError::call(CALL, ifname, e))?;
        Ok(Ethtool {
            fd,
            ifname: ifname.to_owned(),
        })
    }

    /// The interface name.
    pub fn ifname(&self) -> &str {
        &self.ifname
    }

    /// One `SIOCETHTOOL` request; `EOPNOTSUPP` becomes `NotSupported`.
    ///
    /// # Safety
    /// As [`syscall::ioctl_ethtool`]: `cmd` covers what the kernel reads and writes for the
    /// command it holds, and lives across the call.
    unsafe fn ioctl(
        &self,
        cmd: *mut libc::c_void,
        call: &'static str,
    ) -> Result<Support<i32>, SysError> {
        // SAFETY: passed on from this function's own contract.
        match unsafe { syscall::ioctl_ethtool(self.fd.as_fd(), &self.ifname, cmd, call) } {
            Ok(r) => Ok(Support::Supported(r)),
            Err(e) => match e.raw_os_error() {
                Some(libc::EOPNOTSUPP) => Ok(Support::NotSupported),
                Some(libc::ENODEV | libc::ENXIO) => Err(SysError::NoSuchInterface {
                    name: self.ifname.clone(),
                }),
                Some(libc::EPERM | libc::EACCES) => Err(SysError::call_with(
                    call,
                    &self.ifname,
                    "needs root or CAP_NET_ADMIN",
                    e,
                )),
                _ => Err(SysError::call(call, &self.ifname, e)),
            },
        }
    }

    /// The driver's name and versions (`ETHTOOL_GDRVINFO`).
    #[doc(alias = "ETHTOOL_GDRVINFO")]
    pub fn driver(&self) -> Result<Support<DriverInfo>, SysError> {
        let mut d = RawDrvinfo {
            cmd: ETHTOOL_GDRVINFO,
            driver: [0; 32],
            version: [0; 32],
            fw_version: [0; 32],
            bus_info: [0; 32],
            erom_version: [0; 32],
            reserved2: [0; 12],
            n_priv_flags: 0,
            n_stats: 0,
            testinfo_len: 0,
            eedump_len: 0,
            regdump_len: 0,
        };
        // SAFETY: `d` is a live `struct ethtool_drvinfo` (layout checked in the tests), all the
        // kernel reads and writes for ETHTOOL_GDRVINFO.
        let r = unsafe { self.ioctl(ptr::from_mut(&mut d).cast(), "ioctl(ETHTOOL_GDRVINFO)") }?;
        Ok(r.map(|_| DriverInfo {
            driver: c_text(&d.driver),
            version: c_text(&d.version),
            firmware: c_text(&d.fw_version),
            bus: c_text(&d.bus_info),
        }))
    }

    fn raw_rings(&self) -> Result<Support<RawRingparam>, SysError> {
        let mut r = RawRingparam {
            cmd: ETHTOOL_GRINGPARAM,
            ..RawRingparam::default()
        };
        // SAFETY: `r` is a live `struct ethtool_ringparam` (layout checked in the tests), all
        // the kernel writes for ETHTOOL_GRINGPARAM.
        let s = unsafe { self.ioctl(ptr::from_mut(&mut r).cast(), "ioctl(ETHTOOL_GRINGPARAM)") }?;
        Ok(s.map(|_| r))
    }

    /// The descriptor ring sizes (`ETHTOOL_GRINGPARAM`, `ethtool -g`).
    #[doc(alias = "ETHTOOL_GRINGPARAM")]
    pub fn rings(&self) -> Result<Support<Rings>, SysError> {
        Ok(self.raw_rings()?.map(|r| Rings {
            rx: r.rx_pending,
            rx_max: r.rx_max_pending,
            tx: r.tx_pending,
            tx_max: r.tx_max_pending,
        }))
    }

    /// Sets the receive ring to `rx` descriptors, keeping the other rings
    /// (`ETHTOOL_SRINGPARAM`, `ethtool -G IFACE rx N`). Most drivers reset the NIC for this:
    /// the link drops for a moment.
    #[doc(alias = "ETHTOOL_SRINGPARAM")]
    pub fn set_rx_ring(&self, rx: u32) -> Result<Support<()>, SysError> {
        let Support::Supported(mut r) = self.raw_rings()? else {
            return Ok(Support::NotSupported);
        };
        const CALL: &str = "ioctl(ETHTOOL_SRINGPARAM)";
        if rx == 0 || rx > r.rx_max_pending {
            return Err(SysError::invalid(
                CALL,
                &self.ifname,
                format!(
                    "rx ring {rx} is out of range: 1 to {} descriptors",
                    r.rx_max_pending
                ),
            ));
        }
        r.cmd = ETHTOOL_SRINGPARAM;
        r.rx_pending = rx;
        // SAFETY: `r` is a live `struct ethtool_ringparam`, all the kernel reads for
        // ETHTOOL_SRINGPARAM.
        let s = unsafe { self.ioctl(ptr::from_mut(&mut r).cast(), CALL) }?;
        Ok(s.map(drop))
    }

    /// The channel counts (`ETHTOOL_GCHANNELS`, `ethtool -l`).
    #[doc(alias = "ETHTOOL_GCHANNELS")]
    pub fn channels(&self) -> Result<Support<Channels>, SysError> {
        let mut c = RawChannels {
            cmd: ETHTOOL_GCHANNELS,
            ..RawChannels::default()
        };
        // SAFETY: `c` is a live `struct ethtool_channels` (layout checked in the tests), all the
        // kernel writes for ETHTOOL_GCHANNELS.
        let s = unsafe { self.ioctl(ptr::from_mut(&mut c).cast(), "ioctl(ETHTOOL_GCHANNELS)") }?;
        Ok(s.map(|_| Channels {
            rx: c.rx_count,
            tx: c.tx_count,
            other: c.other_count,
            combined: c.combined_count,
            max_rx: c.max_rx,
            max_tx: c.max_tx,
            max_other: c.max_other,
            max_combined: c.max_combined,
        }))
    }

    /// Every offload feature with its state: names from `ETHTOOL_GSSET_INFO` +
    /// `ETHTOOL_GSTRINGS` (`ETH_SS_FEATURES`), states from `ETHTOOL_GFEATURES`.
    #[doc(alias("ETHTOOL_GFEATURES", "ETH_SS_FEATURES"))]
    pub fn features(&self) -> Result<Features, SysError> {
        let names = self.feature_names()?;
        let n_words = names.len().div_ceil(32);
        let mut buf = vec![0u32; FEATURES_HEAD + n_words * GET_BLOCK];
        buf[0] = ETHTOOL_GFEATURES;
        buf[1] = n_words as u32;
        const CALL: &str = "ioctl(ETHTOOL_GFEATURES)";
        // SAFETY: `buf` holds the header and `size` = `n_words` blocks; the kernel writes at most
        // `size` blocks (min of `size` and its own word count).
        let s = unsafe { self.ioctl(buf.as_mut_ptr().cast(), CALL) }?;
        if s == Support::NotSupported {
            return Err(not_supported(CALL, &self.ifname));
        }
        let word = |bit: usize, field: usize| buf[FEATURES_HEAD + (bit / 32) * GET_BLOCK + field];
        let list = names
            .into_iter()
            .enumerate()
            .filter(|(_, name)| !name.is_empty())
            .map(|(bit, name)| {
                let on = |field| word(bit, field) & (1 << (bit % 32)) != 0;
                Feature {
                    name,
                    available: on(0),
                    requested: on(1),
                    active: on(2),
                    never_changed: on(3),
                    bit,
                }
            })
            .collect();
        Ok(Features {
            list,
            words: n_words,
        })
    }

    /// The feature names, indexed by bit (an unused bit has an empty name).
    fn feature_names(&self) -> Result<Vec<String>, SysError> {
        const INFO: &str = "ioctl(ETHTOOL_GSSET_INFO)";
        let mut info = RawSsetInfoOne {
            cmd: ETHTOOL_GSSET_INFO,
            sset_mask: 1 << ETH_SS_FEATURES,
            ..RawSsetInfoOne::default()
        };
        // SAFETY: `info` is a live `struct ethtool_sset_info` with room for one `data` entry,
        // and the mask asks for one set, so the kernel writes at most one.
        let s = unsafe { self.ioctl(ptr::from_mut(&mut info).cast(), INFO) }?;
        if s == Support::NotSupported || info.sset_mask & (1 << ETH_SS_FEATURES) == 0 {
            return Err(not_supported(INFO, &self.ifname));
        }
        let count = info.data[0] as usize;
        if count > 4096 {
            return Err(SysError::invalid(
                INFO,
                &self.ifname,
                format!("{count} feature names is not believable"),
            ));
        }
        const CALL: &str = "ioctl(ETHTOOL_GSTRINGS)";
        let mut buf = vec![0u32; GSTRINGS_HEAD + count * ETH_GSTRING_LEN / 4];
        buf[0] = ETHTOOL_GSTRINGS;
        buf[1] = ETH_SS_FEATURES;
        buf[2] = count as u32;
        // SAFETY: `buf` holds the header and `count` names of ETH_GSTRING_LEN bytes. The kernel
        // writes as many names as it counts itself, and for ETH_SS_FEATURES that count is a
        // constant of the kernel (the size of `netdev_features_strings`), the one GSSET_INFO
        // just gave.
        let s = unsafe { self.ioctl(buf.as_mut_ptr().cast(), CALL) }?;
        if s == Support::NotSupported {
            return Err(not_supported(CALL, &self.ifname));
        }
        if buf[2] as usize != count {
            return Err(SysError::invalid(
                CALL,
                &self.ifname,
                format!("{} feature names, GSSET_INFO said {count}", buf[2]),
            ));
        }
        let bytes: Vec<u8> = buf[GSTRINGS_HEAD..]
            .iter()
            .flat_map(|w| w.to_ne_bytes())
            .collect();
        Ok(bytes.chunks(ETH_GSTRING_LEN).map(c_text).collect())
    }

    /// Switches the named features (kernel names, as in `features`) on or off in one
    /// `ETHTOOL_SFEATURES` request (`ethtool -K`). Read `features()` again to see what took
    /// effect: the kernel may keep a feature as it was when another one needs it.
    #[doc(alias = "ETHTOOL_SFEATURES")]
    pub fn set_features(
        &self,
        features: &Features,
        changes: &[(&str, bool)],
    ) -> Result<SetOutcome, SysError> {
        const CALL: &str = "ioctl(ETHTOOL_SFEATURES)";
        let mut buf = vec![0u32; FEATURES_HEAD + features.words * SET_BLOCK];
        buf[0] = ETHTOOL_SFEATURES;
        buf[1] = features.words as u32;
        for &(name, on) in changes {
            let f = features.get(name).ok_or_else(|| {
                SysError::invalid(CALL, &self.ifname, format!("no feature named {name}"))
            })?;
            let at = FEATURES_HEAD + (f.bit / 32) * SET_BLOCK;
            let mask = 1u32 << (f.bit % 32);
            buf[at] |= mask;
            if on {
                buf[at + 1] |= mask;
            } else {
                buf[at + 1] &= !mask;
            }
        }
        // SAFETY: `buf` holds the header and `size` = `words` blocks, the count GFEATURES gave;
        // the kernel reads that many (it refuses a smaller size) and writes nothing back.
        match unsafe { self.ioctl(buf.as_mut_ptr().cast(), CALL) }? {
            Support::Supported(r) => Ok(SetOutcome {
                unsupported: r & ETHTOOL_F_UNSUPPORTED != 0,
                wish: r & ETHTOOL_F_WISH != 0,
            }),
            Support::NotSupported => Err(not_supported(CALL, &self.ifname)),
        }
    }
}

/// An error for a request every device should answer.
fn not_supported(call: &'static str, ifname: &str) -> SysError {
    SysError::call(
        call,
        ifname,
        std::io::Error::from_raw_os_error(libc::EOPNOTSUPP),
    )
}

/// A NUL-padded C string field as text.
fn c_text(b: &[u8]) -> String {
    let end = b.iter().position(|&c| c == 0).unwrap_or(b.len());
    String::from_utf8_lossy(&b[..end]).into_owned()
}

#[cfg(test)]
mod tests {
    use std::mem::offset_of;

    use super::*;
    use crate::syscall::fake::Fake;

    /// Sizes and offsets as `<linux/ethtool.h>` has them (gcc: `sizeof`, `offsetof`).
    #[test]
    fn layouts_match_the_kernel() {
        assert_eq!(size_of::<RawDrvinfo>(), 196);
        assert_eq!(offset_of!(RawDrvinfo, driver), 4);
        assert_eq!(offset_of!(RawDrvinfo, bus_info), 100);
        assert_eq!(offset_of!(RawDrvinfo, n_priv_flags), 176);
        assert_eq!(size_of::<RawRingparam>(), 36);
        assert_eq!(offset_of!(RawRingparam, rx_pending), 20);
        assert_eq!(offset_of!(RawRingparam, tx_pending), 32);
        assert_eq!(size_of::<RawChannels>(), 36);
        assert_eq!(offset_of!(RawChannels, combined_count), 32);
        // The kernel's struct is 16 bytes before data[]; ours has room for one entry.
        assert_eq!(offset_of!(RawSsetInfoOne, sset_mask), 8);
        assert_eq!(offset_of!(RawSsetInfoOne, data), 16);
        assert_eq!(size_of::<RawGstringsHead>(), 12);
        assert_eq!(size_of::<RawFeaturesHead>(), 8);
        assert_eq!(size_of::<RawGetFeaturesBlock>(), 16);
        assert_eq!(size_of::<RawSetFeaturesBlock>(), 8);
        assert_eq!(
            (GSTRINGS_HEAD, FEATURES_HEAD, GET_BLOCK, SET_BLOCK),
            (3, 2, 4, 2)
        );
        assert_eq!(libc::SIOCETHTOOL, 0x8946);
    }

    #[test]
    fn loopback_features_read_without_privilege() {
        let e = Ethtool::open("lo").unwrap();
        let f = e.features().unwrap();
        // The kernel's own names, in its order; every device has the same list.
        assert!(f.iter().count() >= 40, "{f:?}");
        assert_eq!(f.iter().next().unwrap().name, "tx-scatter-gather");
        for name in [
            "rx-gro",
            "rx-lro",
            "tx-generic-segmentation",
            "tx-tcp-segmentation",
        ] {
            assert!(f.get(name).is_some(), "no {name}");
        }
        // lo is a loopback and always will be: active, never changed by anyone.
        let lb = f.get("loopback").expect("loopback feature");
        assert!(lb.active && !lb.changeable(), "{lb:?}");
        assert!(f.get("rx-gro").unwrap().changeable());
        assert!(f.get("no-such-feature").is_none());
    }

    #[test]
    fn loopback_has_no_rings_and_that_is_not_an_error() {
        let e = Ethtool::open("lo").unwrap();
        assert_eq!(e.rings().unwrap(), Support::NotSupported);
        assert_eq!(e.set_rx_ring(512).unwrap(), Support::NotSupported);
        // lo answers GDRVINFO or not depending on the kernel; either way it is not an error.
        e.driver().unwrap();
        e.channels().unwrap();
    }

    #[test]
    fn unknown_interface_is_no_such_interface() {
        let err = Ethtool::open("tfsys-no-such").unwrap_err();
        assert_eq!(err.to_string(), "no such interface: tfsys-no-such");
    }

    #[test]
    fn eopnotsupp_is_not_supported_and_other_errors_name_the_call() {
        let fake = Fake::install();
        let e = Ethtool::open("eth9").unwrap();
        fake.fail("ioctl(ETHTOOL_GCHANNELS)", libc::EOPNOTSUPP);
        fake.fail("ioctl(ETHTOOL_GDRVINFO)", libc::ENODEV);
        fake.fail("ioctl(ETHTOOL_GRINGPARAM)", libc::EIO);
        assert_eq!(e.channels().unwrap(), Support::NotSupported);
        assert_eq!(
            e.driver().unwrap_err().to_string(),
            "no such interface: eth9"
        );
        assert_eq!(
            e.rings().unwrap_err().to_string(),
            "ioctl(ETHTOOL_GRINGPARAM) on eth9 failed: Input/output error"
        );
        assert_eq!(
            fake.calls(),
            [
                "if_nametoindex",
                "socket(AF_INET)",
                "ioctl(ETHTOOL_GCHANNELS)",
                "ioctl(ETHTOOL_GDRVINFO)",
                "ioctl(ETHTOOL_GRINGPARAM)"
            ]
        );
    }

    #[test]
    fn setting_needs_cap_net_admin_and_known_names() {
        let features = Ethtool::open("lo").unwrap().features().unwrap();
        let fake = Fake::install();
        let e = Ethtool::open("eth9").unwrap();
        let err = e
            .set_features(&features, &[("no-such-feature", false)])
            .unwrap_err();
        assert_eq!(
            err.to_string(),
            "ioctl(ETHTOOL_SFEATURES) on eth9 failed: no feature named no-such-feature \
             (Invalid argument)"
        );
        assert!(!fake.calls().contains(&"ioctl(ETHTOOL_SFEATURES)"));
        fake.fail("ioctl(ETHTOOL_SFEATURES)", libc::EPERM);
        let err = e.set_features(&features, &[("rx-gro", false)]).unwrap_err();
        assert!(err.is_permission());
        assert_eq!(
            err.to_string(),
            "ioctl(ETHTOOL_SFEATURES) on eth9 failed: needs root or CAP_NET_ADMIN (Operation not \
             permitted)"
        );
    }

    #[test]
    fn c_text_stops_at_the_first_nul() {
        assert_eq!(c_text(b"veth\0\0\0"), "veth");
        assert_eq!(c_text(b"full"), "full");
        assert_eq!(c_text(b""), "");
    }
}
