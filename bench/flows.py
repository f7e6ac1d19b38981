#!/usr/bin/env python3
"""Offline flow-metering benchmark: CPU per packet of `tapflow flows -r` against three flow meters
that read the same pcap (softflowd, nfpcapd, argus), all pinned to one CPU.

    python3 bench/flows.py                       # bench/out/big.pcap (built if missing), 3 runs each
    python3 bench/flows.py --runs 5 --tools tapflow,nfpcapd
    python3 bench/flows.py --skip-tapflow        # anchors only

Uses (or builds with scripts/make-trace.sh, like bench/offline.py) bench/out/big.pcap: >= 1M packets,
~300k bidirectional 5-tuple flows, ~153 h of capture time. Warms the page cache (and tops it up
before every run: this VM's host drops cached pages all the time, see benchlib.top_up), then
runs every command --runs times after --warmup untimed runs (interleaved: run 1 of each tool,
then run 2 of each, ...), each under `taskset -c CPU`, and takes the MEDIAN of the user+sys CPU seconds that wait4
reports for the process, all its threads and reaped children. Before every timed run the harness
calls sync, so that the previous tool's output (nfpcapd's, argus's files) is not written back
while the next tool is timed. The harness itself (and the UDP sink)
moves to the other CPUs. Same timeouts for every tool where it has the knob (active 300 s, idle 60 s by default):

  tapflow csv    tapflow flows -r T --csv /dev/null -q --active-timeout A --idle-timeout I
                   --idle-timeout closed=I
  tapflow ipfix  the same with --export ipfix://127.0.0.1:PORT --export-rate 0 instead of --csv
                 (UDP sink below; unpaced, as fast as the socket takes them); messages in IP
                 packets of up to 9000 bytes (the loopback route's MTU, capped: docs/flows.md)
  tapflow ipfix-1500  the same with --export-mtu 1500 (messages as to a collector behind Ethernet)
  softflowd      softflowd -d -c none -r T -n 127.0.0.1:PORT -v 10 -b -A milli -m 2000000
                   -t maxlife=A -t tcp=I -t tcp.rst=I -t tcp.fin=I -t udp=I -t icmp=I -t general=I
                 (-c none is required: see bench/FLOW-ANCHORS.md. With -r softflowd expires nothing
                 on packet time, so -t is inert: only -m (table full) and end of file end flows.)
  nfpcapd        nfpcapd -r T -w DIR -t 86400 -e A,I     (nfdump 1.7.1; files, no compression)
  argus          argus -X -F argus.conf -r T -w FILE     (argus.conf written here: Bidirectional,
                   CLASSIC_5_TUPLE, ARGUS_FLOW_STATUS_INTERVAL=A, every ARGUS_*_TIMEOUT=I)

The UDP sink is a thread of this script on 127.0.0.1 (256 MiB receive buffer); it counts IPFIX data
records (options records apart) and sequence-number errors, so the IPFIX rows are checked too.
Before and after the timed runs, bench/stream.c (built with cc into the output directory) makes
one pass over the cached trace: the least any reader of it costs, printed in the footnote, as the
memory bandwidth the host leaves this VM moves tapflow's times more than the anchors'.
After a tool's first run its output is counted (not timed): tapflow's summary line, softflowd's
statistics, `nfdump -R DIR -I`, `racount`.

--baseline PATH runs a second tapflow binary beside every tapflow row chosen, as "tapflow-base",
"tapflow-base-ipfix", "tapflow-base-ipfix-1500", in the same rounds (each pair taking turns at
going first), and the table shows each tapflow row's CPU ÷ its base row's, for a regression check.

Writes bench/out/flows.csv and bench/out/flows.md, draws docs/img/flows.svg (plot.py; --img
elsewhere) and prints the markdown table. A tapflow binary without the `flows` command is skipped
with a message.
"""

from __future__ import annotations

import argparse
import atexit
import csv
import datetime
import os
import platform
import re
import shutil
import socket
import struct
import subprocess
import sys
import threading
import time
from pathlib import Path

sys.dont_write_bytecode = True  # no __pycache__ in the source tree
sys.path.insert(0, str(Path(__file__).resolve().parent))
import benchlib as bl  # noqa: E402
import plot  # noqa: E402

TOOLS = ["tapflow", "tapflow-ipfix", "tapflow-ipfix-1500", "softflowd", "nfpcapd", "argus"]
# The --baseline binary's row for each tapflow row.
BASE_OF = {"tapflow": "tapflow-base", "tapflow-ipfix": "tapflow-base-ipfix",
           "tapflow-ipfix-1500": "tapflow-base-ipfix-1500"}
ALL = TOOLS + list(BASE_OF.values())
IPFIX_TOOLS = ("tapflow-ipfix", "tapflow-ipfix-1500", "tapflow-base-ipfix", "tapflow-base-ipfix-1500",
               "softflowd")
SO_RCVBUFFORCE = getattr(socket, "SO_RCVBUFFORCE", 33)


class IpfixSink:
    """UDP receiver on 127.0.0.1 in a thread: counts datagrams, IPFIX data records (per template
    kind) and sequence errors (RFC 7011: sequence = data records sent before this message, per
    observation domain)."""

    def __init__(self) -> None:
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        try:
            self.sock.setsockopt(socket.SOL_SOCKET, SO_RCVBUFFORCE, 256 << 20)
        except OSError:
            self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 256 << 20)
        self.sock.bind(("127.0.0.1", 0))
        self.sock.settimeout(0.05)
        self.port = self.sock.getsockname()[1]
        self.lock = threading.Lock()
        self.stop = False
        self.reset()
        self.thread = threading.Thread(target=self._loop, daemon=True)
        self.thread.start()

    def reset(self) -> None:
        with getattr(self, "lock", threading.Lock()):
            self.datagrams = self.octets = self.records = self.option_records = 0
            self.unknown_sets = self.seq_errors = self.not_ipfix = 0
            self.templates: dict[tuple[int, int], tuple[int, bool]] = {}  # (domain, id) -> (len, options)
            self.next_seq: dict[int, int] = {}

    def _loop(self) -> None:
        buf = bytearray(65536)
        while not self.stop:
            try:
                n = self.sock.recv_into(buf)
            except socket.timeout:
                continue
            except OSError:
                return
            with self.lock:
                self.datagrams += 1
                self.octets += n
                self._ipfix(bytes(buf[:n]))

    def _ipfix(self, d: bytes) -> None:
        if len(d) < 16 or struct.unpack_from("!H", d, 0)[0] != 10:
            self.not_ipfix += 1
            return
        length, _, seq, dom = struct.unpack_from("!HIII", d, 2)
        exp = self.next_seq.get(dom)
        if exp is not None and exp != seq:
            self.seq_errors += 1
        data_records = 0
        off, end = 16, min(length, len(d))
        while off + 4 <= end:
            sid, slen = struct.unpack_from("!HH", d, off)
            if slen < 4:
                break
            body, off = d[off + 4:off + slen], off + slen
            if sid in (2, 3):
                p = 0
                while p + 4 <= len(body):
                    tid, cnt = struct.unpack_from("!HH", body, p)
                    p += 4
                    if sid == 3:
                        p += 2  # scope field count
                    if cnt == 0:  # template withdrawal
                        continue
                    rlen = 0
                    for _ in range(cnt):
                        fid, flen = struct.unpack_from("!HH", body, p)
                        p += 8 if fid & 0x8000 else 4
                        rlen += flen if flen != 0xFFFF else 1  # variable length: not counted exactly
                    self.templates[(dom, tid)] = (rlen, sid == 3)
            elif sid >= 256:
                t = self.templates.get((dom, sid))
                if t is None or t[0] == 0:
                    self.unknown_sets += 1
                    continue
                k = len(body) // t[0]
                data_records += k
                if t[1]:
                    self.option_records += k
                else:
                    self.records += k
        self.next_seq[dom] = (seq + data_records) & 0xFFFFFFFF

    def snapshot(self) -> dict:
        with self.lock:
            return {"datagrams": self.datagrams, "octets": self.octets, "records": self.records,
                    "option_records": self.option_records, "seq_errors": self.seq_errors,
                    "unknown_sets": self.unknown_sets, "not_ipfix": self.not_ipfix}

    def close(self) -> None:
        self.stop = True
        self.thread.join(1)
        self.sock.close()


def tapflow_has_flows(tapflow: Path) -> tuple[bool, str]:
    if not tapflow.exists():
        return False, f"{tapflow} not found (cargo build --release)"
    r = subprocess.run([str(tapflow), "flows", "--help"], capture_output=True, text=True)
    if r.returncode != 0 or "--idle-timeout" not in r.stdout:
        return False, f"{tapflow} has no usable `flows` command yet ({(r.stderr or r.stdout).strip()[:120]})"
    return True, ""


def tool_version(argv: list[str], pattern: str) -> str:
    r = subprocess.run(argv, capture_output=True, text=True)
    m = re.search(pattern, r.stdout + r.stderr)
    return m.group(1) if m else "?"


def median(xs: list[float]) -> float:
    return bl.median(xs)


def round_order(tools: list[str], run: int) -> list[str]:
    """The tools of round `run`: each tapflow row and its tapflow-base row swap places every
    other round, since on this machine whichever of two binaries runs second in a fixed order
    measures ~1% faster."""
    order = list(tools)
    if run % 2:
        for new, base in BASE_OF.items():
            if new in order and base in order:
                i, j = order.index(new), order.index(base)
                order[i], order[j] = order[j], order[i]
    return order


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--trace", default=None, help="trace to use (default bench/out/big.pcap, built if missing)")
    ap.add_argument("--min-packets", type=int, default=1_000_000, help="make-trace.sh N_MIN (default 1000000)")
    ap.add_argument("--rebuild", action="store_true", help="rebuild the trace even if it exists")
    ap.add_argument("--runs", type=int, default=3, help="runs per command, the median is kept (default 3)")
    ap.add_argument("--warmup", type=int, default=1, help="untimed runs of each tool first (default 1)")
    ap.add_argument("--cpu", type=int, default=1, help="pin every command to this CPU (-1: no pinning)")
    ap.add_argument("--active", type=int, default=300, help="active timeout, s (default 300)")
    ap.add_argument("--idle", type=int, default=60, help="idle timeout, s (default 60)")
    ap.add_argument("--tools", default=",".join(TOOLS), help=f"comma list from {','.join(TOOLS)}")
    ap.add_argument("--tapflow", dest="tapflow_bin", default=None,
                    help="tapflow binary (default target/release/tapflow)")
    ap.add_argument("--baseline", dest="baseline_bin", default=None, metavar="PATH",
                    help="a second tapflow binary, run as tapflow-base rows beside the tapflow rows")
    ap.add_argument("--skip-tapflow", action="store_true", help="time only the anchors")
    ap.add_argument("--out", default=str(bl.REPO / "bench" / "out"), help="output directory")
    ap.add_argument("--img", default=str(plot.IMG), help="where the plot goes (default docs/img)")
    args = ap.parse_args()

    tools = [t.strip() for t in args.tools.split(",") if t.strip()]
    bad = [t for t in tools if t not in TOOLS]
    if bad:
        bl.die(f"unknown tools: {', '.join(bad)} (choose from {', '.join(TOOLS)})")
    if args.skip_tapflow:
        tools = [t for t in tools if not t.startswith("tapflow")]
    need = {"softflowd": ["softflowd"], "nfpcapd": ["nfpcapd", "nfdump"], "argus": ["argus", "racount"]}
    bl.need("capinfos", *[x for t in tools for x in need.get(t, [])])
    if args.cpu >= 0:
        bl.need("taskset")
    if args.active > 3600 or args.idle > 3600:
        print("# note: nfpcapd accepts at most 3600 s for either timeout", file=sys.stderr)

    outdir = Path(args.out)
    outdir.mkdir(parents=True, exist_ok=True)
    tapflow = bl.tapflow_path(args.tapflow_bin)
    skipped: list[str] = []
    if any(t.startswith("tapflow") for t in tools):
        ok, why = tapflow_has_flows(tapflow)
        if not ok:
            print(f"# SKIP tapflow: {why}", file=sys.stderr)
            skipped.append(f"tapflow skipped: {why}")
            tools = [t for t in tools if not t.startswith("tapflow")]
    baseline = Path(args.baseline_bin).resolve() if args.baseline_bin else None
    if baseline:
        ok, why = tapflow_has_flows(baseline)
        if not ok:
            bl.die(f"--baseline: {why}")
        if not any(t in BASE_OF for t in tools):
            bl.die("--baseline needs a tapflow row in --tools")
        # Each base row right after its tapflow row, so the two run back to back in every round.
        tools = [x for t in tools for x in ([t, BASE_OF[t]] if t in BASE_OF else [t])]
    if not tools:
        bl.die("nothing to run")

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

    work = outdir / f"flows-work-{os.getpid()}"
    work.mkdir()
    atexit.register(shutil.rmtree, work, True)

    # Keep the harness (and the sink thread) off the measured CPU.
    if args.cpu >= 0:
        others = set(os.sched_getaffinity(0)) - {args.cpu}
        if others:
            os.sched_setaffinity(0, others)
    sink = IpfixSink() if any(t in IPFIX_TOOLS for t in tools) else None
    if sink:
        atexit.register(sink.close)

    A, I = args.active, args.idle
    argus_conf = work / "argus.conf"
    argus_conf.write_text(
        "ARGUS_FLOW_TYPE=\"Bidirectional\"\nARGUS_FLOW_KEY=\"CLASSIC_5_TUPLE\"\n"
        f"ARGUS_FLOW_STATUS_INTERVAL={A}\nARGUS_MAR_STATUS_INTERVAL=300\n"
        + "".join(f"ARGUS_{p}_TIMEOUT={I}\n" for p in ("IP", "TCP", "ICMP", "IGMP", "FRAG", "ARP", "OTHER"))
        + "ARGUS_SET_PID=no\n")
    T = str(trace)
    port = str(sink.port) if sink else "0"
    tf_timeouts = ["--active-timeout", str(A), "--idle-timeout", str(I), "--idle-timeout", f"closed={I}"]
    cmds = {
        "tapflow": [str(tapflow), "flows", "-r", T, "--csv", "/dev/null", "-q", *tf_timeouts],
        # Unpaced (--export-rate 0; the default paces for a collector that would drop a burst):
        # this measures the exporter, not the pace. 0 means unpaced to older binaries too.
        "tapflow-ipfix": [str(tapflow), "flows", "-r", T, "--export", f"ipfix://127.0.0.1:{port}", "-q",
                          "--export-rate", "0", *tf_timeouts],
        "softflowd": ["softflowd", "-d", "-c", "none", "-r", T,
                      "-n", f"127.0.0.1:{port}", "-v", "10", "-b", "-A", "milli", "-m", "2000000",
                      "-t", f"maxlife={A}", "-t", f"tcp={I}", "-t", f"tcp.rst={I}", "-t", f"tcp.fin={I}",
                      "-t", f"udp={I}", "-t", f"icmp={I}", "-t", f"general={I}"],
        "nfpcapd": ["nfpcapd", "-r", T, "-w", "{out}", "-t", "86400", "-e", f"{A},{I}"],
        "argus": ["argus", "-X", "-F", str(argus_conf), "-r", T, "-w", "{out}"],
    }
    cmds["tapflow-ipfix-1500"] = [*cmds["tapflow-ipfix"], "--export-mtu", "1500"]
    if baseline:
        for new, base in BASE_OF.items():
            cmds[base] = [str(baseline), *cmds[new][1:]]
    tapflow_rows = [t for t in ALL if t.startswith("tapflow")]
    byte_unit = {t: "frame length" if t == "argus" else "IP length" for t in ALL}
    direction = {"softflowd": "biflow (-b)", "nfpcapd": "one record per direction", "argus": "biflow",
                 **{t: "biflow (RFC 5103)" if "ipfix" in t else "biflow" for t in tapflow_rows}}
    given = {
        **{t: " ".join(tf_timeouts) for t in tapflow_rows},
        "softflowd": f"-t maxlife={A}, tcp/tcp.rst/tcp.fin/udp/icmp/general={I} (all inert with -r), -m 2000000",
        "nfpcapd": f"-e {A},{I} (checked by a sweep every ~10 s of packet time; max 3600 each)",
        "argus": f"ARGUS_FLOW_STATUS_INTERVAL={A}, ARGUS_{{IP,TCP,ICMP,IGMP,FRAG,ARP,OTHER}}_TIMEOUT={I}",
    }

    pin = ["taskset", "-c", str(args.cpu)] if args.cpu >= 0 else []

    def shown(argv: list[str]) -> str:
        """A command as flows.md shows it: placeholders for the trace, scratch paths and port."""
        text = " ".join(argv).replace(T, "TRACE")
        if baseline:  # first: tapflow's path may be a prefix of the baseline's
            text = text.replace(str(baseline), "tapflow-base")
        return (text.replace(str(tapflow), "tapflow").replace(str(work), "WORK").replace("{out}", "OUT")
                .replace("{work}", "WORK").replace(f":{port}", ":PORT"))

    load0 = os.getloadavg()[0]
    if load0 > 0.5:
        print(f"# warning: load average {load0:.2f}: something else is running, CPU times may be inflated",
              file=sys.stderr)
    bl.warm(trace)  # in the page cache as a read from disk leaves it
    stream = Stream(outdir, trace, pin)
    stream.measure()

    runs: dict[str, list] = {t: [] for t in tools}
    counts: dict[str, dict] = {}
    for run in range(-args.warmup, args.runs):
        for tool in round_order(tools, run):
            out = work / f"{tool}-{run}.out"
            if tool == "nfpcapd":
                out.mkdir()
            argv = [a.replace("{out}", str(out)).replace("{work}", str(work)) for a in cmds[tool]]
            if sink:
                sink.reset()
            # The last tool's output (nfpcapd's and argus's files) goes to the disk now, not by
            # a kernel flusher while the next tool is timed.
            os.sync()
            bl.top_up(trace)
            f = bl.run(pin + argv, work, f"{tool}-{run}", timeout=600)
            if f.rc != 0:
                why = f"{tool} failed (exit {f.rc}): {(f.stderr + f.stdout).strip()[-300:]}"
                if not tool.startswith("tapflow"):
                    bl.die(why)
                # tapflow flows is work in progress: skip what it cannot do yet, keep the anchors
                print(f"# SKIP {why}", file=sys.stderr)
                skipped.append(f"{tool} skipped: {why}")
                tools.remove(tool)
                del runs[tool]
                if out.is_dir():
                    shutil.rmtree(out)
                continue
            if sink and tool in IPFIX_TOOLS:
                time.sleep(0.3)  # let the sink drain the socket
            if run >= 0:
                runs[tool].append(f)
            print(f"  {tool:23s} {'warm-up' if run < 0 else f'run {run}'}: {f.cpu:7.3f} s cpu "
                  f"({f.utime:.3f} user, {f.stime:.3f} sys), {f.wall:7.3f} s wall", file=sys.stderr)
            if run == 0:
                counts[tool] = count_output(tool, f, out, sink)
                print(f"  {tool:23s} output: {counts[tool]['summary']}", file=sys.stderr)
            if out.is_dir():
                shutil.rmtree(out)
            elif out.exists():
                out.unlink()

    stream.measure()
    rows = []
    for tool in tools:
        fs = runs[tool]
        cpu = median([f.cpu for f in fs])
        rows.append({
            "tool": tool,
            "cpu_s": round(cpu, 4),
            "cpu_min_s": round(min(f.cpu for f in fs), 4),
            "user_s": round(median([f.utime for f in fs]), 4),
            "sys_s": round(median([f.stime for f in fs]), 4),
            "wall_s": round(median([f.wall for f in fs]), 4),
            "cpu_runs": " ".join(f"{f.cpu:.3f}" for f in fs),
            "mpkt_per_cpu_s": round(n_in / cpu / 1e6, 3) if cpu else "",
            "records": counts[tool].get("records", ""),
            "packets_counted": counts[tool].get("packets", ""),
            "bytes_counted": counts[tool].get("bytes", ""),
            "bytes_are": byte_unit[tool],
            "records_are": direction[tool],
            "timeouts_given": given[tool],
            "output": counts[tool]["summary"],
            "argv": shown(cmds[tool]),
        })
    # The ratios: each tool's CPU over the reference row's (tapflow-ipfix, as a user runs it),
    # and each tapflow row's over its baseline row's.
    by = {r["tool"]: r for r in rows}
    ref = next((t for t in ("tapflow-ipfix", "tapflow") if t in by), None)
    for r in rows:
        r["ref"] = ref or ""
        r["cpu_vs_ref"] = round(r["cpu_s"] / by[ref]["cpu_s"], 2) if ref and by[ref]["cpu_s"] else ""
        b = by.get(BASE_OF.get(r["tool"], ""))
        r["cpu_vs_base"] = round(r["cpu_s"] / b["cpu_s"], 3) if b and b["cpu_s"] else ""

    csv_path = outdir / "flows.csv"
    with open(csv_path, "w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=list(rows[0].keys()))
        w.writeheader()
        w.writerows(rows)

    versions = {
        "softflowd": tool_version(["softflowd", "-h"], r"softflowd version (\d[\d.]*\d)"),
        "nfdump": tool_version(["nfdump", "-V"], r"Version:\s*\S*?(\d[\d.]+)"),
        "argus": tool_version(["argus", "-h"], r"Argus Version (\S+)"),
    }
    note = (f"{n_in:,} packets ({size_in / 1e6:.0f} MB, {trace.name}) from scripts/make-trace.sh; median of "
            f"{args.runs} runs; `taskset -c {args.cpu}`; active {A} s, idle {I} s; softflowd {versions['softflowd']}, "
            f"nfdump {versions['nfdump']}, argus {versions['argus']}; {platform.release()}, "
            f"{os.cpu_count()} CPUs, load average {load0:.2f} at start, {datetime.date.today().isoformat()}"
            f"{stream.summary()}")
    base_col = " | CPU ÷ tapflow-base's" if baseline else ""
    lines = [
        "| tool | CPU s (user+sys) | min CPU s | user s | sys s | wall s | Mpkt per CPU-s "
        f"| CPU ÷ {ref}'s{base_col} | records out | packets counted | bytes are | records are |",
        "|---|---:|---:|---:|---:|---:|---:|---:|" + ("---:|" if baseline else "") + "---:|---:|---|---|",
    ]
    for r in rows:
        lines.append(f"| {r['tool']} | {r['cpu_s']:.3f} | {r['cpu_min_s']:.3f} | {r['user_s']:.3f} | {r['sys_s']:.3f} "
                     f"| {r['wall_s']:.3f} "
                     f"| {r['mpkt_per_cpu_s']} | {r['cpu_vs_ref'] or '—'}"
                     + (f" | {r['cpu_vs_base'] or '—'}" if baseline else "")
                     + f" | {r['records']} | {r['packets_counted']} | {r['bytes_are']} | {r['records_are']} |")
    lines += ["", "Commands (TRACE = the trace, PORT = the UDP sink of this script, OUT/WORK = scratch):", ""]
    lines += [f"- {r['tool']}: `{r['argv']}`" for r in rows]
    lines += ["", "Timeouts each tool was given:", ""]
    lines += [f"- {r['tool']}: {r['timeouts_given']}" for r in rows]
    lines += ["", "Output check (first run):", ""]
    lines += [f"- {r['tool']}: {r['output']}" for r in rows]
    lines += ["", "CPU of every run (s): " + "; ".join(f"{r['tool']} {r['cpu_runs']}" for r in rows)]
    lines += ["", note]
    lines += [f"\n{s}" for s in skipped]
    md = "\n".join(lines) + "\n"
    (outdir / "flows.md").write_text(md)
    made = plot.plot_flows(csv_path, Path(args.img),
                           f"{n_in:,} packets ({trace.name}), median of {args.runs} runs, taskset -c {args.cpu}; "
                           f"{platform.release()}, {datetime.date.today().isoformat()}{stream.summary()}")
    print(md)
    print(f"wrote {', '.join(map(str, [csv_path, outdir / 'flows.md', *made]))}")


class Stream:
    """bench/stream.c, run before and after the timed runs: one pass over the cached trace, the
    least any reader of it can cost. Its time follows the memory bandwidth the host leaves this
    VM, which moves tapflow's runs (bound by it) more than the anchors'. Skipped without cc."""

    def __init__(self, outdir: Path, trace: Path, pin: list[str]) -> None:
        self.trace, self.pin, self.ms = trace, pin, []
        try:
            self.bin: Path | None = bl.build_c("stream", outdir)
        except (OSError, subprocess.CalledProcessError):
            self.bin = None

    def measure(self) -> None:
        if self.bin is None:
            return
        bl.top_up(self.trace)
        r = subprocess.run([*self.pin, str(self.bin), str(self.trace)], capture_output=True, text=True)
        m = re.search(r"again ([\d.]+) ms", r.stdout)
        if m:
            self.ms.append(float(m.group(1)))

    def summary(self) -> str:
        if not self.ms:
            return ""
        return "; one pass over the cached trace (bench/stream.c), before/after: " + \
            "/".join(f"{v:.1f}" for v in self.ms) + " ms"


def count_output(tool: str, f: bl.Finished, out: Path, sink: IpfixSink | None) -> dict:
    """Count what a run produced (not timed)."""
    text = f.stdout + f.stderr
    if tool.startswith("tapflow"):
        flows = bl.grab_int(r"(\d+) flows,", text)
        records = bl.grab_int(r"flows, (\d+) records", text)
        received = bl.grab_int(r"(\d+) received", text)
        d = {"records": records if records is not None else "?", "packets": received if received is not None else "?"}
        s = f"{flows} flows, {records} records, {received} packets received (tapflow's summary)"
        if "ipfix" in tool and sink:
            k = sink.snapshot()
            s += (f"; sink: {k['datagrams']} datagrams, {k['records']} IPFIX data records, {k['option_records']} "
                  f"options records, {k['seq_errors']} sequence errors")
            if records is not None and k["records"] != records:
                s += f" (MISMATCH: tapflow says {records} records)"
        d["summary"] = s
        return d
    if tool == "softflowd":
        pk = bl.grab_int(r"Packets processed: (\d+)", text)
        m = re.search(r"Flows exported: (\d+) \((\d+) records\) in (\d+) packets \((\d+) failures\)", text)
        forced = bl.grab_int(r"Flows expired: \d+ \((\d+) forced\)", text)
        s = (f"{m.group(2)} records in {m.group(3)} datagrams, {m.group(4)} send failures, {pk} packets processed, "
             f"{forced} forced expiries" if m else "statistics not found")
        d = {"records": int(m.group(2)) if m else "?", "packets": pk if pk is not None else "?"}
        if sink:
            k = sink.snapshot()
            s += (f"; sink: {k['datagrams']} datagrams, {k['records']} IPFIX data records, {k['option_records']} "
                  f"options records, {k['seq_errors']} sequence errors")
        d["summary"] = s
        return d
    if tool == "nfpcapd":
        r = subprocess.run(["nfdump", "-R", str(out), "-I"], capture_output=True, text=True)
        fl = bl.grab_int(r"^Flows: (\d+)", r.stdout)
        pk = bl.grab_int(r"^Packets: (\d+)", r.stdout)
        by = bl.grab_int(r"^Bytes: (\d+)", r.stdout)
        files = len(list(out.iterdir()))
        return {"records": fl, "packets": pk, "bytes": by,
                "summary": f"{fl} flow records, {pk} packets, {by} bytes in {files} files (nfdump -I)"}
    if tool == "argus":
        r = subprocess.run(["racount", "-r", str(out)], capture_output=True, text=True)
        m = re.search(r"sum\s+(\d+)\s+(\d+)\s+\d+\s+\d+\s+(\d+)", r.stdout)
        if not m:
            return {"summary": f"racount failed: {r.stderr.strip()[:200]}"}
        return {"records": int(m.group(1)), "packets": int(m.group(2)), "bytes": int(m.group(3)),
                "summary": f"{m.group(1)} records (incl. management and non-IP), {m.group(2)} packets, "
                           f"{m.group(3)} bytes (racount)"}
    return {"summary": "?"}


if __name__ == "__main__":
    main()
