"""The job context shared by ``DataLoader`` and ``DataParallel`` (one per process).

Each step, every rank contributes one row to a single all-reduce that also carries the
gradients (``parallel.py``): its compute time (padding included when emulating, the wait
for the others excluded), its load signals, ``|g_i|^2`` of its local mean gradient, its
local batch, whether it was asked to stop and whether it read the noise scale.

The noise scale's norms (``|g_i|^2`` before the reduction, ``|g|^2`` after) cost host
work every step, so they are taken only when something reads them (``noise_scale=`` of
the ``DataLoader``): with ``"auto"`` (the default) from the start when the global batch
is adaptive or the job reports to a service (``PACER_SERVER``, rank 0's environment),
otherwise from the first read on. A read while they are not taken (``noise_scale()``,
AdaScale's gain of ``set_global_batch``) returns None and marks the rank's next row; the
step whose all-reduce carries the mark turns them on, on every rank alike, for the steps
after it (``Job.norms``), so a read on one rank only cannot leave the ranks disagreeing.

One decision per job: only rank 0's Rust session (``pacer_torch._native.Session``)
decides. After step ``t``'s all-reduce it observes the gathered rows and decides the
batches of step ``t + 2`` (and, every ``adapt_every`` steps when adaptive, the global
batch and its learning-rate gain); that decision travels in step ``t + 1``'s all-reduce
(rank 0 writes it, the others write zeros, so the sum is rank 0's numbers exactly), and
every rank, rank 0 included, applies what it reads there. So all ranks run the same
decision every step without another message, one step after rank 0 made it. At the start,
after a resume and on the user's ``set_global_batch`` the decision is broadcast once.
With a ``lookahead`` of ``k`` steps (a loader whose workers prefetch ``k`` steps), every
rank queues what it reads and applies it ``k`` steps later, so the decisions of the
coming ``k + 1`` steps are known on every rank (``known_decision``).
"""

from __future__ import annotations

import math
import os
import signal
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable, Dict, List, Optional, Tuple, Union

import torch
import torch.distributed as dist

from . import _native
from .gradnorm import ConsecutiveSteps
from .report import Reporter
from .sampler import ElasticSampler, StreamPosition
from .signals import Emulation, LoadMonitor
from .state import UserState
from .trace import Tracer

if TYPE_CHECKING:  # pragma: no cover
    from .parallel import DataParallel

#: Columns of a rank's row in the gathered statistics (CKPT: rank 0's clock says a
#: periodic checkpoint is due; ASK_NORMS: the rank read the noise scale while its norms
#: were not taken, module docs).
ROW = 8
COMPUTE, CPU, MEM, SQR, BATCH, STOP, CKPT, ASK_NORMS = range(ROW)

#: ``DataLoader(noise_scale=)``: take the noise scale's norms when something reads them
#: (module docs), always, or never.
NOISE_SCALE_MODES = ("auto", True, False)

#: Learning-rate scaling rules of the adaptive global batch (``DataLoader(lr_rule=)``):
#: AdaScale's gain (the default, as AdaptDL's), the square-root rule, the linear rule.
LR_RULES = ("adascale", "sqrt", "linear")

#: Exit status of every rank after a stop's checkpoint (SIGTERM or ``request_stop``):
#: 128 + SIGTERM, the shell's "ended by SIGTERM", so that torchrun, Slurm and other
#: orchestrators read "stopped before the end", not "finished".
STOP_EXIT_STATUS = 143

_JOB: Optional["Job"] = None

#: Largest global batch the decision slot of the all-reduce carries exactly: integers
#: travel as floats of the gradients' type, float32 at least (24-bit mantissa).
MAX_SLOT_BATCH = 1 << 24


@dataclass
class Decision:
    """What one step runs: its global batch, the learning-rate gain of that batch and
    every rank's local batch (with the speeds the session predicted for them)."""

    global_batch: int
    lr_gain: float
    batches: List[int]
    predicted: List[float]

    @staticmethod
    def slot_len(world: int) -> int:
        return 2 + 2 * world

    def encode(self) -> List[float]:
        return [float(self.global_batch), float(self.lr_gain)] + [
            float(b) for b in self.batches
        ] + [float(v) for v in self.predicted]

    @staticmethod
    def decode(values: List[float], world: int) -> "Decision":
        """The decision rank 0 wrote in the all-reduce; checked, since every rank acts
        on it (a RuntimeError on every rank alike when it is not one)."""
        g, gain = values[0], values[1]
        batches = values[2 : 2 + world]
        ok = (
            len(values) == Decision.slot_len(world)
            and all(math.isfinite(v) and v >= 0 and v == int(v) for v in [g] + batches)
            and math.isfinite(gain)
            and gain > 0
            and sum(int(b) for b in batches) == int(g)
        )
        if not ok:
            raise RuntimeError(
                f"pacer_torch: the decision received from rank 0 is not one: {values} "
                f"(expected a global batch, a gain > 0 and {world} batches summing to it)"
            )
        return Decision(
            int(g), float(gain), [int(b) for b in batches], list(values[2 + world :])
        )

    def copy(self) -> "Decision":
        return Decision(self.global_batch, self.lr_gain, list(self.batches), list(self.predicted))

    def state_dict(self) -> Dict[str, object]:
        return {
            "global_batch": self.global_batch,
            "lr_gain": self.lr_gain,
            "batches": list(self.batches),
            "predicted": list(self.predicted),
        }

    @staticmethod
    def from_state(st: Dict[str, Any]) -> "Decision":
        return Decision(
            int(st["global_batch"]),
            float(st["lr_gain"]),
            [int(b) for b in st["batches"]],
            [float(v) for v in st["predicted"]],
        )


def _dist_on() -> bool:
    return dist.is_available() and dist.is_initialized()


def check_noise_scale(noise_scale: Any, adaptive_batch: bool) -> None:
    """A ValueError naming ``noise_scale`` unless it is one of ``NOISE_SCALE_MODES``
    and, with an adaptive global batch, not False."""
    if not (noise_scale is True or noise_scale is False or noise_scale == "auto"):
        raise ValueError(f"noise_scale: {noise_scale!r} (expected 'auto', True or False)")
    if noise_scale is False and adaptive_batch:
        raise ValueError(
            "noise_scale: False, but adaptive_batch=True chooses the global batch from the "
            "gradient noise scale (pass noise_scale='auto' or True)"
        )


def share_from_rank0(rank: int, make: Callable[[], Any]) -> Any:
    """``make()`` run on rank 0 only, its result broadcast to every rank (a collective:
    every rank calls it at the same point). A ValueError on rank 0 is raised on every
    rank, with rank 0's message, so no rank is left waiting for the others."""
    payload: Tuple[str, Any] = ("ok", None)
    if rank == 0:
        try:
            payload = ("ok", make())
        except ValueError as e:
            payload = ("error", str(e))
    if _dist_on() and dist.get_world_size() > 1:
        box = [payload]
        dist.broadcast_object_list(box, src=0)
        payload = box[0]
    if payload[0] == "error":
        raise ValueError(payload[1])
    return payload[1]


def current() -> Optional["Job"]:
    """The process's job (set by ``DataLoader``), or None."""
    return _JOB


def _cuda_in_use() -> bool:
    """Whether this process computes on CUDA: torch has initialised CUDA here (a model
    or tensor was moved to a GPU). A job on the CPU of a GPU machine does not."""
    return torch.cuda.is_initialized()  # (only ever true where CUDA is available)


def _world() -> tuple:
    if dist.is_available() and dist.is_initialized():
        return dist.get_rank(), dist.get_world_size()
    return 0, 1


@dataclass
class StepContext:
    """The step being computed on this rank."""

    sizes: List[int]
    #: The step's global batch (the sizes sum to it except on an epoch's last step).
    global_batch: int
    wall0: float
    cpu0: float
    synced: bool = False
    #: Whether this step takes the noise scale's norms (``Job.norms`` at its start).
    norms: bool = False
    #: On CUDA: events around this rank's compute on the current stream (the host's
    #: clock sees only when kernels were queued, not when they ran).
    ev_begin: Any = None
    ev_end: Any = None


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
        num_samples: Optional[int],
        global_batch: int,
        controller: str,
        predictor: str,
        seed: int,
        caps: List[Optional[int]],
        minima: Optional[List[int]] = None,
        min_explicit: bool = False,
        gpu_like: bool,
        emulation: Emulation,
        adaptive_batch: bool,
        max_global_batch: Optional[int],
        adapt_every: int,
        checkpoint_dir: Optional[str],
        checkpoint_every_steps: Optional[int] = None,
        checkpoint_every_s: Optional[float] = None,
        lookahead: int = 0,
        lr_rule: str = "adascale",
        noise_scale: Union[str, bool] = "auto",
    ):
        self.rank, self.world = _world()
        #: How many steps beyond the coming one every rank knows the decision of (a
        #: loader's prefetch depth): a decision takes effect ``1 + lookahead`` steps
        #: after the all-reduce that carries it (module docs).
        self.lookahead = int(lookahead)
        if lr_rule not in LR_RULES:
            raise ValueError(
                f"lr_rule: unknown `{lr_rule}` (expected one of {', '.join(LR_RULES)})"
            )
        #: How a global batch's learning-rate gain is chosen (``LR_RULES``).
        self.lr_rule = lr_rule
        check_noise_scale(noise_scale, adaptive_batch)
        self.base_batch = global_batch
        self.caps = list(caps)
        #: Each rank's smallest local batch (``min_local_batch``).
        self.minima: List[int] = list(minima) if minima is not None else [1] * len(caps)
        #: Whether the user gave ``min_local_batch`` (else derived from the model).
        self.min_explicit = min_explicit
        # Built on every rank, so that a bad configuration is the same ValueError
        # everywhere; only rank 0's decides (module docs).
        session = _native.Session(global_batch, controller, predictor, seed, gpu_like)
        for r in range(len(caps)):
            self.join(session, r)
        #: Rank 0: the session that decides for the job. Other ranks: None.
        self.session: Optional[_native.Session] = session if self.rank == 0 else None

        def first() -> Tuple[Decision, Union[str, bool], bool]:
            on = noise_scale is True or (
                noise_scale == "auto" and (adaptive_batch or bool(os.environ.get("PACER_SERVER")))
            )
            return self._first_decision(1.0), noise_scale, on

        # Rank 0's decision, ``noise_scale`` and whether the norms are taken from the
        # start (its environment's PACER_SERVER: it alone reports): the same everywhere.
        decision, mode, norms = share_from_rank0(self.rank, first)
        #: The coming step's decision (the same on every rank).
        self.next: Decision = decision
        #: ``noise_scale=`` (``NOISE_SCALE_MODES``), as rank 0 was given it.
        self.noise_scale_mode: Union[str, bool] = mode
        #: Whether the coming step takes the noise scale's norms (the same on every rank;
        #: "auto" turns it on after a read, module docs). Never turned off.
        self.norms: bool = norms
        #: This rank read the noise scale while the norms were not taken ("auto"): its
        #: next row says so (``ASK_NORMS``).
        self.norms_asked = False
        #: Rank 0: the decision it sends in the coming step's all-reduce (for the step
        #: after). Other ranks: None.
        self.pending: Optional[Decision] = self.next.copy() if self.rank == 0 else None
        #: The decisions of the ``lookahead`` steps after the coming one (the same on
        #: every rank).
        self.ahead: List[Decision] = [self.next.copy() for _ in range(self.lookahead)]
        #: Changed whenever decisions already known are replaced (``share_decision``,
        #: ``set_batches``): batches prefetched for them are stale then.
        self.decisions_version = 0
        self._lr_gain = 1.0
        self.gns = _native.Gns(float(global_batch))
        #: One rank: the noise scale from consecutive steps (``ConsecutiveSteps``);
        #: more ranks: from the ranks' gradients of each step (``gathered``).
        self.one_rank: Optional[ConsecutiveSteps] = ConsecutiveSteps() if self.world == 1 else None
        #: Map-style data: the permutation's position; iterable data (``num_samples``
        #: None): the stream's.
        self.sampler: Union[ElasticSampler, StreamPosition] = (
            ElasticSampler(num_samples, seed) if num_samples is not None else StreamPosition()
        )
        self.sampler.minima, self.sampler.caps = self.minima, self.caps
        self.emulation = emulation
        self.monitor = LoadMonitor()
        self.signals = [(0.0, 0.0)] * self.world
        self.adaptive_batch = adaptive_batch
        self.max_global_batch = max_global_batch or global_batch
        self.adapt_every = adapt_every
        self.steps = 0
        self.samples = 0
        self.step_ctx: Optional[StepContext] = None
        self.stats = Stats()
        self.model: Optional["DataParallel"] = None
        self.optimizer: Optional[torch.optim.Optimizer] = None
        self.checkpoint_dir = checkpoint_dir
        self.checkpoint_every_steps = checkpoint_every_steps
        self.checkpoint_every_s = checkpoint_every_s
        #: When the last checkpoint was written or resumed (rank 0's clock decides).
        self.last_checkpoint_t = time.monotonic()
        #: The step that just ran ends with a periodic checkpoint (agreed by all ranks).
        self.checkpoint_due = False
        #: The script's own objects and values saved in the checkpoint (``pacer.state()``).
        self.user_state = UserState()
        self.stop_requested = False
        self.restored = False
        self.reporter = Reporter.from_env(self.rank)
        self.trace = Tracer.from_env(self.rank)
        self.started = time.perf_counter()
        self._prev_handler = None
        self._sigterm = False
        self._install_sigterm()

    # -- the decision -----------------------------------------------------------------

    @property
    def batches(self) -> List[int]:
        """Every rank's local batch of the coming step."""
        return self.next.batches

    @property
    def predicted(self) -> List[float]:
        """The speeds the session predicted for the coming step (samples/s; 0: none)."""
        return self.next.predicted

    @property
    def global_batch(self) -> int:
        """The coming step's global batch."""
        return self.next.global_batch

    @property
    def lr_gain(self) -> float:
        """The learning-rate gain ``optimizer.step()`` applies: the one of the step in
        progress (or of the last one, between steps)."""
        return self._lr_gain

    @lr_gain.setter
    def lr_gain(self, gain: float) -> None:
        """Sets the gain from the coming step on (every rank, the same value)."""
        gain = float(gain)
        if not (math.isfinite(gain) and gain > 0):
            raise ValueError(f"lr_gain: {gain} (expected a finite number > 0)")
        self._lr_gain = gain
        self.next.lr_gain = gain
        for d in self.ahead:
            d.lr_gain = gain
        if self.pending is not None:
            self.pending.lr_gain = gain

    def _first_decision(self, lr_gain: float) -> Decision:
        """Rank 0: the session's decision for the coming step (no observation in between)."""
        assert self.session is not None
        d = self.session.decide()
        return Decision(self.session.global_batch, lr_gain, list(d[0]), list(d[1]))

    def share_decision(self, make: Callable[[], Decision]) -> None:
        """A decision made now by rank 0 (``make``), broadcast: the coming step and the
        one after run it (collective)."""
        self.next = share_from_rank0(self.rank, make)
        self.ahead = [self.next.copy() for _ in range(self.lookahead)]
        self.decisions_version += 1
        self._lr_gain = self.next.lr_gain
        if self.rank == 0:
            self.pending = self.next.copy()

    def known_decision(self, ahead: int) -> Decision:
        """The decision of the step ``ahead`` steps after the coming one (0: the coming
        one); known up to ``lookahead``."""
        if ahead == 0:
            return self.next
        if not 0 < ahead <= len(self.ahead):
            raise RuntimeError(
                f"pacer_torch: the batch of {ahead} steps ahead is not decided yet (the "
                f"loader looks {len(self.ahead)} steps ahead; a bug in the prefetch depth)"
            )
        return self.ahead[ahead - 1]

    # -- membership of the pieces -------------------------------------------------

    def join(self, session: "_native.Session", r: int) -> None:
        """Rank ``r`` joins ``session`` with this job's bounds for it."""
        lo, cap = self.minima[r], self.caps[r]
        if lo == 1 and cap is None:
            session.join(r)  # the session's default bounds
        else:
            session.join(r, lo, cap)

    def require_min_local_batch(self, need: int, why: str) -> None:
        """Raises every rank's minimum local batch to ``need`` (collective: every rank
        calls it at the same point, before the first step); ``why`` names the cause in
        the error when the global batch cannot give every rank that many."""
        minima = [max(m, need) for m in self.minima]
        if minima == self.minima:
            return
        total = sum(minima)
        if total > self.next.global_batch:
            raise ValueError(
                f"min_local_batch: {why} need {need} samples per rank, {total} in all, "
                f"more than the global batch {self.next.global_batch}"
            )
        bad = [r for r, c in enumerate(self.caps) if c is not None and c < minima[r]]
        if bad:
            raise ValueError(
                f"min_local_batch: {why} need {need} samples per rank, above rank "
                f"{bad[0]}'s max_local_batch {self.caps[bad[0]]}"
            )
        self.minima = minima
        self.sampler.minima = minima

        def rebuilt() -> Decision:
            assert self.session is not None
            for r in range(self.world):
                self.session.leave(r)
                self.join(self.session, r)
            return self._first_decision(self.next.lr_gain)

        self.share_decision(rebuilt)

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

    def begin_step(
        self,
        sizes: Optional[List[int]] = None,
        started: Optional[Tuple[float, float]] = None,
    ) -> List[torch.Tensor]:
        """Sample indices of every rank for the next step; starts this rank's clock.
        A stream (iterable data) passes the step's ``sizes`` instead (the decision's
        batches, or at the end of the stream what is left split in proportion), and
        gets no indices; ``started``: the clock's start (``perf_counter``,
        ``thread_time``) when it began before (the stream's read)."""
        wall0, cpu0 = started if started is not None else (time.perf_counter(), time.thread_time())
        nxt = self.next
        if sizes is None:
            assert isinstance(self.sampler, ElasticSampler)
            sizes = self.sampler.step_batches(nxt.batches)
            idx = self.sampler.take(nxt.batches)
        else:
            self.sampler.offset += sum(sizes)
            idx = []
        self._lr_gain = nxt.lr_gain
        self.step_ctx = StepContext(
            sizes=sizes, global_batch=nxt.global_batch, wall0=wall0, cpu0=cpu0, norms=self.norms
        )
        if _cuda_in_use():
            ev = torch.cuda.Event(enable_timing=True)
            ev.record()
            self.step_ctx.ev_begin = ev
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
        if ctx.ev_begin is not None:
            if self.emulation.active:
                # The padding stretches the host's wall time: first wait for the kernels.
                torch.cuda.synchronize()
                ctx.ev_begin = None
            else:
                # Read in ``local_row`` (the DDP engine calls this at its first bucket,
                # where waiting for the device would stall the backward pass's launches).
                ctx.ev_end = torch.cuda.Event(enable_timing=True)
                ctx.ev_end.record()
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
        if ctx.ev_end is not None:
            # The device's time from the step's start (once it has run what was queued
            # before: the last step's update) to the end of this rank's backward pass.
            ctx.ev_end.synchronize()
            compute = ctx.ev_begin.elapsed_time(ctx.ev_end) / 1e3
        b = ctx.sizes[self.rank]
        due = (
            self.rank == 0
            and self.checkpoint_every_s is not None
            and time.monotonic() - self.last_checkpoint_t >= self.checkpoint_every_s
        )
        return [
            compute,
            cpu,
            mem,
            grad_sqr if b > 0 else 0.0,
            float(b),
            float(self._sigterm),
            float(due),
            float(self.norms_asked),
        ]

    def decision_slot(self) -> List[float]:
        """This rank's part of the all-reduce's decision slot: rank 0's pending
        decision, zeros elsewhere."""
        if self.pending is not None:
            return self.pending.encode()
        return [0.0] * Decision.slot_len(self.world)

    def gathered(
        self,
        rows: List[List[float]],
        aggregate_sqr: float,
        decision: List[float],
        one_rank: Optional[Tuple[float, float, float]] = None,
    ) -> None:
        """Every rank's row, ``|g|^2`` of the aggregate and rank 0's decision for the
        next step: the same on all ranks. ``one_rank``: with one rank, the step's
        noise-scale estimate from the last steps (``ConsecutiveSteps``)."""
        ctx = self.step_ctx
        assert ctx is not None
        sizes = ctx.sizes
        full = sum(sizes) == ctx.global_batch
        received = Decision.decode(decision, self.world)
        if self.lookahead:
            self.ahead.append(received)
            self.next = self.ahead.pop(0)
        else:
            self.next = received
        # The noise scale (a step that took no norms has nothing to observe).
        if ctx.norms:
            self._observe_noise(sizes, rows, aggregate_sqr, one_rank)
        if not self.norms and any(row[ASK_NORMS] > 0 for row in rows):
            # A rank read the noise scale: every rank takes the norms from the next step.
            self.norms = True
            self.norms_asked = False
        session = self.session
        if session is not None and full:
            session.observe(
                [
                    (r, sizes[r], rows[r][COMPUTE], self.signals[r][0], self.signals[r][1])
                    for r in range(self.world)
                ]
            )
        self.signals = [(min(max(row[CPU], 0.0), 1.0), min(max(row[MEM], 0.0), 1.0)) for row in rows]
        if session is not None:
            for r, (c, m) in enumerate(self.signals):
                session.set_next_signals(r, c, m)
        self.stats.speeds = [
            sizes[r] / rows[r][COMPUTE] if rows[r][COMPUTE] > 0 else 0.0 for r in range(self.world)
        ]
        self.stats.max_compute_s = max(row[COMPUTE] for row in rows)
        self.stop_requested = any(row[STOP] > 0 for row in rows)
        self.steps += 1
        every = self.checkpoint_every_steps
        self.checkpoint_due = rows[0][CKPT] > 0 or (every is not None and self.steps % every == 0)
        self.samples += sum(sizes)
        ctx.synced = True
        if session is not None and full:
            assert self.pending is not None
            if self.adaptive_batch and self.steps % self.adapt_every == 0:
                adapted = self._adapt_global_batch()
                if adapted is not None:
                    self.pending = adapted
                    return
            d = session.decide()
            self.pending = Decision(
                session.global_batch, self.pending.lr_gain, list(d[0]), list(d[1])
            )

    def _observe_noise(
        self,
        sizes: List[int],
        rows: List[List[float]],
        aggregate_sqr: float,
        one_rank: Optional[Tuple[float, float, float]],
    ) -> None:
        """The step's norms to the noise scale: of the ranks that computed something,
        as the runtime does; with one rank, its estimate from consecutive steps."""
        live = [(float(sizes[r]), rows[r][SQR]) for r in range(self.world) if sizes[r] > 0]
        try:
            if len(live) >= 2 and math.isfinite(aggregate_sqr):
                self.gns.observe([b for b, _ in live], [s for _, s in live], aggregate_sqr)
            elif one_rank is not None:
                self.gns.observe_estimate(*one_rank)
            else:
                self.stats.gns_skipped += 1
        except ValueError:
            self.stats.gns_skipped += 1

    def leave_step(self) -> None:
        """The user's loop left the DataLoader inside a step (``break`` or ``return``
        right after it, or an exception): the DataLoader's iterator is closed before it
        could end the step. A step that synchronised its gradients ends here, on this
        rank alone (its bookkeeping and report); a checkpoint or stop due on it is not
        written, since writing one is collective and the loop may have been left on
        this rank only: a warning says so. A step left before ``backward()`` is
        dropped."""
        ctx = self.step_ctx
        if ctx is None:
            return
        if not ctx.synced:
            self.step_ctx = None
            return
        self.end_step(collective=False)

    def end_step(self, loss: Optional[float] = None, collective: bool = True) -> None:
        """After the user's step: bookkeeping, reports, checkpoint-and-exit on a stop
        (``collective=False``: not the checkpoint, ``leave_step``)."""
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
        if not collective:
            if self.stop_requested or self.checkpoint_due:
                import warnings

                warnings.warn(
                    f"pacer_torch: the loop left the DataLoader right after step "
                    f"{self.steps}, whose {'stop' if self.stop_requested else 'checkpoint'} "
                    "was due; its checkpoint is not written (every rank writes it "
                    "together, and the loop may have been left on this rank only). Ask "
                    "the DataLoader for the next batch before leaving the loop, or call "
                    "pacer.save_checkpoint(dir) on every rank after it (python/README.md, "
                    "\"Leaving the loop\")",
                    RuntimeWarning,
                    stacklevel=2,
                )
            return
        if self.stop_requested:
            self.checkpoint_and_exit()
        elif self.checkpoint_due:
            from .checkpoint import save

            assert self.checkpoint_dir is not None  # checked by the DataLoader
            save(self, self.checkpoint_dir)

    # -- adaptive global batch ----------------------------------------------------------

    def _adapt_global_batch(self) -> Optional[Decision]:
        """Rank 0: the goodput-optimal global batch (python/README.md) as a decision,
        or None when the current one stays. The step time is rank 0's (the all-reduce
        keeps the ranks' steps in step), the speeds and noise scale everyone's."""
        assert self.session is not None
        v = sum(s for s in self.stats.speeds if s > 0)
        if v <= 0:
            return None
        step = self.stats.step_wall_s or self.stats.max_compute_s
        overhead = max(step - self.stats.max_compute_s, 0.0)
        best = self.gns.best_global_batch(v, overhead, float(self.max_global_batch))
        if best is None:
            return None
        new_b = int(round(best[0]))
        new_b = max(self.base_batch, min(new_b, self.max_global_batch))
        if all(c is not None for c in self.caps):
            new_b = min(new_b, sum(self.caps))  # type: ignore[arg-type]
        cur = self.session.global_batch
        if abs(new_b - cur) < 0.05 * cur:
            return None
        try:
            return self._rebuild(new_b)
        except ValueError:  # bounds that cannot hold it: keep the batch (rank 0 alone)
            return None

    def _rebuild(self, global_batch: int) -> Decision:
        """Rank 0: the session rebuilt at ``global_batch`` (same members, their recent
        observations) and its first decision, with the AdaScale gain of that batch."""
        assert self.session is not None
        if global_batch > MAX_SLOT_BATCH:
            raise ValueError(
                f"global_batch: {global_batch} exceeds {MAX_SLOT_BATCH} (2^24, the largest "
                "the per-step decision carries exactly)"
            )
        session = self.session.with_global_batch(global_batch)
        d = session.decide()
        self.session = session
        gain = self.rule_gain(global_batch)
        return Decision(global_batch, gain, list(d[0]), list(d[1]))

    def rule_gain(self, global_batch: int) -> float:
        """The learning-rate gain of ``global_batch`` against the base global batch by
        ``lr_rule``: AdaScale's ``r`` (from the noise scale; 1 while unresolved), the
        square root of the ratio, or the ratio."""
        ratio = global_batch / self.base_batch
        if self.lr_rule == "sqrt":
            return math.sqrt(ratio)
        if self.lr_rule == "linear":
            return ratio
        gain = self.gns.gain(float(global_batch)) if self._may_read_noise() else None
        return gain if gain is not None and math.isfinite(gain) and gain > 0 else 1.0

    def set_global_batch(self, global_batch: int) -> None:
        """Changes the global batch from the coming step on (every rank calls it, between
        steps: rank 0 rebuilds its session with the same members and their recent
        observations and broadcasts the decision); the LR gain follows it."""
        self.share_decision(lambda: self._rebuild(int(global_batch)))

    # -- reports ------------------------------------------------------------------------

    def _may_read_noise(self) -> bool:
        """Whether the noise scale's estimate is kept up (its norms are taken). Under
        "auto" a read while they are not asks every rank to take them (module docs)."""
        if not self.norms and self.noise_scale_mode == "auto":
            self.norms_asked = True
        return self.norms

    def noise_scale(self) -> Optional[float]:
        """The gradient noise scale ``B_noise`` in samples, or None: before its first
        estimate, always with ``noise_scale=False``, and with "auto" while its norms are
        not taken: then this read asks for them, which every rank learns in the next
        step's all-reduce, and the steps after that one take them (module docs)."""
        if not self._may_read_noise():
            return None
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
            "global_batch": self.global_batch,
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
        # Stopping now whatever else is said: a launcher that sees one rank exit tells
        # the others with SIGTERM, which during the interpreter's shutdown (its own
        # handlers gone) would end them by the signal instead of with our status.
        try:
            signal.signal(signal.SIGTERM, signal.SIG_IGN)
        except ValueError:  # not the main thread
            pass
        if self.reporter is not None:
            self.reporter.close()
        from .env import destroy_process_group

        destroy_process_group()
        raise SystemExit(STOP_EXIT_STATUS)


def set_current(job: Optional[Job]) -> None:
    global _JOB
    _JOB = job
