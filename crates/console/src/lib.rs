//! tapflow's web console: a single page and the JSON API it reads, over the flow store.
//!
//! The page gets every number through the API (`api.rs`, documented in `docs/console.md`); the
//! API answers through the store's [`QueryEngine`], the same one `tapflow query` uses. Served
//! by axum on a small tokio runtime; queries run on blocking threads behind a gate (`gate.rs`:
//! a few at once, a short queue, 503 past it), so a long scan never holds up the server. What the server guards against (slow clients, password guessing,
//! other sites' pages) is in `conn.rs`, `auth.rs` and `browser.rs`.
#![forbid(unsafe_code)]

pub mod api;
pub mod auth;
pub mod browser;
pub mod conn;
pub mod gate;
pub mod page;
pub mod probes;
pub mod throttle;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use tapflow_store::query::QueryEngine;

/// Why the console could not start or stopped.
#[derive(Debug, thiserror::Error)]
pub enum ConsoleError {
    /// The configuration cannot work; the message names the flag.
    #[error("{0}")]
    Config(String),
    /// A file the console needs could not be read.
    #[error("{what} {path}: {source}")]
    Read {
        /// What the file is ("credentials file", "TLS certificate").
        what: &'static str,
        /// The file.
        path: PathBuf,
        /// The underlying error.
        source: std::io::Error,
    },
    /// Listening or serving failed.
    #[error("console on {addr}: {source}")]
    Serve {
        /// The address.
        addr: SocketAddr,
        /// The underlying error.
        source: std::io::Error,
    },
}

/// A certificate chain and its private key, PEM files.
#[derive(Debug, Clone)]
pub struct TlsFiles {
    /// The certificate chain (`--tls-cert`).
    pub cert: PathBuf,
    /// The private key (`--tls-key`).
    pub key: PathBuf,
}

/// How the console is served.
#[derive(Debug, Clone)]
pub struct ConsoleConfig {
    /// Where it listens (`--http`).
    pub listen: SocketAddr,
    /// The credentials file (`--http-auth`): `user:hash` lines, argon2 or bcrypt hashes.
    pub auth: Option<PathBuf>,
    /// TLS, if given.
    pub tls: Option<TlsFiles>,
    /// Names the console is reached by besides its address (`--http-host`).
    pub hosts: Vec<String>,
    /// tapflow probes whose `/metrics` the health view shows (`--probe HOST:PORT`).
    pub probes: Vec<String>,
    /// How long an answer may wait for its client to take any of it before the connection is
    /// closed (`--send-timeout`; [`SEND_TIMEOUT`] by default).
    pub send_timeout: std::time::Duration,
}

/// The default [`ConsoleConfig::send_timeout`].
pub const SEND_TIMEOUT: std::time::Duration = conn::Limits::CONSOLE.reply;

/// Checks what can be checked before anything is opened: a non-loopback address needs
/// credentials, the credentials and TLS files must be readable.
pub fn check(config: &ConsoleConfig) -> Result<(), ConsoleError> {
    if !config.listen.ip().is_loopback() && config.auth.is_none() {
        return Err(ConsoleError::Config(format!(
            "--http {}: a console on a non-loopback address needs --http-auth FILE",
            config.listen
        )));
    }
    if let Some(path) = &config.auth {
        auth::Credentials::load(path)?;
    }
    for name in &config.hosts {
        let fits = |c: char| c.is_ascii_alphanumeric() || c == '-' || c == '.';
        if name.is_empty() || !name.chars().all(fits) {
            return Err(ConsoleError::Config(format!(
                "--http-host {name:?}: not a host name (letters, digits, '-' and '.', no port)"
            )));
        }
    }
    if let Some(tls) = &config.tls {
        for (what, path) in [("TLS certificate", &tls.cert), ("TLS key", &tls.key)] {
            std::fs::metadata(path).map_err(|source| ConsoleError::Read {
                what,
                path: path.clone(),
                source,
            })?;
        }
    }
    Ok(())
}

/// Serves the console until `stop` is raised. Blocks.
pub fn serve(
    config: ConsoleConfig,
    engine: Arc<dyn QueryEngine + Send + Sync>,
    stop: Arc<AtomicBool>,
) -> Result<(), ConsoleError> {
    check(&config)?;
    let gate = match &config.auth {
        Some(path) => Some(Arc::new(auth::Gate::start(auth::Credentials::load(path)?)?)),
        None => None,
    };
    let site = Arc::new(browser::Site::new(
        config.listen,
        &config.hosts,
        config.tls.is_some(),
    ));
    let state = api::State::new(engine, config.probes.clone());
    // Outermost first: the headers go on every answer, refusals included; a request from
    // elsewhere is refused before any password is checked.
    let app = api::router(state)
        .merge(page::router())
        .layer(axum::middleware::from_fn_with_state(gate, auth::require))
        .layer(axum::middleware::from_fn_with_state(
            Arc::clone(&site),
            browser::guard,
        ))
        .layer(axum::middleware::from_fn_with_state(site, browser::headers))
        .into_make_service_with_connect_info::<SocketAddr>();
    let limits = conn::Limits {
        reply: config.send_timeout,
        ..conn::Limits::CONSOLE
    };
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .max_blocking_threads(4)
        .thread_name("tapflow-http")
        .enable_all()
        .build()
        .map_err(|source| ConsoleError::Serve {
            addr: config.listen,
            source,
        })?;
    let addr = config.listen;
    runtime.block_on(async move {
        let handle = axum_server::Handle::new();
        let watcher = handle.clone();
        tokio::spawn(async move {
            while !stop.load(Ordering::Relaxed) {
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            watcher.graceful_shutdown(Some(Duration::from_secs(2)));
        });
        let served = match &config.tls {
            Some(tls) => {
                let _ = rustls::crypto::ring::default_provider().install_default();
                let rustls =
                    axum_server::tls_rustls::RustlsConfig::from_pem_file(&tls.cert, &tls.key)
                        .await
                        .map_err(|source| ConsoleError::Read {
                            what: "TLS certificate or key",
                            path: tls.cert.clone(),
                            source,
                        })?;
                // HTTP/1.1 only: the deadlines are HTTP/1's.
                let mut only_http1 = (*rustls.get_inner()).clone();
                only_http1.alpn_protocols = vec![b"http/1.1".to_vec()];
                rustls.reload_from_config(Arc::new(only_http1));
                let tls = axum_server::tls_rustls::RustlsAcceptor::new(rustls)
                    .handshake_timeout(limits.handshake);
                let server = axum_server::bind(addr)
                    .acceptor(conn::Capped::new(tls, limits))
                    .handle(handle);
                conn::apply(server, limits).serve(app).await
            }
            None => {
                let plain = axum_server::accept::DefaultAcceptor::new();
                let server = axum_server::bind(addr)
                    .acceptor(conn::Capped::new(plain, limits))
                    .handle(handle);
                conn::apply(server, limits).serve(app).await
            }
        };
        served.map_err(|source| ConsoleError::Serve { addr, source })
    })
}
