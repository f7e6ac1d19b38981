#!/usr/bin/env bash
# Starts and stops BGP speakers for tapflow's BGP action (docs/detect.md): ExaBGP running tapflow
# as its API process, and GoBGP as a router receiving what it announces. Tests and demos run them
# in network namespaces (`ip netns exec NS scripts/bgp.sh ...`); nothing here picks a namespace.
#
#   scripts/bgp.sh exabgp DIR ADDRESS AS PEER PEER_AS COMMAND...   # ExaBGP at ADDRESS, AS, to PEER
#   scripts/bgp.sh gobgpd DIR ADDRESS AS PEER PEER_AS              # GoBGP at ADDRESS, AS, from PEER
#   scripts/bgp.sh rib DIR [FAMILY]                                # GoBGP's RIB as JSON (ipv4, ipv6, ipv4-flowspec, ...)
#   scripts/bgp.sh stop DIR                                        # stops what DIR started
#
# `exabgp` writes DIR/exabgp.conf with one neighbor (IPv4 and IPv6 unicast and flowspec) and one
# API process running COMMAND with the text encoder: what COMMAND writes on its standard output
# (`announce route ...`, `withdraw route ...`) is announced to PEER; ExaBGP's acknowledgements
# (`done`, `error`) come on its standard input. ExaBGP connects out (it does not listen), does not
# respawn COMMAND, keeps root (COMMAND may need to open interfaces) and logs to DIR/exabgp.log;
# COMMAND's standard error goes there too.
#
# `gobgpd` writes DIR/gobgpd.toml: listens at ADDRESS port 179, accepts PEER (IPv4 and IPv6
# unicast and flowspec), answers its gRPC API at ${GOBGP_API:-127.0.0.1:50051}; logs to
# DIR/gobgpd.log. `start` returns once the API answers. `rib` asks it with the gobgp client.
#
# Both run detached (setsid) with a pid file in DIR; `stop` ends them (SIGTERM, then SIGKILL
# after 10 s). Runs as root.
set -euo pipefail

usage() {
    sed -n '6,9p' "$0" >&2
    exit 2
}

[[ $# -ge 2 ]] || usage
cmd=$1
dir=$2
api=${GOBGP_API:-127.0.0.1:50051}

pid_of() {
    local f=$dir/$1.pid
    [[ -s $f ]] && kill -0 "$(cat "$f")" 2>/dev/null && cat "$f"
}

need() {
    command -v "$1" >/dev/null || {
        echo "bgp.sh: $1 not installed (apt-get install $2)" >&2
        exit 1
    }
}

stop_one() {
    local name=$1 pid t
    pid=$(pid_of "$name") || return 0
    kill "$pid" 2>/dev/null || true
    for ((t = 0; t < 100; t++)); do
        kill -0 "$pid" 2>/dev/null || {
            rm -f "$dir/$name.pid"
            return 0
        }
        sleep 0.1
    done
    kill -9 "$pid" 2>/dev/null || true
    rm -f "$dir/$name.pid"
}

case $cmd in
exabgp)
    [[ $# -ge 7 ]] || usage
    need exabgp exabgp
    address=$3 as=$4 peer=$5 peer_as=$6
    shift 6
    mkdir -p "$dir"
    # ExaBGP splits its `run` line on spaces: COMMAND's words hold no space or semicolon.
    run="$*"
    cat >"$dir/exabgp.conf" <<EOF
process tapflow {
    run $run;
    encoder text;
}

neighbor $peer {
    router-id $address;
    local-address $address;
    local-as $as;
    peer-as $peer_as;
    group-updates false;
    family {
        ipv4 unicast;
        ipv6 unicast;
        ipv4 flow;
        ipv6 flow;
    }
    api {
        processes [ tapflow ];
    }
}
EOF
    if ! pid_of exabgp >/dev/null; then
        # The environment overrides /etc/exabgp/exabgp.env: no command pipes, no respawn, no
        # privilege drop; its log (on
        # standard output) and COMMAND's standard error go to DIR/exabgp.log.
        env exabgp_api_cli=false exabgp_api_respawn=false exabgp_daemon_drop=false \
            exabgp_daemon_daemonize=false exabgp_tcp_bind='' \
            setsid exabgp "$dir/exabgp.conf" </dev/null >>"$dir/exabgp.log" 2>&1 &
        echo $! >"$dir/exabgp.pid"
    fi
    sleep 0.5
    pid_of exabgp >/dev/null || {
        echo "bgp.sh: exabgp exited at start; see $dir/exabgp.log" >&2
        tail -n 5 "$dir/exabgp.log" >&2 || true
        exit 1
    }
    ;;
gobgpd)
    [[ $# -eq 6 ]] || usage
    need gobgpd gobgpd
    address=$3 as=$4 peer=$5 peer_as=$6
    mkdir -p "$dir"
    cat >"$dir/gobgpd.toml" <<EOF
[global.config]
  as = $as
  router-id = "$address"
  local-address-list = ["$address"]
  port = 179

[[neighbors]]
  [neighbors.config]
    neighbor-address = "$peer"
    peer-as = $peer_as
  [[neighbors.afi-safis]]
    [neighbors.afi-safis.config]
      afi-safi-name = "ipv4-unicast"
  [[neighbors.afi-safis]]
    [neighbors.afi-safis.config]
      afi-safi-name = "ipv6-unicast"
  [[neighbors.afi-safis]]
    [neighbors.afi-safis.config]
      afi-safi-name = "ipv4-flowspec"
  [[neighbors.afi-safis]]
    [neighbors.afi-safis.config]
      afi-safi-name = "ipv6-flowspec"
EOF
    if ! pid_of gobgpd >/dev/null; then
        setsid gobgpd -f "$dir/gobgpd.toml" --api-hosts "$api" --pprof-disable -p \
            </dev/null >>"$dir/gobgpd.log" 2>&1 &
        echo $! >"$dir/gobgpd.pid"
    fi
    for ((t = 0; t < 300; t++)); do
        if gobgp -u "${api%:*}" -p "${api##*:}" global >/dev/null 2>&1; then
            exit 0
        fi
        pid_of gobgpd >/dev/null || {
            echo "bgp.sh: gobgpd exited at start; see $dir/gobgpd.log" >&2
            tail -n 5 "$dir/gobgpd.log" >&2 || true
            exit 1
        }
        sleep 0.1
    done
    echo "bgp.sh: gobgpd's API did not answer at $api within 30 s" >&2
    exit 1
    ;;
rib)
    gobgp -u "${api%:*}" -p "${api##*:}" global rib -a "${3:-ipv4}" -j
    ;;
stop)
    stop_one exabgp
    stop_one gobgpd
    ;;
*) usage ;;
esac
