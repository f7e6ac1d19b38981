#!/usr/bin/env bash
# Installs tapflow: the binary, the man pages and shell completions (bash, zsh, fish) made from
# its own command-line definitions, the systemd units and example configuration files.
#
#   sudo scripts/install.sh                      # build (release) and install under /usr/local
#   scripts/install.sh --prefix /usr --destdir /tmp/stage --bin target/release/tapflow
#
# --destdir stages the files for a package (scripts/package-deb.sh) and changes nothing else.
# Without it, run as root, it also creates the system user `tapflow` the units run as and
# reloads systemd.
set -euo pipefail
cd "$(dirname "$0")/.."

prefix=/usr/local
destdir=""
bin=""
usage() {
    echo "usage: scripts/install.sh [--prefix DIR] [--destdir DIR] [--bin PATH]" >&2
    exit 2
}
while (($#)); do
    case $1 in
    --prefix) prefix=${2:?}; shift 2 ;;
    --destdir) destdir=${2:?}; shift 2 ;;
    --bin) bin=${2:?}; shift 2 ;;
    -h | --help) usage ;;
    *) echo "install: unknown option $1" >&2; usage ;;
    esac
done

if [[ -z $bin ]]; then
    scripts/fetch-console-assets.sh # the console's charting library, compiled into the binary
    cargo build --release --locked -p tapflow
    bin=${CARGO_TARGET_DIR:-target}/release/tapflow
fi
[[ -x $bin ]] || { echo "install: no tapflow binary at $bin" >&2; exit 1; }

root=${destdir%/}
# Units live with the package manager's files under /usr, with the admin's otherwise.
if [[ $prefix == /usr ]]; then
    unitdir=/usr/lib/systemd/system
    zshdir=$prefix/share/zsh/vendor-completions
else
    unitdir=/etc/systemd/system
    zshdir=$prefix/share/zsh/site-functions
fi

install -D -m 0755 "$bin" "$root$prefix/bin/tapflow"

man=$root$prefix/share/man/man1
install -d "$man"
"$bin" generate man "$man"
gzip -9nf "$man"/tapflow*.1

install -d "$root$prefix/share/bash-completion/completions" "$root$zshdir" \
    "$root$prefix/share/fish/vendor_completions.d"
"$bin" generate completions bash >"$root$prefix/share/bash-completion/completions/tapflow"
"$bin" generate completions zsh >"$root$zshdir/_tapflow"
"$bin" generate completions fish >"$root$prefix/share/fish/vendor_completions.d/tapflow.fish"

install -d "$root$unitdir"
for u in dist/systemd/*.service; do
    sed "s|/usr/bin/tapflow|$prefix/bin/tapflow|g" "$u" >"$root$unitdir/$(basename "$u")"
    chmod 0644 "$root$unitdir/$(basename "$u")"
done

install -d -m 0755 "$root/etc/tapflow"
for c in dist/config/*.example; do
    install -m 0644 "$c" "$root/etc/tapflow/$(basename "$c")"
done

if [[ -z $destdir && $(id -u) -eq 0 ]]; then
    if ! getent passwd tapflow >/dev/null; then
        useradd --system --user-group --home-dir /var/lib/tapflow --no-create-home \
            --shell /usr/sbin/nologin tapflow
    fi
    if [[ -d /run/systemd/system ]]; then
        systemctl daemon-reload
    fi
fi
echo "install: tapflow $("$bin" --version | cut -d' ' -f2) in $root$prefix (units in $root$unitdir)"
