//! HTTP Basic authentication against a credentials file of `user:hash` lines (`--http-auth`).
//!
//! A hash is an argon2 PHC string (`$argon2id$…`, as `argon2` and `tapflow console --hash`
//! write) or a bcrypt one (`$2b$…`, as `htpasswd -B` writes). Checking a password costs tens of
//! milliseconds by design, so a header that passed is remembered (a small set, cleared when
//! full) and a later request with it costs a lookup on the async side, never a thread.
//!
//! A header not remembered is checked on one thread of its own ([`Gate`]), behind at most
//! [`WAITING`] others (one more is answered 503): guesses take at most one core and never a
//! query's thread. Its source must not have failed too often ([`crate::throttle`]). An unknown
//! user costs what a wrong password does: the password is checked against a hash of the same
//! kind and cost as the first user's, so the time of the answer does not tell which users
//! exist.

use std::collections::HashSet;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::path::Path;
use std::sync::mpsc::{SyncSender, TrySendError};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Instant;

use axum::extract::{ConnectInfo, Request, State};
use axum::http::{HeaderValue, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

use crate::ConsoleError;
use crate::throttle::Throttle;

/// Headers remembered as verified before the set is cleared.
const REMEMBERED: usize = 256;

/// Headers waiting for the checking thread; one more is answered 503 at once.
pub const WAITING: usize = 16;

/// The users allowed in, and the headers already verified.
#[derive(Debug)]
pub struct Credentials {
    users: Vec<(String, String)>,
    /// A hash of a random password, of the same kind and cost as the first user's: what an
    /// unknown user's password is checked against.
    dummy: String,
    verified: Mutex<HashSet<String>>,
}

impl Credentials {
    /// Reads `path`. Every non-empty line not starting with `#` must be `user:hash` with a hash
    /// this module can check; the error names the line.
    pub fn load(path: &Path) -> Result<Credentials, ConsoleError> {
        let text = std::fs::read_to_string(path).map_err(|source| ConsoleError::Read {
            what: "credentials file",
            path: path.to_owned(),
            source,
        })?;
        let mut users = Vec::new();
        for (i, line) in text.lines().enumerate() {
            let line = line.trim();
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            let bad =
                |why: &str| ConsoleError::Config(format!("{}:{}: {why}", path.display(), i + 1));
            let (user, hash) = line
                .split_once(':')
                .ok_or_else(|| bad("expected user:hash"))?;
            if user.is_empty() {
                return Err(bad("empty user name"));
            }
            if !(hash.starts_with("$argon2") || is_bcrypt(hash)) {
                return Err(bad(
                    "the hash is neither argon2 ($argon2id$…) nor bcrypt ($2b$…)",
                ));
            }
            check_hash(hash).map_err(|why| bad(&format!("the hash cannot be read: {why}")))?;
            users.push((user.to_owned(), hash.to_owned()));
        }
        let Some((_, first)) = users.first() else {
            return Err(ConsoleError::Config(format!(
                "{}: no user:hash line",
                path.display()
            )));
        };
        let dummy = dummy_like(first)?;
        Ok(Credentials {
            users,
            dummy,
            verified: Mutex::new(HashSet::new()),
        })
    }

    /// Whether the `Authorization` header value was verified before. A lookup: no hashing.
    pub fn remembered(&self, authorization: &str) -> bool {
        self.verified
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .contains(authorization)
    }

    /// Whether the `Authorization` header value names a user and the right password. Costs a
    /// hash unless the header was verified before; an unknown user costs one too.
    pub fn allows(&self, authorization: &str) -> bool {
        if self.remembered(authorization) {
            return true;
        }
        let Some((user, password)) = basic(authorization) else {
            return false;
        };
        let ok = match self.users.iter().find(|(u, _)| *u == user) {
            Some((_, hash)) => verify(&password, hash),
            None => {
                verify(&password, &self.dummy);
                false
            }
        };
        if ok {
            let mut seen = self.verified.lock().unwrap_or_else(PoisonError::into_inner);
            if seen.len() >= REMEMBERED {
                seen.clear();
            }
            seen.insert(authorization.to_owned());
        }
        ok
    }
}

fn is_bcrypt(hash: &str) -> bool {
    ["$2a$", "$2b$", "$2y$"].iter().any(|p| hash.starts_with(p))
}

/// Why `hash` cannot be checked against, if it cannot.
fn check_hash(hash: &str) -> Result<(), String> {
    if is_bcrypt(hash) {
        return hash
            .parse::<bcrypt::HashParts>()
            .map(|_| ())
            .map_err(|e| e.to_string());
    }
    argon2_of(hash).map(|_| ())
}

/// The argon2 instance (algorithm, version, cost) a PHC string was made with.
fn argon2_of(hash: &str) -> Result<argon2::Argon2<'static>, String> {
    use argon2::password_hash::PasswordHash;
    let parsed = PasswordHash::new(hash).map_err(|e| e.to_string())?;
    let algorithm = argon2::Algorithm::try_from(parsed.algorithm).map_err(|e| e.to_string())?;
    let version = match parsed.version {
        Some(v) => argon2::Version::try_from(v).map_err(|e| e.to_string())?,
        None => argon2::Version::default(),
    };
    let params = argon2::Params::try_from(&parsed).map_err(|e| e.to_string())?;
    Ok(argon2::Argon2::new(algorithm, version, params))
}

/// A hash of a random password made like `hash`: same kind, same cost.
fn dummy_like(hash: &str) -> Result<String, ConsoleError> {
    let mut random = [0u8; 16];
    getrandom(&mut random)?;
    let password: String = random.iter().map(|b| format!("{b:02x}")).collect();
    if is_bcrypt(hash) {
        let cost = hash
            .parse::<bcrypt::HashParts>()
            .map(|p| p.get_cost())
            .unwrap_or(bcrypt::DEFAULT_COST);
        return bcrypt::hash(&password, cost)
            .map_err(|e| ConsoleError::Config(format!("bcrypt: {e}")));
    }
    let argon2 = argon2_of(hash).map_err(|e| ConsoleError::Config(format!("argon2: {e}")))?;
    hash_with(&argon2, &password)
}

fn verify(password: &str, hash: &str) -> bool {
    if is_bcrypt(hash) {
        return bcrypt::verify(password, hash).unwrap_or(false);
    }
    use argon2::password_hash::{PasswordHash, PasswordVerifier};
    match PasswordHash::new(hash) {
        Ok(parsed) => argon2::Argon2::default()
            .verify_password(password.as_bytes(), &parsed)
            .is_ok(),
        Err(_) => false,
    }
}

/// An argon2id hash of `password` with a random salt, for a credentials file.
pub fn hash(password: &str) -> Result<String, ConsoleError> {
    hash_with(&argon2::Argon2::default(), password)
}

fn hash_with(argon2: &argon2::Argon2<'_>, password: &str) -> Result<String, ConsoleError> {
    use argon2::password_hash::{PasswordHasher, SaltString};
    let mut salt = [0u8; 16];
    getrandom(&mut salt)?;
    let salt =
        SaltString::encode_b64(&salt).map_err(|e| ConsoleError::Config(format!("salt: {e}")))?;
    argon2
        .hash_password(password.as_bytes(), &salt)
        .map(|h| h.to_string())
        .map_err(|e| ConsoleError::Config(format!("argon2: {e}")))
}

fn getrandom(buf: &mut [u8]) -> Result<(), ConsoleError> {
    use std::io::Read;
    let path = Path::new("/dev/urandom");
    std::fs::File::open(path)
        .and_then(|mut f| f.read_exact(buf))
        .map_err(|source| ConsoleError::Read {
            what: "random bytes from",
            path: path.to_owned(),
            source,
        })
}

/// The user and password of a `Basic` authorization header; the scheme's name is matched
/// whatever its case (RFC 9110, 11.1).
fn basic(value: &str) -> Option<(String, String)> {
    let (scheme, encoded) = value.trim_start().split_once(' ')?;
    if !scheme.eq_ignore_ascii_case("basic") {
        return None;
    }
    use base64::Engine;
    let decoded = base64::engine::general_purpose::STANDARD
        .decode(encoded.trim())
        .ok()?;
    let text = String::from_utf8(decoded).ok()?;
    let (user, password) = text.split_once(':')?;
    Some((user.to_owned(), password.to_owned()))
}

/// A header and where to send whether it is allowed.
type Job = (String, tokio::sync::oneshot::Sender<bool>);

/// What the middleware holds: the credentials, the failures per source, and the thread that
/// checks passwords.
#[derive(Debug)]
pub struct Gate {
    credentials: Arc<Credentials>,
    throttle: Throttle,
    jobs: SyncSender<Job>,
}

impl Gate {
    /// Starts the checking thread; it ends when the gate is dropped.
    pub fn start(credentials: Credentials) -> Result<Gate, ConsoleError> {
        let credentials = Arc::new(credentials);
        let (jobs, waiting) = std::sync::mpsc::sync_channel::<Job>(WAITING);
        let checker = Arc::clone(&credentials);
        std::thread::Builder::new()
            .name("tapflow-auth".into())
            .spawn(move || {
                for (authorization, answer) in waiting {
                    let _ = answer.send(checker.allows(&authorization));
                }
            })
            .map_err(|e| {
                ConsoleError::Config(format!("cannot start the password-checking thread: {e}"))
            })?;
        Ok(Gate {
            credentials,
            throttle: Throttle::default(),
            jobs,
        })
    }

    /// Whether `authorization`, from `source`, lets the request in.
    async fn admits(&self, authorization: &str, source: IpAddr) -> Admission {
        if self.credentials.remembered(authorization) {
            return Admission::Allowed;
        }
        if basic(authorization).is_none() {
            return Admission::Denied;
        }
        if let Err(wait) = self.throttle.attempt(source, Instant::now()) {
            return Admission::Throttled(wait.as_secs().max(1));
        }
        let (answer, allowed) = tokio::sync::oneshot::channel();
        match self.jobs.try_send((authorization.to_owned(), answer)) {
            Ok(()) => {}
            Err(TrySendError::Full(_)) => return Admission::Busy,
            Err(TrySendError::Disconnected(_)) => return Admission::Denied,
        }
        if allowed.await.unwrap_or(false) {
            self.throttle.succeeded(source);
            Admission::Allowed
        } else {
            Admission::Denied
        }
    }
}

/// What the gate says of a request.
enum Admission {
    Allowed,
    /// No credentials, or wrong ones: 401.
    Denied,
    /// Too many failures from the source: 429, try again in this many seconds.
    Throttled(u64),
    /// Too many headers waiting to be checked: 503.
    Busy,
}

/// The middleware: every request needs a header the credentials allow, when there are any.
pub async fn require(
    State(gate): State<Option<Arc<Gate>>>,
    request: Request,
    next: Next,
) -> Response {
    let Some(gate) = gate else {
        return next.run(request).await;
    };
    let source = request
        .extensions()
        .get::<ConnectInfo<SocketAddr>>()
        .map_or(IpAddr::V4(Ipv4Addr::UNSPECIFIED), |c| c.0.ip());
    let admission = match request
        .headers()
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
    {
        Some(h) => gate.admits(h, source).await,
        None => Admission::Denied,
    };
    match admission {
        Admission::Allowed => next.run(request).await,
        Admission::Denied => {
            let mut response =
                (StatusCode::UNAUTHORIZED, "authentication required\n").into_response();
            response.headers_mut().insert(
                header::WWW_AUTHENTICATE,
                HeaderValue::from_static("Basic realm=\"tapflow\", charset=\"UTF-8\""),
            );
            response
        }
        Admission::Throttled(seconds) => retry_after(
            StatusCode::TOO_MANY_REQUESTS,
            format!("too many failed logins from {source}; try again in {seconds} s\n"),
            seconds,
        ),
        Admission::Busy => retry_after(
            StatusCode::SERVICE_UNAVAILABLE,
            "too many logins waiting to be checked; try again in a second\n".into(),
            1,
        ),
    }
}

fn retry_after(status: StatusCode, body: String, seconds: u64) -> Response {
    let mut response = (status, body).into_response();
    response
        .headers_mut()
        .insert(header::RETRY_AFTER, HeaderValue::from(seconds));
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    fn file(text: &str) -> tempfile_path::TempPath {
        tempfile_path::TempPath::with(text)
    }

    mod tempfile_path {
        /// A file removed on drop.
        pub struct TempPath(pub std::path::PathBuf);
        impl TempPath {
            pub fn with(text: &str) -> TempPath {
                static N: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
                let n = N.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                let p =
                    std::env::temp_dir().join(format!("tapflow-auth-{}-{n}", std::process::id()));
                std::fs::write(&p, text).unwrap();
                TempPath(p)
            }
        }
        impl Drop for TempPath {
            fn drop(&mut self) {
                let _ = std::fs::remove_file(&self.0);
            }
        }
    }

    fn header(user: &str, password: &str) -> String {
        use base64::Engine;
        let raw = format!("{user}:{password}");
        format!(
            "Basic {}",
            base64::engine::general_purpose::STANDARD.encode(raw)
        )
    }

    #[test]
    fn argon2_and_bcrypt_hashes_let_the_right_password_in_only() {
        let argon = hash("s3cret").unwrap();
        let bcrypt = bcrypt::hash("other", 4).unwrap();
        let f = file(&format!("# operators\nalice:{argon}\nbob:{bcrypt}\n"));
        let c = Credentials::load(&f.0).unwrap();
        assert!(c.allows(&header("alice", "s3cret")));
        assert!(c.allows(&header("alice", "s3cret")), "remembered");
        assert!(!c.allows(&header("alice", "wrong")));
        assert!(c.allows(&header("bob", "other")));
        assert!(!c.allows(&header("bob", "s3cret")));
        assert!(!c.allows(&header("carol", "s3cret")));
        assert!(!c.allows("Bearer x"));
        assert!(!c.allows("Basic !!!"));
    }

    #[test]
    fn the_scheme_is_matched_whatever_its_case() {
        let f = file(&format!("alice:{}\n", bcrypt::hash("s3cret", 4).unwrap()));
        let c = Credentials::load(&f.0).unwrap();
        for scheme in ["basic", "BASIC", "bAsIc"] {
            let h = header("alice", "s3cret").replacen("Basic", scheme, 1);
            assert!(c.allows(&h), "{h}");
        }
        assert!(!c.allows(&header("alice", "s3cret").replacen("Basic", "Basicx", 1)));
    }

    #[test]
    fn an_unknown_user_is_checked_against_a_hash_like_the_first_user_s() {
        let f = file(&format!("bob:{}\n", bcrypt::hash("x", 5).unwrap()));
        let c = Credentials::load(&f.0).unwrap();
        assert!(c.dummy.starts_with("$2b$05$"), "{}", c.dummy);
        let argon = hash("s3cret").unwrap();
        let f = file(&format!("alice:{argon}\n"));
        let c = Credentials::load(&f.0).unwrap();
        let params = |h: &str| h.split('$').take(4).collect::<Vec<_>>().join("$");
        assert_eq!(params(&c.dummy), params(&argon));
        assert_ne!(c.dummy, argon);
        assert!(!c.allows(&header("mallory", "s3cret")));
    }

    #[test]
    fn a_bad_line_is_named() {
        let f = file("alice:plaintext\n");
        let e = Credentials::load(&f.0).unwrap_err().to_string();
        assert!(
            e.ends_with(":1: the hash is neither argon2 ($argon2id$…) nor bcrypt ($2b$…)"),
            "{e}"
        );
        let f = file("\nalice:$argon2id$v=19$m=oops\n");
        let e = Credentials::load(&f.0).unwrap_err().to_string();
        assert!(e.contains(":2: the hash cannot be read: "), "{e}");
        let f = file("# nothing\n");
        assert!(
            Credentials::load(&f.0)
                .unwrap_err()
                .to_string()
                .ends_with("no user:hash line")
        );
    }
}
