//! A thread that serves the connections of a listening socket one at a time until dropped: the
//! control socket's and `/metrics`'. It sleeps in `accept`; dropping the server shuts the
//! listener down, which ends the `accept`, and joins the thread.

use std::io;
use std::net::{TcpListener, TcpStream};
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::net::{UnixListener, UnixStream};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread;
use std::time::Duration;

/// A listening socket a [`Server`] accepts on.
pub(crate) trait Listener: AsFd + Send + 'static {
    /// A connection it accepts.
    type Stream: Send;
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

/// A serving thread; see the module documentation.
#[derive(Debug)]
pub(crate) struct Server {
    name: String,
    done: Arc<AtomicBool>,
    /// A duplicate of the listener's descriptor, to shut it down from `drop`.
    waker: OwnedFd,
    thread: Option<thread::JoinHandle<()>>,
}

impl Server {
    /// Hands each connection `listener` accepts to `serve`, in a thread called `name`.
    pub(crate) fn spawn<L: Listener>(
        name: &str,
        listener: L,
        mut serve: impl FnMut(L::Stream) + Send + 'static,
    ) -> io::Result<Server> {
        let waker = listener.as_fd().try_clone_to_owned()?;
        let done = Arc::new(AtomicBool::new(false));
        let thread = thread::Builder::new().name(name.into()).spawn({
            let done = Arc::clone(&done);
            move || {
                loop {
                    let s = listener.accept_stream();
                    if done.load(Ordering::Acquire) {
                        break;
                    }
                    match s {
                        Ok(s) => serve(s),
                        // EMFILE and the like: wait a little rather than spin.
                        Err(_) => thread::sleep(Duration::from_millis(20)),
                    }
                }
            }
        })?;
        Ok(Server {
            name: name.to_string(),
            done,
            waker,
            thread: Some(thread),
        })
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.done.store(true, Ordering::Release);
        if let Some(t) = self.thread.take() {
            // Should the shutdown fail, the thread is left to end with the process rather than
            // waited for.
            if tapflow_sys::listener::shut_down(&self.waker, &self.name).is_ok() {
                let _ = t.join();
            }
        }
    }
}
