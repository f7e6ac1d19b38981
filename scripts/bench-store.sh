#!/usr/bin/env bash
# Size and write rate of the Parquet flow store on the flows of one trace, beside nfcapd's files
# of the same trace (nfpcapd, then nfdump rewriting them uncompressed, LZ4, LZO).
#
#   scripts/bench-store.sh [TRACE]     (default target/bench-data/big.pcap)
#
# Prints one line per store: flows, bytes, bytes per flow. tapflow's flows are biflows (one
# record per connection), nfdump's one-way: the last column is the same traffic's total bytes
# over nfdump's flow count, so both are divided by the same number. Then the writer alone: the
# same flows in one file of the flows table (no hour partitions, rollups or merges), by tapflow's
# writer and, where pyarrow is installed, by Arrow C++ (bench/arrow_writer.py).
set -euo pipefail
cd "$(dirname "$0")/.."
TRACE=${1:-target/bench-data/big.pcap}
export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-target}
cargo build --release -q -p tapflow -p tapflow-store --bin tapflow --example store_bench
BIN=$CARGO_TARGET_DIR/release
W=$(mktemp -d /tmp/bench-store.XXXXXX)
trap 'rm -rf "$W"' EXIT

"$BIN/tapflow" flows -r "$TRACE" --json "$W/flows.jsonl" 2>/dev/null
for level in 3 9 15; do
    taskset -c 0 "$BIN/examples/store_bench" "$W/flows.jsonl" "$W/store$level" "$level" >"$W/store$level.json"
done

mkdir "$W/nf"
nfpcapd -r "$TRACE" -w "$W/nf" >/dev/null 2>&1
nfdump -R "$W/nf" -w "$W/nf.raw" >/dev/null
nfdump -R "$W/nf" -y -w "$W/nf.lz4" >/dev/null
nfdump -R "$W/nf" -z -w "$W/nf.lzo" >/dev/null
NF_FLOWS=$(nfdump -r "$W/nf.raw" -I | awk '$1 == "Flows:" { print $2 }')

python3 - "$W" "$NF_FLOWS" <<'PY'
import json, os, sys
w, nf_flows = sys.argv[1], int(sys.argv[2])
print(f"{'store':<24}{'records':>9}{'bytes':>11}{'B/record':>10}{'B/nfdump flow':>15}{'flows/s (1 core)':>18}")
for level in (3, 9, 15):
    d = json.load(open(f"{w}/store{level}.json"))
    print(f"{'tapflow zstd ' + str(level):<24}{d['flows']:>9}{d['flow_bytes']:>11}"
          f"{d['bytes_per_flow']:>10.2f}{d['flow_bytes'] / nf_flows:>15.2f}{d['flows_per_cpu_s']:>18.0f}")
    print(f"{'  + rollups, hosts, ports':<24}{'':>9}{d['rollup_bytes']:>11}{d['rollup_bytes_per_flow']:>10.2f}")
    print(f"{'    of which ports_1h':<24}{'':>9}{d['ports_bytes']:>11}{d['ports_bytes_per_flow']:>10.2f}")
for name, f in (("nfdump uncompressed", "nf.raw"), ("nfdump LZ4 (-y)", "nf.lz4"), ("nfdump LZO (-z)", "nf.lzo")):
    size = os.path.getsize(f"{w}/{f}")
    print(f"{name:<24}{nf_flows:>9}{size:>11}{size / nf_flows:>10.2f}{size / nf_flows:>15.2f}")
PY

echo "one file of the flows table, the writer alone (1 core):"
for level in 1 3 9; do
    taskset -c 0 "$BIN/examples/store_bench" "$W/flows.jsonl" "$W/file$level" "$level" 131072 file |
        python3 -c 'import json, sys; d = json.load(sys.stdin); print("tapflow, zstd %d: %.3f s per M rows, %.2f B/row" % (d["zstd_level"], d["cpu_s"] / d["flows"] * 1e6, d["bytes_per_flow"]))'
done
if python3 -c 'import pyarrow' 2>/dev/null; then
    taskset -c 0 python3 bench/arrow_writer.py "$W/store9"
else
    echo "pyarrow not installed: no Arrow C++ comparison"
fi
