#!/usr/bin/env python3
"""Flow ingest benchmark: CPU per million records stored, `tapflow collect --store` (Parquet,
zstd, rollups) against `nfcapd -y` (LZ4) on the same stream, and the highest rate one tapflow
worker stores with no loss.

    sudo python3 bench/collect.py                  # bench/out/big.pcap (built if missing), 3 runs
    sudo python3 bench/collect.py --runs 5 --rates 0.5,1,2,3
    sudo python3 bench/collect.py --live-times --replay-rate 0.3 --sinks store --rates 2 --seconds 60

1. Same stream into each collector in turn, each alone in a fresh namespace, pinned to CPU 1
   (the sender on CPU 0), both at --nice: `nfcapd -y -B 16777216 -t 3600 -w DIR` and `tapflow collect -q
   -l ipfix://127.0.0.1:PORT --store DIR --rcvbuf 16M`. The stream (--sender): nfpcapd's flows
   of the trace (`nfpcapd -r T -w DIR`, one nfcapd file) sent by `nfreplay -v 9` (NetFlow v9,
   datagrams up to 1,460 bytes, ~11 records each; the default), or with --live-times
   nfreplay's stream recorded once with every flow moved into the current hour (as below)
   and replayed at --replay-rate; or softflowd's IPFIX of the trace (`softflowd -d -c none -r T
   -n 127.0.0.1:PORT -v 10 -b`, unpaced). Once the collector has read its socket empty it gets
   SIGTERM (both write what they hold and exit); its CPU is what wait4 reports (all threads).
   tapflow's is also split where its store has written every flow (its store thread quiet, 6 s
   or more after the socket emptied: a flush every 5 s): before, the ingest's cost; after,
   what it defers to its close (merging the fresh files at the store's zstd level, the last
   rollups). Records stored: `nfdump -R DIR -I` Flows; tapflow's `stores.0.stored`.
   Datagrams dropped: the namespace's UDP InErrors. Bytes per flow: the flow files' size (nfcapd
   files; tapflow's `flows/` Parquet files, before and after its close) over the flows.
2. Rate: tapflow's own IPFIX export of the trace (`tapflow flows -r T --export ipfix://`,
   messages up to 9000 bytes) is recorded once, then replayed N times back to back by a paced
   sender (CPU 0, sequence numbers continued so each replay follows the last; when it is off
   its CPU it does not make the time up in a burst) at each rate of
   --rates (million records a second) into `tapflow collect --threads 1` (CPU 1, --rcvbuf,
   256M by default, as tapflow's; both at --nice -10, so other jobs on a shared machine take less of their cores),
   --rate-runs times each, into `-w csv:/dev/null` (receive, decode, hand over, CSV
   text) and into the Parquet store. The sender reports what it sent: a rate it fell short of
   (by more than 2%) is marked as such, not as the collector's. Each run's records: sent =
   received + lost (sequence) and received = stored; the socket's drops are counted too. A
   rate passes when every run stored every record sent. Each run's CPU (wait4, all threads)
   is split by thread (schedstat, read once the socket is empty): the receive worker
   (recvmmsg, decode, count, batch), the store thread (the store, or for CSV the hand-over to
   the exporter), the exporter thread (CSV lines and their writes), and the rest: what the
   store does at its close (after the socket emptied) and start-up. With --live-times the
   trace's flows are moved into the current hour (each record's times by one amount: its start
   to the hour's start plus its offset from the first start modulo 50 minutes; 8 variants 7
   minutes apart, one per replay in turn), as a live exporter's would be; without it they keep
   the trace's times, spread over 153 hours days ago.
"""
import argparse
import json
import os
import socket
import struct
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import benchlib as bl  # noqa: E402

PORT = 4739


def ns_new(tag: str) -> str:
    name = f"tfc{os.getpid()}{tag}"
    subprocess.run(["ip", "netns", "add", name], check=True)
    subprocess.run(["ip", "-n", name, "link", "set", "lo", "up"], check=True)
    return name


def ns_del(name: str) -> None:
    subprocess.run(["ip", "netns", "del", name], capture_output=True)


def in_errors(ns: str) -> int:
    text = subprocess.run(["ip", "netns", "exec", ns, "cat", "/proc/net/snmp"],
                          capture_output=True, text=True, check=True).stdout
    udp = [l.split() for l in text.splitlines() if l.startswith("Udp: ")]
    return int(dict(zip(udp[0], udp[1]))["InErrors"])


def wait_drained(ns: str, port: int) -> None:
    """Until no socket on `port` in `ns` has a datagram queued (rx_queue 0)."""
    want = f":{port:04X}"
    for _ in range(3000):
        text = subprocess.run(["ip", "netns", "exec", ns, "cat", "/proc/net/udp"],
                              capture_output=True, text=True).stdout
        rows = [l.split() for l in text.splitlines()[1:]]
        if all(r[4].split(":")[1] == "00000000" for r in rows if r[1].endswith(want)):
            return
        time.sleep(0.01)


def thread_cpu(pid: int, prefix: str) -> float:
    """CPU seconds of the threads of `pid` whose name starts with `prefix` (the receive
    workers: receiving, decoding, counting, handing batches over)."""
    return threads_cpu(pid).get(prefix, 0.0)


THREADS = ("tapflow-collect", "tapflow-store", "tapflow-export")


def threads_cpu(pid: int) -> dict:
    """CPU seconds of the threads of `pid` by role: receive workers (`tapflow-collect`), the
    store thread, the exporter thread, and the rest (`other`: the main thread)."""
    total = {}
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            comm = Path(f"/proc/{pid}/task/{tid}/comm").read_text().strip()
            ns = int(Path(f"/proc/{pid}/task/{tid}/schedstat").read_text().split()[0])
        except OSError:
            continue
        role = next((t for t in THREADS if comm.startswith(t)), "other")
        total[role] = total.get(role, 0.0) + ns / 1e9
    return total


def settled_cpu(pid: int, at_least: float = 6.0) -> float:
    """CPU seconds of `pid` (all threads) once its store thread has flushed and gone quiet:
    at least `at_least` s (past the 5 s flush interval) after the socket emptied, and no more
    than 5 ms of that thread's CPU in the last half second."""
    t0 = time.monotonic()
    last = threads_cpu(pid).get("tapflow-store", 0.0)
    while True:
        time.sleep(0.5)
        now = threads_cpu(pid).get("tapflow-store", 0.0)
        if time.monotonic() - t0 >= at_least and now - last < 0.005:
            return sum(threads_cpu(pid).values())
        last = now


def size_of(paths) -> int:
    return sum(p.stat().st_size for p in paths)


def one_run(tool: str, args, work: Path, run: int) -> dict:
    ns = ns_new(f"{tool[0]}{run}")
    out = Path(tempfile.mkdtemp(dir=work, prefix=f"{tool}-"))
    try:
        nice = ["nice", "-n", str(args.nice)]
        pin = ["ip", "netns", "exec", ns, *nice, "taskset", "-c", "1"]
        if tool == "nfcapd":
            argv = [*pin, "nfcapd", "-y", "-B", "16777216", "-t", "3600", "-b", "127.0.0.1",
                    "-p", str(PORT), "-w", str(out)]
        else:
            argv = [*pin, str(args.tapflow), "collect", "-q", "-l", f"ipfix://127.0.0.1:{PORT}",
                    "--store", str(out / "store"), "--rcvbuf", "16M",
                    "--summary-json", str(out / "summary.json")]
            if tool == "tapflow-enrich":
                argv += ["--geoip", str(args.enrich / "country.mmdb"),
                         "--asn", str(args.enrich / "asn.csv")]
            if tool == "tapflow-detect":
                argv += ["--detect"]
        p, t0 = bl.start(argv, work, f"{tool}-{run}")
        bl.wait_udp_bound(p, PORT, work, f"{tool}-{run}", tool)
        on0 = ["ip", "netns", "exec", ns, *nice, "taskset", "-c", "0"]
        if args.sender == "softflowd":
            sender = [*on0, "softflowd", "-d", "-c", "none", "-r", str(args.trace), "-n",
                      f"127.0.0.1:{PORT}", "-v", "10", "-b"]
        elif args.live_times:
            sender = [*on0, sys.executable, __file__, "--replay", str(work / "ingest-stream"),
                      "--replay-rate", str(args.replay_rate)]
        else:
            sender = [*on0, "nfreplay", "-r", str(args.nfcapd_file), "-H", "127.0.0.1", "-p",
                      str(PORT), "-v", "9"]
        subprocess.run(sender, check=True, capture_output=True, timeout=600)
        wait_drained(ns, PORT)
        dropped = in_errors(ns)
        receive = thread_cpu(p.pid, "tapflow-collect")
        # tapflow: its CPU once the store thread has written what it took (a flush every 5 s)
        # and gone quiet; what it does after SIGTERM (the merges, the last rollups) is apart.
        ingest = settled_cpu(p.pid) if tool.startswith("tapflow") else None
        store_thread = thread_cpu(p.pid, "tapflow-store") if tool != "nfcapd" else 0.0
        fresh = (size_of((out / "store" / "flows").rglob("*.parquet"))
                 if tool.startswith("tapflow") else 0)
        p.send_signal(15)
        f = bl.wait_rusage(p, t0, timeout=300)
        if tool == "nfcapd":
            info = subprocess.run(["nfdump", "-R", str(out), "-I"], capture_output=True,
                                  text=True, check=True).stdout
            stored = bl.grab_int(r"Flows: (\d+)", info) or 0
            files = [q for q in out.rglob("nfcapd.*") if q.is_file()]
        else:
            s = json.loads((out / "summary.json").read_text())
            stored = s["stores"][0]["stored"]
            dropped = max(dropped, s["socket_drops"])
            files = list((out / "store" / "flows").rglob("*.parquet"))
        return {"cpu": f.cpu, "receive": receive, "stored": stored, "dropped": dropped,
                "ingest": f.cpu if ingest is None else ingest,
                "store_thread": store_thread,
                "fresh_bytes_per_flow": fresh / max(stored, 1),
                "bytes_per_flow": size_of(files) / max(stored, 1), "rc": f.rc}
    finally:
        ns_del(ns)
        subprocess.run(["rm", "-rf", str(out)])


def record_stream(args, work: Path) -> list[bytes]:
    """tapflow's IPFIX export of the trace, every datagram in order."""
    ns = ns_new("rec")
    try:
        return record([str(args.tapflow), "flows", "-q", "-r", str(args.trace), "--export",
                       f"ipfix://127.0.0.1:{PORT}", "--export-rate", "2000"], ns)
    finally:
        ns_del(ns)


def rate_run(args, work: Path, rate: float, sink: str) -> dict:
    """Replays the recorded stream at `rate` million records a second for --seconds into a
    collector keeping the flows in `sink` (`store`: the Parquet store; `csv`: CSV to
    /dev/null, the receive and decode path with a cheap output)."""
    ns = ns_new(f"r{int(rate * 10)}")
    out = Path(tempfile.mkdtemp(dir=work, prefix="rate-"))
    try:
        keep = ["--store", str(out / "store")] if sink == "store" else ["-w", "csv:/dev/null"]
        nice = ["nice", "-n", str(args.nice)]
        argv = ["ip", "netns", "exec", ns, *nice, "taskset", "-c", "1", str(args.tapflow), "collect",
                "-q", "-l", f"ipfix://127.0.0.1:{PORT}", *keep, "--rcvbuf", args.rcvbuf,
                "--summary-json", str(out / "summary.json")]
        p, t0 = bl.start(argv, work, f"rate-{rate}")
        bl.wait_udp_bound(p, PORT, work, f"rate-{rate}", "tapflow collect")
        sender = subprocess.run(
            ["ip", "netns", "exec", ns, *nice, "taskset", "-c", "0", sys.executable, __file__,
             "--send", str(rate), "--seconds", str(args.seconds), "--stream", str(work / "stream"),
             *(["--live-times"] if args.live_times else [])],
            capture_output=True, text=True, check=True)
        sent = json.loads(sender.stdout)
        wait_drained(ns, PORT)
        split = threads_cpu(p.pid)
        p.send_signal(15)
        f = bl.wait_rusage(p, t0, timeout=300)
        s = json.loads((out / "summary.json").read_text())
        return {"rate": rate, "achieved": sent["records"] / sent["seconds"] / 1e6,
                "sent": sent["records"], "records": s["records"],
                "stored": s["stores"][0]["stored"], "socket_drops": s["socket_drops"],
                "sequence_lost": s["sequence_lost"], "cpu": f.cpu, "split": split}
    finally:
        ns_del(ns)
        subprocess.run(["rm", "-rf", str(out)])


VARIANTS = 8
SPAN_MS = 50 * 60 * 1000
STEP_MS = 7 * 60 * 1000


def time_fields(msgs) -> list:
    """(message, offset of a record, its flowStart/EndMilliseconds fields, forward and reverse,
    as (is a start, offset)) of every data record of the stream, from its IPFIX (or NetFlow
    v9: a 20-byte header, templates in set 0, no enterprise bit) templates."""
    templates, out = {}, []
    for m in msgs:
        v9 = m[:2] == b"\x00\x09"
        at = 20 if v9 else 16
        while at + 4 <= len(m):
            sid, slen = struct.unpack_from(">HH", m, at)
            body, end = at + 4, at + slen
            if slen < 4:
                break
            if sid == (0 if v9 else 2):
                while body + 4 <= end:
                    tid, count = struct.unpack_from(">HH", m, body)
                    body += 4
                    fields, off = [], 0
                    for _ in range(count):
                        ie, length = struct.unpack_from(">HH", m, body)
                        body += 4
                        if ie & 0x8000 and not v9:
                            body += 4
                        if (ie & 0x7fff) in (152, 153) and length == 8:
                            fields.append((ie & 0x7fff == 152, off))
                        off += length
                    templates[tid] = (off, fields)
            elif sid in templates:
                size, fields = templates[sid]
                while body + size <= end:
                    out.append((m, body, fields))
                    body += size
            at = end
    return out


def live_variants(msgs) -> list:
    """VARIANTS copies of the stream whose flows start in the current hour, as a live exporter's
    would: each record's times moved by one amount, its start to the hour's start plus its
    offset from the trace's first start modulo 50 minutes; variant k 7·k minutes later."""
    def start(m, r, f):
        """The record's first start: a side without packets has its times 0."""
        ts = [struct.unpack_from(">Q", m, r + off)[0] for is_start, off in f if is_start]
        return min((t for t in ts if t), default=0)

    fields = [(m, r, f, start(m, r, f)) for m, r, f in time_fields(msgs)]
    first = min(t for *_, t in fields if t)
    hour = int(time.time()) // 3600 * 3600 * 1000
    variants = []
    for k in range(VARIANTS):
        copy = {id(m): bytearray(m) for m in msgs}
        for m, r, f, t0 in fields:
            if not t0:
                continue
            c = copy[id(m)]
            shift = hour + (t0 - first + k * STEP_MS) % SPAN_MS - t0
            for _, off in f:
                t = struct.unpack_from(">Q", m, r + off)[0]
                if t:
                    struct.pack_into(">Q", c, r + off, t + shift)
        variants.append([copy[id(m)] for m in msgs])
    return variants


def send(rate_m: float, seconds: float, stream_path: Path, live: bool) -> None:
    """The paced sender (runs in the namespace): the recorded stream over and over, IPFIX
    sequence numbers and export times continued, `rate_m` million records a second; with
    `live`, its flows moved into the current hour ([`live_variants`], one per loop in turn)."""
    data = stream_path.read_bytes()
    msgs, i = [], 0
    while i < len(data):
        (n,) = struct.unpack_from(">I", data, i)
        msgs.append(bytearray(data[i + 4:i + 4 + n]))
        i += 4 + n
    variants = live_variants(msgs) if live else [msgs]
    # Records per message: the difference of consecutive sequence numbers. The last message,
    # whose count is unknown, only gives the total of a loop.
    seqs = [struct.unpack_from(">I", m, 8)[0] for m in msgs]
    per = [(seqs[k + 1] - seqs[k]) & 0xffffffff for k in range(len(msgs) - 1)]
    loop_records = (seqs[-1] - seqs[0]) & 0xffffffff
    variants = [v[:-1] for v in variants]
    base = [struct.unpack_from(">I", m, 8)[0] for m in msgs[:-1]]
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 1 << 22)
    s.connect(("127.0.0.1", PORT))
    t0 = time.monotonic()
    # The schedule's start: moved on when the sender falls more than SLACK behind (it was off
    # its CPU), so lateness is not made up in a burst no exporter at this rate would send.
    start, slipped, SLACK = t0, 0.0, 0.02
    sent_records, loop = 0, 0
    now = int(time.time())
    while time.monotonic() - t0 < seconds:
        off = loop * loop_records
        for m, n, b in zip(variants[loop % len(variants)], per, base):
            struct.pack_into(">II", m, 4, now, (b + off) & 0xffffffff)
            while True:
                try:
                    s.send(m)
                    break
                except BlockingIOError:
                    time.sleep(0.0001)
            sent_records += n
            # Pace: stay behind the schedule of rate_m million records a second.
            ahead = sent_records / (rate_m * 1e6) - (time.monotonic() - start)
            if ahead > 0.001:
                time.sleep(ahead)
            elif ahead < -SLACK:
                start -= ahead
                slipped -= ahead
        loop += 1
    print(json.dumps({"records": sent_records, "seconds": time.monotonic() - t0,
                      "slipped": slipped}))


def read_stream(path: Path) -> list:
    """The datagrams of a recorded stream (each after its 4-byte length)."""
    data, msgs, i = path.read_bytes(), [], 0
    while i < len(data):
        (n,) = struct.unpack_from(">I", data, i)
        msgs.append(data[i + 4:i + 4 + n])
        i += 4 + n
    return msgs


def write_stream(path: Path, msgs) -> None:
    path.write_bytes(b"".join(struct.pack(">I", len(d)) + d for d in msgs))


def record(argv: list, ns: str) -> list:
    """Every datagram `argv` (run in namespace `ns`) sends to 127.0.0.1:PORT, in order."""
    rx = subprocess.Popen(
        ["ip", "netns", "exec", ns, sys.executable, "-c",
         "import socket,sys,struct\n"
         "s=socket.socket(socket.AF_INET,socket.SOCK_DGRAM)\n"
         "s.setsockopt(socket.SOL_SOCKET,33,1<<28)  # SO_RCVBUFFORCE\n"
         f"s.bind(('127.0.0.1',{PORT}));s.settimeout(3)\n"
         "o=sys.stdout.buffer\n"
         "try:\n"
         " while True:\n  d=s.recv(65535);o.write(struct.pack('>I',len(d))+d)\n"
         "except socket.timeout: pass\n"],
        stdout=subprocess.PIPE)
    time.sleep(0.5)
    subprocess.run(["ip", "netns", "exec", ns, *argv], check=True, capture_output=True)
    data = rx.communicate(timeout=600)[0]
    out, i = [], 0
    while i < len(data):
        (n,) = struct.unpack_from(">I", data, i)
        out.append(data[i + 4:i + 4 + n])
        i += 4 + n
    return out


def nfreplay_stream(args, work: Path) -> None:
    """nfpcapd's flows of the trace in one nfcapd file (`args.nfcapd_file`); with --live-times
    also nfreplay's NetFlow v9 stream of them (MTU 1500, ~11 records a datagram), recorded
    once, with the flows moved into the current hour (`work/ingest-stream`)."""
    nf = work / "nfpcapd"
    nf.mkdir()
    subprocess.run(["nfpcapd", "-r", str(args.trace), "-w", str(nf), "-t", "86400000"],
                   check=True, capture_output=True)
    args.nfcapd_file = next(nf.glob("nfcapd.*"))
    if not args.live_times:
        return
    ns = ns_new("nfr")
    try:
        msgs = record(["nfreplay", "-r", str(args.nfcapd_file), "-H", "127.0.0.1", "-p",
                       str(PORT), "-v", "9", "-d", "0"], ns)
    finally:
        ns_del(ns)
    write_stream(work / "ingest-stream", live_variants(msgs)[0])
    print(f"nfreplay stream: {len(msgs)} datagrams, flows moved into the current hour")


def replay(path: Path, rate_m: float) -> None:
    """Sends the recorded stream at `path` once to 127.0.0.1:PORT, `rate_m` million records a
    second at most (paced by datagrams, of the stream's mean records per datagram)."""
    msgs = read_stream(path)
    per = len(time_fields(msgs)) / len(msgs)
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 1 << 22)
    s.connect(("127.0.0.1", PORT))
    t0, sent = time.monotonic(), 0.0
    for m in msgs:
        s.send(m)
        sent += per
        ahead = sent / (rate_m * 1e6) - (time.monotonic() - t0)
        if ahead > 0.001:
            time.sleep(ahead)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--trace", type=Path, default=bl.REPO / "bench" / "out" / "big.pcap")
    ap.add_argument("--tapflow", default=None)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--rates", default="0.5,1,1.5,2,2.5,3")
    ap.add_argument("--seconds", type=float, default=5)
    ap.add_argument("--rate-runs", type=int, default=3, help="runs at each rate")
    ap.add_argument("--sinks", default="csv,store", help="where the rate part keeps the flows")
    ap.add_argument("--rcvbuf", default="256M", help="the rate part's socket buffer")
    ap.add_argument("--nice", type=int, default=-10,
                    help="niceness of the collectors and senders, so that other jobs on a "
                         "shared machine take less of their cores")
    ap.add_argument("--skip-ingest", action="store_true", help="only the rate part")
    ap.add_argument("--skip-rates", action="store_true", help="only the ingest part")
    ap.add_argument("--enrich", type=Path, default=None, metavar="DIR",
                    help="also a tapflow run with --geoip DIR/country.mmdb --asn DIR/asn.csv "
                         "(scripts/fetch-ipdb.sh), reported beside the run without")
    ap.add_argument("--detect", action="store_true",
                    help="also run tapflow with --detect and report what detection adds")
    ap.add_argument("--live-times", action="store_true",
                    help="the rate part's flows moved into the current hour, as a live exporter's")
    ap.add_argument("--sender", choices=("nfreplay", "softflowd"), default="nfreplay",
                    help="the ingest part's stream: nfreplay's NetFlow v9 of nfpcapd's flows "
                         "(MTU 1500), or softflowd's IPFIX")
    ap.add_argument("--replay-rate", type=float, default=1.0,
                    help="with --live-times, the ingest part's rate (million records a second)")
    ap.add_argument("--replay", type=Path, help=argparse.SUPPRESS)
    ap.add_argument("--send", type=float, help=argparse.SUPPRESS)
    ap.add_argument("--stream", type=Path, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.send is not None:
        return send(args.send, args.seconds, args.stream, args.live_times)
    if args.replay is not None:
        return replay(args.replay, args.replay_rate)
    bl.need("softflowd", "nfcapd", "nfdump", "nfpcapd", "nfreplay", "taskset")
    args.tapflow = bl.tapflow_path(args.tapflow)
    if not args.trace.exists():
        subprocess.run([str(bl.REPO / "scripts" / "make-trace.sh"), str(args.trace)], check=True)
    work = Path(tempfile.mkdtemp(prefix="tf-bench-collect-"))
    print(f"trace {args.trace}, {args.runs} runs, work {work}")
    if args.sender == "nfreplay" and not args.skip_ingest:
        nfreplay_stream(args, work)
    res = {"nfcapd": [], "tapflow": []}
    tools = ("nfcapd", "tapflow")
    if args.enrich:
        res["tapflow-enrich"] = []
        tools = (*tools, "tapflow-enrich")
    if args.detect:
        res["tapflow-detect"] = []
        tools = (*tools, "tapflow-detect")
    for run in range(0 if args.skip_ingest else args.runs):
        for tool in tools if run % 2 == 0 else tuple(reversed(tools)):
            r = one_run(tool, args, work, run)
            res[tool].append(r)
            recv = (f", receive workers {r['receive'] / max(r['stored'], 1) * 1e6:.3f} s/M"
                    if tool == "tapflow" else "")
            if tool == "tapflow":
                recv += (f", until its last flush {r['ingest'] / max(r['stored'], 1) * 1e6:.3f}"
                         f" s/M ({r['fresh_bytes_per_flow']:.1f} B/flow)")
            print(f"  {tool:8} run {run}: {r['stored']} flows stored, CPU {r['cpu']:.3f} s "
                  f"({r['cpu'] / max(r['stored'], 1) * 1e6:.3f} s/M{recv}), {r['dropped']} "
                  f"datagrams dropped, {r['bytes_per_flow']:.1f} B/flow, exit {r['rc']}")
    if not args.skip_ingest:
        report_ingest(res)
        if args.enrich:
            report_enrich(res)
        if args.detect:
            report_added(res, "tapflow-detect", "detection (`--detect`)")
    if not args.skip_rates:
        rate_part(args, work)


def report_ingest(res: dict) -> None:
    med = {t: bl.median([r["cpu"] / max(r["stored"], 1) * 1e6 for r in rs]) for t, rs in res.items()}
    per_m = lambda k: bl.median([r[k] / max(r["stored"], 1) * 1e6 for r in res["tapflow"]])
    recv, ingest = per_m("receive"), per_m("ingest")
    close = bl.median([(r["cpu"] - r["ingest"]) / max(r["stored"], 1) * 1e6
                       for r in res["tapflow"]])
    print(f"median CPU per million records stored: nfcapd -y {med['nfcapd']:.3f} s, "
          f"tapflow collect --store {med['tapflow']:.3f} s: until its last flush {ingest:.3f} s "
          f"(its receive workers {recv:.3f} s), after it (its close) {close:.3f} s; ratios "
          f"{med['tapflow'] / med['nfcapd']:.2f}, {ingest / med['nfcapd']:.2f} and "
          f"{recv / med['nfcapd']:.2f}")


def report_enrich(res: dict) -> None:
    """What enrichment (`--geoip`, `--asn`) adds to ingest: the same stream stored with and
    without it, CPU per million records, the whole process and its store thread (where the
    lookups run)."""
    per_m = lambda r, k: r[k] / max(r["stored"], 1) * 1e6
    cpu = {t: bl.median([per_m(r, "cpu") for r in res[t]]) for t in ("tapflow", "tapflow-enrich")}
    st = {t: bl.median([per_m(r, "store_thread") for r in res[t]]) for t in ("tapflow", "tapflow-enrich")}
    size = {t: bl.median([r["bytes_per_flow"] for r in res[t]]) for t in ("tapflow", "tapflow-enrich")}
    print(f"enrichment: CPU per million records stored {cpu['tapflow']:.3f} s without, "
          f"{cpu['tapflow-enrich']:.3f} s with (+{cpu['tapflow-enrich'] - cpu['tapflow']:.3f} s); "
          f"store thread {st['tapflow']:.3f} s without, {st['tapflow-enrich']:.3f} s with "
          f"(+{st['tapflow-enrich'] - st['tapflow']:.3f} s); {size['tapflow']:.2f} and "
          f"{size['tapflow-enrich']:.2f} B/flow")


def report_added(res: dict, tool: str, what: str) -> None:
    """What one option adds to ingest: the same stream stored with and without it, CPU per
    million records (the whole process)."""
    per_m = lambda r: r["cpu"] / max(r["stored"], 1) * 1e6
    cpu = {t: bl.median([per_m(r) for r in res[t]]) for t in ("tapflow", tool)}
    print(f"{what}: CPU per million records stored {cpu['tapflow']:.3f} s without, "
          f"{cpu[tool]:.3f} s with (+{cpu[tool] - cpu['tapflow']:.3f} s)")


def rate_part(args, work: Path) -> None:
    stream = record_stream(args, work)
    (work / "stream").write_bytes(b"".join(struct.pack(">I", len(d)) + d for d in stream))
    print(f"rate: {len(stream)} messages recorded, replayed for {args.seconds} s at each rate, "
          f"{args.rate_runs} runs each (load {os.getloadavg()[0]:.1f})")
    best = {}
    for sink in args.sinks.split(","):
        for rate in [float(x) for x in args.rates.split(",")]:
            runs = []
            for _ in range(args.rate_runs):
                r = rate_run(args, work, rate, sink)
                runs.append(r)
                r["loss"] = r["sent"] - r["stored"]
                per_m = 1e6 / max(r["records"], 1)
                sp = r["split"]
                print(f"  {sink:5} {rate:.2f} M/s asked, {r['achieved']:.2f} sent: {r['sent']} "
                      f"sent, {r['records']} received, {r['stored']} stored, {r['socket_drops']} "
                      f"socket drops, {r['sequence_lost']} lost (sequence), CPU "
                      f"{r['cpu'] * per_m:.3f} s/M: receive "
                      f"{sp.get('tapflow-collect', 0) * per_m:.3f}, store thread "
                      f"{sp.get('tapflow-store', 0) * per_m:.3f}, exporter "
                      f"{sp.get('tapflow-export', 0) * per_m:.3f}, after the socket emptied "
                      f"(closing the store) and start-up "
                      f"{(r['cpu'] - sum(sp.values())) * per_m:.3f} (load "
                      f"{os.getloadavg()[0]:.1f})")
            short = bl.median([r["achieved"] for r in runs]) < rate * 0.98
            clean = sum(r["loss"] == 0 and r["socket_drops"] == 0 for r in runs)
            loss = bl.median([r["loss"] / max(r["sent"], 1) for r in runs])
            cpu = bl.median([r["cpu"] / max(r["records"], 1) * 1e6 for r in runs])
            verdict = ("sender short" if short else
                       "no loss" if clean == len(runs) else f"LOSS in {len(runs) - clean} runs")
            print(f"{sink:5} {rate:.2f} M/s: median loss {loss:.2%}, median CPU {cpu:.3f} s per "
                  f"million records received, 0 loss in {clean}/{len(runs)} runs: {verdict}")
            if clean == len(runs) and not short:
                best[sink] = rate
    for sink in args.sinks.split(","):
        print(f"highest rate with 0 loss in every run, {sink}: {best.get(sink, 0):.2f} M records/s")
    subprocess.run(["rm", "-rf", str(work)])


if __name__ == "__main__":
    main()
