#!/usr/bin/env python3
"""Draw the benchmark plots from the benchmarks' CSV files (no measurement, no root needed).

  python3 bench/plot.py [--out bench/out] [--img docs/img]

reads whichever of live.csv, offline.csv, flows.csv, forward.csv, rules.csv and plan.csv are in
--out and writes the plots docs/benchmarks.md shows into --img:

  live.csv     live-loss.svg (packets missing per million sent, per tool and frame size),
               live-cpu.svg (capture CPU per Mpkt), gen.svg (tapflow gen / trafgen)
  offline.csv  offline.svg   (wall and CPU time of the header cut, per command)
  flows.csv    flows.svg     (CPU of each flow meter over the trace)
  forward.csv  forward.svg   (probe CPU per packet, forwarding off and on)
  rules.csv    rules.svg     (CPU with N rules, tapflow and tcpdump)
  plan.csv     plan.svg      (packets lost in a stall: `tapflow plan` against the kernel's count)

Each benchmark script calls the same function at the end of its run, so a run redraws its own
plots. The line of conditions under each plot's title (packets, kernel, date) is kept beside the
CSV as NAME.note, so a redraw keeps it.
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

REPO = Path(__file__).resolve().parent.parent
IMG = REPO / "docs" / "img"
TOOL_ORDER = ["tapflow", "tapflow-base", "tcpdump", "netsniff-ng", "floor"]
# Palette entries (svgplot.PALETTE): ours, our baseline, everyone else; each live tool its own.
OURS, BASE, OTHER = 0, 4, 1
TOOL_STYLE = {"tapflow": 0, "tcpdump": 1, "netsniff-ng": 2, "floor": 3, "tapflow-base": 4,
              "tcpdump ÷ 3 (target)": 5}


def _f(x: str | None) -> float:
    try:
        return float(x)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return math.nan


def _median(xs: list[float]) -> float | None:
    xs = sorted(x for x in xs if math.isfinite(x))
    if not xs:
        return None
    n = len(xs)
    return xs[n // 2] if n % 2 else (xs[n // 2 - 1] + xs[n // 2]) / 2


def _rows(csv_path: Path) -> list[dict]:
    with open(csv_path, newline="") as fh:
        return list(csv.DictReader(fh))


def _note(csv_path: Path, note: str) -> str:
    """The run's line of conditions: saved beside the CSV when given, read back when not."""
    side = csv_path.with_suffix(".note")
    if note:
        side.write_text(note + "\n")
        return note
    return side.read_text().strip() if side.exists() else ""


def _family(name: str) -> int:
    if name.startswith("tapflow-base"):
        return BASE
    return OURS if name.startswith("tapflow") else OTHER


def plot_live(csv_path: Path, img: Path = IMG, note: str = "") -> list[Path]:
    rows = _rows(csv_path)
    caps = [r for r in rows if not r["tool"].startswith("gen:")]
    gens = [r for r in rows if r["tool"].startswith("gen:")]
    note = _note(csv_path, note)
    img.mkdir(parents=True, exist_ok=True)
    made: list[Path] = []
    if caps:
        sizes = sorted({int(r["frame"]) for r in caps})
        tools = [t for t in TOOL_ORDER if any(r["tool"] == t for r in caps)]
        tools += sorted({r["tool"] for r in caps} - set(tools))

        def med(t: str, s: int, f) -> float | None:
            return _median([f(r) for r in caps if r["tool"] == t and int(r["frame"]) == s])

        # Fig. 10 as a loss: every tool near 100 % draws one flat line that hides the others, while
        # "lost per million" on a log scale shows each tool's zero, or its loss, side by side.
        lost = {t: [None if (v := med(t, s, lambda r: (1 - _f(r["ratio"])) * 1e6)) is None
                    else max(0.0, round(v)) for s in sizes] for t in tools}
        pps = [_f(r["gen_pps"]) for r in caps if math.isfinite(_f(r["gen_pps"]))]
        rate = f"generator {min(pps) / 1e6:.2f}-{max(pps) / 1e6:.2f} Mpps while capturing" if pps else ""
        a = img / "live-loss.svg"
        svgplot.bar_chart(str(a), "Packets missing from each capture file, per million sent",
                          "frame size incl. FCS (bytes)", "lost per million sent (log; 0 = none lost)",
                          [str(s) for s in sizes], lost, log=True, ymax=1000, styles=TOOL_STYLE,
                          note="; ".join(x for x in (note, rate) if x))
        cpu = {t: [med(t, s, lambda r: _f(r["cpu_s_per_mpkt"])) for s in sizes] for t in tools}
        dashed = frozenset()
        if "tcpdump" in cpu:
            cpu["tcpdump ÷ 3 (target)"] = [None if v is None else v / 3 for v in cpu["tcpdump"]]
            dashed = frozenset({"tcpdump ÷ 3 (target)"})
        b = img / "live-cpu.svg"
        svgplot.line_chart(str(b), "Capture process CPU per million packets", "frame size incl. FCS (bytes)",
                           "user+sys CPU seconds per Mpkt recorded", sizes, cpu, ymin=0, note=note,
                           categorical=True, dashed=dashed, styles=TOOL_STYLE)
        made += [a, b]
    if gens:
        sizes = sorted({int(r["frame"]) for r in gens})
        kinds = sorted({r["tool"][4:] for r in gens})

        def pps_of(k: str, s: int) -> float | None:
            return _median([_f(r["gen_alone_pps"]) for r in gens if r["tool"] == f"gen:{k}"
                            and int(r["frame"]) == s])

        if "trafgen" in kinds:
            ratio: dict[str, list[float | None]] = {}
            for k in [k for k in ("tapflow", "tapflow-base") if k in kinds]:
                ratio[f"{k} gen ÷ trafgen"] = [
                    (p / q) if (p := pps_of(k, s)) and (q := pps_of("trafgen", s)) else None for s in sizes]
            ratio["trafgen (= 1, the target)"] = [1.0] * len(sizes)
            vals = [v for ys in ratio.values() for v in ys if v is not None]
            c = img / "gen.svg"
            svgplot.line_chart(str(c), "Generator rate on one core, relative to trafgen",
                               "frame size incl. FCS (bytes)", "packets per second ÷ trafgen's", sizes,
                               ratio, ymin=math.floor(min(vals) * 10 - 1) / 10, note=note,
                               categorical=True, dashed=frozenset({"trafgen (= 1, the target)"}),
                               styles={"tapflow gen ÷ trafgen": 0, "tapflow-base gen ÷ trafgen": 4,
                                       "trafgen (= 1, the target)": 1})
            made.append(c)
    return made


def plot_offline(csv_path: Path, img: Path = IMG, note: str = "") -> list[Path]:
    rows = _rows(csv_path)
    note = _note(csv_path, note)
    if not rows:
        return []
    img.mkdir(parents=True, exist_ok=True)
    out = img / "offline.svg"
    labels = []
    for r in rows:
        x = _f(r.get("speedup_vs_editcap"))
        cpu = _f(r.get("cpu_s"))
        labels.append(f"{_f(r['wall_s']):.3f} s wall" + (f", {cpu:.3f} s CPU" if math.isfinite(cpu) else "")
                      + (f", {x:.2f}× editcap" if math.isfinite(x) and r["command"] != "editcap pcapng" else ""))
    svgplot.hbar_chart(str(out), "Header cut of the trace to 64 bytes: wall time", "seconds (best of runs)",
                       [r["command"] for r in rows], [_f(r["wall_s"]) for r in rows], labels,
                       note=note or f"{rows[0]['packets']} packets", colors=[_family(r["command"]) for r in rows])
    return [out]


def plot_flows(csv_path: Path, img: Path = IMG, note: str = "") -> list[Path]:
    rows = _rows(csv_path)
    note = _note(csv_path, note)
    if not rows:
        return []
    img.mkdir(parents=True, exist_ok=True)
    ref = next((r for r in rows if r["tool"] == "tapflow-ipfix"), rows[0])
    labels = []
    for r in rows:
        x = _f(r["cpu_s"]) / _f(ref["cpu_s"])
        labels.append(f"{_f(r['cpu_s']):.3f} s" + ("" if r is ref else f" ({x:.2f}×)"))
    out = img / "flows.svg"
    svgplot.hbar_chart(str(out), f"Flow metering of the trace, one core (× = CPU ÷ {ref['tool']}'s)",
                       "user+sys CPU seconds, median of runs",
                       [r["tool"] + (" (CSV)" if r["tool"] in ("tapflow", "tapflow-base") else "") for r in rows],
                       [_f(r["cpu_s"]) for r in rows], labels, note=note,
                       colors=[_family(r["tool"]) for r in rows])
    return [out]


def plot_forward(csv_path: Path, img: Path = IMG, note: str = "") -> list[Path]:
    rows = _rows(csv_path)
    note = _note(csv_path, note)
    if not rows:
        return []
    img.mkdir(parents=True, exist_ok=True)
    out = img / "forward.svg"
    labels = [f"{_f(r['ns_per_packet']):.1f} ns" + (f" ({_f(r['extra_ns']):+.1f})" if _f(r["extra_ns"]) else "")
              for r in rows]
    svgplot.hbar_chart(str(out), "Probe CPU per packet, forwarding off and on", "ns per packet (median of runs)",
                       [f"{r['setup']}: {r['mode']}" for r in rows], [_f(r["ns_per_packet"]) for r in rows],
                       labels, note=note, colors=[OTHER if r["mode"] == "off" else OURS for r in rows])
    return [out]


def plot_rules(csv_path: Path, img: Path = IMG, note: str = "") -> list[Path]:
    rows = _rows(csv_path)
    note = _note(csv_path, note)
    if not rows:
        return []
    img.mkdir(parents=True, exist_ok=True)
    out = img / "rules.svg"
    svgplot.bar_chart(str(out), "Reading the trace through N rules, one core", "rules",
                      "user+sys CPU seconds (median of runs)", [r["rules"] for r in rows],
                      {"tapflow": [_f(r["tapflow_cpu_s"]) for r in rows],
                       "tcpdump (libpcap filter)": [v if math.isfinite(v := _f(r["tcpdump_cpu_s"])) else None
                                                    for r in rows]}, note=note)
    return [out]


def plot_plan(csv_path: Path, img: Path = IMG, note: str = "") -> list[Path]:
    rows = _rows(csv_path)
    note = _note(csv_path, note)
    if not rows:
        return []
    img.mkdir(parents=True, exist_ok=True)
    # Where the model predicts a loss: how far the kernel's count is from it. Where it predicts
    # none, the note says how many of those runs lost nothing.
    series: dict[str, list[tuple[float, float]]] = {}
    zero = zero_ok = 0
    for r in rows:
        pred, got = _f(r["predicted"]), _f(r["dropped"])
        if pred == 0:
            zero += 1
            zero_ok += got == 0
            continue
        name = f"{int(_f(r['rate'])) // 1000}k pkt/s, {r['count']} × {r['block']}"
        series.setdefault(name, []).append((pred, (got - pred) / pred * 100))
    out = img / "plan.svg"
    if zero:
        note = f"{note}; predicted no loss in {zero} runs: {zero_ok} lost none".lstrip("; ")
    svgplot.scatter_chart(str(out), "Packets lost in a stall: the kernel's count against tapflow plan",
                          "loss predicted by tapflow plan, packets (log)",
                          "measured − predicted, % of predicted", series, note=note, xlog=True,
                          hline=0.0, band=(-5.0, 5.0))
    return [out]


PLOTS = {"live.csv": plot_live, "offline.csv": plot_offline, "flows.csv": plot_flows,
         "forward.csv": plot_forward, "rules.csv": plot_rules, "plan.csv": plot_plan}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default=str(REPO / "bench" / "out"), help="where the CSVs are")
    ap.add_argument("--img", default=str(IMG), help="where the plots go (default docs/img)")
    args = ap.parse_args()
    outdir, img = Path(args.out), Path(args.img)
    made: list[Path] = []
    for name, fn in PLOTS.items():
        if (outdir / name).exists():
            made += fn(outdir / name, img)
    if not made:
        sys.exit(f"plot.py: none of {', '.join(PLOTS)} in {outdir}")
    print("wrote " + ", ".join(map(str, made)))


if __name__ == "__main__":
    main()
