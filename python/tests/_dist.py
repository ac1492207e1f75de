"""Runs a test body in N real processes with a gloo process group (torchrun's env)."""

from __future__ import annotations

import os
import socket
import sys

import torch.multiprocessing as mp


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _entry(rank, fn, world, port, args):
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

    pacer.init_process_group(timeout_s=120)
    try:
        fn(rank, world, *args)
    finally:
        if dist.is_initialized():
            # All ranks reach teardown before any closes its gloo pairs: a rank that
            # destroyed the group while a peer was still inside the last collective
            # made that peer abort in gloo ("terminate called without an active
            # exception", about 1 run in 6 here).
            dist.barrier()
            dist.destroy_process_group()


def run(fn, world: int, *args) -> None:
    """``fn(rank, world, *args)`` in ``world`` spawned processes; raises if any fails.

    A rank killed by SIGABRT inside gloo ("terminate called without an active exception",
    C++, no Python error) is retried once, loudly: about 1 run in 6 of the 4-rank
    checkpoint test does that on this 2-core machine, cause not yet found (open). A
    Python error or a second abort fails the test."""
    try:
        mp.start_processes(_entry, args=(fn, world, free_port(), args), nprocs=world,
                           start_method="spawn")
    except mp.ProcessExitedException as e:
        if getattr(e, "signal_name", None) != "SIGABRT":
            raise
        sys.stderr.write(f"_dist.run: {e}; retrying once (known gloo abort, open)\n")
        mp.start_processes(_entry, args=(fn, world, free_port(), args), nprocs=world,
                           start_method="spawn")
