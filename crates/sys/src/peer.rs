//! Who is at the other end of a Unix socket (`SO_PEERCRED`), and stopping a listener, for the
//! control socket.

use std::os::fd::AsFd;

use crate::{SysError, syscall};

/// The effective user id of the process at the other end of a connected Unix socket, as it was
/// when it connected.
#[doc(alias = "SO_PEERCRED")]
pub fn peer_uid(sock: &impl AsFd) -> Result<u32, SysError> {
    const CALL: &str = "getsockopt(SO_PEERCRED)";
    let mut cred = libc::ucred {
        pid: 0,
        uid: u32::MAX,
        gid: u32::MAX,
    };
    syscall::getsockopt(
        sock.as_fd(),
        libc::SOL_SOCKET,
        libc::SO_PEERCRED,
        &mut cred,
        CALL,
    )
    .map_err(|e| SysError::call(CALL, "control socket", e))?;
    Ok(cred.uid)
}

/// Shuts a listening socket down (`shutdown(SHUT_RDWR)`): a thread blocked in its `accept`
/// returns at once with an error, and every later `accept` fails. How a server thread that
/// sleeps in `accept` is told to stop.
#[doc(alias = "shutdown")]
pub fn shut_listener(sock: &impl AsFd) -> Result<(), SysError> {
    const CALL: &str = "shutdown";
    syscall::shutdown(sock.as_fd(), CALL).map_err(|e| SysError::call(CALL, "control socket", e))
}

/// This process's effective user id.
#[doc(alias = "geteuid")]
pub fn effective_uid() -> u32 {
    syscall::geteuid()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_socket_pair_peer_is_ourselves() {
        let (a, _b) = std::os::unix::net::UnixStream::pair().unwrap();
        assert_eq!(peer_uid(&a).unwrap(), effective_uid());
    }

    #[test]
    fn a_shut_listener_wakes_its_accept() {
        let path = std::env::temp_dir().join(format!("tfsys-shut-{}", std::process::id()));
        let _ = std::fs::remove_file(&path);
        let listener = std::os::unix::net::UnixListener::bind(&path).unwrap();
        let waker = listener.try_clone().unwrap();
        let t = std::thread::spawn(move || listener.accept().is_err());
        std::thread::sleep(std::time::Duration::from_millis(50));
        shut_listener(&waker).unwrap();
        assert!(
            t.join().unwrap(),
            "accept returned a connection nobody made"
        );
        std::fs::remove_file(&path).unwrap();
    }
}
