//! `tapflow import`: flow records `tapflow flows` wrote as JSON lines or CSV, into the store.

use std::io::BufReader;
use std::process::ExitCode;
use std::time::SystemTime;

use tapflow_store::import::{ImportError, import};
use tapflow_store::open::{self, Location};

use crate::Failure;
use crate::cli::ImportArgs;

/// Imports every file, then closes the store and prints what it kept.
pub fn run(a: &ImportArgs) -> Result<ExitCode, Failure> {
    let options = open::Options {
        parquet: a.store.options(),
        ..open::Options::default()
    };
    let mut store = Location::parse(&a.store.store)
        .and_then(|at| open::store(&at, &options))
        .map_err(|e| Failure::Usage(e.to_string()))?;
    let now_ns = SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64);
    let mut failure = None;
    for path in &a.files {
        let name = path.display().to_string();
        let done = if name == "-" {
            import(
                &mut std::io::stdin().lock(),
                "stdin",
                now_ns,
                store.as_mut(),
            )
        } else {
            match std::fs::File::open(path) {
                Ok(f) => import(
                    &mut BufReader::with_capacity(1 << 20, f),
                    &name,
                    now_ns,
                    store.as_mut(),
                ),
                Err(e) => Err(ImportError::Input(format!("{name}: {e}"))),
            }
        };
        match done {
            Ok(n) => eprintln!("tapflow: {name}: {} lines, {} flows", n.lines, n.flows),
            Err(e) => {
                // A bad line or file is the user's; a store that cannot write is a failure.
                failure = Some(match e {
                    ImportError::Input(m) => Failure::Usage(m),
                    ImportError::Store(e) => Failure::Runtime(e.to_string()),
                });
                break;
            }
        }
    }
    let report = store.close().map_err(|e| Failure::Runtime(e.to_string()))?;
    eprintln!(
        "tapflow: store {}: {} flows received, {} stored, {} dropped",
        a.store.store.display(),
        report.received,
        report.stored,
        report.dropped
    );
    match failure {
        Some(f) => Err(f),
        None if report.dropped > 0 => Err(Failure::Runtime(format!(
            "{} flows dropped by the store",
            report.dropped
        ))),
        None => Ok(ExitCode::SUCCESS),
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_import_reads_the_columns_flows_writes() {
        let written = tapflow_engine::sink::flow::text::CSV_HEADER;
        let read = tapflow_store::import::CSV_HEADER;
        assert!(
            written
                .strip_prefix(read)
                .is_some_and(|rest| rest.is_empty() || rest.starts_with(',')),
            "{written} does not start with {read}"
        );
    }
}
