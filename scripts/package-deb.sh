#!/usr/bin/env bash
# Builds the Debian package of tapflow with dpkg-deb from what scripts/install.sh installs
# under /usr: the binary, man pages, completions, systemd units and example configurations.
# The package creates the system user `tapflow` the units run as.
#
#   scripts/package-deb.sh [--bin PATH] [--out DIR]     # prints the .deb's path
set -euo pipefail
cd "$(dirname "$0")/.."

bin=""
out=target/deb
while (($#)); do
    case $1 in
    --bin) bin=${2:?}; shift 2 ;;
    --out) out=${2:?}; shift 2 ;;
    *) echo "package-deb: unknown option $1" >&2; exit 2 ;;
    esac
done
if [[ -z $bin ]]; then
    scripts/fetch-console-assets.sh >&2 # the console's charting library, compiled into the binary
    cargo build --release --locked -p tapflow >&2
    bin=${CARGO_TARGET_DIR:-target}/release/tapflow
fi

version=$(sed -n 's/^version = "\(.*\)"/\1/p' Cargo.toml | head -n 1)
arch=$(dpkg --print-architecture)
stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT
scripts/install.sh --prefix /usr --destdir "$stage" --bin "$bin" >&2

install -d "$stage/DEBIAN"
cat >"$stage/DEBIAN/control" <<CONTROL
Package: tapflow
Version: $version
Architecture: $arch
Maintainer: tapflow <tapflow@localhost>
Installed-Size: $(du -sk --exclude=DEBIAN "$stage" | cut -f1)
Depends: libc6, libgcc-s1, adduser
Recommends: libpcap0.8
Section: net
Priority: optional
Homepage: https://github.com/tapflow/tapflow
Description: line-rate passive network monitor
 Captures packet headers from TPACKET_V3 rings into pcapng, forwards them to
 receivers, meters flows and exports them as IPFIX or NetFlow, with rules,
 statistics, Prometheus metrics and a Nagios plugin.
CONTROL
(cd "$stage" && find etc -type f -printf '/%p\n') >"$stage/DEBIAN/conffiles"

cat >"$stage/DEBIAN/postinst" <<'POSTINST'
#!/bin/sh
set -e
# Into another root (dpkg --instdir, DPKG_ROOT) the host's users are left alone.
if [ "$1" = configure ] && [ -z "$DPKG_ROOT" ]; then
    if ! getent passwd tapflow >/dev/null; then
        adduser --system --group --home /var/lib/tapflow --no-create-home \
            --shell /usr/sbin/nologin --quiet tapflow
    fi
    if [ -d /run/systemd/system ]; then
        systemctl daemon-reload >/dev/null || true
    fi
fi
POSTINST
cat >"$stage/DEBIAN/postrm" <<'POSTRM'
#!/bin/sh
set -e
if [ "$1" = purge ] && [ -z "$DPKG_ROOT" ]; then
    rm -rf /var/lib/tapflow /run/tapflow
    if getent passwd tapflow >/dev/null; then
        deluser --system --quiet tapflow || true
    fi
fi
if [ -d /run/systemd/system ] && [ -z "$DPKG_ROOT" ]; then
    systemctl daemon-reload >/dev/null || true
fi
POSTRM
chmod 0755 "$stage/DEBIAN/postinst" "$stage/DEBIAN/postrm"

mkdir -p "$out"
deb=$out/tapflow_${version}_${arch}.deb
dpkg-deb --root-owner-group -Zgzip --build "$stage" "$deb" >&2
echo "$deb"
