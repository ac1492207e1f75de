"""The drop-in pieces: ``DataParallel``, ``DataLoader``, ``remaining_epochs``."""

from __future__ import annotations

import os
from typing import Any, Callable, Iterator, List, Optional, Sequence, Tuple, Union

import torch
import torch.distributed as dist
from torch.utils.data import Dataset, TensorDataset, default_collate

from . import _native
from .checkpoint import checkpoint_file, load, save
from .job import MAX_SLOT_BATCH, ROW, Decision, Job, _world, current, set_current
from .signals import Emulation


#: The last DataParallel made: a DataLoader made after it attaches it to its job.
_LAST_MODEL: Optional["DataParallel"] = None


def _dist_on() -> bool:
    return dist.is_available() and dist.is_initialized()


class DataParallel(torch.nn.Module):
    """Wraps a model for data-parallel training with unequal local batches.

    At the end of each ``backward()`` the local mean gradients ``g_i`` are combined as
    ``g = sum_i (b_i / B) g_i`` in one all-reduce (which also carries every rank's
    measurements and rank 0's decision for the next step, ``job.py``), so ``g`` is
    exactly the mean gradient over the global batch whatever the local batches are. The loss must be the *mean* over the local
    batch (PyTorch's default reduction). ``optimizer``, when given, is checkpointed
    with the model and gets the AdaScale LR gain of the adaptive global batch.
    Parameters and buffers are broadcast from rank 0 once, here.
    """

    def __init__(self, module: torch.nn.Module, optimizer: Optional[torch.optim.Optimizer] = None):
        super().__init__()
        self.module = module
        self._params = [p for p in module.parameters() if p.requires_grad]
        if not self._params:
            raise ValueError("module: has no parameter that requires a gradient")
        if _dist_on():
            with torch.no_grad():
                for t in list(module.parameters()) + list(module.buffers()):
                    dist.broadcast(t.data, src=0)
        self._queued = False
        for p in self._params:
            p.register_post_accumulate_grad_hook(self._on_grad)
        self._optimizer = optimizer
        global _LAST_MODEL
        _LAST_MODEL = self
        job = current()
        if job is not None:
            job.attach(self, optimizer)
            if not job.min_explicit and needs_two_samples(module):
                job.require_min_local_batch(
                    BATCHNORM_MIN_LOCAL_BATCH, "the model's BatchNorm layers (training mode)"
                )

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        job = current()
        if job is not None and job.model is not self:
            job.attach(self, self._optimizer)
        return self.module(*args, **kwargs)

    def _on_grad(self, _p: torch.Tensor) -> None:
        if not self._queued:
            self._queued = True
            torch.autograd.Variable._execution_engine.queue_callback(self._sync)

    def _sync(self) -> None:
        self._queued = False
        job = current()
        ctx = job.step_ctx if job is not None else None
        if ctx is None:
            raise RuntimeError(
                "pacer_torch.DataParallel: backward() outside a step of a pacer_torch.DataLoader"
            )
        if ctx.synced:
            raise RuntimeError(
                "pacer_torch.DataParallel: a second backward() in one step (gradient "
                "accumulation across backward calls is not supported)"
            )
        measured = job.end_compute()
        params = self._params
        dtype = params[0].dtype
        if dtype in (torch.float16, torch.bfloat16):
            dtype = torch.float32
        device = params[0].device
        rank, world = job.rank, job.world
        b = ctx.sizes[rank]
        total = sum(ctx.sizes)
        sizes = [p.numel() for p in params]
        n_par = sum(sizes)
        n_rows = ROW * world
        n_dec = Decision.slot_len(world)
        buf = torch.zeros(n_par + n_rows + n_dec, dtype=dtype, device=device)
        flat = buf[:n_par]
        if b > 0:
            torch.cat(
                [
                    (p.grad if p.grad is not None else torch.zeros_like(p)).reshape(-1).to(dtype)
                    for p in params
                ],
                out=flat,
            )
            sqr = float(torch.linalg.vector_norm(flat, dtype=torch.float64) ** 2)
            flat.mul_(b / total)
        else:
            sqr = 0.0
        row = job.local_row(measured, sqr)
        buf[n_par + ROW * rank : n_par + ROW * (rank + 1)] = torch.tensor(row, dtype=dtype)
        if rank == 0:
            buf[n_par + n_rows :] = torch.tensor(job.decision_slot(), dtype=dtype)
        trace = job.trace
        if trace is not None:
            trace.mark("arrive")
        if _dist_on():
            dist.all_reduce(buf)
        if trace is not None:
            trace.mark("reduced")
        agg_sqr = float(torch.linalg.vector_norm(flat, dtype=torch.float64) ** 2)
        tail = buf[n_par:].cpu()
        rows = tail[:n_rows].view(world, ROW).tolist()
        decision = tail[n_rows:].tolist()
        at = 0
        with torch.no_grad():
            for p, n in zip(params, sizes):
                g = flat[at : at + n].view_as(p).to(p.dtype)
                if p.grad is None:
                    p.grad = g.clone()
                else:
                    p.grad.copy_(g)
                at += n
        job.gathered(rows, agg_sqr, decision)
        if trace is not None:
            trace.mark("gathered")


def _speed_for(rank: int, speed: Union[None, float, Sequence[float]]) -> float:
    if speed is None:
        return 1.0
    if isinstance(speed, (int, float)):
        return float(speed)
    speeds = list(speed)
    if rank >= len(speeds):
        raise ValueError(f"speed: {len(speeds)} speeds for rank {rank} (one per rank expected)")
    return float(speeds[rank])


def _gather_bounds(
    lo: int, cap: Optional[int], world: int
) -> Tuple[List[int], List[Optional[int]]]:
    """Every rank's (minimum, cap) of its local batch, in one all-reduce."""
    if not _dist_on():
        return [lo], [cap]
    t = torch.zeros(2 * world, dtype=torch.int64)
    r = dist.get_rank()
    t[r] = lo
    t[world + r] = -1 if cap is None else cap
    if dist.get_backend() == "nccl":  # pragma: no cover - no GPU here
        t = t.cuda()
    dist.all_reduce(t)
    v = t.cpu().tolist()
    return [int(x) for x in v[:world]], [None if x < 0 else int(x) for x in v[world:]]


def needs_two_samples(module: torch.nn.Module) -> bool:
    """Whether ``module`` holds a BatchNorm layer in training mode that normalises over
    this rank's samples alone (not SyncBatchNorm): one sample then fails ("Expected more
    than 1 value per channel when training")."""
    return any(
        isinstance(m, torch.nn.modules.batchnorm._BatchNorm)
        and not isinstance(m, torch.nn.SyncBatchNorm)
        and m.training
        for m in module.modules()
    )


#: ``min_local_batch`` derived for a model that ``needs_two_samples``.
BATCHNORM_MIN_LOCAL_BATCH = 2


class DataLoader:
    """Yields this rank's local batch of every step (module docs of ``sampler.py``).

    ``global_batch`` samples per step, split by ``controller`` (``uniform``, ``lbbsp``,
    ``pid``) from speeds predicted by ``predictor`` (``last``, ``ewma``, ``ets``,
    ``narx``). ``max_local_batch``: this rank's cap (each rank passes its own).
    ``min_local_batch``: this rank's smallest local batch (default: 2 when the model
    has BatchNorm layers in training mode, ``needs_two_samples``; else 1); every
    controller's split and the epoch's last step respect it.
    ``speed``: heterogeneity emulation (a number, or one per rank), with ``time_scale``
    (``signals.py``); ``emulation_cost``: ``(fixed_s, per_sample_s)`` of a noise-free
    emulated device (``signals.calibrate_cost``) instead of the step's own CPU time.
    ``adaptive_batch``: move the global batch to the goodput-optimal
    one in ``[global_batch, max_global_batch]`` every ``adapt_every`` steps
    (python/README.md). ``checkpoint_dir`` (default ``PACER_CHECKPOINT_DIR``): where a
    stop (SIGTERM, ``request_stop``) checkpoints, and whence a start resumes.
    """

    def __init__(
        self,
        dataset: Dataset,
        global_batch: int,
        *,
        controller: str = "lbbsp",
        predictor: str = "ewma",
        seed: int = 0,
        max_local_batch: Optional[int] = None,
        min_local_batch: Optional[int] = None,
        speed: Union[None, float, Sequence[float]] = None,
        time_scale: float = 1.0,
        emulation_cost: Optional[Tuple[float, float]] = None,
        adaptive_batch: bool = False,
        max_global_batch: Optional[int] = None,
        adapt_every: int = 50,
        collate_fn: Optional[Callable] = None,
        device: Optional[torch.device] = None,
        checkpoint_dir: Optional[str] = None,
        gpu_like: bool = False,
    ):
        rank, world = _world()
        if isinstance(global_batch, bool) or not isinstance(global_batch, int):
            raise ValueError(f"global_batch: {global_batch!r} (expected an integer)")
        if global_batch < world:
            raise ValueError(
                f"global_batch: {global_batch} is smaller than the world size {world} "
                "(expected at least one sample per rank)"
            )
        if controller not in _native.CONTROLLERS:
            raise ValueError(
                f"controller: unknown `{controller}` (expected one of "
                f"{', '.join(_native.CONTROLLERS)})"
            )
        if predictor not in _native.PREDICTORS:
            raise ValueError(
                f"predictor: unknown `{predictor}` (expected one of "
                f"{', '.join(_native.PREDICTORS)})"
            )
        if max_local_batch is not None and (
            isinstance(max_local_batch, bool)
            or not isinstance(max_local_batch, int)
            or max_local_batch < 1
        ):
            raise ValueError(f"max_local_batch: {max_local_batch!r} (expected an integer >= 1)")
        if min_local_batch is not None and (
            isinstance(min_local_batch, bool)
            or not isinstance(min_local_batch, int)
            or min_local_batch < 1
        ):
            raise ValueError(f"min_local_batch: {min_local_batch!r} (expected an integer >= 1)")
        if min_local_batch is None:
            model = _LAST_MODEL.module if _LAST_MODEL is not None else None
            lo = (
                BATCHNORM_MIN_LOCAL_BATCH
                if model is not None and needs_two_samples(model)
                else 1
            )
        else:
            lo = min_local_batch
        if adaptive_batch and max_global_batch is not None and max_global_batch < global_batch:
            raise ValueError(
                f"max_global_batch: {max_global_batch} is below global_batch {global_batch}"
            )
        for name, v in (("global_batch", global_batch), ("max_global_batch", max_global_batch)):
            if v is not None and v > MAX_SLOT_BATCH:
                raise ValueError(
                    f"{name}: {v} exceeds {MAX_SLOT_BATCH} (2^24, the largest global batch "
                    "the per-step decision carries exactly)"
                )
        if not isinstance(adapt_every, int) or adapt_every < 1:
            raise ValueError(f"adapt_every: {adapt_every!r} (expected an integer >= 1)")
        emulation = Emulation(_speed_for(rank, speed), time_scale, emulation_cost)
        try:
            num_samples = len(dataset)  # type: ignore[arg-type]
        except TypeError:
            raise ValueError("dataset: has no length (a map-style dataset is expected)") from None
        minima, caps = _gather_bounds(lo, max_local_batch, world)
        if all(c is not None for c in caps) and sum(caps) < global_batch:  # type: ignore[misc]
            raise ValueError(
                f"max_local_batch: the ranks' caps {caps} hold {sum(caps)} samples, "  # type: ignore[arg-type]
                f"less than the global batch {global_batch}"
            )
        for r, (m, c) in enumerate(zip(minima, caps)):
            if c is not None and m > c:
                raise ValueError(
                    f"min_local_batch: rank {r}'s minimum {m} is above its max_local_batch {c}"
                )
        why = "" if min_local_batch is not None else " (derived: the model has BatchNorm layers)"
        if sum(minima) > global_batch:
            raise ValueError(
                f"min_local_batch: the ranks' minima {minima}{why if max(minima) > 1 else ''} "
                f"sum to {sum(minima)}, more than the global batch {global_batch}"
            )
        if checkpoint_dir is None:
            checkpoint_dir = os.environ.get("PACER_CHECKPOINT_DIR") or None
        self.dataset = dataset
        self.collate_fn = collate_fn or default_collate
        self.device = device
        self.job = Job(
            num_samples=num_samples,
            global_batch=global_batch,
            controller=controller,
            predictor=predictor,
            seed=seed,
            caps=caps,
            minima=minima,
            min_explicit=min_local_batch is not None,
            gpu_like=gpu_like,
            emulation=emulation,
            adaptive_batch=adaptive_batch,
            max_global_batch=max_global_batch,
            adapt_every=adapt_every,
            checkpoint_dir=checkpoint_dir,
        )
        set_current(self.job)
        if _LAST_MODEL is not None:
            self.job.attach(_LAST_MODEL, _LAST_MODEL._optimizer)

    @property
    def batch_sizes(self) -> List[int]:
        """Every rank's local batch of the coming step."""
        return list(self.job.batches)

    def set_batches(self, batches: Sequence[int]) -> None:
        """Runs ``batches`` (one per rank, summing to the global batch) in the coming
        step and the one after instead of the decided ones (every rank calls it with the
        same batches, between steps); the controller continues from them."""
        job = self.job
        want = [int(b) for b in batches]
        nxt = job.next
        if len(want) != job.world or sum(want) != nxt.global_batch or min(want) < 0:
            raise ValueError(
                f"batches: {want} (expected {job.world} non-negative batches summing to "
                f"the global batch {nxt.global_batch})"
            )
        for r, b in enumerate(want):
            cap = job.caps[r]
            if b < job.minima[r] or (cap is not None and b > cap):
                raise ValueError(
                    f"batches: rank {r}'s {b} is outside its bounds [{job.minima[r]}, "
                    f"{cap if cap is not None else 'no cap'}] (min_local_batch, max_local_batch)"
                )
        if job.session is not None and job.pending is not None:
            if job.session.global_batch == nxt.global_batch:
                job.session.override_batches(want)
                job.pending.batches = list(want)
        nxt.batches = want

    @property
    def local_batch(self) -> int:
        return self.job.batches[self.job.rank]

    def _fetch(self, idx: torch.Tensor) -> Any:
        if isinstance(self.dataset, TensorDataset):
            out = tuple(t[idx] for t in self.dataset.tensors)
        else:
            out = self.collate_fn([self.dataset[i] for i in idx.tolist()])
        if self.device is not None:
            out = _to(out, self.device)
        return out

    def __len__(self) -> int:
        b = self.job.global_batch
        return -(-self.job.sampler.remaining() // b)

    def __iter__(self) -> Iterator[Any]:
        job = self.job
        restore_if_needed(job)
        sampler = job.sampler
        if sampler.remaining() == 0:
            sampler.next_epoch()
        while True:
            if sum(sampler.step_batches(job.batches)) == 0:
                # Only samples no rank can take without going below its minimum are
                # left (sampler.split_remainder): the epoch ends without them.
                sampler.take(job.batches)
                sampler.next_epoch()
                return
            idx = job.begin_step()[job.rank]
            yield self._fetch(idx)
            last = sampler.remaining() == 0
            if last:
                sampler.next_epoch()
            job.end_step()
            if last:
                return


def _to(x: Any, device: torch.device) -> Any:
    if isinstance(x, torch.Tensor):
        return x.to(device, non_blocking=True)
    if isinstance(x, (list, tuple)):
        return type(x)(_to(v, device) for v in x)
    if isinstance(x, dict):
        return {k: _to(v, device) for k, v in x.items()}
    return x


def restore_if_needed(job: Optional[Job] = None) -> bool:
    """Resumes from the checkpoint directory's checkpoint once, if there is one."""
    job = job or current()
    if job is None or job.restored:
        return False
    job.restored = True
    if job.checkpoint_dir is None:
        return False
    path = checkpoint_file(job.checkpoint_dir)
    if not os.path.exists(path):
        return False
    load(job, path)
    return True


def remaining_epochs(num_epochs: int) -> Iterator[int]:
    """Epochs ``e .. num_epochs-1`` where ``e`` is the (resumed) current epoch; sends the
    final report when done."""
    job = current()
    if job is None:
        raise RuntimeError("pacer_torch.remaining_epochs: create the pacer_torch.DataLoader first")
    restore_if_needed(job)
    while job.sampler.epoch < num_epochs:
        e = job.sampler.epoch
        yield e
        if job.sampler.epoch == e:  # the loop left the epoch early
            job.sampler.next_epoch()
    job.finish()


def save_checkpoint(directory: Optional[str] = None) -> str:
    """Checkpoints the job now (every rank calls it, between steps)."""
    job = current()
    if job is None:
        raise RuntimeError("pacer_torch.save_checkpoint: no pacer_torch.DataLoader")
    directory = directory or job.checkpoint_dir
    if directory is None:
        raise ValueError("directory: none given and no PACER_CHECKPOINT_DIR")
    return save(job, directory)


def resume(path: str) -> None:
    """Resumes the job from checkpoint file ``path`` (every rank calls it)."""
    job = current()
    if job is None:
        raise RuntimeError("pacer_torch.resume: no pacer_torch.DataLoader")
    load(job, path)


def request_stop() -> None:
    """Checkpoint to the checkpoint directory and exit after the current step."""
    job = current()
    if job is not None:
        job.request_stop()
