#!/usr/bin/env python3
"""Offline benchmark: cut a big trace to 64-byte headers with tapflow and with editcap.

Builds (or reuses) bench/out/big.pcap with scripts/make-trace.sh (>= 1M packets, >= 200k flows,
deterministic; see that script for how it is made), warms the page cache (topped up before each
run: benchlib.top_up), then times each command best of 3 (wall clock; user+sys from wait4 of
the best run), all pinned to one CPU, the commands taking turns (run 1 of each, then run 2 of
each, ...):

  tapflow capture -r big.pcap -s 64 -w out.pcapng -q                  (pcapng, the default)
  tapflow capture -r big.pcap -s 64 -w out.pcap --format pcap -q      (classic ns pcap)
  editcap -s 64 big.pcap out.pcapng                                   (editcap's default: pcapng)
  editcap -F pcap -s 64 big.pcap out.pcap                             (classic pcap)
  editcap -s 64 big.pcap out.pcapng && sync out.pcapng                (output on disk, as tapflow's)

and checks that every output holds as many packets as the input (capinfos) and none longer than
64 bytes. --baseline PATH adds "tapflow-base pcapng", the first command with a second tapflow
binary, beside it in every round (the two take turns at going first), and a table of
tapflow/tapflow-base, for a regression check.

Writes bench/out/offline.csv, draws docs/img/offline.svg (plot.py; --img elsewhere) and prints a
markdown table with speedups over `editcap -s 64`. See bench/README.md.
"""

from __future__ import annotations

import argparse
import csv
import datetime
import os
import platform
import shutil
import subprocess
import sys
from pathlib import Path

sys.dont_write_bytecode = True  # no __pycache__ in the source tree
sys.path.insert(0, str(Path(__file__).resolve().parent))
import benchlib as bl  # noqa: E402
import plot  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--trace", default=None, help="trace to use (default bench/out/big.pcap, built if missing)")
    ap.add_argument("--min-packets", type=int, default=1_000_000, help="make-trace.sh N_MIN (default 1000000)")
    ap.add_argument("--rebuild", action="store_true", help="rebuild the trace even if it exists")
    ap.add_argument("--runs", type=int, default=3, help="runs per command, best is kept (default 3)")
    ap.add_argument("--snaplen", type=int, default=64)
    ap.add_argument("--cpu", type=int, default=1, help="pin every command to this CPU (-1: no pinning)")
    ap.add_argument("--tapflow", dest="tapflow_bin", default=None,
                    help="tapflow binary (default target/release/tapflow)")
    ap.add_argument("--baseline", dest="baseline_bin", default=None, metavar="PATH",
                    help="a second tapflow binary, timed as 'tapflow-base pcapng' beside 'tapflow pcapng'")
    ap.add_argument("--skip-tapflow", action="store_true", help="time only the reference tools")
    ap.add_argument("--out", default=str(bl.REPO / "bench" / "out"), help="output directory")
    ap.add_argument("--img", default=str(plot.IMG), help="where the plot goes (default docs/img)")
    args = ap.parse_args()

    bl.need("editcap", "capinfos")
    if args.cpu >= 0:
        bl.need("taskset")
    outdir = Path(args.out)
    outdir.mkdir(parents=True, exist_ok=True)
    tapflow = bl.tapflow_path(args.tapflow_bin)
    if not args.skip_tapflow and not tapflow.exists():
        bl.die(f"{tapflow} not found: build it (cargo build --release) or use --skip-tapflow")
    baseline = Path(args.baseline_bin).resolve() if args.baseline_bin else None
    if baseline and not baseline.exists():
        bl.die(f"--baseline {baseline} not found")
    if baseline and args.skip_tapflow:
        bl.die("--baseline needs tapflow (drop --skip-tapflow)")

    trace = Path(args.trace) if args.trace else outdir / "big.pcap"
    if args.rebuild or not trace.exists():
        if args.trace and not args.rebuild:
            bl.die(f"{trace} does not exist")
        print(f"# building {trace} with scripts/make-trace.sh", file=sys.stderr)
        r = subprocess.run([str(bl.REPO / "scripts" / "make-trace.sh"), str(trace), str(args.min_packets)])
        if r.returncode != 0:
            bl.die("make-trace.sh failed")
    n_in = bl.capinfos_count(trace)
    size_in = trace.stat().st_size
    print(f"# trace {trace}: {n_in} packets, {size_in / 1e6:.1f} MB", file=sys.stderr)

    work = outdir / f"offline-work-{os.getpid()}"
    work.mkdir()
    import atexit
    atexit.register(shutil.rmtree, work, True)

    snap = str(args.snaplen)
    cmds: list[tuple[str, list[str], str]] = []
    if not args.skip_tapflow:
        cmds += [("tapflow pcapng", [str(tapflow), "capture", "-r", str(trace), "-s", snap, "-w", "{out}", "-q"],
                  "pcapng")]
        if baseline:
            cmds += [("tapflow-base pcapng", [str(baseline), "capture", "-r", str(trace), "-s", snap, "-w",
                                              "{out}", "-q"], "pcapng")]
        cmds += [
            ("tapflow pcap", [str(tapflow), "capture", "-r", str(trace), "-s", snap, "-w", "{out}",
                              "--format", "pcap", "-q"], "pcap"),
        ]
    cmds += [
        ("editcap pcapng", ["editcap", "-s", snap, str(trace), "{out}"], "pcapng"),
        ("editcap pcap", ["editcap", "-F", "pcap", "-s", snap, str(trace), "{out}"], "pcap"),
        # tapflow's time includes putting its output on the disk (direct I/O, fdatasync before
        # the rename); editcap leaves its output dirty in the page cache. The same end state:
        ("editcap pcapng+sync", ["sh", "-c", 'editcap -s "$1" "$2" "$3" && sync "$3"', "sh", snap, str(trace), "{out}"], "pcapng"),
    ]
    pin = ["taskset", "-c", str(args.cpu)] if args.cpu >= 0 else []

    def shown(argv: list[str]) -> str:
        """The command as the table shows it: short names for the trace and the binaries."""
        text = " ".join(argv).replace(str(trace), "big.pcap")
        if baseline:  # first: tapflow's path may be a prefix of the baseline's
            text = text.replace(str(baseline), "tapflow-base")
        return text.replace(str(tapflow), "tapflow")

    # In the page cache as a read from disk leaves it, for every command alike.
    bl.warm(trace)

    best: dict[str, dict] = {}
    for run in range(args.runs):
        order = list(cmds)
        if baseline and run % 2:  # tapflow and tapflow-base take turns at going first
            order[0], order[1] = order[1], order[0]
        for label, argv, ext in order:
            out = work / f"out-{run}.{ext}"
            bl.top_up(trace)
            f = bl.run(pin + [a.replace("{out}", str(out)) for a in argv], work, f"{label.replace(' ', '-')}-{run}")
            if f.rc != 0:
                bl.die(f"{label} failed (exit {f.rc}): {f.stderr.strip()[-400:]}")
            n_out = bl.capinfos_count(out)
            r = subprocess.run(["capinfos", "-T", "-r", "-l", str(out)], capture_output=True, text=True)
            caplen = r.stdout.strip().split("\t")[-1]
            size_out = out.stat().st_size
            out.unlink()
            print(f"  {label:19s} run {run}: {f.wall:7.3f} s wall, {f.cpu:7.3f} s cpu, "
                  f"{n_out} packets, caplen {caplen}", file=sys.stderr)
            if n_out != n_in:
                bl.die(f"{label}: output has {n_out} packets, input {n_in}")
            if label not in best or f.wall < best[label]["wall_s"]:
                best[label] = {"command": label, "wall_s": round(f.wall, 4), "user_s": round(f.utime, 4),
                               "sys_s": round(f.stime, 4), "cpu_s": round(f.cpu, 4), "packets": n_out,
                               "out_bytes": size_out, "caplen_range": caplen,
                               "mpps": round(n_in / f.wall / 1e6, 3),
                               "argv": shown(argv).replace("{out}", f"out.{ext}")}
    rows = [best[label] for label, _, _ in cmds]

    base = next((r for r in rows if r["command"] == "editcap pcapng"), None)
    for r in rows:
        r["speedup_vs_editcap"] = round(base["wall_s"] / r["wall_s"], 2) if base else ""
        r["cpu_ratio_vs_editcap"] = round(base["cpu_s"] / r["cpu_s"], 2) if base and r["cpu_s"] else ""

    csv_path = outdir / "offline.csv"
    with open(csv_path, "w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=list(rows[0].keys()))
        w.writeheader()
        w.writerows(rows)

    note = (f"{n_in:,} packets ({size_in / 1e6:.0f} MB) from scripts/make-trace.sh, snaplen {snap}, "
            f"best of {args.runs}, CPU {args.cpu}, {platform.release()}, {datetime.date.today().isoformat()}")
    made = plot.plot_offline(csv_path, Path(args.img), note)

    print("| command | wall s | user s | sys s | Mpkt/s | speedup vs `editcap -s 64` (wall) | CPU ratio |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    for r in rows:
        print(f"| `{r['argv']}` | {r['wall_s']:.3f} | {r['user_s']:.3f} | {r['sys_s']:.3f} | {r['mpps']:.2f} | "
              f"{r['speedup_vs_editcap']} | {r['cpu_ratio_vs_editcap']} |")
    new = next((r for r in rows if r["command"] == "tapflow pcapng"), None)
    old = next((r for r in rows if r["command"] == "tapflow-base pcapng"), None)
    if new and old:
        print("\nRegression check (time ÷ time; below 1: tapflow is faster than tapflow-base):\n")
        print("| measure | tapflow | tapflow-base | tapflow/tapflow-base |")
        print("|---|---:|---:|---:|")
        for k, name in (("wall_s", "wall s"), ("cpu_s", "CPU s")):
            print(f"| {name} | {new[k]:.3f} | {old[k]:.3f} | {new[k] / old[k]:.3f} |")
    print(f"\n{note}\nwrote {', '.join(map(str, [csv_path, *made]))}")


if __name__ == "__main__":
    main()
