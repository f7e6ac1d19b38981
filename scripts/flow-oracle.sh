#!/usr/bin/env bash
# Per-flow reference records for a pcap from an independent flow meter, as a normalised CSV that a
# test can compare with `tapflow flows -r PCAP --csv -` flow by flow.
#
#   scripts/flow-oracle.sh [--tool nfpcapd|argus] [--mode records|per-key|biflow]
#                          [--active S] [--idle S] PCAP [OUT.csv|-]
#   scripts/flow-oracle.sh [--active S] [--idle S] [--fields LIST] --compare TAPFLOW.csv PCAP
#
# --compare: also reads `tapflow flows --csv` output for the same pcap and checks it against the
# oracle per bidirectional 5-tuple (both sides summed over all their records, each direction apart):
# packets, bytes, first_ms (tapflow's first_ns // 1e6), last_ms, tcp_flags (low 8 bits only: nfdump
# keeps no more; tapflow also reports NS and the reserved bits) and that `src` is the initiator where
# the oracle knows it (dir_tie 0). --fields restricts the checks (comma list from
# packets,bytes,first,last,flags,initiator; default all). Prints the differences, exits 1 if any.
# Known, expected differences against nfpcapd 1.7.1 (not tapflow errors):
#   - IPv6 with extension headers (e.g. MLD with Hop-by-Hop): nfpcapd keys them as protocol 0;
#   - IPv4 fragments: nfpcapd counts the reassembled datagram (1 packet, its length), tapflow the
#     fragments as seen (N packets, sum of their IP lengths); nfpcapd drops out-of-order fragments.
#
# Output (one header line, rows sorted by first_ms, then the key; times are Unix epoch ms):
#   proto,src,sport,dst,dport,packets,bytes,first_ms,last_ms,tcp_flags,
#   rev_packets,rev_bytes,rev_first_ms,rev_last_ms,rev_tcp_flags,records,dir_tie
# proto is the IP protocol number; addresses as Python's ipaddress prints them (IPv6 compressed);
# ICMP/ICMPv6: sport 0, dport = type<<8 | code (like tapflow); tcp_flags = OR of the TCP flags
# (FIN 1, SYN 2, RST 4, PSH 8, ACK 16, URG 32, ECE 64, CWR 128); records = how many of the tool's
# records were merged into the row; dir_tie = 1 when both directions have the same first_ms, so which
# side is `src` (the initiator) is a guess (lower address first).
#
# --tool nfpcapd (default; nfdump 1.7.1): `nfpcapd -r PCAP -w DIR -t 86400 -e ACTIVE,IDLE`, read back
#   with `nfdump -6 -N -q -o fmt:...` (TZ=UTC). nfpcapd meters ONE DIRECTION per record (nfdump's
#   "out" counters stay 0), counts IP total length (IPv6: payload length + 40), keeps ms times
#   (truncated), and:
#     - writes every ICMP/ICMPv6 packet and every UDP packet to or from port 53 as its own record;
#     - applies the timeouts by a sweep every ~10 s of packet time (a gap must exceed the idle timeout
#       by up to 10 s to split a flow; records run up to ~10 s past the active timeout);
#     - accepts at most 3600 s for either timeout; does NOT end TCP flows on FIN/RST (1.7.1);
#     - skips non-IP, reassembles IPv4 fragments (one packet per datagram; out-of-order fragments were
#       lost in tests), decapsulates 6in4/IP-in-IP into inner flows (plus 0-packet outer records).
#   Modes: records = nfpcapd's records as they are (rev_* 0); per-key = records with the same
#   directional 5-tuple summed (undoes the DNS/ICMP per-packet records and timeout splits); biflow
#   (default) = per-key rows paired with their reverse key (swapped addresses and ports; ICMP: swapped
#   addresses, same type/code), src = the direction seen first.
#   Default timeouts 3600/3600: run tapflow with --active-timeout 3600 --idle-timeout 3600
#   --idle-timeout closed=3600 on pcaps shorter than an hour and every row should match exactly.
# --tool argus (argus 3.0.8.2): `argus -X -F CONF -r PCAP -w FILE` with Bidirectional/CLASSIC_5_TUPLE,
#   status interval = ACTIVE, every *_TIMEOUT = IDLE; `ra -nn -u -p 6` of the IP records.
#   Bidirectional with argus's own idea of the initiator, but BYTES ARE FRAME LENGTHS (link header and
#   Ethernet padding included), times are per biflow only (rev_first_ms/rev_last_ms = first/last),
#   ICMP: argus pairs echo request and reply and shows type (sport) and id, not code: dport = type<<8.
#   Modes: records (default for argus) or per-key (status records of one biflow summed).
#
# Needs nfdump (or argus-server + argus-client) and python3; see scripts/install-deps.sh.
set -euo pipefail

usage() {
    sed -n '2,/^set -euo/p' "${BASH_SOURCE[0]}" | sed '$d; s/^# \{0,1\}//' >&2
    exit 2
}

tool=nfpcapd
mode=
compare=
fields=packets,bytes,first,last,flags,initiator
active=3600
idle=3600
while [[ $# -gt 0 ]]; do
    case $1 in
        --tool) tool=${2:?}; shift 2 ;;
        --mode) mode=${2:?}; shift 2 ;;
        --active) active=${2:?}; shift 2 ;;
        --idle) idle=${2:?}; shift 2 ;;
        --compare) compare=${2:?}; shift 2 ;;
        --fields) fields=${2:?}; shift 2 ;;
        -h | --help) usage ;;
        --) shift; break ;;
        -*) echo "flow-oracle: unknown option $1" >&2; usage ;;
        *) break ;;
    esac
done
[[ $# -ge 1 && $# -le 2 ]] || usage
pcap=$1
out=${2:--}
if [[ -n $compare ]]; then
    [[ -r $compare ]] || { echo "flow-oracle: cannot read $compare" >&2; exit 1; }
    [[ $# -eq 1 ]] || out=$2
    [[ $# -eq 2 ]] || out=/dev/null
    if [[ $tool == argus ]]; then mode=per-key; else mode=biflow; fi
fi
[[ -r $pcap ]] || { echo "flow-oracle: cannot read $pcap" >&2; exit 1; }
[[ $active =~ ^[0-9]+$ && $idle =~ ^[0-9]+$ ]] || { echo "flow-oracle: timeouts are whole seconds" >&2; exit 2; }
case $tool in
    nfpcapd) mode=${mode:-biflow}; need=(nfpcapd nfdump python3)
        ((active <= 3600 && idle <= 3600)) || { echo "flow-oracle: nfpcapd allows at most 3600 s per timeout" >&2; exit 2; } ;;
    argus) mode=${mode:-records}; need=(argus ra python3)
        [[ $mode != biflow ]] || { echo "flow-oracle: argus records are already bidirectional: use records or per-key" >&2; exit 2; } ;;
    *) echo "flow-oracle: --tool is nfpcapd or argus" >&2; exit 2 ;;
esac
case $mode in records | per-key | biflow) ;; *) echo "flow-oracle: --mode is records, per-key or biflow" >&2; exit 2 ;; esac
for t in "${need[@]}"; do
    command -v "$t" >/dev/null || { echo "flow-oracle: $t not installed (run scripts/install-deps.sh)" >&2; exit 1; }
done

work=$(mktemp -d "${TMPDIR:-/tmp}/flow-oracle.XXXXXX")
trap 'rm -rf -- "$work"' EXIT

if [[ $tool == nfpcapd ]]; then
    mkdir "$work/nf"
    if ! nfpcapd -r "$pcap" -w "$work/nf" -t 86400 -e "$active,$idle" >"$work/log" 2>&1; then
        cat "$work/log" >&2
        exit 1
    fi
    # %ts/%te are correct to the ms (%ter is not, in 1.7.1); -6: full IPv6; -N: plain numbers.
    TZ=UTC nfdump -R "$work/nf" -q -6 -N \
        -o 'fmt:%ts|%te|%pr|%sa|%sp|%da|%dp|%ipkt|%ibyt|%opkt|%obyt|%flg' >"$work/raw"
else
    {
        echo 'ARGUS_FLOW_TYPE="Bidirectional"'
        echo 'ARGUS_FLOW_KEY="CLASSIC_5_TUPLE"'
        echo "ARGUS_FLOW_STATUS_INTERVAL=$active"
        for p in IP TCP ICMP IGMP FRAG ARP OTHER; do echo "ARGUS_${p}_TIMEOUT=$idle"; done
        echo 'ARGUS_SET_PID=no'
    } >"$work/argus.conf"
    # -X: forget /etc/argus.conf (it would also write /var/log/argus/argus.out).
    argus -X -F "$work/argus.conf" -r "$pcap" -w "$work/a.argus" >"$work/log" 2>&1 || { cat "$work/log" >&2; exit 1; }
    ra -r "$work/a.argus" -nn -u -p 6 -c '|' \
        -s stime ltime proto saddr sport daddr dport spkts dpkts sbytes dbytes - 'ip or ipv6' \
        | tail -n +2 >"$work/raw"
fi

python3 - "$tool" "$mode" "$work/raw" "$out" "$compare" "$fields" <<'PY'
import calendar, csv, ipaddress, sys, time

tool, mode, raw, out, compare, fields = sys.argv[1:7]
FLAGS = "CEUAPRSF"  # nfdump's flag string, bit 7 .. bit 0
ICMP = (1, 58)

def ms_of(s):  # "2024-01-01 00:00:03.100" (UTC) -> epoch ms
    day, frac = s.strip().split(".")
    return calendar.timegm(time.strptime(day, "%Y-%m-%d %H:%M:%S")) * 1000 + int(frac)

def flags_of(s):
    s = s.strip()
    if s.isdigit():
        return int(s)
    return sum(1 << (7 - i) for i, c in enumerate(s[:8]) if c != ".")

def ra_ms(s):  # "1704067200.000100" -> epoch ms (truncated, like nfpcapd)
    sec, _, frac = s.strip().partition(".")
    return int(sec) * 1000 + int((frac + "000")[:3])

def num(s):
    s = s.strip()
    return int(s, 16) if s.startswith("0x") else int(s or 0)

def addr(s):
    return str(ipaddress.ip_address(s.strip()))

rows = []  # [proto, src, sport, dst, dport, pk, by, first, last, flg, rpk, rby, rfirst, rlast, rflg, records]
with open(raw) as fh:
    for line in fh:
        f = [x.strip() for x in line.rstrip("\n").split("|")]
        if len(f) < 11:
            continue
        if tool == "nfpcapd":
            ts, te, pr, sa, sp, da, dp, ipk, iby, opk, oby, flg = f[:12]
            proto = int(pr)
            if proto in ICMP:  # nfdump prints type.code
                t, _, c = dp.partition(".")
                sport, dport = 0, int(t) << 8 | int(c or 0)
            else:
                sport, dport = int(sp), int(dp)
            first, last = ms_of(ts), ms_of(te)
            rows.append([proto, addr(sa), sport, addr(da), dport, int(ipk), int(iby), first, last,
                         flags_of(flg) if proto == 6 else 0, int(opk), int(oby),
                         first if int(opk) else 0, last if int(opk) else 0, 0, 1])
        else:
            st, lt, pr, sa, sp, da, dp, spk, dpk, sby, dby = f[:11]
            if not pr.isdigit():
                continue  # management records
            proto = int(pr)
            first, last = ra_ms(st), ra_ms(lt)
            if proto in ICMP:  # argus: sport = type, dport = id (no code)
                sport, dport = 0, num(sp) << 8
            else:
                sport, dport = num(sp), num(dp)
            rows.append([proto, addr(sa), sport, addr(da), dport, int(spk), int(sby), first, last, 0,
                         int(dpk), int(dby), first if int(dpk) else 0, last if int(dpk) else 0, 0, 1])

def merge(a, b):  # b into a, same orientation
    a[5] += b[5]; a[6] += b[6]; a[7] = min(a[7], b[7]); a[8] = max(a[8], b[8]); a[9] |= b[9]
    if b[10]:
        a[12] = min(a[12], b[12]) if a[10] else b[12]
        a[13] = max(a[13], b[13])
    a[10] += b[10]; a[11] += b[11]; a[14] |= b[14]; a[15] += b[15]

if mode in ("per-key", "biflow"):
    keyed = {}
    for r in rows:
        k = tuple(r[:5])
        if k in keyed:
            merge(keyed[k], r)
        else:
            keyed[k] = list(r)
    rows = list(keyed.values())

ties = {}
if mode == "biflow":
    keyed = {tuple(r[:5]): r for r in rows}
    done, paired = set(), []
    for k, r in sorted(keyed.items(), key=lambda kv: (kv[1][7], kv[0])):
        if k in done:
            continue
        p, s, sp, d, dp = k
        rk = (p, d, sp, s, dp) if p in ICMP else (p, d, dp, s, sp)
        done.add(k)
        if rk == k or rk not in keyed or rk in done:
            paired.append(r)
            continue
        done.add(rk)
        rev = keyed[rk]
        fwd, back = (r, rev)
        tie = r[7] == rev[7]
        if tie and (ipaddress.ip_address(rev[1]), rev[2]) < (ipaddress.ip_address(r[1]), r[2]):
            fwd, back = rev, r
        row = list(fwd[:10]) + [back[5], back[6], back[7], back[8], back[9], fwd[15] + back[15]]
        ties[id(row)] = tie
        paired.append(row)
    rows = paired

rows.sort(key=lambda r: (r[7], r[0], r[1], r[2], r[3], r[4]))
fh = sys.stdout if out == "-" else open(out, "w", newline="")
w = csv.writer(fh, lineterminator="\n")
w.writerow(["proto", "src", "sport", "dst", "dport", "packets", "bytes", "first_ms", "last_ms", "tcp_flags",
            "rev_packets", "rev_bytes", "rev_first_ms", "rev_last_ms", "rev_tcp_flags", "records", "dir_tie"])
for r in rows:
    w.writerow(r + [1 if ties.get(id(r)) else 0])
if fh is not sys.stdout:
    fh.close()
print(f"flow-oracle: {tool} {mode}: {len(rows)} rows, {sum(r[5] + r[10] for r in rows)} packets, "
      f"{sum(r[6] + r[11] for r in rows)} bytes", file=sys.stderr)
if not compare:
    sys.exit(0)

# --compare: both sides per bidirectional key, each direction summed over all records.
want = set(fields.split(","))

def canon(proto, a, ap, b, bp):
    # -> (key, forward?) where key orders the two endpoints; ICMP keeps its type/code in the key
    if proto in ICMP:
        ea, eb = (ipaddress.ip_address(a), 0), (ipaddress.ip_address(b), 0)
        k = (proto, min(ea, eb), max(ea, eb), bp)
    else:
        ea, eb = (ipaddress.ip_address(a), ap), (ipaddress.ip_address(b), bp)
        k = (proto, min(ea, eb), max(ea, eb))
    return k, ea <= eb

def add(tab, key, lo_to_hi, pk, by, first, last, flg):
    e = tab.setdefault(key, {"lo": [0, 0, None, None, 0], "hi": [0, 0, None, None, 0], "init": None})
    d = e["lo" if lo_to_hi else "hi"]
    if pk == 0:
        return e
    d[0] += pk; d[1] += by; d[4] |= flg
    d[2] = first if d[2] is None else min(d[2], first)
    d[3] = last if d[3] is None else max(d[3], last)
    return e

ora = {}
for r in rows:
    k, fwd = canon(*r[:5])
    add(ora, k, fwd, r[5], r[6], r[7], r[8], r[9])
    e = add(ora, k, not fwd, r[10], r[11], r[12], r[13], r[14])
    if not (ties.get(id(r)) or 0) and r[10]:
        e["init"] = "lo" if fwd else "hi"

tap, tap_first = {}, {}
with open(compare, newline="") as fh:
    for t in csv.DictReader(fh):
        p = int(t["proto"])
        k, fwd = canon(p, t["src"], int(t["sport"]), t["dst"], int(t["dport"]))
        f0, f1 = int(t["first_ns"]) // 1_000_000, int(t["last_ns"]) // 1_000_000
        # nfdump keeps 8 flag bits; tapflow also reports NS and the reserved bits (up to 0xFFF)
        add(tap, k, fwd, int(t["packets"]), int(t["octets"]), f0, f1, int(t["tcp_flags"]) & 0xFF)
        rp = int(t["rev_packets"])
        add(tap, k, not fwd, rp, int(t["rev_octets"]), int(t["rev_first_ns"]) // 1_000_000,
            int(t["rev_last_ns"]) // 1_000_000, int(t["rev_tcp_flags"]) & 0xFF)
        if k not in tap_first or f0 < tap_first[k][0]:
            tap_first[k] = (f0, "lo" if fwd else "hi")

def show(k):
    if len(k) == 4:
        return f"proto {k[0]} {k[1][0]} <-> {k[2][0]} icmp {k[3] >> 8}/{k[3] & 255}"
    return f"proto {k[0]} {k[1][0]}:{k[1][1]} <-> {k[2][0]}:{k[2][1]}"

names = [("packets", 0), ("bytes", 1), ("first", 2), ("last", 3), ("flags", 4)]
bad = []
for k in sorted(set(ora) | set(tap), key=lambda k: (k[0], str(k[1:]))):
    if k not in tap:
        bad.append(f"only in {tool}: {show(k)} {ora[k]['lo'][:2]}/{ora[k]['hi'][:2]}")
        continue
    if k not in ora:
        bad.append(f"only in tapflow: {show(k)} {tap[k]['lo'][:2]}/{tap[k]['hi'][:2]}")
        continue
    for side, label in (("lo", "lower->higher"), ("hi", "higher->lower")):
        a, b = ora[k][side], tap[k][side]
        for name, i in names:
            if name in want and not (name == "flags" and k[0] != 6) and a[i] != b[i]:
                bad.append(f"{show(k)} {label} {name}: {tool} {a[i]} tapflow {b[i]}")
    if "initiator" in want and ora[k]["init"] and tap_first[k][1] != ora[k]["init"]:
        bad.append(f"{show(k)} initiator: {tool} says the {'lower' if ora[k]['init'] == 'lo' else 'higher'} "
                   f"endpoint, tapflow's first record says the other")
n = len(set(ora) & set(tap))
print(f"flow-oracle: compared {n} bidirectional flows ({len(ora)} from {tool}, {len(tap)} from tapflow), "
      f"fields {','.join(sorted(want))}: {len(bad)} differences", file=sys.stderr)
for line in bad[:50]:
    print("  " + line, file=sys.stderr)
if len(bad) > 50:
    print(f"  ... {len(bad) - 50} more", file=sys.stderr)
sys.exit(1 if bad else 0)
PY
