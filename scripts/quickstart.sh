#!/usr/bin/env bash
# Installs what tapflow needs on a fresh Debian machine, builds it, and runs the demo: the whole
# path in private network namespaces (generated and replayed traffic → capture and flow meter →
# IPFIX → collector → Parquet store → query → console). Run as root.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
# The console's charting library is built into the binary: fetch it first.
scripts/fetch-console-assets.sh
cargo build --release --locked -p tapflow
exec scripts/demo.sh
