//! `tapflow console`: the web console over a flow store.

use std::io::Read;
use std::process::ExitCode;
use std::sync::Arc;
use std::sync::atomic::AtomicBool;

use tapflow_console::{ConsoleConfig, TlsFiles};
use tapflow_store::open::{self, Location};
use tapflow_store::query::QueryError;

use crate::Failure;
use crate::cli::ConsoleArgs;

/// Threads a query may scan with.
const SCAN_THREADS: usize = 2;

pub fn run(args: ConsoleArgs, stop: &Arc<AtomicBool>) -> Result<ExitCode, Failure> {
    tapflow_sys::heap::keep_freed_memory(crate::query_cmd::SCAN_BUFFERS);
    if args.hash_password {
        let mut password = String::new();
        std::io::stdin()
            .read_to_string(&mut password)
            .map_err(|e| Failure::Runtime(format!("reading the password: {e}")))?;
        let password = password.trim_end_matches(['\n', '\r']);
        if password.is_empty() {
            return Err(Failure::Usage(
                "--hash-password: empty password on stdin".into(),
            ));
        }
        let hash =
            tapflow_console::auth::hash(password).map_err(|e| Failure::Runtime(e.to_string()))?;
        println!("{hash}");
        return Ok(ExitCode::SUCCESS);
    }
    let Some(store) = args.store else {
        return Err(Failure::Usage("--store DIR is required".into()));
    };
    let at = Location::parse(&store).map_err(|e| Failure::Usage(format!("--store {e}")))?;
    if let Location::Parquet(dir) = &at
        && !dir.is_dir()
    {
        return Err(Failure::Usage(format!(
            "--store {}: not a directory",
            dir.display()
        )));
    }
    let engine: Arc<_> = open::engine(&at, SCAN_THREADS, true)
        .map_err(|e| match e {
            QueryError::Parse(m) => Failure::Usage(format!("--store {m}")),
            e => Failure::Runtime(format!("--store {e}")),
        })?
        .into();
    let config = ConsoleConfig {
        listen: args.http,
        auth: args.http_auth,
        tls: args
            .tls_cert
            .zip(args.tls_key)
            .map(|(cert, key)| TlsFiles { cert, key }),
        hosts: args.http_host,
        probes: args.probe,
        send_timeout: std::time::Duration::from_secs(args.send_timeout),
    };
    tapflow_console::check(&config).map_err(|e| Failure::Usage(e.to_string()))?;
    let scheme = if config.tls.is_some() {
        "https"
    } else {
        "http"
    };
    eprintln!(
        "tapflow console: {scheme}://{} over {}",
        config.listen,
        store.display()
    );
    tapflow_console::serve(config, engine, Arc::clone(stop))
        .map_err(|e| Failure::Runtime(e.to_string()))?;
    Ok(ExitCode::SUCCESS)
}
