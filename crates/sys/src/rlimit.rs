//! The process's descriptor limit (`RLIMIT_NOFILE`), and the errors of running out.
#![allow(unsafe_code)]

use std::io;

use crate::SysError;

/// Raises the soft `RLIMIT_NOFILE` to the hard limit and returns the new soft limit, so that
/// many open connections do not leave a store without a descriptor for its next file.
#[doc(alias("setrlimit", "RLIMIT_NOFILE"))]
pub fn raise_nofile() -> Result<u64, SysError> {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: `lim` is a valid, writable rlimit for the kernel to fill.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) } != 0 {
        return Err(failed("getrlimit(RLIMIT_NOFILE)", String::new()));
    }
    if lim.rlim_cur >= lim.rlim_max {
        return Ok(lim.rlim_cur);
    }
    let want = libc::rlimit {
        rlim_cur: lim.rlim_max,
        rlim_max: lim.rlim_max,
    };
    // SAFETY: `want` is a valid rlimit that only raises the soft limit up to the hard one.
    if unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &want) } != 0 {
        return Err(failed(
            "setrlimit(RLIMIT_NOFILE)",
            format!("soft limit {} to {}", lim.rlim_cur, lim.rlim_max),
        ));
    }
    Ok(want.rlim_cur)
}

/// Whether `e` says the process or the system has no descriptor left (`EMFILE`, `ENFILE`).
pub fn is_out_of_descriptors(e: &io::Error) -> bool {
    matches!(e.raw_os_error(), Some(libc::EMFILE | libc::ENFILE))
}

fn failed(call: &'static str, detail: String) -> SysError {
    SysError::Call {
        call,
        iface: "the process".into(),
        detail,
        error: io::Error::last_os_error(),
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_soft_limit_reaches_the_hard_one() {
        let soft = super::raise_nofile().unwrap();
        let mut lim = libc::rlimit {
            rlim_cur: 0,
            rlim_max: 0,
        };
        // SAFETY: `lim` is a valid, writable rlimit.
        assert_eq!(unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) }, 0);
        assert_eq!((lim.rlim_cur, soft), (lim.rlim_max, lim.rlim_max));
    }
}
