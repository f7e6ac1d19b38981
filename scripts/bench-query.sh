#!/usr/bin/env bash
# The query benchmark: top-10 source addresses by bytes over the same flows, nfdump's files
# against tapflow's store, the two run in turn, with the same answer checked.
#
#   scripts/bench-query.sh [PCAP] [WORKDIR] [RUNS] [COPIES]
#
# nfpcapd meters PCAP into nfcapd files (uncompressed), copied COPIES times (19: 10.1M flows for
# the 1.13M-packet bench trace); `nfdump -o csv` of the same flows, each copy shifted by a day, goes into
# tapflow's store through `tapflow import`. Needs nfdump and a release build.
set -euo pipefail
cd "$(dirname "$0")/.."

pcap=${1:-target/bench-data/big.pcap}
work=${2:-/tmp/tapflow-bench-query}
runs=${3:-5}
copies=${4:-19}
tapflow=${CARGO_TARGET_DIR:-target}/release/tapflow
[ -x "$tapflow" ] || { echo "no $tapflow: cargo build --release -p tapflow" >&2; exit 2; }
export TZ=UTC

if [ ! -d "$work/store" ]; then
    rm -rf "$work" && mkdir -p "$work/nf1" "$work/nf"
    nfpcapd -r "$pcap" -w "$work/nf1" >/dev/null 2>&1
    for k in $(seq 1 "$copies"); do cp -r "$work/nf1" "$work/nf/copy$k"; done
    nfdump -R "$work/nf1" -o csv -q \
        | python3 bench/nfdump_to_flows.py --copies "$copies" \
        | "$tapflow" import --store "$work/store" -
fi
echo "nfdump files: $(du -sh "$work/nf" | cut -f1), tapflow store: $(du -sh "$work/store/flows" | cut -f1)"

nf=(nfdump -R "$work/nf" -q -s srcip/bytes -n 10 -o csv)
tf=("$tapflow" query -R "$work/store" -s srcip/bytes -n 10 --csv)

# The same answer: the ten byte counts in order, and each address tapflow names has those bytes
# in nfdump's full list (addresses tied at one count may be named in either order).
"${nf[@]}" | awk -F, 'NR > 1 && $5 != "" { print $10 }' > "$work/nf.top"
"${tf[@]}" | awk -F, 'NR > 1 { print $4 }' > "$work/tf.top"
nfdump -R "$work/nf" -q -s srcip/bytes -n 0 -o csv | awk -F, 'NR > 1 && $5 != "" { print $5 "," $10 }' > "$work/nf.all"
"${tf[@]}" | awk -F, 'NR > 1 { print $1 "," $4 }' > "$work/tf.pairs"
if diff -q "$work/nf.top" "$work/tf.top" >/dev/null && [ -z "$(grep -vxF -f "$work/nf.all" "$work/tf.pairs")" ]; then
    echo "same answer: the top 10 byte counts, and each address's bytes as nfdump counts them"
else
    echo "DIFFERENT ANSWERS" >&2; diff "$work/nf.top" "$work/tf.top" >&2 || true; exit 1
fi

# Wall seconds of each run, the two tools in turn; the medians and their ratio.
wall() { local t0 t1; t0=$(date +%s%N); "$@" >/dev/null; t1=$(date +%s%N); echo $(( (t1 - t0) / 1000 )); }
a=(); b=()
for _ in $(seq 1 "$runs"); do
    a+=("$(wall "${nf[@]}")")
    b+=("$(wall "${tf[@]}")")
done
median() { printf '%s\n' "$@" | sort -n | awk '{ v[NR] = $1 } END { print v[int((NR + 1) / 2)] }'; }
ma=$(median "${a[@]}"); mb=$(median "${b[@]}")
echo "runs: $runs; nfdump wall µs: ${a[*]}; tapflow wall µs: ${b[*]}"
awk -v a="$ma" -v b="$mb" 'BEGIN { printf "median wall: nfdump %.3f s, tapflow %.3f s, nfdump/tapflow %.1f\n", a / 1e6, b / 1e6, a / b }'
