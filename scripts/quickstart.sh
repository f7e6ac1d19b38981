#!/usr/bin/env bash
# Installs what tapflow needs on a fresh Debian machine, builds it, and runs the demo: a veth
# pair in a private network namespace, generated traffic, captured to pcapng, with the
# collection ratio. Run as root.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
cargo build --release --locked -p tapflow
exec scripts/demo.sh
