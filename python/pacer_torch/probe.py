"""The largest local batch a CUDA device holds, found by catching OOM once.

Untested here: the machines this package was built on have no GPU (python/README.md).
"""

from __future__ import annotations

from typing import Callable

import torch


def probe_max_local_batch(step: Callable[[int], None], limit: int, start: int = 1) -> int:
    """Runs ``step(b)`` (one forward and backward of ``b`` samples) for ``b = start,
    2·start, ...`` up to ``limit`` until CUDA runs out of memory, then returns the last
    ``b`` that fit (``limit`` if none failed). Pass the result as ``max_local_batch``."""
    if not torch.cuda.is_available():
        raise ValueError("max_local_batch: probing needs CUDA; give the cap on CPU")
    if limit < 1 or start < 1:
        raise ValueError(f"limit: {limit}, start: {start} (expected integers >= 1)")
    good = 0
    b = min(start, limit)
    while True:
        try:
            step(b)
        except torch.cuda.OutOfMemoryError:
            torch.cuda.empty_cache()
            break
        good = b
        if b >= limit:
            break
        b = min(2 * b, limit)
    if good == 0:
        raise ValueError(f"max_local_batch: not even {start} samples fit on this device")
    return good
