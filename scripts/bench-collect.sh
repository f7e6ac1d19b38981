#!/usr/bin/env bash
# Flow ingest benchmark: `tapflow collect --store` against `nfcapd -y` on the same softflowd
# stream (CPU per million records stored, bytes per flow), then the highest rate one tapflow
# worker keeps with no loss, into CSV and into the store. Builds the release binary first;
# root needed (namespaces).
#
#   sudo scripts/bench-collect.sh                     # 3 runs, rates 0.5,1,1.5,2,2.5,3 M records/s
#   sudo scripts/bench-collect.sh --runs 5 --rates 1,2,4
#
# Arguments go to bench/collect.py (see its --help).
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build --release -p tapflow
exec python3 bench/collect.py --tapflow "${CARGO_TARGET_DIR:-target}/release/tapflow" "$@"
