//! `tapflow generate`: the man pages and shell completions, made from the command-line
//! definitions so that they never disagree with `--help`.

use std::io::Write;
use std::process::ExitCode;

use clap::CommandFactory;

use crate::Failure;
use crate::cli::{Cli, GenerateArgs, GenerateWhat};

/// Runs `tapflow generate`.
pub fn run(a: GenerateArgs) -> Result<ExitCode, Failure> {
    match a.what {
        GenerateWhat::Man { dir } => {
            clap_mangen::generate_to(Cli::command(), &dir).map_err(|e| {
                Failure::Runtime(format!("cannot write man pages in {}: {e}", dir.display()))
            })?;
        }
        GenerateWhat::Completions { shell } => {
            let mut script = Vec::new();
            clap_complete::generate(shell, &mut Cli::command(), "tapflow", &mut script);
            std::io::stdout()
                .write_all(&script)
                .map_err(|e| Failure::Runtime(format!("cannot write the completions: {e}")))?;
        }
    }
    Ok(ExitCode::SUCCESS)
}
