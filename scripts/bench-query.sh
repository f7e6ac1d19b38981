#!/usr/bin/env bash
# The query benchmark (bench/query.py): a busy hour of NetFlow v9 sent by nfreplay to nfcapd and
# to `tapflow collect --store`, then the same questions of nfdump, `tapflow query` and DuckDB over
# tapflow's Parquet files, answers checked to agree, medians of RUNS wall times.
#
#   scripts/bench-query.sh [--pcap PCAP] [--work DIR] [--flows N] [--runs 3]
#
# Needs nfdump, a release build, and DuckDB from scripts/install-deps.sh's Python environment.
set -euo pipefail
cd "$(dirname "$0")/.."
py=${TAPFLOW_PYENV:-/var/cache/tapflow/pyenv}/bin/python3
[ -x "$py" ] || py=python3
exec "$py" bench/query.py "$@"
