#!/usr/bin/env bash
# Starts and stops local ClickHouse servers (Debian's clickhouse-server) for tapflow's tests,
# benchmarks and demos: one server, or several as the shards of one cluster on loopback ports.
#
#   scripts/clickhouse.sh start DIR [SHARDS [HTTP_PORT]]   # default 1 shard, HTTP port 18123
#   scripts/clickhouse.sh stop DIR
#
# Shard i (0-based) keeps its config, data and logs under DIR/shard<i>, listens on 127.0.0.1 only,
# HTTP on HTTP_PORT+10*i, native TCP on HTTP_PORT+10*i+1, and knows the cluster `tapflow` (every
# shard, one replica each) in <remote_servers>. `start` starts the shards not running (so it
# restarts one that was killed), waits until each answers `SELECT version()` and prints its URL.
# Runs as root (the config needs no clickhouse user).
set -euo pipefail

usage() {
    sed -n '5,6p' "$0" >&2
    exit 2
}

[[ $# -ge 2 ]] || usage
cmd=$1
dir=$2
shards=${3:-1}
base=${4:-18123}

shard_pid() {
    local pidfile=$dir/shard$1/pid
    [[ -s $pidfile ]] && kill -0 "$(cat "$pidfile")" 2>/dev/null && cat "$pidfile"
}

write_config() {
    local i=$1 d=$dir/shard$1 http=$((base + 10 * $1)) cluster="" j
    for ((j = 0; j < shards; j++)); do
        cluster+="<shard><replica><host>127.0.0.1</host><port>$((base + 10 * j + 1))</port></replica></shard>"
    done
    mkdir -p "$d/data" "$d/tmp" "$d/log"
    cat >"$d/config.xml" <<EOF
<?xml version="1.0"?>
<yandex>
    <logger><level>warning</level><log>$d/log/server.log</log><errorlog>$d/log/error.log</errorlog></logger>
    <http_port>$http</http_port>
    <tcp_port>$((http + 1))</tcp_port>
    <listen_host>127.0.0.1</listen_host>
    <path>$d/data/</path>
    <tmp_path>$d/tmp/</tmp_path>
    <users_config>/etc/clickhouse-server/users.xml</users_config>
    <default_profile>default</default_profile>
    <default_database>default</default_database>
    <mark_cache_size>268435456</mark_cache_size>
    <max_concurrent_queries>50</max_concurrent_queries>
    <remote_servers><tapflow>$cluster</tapflow></remote_servers>
</yandex>
EOF
}

start_shard() {
    local i=$1 d=$dir/shard$1 http=$((base + 10 * $1)) t
    if ! shard_pid "$i" >/dev/null; then
        write_config "$i"
        # setsid: the server outlives this script and ignores the caller's terminal signals.
        setsid clickhouse-server --config-file="$d/config.xml" </dev/null >>"$d/log/stdout.log" 2>&1 &
        echo $! >"$d/pid"
    fi
    for ((t = 0; t < 600; t++)); do
        if curl -sf "http://127.0.0.1:$http/?query=SELECT%20version()" >/dev/null 2>&1; then
            echo "http://127.0.0.1:$http"
            return 0
        fi
        if ! shard_pid "$i" >/dev/null; then
            echo "clickhouse.sh: shard $i exited at start; see $d/log/" >&2
            tail -n 5 "$d/log/stdout.log" "$d/log/error.log" >&2 2>/dev/null || true
            return 1
        fi
        sleep 0.1
    done
    echo "clickhouse.sh: shard $i did not answer on port $http within 60 s" >&2
    return 1
}

stop_shard() {
    local i=$1 pid t
    pid=$(shard_pid "$i") || return 0
    kill "$pid"
    for ((t = 0; t < 300; t++)); do
        kill -0 "$pid" 2>/dev/null || { rm -f "$dir/shard$i/pid"; return 0; }
        sleep 0.1
    done
    kill -9 "$pid" 2>/dev/null || true
    rm -f "$dir/shard$i/pid"
}

case $cmd in
start)
    command -v clickhouse-server >/dev/null || {
        echo "clickhouse.sh: clickhouse-server not installed (apt-get install clickhouse-server)" >&2
        exit 1
    }
    for ((i = 0; i < shards; i++)); do start_shard "$i"; done
    ;;
stop)
    for d in "$dir"/shard*; do
        [[ -d $d ]] && stop_shard "${d##*/shard}"
    done
    ;;
*) usage ;;
esac
