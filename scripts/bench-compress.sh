#!/usr/bin/env bash
# Compressed header recording, side by side with its anchor, in one run:
#
#   1. offline: 64-byte headers of a big trace into zstd-compressed pcapng,
#        tapflow capture -r TRACE -s 64 -w out.pcapng.zst          (one process)
#      against
#        editcap -s 64 TRACE out.pcapng && zstd -3 out.pcapng       (two steps, as one does now)
#      and the uncompressed `tapflow capture -s 64 -w out.pcapng` for reference. Best wall time of
#      RUNS, each command pinned to one CPU, the commands taking turns; CPU = user + sys of the
#      best run (GNU time); bytes stored per packet.
#   2. live: `tapflow gen` sends PACKETS 60-byte frames as fast as it can on a veth pair (its
#      namespace on CPU 0), `tapflow capture -s 64` records them in the other namespace (CPU 1)
#      to out.pcapng and to out.pcapng.zst in turn; the capture's CPU (user + sys, all threads,
#      set-up included) per million packets recorded.
#
#   sudo scripts/bench-compress.sh [TRACE] [RUNS=3] [PACKETS=2000000]
#
# TRACE defaults to target/bench-data/big.pcap in the repository, built by scripts/make-trace.sh if missing.
# Needs root (namespaces), editcap, capinfos, zstd, taskset and GNU time; builds the release
# binary. Prints markdown tables.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(dirname "$here")
trace=${1:-$repo/target/bench-data/big.pcap}
runs=${2:-3}
packets=${3:-2000000}

for t in editcap capinfos zstd taskset /usr/bin/time; do
    command -v "$t" >/dev/null || { echo "bench-compress: $t is missing" >&2; exit 2; }
done
[[ -f $trace ]] || "$here/make-trace.sh" "$trace"
(cd "$repo" && cargo build --release --locked -q -p tapflow)
tapflow=${CARGO_TARGET_DIR:-$repo/target}/release/tapflow

work=$(mktemp -d "${TMPDIR:-/var/tmp}/bench-compress.XXXXXX")
name=tfz$$
# shellcheck source=scripts/netns.sh
source "$here/netns.sh"
trap 'tf_cleanup "$name" 2>/dev/null; rm -rf "$work"' EXIT

n=$(capinfos -c -M "$trace" | awk -F: '/Number of packets/ {gsub(/ /, "", $2); print $2}')
cat "$trace" >/dev/null # into the page cache

# timed LABEL CMD...: one run on CPU 1; appends "LABEL wall cpu" to $work/times.
timed() {
    local label=$1
    shift
    rm -f "$work"/out.*
    /usr/bin/time -f "%e %U %S" -o "$work/t" taskset -c 1 bash -c "$*" >/dev/null 2>&1
    read -r wall user sys <"$work/t"
    echo "$label $wall $(echo "$user + $sys" | bc)" >>"$work/times"
}

declare -A cmd=(
    [tapflow-zst]="'$tapflow' capture -q -r '$trace' -s 64 -w '$work/out.pcapng.zst' && sync '$work/out.pcapng.zst'"
    [editcap+zstd]="editcap -s 64 '$trace' '$work/out.pcapng' && zstd -q -3 --rm '$work/out.pcapng' && sync '$work/out.pcapng.zst'"
    [tapflow-plain]="'$tapflow' capture -q -r '$trace' -s 64 -w '$work/out.pcapng' && sync '$work/out.pcapng'"
)
order=(tapflow-zst editcap+zstd tapflow-plain)
: >"$work/times"
for ((r = 0; r < runs; r++)); do
    for t in "${order[@]}"; do timed "$t" "${cmd[$t]}"; done
done
# Sizes and counts from one more run of each.
declare -A bytes
for t in "${order[@]}"; do
    rm -f "$work"/out.*
    bash -c "${cmd[$t]}" >/dev/null 2>&1
    f=$(ls "$work"/out.*)
    got=$(capinfos -c -M "$f" | awk -F: '/Number of packets/ {gsub(/ /, "", $2); print $2}')
    [[ $got == "$n" ]] || { echo "bench-compress: $t wrote $got packets of $n" >&2; exit 1; }
    bytes[$t]=$(stat -c %s "$f")
done

echo "Offline: $trace, $n packets, -s 64, best of $runs (wall), CPU of that run, CPU 1"
echo
echo "| command | wall s | CPU s | bytes/packet | wall vs editcap+zstd | CPU vs editcap+zstd |"
echo "|---|---|---|---|---|---|"
best() { awk -v t="$1" '$1 == t && (b == "" || $2 < b) { b = $2; c = $3 } END { print b, c }' "$work/times"; }
read -r ew ec < <(best editcap+zstd)
for t in "${order[@]}"; do
    read -r w c < <(best "$t")
    awk -v t="$t" -v w="$w" -v c="$c" -v b="${bytes[$t]}" -v n="$n" -v ew="$ew" -v ec="$ec" \
        'BEGIN { printf "| %s | %.3f | %.3f | %.1f | %.2f | %.2f |\n", t, w, c, b / n, w / ew, c / ec }'
done

# Live.
tf_pair "$name"
ns_a=${name}a ns_b=${name}b va=${name}0 vb=${name}1
echo
echo "Live: $packets frames of 60 bytes, tapflow gen on CPU 0, capture -s 64 on CPU 1"
echo
echo "| output | recorded | CPU s | CPU s per Mpkt | vs pcapng |"
echo "|---|---|---|---|---|"
plain_cpu=""
for out in out.pcapng out.pcapng.zst; do
    rm -f "$work"/out.* "$work/cap.json"
    ip netns exec "$ns_b" taskset -c 1 /usr/bin/time -f "%U %S" -o "$work/t" \
        "$tapflow" capture -i "$vb" -s 64 -q -w "$work/$out" --control none \
        --summary-json "$work/cap.json" 2>"$work/cap.err" &
    pid=$!
    for _ in $(seq 100); do grep -q "listening on" "$work/cap.err" && break; sleep 0.1; done
    ip netns exec "$ns_a" taskset -c 0 "$tapflow" gen -i "$va" -q --count "$packets" --size 60 --flows 64
    sleep 2
    pkill -INT -P "$pid" 2>/dev/null || true
    kill -INT "$pid" 2>/dev/null || true
    wait "$pid" || true
    read -r user sys <"$work/t"
    rec=$(capinfos -c -M "$work/$out" | awk -F: '/Number of packets/ {gsub(/ /, "", $2); print $2}')
    cpu=$(echo "$user + $sys" | bc)
    [[ -n $plain_cpu ]] || plain_cpu=$cpu
    awk -v o="$out" -v r="$rec" -v c="$cpu" -v p="$plain_cpu" \
        'BEGIN { printf "| %s | %d | %.3f | %.3f | %.2f |\n", o, r, c, c / (r / 1e6), c / p }'
done
