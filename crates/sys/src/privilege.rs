//! Giving up root once a run is set up (tcpdump's `-Z USER`): the user to become, from the user
//! database, and the drop itself — supplementary groups, gid, uid, every capability (the
//! bounding set included), and no new privileges through `execve`.
//!
//! Linux keeps credentials per thread. glibc's `setgroups`, `setresgid` and `setresuid` change
//! every thread of the process (its setxid broadcast), but `capset` and `PR_CAPBSET_DROP` change
//! only the calling thread. So [`become_user`] refuses to run while the process has a second
//! thread: called before any other thread starts, it leaves every thread the run will have
//! with the dropped credentials, which a new thread inherits from the one that starts it.
//!
//! Nothing is kept: a packet socket already open goes on receiving, and its filter is replaced
//! (`SO_ATTACH_FILTER`), with no capability; only opening one needs `CAP_NET_RAW`.

use std::ffi::{CStr, CString};
use std::io;

use crate::{SysError, syscall};

/// A user to run as.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct User {
    /// The login name.
    pub name: String,
    /// The user id.
    pub uid: u32,
    /// The primary group id.
    pub gid: u32,
    /// Every group the user is in (`getgrouplist`), the primary group included.
    pub groups: Vec<u32>,
}

/// The user called `name` in the user database (`getpwnam_r`, so NSS sources count), with the
/// groups it is in; `None` if there is none.
#[doc(alias("getpwnam_r", "getgrouplist"))]
pub fn lookup(name: &str) -> Result<Option<User>, SysError> {
    let Ok(cname) = CString::new(name) else {
        return Ok(None);
    };
    let Some((uid, gid)) = passwd_entry(&cname, name)? else {
        return Ok(None);
    };
    let groups = group_list(&cname, gid, name)?;
    Ok(Some(User {
        name: name.to_owned(),
        uid,
        gid,
        groups,
    }))
}

/// Becomes `user` for good, in every thread, with no capability left; see the module
/// documentation. The process must have one thread, and `user` must not be root.
///
/// In order: the bounding set is emptied (while `CAP_SETPCAP` is still held), then the
/// groups, the gid and the uid change (real, effective and saved: there is no way back), the
/// capability sets are emptied (whatever `SECBIT_*` flags the process inherited), and
/// `PR_SET_NO_NEW_PRIVS` is set, so that not even a set-user-ID program gives root back. Last,
/// getting uid 0 back must fail.
#[doc(alias("setresuid", "capset", "PR_CAPBSET_DROP", "PR_SET_NO_NEW_PRIVS"))]
pub fn become_user(user: &User) -> Result<(), SysError> {
    let who = format!("user {}", user.name);
    let failed = |call: &'static str, detail: String, error: io::Error| SysError::Call {
        call,
        iface: who.clone(),
        detail,
        error,
    };
    const THREADS: &str = "/proc/self/task";
    let threads = syscall::threads(THREADS).map_err(|e| failed(THREADS, String::new(), e))?;
    if threads != 1 {
        return Err(SysError::invalid(
            "setresuid",
            &who,
            format!(
                "{threads} threads are running: capabilities are per thread, and all but this \
                 one would keep them (drop privileges before starting threads)"
            ),
        ));
    }
    const BSET: &str = "prctl(PR_CAPBSET_DROP)";
    for cap in 0..64 {
        match syscall::prctl(libc::PR_CAPBSET_DROP, cap, BSET) {
            Ok(()) => {}
            // Past the last capability this kernel knows.
            Err(e) if e.raw_os_error() == Some(libc::EINVAL) && cap > 0 => break,
            Err(e) => return Err(failed(BSET, format!("capability {cap}"), e)),
        }
    }
    syscall::setgroups(&user.groups, "setgroups")
        .map_err(|e| failed("setgroups", format!("groups {:?}", user.groups), e))?;
    syscall::setresgid(user.gid, "setresgid")
        .map_err(|e| failed("setresgid", format!("gid {}", user.gid), e))?;
    syscall::setresuid(user.uid, "setresuid")
        .map_err(|e| failed("setresuid", format!("uid {}", user.uid), e))?;
    syscall::capset_empty("capset").map_err(|e| failed("capset", "every set empty".into(), e))?;
    const NNP: &str = "prctl(PR_SET_NO_NEW_PRIVS)";
    syscall::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, NNP).map_err(|e| failed(NNP, String::new(), e))?;
    const REGAIN: &str = "setresuid(0, 0, 0)";
    match syscall::setresuid(0, REGAIN) {
        Err(e) if e.raw_os_error() == Some(libc::EPERM) => Ok(()),
        Err(e) => Err(failed(
            REGAIN,
            "a check that root cannot come back".into(),
            e,
        )),
        Ok(()) => Err(SysError::invalid(
            REGAIN,
            &who,
            "root came back after the drop",
        )),
    }
}

/// The uid and primary gid of `name` (also given as `shown`, for errors).
#[allow(unsafe_code)] // getpwnam_r: the reentrant lookup fills a caller's buffer.
fn passwd_entry(name: &CStr, shown: &str) -> Result<Option<(u32, u32)>, SysError> {
    let mut len = 1024;
    loop {
        let mut buf = vec![0 as libc::c_char; len];
        // SAFETY: passwd is plain old data (integers and pointers) for which all-zero is valid.
        let mut pwd: libc::passwd = unsafe { std::mem::zeroed() };
        let mut result: *mut libc::passwd = std::ptr::null_mut();
        // SAFETY: `name` is NUL-terminated; `pwd`, `buf` (of `len` bytes) and `result` are live
        // and writable for the call; the strings the entry points at live in `buf`, and only
        // the integers are read from it below.
        let r = unsafe {
            libc::getpwnam_r(name.as_ptr(), &mut pwd, buf.as_mut_ptr(), len, &mut result)
        };
        match r {
            0 if result.is_null() => return Ok(None),
            0 => return Ok(Some((pwd.pw_uid, pwd.pw_gid))),
            libc::ERANGE if len < 1 << 20 => len *= 4,
            // "Not found" as some NSS modules say it.
            libc::ENOENT | libc::ESRCH | libc::EBADF => return Ok(None),
            errno => {
                return Err(SysError::Call {
                    call: "getpwnam_r",
                    iface: format!("user {shown}"),
                    detail: String::new(),
                    error: io::Error::from_raw_os_error(errno),
                });
            }
        }
    }
}

/// The groups `name` is in, `gid` included.
#[allow(unsafe_code)] // getgrouplist: fills a caller's array.
fn group_list(name: &CStr, gid: u32, shown: &str) -> Result<Vec<u32>, SysError> {
    let mut n: libc::c_int = 32;
    loop {
        let mut groups = vec![0 as libc::gid_t; n as usize];
        let asked = n;
        // SAFETY: `name` is NUL-terminated; `groups` has room for `n` gids, and getgrouplist
        // writes at most `n` of them, then sets `n` to the number the user has.
        let r = unsafe { libc::getgrouplist(name.as_ptr(), gid, groups.as_mut_ptr(), &mut n) };
        if r >= 0 {
            groups.truncate(n.max(0) as usize);
            return Ok(groups);
        }
        if n <= asked || asked >= 1 << 16 {
            return Err(SysError::invalid(
                "getgrouplist",
                &format!("user {shown}"),
                format!("more than {asked} groups"),
            ));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::syscall::fake::Fake;

    fn someone() -> User {
        User {
            name: "someone".into(),
            uid: 4321,
            gid: 4322,
            groups: vec![4322, 20],
        }
    }

    #[test]
    fn the_user_database_is_read() {
        let root = lookup("root").unwrap().expect("root");
        assert_eq!((root.uid, root.gid), (0, 0));
        assert!(root.groups.contains(&0), "{root:?}");
        let nobody = lookup("nobody").unwrap().expect("nobody");
        assert_eq!(nobody.uid, 65534);
        assert!(nobody.groups.contains(&nobody.gid), "{nobody:?}");
        assert_eq!(lookup("tapflow-no-such-user").unwrap(), None);
        assert_eq!(lookup("bad\0name").unwrap(), None);
    }

    #[test]
    fn the_bounding_set_goes_first_then_groups_gid_uid_then_capabilities() {
        let fake = Fake::install();
        fake.fail("setresuid(0, 0, 0)", libc::EPERM);
        become_user(&someone()).unwrap();
        let calls = fake.calls();
        let mut order: Vec<&str> = calls.clone();
        order.dedup();
        assert_eq!(
            order,
            [
                "/proc/self/task",
                "prctl(PR_CAPBSET_DROP)",
                "setgroups",
                "setresgid",
                "setresuid",
                "capset",
                "prctl(PR_SET_NO_NEW_PRIVS)",
                "setresuid(0, 0, 0)",
            ]
        );
        // Every capability number a kernel can have (the fake never says "no such one").
        let dropped = calls.iter().filter(|c| **c == "prctl(PR_CAPBSET_DROP)");
        assert_eq!(dropped.count(), 64);
    }

    #[test]
    fn a_refused_step_stops_the_drop_and_names_the_value() {
        let fake = Fake::install();
        fake.fail("setresuid", libc::EPERM);
        let e = become_user(&someone()).unwrap_err();
        assert_eq!(
            e.to_string(),
            "setresuid on user someone failed: uid 4321 (Operation not permitted)"
        );
        assert!(!fake.calls().contains(&"capset"), "{:?}", fake.calls());
        drop(fake);

        let fake = Fake::install();
        fake.fail("setgroups", libc::EPERM);
        let e = become_user(&someone()).unwrap_err().to_string();
        assert!(
            e.starts_with("setgroups on user someone failed: groups [4322, 20]"),
            "{e}"
        );
        assert!(!fake.calls().contains(&"setresuid"));
    }

    #[test]
    fn root_coming_back_is_an_error() {
        // The fake lets `setresuid(0, 0, 0)` succeed, as a broken drop would.
        let _fake = Fake::install();
        let e = become_user(&someone()).unwrap_err().to_string();
        assert!(e.contains("root came back"), "{e}");
    }

    #[test]
    fn a_second_thread_is_counted() {
        let (tx, rx) = std::sync::mpsc::channel::<()>();
        let t = std::thread::spawn(move || rx.recv());
        assert!(syscall::threads("t").unwrap() >= 2);
        drop(tx);
        let _ = t.join();
    }
}
