#!/usr/bin/env bash
# Runs every test: formatting, lints, unit and property tests, real-kernel tests in private
# network namespaces, and the real-tool oracles (tshark, capinfos). Needs root for the kernel tests.
set -euo pipefail
cd "$(dirname "$0")/.."

export CARGO_TERM_COLOR=never
cargo fmt --all -- --check
# The console's charting library (uPlot, from npm): served by `tapflow console`, needed by its tests.
scripts/fetch-console-assets.sh
cargo clippy --workspace --all-targets --locked -- -D warnings
# The release build must compile too: the demo and the benchmarks run it.
cargo build --release --locked -p tapflow
log=$(mktemp)
trap 'rm -f "$log"' EXIT
# Tests of the corpus of real captures (../shared/corpus or $TAPFLOW_CORPUS) print one line,
# "skipped: TEST: no corpus at PATH (set TAPFLOW_CORPUS)", where there is none.
cargo test --workspace --locked -- --test-threads=2 2>&1 | tee "$log"
# One closing line for the whole run (cargo's last lines are its empty doc-test runs); a test
# that skipped passed in cargo's count and is counted here as skipped.
awk '/^test result:/ { p += $4; f += $6; i += $8 }
     /^skipped: / { k++ }
     END { printf "tests: %d passed, %d failed, %d ignored, %d skipped\n", p - k, f, i, k }' "$log"
