//! `doctor`'s XDP checks: what the driver does with XDP (native, zero-copy), the receive
//! queues an XDP capture gets a worker for, the program attached now and who holds it, and
//! what would stop `capture --source xdp` or `bridge` from attaching. `--fix` detaches a
//! tapflow program nothing holds any more (named `tapflow_*`, attached with no tapflow
//! process behind it).

use serde::Serialize;
use tapflow_sys::ethtool::Support;
use tapflow_sys::netlink::{self, Attached, act};
use tapflow_sys::{iface, xdp};

use super::doctor::{Finding, Fix, Readings, Severity};
use crate::EngineError;

/// Where the XDP features come from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum FeatureSource {
    /// The kernel said (`NETDEV_CMD_DEV_GET`, Linux 6.3 and later).
    Netlink,
    /// tapflow's list of drivers, for older kernels.
    KnownDriver,
    /// Neither knows.
    Unknown,
}

/// A process that holds the BPF link of the attached program.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Holder {
    /// Its process id.
    pub pid: u32,
    /// Its command name (`/proc/PID/comm`).
    pub command: String,
}

/// The XDP program attached to the interface.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct AttachedProgram {
    /// The program's id.
    pub id: u32,
    /// How it is attached: `native`, `generic`, `offload`, `multi`.
    #[serde(serialize_with = "mode_name")]
    pub mode: Attached,
    /// Its name, when it could be read (needs privilege).
    pub name: Option<String>,
    /// The processes holding its BPF link (none: attached through netlink, or pinned).
    pub holders: Vec<Holder>,
}

fn mode_name<S: serde::Serializer>(m: &Attached, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(m.name())
}

impl AttachedProgram {
    /// Whether tapflow loaded it (its programs are all named `tapflow_*`).
    pub fn is_tapflow(&self) -> bool {
        self.name
            .as_deref()
            .is_some_and(|n| n.starts_with("tapflow_"))
    }

    fn describe(&self) -> String {
        format!(
            "{} (id {}, {})",
            self.name.as_deref().unwrap_or("a program"),
            self.id,
            self.mode.name()
        )
    }
}

/// What `doctor` reads of XDP on one interface.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct XdpReadings {
    /// `NETDEV_XDP_ACT_*` bits of the driver.
    pub features: u64,
    /// Where they come from.
    pub source: FeatureSource,
    /// The program attached now.
    pub attached: Option<AttachedProgram>,
}

/// Drivers with native XDP and AF_XDP redirect in Linux 6.1 (the kernel says so itself from
/// 6.3 on), and those of them with AF_XDP zero-copy.
const NATIVE_DRIVERS: [&str; 16] = [
    "veth",
    "virtio_net",
    "tun",
    "ixgbe",
    "ixgbevf",
    "i40e",
    "ice",
    "igb",
    "igc",
    "mlx4_en",
    "mlx5_core",
    "bnxt_en",
    "ena",
    "qede",
    "nfp",
    "stmmac",
];
const ZERO_COPY_DRIVERS: [&str; 6] = ["ixgbe", "i40e", "ice", "igc", "mlx5_core", "stmmac"];

impl XdpReadings {
    /// Reads `ifname`'s XDP support and attached program. The features and the program's
    /// id need no privilege; its name and holders do.
    pub fn read(ifname: &str, driver: Option<&str>) -> Result<XdpReadings, EngineError> {
        let ifindex = iface::index(ifname)?;
        let (features, source) = match netlink::xdp_features(ifname, ifindex) {
            Ok(Some(bits)) => (bits, FeatureSource::Netlink),
            _ => match driver {
                Some(d) if NATIVE_DRIVERS.contains(&d) => {
                    let zc = match ZERO_COPY_DRIVERS.contains(&d) {
                        true => act::XSK_ZEROCOPY,
                        false => 0,
                    };
                    (act::BASIC | act::REDIRECT | zc, FeatureSource::KnownDriver)
                }
                _ => (0, FeatureSource::Unknown),
            },
        };
        let attached = netlink::xdp_attached(ifname, ifindex)?.map(|(id, mode)| AttachedProgram {
            id,
            mode,
            name: xdp::program_name(ifname, id).ok(),
            holders: holders(id),
        });
        Ok(XdpReadings {
            features,
            source,
            attached,
        })
    }
}

/// The processes with a BPF link of type xdp to program `id` open (`/proc/*/fdinfo`).
fn holders(id: u32) -> Vec<Holder> {
    let want = format!("prog_id:\t{id}\n");
    let mut out = Vec::new();
    let Ok(procs) = std::fs::read_dir("/proc") else {
        return out;
    };
    for p in procs.flatten() {
        let Some(pid) = p.file_name().to_str().and_then(|s| s.parse::<u32>().ok()) else {
            continue;
        };
        let Ok(fds) = std::fs::read_dir(p.path().join("fdinfo")) else {
            continue;
        };
        let holds = fds.flatten().any(|fd| {
            std::fs::read_to_string(fd.path())
                .is_ok_and(|t| t.contains("link_type:\txdp\n") && t.contains(&want))
        });
        if holds {
            let command = std::fs::read_to_string(p.path().join("comm")).unwrap_or_default();
            out.push(Holder {
                pid,
                command: command.trim().to_string(),
            });
        }
    }
    out
}

/// Largest MTU whose frames fit one page with XDP's headroom in most drivers' native mode
/// (4096 - 256 headroom - 320 shared info - 14 - 8 for tags): larger needs multi-buffer XDP,
/// which tapflow's programs do not do, and does not fit its 4 KiB UMEM frames.
pub const XDP_MAX_MTU: u32 = 3498;

/// The XDP findings, in order: `xdp`, `xdp-queues`, `xdp-attached`, `xdp-blockers`.
pub fn findings(r: &Readings) -> Vec<Finding> {
    vec![support(r), queues(r), attached(r), blockers(r)]
}

fn support(r: &Readings) -> Finding {
    let x = &r.xdp;
    let from = match x.source {
        FeatureSource::Netlink => "the kernel's XDP features",
        FeatureSource::KnownDriver => "tapflow's list of drivers (the kernel does not say)",
        FeatureSource::Unknown => "neither the kernel nor tapflow's list of drivers",
    };
    let driver = match &r.driver {
        Support::Supported(d) => d.driver.clone(),
        Support::NotSupported => "unknown".into(),
    };
    if x.source == FeatureSource::Unknown {
        return Finding::new(
            "xdp",
            Severity::Advice,
            format!("XDP support of driver {driver} unknown"),
            format!(
                "Told by {from}. `capture --source xdp` and `bridge` try native XDP, then \
                 generic XDP, which works on every interface after the kernel made a socket \
                 buffer (slower: the stack's first step is not skipped)."
            ),
        );
    }
    if x.features & (act::BASIC | act::REDIRECT) != act::BASIC | act::REDIRECT {
        return Finding::new(
            "xdp",
            Severity::Advice,
            format!("driver {driver} has no native XDP redirect: generic XDP only"),
            format!(
                "Told by {from}. `capture --source xdp` and `bridge` run in generic mode here: \
                 after the kernel made a socket buffer, in copy mode, so AF_XDP costs about \
                 what AF_PACKET does."
            ),
        );
    }
    let zc = x.features & act::XSK_ZEROCOPY != 0;
    Finding::new(
        "xdp",
        Severity::Ok,
        format!(
            "driver {driver}: native XDP, AF_XDP {} (from {})",
            if zc { "zero-copy" } else { "copy mode" },
            match x.source {
                FeatureSource::Netlink => "netlink",
                _ => "known drivers",
            }
        ),
        format!(
            "Told by {from}. The XDP program runs in the driver before a socket buffer exists; \
             {}",
            if zc {
                "the NIC writes frames straight into tapflow's memory."
            } else {
                "the kernel copies each frame into tapflow's memory once."
            }
        ),
    )
}

fn queues(r: &Readings) -> Finding {
    let n = r
        .channels
        .as_ref()
        .supported()
        .map_or(1, |c| c.rx_queues())
        .max(1);
    Finding::new(
        "xdp-queues",
        Severity::Ok,
        format!(
            "{n} receive queue{0}: {n} AF_XDP socket{0} and worker{0}",
            if n == 1 { "" } else { "s" }
        ),
        format!(
            "`capture --source xdp` runs one worker and one AF_XDP socket per receive queue \
             ({n} here); `bridge` takes interfaces of one queue (`ethtool -L {} combined 1`).",
            r.ifname
        ),
    )
}

fn attached(r: &Readings) -> Finding {
    let Some(p) = &r.xdp.attached else {
        return Finding::new(
            "xdp-attached",
            Severity::Ok,
            "no XDP program attached".into(),
            "Nothing stands in the way of tapflow's XDP program.".into(),
        );
    };
    let held = p
        .holders
        .iter()
        .map(|h| format!("{} (pid {})", h.command, h.pid))
        .collect::<Vec<_>>()
        .join(", ");
    if p.is_tapflow() && p.holders.is_empty() {
        let flag = match p.mode {
            Attached::Native => "xdpdrv",
            Attached::Offload => "xdpoffload",
            Attached::Generic | Attached::Multi => "xdpgeneric",
        };
        let mut f = Finding::new(
            "xdp-attached",
            Severity::Warning,
            format!("stale tapflow XDP program {} attached", p.describe()),
            "A tapflow program that no running tapflow holds: attached through netlink or left \
             pinned, it takes the interface's frames from the stack (or lets them pass) with \
             nobody reading them, and a new XDP capture or bridge is refused."
                .into(),
        );
        f.command = Some(format!("ip link set dev {} {flag} off", r.ifname));
        f.fix = Some(Fix::DetachXdp {
            id: p.id,
            mode: p.mode.name(),
        });
        return f;
    }
    if p.is_tapflow() {
        return Finding::new(
            "xdp-attached",
            Severity::Advice,
            format!(
                "tapflow XDP program {} attached, held by {held}",
                p.describe()
            ),
            "A tapflow capture or bridge runs on this interface; another XDP capture here is \
             refused until it ends."
                .into(),
        );
    }
    let by = if held.is_empty() {
        "no process holds it (attached through netlink, or pinned)".to_string()
    } else {
        format!("held by {held}")
    };
    let mut f = Finding::new(
        "xdp-attached",
        Severity::Advice,
        format!("another tool's XDP program {} attached, {by}", p.describe()),
        "An interface has one XDP program: `capture --source xdp` and `bridge` are refused \
         here while it is attached. tapflow leaves another tool's program alone."
            .into(),
    );
    f.command = Some(format!("ip link set dev {} xdp off", r.ifname));
    f
}

fn blockers(r: &Readings) -> Finding {
    let mut found = Vec::new();
    let mut commands = Vec::new();
    if r.mtu > XDP_MAX_MTU {
        found.push(format!(
            "MTU {} above {XDP_MAX_MTU}: native XDP on one page is refused by most drivers, and \
             frames do not fit tapflow's 4 KiB UMEM frames",
            r.mtu
        ));
        commands.push(format!("ip link set dev {} mtu {XDP_MAX_MTU}", r.ifname));
    }
    if r.features.iter().any(|f| f.name == "rx-lro" && f.active) {
        found.push("LRO on: drivers refuse to attach native XDP while it merges segments".into());
        commands.push(format!("ethtool -K {} lro off", r.ifname));
    }
    if found.is_empty() {
        return Finding::new(
            "xdp-blockers",
            Severity::Ok,
            format!("MTU {} and offloads allow native XDP", r.mtu),
            format!("MTU at most {XDP_MAX_MTU} and LRO off: an XDP program can be attached."),
        );
    }
    let mut f = Finding::new(
        "xdp-blockers",
        Severity::Advice,
        format!("native XDP blocked: {}", found.join("; ")),
        "`capture --source xdp` and `bridge` then fall back to generic XDP, or fail when the \
         frames do not fit."
            .into(),
    );
    f.command = Some(commands.join(" && "));
    f
}

/// Detaches the stale tapflow program `id` from `ifname` if it is still the one attached.
pub fn detach(ifname: &str, id: u32) -> Result<Result<(), String>, EngineError> {
    let ifindex = iface::index(ifname)?;
    match netlink::xdp_attached(ifname, ifindex)? {
        Some((now, mode)) if now == id => {
            Ok(netlink::xdp_detach(ifname, ifindex, mode).map_err(|e| e.to_string()))
        }
        _ => Ok(Err(format!("program {id} is no longer attached"))),
    }
}

/// Whether program `id` is still attached to `ifname`.
pub fn still_attached(ifname: &str, id: u32) -> Result<bool, EngineError> {
    let ifindex = iface::index(ifname)?;
    Ok(netlink::xdp_attached(ifname, ifindex)?.is_some_and(|(now, _)| now == id))
}
