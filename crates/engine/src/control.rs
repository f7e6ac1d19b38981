//! The control socket of a running capture: a Unix stream socket, mode 0600, that answers one
//! request per connection — statistics, and listing and changing the live rules.
//!
//! A request is a command line, then a body (rule text) until the client shuts its side; the
//! reply is `ok` or `error: WHY` on the first line, then the content. Only root and the probe's
//! own user may connect: the file mode keeps others out, and the server checks the peer's user
//! (`SO_PEERCRED`) as well.
//!
//! Up to 16 clients are served at once, more are turned away; a client has 5 s to send its
//! request and 5 s to take the reply, so a slow one holds up neither another client nor the
//! capture's exit.
//!
//! | command | body | reply |
//! |---|---|---|
//! | `stats` | | [`Stats`] as JSON |
//! | `rules list` | | [`RuleListing`] as JSON |
//! | `rules add` | one rule line | the listing after the change |
//! | `rules del NAME` | | the listing after the change |
//! | `rules load` | a rule file | the listing after the change |
//!
//! [`stats`] and [`rules`] are the client's side.

use std::io::{Read, Write};
use std::os::unix::fs::PermissionsExt;
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use serde::de::DeserializeOwned;
use tapflow_sys::peer;
use tapflow_wire::rules::{Rule, parse_rules};

use crate::EngineError;
use crate::probe::{ProbeState, Stats};
use crate::rules::RuleListing;
use crate::server::{Connection, Limits, Server};

/// The directory of the default control sockets.
pub const DIR: &str = "/run/tapflow";

/// This process's network namespace: the inode of `/proc/self/ns/net` (0 if unknown).
pub fn netns() -> u64 {
    use std::os::unix::fs::MetadataExt;
    std::fs::metadata("/proc/self/ns/net").map_or(0, |m| m.ino())
}

/// Where a capture on `iface` serves its control socket unless told otherwise:
/// `/run/tapflow/IFACE.NETNS.PID.sock`, one per network namespace (an `eth0` in another
/// namespace is another interface) and per run (a second look at the same interface is
/// another capture).
pub fn default_path(iface: &str) -> PathBuf {
    PathBuf::from(format!(
        "{DIR}/{iface}.{}.{}.sock",
        netns(),
        std::process::id()
    ))
}

/// The control sockets of the running captures on `iface` (on any interface when `None`) in
/// this process's network namespace, found in [`DIR`]: those a capture answers on.
pub fn find(iface: Option<&str>) -> Vec<PathBuf> {
    let ns = netns().to_string();
    let Ok(dir) = std::fs::read_dir(DIR) else {
        return Vec::new();
    };
    let mut found: Vec<PathBuf> = dir
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| {
            let Some(name) = p.file_name().and_then(|n| n.to_str()) else {
                return false;
            };
            let Some(stem) = name.strip_suffix(".sock") else {
                return false;
            };
            // IFACE.NETNS.PID, the interface's name possibly with dots of its own (eth0.100).
            let mut parts = stem.rsplitn(3, '.');
            let (Some(pid), Some(n), Some(ifname)) = (parts.next(), parts.next(), parts.next())
            else {
                return false;
            };
            pid.parse::<u32>().is_ok()
                && n == ns
                && iface.is_none_or(|i| i == ifname)
                && UnixStream::connect(p).is_ok()
        })
        .collect();
    found.sort();
    found
}

/// A serving control socket; stops and removes the socket file when dropped.
#[derive(Debug)]
pub struct ControlServer {
    path: PathBuf,
    /// `None` once dropped: stopped before the socket file goes.
    server: Option<Server>,
}

impl ControlServer {
    /// Serves `probe` at `path`. A stale socket file is replaced; one a live probe answers on
    /// is an error.
    pub fn start(path: &Path, probe: Arc<ProbeState>) -> Result<ControlServer, EngineError> {
        let err = |what: String| EngineError::Control(format!("{}: {what}", path.display()));
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty())
            && !dir.exists()
        {
            std::fs::create_dir_all(dir)
                .and_then(|()| std::fs::set_permissions(dir, PermissionsExt::from_mode(0o700)))
                .map_err(|e| err(format!("cannot create the directory: {e}")))?;
        }
        if path.exists() {
            if UnixStream::connect(path).is_ok() {
                return Err(err(
                    "another tapflow capture is serving this control socket: give this one \
                     another with --control PATH (or --control none)"
                        .into(),
                ));
            }
            std::fs::remove_file(path)
                .map_err(|e| err(format!("cannot remove the stale socket: {e}")))?;
        }
        let listener = UnixListener::bind(path).map_err(|e| err(format!("cannot listen: {e}")))?;
        std::fs::set_permissions(path, PermissionsExt::from_mode(0o600))
            .map_err(|e| err(e.to_string()))?;
        let server = Server::spawn("tapflow-control", listener, Limits::SERVICE, move |s| {
            let _ = serve(s, &probe);
        })
        .map_err(|e| err(format!("cannot start the control thread: {e}")))?;
        Ok(ControlServer {
            path: path.to_path_buf(),
            server: Some(server),
        })
    }

    /// The socket's path.
    pub fn path(&self) -> &Path {
        &self.path
    }
}

impl Drop for ControlServer {
    fn drop(&mut self) {
        drop(self.server.take());
        let _ = std::fs::remove_file(&self.path);
    }
}

/// Answers one request.
fn serve(s: &mut Connection<UnixStream>, probe: &ProbeState) -> std::io::Result<()> {
    let me = peer::effective_uid();
    let allowed = peer::peer_uid(s).is_ok_and(|uid| uid == 0 || uid == me);
    let mut request = String::new();
    // The whole request is read even from a refused peer, so that closing does not reset the
    // connection before it reads the refusal.
    let limit = if allowed { 64 << 20 } else { 64 << 10 };
    (&mut *s).take(limit).read_to_string(&mut request)?;
    if !allowed {
        return s.write_all(b"error: permission denied\n");
    }
    let (command, body) = request.split_once('\n').unwrap_or((&request, ""));
    let reply = match answer(command.trim(), body, probe) {
        Ok(text) => format!("ok\n{text}"),
        Err(e) => format!("error: {e}\n"),
    };
    s.write_all(reply.as_bytes())
}

/// Why the control socket refused a request; sent to the client as `error: ...`.
#[derive(Debug, thiserror::Error)]
enum Refusal {
    /// The capture reads a file, which has no live rules.
    #[error("this capture has no live rules (it reads a file)")]
    NoRules,
    /// The rule in a `rules add` request does not parse.
    #[error("{0}")]
    Rule(String),
    /// The rule file in a `rules load` request does not parse.
    #[error(transparent)]
    RuleFile(#[from] tapflow_wire::rules::ParseError),
    /// The rules could not be changed.
    #[error(transparent)]
    Change(#[from] EngineError),
    /// Not a request the socket knows.
    #[error("unknown request '{0}'")]
    Unknown(String),
    /// The answer could not be written as JSON.
    #[error("cannot write the answer: {0}")]
    Json(#[from] serde_json::Error),
}

fn answer(command: &str, body: &str, probe: &ProbeState) -> Result<String, Refusal> {
    let words: Vec<&str> = command.split_whitespace().collect();
    if words == ["stats"] {
        return json(&probe.stats());
    }
    let rules = || probe.rules().ok_or(Refusal::NoRules);
    let listing = match words.as_slice() {
        ["rules", "list"] => rules()?.list(),
        ["rules", "add"] => {
            let rule = Rule::parse(body.trim()).map_err(Refusal::Rule)?;
            rules()?.add(rule)?
        }
        ["rules", "del", name] => rules()?.delete(name)?,
        ["rules", "load"] => rules()?.replace(parse_rules(body)?)?,
        _ => return Err(Refusal::Unknown(command.to_string())),
    };
    json(&listing)
}

/// A reply's content: `value` as JSON on one line.
fn json(value: &impl serde::Serialize) -> Result<String, Refusal> {
    let mut s = serde_json::to_string(value)?;
    s.push('\n');
    Ok(s)
}

/// Asks the capture at `path` for its statistics.
pub fn stats(path: &Path) -> Result<Stats, EngineError> {
    parse(path, &request(path, "stats", "")?)
}

/// Sends a rules request (`rules list`, `rules add`, `rules del NAME`, `rules load`, with the
/// rule text as `body`) to the capture at `path` and returns the listing it answers.
pub fn rules(path: &Path, command: &str, body: &str) -> Result<RuleListing, EngineError> {
    parse(path, &request(path, command, body)?)
}

fn parse<T: DeserializeOwned>(path: &Path, reply: &str) -> Result<T, EngineError> {
    serde_json::from_str(reply).map_err(|e| {
        EngineError::Control(format!(
            "{}: the reply is not from this version of tapflow: {e}",
            path.display()
        ))
    })
}

/// Sends one request to the control socket at `path` and returns the reply's content.
pub fn request(path: &Path, command: &str, body: &str) -> Result<String, EngineError> {
    let err = |what: String| EngineError::Control(format!("{}: {what}", path.display()));
    let mut s = UnixStream::connect(path).map_err(|e| match e.kind() {
        std::io::ErrorKind::NotFound | std::io::ErrorKind::ConnectionRefused => {
            err("no tapflow capture is serving this control socket".into())
        }
        std::io::ErrorKind::PermissionDenied => {
            err("permission denied (only root and the capture's user may use it)".into())
        }
        _ => err(format!("cannot connect: {e}")),
    })?;
    s.set_read_timeout(Some(Duration::from_secs(30)))
        .map_err(|e| err(e.to_string()))?;
    s.write_all(format!("{command}\n{body}").as_bytes())
        .and_then(|()| s.shutdown(std::net::Shutdown::Write))
        .map_err(|e| err(format!("cannot send the request: {e}")))?;
    let mut reply = String::new();
    s.read_to_string(&mut reply)
        .map_err(|e| err(format!("cannot read the reply: {e}")))?;
    match reply.split_once('\n') {
        Some(("ok", rest)) => Ok(rest.to_string()),
        Some((line, _)) if line.starts_with("error: ") => {
            Err(EngineError::Control(line["error: ".len()..].to_string()))
        }
        _ => Err(err("the reply is not from a tapflow capture".into())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rules::LiveRules;
    use crate::traffic::SharedStats;

    #[test]
    fn requests_round_trip() {
        let dir = std::env::temp_dir().join(format!("tapflow-control-{}", std::process::id()));
        let path = dir.join("t.sock");
        let live = LiveRules::new(None, 1, 64, None).unwrap();
        let probe = Arc::new(ProbeState::new(
            vec![(Arc::default(), Arc::<SharedStats>::default())],
            Some(live),
        ));
        let server = ControlServer::start(&path, probe).unwrap();
        let mode = std::fs::metadata(&path).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600);
        assert!(ControlServer::start(&path, Arc::new(ProbeState::new(vec![], None))).is_err());
        let text = request(&path, "stats", "").unwrap();
        assert!(
            text.starts_with("{\"start_time_seconds\":") && text.contains("\"received\":0,"),
            "{text}"
        );
        let st = stats(&path).unwrap();
        assert_eq!(st.workers.len(), 1);
        assert!(st.start_time_seconds > 1e9);
        let l = request(&path, "rules list", "").unwrap();
        assert_eq!(
            l,
            "{\"active\":false,\"precision\":\"exact\",\"instructions\":0,\"rules\":[]}\n"
        );
        let l = request(&path, "rules add", "web proto tcp dport 80 both\n").unwrap();
        assert!(
            l.ends_with(
                "\"rules\":[{\"name\":\"web\",\"rule\":\"web proto tcp dport 80 both\",\
                 \"packets\":0,\"bytes\":0}]}\n"
            ),
            "{l}"
        );
        let l = rules(&path, "rules list", "").unwrap();
        assert!(l.active && l.precision == tapflow_wire::rule_bpf::Precision::Exact);
        assert_eq!(
            l.rules[0].rule,
            Rule::parse("web proto tcp dport 80 both").unwrap()
        );
        let e = request(&path, "rules add", "web2 proto tcp dport 80-1\n").unwrap_err();
        assert_eq!(e.to_string(), "port range '80-1' is backwards");
        let l = rules(&path, "rules load", "a proto udp\nb proto icmp\n").unwrap();
        assert_eq!(l.rules.len(), 2);
        assert_eq!(
            (l.rules[1].rule.name.as_str(), l.rules[1].packets),
            ("b", 0)
        );
        let l = rules(&path, "rules del a", "").unwrap();
        assert_eq!(l.rules.len(), 1);
        assert!(request(&path, "rules del a", "").is_err());
        assert!(request(&path, "reboot", "").is_err());
        drop(server);
        assert!(!path.exists());
        let e = request(&path, "stats", "").unwrap_err().to_string();
        assert!(e.contains("no tapflow capture is serving"), "{e}");
        let _ = std::fs::remove_dir(&dir);
    }
}
