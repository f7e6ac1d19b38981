"""Tiny hand-written SVG charts (stdlib only): line charts, grouped bar charts (linear or
log scale), horizontal bar charts and scatter plots against the diagonal.

Used by plot.py. No external dependencies, output is a self-contained SVG file that any browser
shows.

Log scales here are "symlog": 0 sits on the axis and 1, 10, 100, ... are evenly spaced above it,
so that a zero (no packet lost, say) is drawn and labelled instead of vanishing.
"""

from __future__ import annotations

import math
from html import escape

PALETTE = ["#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2"]
MARKERS = ["circle", "square", "diamond", "triangle"]

W, H = 760, 460
LEFT, RIGHT, TOP, BOTTOM = 80, 190, 72, 60


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


def _note(out: list[str], note: str, x: float) -> None:
    """The run's conditions under the title, in small grey type: at most two lines, broken at a
    "; " or ", " where the first would run off the image."""
    if not note:
        return
    room = int((W - x - 10) / 5.6)  # characters of 10 px sans-serif that fit
    lines = [note]
    if len(note) > room:
        cut = max(note.rfind("; ", 0, room), note.rfind(", ", 0, room))
        cut = cut if cut > 0 else room
        lines = [note[:cut + 1], note[cut + 1:].strip()]
    for i, line in enumerate(lines):
        out.append(f'<text x="{x}" y="{TOP - 28 + 12 * i}" font-size="10" fill="#555">{escape(line)}</text>')


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


def _style(styles: dict[str, int] | None, name: str, i: int) -> int:
    """The palette and marker index of series `name`, the i-th drawn: fixed by `styles` when it
    names the series (so a tool keeps its colour from plot to plot), else i."""
    return styles[name] if styles and name in styles else i


def _legend(out: list[str], names: list[str], kind: str = "line", dashed: frozenset = frozenset(),
            styles: dict[str, int] | None = None) -> None:
    x = W - RIGHT + 15
    for i, name in enumerate(names):
        y = TOP + 10 + i * 20
        k = _style(styles, name, i)
        c = PALETTE[k % len(PALETTE)]
        if kind == "line" and name in dashed:
            out.append(f'<line x1="{x}" y1="{y}" x2="{x + 24}" y2="{y}" stroke="{c}" stroke-width="2" '
                       f'stroke-dasharray="6,4"/>')
        elif kind == "line":
            out.append(f'<line x1="{x}" y1="{y}" x2="{x + 24}" y2="{y}" stroke="{c}" stroke-width="2"/>')
            out.append(_marker(MARKERS[k % len(MARKERS)], x + 12, y, c))
        else:
            out.append(f'<rect x="{x}" y="{y - 6}" width="24" height="12" fill="{c}"/>')
        out.append(f'<text x="{x + 30}" y="{y + 4}">{escape(name)}</text>')


def line_chart(path: str, title: str, xlabel: str, ylabel: str, xs: list[float],
               series: dict[str, list[float | None]], ymin: float | None = None,
               ymax: float | None = None, note: str = "", categorical: bool = False,
               dashed: frozenset = frozenset(), styles: dict[str, int] | None = None) -> None:
    """One line per series over numeric xs; None values leave a gap. categorical=True spaces the
    xs evenly (labels keep their values). Series named in `dashed` are drawn as thin dashed lines
    without markers (a target, a reference)."""
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
        out.append(f'<text x="{xmap(x):.1f}" y="{H - BOTTOM + 18}" text-anchor="middle">{label if categorical else _fmt(label)}</text>')
    for i, (name, ys) in enumerate(series.items()):
        k = _style(styles, name, i)
        c = PALETTE[k % len(PALETTE)]
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
        if name in dashed:
            for s in segs:
                out.append(f'<polyline points="{" ".join(s)}" fill="none" stroke="{c}" stroke-width="2" '
                           f'stroke-dasharray="6,4"/>')
            continue
        for s in segs:
            # Earlier series are drawn wider, so identical lines stay visible under later ones.
            sw = 2 + 2.5 * (len(series) - 1 - i)
            out.append(f'<polyline points="{" ".join(s)}" fill="none" stroke="{c}" stroke-width="{sw}" '
                       f'stroke-opacity="0.85"/>')
        for x, y in zip(xs, ys):
            if y is not None and math.isfinite(y):
                out.append(_marker(MARKERS[k % len(MARKERS)], xmap(x), ymap(y), c))
    _legend(out, list(series), "line", dashed, styles)
    _note(out, note, LEFT)
    out.append("</svg>")
    with open(path, "w", encoding="utf-8") as fh:
        fh.write("\n".join(out) + "\n")


def _symlog(v: float) -> float:
    """0 -> 0, 1 -> 1, 10 -> 2, 100 -> 3, ...; linear between 0 and 1."""
    return v if v < 1 else 1 + math.log10(v)


def _symlog_ticks(hi: float) -> list[float]:
    ticks = [0.0, 1.0]
    while ticks[-1] < hi:
        ticks.append(ticks[-1] * 10)
    return ticks


def bar_chart(path: str, title: str, xlabel: str, ylabel: str, groups: list[str],
              series: dict[str, list[float | None]], note: str = "", log: bool = False,
              ymax: float | None = None, styles: dict[str, int] | None = None) -> None:
    """Grouped bars: one group per entry in groups, one bar per series inside each group.
    log=True: symlog y axis, and a zero is drawn as a short line on the axis labelled 0, so that
    series that are all zero stay visible side by side. The axis reaches at least ymax. None
    leaves the bar out."""
    vals = [v for ys in series.values() for v in ys if v is not None and math.isfinite(v)]
    vals += [ymax] if ymax is not None else []
    if log:
        ticks = _symlog_ticks(max(vals + [1.0]))
        tmap = _symlog
    else:
        ticks = _nice_ticks(0.0, max(vals) if vals else 1.0)
        tmap = float
    ylo, yhi = tmap(ticks[0]), tmap(ticks[-1])

    def ymap(y: float) -> float:
        return H - BOTTOM - (tmap(y) - ylo) / (yhi - ylo) * (H - BOTTOM - TOP)

    out = _frame(title, xlabel, ylabel)
    _y_axis(out, ticks[0], ticks[-1], ticks, ymap)
    gw = (W - RIGHT - LEFT) / max(1, len(groups))
    nser = max(1, len(series))
    bw = gw * 0.8 / nser
    fs = 10 if bw >= 22 else 8
    for g, gname in enumerate(groups):
        gx = LEFT + g * gw + gw * 0.1
        out.append(f'<text x="{LEFT + g * gw + gw / 2:.1f}" y="{H - BOTTOM + 18}" '
                   f'text-anchor="middle">{escape(gname)}</text>')
        for i, (name, ys) in enumerate(series.items()):
            y = ys[g] if g < len(ys) else None
            if y is None or not math.isfinite(y):
                continue
            c = PALETTE[_style(styles, name, i) % len(PALETTE)]
            x = gx + i * bw
            top = ymap(y)
            if y == 0:
                out.append(f'<rect x="{x:.1f}" y="{H - BOTTOM - 3}" width="{bw * 0.95:.1f}" height="3" '
                           f'fill="{c}"/>')
                top = H - BOTTOM - 3
            else:
                out.append(f'<rect x="{x:.1f}" y="{top:.1f}" width="{bw * 0.95:.1f}" '
                           f'height="{H - BOTTOM - top:.1f}" fill="{c}"/>')
            out.append(f'<text x="{x + bw * 0.475:.1f}" y="{top - 4:.1f}" text-anchor="middle" '
                       f'font-size="{fs}">{_fmt(y)}</text>')
    _legend(out, list(series), "bar", styles=styles)
    _note(out, note, LEFT)
    out.append("</svg>")
    with open(path, "w", encoding="utf-8") as fh:
        fh.write("\n".join(out) + "\n")


def hbar_chart(path: str, title: str, xlabel: str, names: list[str], values: list[float | None],
               labels: list[str] | None = None, note: str = "", colors: list[int] | None = None) -> None:
    """Horizontal bars, one per name (top to bottom), each with its value or labels[i] at its
    end. colors[i] picks the palette entry of bar i (default: all the first)."""
    texts = labels if labels else [_fmt(v) if v is not None else "" for v in values]
    left = max(110, 12 + 7 * max((len(n) for n in names), default=0))
    right = max(30, 12 + 6.5 * max((len(t) for t in texts), default=0))  # room for the longest label
    bar_h = 26
    top = TOP
    height = top + len(names) * bar_h + 60
    vals = [v for v in values if v is not None and math.isfinite(v)]
    ticks = _nice_ticks(0.0, max(vals) if vals else 1.0)
    xhi = ticks[-1]

    def xmap(v: float) -> float:
        return left + v / xhi * (W - right - left)

    out = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{height}" '
        f'viewBox="0 0 {W} {height}" font-family="sans-serif" font-size="12">',
        f'<rect x="0" y="0" width="{W}" height="{height}" fill="white"/>',
        f'<text x="{W / 2}" y="24" text-anchor="middle" font-size="15" font-weight="bold">{escape(title)}</text>',
        f'<text x="{(left + W - right) / 2}" y="{height - 12}" text-anchor="middle">{escape(xlabel)}</text>',
    ]
    y1 = top + len(names) * bar_h
    for t in ticks:
        x = xmap(t)
        out.append(f'<line x1="{x:.1f}" y1="{top}" x2="{x:.1f}" y2="{y1}" stroke="#ddd"/>')
        out.append(f'<text x="{x:.1f}" y="{y1 + 16}" text-anchor="middle">{_fmt(t)}</text>')
    out.append(f'<line x1="{left}" y1="{top}" x2="{left}" y2="{y1}" stroke="black"/>')
    out.append(f'<line x1="{left}" y1="{y1}" x2="{W - right}" y2="{y1}" stroke="black"/>')
    for i, (name, v) in enumerate(zip(names, values)):
        y = top + i * bar_h
        out.append(f'<text x="{left - 6}" y="{y + bar_h / 2 + 4:.1f}" text-anchor="end">{escape(name)}</text>')
        if v is None or not math.isfinite(v):
            continue
        c = PALETTE[(colors[i] if colors else 0) % len(PALETTE)]
        out.append(f'<rect x="{left}" y="{y + 4}" width="{xmap(v) - left:.1f}" height="{bar_h - 8}" fill="{c}"/>')
        text = texts[i]
        out.append(f'<text x="{xmap(v) + 5:.1f}" y="{y + bar_h / 2 + 4:.1f}" font-size="11">{escape(text)}</text>')
    _note(out, note, 20)
    out.append("</svg>")
    with open(path, "w", encoding="utf-8") as fh:
        fh.write("\n".join(out) + "\n")


def scatter_chart(path: str, title: str, xlabel: str, ylabel: str,
                  series: dict[str, list[tuple[float, float]]], note: str = "", xlog: bool = False,
                  hline: float | None = None, band: tuple[float, float] | None = None) -> None:
    """Points (x, y) per series. xlog=True: symlog x axis. hline draws a dashed horizontal line at
    that y (the "exact" line), band shades the y range between its two values."""
    pts_all = [p for pts in series.values() for p in pts if math.isfinite(p[0]) and math.isfinite(p[1])]
    xs = [x for x, _ in pts_all]
    ys = [y for _, y in pts_all] + [v for v in (hline, *(band or ())) if v is not None]
    if xlog:
        xticks = _symlog_ticks(max(xs + [1.0]))
        xt = _symlog
        while len(xticks) > 2 and xticks[1] * 10 <= min(x for x in xs if x > 0):
            xticks.pop(0)  # start at the decade below the smallest x
        xticks[0] = xticks[0] if xticks[0] == 0 else xticks[0]
    else:
        xticks = _nice_ticks(min(xs + [0.0]), max(xs + [1.0]))
        xt = float
    yticks = _nice_ticks(min(ys + [0.0]), max(ys + [1.0]))
    xlo, xhi = xt(xticks[0]), xt(xticks[-1])
    ylo, yhi = yticks[0], yticks[-1]

    def xmap(v: float) -> float:
        return LEFT + (xt(v) - xlo) / (xhi - xlo) * (W - RIGHT - LEFT)

    def ymap(v: float) -> float:
        return H - BOTTOM - (v - ylo) / (yhi - ylo) * (H - BOTTOM - TOP)

    out = _frame(title, xlabel, ylabel)
    if band:
        out.append(f'<rect x="{LEFT}" y="{ymap(band[1]):.1f}" width="{W - RIGHT - LEFT}" '
                   f'height="{ymap(band[0]) - ymap(band[1]):.1f}" fill="#eee"/>')
    _y_axis(out, ylo, yhi, yticks, ymap)
    for t in xticks:
        out.append(f'<line x1="{xmap(t):.1f}" y1="{H - BOTTOM}" x2="{xmap(t):.1f}" y2="{H - BOTTOM + 5}" '
                   f'stroke="black"/>')
        out.append(f'<text x="{xmap(t):.1f}" y="{H - BOTTOM + 18}" text-anchor="middle">{_fmt(t)}</text>')
    if hline is not None:
        out.append(f'<line x1="{LEFT}" y1="{ymap(hline):.1f}" x2="{W - RIGHT}" y2="{ymap(hline):.1f}" '
                   f'stroke="#555" stroke-dasharray="6,4"/>')
    for i, pts in enumerate(series.values()):
        c = PALETTE[i % len(PALETTE)]
        for x, y in pts:
            if math.isfinite(x) and math.isfinite(y):
                out.append(_marker(MARKERS[i % len(MARKERS)], xmap(x), ymap(y), c))
    _legend(out, list(series), "line")
    _note(out, note, LEFT)
    out.append("</svg>")
    with open(path, "w", encoding="utf-8") as fh:
        fh.write("\n".join(out) + "\n")
