"""The elastic sampler: every global batch split into disjoint, unequal per-rank shares.

Epoch ``e`` visits the samples in the order of one permutation of ``range(n)``, drawn
from ``seed`` and ``e`` alone (so the same seed gives the same order, whatever the world
size or the batches). A step with local batches ``b_0..b_{k-1}`` takes the next
``B = sum(b)`` positions of that order: rank ``r`` gets positions
``offset + sum(b[:r]) .. offset + sum(b[:r+1])``. The last step of an epoch takes what
is left (fewer than ``B``), split in proportion to the batches and within each rank's
bounds (``split_remainder``), so every sample of an epoch is visited exactly once
whatever the batches do — except, with minima above 1 (``min_local_batch``, BatchNorm),
the last few samples of an epoch that no rank can take without going below its minimum
(fewer than the largest minimum), which that epoch skips. The position (epoch, offset) is
the whole state: a run restarted from it, with any world size, continues the stream
where it stopped.
"""

from __future__ import annotations

from typing import Dict, List, Optional, Sequence

import torch


def _largest_remainder(rest: int, weights: List[int]) -> List[int]:
    n = len(weights)
    ws = sum(weights)
    if ws == 0:
        weights, ws = [1] * n, n
    exact = [rest * w / ws for w in weights]
    out = [int(x) for x in exact]
    left = rest - sum(out)
    order = sorted(range(n), key=lambda i: (-(exact[i] - out[i]), i))
    for i in order[:left]:
        out[i] += 1
    return out


def split_remainder(
    batches: Sequence[int],
    total: int,
    minima: Optional[Sequence[int]] = None,
    caps: Optional[Sequence[Optional[int]]] = None,
) -> List[int]:
    """``total`` samples split in proportion to ``batches`` (largest remainder, ties to
    the lower rank). Every rank gets its minimum (``minima``, default 1 each) while
    ``total`` allows; when it holds less than all the minima, the ranks with the largest
    batches get theirs first, the others none, and what is left goes to the served ranks
    up to their caps (``caps``). A share is never below a rank's minimum (BatchNorm fails
    on one sample): samples no rank can take are left out, so the result may sum to less
    than ``total`` — by less than the largest minimum, and only when some minimum
    exceeds 1 (with the default minima it always sums to ``total``)."""
    n = len(batches)
    if total <= 0:
        return [0] * n
    s = sum(batches)
    if s <= 0:
        raise ValueError(f"batches: {list(batches)} sum to 0")
    if total >= s:
        return list(batches)
    mins = [1] * n if minima is None else [int(m) for m in minima]
    if total >= sum(mins):
        weights = [max(b - m, 0) for b, m in zip(batches, mins)]
        out = _largest_remainder(total - sum(mins), weights)
        return [o + m for o, m in zip(out, mins)]
    # Too few for every minimum: serve the largest batches first, each its minimum.
    out = [0] * n
    left = total
    for i in sorted(range(n), key=lambda i: (-batches[i], i)):
        if mins[i] <= left:
            out[i] = mins[i]
            left -= mins[i]
    limit = [total if caps is None or caps[i] is None else int(caps[i]) for i in range(n)]
    # What no minimum can take goes, one at a time, to the served ranks below their cap.
    served = [i for i in range(n) if out[i] > 0]
    while left > 0 and any(out[i] < limit[i] for i in served):
        for i in served:
            if left > 0 and out[i] < limit[i]:
                out[i] += 1
                left -= 1
    return out


class ElasticSampler:
    """Positions of ``n`` samples, epoch by epoch, handed out one global batch at a time."""

    def __init__(self, num_samples: int, seed: int = 0):
        if not isinstance(num_samples, int) or num_samples <= 0:
            raise ValueError(f"dataset: {num_samples!r} samples (expected at least one)")
        self.num_samples = num_samples
        self.seed = int(seed)
        #: Each rank's smallest and largest share of an epoch's last step (the job's
        #: ``min_local_batch`` and ``max_local_batch``); None: 1 each, no cap.
        self.minima: Optional[List[int]] = None
        self.caps: Optional[List[Optional[int]]] = None
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
        return split_remainder(
            batches, min(sum(batches), self.remaining()), self.minima, self.caps
        )

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
        # Positions no rank could take (split_remainder) are passed over, not repeated.
        self.offset += min(sum(batches), self.remaining())
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
        if state.get("stream"):
            raise ValueError(
                f"checkpoint: its sampler is an iterable data set's stream, this data set "
                f"is map-style ({self.num_samples} samples)"
            )
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


class StreamPosition:
    """The position in an iterable data set's stream (``torch.utils.data.IterableDataset``):
    epoch ``e`` is one pass over the stream, the same on every rank; a step takes its
    next ``B`` samples and rank ``r`` keeps the ``b_r`` after the first
    ``sum(b[:r])``, so the shares are disjoint and the epoch is seen once whatever the
    batches. Its length is learnt at its end (a step that finds fewer than ``B``
    samples splits them with ``split_remainder``). ``(epoch, offset)`` is the whole
    state: a resumed run skips ``offset`` samples of the epoch's stream."""

    #: No length: the stream's end is found by reading it.
    num_samples = None

    def __init__(self) -> None:
        self.minima: Optional[List[int]] = None
        self.caps: Optional[List[Optional[int]]] = None
        self.epoch = 0
        self.offset = 0

    def next_epoch(self) -> None:
        self.epoch += 1
        self.offset = 0

    def state_dict(self) -> Dict[str, Optional[int]]:
        return {"num_samples": None, "stream": 1, "epoch": self.epoch, "offset": self.offset}

    def check_state(self, state: Dict[str, Optional[int]]) -> None:
        if not state.get("stream"):
            raise ValueError(
                f"checkpoint: its sampler covers a map-style data set of "
                f"{state.get('num_samples')} samples, this data set is iterable"
            )
        if int(state.get("offset", -1) or 0) < 0:  # type: ignore[arg-type]
            raise ValueError(f"checkpoint: stream offset {state.get('offset')} out of range")

    def load_state_dict(self, state: Dict[str, Optional[int]]) -> None:
        self.check_state(state)
        self.epoch = int(state["epoch"])  # type: ignore[arg-type]
        self.offset = int(state["offset"])  # type: ignore[arg-type]
