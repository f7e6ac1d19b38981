#!/usr/bin/env python3
"""Live capture benchmark on a veth pair: the paper's Fig. 10 (collection ratio) and Fig. 11
(capture CPU) for tapflow, tcpdump, netsniff-ng and a floor (below), in the same run.

For each frame size (bytes on the wire including the 4-byte FCS, so the generator is given
size - 4), with the generator sending N packets as fast as it can from namespace A (CPU 0) and
each capture tool in turn listening on the veth end in namespace B (CPU 1):

  collection ratio = packets in the tool's output file (capinfos) / packets the generator sent
  CPU per Mpkt     = capture process user+sys seconds (wait4 rusage at exit, all threads, minus
                     what it had used when it started listening: set-up is not capture work)
                     / millions of packets in its file

Also, per size, the generators alone (no capture running): trafgen's and tapflow gen's packet
rate on the same core, for the "tapflow gen >= trafgen" requirement.

Tool "floor" is bench/floor.c,
compiled here with cc -O2: the least work a capture to pcapng can do with this kernel interface
and this disk (TPACKET_V3 ring walked with prefetch, EPBs into a buffer written by O_DIRECT,
nothing else). Its CPU is the yardstick for what any capture tool's CPU per packet can reach on
the machine; the table then also shows floor/tcpdump and tapflow/floor.

Tool "tapflow-xdp" (not in the default list) is tapflow with --source xdp: an XDP program hands
the frames to AF_XDP sockets before the stack; "tapflow-xdp-pass" adds --pass (copies of the
kept bytes through a BPF ring buffer, the frames going on to the stack). On veth the receive side's work (XDP program,
copy into the UMEM; or the stack and the copy into the ring) runs in the sender's softirq, not
in the capture process, so every row also has the path CPU per Mpkt: generator + capture
process CPU (rusage; softirq time is charged to the task it interrupts when, as on Debian's
kernels, IRQ time accounting is off), and the system-wide CPU (all cores' busy time from
/proc/stat over the same span, which on a shared machine counts other work too). The table
gives tapflow-xdp/tapflow and tapflow-xdp/floor of the capture and of the path CPU.

--baseline PATH adds a second tapflow binary, "tapflow-base", as one more tool (capture and
generator): it runs beside "tapflow" in the same rounds, the two taking turns at going first, and
the tables show tapflow/tapflow-base, for a regression check.

Root only. Writes bench/out/live.csv, draws docs/img/live-loss.svg, live-cpu.svg and gen.svg
(plot.py; --img elsewhere) and prints a markdown table. See bench/README.md.
"""

from __future__ import annotations

import argparse
import csv
import datetime
import json
import os
import platform
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

sys.dont_write_bytecode = True  # no __pycache__ in the source tree
sys.path.insert(0, str(Path(__file__).resolve().parent))
import benchlib as bl  # noqa: E402
import plot  # noqa: E402

SIZES = [64, 128, 256, 384, 512, 768, 1024, 1518]
TOOLS = ["tapflow", "tcpdump", "netsniff-ng", "floor"]
XDP = "tapflow-xdp"  # tapflow --source xdp, on request
XDP_PASS = "tapflow-xdp-pass"  # tapflow --source xdp --pass, on request
BASE = "tapflow-base"  # the --baseline binary
# Ours: built here, not looked up on PATH, and writing pcapng.
OWN_TOOLS = ("tapflow", BASE, "floor", XDP, XDP_PASS)
SRC_MAC = "02:00:00:00:00:01"
# A unicast MAC that is not the capture end's own: frames arrive as PACKET_OTHERHOST, as on a
# mirror port, and the IP stack in namespace B drops them right away.
DST_MAC = "02:00:00:00:00:02"
SRC_IP, DST_IP = "198.18.0.1", "198.18.0.2"


# ---------------------------------------------------------------------------------------------
# generators

def trafgen_conf(path: Path, frame: int) -> None:
    """A UDP/IPv4 frame of `frame` bytes without FCS, constant content."""
    payload = frame - 42
    if payload < 0:
        bl.die(f"frame size {frame} too small for UDP/IPv4")
    mac = lambda m: ",".join(f"0x{b}" for b in m.split(":"))  # noqa: E731
    ip = lambda a: ",".join(a.split("."))  # noqa: E731
    path.write_text(
        "{\n"
        f"  {mac(DST_MAC)}, {mac(SRC_MAC)}, c16(0x0800),\n"
        f"  0x45, 0x00, c16({frame - 14}), c16(0), c16(0x4000), 64, 17, csumip(14, 33),\n"
        f"  {ip(SRC_IP)}, {ip(DST_IP)},\n"
        f"  c16(1024), c16(9), c16({payload + 8}), c16(0),\n"
        f"  fill(0x00, {payload})\n"
        "}\n")


class Gen:
    def __init__(self, kind: str, args, pair: bl.Pair, work: Path):
        self.kind, self.args, self.pair, self.work = kind, args, pair, work

    def argv(self, frame: int, n: int, tag: str) -> list[str]:
        size = frame - 4
        if self.kind == "trafgen":
            conf = self.work / f"trafgen-{size}.cfg"
            if not conf.exists():
                trafgen_conf(conf, size)
            cmd = ["trafgen", "--no-sock-mem", "--notouch-irq", "--dev", self.pair.va,
                   "--conf", str(conf), "--num", str(n), "--cpus", "1"]
        else:
            binary = self.args.baseline_bin if self.kind == BASE else self.args.tapflow_bin
            cmd = [str(binary), "gen", "-i", self.pair.va, "--size", str(size),
                   "--count", str(n), "--flows", str(self.args.flows), "--src-mac", SRC_MAC,
                   "--dst-mac", DST_MAC, "--src-ip", SRC_IP, "--dst-ip", DST_IP, "-q",
                   "--summary-json", str(self.work / f"{tag}.json")]
        return self.pair.cmd("a", self.args.gen_cpu, cmd)

    def run(self, frame: int, n: int, tag: str) -> dict:
        f = bl.run(self.argv(frame, n, tag), self.work, tag, timeout=max(120, n / 20000))
        if f.rc != 0:
            bl.die(f"{self.kind} generator failed (exit {f.rc}): {f.stderr.strip()[-500:]}")
        if self.kind == "trafgen":
            txt = f.stdout + f.stderr
            sent = bl.grab_int(r"^\s*(\d+)\s+packets outgoing", txt)
            m = __import__("re").search(r"(\d+) sec, (\d+) usec on CPU\d+", txt)
            secs = int(m.group(1)) + int(m.group(2)) / 1e6 if m else f.wall
            if sent is None:
                bl.die(f"cannot parse trafgen output: {txt[-300:]}")
            return {"sent": sent, "seconds": secs, "pps": sent / secs if secs else 0.0,
                    "gen_cpu": f.cpu, "gen_wall": f.wall}
        js = json.loads((self.work / f"{tag}.json").read_text())
        secs = float(js.get("seconds") or f.wall)
        sent = int(js["sent"])
        return {"sent": sent, "seconds": secs, "pps": float(js.get("pps") or sent / secs),
                "gen_cpu": f.cpu, "gen_wall": f.wall, "gen_failed": js.get("failed", 0)}


# ---------------------------------------------------------------------------------------------
# capture tools

def capture_argv(tool: str, args, pair: bl.Pair, out: Path, js: Path) -> list[str]:
    if tool in ("tapflow", BASE, XDP, XDP_PASS):
        binary = args.baseline_bin if tool == BASE else args.tapflow_bin
        cmd = [str(binary), "capture", "-i", pair.vb, "-s", str(args.snaplen),
               "-w", str(out), "-q", "--summary-json", str(js)]
        if tool in (XDP, XDP_PASS):
            cmd += ["--source", "xdp"] + (["--pass"] if tool == XDP_PASS else [])
    elif tool == "tcpdump":
        # -Z root: Debian's tcpdump drops to user "tcpdump" before creating the -w file.
        # Ring size: libpcap's default (-B not given, 2 MiB).
        cmd = ["tcpdump", "-i", pair.vb, "-s", str(args.snaplen), "-w", str(out), "-n", "-Z", "root"]
    elif tool == "netsniff-ng":
        # netsniff-ng has no snaplen option; a classic BPF program "ret #snaplen" (as compiled by
        # `tcpdump -dd -s N ''`) makes the kernel truncate, and netsniff-ng writes tp_snaplen.
        cmd = ["netsniff-ng", "--in", pair.vb, "--out", str(out), "--silent", "--no-sock-mem",
               "--notouch-irq", "--filter", str(args.nsng_bpf)]
        if args.nsng_full:
            cmd = cmd[:-2]
    elif tool == "floor":
        cmd = [str(args.floor_bin), pair.vb, str(out), str(args.snaplen)]
    else:
        raise ValueError(tool)
    return pair.cmd("b", args.cap_cpu, cmd)


def parse_tool_stats(tool: str, text: str, js: Path) -> dict:
    if tool == "tcpdump":
        return {"tool_recorded": bl.grab_int(r"^(\d+) packets? captured", text),
                "tool_received": bl.grab_int(r"^(\d+) packets? received by filter", text),
                "tool_dropped": bl.grab_int(r"^(\d+) packets? dropped by kernel", text)}
    if tool == "netsniff-ng":
        inc = bl.grab_int(r"^\s*(\d+)\s+packets incoming", text)
        passed = bl.grab_int(r"^\s*(\d+)\s+packets passed filter", text)
        failed = bl.grab_int(r"^\s*(\d+)\s+packets failed filter", text)
        return {"tool_recorded": passed, "tool_received": inc, "tool_dropped": failed}
    if tool == "floor":
        n = bl.grab_int(r"^floor: (\d+) packets", text)
        return {"tool_recorded": n, "tool_received": n,
                "tool_dropped": bl.grab_int(r"(\d+) dropped by kernel", text)}
    # tapflow, tapflow-base
    d: dict = {}
    if js.exists():
        s = json.loads(js.read_text())
        d = {"tool_recorded": s.get("recorded"), "tool_received": s.get("received"),
             "tool_dropped": (s.get("dropped_kernel") or 0) + (s.get("dropped_ours") or 0),
             "tapflow_files": s.get("files") or []}
    return d


def one_capture(tool: str, frame: int, gen: Gen, args, pair: bl.Pair, work: Path, rep: int) -> dict:
    tag = f"{tool}-{frame}-{rep}"
    ext = "pcapng" if tool in OWN_TOOLS else "pcap"
    out = work / f"{tag}.{ext}"
    js = work / f"{tag}.summary.json"
    for stale in (out, js):
        stale.unlink(missing_ok=True)
    p, t0 = bl.start(capture_argv(tool, args, pair, out, js), work, tag)
    if tool in (XDP, XDP_PASS):
        bl.wait_xdp_attached(p, pair, work, tag, f"{tool} on {pair.vb}")
    else:
        bl.wait_listening(p, pair.ifindex_b, work, tag, f"{tool} on {pair.vb}")
    time.sleep(args.settle)
    # CPU spent setting up (netsniff-ng spends seconds of system time building its ring) is not
    # capture work: sample it here and subtract it from the total that wait4 reports at exit.
    cpu_ready = bl.proc_cpu(p.pid)
    rx0, drop0 = pair.rx_stats()
    busy0 = bl.system_busy_s()
    g = gen.run(frame, args.packets, f"gen-{tag}")
    time.sleep(args.drain)
    busy1 = bl.system_busy_s()
    rx1, drop1 = pair.rx_stats()
    os.kill(p.pid, signal.SIGINT)
    f = bl.wait_rusage(p, t0, timeout=60)
    text = f.stdout + f.stderr
    st = parse_tool_stats(tool, text, js)
    files = [Path(x) for x in st.pop("tapflow_files", [])] or [out]
    files = [x if x.is_absolute() else work / x for x in files]
    try:
        in_file = sum(bl.capinfos_count(x) for x in files)
    except (RuntimeError, ValueError) as e:
        print(f"warning: {tool} {frame}: {e}", file=sys.stderr)
        in_file = 0
    caplens = ""
    if args.check_snaplen and files and files[0].exists():
        r = subprocess.run(["capinfos", "-T", "-r", "-l", str(files[0])], capture_output=True, text=True)
        caplens = r.stdout.strip().split("\t")[-1] if r.returncode == 0 else "?"
    sent = g["sent"]
    row = {
        "frame": frame, "tool": tool, "rep": rep, "sent": sent, "gen_pps": round(g["pps"]),
        "link_rx": rx1 - rx0, "link_dropped": drop1 - drop0, "in_file": in_file,
        "ratio": in_file / sent if sent else float("nan"),
        "cpu_s": round(f.cpu - cpu_ready, 4), "cpu_total_s": round(f.cpu, 4),
        "cpu_startup_s": round(cpu_ready, 4), "utime_s": round(f.utime, 4), "stime_s": round(f.stime, 4),
        "cpu_s_per_mpkt": round((f.cpu - cpu_ready) / (in_file / 1e6), 4) if in_file else float("nan"),
        "system_cpu_s_per_mpkt": round((busy1 - busy0) / (in_file / 1e6), 4) if in_file else float("nan"),
        "path_cpu_s_per_mpkt": (round((g["gen_cpu"] + f.cpu - cpu_ready) / (in_file / 1e6), 4)
                                if in_file else float("nan")),
        "exit": f.rc, "tool_received": st.get("tool_received"), "tool_recorded": st.get("tool_recorded"),
        "tool_dropped": st.get("tool_dropped"), "snaplen_in_file": caplens,
        "file_bytes": sum(x.stat().st_size for x in files if x.exists()),
    }
    if f.rc not in (0, 130, -2):
        print(f"warning: {tool} exited {f.rc}: {f.stderr.strip()[-300:]}", file=sys.stderr)
    if tool in ("tapflow", BASE, XDP, XDP_PASS) and st.get("tool_recorded") is not None and st["tool_recorded"] != in_file:
        print(f"warning: {tool} summary says recorded={st['tool_recorded']} but its files hold "
              f"{in_file} packets", file=sys.stderr)
    if not args.keep:
        for x in files:
            x.unlink(missing_ok=True)
    return row


# ---------------------------------------------------------------------------------------------

def markdown(rows: list[dict], gens: list[dict], tools: list[str]) -> str:
    by = {}
    for r in rows:
        by.setdefault((r["frame"], r["tool"]), []).append(r)
    lines = []
    head = ["frame B"]
    for t in tools:
        head += [f"{t} ratio %", f"{t} CPU s/Mpkt"]
    pairs = [(a, b) for a, b in (("tapflow", "tcpdump"), ("floor", "tcpdump"), ("tapflow", "floor"),
                                 ("tapflow", BASE), (XDP, "tapflow"), (XDP, "floor"),
                                 (XDP_PASS, "tapflow"))
             if a in tools and b in tools]
    head += [f"{a}/{b} CPU" for a, b in pairs]
    sys_pairs = [(a, b) for a, b in ((XDP, "tapflow"), (XDP, "floor"), (XDP_PASS, "tapflow"))
                 if a in tools and b in tools]
    head += [f"{a}/{b} path CPU" for a, b in sys_pairs]
    head.append("gen pps")
    lines.append("| " + " | ".join(head) + " |")
    lines.append("|" + "---:|" * len(head))
    for frame in sorted({r["frame"] for r in rows}):
        cells = [str(frame)]
        cpu, sys_cpu = {}, {}
        pps = []
        for t in tools:
            rs = by.get((frame, t), [])
            ratio = bl.median([r["ratio"] for r in rs]) * 100 if rs else float("nan")
            c = bl.median([r["cpu_s_per_mpkt"] for r in rs]) if rs else float("nan")
            cpu[t] = c
            sys_cpu[t] = bl.median([r["path_cpu_s_per_mpkt"] for r in rs]) if rs else float("nan")
            pps += [r["gen_pps"] for r in rs]
            cells += [f"{ratio:.2f}", f"{c:.3f}"]
        for a, b in pairs:
            x, y = cpu[a], cpu[b]
            cells.append(f"{x / y:.2f}" if y and y == y and x == x else "n/a")
        for a, b in sys_pairs:
            x, y = sys_cpu[a], sys_cpu[b]
            cells.append(f"{x / y:.2f}" if y and y == y and x == x else "n/a")
        cells.append(f"{bl.median(pps):,.0f}")
        lines.append("| " + " | ".join(cells) + " |")
    if gens:
        lines.append("")
        lines.append("Generators alone (no capture), same core, packets per second:")
        lines.append("")
        kinds = [k for k in ("trafgen", "tapflow", BASE) if any(g["gen"] == k for g in gens)]
        gpairs = [(a, b) for a, b in (("tapflow", "trafgen"), (BASE, "trafgen"), ("tapflow", BASE))
                  if a in kinds and b in kinds]
        lines.append("| frame B | " + " | ".join(kinds) + "".join(f" | {a}/{b}" for a, b in gpairs) + " |")
        lines.append("|" + "---:|" * (len(kinds) + 1 + len(gpairs)))
        for frame in sorted({g["frame"] for g in gens}):
            v = {k: bl.median([g["pps"] for g in gens if g["frame"] == frame and g["gen"] == k])
                 for k in kinds}
            cells = [str(frame)] + [f"{v[k]:,.0f}" for k in kinds]
            cells += [f"{v[a] / v[b]:.2f}" if v[b] else "n/a" for a, b in gpairs]
            lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def round_order(tools: list[str], rep: int) -> list[str]:
    """The tools of round `rep`: tapflow and tapflow-base swap places every other round, since
    on this machine whichever of two binaries runs second in a fixed order measures ~1% faster."""
    order = list(tools)
    if rep % 2 and "tapflow" in order and BASE in order:
        i, j = order.index("tapflow"), order.index(BASE)
        order[i], order[j] = order[j], order[i]
    return order


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--packets", type=int, default=1_000_000, help="packets per run (default 1000000)")
    ap.add_argument("--sizes", default=",".join(map(str, SIZES)),
                    help="frame sizes incl. FCS, comma-separated (default %(default)s)")
    ap.add_argument("--tools", default=",".join(TOOLS), help="capture tools (default %(default)s)")
    ap.add_argument("--gen", choices=["tapflow", "trafgen"], default="tapflow",
                    help="generator used for the capture runs (default tapflow)")
    ap.add_argument("--no-gen-baseline", action="store_true",
                    help="skip the generator-alone runs (trafgen vs tapflow gen pps)")
    ap.add_argument("--repeat", type=int, default=1, help="runs per (size, tool); the table shows medians")
    ap.add_argument("--flows", type=int, default=1, help="tapflow gen --flows (default 1, like trafgen)")
    ap.add_argument("--snaplen", type=int, default=64)
    ap.add_argument("--gen-cpu", type=int, default=0)
    ap.add_argument("--cap-cpu", type=int, default=1)
    ap.add_argument("--settle", type=float, default=0.3, help="seconds between listening and sending")
    ap.add_argument("--drain", type=float, default=1.5,
                    help="seconds between the generator's exit and SIGINT to the capture tool "
                         "(>1 s so tcpdump's 1 s ring-block timeout can hand over the last block)")
    ap.add_argument("--nsng-full", action="store_true", help="run netsniff-ng without the snaplen BPF")
    ap.add_argument("--no-check-snaplen", dest="check_snaplen", action="store_false",
                    help="skip reading the caplen range of each output file")
    ap.add_argument("--tapflow", dest="tapflow_bin", default=None,
                    help="tapflow binary (default target/release/tapflow)")
    ap.add_argument("--baseline", dest="baseline_bin", default=None, metavar="PATH",
                    help="a second tapflow binary, run as tool 'tapflow-base' beside 'tapflow' "
                         "(capture and generator) for a regression check")
    ap.add_argument("--out", default=str(bl.REPO / "bench" / "out"), help="output directory")
    ap.add_argument("--img", default=str(plot.IMG), help="where the plots go (default docs/img)")
    ap.add_argument("--keep", action="store_true", help="keep the capture files")
    args = ap.parse_args()

    if os.geteuid() != 0:
        bl.die("must run as root (namespaces, packet sockets)")
    sizes = [int(s) for s in args.sizes.split(",") if s]
    tools = [t for t in args.tools.split(",") if t]
    for t in tools:
        if t not in TOOLS + [XDP, XDP_PASS]:
            bl.die(f"unknown tool {t!r} (choose from {', '.join(TOOLS + [XDP, XDP_PASS])})", 2)
    if args.baseline_bin:
        args.baseline_bin = Path(args.baseline_bin).resolve()
        if not args.baseline_bin.exists():
            bl.die(f"--baseline {args.baseline_bin} not found")
        # Beside tapflow, so the two run back to back in every round.
        at = tools.index("tapflow") + 1 if "tapflow" in tools else 0
        tools.insert(at, BASE)
    for s in sizes:
        if not 64 <= s <= 1518:
            bl.die(f"frame size {s} out of range 64..1518", 2)
    bl.need("ip", "taskset", "capinfos", *(t for t in tools if t not in OWN_TOOLS))
    if not args.no_gen_baseline or args.gen == "trafgen":
        bl.need("trafgen")
    args.tapflow_bin = bl.tapflow_path(args.tapflow_bin)
    uses_tapflow = "tapflow" in tools or args.gen == "tapflow" or not args.no_gen_baseline
    if uses_tapflow and not args.tapflow_bin.exists():
        if "tapflow" in tools or args.gen == "tapflow":
            bl.die(f"{args.tapflow_bin} not found: build it (cargo build --release) or run with "
                   "--gen trafgen --tools tcpdump,netsniff-ng")
    if os.cpu_count() and max(args.gen_cpu, args.cap_cpu) >= os.cpu_count():
        bl.die(f"CPU {max(args.gen_cpu, args.cap_cpu)} does not exist")

    outdir = Path(args.out)
    outdir.mkdir(parents=True, exist_ok=True)
    work = outdir / f"live-work-{os.getpid()}"
    work.mkdir()
    import atexit
    if not args.keep:
        atexit.register(shutil.rmtree, work, True)
    if "floor" in tools:
        bl.need("cc")
        args.floor_bin = bl.build_c("floor", work)
    args.nsng_bpf = work / "snap.bpf"
    args.nsng_bpf.write_text(subprocess.run(["tcpdump", "-dd", "-s", str(args.snaplen), ""],
                                            capture_output=True, text=True, check=True).stdout
                             if shutil.which("tcpdump") else f"{{ 0x6, 0, 0, {args.snaplen:#010x} }},\n")

    pair = bl.Pair()
    gen = Gen(args.gen, args, pair, work)
    print(f"# live benchmark: {len(sizes)} sizes x {tools}, {args.packets} packets per run, "
          f"generator {args.gen} on CPU {args.gen_cpu}, capture on CPU {args.cap_cpu}, "
          f"veth {pair.va}->{pair.vb}", file=sys.stderr)

    rows: list[dict] = []
    gens: list[dict] = []
    for frame in sizes:
        if not args.no_gen_baseline:
            kinds = ["trafgen"] + (["tapflow"] if args.tapflow_bin.exists() else []) + \
                ([BASE] if args.baseline_bin else [])
            for kind in kinds:
                for rep in range(args.repeat):
                    r = Gen(kind, args, pair, work).run(frame, args.packets, f"alone-{kind}-{frame}-{rep}")
                    gens.append({"frame": frame, "gen": kind, "rep": rep, **r})
                    print(f"  {frame:5d} B  {kind:8s} alone: {r['pps']:12,.0f} pps", file=sys.stderr)
        for rep in range(args.repeat):
            for tool in round_order(tools, rep):
                row = one_capture(tool, frame, gen, args, pair, work, rep)
                rows.append(row)
                print(f"  {frame:5d} B  {tool:12s} sent {row['sent']:>9} at {row['gen_pps']:>9,} pps  "
                      f"file {row['in_file']:>9}  ratio {row['ratio'] * 100:7.3f}%  "
                      f"cpu {row['cpu_s']:.3f}s = {row['cpu_s_per_mpkt']:.3f} s/Mpkt  "
                      f"path {row['path_cpu_s_per_mpkt']:.3f} system {row['system_cpu_s_per_mpkt']:.3f} s/Mpkt  "
                      f"(tool: recv {row['tool_received']} drop {row['tool_dropped']}; "
                      f"link drop {row['link_dropped']})", file=sys.stderr)

    # CSV: capture rows, then generator-alone rows (tool column = "gen:<kind>").
    csv_path = outdir / "live.csv"
    fields = list(rows[0].keys()) if rows else ["frame", "tool"]
    with open(csv_path, "w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=fields + ["gen", "gen_alone_pps", "generator"],
                           extrasaction="ignore")
        w.writeheader()
        for r in rows:
            w.writerow({**r, "generator": args.gen})
        for g in gens:
            w.writerow({"frame": g["frame"], "tool": f"gen:{g['gen']}", "rep": g["rep"], "sent": g["sent"],
                        "gen": g["gen"], "gen_alone_pps": round(g["pps"]), "cpu_s": round(g["gen_cpu"], 4)})

    note = (f"{args.packets:,} pkts/run, medians of {args.repeat}, gen={args.gen} on CPU{args.gen_cpu}, "
            f"capture on CPU{args.cap_cpu}, snaplen {args.snaplen}, veth, {platform.release()}, "
            f"{datetime.date.today().isoformat()}")
    made = plot.plot_live(csv_path, Path(args.img), note)
    print(markdown(rows, gens, tools))
    print(f"\n{note}\nwrote {', '.join(map(str, [csv_path, *made]))}")


if __name__ == "__main__":
    main()
