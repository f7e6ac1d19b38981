#!/usr/bin/env bash
# The ClickHouse store's benchmark: a local server (scripts/clickhouse.sh, Debian's 18.16), then
#   1. MILLIONS million synthetic flows inserted through tapflow's store (RowBinary batches of
#      50,000 over HTTP, rollups fed by materialized views), and the same rows, as a RowBinary file,
#      through clickhouse-client into an identical database: the anchor;
#   2. the top-10 sources by bytes over them, through tapflow's query engine (the one-way view:
#      forward and reverse directions) and as plain SQL over the forward direction in
#      clickhouse-client, best of 3 each.
# Prints wall time, rows/s and CPU (client and server) per million rows, and the ratios. With
# SHARDS above 1 the servers are the shards of one cluster on this machine: both inserts go
# through the first shard's Distributed table (synchronously), and the server CPU is all shards'.
#
#   scripts/bench-clickhouse.sh [MILLIONS [SHARDS]]     # default 10 million, 1 shard
set -euo pipefail
cd "$(dirname "$0")/.."
n=${1:-10}
shards=${2:-1}
target=${CARGO_TARGET_DIR:-target}
cargo build --release --locked -q -p tapflow-store --example clickhouse_bench
bin=$target/release/examples/clickhouse_bench
work=$(mktemp -d /var/tmp/tapflow-chbench.XXXXXX)
trap 'scripts/clickhouse.sh stop "$work"; rm -rf "$work"' EXIT
port=28900
hosts=$(scripts/clickhouse.sh start "$work" "$shards" "$port" | sed 's|^http://||' | paste -sd,)
# db_url DB: the store's URL of database DB (every shard and the cluster's name past one).
db_url() {
    if ((shards > 1)); then echo "http://$hosts/$1?cluster=tapflow"; else echo "http://$hosts/$1"; fi
}
client() { clickhouse-client --port $((port + 1)) "$@"; }
clk=$(getconf CLK_TCK)
server_ticks() { cat "$work"/shard*/pid | while read -r p; do awk '{ print $14 + $15 }' "/proc/$p/stat"; done | awk '{ t += $1 } END { print t }'; }

# run NAME CMD...: wall, client CPU (s) and server CPU (s) of one command into $work/NAME.
run() {
    local name=$1 s0 s1
    shift
    s0=$(server_ticks)
    local TIMEFORMAT='%R %U %S'
    { time "$@" >"$work/$name.out"; } 2>"$work/$name.time"
    s1=$(server_ticks)
    read -r wall user sys <"$work/$name.time"
    awk -v w="$wall" -v u="$user" -v s="$sys" -v t=$((s1 - s0)) -v c="$clk" \
        'BEGIN { print w, u + s, t / c }' >"$work/$name"
}

"$bin" write "$work/rows.bin" "$n" >/dev/null
"$bin" insert "$(db_url anchor)" 0 >/dev/null # the same tables, empty
run tapflow "$bin" insert "$(db_url bench)" "$n"
run anchor client --query "INSERT INTO anchor.flows FORMAT RowBinary" --max_insert_block_size 50000 \
    --insert_distributed_sync 1 <"$work/rows.bin"
for db in bench anchor; do
    rows=$(client --query "SELECT count() FROM $db.flows")
    [[ $rows == $(awk -v n="$n" 'BEGIN { printf "%d", n * 1000000 }') ]] ||
        { echo "bench-clickhouse: $db has $rows rows" >&2; exit 1; }
done
size=$(for ((i = 0; i < shards; i++)); do
    clickhouse-client --port $((port + 10 * i + 1)) --query "SELECT sum(bytes_on_disk) FROM system.parts
        WHERE database = 'bench' AND table IN ('flows', 'flows_local') AND active"
done | awk '{ t += $1 } END { print t }')

best() { sort -n | head -n 1; }
top_tapflow=$("$bin" top "$(db_url bench)" 3 | awk '{ print $(NF-4) }' | best)
top_sql="SELECT src_addr, sum(bytes) AS b FROM bench.flows GROUP BY src_addr ORDER BY b DESC LIMIT 10"
top_client=$(for i in 1 2 3; do client --time --query "$top_sql" 2>&1 >/dev/null; done | best)

echo "ClickHouse $(client --query 'SELECT version()'), $n M flows, $shards shard(s), $(nproc) cores"
printf '%-36s %7s %10s %13s %13s\n' insert "wall s" rows/s "client CPU/M" "server CPU/M"
for name in tapflow anchor; do
    label="tapflow store (HTTP, RowBinary)"
    [[ $name == anchor ]] && label="clickhouse-client (RowBinary file)"
    awk -v l="$label" -v n="$n" '{ printf "%-36s %7.2f %10.0f %13.3f %13.3f\n", l, $1, n * 1e6 / $1, $2 / n, $3 / n }' "$work/$name"
done
awk -v n="$n" -v size="$size" -v tt="$top_tapflow" -v tc="$top_client" '
    NR == 1 { tw = $1 } NR == 2 { aw = $1 }
    END {
        printf "insert wall, tapflow / clickhouse-client: %.2f\n", tw / aw
        printf "stored: %.1f B/flow (flows table, without rollups)\n", size / (n * 1e6)
        printf "top-10 srcip/bytes: tapflow query %.3f s (one-way view), clickhouse-client %.3f s (forward only): %.2f\n", tt, tc, tt / tc
    }' "$work/tapflow" "$work/anchor"
