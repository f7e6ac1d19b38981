"""Tiny hand-written SVG charts (stdlib only): line charts and grouped bar charts.

Used by live.py and offline.py. No external dependencies, output is a self-contained SVG file that
any browser shows.
"""

from __future__ import annotations

import math
from html import escape

PALETTE = ["#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2"]
MARKERS = ["circle", "square", "diamond", "triangle"]

W, H = 760, 460
LEFT, RIGHT, TOP, BOTTOM = 80, 190, 62, 60


def _nice_ticks(lo: float, hi: float, n: int = 6) -> list[float]:
    if not math.isfinite(lo) or not math.isfinite(hi):
        lo, hi = 0.0, 1.0
    if hi <= lo:
        hi = lo + 1.0
    raw = (hi - lo) / n
    mag = 10 ** math.floor(math.log10(raw))
    step = min((m * mag for m in (1, 2, 2.5, 5, 10) if m * mag >= raw), default=10 * mag)
    start = math.floor(lo / step + 1e-9) * step
    ticks = [round(start, 10)]
    while ticks[-1] < hi - step * 1e-9:
        ticks.append(round(ticks[-1] + step, 10))
    return ticks


def _fmt(v: float) -> str:
    if abs(v) >= 1000 or v == int(v):
        return f"{v:,.0f}"
    if abs(v) >= 10:
        return f"{v:.1f}"
    return f"{v:.3g}"


def _frame(title: str, xlabel: str, ylabel: str) -> list[str]:
    return [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{H}" '
        f'viewBox="0 0 {W} {H}" font-family="sans-serif" font-size="12">',
        f'<rect x="0" y="0" width="{W}" height="{H}" fill="white"/>',
        f'<text x="{(LEFT + W - RIGHT) / 2}" y="24" text-anchor="middle" font-size="15" '
        f'font-weight="bold">{escape(title)}</text>',
        f'<text x="{(LEFT + W - RIGHT) / 2}" y="{H - 15}" text-anchor="middle">{escape(xlabel)}</text>',
        f'<text x="20" y="{(TOP + H - BOTTOM) / 2}" text-anchor="middle" '
        f'transform="rotate(-90 20 {(TOP + H - BOTTOM) / 2})">{escape(ylabel)}</text>',
    ]


def _y_axis(out: list[str], ylo: float, yhi: float, ticks: list[float], ymap) -> None:
    x0, x1 = LEFT, W - RIGHT
    for t in ticks:
        y = ymap(t)
        out.append(f'<line x1="{x0}" y1="{y:.1f}" x2="{x1}" y2="{y:.1f}" stroke="#ddd"/>')
        out.append(f'<text x="{x0 - 6}" y="{y + 4:.1f}" text-anchor="end">{_fmt(t)}</text>')
    out.append(f'<line x1="{x0}" y1="{TOP}" x2="{x0}" y2="{H - BOTTOM}" stroke="black"/>')
    out.append(f'<line x1="{x0}" y1="{H - BOTTOM}" x2="{x1}" y2="{H - BOTTOM}" stroke="black"/>')


def _marker(kind: str, x: float, y: float, color: str) -> str:
    if kind == "square":
        return f'<rect x="{x - 4:.1f}" y="{y - 4:.1f}" width="8" height="8" fill="{color}"/>'
    if kind == "diamond":
        return (f'<polygon points="{x:.1f},{y - 5:.1f} {x + 5:.1f},{y:.1f} {x:.1f},{y + 5:.1f} '
                f'{x - 5:.1f},{y:.1f}" fill="{color}"/>')
    if kind == "triangle":
        return (f'<polygon points="{x:.1f},{y - 5:.1f} {x + 5:.1f},{y + 4:.1f} {x - 5:.1f},{y + 4:.1f}" '
                f'fill="{color}"/>')
    return f'<circle cx="{x:.1f}" cy="{y:.1f}" r="4" fill="{color}"/>'


def _legend(out: list[str], names: list[str], kind: str = "line") -> None:
    x = W - RIGHT + 15
    for i, name in enumerate(names):
        y = TOP + 10 + i * 20
        c = PALETTE[i % len(PALETTE)]
        if kind == "line":
            out.append(f'<line x1="{x}" y1="{y}" x2="{x + 24}" y2="{y}" stroke="{c}" stroke-width="2"/>')
            out.append(_marker(MARKERS[i % len(MARKERS)], x + 12, y, c))
        else:
            out.append(f'<rect x="{x}" y="{y - 6}" width="24" height="12" fill="{c}"/>')
        out.append(f'<text x="{x + 30}" y="{y + 4}">{escape(name)}</text>')


def line_chart(path: str, title: str, xlabel: str, ylabel: str, xs: list[float],
               series: dict[str, list[float | None]], ymin: float | None = None,
               ymax: float | None = None, note: str = "", categorical: bool = False) -> None:
    """One line per series over numeric xs; None values leave a gap. categorical=True spaces the
    xs evenly (labels keep their values)."""
    if categorical:
        labels = list(xs)
        xs = list(range(len(xs)))
    else:
        labels = list(xs)
    vals = [v for ys in series.values() for v in ys if v is not None and math.isfinite(v)]
    lo = ymin if ymin is not None else (min(vals) if vals else 0.0)
    hi = max(vals + ([ymax] if ymax is not None else [])) if vals else (ymax or 1.0)
    ticks = _nice_ticks(lo, hi)
    ylo, yhi = ticks[0], ticks[-1]
    xlo, xhi = min(xs), max(xs)
    if categorical:
        xlo, xhi = xlo - 0.3, xhi + 0.3
    if xhi == xlo:
        xhi = xlo + 1

    def xmap(x: float) -> float:
        return LEFT + (x - xlo) / (xhi - xlo) * (W - RIGHT - LEFT)

    def ymap(y: float) -> float:
        return H - BOTTOM - (y - ylo) / (yhi - ylo) * (H - BOTTOM - TOP)

    out = _frame(title, xlabel, ylabel)
    _y_axis(out, ylo, yhi, ticks, ymap)
    for x, label in zip(xs, labels):
        out.append(f'<line x1="{xmap(x):.1f}" y1="{H - BOTTOM}" x2="{xmap(x):.1f}" '
                   f'y2="{H - BOTTOM + 5}" stroke="black"/>')
        out.append(f'<text x="{xmap(x):.1f}" y="{H - BOTTOM + 18}" text-anchor="middle">{_fmt(label)}</text>')
    for i, (name, ys) in enumerate(series.items()):
        c = PALETTE[i % len(PALETTE)]
        seg: list[str] = []
        segs: list[list[str]] = []
        for x, y in zip(xs, ys):
            if y is None or not math.isfinite(y):
                if seg:
                    segs.append(seg)
                seg = []
                continue
            seg.append(f"{xmap(x):.1f},{ymap(y):.1f}")
        if seg:
            segs.append(seg)
        for s in segs:
            # Earlier series are drawn wider, so identical lines stay visible under later ones.
            sw = 2 + 2.5 * (len(series) - 1 - i)
            out.append(f'<polyline points="{" ".join(s)}" fill="none" stroke="{c}" stroke-width="{sw}" '
                       f'stroke-opacity="0.85"/>')
        for x, y in zip(xs, ys):
            if y is not None and math.isfinite(y):
                out.append(_marker(MARKERS[i % len(MARKERS)], xmap(x), ymap(y), c))
    _legend(out, list(series), "line")
    if note:
        out.append(f'<text x="{LEFT}" y="{TOP - 16}" font-size="10" fill="#555">{escape(note)}</text>')
    out.append("</svg>")
    with open(path, "w", encoding="utf-8") as fh:
        fh.write("\n".join(out) + "\n")


def bar_chart(path: str, title: str, xlabel: str, ylabel: str, groups: list[str],
              series: dict[str, list[float | None]], note: str = "") -> None:
    """Grouped bars: one group per entry in groups, one bar per series inside each group."""
    vals = [v for ys in series.values() for v in ys if v is not None and math.isfinite(v)]
    ticks = _nice_ticks(0.0, max(vals) if vals else 1.0)
    ylo, yhi = 0.0, ticks[-1]

    def ymap(y: float) -> float:
        return H - BOTTOM - (y - ylo) / (yhi - ylo) * (H - BOTTOM - TOP)

    out = _frame(title, xlabel, ylabel)
    _y_axis(out, ylo, yhi, ticks, ymap)
    gw = (W - RIGHT - LEFT) / max(1, len(groups))
    nser = max(1, len(series))
    bw = gw * 0.8 / nser
    for g, gname in enumerate(groups):
        gx = LEFT + g * gw + gw * 0.1
        out.append(f'<text x="{LEFT + g * gw + gw / 2:.1f}" y="{H - BOTTOM + 18}" '
                   f'text-anchor="middle">{escape(gname)}</text>')
        for i, ys in enumerate(series.values()):
            y = ys[g] if g < len(ys) else None
            if y is None or not math.isfinite(y):
                continue
            c = PALETTE[i % len(PALETTE)]
            x = gx + i * bw
            out.append(f'<rect x="{x:.1f}" y="{ymap(y):.1f}" width="{bw * 0.95:.1f}" '
                       f'height="{H - BOTTOM - ymap(y):.1f}" fill="{c}"/>')
            out.append(f'<text x="{x + bw * 0.475:.1f}" y="{ymap(y) - 4:.1f}" text-anchor="middle" '
                       f'font-size="10">{_fmt(y)}</text>')
    _legend(out, list(series), "bar")
    if note:
        out.append(f'<text x="{LEFT}" y="{TOP - 16}" font-size="10" fill="#555">{escape(note)}</text>')
    out.append("</svg>")
    with open(path, "w", encoding="utf-8") as fh:
        fh.write("\n".join(out) + "\n")
