//! Network namespaces: move the calling thread into one (for tests and benchmarks).
#![allow(unsafe_code)]

use std::fs::File;
use std::io;
use std::os::fd::AsRawFd;
use std::path::Path;

use crate::SysError;

/// Moves the calling thread (only it) into the network namespace `name`, as made by
/// `ip netns add NAME` (`/run/netns/NAME`). Sockets it opens afterwards live there.
#[doc(alias = "setns")]
pub fn enter(name: &str) -> Result<(), SysError> {
    let path = Path::new("/run/netns").join(name);
    let err = |call, error| SysError::File {
        call,
        path: path.clone(),
        detail: String::new(),
        error,
    };
    let file = File::open(&path).map_err(|e| err("open", e))?;
    // SAFETY: setns takes a valid descriptor (alive for the call) and a flag; it changes only the
    // calling thread's namespace and touches no memory of ours.
    if unsafe { libc::setns(file.as_raw_fd(), libc::CLONE_NEWNET) } != 0 {
        let e = io::Error::last_os_error();
        return Err(SysError::File {
            call: "setns",
            path,
            detail: if e.raw_os_error() == Some(libc::EPERM) {
                "needs root or CAP_SYS_ADMIN".into()
            } else {
                String::new()
            },
            error: e,
        });
    }
    Ok(())
}
