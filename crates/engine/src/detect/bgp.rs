//! BGP announcements of attacked addresses through ExaBGP's text API (docs/detect.md).
//!
//! When an alert on one destination starts, its /32 (IPv4) or /128 (IPv6) is announced with
//! blackhole communities (default 65535:666, BLACKHOLE of RFC 7999), or a flowspec rule
//! (RFC 8955) that discards its traffic is announced instead; when the alert ends it is
//! withdrawn, and every announcement still standing when detection stops is withdrawn then.
//! Alerts on a group or on the total are not addresses: nothing is announced for them.
//!
//! ExaBGP takes the commands (`announce route 192.0.2.9/32 next-hop self community
//! [65535:666]`, `withdraw route ...`) on the standard output of a process it runs (tapflow is
//! that process: `-`), and answers each on the process's standard input (`done` or `error`); or
//! from a named pipe (ExaBGP's own command pipe, or one a process of ExaBGP relays). Commands
//! are written on the action's own thread behind a bounded queue, as the hooks are: a stalled
//! ExaBGP never holds detection up. What could not be written, what ExaBGP refused and the
//! alert events the queue could not take are counted and said at the end.

use std::collections::BTreeMap;
use std::io::{BufRead, Write};
use std::net::IpAddr;
use std::os::unix::fs::OpenOptionsExt;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{self, Receiver, SyncSender};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crate::detect::action::Action;
use crate::detect::alert::Alert;
use crate::stop::Stop;

/// Alert events queued for the BGP thread.
const QUEUE: usize = 1024;
/// How long one command may wait for room in a full named pipe before it counts as not sent.
const PIPE_WAIT: Duration = Duration::from_secs(1);

/// A BGP standard community (RFC 1997), `ASN:VALUE`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Community(pub u16, pub u16);

/// BLACKHOLE (RFC 7999).
pub const BLACKHOLE: Community = Community(65535, 666);

impl std::str::FromStr for Community {
    type Err = String;
    fn from_str(s: &str) -> Result<Community, String> {
        let bad = || format!("community '{s}': give ASN:VALUE, each 0 to 65535 (e.g. 65535:666)");
        let (a, v) = s.trim().split_once(':').ok_or_else(bad)?;
        Ok(Community(
            a.parse().map_err(|_| bad())?,
            v.parse().map_err(|_| bad())?,
        ))
    }
}

impl std::fmt::Display for Community {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}:{}", self.0, self.1)
    }
}

/// Where ExaBGP reads the commands.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Api {
    /// Standard output: tapflow is a process of ExaBGP (its acknowledgements on standard input).
    Stdout,
    /// A named pipe ExaBGP (or a process of it) reads.
    Pipe(PathBuf),
}

impl Api {
    /// `-` is standard output; anything else a named pipe's path.
    pub fn parse(s: &str) -> Api {
        if s == "-" {
            Api::Stdout
        } else {
            Api::Pipe(PathBuf::from(s))
        }
    }
}

/// What is announced for an attacked address.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Announce {
    /// The /32 or /128 with these communities, to the next hop of its family (`self`, the BGP
    /// connection's own address, where none is given).
    Blackhole {
        /// Communities the route carries.
        communities: Vec<Community>,
        /// Next hop of IPv4 routes.
        next_hop_v4: Option<std::net::Ipv4Addr>,
        /// Next hop of IPv6 routes.
        next_hop_v6: Option<std::net::Ipv6Addr>,
    },
    /// A flowspec rule: the destination, the protocol carrying most of the flood, and for a
    /// reflection the reflectors' source port; traffic matching it is discarded (ExaBGP sends
    /// `discard` as traffic-rate 0).
    Flowspec,
}

impl Announce {
    /// A blackhole route with `communities` (BLACKHOLE if empty) to the next hops `next_hops`
    /// (at most one IPv4 and one IPv6 address; `self` for a family not given); refuses
    /// anything else.
    pub fn blackhole(communities: Vec<Community>, next_hops: &[&str]) -> Result<Announce, String> {
        let (mut next_hop_v4, mut next_hop_v6) = (None, None);
        for h in next_hops {
            match h.trim().parse::<IpAddr>() {
                Ok(IpAddr::V4(a)) if next_hop_v4.is_none() => next_hop_v4 = Some(a),
                Ok(IpAddr::V6(a)) if next_hop_v6.is_none() => next_hop_v6 = Some(a),
                Ok(_) => return Err(format!("'{h}': one next hop per address family")),
                Err(_) if h.trim() == "self" => {}
                Err(_) => return Err(format!("'{h}': give self or an address")),
            }
        }
        let communities = if communities.is_empty() {
            vec![BLACKHOLE]
        } else {
            communities
        };
        Ok(Announce::Blackhole {
            communities,
            next_hop_v4,
            next_hop_v6,
        })
    }

    /// The announce and withdraw commands for the alert `a`, if its target is one address.
    pub fn commands(&self, a: &Alert) -> Option<(IpAddr, String, String)> {
        let addr: IpAddr = a.target.parse().ok()?;
        let len = if addr.is_ipv4() { 32 } else { 128 };
        match self {
            Announce::Blackhole {
                communities,
                next_hop_v4,
                next_hop_v6,
            } => {
                let next_hop = match addr {
                    IpAddr::V4(_) => next_hop_v4.map(|a| a.to_string()),
                    IpAddr::V6(_) => next_hop_v6.map(|a| a.to_string()),
                }
                .unwrap_or_else(|| "self".into());
                let c: Vec<String> = communities.iter().map(Community::to_string).collect();
                Some((
                    addr,
                    format!(
                        "announce route {addr}/{len} next-hop {next_hop} community [{}]",
                        c.join(" ")
                    ),
                    format!("withdraw route {addr}/{len} next-hop {next_hop}"),
                ))
            }
            Announce::Flowspec => {
                let mut m = format!("destination {addr}/{len};");
                let p = &a.protocols;
                let proto = if p.udp > 0.5 {
                    Some("udp")
                } else if p.tcp > 0.5 {
                    Some("tcp")
                } else if p.icmp > 0.5 && addr.is_ipv4() {
                    // ExaBGP names no ICMPv6: an IPv6 ICMP flood matches on its destination.
                    Some("icmp")
                } else {
                    None
                };
                if let Some(proto) = proto {
                    let key = if addr.is_ipv4() {
                        "protocol"
                    } else {
                        "next-header"
                    };
                    m += &format!(" {key} {proto};");
                }
                // A reflection's replies all come from the service's port: match it too.
                let reflected = a.kind.ends_with("_amplification") || a.kind == "synack_reflection";
                if reflected
                    && proto.is_some()
                    && let Some(port) = a.top_source_ports.first()
                    && port.source.parse::<u16>().is_ok()
                {
                    m += &format!(" source-port ={};", port.source);
                }
                Some((
                    addr,
                    format!("announce flow route {{ match {{ {m} }} then {{ discard; }} }}"),
                    format!("withdraw flow route {{ match {{ {m} }} then {{ discard; }} }}"),
                ))
            }
        }
    }
}

/// What the BGP action did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct BgpReport {
    /// Announcements written.
    pub announced: u64,
    /// Withdrawals written (at alert ends and at the end of detection).
    pub withdrawn: u64,
    /// Commands that could not be written (no reader on the pipe, a closed output, a pipe full
    /// for a second).
    pub not_sent: u64,
    /// Commands ExaBGP answered `error` to (standard output only: its answers come back).
    pub refused: u64,
    /// Alert events the queue could not take.
    pub dropped: u64,
}

/// The BGP action: a thread writing ExaBGP commands.
#[derive(Debug)]
pub struct Bgp {
    tx: Option<SyncSender<Alert>>,
    thread: Option<JoinHandle<BgpReport>>,
    refused: Arc<AtomicU64>,
    dropped: u64,
    /// What it did, once closed.
    pub report: Option<BgpReport>,
}

impl Bgp {
    /// Starts the thread writing to `api` what `announce` says for each alert. On standard
    /// output, `stop` is raised when standard input ends: ExaBGP went away.
    pub fn start(api: Api, announce: Announce, stop: Option<Arc<Stop>>) -> Bgp {
        let refused = Arc::new(AtomicU64::new(0));
        if api == Api::Stdout {
            // ExaBGP answers every command on our standard input; read the answers so that its
            // writes never block, and count its refusals. The input ends when ExaBGP does (it
            // does not always signal its processes as it stops): detection stops then.
            let r = Arc::clone(&refused);
            let _ = std::thread::Builder::new()
                .name("tapflow-bgp-ack".into())
                .spawn(move || {
                    for line in std::io::stdin().lock().lines() {
                        let Ok(line) = line else { break };
                        if line.trim() == "error" {
                            r.fetch_add(1, Ordering::Relaxed);
                        }
                    }
                    if let Some(stop) = stop {
                        eprintln!("tapflow: bgp: standard input closed (ExaBGP stopped): stopping");
                        stop.raise();
                    }
                });
        }
        let (tx, rx) = mpsc::sync_channel(QUEUE);
        let thread = std::thread::Builder::new()
            .name("tapflow-bgp".into())
            .spawn(move || run(Writer::new(api), &announce, &rx))
            .ok();
        Bgp {
            tx: Some(tx),
            thread,
            refused,
            dropped: 0,
            report: None,
        }
    }
}

impl Action for Bgp {
    fn alert(&mut self, a: &Alert) {
        if let Some(tx) = &self.tx
            && tx.try_send(a.clone()).is_err()
        {
            self.dropped += 1;
        }
    }

    fn close(&mut self) {
        self.tx = None;
        let Some(t) = self.thread.take() else { return };
        let mut r = t.join().unwrap_or_default();
        r.dropped = self.dropped;
        r.refused = self.refused.load(Ordering::Relaxed);
        eprintln!(
            "tapflow: bgp: {} announced, {} withdrawn{}{}{}",
            r.announced,
            r.withdrawn,
            if r.not_sent > 0 {
                format!(", {} commands not sent", r.not_sent)
            } else {
                String::new()
            },
            if r.refused > 0 {
                format!(", {} refused by ExaBGP", r.refused)
            } else {
                String::new()
            },
            if r.dropped > 0 {
                format!(
                    ", {} alert events not passed on: the queue was full",
                    r.dropped
                )
            } else {
                String::new()
            },
        );
        self.report = Some(r);
    }
}

fn run(mut w: Writer, announce: &Announce, rx: &Receiver<Alert>) -> BgpReport {
    let mut r = BgpReport::default();
    // Address -> its withdraw command.
    let mut standing: BTreeMap<IpAddr, String> = BTreeMap::new();
    for a in rx {
        let Some((addr, up, down)) = announce.commands(&a) else {
            continue;
        };
        if a.event == "start" {
            if standing.contains_key(&addr) {
                continue;
            }
            if w.send(&up) {
                r.announced += 1;
                standing.insert(addr, down);
            } else {
                r.not_sent += 1;
            }
        } else if let Some(down) = standing.remove(&addr) {
            if w.send(&down) {
                r.withdrawn += 1;
            } else {
                r.not_sent += 1;
            }
        }
    }
    // Detection stopped: nothing it announced stays.
    for down in standing.into_values() {
        if w.send(&down) {
            r.withdrawn += 1;
        } else {
            r.not_sent += 1;
        }
    }
    r
}

/// Writes one command a line.
#[derive(Debug)]
struct Writer {
    api: Api,
    pipe: Option<std::fs::File>,
    /// The last error said, so that a pipe without a reader is said once, not per command.
    said: Option<String>,
}

impl Writer {
    fn new(api: Api) -> Writer {
        Writer {
            api,
            pipe: None,
            said: None,
        }
    }

    fn send(&mut self, command: &str) -> bool {
        let line = format!("{command}\n");
        let r = match &self.api {
            Api::Stdout => {
                let mut out = std::io::stdout().lock();
                out.write_all(line.as_bytes()).and_then(|()| out.flush())
            }
            Api::Pipe(path) => {
                let path = path.clone();
                self.write_pipe(&path, line.as_bytes())
            }
        };
        match r {
            Ok(()) => {
                self.said = None;
                true
            }
            Err(e) => {
                let what = match &self.api {
                    Api::Stdout => format!("tapflow: bgp: standard output: {e}"),
                    Api::Pipe(p) => format!("tapflow: bgp: {}: {e}", p.display()),
                };
                if self.said.as_ref() != Some(&what) {
                    eprintln!("{what}");
                    self.said = Some(what);
                }
                false
            }
        }
    }

    /// Writes `line` to the named pipe at `path`, opened (again) if it is not: without
    /// blocking, so that a pipe nobody reads fails at once (ENXIO) rather than hanging; a full
    /// pipe is waited on for [`PIPE_WAIT`]. A line is shorter than PIPE_BUF: it goes whole or
    /// not at all.
    fn write_pipe(&mut self, path: &std::path::Path, line: &[u8]) -> std::io::Result<()> {
        if self.pipe.is_none() {
            let f = std::fs::OpenOptions::new()
                .append(true)
                .custom_flags(libc::O_NONBLOCK)
                .open(path)?;
            self.pipe = Some(f);
        }
        let Some(f) = self.pipe.as_mut() else {
            return Err(std::io::ErrorKind::NotConnected.into());
        };
        let until = Instant::now() + PIPE_WAIT;
        loop {
            match f.write(line) {
                Ok(n) if n == line.len() => return Ok(()),
                Ok(_) => return Err(std::io::Error::other("short write")),
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock && Instant::now() < until => {
                    std::thread::sleep(Duration::from_millis(10));
                }
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                    return Err(std::io::Error::other("the pipe stayed full for a second"));
                }
                Err(e) => {
                    // The reader went away: open again for the next command.
                    self.pipe = None;
                    return Err(e);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::detect::alert::{LimitsOut, Mix, SignatureRates, Source};

    fn alert(event: &'static str, target: &str, kind: &str) -> Alert {
        Alert {
            event,
            time: "2026-11-29T09:00:00Z".into(),
            target: target.into(),
            group: None,
            kind: kind.into(),
            packets_per_second: 30_000.0,
            bits_per_second: 1e8,
            flows_per_second: 0.0,
            threshold: LimitsOut {
                packets_per_second: Some(20_000),
                bits_per_second: None,
                flows_per_second: None,
            },
            over: vec!["packets"],
            limit: "static",
            protocols: Mix {
                tcp: 0.0,
                udp: 1.0,
                icmp: 0.0,
                other: 0.0,
            },
            signatures: SignatureRates {
                syn: 0.0,
                synack: 0.0,
                reflection: 30_000.0,
                fragment: 0.0,
            },
            top_sources: vec![],
            top_source_ports: vec![Source {
                source: "123".into(),
                packets_per_second: 30_000.0,
            }],
            query: String::new(),
            duration_seconds: None,
        }
    }

    #[test]
    fn blackhole_routes_are_the_host_prefix_with_the_communities() {
        let b = Announce::blackhole(vec![], &[]).unwrap();
        let (_, up, down) = b
            .commands(&alert("start", "192.0.2.9", "ntp_amplification"))
            .unwrap();
        assert_eq!(
            up,
            "announce route 192.0.2.9/32 next-hop self community [65535:666]"
        );
        assert_eq!(down, "withdraw route 192.0.2.9/32 next-hop self");
        let b = Announce::blackhole(
            vec!["65535:666".parse().unwrap(), "65535:65281".parse().unwrap()],
            &["2001:db8::1"],
        )
        .unwrap();
        let (_, up, _) = b
            .commands(&alert("start", "2001:db8::9", "udp_flood"))
            .unwrap();
        assert_eq!(
            up,
            "announce route 2001:db8::9/128 next-hop 2001:db8::1 community [65535:666 65535:65281]"
        );
        // No IPv4 next hop given: self.
        let (_, up, _) = b
            .commands(&alert("start", "192.0.2.9", "udp_flood"))
            .unwrap();
        assert!(up.contains(" next-hop self "), "{up}");
        assert!(Announce::blackhole(vec![], &["192.0.2.1", "192.0.2.2"]).is_err());
        // A group or the total is no address.
        assert!(b.commands(&alert("start", "group:dns", "flood")).is_none());
        assert!(Announce::blackhole(vec![], &["router"]).is_err());
        assert!("65536:1".parse::<Community>().is_err());
        assert!("666".parse::<Community>().is_err());
    }

    #[test]
    fn flowspec_rules_match_the_reflectors_port_only_for_a_reflection() {
        let (_, up, down) = Announce::Flowspec
            .commands(&alert("start", "192.0.2.9", "ntp_amplification"))
            .unwrap();
        assert_eq!(
            up,
            "announce flow route { match { destination 192.0.2.9/32; protocol udp; source-port =123; } then { discard; } }"
        );
        assert!(down.starts_with("withdraw flow route { match { destination 192.0.2.9/32;"));
        let (_, up, _) = Announce::Flowspec
            .commands(&alert("start", "2001:db8::9", "udp_flood"))
            .unwrap();
        assert_eq!(
            up,
            "announce flow route { match { destination 2001:db8::9/128; next-header udp; } then { discard; } }"
        );
    }

    #[test]
    fn a_pipe_gets_announce_then_withdraw_and_what_stands_is_withdrawn_at_the_end() {
        let d = std::env::temp_dir().join(format!("tapflow-bgp-test-{}", std::process::id()));
        std::fs::create_dir_all(&d).unwrap();
        // A regular file stands for the pipe: the same writes land in it.
        let path = d.join("exabgp.in");
        std::fs::write(&path, "").unwrap();
        let mut b = Bgp::start(
            Api::Pipe(path.clone()),
            Announce::blackhole(vec![], &[]).unwrap(),
            None,
        );
        b.alert(&alert("start", "192.0.2.9", "ntp_amplification"));
        b.alert(&alert("start", "192.0.2.10", "ntp_amplification"));
        b.alert(&alert("start", "group:dns", "flood"));
        b.alert(&alert("end", "192.0.2.9", "ntp_amplification"));
        b.close();
        let text = std::fs::read_to_string(&path).unwrap();
        assert_eq!(
            text.lines().collect::<Vec<_>>(),
            [
                "announce route 192.0.2.9/32 next-hop self community [65535:666]",
                "announce route 192.0.2.10/32 next-hop self community [65535:666]",
                "withdraw route 192.0.2.9/32 next-hop self",
                "withdraw route 192.0.2.10/32 next-hop self",
            ]
        );
        let r = b.report.unwrap();
        assert_eq!((r.announced, r.withdrawn, r.not_sent), (2, 2, 0));
        // A named pipe nobody reads: every command is counted as not sent, none blocks.
        let fifo = d.join("nobody");
        let made = std::process::Command::new("mkfifo")
            .arg(&fifo)
            .status()
            .unwrap();
        assert!(made.success());
        let mut b = Bgp::start(
            Api::Pipe(fifo),
            Announce::blackhole(vec![], &[]).unwrap(),
            None,
        );
        b.alert(&alert("start", "192.0.2.9", "ntp_amplification"));
        b.alert(&alert("end", "192.0.2.9", "ntp_amplification"));
        b.close();
        let r = b.report.unwrap();
        assert_eq!((r.announced, r.withdrawn, r.not_sent), (0, 0, 1));
        std::fs::remove_dir_all(&d).unwrap();
    }
}
