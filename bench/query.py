#!/usr/bin/env python3
"""The query benchmark: one busy hour of flows sent by a third-party exporter, the same questions
asked of nfdump, of `tapflow query` and of DuckDB over tapflow's own Parquet files, the answers
checked to agree, the wall times compared.

    bench/query.py [--pcap PCAP] [--work DIR] [--flows N] [--runs 3] [--tapflow BIN]

The busy hour (built once in WORK, reused after):
  1. PCAP's packet times are squeezed, in order, into 12:50:00-12:59:00 UTC of 2026-01-15;
  2. nfpcapd meters them into nfcapd files (one copy of the trace's flows);
  3. nfreplay sends those files as NetFlow v9, K times (K = N / flows per copy, rounded up), to
     `nfcapd -y` and to `tapflow collect --store` on loopback at once; both must hold every flow.
Then each question runs RUNS times, the three tools in turn; the table has the medians.
DuckDB (the Python package, 2 threads) reads tapflow's files through a view of one-way flows: the
table, UNION ALL the table with addresses and ports swapped where rev_packets > 0.
"""
from __future__ import annotations

import argparse
import calendar
import csv
import io
import json
import math
import os
import shutil
import signal
import statistics
import struct
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from benchlib import REPO, die, need, tapflow_path  # noqa: E402

HOUR = calendar.timegm((2026, 1, 15, 12, 0, 0))
SQUEEZE = (HOUR + 50 * 60, 9 * 60)  # start, span (s)
NF_PORT, TF_PORT = 19995, 19996


def squeeze(src: Path, dst: Path) -> None:
    """Copies a classic pcap, packet times moved linearly into SQUEEZE (order kept)."""
    data = src.read_bytes()
    magic = struct.unpack_from("<I", data)[0]
    if magic not in (0xA1B2C3D4, 0xA1B23C4D):
        die(f"{src}: not a little-endian classic pcap")
    frac = 1e9 if magic == 0xA1B23C4D else 1e6
    recs, at = [], 24
    while at + 16 <= len(data):
        s, f, incl, _ = struct.unpack_from("<IIII", data, at)
        recs.append((at, s + f / frac))
        at += 16 + incl
    t0, t1 = recs[0][1], max(t for _, t in recs)
    scale = SQUEEZE[1] / max(t1 - t0, 1e-9)
    out = bytearray(data)
    last = 0.0
    for at, t in recs:
        nt = max(SQUEEZE[0] + (t - t0) * scale, last)
        last = nt
        s = int(nt)
        struct.pack_into("<II", out, at, s, min(int((nt - s) * frac), int(frac) - 1))
    dst.write_bytes(out)


def nfdump_flows(path: Path) -> int:
    out = subprocess.run(["nfdump", "-R", str(path), "-I"], capture_output=True, text=True,
                         check=True).stdout
    for line in out.splitlines():
        if line.startswith("Flows:"):
            return int(line.split()[1])
    die(f"nfdump -I {path}: no Flows line")


def build(args, work: Path, tf: Path) -> None:
    if (work / "built.json").exists():
        return
    shutil.rmtree(work, ignore_errors=True)
    (work / "nf1").mkdir(parents=True)  # one copy: nfpcapd's files, then one file
    (work / "nf").mkdir()
    squeezed = work / "squeezed.pcap"
    squeeze(Path(args.pcap), squeezed)
    subprocess.run(["nfpcapd", "-r", str(squeezed), "-w", str(work / "nf1")], check=True,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    squeezed.unlink()
    subprocess.run(["nfdump", "-R", str(work / "nf1"), "-w", str(work / "copy.nf")], check=True,
                   stdout=subprocess.DEVNULL)
    shutil.rmtree(work / "nf1")
    per_copy = nfdump_flows(work / "copy.nf")
    copies = max(1, math.ceil(args.flows / per_copy))
    print(f"busy hour: {per_copy} flows per copy, {copies} copies", flush=True)
    nfcapd = subprocess.Popen(["nfcapd", "-y", "-w", str(work / "nf"), "-p", str(NF_PORT),
                               "-b", "127.0.0.1", "-B", "268435456"],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    collect = subprocess.Popen([str(tf), "collect", "-q", "--listen", f"nfv9://127.0.0.1:{TF_PORT}",
                                "--store", str(work / "store"), "--summary-json",
                                str(work / "collect.json")],
                               stdout=subprocess.DEVNULL, stderr=open(work / "collect.log", "w"))
    time.sleep(1.0)
    t0 = time.time()
    for _ in range(copies):
        sends = [subprocess.Popen(["nfreplay", "-v", "9", "-d", str(args.delay), "-r",
                                   str(work / "copy.nf"), "-p", str(port), "-H", "127.0.0.1"],
                                  stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
                 for port in (NF_PORT, TF_PORT)]
        for s in sends:
            s.wait()
    time.sleep(3.0)
    for p in (nfcapd, collect):
        p.send_signal(signal.SIGINT)
        p.wait(timeout=120)
    print(f"sent {copies} copies in {time.time() - t0:.0f} s", flush=True)
    want, nf, tfs = per_copy * copies, nfdump_flows(work / "nf"), tapflow_summary(tf, work)
    print(f"flows sent {want}, nfcapd holds {nf}, tapflow holds {tfs}", flush=True)
    if nf != want or tfs != want:
        die("a collector lost flows: rerun with a larger --delay")
    (work / "built.json").write_text(json.dumps({"copies": copies, "flows": want}))


def tapflow_summary(tf: Path, work: Path) -> int:
    out = run([str(tf), "query", "-R", str(work / "store"), "--raw", "-I"])
    for line in out.splitlines():
        if line.startswith("Flows:"):
            return int(line.split()[1])
    die("tapflow query -I: no Flows line")


def run(cmd: list[str]) -> str:
    return subprocess.run(cmd, capture_output=True, text=True, check=True).stdout


def rows(text: str) -> list[dict]:
    return [r for r in csv.DictReader(io.StringIO(text)) if any(r.values())]


def mapped(ip: str) -> bytes:
    """The store's 16-byte form of an IPv4 address."""
    return bytes(10) + b"\xff\xff" + bytes(int(x) for x in ip.split("."))


def questions(host: str) -> list[dict]:
    """Each question: nfdump's and tapflow's arguments, DuckDB's SQL over `oneway`, and what of
    each answer must agree (a list of numbers)."""
    h = mapped(host).hex()
    blob = f"from_hex('{h}')"
    return [
        dict(name="-s srcip/bytes -n 10 (rollup)", nf=["-s", "srcip/bytes", "-n", "10"],
             tf=["-s", "srcip/bytes", "-n", "10"], stat="byt", tfcol="bytes",
             sql="SELECT src, sum(bytes) b FROM oneway GROUP BY src ORDER BY b DESC LIMIT 10"),
        dict(name="-s srcip/bytes -n 10 --raw", nf=["-s", "srcip/bytes", "-n", "10"],
             tf=["-s", "srcip/bytes", "-n", "10", "--raw"], stat="byt", tfcol="bytes",
             sql="SELECT src, sum(bytes) b FROM oneway GROUP BY src ORDER BY b DESC LIMIT 10"),
        dict(name="-s dstip/flows -n 10 proto tcp", nf=["-s", "dstip/flows", "-n", "10", "proto tcp"],
             tf=["-s", "dstip/flows", "-n", "10", "proto", "tcp"], stat="fl", tfcol="flows",
             sql="SELECT dst, count(*) c FROM oneway WHERE protocol = 6 GROUP BY dst "
                 "ORDER BY c DESC LIMIT 10"),
        dict(name="-s srcip/bytes -n 10 dst port 443",
             nf=["-s", "srcip/bytes", "-n", "10", "dst port 443"],
             tf=["-s", "srcip/bytes", "-n", "10", "dst", "port", "443"], stat="byt",
             tfcol="bytes",
             sql="SELECT src, sum(bytes) b FROM oneway WHERE dport = 443 GROUP BY src "
                 "ORDER BY b DESC LIMIT 10"),
        dict(name="-s dstport/packets -n 10 src net 10.0.0.0/8 --raw",
             nf=["-s", "dstport/packets", "-n", "10", "src net 10.0.0.0/8"],
             tf=["-s", "dstport/packets", "-n", "10", "--raw", "src", "net", "10.0.0.0/8"],
             stat="pkt", tfcol="packets",
             sql="SELECT dport, sum(packets) p FROM oneway WHERE src BETWEEN "
                 "from_hex('00000000000000000000ffff0a000000') AND "
                 "from_hex('00000000000000000000ffff0affffff') GROUP BY dport ORDER BY p DESC LIMIT 10"),
        dict(name="-A srcip,dstport -O bytes (top 10)",
             nf=["-A", "srcip,dstport", "-O", "bytes", "-n", "10"],
             tf=["-a", "srcip,dstport", "-O", "bytes", "-n", "10"], stat="byt", tfcol="bytes",
             sql="SELECT src, dport, sum(bytes) b FROM oneway GROUP BY src, dport "
                 "ORDER BY b DESC LIMIT 10"),
        dict(name="-I", nf=["-I"], tf=["-I", "--raw"], stat="summary",
             sql="SELECT count(*), sum(packets), sum(bytes) FROM oneway"),
        dict(name=f"flows of host {host}", nf=[f"host {host}"], tf=["-c", "10000000", "host", host],
             stat="list",
             sql=f"SELECT * FROM oneway WHERE src = {blob} OR dst = {blob} ORDER BY time_start"),
    ]


def nf_answer(q: dict, text: str) -> list:
    if q["stat"] == "summary":
        d = dict(line.split(":", 1) for line in text.splitlines() if ":" in line)
        return [int(d["Flows"]), int(d["Packets"]), int(d["Bytes"])]
    if q["stat"] == "list" or q["nf"][0] == "-A":
        # Flow records (-q: no header): the bytes are the 13th column.
        r = [x for x in csv.reader(io.StringIO(text)) if len(x) > 12]
        b = sorted((int(x[12]) for x in r), reverse=True)
        return [len(r), sum(b)] if q["stat"] == "list" else b[:10]
    return sorted((int(x[q["stat"]]) for x in rows(text)), reverse=True)[:10]


def tf_answer(q: dict, text: str) -> list:
    if q["stat"] == "summary":
        d = dict(line.split(":", 1) for line in text.splitlines() if ":" in line)
        return [int(d["Flows"].split()[0]), int(d["Packets"].split()[0]),
                int(d["Bytes"].split()[0])]
    r = rows(text)
    if q["stat"] == "list":
        return [len(r), sum(int(x["bytes"]) for x in r)]
    return sorted((int(x[q["tfcol"]]) for x in r), reverse=True)[:10]


def db_answer(q: dict, res: list) -> list:
    if q["stat"] == "summary":
        return [int(v) for v in res[0]]
    if q["stat"] == "list":
        return [len(res), sum(int(r[8]) for r in res)]
    return sorted((int(r[-1]) for r in res), reverse=True)


def nf_cmd(q: dict, work: Path) -> list[str]:
    out = [] if q["stat"] == "summary" else ["-o", "csv"]
    if q["nf"][0] == "-A":
        # nfdump's aggregated output is every group, ordered: the first ten are the answer.
        return ["nfdump", "-R", str(work / "nf"), "-q", "-A", "srcip,dstport", "-O", "bytes",
                "-o", "csv"]
    return ["nfdump", "-R", str(work / "nf"), "-q", *q["nf"], *out]


def tf_cmd(q: dict, work: Path, tf: Path) -> list[str]:
    out = [] if q["stat"] == "summary" else ["--csv"]
    return [str(tf), "query", "-R", str(work / "store"), *out, *q["tf"]]


def wall(f) -> tuple[float, object]:
    t0 = time.perf_counter()
    r = f()
    return (time.perf_counter() - t0) * 1000, r


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--pcap", default=str(REPO / "target" / "bench-data" / "big.pcap"))
    ap.add_argument("--work", default="/var/tmp/tapflow-bench-query")
    ap.add_argument("--flows", type=int, default=16_000_000)
    ap.add_argument("--delay", type=int, default=20, help="nfreplay's µs between datagrams")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--tapflow")
    ap.add_argument("--build-only", action="store_true")
    args = ap.parse_args()
    need("nfdump", "nfcapd", "nfpcapd", "nfreplay")
    os.environ["TZ"] = "UTC"
    tf = tapflow_path(args.tapflow)
    if not tf.exists():
        die(f"no {tf}: cargo build --release -p tapflow")
    work = Path(args.work)
    build(args, work, tf)
    if args.build_only:
        return
    import duckdb  # the Python package from PyPI (scripts/install-deps.sh)

    db = duckdb.connect()
    db.execute("SET threads = 2")
    db.execute("SET enable_progress_bar = false")
    files = str(work / "store" / "flows" / "*" / "*" / "*.parquet")
    db.execute(f"""CREATE VIEW oneway AS
        SELECT time_start, time_end, src_addr src, dst_addr dst, src_port sport,
               dst_port dport, protocol, packets, bytes
          FROM read_parquet('{files}') WHERE packets > 0
        UNION ALL
        SELECT time_start, time_end, dst_addr, src_addr, dst_port, src_port, protocol,
               rev_packets, rev_bytes
          FROM read_parquet('{files}') WHERE rev_packets > 0""")
    # The host: the 50th busiest source, a host with a page or so of flows.
    host_row = db.execute("SELECT src, count(*) c FROM oneway WHERE src BETWEEN "
                          "from_hex('00000000000000000000ffff00000000') AND "
                          "from_hex('00000000000000000000ffffffffffff') GROUP BY src "
                          "ORDER BY c DESC LIMIT 1 OFFSET 200").fetchone()
    host = ".".join(str(b) for b in host_row[0][12:])
    size = sum(p.stat().st_size for p in (work / "store" / "flows").rglob("*.parquet"))
    flows = json.loads((work / "built.json").read_text())["flows"]
    print(f"{flows} flows; tapflow's flow files {size / flows:.2f} B per flow; host {host}")
    table = []
    for q in questions(host):
        nft, tft, dbt = [], [], []
        for _ in range(args.runs):
            t, nf_out = wall(lambda: run(nf_cmd(q, work)))
            nft.append(t)
            t, tf_out = wall(lambda: run(tf_cmd(q, work, tf)))
            tft.append(t)
            t, db_out = wall(lambda: db.execute(q["sql"]).fetchall())
            dbt.append(t)
        a, b, c = nf_answer(q, nf_out), tf_answer(q, tf_out), db_answer(q, db_out)
        agree = "yes" if a == b == c else "NO"
        if agree == "NO":
            print(f"{q['name']}: answers differ: nfdump {a}, tapflow {b}, duckdb {c}",
                  file=sys.stderr)
        m = [statistics.median(x) for x in (nft, tft, dbt)]
        table.append((q["name"], *m, agree))
        print(f"{q['name']}: nfdump {m[0]:.0f} ms, tapflow {m[1]:.0f} ms, DuckDB {m[2]:.0f} ms,"
              f" agree {agree}", flush=True)
    print()
    print("| question | nfdump | tapflow | DuckDB | nfdump/tapflow | tapflow/DuckDB | agree |")
    print("|---|---:|---:|---:|---:|---:|---|")
    for name, n, t, d, ok in table:
        print(f"| `{name}` | {n:.0f} ms | {t:.0f} ms | {d:.0f} ms | {n / t:.1f}× | {t / d:.2f}× "
              f"| {ok} |")
    if any(r[-1] != "yes" for r in table):
        sys.exit(1)


if __name__ == "__main__":
    main()
