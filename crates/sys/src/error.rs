//! The error every fallible call in this crate returns.

use std::io;
use std::path::PathBuf;

/// What went wrong at the boundary with the kernel: which call, on which interface (or file), the
/// value involved and the errno. Displays as one line, e.g.
/// `setsockopt(PACKET_RX_RING) on eth0 failed: block size 3000 is not a multiple of the page size
/// 4096 (Invalid argument)`.
#[derive(Debug, thiserror::Error)]
pub enum SysError {
    /// The kernel knows no interface by this name (in the calling thread's network namespace).
    #[error("no such interface: {name}")]
    NoSuchInterface {
        /// The name that was looked up.
        name: String,
    },
    /// A call into the kernel failed, or was refused before it was made because a value is out of
    /// range (then `error` is a synthesised `EINVAL`).
    #[error("{call} on {iface} failed: {}", describe(.detail, .error))]
    Call {
        /// The call and its option, e.g. `setsockopt(PACKET_RX_RING)`.
        call: &'static str,
        /// The interface the call was for.
        iface: String,
        /// What was asked and why it failed, in plain words; may be empty.
        detail: String,
        /// The errno.
        error: io::Error,
    },
    /// libpcap could not compile a tcpdump filter expression.
    #[error("filter '{expr}': {message}")]
    Filter {
        /// The expression as given.
        expr: String,
        /// libpcap's message, e.g. `syntax error`.
        message: String,
    },
    /// A file could not be opened or mapped.
    #[error("{call} {} failed: {}", .path.display(), describe(.detail, .error))]
    File {
        /// The call, e.g. `open` or `mmap`.
        call: &'static str,
        /// The file.
        path: PathBuf,
        /// Extra words; may be empty.
        detail: String,
        /// The errno.
        error: io::Error,
    },
}

impl SysError {
    /// Whether the kernel refused for lack of privilege (`EPERM` / `EACCES`).
    pub fn is_permission(&self) -> bool {
        matches!(self.errno(), Some(libc::EPERM | libc::EACCES))
    }

    /// The errno behind this error, if there is one.
    pub fn errno(&self) -> Option<i32> {
        match self {
            SysError::Call { error, .. } | SysError::File { error, .. } => error.raw_os_error(),
            SysError::NoSuchInterface { .. } => Some(libc::ENODEV),
            SysError::Filter { .. } => None,
        }
    }

    /// A failed call; `detail` is derived from the errno (privilege, missing device, memory).
    pub(crate) fn call(call: &'static str, iface: &str, error: io::Error) -> SysError {
        let detail = match error.raw_os_error() {
            Some(libc::EPERM | libc::EACCES) => "needs root or CAP_NET_RAW",
            Some(libc::ENETDOWN) => "the interface is down",
            Some(libc::ENODEV | libc::ENXIO) => "the interface has gone",
            _ => "",
        };
        SysError::call_with(call, iface, detail, error)
    }

    /// A failed call with a caller-written detail; privilege errors still say what is needed.
    pub(crate) fn call_with(
        call: &'static str,
        iface: &str,
        detail: impl Into<String>,
        error: io::Error,
    ) -> SysError {
        let mut detail = detail.into();
        if matches!(error.raw_os_error(), Some(libc::EPERM | libc::EACCES))
            && !detail.contains("CAP_NET_")
        {
            detail = if detail.is_empty() {
                "needs root or CAP_NET_RAW".to_owned()
            } else {
                format!("{detail}: needs root or CAP_NET_RAW")
            };
        }
        SysError::Call {
            call,
            iface: iface.to_owned(),
            detail,
            error,
        }
    }

    /// A value refused before calling the kernel (reported as `EINVAL`).
    pub(crate) fn invalid(call: &'static str, iface: &str, detail: impl Into<String>) -> SysError {
        SysError::Call {
            call,
            iface: iface.to_owned(),
            detail: detail.into(),
            error: io::Error::from_raw_os_error(libc::EINVAL),
        }
    }
}

/// `detail (errno text)`, or just the errno text; the text without std's "(os error N)" suffix.
fn describe(detail: &str, error: &io::Error) -> String {
    let text = error.to_string();
    let text = match (error.raw_os_error(), text.rfind(" (os error ")) {
        (Some(_), Some(at)) => &text[..at],
        _ => &text,
    };
    if detail.is_empty() {
        text.to_owned()
    } else {
        format!("{detail} ({text})")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn display_is_one_line_with_call_iface_detail_and_errno() {
        let e = SysError::invalid(
            "setsockopt(PACKET_RX_RING)",
            "eth0",
            "block size 3000 is not a multiple of the page size 4096",
        );
        assert_eq!(
            e.to_string(),
            "setsockopt(PACKET_RX_RING) on eth0 failed: block size 3000 is not a multiple of the \
             page size 4096 (Invalid argument)"
        );
        let e = SysError::call("socket(AF_PACKET)", "eth0", io::Error::from_raw_os_error(1));
        assert_eq!(
            e.to_string(),
            "socket(AF_PACKET) on eth0 failed: needs root or CAP_NET_RAW (Operation not permitted)"
        );
        assert!(e.is_permission());
        let e = SysError::NoSuchInterface {
            name: "nope0".into(),
        };
        assert_eq!(e.to_string(), "no such interface: nope0");
        assert!(!e.is_permission());
    }
}
