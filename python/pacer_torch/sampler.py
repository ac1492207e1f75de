"""The elastic sampler: every global batch split into disjoint, unequal per-rank shares.

Epoch ``e`` visits the samples in the order of one permutation of ``range(n)``, drawn
from ``seed`` and ``e`` alone (so the same seed gives the same order, whatever the world
size or the batches). A step with local batches ``b_0..b_{k-1}`` takes the next
``B = sum(b)`` positions of that order: rank ``r`` gets positions
``offset + sum(b[:r]) .. offset + sum(b[:r+1])``. The last step of an epoch takes what
is left (fewer than ``B``), split in proportion to the batches, so every sample of an
epoch is visited exactly once whatever the batches do. The position (epoch, offset) is
the whole state: a run restarted from it, with any world size, continues the stream
where it stopped.
"""

from __future__ import annotations

from typing import Dict, List, Sequence

import torch


def split_remainder(batches: Sequence[int], total: int) -> List[int]:
    """``total`` samples split in proportion to ``batches`` (largest remainder, ties to
    the lower rank), at least one each while ``total`` allows."""
    n = len(batches)
    if total <= 0:
        return [0] * n
    s = sum(batches)
    if s <= 0:
        raise ValueError(f"batches: {list(batches)} sum to 0")
    if total >= s:
        return list(batches)
    base = 1 if total >= n else 0
    rest = total - base * n
    weights = [max(b - base, 0) for b in batches] if base else list(batches)
    ws = sum(weights)
    if ws == 0:
        weights, ws = [1] * n, n
    exact = [rest * w / ws for w in weights]
    out = [int(x) for x in exact]
    left = rest - sum(out)
    order = sorted(range(n), key=lambda i: (-(exact[i] - out[i]), i))
    for i in order[:left]:
        out[i] += 1
    return [o + base for o in out]


class ElasticSampler:
    """Positions of ``n`` samples, epoch by epoch, handed out one global batch at a time."""

    def __init__(self, num_samples: int, seed: int = 0):
        if not isinstance(num_samples, int) or num_samples <= 0:
            raise ValueError(f"dataset: {num_samples!r} samples (expected at least one)")
        self.num_samples = num_samples
        self.seed = int(seed)
        self.epoch = 0
        self.offset = 0
        self._perm_epoch = -1
        self._perm = torch.empty(0, dtype=torch.int64)

    def permutation(self, epoch: int) -> torch.Tensor:
        """Epoch ``epoch``'s order of the samples (deterministic for the seed)."""
        if epoch != self._perm_epoch:
            g = torch.Generator()
            g.manual_seed((self.seed * 1_000_003 + epoch) % (2**63))
            self._perm = torch.randperm(self.num_samples, generator=g)
            self._perm_epoch = epoch
        return self._perm

    def remaining(self) -> int:
        """Samples of the current epoch not yet handed out."""
        return self.num_samples - self.offset

    def step_batches(self, batches: Sequence[int]) -> List[int]:
        """The batches the next step actually runs: ``batches``, or on the epoch's last
        step the remainder split in proportion to them."""
        if any(b < 0 for b in batches):
            raise ValueError(f"batches: {list(batches)} (expected non-negative sizes)")
        return split_remainder(batches, min(sum(batches), self.remaining()))

    def take(self, batches: Sequence[int]) -> List[torch.Tensor]:
        """Sample indices of every rank for the next step (``step_batches(batches)``
        long each); moves the position. Call ``next_epoch`` when ``remaining()`` is 0."""
        sizes = self.step_batches(batches)
        perm = self.permutation(self.epoch)
        out = []
        at = self.offset
        for b in sizes:
            out.append(perm[at : at + b])
            at += b
        self.offset = at
        return out

    def next_epoch(self) -> None:
        self.epoch += 1
        self.offset = 0

    def state_dict(self) -> Dict[str, int]:
        return {
            "num_samples": self.num_samples,
            "seed": self.seed,
            "epoch": self.epoch,
            "offset": self.offset,
        }

    def check_state(self, state: Dict[str, int]) -> None:
        """Raises ValueError naming ``checkpoint`` when ``state`` is for another data set."""
        if state.get("num_samples") != self.num_samples:
            raise ValueError(
                f"checkpoint: its sampler covers {state.get('num_samples')} samples, "
                f"this data set has {self.num_samples}"
            )
        if not (0 <= int(state.get("offset", -1)) <= self.num_samples):
            raise ValueError(f"checkpoint: sampler offset {state.get('offset')} out of range")

    def load_state_dict(self, state: Dict[str, int]) -> None:
        self.check_state(state)
        self.seed = int(state["seed"])
        self.epoch = int(state["epoch"])
        self.offset = int(state["offset"])
        self._perm_epoch = -1
