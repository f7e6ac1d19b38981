#!/usr/bin/env bash
# The whole path on one machine: a veth pair between two throw-away network namespaces; on one
# end `tapflow gen` sends generated traffic and tcpreplay replays a small trace of many hosts; on
# the other `tapflow capture` records the headers to pcapng, meters the flows and exports them as
# IPFIX to `tapflow collect`, which keeps them in a Parquet store. Then it prints the capture's
# collection ratio, the collector's accounting, `tapflow query`'s top talkers, and serves the
# store with `tapflow console` until Ctrl-C (on a terminal; otherwise it says how to start it).
# Root only. Removes the namespaces it made on exit.
#
#   scripts/demo.sh [OUT_DIR]          (default: target/demo)
#
# Environment: TAPFLOW_BIN (skip the build, use this binary), COUNT (default 100000),
# FLOWS (default 64), SIZE (frame length without FCS, default 60), SNAPLEN (default 128),
# HTTP (the console's address, default 127.0.0.1:8080), CONSOLE (1: serve the console even
# without a terminal, 0: never).
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
for t in ip python3 capinfos tcpreplay; do
    command -v "$t" >/dev/null || die "$t not installed (run scripts/install-deps.sh)"
done

# Build (a no-op when up to date) unless a binary was given.
if [[ -n ${TAPFLOW_BIN:-} ]]; then
    bin=$TAPFLOW_BIN
else
    command -v cargo >/dev/null || die "cargo not found (run scripts/install-deps.sh)"
    echo "demo: building tapflow (release)"
    (cd "$repo" && cargo build --release --quiet --bin tapflow)
    bin=$(cd "$repo" && realpath -m "${CARGO_TARGET_DIR:-target}")/release/tapflow
fi
[[ -x $bin ]] || die "no tapflow binary at $bin"

mkdir -p -- "$out"
out=$(cd "$out" && pwd)
pcap=$out/demo.pcapng
trace=$out/replay.pcap
store=$out/store
capjson=$out/demo-capture.json
genjson=$out/demo-gen.json
coljson=$out/demo-collect.json
caplog=$out/demo-capture.log
collog=$out/demo-collect.log
rm -rf -- "$pcap" "$trace" "$store" "$capjson" "$genjson" "$coljson" "$caplog" "$collog"
http=${HTTP:-127.0.0.1:8080}

# shellcheck source=scripts/netns.sh
source "$here/netns.sh"
name=tfd$$
cap_pid=
col_pid=
cleanup() {
    for p in $cap_pid $col_pid; do
        if kill -0 "$p" 2>/dev/null; then kill -KILL "$p" 2>/dev/null || true; fi
    done
    tf_cleanup "$name"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM
tf_pair "$name"
gen_if=${name}0   # in namespace ${name}a
cap_if=${name}1   # in namespace ${name}b
ifindex=$(ip netns exec "${name}b" cat "/sys/class/net/$cap_if/ifindex")

# waits up to 10 s for CONDITION (a command) while PID runs; LOG is shown if PID ends first.
wait_for() {
    local pid=$1 log=$2 what=$3
    shift 3
    for _ in $(seq 500); do
        if ! kill -0 "$pid" 2>/dev/null; then
            cat "$log" >&2
            die "$what exited before it was ready"
        fi
        if "$@"; then return 0; fi
        sleep 0.02
    done
    die "$what was not ready within 10 s"
}

# The collector, on the probe's side (its loopback), keeping the flows in a Parquet store.
ip netns exec "${name}b" "$bin" collect -l ipfix+tcp://127.0.0.1:4739 --store "$store" -q \
    --summary-json "$coljson" 2>"$collog" &
col_pid=$!
listening() { ip netns exec "${name}b" ss -Hltn 'sport = :4739' | grep -q .; }
wait_for "$col_pid" "$collog" "tapflow collect" listening

# The probe: headers to pcapng, flows to the collector.
echo "demo: veth $gen_if (netns ${name}a) -> $cap_if (netns ${name}b)"
ip netns exec "${name}b" "$bin" capture -i "$cap_if" -s "$snaplen" -w "$pcap" -q \
    --export ipfix+tcp://127.0.0.1:4739 --summary-json "$capjson" 2>"$caplog" &
cap_pid=$!
# Bound to the interface: its namespace's /proc/net/packet lists it.
bound() {
    awk -v ifx="$ifindex" 'NR > 1 && $5 == ifx && $6 == 1 { found = 1 } END { exit !found }' \
        "/proc/$cap_pid/net/packet" 2>/dev/null
}
wait_for "$cap_pid" "$caplog" "tapflow capture" bound
sleep 0.1

echo "demo: sending $count frames of $size bytes in $flows flows"
ip netns exec "${name}a" "$bin" gen -i "$gen_if" --size "$size" --count "$count" --flows "$flows" \
    --summary-json "$genjson"

# A small trace of many hosts (web, DNS, ping, SSH), written here and replayed by tcpreplay.
python3 - "$trace" <<'PY'
import random, struct, sys
rng = random.Random(7)
def csum(b):
    if len(b) % 2: b += b"\0"
    s = sum(struct.unpack(f"!{len(b) // 2}H", b))
    while s >> 16: s = (s & 0xffff) + (s >> 16)
    return ~s & 0xffff
def frame(src, dst, proto, l4):
    ip = struct.pack("!BBHHHBBH4s4s", 0x45, 0, 20 + len(l4), rng.randrange(65536), 0, 64, proto, 0,
                     bytes(src), bytes(dst))
    ip = ip[:10] + struct.pack("!H", csum(ip)) + ip[12:]
    return b"\x02\0\0\0\0\x02\x02\0\0\0\0\x01\x08\x00" + ip + l4
def tcp(sport, dport, flags, n):
    return struct.pack("!HHIIBBHHH", sport, dport, 1, 1, 0x50, flags, 65535, 0, 0) + bytes(n)
def udp(sport, dport, n):
    return struct.pack("!HHHH", sport, dport, 8 + n, 0) + bytes(n)
def icmp(n):
    return struct.pack("!BBHHH", 8, 0, 0, 1, 1) + bytes(n)
servers = {443: [151, 101, 1, 69], 80: [93, 184, 216, 34], 53: [9, 9, 9, 9], 22: [198, 51, 100, 22]}
frames = []
for h in range(40):
    client = [10, 1, h // 8, 10 + h]
    weight = 1 + (40 - h) // 4
    for port, srv in servers.items():
        for c in range(rng.randrange(1, 4)):
            sport = 32768 + rng.randrange(28000)
            for _ in range(weight * (8 if port in (443, 80) else 2)):
                if port == 53:
                    frames.append(frame(client, srv, 17, udp(sport, 53, 40)))
                    frames.append(frame(srv, client, 17, udp(53, sport, 120)))
                else:
                    frames.append(frame(client, srv, 6, tcp(sport, port, 0x18, 100)))
                    frames.append(frame(srv, client, 6, tcp(port, sport, 0x18, 1200)))
    frames.append(frame(client, [192, 0, 2, 1], 1, icmp(56)))
with open(sys.argv[1], "wb") as f:
    f.write(struct.pack("<IHHiIII", 0xA1B2C3D4, 2, 4, 0, 0, 65535, 1))
    for i, fr in enumerate(frames):
        f.write(struct.pack("<IIII", 1_700_000_000, i, len(fr), len(fr)) + fr)
PY
echo "demo: replaying $(capinfos -Mc "$trace" | awk '/Number of packets/ { print $NF }') packets of $trace"
ip netns exec "${name}a" tcpreplay -q --topspeed -i "$gen_if" "$trace" >/dev/null
sleep 0.2

# Ends PID with SIGINT, as Ctrl-C would, shows its LOG and fails unless it exited cleanly.
interrupt() {
    local pid=$1 log=$2 what=$3 rc=0
    kill -INT "$pid"
    wait "$pid" || rc=$?
    cat "$log" >&2
    [[ $rc -eq 0 ]] || die "$what exited with status $rc"
}
# The probe ends: its open flows are exported, then the collector ends and flushes its store.
interrupt "$cap_pid" "$caplog" "tapflow capture"
cap_pid=
sleep 0.5
interrupt "$col_pid" "$collog" "tapflow collect"
col_pid=
[[ -s $capjson && -s $genjson && -s $coljson ]] ||
    die "missing summary files ($capjson, $genjson, $coljson)"

python3 - "$genjson" "$capjson" "$pcap" "$coljson" <<'PY'
import json, sys
gen = json.load(open(sys.argv[1]))
cap = json.load(open(sys.argv[2]))
col = json.load(open(sys.argv[4]))
files = cap.get("files") or [sys.argv[3]]
sent, rec = gen["sent"], cap["recorded"]
print()
print("tapflow demo report")
print(f"  sent by gen            {sent:>12,}  ({gen.get('pps', 0):,.0f} pps) and a replayed trace")
print(f"  received by capture    {cap['received']:>12,}")
print(f"  recorded to file       {rec:>12,}")
print(f"  dropped by the kernel  {cap['dropped_kernel']:>12,}")
print(f"  dropped by tapflow     {cap['dropped_ours']:>12,}")
print(f"  collection ratio       {100.0 * rec / cap['received'] if cap['received'] else 0.0:>11.3f}%  (recorded / received)")
for f in files:
    print(f"  file                   {f}")
for s in col.get("stores", []):
    print(f"  flows stored           {s['stored']:>12,}  of {s['flows']:,} collected, {s['name']}")
PY
echo
echo "demo: tapflow query -R $store -s srcip/bytes -n 5"
"$bin" query -R "$store" -t 'last 1h' -s srcip/bytes -n 5
echo
echo "demo: tapflow query -R $store -s dstport/flows -n 5 proto tcp"
"$bin" query -R "$store" -t 'last 1h' -s dstport/flows -n 5 proto tcp
echo

serve=${CONSOLE:-}
if [[ -z $serve ]]; then
    if [[ -t 0 && -t 1 ]]; then serve=1; else serve=0; fi
fi
if [[ $serve == 1 ]]; then
    # The namespaces go first: the console needs only the store.
    cleanup
    trap - EXIT
    echo "demo: the console on http://$http/ (Ctrl-C ends it)"
    exec "$bin" console --store "$store" --http "$http"
fi
echo "demo: see the flows in a browser: $bin console --store $store --http $http"
