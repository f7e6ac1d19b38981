#!/usr/bin/env python3
"""Redraw the benchmark plots from their CSV files (no measurement, no root needed).

  python3 bench/plot.py [--out bench/out]

reads bench/out/live.csv and/or bench/out/offline.csv (whichever exist) and writes
live-ratio.svg, live-cpu.svg and offline.svg next to them. live.py and offline.py call the same
functions at the end of a run.
"""

from __future__ import annotations

import argparse
import csv
import math
import sys
from pathlib import Path

sys.dont_write_bytecode = True  # no __pycache__ in the source tree
sys.path.insert(0, str(Path(__file__).resolve().parent))
import svgplot  # noqa: E402

TOOL_ORDER = ["tapflow", "tcpdump", "netsniff-ng", "floor"]


def _f(x: str) -> float:
    try:
        return float(x)
    except (TypeError, ValueError):
        return math.nan


def _median(xs: list[float]) -> float | None:
    xs = sorted(x for x in xs if math.isfinite(x))
    if not xs:
        return None
    n = len(xs)
    return xs[n // 2] if n % 2 else (xs[n // 2 - 1] + xs[n // 2]) / 2


def plot_live(csv_path: Path, note: str = "") -> list[Path]:
    with open(csv_path, newline="") as fh:
        rows = [r for r in csv.DictReader(fh) if not r["tool"].startswith("gen:")]
    if not rows:
        return []
    sizes = sorted({int(r["frame"]) for r in rows})
    tools = [t for t in TOOL_ORDER if any(r["tool"] == t for r in rows)]
    tools += sorted({r["tool"] for r in rows} - set(tools))
    ratio, cpu = {}, {}
    for t in tools:
        ratio[t] = [_median([_f(r["ratio"]) * 100 for r in rows if r["tool"] == t and int(r["frame"]) == s])
                    for s in sizes]
        cpu[t] = [_median([_f(r["cpu_s_per_mpkt"]) for r in rows if r["tool"] == t and int(r["frame"]) == s])
                  for s in sizes]
    if not note:
        n = rows[0].get("sent", "?")
        gen = rows[0].get("generator", "?")
        note = f"{n} pkts/run, generator {gen}, veth; medians over repeats"
    outdir = csv_path.parent
    a, b = outdir / "live-ratio.svg", outdir / "live-cpu.svg"
    # The paper's Fig. 10 spans 0-100 %; on veth every tool is near 100 %, so zoom in when all are
    # above 50 % (the axis label says where it starts).
    lows = [v for ys in ratio.values() for v in ys if v is not None]
    ymin = 0.0 if not lows or min(lows) < 50 else float(max(0, math.floor(min(lows) - 0.5)))
    svgplot.line_chart(str(a), "Collection ratio vs frame size (veth)", "frame size incl. FCS (bytes)",
                       f"packets recorded / packets sent (%), axis from {ymin:g}", sizes, ratio,
                       ymin=ymin, ymax=100, note=note, categorical=True)
    svgplot.line_chart(str(b), "Capture process CPU per million packets", "frame size incl. FCS (bytes)",
                       "user+sys CPU seconds per Mpkt recorded", sizes, cpu, ymin=0, note=note,
                       categorical=True)
    return [a, b]


def plot_offline(csv_path: Path, note: str = "") -> list[Path]:
    with open(csv_path, newline="") as fh:
        rows = list(csv.DictReader(fh))
    if not rows:
        return []
    out = csv_path.parent / "offline.svg"
    svgplot.bar_chart(str(out), "Offline header cut (snaplen 64): time for the whole trace", "command",
                      "seconds (best of runs)", [r["command"] for r in rows],
                      {"wall clock": [_f(r["wall_s"]) for r in rows],
                       "user+sys CPU": [_f(r["cpu_s"]) for r in rows]},
                      note=note or f"{rows[0]['packets']} packets from scripts/make-trace.sh")
    return [out]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default=str(Path(__file__).resolve().parent / "out"))
    args = ap.parse_args()
    outdir = Path(args.out)
    made: list[Path] = []
    if (outdir / "live.csv").exists():
        made += plot_live(outdir / "live.csv")
    if (outdir / "offline.csv").exists():
        made += plot_offline(outdir / "offline.csv")
    if not made:
        sys.exit(f"plot.py: no live.csv or offline.csv in {outdir}")
    print("wrote " + ", ".join(map(str, made)))


if __name__ == "__main__":
    main()
