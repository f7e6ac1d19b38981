//! `tapflow collect`: receives IPFIX, NetFlow v9/v5 and sFlow v5 from many exporters at once,
//! decodes them and keeps the flows in one or more [`FlowStore`](tapflow_store::FlowStore)s.
//!
//! ```text
//!  UDP listener ─► SO_REUSEPORT group: socket k ─► worker k (recvmmsg, own decoder) ─┐
//!  IPFIX/TCP listener ─► a thread per session (own decoder) ──────────────────────────┼─► store thread ─► stores
//!  ledger (per exporter and domain, per worker) ◄── each worker, once a second ───────┘
//! ```
//!
//! Every record is accounted for: records in the messages = records decoded + data records
//! without a template + malformed ones; records decoded = flows each store wrote + what it
//! dropped or could not take. Records lost before the collector show as sequence gaps;
//! datagrams the socket dropped are counted by the kernel and read per socket.

mod intake;
pub mod ledger;
pub mod listen;
mod tcp;
mod udp;
pub mod writer;

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread;
use std::time::{Duration, Instant};

use tapflow_sys::udp::UdpSocket;
use tapflow_wire::flowdecode::Limits;

use crate::EngineError;
use crate::collector::intake::Intake;
use crate::collector::ledger::{Book, Ledger, SessionCounts};
use crate::collector::listen::{Listen, ListenTransport};
use crate::collector::tcp::TcpIntake;
use crate::collector::udp::{READ_TIMEOUT, UdpWorker};
use crate::collector::writer::{NamedStore, StoreOutcome, Writer};
use crate::stop::Stop;
use tapflow_wire::prefix::Prefix;

/// Everything `tapflow collect` needs.
#[derive(Debug)]
pub struct CollectConfig {
    /// The listeners.
    pub listen: Vec<Listen>,
    /// Receive workers (sockets) per UDP listener.
    pub threads: usize,
    /// The receive buffer to ask for, per socket.
    pub rcvbuf: usize,
    /// Accepted exporter prefixes (empty: all).
    pub allow: Vec<Prefix>,
    /// Where flows go.
    pub stores: Vec<NamedStore>,
    /// How often the stores make what they took visible.
    pub flush: Duration,
    /// How often each exporter's counters are written to the stores.
    pub stats_every: Duration,
    /// Stop after this long.
    pub duration: Option<Duration>,
    /// Exporters silent this long are forgotten (templates, sequence numbers).
    pub idle: Duration,
    /// The decoder's limits.
    pub limits: Limits,
}

/// A listener as bound.
#[derive(Debug, Clone, Copy)]
pub struct Bound {
    /// As asked.
    pub listen: Listen,
    /// The address bound (the port chosen for port 0).
    pub addr: SocketAddr,
}

/// What the collector tells its caller once it listens.
#[derive(Debug)]
pub struct Ready {
    /// Each listener.
    pub bound: Vec<Bound>,
    /// The receive buffer the kernel granted each UDP socket.
    pub rcvbuf: usize,
    /// The counts, for `/metrics`.
    pub ledger: Arc<Ledger>,
}

/// What a run did.
#[derive(Debug)]
pub struct CollectSummary {
    /// Seconds it ran.
    pub seconds: f64,
    /// Every count, summed over workers.
    pub book: Book,
    /// Each store's outcome.
    pub stores: Vec<StoreOutcome>,
}

/// Binds every listener, receives until `stop` is raised (or the duration passes), then takes
/// what the sockets still hold, closes the stores and reports. `ready` is called once
/// listening; `tick` about once a second with the time so far and the counts.
pub fn run(
    cfg: CollectConfig,
    stop: &Stop,
    ready: impl FnOnce(&Ready),
    mut tick: impl FnMut(Duration, &Book),
) -> Result<CollectSummary, EngineError> {
    let ledger = Arc::new(Ledger::default());
    let allow = Arc::new(cfg.allow);
    let writer = Writer::start(cfg.stores, Arc::clone(&ledger), cfg.flush, cfg.stats_every)?;
    let mut bound = Vec::new();
    let mut workers = Vec::new();
    let mut sessions = Vec::new();
    let mut rcvbuf = 0;
    let mut udp_addrs: Vec<SocketAddr> = Vec::new();
    for l in &cfg.listen {
        match l.transport {
            ListenTransport::Tcp => {
                let t = TcpIntake::start(
                    l.addr,
                    Arc::clone(&allow),
                    Arc::clone(&ledger),
                    writer.queue(),
                    cfg.limits,
                    cfg.idle,
                )?;
                bound.push(Bound {
                    listen: *l,
                    addr: t.addr,
                });
                sessions.push(t);
            }
            ListenTransport::Udp => {
                // nfv9:// and nfv5:// on one port are one listener: it takes every protocol.
                if let Some(&addr) = udp_addrs.iter().find(|a| **a == l.addr) {
                    bound.push(Bound { listen: *l, addr });
                    continue;
                }
                let socks = udp_group(l.addr, cfg.threads.max(1), cfg.rcvbuf, &mut rcvbuf)?;
                let addr = socks[0].local_addr().map_err(EngineError::Sys)?;
                udp_addrs.push(l.addr);
                bound.push(Bound { listen: *l, addr });
                for sock in socks {
                    workers.push(UdpWorker {
                        sock,
                        allow: Arc::clone(&allow),
                        intake: Intake::new(cfg.limits, writer.queue()),
                        slot: ledger.slot(),
                        idle: cfg.idle,
                    });
                }
            }
        }
    }
    let done = Arc::new(AtomicBool::new(false));
    let mut threads = Vec::new();
    for (k, w) in workers.into_iter().enumerate() {
        let done = Arc::clone(&done);
        let t = thread::Builder::new()
            .name(format!("tapflow-collect-{k}"))
            .spawn(move || w.run(&done))
            .map_err(|e| EngineError::Config(format!("cannot start a receive worker: {e}")))?;
        threads.push(t);
    }
    ready(&Ready {
        bound,
        rcvbuf,
        ledger: Arc::clone(&ledger),
    });
    let start = Instant::now();
    let mut next_tick = Duration::from_secs(1);
    while !stop.is_raised() && cfg.duration.is_none_or(|d| start.elapsed() < d) {
        thread::sleep(Duration::from_millis(50));
        let elapsed = start.elapsed();
        if elapsed >= next_tick {
            next_tick = elapsed + Duration::from_secs(1);
            ledger.set_sessions(session_counts(&sessions));
            tick(elapsed, &ledger.snapshot());
        }
    }
    done.store(true, Ordering::Release);
    for t in threads {
        let _ = t.join();
    }
    ledger.set_sessions(session_counts(&sessions));
    drop(sessions);
    let stores = writer.finish();
    Ok(CollectSummary {
        seconds: start.elapsed().as_secs_f64(),
        book: ledger.snapshot(),
        stores,
    })
}

/// The sessions of every TCP listener, summed.
fn session_counts(listeners: &[TcpIntake]) -> SessionCounts {
    let mut all = SessionCounts::default();
    for s in listeners.iter().map(TcpIntake::sessions) {
        all.served += s.served;
        all.refused += s.refused;
        all.timed_out += s.timed_out;
    }
    all
}

/// `n` sockets bound to `addr` in one `SO_REUSEPORT` group (port 0: one the kernel picks),
/// each with a receive buffer of `rcvbuf` bytes; `granted` is set to what the kernel gave.
fn udp_group(
    addr: SocketAddr,
    n: usize,
    rcvbuf: usize,
    granted: &mut usize,
) -> Result<Vec<UdpSocket>, EngineError> {
    let mut socks: Vec<UdpSocket> = Vec::with_capacity(n);
    for _ in 0..n {
        let at = match socks.first() {
            Some(s) => s.local_addr()?,
            None => addr,
        };
        let s = UdpSocket::bind_shared(at)?;
        *granted = s.set_rcvbuf(rcvbuf)?;
        s.set_read_timeout(READ_TIMEOUT)?;
        socks.push(s);
    }
    Ok(socks)
}
