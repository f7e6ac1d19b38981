//! The console's connections: how many are open at once and how long a client may take.
//!
//! At most [`Limits::connections`] are open at once; one more is closed as soon as it is
//! accepted, unanswered, and counted. Each has a whole-request deadline, not a per-read
//! timeout that a client sending a byte now and then would renew: [`Limits::request`] from the
//! end of the TLS handshake (or from the acceptance), or from the end of the previous answer,
//! to the end of the request's header; an idle keep-alive connection is closed when it passes.
//! The TLS handshake has [`Limits::handshake`], and an answer the client stops taking ends the
//! connection after [`Limits::reply`]. Together they bound what slow or idle clients hold: never
//! more than the limit's descriptors, none of them for long without the client doing its part.

use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, PoisonError};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use axum_server::accept::Accept;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio::time::Sleep;

/// How often at most a refusal is reported on standard error.
const REPORT_EVERY: Duration = Duration::from_secs(10);

/// How much the console gives its clients.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Connections open at once; one more is closed unanswered.
    pub connections: usize,
    /// From the connection's start (or the previous answer) to the end of the request's header.
    pub request: Duration,
    /// From the acceptance to the end of the TLS handshake.
    pub handshake: Duration,
    /// How long an answer may wait for the client to take any of it.
    pub reply: Duration,
}

impl Limits {
    /// The console's: a browser opens a handful of connections and sends each request at once,
    /// so a few hundred and ten seconds are plenty even on a loaded machine, and slow clients
    /// cannot take the descriptors the collector's store needs.
    pub const CONSOLE: Limits = Limits {
        connections: 256,
        request: Duration::from_secs(10),
        handshake: Duration::from_secs(10),
        reply: Duration::from_secs(10),
    };
}

/// What the cap shares between its clones: the places left and the refusals.
#[derive(Debug)]
struct Shared {
    open: Arc<Semaphore>,
    connections: usize,
    reply: Duration,
    refused: AtomicU64,
    reported: Mutex<Option<Instant>>,
}

/// An acceptor that holds a place for each connection it passes on to `inner`, and closes one
/// that finds no place left.
#[derive(Debug, Clone)]
pub struct Capped<A> {
    inner: A,
    shared: Arc<Shared>,
}

impl<A> Capped<A> {
    /// `inner`, at most `limits.connections` connections at once.
    pub fn new(inner: A, limits: Limits) -> Capped<A> {
        Capped {
            inner,
            shared: Arc::new(Shared {
                open: Arc::new(Semaphore::new(limits.connections)),
                connections: limits.connections,
                reply: limits.reply,
                refused: AtomicU64::new(0),
                reported: Mutex::new(None),
            }),
        }
    }

    /// Connections closed unanswered since the start.
    pub fn refused(&self) -> u64 {
        self.shared.refused.load(Ordering::Relaxed)
    }

    /// Counts a refusal and says so on standard error, at most once every [`REPORT_EVERY`].
    fn refuse(&self) {
        let n = self.shared.refused.fetch_add(1, Ordering::Relaxed) + 1;
        let mut reported = self
            .shared
            .reported
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        if reported.is_none_or(|at| at.elapsed() >= REPORT_EVERY) {
            *reported = Some(Instant::now());
            eprintln!(
                "tapflow console: {n} connections closed unanswered so far: {} were open",
                self.shared.connections
            );
        }
    }
}

type Accepted<A, S> = io::Result<(
    <A as Accept<Held<TcpStream>, S>>::Stream,
    <A as Accept<Held<TcpStream>, S>>::Service,
)>;

impl<A, S> Accept<TcpStream, S> for Capped<A>
where
    A: Accept<Held<TcpStream>, S>,
    A::Future: Send + 'static,
    A::Stream: Send + 'static,
    A::Service: Send + 'static,
{
    type Stream = A::Stream;
    type Service = A::Service;
    type Future = Pin<Box<dyn Future<Output = Accepted<A, S>> + Send>>;

    fn accept(&self, stream: TcpStream, service: S) -> Self::Future {
        match Arc::clone(&self.shared.open).try_acquire_owned() {
            Ok(place) => Box::pin(self.inner.accept(
                Held {
                    stream,
                    _place: place,
                    reply: self.shared.reply,
                    stalled: None,
                },
                service,
            )),
            Err(_) => {
                drop(stream);
                self.refuse();
                Box::pin(std::future::ready(Err(io::Error::other(format!(
                    "{} connections open already",
                    self.shared.connections
                )))))
            }
        }
    }
}

/// A connection holding its place under the cap until it is dropped, and ended when the
/// client takes none of an answer for [`Limits::reply`].
#[derive(Debug)]
pub struct Held<S> {
    stream: S,
    _place: OwnedSemaphorePermit,
    reply: Duration,
    /// Since the client stopped taking the answer: the deadline.
    stalled: Option<Pin<Box<Sleep>>>,
}

impl<S> Held<S> {
    /// What a write that `wrote` says, given the client may stall for `reply` at most.
    fn written<T>(
        &mut self,
        cx: &mut Context<'_>,
        wrote: Poll<io::Result<T>>,
    ) -> Poll<io::Result<T>> {
        if wrote.is_ready() {
            self.stalled = None;
            return wrote;
        }
        let reply = self.reply;
        let stalled = self
            .stalled
            .get_or_insert_with(|| Box::pin(tokio::time::sleep(reply)));
        match stalled.as_mut().poll(cx) {
            Poll::Ready(()) => Poll::Ready(Err(io::Error::new(
                io::ErrorKind::TimedOut,
                format!("the client took none of the answer for {reply:?}"),
            ))),
            Poll::Pending => Poll::Pending,
        }
    }
}

impl<S: AsyncRead + Unpin> AsyncRead for Held<S> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().stream).poll_read(cx, buf)
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for Held<S> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        let wrote = Pin::new(&mut this.stream).poll_write(cx, buf);
        this.written(cx, wrote)
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        let wrote = Pin::new(&mut this.stream).poll_flush(cx);
        this.written(cx, wrote)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        let wrote = Pin::new(&mut this.stream).poll_shutdown(cx);
        this.written(cx, wrote)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        let wrote = Pin::new(&mut this.stream).poll_write_vectored(cx, bufs);
        this.written(cx, wrote)
    }

    fn is_write_vectored(&self) -> bool {
        self.stream.is_write_vectored()
    }
}

/// Sets the deadlines of `limits` on the HTTP/1 connections of `server`, and refuses HTTP/2
/// (whose protocol detection no deadline covers).
pub fn apply<A: axum_server::Address, Acc>(
    server: axum_server::Server<A, Acc>,
    limits: Limits,
) -> axum_server::Server<A, Acc> {
    let mut server = server.http1_only();
    server
        .http_builder()
        .http1()
        .header_read_timeout(limits.request);
    server
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum_server::accept::DefaultAcceptor;

    #[tokio::test]
    async fn a_connection_past_the_limit_is_closed_and_counted_and_its_place_comes_back() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let limits = Limits {
            connections: 2,
            ..Limits::CONSOLE
        };
        let capped = Capped::new(DefaultAcceptor::new(), limits);
        let mut clients = Vec::new();
        let mut accepted = Vec::new();
        for _ in 0..3 {
            clients.push(TcpStream::connect(addr).await.unwrap());
            let (server_side, _) = listener.accept().await.unwrap();
            accepted.push(capped.accept(server_side, ()).await);
        }
        assert!(accepted[0].is_ok() && accepted[1].is_ok());
        let refused = accepted.pop().unwrap().map(|_| ()).unwrap_err();
        assert_eq!(refused.to_string(), "2 connections open already");
        assert_eq!(capped.refused(), 1);
        // The refused client sees its connection end.
        let mut b = [0u8; 1];
        let n = tokio::io::AsyncReadExt::read(&mut clients[2], &mut b).await;
        assert!(matches!(n, Ok(0) | Err(_)), "{n:?}");
        // A connection that ends gives its place back.
        accepted.pop();
        clients.push(TcpStream::connect(addr).await.unwrap());
        let (server_side, _) = listener.accept().await.unwrap();
        assert!(capped.accept(server_side, ()).await.is_ok());
        assert_eq!(capped.refused(), 1);
    }

    #[tokio::test]
    async fn an_answer_the_client_stops_taking_ends_after_the_reply_limit() {
        use tokio::io::AsyncWriteExt;
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let limits = Limits {
            reply: Duration::from_millis(300),
            ..Limits::CONSOLE
        };
        let capped = Capped::new(DefaultAcceptor::new(), limits);
        let _client = TcpStream::connect(addr).await.unwrap();
        let (server_side, _) = listener.accept().await.unwrap();
        let (mut held, ()) = capped.accept(server_side, ()).await.unwrap();
        // The client reads nothing: the socket buffers fill, then the write waits and ends.
        let chunk = vec![0u8; 1 << 16];
        let start = Instant::now();
        let writes = async {
            for _ in 0..4096 {
                held.write_all(&chunk).await?;
            }
            Ok::<(), io::Error>(())
        };
        let e = tokio::time::timeout(Duration::from_secs(20), writes)
            .await
            .expect("the write still waits after 20 s")
            .expect_err("256 MiB written to a client that reads nothing");
        assert_eq!(e.kind(), io::ErrorKind::TimedOut, "{e}");
        assert!(
            start.elapsed() < Duration::from_secs(20),
            "{:?}",
            start.elapsed()
        );
    }
}
