"""Opt-in per-step trace of where a step's time goes, and its attribution.

Off unless ``PACER_TRACE`` names a directory: then every rank appends one JSON line per
step to ``PACER_TRACE/trace-rank<r>.jsonl`` (flushed every 64 steps and at exit). When
off, the job holds ``None`` and each hook costs one ``is not None`` test.

A row holds this rank's local batch ``b``, the speed the session predicted for it
``pred_v`` (samples/s), and ``time.perf_counter()`` stamps (``CLOCK_MONOTONIC`` on
Linux, so comparable between processes of one machine) with the thread CPU time used in
each span:

- ``t_begin``: the step's clock starts (``Job.begin_step``, before the indices);
- ``t_pad_end``: compute over, padding included (``cpu``: the thread CPU time of the
  compute; ``target``: ``time_scale * cpu / speed``, the emulated compute; ``overrun``:
  the real compute took longer than ``target``);
- ``t_arrive``: this rank enters the all-reduce (gradients flattened);
- ``t_reduced``: it leaves it; ``t_gathered``: the session has observed and decided;
- ``t_end``: the user's step is over (the next batch is asked for).

``analyse`` cuts the timeline at the all-reduce completions ``R(k)`` (the first rank to
leave it) and follows the *critical* rank ``c`` (the last to enter it) through cycle
``k`` (a cycle after ``Tracer.pause``, e.g. an evaluation, is left out); the terms add
up exactly to ``R(k) - R(k-1)``:

- ``ideal``: ``B / sum_i v_i``, ``v_i = b_i / compute_i`` of the same step (the bench's
  ideal);
- ``rounding``: the best integer split for the step's emulated speeds ``b_i / target_i``
  (``min max_i b_i / v_i``) minus their ideal ``B / sum_i b_i / target_i``;
- ``noise``: what the step's speeds cost a split that knew each rank's *mean* speed over
  the run (``static``: ``max_i b*_i / v_i``, ``b*`` the best integer split for the mean
  speeds ``sum b_i / sum target_i``) beyond the best split for the step's own speeds:
  the step-to-step noise no predictor can foresee;
- ``controller``: the longest emulated compute (``target``) of the step minus
  ``static``: what the decided batches lost against that hindsight split (prediction
  lag and error; negative where they did better);
- ``skew``: ``c``'s ``target`` minus that longest one (<= 0): ``c`` entered the
  all-reduce last because it started late (``post``), not because it computed longest;
- ``emulation``: ``c``'s compute minus its ``target`` (sleep overshoot; or, on an
  overrun, the real work beyond the target), less the overshoot already in ``ideal``
  (``ideal`` on the targets minus ``ideal``);
- ``post``: from ``R(k-1)`` until ``c`` starts step ``k``: leaving the all-reduce
  after the first rank did (``exit``), pacer's gather (unflatten, noise scale, session observe + decide:
  ``gather``), then the user's optimiser step and loop (``user``);
- ``pre``: ``c`` from the end of its compute to entering the all-reduce (load signals,
  flattening the gradients);
- ``comm``: from ``c`` entering the all-reduce to ``R(k)``.

Each span's thread CPU time is kept as well (``*_cpu``): unlike wall time it barely
depends on how loaded the machine is.
"""

from __future__ import annotations

import atexit
import heapq
import json
import os
import statistics
import time
from typing import Dict, List, Optional, Sequence

#: Rows kept in memory before an append to the file.
FLUSH_EVERY = 64


class Tracer:
    """One rank's trace rows (module docs)."""

    def __init__(self, directory: str, rank: int):
        os.makedirs(directory, exist_ok=True)
        self.path = os.path.join(directory, f"trace-rank{rank}.jsonl")
        with open(self.path, "w"):
            pass
        self.rows: List[Dict[str, float]] = []
        self.row: Dict[str, float] = {}
        atexit.register(self.flush)

    @classmethod
    def from_env(cls, rank: int) -> Optional["Tracer"]:
        d = os.environ.get("PACER_TRACE")
        return cls(d, rank) if d else None

    def mark(self, name: str, **values: float) -> None:
        """Stamps ``t_<name>`` and ``c_<name>`` (thread CPU time) and sets ``values``."""
        r = self.row
        r["t_" + name] = time.perf_counter()
        r["c_" + name] = time.thread_time()
        r.update(values)

    def pause(self) -> None:
        """The time from now to the next step's start is not training (an evaluation):
        ``analyse`` leaves the next cycle out."""
        self.row["paused"] = 1

    def commit(self) -> None:
        self.rows.append(self.row)
        self.row = {}
        if len(self.rows) >= FLUSH_EVERY:
            self.flush()

    def flush(self) -> None:
        if not self.rows:
            return
        with open(self.path, "a") as f:
            for r in self.rows:
                f.write(json.dumps(r) + "\n")
        self.rows = []


def load(directory: str) -> List[List[Dict[str, float]]]:
    """Every rank's rows, rank by rank (``trace-rank0.jsonl``, 1, ... while present)."""
    out = []
    r = 0
    while True:
        p = os.path.join(directory, f"trace-rank{r}.jsonl")
        if not os.path.exists(p):
            break
        with open(p) as f:
            out.append([json.loads(line) for line in f if line.strip()])
        r += 1
    if not out:
        raise ValueError(f"PACER_TRACE: no trace-rank0.jsonl in {directory}")
    return out


def best_integer_split(batch: int, speeds: Sequence[float]) -> List[int]:
    """The integer ``b``, ``sum b = batch``, minimising ``max_i b_i / v_i`` (greedy:
    each sample goes to the rank that would finish it earliest, optimal for this
    min-max)."""
    b = [0] * len(speeds)
    heap = [(1.0 / v, i) for i, v in enumerate(speeds)]
    heapq.heapify(heap)
    for _ in range(batch):
        _, i = heapq.heappop(heap)
        b[i] += 1
        heapq.heappush(heap, ((b[i] + 1) / speeds[i], i))
    return b


def best_integer_max(batch: int, speeds: Sequence[float]) -> float:
    """``min over integer b, sum b = batch, of max_i b_i / v_i``."""
    b = best_integer_split(batch, speeds)
    return max(bi / v for bi, v in zip(b, speeds))


TERMS = (
    "ideal", "rounding", "noise", "controller", "skew", "emulation", "post", "pre", "comm"
)


def analyse(ranks: List[List[Dict[str, float]]], skip: int = 10) -> Dict[str, object]:
    """Per-step attribution of the cycle ``R(k) - R(k-1)`` (module docs), as means in
    milliseconds over the steps after the first ``skip`` that ran the full global batch
    on every rank, with per-rank statistics."""
    n = min(len(r) for r in ranks)
    world = len(ranks)
    per: Dict[str, List[float]] = {k: [] for k in TERMS + ("cycle", "exit", "gather", "user", "static")}
    cpu: Dict[str, List[float]] = {
        k: [] for k in ("compute", "pre", "comm", "gather", "user")
    }
    pred_err: List[List[float]] = [[] for _ in range(world)]
    overshoot: List[List[float]] = [[] for _ in range(world)]
    wait: List[List[float]] = [[] for _ in range(world)]
    batches: List[List[float]] = [[] for _ in range(world)]
    critical = [0] * world
    overruns = [0] * world
    ideal_eff: List[float] = []
    full_b = max(sum(r[k]["b"] for r in ranks) for k in range(n)) if n else 0
    steps = []
    for k in range(max(skip, 1), n):
        rows = [r[k] for r in ranks]
        prev = [r[k - 1] for r in ranks]
        if sum(row["b"] for row in rows) != full_b or any(row["b"] <= 0 for row in rows):
            continue
        if any(p.get("paused") for p in prev):
            continue
        steps.append(k)
    if not steps:
        raise ValueError("trace: no full step after the warm-up to analyse")
    mean_v = [
        sum(ranks[i][k]["b"] for k in steps)
        / sum(ranks[i][k]["target"] for k in steps)
        for i in range(world)
    ]
    b_star = best_integer_split(int(full_b), mean_v)
    for k in steps:
        rows = [r[k] for r in ranks]
        prev = [r[k - 1] for r in ranks]
        r_prev = min(p["t_reduced"] for p in prev)
        r_now = min(row["t_reduced"] for row in rows)
        compute = [row["t_pad_end"] - row["t_begin"] for row in rows]
        v = [row["b"] / c for row, c in zip(rows, compute)]
        ideal = full_b / sum(v)
        # The emulated speeds, without the sleep overshoot (counted in ``emulation``).
        vt = [row["b"] / row["target"] for row in rows]
        ideal_t = full_b / sum(vt)
        best = best_integer_max(int(full_b), vt)
        static = max(bs / vi for bs, vi in zip(b_star, vt))
        longest = max(row["target"] for row in rows)
        c = max(range(world), key=lambda i: rows[i]["t_arrive"])
        rc, pc = rows[c], prev[c]
        critical[c] += 1
        terms = {
            "ideal": ideal,
            "rounding": best - ideal_t,
            "noise": static - best,
            "controller": longest - static,
            "skew": rc["target"] - longest,
            "emulation": compute[c] - rc["target"] + ideal_t - ideal,
            "post": rc["t_begin"] - r_prev,
            "pre": rc["t_arrive"] - rc["t_pad_end"],
            "comm": r_now - rc["t_arrive"],
        }
        for key, val in terms.items():
            per[key].append(val)
        per["cycle"].append(r_now - r_prev)
        per["static"].append(static)
        per["exit"].append(pc["t_reduced"] - r_prev)
        per["gather"].append(pc["t_gathered"] - pc["t_reduced"])
        per["user"].append(rc["t_begin"] - pc["t_gathered"])
        cpu["compute"].append(rc["cpu"])
        cpu["pre"].append(rc["c_arrive"] - rc["c_pad_end"])
        cpu["comm"].append(rc["c_reduced"] - rc["c_arrive"])
        cpu["gather"].append(pc["c_gathered"] - pc["c_reduced"])
        cpu["user"].append(rc["c_begin"] - pc["c_gathered"])
        ideal_eff.append(ideal / (r_now - r_prev))
        for i, row in enumerate(rows):
            if row.get("pred_v", 0) > 0:
                pred_err[i].append(row["pred_v"] / v[i] - 1.0)
            overshoot[i].append(compute[i] - row["target"])
            wait[i].append(row["t_reduced"] - row["t_arrive"])
            batches[i].append(row["b"])
            overruns[i] += int(row.get("overrun", 0))

    def ms(xs: List[float]) -> float:
        return 1000.0 * statistics.fmean(xs)

    def mean_abs(xs: List[float]) -> Optional[float]:
        return statistics.fmean(abs(x) for x in xs) if xs else None

    cycle = ms(per["cycle"])
    sync = ms(per["post"]) + ms(per["pre"]) + ms(per["comm"])
    out: Dict[str, object] = {
        "steps": len(steps),
        "cycle_ms": cycle,
        "efficiency": ms(per["ideal"]) / cycle,
        # The simulator's definition (crates/workersim/src/eval.rs): the ideal is the
        # split for the mean speeds, run with the step's own speeds, plus the same sync.
        "efficiency_sim_def": (ms(per["static"]) + sync) / cycle,
        "static_split": b_star,
        "terms_ms": {k: ms(per[k]) for k in TERMS},
        "terms_frac": {k: ms(per[k]) / cycle for k in TERMS},
        "post_split_ms": {
            "exit": ms(per["exit"]),
            "gather": ms(per["gather"]),
            "user": ms(per["user"]),
        },
        "critical_cpu_ms": {k: ms(v) for k, v in cpu.items()},
        "critical_rank_count": critical,
        "per_rank": [
            {
                "mean_batch": statistics.fmean(batches[i]),
                "pred_speed_mape": mean_abs(pred_err[i]),
                "pred_speed_bias": statistics.fmean(pred_err[i]) if pred_err[i] else None,
                "overshoot_ms_mean": ms(overshoot[i]),
                "overshoot_ms_max": 1000.0 * max(overshoot[i]),
                "allreduce_wait_ms": ms(wait[i]),
                "overruns": overruns[i],
            }
            for i in range(world)
        ],
    }
    return out
