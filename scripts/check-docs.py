#!/usr/bin/env python3
"""Runs every shell example of README.md and docs/*.md as written, from the repository's root.

A fenced block whose info string is `sh` is run as one bash script (`set -e -o pipefail`), with
`target/release` first on PATH (so `pacer` is the freshly built binary, as after the README's
`cargo install` line), in its own process group, under a time limit; whatever it left running
(`pacer serve … &`) is killed when it ends. A block that cannot run here says why in its info
string, e.g. ```` ```sh not-run: needs root and Slurm (CI runs it as scripts/slurm-e2e.sh) ````;
a block that needs data outside the repository names the variable that points to it,
```` ```sh needs: SIA ````, and runs when it is set (`SIA` defaults to `../shared/data/sia`
when that folder exists). The check lists what it did not run, so nothing is skipped silently.

    scripts/check-docs.py [--only FILE] [--timeout S] [--list]

Exit status: 0 when every runnable block exited 0, 1 otherwise (each failure prints the
block's place, its last output lines and its exit status).
"""
import argparse
import glob
import os
import re
import signal
import subprocess
import sys
import tempfile
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FENCE = re.compile(r"^(\s*)```(.*)$")


def blocks(path):
    """(line, info, text) for every fenced block of `path`."""
    out = []
    with open(path, encoding="utf-8") as f:
        lines = f.read().split("\n")
    i = 0
    while i < len(lines):
        m = FENCE.match(lines[i])
        if not m:
            i += 1
            continue
        indent, info = m.group(1), m.group(2).strip()
        start = i + 1
        body = []
        i += 1
        while i < len(lines) and not re.match(r"^\s*```\s*$", lines[i]):
            body.append(lines[i][len(indent):] if lines[i].startswith(indent) else lines[i])
            i += 1
        out.append((start, info, "\n".join(body)))
        i += 1
    return out


def run_block(path, line, text, timeout, env):
    script = "set -e -o pipefail\n" + text + "\n"
    with tempfile.TemporaryFile() as log:
        t0 = time.monotonic()
        p = subprocess.Popen(
            ["bash", "-c", script],
            cwd=REPO,
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )
        try:
            rc = p.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            rc = "timeout"
        # Whatever the block started in the background goes with it.
        for sig in (signal.SIGTERM, signal.SIGKILL):
            try:
                os.killpg(p.pid, sig)
            except ProcessLookupError:
                break
            time.sleep(0.5)
        if rc == "timeout":
            p.wait()
        secs = time.monotonic() - t0
        log.seek(0)
        tail = log.read().decode("utf-8", "replace").splitlines()[-15:]
    return rc, secs, tail


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--only", action="append", help="check only this file (repeatable)")
    ap.add_argument("--timeout", type=float, default=300, help="seconds per block (300)")
    ap.add_argument("--list", action="store_true", help="list the blocks, run nothing")
    a = ap.parse_args()
    files = a.only or (["README.md"] + sorted(glob.glob("docs/*.md", root_dir=REPO)))
    pacer = os.path.join(REPO, "target", "release", "pacer")
    if not a.list and not os.access(pacer, os.X_OK):
        print("check-docs: building target/release/pacer first", flush=True)
        subprocess.run(["cargo", "build", "--release", "-p", "pacer-cli"], cwd=REPO, check=True)
    env = dict(os.environ)
    env["PATH"] = os.path.join(REPO, "target", "release") + os.pathsep + env.get("PATH", "")
    shared_sia = os.path.join(os.path.dirname(REPO), "shared", "data", "sia")
    if "SIA" not in env and os.path.isdir(shared_sia):
        env["SIA"] = shared_sia
    env.pop("PACER_SERVER", None)
    env.pop("PACER_TOKEN", None)
    ran, failed, not_run = 0, [], []
    for f in files:
        for line, info, text in blocks(os.path.join(REPO, f)):
            word = info.split()[0] if info else ""
            if word != "sh":
                continue
            where = f"{f}:{line}"
            rest = info[len("sh"):].strip()
            if rest.startswith("not-run:"):
                not_run.append((where, rest[len("not-run:"):].strip()))
                continue
            if rest.startswith("needs:"):
                var = rest[len("needs:"):].strip()
                if not env.get(var):
                    not_run.append((where, f"${var} is not set"))
                    continue
            elif rest:
                print(f"check-docs: {where}: unknown info string `{info}` (expected `sh` or "
                      "`sh not-run: REASON`)")
                failed.append(where)
                continue
            if a.list:
                print(f"{where}: run ({len(text.splitlines())} lines)")
                continue
            rc, secs, tail = run_block(f, line, text, a.timeout, env)
            ran += 1
            if rc == 0:
                print(f"check-docs: {where}: ok ({secs:.1f} s)", flush=True)
            else:
                failed.append(where)
                print(f"check-docs: {where}: FAILED ({'timed out' if rc == 'timeout' else 'exit ' + str(rc)}, "
                      f"{secs:.1f} s); last lines:", flush=True)
                for t in tail:
                    print(f"    {t}")
    for where, why in not_run:
        print(f"check-docs: {where}: not run: {why}")
    if a.list:
        return 0
    print(f"check-docs: {ran} blocks run, {len(failed)} failed, {len(not_run)} marked not-run")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
