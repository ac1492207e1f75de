"""Where ``engine="ddp"``'s per-step CPU time goes (issue 24; python/README.md,
"Engines"). An experiment, not a test:

    OMP_NUM_THREADS=1 PYTHONPATH=python torchrun --nproc_per_node=2 \
        experiments/torch/ddp_cost.py --rounds 6 --steps 60 --cores-per-rank 1

``pacer_torch.overhead``'s CNN and data, every run at the equal split (``uniform``, so
every rank computes DDP's 128 samples): variants take turns in each round, and each
reports the median over ranks of the per-rank median CPU time (process time, all
threads) per step, as ``overhead.py`` does:

- ``ddp``: plain DDP (``overhead.run_ddp``);
- ``ddp-pyhook``: plain DDP with ``gradient_as_bucket_view`` and a Python comm hook
  that all-reduces the bucket and returns it through ``fut.then`` (the cost of a Python
  hook at all);
- ``flat``: pacer's default engine (``noise_scale="auto"``, the default: nothing here
  reads the noise scale, so its norms are not taken);
- ``flat-norms``: the same with ``noise_scale=True`` (``|g_i|^2`` and ``|g|^2`` every step);
- ``pacer-ddp``: pacer's ``engine="ddp"`` (``noise_scale="auto"``);
- ``pacer-ddp-norms``: the same with ``noise_scale=True``;
- ``pacer-ddp-timed``: ``pacer-ddp-norms``, more of its pieces wrapped with CPU clocks;
- ``pacer-ddp-norm64``: ``pacer-ddp-norms`` with the norms as one float64
  ``vector_norm`` (fewer operations);
- ``pacer-ddp-pg``: ``pacer-ddp`` with the hook's all-reduce through the process
  group's own method, without ``dist.all_reduce``'s Python wrapper;
- ``pacer-ddp-nomonitor``: ``pacer-ddp`` with the load signals not read
  (``LoadMonitor.sample``).

(Before ``noise_scale=`` existed every pacer run took the norms: ``flat`` and
``pacer-ddp`` measured what ``flat-norms`` and ``pacer-ddp-norms`` measure now, and a
``pacer-ddp-nonorm`` variant patched the norms to 0, which ``pacer-ddp`` now is.)

In every ``pacer-ddp*`` run the engine's own work after the backward pass's last
gradient is timed (``thread_time``, on the thread that runs it): the comm hook, the
callbacks it chains to the all-reduce's future (``Future.then``: run by gloo's thread)
and ``finish``: ``post_backward_ms`` per step, their sum. In the ``flat*`` runs it is
the engine's whole work after the backward pass (``DataParallel._sync``, the calling
thread; the all-reduce's summing runs on gloo's thread, as in the ddp engine).
``pacer-ddp-timed`` also times ``job.*``, the norms, ``torch.cat`` and ``torch.tensor``
(nested in those). Sums over the steps after the warm-up, divided by their number;
median over ranks.

Variants other than ``ddp``/``flat``/``flat-norms``/``pacer-ddp``/``pacer-ddp-norms``/
``pacer-ddp-timed`` change what is computed: they are measurements only.
"""

from __future__ import annotations

import argparse
import functools
import gc
import json
import os
import statistics
import time
from collections import defaultdict
from typing import Callable, Dict, List

import torch
import torch.distributed as dist
import torch.nn.functional as F

import pacer_torch as pacer
from pacer_torch import ddp_engine, job as job_mod, overhead, parallel

#: CPU seconds per variant and piece, and whether the clocks count now.
PIECES: Dict[str, Dict[str, float]] = defaultdict(lambda: defaultdict(float))
VARIANT = [""]
COUNTING = [False]


def timed(name: str, fn: Callable) -> Callable:
    @functools.wraps(fn)  # (DDP reads a comm hook's signature)
    def wrapper(*a, **k):
        t0 = time.thread_time()
        try:
            return fn(*a, **k)
        finally:
            if COUNTING[0]:
                PIECES[VARIANT[0]][name] += time.thread_time() - t0

    return wrapper


def run_pyhook(ds, global_batch: int, steps: int, warmup: int):
    """Plain DDP through a Python comm hook that sums (as pacer's weights do)."""
    rank, world = dist.get_rank(), dist.get_world_size()
    model = overhead.make_model()
    net = torch.nn.parallel.DistributedDataParallel(
        model, broadcast_buffers=False, gradient_as_bucket_view=True
    )

    def hook(_state, bucket):
        buf = bucket.buffer()
        buf.mul_(1.0 / world)
        return dist.all_reduce(buf, async_op=True).get_future().then(lambda f: f.value()[0])

    net.register_comm_hook(None, hook)
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    x_all, y_all = ds.tensors
    b = global_batch // world
    perm = torch.randperm(len(x_all), generator=torch.Generator().manual_seed(2))
    # Gathered step by step, as overhead.run_ddp and pacer's DataLoader do.
    idxs = (perm[(s * global_batch + rank * b) % len(perm):][:b] for s in range(steps))
    batches = ((x_all.index_select(0, i), y_all.index_select(0, i)) for i in idxs)
    times = _cpu_per_step(batches, net, opt, steps, warmup)
    del net
    return times


def _cpu_per_step(batches, net, opt, steps: int, warmup: int) -> List[float]:
    """Trains on ``batches`` for ``steps`` steps: the process's CPU time between two
    ends of ``opt.step()``, after ``warmup`` steps (the pieces' clocks count from the
    step after the warm-up on)."""
    times, last = [], None
    for s, (x, y) in enumerate(batches):
        COUNTING[0] = s > warmup
        loss = F.cross_entropy(net(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        now = time.process_time()
        if last is not None:
            times.append(now - last)
        last = now
        if s + 1 >= steps:
            break
    COUNTING[0] = False
    return times[warmup:]


def run_pacer(ds, global_batch: int, steps: int, warmup: int, engine: str, noise_scale):
    model = overhead.make_model()
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    net = pacer.DataParallel(model, opt, engine=engine)
    loader = pacer.DataLoader(ds, global_batch=global_batch, controller="uniform", seed=3,
                              noise_scale=noise_scale)
    times = _cpu_per_step(loader, net, opt, steps, warmup)
    del net, loader
    pacer.job.set_current(None)
    return times


def patched(variant: str) -> List[Callable[[], None]]:
    """Patches for ``variant``; returns their undo functions."""
    undo: List[Callable[[], None]] = []

    def put(obj, name, value):
        old = getattr(obj, name)
        setattr(obj, name, value)
        undo.append(lambda: setattr(obj, name, old))

    if variant == "pacer-ddp-norm64":
        put(ddp_engine, "grad_norm_sqr_t",
            lambda g, *a: torch.linalg.vector_norm(g, dtype=torch.float64) ** 2)
    if variant == "pacer-ddp-pg":
        opts, plain = dist.AllreduceOptions(), dist.all_reduce
        put(ddp_engine.dist, "all_reduce",
            lambda t, async_op=False, **k: dist.group.WORLD.allreduce([t], opts)
            if async_op and not k else plain(t, async_op=async_op, **k))
    if variant == "pacer-ddp-nomonitor":
        put(job_mod.LoadMonitor, "sample", lambda self: (0.0, 0.0))
    if variant.startswith("flat"):
        put(parallel.DataParallel, "_sync", timed("sync", parallel.DataParallel._sync))
    if variant.startswith("pacer-ddp"):
        put(ddp_engine.DdpEngine, "_hook", timed("hook", ddp_engine.DdpEngine._hook))
        put(ddp_engine.DdpEngine, "finish", timed("finish", ddp_engine.DdpEngine.finish))
        # (A process group's future is torch._C.Future, the base of torch.futures'.)
        then = torch._C.Future.then
        put(torch._C.Future, "then",
            lambda self, cb: then(self, timed("callbacks", cb)))
    if variant == "pacer-ddp-timed":
        put(ddp_engine, "grad_norm_sqr_t", timed("norms", ddp_engine.grad_norm_sqr_t))
        for name in ("end_compute", "local_row", "decision_slot", "gathered", "begin_step",
                     "end_step"):
            put(job_mod.Job, name, timed(f"job.{name}", getattr(job_mod.Job, name)))
        put(torch, "cat", timed("torch.cat", torch.cat))
        put(torch, "tensor", timed("torch.tensor", torch.tensor))
    return undo


VARIANTS = ("ddp", "ddp-pyhook", "flat", "flat-norms", "pacer-ddp", "pacer-ddp-norms",
            "pacer-ddp-timed", "pacer-ddp-norm64", "pacer-ddp-pg", "pacer-ddp-nomonitor")
#: The variants that take the noise scale's norms every step (``noise_scale=True``).
WITH_NORMS = ("flat-norms", "pacer-ddp-norms", "pacer-ddp-timed", "pacer-ddp-norm64")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rounds", type=int, default=6)
    ap.add_argument("--steps", type=int, default=60)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--global-batch", type=int, default=256)
    ap.add_argument("--cores-per-rank", type=int, default=0)
    args = ap.parse_args()
    torch.set_num_threads(1)
    if args.cores_per_rank:
        overhead.pin(int(os.environ["LOCAL_RANK"]), int(os.environ["LOCAL_WORLD_SIZE"]),
                     args.cores_per_rank)
    pacer.init_process_group(backend="gloo")
    ds = overhead.data(args.global_batch * (args.steps + 2))
    per: Dict[str, List[float]] = {v: [] for v in VARIANTS}
    # Steps whose pieces were timed, per variant (every timed variant runs as many).
    counted = 0
    for rnd in range(args.rounds):
        order = VARIANTS[rnd % len(VARIANTS):] + VARIANTS[: rnd % len(VARIANTS)]
        for v in order:
            dist.barrier()
            VARIANT[0] = v
            undo = patched(v)
            try:
                if v == "ddp":
                    t = [c for _, c in overhead.run_ddp(
                        ds, args.global_batch, args.steps, args.warmup)[0]][args.warmup:]
                elif v == "ddp-pyhook":
                    t = run_pyhook(ds, args.global_batch, args.steps, args.warmup)
                else:
                    engine = "flat" if v.startswith("flat") else "ddp"
                    ns = True if v in WITH_NORMS else "auto"
                    t = run_pacer(ds, args.global_batch, args.steps, args.warmup, engine, ns)
                    if v == "pacer-ddp-timed":
                        counted += args.steps - 1 - args.warmup
            finally:
                for u in reversed(undo):
                    u()
            per[v].extend(t)
            gc.collect()
    # Every rank reports every piece (rank 0 alone writes the decision slot).
    timed_runs = [v for v in VARIANTS if v.startswith(("pacer-ddp", "flat"))]
    names = sorted(set(PIECES["pacer-ddp-timed"]) | {"job.decision_slot"})
    mine = [1e3 * statistics.median(per[v]) for v in VARIANTS]
    mine += [1e3 * sum(PIECES[v][n] for n in ("hook", "callbacks", "finish", "sync")) / counted
             for v in timed_runs]
    mine += [1e3 * PIECES["pacer-ddp-timed"][n] / counted for n in names]
    world = dist.get_world_size()
    # Pieces: the same names on every rank (the same code ran), gathered by name order.
    t = torch.zeros(world, len(mine), dtype=torch.float64)
    t[dist.get_rank()] = torch.tensor(mine, dtype=torch.float64)
    dist.all_reduce(t)
    if dist.get_rank() == 0:
        med = [statistics.median(t[:, i].tolist()) for i in range(len(mine))]
        out = {"world": world, "cores_per_rank": args.cores_per_rank, "rounds": args.rounds,
               "steps": args.steps, "cpu_ms_per_step": dict(zip(VARIANTS, med)),
               "per_rank_cpu_ms": {v: t[:, i].tolist() for i, v in enumerate(VARIANTS)},
               "post_backward_ms": dict(zip(timed_runs, med[len(VARIANTS):])),
               "timed_pieces_ms_per_step":
                   dict(zip(names, med[len(VARIANTS) + len(timed_runs):]))}
        print(json.dumps(out, indent=1), flush=True)
    pacer.destroy_process_group()


if __name__ == "__main__":
    main()
