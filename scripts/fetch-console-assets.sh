#!/usr/bin/env bash
# Fetches the console's charting library (uPlot, MIT) with the npm package client into
# crates/console/vendor (or DIR): uPlot.esm.js and uPlot.min.css. Needs npm (Debian's `npm`).
#
#   scripts/fetch-console-assets.sh [DIR]
set -euo pipefail
cd "$(dirname "$0")/.."
VERSION=1.6.32
dir=${1:-crates/console/vendor}
if [[ -f $dir/uPlot.esm.js && -f $dir/uPlot.min.css ]] && grep -q "$VERSION" "$dir/VERSION" 2>/dev/null; then
    exit 0
fi
mkdir -p "$dir"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
command -v npm >/dev/null 2>&1 || {
    echo "fetch-console-assets: npm not found (apt-get install npm, or run scripts/install-deps.sh)" >&2
    exit 1
}
(cd "$tmp" && npm pack --silent "uplot@$VERSION" >/dev/null </dev/null)
tar -xzf "$tmp/uplot-$VERSION.tgz" -C "$tmp"
cp "$tmp/package/dist/uPlot.esm.js" "$tmp/package/dist/uPlot.min.css" "$tmp/package/LICENSE" "$dir/"
echo "uplot $VERSION" >"$dir/VERSION"
echo "fetch-console-assets: uPlot $VERSION in $dir"
