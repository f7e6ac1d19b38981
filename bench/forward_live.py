#!/usr/bin/env python3
"""Live header forwarding at the generator's maximum rate, with every packet accounted for.

Four namespaces: T (traffic) --veth--> P (probe) --veth, MTU 9000--> C1, C2 (collectors).
`tapflow gen` in T sends N frames as fast as it can (CPU 0); `tapflow capture -i … -s 64
--forward C1,C2` in P (CPU 1) balances the headers by flow over two `tapflow recv -w` (files on
/dev/shm). Afterwards every packet the generator sent must be in exactly one of these places:

    recorded at a collector            Σ collector "records"
    lost in transit, seen by a gap     Σ collector "lost_in_transit"
    not sent by the probe              probe "forward": "failed"
    dropped by the probe's kernel ring probe "dropped_kernel"
    dropped by the probe itself        probe "dropped_ours"
    dropped on the link before the     P's interface rx_dropped (veth backlog)
      probe's socket saw it

and `unexplained` = sent − the sum of those must be 0. Root only; addresses only inside the
namespaces (198.18.0.0/15, the benchmark range). Prints a markdown table.

Each size runs twice over: with the defaults, and squeezed (a probe ring of 2 x 64 KiB, collector
socket buffers of 256 KiB) so that packets are lost in the ring and in transit and must still be
accounted for.

    sudo python3 bench/forward_live.py [--packets 1000000] [--sizes 64,512,1518] [--repeat 2]
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


def ip(*args: str) -> None:
    r = subprocess.run(["ip", *args], capture_output=True, text=True)
    if r.returncode != 0:
        bl.die(f"ip {' '.join(args)}: {r.stderr.strip()}")


PORT = 5000  # each collector's `tapflow recv`


class Topo:
    def __init__(self) -> None:
        pid = os.getpid() % 100_000
        self.pre = f"tfl{pid}"
        self.t, self.p = f"{self.pre}t", f"{self.pre}p"
        self.c = [f"{self.pre}c1", f"{self.pre}c2"]
        atexit.register(self.cleanup)
        for ns in [self.t, self.p, *self.c]:
            ip("netns", "add", ns)
            for k in ("all", "default"):
                subprocess.run(["ip", "netns", "exec", ns, "sysctl", "-qw",
                                f"net.ipv6.conf.{k}.disable_ipv6=1"], check=True)
            ip("-n", ns, "link", "set", "lo", "up")
        self.feed, self.cap = f"{self.pre}f", f"{self.pre}x"
        self.link(self.t, self.feed, self.p, self.cap, None, 1500)
        self.dests = []
        for k, c in enumerate(self.c):
            net = f"198.19.{k + 1}"
            pi, ci = f"{self.pre}o{k}", f"{self.pre}i{k}"
            self.link(self.p, pi, c, ci, (f"{net}.1", f"{net}.2"), 9000)
            mac = f"02:19:00:00:00:{k + 1:02x}"
            ip("-n", c, "link", "set", "dev", ci, "address", mac)
            # A static neighbour: no datagram waits (or dies) behind ARP resolution.
            ip("-n", self.p, "neigh", "replace", f"{net}.2", "lladdr", mac, "dev", pi,
               "nud", "permanent")
            self.dests.append(f"{net}.2:{PORT}")
        self.cap_ifindex = bl.Pair.link(self.p, self.cap)["ifindex"]

    @staticmethod
    def link(a: str, ia: str, b: str, ib: str, addrs, mtu: int) -> None:
        ip("-n", a, "link", "add", ia, "mtu", str(mtu), "type", "veth", "peer", "name", ib,
           "netns", b, "mtu", str(mtu))
        for ns, dev, addr in ((a, ia, addrs and addrs[0]), (b, ib, addrs and addrs[1])):
            subprocess.run(["ip", "netns", "exec", ns, "sysctl", "-qw",
                            f"net.ipv6.conf.{dev}.disable_ipv6=1"], check=True)
            if addr:
                ip("-n", ns, "addr", "add", f"{addr}/24", "dev", dev)
            ip("-n", ns, "link", "set", dev, "up")

    def cleanup(self) -> None:
        for ns in [self.t, self.p, *self.c]:
            subprocess.run(["ip", "netns", "del", ns], capture_output=True)

    def rx_dropped(self) -> int:
        return int(bl.Pair.link(self.p, self.cap)["stats64"]["rx"]["dropped"])


# Squeezed: a probe ring of 2 x 64 KiB and collectors with a 256 KiB socket buffer, so that
# losses happen in each place and must still add up.
SQUEEZE_PROBE = ["--block-size", "64K", "--block-count", "2"]
SQUEEZE_RECV = "256K"


def one(args, topo: Topo, work: Path, frame: int, rep: int, squeeze: bool) -> dict:
    tag = f"f{frame}-{rep}-{int(squeeze)}"
    recvs = []
    for k, c in enumerate(topo.c):
        js = work / f"{tag}-c{k}.json"
        out = Path("/dev/shm") / f"{topo.pre}-{tag}-c{k}.pcapng"
        p, t0 = bl.start(["ip", "netns", "exec", c, str(args.tapflow_bin), "recv", "-q", "-l",
                          f"0.0.0.0:{PORT}", "-w", str(out), "--summary-json", str(js),
                          "--rcvbuf", SQUEEZE_RECV if squeeze else "64M"], work,
                         f"{tag}-c{k}")
        bl.wait_udp_bound(p, PORT, work, f"{tag}-c{k}", f"recv in {c}")
        recvs.append((p, t0, js, out))
    pjs = work / f"{tag}-p.json"
    drop0 = topo.rx_dropped()
    probe, p0 = bl.start(["ip", "netns", "exec", topo.p, "taskset", "-c", "1",
                          str(args.tapflow_bin), "capture", "-i", topo.cap, "-s", "64", "-q",
                          "--forward", ",".join(topo.dests), "--summary-json", str(pjs),
                          *(SQUEEZE_PROBE if squeeze else [])],
                         work, f"{tag}-p")
    bl.wait_listening(probe, topo.cap_ifindex, work, f"{tag}-p", "probe")
    time.sleep(0.3)
    gjs = work / f"{tag}-g.json"
    g = bl.run(["ip", "netns", "exec", topo.t, "taskset", "-c", "0", str(args.tapflow_bin),
                "gen", "-i", topo.feed, "--size", str(frame - 4), "--count", str(args.packets),
                "--flows", "256", "-q", "--summary-json", str(gjs)], work, f"{tag}-g", timeout=120)
    if g.rc != 0:
        bl.die(f"gen failed: {g.stderr[-400:]}")
    time.sleep(1.5)
    probe.send_signal(signal.SIGINT)
    pf = bl.wait_rusage(probe, p0, timeout=60)
    if pf.rc != 0:
        bl.die(f"probe failed: {pf.stderr[-400:]}")
    time.sleep(0.5)
    cs = []
    for p, t0, js, out in recvs:
        p.send_signal(signal.SIGINT)
        f = bl.wait_rusage(p, t0, timeout=60)
        if f.rc != 0:
            bl.die(f"recv failed: {f.stderr[-400:]}")
        cs.append(json.loads(js.read_text()))
        out.unlink(missing_ok=True)
    gen = json.loads(gjs.read_text())
    pr = json.loads(pjs.read_text())
    fw = pr["forward"]
    r = {
        "frame": frame, "rep": rep, "squeeze": squeeze, "sent": int(gen["sent"]), "gen_pps": float(gen["pps"]),
        "link_dropped": topo.rx_dropped() - drop0,
        "received": pr["received"], "kernel": pr["dropped_kernel"], "ours": pr["dropped_ours"],
        "recorded": pr["recorded"], "forwarded": fw["records"],
        "failed": fw["failed"],
        "collected": sum(c["records"] for c in cs),
        "transit": sum(c["lost_in_transit"] for c in cs),
        "probe_reported": sum(c["lost_on_probe"] for c in cs),
        "per_collector": [c["records"] for c in cs],
        "probe_cpu": pf.cpu,
    }
    r["unexplained"] = r["sent"] - (r["collected"] + r["transit"] + r["failed"] + r["kernel"]
                                    + r["ours"] + r["link_dropped"])
    return r


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tapflow", "--tapflow-bin", dest="tapflow_bin",
                    help="tapflow binary (default target/release/tapflow)")
    ap.add_argument("--packets", type=int, default=1_000_000)
    ap.add_argument("--sizes", default="64,512,1518")
    ap.add_argument("--repeat", type=int, default=2)
    args = ap.parse_args()
    if os.geteuid() != 0:
        bl.die("needs root (namespaces, packet sockets)")
    bl.need("ip", "taskset")
    args.tapflow_bin = bl.tapflow_path(args.tapflow_bin)
    work = Path(os.environ.get("TMPDIR", "/tmp")) / f"tf-fwlive-{os.getpid()}"
    work.mkdir(parents=True, exist_ok=True)
    topo = Topo()
    rows = []
    for squeeze in (False, True):
        for frame in [int(x) for x in args.sizes.split(",")]:
            for rep in range(args.repeat):
                r = one(args, topo, work, frame, rep, squeeze)
                rows.append(r)
                print(f"  {frame:>5} B run {rep}: {r}", file=sys.stderr)
    print("| setup | frame B | sent | gen pps | at collectors (C1 + C2) | lost in transit | "
          "not sent | kernel ring | probe queues | link | unexplained | probe CPU s |")
    print("|---|---:|---:|---:|---|---:|---:|---:|---:|---:|---:|---:|")
    for r in rows:
        c1, c2 = r["per_collector"]
        setup = "squeezed" if r["squeeze"] else "default"
        print(f"| {setup} | {r['frame']} | {r['sent']} | {r['gen_pps']:,.0f} | {r['collected']} "
              f"({c1} + {c2}) | {r['transit']} | {r['failed']} | {r['kernel']} | {r['ours']} | "
              f"{r['link_dropped']} | **{r['unexplained']}** | {r['probe_cpu']:.3f} |")


if __name__ == "__main__":
    main()
