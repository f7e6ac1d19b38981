//! A stop request shared by the threads of one run: a flag, and a socket that turns readable
//! when the flag is raised, so that a worker asleep in `poll()` wakes at once rather than at
//! its next timeout. An idle capture can then sleep until its timers are due (an ISB, the
//! kernel's counters) instead of waking every few milliseconds to look at the flag.

use std::io::{self, Write};
use std::os::fd::{AsFd, BorrowedFd};
use std::os::unix::net::UnixStream;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

/// See the module documentation.
#[derive(Debug)]
pub struct Stop {
    raised: Arc<AtomicBool>,
    /// Never read: once a byte is in it, it stays readable for every poller.
    wake_rx: UnixStream,
    /// Non-blocking, so that raising never waits.
    wake_tx: UnixStream,
}

impl Stop {
    /// A stop not yet raised.
    pub fn new() -> io::Result<Stop> {
        let (wake_rx, wake_tx) = UnixStream::pair()?;
        wake_tx.set_nonblocking(true)?;
        Ok(Stop {
            raised: Arc::new(AtomicBool::new(false)),
            wake_rx,
            wake_tx,
        })
    }

    /// Raises the flag, then wakes every thread polling [`Stop::wake_fd`]; a second raise
    /// costs no system call.
    pub fn raise(&self) {
        if !self.raised.swap(true, Ordering::Relaxed) {
            // A full buffer is already readable: nothing is lost by ignoring the error.
            let _ = (&self.wake_tx).write(b"!");
        }
    }

    /// Whether the stop was raised.
    pub fn is_raised(&self) -> bool {
        self.raised.load(Ordering::Relaxed)
    }

    /// The flag itself, for a signal handler to set (`signal_hook::flag::register`) and for
    /// loops that only check it.
    pub fn flag(&self) -> &Arc<AtomicBool> {
        &self.raised
    }

    /// A second handle on the write end, for a signal handler to write one byte to after it
    /// sets [`Stop::flag`] (`signal_hook::low_level::pipe::register`).
    pub fn waker(&self) -> io::Result<UnixStream> {
        self.wake_tx.try_clone()
    }

    /// Readable from the moment the stop is raised, for good.
    pub fn wake_fd(&self) -> BorrowedFd<'_> {
        self.wake_rx.as_fd()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Read;

    /// The bytes waiting on `fd`, taken.
    fn take(fd: BorrowedFd<'_>) -> Vec<u8> {
        let mut sock = UnixStream::from(fd.try_clone_to_owned().unwrap());
        sock.set_nonblocking(true).unwrap();
        let mut buf = [0u8; 16];
        match sock.read(&mut buf) {
            Ok(n) => buf[..n].to_vec(),
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => Vec::new(),
            Err(e) => panic!("{e}"),
        }
    }

    #[test]
    fn raising_sets_the_flag_and_wakes_once() {
        let stop = Stop::new().unwrap();
        assert!(!stop.is_raised());
        assert!(take(stop.wake_fd()).is_empty());
        stop.raise();
        assert!(stop.is_raised());
        assert!(stop.flag().load(Ordering::Relaxed));
        assert_eq!(take(stop.wake_fd()), b"!");
        // Raised already: no second byte, no system call (the worker raises per packet past
        // a count limit).
        stop.raise();
        assert!(take(stop.wake_fd()).is_empty());
    }

    #[test]
    fn a_waker_wakes_without_raising() {
        let stop = Stop::new().unwrap();
        let mut w = stop.waker().unwrap();
        w.write_all(b"x").unwrap();
        assert_eq!(take(stop.wake_fd()), b"x");
        // The flag is the signal handler's to set; the waker alone does not.
        assert!(!stop.is_raised());
    }
}
