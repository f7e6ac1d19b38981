#!/usr/bin/env python3
"""Rule-matching benchmark: what rules cost per packet, offline, against libpcap's filter in
tcpdump on the same trace, one core, same run.

    python3 bench/rules.py                 # bench/out/big.pcap (built if missing), 3 runs each
    python3 bench/rules.py --runs 5 --sizes 10,100,1000,10000

Rule sets of N rules are drawn from the trace's own flows (so that a real share of the packets
match): rule k is `rK proto tcp|udp dst A.B.C.0/24 dport P both` for the k-th distinct flow seen
by `tcpdump -nn -c 300000`. The same rules as a tcpdump expression are
`(ip proto 6 and dst net A.B.C.0/24 and dst portrange P-P) or (... reverse ...) or ...`, exactly
what `Rule::to_pcap` writes and the engine's oracle test compares against libpcap.

Timed, each pinned with taskset to one CPU, median of --runs after one untimed warm-up:

  tapflow none    tapflow capture -r T -q                  (no rules: every packet recorded)
  tapflow 0       tapflow capture -r T -q --rules 0.rules  (an empty rule set: every packet
                  parsed and refused at once; the baseline of the "ns/packet" column)
  tapflow N       tapflow capture -r T -q --rules N.rules  (exact match in user space)
  tcpdump N       tcpdump -r T -w /dev/null EXPR           (libpcap's optimized cBPF, interpreted)

CPU is user+sys from wait4. The packets each side keeps are counted once, untimed (tapflow's
summary JSON; tcpdump -w FILE then capinfos) and must be equal. tcpdump's optimizer takes minutes
on expressions of thousands of terms, so tcpdump runs only up to --tcpdump-max rules. Writes
bench/out/rules.md and bench/out/rules.csv, draws docs/img/rules.svg (plot.py; --img elsewhere)
and prints the table.
"""

from __future__ import annotations

import argparse
import atexit
import csv
import datetime
import json
import os
import platform
import re
import shutil
import subprocess
import sys
from pathlib import Path

sys.dont_write_bytecode = True  # no __pycache__ in the source tree
sys.path.insert(0, str(Path(__file__).resolve().parent))
import benchlib as bl  # noqa: E402
import plot  # noqa: E402

FLOW = re.compile(r" IP (\d+\.\d+\.\d+)\.\d+\.(\d+) > (\d+\.\d+\.\d+)\.\d+\.(\d+): (Flags|UDP)")


def flows(trace: Path, want: int) -> list[tuple[str, str, int]]:
    """Distinct (proto, dst /24, dport) of the first packets, in order of appearance."""
    out = subprocess.run(["tcpdump", "-nn", "-r", str(trace), "-c", "300000", "ip"],
                         capture_output=True, text=True).stdout
    seen: dict[tuple[str, str, int], None] = {}
    for m in FLOW.finditer(out):
        proto = "tcp" if m.group(5) == "Flags" else "udp"
        seen.setdefault((proto, m.group(3) + ".0", int(m.group(4))), None)
    keys = list(seen)
    if len(keys) < want:
        # Not enough flows: widen with made-up ones that match nothing.
        keys += [("udp", f"10.{i // 256 % 256}.{i % 256}.0", 1 + i % 60000) for i in range(want - len(keys))]
    return keys[:want]


def rule_files(work: Path, trace: Path, sizes: list[int]) -> dict[int, tuple[Path, str]]:
    keys = flows(trace, max(sizes))
    sets = {}
    for n in sizes:
        lines, terms = [], []
        for k, (proto, net, port) in enumerate(keys[:n]):
            lines.append(f"r{k} proto {proto} dst {net}/24 dport {port} both")
            p = 6 if proto == "tcp" else 17
            terms.append(f"(ip proto {p} and dst net {net}/24 and dst portrange {port}-{port})"
                         f" or (ip proto {p} and src net {net}/24 and src portrange {port}-{port})")
        path = work / f"{n}.rules"
        path.write_text("\n".join(lines) + "\n")
        sets[n] = (path, " or ".join(terms))
    return sets


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--trace", default=None, help="trace (default bench/out/big.pcap, built if missing)")
    ap.add_argument("--sizes", default="10,100,1000,10000", help="rule set sizes")
    ap.add_argument("--tcpdump-max", type=int, default=100, help="largest set tcpdump is given")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--cpu", type=int, default=1)
    ap.add_argument("--tapflow", dest="tapflow_bin", default=None)
    ap.add_argument("--out", default=str(bl.REPO / "bench" / "out"))
    ap.add_argument("--img", default=str(plot.IMG), help="where the plot goes (default docs/img)")
    args = ap.parse_args()
    bl.need("tcpdump", "capinfos", "taskset")
    outdir = Path(args.out)
    outdir.mkdir(parents=True, exist_ok=True)
    trace = Path(args.trace) if args.trace else outdir / "big.pcap"
    if not trace.exists():
        r = subprocess.run([str(bl.REPO / "scripts" / "make-trace.sh"), str(trace), "1000000"])
        if r.returncode != 0:
            bl.die("make-trace.sh failed")
    tapflow = bl.tapflow_path(args.tapflow_bin)
    n_in = bl.capinfos_count(trace)
    sizes = [int(x) for x in args.sizes.split(",")]
    sizes = [0] + [n for n in sizes if n > 0]
    work = outdir / f"rules-work-{os.getpid()}"
    work.mkdir()
    atexit.register(shutil.rmtree, work, True)
    others = set(os.sched_getaffinity(0)) - {args.cpu}
    if others:
        os.sched_setaffinity(0, others)
    sets = rule_files(work, trace, sizes)
    pin = ["taskset", "-c", str(args.cpu)]
    summary = work / "sum.json"
    cmds: dict[str, list[str]] = {"tapflow none": [str(tapflow), "capture", "-r", str(trace), "-q", "-w", "/dev/null"]}
    for n in sizes:
        cmds[f"tapflow {n}"] = [str(tapflow), "capture", "-r", str(trace), "-q", "-w", "/dev/null", "--rules", str(sets[n][0])]
        if 0 < n <= args.tcpdump_max:
            cmds[f"tcpdump {n}"] = ["tcpdump", "-r", str(trace), "-w", "/dev/null", sets[n][1]]

    # Untimed: what each keeps.
    kept: dict[str, int] = {}
    for name, argv in cmds.items():
        if name.startswith("tapflow"):
            f = bl.run(argv + ["--summary-json", str(summary)], work, "count")
            if f.rc != 0:
                bl.die(f"{name} failed: {f.stderr.strip()}")
            kept[name] = json.loads(summary.read_text())["recorded"]
        else:
            out = work / "kept.pcap"
            f = bl.run(argv[:3] + ["-w", str(out), argv[-1]], work, "count")
            if f.rc != 0:
                bl.die(f"{name} failed: {f.stderr.strip()}")
            kept[name] = bl.capinfos_count(out)
            out.unlink()
    for n in sizes:
        if f"tcpdump {n}" in kept and kept[f"tcpdump {n}"] != kept[f"tapflow {n}"]:
            bl.die(f"{n} rules: tcpdump keeps {kept[f'tcpdump {n}']}, tapflow {kept[f'tapflow {n}']}")

    cpu: dict[str, list[float]] = {k: [] for k in cmds}
    for run in range(args.runs + 1):
        for name, argv in cmds.items():
            f = bl.run(pin + argv, work, "t")
            if f.rc != 0:
                bl.die(f"{name} failed: {f.stderr.strip()}")
            if run > 0:
                cpu[name].append(f.cpu)
    med = {k: bl.median(v) for k, v in cpu.items()}
    base = med["tapflow 0"]
    lines = [
        f"Trace {trace.name}: {n_in} packets. CPU seconds (user+sys, median of {args.runs}, one core).",
        "",
        "| rules | kept | tapflow CPU-s | ns/packet matching | tcpdump CPU-s | tcpdump / tapflow |",
        "|---:|---:|---:|---:|---:|---:|",
        f"| none | {kept['tapflow none']} | {med['tapflow none']:.3f} | – | – | – |",
        f"| 0 | 0 | {base:.3f} | (baseline) | – | – |",
    ]
    for n in sizes[1:]:
        t = med[f"tapflow {n}"]
        per = (t - base) * 1e9 / n_in
        td = med.get(f"tcpdump {n}")
        lines.append(f"| {n} | {kept[f'tapflow {n}']} | {t:.3f} | {per:.1f} | "
                     + (f"{td:.3f} | {td / t:.2f}× |" if td else "not run | – |"))
    text = "\n".join(lines) + "\n"
    (outdir / "rules.md").write_text(text)
    data = [{"rules": "none", "kept": kept["tapflow none"], "tapflow_cpu_s": round(med["tapflow none"], 4),
             "ns_per_packet": "", "tcpdump_cpu_s": ""}]
    for n in sizes:
        t, td = med[f"tapflow {n}"], med.get(f"tcpdump {n}")
        data.append({"rules": str(n), "kept": kept[f"tapflow {n}"], "tapflow_cpu_s": round(t, 4),
                     "ns_per_packet": round((t - base) * 1e9 / n_in, 1) if n else "",
                     "tcpdump_cpu_s": round(td, 4) if td else ""})
    csv_path = outdir / "rules.csv"
    with open(csv_path, "w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=list(data[0].keys()))
        w.writeheader()
        w.writerows(data)
    made = plot.plot_rules(csv_path, Path(args.img),
                           f"{trace.name}: {n_in:,} packets, median of {args.runs}, taskset -c {args.cpu}; "
                           f"{platform.release()}, {datetime.date.today().isoformat()}")
    print(text)
    print(f"wrote {', '.join(map(str, [outdir / 'rules.md', csv_path, *made]))}")


if __name__ == "__main__":
    main()
