#!/usr/bin/env python3
"""Flow decoding speed: tapflow's decoders against nfcapd, CPU per million records, same run.

  python3 bench/flowdecode.py [--records 1000000] [--protocols ipfix,nfv9,nfv5] [--repeat 3]

For each protocol, crates/wire/examples/flowdecode_bench.rs encodes N synthetic biflows with
tapflow's own exporter (IPFIX: 20 fields, RFC 5103 reverse elements; v9: 15 fields; v5: one
record per direction), writes the messages to a file and decodes them with one Decoder on one
thread (best of 5 passes, the thread's CPU time). The same messages then go over loopback UDP to
nfcapd 1.7.1 (`nfcapd -w DIR -p PORT -B 67108864`, no compression), paced so the socket never
overflows; nfcapd's CPU time (utime + stime from /proc) over the whole stream, divided by the
records `nfdump -R DIR -I` says it stored, is its CPU per million records. nfcapd's figure
includes receiving the datagrams and writing its file; tapflow's is the decoding alone (what a
collector worker adds per record on top of the receive). Prints one line per run and the
ratio of the medians.
"""
import argparse
import os
import re
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
HZ = os.sysconf("SC_CLK_TCK")


def cpu_secs(pid):
    with open(f"/proc/{pid}/stat") as f:
        rest = f.read().rsplit(")", 1)[1].split()
    return (int(rest[11]) + int(rest[12])) / HZ


def build():
    subprocess.run(["cargo", "build", "--release", "-q", "-p", "tapflow-wire",
                    "--example", "flowdecode_bench"], cwd=ROOT, check=True)
    target = os.environ.get("CARGO_TARGET_DIR", os.path.join(ROOT, "target"))
    return os.path.join(target, "release", "examples", "flowdecode_bench")


def tapflow(binary, proto, n, path):
    out = subprocess.run([binary, proto, str(n), "--write", path], check=True,
                         capture_output=True, text=True).stdout
    m = re.search(r"-> (\d+) records.*?([0-9.]+) CPU s per million", out)
    return int(m.group(1)), float(m.group(2)), out.strip()


def messages(path):
    data = open(path, "rb").read()
    i = 0
    while i < len(data):
        n = int.from_bytes(data[i:i + 2], "big")
        yield data[i + 2:i + 2 + n]
        i += 2 + n


def nfcapd(path, port):
    d = tempfile.mkdtemp(prefix="flowdecode-nfcapd-")
    p = subprocess.Popen(["nfcapd", "-w", d, "-p", str(port), "-b", "127.0.0.1", "-B", "67108864"],
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        time.sleep(1.0)
        c0 = cpu_secs(p.pid)
        s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        for i, m in enumerate(messages(path)):
            s.sendto(m, ("127.0.0.1", port))
            if i % 32 == 31:
                time.sleep(0.001)
        # Wait until nfcapd has taken everything: its CPU time stops growing.
        last = -1.0
        while True:
            time.sleep(1.0)
            c = cpu_secs(p.pid)
            if c == last:
                break
            last = c
        cpu = c - c0
    finally:
        p.send_signal(signal.SIGTERM)
        p.wait()
    out = subprocess.run(["nfdump", "-R", d, "-I"], capture_output=True, text=True).stdout
    shutil.rmtree(d)
    flows = int(re.search(r"^Flows: (\d+)", out, re.M).group(1))
    return flows, cpu


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--records", type=int, default=1_000_000)
    ap.add_argument("--protocols", default="ipfix,nfv9,nfv5")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--port", type=int, default=39590)
    a = ap.parse_args()
    binary = build()
    print(f"# {a.records} biflows per run, {a.repeat} runs; CPU s per million records stored")
    for proto in a.protocols.split(","):
        ours, theirs = [], []
        for r in range(a.repeat):
            with tempfile.NamedTemporaryFile(prefix="flowdecode-") as f:
                records, t_cpu, line = tapflow(binary, proto, a.records, f.name)
                flows, n_cpu = nfcapd(f.name, a.port + r)
            lost = records - flows
            ours.append(t_cpu)
            theirs.append(n_cpu / flows * 1e6)
            print(f"{proto} run {r + 1}: tapflow decode {t_cpu:.3f}; nfcapd {theirs[-1]:.3f} "
                  f"({flows} of {records} records stored{', ' + str(lost) + ' LOST' if lost else ''})")
            print(f"  {line}")
        t, n = statistics.median(ours), statistics.median(theirs)
        print(f"{proto}: median tapflow {t:.3f}, nfcapd {n:.3f} CPU s per million records: "
              f"nfcapd / tapflow = {n / t:.1f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
