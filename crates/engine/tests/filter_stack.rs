//! A `-f` expression deep enough to overflow an ordinary thread's stack inside libpcap's
//! compiler (100,000 alternatives: a 2 MiB stack, a thread's default, overflows within
//! milliseconds, before the optimizer starts) neither aborts the process nor holds up a stop.
//!
//! Its own test binary: the compiler thread left behind runs until the process exits.

use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use tapflow_engine::EngineError;
use tapflow_engine::rules::compile_expr;
use tapflow_engine::stop::Stop;
use tapflow_wire::LinkType;

#[test]
fn a_deep_filter_compiles_without_overflowing_and_stops_promptly() {
    let expr: Vec<String> = (0..100_000).map(|i| format!("len = {i}")).collect();
    let expr = expr.join(" or ");
    let stop = Stop::new().expect("stop");
    let flag = stop.flag().clone();
    // The stack overflow, if any, happens in the first milliseconds; the compile then runs for
    // minutes. Raising the stop after 3 s checks both: still alive, and returning at once.
    let raiser = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_secs(3));
        flag.store(true, Ordering::SeqCst);
        Instant::now()
    });
    let result = compile_expr(&expr, LinkType::Ethernet, 96, &stop);
    let returned = Instant::now();
    let raised = raiser.join().expect("raiser");
    match result {
        Err(EngineError::Stopped(_)) => {
            let late = returned.saturating_duration_since(raised);
            assert!(
                late < Duration::from_secs(2),
                "returned {late:?} after the stop"
            );
        }
        Ok(prog) => assert!(
            !prog.is_empty(),
            "an empty program for 100,000 alternatives"
        ),
        Err(e) => panic!("unexpected error: {e}"),
    }
}
