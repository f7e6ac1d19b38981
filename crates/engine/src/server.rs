//! Serving a listening socket — the control socket's and `/metrics`' — to several clients at
//! once, none of which can hold up another or the end of the server.
//!
//! One thread sleeps in `accept` and hands each connection to a thread of its own, up to
//! [`Limits::connections`] open at once; a connection past that is closed unanswered and
//! counted. Each connection has whole-request deadlines, not per-read timeouts that a client
//! sending a byte now and then would renew: [`Limits::request`] from its acceptance to send the
//! request, [`Limits::reply`] from the first byte of the answer to take it all.
//!
//! Dropping the server shuts the listener down, which ends the `accept`, then shuts every open
//! connection down, which ends its reads and writes at once, and waits (briefly) for their
//! threads. A read that ends because the server is stopping is an error, never the end of a
//! request, so a truncated request is not acted on.

use std::collections::HashMap;
use std::io::{self, Read, Write};
use std::net::{IpAddr, TcpListener, TcpStream};
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::os::unix::net::{UnixListener, UnixStream};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};
use std::thread;
use std::time::{Duration, Instant};

use tapflow_sys::listener::shut_down;

/// How long dropping a server waits for the threads of the connections it shut down. They end
/// within microseconds of the shutdown unless busy answering; past this they are left to end on
/// their own, so nothing delays the exit by more.
const ABANDON_WAIT: Duration = Duration::from_secs(1);

/// A connected stream a [`Server`] serves.
pub(crate) trait Stream: Read + Write + AsFd + Send + 'static {
    /// `SO_RCVTIMEO`.
    fn set_read_timeout(&self, t: Option<Duration>) -> io::Result<()>;
    /// `SO_SNDTIMEO`.
    fn set_write_timeout(&self, t: Option<Duration>) -> io::Result<()>;
    /// The peer's address, for [`Limits::per_source`] (`None` for a Unix socket).
    fn peer_ip(&self) -> Option<IpAddr>;
}

impl Stream for UnixStream {
    fn set_read_timeout(&self, t: Option<Duration>) -> io::Result<()> {
        UnixStream::set_read_timeout(self, t)
    }
    fn set_write_timeout(&self, t: Option<Duration>) -> io::Result<()> {
        UnixStream::set_write_timeout(self, t)
    }
    fn peer_ip(&self) -> Option<IpAddr> {
        None
    }
}

impl Stream for TcpStream {
    fn set_read_timeout(&self, t: Option<Duration>) -> io::Result<()> {
        TcpStream::set_read_timeout(self, t)
    }
    fn set_write_timeout(&self, t: Option<Duration>) -> io::Result<()> {
        TcpStream::set_write_timeout(self, t)
    }
    fn peer_ip(&self) -> Option<IpAddr> {
        self.peer_addr().ok().map(|a| a.ip().to_canonical())
    }
}

/// A listening socket a [`Server`] accepts on.
pub(crate) trait Listener: AsFd + Send + 'static {
    /// A connection it accepts.
    type Stream: Stream;
    /// Waits for the next connection.
    fn accept_stream(&self) -> io::Result<Self::Stream>;
}

impl Listener for UnixListener {
    type Stream = UnixStream;
    fn accept_stream(&self) -> io::Result<UnixStream> {
        self.accept().map(|(s, _)| s)
    }
}

impl Listener for TcpListener {
    type Stream = TcpStream;
    fn accept_stream(&self) -> io::Result<TcpStream> {
        self.accept().map(|(s, _)| s)
    }
}

/// How much a server gives its clients.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Limits {
    /// Connections served at once; one more is closed unanswered.
    pub(crate) connections: usize,
    /// Connections served at once from one address; one more is closed unanswered.
    pub(crate) per_source: usize,
    /// From a connection's acceptance to the end of its request.
    pub(crate) request: Duration,
    /// From the first byte of the answer to its last.
    pub(crate) reply: Duration,
}

impl Limits {
    /// The control socket's and `/metrics`': a request is one short message sent at once (a
    /// Prometheus scrape, a `tapflow stats`), so a few seconds are plenty even on a loaded
    /// machine, and a few slow clients cannot take every place.
    pub(crate) const SERVICE: Limits = Limits {
        connections: 16,
        per_source: 16,
        request: Duration::from_secs(5),
        reply: Duration::from_secs(5),
    };

    /// IPFIX over TCP (`tapflow collect`): an exporter holds its session open for as long as
    /// it runs, so a session has no deadline of its own here (the collector gives each message
    /// one, and ends a silent session); at most 256 are served at once, 16 from one address.
    pub(crate) const SESSIONS: Limits = Limits {
        connections: 256,
        per_source: 16,
        request: Duration::from_secs(100 * 365 * 24 * 3600),
        reply: Duration::from_secs(5),
    };
}

/// What a server did with its connections, since it started.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct ServerCounts {
    /// Connections accepted and served.
    pub(crate) served: u64,
    /// Connections closed unanswered: [`Limits::connections`] (or [`Limits::per_source`] from
    /// its address) were open already, or no thread could be started for them.
    pub(crate) refused: u64,
    /// Connections closed because the client missed a deadline.
    pub(crate) timed_out: u64,
}

/// The connections open now: a duplicate of each one's descriptor, to shut it down from `drop`.
#[derive(Debug, Default)]
struct Open {
    next: u64,
    conns: HashMap<u64, (OwnedFd, Option<IpAddr>)>,
    /// Connections open per peer address.
    sources: HashMap<IpAddr, usize>,
}

/// What the accepting thread, the connections' threads and the [`Server`] share.
#[derive(Debug, Default)]
struct Shared {
    stopping: AtomicBool,
    open: Mutex<Open>,
    /// Signalled when a connection's thread ends.
    closed: Condvar,
    served: AtomicU64,
    refused: AtomicU64,
    timed_out: AtomicU64,
}

impl Shared {
    /// The open connections; a thread that panicked holding the lock left them consistent (each
    /// change is one insert or remove).
    fn open(&self) -> MutexGuard<'_, Open> {
        self.open.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn counts(&self) -> ServerCounts {
        ServerCounts {
            served: self.served.load(Ordering::Relaxed),
            refused: self.refused.load(Ordering::Relaxed),
            timed_out: self.timed_out.load(Ordering::Relaxed),
        }
    }

    fn refuse(&self) {
        self.refused.fetch_add(1, Ordering::Relaxed);
    }

    /// Registers a connection, unless [`Limits::connections`] are open already, or
    /// [`Limits::per_source`] from its address.
    fn admit(&self, s: &impl Stream, limits: Limits) -> Option<u64> {
        let source = s.peer_ip();
        let mut open = self.open();
        let from_source = source.map_or(0, |a| open.sources.get(&a).copied().unwrap_or(0));
        if open.conns.len() >= limits.connections || from_source >= limits.per_source {
            return None;
        }
        let fd = s.as_fd().try_clone_to_owned().ok()?;
        let id = open.next;
        open.next += 1;
        open.conns.insert(id, (fd, source));
        if let Some(a) = source {
            *open.sources.entry(a).or_insert(0) += 1;
        }
        Some(id)
    }

    /// Forgets connection `id`, whose thread is ending.
    fn release(&self, id: u64) {
        let mut open = self.open();
        if let Some((_, Some(a))) = open.conns.remove(&id)
            && let Some(n) = open.sources.get_mut(&a)
        {
            *n -= 1;
            if *n == 0 {
                open.sources.remove(&a);
            }
        }
        drop(open);
        self.closed.notify_all();
    }
}

/// Releases a connection when its thread ends, by a panic too, so that it neither keeps a place
/// nor makes `drop` wait.
struct Release {
    shared: Arc<Shared>,
    id: u64,
}

impl Drop for Release {
    fn drop(&mut self) {
        self.shared.release(self.id);
    }
}

/// One accepted connection, as the serving function sees it: reads and writes on it fail with
/// [`io::ErrorKind::TimedOut`] once its deadline has passed, and reads fail once the server is
/// stopping.
#[derive(Debug)]
pub(crate) struct Connection<S> {
    stream: S,
    request_by: Instant,
    reply_for: Duration,
    /// Set by the first write.
    reply_by: Option<Instant>,
    timed_out: bool,
    shared: Arc<Shared>,
}

impl<S: Stream> Connection<S> {
    /// The connected stream (for its addresses; read and write through the connection).
    pub(crate) fn stream(&self) -> &S {
        &self.stream
    }

    /// What its server did with its connections so far.
    pub(crate) fn server_counts(&self) -> ServerCounts {
        self.shared.counts()
    }

    /// Counts the connection as ended for a deadline the serving function keeps itself (once).
    pub(crate) fn time_out(&mut self) {
        let _ = self.missed();
    }

    /// The time left until `by`, or the error of a missed deadline (counted once).
    fn left(&mut self, by: Instant) -> io::Result<Duration> {
        match by.checked_duration_since(Instant::now()) {
            Some(d) if !d.is_zero() => Ok(d),
            _ => Err(self.missed()),
        }
    }

    fn missed(&mut self) -> io::Error {
        if !self.timed_out {
            self.timed_out = true;
            self.shared.timed_out.fetch_add(1, Ordering::Relaxed);
        }
        io::Error::new(io::ErrorKind::TimedOut, "the client missed its deadline")
    }

    /// A timeout of the socket is the deadline's.
    fn check<T>(&mut self, r: io::Result<T>) -> io::Result<T> {
        match r {
            Err(e)
                if matches!(
                    e.kind(),
                    io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
                ) =>
            {
                Err(self.missed())
            }
            r => r,
        }
    }
}

impl<S: Stream> Read for Connection<S> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let left = self.left(self.request_by)?;
        self.stream.set_read_timeout(Some(left))?;
        let r = self.stream.read(buf);
        match self.check(r)? {
            // The server shut the connection down: the request is cut, not ended.
            0 if self.shared.stopping.load(Ordering::Acquire) => Err(io::Error::new(
                io::ErrorKind::ConnectionAborted,
                "the server is stopping",
            )),
            n => Ok(n),
        }
    }
}

impl<S: Stream> Write for Connection<S> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let by = *self
            .reply_by
            .get_or_insert_with(|| Instant::now() + self.reply_for);
        let left = self.left(by)?;
        self.stream.set_write_timeout(Some(left))?;
        let r = self.stream.write(buf);
        self.check(r)
    }

    fn flush(&mut self) -> io::Result<()> {
        self.stream.flush()
    }
}

impl<S: AsFd> AsFd for Connection<S> {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.stream.as_fd()
    }
}

/// A serving listener; see the module documentation.
#[derive(Debug)]
pub(crate) struct Server {
    name: String,
    shared: Arc<Shared>,
    /// A duplicate of the listener's descriptor, to shut it down from `drop`.
    waker: OwnedFd,
    acceptor: Option<thread::JoinHandle<()>>,
}

impl Server {
    /// Hands each connection `listener` accepts to `serve`, each in a thread called `name`,
    /// within `limits`.
    pub(crate) fn spawn<L: Listener>(
        name: &str,
        listener: L,
        limits: Limits,
        serve: impl Fn(&mut Connection<L::Stream>) + Send + Sync + 'static,
    ) -> io::Result<Server> {
        let waker = listener.as_fd().try_clone_to_owned()?;
        let shared = Arc::new(Shared::default());
        let serve = Arc::new(serve);
        let acceptor = thread::Builder::new().name(name.into()).spawn({
            let (name, shared) = (name.to_string(), Arc::clone(&shared));
            move || {
                loop {
                    let s = listener.accept_stream();
                    if shared.stopping.load(Ordering::Acquire) {
                        break;
                    }
                    match s {
                        Ok(s) => start(&name, s, limits, &shared, &serve),
                        // EMFILE and the like: wait a little rather than spin.
                        Err(_) => thread::sleep(Duration::from_millis(20)),
                    }
                }
            }
        })?;
        Ok(Server {
            name: name.to_string(),
            shared,
            waker,
            acceptor: Some(acceptor),
        })
    }

    /// What it did with its connections so far.
    pub(crate) fn counts(&self) -> ServerCounts {
        self.shared.counts()
    }
}

/// Serves `s` in a thread of its own, or closes it (counted) if it cannot.
fn start<S: Stream>(
    name: &str,
    s: S,
    limits: Limits,
    shared: &Arc<Shared>,
    serve: &Arc<impl Fn(&mut Connection<S>) + Send + Sync + 'static>,
) {
    let accepted = Instant::now();
    let Some(id) = shared.admit(&s, limits) else {
        return shared.refuse();
    };
    let release = Release {
        shared: Arc::clone(shared),
        id,
    };
    let conn = Connection {
        stream: s,
        request_by: accepted + limits.request,
        reply_for: limits.reply,
        reply_by: None,
        timed_out: false,
        shared: Arc::clone(shared),
    };
    let serve = Arc::clone(serve);
    let spawned = thread::Builder::new().name(name.into()).spawn(move || {
        let _release = release;
        // Closed before it is released.
        let mut conn = conn;
        serve(&mut conn);
    });
    if spawned.is_ok() {
        shared.served.fetch_add(1, Ordering::Relaxed);
    } else {
        // The connection was closed and released with the thread's closure.
        shared.refuse();
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.shared.stopping.store(true, Ordering::Release);
        if let Some(t) = self.acceptor.take() {
            // Should the shutdown fail, the thread is left to end with the process rather than
            // waited for.
            if shut_down(&self.waker, &self.name).is_ok() {
                let _ = t.join();
            }
        }
        let open = self.shared.open();
        for (fd, _) in open.conns.values() {
            let _ = shut_down(fd, &self.name);
        }
        let _ = self
            .shared
            .closed
            .wait_timeout_while(open, ABANDON_WAIT, |o| !o.conns.is_empty());
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::PathBuf;
    use std::sync::mpsc;

    /// A fresh socket path.
    fn socket_path(tag: &str) -> PathBuf {
        let p = std::env::temp_dir().join(format!("tapflow-server-{}-{tag}", std::process::id()));
        let _ = std::fs::remove_file(&p);
        p
    }

    /// A server on a fresh Unix socket that reads each request to its end, answers "ok", and
    /// reports each request's outcome and how long it took.
    fn echo(
        tag: &str,
        limits: Limits,
    ) -> (
        Server,
        PathBuf,
        mpsc::Receiver<(io::Result<String>, Duration)>,
    ) {
        let path = socket_path(tag);
        let listener = UnixListener::bind(&path).unwrap();
        let (tx, rx) = mpsc::channel();
        let tx = Mutex::new(tx);
        let server = Server::spawn("test-server", listener, limits, move |c| {
            let t = Instant::now();
            let mut request = String::new();
            let r = c.read_to_string(&mut request).map(|_| request);
            if r.is_ok() {
                let _ = c.write_all(b"ok");
            }
            let _ = tx.lock().unwrap().send((r, t.elapsed()));
        })
        .unwrap();
        (server, path, rx)
    }

    /// A whole request and its reply, within `limit`.
    fn ask(path: &PathBuf, limit: Duration) -> String {
        let t = Instant::now();
        let mut s = UnixStream::connect(path).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        s.write_all(b"hello").unwrap();
        s.shutdown(std::net::Shutdown::Write).unwrap();
        let mut reply = String::new();
        s.read_to_string(&mut reply).unwrap();
        assert!(t.elapsed() < limit, "the answer took {:?}", t.elapsed());
        reply
    }

    #[test]
    fn a_slow_client_holds_up_no_other() {
        let (server, path, _rx) = echo("slow", Limits::SERVICE);
        let mut slow = UnixStream::connect(&path).unwrap();
        slow.write_all(b"h").unwrap();
        thread::sleep(Duration::from_millis(100));
        assert_eq!(ask(&path, Duration::from_secs(2)), "ok");
        assert_eq!(ask(&path, Duration::from_secs(2)), "ok");
        drop(server);
        let _ = std::fs::remove_file(&path);
    }

    #[test]
    fn a_request_ends_at_its_deadline_however_the_client_drips() {
        let limits = Limits {
            request: Duration::from_secs(1),
            ..Limits::SERVICE
        };
        let (server, path, rx) = echo("drip", limits);
        let mut slow = UnixStream::connect(&path).unwrap();
        let outcome = loop {
            // A byte every 200 ms: a per-read timeout of a second would never expire.
            let _ = slow.write_all(b"h");
            if let Ok(o) = rx.recv_timeout(Duration::from_millis(200)) {
                break o;
            }
        };
        let (r, took) = outcome;
        assert_eq!(r.unwrap_err().kind(), io::ErrorKind::TimedOut);
        assert!(
            took >= Duration::from_millis(900) && took < Duration::from_secs(4),
            "{took:?}"
        );
        // The client sees the connection closed, without an answer.
        slow.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        let mut rest = Vec::new();
        let _ = slow.read_to_end(&mut rest);
        assert!(rest.is_empty());
        assert_eq!(
            server.counts(),
            ServerCounts {
                served: 1,
                refused: 0,
                timed_out: 1
            }
        );
        drop(server);
        let _ = std::fs::remove_file(&path);
    }

    #[test]
    fn connections_past_the_cap_are_closed_and_counted() {
        let limits = Limits {
            connections: 2,
            ..Limits::SERVICE
        };
        let (server, path, _rx) = echo("cap", limits);
        let _idle: Vec<UnixStream> = (0..2)
            .map(|_| UnixStream::connect(&path).unwrap())
            .collect();
        let mut third = UnixStream::connect(&path).unwrap();
        third
            .set_read_timeout(Some(Duration::from_secs(5)))
            .unwrap();
        let t = Instant::now();
        let mut buf = [0u8; 8];
        // Closed unanswered: the end of the stream, or a reset.
        assert!(matches!(third.read(&mut buf), Ok(0) | Err(_)));
        assert!(t.elapsed() < Duration::from_secs(3), "{:?}", t.elapsed());
        assert_eq!(server.counts().refused, 1);
        assert_eq!(server.counts().served, 2);
        drop(server);
        let _ = std::fs::remove_file(&path);
    }

    #[test]
    fn dropping_the_server_abandons_its_clients_at_once() {
        let (server, path, rx) = echo("drop", Limits::SERVICE);
        let mut clients: Vec<UnixStream> = (0..3)
            .map(|_| UnixStream::connect(&path).unwrap())
            .collect();
        for c in &mut clients {
            c.write_all(b"rules load\npart of a rule fi").unwrap();
        }
        thread::sleep(Duration::from_millis(200));
        let t = Instant::now();
        drop(server);
        // Well inside the 5 s request deadline.
        assert!(t.elapsed() < Duration::from_secs(2), "{:?}", t.elapsed());
        // Every cut request failed: none is taken for a whole one.
        for _ in 0..3 {
            let (r, _) = rx.recv_timeout(Duration::from_secs(1)).unwrap();
            assert_eq!(r.unwrap_err().kind(), io::ErrorKind::ConnectionAborted);
        }
        for mut c in clients {
            c.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
            let mut rest = Vec::new();
            let _ = c.read_to_end(&mut rest);
            assert!(rest.is_empty());
        }
        let _ = std::fs::remove_file(&path);
    }

    #[test]
    fn a_client_that_takes_no_reply_is_cut_at_the_reply_deadline() {
        let path = socket_path("reply");
        let limits = Limits {
            reply: Duration::from_secs(1),
            ..Limits::SERVICE
        };
        let (tx, rx) = mpsc::channel();
        let tx = Mutex::new(tx);
        let server = Server::spawn(
            "test-server",
            UnixListener::bind(&path).unwrap(),
            limits,
            move |c| {
                // Far more than a socket buffer holds.
                let r = c.write_all(&vec![b'x'; 64 << 20]);
                let _ = tx.lock().unwrap().send(r);
            },
        )
        .unwrap();
        let _silent = UnixStream::connect(&path).unwrap();
        let r = rx.recv_timeout(Duration::from_secs(5)).unwrap();
        assert_eq!(r.unwrap_err().kind(), io::ErrorKind::TimedOut);
        assert_eq!(server.counts().timed_out, 1);
        drop(server);
        let _ = std::fs::remove_file(&path);
    }
}
