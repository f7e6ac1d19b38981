//! `tapflow doctor`: the NIC settings that make a capture lie or drop, each explained, with the
//! command that changes it; `--fix` changes the safe ones.
//!
//! [`Readings::read`] asks the kernel, [`diagnose`] turns the readings into [`Finding`]s (pure,
//! so every rule is unit-tested on made-up readings), and [`apply`] carries out the fixes that
//! are safe on a running probe: receive and segmentation offloads off, the rx ring to its
//! maximum. It never changes the MTU, VLAN stripping, promiscuous mode or the channel count.

use serde::Serialize;
use serde::ser::{SerializeStruct, Serializer};
use tapflow_sys::ethtool::{Channels, DriverInfo, Ethtool, Rings, Support};
use tapflow_sys::iface;

use crate::EngineError;
use crate::tools::doctor_xdp::{self, XdpReadings};

/// One offload feature as read; in JSON `{"active":…,"changeable":…}` under its name.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct FeatureState {
    /// The kernel's name, e.g. `rx-gro`.
    #[serde(skip)]
    pub name: String,
    /// In effect.
    pub active: bool,
    /// The driver lets it be switched (`ethtool -k` prints `[fixed]` otherwise).
    pub changeable: bool,
}

/// Everything `doctor` reads from one interface.
#[derive(Debug, Clone)]
pub struct Readings {
    /// The interface.
    pub ifname: String,
    /// The driver (`ethtool -i`).
    pub driver: Support<DriverInfo>,
    /// Link speed in Mbit/s, when known.
    pub speed_mbps: Option<u32>,
    /// The MTU.
    pub mtu: u32,
    /// Up, running, promiscuous.
    pub flags: iface::Flags,
    /// Every offload feature, in the kernel's order.
    pub features: Vec<FeatureState>,
    /// Descriptor ring sizes (`ethtool -g`).
    pub rings: Support<Rings>,
    /// Channels, i.e. RSS queues (`ethtool -l`).
    pub channels: Support<Channels>,
    /// XDP support and the program attached.
    pub xdp: XdpReadings,
}

impl Readings {
    /// Reads `ifname` in the calling thread's network namespace. Needs no privilege.
    pub fn read(ifname: &str) -> Result<Readings, EngineError> {
        let et = Ethtool::open(ifname)?;
        let features = et
            .features()?
            .iter()
            .map(|f| FeatureState {
                name: f.name.clone(),
                active: f.active,
                changeable: f.changeable(),
            })
            .collect();
        let driver = et.driver()?;
        let name = driver.as_ref().supported().map(|d| d.driver.as_str());
        let xdp = XdpReadings::read(ifname, name)?;
        Ok(Readings {
            ifname: ifname.to_owned(),
            driver,
            xdp,
            speed_mbps: iface::speed_mbps(ifname),
            mtu: iface::mtu(ifname)?,
            flags: iface::flags(ifname)?,
            features,
            rings: et.rings()?,
            channels: et.channels()?,
        })
    }

    /// The features whose kernel names match `pattern` (`*` stands for any run of characters).
    fn matching<'a>(&'a self, pattern: &'a str) -> impl Iterator<Item = &'a FeatureState> + 'a {
        self.features
            .iter()
            .filter(move |f| matches(pattern, &f.name))
    }
}

/// What the capture will be run with: the checks depend on it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Intent {
    /// Workers (`capture --threads`).
    pub threads: usize,
    /// Bytes kept of each packet (`capture -s`).
    pub snaplen: u32,
}

/// How much a finding matters to a capture.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Severity {
    /// Fine as it is (the finding explains what it means).
    Ok,
    /// Worth changing in some setups; not counted as a warning.
    Advice,
    /// Makes the capture lie or lose packets.
    Warning,
}

impl Severity {
    /// `ok`, `advice`, `warning`.
    pub fn name(self) -> &'static str {
        match self {
            Severity::Ok => "ok",
            Severity::Advice => "advice",
            Severity::Warning => "warning",
        }
    }
}

/// A change `--fix` makes; in JSON `{"features_off":[NAME,…]}` or `{"rx_ring":N}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Fix {
    /// Switch these features off, as `ethtool -K` does for the group `label`.
    #[serde(serialize_with = "feature_names")]
    FeaturesOff {
        /// The group's `ethtool -k` label, e.g. `generic-receive-offload`.
        label: &'static str,
        /// Kernel feature names, e.g. `rx-gro`.
        features: Vec<String>,
    },
    /// Raise the rx ring to this many descriptors.
    RxRing(u32),
    /// Detach the stale tapflow XDP program with this id, attached in this mode.
    DetachXdp {
        /// The program's id.
        id: u32,
        /// `native`, `generic`, `offload` or `multi`.
        mode: &'static str,
    },
}

fn feature_names<S: Serializer>(
    _label: &&'static str,
    features: &[String],
    s: S,
) -> Result<S::Ok, S::Error> {
    features.serialize(s)
}

/// One thing `doctor` has to say about the interface.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Finding {
    /// A stable name for scripts: `link`, `promisc`, `gro`, `lro`, `gro-hw`, `gso`, `tso`,
    /// `rxvlan`, `rx-ring`, `mtu`, `rss`, `xdp`, `xdp-queues`, `xdp-attached`, `xdp-blockers`.
    pub check: &'static str,
    /// How much it matters.
    pub severity: Severity,
    /// What was found, e.g. `generic-receive-offload on`.
    pub what: String,
    /// Why it matters for a capture.
    pub why: String,
    /// The command a person would type to change it, if any.
    pub command: Option<String>,
    /// What `--fix` does about it; `None` when `--fix` leaves it alone.
    pub fix: Option<Fix>,
    /// Features that are on and that the driver does not let anyone change (`[fixed]`).
    pub unchangeable: Vec<String>,
}

impl Finding {
    pub(crate) fn new(
        check: &'static str,
        severity: Severity,
        what: String,
        why: String,
    ) -> Finding {
        Finding {
            check,
            severity,
            what,
            why,
            command: None,
            fix: None,
            unchangeable: Vec::new(),
        }
    }
}

/// The number of findings that are warnings.
pub fn warnings(findings: &[Finding]) -> usize {
    findings
        .iter()
        .filter(|f| f.severity == Severity::Warning)
        .count()
}

/// An offload check: a group of features that `ethtool -K IFACE WORD` switches together.
struct Offload {
    check: &'static str,
    /// `ethtool -K` word.
    word: &'static str,
    /// `ethtool -k` label.
    label: &'static str,
    /// Kernel feature names (`*`: any run of characters).
    patterns: &'static [&'static str],
    /// Severity when on.
    on: Severity,
    /// Why it matters when on.
    why: &'static str,
}

const OFFLOADS: [Offload; 5] = [
    Offload {
        check: "gro",
        word: "gro",
        label: "generic-receive-offload",
        patterns: &["rx-gro"],
        on: Severity::Warning,
        why: "GRO merges consecutive segments of a flow into one large frame before any packet \
              socket sees them: the capture records fewer, larger packets than crossed the wire \
              (up to 64 KiB each), so packet counts, sizes and inter-arrival times lie. tapflow \
              marks frames longer than the MTU allows as offload-merged but cannot split them.",
    },
    Offload {
        check: "lro",
        word: "lro",
        label: "large-receive-offload",
        patterns: &["rx-lro"],
        on: Severity::Warning,
        why: "LRO merges TCP segments in the NIC and rewrites their headers: the capture sees \
              fewer, larger packets than the wire carried, and the headers of the merged \
              segments are gone.",
    },
    Offload {
        check: "gro-hw",
        word: "rx-gro-hw",
        label: "rx-gro-hw",
        patterns: &["rx-gro-hw"],
        on: Severity::Warning,
        why: "Hardware GRO merges segments in the NIC before the kernel sees them: the capture \
              records fewer, larger packets than crossed the wire.",
    },
    Offload {
        check: "gso",
        word: "gso",
        label: "generic-segmentation-offload",
        patterns: &["tx-generic-segmentation"],
        on: Severity::Advice,
        why: "GSO lets this host build sends larger than the MTU and cut them late. When the \
              device cannot take them whole the kernel cuts them before a capture sees them; \
              when it can (tso on, or a virtual device such as veth that passes them on uncut) \
              a capture records this host's own sends as frames of up to 64 KiB. Only traffic \
              this host sends; a passive probe sends little.",
    },
    Offload {
        check: "tso",
        word: "tso",
        label: "tcp-segmentation-offload",
        patterns: &["tx-tcp*-segmentation"],
        on: Severity::Advice,
        why: "The NIC cuts this host's TCP sends into segments, so the kernel hands it, and a \
              capture on this interface records, frames of up to 64 KiB instead of what goes on \
              the wire. Only traffic this host sends; a passive probe sends little.",
    },
];

/// Turns the readings into findings, in a fixed order: link, promisc, the offloads, VLAN
/// stripping, rx ring, MTU, RSS queues, then XDP's.
pub fn diagnose(r: &Readings, intent: &Intent) -> Vec<Finding> {
    let mut out = vec![link(r), promisc(r)];
    out.extend(OFFLOADS.iter().map(|o| offload(r, o)));
    out.push(vlan(r));
    out.push(rx_ring(r));
    out.push(mtu(r, intent));
    out.push(rss(r, intent));
    out.extend(doctor_xdp::findings(r));
    out
}

fn link(r: &Readings) -> Finding {
    let name = &r.ifname;
    if !r.flags.up {
        let mut f = Finding::new(
            "link",
            Severity::Warning,
            format!("{name} is down"),
            "A capture on a down interface sees nothing.".into(),
        );
        f.command = Some(format!("ip link set {name} up"));
        return f;
    }
    if !r.flags.running {
        return Finding::new(
            "link",
            Severity::Warning,
            format!("{name} is up but has no link"),
            "Nothing arrives until the link comes up: check the cable, the transceiver, and \
             the switch's mirror port."
                .into(),
        );
    }
    Finding::new(
        "link",
        Severity::Ok,
        format!("{name} is up with a link"),
        String::new(),
    )
}

fn promisc(r: &Readings) -> Finding {
    if r.flags.promisc {
        return Finding::new(
            "promisc",
            Severity::Ok,
            "promiscuous mode on".into(),
            "The NIC passes up every frame, whatever its destination address.".into(),
        );
    }
    let mut f = Finding::new(
        "promisc",
        Severity::Advice,
        "promiscuous mode off".into(),
        "The NIC passes up only frames addressed to this host, broadcasts, and the multicast \
         groups it joined; on a mirror or tap port most traffic is addressed to other hosts and \
         is dropped by the NIC, unseen and uncounted. tapflow's capture turns promiscuous mode \
         on while it captures (a PACKET_MR_PROMISC membership on its socket, as tcpdump; -p \
         leaves it off), and this flag does not show that: it shows only the setting made with \
         ip link, which other programs rely on. --fix leaves it alone."
            .into(),
    );
    f.command = Some(format!("ip link set {} promisc on", r.ifname));
    f
}

fn offload(r: &Readings, o: &Offload) -> Finding {
    let members: Vec<&FeatureState> = o.patterns.iter().flat_map(|p| r.matching(p)).collect();
    if members.is_empty() {
        return Finding::new(
            o.check,
            Severity::Ok,
            format!("{} not present", o.label),
            "The kernel has no such feature.".into(),
        );
    }
    let active: Vec<&FeatureState> = members.iter().copied().filter(|f| f.active).collect();
    if active.is_empty() {
        let fixed = if members.iter().all(|f| !f.changeable) {
            " [fixed]"
        } else {
            ""
        };
        return Finding::new(
            o.check,
            Severity::Ok,
            format!("{} off{fixed}", o.label),
            String::new(),
        );
    }
    let can: Vec<String> = active
        .iter()
        .filter(|f| f.changeable)
        .map(|f| f.name.clone())
        .collect();
    let cannot: Vec<String> = active
        .iter()
        .filter(|f| !f.changeable)
        .map(|f| f.name.clone())
        .collect();
    let fixed = if can.is_empty() { " [fixed]" } else { "" };
    let mut why = o.why.to_string();
    if !cannot.is_empty() {
        why.push_str(&format!(
            " The driver does not let {} be changed ([fixed]): no command turns it off.",
            cannot.join(", ")
        ));
    }
    let mut f = Finding::new(o.check, o.on, format!("{} on{fixed}", o.label), why);
    if !can.is_empty() {
        f.command = Some(format!("ethtool -K {} {} off", r.ifname, o.word));
        f.fix = Some(Fix::FeaturesOff {
            label: o.label,
            features: can,
        });
    }
    f.unchangeable = cannot;
    f
}

fn vlan(r: &Readings) -> Finding {
    let active: Vec<&str> = ["rx-vlan-hw-parse", "rx-vlan-stag-hw-parse"]
        .iter()
        .flat_map(|p| r.matching(p))
        .filter(|f| f.active)
        .map(|f| f.name.as_str())
        .collect();
    if active.is_empty() {
        return Finding::new(
            "rxvlan",
            Severity::Ok,
            "rx-vlan-offload off".into(),
            "VLAN tags stay in the received frames.".into(),
        );
    }
    Finding::new(
        "rxvlan",
        Severity::Ok,
        format!("rx-vlan-offload on ({})", active.join(", ")),
        format!(
            "The NIC strips the outer VLAN tag and the kernel passes it beside the frame \
             (tp_vlan_tci); tapflow puts it back into every record and flags it VLAN-restored, \
             so nothing is lost. A program that reads the socket without doing so sees untagged \
             frames; for such a program, `ethtool -K {} rxvlan off` keeps the tags in the \
             frames. --fix leaves it alone.",
            r.ifname
        ),
    )
}

fn rx_ring(r: &Readings) -> Finding {
    let rings = match r.rings {
        Support::NotSupported => {
            return Finding::new(
                "rx-ring",
                Severity::Ok,
                "rx ring: not reported by the driver".into(),
                "Virtual devices (veth, loopback, bridges) have no descriptor ring.".into(),
            );
        }
        Support::Supported(g) if g.rx_max == 0 => {
            return Finding::new(
                "rx-ring",
                Severity::Ok,
                "rx ring: no size reported".into(),
                String::new(),
            );
        }
        Support::Supported(g) => g,
    };
    let hold = |n: u32| match r.speed_mbps {
        Some(s) if s > 0 => format!(
            "{:.0} µs of minimum-size frames at {s} Mbit/s",
            f64::from(n) / crate::tools::plan::line_rate_pps(f64::from(s), 64) * 1e6
        ),
        _ => format!("{n} frames"),
    };
    if rings.rx >= rings.rx_max {
        return Finding::new(
            "rx-ring",
            Severity::Ok,
            format!("rx ring {} descriptors, the most this NIC takes", rings.rx),
            format!("It holds {} during a burst.", hold(rings.rx)),
        );
    }
    let mut f = Finding::new(
        "rx-ring",
        Severity::Advice,
        format!("rx ring {} of {} descriptors", rings.rx, rings.rx_max),
        format!(
            "The NIC keeps received frames in this ring until the kernel takes them. It holds \
             {} now, {} at the maximum. A burst that fills it is dropped by the NIC before the \
             kernel sees it, so tapflow's \"dropped by kernel\" does not count it (`ethtool -S \
             {}` does, as rx_missed_errors, rx_no_buffer_count or similar). A larger ring costs \
             memory and some cache locality; most drivers reset the NIC to resize it, so the \
             link drops for a moment.",
            hold(rings.rx),
            hold(rings.rx_max),
            r.ifname
        ),
    );
    f.command = Some(format!("ethtool -G {} rx {}", r.ifname, rings.rx_max));
    f.fix = Some(Fix::RxRing(rings.rx_max));
    f
}

fn mtu(r: &Readings, intent: &Intent) -> Finding {
    let (mtu, name) = (r.mtu, &r.ifname);
    let longest = mtu.saturating_add(18);
    let snap = if intent.snaplen >= longest {
        format!("-s {} keeps whole frames.", intent.snaplen)
    } else {
        format!(
            "-s {} keeps the first {} bytes of each frame, the headers, as tapflow intends; \
             whole frames need -s {longest}.",
            intent.snaplen, intent.snaplen
        )
    };
    let what = format!(
        "mtu {mtu}: frames up to {} bytes, {longest} with a VLAN tag",
        mtu.saturating_add(14)
    );
    if mtu < 1500 {
        let mut f = Finding::new(
            "mtu",
            Severity::Advice,
            what,
            format!(
                "A mirror port receives frames as long as the monitored network sends, usually \
                 up to 1518 bytes; most NICs drop longer ones than their MTU allows before the \
                 kernel sees them (rx_length_errors at best). --fix never changes the MTU. \
                 {snap}"
            ),
        );
        f.command = Some(format!("ip link set {name} mtu 1500"));
        return f;
    }
    let jumbo = if mtu < 9000 {
        format!(
            "Most NICs drop received frames longer than the MTU allows before the kernel sees \
             them: if the monitored network carries jumbo frames, raise it (`ip link set {name} \
             mtu 9000`; --fix never changes the MTU). "
        )
    } else {
        String::new()
    };
    Finding::new(
        "mtu",
        Severity::Ok,
        what,
        format!(
            "{jumbo}Frames longer than this in a capture were merged by receive offload. {snap}"
        ),
    )
}

fn rss(r: &Readings, intent: &Intent) -> Finding {
    let threads = intent.threads.max(1);
    let workers = |n: usize| format!("{n} worker{}", if n == 1 { "" } else { "s" });
    let c = match r.channels {
        Support::Supported(c) if c.rx_queues() > 0 => c,
        _ => {
            return Finding::new(
                "rss",
                Severity::Ok,
                "receive queues: not reported by the driver".into(),
                "Single-queue and virtual devices often report none; tapflow's fanout spreads \
                 frames over its workers either way."
                    .into(),
            );
        }
    };
    let queues = c.rx_queues() as usize;
    if virtual_device(r) {
        return Finding::new(
            "rss",
            Severity::Ok,
            format!(
                "{queues} receive queue{}, {} (--threads {threads})",
                if queues == 1 { "" } else { "s" },
                workers(threads)
            ),
            "A virtual device has no hardware RSS: frames are received on the CPU that sends \
             them (or where RPS puts them); tapflow's fanout spreads them over its workers."
                .into(),
        );
    }
    let (word, max) = if c.max_combined > 0 {
        ("combined", c.max_combined as usize)
    } else {
        ("rx", c.max_rx as usize)
    };
    let what = format!(
        "{queues} receive queue{} of at most {max}, {} (--threads {threads})",
        if queues == 1 { "" } else { "s" },
        workers(threads)
    );
    if threads > 1 && queues == 1 {
        let mut why = "All frames arrive on one queue, so one CPU runs the kernel's half of the \
                       capture (receiving each frame and copying it into a worker's ring) for \
                       every worker; the workers share only the user-space half."
            .to_string();
        let mut command = None;
        if max > 1 {
            why.push_str(&format!(
                " The NIC offers up to {max} queues; RSS spreads frames over them and so over \
                 CPUs. --fix leaves the channels alone: changing them resets the NIC."
            ));
            command = Some(format!(
                "ethtool -L {} {word} {}",
                r.ifname,
                threads.min(max)
            ));
        }
        let mut f = Finding::new("rss", Severity::Advice, what, why);
        f.command = command;
        return f;
    }
    if threads == 1 && queues > 1 {
        let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
        let n = queues.min(cpus).max(2);
        let mut f = Finding::new(
            "rss",
            Severity::Advice,
            what,
            format!(
                "RSS spreads the kernel's half of the capture over up to {queues} CPUs, but one \
                 worker reads every frame and is the limit at high rates. Capture with more \
                 workers; the fanout hash keeps both directions of a flow on one worker."
            ),
        );
        f.command = Some(format!("tapflow capture -i {} --threads {n}", r.ifname));
        return f;
    }
    Finding::new(
        "rss",
        Severity::Ok,
        what,
        "RSS spreads frames over the queues' CPUs and tapflow's fanout hash over the workers."
            .into(),
    )
}

/// Drivers of devices with no hardware behind them.
const VIRTUAL_DRIVERS: [&str; 11] = [
    "veth",
    "tun",
    "bridge",
    "bonding",
    "team",
    "dummy",
    "macvlan",
    "ipvlan",
    "vxlan",
    "geneve",
    "openvswitch",
];

/// Whether the interface is a virtual device: a virtual driver, or no bus address.
fn virtual_device(r: &Readings) -> bool {
    match &r.driver {
        Support::Supported(d) => d.bus.is_empty() || VIRTUAL_DRIVERS.contains(&d.driver.as_str()),
        Support::NotSupported => false,
    }
}

/// Whether kernel feature name `name` matches `pattern` (at most one `*`).
fn matches(pattern: &str, name: &str) -> bool {
    match pattern.split_once('*') {
        None => pattern == name,
        Some((head, tail)) => {
            name.len() >= head.len() + tail.len() && name.starts_with(head) && name.ends_with(tail)
        }
    }
}

/// How one change of `--fix` went; in JSON `"outcome"` (`applied`, `kept`, `refused`,
/// `not_supported`, `fixed`) and `"detail"` (why, for `kept` and `refused`; else `null`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// The kernel took it: the re-read shows the new setting.
    Applied,
    /// The request went through but the re-read shows these still as they were.
    Kept(String),
    /// The kernel refused (the error, e.g. no privilege).
    Refused(String),
    /// The driver cannot do it.
    NotSupported,
    /// The driver does not let these features be changed (`[fixed]`); nothing was asked.
    Fixed,
}

impl Serialize for Outcome {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let (outcome, detail) = match self {
            Outcome::Applied => ("applied", None),
            Outcome::Kept(why) => ("kept", Some(why)),
            Outcome::Refused(e) => ("refused", Some(e)),
            Outcome::NotSupported => ("not_supported", None),
            Outcome::Fixed => ("fixed", None),
        };
        let mut st = s.serialize_struct("Outcome", 2)?;
        st.serialize_field("outcome", outcome)?;
        st.serialize_field("detail", &detail)?;
        st.end()
    }
}

/// One change `--fix` made or tried.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Change {
    /// The finding's check.
    pub check: &'static str,
    /// What was asked, e.g. `generic-receive-offload off`.
    pub what: String,
    /// The kernel features it touched, e.g. `rx-gro` (empty for the ring).
    pub features: Vec<String>,
    /// The same as a command a person would type.
    pub command: Option<String>,
    /// How it went.
    #[serde(flatten)]
    pub outcome: Outcome,
}

impl Change {
    /// Whether the kernel took it.
    pub fn applied(&self) -> bool {
        self.outcome == Outcome::Applied
    }
}

/// Carries out the fixes of `findings` on `ifname` (in the calling thread's network namespace),
/// re-reading after each change to see what took effect. Findings whose features the driver
/// keeps fixed are reported as [`Outcome::Fixed`]. Needs `CAP_NET_ADMIN`; without it every
/// change is [`Outcome::Refused`].
pub fn apply(ifname: &str, findings: &[Finding]) -> Result<Vec<Change>, EngineError> {
    let et = Ethtool::open(ifname)?;
    let mut changes = Vec::new();
    for f in findings {
        match &f.fix {
            Some(Fix::FeaturesOff { label, features }) => {
                changes.push(features_off(&et, f, label, features)?);
            }
            Some(Fix::RxRing(to)) => changes.push(raise_rx_ring(&et, f, *to)?),
            Some(Fix::DetachXdp { id, .. }) => changes.push(detach_xdp(ifname, f, *id)?),
            None => {}
        }
        if !f.unchangeable.is_empty() {
            changes.push(Change {
                check: f.check,
                what: format!("{} off", f.unchangeable.join(", ")),
                features: f.unchangeable.clone(),
                command: None,
                outcome: Outcome::Fixed,
            });
        }
    }
    Ok(changes)
}

fn features_off(
    et: &Ethtool,
    f: &Finding,
    label: &str,
    names: &[String],
) -> Result<Change, EngineError> {
    let what = format!("{label} off");
    let before = et.features()?;
    let wanted: Vec<(&str, bool)> = names.iter().map(|n| (n.as_str(), false)).collect();
    let outcome = match et.set_features(&before, &wanted) {
        Err(e) => Outcome::Refused(e.to_string()),
        Ok(said) => {
            let after = et.features()?;
            let still: Vec<&str> = names
                .iter()
                .filter(|n| after.get(n).is_some_and(|s| s.active))
                .map(String::as_str)
                .collect();
            if still.is_empty() {
                Outcome::Applied
            } else {
                let mut why = format!("{} still on", still.join(", "));
                if said.wish {
                    why.push_str(
                        ": the kernel recorded the request but another setting keeps it on",
                    );
                } else if said.unsupported {
                    why.push_str(": the driver does not let it be changed");
                }
                Outcome::Kept(why)
            }
        }
    };
    Ok(Change {
        check: f.check,
        what,
        features: names.to_vec(),
        command: f.command.clone(),
        outcome,
    })
}

fn detach_xdp(ifname: &str, f: &Finding, id: u32) -> Result<Change, EngineError> {
    let outcome = match doctor_xdp::detach(ifname, id)? {
        Err(why) => Outcome::Refused(why),
        Ok(()) if doctor_xdp::still_attached(ifname, id)? => {
            Outcome::Kept(format!("program {id} is still attached"))
        }
        Ok(()) => Outcome::Applied,
    };
    Ok(Change {
        check: f.check,
        what: format!("XDP program {id} detached"),
        features: Vec::new(),
        command: f.command.clone(),
        outcome,
    })
}

fn raise_rx_ring(et: &Ethtool, f: &Finding, to: u32) -> Result<Change, EngineError> {
    let outcome = match et.set_rx_ring(to) {
        Err(e) => Outcome::Refused(e.to_string()),
        Ok(Support::NotSupported) => Outcome::NotSupported,
        Ok(Support::Supported(())) => match et.rings()? {
            Support::Supported(g) if g.rx == to => Outcome::Applied,
            Support::Supported(g) => Outcome::Kept(format!("rx ring is {}", g.rx)),
            Support::NotSupported => Outcome::NotSupported,
        },
    };
    Ok(Change {
        check: f.check,
        what: format!("rx ring to {to}"),
        features: Vec::new(),
        command: f.command.clone(),
        outcome,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tools::doctor_xdp::{AttachedProgram, FeatureSource, Holder};
    use tapflow_sys::netlink::{Attached, act};

    fn program(name: &str, holders: Vec<Holder>) -> AttachedProgram {
        AttachedProgram {
            id: 42,
            mode: Attached::Generic,
            name: Some(name.into()),
            holders,
        }
    }

    #[test]
    fn a_tapflow_program_nobody_holds_is_a_warning_that_fix_detaches() {
        let mut r = nic();
        r.xdp.attached = Some(program("tapflow_xdp", vec![]));
        let fs = diagnose(&r, &ONE);
        let f = find(&fs, "xdp-attached");
        assert_eq!(f.severity, Severity::Warning);
        assert!(
            f.what.contains("stale") && f.what.contains("id 42"),
            "{}",
            f.what
        );
        assert_eq!(
            f.fix,
            Some(Fix::DetachXdp {
                id: 42,
                mode: "generic"
            })
        );
        assert_eq!(
            f.command.as_deref(),
            Some("ip link set dev eth0 xdpgeneric off")
        );
        assert_eq!(
            serde_json::to_string(&f.fix).unwrap(),
            "{\"detach_xdp\":{\"id\":42,\"mode\":\"generic\"}}"
        );
    }

    #[test]
    fn a_running_tapflow_or_another_tool_is_left_alone() {
        let mut r = nic();
        let held = vec![Holder {
            pid: 7,
            command: "tapflow".into(),
        }];
        r.xdp.attached = Some(program("tapflow_bridge", held));
        let fs = diagnose(&r, &ONE);
        let f = find(&fs, "xdp-attached");
        assert_eq!((f.severity, f.fix.is_none()), (Severity::Advice, true));
        assert!(f.what.contains("tapflow (pid 7)"), "{}", f.what);
        r.xdp.attached = Some(program("xdp_dispatcher", vec![]));
        let fs = diagnose(&r, &ONE);
        let f = find(&fs, "xdp-attached");
        assert_eq!((f.severity, f.fix.is_none()), (Severity::Advice, true));
        assert!(f.what.contains("another tool"), "{}", f.what);
    }

    #[test]
    fn xdp_support_says_where_it_comes_from_and_what_blocks() {
        let fs = diagnose(&nic(), &ONE);
        let f = find(&fs, "xdp");
        assert_eq!(f.severity, Severity::Ok);
        assert!(
            f.what.contains("zero-copy") && f.what.contains("netlink"),
            "{}",
            f.what
        );
        assert_eq!(
            find(&fs, "xdp-queues").what,
            "8 receive queues: 8 AF_XDP sockets and workers"
        );
        assert_eq!(find(&fs, "xdp-blockers").severity, Severity::Ok);
        let mut r = nic();
        r.xdp.features = act::BASIC | act::REDIRECT;
        r.xdp.source = FeatureSource::KnownDriver;
        r.mtu = 9000;
        r.features.push(feature("rx-lro", true, true));
        let fs = diagnose(&r, &ONE);
        let f = find(&fs, "xdp");
        assert!(
            f.what.contains("copy mode") && f.what.contains("known drivers"),
            "{}",
            f.what
        );
        let b = find(&fs, "xdp-blockers");
        assert_eq!(b.severity, Severity::Advice);
        assert!(
            b.what.contains("MTU 9000") && b.what.contains("LRO"),
            "{}",
            b.what
        );
        r.xdp.features = 0;
        r.xdp.source = FeatureSource::Unknown;
        let f = find(&diagnose(&r, &ONE), "xdp").clone();
        assert!(f.what.contains("unknown"), "{}", f.what);
    }

    #[test]
    fn findings_and_changes_as_json() {
        let f = Finding {
            check: "gro",
            severity: Severity::Warning,
            what: "generic-receive-offload on".into(),
            why: String::new(),
            command: None,
            fix: Some(Fix::FeaturesOff {
                label: "generic-receive-offload",
                features: vec!["rx-gro".into()],
            }),
            unchangeable: vec![],
        };
        assert_eq!(
            serde_json::to_string(&f).unwrap(),
            "{\"check\":\"gro\",\"severity\":\"warning\",\"what\":\"generic-receive-offload on\",\
             \"why\":\"\",\"command\":null,\"fix\":{\"features_off\":[\"rx-gro\"]},\"unchangeable\":[]}"
        );
        let ring = serde_json::to_string(&Fix::RxRing(4096)).unwrap();
        assert_eq!(ring, "{\"rx_ring\":4096}");
        let c = Change {
            check: "rx-ring",
            what: "rx ring 4096".into(),
            features: vec![],
            command: Some("ethtool -G eth0 rx 4096".into()),
            outcome: Outcome::Kept("still 512".into()),
        };
        assert_eq!(
            serde_json::to_string(&c).unwrap(),
            "{\"check\":\"rx-ring\",\"what\":\"rx ring 4096\",\"features\":[],\
             \"command\":\"ethtool -G eth0 rx 4096\",\"outcome\":\"kept\",\"detail\":\"still 512\"}"
        );
        let applied = Change {
            outcome: Outcome::NotSupported,
            ..c
        };
        assert!(
            serde_json::to_string(&applied)
                .unwrap()
                .ends_with("\"outcome\":\"not_supported\",\"detail\":null}")
        );
    }

    fn feature(name: &str, active: bool, changeable: bool) -> FeatureState {
        FeatureState {
            name: name.into(),
            active,
            changeable,
        }
    }

    /// A 10G NIC with every offload on, a small ring, 8 queues, promiscuous off.
    fn nic() -> Readings {
        Readings {
            ifname: "eth0".into(),
            driver: Support::Supported(DriverInfo {
                driver: "ixgbe".into(),
                version: "6.1".into(),
                firmware: "0x800".into(),
                bus: "0000:03:00.0".into(),
            }),
            speed_mbps: Some(10_000),
            mtu: 1500,
            flags: iface::Flags {
                up: true,
                running: true,
                promisc: false,
            },
            features: vec![
                feature("tx-scatter-gather", true, true),
                feature("rx-vlan-hw-parse", true, true),
                feature("tx-generic-segmentation", true, true),
                feature("rx-lro", false, true),
                feature("tx-tcp-segmentation", true, true),
                feature("tx-tcp-ecn-segmentation", true, false),
                feature("tx-tcp6-segmentation", true, true),
                feature("rx-gro", true, true),
                feature("rx-gro-hw", true, false),
                feature("loopback", false, false),
            ],
            rings: Support::Supported(Rings {
                rx: 512,
                rx_max: 4096,
                tx: 512,
                tx_max: 4096,
            }),
            channels: Support::Supported(Channels {
                rx: 0,
                tx: 0,
                other: 1,
                combined: 8,
                max_rx: 0,
                max_tx: 0,
                max_other: 1,
                max_combined: 63,
            }),
            xdp: XdpReadings {
                features: act::BASIC | act::REDIRECT | act::XSK_ZEROCOPY,
                source: FeatureSource::Netlink,
                attached: None,
            },
        }
    }

    const ONE: Intent = Intent {
        threads: 1,
        snaplen: 128,
    };

    fn find<'a>(fs: &'a [Finding], check: &str) -> &'a Finding {
        fs.iter().find(|f| f.check == check).expect(check)
    }

    #[test]
    fn every_check_is_reported_once_in_order() {
        let fs = diagnose(&nic(), &ONE);
        let checks: Vec<&str> = fs.iter().map(|f| f.check).collect();
        assert_eq!(
            checks,
            [
                "link",
                "promisc",
                "gro",
                "lro",
                "gro-hw",
                "gso",
                "tso",
                "rxvlan",
                "rx-ring",
                "mtu",
                "rss",
                "xdp",
                "xdp-queues",
                "xdp-attached",
                "xdp-blockers"
            ]
        );
        // GRO and hardware GRO on.
        assert_eq!(warnings(&fs), 2);
    }

    #[test]
    fn gro_on_is_a_warning_with_the_ethtool_command_and_a_fix() {
        let fs = diagnose(&nic(), &ONE);
        let gro = find(&fs, "gro");
        assert_eq!(gro.severity, Severity::Warning);
        assert_eq!(gro.what, "generic-receive-offload on");
        assert!(gro.why.contains("fewer, larger packets"), "{}", gro.why);
        assert_eq!(gro.command.as_deref(), Some("ethtool -K eth0 gro off"));
        assert_eq!(
            gro.fix,
            Some(Fix::FeaturesOff {
                label: "generic-receive-offload",
                features: vec!["rx-gro".into()]
            })
        );
        let lro = find(&fs, "lro");
        assert_eq!(
            (lro.severity, lro.what.as_str()),
            (Severity::Ok, "large-receive-offload off")
        );
        assert_eq!(lro.fix, None);
    }

    #[test]
    fn a_fixed_feature_that_is_on_is_said_to_be_unchangeable() {
        let fs = diagnose(&nic(), &ONE);
        let hw = find(&fs, "gro-hw");
        assert_eq!(hw.severity, Severity::Warning);
        assert_eq!(hw.what, "rx-gro-hw on [fixed]");
        assert_eq!((hw.command.as_ref(), hw.fix.as_ref()), (None, None));
        assert_eq!(hw.unchangeable, ["rx-gro-hw"]);
        assert!(
            hw.why.contains("does not let rx-gro-hw be changed"),
            "{}",
            hw.why
        );
        // A group where some members are fixed: the rest are switched, the fixed one named.
        let tso = find(&fs, "tso");
        assert_eq!(tso.severity, Severity::Advice);
        assert_eq!(tso.what, "tcp-segmentation-offload on");
        assert_eq!(
            tso.fix,
            Some(Fix::FeaturesOff {
                label: "tcp-segmentation-offload",
                features: vec!["tx-tcp-segmentation".into(), "tx-tcp6-segmentation".into()]
            })
        );
        assert_eq!(tso.unchangeable, ["tx-tcp-ecn-segmentation"]);
    }

    #[test]
    fn segmentation_offloads_are_advice_and_vlan_stripping_is_fine() {
        let fs = diagnose(&nic(), &ONE);
        let gso = find(&fs, "gso");
        assert_eq!(gso.severity, Severity::Advice);
        assert_eq!(gso.command.as_deref(), Some("ethtool -K eth0 gso off"));
        let v = find(&fs, "rxvlan");
        assert_eq!(v.severity, Severity::Ok);
        assert_eq!(v.what, "rx-vlan-offload on (rx-vlan-hw-parse)");
        assert!(v.why.contains("tp_vlan_tci") && v.why.contains("--fix leaves it alone"));
        assert_eq!(v.fix, None);
    }

    #[test]
    fn a_small_ring_is_advice_to_raise_it_to_the_maximum() {
        let fs = diagnose(&nic(), &ONE);
        let ring = find(&fs, "rx-ring");
        assert_eq!(ring.severity, Severity::Advice);
        assert_eq!(ring.what, "rx ring 512 of 4096 descriptors");
        // 512 / 14.88 Mpps = 34 µs; 4096 → 275 µs.
        assert!(
            ring.why.contains("34 µs") && ring.why.contains("275 µs"),
            "{}",
            ring.why
        );
        assert_eq!(ring.command.as_deref(), Some("ethtool -G eth0 rx 4096"));
        assert_eq!(ring.fix, Some(Fix::RxRing(4096)));
        let mut r = nic();
        r.rings = Support::NotSupported;
        let ring = find(&diagnose(&r, &ONE), "rx-ring").clone();
        assert_eq!((ring.severity, ring.fix), (Severity::Ok, None));
        assert_eq!(ring.what, "rx ring: not reported by the driver");
    }

    #[test]
    fn promiscuous_off_is_advice_that_fix_leaves_alone() {
        let fs = diagnose(&nic(), &ONE);
        let p = find(&fs, "promisc");
        assert_eq!(p.severity, Severity::Advice);
        assert_eq!(p.command.as_deref(), Some("ip link set eth0 promisc on"));
        assert_eq!(p.fix, None);
        assert!(
            p.why
                .contains("turns promiscuous mode on while it captures"),
            "{}",
            p.why
        );
        let mut r = nic();
        r.flags.promisc = true;
        assert_eq!(find(&diagnose(&r, &ONE), "promisc").severity, Severity::Ok);
    }

    #[test]
    fn link_down_is_a_warning() {
        let mut r = nic();
        r.flags.running = false;
        let l = find(&diagnose(&r, &ONE), "link").clone();
        assert_eq!(
            (l.severity, l.what.as_str()),
            (Severity::Warning, "eth0 is up but has no link")
        );
        r.flags.up = false;
        let l = find(&diagnose(&r, &ONE), "link").clone();
        assert_eq!(l.command.as_deref(), Some("ip link set eth0 up"));
    }

    #[test]
    fn mtu_against_snaplen() {
        let fs = diagnose(&nic(), &ONE);
        let m = find(&fs, "mtu");
        assert_eq!(m.severity, Severity::Ok);
        assert_eq!(
            m.what,
            "mtu 1500: frames up to 1514 bytes, 1518 with a VLAN tag"
        );
        assert!(m.why.contains("whole frames need -s 1518"), "{}", m.why);
        assert_eq!(m.fix, None);
        let mut r = nic();
        r.mtu = 1400;
        let big = Intent {
            threads: 1,
            snaplen: 9000,
        };
        let m = find(&diagnose(&r, &big), "mtu").clone();
        assert_eq!(m.severity, Severity::Advice);
        assert!(m.why.contains("-s 9000 keeps whole frames"), "{}", m.why);
        assert_eq!(m.fix, None, "--fix never changes the MTU");
    }

    #[test]
    fn queues_against_workers() {
        // 8 queues, 1 worker: advice to use more workers.
        let q = find(&diagnose(&nic(), &ONE), "rss").clone();
        assert_eq!(q.severity, Severity::Advice);
        assert_eq!(
            q.what,
            "8 receive queues of at most 63, 1 worker (--threads 1)"
        );
        assert!(
            q.command
                .unwrap()
                .starts_with("tapflow capture -i eth0 --threads ")
        );
        // 8 queues, 4 workers: fine.
        let four = Intent {
            threads: 4,
            snaplen: 128,
        };
        assert_eq!(find(&diagnose(&nic(), &four), "rss").severity, Severity::Ok);
        // 1 queue, 4 workers: one CPU does the kernel's work; the NIC could do more.
        let mut r = nic();
        r.channels = Support::Supported(Channels {
            combined: 1,
            ..match r.channels {
                Support::Supported(c) => c,
                Support::NotSupported => unreachable!(),
            }
        });
        let q = find(&diagnose(&r, &four), "rss").clone();
        assert_eq!(q.severity, Severity::Advice);
        assert_eq!(q.command.as_deref(), Some("ethtool -L eth0 combined 4"));
        assert_eq!(q.fix, None);
        // A veth: queues, but no hardware RSS to advise on.
        r.driver = Support::Supported(DriverInfo {
            driver: "veth".into(),
            version: "1.0".into(),
            firmware: String::new(),
            bus: String::new(),
        });
        let q = find(&diagnose(&r, &four), "rss").clone();
        assert_eq!((q.severity, q.command), (Severity::Ok, None));
        assert_eq!(q.what, "1 receive queue, 4 workers (--threads 4)");
        r.channels = Support::NotSupported;
        assert_eq!(find(&diagnose(&r, &four), "rss").severity, Severity::Ok);
    }

    #[test]
    fn a_clean_interface_has_no_warnings() {
        let mut r = nic();
        r.flags.promisc = true;
        for f in &mut r.features {
            if f.changeable {
                f.active = false;
            }
        }
        r.features.retain(|f| f.name != "rx-gro-hw");
        let fs = diagnose(&r, &ONE);
        assert_eq!(warnings(&fs), 0, "{fs:#?}");
        assert_eq!(find(&fs, "gro").what, "generic-receive-offload off");
        assert_eq!(find(&fs, "gro-hw").what, "rx-gro-hw not present");
        // The fixed-on tx-tcp-ecn-segmentation keeps tso on, unchangeable, as advice.
        assert_eq!(find(&fs, "tso").what, "tcp-segmentation-offload on [fixed]");
    }

    #[test]
    fn patterns_match_like_ethtool() {
        assert!(matches("tx-tcp*-segmentation", "tx-tcp-segmentation"));
        assert!(matches("tx-tcp*-segmentation", "tx-tcp6-segmentation"));
        assert!(matches(
            "tx-tcp*-segmentation",
            "tx-tcp-accecn-segmentation"
        ));
        assert!(!matches("tx-tcp*-segmentation", "tx-udp-segmentation"));
        assert!(!matches("tx-tcp*-segmentation", "tx-tcp-segmentatio"));
        assert!(matches("rx-gro", "rx-gro"));
        assert!(!matches("rx-gro", "rx-gro-hw"));
    }
}
