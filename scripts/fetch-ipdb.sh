#!/usr/bin/env bash
# Fetches the default enrichment data with the npm package client (never at run time) into
# /var/cache/tapflow/ipdb (or $TAPFLOW_IPDB, or DIR):
#   country.mmdb  @ip-location-db/geo-whois-asn-country-mmdb (CC0-1.0): country by address
#   asn.csv       @ip-location-db/asn (CC BY 4.0: RouteViews, DB-IP): AS number and name by range
#   SOURCES       one line per file: file, package@version, licence, fetch date
# with each package's licence files beside them. `tapflow doctor` shows SOURCES. Needs npm.
#
#   scripts/fetch-ipdb.sh [DIR]
set -euo pipefail
dir=${1:-${TAPFLOW_IPDB:-/var/cache/tapflow/ipdb}}
COUNTRY=@ip-location-db/geo-whois-asn-country-mmdb@2.3.2026061719
ASN=@ip-location-db/asn@2.3.2026061719
if [[ -f $dir/country.mmdb && -f $dir/asn.csv ]] && grep -qF "$COUNTRY" "$dir/SOURCES" 2>/dev/null &&
    grep -qF "$ASN" "$dir/SOURCES"; then
    exit 0
fi
command -v npm >/dev/null 2>&1 || {
    echo "fetch-ipdb: npm not found (apt-get install npm, or run scripts/install-deps.sh)" >&2
    exit 1
}
mkdir -p "$dir"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
(cd "$tmp" && npm pack --silent "$COUNTRY" "$ASN" >/dev/null </dev/null)
mkdir "$tmp/country" "$tmp/asn"
tar -xzf "$tmp"/ip-location-db-geo-whois-asn-country-mmdb-*.tgz -C "$tmp/country"
tar -xzf "$tmp"/ip-location-db-asn-*.tgz -C "$tmp/asn"
licence() { sed -n 's/^ *"license": *"\(.*\)",*$/\1/p' "$1/package/package.json"; }
today=$(date -u +%F)
cp "$tmp/country/package/geo-whois-asn-country.mmdb" "$dir/country.mmdb.part"
cat "$tmp/asn/package/asn-ipv4.csv" "$tmp/asn/package/asn-ipv6.csv" >"$dir/asn.csv.part"
for f in "$tmp"/asn/package/*LICENSE; do cp "$f" "$dir/asn-$(basename "$f")"; done
for f in "$tmp"/country/package/*LICENSE; do cp "$f" "$dir/country-$(basename "$f")"; done
mv "$dir/country.mmdb.part" "$dir/country.mmdb"
mv "$dir/asn.csv.part" "$dir/asn.csv"
{
    echo "country.mmdb $COUNTRY $(licence "$tmp/country") fetched $today"
    echo "asn.csv $ASN $(licence "$tmp/asn") fetched $today"
} >"$dir/SOURCES"
echo "fetch-ipdb: $COUNTRY and $ASN in $dir"
