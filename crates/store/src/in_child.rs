//! Tests that must fail as an assertion, not by killing the test binary: a stack overflow or an
//! abort ends the child process this runs them in, and the parent test reports it.

use std::process::Command;

/// Set in the child's environment.
const CHILD: &str = "TAPFLOW_STORE_TEST_CHILD";

/// Runs `f` on a thread with a `stack`-byte stack in a child process (this test binary again,
/// running only `test`, the test's path below the crate) and asserts the child ended well.
pub fn survives(test: &str, stack: usize, f: fn()) {
    if std::env::var_os(CHILD).is_some() {
        let ran = std::thread::Builder::new()
            .stack_size(stack)
            .spawn(f)
            .expect("spawn a thread")
            .join();
        if ran.is_err() {
            std::process::exit(101);
        }
        return;
    }
    let exe = std::env::current_exe().expect("the test binary's path");
    let out = Command::new(exe)
        .args([test, "--exact", "--test-threads=1", "--nocapture"])
        .env(CHILD, "1")
        .output()
        .expect("run the test binary again");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{test} in a child process ended with {}: {stdout}{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        stdout.contains("1 passed"),
        "{test} did not run in the child: {stdout}"
    );
}
