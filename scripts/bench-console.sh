#!/usr/bin/env bash
# The console's benchmark over the query benchmark's busy hour (scripts/bench-query.sh):
# the API's top-10 source addresses by bytes against `nfdump -s srcip/bytes -n 10` on the same
# flows (wall, median of RUNS, the two in turn), then the page's own time to the first chart and
# to its top tables in chromium (bench/console_timing.py).
#
#   scripts/bench-query.sh            # builds /var/tmp/tapflow-bench-query once
#   scripts/bench-console.sh [WORKDIR] [RUNS]
set -euo pipefail
cd "$(dirname "$0")/.."
work=${1:-/var/tmp/tapflow-bench-query}
runs=${2:-5}
tapflow=${CARGO_TARGET_DIR:-target}/release/tapflow
[ -x "$tapflow" ] || { echo "no $tapflow: cargo build --release -p tapflow" >&2; exit 2; }
[ -d "$work/store" ] || { echo "no $work/store: run scripts/bench-query.sh first" >&2; exit 2; }
scripts/fetch-console-assets.sh
port=18087
"$tapflow" console --store "$work/store" --http "127.0.0.1:$port" 2>/dev/null &
pid=$!
trap 'kill $pid 2>/dev/null; wait $pid 2>/dev/null' EXIT
for _ in $(seq 100); do curl -s "http://127.0.0.1:$port/" >/dev/null && break; sleep 0.1; done

# The whole store.
view="window=2000-01-01T00:00-2100-01-01T00:00"
api="http://127.0.0.1:$port/api/v1/top?$view&key=srcip&metric=bytes&n=10"
nf=(nfdump -R "$work/nf" -q -s srcip/bytes -n 10 -o csv)

diff <("${nf[@]}" | awk -F, 'NR > 1 && $5 != "" { print $5 "," $10 }') \
     <(curl -s "$api" | python3 -c '
import json, sys
for r in json.load(sys.stdin)["rows"]: print("%s,%s" % (r["value"], r["bytes"]))') \
    && echo "same answer: the API's top 10 source addresses and bytes equal nfdump's"

wall() { local t0 t1; t0=$(date +%s%N); "$@" >/dev/null; t1=$(date +%s%N); echo $(( (t1 - t0) / 1000 )); }
a=(); b=()
for _ in $(seq 1 "$runs"); do
    a+=("$(wall "${nf[@]}")")
    b+=("$(wall curl -s "$api")")
done
median() { printf '%s\n' "$@" | sort -n | awk '{ v[NR] = $1 } END { print v[int((NR + 1) / 2)] }'; }
ma=$(median "${a[@]}"); mb=$(median "${b[@]}")
echo "runs: $runs; nfdump wall µs: ${a[*]}; API wall µs: ${b[*]}"
awk -v a="$ma" -v b="$mb" 'BEGIN { printf "median wall: nfdump %.3f s, console API %.3f s, nfdump/API %.1f\n", a / 1e6, b / 1e6, a / b }'
# Each API call the page makes, median of RUNS.
for call in "top?$view&key=srcip&metric=bytes&n=10" "top?$view&key=dstport&metric=bytes&n=10" \
    "series?$view&key=proto&metric=bytes" "series?$view&key=srcip&metric=bytes&filter=proto%20tcp"; do
    t=(); for _ in $(seq 1 "$runs"); do t+=("$(wall curl -sf "http://127.0.0.1:$port/api/v1/$call")"); done
    echo "GET /api/v1/${call%%\?*}?${call#*$view&}: median $(( $(median "${t[@]}") / 1000 )) ms (${t[*]} µs)"
done
bench/console_timing.py "http://127.0.0.1:$port/?$view&key=proto&metric=bytes" "$runs"
