"""Runs a test body in N real processes with a gloo process group (torchrun's env)."""

from __future__ import annotations

import os
import socket

import torch.multiprocessing as mp


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _entry(rank, fn, world, port, args, timeout_s, backend="gloo"):
    os.environ.update(
        {
            "RANK": str(rank),
            "WORLD_SIZE": str(world),
            "LOCAL_RANK": str(rank),
            "MASTER_ADDR": "127.0.0.1",
            "MASTER_PORT": str(port),
            "OMP_NUM_THREADS": "1",
        }
    )
    import torch

    torch.set_num_threads(1)
    import torch.distributed as dist

    import pacer_torch as pacer

    pacer.init_process_group(backend=backend, timeout_s=timeout_s)
    fn(rank, world, *args)
    # Not in a `finally`: after a failure the peers never reach this barrier. The check
    # that the group is gone is the fix of the gloo abort at exit (python/README.md,
    # Troubleshooting): a group still alive here lets gloo abort the interpreter's exit.
    if dist.is_initialized() and not pacer.destroy_process_group():
        raise RuntimeError(f"rank {rank}: the process group outlived destroy_process_group")


def run(fn, world: int, *args, timeout_s: float = 120, backend="gloo") -> None:
    """``fn(rank, world, *args)`` in ``world`` spawned processes; raises if any fails.
    A collective that waits longer than ``timeout_s`` fails its rank (gloo's timeout).
    ``backend``: gloo (the CPU), unless given ('nccl', or None: pacer's choice)."""
    mp.start_processes(_entry, args=(fn, world, free_port(), args, timeout_s, backend),
                       nprocs=world, start_method="spawn")
