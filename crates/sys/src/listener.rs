//! Stopping a socket a server thread sleeps on: a listening socket's `accept`, a connection's
//! `read` or `write`.

use std::os::fd::AsFd;

use crate::{SysError, syscall};

/// Shuts the socket `sock` (named `name` in errors) down (`shutdown(SHUT_RDWR)`). On a
/// listening socket, a thread blocked in its `accept` returns at once with an error, and every
/// later `accept` fails; on a connected stream, a blocked `read` returns the end of the stream
/// and a blocked `write` fails, at once, and so does every later one. Works on any descriptor
/// of the socket, a duplicate included.
#[doc(alias = "shutdown")]
pub fn shut_down(sock: &impl AsFd, name: &str) -> Result<(), SysError> {
    const CALL: &str = "shutdown";
    syscall::shutdown(sock.as_fd(), CALL).map_err(|e| SysError::call(CALL, name, e))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::ErrorKind;

    /// Starts `accept` in a thread, shuts the listener down through `waker`, and checks the
    /// accept ended with an error.
    fn wakes(accept: impl FnOnce() -> std::io::Result<()> + Send + 'static, waker: &impl AsFd) {
        let t = std::thread::spawn(accept);
        std::thread::sleep(std::time::Duration::from_millis(50));
        shut_down(waker, "test listener").unwrap();
        let r = t.join().unwrap();
        assert!(r.is_err(), "accept returned a connection nobody made");
        assert_ne!(r.unwrap_err().kind(), ErrorKind::WouldBlock);
    }

    #[test]
    fn a_shut_listener_wakes_its_accept() {
        let path = std::env::temp_dir().join(format!("tfsys-shut-{}", std::process::id()));
        let _ = std::fs::remove_file(&path);
        let unix = std::os::unix::net::UnixListener::bind(&path).unwrap();
        let waker = unix.try_clone().unwrap();
        wakes(move || unix.accept().map(drop), &waker);
        std::fs::remove_file(&path).unwrap();

        let tcp = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let waker = tcp.as_fd().try_clone_to_owned().unwrap();
        wakes(move || tcp.accept().map(drop), &waker);
    }

    #[test]
    fn a_shut_connection_wakes_its_read() {
        use std::io::Read;
        let (mut a, _b) = std::os::unix::net::UnixStream::pair().unwrap();
        let waker = a.try_clone().unwrap();
        let t = std::thread::spawn(move || a.read(&mut [0u8; 8]));
        std::thread::sleep(std::time::Duration::from_millis(50));
        shut_down(&waker, "test connection").unwrap();
        assert_eq!(t.join().unwrap().unwrap(), 0);
    }
}
