#!/usr/bin/env python3
"""The ring model of `tapflow plan` against drops measured on a veth pair.

Part 1, the costs the model needs. `tapflow gen` sends at a fixed rate from namespace A (CPU 0);
`tapflow capture -s 64 -w FILE` listens in namespace B (CPU 1) with blocks of 4K to 1M and two
packet counts. Least squares over the runs fit the capture's CPU seconds from the moment it
listens to the moment it is told to stop (/proc schedstat; set-up and teardown of the ring,
which grow with the block count, are left out) as
    cpu = c0 + beta * packets + c_blk * blocks
where blocks is what the capture reports it was handed (summary JSON "blocks"): beta is the cost
per packet, c_blk the cost per block, c0 what is left. They become `tapflow plan`'s defaults.

Part 2, the model. For each (rate, block size, block count, stall), the capture runs while
`tapflow gen --rate` sends; 0.7 s in, the capture is stopped with SIGSTOP for the stall and
continued with SIGCONT. The kernel's drops (summary "dropped_kernel") are compared with
`tapflow plan --rate R --block-size B --block-count N --stall-ms S --json` at the rate gen
measured and the stall as it happened (SIGSTOP to SIGCONT, timed here).

Root only. Writes bench/out/plan-costs.csv and bench/out/plan.csv, draws docs/img/plan.svg
(predicted against measured drops; plot.py, --img elsewhere) and prints markdown tables.
"""

from __future__ import annotations

import argparse
import csv
import datetime
import json
import os
import platform
import signal
import sys
import time
from pathlib import Path

sys.dont_write_bytecode = True
sys.path.insert(0, str(Path(__file__).resolve().parent))
import benchlib as bl  # noqa: E402
import plot  # noqa: E402

FRAME = 64  # bytes on the wire with FCS: gen --size 60
SNAPLEN = 64
COST_BLOCKS = ["4K", "16K", "64K", "256K", "1M"]
# (rate pps, block size, block count, stall ms)
STALLS = [
    (200_000, "1M", 4, [20, 50, 100, 200]),   # the timer closes blocks (2000 of 7281 slots used)
    (200_000, "64K", 16, [20, 50, 100, 200]),  # full blocks, about the same capacity
    (500_000, "256K", 8, [10, 50, 100]),       # full blocks at a higher rate
    (50_000, "1M", 8, [50, 100, 200]),         # a slow link: n x retire timeout of traffic
]


def capture(args, pair, work: Path, tag: str, block: str, count: int, rate: int, packets: int,
            stall_ms: float | None) -> dict:
    js = work / f"{tag}.json"
    cap = pair.cmd("b", 1, [str(args.tapflow_bin), "capture", "-i", pair.vb, "-s", str(SNAPLEN),
                            "-w", str(work / f"{tag}.pcapng"), "-q", "--summary-json", str(js),
                            "--block-size", block, "--block-count", str(count),
                            "--retire-ms", "10"])
    p, t0 = bl.start(cap, work, tag)
    bl.wait_listening(p, pair.ifindex_b, work, tag, "capture")
    time.sleep(0.3)
    # Set-up (the ring's pages, the file) is not capture work: CPU from here on is.
    cpu0 = bl.proc_cpu(p.pid)
    # The capture runs as a child of `ip netns exec … taskset …`, which exec()s: p.pid is it.
    gjs = work / f"{tag}-gen.json"
    gen = pair.cmd("a", 0, [str(args.tapflow_bin), "gen", "-i", pair.va, "--size", str(FRAME - 4),
                            "--count", str(packets), "--rate", str(rate), "--flows", "64", "-q",
                            "--summary-json", str(gjs)])
    g, g0 = bl.start(gen, work, tag + "-gen")
    stalled = None
    if stall_ms is not None:
        time.sleep(0.7)
        t = time.monotonic()
        os.kill(p.pid, signal.SIGSTOP)
        time.sleep(stall_ms / 1000)
        os.kill(p.pid, signal.SIGCONT)
        stalled = (time.monotonic() - t) * 1000
    gf = bl.wait_rusage(g, g0, timeout=120)
    if gf.rc != 0:
        bl.die(f"gen failed: {gf.stderr[-400:]}")
    time.sleep(1.0)
    cpu1 = bl.proc_cpu(p.pid)
    p.send_signal(signal.SIGINT)
    f = bl.wait_rusage(p, t0, timeout=60)
    if f.rc != 0:
        bl.die(f"capture failed (exit {f.rc}): {f.stderr[-400:]}")
    s = json.loads(js.read_text())
    gs = json.loads(gjs.read_text())
    (work / f"{tag}.pcapng").unlink(missing_ok=True)
    return {"sent": int(gs["sent"]), "gen_pps": float(gs["pps"]), "received": s["received"],
            "recorded": s["recorded"], "dropped": s["dropped_kernel"], "blocks": s["blocks"],
            "freezes": s["freezes"], "cpu": cpu1 - cpu0, "stalled_ms": stalled}


def lstsq3(rows: list[tuple[float, float, float]], ys: list[float]) -> list[float]:
    """Solves the 3x3 normal equations of y = a*x0 + b*x1 + c*x2 (Gaussian elimination)."""
    m = [[sum(r[i] * r[j] for r in rows) for j in range(3)] + [sum(r[i] * y for r, y in zip(rows, ys))]
         for i in range(3)]
    for i in range(3):
        piv = max(range(i, 3), key=lambda k: abs(m[k][i]))
        m[i], m[piv] = m[piv], m[i]
        for k in range(3):
            if k != i:
                f = m[k][i] / m[i][i]
                m[k] = [a - f * b for a, b in zip(m[k], m[i])]
    return [m[i][3] / m[i][i] for i in range(3)]


def costs(args, pair, work: Path) -> tuple[float, float]:
    rows, out = [], []
    for block in COST_BLOCKS:
        count = max(4, (64 << 20) // size_bytes(block))  # 64 MiB of ring each time
        for packets in (args.packets // 4, args.packets):
            for rep in range(args.repeat):
                r = capture(args, pair, work, f"cost-{block}-{packets}-{rep}", block, count,
                            args.cost_rate, packets, None)
                r.update(block=block, packets=packets, rep=rep)
                out.append(r)
                rows.append((1.0, float(r["received"]), float(r["blocks"])))
                print(f"  cost {block:>5} {packets:>8} packets: {r['cpu']:.3f} s CPU, "
                      f"{r['blocks']} blocks ({r['received'] / max(1, r['blocks']):.0f} per block), "
                      f"{r['dropped']} dropped", file=sys.stderr)
    c0, beta, c_blk = lstsq3(rows, [r["cpu"] for r in out])
    with open(args.out / "plan-costs.csv", "w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=list(out[0].keys()))
        w.writeheader()
        w.writerows(out)
    print("\n### Costs (bench/plan.py part 1)\n")
    print(f"gen --rate {args.cost_rate}, capture -s {SNAPLEN} -w pcapng, {len(out)} runs; "
          f"fit cpu = c0 + beta*packets + c_blk*blocks\n")
    print("| block | packets | blocks | packets/block | CPU s | fit CPU s |")
    print("|---|---|---|---|---|---|")
    for r in out:
        fit = c0 + beta * r["received"] + c_blk * r["blocks"]
        print(f"| {r['block']} | {r['received']} | {r['blocks']} | "
              f"{r['received'] / max(1, r['blocks']):.0f} | {r['cpu']:.3f} | {fit:.3f} |")
    print(f"\nbeta = {beta * 1e9:.1f} ns per packet, c_blk = {c_blk * 1e9:.0f} ns per block, "
          f"c0 = {c0 * 1e3:.1f} ms left over\n")
    return beta * 1e9, c_blk * 1e9


def size_bytes(s: str) -> int:
    """A block size as tapflow reads it ("64K", "1M") in bytes."""
    return int(s[:-1]) << {"K": 10, "M": 20}[s[-1]]


def model(args, rate: float, block: str, count: int, stall: float, packet_ns: float,
          block_ns: float) -> dict:
    f = bl.run([str(args.tapflow_bin), "plan", "--rate", f"{rate:.0f}", "--frame-size", str(FRAME),
                "-s", str(SNAPLEN), "--block-size", block, "--block-count", str(count),
                "--retire-ms", "10", "--stall-ms", str(stall), "--cost-ns", f"{packet_ns:.1f}",
                "--block-cost-ns", f"{block_ns:.0f}", "--json"], args.work, "plan")
    if f.rc != 0:
        bl.die(f"tapflow plan failed: {f.stderr}")
    return json.loads(f.stdout)


def stalls(args, pair, work: Path, packet_ns: float, block_ns: float) -> None:
    out = []
    for rate, block, count, stall_list in STALLS:
        for stall in stall_list:
            for rep in range(args.repeat):
                packets = int(rate * (stall / 1000 + 2.0))
                r = capture(args, pair, work, f"stall-{rate}-{block}-{stall}-{rep}", block, count,
                            rate, packets, stall)
                # The model is given the stall as it happened (SIGSTOP to SIGCONT).
                m = model(args, r["gen_pps"], block, count, r["stalled_ms"], packet_ns,
                          block_ns)
                r.update(rate=rate, block=block, count=count, stall_ms=stall, rep=rep,
                         predicted=round(m["stall"]["loss"]["packets"]),
                         fill=m["ring"]["fill"], absorbs=m["ring"]["absorbs"])
                out.append(r)
                print(f"  stall {rate} {block}x{count} {stall} ms: dropped {r['dropped']}, "
                      f"predicted {r['predicted']}", file=sys.stderr)
    with open(args.out / "plan.csv", "w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=list(out[0].keys()))
        w.writeheader()
        w.writerows(out)
    plot.plot_plan(args.out / "plan.csv", args.img,
                   f"{FRAME}-byte frames, -s {SNAPLEN}, 10 ms retire timeout, SIGSTOP for the stall, "
                   f"{args.repeat} run(s) each; {platform.release()}, {datetime.date.today().isoformat()}")
    print("### Model vs measured drops (bench/plan.py part 2)\n")
    print("| rate (gen, pps) | ring | stall ms (asked, real) | model: packets/block | model: absorbs | "
          "model: lost | measured: lost | measured: packets/block |")
    print("|---|---|---|---|---|---|---|---|")
    for r in out:
        print(f"| {r['gen_pps']:.0f} | {r['count']} x {r['block']} | {r['stall_ms']}, "
              f"{r['stalled_ms']:.1f} | "
              f"{r['fill']:.0f} | {r['absorbs']:.0f} | {r['predicted']} | {r['dropped']} | "
              f"{r['received'] / max(1, r['blocks']):.0f} |")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tapflow", "--tapflow-bin", dest="tapflow_bin",
                    help="tapflow binary (default target/release/tapflow)")
    ap.add_argument("--packets", type=int, default=1_000_000, help="packets per cost run")
    ap.add_argument("--cost-rate", type=int, default=500_000, help="gen rate for the cost runs")
    ap.add_argument("--repeat", type=int, default=1)
    ap.add_argument("--skip-costs", action="store_true", help="use --cost-ns/--block-cost-ns")
    ap.add_argument("--cost-ns", type=float, default=None)
    ap.add_argument("--block-cost-ns", type=float, default=None)
    ap.add_argument("--img", default=str(plot.IMG), help="where the plot goes (default docs/img)")
    args = ap.parse_args()
    args.img = Path(args.img)
    if os.geteuid() != 0:
        bl.die("needs root (namespaces, packet sockets)")
    bl.need("ip", "taskset")
    args.tapflow_bin = bl.tapflow_path(args.tapflow_bin)
    args.out = bl.REPO / "bench" / "out"
    args.out.mkdir(parents=True, exist_ok=True)
    args.work = Path(os.environ.get("TMPDIR", "/tmp")) / f"tf-plan-{os.getpid()}"
    args.work.mkdir(parents=True, exist_ok=True)
    pair = bl.Pair("tfp")
    if args.skip_costs:
        packet_ns, block_ns = args.cost_ns, args.block_cost_ns
        if packet_ns is None or block_ns is None:
            bl.die("--skip-costs needs --cost-ns and --block-cost-ns")
    else:
        packet_ns, block_ns = costs(args, pair, args.work)
    stalls(args, pair, args.work, packet_ns, block_ns)


if __name__ == "__main__":
    main()
