"""Process-group initialisation from torchrun's or Slurm's environment, and its teardown.

Why ``init_process_group`` imports ``torch.distributed.nn.functional`` first and why
``destroy_process_group`` checks that the group object is gone: python/README.md,
"Troubleshooting" (a rank aborting at exit with "terminate called without an active
exception").
"""

from __future__ import annotations

import datetime
import gc
import importlib
import os
import warnings
import weakref
from typing import Dict, Optional

import torch
import torch.distributed as dist


def _int_env(env: Dict[str, str], name: str) -> Optional[int]:
    v = env.get(name)
    if v is None or v == "":
        return None
    try:
        return int(v)
    except ValueError:
        raise ValueError(f"environment variable {name}: {v!r} is not an integer") from None


def global_batch(default: int, env: Optional[Dict[str, str]] = None) -> int:
    """The global batch to train at: ``PACER_GLOBAL_BATCH`` when set (``pacer serve``
    sets it to the spec's ``global_batch``, or to the batch a deadline job's admission
    chose from its profile: docs/serve.md, "Deadlines from a profile"), else
    ``default``. A value that is not a positive integer is a ``ValueError`` naming the
    variable."""
    env = os.environ if env is None else env
    if isinstance(default, bool) or not isinstance(default, int) or default < 1:
        raise ValueError(f"global_batch: default {default!r} (expected an integer >= 1)")
    b = _int_env(env, "PACER_GLOBAL_BATCH")
    if b is None:
        return default
    if b < 1:
        raise ValueError(f"environment variable PACER_GLOBAL_BATCH: {b} (expected an integer >= 1)")
    return b


def rendezvous(env: Optional[Dict[str, str]] = None) -> Dict[str, object]:
    """Rank, world size, local rank and master address from the environment:
    torchrun's ``RANK``/``WORLD_SIZE``/``LOCAL_RANK``/``MASTER_ADDR``/``MASTER_PORT``,
    else Slurm's ``SLURM_PROCID``/``SLURM_NTASKS``/``SLURM_LOCALID`` (master: ``MASTER_ADDR``
    or the first host of ``SLURM_JOB_NODELIST`` when it is a plain name; port
    ``MASTER_PORT`` or 29500), else a single process."""
    env = dict(os.environ if env is None else env)
    rank = _int_env(env, "RANK")
    world = _int_env(env, "WORLD_SIZE")
    local = _int_env(env, "LOCAL_RANK")
    source = "torchrun"
    if rank is None or world is None:
        rank = _int_env(env, "SLURM_PROCID")
        world = _int_env(env, "SLURM_NTASKS")
        local = _int_env(env, "SLURM_LOCALID")
        source = "slurm"
    if rank is None or world is None:
        rank, world, local, source = 0, 1, 0, "single"
    if world < 1 or not (0 <= rank < world):
        raise ValueError(f"environment: rank {rank} of world size {world} ({source})")
    addr = env.get("MASTER_ADDR")
    if not addr and source == "slurm":
        nodes = env.get("SLURM_JOB_NODELIST", "")
        first = nodes.split(",")[0]
        addr = first if first and "[" not in first else None
        if addr is None:
            raise ValueError(
                "environment: MASTER_ADDR is not set and SLURM_JOB_NODELIST "
                f"({nodes!r}) is not a plain host name; set MASTER_ADDR"
            )
    port = _int_env(env, "MASTER_PORT") or 29500
    return {
        "rank": rank,
        "world_size": world,
        "local_rank": local if local is not None else 0,
        "master_addr": addr or "127.0.0.1",
        "master_port": port,
        "source": source,
    }


def init_process_group(backend: Optional[str] = None, timeout_s: float = 300.0) -> Dict[str, object]:
    """Joins the job's process group (``nccl`` on CUDA, else ``gloo``) from the
    environment (``rendezvous``); on CUDA selects device ``LOCAL_RANK``. Returns what
    ``rendezvous`` found, plus ``backend`` and ``device``."""
    info = rendezvous()
    cuda = torch.cuda.is_available()
    if backend is None:
        backend = "nccl" if cuda else "gloo"
    if backend not in ("gloo", "nccl"):
        raise ValueError(f"backend: {backend!r} (expected 'gloo' or 'nccl')")
    device = torch.device("cpu")
    if backend == "nccl":
        local, n = int(info["local_rank"]), torch.cuda.device_count()
        if local >= n:
            raise RuntimeError(
                f"pacer_torch.init_process_group: LOCAL_RANK {local} but this process "
                f"sees {n} CUDA device(s); nccl needs one device per rank (start at most "
                f"{n} processes per node, or pass backend='gloo')"
            )
        device = torch.device("cuda", local)
        torch.cuda.set_device(device)
    if not dist.is_initialized():
        # This module binds the world group as a default argument of its functions when
        # it is first imported; torch._dynamo imports it (the first torch.optim optimiser
        # does), and imported after the group exists it keeps the group alive past
        # destroy_process_group. Imported now, those defaults are None.
        importlib.import_module("torch.distributed.nn.functional")

        os.environ.setdefault("MASTER_ADDR", str(info["master_addr"]))
        os.environ.setdefault("MASTER_PORT", str(info["master_port"]))
        dist.init_process_group(
            backend,
            rank=int(info["rank"]),
            world_size=int(info["world_size"]),
            timeout=datetime.timedelta(seconds=timeout_s),
        )
    info["backend"] = backend
    info["device"] = device
    return info


#: The name torch gives the worker threads of a gloo process group (Linux).
GLOO_WORKER = "pt_gloo_runloop"


def _gloo_workers() -> Optional[int]:
    """How many gloo worker threads this process has (None where /proc cannot tell).
    torch names a worker when it first runs a collective; an unnamed one has no
    finished collective to free, so it cannot abort the exit."""
    try:
        tasks = os.listdir("/proc/self/task")
    except OSError:
        return None
    n = 0
    for t in tasks:
        try:
            with open(f"/proc/self/task/{t}/comm") as f:
                n += f.read().strip() == GLOO_WORKER
        except OSError:  # the thread ended meanwhile
            pass
    return n


def destroy_process_group() -> bool:
    """Leaves the job's process groups: a barrier (every rank is past its last
    collective), ``torch.distributed.destroy_process_group``, then checks that the group
    is really gone: its Python object freed and, on Linux, no gloo worker thread left.
    Freeing it joins those threads here; alive during interpreter shutdown, a worker that
    still frees a finished collective's tensors needs the GIL, is ended by the
    interpreter inside a C++ destructor and aborts the process ("terminate called
    without an active exception"; python/README.md, "Troubleshooting"). Returns whether
    the group is gone; if not, warns (``RuntimeWarning``) and returns False. Without a
    process group: does nothing, True."""
    if not (dist.is_available() and dist.is_initialized()):
        return True
    pg = dist.group.WORLD
    dist.barrier()
    from .ddp_engine import release_all

    release_all()  # DataParallel(engine="ddp")'s DDP wrappers hold the group
    alive = weakref.ref(pg)
    del pg
    dist.destroy_process_group()
    if alive() is not None or _gloo_workers():
        gc.collect()  # a reference cycle (a wrapped model, a hook) may hold it
    workers = _gloo_workers()
    if alive() is None and not workers:
        return True
    warnings.warn(
        "pacer_torch.destroy_process_group: the process group outlived "
        f"torch.distributed.destroy_process_group ({workers} gloo worker threads left; "
        "something still references it: a DistributedDataParallel model, a variable, or "
        "torch.distributed.nn.functional imported after the group was created); its "
        "worker threads may abort the process at exit (python/README.md, Troubleshooting)",
        RuntimeWarning,
        stacklevel=2,
    )
    return False
