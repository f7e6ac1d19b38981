#!/usr/bin/env bash
# The main job: make a veth pair between two throw-away network namespaces, send traffic with
# `tapflow gen` on one end, capture it with `tapflow capture` on the other into pcapng, and print
# the collection ratio. Root only. Removes everything it made on exit.
#
#   scripts/demo.sh [OUT_DIR]          (default: target/demo)
#
# Environment: TAPFLOW_BIN (skip the build, use this binary), COUNT (default 100000),
# FLOWS (default 64), SIZE (frame length without FCS, default 60), SNAPLEN (default 128).
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(cd "$here/.." && pwd)
out=${1:-$repo/target/demo}
count=${COUNT:-100000}
flows=${FLOWS:-64}
size=${SIZE:-60}
snaplen=${SNAPLEN:-128}

die() { echo "demo: $*" >&2; exit 1; }
[[ $(id -u) -eq 0 ]] || die "must run as root (network namespaces, packet sockets)"
for t in ip python3 capinfos; do
    command -v "$t" >/dev/null || die "$t not installed (run scripts/install-deps.sh)"
done

# Build (a no-op when up to date) unless a binary was given.
if [[ -n ${TAPFLOW_BIN:-} ]]; then
    bin=$TAPFLOW_BIN
else
    command -v cargo >/dev/null || die "cargo not found (run scripts/install-deps.sh)"
    echo "demo: building tapflow (release)"
    (cd "$repo" && cargo build --release --quiet --bin tapflow)
    bin=$repo/target/release/tapflow
fi
[[ -x $bin ]] || die "no tapflow binary at $bin"

mkdir -p -- "$out"
out=$(cd "$out" && pwd)
pcap=$out/demo.pcapng
capjson=$out/demo-capture.json
genjson=$out/demo-gen.json
caplog=$out/demo-capture.log
rm -f -- "$pcap" "$capjson" "$genjson" "$caplog"

# shellcheck source=scripts/netns.sh
source "$here/netns.sh"
name=tfd$$
cap_pid=
cleanup() {
    if [[ -n $cap_pid ]] && kill -0 "$cap_pid" 2>/dev/null; then kill -KILL "$cap_pid" 2>/dev/null || true; fi
    tf_cleanup "$name"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM
tf_pair "$name"
gen_if=${name}0   # in namespace ${name}a
cap_if=${name}1   # in namespace ${name}b
ifindex=$(ip netns exec "${name}b" cat "/sys/class/net/$cap_if/ifindex")

echo "demo: veth $gen_if (netns ${name}a) -> $cap_if (netns ${name}b)"
ip netns exec "${name}b" "$bin" capture -i "$cap_if" -s "$snaplen" -w "$pcap" -q \
    --summary-json "$capjson" 2>"$caplog" &
cap_pid=$!

# Wait until the capture socket is bound to the interface (its namespace's /proc/net/packet).
ready=0
for _ in $(seq 500); do
    if ! kill -0 "$cap_pid" 2>/dev/null; then
        cat "$caplog" >&2
        die "tapflow capture exited before it started listening"
    fi
    if awk -v ifx="$ifindex" 'NR > 1 && $5 == ifx && $6 == 1 { found = 1 } END { exit !found }' \
        "/proc/$cap_pid/net/packet" 2>/dev/null; then
        ready=1
        break
    fi
    sleep 0.02
done
((ready)) || die "tapflow capture did not start listening on $cap_if within 10 s"
sleep 0.1

echo "demo: sending $count frames of $size bytes in $flows flows"
ip netns exec "${name}a" "$bin" gen -i "$gen_if" --size "$size" --count "$count" --flows "$flows" \
    --summary-json "$genjson"
sleep 0.2
kill -INT "$cap_pid"
cap_rc=0
wait "$cap_pid" || cap_rc=$?
cap_pid=
cat "$caplog" >&2
[[ $cap_rc -eq 0 ]] || die "tapflow capture exited with status $cap_rc"
[[ -s $capjson && -s $genjson ]] || die "missing summary files ($capjson, $genjson)"

python3 - "$genjson" "$capjson" "$pcap" <<'PY'
import json, sys
gen = json.load(open(sys.argv[1]))
cap = json.load(open(sys.argv[2]))
files = cap.get("files") or [sys.argv[3]]
sent, rec = gen["sent"], cap["recorded"]
print()
print("tapflow demo report")
print(f"  sent by gen            {sent:>12,}  ({gen.get('pps', 0):,.0f} pps)")
print(f"  received by capture    {cap['received']:>12,}")
print(f"  recorded to file       {rec:>12,}")
print(f"  dropped by the kernel  {cap['dropped_kernel']:>12,}")
print(f"  dropped by tapflow     {cap['dropped_ours']:>12,}")
print(f"  collection ratio       {100.0 * rec / sent if sent else 0.0:>11.3f}%  (recorded / sent)")
for f in files:
    print(f"  file                   {f}")
PY
echo
capinfos "$pcap"
