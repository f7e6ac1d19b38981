//! Who is at the other end of a Unix socket (`SO_PEERCRED`), for the control socket.

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
}
