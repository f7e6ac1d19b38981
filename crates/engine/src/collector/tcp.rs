//! IPFIX over TCP (RFC 7011 §10.4): a thread per session, at most
//! [`Limits::SESSIONS`](crate::server::Limits) at once (and a share of them per address), each
//! cutting the stream into messages by their length field and decoding them with a decoder of
//! its own (templates sent on a TCP session belong to it). A stream that is not IPFIX ends its
//! session, counted; so does a message not whole [`MESSAGE_DEADLINE`] after its first byte
//! (a client trickling bytes cannot hold a place), and a session silent for the exporter
//! timeout.

use std::io::Read;
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::Arc;
use std::sync::mpsc::SyncSender;
use std::time::{Duration, Instant};

use tapflow_wire::flowdecode::{Limits, Protocol, ipfix_message_len};

use crate::EngineError;
use crate::collector::intake::{Batch, Intake, exporter_addr};
use crate::collector::ledger::{Book, Ledger, SessionCounts, publish};
use crate::server::{Connection, Limits as ServerLimits, Server};
use tapflow_wire::prefix::Prefix;

/// The largest IPFIX message (its length field is 16 bits).
const MAX_MESSAGE: usize = 65_535;
/// How often a session publishes its counts and sends a waiting batch.
const TICK: Duration = Duration::from_secs(1);
/// From the first byte of a message to its last: an exporter writes a message at once.
pub const MESSAGE_DEADLINE: Duration = Duration::from_secs(10);

/// What every session shares.
#[derive(Debug)]
struct Context {
    allow: Arc<Vec<Prefix>>,
    ledger: Arc<Ledger>,
    tx: SyncSender<Batch>,
    limits: Limits,
    idle: Duration,
}

/// A listening IPFIX-over-TCP socket and its sessions; dropping it ends them.
#[derive(Debug)]
pub struct TcpIntake {
    server: Server,
    /// The bound address.
    pub addr: SocketAddr,
}

impl TcpIntake {
    /// Listens on `addr` and serves each session into `tx`.
    pub fn start(
        addr: SocketAddr,
        allow: Arc<Vec<Prefix>>,
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
        Ok(TcpIntake { server, addr })
    }

    /// What became of the sessions so far.
    pub fn sessions(&self) -> SessionCounts {
        let c = self.server.counts();
        SessionCounts {
            served: c.served,
            refused: c.refused,
            timed_out: c.timed_out,
        }
    }
}

/// Serves one session until the exporter ends it, the stream breaks, or the collector stops.
fn session(c: &mut Connection<TcpStream>, ctx: &Context) {
    let slot = ctx.ledger.slot();
    let mut intake = Intake::new(ctx.limits, ctx.tx.clone());
    let peer = c.stream().peer_addr().ok();
    match peer {
        Some(p) if ctx.allow.is_empty() || ctx.allow.iter().any(|n| n.contains_ip(p.ip())) => {
            read_messages(c, exporter_addr(p.ip()), &mut intake, ctx, &slot);
        }
        _ => intake.book.refused += 1,
    }
    intake.send();
    publish(&slot, &intake.book);
    ctx.ledger.retire(&slot);
}

fn read_messages(
    c: &mut Connection<TcpStream>,
    exporter: [u8; 16],
    intake: &mut Intake,
    ctx: &Context,
    slot: &std::sync::Mutex<Book>,
) {
    let mut buf = vec![0u8; 2 * MAX_MESSAGE];
    let (mut start, mut end) = (0usize, 0usize);
    let (mut last_tick, mut last_data) = (Instant::now(), Instant::now());
    // When the first byte of the message at the start of the buffer arrived.
    let mut message_since: Option<Instant> = None;
    let mut timeout = None;
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
        let cut = start > 0;
        if cut {
            buf.copy_within(start..end, 0);
            end -= start;
            start = 0;
        }
        // The next message began with the last read, at the latest.
        if end == 0 {
            message_since = None;
        } else if cut || message_since.is_none() {
            message_since = Some(last_data);
        }
        if message_since.is_some_and(|t| t.elapsed() >= MESSAGE_DEADLINE) {
            intake.book.bad(exporter, "slow_message");
            c.time_out();
            return;
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
        // Read the stream itself, with a timeout that wakes the session to tick or at its
        // message's deadline; the server's request deadline does not fit a session. Stopping
        // the server shuts the stream down, which ends the read.
        let wait = message_since.map_or(TICK, |t| {
            MESSAGE_DEADLINE
                .saturating_sub(t.elapsed())
                .clamp(Duration::from_millis(10), TICK)
        });
        let mut stream: &TcpStream = c.stream();
        if timeout != Some(wait) {
            timeout = Some(wait);
            let _ = stream.set_read_timeout(timeout);
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

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{ErrorKind, Write};
    use std::sync::mpsc;

    /// A listener on a free loopback port, its queue (kept open) and ledger.
    fn listen() -> (TcpIntake, mpsc::Receiver<Batch>, Arc<Ledger>) {
        let (tx, rx) = mpsc::sync_channel(64);
        let ledger = Arc::new(Ledger::default());
        let t = TcpIntake::start(
            "127.0.0.1:0".parse().unwrap(),
            Arc::new(Vec::new()),
            Arc::clone(&ledger),
            tx,
            Limits::default(),
            Duration::from_secs(3600),
        )
        .unwrap();
        (t, rx, ledger)
    }

    /// Whether the collector closed `s` (reading waits up to `wait`).
    fn closed(s: &mut TcpStream, wait: Duration) -> bool {
        s.set_read_timeout(Some(wait)).unwrap();
        let mut b = [0u8; 16];
        match s.read(&mut b) {
            Ok(0) => true,
            Ok(_) => false,
            Err(e) => !matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut),
        }
    }

    #[test]
    fn a_message_trickled_a_byte_at_a_time_ends_its_session() {
        let (t, _rx, ledger) = listen();
        let mut s = TcpStream::connect(t.addr).unwrap();
        // A header announcing 100 octets, then a byte a second: each byte renews any idle
        // timer, but the message is never whole.
        s.write_all(&[0, 10, 0, 100]).unwrap();
        let begun = Instant::now();
        let mut ended = None;
        for _ in 0..40 {
            let _ = s.write_all(&[0]);
            if closed(&mut s, Duration::from_secs(1)) {
                ended = Some(begun.elapsed());
                break;
            }
        }
        let ended = ended.expect("the session outlived 40 s of trickle");
        assert!(
            ended >= MESSAGE_DEADLINE - Duration::from_secs(1)
                && ended < MESSAGE_DEADLINE + Duration::from_secs(15),
            "{ended:?}"
        );
        assert_eq!(t.sessions().timed_out, 1);
        // The session's counts reach the ledger as it ends.
        let mut slow = 0;
        for _ in 0..50 {
            slow = ledger
                .snapshot()
                .totals()
                .bad
                .get("slow_message")
                .copied()
                .unwrap_or(0);
            if slow > 0 {
                break;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        assert_eq!(slow, 1);
    }

    #[test]
    fn one_address_holds_only_its_share_of_the_sessions() {
        let (t, _rx, _ledger) = listen();
        let share = ServerLimits::SESSIONS.per_source;
        let mut held: Vec<TcpStream> = (0..share)
            .map(|_| TcpStream::connect(t.addr).unwrap())
            .collect();
        let mut one_more = TcpStream::connect(t.addr).unwrap();
        assert!(closed(&mut one_more, Duration::from_secs(10)));
        assert_eq!(t.sessions().refused, 1);
        // The sessions it holds are served still.
        assert!(!closed(&mut held[0], Duration::from_millis(200)));
        // A place freed is a place for the address again.
        drop(held.pop());
        let mut again = None;
        for _ in 0..50 {
            let mut s = TcpStream::connect(t.addr).unwrap();
            if !closed(&mut s, Duration::from_millis(200)) {
                again = Some(s);
                break;
            }
        }
        assert!(again.is_some(), "the freed place was not given back");
    }
}
