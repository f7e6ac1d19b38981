#!/usr/bin/env bash
# Capture CPU per packet, AF_XDP against AF_PACKET, in the same run on the same veth traffic:
# tapflow --source xdp ("tapflow-xdp"; with --pass, "tapflow-xdp-pass"), tapflow's default
# AF_PACKET source ("tapflow") and
# bench/floor.c (the least an AF_PACKET capture to pcapng costs), each in turn behind the same
# `tapflow gen` burst. bench/live.py does the work (namespaces, pinning, rusage, /proc/stat);
# this picks the tools and sizes. Root only; needs a release build.
#
#   sudo scripts/bench-xdp.sh [--repeat N] [--packets N] [--sizes 64,512,1518] [live.py options]
#
# Prints a markdown table: collection ratio and capture-process CPU per million packets for
# each tool, tapflow-xdp/tapflow and tapflow-xdp/floor for the capture process, and the same
# two ratios for the system-wide CPU (all cores from /proc/stat, generator and softirq
# included, where AF_XDP's copy into the UMEM is done).
set -euo pipefail
cd "$(dirname "$0")/.."
exec python3 bench/live.py --tools tapflow,tapflow-xdp,tapflow-xdp-pass,floor --no-gen-baseline \
    --sizes 64,512,1518 --repeat 3 --packets 1000000 --img "${TMPDIR:-/tmp}/tapflow-bench-xdp" "$@"
