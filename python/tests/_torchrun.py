"""Runs a script under ``torchrun`` (``python -m torch.distributed.run``) on 127.0.0.1,
bounded in time: the whole process group is killed when it overruns."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from typing import List, Optional

from _dist import free_port

EXAMPLES = os.path.join(os.path.dirname(__file__), "..", "examples")


def start(script: str, nproc: int, args: List[str], launcher: str = "torch.distributed.run",
          env: Optional[dict] = None) -> subprocess.Popen:
    """The launcher (``python -m LAUNCHER``) running ``script``, in its own session."""
    cmd = [
        sys.executable, "-m", launcher, "--nnodes=1",
        f"--nproc_per_node={nproc}", "--master_addr=127.0.0.1",
        f"--master_port={free_port()}", script, *args,
    ]
    full_env = dict(os.environ, OMP_NUM_THREADS="1", **(env or {}))
    return subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=full_env, start_new_session=True)


def torchrun(script: str, nproc: int, args: List[str], timeout_s: float,
             env: Optional[dict] = None,
             launcher: str = "torch.distributed.run") -> subprocess.CompletedProcess:
    p = start(script, nproc, args, launcher, env)
    return finish(p, timeout_s)


def finish(p: subprocess.Popen, timeout_s: float) -> subprocess.CompletedProcess:
    """Waits for ``p`` at most ``timeout_s`` (then kills its whole session and fails)."""
    try:
        out, err = p.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        os.killpg(p.pid, signal.SIGKILL)
        out, err = p.communicate()
        raise AssertionError(f"torchrun overran {timeout_s} s\nstdout:\n{out}\nstderr:\n{err}")
    return subprocess.CompletedProcess(p.args, p.returncode, out, err)
