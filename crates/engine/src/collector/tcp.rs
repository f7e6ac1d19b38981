//! IPFIX over TCP (RFC 7011 §10.4): a thread per session, at most
//! [`Limits::SESSIONS`](crate::server::Limits) at once, each cutting the stream into messages
//! by their length field and decoding them with a decoder of its own (templates sent on a TCP
//! session belong to it). A stream that is not IPFIX ends its session, counted; so does a
//! session silent for the exporter timeout.

use std::io::Read;
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::Arc;
use std::sync::mpsc::SyncSender;
use std::time::{Duration, Instant};

use tapflow_wire::flowdecode::{Limits, Protocol, ipfix_message_len};

use crate::EngineError;
use crate::collector::intake::{Batch, Intake, exporter_addr};
use crate::collector::ledger::{Ledger, publish};
use crate::server::{Connection, Limits as ServerLimits, Server};
use crate::source::datagrams::Cidr;

/// The largest IPFIX message (its length field is 16 bits).
const MAX_MESSAGE: usize = 65_535;
/// How often a session publishes its counts and sends a waiting batch.
const TICK: Duration = Duration::from_secs(1);

/// What every session shares.
#[derive(Debug)]
struct Context {
    allow: Arc<Vec<Cidr>>,
    ledger: Arc<Ledger>,
    tx: SyncSender<Batch>,
    limits: Limits,
    idle: Duration,
}

/// A listening IPFIX-over-TCP socket and its sessions; dropping it ends them.
#[derive(Debug)]
pub struct TcpIntake {
    _server: Server,
    /// The bound address.
    pub addr: SocketAddr,
}

impl TcpIntake {
    /// Listens on `addr` and serves each session into `tx`.
    pub fn start(
        addr: SocketAddr,
        allow: Arc<Vec<Cidr>>,
        ledger: Arc<Ledger>,
        tx: SyncSender<Batch>,
        limits: Limits,
        idle: Duration,
    ) -> Result<TcpIntake, EngineError> {
        let listener = TcpListener::bind(addr).map_err(|e| {
            EngineError::Config(format!("--listen ipfix+tcp://{addr}: cannot listen: {e}"))
        })?;
        let addr = listener.local_addr().unwrap_or(addr);
        let ctx = Context {
            allow,
            ledger,
            tx,
            limits,
            idle,
        };
        let server = Server::spawn(
            "tapflow-ipfix-tcp",
            listener,
            ServerLimits::SESSIONS,
            move |c| session(c, &ctx),
        )
        .map_err(|e| EngineError::Config(format!("cannot start the IPFIX/TCP thread: {e}")))?;
        Ok(TcpIntake {
            _server: server,
            addr,
        })
    }
}

/// Serves one session until the exporter ends it, the stream breaks, or the collector stops.
fn session(c: &mut Connection<TcpStream>, ctx: &Context) {
    let slot = ctx.ledger.slot();
    let mut intake = Intake::new(ctx.limits, ctx.tx.clone());
    let peer = c.stream().peer_addr().ok();
    match peer {
        Some(p) if ctx.allow.is_empty() || ctx.allow.iter().any(|n| n.contains(p.ip())) => {
            read_messages(c, exporter_addr(p.ip()), &mut intake, ctx, &slot);
        }
        _ => intake.book.refused += 1,
    }
    intake.send();
    publish(&slot, &intake.book);
    ctx.ledger.retire(&slot);
}

fn read_messages(
    c: &Connection<TcpStream>,
    exporter: [u8; 16],
    intake: &mut Intake,
    ctx: &Context,
    slot: &std::sync::Mutex<crate::collector::ledger::Book>,
) {
    let mut buf = vec![0u8; 2 * MAX_MESSAGE];
    let (mut start, mut end) = (0usize, 0usize);
    let (mut last_tick, mut last_data) = (Instant::now(), Instant::now());
    // Read the stream itself, with a timeout that wakes the session to tick; the server's
    // request deadline does not fit a session. Stopping the server shuts the stream down,
    // which ends the read.
    let mut stream: &TcpStream = c.stream();
    let _ = stream.set_read_timeout(Some(TICK));
    loop {
        // Cut every whole message in the buffer.
        loop {
            match ipfix_message_len(&buf[start..end]) {
                None => break,
                Some(Err(e)) => {
                    intake.book.refused_message(exporter, &e);
                    return;
                }
                Some(Ok(len)) if end - start >= len => {
                    let now_ns = tapflow_sys::clock::realtime_ns();
                    intake.book.datagrams += 1;
                    intake.take(
                        Some(Protocol::Ipfix),
                        exporter,
                        &buf[start..start + len],
                        now_ns,
                    );
                    start += len;
                }
                Some(Ok(_)) => break,
            }
        }
        if start > 0 {
            buf.copy_within(start..end, 0);
            end -= start;
            start = 0;
        }
        if last_tick.elapsed() >= TICK {
            last_tick = Instant::now();
            intake.tick(tapflow_sys::clock::realtime_ns(), ctx.idle);
            publish(slot, &intake.book);
            // A session silent as long as an exporter is forgotten gives its place up.
            if last_data.elapsed() >= ctx.idle {
                return;
            }
        }
        match stream.read(&mut buf[end..]) {
            Ok(0) => {
                if end > 0 {
                    intake.book.bad(exporter, "truncated_stream");
                }
                return;
            }
            Ok(n) => {
                end += n;
                last_data = Instant::now();
            }
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock
                        | std::io::ErrorKind::TimedOut
                        | std::io::ErrorKind::Interrupted
                ) => {}
            Err(_) => return,
        }
    }
}
