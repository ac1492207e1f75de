"""Benchmark: plain DDP with equal batches vs pacer (``lbbsp``, ``pid``) on emulated
heterogeneous ranks (python/README.md, "Benchmark").

``python -m pacer_torch.bench --json`` launches, for each model (an MLP and a small CNN
on MNIST), ``--world`` ranks with ``torchrun`` on CPU (``OMP_NUM_THREADS=1``) per run:

- ``ddp``: ``torch.nn.parallel.DistributedDataParallel``, equal local batches ``B/n``,
  the stock averaging all-reduce; ranks emulated at ``--speeds`` by a DDP communication
  hook that pads before the all-reduce (the same padding as pacer's, ``signals.py``);
- ``lbbsp``, ``pid``: ``pacer_torch.DataParallel`` + ``DataLoader`` with that controller;
- ``ddp-equal``, ``pacer-equal``: both at equal speeds, for the per-step overhead.

All runs see the same sample stream (``ElasticSampler``, one seed), the same model
initialisation and optimiser, so they take about the same number of steps to the target
accuracy; the clock counts training steps only (rank 0 evaluates every ``--eval-every``
steps on the first ``--eval-samples`` test samples with the clock stopped).

Printed: time to the target and mean step time per run, ``speedup_vs_ddp`` (DDP's time
to target over pacer's), ``efficiency`` (ideal step ``B / sum v_i`` over the measured
one, ``v_i`` each rank's measured compute speed in that step), ``overhead_frac``
(pacer-equal's step time over ddp-equal's, minus 1).

``--slowdown RANK:FACTOR:FROM:TO`` changes the speeds mid-run: rank ``RANK`` runs
``FACTOR`` times slower during steps ``FROM`` to ``TO - 1`` (interference that comes
and goes), then at its speed again. The benchmark then adds ``static``: pacer's exact
weighting with the split computed once from the initial ``--speeds`` (in proportion to
them) and never changed — what a one-time profiling would give — and reports each
controller's time to target against it (``speedup_vs_static``); the equal-speed
overhead runs are left out.

``--emulation calibrated`` (default) pads every rank to a noise-free device measured once
at start; ``--emulation cpu`` to each step's own CPU time, which on a shared machine
carries its step-to-step noise into the emulated devices (``signals.py``). ``--trace``
records every pacer run's steps (``trace.py``) and adds the attribution of its step time
(``breakdown``) and ``efficiency_sim_def``, the simulator's definition of efficiency.
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from typing import Dict, List, Optional, Tuple

import torch
import torch.nn.functional as F

DEFAULT_DATA = [
    "../shared/data/mnist",
    "/work/shared/data/mnist",
    "data/mnist",
]
FILES = {
    "train_x": "train-images-idx3-ubyte.gz",
    "train_y": "train-labels-idx1-ubyte.gz",
    "test_x": "t10k-images-idx3-ubyte.gz",
    "test_y": "t10k-labels-idx1-ubyte.gz",
}


# -- data -----------------------------------------------------------------------------


def _idx(path: str) -> torch.Tensor:
    with gzip.open(path, "rb") as f:
        raw = f.read()
    if len(raw) < 8 or raw[0] != 0 or raw[1] != 0 or raw[2] != 8:
        raise ValueError(f"{path}: not an IDX file of unsigned bytes")
    dims = raw[3]
    shape = [int.from_bytes(raw[4 + 4 * i : 8 + 4 * i], "big") for i in range(dims)]
    start = 4 + 4 * dims
    count = 1
    for d in shape:
        count *= d
    if len(raw) - start != count:
        raise ValueError(f"{path}: {len(raw) - start} bytes of data, shape {shape} needs {count}")
    return torch.frombuffer(bytearray(raw[start:]), dtype=torch.uint8).reshape(shape)


def find_mnist(explicit: Optional[str]) -> Optional[str]:
    cands = [explicit] if explicit else DEFAULT_DATA
    for d in cands:
        if d and all(os.path.exists(os.path.join(d, f)) for f in FILES.values()):
            return d
    if explicit:
        raise ValueError(f"--data: {explicit} lacks the four MNIST files {sorted(FILES.values())}")
    return None


def load_data(directory: Optional[str], seed: int) -> Tuple[torch.Tensor, ...]:
    """MNIST (normalised, N×1×28×28) from ``directory``, else generated digits-like data:
    ten classes, each a fixed random 28×28 template, plus per-sample noise."""
    if directory is not None:
        x = _idx(os.path.join(directory, FILES["train_x"])).float().div_(255.0)
        y = _idx(os.path.join(directory, FILES["train_y"])).long()
        tx = _idx(os.path.join(directory, FILES["test_x"])).float().div_(255.0)
        ty = _idx(os.path.join(directory, FILES["test_y"])).long()
        mean, std = 0.1307, 0.3081
        return ((x - mean) / std).unsqueeze(1), y, ((tx - mean) / std).unsqueeze(1), ty
    g = torch.Generator().manual_seed(seed)
    templates = torch.randn(10, 1, 28, 28, generator=g)

    def make(n: int) -> Tuple[torch.Tensor, torch.Tensor]:
        y = torch.randint(0, 10, (n,), generator=g)
        return templates[y] * 0.35 + torch.randn(n, 1, 28, 28, generator=g), y

    x, y = make(60000)
    tx, ty = make(10000)
    return x, y, tx, ty


# -- models -----------------------------------------------------------------------------


def make_model(name: str, seed: int) -> torch.nn.Module:
    torch.manual_seed(seed)
    if name == "mlp":
        return torch.nn.Sequential(
            torch.nn.Flatten(),
            torch.nn.Linear(784, 256),
            torch.nn.ReLU(),
            torch.nn.Linear(256, 128),
            torch.nn.ReLU(),
            torch.nn.Linear(128, 10),
        )
    if name == "cnn":
        return torch.nn.Sequential(
            torch.nn.Conv2d(1, 8, 5),
            torch.nn.ReLU(),
            torch.nn.MaxPool2d(2),
            torch.nn.Conv2d(8, 16, 5),
            torch.nn.ReLU(),
            torch.nn.MaxPool2d(2),
            torch.nn.Flatten(),
            torch.nn.Linear(256, 64),
            torch.nn.ReLU(),
            torch.nn.Linear(64, 10),
        )
    raise ValueError(f"--models: unknown model {name!r} (expected mlp or cnn)")


def accuracy(model: torch.nn.Module, x: torch.Tensor, y: torch.Tensor) -> float:
    with torch.no_grad():
        return float((model(x).argmax(1) == y).float().mean())


# -- one run (inside torchrun) -----------------------------------------------------------


def calibrate(args: argparse.Namespace, model: torch.nn.Module, x: torch.Tensor,
              y: torch.Tensor, world: int) -> Tuple[float, float]:
    """``--emulation calibrated``: every rank measures the CPU cost of the model's
    compute at three batch sizes at once (``signals.calibrate_cost``, on a copy of the
    model), and all use the mean of the ranks' lines: one base core for every rank."""
    import copy

    import torch.distributed as dist

    from pacer_torch.signals import calibrate_cost

    m = copy.deepcopy(model)
    B = args.global_batch
    sizes = sorted({max(1, B // (4 * world)), max(2, B // world), max(3, min(B, 2 * B // world))})

    def step(b: int) -> None:
        loss = F.cross_entropy(m(x[:b]), y[:b])
        loss.backward()
        m.zero_grad(set_to_none=True)

    fixed, per_sample = calibrate_cost(step, sizes, reps=args.calibrate_reps)
    t = torch.tensor([fixed, per_sample], dtype=torch.float64)
    dist.all_reduce(t)
    t /= world
    return float(t[0]), float(t[1])


def parse_slowdown(text: Optional[str]) -> Optional[Tuple[int, float, int, int]]:
    """``RANK:FACTOR:FROM:TO`` (``--slowdown``), checked."""
    if not text:
        return None
    try:
        r, f, a, b = text.split(":")
        out = (int(r), float(f), int(a), int(b))
    except ValueError:
        raise SystemExit(f"--slowdown: {text!r} (expected RANK:FACTOR:FROM:TO)") from None
    if out[1] <= 0 or out[2] < 1 or out[3] <= out[2] or out[0] < 0:
        raise SystemExit(f"--slowdown: {text!r} (expected FACTOR > 0 and 1 <= FROM < TO)")
    return out


def speed_at(speeds: List[float], rank: int, step: int,
             slowdown: Optional[Tuple[int, float, int, int]]) -> float:
    """Rank ``rank``'s emulated speed in step ``step`` (1-based)."""
    if slowdown is not None and rank == slowdown[0] and slowdown[2] <= step < slowdown[3]:
        return speeds[rank] / slowdown[1]
    return speeds[rank]


def static_split(global_batch: int, speeds: List[float]) -> List[int]:
    """``global_batch`` in proportion to ``speeds`` (largest remainder), at least 1 each."""
    exact = [global_batch * v / sum(speeds) for v in speeds]
    out = [max(int(x), 1) for x in exact]
    order = sorted(range(len(out)), key=lambda i: -(exact[i] - int(exact[i])))
    i = 0
    while sum(out) < global_batch:
        out[order[i % len(out)]] += 1
        i += 1
    while sum(out) > global_batch:
        j = max(range(len(out)), key=lambda k: out[k])
        out[j] -= 1
    return out


def _ddp_pad_hook(emulation, clock):
    """DDP communication hook: pad (emulated speed) before the stock averaging all-reduce."""
    from torch.distributed.algorithms.ddp_comm_hooks.default_hooks import allreduce_hook

    def hook(state, bucket):
        if bucket.index() == 0 or bucket.is_last():
            if not clock["padded"]:
                emulation.pad(clock["wall0"], clock["cpu0"], clock["b"])
                clock["padded"] = True
        return allreduce_hook(state, bucket)

    return hook


def worker(args: argparse.Namespace) -> None:
    import torch.distributed as dist

    import pacer_torch as pacer
    from pacer_torch.sampler import ElasticSampler
    from pacer_torch.signals import Emulation

    torch.set_num_threads(1)
    info = pacer.init_process_group()
    rank, world = int(info["rank"]), int(info["world_size"])
    speeds = [float(s) for s in args.speeds.split(",")]
    if len(speeds) != world:
        raise ValueError(f"--speeds: {len(speeds)} speeds for {world} ranks")
    slowdown = parse_slowdown(args.slowdown)
    static = static_split(args.global_batch, speeds) if args.controller == "static" else None
    x, y, tx, ty = load_data(find_mnist(args.data), args.seed)
    tx, ty = tx[: args.eval_samples], ty[: args.eval_samples]
    data = torch.utils.data.TensorDataset(x, y)
    model = make_model(args.model, args.seed)
    lr = args.lr if args.lr is not None else (0.1 if args.model == "mlp" else 0.05)
    opt = torch.optim.SGD(model.parameters(), lr=lr, momentum=0.9)
    B = args.global_batch
    mode = args.mode
    step_times: List[float] = []
    ideal: List[float] = []
    batches_seen: List[List[int]] = []
    train_s = 0.0
    reached: Optional[float] = None
    steps_to_target: Optional[int] = None
    acc = 0.0
    cost = _parse_cost(args.emulation_cost)
    if cost is None and args.emulation == "calibrated":
        cost = calibrate(args, model, x, y, world)
    if mode == "ddp":
        emulation = Emulation(speeds[rank], time_scale(args, args.model), cost)
        local = [B // world + (1 if r < B % world else 0) for r in range(world)]
        clock = {"wall0": 0.0, "cpu0": 0.0, "padded": False, "b": local[rank]}
        net = torch.nn.parallel.DistributedDataParallel(model)
        net.register_comm_hook(None, _ddp_pad_hook(emulation, clock))
        sampler = ElasticSampler(len(data), args.seed)

        def step_iter():
            while True:
                if sampler.remaining() == 0:
                    sampler.next_epoch()
                clock.update(wall0=time.perf_counter(), cpu0=time.thread_time(), padded=False)
                idx = sampler.take(local)[rank]
                yield x[idx], y[idx]

        batches = step_iter()
    else:
        net = pacer.DataParallel(model, opt)
        loader = pacer.DataLoader(
            data,
            global_batch=B,
            controller="uniform" if static is not None else args.controller,
            predictor=args.predictor,
            seed=args.seed,
            speed=speeds,
            time_scale=time_scale(args, args.model),
            emulation_cost=cost,
        )

        def pacer_iter():
            while True:
                for b in loader:
                    yield b

        batches = pacer_iter()
        emulation = pacer.current().emulation
    t_last = time.perf_counter()
    for step in range(1, args.max_steps + 1):
        emulation.speed = speed_at(speeds, rank, step, slowdown)
        if static is not None:
            loader.set_batches(static)  # the coming step runs the one-time split
        xb, yb = next(batches)
        loss = F.cross_entropy(net(xb), yb)
        loss.backward()
        opt.step()
        opt.zero_grad()
        now = time.perf_counter()
        dt = now - t_last
        train_s += dt
        if step > args.warmup:
            step_times.append(dt)
            if mode != "ddp":
                st = pacer.current().stats
                v = sum(st.speeds)
                if v > 0:
                    ideal.append(B / v)
        if mode != "ddp" and rank == 0 and step % 10 == 0:
            batches_seen.append(list(pacer.current().batches))
        if step % args.eval_every == 0 or step == args.max_steps:
            if mode != "ddp" and pacer.current().trace is not None:
                pacer.current().trace.pause()
            flag = torch.zeros(1)
            if rank == 0:
                acc = accuracy(model, tx, ty)
                if acc >= args.target and reached is None:
                    reached, steps_to_target = train_s, step
                    flag[0] = 1.0
            dist.broadcast(flag, 0)
            if flag[0] > 0 and not args.full:
                break
            if step >= args.max_steps:
                break
            t_last = time.perf_counter()
        else:
            t_last = now
    if rank == 0:
        out = {
            "model": args.model,
            "mode": mode,
            "controller": args.controller if mode != "ddp" else None,
            "speeds": speeds,
            "slowdown": list(slowdown) if slowdown else None,
            "steps": step,
            "train_s": train_s,
            "time_to_target_s": reached,
            "steps_to_target": steps_to_target,
            "final_accuracy": acc,
            "step_s_mean": statistics.fmean(step_times) if step_times else None,
            "step_s_median": statistics.median(step_times) if step_times else None,
            "ideal_step_s_mean": statistics.fmean(ideal) if ideal else None,
            "batches_every_10_steps": batches_seen[-5:],
            "emulation": "calibrated" if cost is not None else "cpu",
            "emulation_cost_s": list(cost) if cost is not None else None,
        }
        if mode != "ddp":
            if pacer.current().trace is not None:
                pacer.current().trace.flush()
            em = pacer.current().emulation
            out["overruns"] = em.overruns
            # Read once, at the end: None under the default noise_scale="auto", which
            # takes no norms until read (the runs time pacer as a job that reads none).
            out["noise_scale"] = pacer.current().noise_scale()
        with open(args.out, "w") as f:
            json.dump(out, f)
    # A DistributedDataParallel model holds the process group: drop it first, so that the
    # group and its gloo threads are gone before the interpreter exits (env.py).
    del net
    pacer.destroy_process_group()


# -- the orchestrator ---------------------------------------------------------------------


def run_one(args: argparse.Namespace, model: str, mode: str, controller: str, speeds: str,
            target: float, full: bool, max_steps: int,
            cost: Optional[Tuple[float, float]] = None) -> Dict:
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "out.json")
        world = len(speeds.split(","))
        cmd = [
            sys.executable, "-m", "torch.distributed.run", "--standalone",
            f"--nproc_per_node={world}", "-m", "pacer_torch.bench", "--worker",
            f"--model={model}", f"--mode={mode}", f"--controller={controller}",
            f"--predictor={args.predictor}", f"--speeds={speeds}",
            f"--global-batch={args.global_batch}", f"--time-scale={time_scale(args, model)}",
            f"--target={target}", f"--max-steps={max_steps}", f"--eval-every={args.eval_every}",
            f"--eval-samples={args.eval_samples}", f"--warmup={args.warmup}",
            f"--seed={args.seed}", f"--out={out}", f"--emulation={args.emulation}",
            f"--calibrate-reps={args.calibrate_reps}",
        ] + ([f"--slowdown={args.slowdown}"] if args.slowdown else []) + (
            [f"--emulation-cost={cost[0]!r},{cost[1]!r}"] if cost is not None else []) + ([f"--lr={args.lr}"] if args.lr is not None else []) + (
            [f"--data={args.data}"] if args.data else []) + (["--full"] if full else [])
        env = dict(os.environ, OMP_NUM_THREADS="1")
        trace_dir = os.path.join(tmp, "trace")
        if args.trace and mode != "ddp":
            env["PACER_TRACE"] = trace_dir
        else:
            env.pop("PACER_TRACE", None)
        t0 = time.perf_counter()
        p = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=args.run_timeout)
        if p.returncode != 0 or not os.path.exists(out):
            sys.stderr.write(p.stdout[-3000:] + p.stderr[-6000:])
            raise SystemExit(f"bench: run {model}/{mode}/{controller} failed (exit {p.returncode})")
        with open(out) as f:
            r = json.load(f)
        r["wall_s"] = time.perf_counter() - t0
        if args.trace and mode != "ddp":
            from .trace import analyse, load

            r["breakdown"] = analyse(load(trace_dir), skip=args.warmup)
            if args.trace_keep:
                import shutil

                dest = os.path.join(args.trace_keep, f"{model}-{mode}-{controller}-{speeds}")
                shutil.rmtree(dest, ignore_errors=True)
                shutil.copytree(trace_dir, dest)
        return r


def orchestrate(args: argparse.Namespace) -> None:
    data_dir = find_mnist(args.data)
    equal = ",".join(["1"] * len(args.speeds.split(",")))
    speeds = [float(s) for s in args.speeds.split(",")]
    report: Dict[str, object] = {
        "data": data_dir or "generated (no MNIST files found)",
        "speeds": speeds,
        "global_batch": args.global_batch,
        "emulation": args.emulation,
        "load_average_start": _loadavg(),
        "time_scale": {m: time_scale(args, m) for m in args.models.split(",")},
        "ideal_speedup": sum(speeds) / (len(speeds) * min(speeds)),
        "models": {},
    }
    targets = {"mlp": args.target_mlp, "cnn": args.target_cnn}
    for model in args.models.split(","):
        runs: Dict[str, Dict] = {}
        # Calibrated emulation: the first run measures the device, every later run of the
        # model emulates that same device (a run calibrated under other load would not).
        cost = _parse_cost(args.emulation_cost)
        extra = [("pacer", "static")] if args.slowdown else []
        for mode, ctl in [("ddp", "uniform")] + extra + [
            ("pacer", c) for c in args.controllers.split(",")
        ]:
            key = "ddp" if mode == "ddp" else ctl
            runs[key] = run_one(args, model, mode, ctl, args.speeds, targets[model], False,
                                args.max_steps, cost)
            if args.emulation == "calibrated" and cost is None:
                cost = tuple(runs[key]["emulation_cost_s"])  # type: ignore[assignment]
            log(args, f"{model} {key}: {summary(runs[key])}")
        for mode, key in () if args.slowdown else (("ddp", "ddp-equal"), ("pacer", "pacer-equal")):
            runs[key] = run_one(args, model, mode, "lbbsp", equal, 2.0, True,
                                args.overhead_steps, cost)
            log(args, f"{model} {key}: {summary(runs[key])}")
        res: Dict[str, object] = {"runs": runs, "emulation_cost_s": cost}
        ddp = runs["ddp"]
        for ctl in args.controllers.split(","):
            r = runs[ctl]
            sp = (ddp["time_to_target_s"] / r["time_to_target_s"]
                  if ddp["time_to_target_s"] and r["time_to_target_s"] else None)
            res[ctl] = {
                "speedup_vs_ddp": sp,
                "step_speedup_vs_ddp": ddp["step_s_mean"] / r["step_s_mean"],
                "efficiency": r["ideal_step_s_mean"] / r["step_s_mean"],
            }
            if "breakdown" in r:
                res[ctl]["efficiency_sim_def"] = r["breakdown"]["efficiency_sim_def"]
            st = runs.get("static")
            if st is not None and st["time_to_target_s"] and r["time_to_target_s"]:
                res[ctl]["speedup_vs_static"] = st["time_to_target_s"] / r["time_to_target_s"]
        if "static" in runs and ddp["time_to_target_s"] and runs["static"]["time_to_target_s"]:
            res["static_speedup_vs_ddp"] = (
                ddp["time_to_target_s"] / runs["static"]["time_to_target_s"]
            )
        if "pacer-equal" in runs:
            res["overhead_frac"] = (
                runs["pacer-equal"]["step_s_mean"] / runs["ddp-equal"]["step_s_mean"] - 1
            )
        report["models"][model] = res  # type: ignore[index]
    report["load_average_end"] = _loadavg()
    if args.json:
        print(json.dumps(report, indent=2))
    else:
        for model, res in report["models"].items():  # type: ignore[union-attr]
            for ctl in args.controllers.split(","):
                r = res[ctl]
                print(f"{model} {ctl}: speedup_vs_ddp {fmt(r['speedup_vs_ddp'])}, "
                      f"speedup_vs_static {fmt(r.get('speedup_vs_static'))}, "
                      f"efficiency {fmt(r['efficiency'])}")
            if "overhead_frac" in res:
                print(f"{model}: overhead_frac {res['overhead_frac']:+.4f}")


def _parse_cost(text: Optional[str]) -> Optional[Tuple[float, float]]:
    if text is None:
        return None
    try:
        fixed, per_sample = (float(v) for v in text.split(","))
    except ValueError:
        raise SystemExit(f"--emulation-cost: {text!r} (expected FIXED_S,PER_SAMPLE_S)") from None
    return fixed, per_sample


def _loadavg() -> Optional[List[float]]:
    try:
        return [round(v, 2) for v in os.getloadavg()]
    except OSError:
        return None


def time_scale(args: argparse.Namespace, model: str) -> float:
    if args.time_scale is not None:
        return args.time_scale
    return args.time_scale_mlp if model == "mlp" else args.time_scale_cnn


def fmt(v: Optional[float]) -> str:
    return "n/a (target not reached)" if v is None else f"{v:.3f}"


def summary(r: Dict) -> str:
    return (f"time to target {fmt(r['time_to_target_s'])} s in {r['steps_to_target']} steps, "
            f"step {r['step_s_mean'] * 1000:.1f} ms (ideal "
            f"{(r['ideal_step_s_mean'] or 0) * 1000:.1f}), accuracy {r['final_accuracy']:.4f}, "
            f"wall {r['wall_s']:.0f} s")


def log(args: argparse.Namespace, msg: str) -> None:
    print(f"bench: {msg}", file=sys.stderr, flush=True)


def main(argv: Optional[List[str]] = None) -> None:
    p = argparse.ArgumentParser(prog="python -m pacer_torch.bench", description=__doc__.split("\n\n")[0])
    p.add_argument("--models", default="mlp,cnn")
    p.add_argument("--controllers", default="lbbsp,pid")
    p.add_argument("--predictor", default="ewma")
    p.add_argument("--speeds", default="1,1,0.5,0.25")
    p.add_argument("--global-batch", type=int, default=512)
    p.add_argument("--slowdown", default=None,
                   help="RANK:FACTOR:FROM:TO: rank RANK runs FACTOR times slower in steps "
                        "FROM..TO-1 (adds the static-split run)")
    p.add_argument("--time-scale", type=float, default=None,
                   help="emulated compute = time_scale * cpu / speed (signals.py); "
                   "default per model: --time-scale-mlp, --time-scale-cnn")
    p.add_argument("--time-scale-mlp", type=float, default=64.0)
    p.add_argument("--time-scale-cnn", type=float, default=16.0)
    p.add_argument("--emulation", choices=("cpu", "calibrated"), default="calibrated",
                   help="calibrated (default): pad to time_scale * (fixed + per_sample * b) "
                   "/ speed, CPU costs measured once at start, a noise-free device; cpu: pad "
                   "each step to time_scale * its own CPU time / speed (the machine's "
                   "step-to-step noise included) (signals.py)")
    p.add_argument("--calibrate-reps", type=int, default=20)
    p.add_argument("--emulation-cost", default=None,
                   help="FIXED_S,PER_SAMPLE_S: the calibrated device's CPU costs instead of "
                   "measuring them (implies a calibrated emulation)")
    p.add_argument("--target-mlp", type=float, default=0.95)
    p.add_argument("--target-cnn", type=float, default=0.95)
    p.add_argument("--max-steps", type=int, default=600)
    p.add_argument("--overhead-steps", type=int, default=80)
    p.add_argument("--eval-every", type=int, default=10)
    p.add_argument("--eval-samples", type=int, default=2000)
    p.add_argument("--warmup", type=int, default=10)
    p.add_argument("--lr", type=float, default=None,
                   help="SGD learning rate (momentum 0.9); default 0.1 for mlp, 0.05 for cnn")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--data", default=None, help="MNIST directory (default: ../shared/data/mnist, "
                   "/work/shared/data/mnist, data/mnist; else generated data)")
    p.add_argument("--run-timeout", type=float, default=1800.0)
    p.add_argument("--json", action="store_true")
    p.add_argument("--trace", action="store_true",
                   help="trace every pacer run (PACER_TRACE, trace.py) and add its per-step "
                   "breakdown of the step time to the report")
    p.add_argument("--trace-keep", default=None,
                   help="with --trace: copy each run's trace files into this directory")
    # One run, inside torchrun.
    p.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--model", default="mlp", help=argparse.SUPPRESS)
    p.add_argument("--mode", default="pacer", help=argparse.SUPPRESS)
    p.add_argument("--controller", default="lbbsp", help=argparse.SUPPRESS)
    p.add_argument("--target", type=float, default=0.95, help=argparse.SUPPRESS)
    p.add_argument("--full", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--out", default=None, help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    for m in args.models.split(","):
        make_model(m, 0)
    for c in args.controllers.split(","):
        if c not in ("uniform", "lbbsp", "lbbsp-cpu", "lbbsp-gpu", "pid"):
            p.error(f"--controllers: unknown controller {c!r}")
    if args.emulation_cost is not None:
        from pacer_torch.signals import Emulation

        try:
            Emulation(1.0, 1.0, _parse_cost(args.emulation_cost))
        except ValueError as e:
            p.error(f"--emulation-cost: {e}")
    if args.global_batch < len(args.speeds.split(",")):
        p.error("--global-batch: smaller than the number of ranks")
    if args.worker:
        worker(args)
    else:
        orchestrate(args)


if __name__ == "__main__":
    main()
