"""The shipped torchrun job spec (examples/jobs/torchrun.toml) submitted to a real
`pacer serve` runs as written: the service starts torchrun with the allocation's process
count and rendezvous, python/examples/train_ddp.py trains under pacer_torch, and the job
succeeds. Needs the `pacer` binary: $PACER_BIN, else the workspace's target/release/pacer
or target/debug/pacer (./test.sh builds the latter before the Python tests)."""

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time

import pytest

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))


def _pacer_bin():
    cands = [os.environ.get("PACER_BIN", "")] + [
        os.path.join(REPO, "target", p, "pacer") for p in ("release", "debug")
    ]
    for c in cands:
        if c and os.access(c, os.X_OK):
            return c
    return None


def test_the_torchrun_example_job_runs_under_pacer_serve():
    pacer = _pacer_bin()
    if pacer is None:
        pytest.skip("no pacer binary (set PACER_BIN or build the workspace: ./test.sh does)")
    state = tempfile.mkdtemp(prefix="pacer-serve-torchrun-")
    # The job's torchrun is the one on the service's PATH: this venv's.
    env = dict(os.environ, OMP_NUM_THREADS="1",
               PATH=os.path.dirname(sys.executable) + os.pathsep + os.environ.get("PATH", ""))
    env.pop("PACER_SERVER", None)
    env.pop("PACER_TOKEN", None)
    job, rec, cli = None, {}, env
    svc = subprocess.Popen(
        [pacer, "serve", "--listen", "127.0.0.1:0", "--state", state, "--cluster", "1x2:cpu",
         "--policy", "fifo", "--round-s", "0.5", "--grace-s", "5"],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env,
        start_new_session=True)
    try:
        line = svc.stdout.readline()
        m = re.search(r"listening on (http://\S+)", line)
        assert m, f"pacer serve did not start: {line!r}"
        with open(os.path.join(state, "token")) as f:
            token = f.read().strip()
        cli = dict(env, PACER_SERVER=m.group(1), PACER_TOKEN=token)
        sub = subprocess.run([pacer, "submit", "examples/jobs/torchrun.toml"], cwd=REPO,
                             env=cli, capture_output=True, text=True, timeout=30)
        assert sub.returncode == 0, sub.stdout + sub.stderr
        job = sub.stdout.strip()
        deadline = time.monotonic() + 420
        while time.monotonic() < deadline:
            q = subprocess.run([pacer, "job", job, "--json"], env=cli, capture_output=True,
                               text=True, timeout=30)
            assert q.returncode == 0, q.stdout + q.stderr
            rec = json.loads(q.stdout)
            if rec["state"] in ("succeeded", "failed", "cancelled"):
                break
            time.sleep(1)
        log = subprocess.run([pacer, "logs", job], env=cli, capture_output=True, text=True,
                             timeout=30).stdout
        assert rec.get("state") == "succeeded", f"{rec.get('state')}: {rec.get('reason')}\n{log[-3000:]}"
        # torchrun ran with the allocation's two processes, and the script trained.
        assert re.search(r"^final accuracy ([0-9.]+)$", log, re.M), log[-3000:]
        acc = float(re.search(r"^final accuracy ([0-9.]+)$", log, re.M).group(1))
        assert acc >= 0.85, log[-3000:]
    finally:
        # A job still running (a failed check) is cancelled first: stopping the service
        # leaves its jobs running by design.
        if job and rec.get("state") not in ("succeeded", "failed", "cancelled"):
            subprocess.run([pacer, "cancel", job], env=cli, capture_output=True, timeout=30)
            time.sleep(6)
        try:
            os.killpg(svc.pid, signal.SIGTERM)
        except ProcessLookupError:
            pass
        try:
            svc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            os.killpg(svc.pid, signal.SIGKILL)
            svc.wait()
        shutil.rmtree(state, ignore_errors=True)
