"""Per-step overhead of pacer_torch against plain DDP, unstretched, at equal speeds.

    torchrun --nproc_per_node=4 -m pacer_torch.overhead [--rounds 5 --steps 40]

A small CNN (2 conv + 2 fc, 28x28 inputs, synthetic data), global batch 256 (64 per rank),
no emulation: three runs take turns in each round, so that a change of the machine's load
hits them alike — plain ``DistributedDataParallel`` (equal batches, the stock all-reduce),
pacer's default engine (one flat all-reduce after backward) and pacer's ``engine="ddp"``
(DDP's reducer with pacer's weighting hook). Every rank's step is the time between two
consecutive ends of ``optimizer.step()`` (after ``warmup`` steps); the report is rank 0's
median and mean per run over all rounds, and each pacer engine's overhead against DDP.
Prints one JSON object.
"""

from __future__ import annotations

import argparse
import gc
import json
import statistics
import time
from typing import Dict, List

import torch
import torch.distributed as dist
import torch.nn.functional as F

import pacer_torch as pacer


def make_cnn() -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Sequential(
        torch.nn.Conv2d(1, 16, 3), torch.nn.ReLU(), torch.nn.MaxPool2d(2),
        torch.nn.Conv2d(16, 32, 3), torch.nn.ReLU(), torch.nn.MaxPool2d(2),
        torch.nn.Flatten(), torch.nn.Linear(32 * 5 * 5, 128), torch.nn.ReLU(),
        torch.nn.Linear(128, 10),
    )


def data(n: int) -> torch.utils.data.TensorDataset:
    g = torch.Generator().manual_seed(1)
    return torch.utils.data.TensorDataset(
        torch.randn(n, 1, 28, 28, generator=g), torch.randint(0, 10, (n,), generator=g)
    )


def run_ddp(ds, global_batch: int, steps: int) -> List[float]:
    rank, world = dist.get_rank(), dist.get_world_size()
    model = make_cnn()
    net = torch.nn.parallel.DistributedDataParallel(model)  # the model has no buffers
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    x_all, y_all = ds.tensors
    b = global_batch // world
    g = torch.Generator().manual_seed(2)
    perm = torch.randperm(len(x_all), generator=g)
    times, last = [], None
    for s in range(steps):
        idx = perm[(s * global_batch + rank * b) % len(perm):][:b]
        x, y = x_all[idx], y_all[idx]
        loss = F.cross_entropy(net(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        now = time.perf_counter()
        if last is not None:
            times.append(now - last)
        last = now
    del net
    return times


def run_pacer(ds, global_batch: int, steps: int, engine: str, controller: str) -> List[float]:
    model = make_cnn()
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    net = pacer.DataParallel(model, opt, engine=engine)
    loader = pacer.DataLoader(ds, global_batch=global_batch, controller=controller, seed=3)
    times, last = [], None
    for x, y in loader:
        loss = F.cross_entropy(net(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        now = time.perf_counter()
        if last is not None:
            times.append(now - last)
        last = now
        if len(times) + 1 >= steps:
            break
    del net, loader
    pacer.job.set_current(None)
    return times


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--steps", type=int, default=40)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--global-batch", type=int, default=256)
    ap.add_argument("--controller", default="lbbsp", help="pacer's split (uniform: DDP's)")
    args = ap.parse_args()
    torch.set_num_threads(1)
    pacer.init_process_group()
    ds = data(args.global_batch * (args.steps + 2))
    runs = ["ddp", "pacer", "pacer-ddp"]
    per: Dict[str, List[float]] = {r: [] for r in runs}
    for rnd in range(args.rounds):
        order = runs[rnd % 3:] + runs[: rnd % 3]
        for r in order:
            dist.barrier()
            if r == "ddp":
                t = run_ddp(ds, args.global_batch, args.steps)
            else:
                t = run_pacer(ds, args.global_batch, args.steps,
                              "flat" if r == "pacer" else "ddp", args.controller)
            per[r].extend(t[args.warmup:])
            gc.collect()
    if dist.get_rank() == 0:
        out = {"world": dist.get_world_size(), "global_batch": args.global_batch,
               "rounds": args.rounds, "steps_per_run": args.steps, "warmup": args.warmup,
               "controller": args.controller}
        for r in runs:
            out[r] = {"median_ms": 1e3 * statistics.median(per[r]),
                      "mean_ms": 1e3 * statistics.mean(per[r]), "n": len(per[r])}
        for r in ("pacer", "pacer-ddp"):
            out[f"{r}_overhead_median"] = out[r]["median_ms"] / out["ddp"]["median_ms"] - 1
            out[f"{r}_overhead_mean"] = out[r]["mean_ms"] / out["ddp"]["mean_ms"] - 1
        print(json.dumps(out, indent=1), flush=True)
    gc.collect()
    pacer.destroy_process_group()


if __name__ == "__main__":
    main()
