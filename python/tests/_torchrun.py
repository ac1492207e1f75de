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


def torchrun(script: str, nproc: int, args: List[str], timeout_s: float,
             env: Optional[dict] = None) -> subprocess.CompletedProcess:
    cmd = [
        sys.executable, "-m", "torch.distributed.run", "--nnodes=1",
        f"--nproc_per_node={nproc}", "--master_addr=127.0.0.1",
        f"--master_port={free_port()}", script, *args,
    ]
    full_env = dict(os.environ, OMP_NUM_THREADS="1", **(env or {}))
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                         env=full_env, start_new_session=True)
    try:
        out, err = p.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        os.killpg(p.pid, signal.SIGKILL)
        out, err = p.communicate()
        raise AssertionError(f"torchrun overran {timeout_s} s\nstdout:\n{out}\nstderr:\n{err}")
    return subprocess.CompletedProcess(cmd, p.returncode, out, err)
