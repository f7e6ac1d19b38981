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
#
#   sudo scripts/bench-xdp.sh --bridge [ROUNDS] [SECONDS]
#
# instead measures `tapflow bridge` against the kernel's bridge (`ip link add type bridge`) in
# the same namespace layout and run, in turn: host 1 <-veth-> middle <-veth-> host 2, an iperf3
# TCP transfer of SECONDS (default 5) from host 1 to host 2 and 50 pings, ROUNDS times (default
# 3); prints the medians and the ratios. The hosts' veths send frames as a wire carries them
# (checksums filled in, no segmentation offload) in both, as the bridge needs.
set -euo pipefail
cd "$(dirname "$0")/.."

bridge_bench() {
    rounds=${1:-3} secs=${2:-5} tf=${TAPFLOW:-target/release/tapflow}
    [[ -x $tf ]] || { echo "bench-xdp: $tf missing: cargo build --release" >&2; exit 1; }
    # Global: the EXIT trap reads them after the function returned.
    t=brgb$$ tmp=$(mktemp -d) bpid=
    h1=$t-h1 mid=$t-mid h2=$t-h2
    cleanup() {
        [[ -n ${bpid:-} ]] && kill "$bpid" 2>/dev/null && wait "$bpid" 2>/dev/null
        for n in "$h1" "$mid" "$h2"; do ip netns del "$n" 2>/dev/null || true; done
        rm -rf "$tmp"
    }
    trap cleanup EXIT
    for n in "$h1" "$mid" "$h2"; do ip netns add "$n"; ip -n "$n" link set lo up; done
    ip -n "$h1" link add "${t}h" type veth peer name "${t}a" netns "$mid"
    ip -n "$h2" link add "${t}k" type veth peer name "${t}b" netns "$mid"
    ip -n "$h1" addr add 10.89.0.1/24 dev "${t}h"
    ip -n "$h2" addr add 10.89.0.2/24 dev "${t}k"
    for x in "$h1 ${t}h" "$h2 ${t}k" "$mid ${t}a" "$mid ${t}b"; do
        set -- $x; ip -n "$1" link set "$2" up
    done
    for x in "$h1 ${t}h" "$h2 ${t}k"; do
        set -- $x; ip netns exec "$1" ethtool -K "$2" tx off tso off gso off >/dev/null
    done
    # Gbit/s of an iperf3 transfer, then the mean ping round trip in ms, on one line.
    measure() {
        ip netns exec "$h2" iperf3 -s -1 -B 10.89.0.2 >/dev/null 2>&1 &
        local s=$!
        sleep 0.5
        local gbps
        gbps=$(ip netns exec "$h1" iperf3 -c 10.89.0.2 -t "$secs" -J |
            python3 -c 'import json,sys; print(json.load(sys.stdin)["end"]["sum_received"]["bits_per_second"]/1e9)')
        wait "$s"
        local rtt
        rtt=$(ip netns exec "$h1" ping -q -c 50 -i 0.02 10.89.0.2 | awk -F/ '/^rtt/ {print $5}')
        echo "$gbps $rtt"
    }
    local r
    for ((r = 1; r <= rounds; r++)); do
        ip -n "$mid" link add "${t}br" type bridge
        ip -n "$mid" link set "${t}a" master "${t}br"
        ip -n "$mid" link set "${t}b" master "${t}br"
        ip -n "$mid" link set "${t}br" up
        sleep 2
        echo "linux $(measure)" | tee -a "$tmp/results" >&2
        ip -n "$mid" link del "${t}br"
        ip netns exec "$mid" "$tf" bridge -i "${t}a" -o "${t}b" -q -w "$tmp/b.pcapng" \
            --control none 2>"$tmp/bridge.err" &
        bpid=$!
        until ip -n "$mid" link show "${t}b" | grep -q prog/xdp; do sleep 0.1; done
        sleep 1
        echo "tapflow $(measure)" | tee -a "$tmp/results" >&2
        kill -INT "$bpid"; wait "$bpid"; bpid=
        grep -- '->' "$tmp/bridge.err" >&2
        rm -f "$tmp"/b-w*.pcapng
    done
    python3 - "$tmp/results" "$rounds" "$secs" <<'PY'
import statistics, sys
rows = [l.split() for l in open(sys.argv[1])]
med = {t: [statistics.median(float(r[i]) for r in rows if r[0] == t) for i in (1, 2)]
       for t in ("linux", "tapflow")}
print(f"| {sys.argv[2]} rounds, iperf3 {sys.argv[3]} s + 50 pings | Gbit/s (median) | ping RTT ms (median) |")
print("|---|---:|---:|")
for t, name in (("linux", "kernel bridge"), ("tapflow", "tapflow bridge, headers to pcapng")):
    print(f"| {name} | {med[t][0]:.2f} | {med[t][1]:.3f} |")
print(f"| tapflow / kernel | {med['tapflow'][0] / med['linux'][0]:.2f} | {med['tapflow'][1] / med['linux'][1]:.2f} |")
PY
}

if [[ ${1:-} == --bridge ]]; then
    shift
    bridge_bench "$@"
    exit
fi

exec python3 bench/live.py --tools tapflow,tapflow-xdp,tapflow-xdp-pass,floor --no-gen-baseline \
    --sizes 64,512,1518 --repeat 3 --packets 1000000 --img "${TMPDIR:-/tmp}/tapflow-bench-xdp" "$@"
