//! Who `capture`, `flows` and `recv` run as once their inputs are open: the user of `-Z USER`
//! (as tcpdump's), by default the `tapflow` system user if there is one, with no capability
//! left (`tapflow_sys::privilege`).

use std::io;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use tapflow_engine::EngineError;
use tapflow_engine::control;
use tapflow_engine::pipeline::Hook;
use tapflow_sys::privilege::{self, User};

use crate::Failure;

/// The user a run becomes when `-Z` is not given, if it exists.
pub const DEFAULT_USER: &str = "tapflow";

/// What a run does about its privileges.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RunAs {
    /// Stays as it is: not root (nothing to give up; `-Z` is ignored, as by tcpdump), or
    /// `-Z root`.
    Unchanged,
    /// Stays root because there is no `tapflow` user, and says so once at start.
    RootByDefault,
    /// Becomes this user once the inputs are open.
    User(User),
}

/// The outputs a run creates after the drop, tried as the new user before the first packet.
#[derive(Debug, Clone, Default)]
pub struct Outputs {
    /// The first file of `-w` (its `.part`), and the name given.
    pub first_file: Option<(PathBuf, PathBuf)>,
    /// `--summary-json`, written at the end.
    pub summary: Option<PathBuf>,
}

impl RunAs {
    /// What `-Z` (`flag`) and the user database say; an unknown user is a usage error.
    pub fn choose(flag: Option<&str>) -> Result<RunAs, Failure> {
        let lookup =
            |name: &str| privilege::lookup(name).map_err(|e| Failure::Runtime(e.to_string()));
        let user = match flag {
            Some(name) => Some(
                lookup(name)?.ok_or_else(|| Failure::Usage(format!("-Z {name}: no such user")))?,
            ),
            None => lookup(DEFAULT_USER)?,
        };
        Ok(decide(tapflow_sys::peer::effective_uid() == 0, user))
    }

    /// The line to print once at start, if any.
    pub fn note(&self) -> Option<String> {
        (*self == RunAs::RootByDefault).then(|| {
            format!(
                "tapflow: running as root: no '{DEFAULT_USER}' user; give -Z USER to drop \
                 privileges"
            )
        })
    }

    /// Makes the control socket's directory the new user's, so that it can create the socket
    /// after the drop and remove it at the end: created for the user if missing, handed over
    /// if it is the default directory (`/run/tapflow`) and root's.
    pub fn prepare_control(&self, socket: Option<&Path>) -> Result<(), Failure> {
        let (RunAs::User(u), Some(dir)) = (self, socket.and_then(Path::parent)) else {
            return Ok(());
        };
        if dir.as_os_str().is_empty() {
            return Ok(());
        }
        let fail = |e: io::Error| {
            Failure::Runtime(format!(
                "cannot give the control socket's directory {} to user {}: {e}",
                dir.display(),
                u.name
            ))
        };
        let give = || std::os::unix::fs::chown(dir, Some(u.uid), Some(u.gid)).map_err(fail);
        match std::fs::metadata(dir) {
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                std::fs::create_dir_all(dir)
                    .and_then(|()| std::fs::set_permissions(dir, PermissionsExt::from_mode(0o700)))
                    .map_err(fail)?;
                give()
            }
            Ok(m) if m.uid() == 0 && dir == std::path::Path::new(control::DIR) => give(),
            _ => Ok(()),
        }
    }

    /// The hook that becomes the user, then tries `outputs` as them; `None` unless the run
    /// changes user.
    pub fn hook(&self, outputs: Outputs) -> Option<Hook> {
        let RunAs::User(u) = self else {
            return None;
        };
        let u = u.clone();
        Some(Hook(Arc::new(move || {
            privilege::become_user(&u)?;
            outputs.check(&u.name).map_err(EngineError::Config)
        })))
    }
}

/// The choice for a process whose effective uid is 0 (`root`) or not, given the user of `-Z`
/// or, without it, the default user if there is one.
fn decide(root: bool, user: Option<User>) -> RunAs {
    match user {
        _ if !root => RunAs::Unchanged,
        Some(u) if u.uid == 0 => RunAs::Unchanged,
        Some(u) => RunAs::User(u),
        None => RunAs::RootByDefault,
    }
}

impl Outputs {
    /// Fails unless this process, now `user`, can create every output.
    fn check(&self, user: &str) -> Result<(), String> {
        let why = |shown: &Path, e: io::Error| {
            format!(
                "cannot write {} as user {user}: {e}: the directory must be writable by \
                 {user} (or give -Z root)",
                shown.display()
            )
        };
        if let Some((probe, base)) = &self.first_file {
            creatable(probe).map_err(|e| why(base, e))?;
        }
        if let Some(path) = &self.summary {
            use tapflow_sys::outfile::{Target, target};
            match target(path).map_err(|e| e.to_string())? {
                Target::Nothing => creatable(path).map_err(|e| why(path, e))?,
                // Written at the end: it must open for writing (it is not truncated here).
                Target::RegularFile | Target::Stream => std::fs::OpenOptions::new()
                    .write(true)
                    .open(path)
                    .map(drop)
                    .map_err(|e| why(path, e))?,
            }
        }
        Ok(())
    }
}

/// Creates `path`, which must not exist, and removes it again: whether an output can be
/// made there. `AlreadyExists` if something is there.
pub fn creatable(path: &Path) -> io::Result<()> {
    std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(path)?;
    std::fs::remove_file(path)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn user(uid: u32) -> User {
        User {
            name: format!("u{uid}"),
            uid,
            gid: uid,
            groups: vec![uid],
        }
    }

    #[test]
    fn root_drops_to_the_user_given_or_found() {
        assert_eq!(decide(true, Some(user(999))), RunAs::User(user(999)));
        // No `tapflow` user: root stays, and says so.
        assert_eq!(decide(true, None), RunAs::RootByDefault);
        assert!(RunAs::RootByDefault.note().unwrap().contains("-Z USER"));
        // `-Z root` (or any name for uid 0) keeps root, quietly.
        assert_eq!(decide(true, Some(user(0))), RunAs::Unchanged);
        assert_eq!(RunAs::Unchanged.note(), None);
        // Not root: nothing to give up.
        assert_eq!(decide(false, Some(user(999))), RunAs::Unchanged);
        assert_eq!(decide(false, None), RunAs::Unchanged);
        assert!(RunAs::Unchanged.hook(Outputs::default()).is_none());
        assert!(RunAs::User(user(999)).hook(Outputs::default()).is_some());
    }

    #[test]
    fn an_unknown_user_is_a_usage_error() {
        match RunAs::choose(Some("tapflow-no-such-user")) {
            Err(Failure::Usage(m)) => assert_eq!(m, "-Z tapflow-no-such-user: no such user"),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn a_missing_control_directory_is_made_for_the_user() {
        let base = std::env::temp_dir().join(format!("tf-privileges-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&base);
        let me = tapflow_sys::peer::effective_uid();
        let u = User {
            name: "me".into(),
            uid: me,
            gid: std::fs::metadata(std::env::temp_dir()).unwrap().gid(),
            groups: vec![],
        };
        let dir = base.join("ctl");
        RunAs::User(u.clone())
            .prepare_control(Some(&dir.join("x.sock")))
            .unwrap();
        let m = std::fs::metadata(&dir).unwrap();
        assert_eq!((m.uid(), m.mode() & 0o777), (me, 0o700));
        // Nothing to do for a run that keeps its user, or without a socket.
        RunAs::Unchanged
            .prepare_control(Some(&base.join("other/x.sock")))
            .unwrap();
        RunAs::User(u).prepare_control(None).unwrap();
        assert!(!base.join("other").exists());
        std::fs::remove_dir_all(&base).unwrap();
    }

    #[test]
    fn outputs_are_tried_and_left_as_they_were() {
        let dir = std::env::temp_dir().join(format!("tf-outputs-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let summary = dir.join("sum.json");
        let o = Outputs {
            first_file: Some((dir.join("out.pcapng.part"), dir.join("out.pcapng"))),
            summary: Some(summary.clone()),
        };
        o.check("me").unwrap();
        assert_eq!(std::fs::read_dir(&dir).unwrap().count(), 0);
        // A summary there already is kept (and replaced only at the end).
        std::fs::write(&summary, "old").unwrap();
        o.check("me").unwrap();
        assert_eq!(std::fs::read_to_string(&summary).unwrap(), "old");
        let gone = Outputs {
            first_file: Some((dir.join("no/out.part"), dir.join("no/out"))),
            summary: None,
        };
        let e = gone.check("me").unwrap_err();
        assert!(
            e.starts_with(&format!(
                "cannot write {}/no/out as user me: ",
                dir.display()
            )),
            "{e}"
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
