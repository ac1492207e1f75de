"""Why pacer's few small operations after the backward pass cost more than they do in a
loop (python/README.md, "Engines"): ``|g|^2`` of a 108,618-value gradient (the CNN of
``pacer_torch.overhead``, one DDP bucket) timed right after a conv layer's backward
pass, and again right after that (warm), against other things run in between.

    OMP_NUM_THREADS=1 PYTHONPATH=python taskset -c 0 python experiments/torch/cold_ops.py

Prints the median thread CPU time (µs) of the first and second call over 100 tries.
"""

import statistics
import time

import torch

from pacer_torch.gradnorm import _sum_of_squares

torch.set_num_threads(1)
buf = torch.randn(108618, generator=torch.Generator().manual_seed(0)) * 1e-3
big = torch.randn(4_000_000)
conv = torch.nn.Conv2d(16, 32, 3)
x = torch.randn(128, 16, 13, 13, requires_grad=True)


def spin(us: float) -> None:
    end = time.perf_counter() + us / 1e6
    while time.perf_counter() < end:
        pass


def conv_backward() -> None:
    conv(x).sum().backward()


CASES = [
    ("nothing before (warm)", lambda: None),
    ("a 16 MB sweep (big.mul_)", lambda: big.mul_(1.0)),
    ("conv backward", conv_backward),
    ("conv backward, 3 ms of Python", lambda: (conv_backward(), spin(3000))),
    ("conv backward, 20 tiny torch ops", lambda: (conv_backward(),
                                                   [torch.zeros(3).add_(1) for _ in range(20)])),
]

for name, before in CASES:
    first, second = [], []
    for _ in range(100):
        before()
        t0 = time.thread_time_ns()
        _sum_of_squares(buf)
        t1 = time.thread_time_ns()
        _sum_of_squares(buf)
        t2 = time.thread_time_ns()
        first.append(t1 - t0)
        second.append(t2 - t1)
    print(f"{name:34s} first {statistics.median(first) / 1e3:6.1f}  "
          f"second {statistics.median(second) / 1e3:6.1f}")
