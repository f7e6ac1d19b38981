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
pub mod templates_state;
mod udp;
pub mod writer;

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::thread;
use std::time::{Duration, Instant};

use tapflow_sys::udp::UdpSocket;
use tapflow_wire::flowdecode::Limits;

use crate::EngineError;
use crate::collector::intake::Intake;
use crate::collector::ledger::{Book, Ledger, SessionCounts};
use crate::collector::listen::{Listen, ListenTransport};
use crate::collector::tcp::TcpIntake;
use crate::collector::templates_state::{SAVE_EVERY, TemplatesState, merge};
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
    /// Where the UDP exporters' templates are kept across restarts, if anywhere.
    pub templates: Option<TemplatesState>,
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
    /// What the templates state file gave (a line to print), if one is kept.
    pub templates: Option<String>,
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
    /// Why the templates state could not be written, if it could not.
    pub templates_error: Option<String>,
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
    let (saved, mut templates_line) = match cfg.templates.as_ref().map(TemplatesState::load) {
        None => (Vec::new(), None),
        Some(Ok(saved)) => (saved, None),
        Some(Err(why)) => (Vec::new(), Some(format!("warning: templates state {why}"))),
    };
    let mut restored = None;
    let mut slots = Vec::new();
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
                    let mut intake = Intake::new(cfg.limits, writer.queue());
                    // Each worker takes every saved exporter: which socket of the group an
                    // exporter lands on may differ from the last run.
                    let now_ns = tapflow_sys::clock::realtime_ns();
                    restored = Some(intake.restore(&saved, now_ns, cfg.idle));
                    let slot = cfg.templates.as_ref().map(|_| {
                        let s = Arc::new(Mutex::new(Vec::new()));
                        slots.push(Arc::clone(&s));
                        s
                    });
                    workers.push(UdpWorker {
                        sock,
                        allow: Arc::clone(&allow),
                        intake,
                        slot: ledger.slot(),
                        idle: cfg.idle,
                        saved: slot,
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
    if let (Some(state), None) = (&cfg.templates, &templates_line) {
        let r = restored.unwrap_or_default();
        let mut line = format!(
            "templates of {} exporters restored from {} ({} templates",
            r.exporters,
            state.path().display(),
            r.templates
        );
        if let Some(oldest) = saved.iter().map(|s| s.heard_ns).min() {
            let age = tapflow_sys::clock::realtime_ns().saturating_sub(oldest) / 1_000_000_000;
            line += &format!(", the oldest heard {age} s ago");
        }
        if r.stale > 0 {
            line += &format!("; {} idle past the exporter timeout left out", r.stale);
        }
        if let Some(why) = &r.first_refusal {
            line += &format!("; {} refused, the first: {why}", r.refused);
        }
        line.push(')');
        templates_line = Some(line);
    }
    ready(&Ready {
        bound,
        rcvbuf,
        ledger: Arc::clone(&ledger),
        templates: templates_line,
    });
    let start = Instant::now();
    let mut next_tick = Duration::from_secs(1);
    let mut next_save = SAVE_EVERY;
    let mut templates_error = None;
    let save = |slots: &[Arc<Mutex<Vec<_>>>], error: &mut Option<String>| {
        if let Some(state) = &cfg.templates {
            let parts = slots
                .iter()
                .map(|s| s.lock().unwrap_or_else(PoisonError::into_inner).clone());
            let now_ns = tapflow_sys::clock::realtime_ns();
            *error = state.save(&merge(parts), now_ns).err();
        }
    };
    while !stop.is_raised() && cfg.duration.is_none_or(|d| start.elapsed() < d) {
        thread::sleep(Duration::from_millis(50));
        let elapsed = start.elapsed();
        if elapsed >= next_tick {
            next_tick = elapsed + Duration::from_secs(1);
            ledger.set_sessions(session_counts(&sessions));
            tick(elapsed, &ledger.snapshot());
        }
        // The workers put theirs at the same pace: this writes what they put last time.
        if elapsed >= next_save {
            next_save = elapsed + SAVE_EVERY;
            save(&slots, &mut templates_error);
        }
    }
    done.store(true, Ordering::Release);
    for t in threads {
        let _ = t.join();
    }
    save(&slots, &mut templates_error);
    ledger.set_sessions(session_counts(&sessions));
    drop(sessions);
    let stores = writer.finish();
    Ok(CollectSummary {
        seconds: start.elapsed().as_secs_f64(),
        book: ledger.snapshot(),
        stores,
        templates_error,
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
