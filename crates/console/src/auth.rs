//! HTTP Basic authentication against a credentials file of `user:hash` lines (`--http-auth`).
//!
//! A hash is an argon2 PHC string (`$argon2id$…`, as `argon2` and `tapflow console --hash`
//! write) or a bcrypt one (`$2b$…`, as `htpasswd -B` writes). Checking a password costs tens of
//! milliseconds by design, so a header that passed is remembered (a small set, cleared when
//! full) and later requests with it cost a lookup.

use std::collections::HashSet;
use std::path::Path;
use std::sync::{Arc, Mutex};

use axum::extract::{Request, State};
use axum::http::{HeaderValue, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

use crate::ConsoleError;

/// Headers remembered as verified before the set is cleared.
const REMEMBERED: usize = 256;

/// The users allowed in, and the headers already verified.
#[derive(Debug)]
pub struct Credentials {
    users: Vec<(String, String)>,
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
            users.push((user.to_owned(), hash.to_owned()));
        }
        if users.is_empty() {
            return Err(ConsoleError::Config(format!(
                "{}: no user:hash line",
                path.display()
            )));
        }
        Ok(Credentials {
            users,
            verified: Mutex::new(HashSet::new()),
        })
    }

    /// Whether the `Authorization` header value names a user and the right password.
    pub fn allows(&self, authorization: &str) -> bool {
        if let Ok(seen) = self.verified.lock()
            && seen.contains(authorization)
        {
            return true;
        }
        let Some((user, password)) = basic(authorization) else {
            return false;
        };
        let ok = self
            .users
            .iter()
            .any(|(u, hash)| *u == user && verify(&password, hash));
        if ok && let Ok(mut seen) = self.verified.lock() {
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
    use argon2::password_hash::{PasswordHasher, SaltString};
    let mut salt = [0u8; 16];
    getrandom(&mut salt)?;
    let salt =
        SaltString::encode_b64(&salt).map_err(|e| ConsoleError::Config(format!("salt: {e}")))?;
    argon2::Argon2::default()
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

/// The user and password of a `Basic` authorization header.
fn basic(value: &str) -> Option<(String, String)> {
    let encoded = value.strip_prefix("Basic ")?.trim();
    use base64::Engine;
    let decoded = base64::engine::general_purpose::STANDARD
        .decode(encoded)
        .ok()?;
    let text = String::from_utf8(decoded).ok()?;
    let (user, password) = text.split_once(':')?;
    Some((user.to_owned(), password.to_owned()))
}

/// The middleware: every request needs a header the credentials allow, when there are any.
pub async fn require(
    State(credentials): State<Option<Arc<Credentials>>>,
    request: Request,
    next: Next,
) -> Response {
    let Some(credentials) = credentials else {
        return next.run(request).await;
    };
    let header = request
        .headers()
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned);
    let allowed = match header {
        Some(h) => tokio::task::spawn_blocking(move || credentials.allows(&h))
            .await
            .unwrap_or(false),
        None => false,
    };
    if allowed {
        next.run(request).await
    } else {
        let mut response = (StatusCode::UNAUTHORIZED, "authentication required\n").into_response();
        response.headers_mut().insert(
            header::WWW_AUTHENTICATE,
            HeaderValue::from_static("Basic realm=\"tapflow\", charset=\"UTF-8\""),
        );
        response
    }
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
    fn a_bad_line_is_named() {
        let f = file("alice:plaintext\n");
        let e = Credentials::load(&f.0).unwrap_err().to_string();
        assert!(
            e.ends_with(":1: the hash is neither argon2 ($argon2id$…) nor bcrypt ($2b$…)"),
            "{e}"
        );
        let f = file("# nothing\n");
        assert!(
            Credentials::load(&f.0)
                .unwrap_err()
                .to_string()
                .ends_with("no user:hash line")
        );
    }
}
