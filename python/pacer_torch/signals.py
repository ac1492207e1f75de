"""Load signals of this rank's machine, and the heterogeneity emulation.

Load signals (the speed predictors' exogenous inputs, fractions in [0, 1]), read from
``/proc`` between two calls (zeros where ``/proc`` is missing):

- ``cpu_load``: the share of the machine's CPU time used by *other* processes since the
  last call (busy time in ``/proc/stat`` minus this process's own CPU time);
- ``mem_load``: the share of memory in use (``1 - MemAvailable / MemTotal``).

Emulation (``speed`` < 1), with the meaning of ``pacer train --speeds``: a rank of speed
``s`` computes for real, then sleeps until ``time_scale * cpu / s`` seconds have passed
since its step began, where ``cpu`` is the CPU time its training thread used for the
step (with ``OMP_NUM_THREADS=1`` the forward and backward passes run on it). CPU time, not
wall time, because four one-thread ranks on a two-core machine queue for the
cores and their wall time measures the contention, not their work; ``cpu / s`` is the
time the work would take on a dedicated core ``s`` times as fast, so the ratios between
ranks are exactly the configured ones. ``time_scale`` stretches every rank alike so that
the CPU all ranks need fits the cores there are (it changes absolute times, never
ratios). A step whose real wall time already exceeds its target is not padded (an
"overrun", counted).

The CPU time of one step's compute is itself noisy on a shared machine: on the 2-core
build machine under load ~13, one process repeating the MLP step had a coefficient of
variation of 8 % at 204 samples, 17 % at 78 and 32 % at 19 (cache and core sharing
with other processes, the interpreter; python/README.md, "Benchmark"). Padded to
``time_scale * cpu / s`` that noise becomes the emulated device's own, step by step,
and the slowest rank (smallest batch, most fixed cost) is the noisiest. ``cost``
(``calibrate_cost``) gives the alternative: a noise-free device whose compute takes
``time_scale * (fixed + per_sample * b) / s`` for a local batch ``b``, from CPU costs
measured once (the medians of repeated steps). The real compute still runs; only the
length it is padded to no longer follows the step's own CPU time.
"""

from __future__ import annotations

import os
import time
import math
import statistics
from typing import Callable, Optional, Sequence, Tuple


def _read_proc_stat() -> Optional[Tuple[float, float]]:
    try:
        with open("/proc/stat") as f:
            parts = f.readline().split()
    except OSError:
        return None
    if not parts or parts[0] != "cpu":
        return None
    v = [float(x) for x in parts[1:]]
    idle = v[3] + (v[4] if len(v) > 4 else 0.0)
    return sum(v), idle


def _mem_load() -> float:
    try:
        total = avail = None
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemTotal:"):
                    total = float(line.split()[1])
                elif line.startswith("MemAvailable:"):
                    avail = float(line.split()[1])
                if total is not None and avail is not None:
                    break
        if total and avail is not None:
            return min(max(1.0 - avail / total, 0.0), 1.0)
    except (OSError, ValueError):
        pass
    return 0.0


class LoadMonitor:
    """``sample()`` → ``(cpu_load, mem_load)`` since the previous reading.

    ``/proc`` is read at most every ``min_interval_s`` seconds (default 0.1 s); a call
    sooner returns the last values. ``/proc/stat`` counts in clock ticks (10 ms), so a
    window of one short step would be mostly rounding, and reading both files on every
    step cost 0.04 ms (warm) to 0.24 ms (timed inside a training step) of CPU per step.
    """

    def __init__(self, min_interval_s: float = 0.1) -> None:
        self._tick = float(os.sysconf("SC_CLK_TCK")) if hasattr(os, "sysconf") else 100.0
        self._last = _read_proc_stat()
        self._own = time.process_time()
        self.min_interval_s = float(min_interval_s)
        self._at = time.monotonic()
        self._values: Optional[Tuple[float, float]] = None
        #: How many times ``/proc`` was read.
        self.reads = 0

    def sample(self) -> Tuple[float, float]:
        t = time.monotonic()
        if self._values is not None and t - self._at < self.min_interval_s:
            return self._values
        self._at = t
        self.reads += 1
        now = _read_proc_stat()
        own = time.process_time()
        cpu = 0.0
        if now is not None and self._last is not None:
            total = now[0] - self._last[0]
            busy = total - (now[1] - self._last[1])
            own_ticks = (own - self._own) * self._tick
            if total > 0:
                cpu = min(max((busy - own_ticks) / total, 0.0), 1.0)
        self._last, self._own = now, own
        self._values = (cpu, _mem_load())
        return self._values


class Emulation:
    """Pads a rank's compute to ``time_scale * cpu / speed`` (module docs)."""

    def __init__(
        self,
        speed: float = 1.0,
        time_scale: float = 1.0,
        cost: Optional[Tuple[float, float]] = None,
    ):
        if not (speed > 0 and speed <= 1e6):
            raise ValueError(f"speed: {speed!r} (expected a number > 0)")
        if not (time_scale >= 1.0 and time_scale <= 1e6):
            raise ValueError(f"time_scale: {time_scale!r} (expected a number >= 1)")
        if cost is not None:
            try:
                fixed, per_sample = (float(c) for c in cost)
            except (TypeError, ValueError):
                raise ValueError(
                    f"emulation_cost: {cost!r} (expected (fixed_s, per_sample_s))"
                ) from None
            if not (
                math.isfinite(fixed) and math.isfinite(per_sample) and fixed >= 0 and per_sample > 0
            ):
                raise ValueError(
                    f"emulation_cost: {cost!r} (expected finite fixed_s >= 0 and per_sample_s > 0)"
                )
            cost = (fixed, per_sample)
        self.speed = float(speed)
        self.time_scale = float(time_scale)
        self.cost = cost
        self.overruns = 0
        self.steps = 0
        #: The last ``pad``: CPU seconds of the compute, the emulated compute it was
        #: padded to, and whether the real compute already took longer (``trace.py``).
        self.last_cpu = 0.0
        self.last_target = 0.0
        self.last_overrun = False

    @property
    def active(self) -> bool:
        return self.speed != 1.0 or self.time_scale != 1.0 or self.cost is not None

    def pad(self, wall_start: float, cpu_start: float, batch: int = 0) -> None:
        """Sleeps until the emulated compute of a local batch of ``batch`` samples is
        over (``batch`` matters only with a ``cost``)."""
        self.steps += 1
        cpu = time.thread_time() - cpu_start
        if self.cost is None:
            target = self.time_scale * cpu / self.speed
        else:
            fixed, per_sample = self.cost
            target = self.time_scale * (fixed + per_sample * batch) / self.speed
        self.last_cpu, self.last_target = cpu, target
        left = wall_start + target - time.perf_counter()
        self.last_overrun = left <= 0
        if left > 0:
            time.sleep(left)
        else:
            self.overruns += 1


def calibrate_cost(
    step: Callable[[int], object], sizes: Sequence[int], reps: int = 20, warmup: int = 3
) -> Tuple[float, float]:
    """``(fixed_s, per_sample_s)``: the least-squares line through the median thread CPU
    time of ``step(b)`` (one step's compute on ``b`` samples) at each of ``sizes``,
    ``reps`` times each after ``warmup`` untimed calls; for ``Emulation(cost=...)``."""
    sizes = [int(b) for b in sizes]
    if len(set(sizes)) < 2 or min(sizes) < 1:
        raise ValueError(f"sizes: {sizes} (expected at least two distinct sizes >= 1)")
    if reps < 1 or warmup < 0:
        raise ValueError(f"reps: {reps}, warmup: {warmup} (expected reps >= 1, warmup >= 0)")
    med = []
    for b in sizes:
        for _ in range(warmup):
            step(b)
        times = []
        for _ in range(reps):
            c0 = time.thread_time()
            step(b)
            times.append(time.thread_time() - c0)
        med.append(statistics.median(times))
    mx = statistics.fmean(sizes)
    my = statistics.fmean(med)
    sxx = sum((x - mx) ** 2 for x in sizes)
    slope = sum((x - mx) * (y - my) for x, y in zip(sizes, med)) / sxx
    if not slope > 0:
        raise ValueError(
            f"sizes: the step's CPU time did not grow with the batch (medians {med} s at {sizes})"
        )
    fixed = max(my - slope * mx, 0.0)
    return fixed, slope
