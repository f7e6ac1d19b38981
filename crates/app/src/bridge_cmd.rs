//! `tapflow bridge`: checks the two interfaces, then runs `capture` on the bridge between
//! them; the rest of the run (sinks, rules, statistics, summary) is capture's.

use std::process::ExitCode;
use std::sync::Arc;

use tapflow_engine::pipeline::Input;
use tapflow_engine::source::bridge::BridgeInput;
use tapflow_engine::stop::Stop;

use crate::Failure;
use crate::cli::BridgeArgs;

/// Runs `tapflow bridge`.
pub fn run(a: BridgeArgs, stop: &Arc<Stop>) -> Result<ExitCode, Failure> {
    let c = &a.capture;
    let bad = |m: &str| Err(Failure::Usage(format!("bridge: {m}")));
    let Some(first) = c.interface.clone() else {
        return bad("give the two interfaces with -i and -o (not -r or -D)");
    };
    if c.read.is_some() || c.list_interfaces {
        return bad("-r and -D do not apply: the bridge runs between -i and -o");
    }
    if c.pass {
        return bad("--pass does not apply: the bridge forwards every frame it takes");
    }
    if c.threads != 1 {
        return bad("the bridge runs one worker per direction: drop --threads");
    }
    if !c.xdp_frames.is_power_of_two() || !(128..=1 << 20).contains(&c.xdp_frames) {
        return bad(&format!(
            "--xdp-frames {} is not a power of two from 128 to 1048576",
            c.xdp_frames
        ));
    }
    let input = Input::Bridge(BridgeInput {
        ifnames: [first, a.out_interface.clone()],
        frames: c.xdp_frames,
    });
    crate::capture_cmd::run_input(a.capture, stop, false, Some(input))
}
