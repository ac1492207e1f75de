"""Per-step overhead of pacer_torch against plain DDP, unstretched, at equal speeds.

    torchrun --nproc_per_node=4 -m pacer_torch.overhead [--rounds 5 --steps 40]

A small CNN (2 conv + 2 fc, 28x28 inputs, synthetic data), global batch 256 (64 per rank),
no emulation: four runs take turns in each round, so that a change of the machine's load
hits them alike — plain ``DistributedDataParallel`` (equal batches, the stock all-reduce),
pacer's default engine (one flat all-reduce after backward) with ``--controller``'s split
(``pacer``) and with the equal split (``pacer-uniform``: pacer's own per-step work, no
rebalancing), and pacer's ``engine="ddp"`` (DDP's reducer with pacer's weighting hook,
``--controller``). Every rank's step is the time between two consecutive ends of
``optimizer.step()`` (after ``warmup`` steps), in wall time and in the process's CPU time
(all its threads). The report: rank 0's median and mean wall step per run over all
rounds; the median over rounds of each pacer run's median against the same round's DDP
median (``*_paired``); the median CPU time per step over all ranks; and each rank's
median speed (samples/s of compute) under DDP's equal split, which shows how unequal
"equal" ranks are on the machine. Prints one JSON object.

``--cores-per-rank K`` pins each rank to K physical cores of its own (with their SMT
siblings; ``rank0_cpus`` in the report), so that the ranks neither share nor migrate
between cores: unpinned one-thread ranks on an idle 16-core host ran 1.8x apart under
DDP's equal split. ``*_overhead_paired_quartiles`` gives the lower quartile, median and
upper quartile of the per-round ratios.

``--device cuda`` runs the same on GPUs (rank ``LOCAL_RANK`` on device ``LOCAL_RANK``
modulo the devices it sees; ``--backend gloo`` lets several ranks share one GPU, which
nccl refuses); ``--model resnet18`` (torchvision's, 32x32 inputs) gives a step with
more device work than launches. On CUDA the host's marks only say when kernels were
queued, so each run also reports ``span_ms``: the time per step over the run after
``warmup``, between two ``torch.cuda.synchronize()`` (on the CPU the same measure, with
no synchronisation); ``*_overhead_span_paired`` compares it per round.

Every pacer run takes the default ``noise_scale="auto"``: nothing reads the noise scale
here, so no run takes its norms. ``--with-norms`` adds ``pacer-norms`` and
``pacer-ddp-norms``: ``pacer`` and ``pacer-ddp`` with ``noise_scale=True`` (every step's
``|g_i|^2`` and ``|g|^2``, as every run took them before that option existed).
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import statistics
import time
from typing import Dict, List, Tuple, Union

import torch
import torch.distributed as dist
import torch.nn.functional as F

import pacer_torch as pacer


MODEL = "cnn"
DEVICE = torch.device("cpu")


def _sync() -> None:
    if DEVICE.type == "cuda":
        torch.cuda.synchronize(DEVICE)


def make_model() -> torch.nn.Module:
    torch.manual_seed(0)
    if MODEL == "resnet18":
        import torchvision  # only for --model resnet18

        return torchvision.models.resnet18(num_classes=10).to(DEVICE)
    return make_cnn().to(DEVICE)


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
    shape = (3, 32, 32) if MODEL == "resnet18" else (1, 28, 28)
    return torch.utils.data.TensorDataset(
        torch.randn(n, *shape, generator=g), torch.randint(0, 10, (n,), generator=g)
    )


def _marks() -> Tuple[float, float]:
    return time.perf_counter(), time.process_time()


Run = Tuple[List[Tuple[float, float]], float]


def run_ddp(ds, global_batch: int, steps: int, warmup: int) -> Run:
    rank, world = dist.get_rank(), dist.get_world_size()
    model = make_model()
    ids = [DEVICE] if DEVICE.type == "cuda" else None
    # Buffers (resnet18's BatchNorm statistics) are not broadcast: pacer does not either.
    net = torch.nn.parallel.DistributedDataParallel(
        model, device_ids=ids, broadcast_buffers=False
    )
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    x_all, y_all = ds.tensors
    b = global_batch // world
    g = torch.Generator().manual_seed(2)
    perm = torch.randperm(len(x_all), generator=g)
    times, last, t_warm = [], None, 0.0
    for s in range(steps):
        idx = perm[(s * global_batch + rank * b) % len(perm):][:b]
        # Gathered as pacer's DataLoader gathers a TensorDataset batch (index_select).
        x = x_all.index_select(0, idx).to(DEVICE)
        y = y_all.index_select(0, idx).to(DEVICE)
        loss = F.cross_entropy(net(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        now = _marks()
        if last is not None:
            times.append((now[0] - last[0], now[1] - last[1]))
        last = now
        if s == warmup:
            _sync()
            t_warm = time.perf_counter()
    _sync()
    span = (time.perf_counter() - t_warm) / (steps - 1 - warmup)
    del net
    return times, span


def run_pacer(
    ds,
    global_batch: int,
    steps: int,
    warmup: int,
    engine: str,
    controller: str,
    noise_scale: Union[str, bool] = "auto",
) -> Run:
    model = make_model()
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    net = pacer.DataParallel(model, opt, engine=engine)
    dev = DEVICE if DEVICE.type == "cuda" else None
    loader = pacer.DataLoader(
        ds, global_batch=global_batch, controller=controller, seed=3, device=dev,
        noise_scale=noise_scale,
    )
    times, last, t_warm, s = [], None, 0.0, 0
    for x, y in loader:
        loss = F.cross_entropy(net(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        now = _marks()
        if last is not None:
            times.append((now[0] - last[0], now[1] - last[1]))
        last = now
        if s == warmup:
            _sync()
            t_warm = time.perf_counter()
        s += 1
        if s >= steps:
            break
    _sync()
    span = (time.perf_counter() - t_warm) / (steps - 1 - warmup)
    del net, loader
    pacer.job.set_current(None)
    return times, span


def _speeds_under_ddp(ds, global_batch: int, steps: int) -> List[float]:
    """Each rank's median samples/s of forward + backward (its own clock, no wait for
    the others: a barrier before the step, the clock stopped before the all-reduce by
    computing without DDP) at DDP's equal split, gathered to every rank."""
    rank, world = dist.get_rank(), dist.get_world_size()
    model = make_model()
    x_all, y_all = ds.tensors
    b = global_batch // world
    out = []
    for s in range(steps):
        x, y = x_all[rank * b : (rank + 1) * b], y_all[rank * b : (rank + 1) * b]
        x, y = x.to(DEVICE), y.to(DEVICE)
        _sync()
        dist.barrier()
        t0 = time.perf_counter()
        F.cross_entropy(model(x), y).backward()
        _sync()
        out.append(b / (time.perf_counter() - t0))
    t = torch.zeros(world, device=DEVICE)
    t[rank] = statistics.median(out)
    dist.all_reduce(t)
    return t.tolist()


RUNS = ("ddp", "pacer", "pacer-uniform", "pacer-ddp")
#: ``--with-norms``: ``pacer`` and ``pacer-ddp`` with ``noise_scale=True``.
NORM_RUNS = ("pacer-norms", "pacer-ddp-norms")


def physical_cores(cpus: List[int], root: str = "/sys/devices/system/cpu") -> List[List[int]]:
    """The CPUs this process may use, grouped by physical core (SMT siblings together,
    from sysfs' topology; a CPU whose topology cannot be read is a core of its own),
    ordered by their first CPU."""
    groups: Dict[Tuple[str, str], List[int]] = {}
    for c in sorted(cpus):
        base = f"{root}/cpu{c}/topology/"
        try:
            with open(base + "physical_package_id") as f:
                pkg = f.read().strip()
            with open(base + "core_id") as f:
                core = f.read().strip()
            key = (pkg, core)
        except OSError:
            key = ("cpu", str(c))
        groups.setdefault(key, []).append(c)
    return sorted(groups.values(), key=lambda g: g[0])


def pin(local_rank: int, local_world: int, per_rank: int) -> List[int]:
    """Pins this rank to ``per_rank`` physical cores of its own (all their SMT siblings),
    ranks taking consecutive groups; returns the CPUs. Raises ``ValueError`` when the
    machine has fewer than ``local_world * per_rank`` physical cores available."""
    cores = physical_cores(list(os.sched_getaffinity(0)))
    need = local_world * per_rank
    if need > len(cores):
        raise ValueError(
            f"--cores-per-rank {per_rank}: {local_world} ranks need {need} physical cores, "
            f"this process may use {len(cores)}"
        )
    mine = [c for g in cores[local_rank * per_rank : (local_rank + 1) * per_rank] for c in g]
    os.sched_setaffinity(0, mine)
    return mine


def quartiles(xs: List[float]) -> List[float]:
    """Lower quartile, median and upper quartile (``statistics.quantiles``' default
    method; the value itself for one element)."""
    if len(xs) < 2:
        return [xs[0]] * 3
    q = statistics.quantiles(xs, n=4)
    return [q[0], statistics.median(xs), q[2]]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--steps", type=int, default=40)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--global-batch", type=int, default=256)
    ap.add_argument("--controller", default="lbbsp", help="pacer's split (uniform: DDP's)")
    ap.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    ap.add_argument("--backend", choices=("gloo", "nccl"), default=None,
                    help="default: nccl on CUDA, gloo on the CPU")
    ap.add_argument("--model", choices=("cnn", "resnet18"), default="cnn")
    ap.add_argument("--cores-per-rank", type=int, default=0,
                    help="pin each rank to this many physical cores of its own "
                         "(0: no pinning, the default)")
    ap.add_argument("--with-norms", action="store_true",
                    help="also run pacer and pacer-ddp with noise_scale=True (pacer-norms, "
                         "pacer-ddp-norms): the noise scale's norms every step")
    args = ap.parse_args()
    if args.cores_per_rank < 0:
        ap.error(f"--cores-per-rank {args.cores_per_rank}: expected 0 or more")
    if args.steps < args.warmup + 3:
        ap.error(f"--steps {args.steps}: at least --warmup + 3 ({args.warmup + 3})")
    global MODEL, DEVICE
    MODEL = args.model
    torch.set_num_threads(1)
    if args.device == "cuda":
        if not torch.cuda.is_available():
            ap.error("--device cuda: torch sees no CUDA device")
        backend = args.backend or "nccl"
    else:
        if args.backend == "nccl":
            ap.error("--backend nccl needs --device cuda")
        backend = "gloo"
    pinned: List[int] = []
    if args.cores_per_rank:
        local_world = int(os.environ.get("LOCAL_WORLD_SIZE", "1"))
        local_rank = int(os.environ.get("LOCAL_RANK", "0"))
        try:
            pinned = pin(local_rank, local_world, args.cores_per_rank)
        except ValueError as e:
            ap.error(str(e))
    info = pacer.init_process_group(backend=backend)
    if args.device == "cuda":
        DEVICE = torch.device("cuda", int(info["local_rank"]) % torch.cuda.device_count())
        torch.cuda.set_device(DEVICE)
    ds = data(args.global_batch * (args.steps + 2))
    runs = list(RUNS) + (list(NORM_RUNS) if args.with_norms else [])
    per: Dict[str, List[Tuple[float, float]]] = {r: [] for r in runs}
    rounds: Dict[str, List[float]] = {r: [] for r in runs}
    spans: Dict[str, List[float]] = {r: [] for r in runs}
    for rnd in range(args.rounds):
        order = runs[rnd % len(runs):] + runs[: rnd % len(runs)]
        for r in order:
            _sync()
            dist.barrier()
            if r == "ddp":
                t, span = run_ddp(ds, args.global_batch, args.steps, args.warmup)
            else:
                engine = "ddp" if r.startswith("pacer-ddp") else "flat"
                ctl = "uniform" if r == "pacer-uniform" else args.controller
                ns = True if r in NORM_RUNS else "auto"
                t, span = run_pacer(
                    ds, args.global_batch, args.steps, args.warmup, engine, ctl, ns
                )
            t = t[args.warmup:]
            per[r].extend(t)
            rounds[r].append(statistics.median(w for w, _ in t))
            spans[r].append(span)
            gc.collect()
    speeds = _speeds_under_ddp(ds, args.global_batch, 20)
    # Every rank's median CPU time per step, per run.
    cpu = torch.zeros(len(runs), dist.get_world_size(), device=DEVICE)
    for i, r in enumerate(runs):
        cpu[i, dist.get_rank()] = statistics.median(c for _, c in per[r])
    dist.all_reduce(cpu)
    if dist.get_rank() == 0:
        out = {"world": dist.get_world_size(), "global_batch": args.global_batch,
               "rounds": args.rounds, "steps_per_run": args.steps, "warmup": args.warmup,
               "controller": args.controller, "device": str(DEVICE), "backend": backend,
               "model": MODEL,
               "device_name": torch.cuda.get_device_name(DEVICE)
               if DEVICE.type == "cuda" else None,
               "cores_per_rank": args.cores_per_rank, "rank0_cpus": pinned,
               "rank_speeds_under_ddp": [round(v, 1) for v in speeds]}
        for i, r in enumerate(runs):
            walls = [w for w, _ in per[r]]
            out[r] = {"median_ms": 1e3 * statistics.median(walls),
                      "mean_ms": 1e3 * statistics.mean(walls), "n": len(walls),
                      "cpu_ms_per_step": 1e3 * statistics.median(cpu[i].tolist()),
                      "span_ms": 1e3 * statistics.median(spans[r])}
        for r in runs[1:]:
            out[f"{r}_overhead_median"] = out[r]["median_ms"] / out["ddp"]["median_ms"] - 1
            out[f"{r}_overhead_mean"] = out[r]["mean_ms"] / out["ddp"]["mean_ms"] - 1
            out[f"{r}_overhead_paired"] = statistics.median(
                a / b - 1 for a, b in zip(rounds[r], rounds["ddp"])
            )
            # The spread of the per-round ratios: how far one round's answer can be trusted.
            out[f"{r}_overhead_paired_quartiles"] = quartiles(
                [a / b - 1 for a, b in zip(rounds[r], rounds["ddp"])]
            )
            out[f"{r}_overhead_span_paired"] = statistics.median(
                a / b - 1 for a, b in zip(spans[r], spans["ddp"])
            )
            out[f"{r}_cpu_overhead"] = (
                out[r]["cpu_ms_per_step"] / out["ddp"]["cpu_ms_per_step"] - 1
            )
        print(json.dumps(out, indent=1), flush=True)
    gc.collect()
    pacer.destroy_process_group()


if __name__ == "__main__":
    main()
