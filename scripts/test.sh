#!/usr/bin/env bash
# Runs every test: formatting, lints, unit and property tests, real-kernel tests in private
# network namespaces, and the real-tool oracles (tshark, capinfos). Needs root for the kernel tests.
set -euo pipefail
cd "$(dirname "$0")/.."

export CARGO_TERM_COLOR=never
cargo fmt --all -- --check
cargo clippy --workspace --all-targets --locked -- -D warnings
# The integration tests drive the release binary, as users do.
cargo build --release --locked -p tapflow
cargo test --workspace --locked -- --test-threads=2
