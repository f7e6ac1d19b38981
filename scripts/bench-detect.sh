#!/usr/bin/env bash
# Flood detection: the time from an attack's first packet to its alert, on the packet path
# (a veth probe) and the flow path (the probe's flow meter exporting IPFIX to `tapflow detect
# -l`), and what detection costs in CPU beside the same run without it.
#
#   scripts/bench-detect.sh [TRACE.pcap] [RUNS=5]      (PART=latency, cpu or quiet: one part only;
#                                                       KEEP=1: keep the work directory)
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
# --json /dev/null` against the same with --detect, RUNS times each, alternating; the least and the
# median user+sys CPU seconds of each,
# over the trace as it is and over the same packets at 100,000 and at 1,000,000 packets/s.
# TRACE defaults to a 2M-packet trace made by scripts/make-trace.sh (real corpus traffic).
#
# Quiet (false alerts): 30 minutes by capture time of attack-free traffic, `tapflow detect -r` over
# it at the defaults, with a learnt baseline (--baseline) from a store of 3 past days of the same
# kind of traffic at the same hour, and with that baseline's floor off (3 x the 95th percentile
# alone). The traffic: COPIES (default 240) copies of five attack-free corpus captures with
# their own packet timing (ustc-tfc2016-tinba-malware, stratosphere-slips-test-cc-capture-1,
# ndpi-gnutella, nfstream-skype, zeek-http-1000-requests-one-dropped-response), each copy's
# addresses remapped by `tcprewrite --seed=N` (every copy its own hosts) and moved by `editcap -t`
# to start at a pseudo-random offset in the 30 minutes from 2025-11-25T14:00:00Z, all merged in
# time order by mergecap. A past day is the same with other seeds and offsets, 1-3 days earlier,
# stored with `tapflow flows -r --store`. Last, the same 30 minutes with a spread UDP flood added
# (8,000 packets/s for 30 s over 100 hosts): what the baseline catches that no host limit sees.
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
    if [[ -n ${KEEP:-} ]]; then echo "bench-detect: kept $work" >&2; else rm -rf "$work"; fi
}
trap cleanup EXIT
part=${PART:-all}
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

if [[ $part == all || $part == latency ]]; then
    tf_pair "$name"
    echo "time from the first attack packet to the alert (s), $runs runs each:"
    for mode in probe flows; do
        printf '  %s:' "$mode"
        for r in $(seq "$runs"); do printf ' %s' "$(latency "$mode" "$r")"; done
        echo
    done
fi

# quiet_trace OUT SEED START_S: 30 minutes of attack-free traffic from START_S (see the top).
quiet_trace() {
    local out=$1 seed=$2 start=$3 dir=$work/quiet-$2 k=0 m first last off
    local members=(ustc-tfc2016-tinba-malware.pcap stratosphere-slips-test-cc-capture-1.pcap
        ndpi-gnutella.pcap nfstream-skype.pcap zeek-http-1000-requests-one-dropped-response.pcap)
    mkdir -p "$dir"
    for k in $(seq "${COPIES:-240}"); do
        m=$corpus/${members[k % ${#members[@]}]}
        read -r first last < <(capinfos -T -r -a -e -S "$m" | cut -f2,3)
        # A pseudo-random start that keeps the copy inside the 30 minutes.
        off=$(awk -v k="$k" -v s="$seed" -v f="$first" -v l="$last" \
            'BEGIN { r = ((k * 7919 + s * 104729) % 10007) / 10007; printf "%.6f", r * (1800 - (l - f)) }')
        tcprewrite --seed=$((seed * 1000 + k)) -i "$m" -o "$dir/c.pcap"
        editcap -t "$(awk -v a="$start" -v o="$off" -v f="$first" 'BEGIN { printf "%.6f", a + o - f }')" \
            "$dir/c.pcap" "$dir/s$k.pcap"
    done
    rm -f "$dir/c.pcap"
    mergecap -F pcap -w "$out" "$dir"/s*.pcap
    rm -rf "$dir"
}

if [[ $part == all || $part == quiet ]]; then
    t0=1764079200 # 2025-11-25T14:00:00Z
    quiet=$work/quiet.pcap
    quiet_trace "$quiet" 1 "$t0"
    store=$work/past
    for day in 1 2 3; do
        quiet_trace "$work/day.pcap" $((day + 1)) $((t0 - day * 86400))
        "$bin" flows -q -r "$work/day.pcap" --store "$store"
    done
    rm -f "$work/day.pcap"
    printf '[baseline]\nfloor = { }\n' >"$work/nofloor.toml"
    # The same traffic with a flood added at 14:10 that no host limit sees: 30 s of UDP at
    # 8,000 packets/s (100-byte frames) spread over 100 destinations (80 packets/s each).
    python3 - "$work/flood.pcap" $((t0 + 600)) <<'PY'
import struct, sys
with open(sys.argv[1], 'wb') as o:
    o.write(struct.pack('<IHHiIII', 0xa1b2c3d4, 2, 4, 0, 0, 65535, 1))
    for i in range(8000 * 30):
        t = int(sys.argv[2]) * 1_000_000 + i * 125
        udp = struct.pack('>HHHH', 40000 + i % 1000, 443, 66, 0) + bytes(58)
        ip = struct.pack('>BBHHHBBH4s4s', 0x45, 0, 86, 0, 0, 64, 17, 0,
                         bytes([198, 51, 100, i % 200 + 1]), bytes([10, 99, 0, i % 100 + 1]))
        frame = bytes([2, 0, 0, 0, 0, 2, 2, 0, 0, 0, 0, 1, 8, 0]) + ip + udp
        o.write(struct.pack('<IIII', t // 1_000_000, t % 1_000_000, 100, 100) + frame)
PY
    mergecap -F pcap -w "$work/flooded.pcap" "$quiet" "$work/flood.pcap"
    read -r packets span < <(capinfos -T -r -c -u "$quiet" | cut -f2,3)
    echo "alerts over $packets packets, $span s of attack-free traffic (tapflow detect -r):"
    for how in defaults baseline baseline-no-floor defaults+flood baseline+flood; do
        t=$quiet
        case $how in
            defaults) extra=() ;;
            baseline) extra=(--baseline "$store") ;;
            baseline-no-floor) extra=(--baseline "$store" --thresholds "$work/nofloor.toml") ;;
            defaults+flood) extra=() t=$work/flooded.pcap ;;
            baseline+flood) extra=(--baseline "$store") t=$work/flooded.pcap ;;
        esac
        s0=$(date +%s.%N)
        "$bin" detect --json -r "$t" "${extra[@]}" >"$work/alerts.json" 2>"$work/detect.err"
        s1=$(date +%s.%N)
        starts=$(grep -c '"event":"start"' "$work/alerts.json" || true)
        printf '  %s: %s alerts (%.0f s to run)\n' "$how" "$starts" "$(awk -v a="$s0" -v b="$s1" 'BEGIN { print b - a }')"
        grep -h 'baseline for' "$work/detect.err" | sed 's/^/    /' || true
        grep '"event":"start"' "$work/alerts.json" | cut -c1-400 | sed 's/^/    /' || true
    done
fi
[[ $part == latency || $part == quiet ]] && exit 0

if [[ -z $trace ]]; then
    trace=$work/trace.pcap
    TAPFLOW_CORPUS=$corpus "$here/make-trace.sh" "$trace" 2000000 >/dev/null
fi
# The same packets with their times rewritten to 100,000 packets/s (a busy link, where the cost
# is per packet) and to 1,000,000 packets/s (a flood: over 100,000 packets/s a worker counts a
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
# RUNS runs of "$@" without and with --detect, alternating (a busy machine slows both alike);
# user+sys CPU seconds from getrusage; the least and the median of each, and what detection adds
# per 10M packets by both.
cpu() { # LABEL PACKETS COMMAND...
    python3 - "$runs" "$@" <<'PY'
import resource, statistics, subprocess, sys
runs, label, packets, cmd = int(sys.argv[1]), sys.argv[2], int(sys.argv[3]), sys.argv[4:]
def once(args):
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    subprocess.run(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
off, on = [], []
for _ in range(runs):
    off.append(once(cmd))
    on.append(once([*cmd, "--detect"]))
per = 1e7 / packets
lo, mid = (min(on) - min(off)) * per, (statistics.median(on) - statistics.median(off)) * per
print(f"  {label}: least {min(off):.4f} / {min(on):.4f} with --detect, median "
      f"{statistics.median(off):.4f} / {statistics.median(on):.4f}: detection {lo:.3f} s "
      f"(least) and {mid:.3f} s (median) per 10M packets")
PY
}
packets=$(capinfos -c -M "$trace" | awk '/Number of packets/ { print $NF }')
for t in "$flood" "$dense" "$trace"; do
    echo "CPU seconds over $packets packets of $(basename "$t") ($runs runs each, alternating):"
    cpu capture "$packets" "$bin" capture -q -r "$t"
    cpu flows "$packets" "$bin" flows -q -r "$t" --json /dev/null
done
