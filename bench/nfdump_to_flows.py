#!/usr/bin/env python3
"""Turns `nfdump -o csv` lines (stdin) into the CSV `tapflow flows --csv` writes (stdout), so
`tapflow import` stores exactly the flows nfdump holds: one one-way record per nfdump record
(reverse counters zero). Records without packets (nfpcapd's tunnel markers) are left out, as
nfdump's statistics leave them out. --copies N writes every flow N times, copy k shifted by k
days (--shift-days)."""
import argparse
import calendar
import sys
import time

PROTOCOLS = {"ICMP": 1, "IGMP": 2, "IPIP": 4, "TCP": 6, "UDP": 17, "IPv6": 41, "GRE": 47,
             "ESP": 50, "AH": 51, "ICMP6": 58, "OSPF": 89, "PIM": 103, "VRRP": 112, "SCTP": 132}
FLAGS = "CEUAPRSF"
HEADER = ("proto,src,sport,dst,dport,vlan,interface,first_ns,last_ns,packets,octets,tcp_flags,"
          "rev_first_ns,rev_last_ns,rev_packets,rev_octets,rev_tcp_flags,end_reason")


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--copies", type=int, default=1)
    ap.add_argument("--shift-days", type=int, default=1)
    a = ap.parse_args()
    rows = []
    for line in sys.stdin:
        f = [x.strip() for x in line.split(",")]
        if len(f) < 17 or f[0] == "ts" or not f[11].isdigit() or int(f[11]) == 0:
            continue
        proto = PROTOCOLS.get(f[7]) if not f[7].isdigit() else int(f[7])
        if proto is None:
            sys.exit(f"unknown protocol {f[7]!r}")
        first = calendar.timegm(time.strptime(f[0], "%Y-%m-%d %H:%M:%S")) * 10**9
        dur = round(float(f[2]) * 1000) * 10**6
        flags = sum(1 << (7 - i) for i, c in enumerate(f[8][:8]) if c != ".")
        rows.append((proto, f[3], f[5], f[4], f[6], first, dur, f[11], f[12], flags))
    out = sys.stdout
    out.write(HEADER + "\n")
    for k in range(a.copies):
        shift = k * a.shift_days * 86400 * 10**9
        for p, src, sp, dst, dp, first, dur, pk, by, fl in rows:
            s = first + shift
            out.write(f"{p},{src},{sp},{dst},{dp},0,0,{s},{s + dur},{pk},{by},{fl},0,0,0,0,0,idle\n")


if __name__ == "__main__":
    main()
