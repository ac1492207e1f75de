#!/usr/bin/env python3
"""Resident memory of a `pacer controller` facing N connections that announce the
largest frame (256 MiB) before any Hello and stall, while two real workers train
(issue 19; the regression test is tests/pre_hello_memory.rs).

    scripts/pre_hello_rss.py PACER_BINARY N [--cap-gb G] [--len BYTES]

`--len` announces another length (default 256 MiB; 4096 is the largest frame a build with
the pre-Hello limit accepts, so those connections stay pending until the Hello timeout).

The controller runs under an address-space cap (`prlimit --as`, default 4 GB) so an
old build cannot eat the machine: past the cap its allocation fails and it dies,
which the script reports. Loopback only; every wait is bounded.
"""
import os
import socket
import struct
import subprocess
import sys
import time


def rss_mb(pid):
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) / 1024.0
    except OSError:
        return None
    return None


def main():
    if len(sys.argv) < 3:
        sys.exit(__doc__)
    binary, n = sys.argv[1], int(sys.argv[2])
    cap_gb = 4
    if "--cap-gb" in sys.argv:
        cap_gb = int(sys.argv[sys.argv.index("--cap-gb") + 1])
    length = 256 << 20
    if "--len" in sys.argv:
        length = int(sys.argv[sys.argv.index("--len") + 1])
    ctl = subprocess.Popen(
        ["prlimit", f"--as={cap_gb << 30}", binary, "controller", "--listen", "127.0.0.1:0",
         "--dataset", "tiny", "--min-workers", "2", "--max-iterations", "300",
         "--no-progress", "--join-timeout-s", "60"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    # prlimit execs the controller: same pid.
    line = ctl.stderr.readline()
    port = int(line.split("listening on ")[1].split(",")[0].rsplit(":", 1)[1])
    time.sleep(0.2)
    start = rss_mb(ctl.pid)
    conns = []
    for _ in range(n):
        s = socket.create_connection(("127.0.0.1", port), timeout=5)
        try:
            s.sendall(struct.pack("<I", length) + b"\x01" + b"\0" * 1024)
        except OSError:
            pass
        conns.append(s)
    peak, t0 = start or 0.0, time.time()
    while time.time() - t0 < 2.0:
        r = rss_mb(ctl.pid)
        if r is None:
            break
        peak = max(peak, r)
        time.sleep(0.02)
    after_attack = rss_mb(ctl.pid)
    workers = [subprocess.Popen([binary, "worker", "--connect", f"127.0.0.1:{port}",
                                 "--name", f"w{i}"],
                                stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
               for i in range(2)]
    t0 = time.time()
    while ctl.poll() is None and time.time() - t0 < 120:
        r = rss_mb(ctl.pid)
        if r is not None:
            peak = max(peak, r)
        time.sleep(0.02)
    if ctl.poll() is None:
        ctl.kill()
    out, err = ctl.communicate(timeout=30)
    for w in workers:
        try:
            w.wait(timeout=10)
        except subprocess.TimeoutExpired:
            w.kill()
    for s in conns:
        s.close()
    trained = [l for l in out.splitlines() if l.startswith("final accuracy")]
    print(f"{binary}: {n} connections announcing {length} bytes before Hello, cap {cap_gb} GB")
    print(f"  controller RSS: {start:.1f} MB before, {after_attack or 0:.1f} MB 2 s after "
          f"the connections, peak {peak:.1f} MB")
    print(f"  controller exit {ctl.returncode}; "
          f"{trained[0] if trained else 'no report: ' + err.strip().splitlines()[-1][:200] if err.strip() else 'no report'}")


if __name__ == "__main__":
    main()
