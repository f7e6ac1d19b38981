#!/usr/bin/env bash
# Build a big, deterministic benchmark trace from the real captures in the shared corpus.
#
#   scripts/make-trace.sh OUT.pcap [N_MIN=1000000]
#
# How the trace is made (say this wherever its numbers are quoted):
#   1. a "unit" = these Ethernet (EN10MB) corpus captures, concatenated with mergecap -a, each one
#      rebased in time (editcap -t) to start 1 s after the previous one ends:
#        composite-nfstream-163apps-backtoback, ustc-tfc2016-tinba-malware,
#        stopddos-amp-tcp-reflection-synack, stratosphere-slips-test-cc-capture-1,
#        ndpi-gnutella, nfstream-skype
#      (73,108 packets, ~21k bidirectional 5-tuple flows, ~11 h of capture time; the composite
#      member is not in strict time order, as delivered).
#   2. copy K (K = 1..n, n = ceil(N_MIN / unit packets)) = `tcprewrite --seed=K` of the unit (every
#      IPv4/IPv6 address remapped by a seed-dependent bijection, so each copy has its own flows;
#      packet lengths and payloads unchanged), shifted in time by (K-1) x unit span with editcap -t.
#   3. mergecap -a of the copies, classic pcap, microsecond timestamps.
# Same inputs and tool versions => byte-identical output. Prints packets, bytes and flows
# (bidirectional 5-tuple, counted by a small stdlib-Python pcap reader: tshark takes minutes here).
#
# Corpus: $TAPFLOW_CORPUS, else <repo>/../shared/corpus.
set -euo pipefail

usage() { echo "usage: $0 OUT.pcap [N_MIN=1000000]" >&2; exit 2; }
[[ $# -ge 1 && $# -le 2 ]] || usage
out=$1
n_min=${2:-1000000}
[[ $n_min =~ ^[0-9]+$ && $n_min -gt 0 ]] || { echo "make-trace: N_MIN must be a positive integer" >&2; exit 2; }

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
corpus=${TAPFLOW_CORPUS:-$here/../../shared/corpus}
[[ -d $corpus ]] || { echo "make-trace: corpus not found at $corpus (set TAPFLOW_CORPUS)" >&2; exit 1; }
for tool in tcprewrite editcap mergecap capinfos python3; do
    command -v "$tool" >/dev/null || { echo "make-trace: $tool not installed (run scripts/install-deps.sh)" >&2; exit 1; }
done

members=(
    composite-nfstream-163apps-backtoback.pcap
    ustc-tfc2016-tinba-malware.pcap
    stopddos-amp-tcp-reflection-synack.pcap
    stratosphere-slips-test-cc-capture-1.pcap
    ndpi-gnutella.pcap
    nfstream-skype.pcap
)

outdir=$(dirname -- "$out")
mkdir -p -- "$outdir"
work=$(mktemp -d "${outdir%/}/.make-trace.XXXXXX")
trap 'rm -rf -- "$work"' EXIT

# Microsecond arithmetic on "seconds.micro" strings, in python to avoid float rounding.
# usecs_of "1577836800.000000" -> 1577836800000000
usecs_of() { python3 -c 'import sys; s=sys.argv[1]; a,_,b=s.partition("."); print(int(a)*10**6+int((b+"000000")[:6]) if not a.startswith("-") else -(int(a[1:])*10**6+int((b+"000000")[:6])))' "$1"; }
secs_of() { python3 -c 'import sys; v=int(sys.argv[1]); s="-" if v<0 else ""; v=abs(v); print(f"{s}{v//10**6}.{v%10**6:06d}")' "$1"; }

# 1. the unit: members rebased back to back from 2024-01-01T00:00:00Z.
t=$((1704067200 * 1000000))
parts=()
i=0
for m in "${members[@]}"; do
    f=$corpus/$m
    [[ -r $f ]] || { echo "make-trace: missing corpus file $f" >&2; exit 1; }
    read -r _ first last < <(capinfos -T -r -a -e -S "$f")
    s=$(usecs_of "$first")
    e=$(usecs_of "$last")
    p=$work/m$i.pcap
    editcap -F pcap -t "$(secs_of $((t - s)))" "$f" "$p"
    parts+=("$p")
    t=$((t + (e - s) + 1000000))
    i=$((i + 1))
done
unit=$work/unit.pcap
mergecap -F pcap -a -w "$unit" "${parts[@]}"
rm -f -- "${parts[@]}"
read -r _ unit_pkts < <(capinfos -T -r -c "$unit")
span=$((t - 1704067200 * 1000000))

# 2. copies with remapped addresses, shifted in time.
copies=$(((n_min + unit_pkts - 1) / unit_pkts))
cfiles=()
for ((k = 1; k <= copies; k++)); do
    r=$work/r$k.pcap
    c=$work/c$k.pcap
    tcprewrite --seed="$k" -i "$unit" -o "$r" 2>/dev/null
    editcap -F pcap -t "$(secs_of $(((k - 1) * span)))" "$r" "$c"
    rm -f -- "$r"
    cfiles+=("$c")
done

# 3. concatenate.
mergecap -F pcap -a -w "$work/big.pcap" "${cfiles[@]}"
rm -f -- "${cfiles[@]}"
mv -f -- "$work/big.pcap" "$out"

# Report: packets, bytes, bidirectional 5-tuple flows.
python3 - "$out" <<'PY'
import mmap, struct, sys

path = sys.argv[1]
with open(path, "rb") as fh:
    mm = mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ)
magic = mm[:4]
if magic in (b"\xd4\xc3\xb2\xa1", b"\x4d\x3c\xb2\xa1"):
    e = "<"
elif magic in (b"\xa1\xb2\xc3\xd4", b"\xa1\xb2\x3c\x4d"):
    e = ">"
else:
    sys.exit("make-trace: not a classic pcap file")
linktype = struct.unpack_from(e + "I", mm, 20)[0] & 0x0FFFFFFF
rec = struct.Struct(e + "IIII")
u16 = struct.Struct("!H").unpack_from
flows = set()
packets = nbytes = nonip = 0
off, end = 24, len(mm)
EXT6 = {0, 43, 60}
while off + 16 <= end:
    _, _, caplen, wirelen = rec.unpack_from(mm, off)
    off += 16
    d = mm[off:off + caplen]
    off += caplen
    packets += 1
    nbytes += wirelen
    if linktype != 1 or len(d) < 14:
        nonip += 1
        continue
    et, p = u16(d, 12)[0], 14
    while et in (0x8100, 0x88A8, 0x9100) and len(d) >= p + 4:
        et, p = u16(d, p + 2)[0], p + 4
    key = None
    if et == 0x0800 and len(d) >= p + 20:
        ihl = (d[p] & 0x0F) * 4
        proto = d[p + 9]
        a, b = d[p + 12:p + 16], d[p + 16:p + 20]
        frag = u16(d, p + 6)[0] & 0x1FFF
        l4 = p + ihl
        ports = (0, 0)
        if proto in (6, 17, 132) and frag == 0 and len(d) >= l4 + 4:
            ports = (u16(d, l4)[0], u16(d, l4 + 2)[0])
        key = (proto, a, b, ports)
    elif et == 0x86DD and len(d) >= p + 40:
        nh = d[p + 6]
        a, b = d[p + 8:p + 24], d[p + 24:p + 40]
        l4 = p + 40
        while nh in EXT6 and len(d) >= l4 + 8:
            nh, l4 = d[l4], l4 + (d[l4 + 1] + 1) * 8
        ports = (0, 0)
        if nh in (6, 17, 132) and len(d) >= l4 + 4:
            ports = (u16(d, l4)[0], u16(d, l4 + 2)[0])
        key = (nh, a, b, ports)
    if key is None:
        nonip += 1
        continue
    proto, a, b, (sp, dp) = key
    if (a, sp) > (b, dp):
        a, b, sp, dp = b, a, dp, sp
    flows.add((proto, a, b, sp, dp))
print(f"make-trace: {path}: {packets} packets, {nbytes} bytes on the wire, "
      f"{len(flows)} bidirectional 5-tuple flows ({nonip} non-IP packets)")
PY
