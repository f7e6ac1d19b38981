"""Shared helpers for the benchmarks: namespaces, timed child processes, packet counts.

Stdlib only. Everything that touches the network happens inside the two namespaces made by
scripts/netns.sh (names include our pid) and is removed at exit, also on Ctrl-C or SIGTERM.
"""

from __future__ import annotations

import atexit
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
NETNS_SH = REPO / "scripts" / "netns.sh"
CLK_TCK = os.sysconf("SC_CLK_TCK")


def die(msg: str, code: int = 1) -> None:
    print(f"{Path(sys.argv[0]).name}: error: {msg}", file=sys.stderr)
    sys.exit(code)


def need(*tools: str) -> None:
    missing = [t for t in tools if shutil.which(t) is None]
    if missing:
        die(f"missing tools: {' '.join(missing)} (run scripts/install-deps.sh)")


def tapflow_path(explicit: str | None) -> Path:
    if explicit:
        return Path(explicit).resolve()
    return REPO / "target" / "release" / "tapflow"


def _sigterm(_signo, _frame):  # turn SIGTERM/SIGHUP into a normal exit so atexit cleanup runs
    sys.exit(128 + _signo)


signal.signal(signal.SIGTERM, _sigterm)
signal.signal(signal.SIGHUP, _sigterm)


class Pair:
    """Namespaces {name}a / {name}b joined by veth {name}0 (in a) / {name}1 (in b)."""

    def __init__(self, prefix: str = "tfb", mtu: int = 1500):
        self.name = f"{prefix}{os.getpid()}"
        self.a, self.b = self.name + "a", self.name + "b"
        self.va, self.vb = self.name + "0", self.name + "1"
        self.mtu = mtu
        atexit.register(self.cleanup)
        env = dict(os.environ, TF_MTU=str(mtu))
        r = subprocess.run(["bash", "-c", 'source "$0" && tf_pair "$1"', str(NETNS_SH), self.name],
                           env=env, capture_output=True, text=True)
        if r.returncode != 0:
            die(f"could not create veth pair: {r.stderr.strip()}")
        self.mac_a = self.link(self.a, self.va)["address"]
        self.mac_b = self.link(self.b, self.vb)["address"]
        self.ifindex_b = self.link(self.b, self.vb)["ifindex"]

    def cleanup(self) -> None:
        subprocess.run(["bash", "-c", 'source "$0" && tf_cleanup "$1"', str(NETNS_SH), self.name],
                       capture_output=True)

    @staticmethod
    def link(ns: str, dev: str) -> dict:
        out = subprocess.run(["ip", "-n", ns, "-s", "-j", "link", "show", "dev", dev],
                             capture_output=True, text=True, check=True).stdout
        return json.loads(out)[0]

    def rx_stats(self) -> tuple[int, int]:
        """(rx packets, rx dropped) of the capture end: what the kernel delivered / dropped
        before any packet socket could see it (veth backlog overflow)."""
        st = self.link(self.b, self.vb)["stats64"]["rx"]
        return int(st["packets"]), int(st["dropped"])

    def cmd(self, side: str, cpu: int | None, argv: list[str]) -> list[str]:
        ns = self.a if side == "a" else self.b
        pin = ["taskset", "-c", str(cpu)] if cpu is not None else []
        return ["ip", "netns", "exec", ns, *pin, *argv]


@dataclass
class Finished:
    rc: int
    wall: float
    utime: float
    stime: float
    stdout: str
    stderr: str

    @property
    def cpu(self) -> float:
        return self.utime + self.stime


def wait_rusage(p: subprocess.Popen, t0: float, timeout: float | None = None) -> Finished:
    """Reap p with wait4 (its own CPU time, all its threads) and collect its output files."""
    deadline = None if timeout is None else time.monotonic() + timeout
    while True:
        pid, status, ru = os.wait4(p.pid, os.WNOHANG if deadline else 0)
        if pid == p.pid:
            break
        if deadline and time.monotonic() > deadline:
            p.kill()
            deadline = None
        time.sleep(0.01)
    wall = time.monotonic() - t0
    rc = os.waitstatus_to_exitcode(status)
    p.returncode = rc
    out = err = ""
    for fh, which in ((getattr(p, "tf_out", None), "out"), (getattr(p, "tf_err", None), "err")):
        if fh is not None:
            fh.seek(0)
            data = fh.read()
            data = data.decode(errors="replace") if isinstance(data, bytes) else data
            if which == "out":
                out = data
            else:
                err = data
            fh.close()
    return Finished(rc, wall, ru.ru_utime, ru.ru_stime, out, err)


def start(argv: list[str], workdir: Path, tag: str) -> tuple[subprocess.Popen, float]:
    """Start argv with stdout/stderr to files in workdir (never pipes: a full pipe would stall
    the measured process)."""
    so = open(workdir / f"{tag}.stdout", "w+b")
    se = open(workdir / f"{tag}.stderr", "w+b")
    t0 = time.monotonic()
    p = subprocess.Popen(argv, stdout=so, stderr=se, stdin=subprocess.DEVNULL)
    p.tf_out, p.tf_err = so, se
    return p, t0


def run(argv: list[str], workdir: Path, tag: str, timeout: float | None = None) -> Finished:
    p, t0 = start(argv, workdir, tag)
    return wait_rusage(p, t0, timeout)


def proc_cpu(pid: int) -> float:
    """CPU seconds (user+sys) a live process has used so far, all threads. Uses the ns counters in
    /proc/PID/task/*/schedstat (the same sum_exec_runtime that wait4's rusage splits into user and
    sys); falls back to utime+stime clock ticks from /proc/PID/stat."""
    try:
        total = 0
        for task in os.listdir(f"/proc/{pid}/task"):
            with open(f"/proc/{pid}/task/{task}/schedstat") as fh:
                total += int(fh.read().split()[0])
        return total / 1e9
    except (OSError, ValueError, IndexError):
        pass
    with open(f"/proc/{pid}/stat") as fh:
        fields = fh.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLK_TCK


def packet_socket_bound(pid: int, ifindex: int) -> bool:
    """True once process pid's network namespace has a running packet socket bound to ifindex."""
    try:
        with open(f"/proc/{pid}/net/packet") as fh:
            lines = fh.read().splitlines()[1:]
    except OSError:
        return False
    for line in lines:
        f = line.split()
        # sk RefCnt Type Proto Iface R Rmem User Inode
        if len(f) >= 6 and int(f[4]) == ifindex and f[5] == "1":
            return True
    return False


def wait_listening(p: subprocess.Popen, ifindex: int, work: Path, tag: str, what: str,
                   timeout: float = 15) -> None:
    """Waits until capture process p (started by start() with tag) has a running packet socket
    on ifindex; dies with the end of its stderr if it exits or the timeout passes first."""
    _wait_until(lambda: packet_socket_bound(p.pid, ifindex), p, work, tag,
                f"{what} did not start listening", timeout)


def wait_xdp_attached(p: subprocess.Popen, pair: "Pair", work: Path, tag: str, what: str,
                      timeout: float = 15) -> None:
    """Waits until an XDP program is attached to the capture end (tapflow --source xdp
    attaches it last, once its sockets are ready); dies like wait_listening."""
    def attached() -> bool:
        r = subprocess.run(["ip", "-n", pair.b, "link", "show", "dev", pair.vb],
                           capture_output=True, text=True)
        return "prog/xdp" in r.stdout
    _wait_until(attached, p, work, tag, f"{what} did not attach its XDP program", timeout)


def system_busy_s() -> float:
    """Seconds all CPUs spent not idle (user, nice, system, irq, softirq, steal from
    /proc/stat's `cpu` line; idle and iowait left out)."""
    f = [int(x) for x in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    busy = f[0] + f[1] + f[2] + f[5] + f[6] + (f[7] if len(f) > 7 else 0)
    return busy / os.sysconf("SC_CLK_TCK")


def wait_udp_bound(p: subprocess.Popen, port: int, work: Path, tag: str, what: str,
                   timeout: float = 10) -> None:
    """Waits until process p (started by start() with tag, maybe through `ip netns exec`) has
    a UDP socket on `port`; dies with the end of its stderr if it exits or the timeout passes
    first. Until `ip netns exec` has entered the namespace and exec'd, /proc/PID/net is the
    host's: it is read only once the process is no longer `ip`."""
    def bound() -> bool:
        try:
            if Path(f"/proc/{p.pid}/comm").read_text().strip() == "ip":
                return False
            return f":{port:04X} " in Path(f"/proc/{p.pid}/net/udp").read_text()
        except OSError:  # exited: _wait_until reports it
            return False
    _wait_until(bound, p, work, tag, f"{what} did not bind UDP {port}", timeout)


def _wait_until(ready, p: subprocess.Popen, work: Path, tag: str, failure: str,
                timeout: float) -> None:
    """Polls ready() until true; if p exits or the timeout passes first, stops p and dies
    with `failure` and the end of p's stderr."""
    deadline = time.monotonic() + timeout
    while not ready():
        if p.poll() is not None or time.monotonic() > deadline:
            if p.poll() is None:
                p.kill()
                p.wait(5)
            err = (work / f"{tag}.stderr").read_text(errors="replace")
            die(f"{failure}: {err.strip()[-400:]}")
        time.sleep(0.02)


def warm(path: Path) -> None:
    """Puts `path` in the page cache as a read from disk leaves it, the same for every tool.

    How a file came into the cache changes the cost of reading it: written there (by
    make-trace.sh, say) it sits in 4 KiB pages, while the kernel's read-ahead from disk fills
    large folios, which `mmap` maps up to ~15 ms faster for a 224 MB trace (and `read` copies a
    little faster). So the cached pages are dropped first (POSIX_FADV_DONTNEED, after a sync so
    that none is dirty) and the file read back once.
    """
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    finally:
        os.close(fd)
    top_up(path)


def build_c(name: str, dest: Path) -> Path:
    """Compiles bench/NAME.c with `cc -O2` into DEST/NAME and returns its path. Raises OSError
    without cc, subprocess.CalledProcessError if it fails."""
    out = dest / name
    subprocess.run(["cc", "-O2", "-o", str(out), str(REPO / "bench" / f"{name}.c")], check=True,
                   capture_output=True)
    return out


def top_up(path: Path) -> None:
    """Reads `path` through once more, so that pages the kernel dropped from the page cache
    since `warm()` are back before the next timed run, for every tool alike.

    On this VM the host reclaims page cache continuously, even with most memory free: `fincore`
    showed 7-25 MB of a 224 MB trace gone within 5-20 s. A run that meets those holes reads
    from disk and pays for it in CPU (block I/O, page-cache insertion, synchronous faults). Over
    six runs of `tapflow flows` with 2.5 s between them, medians were 84-86 ms without this and
    80-82 ms with it, and the outliers of 110-119 ms went away. Read-ahead refills the holes in
    large folios, as `warm()` leaves the rest.
    """
    fd = os.open(path, os.O_RDONLY)
    try:
        while os.read(fd, 1 << 24):
            pass
    finally:
        os.close(fd)


def capinfos_count(path: Path) -> int:
    r = subprocess.run(["capinfos", "-T", "-r", "-c", "-M", str(path)], capture_output=True, text=True)
    if r.returncode != 0 and not r.stdout.strip():
        raise RuntimeError(f"capinfos failed on {path}: {r.stderr.strip()}")
    return int(r.stdout.strip().split("\t")[-1])


def grab_int(pattern: str, text: str) -> int | None:
    m = re.search(pattern, text, re.M)
    return int(m.group(1)) if m else None


def median(xs: list[float]) -> float:
    xs = sorted(xs)
    n = len(xs)
    if n == 0:
        return float("nan")
    return xs[n // 2] if n % 2 else (xs[n // 2 - 1] + xs[n // 2]) / 2
