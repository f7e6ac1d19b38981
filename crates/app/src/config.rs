//! `--config FILE`: a TOML file whose keys are exactly the long flags of the subcommand it is
//! given to, with the values written as on the command line:
//!
//! ```toml
//! write = "/var/lib/tapflow/eth0-%Y%m%d-%H%M%S.pcapng"
//! rotate-seconds = "1h"
//! snaplen = 128
//! quiet = true
//! forward = ["10.0.0.7:5000", "10.0.0.8:5000"]
//! ```
//!
//! The file becomes flags in front of the command line's own, except those the command line
//! gives itself: a flag always wins over its key. Every subcommand takes it, new ones too, since
//! the keys are read from the subcommand's definition.

use std::ffi::OsString;
use std::path::Path;

use clap::CommandFactory;
use clap::parser::ValueSource;

use crate::cli::Cli;

/// The flag naming the file.
const FLAG: &str = "--config";

/// `args` (the program name first) with the keys of the `--config` file, if one is given,
/// turned into flags after the subcommand's name. An error names the file and the key.
pub fn expand(args: Vec<OsString>) -> Result<Vec<OsString>, String> {
    let Some(path) = config_path(&args) else {
        return Ok(args);
    };
    let text = std::fs::read_to_string(&path)
        .map_err(|e| format!("cannot read the config file {}: {e}", path.display()))?;
    let table: toml::Table = text
        .parse()
        .map_err(|e: toml::de::Error| format!("{}: {}", path.display(), one_line(&e)))?;
    // Which subcommand, and which flags the command line gives (a lenient parse: what the
    // file supplies may be missing).
    let mut cmd = Cli::command().ignore_errors(true);
    // What even a lenient parse refuses (--help, --version) is the real parse's to answer.
    let Ok(matches) = cmd.try_get_matches_from_mut(&args) else {
        return Ok(args);
    };
    let mut sub = &cmd;
    let mut m = &matches;
    let mut at = 1;
    while let Some((name, next)) = m.subcommand() {
        let Some(s) = sub.find_subcommand(name) else {
            break;
        };
        at = args
            .iter()
            .enumerate()
            .skip(at)
            .find(|(_, a)| a.to_str() == Some(name))
            .map_or(at, |(i, _)| i + 1);
        sub = s;
        m = next;
    }
    if std::ptr::eq(sub, &cmd) {
        return Err(format!(
            "{FLAG} goes with a subcommand (tapflow capture {FLAG} FILE)"
        ));
    }
    let mut flags = Vec::new();
    for (key, value) in &table {
        let arg = sub
            .get_arguments()
            .find(|a| a.get_long() == Some(key.as_str()) && key != "config" && key != "help")
            .ok_or_else(|| {
                format!(
                    "{}: unknown key '{key}': the keys are the long flags of 'tapflow {}' \
                     (see its --help)",
                    path.display(),
                    sub.get_name()
                )
            })?;
        if m.value_source(arg.get_id().as_str()) == Some(ValueSource::CommandLine) {
            continue;
        }
        let takes_value = arg.get_num_args().is_none_or(|n| n.takes_values());
        let bad = |why: &str| format!("{}: key '{key}': {why}", path.display());
        let items: Vec<&toml::Value> = match value {
            toml::Value::Array(items) => items.iter().collect(),
            v => vec![v],
        };
        for item in items {
            let text = match item {
                toml::Value::Boolean(true) if !takes_value => {
                    flags.push(OsString::from(format!("--{key}")));
                    continue;
                }
                toml::Value::Boolean(false) if !takes_value => continue,
                _ if !takes_value => return Err(bad("is a switch: true or false")),
                toml::Value::String(s) => s.clone(),
                toml::Value::Integer(n) => n.to_string(),
                toml::Value::Float(x) => x.to_string(),
                toml::Value::Boolean(b) => b.to_string(),
                _ => return Err(bad("takes a string, a number or a list of them")),
            };
            flags.push(OsString::from(format!("--{key}={text}")));
        }
    }
    let mut out = args[..at].to_vec();
    out.extend(flags);
    out.extend_from_slice(&args[at..]);
    Ok(out)
}

/// The file `--config FILE` or `--config=FILE` names, if any.
fn config_path(args: &[OsString]) -> Option<std::path::PathBuf> {
    let mut it = args.iter().skip(1);
    while let Some(a) = it.next() {
        let s = a.to_string_lossy();
        if s == "--" {
            break;
        }
        if s == FLAG {
            return it.next().map(|p| Path::new(p).to_path_buf());
        }
        if let Some(p) = s.strip_prefix("--config=") {
            return Some(p.into());
        }
    }
    None
}

/// A TOML error on one line.
fn one_line(e: &toml::de::Error) -> String {
    let msg = e.message().trim().to_string();
    match e.span() {
        Some(span) => format!("{msg} (at byte {})", span.start),
        None => msg,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(file: &str, args: &[&str]) -> Result<Vec<String>, String> {
        // A directory of its own per call: the tests of this binary run as threads of one
        // process, so a name from the process id would be shared and removed under another.
        let dir = tempfile::tempdir().unwrap();
        let f = dir.path().join("config.toml");
        std::fs::write(&f, file).unwrap();
        let mut all: Vec<OsString> = vec!["tapflow".into()];
        all.extend(args.iter().map(OsString::from));
        all.extend([OsString::from("--config"), f.clone().into()]);
        expand(all).map(|v| {
            v.into_iter()
                .map(|s| s.to_string_lossy().into_owned())
                .filter(|s| !s.ends_with(".toml"))
                .collect()
        })
    }

    #[test]
    fn keys_become_flags_that_the_command_line_overrides() {
        let got = run(
            "write = \"x.pcap\"\nsnaplen = 64\nquiet = true\nno-promiscuous-mode = false\n\
             forward = [\"h:1\", \"h:2\"]\n",
            &["capture", "-i", "lo", "-s", "0"],
        )
        .unwrap();
        assert_eq!(
            got,
            [
                "tapflow",
                "capture",
                "--forward=h:1",
                "--forward=h:2",
                "--quiet",
                "--write=x.pcap",
                "-i",
                "lo",
                "-s",
                "0",
                "--config",
            ]
        );
    }

    #[test]
    fn unknown_keys_and_bad_values_are_named() {
        let e = run("snaplength = 64\n", &["capture", "-i", "lo"]).unwrap_err();
        assert!(
            e.contains("unknown key 'snaplength'") && e.contains("tapflow capture"),
            "{e}"
        );
        let e = run("quiet = \"yes\"\n", &["capture", "-i", "lo"]).unwrap_err();
        assert!(e.contains("key 'quiet': is a switch"), "{e}");
        let e = run("snaplen = \n", &["capture", "-i", "lo"]).unwrap_err();
        assert!(e.contains(".toml: ") && !e.contains('\n'), "{e}");
        let e = run("listen = 5000\n", &[]).unwrap_err();
        assert!(e.contains("goes with a subcommand"), "{e}");
        // A recv whose required flags all come from the file.
        let got = run("listen = 5000\nwrite = \"r.pcapng\"\n", &["recv"]).unwrap();
        assert_eq!(
            got,
            [
                "tapflow",
                "recv",
                "--listen=5000",
                "--write=r.pcapng",
                "--config"
            ]
        );
    }
}
