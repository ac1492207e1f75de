"""The job context shared by ``DataLoader`` and ``DataParallel`` (one per process).

Each step, every rank contributes one row to a single all-reduce that also carries the
gradients (``parallel.py``): its compute time (padding included when emulating, the wait
for the others excluded), its load signals, ``|g_i|^2`` of its local mean gradient, its
local batch and whether it was asked to stop. All ranks then hold the same gathered rows
and feed the same Rust session (``pacer_torch._native.Session``) and noise-scale
estimator, so they decide the same next batches without another message.
"""

from __future__ import annotations

import math
import os
import signal
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Dict, List, Optional, Tuple

import torch
import torch.distributed as dist

from . import _native
from .report import Reporter
from .sampler import ElasticSampler
from .signals import Emulation, LoadMonitor
from .trace import Tracer

if TYPE_CHECKING:  # pragma: no cover
    from .parallel import DataParallel

#: Columns of a rank's row in the gathered statistics.
ROW = 6
COMPUTE, CPU, MEM, SQR, BATCH, STOP = range(ROW)

_JOB: Optional["Job"] = None


def current() -> Optional["Job"]:
    """The process's job (set by ``DataLoader``), or None."""
    return _JOB


def _world() -> tuple:
    if dist.is_available() and dist.is_initialized():
        return dist.get_rank(), dist.get_world_size()
    return 0, 1


@dataclass
class StepContext:
    """The step being computed on this rank."""

    sizes: List[int]
    wall0: float
    cpu0: float
    synced: bool = False


@dataclass
class Stats:
    """What the last steps measured (for reports and the adaptive batch)."""

    step_wall_s: float = 0.0
    last_end: Optional[float] = None
    window_samples: int = 0
    window_start: Optional[float] = None
    throughput: float = 0.0
    loss: Optional[float] = None
    gns_skipped: int = 0
    speeds: List[float] = field(default_factory=list)
    max_compute_s: float = 0.0


class Job:
    """State of one data-parallel job on one rank (module docs)."""

    def __init__(
        self,
        *,
        num_samples: int,
        global_batch: int,
        controller: str,
        predictor: str,
        seed: int,
        caps: List[Optional[int]],
        gpu_like: bool,
        emulation: Emulation,
        adaptive_batch: bool,
        max_global_batch: Optional[int],
        adapt_every: int,
        checkpoint_dir: Optional[str],
    ):
        self.rank, self.world = _world()
        self.base_batch = global_batch
        self.caps = list(caps)
        session = _native.Session(global_batch, controller, predictor, seed, gpu_like)
        for r, cap in enumerate(caps):
            if cap is None:
                session.join(r)
            else:
                session.join(r, 1, cap)
        self.session = session
        decision = session.decide()
        self.batches: List[int] = list(decision[0])
        #: The speeds the session predicted for the coming step (samples/s; 0: none).
        self.predicted: List[float] = list(decision[1])
        self.gns = _native.Gns(float(global_batch))
        self.sampler = ElasticSampler(num_samples, seed)
        self.emulation = emulation
        self.monitor = LoadMonitor()
        self.signals = [(0.0, 0.0)] * self.world
        self.adaptive_batch = adaptive_batch
        self.max_global_batch = max_global_batch or global_batch
        self.adapt_every = adapt_every
        self.lr_gain = 1.0
        self.steps = 0
        self.samples = 0
        self.step_ctx: Optional[StepContext] = None
        self.stats = Stats()
        self.model: Optional["DataParallel"] = None
        self.optimizer: Optional[torch.optim.Optimizer] = None
        self.checkpoint_dir = checkpoint_dir
        self.stop_requested = False
        self.restored = False
        self.reporter = Reporter.from_env(self.rank)
        self.trace = Tracer.from_env(self.rank)
        self.started = time.perf_counter()
        self._prev_handler = None
        self._sigterm = False
        self._install_sigterm()

    # -- membership of the pieces -------------------------------------------------

    def attach(self, model: "DataParallel", optimizer: Optional[torch.optim.Optimizer]) -> None:
        self.model = model
        if optimizer is not None and optimizer is not self.optimizer:
            self.optimizer = optimizer
            optimizer.register_step_pre_hook(self._scale_lr)
            optimizer.register_step_post_hook(self._unscale_lr)

    def _scale_lr(self, opt, args, kwargs) -> None:
        if self.lr_gain != 1.0:
            for g in opt.param_groups:
                g["lr"] = g["lr"] * self.lr_gain

    def _unscale_lr(self, opt, args, kwargs) -> None:
        if self.lr_gain != 1.0:
            for g in opt.param_groups:
                g["lr"] = g["lr"] / self.lr_gain

    # -- SIGTERM ------------------------------------------------------------------

    def _install_sigterm(self) -> None:
        try:
            self._prev_handler = signal.signal(signal.SIGTERM, self._on_sigterm)
        except ValueError:  # not the main thread
            self._prev_handler = None

    def _on_sigterm(self, signum, frame) -> None:
        # Acted on at the next step's all-reduce, where every rank learns of it.
        self._sigterm = True

    def request_stop(self) -> None:
        """Checkpoint (to the checkpoint directory) and stop after the current step."""
        self._sigterm = True

    # -- a step ---------------------------------------------------------------------

    def begin_step(self) -> List[torch.Tensor]:
        """Sample indices of every rank for the next step; starts this rank's clock."""
        wall0 = time.perf_counter()
        cpu0 = time.thread_time()
        sizes = self.sampler.step_batches(self.batches)
        idx = self.sampler.take(self.batches)
        self.step_ctx = StepContext(sizes=sizes, wall0=wall0, cpu0=cpu0)
        if self.trace is not None:
            r = self.rank
            self.trace.row.update(
                t_begin=wall0, c_begin=cpu0, b=sizes[r], pred_v=self.predicted[r]
            )
        return idx

    def end_compute(self) -> Tuple[float, float, float]:
        """Ends this rank's compute (padding first when emulating): ``(compute_s,
        cpu_load, mem_load)``. Called before the gradients are flattened, so pacer's own
        synchronisation work is not counted (nor stretched) as device compute."""
        ctx = self.step_ctx
        assert ctx is not None
        if self.emulation.active:
            self.emulation.pad(ctx.wall0, ctx.cpu0, ctx.sizes[self.rank])
        compute = time.perf_counter() - ctx.wall0
        if self.trace is not None:
            em = self.emulation
            if em.active:
                self.trace.mark(
                    "pad_end", cpu=em.last_cpu, target=em.last_target, overrun=em.last_overrun
                )
            else:
                cpu = time.thread_time() - ctx.cpu0
                self.trace.mark("pad_end", cpu=cpu, target=compute, overrun=False)
        cpu, mem = self.monitor.sample()
        return compute, cpu, mem

    def local_row(self, measured: Tuple[float, float, float], grad_sqr: float) -> List[float]:
        """This rank's row of the step's gathered statistics."""
        ctx = self.step_ctx
        assert ctx is not None
        compute, cpu, mem = measured
        b = ctx.sizes[self.rank]
        return [compute, cpu, mem, grad_sqr if b > 0 else 0.0, float(b), float(self._sigterm)]

    def gathered(self, rows: List[List[float]], aggregate_sqr: float) -> None:
        """Every rank's row and ``|g|^2`` of the aggregate: the same on all ranks."""
        ctx = self.step_ctx
        assert ctx is not None
        sizes = ctx.sizes
        full = sum(sizes) == self.session.global_batch
        # Noise scale: ranks that computed something, as the runtime does.
        live = [(float(sizes[r]), rows[r][SQR]) for r in range(self.world) if sizes[r] > 0]
        if len(live) >= 2 and math.isfinite(aggregate_sqr):
            try:
                self.gns.observe([b for b, _ in live], [s for _, s in live], aggregate_sqr)
            except ValueError:
                self.stats.gns_skipped += 1
        else:
            self.stats.gns_skipped += 1
        if full:
            self.session.observe(
                [
                    (r, sizes[r], rows[r][COMPUTE], self.signals[r][0], self.signals[r][1])
                    for r in range(self.world)
                ]
            )
        self.signals = [(min(max(row[CPU], 0.0), 1.0), min(max(row[MEM], 0.0), 1.0)) for row in rows]
        for r, (c, m) in enumerate(self.signals):
            self.session.set_next_signals(r, c, m)
        if full:
            decision = self.session.decide()
            self.batches = list(decision[0])
            self.predicted = list(decision[1])
        self.stats.speeds = [
            sizes[r] / rows[r][COMPUTE] if rows[r][COMPUTE] > 0 else 0.0 for r in range(self.world)
        ]
        self.stats.max_compute_s = max(row[COMPUTE] for row in rows)
        self.stop_requested = any(row[STOP] > 0 for row in rows)
        self.steps += 1
        self.samples += sum(sizes)
        ctx.synced = True
        if self.adaptive_batch and self.steps % self.adapt_every == 0:
            self._adapt_global_batch()

    def end_step(self, loss: Optional[float] = None) -> None:
        """After the user's step: bookkeeping, reports, checkpoint-and-exit on a stop."""
        ctx = self.step_ctx
        if ctx is None or not ctx.synced:
            raise RuntimeError(
                "pacer_torch: the step ended without a gradient synchronisation; call "
                "backward() on a loss computed with the pacer_torch.DataParallel model, "
                "once per batch the DataLoader yields"
            )
        now = time.perf_counter()
        if self.trace is not None:
            self.trace.mark("end")
            self.trace.commit()
        st = self.stats
        if st.last_end is not None:
            st.step_wall_s = now - st.last_end
        st.last_end = now
        if st.window_start is None:
            st.window_start = ctx.wall0
        st.window_samples += sum(ctx.sizes)
        self.step_ctx = None
        if self.reporter is not None and self.reporter.due(now):
            span = now - st.window_start
            st.throughput = st.window_samples / span if span > 0 else 0.0
            st.window_samples, st.window_start = 0, now
            self.reporter.send(self.report(done=False))
        if self.stop_requested:
            self.checkpoint_and_exit()

    # -- adaptive global batch ----------------------------------------------------------

    def _adapt_global_batch(self) -> None:
        """Moves the global batch to the goodput-optimal one (python/README.md)."""
        v = sum(s for s in self.stats.speeds if s > 0)
        if v <= 0:
            return
        step = self.stats.step_wall_s or self.stats.max_compute_s
        overhead = max(step - self.stats.max_compute_s, 0.0)
        best = self.gns.best_global_batch(v, overhead, float(self.max_global_batch))
        if best is None:
            return
        new_b = int(round(best[0]))
        new_b = max(self.base_batch, min(new_b, self.max_global_batch))
        cur = self.session.global_batch
        if abs(new_b - cur) < 0.05 * cur:
            return
        self.set_global_batch(new_b)

    def set_global_batch(self, global_batch: int) -> None:
        """Changes the global batch from the next step on (session rebuilt with the same
        members and their recent observations); the LR gain follows it."""
        self.session = self.session.with_global_batch(global_batch)
        decision = self.session.decide()
        self.batches = list(decision[0])
        self.predicted = list(decision[1])
        gain = self.gns.gain(float(global_batch))
        self.lr_gain = gain if gain is not None and math.isfinite(gain) else 1.0

    # -- reports ------------------------------------------------------------------------

    def noise_scale(self) -> Optional[float]:
        ns = self.gns.noise_scale()
        return ns if ns is not None and math.isfinite(ns) else None

    def report(self, done: bool) -> Dict[str, object]:
        st = self.stats
        return {
            "step": self.steps,
            "samples": self.samples,
            "time_s": time.perf_counter() - self.started,
            "replicas": self.world,
            "device_type": os.environ.get("PACER_DEVICE_TYPE")
            or ("cuda" if torch.cuda.is_available() else "cpu"),
            "global_batch": self.session.global_batch,
            "local_batches": list(self.batches),
            "throughput": st.throughput,
            "step_time_s": st.step_wall_s,
            "noise_scale": self.noise_scale(),
            "loss": st.loss if st.loss is not None and math.isfinite(st.loss) else None,
            "done": done,
        }

    def finish(self) -> None:
        """Final report (``done: true``); waits at most 2 s for it."""
        if self.reporter is not None:
            self.reporter.send(self.report(done=True))
            self.reporter.close()

    # -- checkpoints ----------------------------------------------------------------

    def checkpoint_and_exit(self) -> None:
        from .checkpoint import save

        path = self.checkpoint_dir
        if path is None:
            raise RuntimeError(
                "pacer_torch: asked to stop, but no checkpoint directory was given "
                "(DataLoader(checkpoint_dir=...) or PACER_CHECKPOINT_DIR)"
            )
        save(self, path)
        if self.reporter is not None:
            self.reporter.close()
        from .env import destroy_process_group

        destroy_process_group()
        raise SystemExit(0)


def set_current(job: Optional[Job]) -> None:
    global _JOB
    _JOB = job
