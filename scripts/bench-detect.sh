#!/usr/bin/env bash
# Flood detection: the time from an attack's first packet to its alert, on the packet path
# (a veth probe) and the flow path (the probe's flow meter exporting IPFIX to `tapflow detect
# -l`), and what detection costs in CPU beside the same run without it.
#
#   scripts/bench-detect.sh [TRACE.pcap] [RUNS=5]      (PART=latency or PART=cpu: one half only)
#
# Latency: two namespaces joined by a veth pair (scripts/netns.sh). In one, `tapflow detect -i`
# (packets) or `tapflow flows -i ... --export ipfix://` into `tapflow detect -l` (flows) watches
# its end; in the other, tcpreplay sends a real capture of an SNMP amplification
# (stopddos-amp-udp-snmp-src161, 4,373 packets, looped) at 40,000 packets/s, over the default
# thresholds (20,000 packets/s at one destination). The clock starts just before tcpreplay starts
# and stops when the alert line reaches the script: tcpreplay's start-up is counted against us.
#
# CPU: `tapflow capture -r TRACE` with standard output on /dev/null (the pipeline reads and parses
# every packet and keeps nothing) against the same with --detect, and `tapflow flows -r TRACE
# --json /dev/null` against the same with --detect; user+sys CPU seconds of each, the best of RUNS,
# over the trace as it is and over the same packets at 100,000 and at 1,000,000 packets/s.
# TRACE defaults to a 2M-packet trace made by scripts/make-trace.sh (real corpus traffic).
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=scripts/netns.sh
source "$here/netns.sh"
bin=${TAPFLOW:-$here/../target/release/tapflow}
corpus=${TAPFLOW_CORPUS:-$here/../../shared/corpus}
trace=${1:-}
runs=${2:-5}
attack=$corpus/stopddos-amp-udp-snmp-src161.pcapng
[[ -x $bin ]] || { echo "bench-detect: build first: cargo build --release" >&2; exit 1; }
[[ -f $attack ]] || { echo "bench-detect: no corpus at $corpus (set TAPFLOW_CORPUS)" >&2; exit 1; }
work=$(mktemp -d)
name=tfd$$
pids=()
cleanup() {
    for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
    wait 2>/dev/null || true
    tf_cleanup "$name"
    rm -rf "$work"
}
trap cleanup EXIT
tf_pair "$name"
a="${name}a" b="${name}b" va="${name}0" vb="${name}1"

# Runs "$@" in namespace b, its stdout into $1, stderr into $1.err.
inb() {
    local out=$1
    shift
    ip netns exec "$b" "$@" >"$out" 2>"$out.err" &
    pids+=($!)
}

wait_for() { # FILE TEXT
    for _ in $(seq 1500); do grep -q "$2" "$1" 2>/dev/null && return 0; sleep 0.01; done
    echo "bench-detect: no '$2' in $1" >&2
    cat "$1" "$1.err" >&2 2>/dev/null
    return 1
}

latency() { # MODE RUN
    local mode=$1 out=$work/$1-$2
    if [[ $mode == probe ]]; then
        inb "$out" "$bin" detect --json -i "$vb" --duration 30
        wait_for "$out.err" "listening on"
    else
        inb "$out" "$bin" detect --json -l ipfix://127.0.0.1:4739 --duration 30
        wait_for "$out.err" "collecting ipfix"
        inb "$out.flows" "$bin" flows -q -i "$vb" --export ipfix://127.0.0.1:4739 \
            --active-timeout 1 --idle-timeout 1 --export-rate max --duration 30
        wait_for "$out.flows.err" "listening on"
    fi
    local t0 t1
    t0=$(date +%s.%N)
    ip netns exec "$a" tcpreplay -q -K --pps 40000 --loop 40 -i "$va" "$attack" >/dev/null 2>&1 &
    pids+=($!)
    wait_for "$out" '"event":"start"'
    t1=$(date +%s.%N)
    awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.2f\n", b - a }'
    for p in "${pids[@]}"; do kill -INT "$p" 2>/dev/null || true; done
    wait 2>/dev/null || true
    pids=()
}

part=${PART:-all}
if [[ $part != cpu ]]; then
    echo "time from the first attack packet to the alert (s), $runs runs each:"
    for mode in probe flows; do
        printf '  %s:' "$mode"
        for r in $(seq "$runs"); do printf ' %s' "$(latency "$mode" "$r")"; done
        echo
    done
fi
[[ $part == latency ]] && exit 0

if [[ -z $trace ]]; then
    trace=$work/trace.pcap
    TAPFLOW_CORPUS=$corpus "$here/make-trace.sh" "$trace" 2000000 >/dev/null
fi
# The same packets with their times rewritten to 100,000 packets/s (a busy link, where the cost
# is per packet) and to 1,000,000 packets/s (a flood: over 200,000 packets/s a worker counts a
# sample); at the trace's own times (a few packets a second) the cost is per second.
dense=$work/dense.pcap flood=$work/flood.pcap
respace() { # IN OUT NS-BETWEEN-PACKETS
    python3 - "$@" <<'PY'
import struct, sys
with open(sys.argv[1], 'rb') as f, open(sys.argv[2], 'wb') as o:
    h = f.read(24)
    nanos = struct.unpack('<I', h[:4])[0] == 0xa1b23c4d
    o.write(h)
    i, gap = 0, int(sys.argv[3])
    while len(r := f.read(16)) == 16:
        incl, orig = struct.unpack('<II', r[8:])
        t = i * gap
        frac = t % 1_000_000_000 if nanos else t % 1_000_000_000 // 1000
        o.write(struct.pack('<IIII', 1_700_000_000 + t // 1_000_000_000, frac, incl, orig))
        o.write(f.read(incl))
        i += 1
PY
}
respace "$trace" "$dense" 10000
respace "$trace" "$flood" 1000
cpu() { # best user+sys seconds of RUNS runs of "$@" (getrusage: microseconds)
    python3 - "$runs" "$@" <<'PY'
import resource, subprocess, sys
runs, cmd = int(sys.argv[1]), sys.argv[2:]
best = None
for _ in range(runs):
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    t = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    best = t if best is None else min(best, t)
print(f"{best:.4f}")
PY
}
packets=$(capinfos -c -M "$trace" | awk '/Number of packets/ { print $NF }')
for t in "$flood" "$dense" "$trace"; do
    echo "CPU seconds over $packets packets of $(basename "$t") (best of $runs):"
    c0=$(cpu "$bin" capture -q -r "$t")
    c1=$(cpu "$bin" capture -q -r "$t" --detect)
    f0=$(cpu "$bin" flows -q -r "$t" --json /dev/null)
    f1=$(cpu "$bin" flows -q -r "$t" --json /dev/null --detect)
    awk -v c0="$c0" -v c1="$c1" -v f0="$f0" -v f1="$f1" -v n="$packets" 'BEGIN {
        printf "  capture: %.4f, with --detect %.4f: detection %.3f s per 10M packets\n", c0, c1, (c1 - c0) * 1e7 / n
        printf "  flows:   %.4f, with --detect %.4f: detection %.3f s per 10M packets\n", f0, f1, (f1 - f0) * 1e7 / n
    }'
done
