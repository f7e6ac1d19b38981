//! `tapflow`: the command line. It parses, builds an engine, runs it, and reports.
#![forbid(unsafe_code)]

mod anonymize_cmd;
mod bridge_cmd;
mod capture_cmd;
mod check_cmd;
mod cli;
mod collect_cmd;
mod config;
mod console_cmd;
mod detect_cmd;
mod doctor_cmd;
mod gen_cmd;
mod generate_cmd;
mod import_cmd;
mod plan_cmd;
mod privileges;
mod query_cmd;
mod recv_cmd;
mod report;
mod rules_cmd;
mod stats_cmd;
mod svg;
mod units;

use std::process::ExitCode;
use std::sync::Arc;

use clap::Parser;
use tapflow_engine::stop::Stop;

use cli::{Cli, Command};

/// How a command failed: bad input from the user, or a failure while running.
#[derive(Debug)]
pub enum Failure {
    /// The request cannot be carried out as asked (exit code 2).
    Usage(String),
    /// Something went wrong while running (exit code 1).
    Runtime(String),
}

impl Failure {
    /// Classifies an engine error: what the user gave (a bad file, filter, name or size) is a
    /// usage failure; what went wrong while running is a runtime failure.
    pub fn from_engine(e: tapflow_engine::EngineError) -> Failure {
        use tapflow_engine::EngineError as E;
        use tapflow_sys::SysError as S;
        let usage = match &e {
            E::File { .. } | E::Damaged { .. } | E::Config(_) | E::Unsupported(_) => true,
            E::StalePart(_) => true,
            // A bad URL, address, path or message size: what the user gave.
            E::Export(_) => true,
            E::Sys(S::NoSuchInterface { .. } | S::Filter { .. }) => true,
            E::Sys(S::File { error, .. }) => matches!(
                error.kind(),
                std::io::ErrorKind::NotFound | std::io::ErrorKind::AlreadyExists
            ),
            // EINVAL: the kernel (or our own check before it) refused a value the user chose.
            E::Sys(s) => {
                s.errno()
                    .map(|e| std::io::Error::from_raw_os_error(e).kind())
                    == Some(std::io::ErrorKind::InvalidInput)
            }
            E::Write { .. } | E::Control(_) | E::Stopped(_) => false,
        };
        if usage {
            Failure::Usage(e.to_string())
        } else {
            Failure::Runtime(e.to_string())
        }
    }
}

/// `Ok(())` if `lo <= value <= hi`, else the usage failure `NAME VALUE is out of range: LO to HI`.
pub fn in_range<T: PartialOrd + std::fmt::Display>(
    name: &str,
    value: T,
    lo: T,
    hi: T,
) -> Result<(), Failure> {
    if lo <= value && value <= hi {
        Ok(())
    } else {
        Err(Failure::Usage(format!(
            "{name} {value} is out of range: {lo} to {hi}"
        )))
    }
}

/// clap's message on one line: its first paragraph, without the `error:` prefix (a list of
/// missing arguments is joined onto the line that announces it).
fn one_line(text: &str) -> String {
    let para: Vec<&str> = text
        .lines()
        .map(str::trim)
        .take_while(|l| !l.is_empty())
        .collect();
    para.join(" ").trim_start_matches("error: ").to_string()
}

/// The help that fits a usage error: the subcommand's (`tapflow capture --help`), or the
/// top level's when no subcommand was named.
fn help_hint(args: impl Iterator<Item = String>) -> String {
    use clap::CommandFactory;
    let cmd = Cli::command();
    let mut path = vec!["tapflow".to_string()];
    let mut at = &cmd;
    for arg in args {
        match at.find_subcommand(&arg) {
            Some(sub) => {
                path.push(sub.get_name().to_string());
                at = sub;
            }
            None if arg.starts_with('-') => {}
            None => break,
        }
    }
    format!("{} --help", path.join(" "))
}

fn main() -> ExitCode {
    tapflow_store::install_panic_hook();
    let args = match config::expand(std::env::args_os().collect()) {
        Ok(a) => a,
        Err(msg) => {
            eprintln!("tapflow: error: {msg}");
            eprintln!("tapflow: try '{}'", help_hint(std::env::args().skip(1)));
            return ExitCode::from(2);
        }
    };
    let cli = match Cli::try_parse_from(args) {
        Ok(c) => c,
        Err(e) => {
            use clap::error::ErrorKind;
            if matches!(e.kind(), ErrorKind::DisplayHelp | ErrorKind::DisplayVersion)
                || matches!(
                    e.kind(),
                    ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand
                )
            {
                let _ = e.print();
                return ExitCode::SUCCESS;
            }
            if std::env::args().nth(1).as_deref() == Some("check") {
                // A monitoring plugin's usage error is UNKNOWN (3), on stdout.
                println!("TAPFLOW UNKNOWN - {}", one_line(&e.render().to_string()));
                return ExitCode::from(check_cmd::UNKNOWN);
            }
            eprintln!("tapflow: error: {}", one_line(&e.render().to_string()));
            eprintln!("tapflow: try '{}'", help_hint(std::env::args().skip(1)));
            return ExitCode::from(2);
        }
    };
    let stop = match stop_on_signals() {
        Ok(s) => Arc::new(s),
        Err(e) => {
            eprintln!("tapflow: error: cannot install the signal handler: {e}");
            return ExitCode::from(1);
        }
    };
    let result = match cli.command {
        Command::Capture(args) => capture_cmd::run(args, &stop, false),
        Command::Flows(args) => capture_cmd::run(args, &stop, true),
        Command::Recv(args) => recv_cmd::run(args, &stop),
        Command::Collect(args) => collect_cmd::run(args, &stop),
        Command::Gen(args) => gen_cmd::run(args, stop.flag()),
        Command::Rules(args) => rules_cmd::run(args),
        Command::Stats(args) => stats_cmd::run(args, stop.flag()),
        Command::Check(args) => return check_cmd::run(&args),
        Command::Bridge(args) => bridge_cmd::run(args, &stop),
        Command::Doctor(args) => doctor_cmd::run(args),
        Command::Plan(args) => plan_cmd::run(&args),
        Command::Console(args) => console_cmd::run(args, stop.flag()),
        Command::Query(args) => query_cmd::run(&args),
        Command::Import(args) => import_cmd::run(&args),
        Command::Detect(args) => detect_cmd::run(args, &stop),
        Command::Anonymize(args) => anonymize_cmd::run(&args, &stop),
        Command::Generate(args) => generate_cmd::run(args),
    };
    match result {
        Ok(code) => code,
        Err(Failure::Usage(msg)) => {
            eprintln!("tapflow: error: {msg}");
            ExitCode::from(2)
        }
        Err(Failure::Runtime(msg)) => {
            eprintln!("tapflow: error: {msg}");
            ExitCode::from(1)
        }
    }
}

/// The enrichment tables of the files `a` names, if any, reloaded by a thread of their own when
/// a file changes or SIGHUP arrives (docs/enrichment.md). A file that cannot be loaded now is a
/// usage error naming it and its line.
pub(crate) fn enrich_source(
    a: &cli::EnrichArgs,
) -> Result<Option<Arc<tapflow_engine::enrich::Source>>, Failure> {
    let cfg = tapflow_engine::enrich::EnrichConfig {
        geoip: a.geoip.clone(),
        asn: a.asn.clone(),
        networks: a.networks.clone(),
        interfaces: a.interfaces.clone(),
    };
    if !cfg.is_enabled() {
        return Ok(None);
    }
    let source =
        tapflow_engine::enrich::Source::open(cfg).map_err(|e| Failure::Usage(e.to_string()))?;
    let hup = Arc::new(std::sync::atomic::AtomicBool::new(false));
    signal_hook::flag::register(signal_hook::consts::SIGHUP, Arc::clone(&hup))
        .map_err(|e| Failure::Runtime(format!("cannot catch SIGHUP: {e}")))?;
    source
        .watch(hup, std::time::Duration::from_secs(1))
        .map_err(|e| Failure::Runtime(format!("cannot start the enrichment reloader: {e}")))?;
    eprintln!(
        "tapflow: enrichment: {}",
        source.current().0.describe().join("; ")
    );
    Ok(Some(source))
}

/// A stop that SIGINT and SIGTERM raise: the handler sets the flag, then wakes the pollers.
fn stop_on_signals() -> std::io::Result<Stop> {
    let stop = Stop::new()?;
    for sig in [signal_hook::consts::SIGINT, signal_hook::consts::SIGTERM] {
        signal_hook::flag::register(sig, Arc::clone(stop.flag()))?;
        signal_hook::low_level::pipe::register(sig, stop.waker()?)?;
    }
    Ok(stop)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn usage_errors_point_at_the_subcommands_help() {
        let hint = |args: &[&str]| help_hint(args.iter().map(|s| s.to_string()));
        assert_eq!(hint(&["capture", "-i"]), "tapflow capture --help");
        assert_eq!(hint(&["rules", "add"]), "tapflow rules add --help");
        assert_eq!(hint(&["--bogus"]), "tapflow --help");
        assert_eq!(hint(&["nosuch", "capture"]), "tapflow --help");
    }

    #[test]
    fn clap_errors_become_one_line() {
        let e = Cli::try_parse_from(["tapflow", "capture", "-w", "x"]).unwrap_err();
        let line = one_line(&e.render().to_string());
        assert!(
            line.starts_with("the following required arguments were not provided:"),
            "{line}"
        );
        assert!(
            line.contains("--interface") && line.contains("--read"),
            "{line}"
        );
        assert!(!line.contains('\n'));
        let e = Cli::try_parse_from(["tapflow", "capture", "-i", "lo", "--block-size", "lots"])
            .unwrap_err();
        let line = one_line(&e.render().to_string());
        assert!(
            line.starts_with("invalid value 'lots' for '--block-size"),
            "{line}"
        );
    }
}
