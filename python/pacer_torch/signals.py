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
"""

from __future__ import annotations

import os
import time
from typing import Optional, Tuple


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
    """``sample()`` → ``(cpu_load, mem_load)`` since the previous call."""

    def __init__(self) -> None:
        self._tick = float(os.sysconf("SC_CLK_TCK")) if hasattr(os, "sysconf") else 100.0
        self._last = _read_proc_stat()
        self._own = time.process_time()

    def sample(self) -> Tuple[float, float]:
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
        return cpu, _mem_load()


class Emulation:
    """Pads a rank's compute to ``time_scale * cpu / speed`` (module docs)."""

    def __init__(self, speed: float = 1.0, time_scale: float = 1.0):
        if not (speed > 0 and speed <= 1e6):
            raise ValueError(f"speed: {speed!r} (expected a number > 0)")
        if not (time_scale >= 1.0 and time_scale <= 1e6):
            raise ValueError(f"time_scale: {time_scale!r} (expected a number >= 1)")
        self.speed = float(speed)
        self.time_scale = float(time_scale)
        self.overruns = 0
        self.steps = 0

    @property
    def active(self) -> bool:
        return self.speed != 1.0 or self.time_scale != 1.0

    def pad(self, wall_start: float, cpu_start: float) -> None:
        """Sleeps until the emulated step is over."""
        self.steps += 1
        cpu = time.thread_time() - cpu_start
        target = self.time_scale * cpu / self.speed
        left = wall_start + target - time.perf_counter()
        if left > 0:
            time.sleep(left)
        else:
            self.overruns += 1
