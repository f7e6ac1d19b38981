#!/usr/bin/env python3
"""Soak: the generator's maximum rate for --minutes through both live paths at once, with the
memory of every process followed and every packet, record and flow accounted for at the end.

Namespaces as in forward_live.py: T (traffic) --veth--> P (probe) --veth, MTU 9000--> C1, C2.

    T   tapflow gen -i … --duration S --flows F           (no --rate: as fast as it can; CPU 0)
    P   tapflow capture -i … -s 64 --forward C1:5000       (CPU 1)
    P   tapflow flows -i … --export ipfix://C2:4739 --active-timeout A --export-rate 2000
    C1  tapflow recv -l 0.0.0.0:5000 -w /dev/shm/…         (rotated; old files removed as it runs)
    C2  nfcapd -b … -p 4739 -B 4M                            (nfdump's IPFIX collector)

Every 10 s the RSS of each process is read from /proc/PID/status (VmRSS, and RssAnon: the heap
and stacks, without the file and ring pages the kernel may map in or out). At the end it prints
per process the RSS slope (KiB/min, least-squares over all samples and over the second half, the
first being warm-up) and the accounting:

    capture   sent = received + dropped on P's link before any socket saw it
              received = recorded + filtered + dropped_kernel + dropped_ours + past_limit
    forward   recorded = forwarded + failed to send
              forwarded = recorded at recv + lost in transit (recv's gap count)
              dropped_kernel + dropped_ours + failed = recv's lost_on_probe (carried in-band)
    flows     sent = received + link drops; received = metered + named losses (as capture)
              metered records = exported + not encodable
              exported = stored by nfcapd (nfdump -I "Flows")

Each identity ends with its difference, "unexplained", which must be 0; the exit status is 1 if
one is not. Records in IPFIX messages the exporter lost or C2's kernel dropped are a named loss
(counted in messages, not records: the last identity may then differ). The work directory
($TMPDIR or /tmp)/tf-soak-PID keeps each process's output and JSON summary. Root only;
addresses only inside the namespaces (198.18.0.0/15). Namespaces, processes and recv's files
are removed at exit, also on Ctrl-C or SIGTERM.

    sudo python3 bench/soak.py [--minutes 30] [--flows 4096] [--active-timeout 10] [--size 60]
"""

from __future__ import annotations

import argparse
import atexit
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

sys.dont_write_bytecode = True
sys.path.insert(0, str(Path(__file__).resolve().parent))
import benchlib as bl  # noqa: E402
from forward_live import PORT, Topo  # noqa: E402

IPFIX_PORT = 4739
# IPFIX messages per second at most (--export-rate): 4096 flows ending together are 39 messages.
EXPORT_RATE = 2000
SAMPLE_S = 10.0
# recv's output rotates at this size; all but the newest file are removed at each sample.
ROTATE = "256M"


class Procs:
    """The processes started, stopped at exit (SIGINT, then SIGKILL) before the namespaces go:
    a process in a deleted namespace would run on."""

    def __init__(self) -> None:
        self.live: list = []
        atexit.register(self.stop_all)

    def add(self, p) -> None:
        self.live.append(p)

    def stop_all(self) -> None:
        for p in self.live:
            if p.poll() is None:
                p.send_signal(signal.SIGINT)
        deadline = time.monotonic() + 10
        for p in self.live:
            try:
                p.wait(max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()


def alive(p) -> bool:
    """Whether child p still runs, without reaping it (wait_rusage reaps it for its rusage)."""
    return os.waitid(os.P_PID, p.pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is None


def signal_child(p, sig: int) -> None:
    """Sends sig to child p if it runs (Popen.send_signal would reap an exited child first,
    and wait_rusage then finds none)."""
    if alive(p):
        os.kill(p.pid, sig)


def rss_kib(pid: int) -> tuple[int, int] | None:
    """(VmRSS, RssAnon) in KiB; None while `ip netns exec` or taskset has not exec'd the
    program yet, or once it is gone."""
    try:
        if Path(f"/proc/{pid}/comm").read_text().strip() in ("ip", "taskset"):
            return None
        text = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return None
    v = {}
    for line in text.splitlines():
        k, _, rest = line.partition(":")
        if k in ("VmRSS", "RssAnon"):
            v[k] = int(rest.split()[0])
    return (v.get("VmRSS", 0), v.get("RssAnon", 0)) if v else None


def slope(samples: list[tuple[float, int]]) -> float:
    """Least-squares slope of (seconds, KiB) in KiB per minute; 0 with fewer than 2 samples."""
    n = len(samples)
    if n < 2:
        return 0.0
    mt = sum(t for t, _ in samples) / n
    mv = sum(v for _, v in samples) / n
    den = sum((t - mt) ** 2 for t, _ in samples)
    return 0.0 if den == 0 else 60 * sum((t - mt) * (v - mv) for t, v in samples) / den


def bound_packet_sockets(pid: int, ifindex: int) -> int:
    """Running packet sockets bound to ifindex in process pid's namespace."""
    try:
        lines = Path(f"/proc/{pid}/net/packet").read_text().splitlines()[1:]
    except OSError:
        return 0
    return sum(1 for f in map(str.split, lines) if len(f) >= 6 and int(f[4]) == ifindex
               and f[5] == "1")


def udp_drops(ns: str) -> int:
    """UDP datagrams the kernel dropped in namespace ns (InErrors: full buffers, bad sums)."""
    text = subprocess.run(["ip", "netns", "exec", ns, "cat", "/proc/net/snmp"],
                          capture_output=True, text=True, check=True).stdout
    head, vals = [ln.split() for ln in text.splitlines() if ln.startswith("Udp:")][:2]
    return int(dict(zip(head[1:], vals[1:]))["InErrors"])


def nfdump_stats(d: Path) -> dict[str, str]:
    r = subprocess.run(["nfdump", "-R", str(d), "-I"], capture_output=True, text=True)
    if r.returncode != 0:
        bl.die(f"nfdump -I: {r.stderr.strip()}")
    return {k.strip(): v.strip() for k, _, v in (ln.partition(":") for ln in r.stdout.splitlines())
            if v}


def prune(out_dir: Path) -> None:
    """Removes all of recv's files but the newest: a soak at full rate would fill any disk."""
    files = sorted(out_dir.glob("*.pcapng"), key=lambda f: f.stat().st_mtime)
    for f in files[:-1]:
        f.unlink(missing_ok=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tapflow", "--tapflow-bin", dest="tapflow_bin",
                    help="tapflow binary (default target/release/tapflow)")
    ap.add_argument("--minutes", type=float, default=30)
    ap.add_argument("--size", type=int, default=60, help="frame length without FCS")
    ap.add_argument("--flows", type=int, default=4096, help="distinct flows the generator sends")
    ap.add_argument("--active-timeout", type=int, default=10,
                    help="seconds: each long flow is exported this often")
    args = ap.parse_args()
    if os.geteuid() != 0:
        bl.die("needs root (namespaces, packet sockets)")
    bl.need("ip", "taskset", "nfcapd", "nfdump")
    tf = str(bl.tapflow_path(args.tapflow_bin))
    if not Path(tf).exists():
        bl.die(f"{tf} not found (cargo build --release -p tapflow, or --tapflow PATH)")
    work = Path(os.environ.get("TMPDIR", "/tmp")) / f"tf-soak-{os.getpid()}"
    work.mkdir(parents=True, exist_ok=True)
    topo = Topo()
    procs = Procs()  # registered after the namespaces: stopped before they are deleted
    shm = Path("/dev/shm") / f"{topo.pre}-soak"
    shm.mkdir(exist_ok=True)
    atexit.register(lambda: subprocess.run(["rm", "-rf", str(shm)]))
    c1, c2 = topo.c
    nf_ip = topo.dests[1].split(":")[0]
    nf_dir = work / "nfcapd"
    nf_dir.mkdir()
    seconds = round(args.minutes * 60)

    def start(tag: str, ns: str, argv: list[str], cpu: int | None = None):
        pin = ["taskset", "-c", str(cpu)] if cpu is not None else []
        p, t0 = bl.start(["ip", "netns", "exec", ns, *pin, *argv], work, tag)
        procs.add(p)
        return p, t0

    js = {k: work / f"{k}.json" for k in ("gen", "capture", "flows", "recv")}
    recv, recv_t0 = start("recv", c1, [tf, "recv", "-q", "-l", f"0.0.0.0:{PORT}",
                                       "-w", str(shm / "c1.pcapng"), "--rotate-size", ROTATE,
                                       "--rcvbuf", "64M", "--summary-json", str(js["recv"])])
    bl.wait_udp_bound(recv, PORT, work, "recv", "recv in C1")
    # A 4 MiB socket buffer (the host's rmem_max here) and paced messages: every active
    # timeout ends all flows at once, and nfcapd shares the CPUs with a full-rate capture.
    nfc, _ = start("nfcapd", c2, ["nfcapd", "-b", nf_ip, "-p", str(IPFIX_PORT), "-t", "3600",
                                  "-B", str(4 << 20), "-w", str(nf_dir)])
    bl.wait_udp_bound(nfc, IPFIX_PORT, work, "nfcapd", "nfcapd in C2")
    drop0 = topo.rx_dropped()
    udp0 = udp_drops(c2)
    cap, cap_t0 = start("capture", topo.p, [tf, "capture", "-i", topo.cap, "-s", "64", "-q",
                                            "--forward", topo.dests[0],
                                            "--summary-json", str(js["capture"])], cpu=1)
    bl.wait_listening(cap, topo.cap_ifindex, work, "capture", "capture")
    flows, flows_t0 = start("flows", topo.p, [tf, "flows", "-i", topo.cap, "-q", "--control", "none",
                                              "--export", f"ipfix://{nf_ip}:{IPFIX_PORT}",
                                              "--active-timeout", str(args.active_timeout),
                                              "--export-rate", str(EXPORT_RATE),
                                              "--summary-json", str(js["flows"])])
    deadline = time.monotonic() + 15
    while bound_packet_sockets(cap.pid, topo.cap_ifindex) < 2:
        if flows.poll() is not None or time.monotonic() > deadline:
            bl.die(f"flows did not start: {(work / 'flows.stderr').read_text()[-400:]}")
        time.sleep(0.05)
    time.sleep(0.3)

    gen, gen_t0 = start("gen", topo.t, [tf, "gen", "-i", topo.feed, "--size", str(args.size),
                                        "--duration", str(seconds), "--flows", str(args.flows),
                                        "-q", "--summary-json", str(js["gen"])], cpu=0)
    watched = {"gen": gen, "capture": cap, "flows": flows, "recv": recv, "nfcapd": nfc}
    samples: dict[str, list[tuple[float, int, int]]] = {k: [] for k in watched}
    print(f"soak: {args.minutes:g} min at the generator's maximum rate, {args.flows} flows; "
          f"RSS every {SAMPLE_S:g} s; work dir {work}", file=sys.stderr)
    t0 = time.monotonic()
    next_at = t0 + SAMPLE_S
    while alive(gen):
        now = time.monotonic()
        if now >= next_at:
            for k, p in watched.items():
                r = rss_kib(p.pid)
                if r is not None and alive(p):
                    samples[k].append((now - t0, *r))
            for k, p in watched.items():
                if k != "gen" and not alive(p):
                    err = (work / f"{k}.stderr").read_text(errors="replace")
                    bl.die(f"{k} exited during the soak: {err.strip()[-400:]}")
            prune(shm)
            row = "  ".join(f"{k} {samples[k][-1][1] // 1024} MiB" for k in watched
                            if samples[k])
            print(f"  {now - t0:6.0f} s  RSS: {row}", file=sys.stderr)
            next_at += SAMPLE_S
        time.sleep(min(0.5, max(0.0, next_at - time.monotonic())))

    g = bl.wait_rusage(gen, gen_t0)
    if g.rc != 0:
        bl.die(f"gen failed: {g.stderr[-400:]}")
    time.sleep(1.5)  # the last ring blocks and forward datagrams
    signal_child(cap, signal.SIGINT)
    signal_child(flows, signal.SIGINT)
    done = {"capture": bl.wait_rusage(cap, cap_t0, timeout=60),
            "flows": bl.wait_rusage(flows, flows_t0, timeout=60)}
    time.sleep(1.0)  # the flows' last messages and datagrams reach the collectors
    signal_child(recv, signal.SIGINT)
    done["recv"] = bl.wait_rusage(recv, recv_t0, timeout=60)
    udp_lost = udp_drops(c2) - udp0
    signal_child(nfc, signal.SIGTERM)
    nfc.wait(30)
    for k, f in done.items():
        if f.rc != 0:
            bl.die(f"{k} failed (exit {f.rc}): {f.stderr[-400:]}")
    link_dropped = topo.rx_dropped() - drop0
    report(args, {k: json.loads(v.read_text()) for k, v in js.items()}, samples, link_dropped,
           udp_lost, nfdump_stats(nf_dir))


def report(args, j: dict, samples: dict, link_dropped: int, udp_lost: int, nf: dict) -> None:
    print(f"\n## RSS ({args.minutes:g} min, a sample every {SAMPLE_S:g} s)\n")
    print("| process | samples | first MiB | last MiB | max MiB | slope KiB/min | "
          "2nd half KiB/min | anon slope KiB/min | anon 2nd half KiB/min |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    for k, s in samples.items():
        if not s:
            print(f"| {k} | 0 | | | | | | | |")
            continue
        rss = [(t, v) for t, v, _ in s]
        anon = [(t, a) for t, _, a in s]
        half = len(s) // 2
        print(f"| {k} | {len(s)} | {s[0][1] / 1024:.1f} | {s[-1][1] / 1024:.1f} | "
              f"{max(v for _, v in rss) / 1024:.1f} | {slope(rss):+.1f} | "
              f"{slope(rss[half:]):+.1f} | {slope(anon):+.1f} | {slope(anon[half:]):+.1f} |")

    gen, cap, fl, rc = j["gen"], j["capture"], j["flows"], j["recv"]
    fw = cap["forward"]
    sent = int(gen["sent"])
    rows = []

    def line(what: str, left: int, terms: list[tuple[str, int]]) -> None:
        rows.append((what, left, terms, left - sum(v for _, v in terms)))

    def totals(name: str, t: dict) -> None:
        line(f"{name}: sent = received + link drops", sent,
             [("received", t["received"]), ("dropped on P's link", link_dropped)])
        line(f"{name}: received = recorded + named losses", t["received"],
             [("recorded", t["recorded"]), ("filtered", t["filtered"]),
              ("dropped_kernel", t["dropped_kernel"]), ("dropped_ours", t["dropped_ours"]),
              ("past_limit", t["past_limit"])])

    totals("capture", cap)
    line("forward: recorded = forwarded + failed", cap["recorded"],
         [("forward.records", fw["records"]), ("forward.failed", fw["failed"])])
    line("forward: forwarded = at recv + lost in transit", fw["records"],
         [("recv records", rc["records"]), ("recv lost_in_transit", rc["lost_in_transit"])])
    line("forward: probe losses = recv lost_on_probe", cap["dropped_kernel"] + cap["dropped_ours"]
         + fw["failed"], [("recv lost_on_probe", rc["lost_on_probe"])])
    totals("flows", fl)
    out = fl["flows"]["outputs"][0]
    line("flows: metered records = exported + not encodable", fl["flows"]["records"],
         [("ipfix records", out["records"]), ("not encodable", out.get("not_encodable", out.get("failed", 0)))])
    line("flows: exported = stored by nfcapd", out["records"],
         [("nfcapd Flows", int(nf.get("Flows", 0)))])
    # Records in lost IPFIX messages are a named loss, but only the messages are counted.
    lost_msgs = out["lost_messages"] + udp_lost

    print(f"\n## Accounting\n\ngen: {sent} frames in {float(gen.get('seconds', 0)):.1f} s "
          f"({float(gen['pps']):,.0f} pkt/s)\n")
    print("| identity | left | = terms | unexplained |")
    print("|---|---:|---|---:|")
    for what, left, terms, diff in rows:
        t = " + ".join(f"{n} {v}" for n, v in terms)
        print(f"| {what} | {left} | {t} | **{diff}** |")
    print(f"\nflows → collector: the exporter lost {out['lost_messages']} messages, C2's kernel "
          f"dropped {udp_lost} UDP datagrams, nfcapd counted "
          f"{nf.get('Sequence failures', '?')} sequence failures.")
    bad = [r for r in rows if r[3] != 0
           and not (r[0].startswith("flows: exported") and lost_msgs > 0)]
    if bad:
        print(f"\nsoak: {len(bad)} identities do not hold: "
              + "; ".join(f"{w} ({d:+})" for w, _, _, d in bad), file=sys.stderr)
        sys.exit(1)


if __name__ == "__main__":
    # Ctrl-C stops the soak even when started with SIGINT ignored (`cmd &` in a script); the
    # processes and namespaces go at exit either way.
    signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        main()
    except KeyboardInterrupt:
        print("soak: interrupted; processes stopped, namespaces removed", file=sys.stderr)
        sys.exit(130)
