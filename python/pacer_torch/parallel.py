"""The drop-in pieces: ``DataParallel``, ``DataLoader``, ``remaining_epochs``."""

from __future__ import annotations

import collections
import contextlib
import itertools
import os
import time
from typing import Any, Callable, Iterator, List, Optional, Sequence, Tuple, Union

import torch
import torch.distributed as dist
from torch.utils.data import Dataset, IterableDataset, TensorDataset, default_collate

from . import _native
from .checkpoint import checkpoint_file, load, save
from .job import MAX_SLOT_BATCH, Job, _world, check_noise_scale, current, set_current
from .sampler import ElasticSampler, split_remainder
from .ddp_engine import DdpEngine
from .flat_engine import FlatEngine
from .signals import Emulation
from .state import UserState


#: How ``DataParallel`` reduces the gradients (its docs).
ENGINES = ("flat", "ddp")

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

    ``engine``: ``"flat"`` (default) reduces all gradients in one all-reduce after the
    backward pass; ``"ddp"`` runs the model inside PyTorch's
    ``DistributedDataParallel`` and weights its buckets in a communication hook, so the
    reduction overlaps the backward pass (``ddp_engine.py``; ``bucket_cap_mb`` is DDP's).
    Without a process group both run as one process.
    """

    def __init__(
        self,
        module: torch.nn.Module,
        optimizer: Optional[torch.optim.Optimizer] = None,
        *,
        engine: str = "flat",
        bucket_cap_mb: Optional[float] = None,
        grad_scaler: Optional[Any] = None,
    ):
        super().__init__()
        if engine not in ENGINES:
            raise ValueError(f"engine: {engine!r} (expected one of {', '.join(ENGINES)})")
        self.module = module
        self._params = [p for p in module.parameters() if p.requires_grad]
        if not self._params:
            raise ValueError("module: has no parameter that requires a gradient")
        self._engine: Optional[DdpEngine] = None
        if engine == "ddp" and _dist_on():
            # DDP broadcasts parameters and buffers from rank 0 itself.
            self._engine = DdpEngine(module, bucket_cap_mb)
        elif _dist_on():
            with torch.no_grad():
                for t in list(module.parameters()) + list(module.buffers()):
                    dist.broadcast(t.data, src=0)
        self._queued = False
        self._no_sync = False
        self._flat = FlatEngine(self._params)
        for p in self._params:
            p.register_post_accumulate_grad_hook(self._on_grad)
        self._optimizer = optimizer
        #: An AMP ``GradScaler`` whose loss scale multiplies the gradients: the noise
        #: scale's norms are divided by its square (``grad_norm_sqr``).
        self.grad_scaler = grad_scaler
        if self._engine is not None:
            self._engine.optimizer, self._engine.grad_scaler = optimizer, grad_scaler
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
        if self._engine is not None:
            return self._engine.forward(*args, **kwargs)
        return self.module(*args, **kwargs)

    @contextlib.contextmanager
    def no_sync(self) -> Iterator[None]:
        """Gradient accumulation: the backward passes inside accumulate this rank's
        gradients locally, without reducing them; the first backward after it (the
        step's last) reduces the sum, weighted as usual. So that the sum is this rank's
        mean gradient, weight each micro-batch's mean loss by its share of the local
        batch (``len(micro) / len(x)``) — then the result equals one backward over the
        whole local batch. The ``ddp`` engine uses DDP's own ``no_sync``."""
        self._no_sync = True
        try:
            if self._engine is not None and self._engine.ddp is not None:
                with self._engine.ddp.no_sync():
                    yield
            else:
                yield
        finally:
            self._no_sync = False

    def _on_grad(self, _p: torch.Tensor) -> None:
        if not self._queued:
            self._queued = True
            torch.autograd.Variable._execution_engine.queue_callback(self._sync)

    def _sync(self) -> None:
        self._queued = False
        if self._no_sync:
            return
        if self._engine is not None:
            self._engine.finish()
            return
        job = current()
        ctx = job.step_ctx if job is not None else None
        if ctx is None:
            raise RuntimeError(
                "pacer_torch.DataParallel: backward() outside a step of a pacer_torch.DataLoader"
            )
        if ctx.synced:
            raise RuntimeError(
                "pacer_torch.DataParallel: a second backward() in one step after the "
                "gradients were reduced (to accumulate, run all but the step's last "
                "backward() inside `with model.no_sync():`)"
            )
        measured = job.end_compute()
        self._flat.sync(job, measured, self._optimizer, self.grad_scaler, _dist_on())


def _take(t: torch.Tensor, idx: torch.Tensor) -> torch.Tensor:
    """``t[idx]`` for the indices of a step: ``index_select`` along the first dimension,
    the same values at a third of the CPU time (256 CNN samples: 27 against 85-95 us,
    one thread)."""
    if t.device == idx.device and t.dim() > 0:
        return t.index_select(0, idx)
    return t[idx]


def _check_int(name: str, v: Any, least: int, optional: bool = True) -> None:
    """A ValueError naming ``name`` unless ``v`` is an integer ``>= least`` (or None
    when ``optional``)."""
    if v is None and optional:
        return
    if isinstance(v, bool) or not isinstance(v, int) or v < least:
        raise ValueError(f"{name}: {v!r} (expected an integer >= {least})")


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
    (python/README.md). ``noise_scale``: when the gradient noise scale's norms are taken
    (host work every step): ``"auto"`` (default) when something reads them — from the
    start with ``adaptive_batch`` or ``PACER_SERVER``, else from the step after the one
    that follows the first read (``job.noise_scale()``, which returns None then) —,
    True always, False never (``noise_scale()`` is None; not with ``adaptive_batch``). ``checkpoint_dir`` (default ``PACER_CHECKPOINT_DIR``): where a
    stop (SIGTERM, ``request_stop``) checkpoints, and whence a start resumes;
    ``checkpoint_every_steps`` / ``checkpoint_every_s``: also checkpoint there after
    every that many steps / after the first step that ends that many seconds (rank 0's
    clock) after the last checkpoint. ``num_workers``, ``prefetch_factor``,
    ``pin_memory``, ``persistent_workers``, ``worker_init_fn``,
    ``multiprocessing_context``, ``loader_timeout_s`` (torch's ``timeout``): the
    batches come from a torch DataLoader with these (``_PlannedSteps``; the decisions
    then take effect ``num_workers * prefetch_factor`` steps later). ``dataset`` may be
    a ``torch.utils.data.IterableDataset`` (``sampler.StreamPosition``; python/README.md,
    "Loading").
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
        checkpoint_every_steps: Optional[int] = None,
        checkpoint_every_s: Optional[float] = None,
        gpu_like: bool = False,
        num_workers: int = 0,
        prefetch_factor: Optional[int] = None,
        pin_memory: bool = False,
        persistent_workers: Optional[bool] = None,
        worker_init_fn: Optional[Callable[[int], None]] = None,
        multiprocessing_context: Any = None,
        loader_timeout_s: float = 0,
        lr_rule: str = "adascale",
        noise_scale: Union[str, bool] = "auto",
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
        _check_int("max_local_batch", max_local_batch, 1)
        _check_int("min_local_batch", min_local_batch, 1)
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
        check_noise_scale(noise_scale, adaptive_batch)
        emulation = Emulation(_speed_for(rank, speed), time_scale, emulation_cost)
        num_samples: Optional[int] = None
        if not isinstance(dataset, IterableDataset):
            try:
                num_samples = len(dataset)  # type: ignore[arg-type]
            except TypeError:
                raise ValueError(
                    "dataset: has no length (expected a map-style data set with __len__, "
                    "or a torch.utils.data.IterableDataset)"
                ) from None
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
        if checkpoint_every_steps is not None and (
            isinstance(checkpoint_every_steps, bool)
            or not isinstance(checkpoint_every_steps, int)
            or checkpoint_every_steps < 1
        ):
            raise ValueError(
                f"checkpoint_every_steps: {checkpoint_every_steps!r} (expected an integer >= 1)"
            )
        if checkpoint_every_s is not None and (
            isinstance(checkpoint_every_s, bool)
            or not isinstance(checkpoint_every_s, (int, float))
            or not checkpoint_every_s > 0
            or checkpoint_every_s == float("inf")
        ):
            raise ValueError(
                f"checkpoint_every_s: {checkpoint_every_s!r} (expected a finite number of "
                "seconds > 0)"
            )
        for name, v in (
            ("checkpoint_every_steps", checkpoint_every_steps),
            ("checkpoint_every_s", checkpoint_every_s),
        ):
            if v is not None and checkpoint_dir is None:
                raise ValueError(
                    f"{name}: no checkpoint directory to write to (checkpoint_dir= or "
                    "PACER_CHECKPOINT_DIR)"
                )
        _check_int("num_workers", num_workers, 0, optional=False)
        _check_int("prefetch_factor", prefetch_factor, 1)
        if prefetch_factor is not None and num_workers == 0:
            raise ValueError("prefetch_factor: needs num_workers > 0 (as torch's DataLoader)")
        if not (isinstance(loader_timeout_s, (int, float)) and loader_timeout_s >= 0):
            raise ValueError(f"loader_timeout_s: {loader_timeout_s!r} (expected seconds >= 0)")
        self.dataset = dataset
        self.collate_fn = collate_fn or default_collate
        self.device = device
        self.num_workers = num_workers
        self.prefetch_factor = (prefetch_factor or 2) if num_workers > 0 else None
        self.pin_memory = bool(pin_memory)
        self.persistent_workers = (
            num_workers > 0 if persistent_workers is None else bool(persistent_workers)
        )
        self.worker_init_fn = worker_init_fn
        self.multiprocessing_context = multiprocessing_context
        self.loader_timeout_s = float(loader_timeout_s)
        self._torch_loader: Optional[torch.utils.data.DataLoader] = None
        # A torch DataLoader asks for the index lists of up to num_workers *
        # prefetch_factor steps beyond the one being consumed: every rank must know
        # their decisions (job.lookahead).
        # (An iterable data set's stream is read step by step: no lookahead.)
        self.stream = num_samples is None
        lookahead = (
            num_workers * self.prefetch_factor if num_workers > 0 and not self.stream else 0
        )
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
            checkpoint_every_steps=checkpoint_every_steps,
            checkpoint_every_s=float(checkpoint_every_s) if checkpoint_every_s else None,
            lookahead=lookahead,
            lr_rule=lr_rule,
            noise_scale=noise_scale,
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
        for d in job.ahead:  # the known decisions after the coming step (prefetch)
            if d.global_batch == nxt.global_batch:
                d.batches = list(want)
        job.decisions_version += 1

    @property
    def local_batch(self) -> int:
        return self.job.batches[self.job.rank]

    def _fetch(self, idx: torch.Tensor) -> Any:
        if isinstance(self.dataset, TensorDataset):
            out = tuple(_take(t, idx) for t in self.dataset.tensors)
        elif len(idx) == 0:  # this rank sits the step out: the batch's structure, empty
            out = _empty(self.collate_fn([self.dataset[0]]))
        else:
            out = self.collate_fn([self.dataset[i] for i in idx.tolist()])
        if self.device is not None:
            out = _to(out, self.device)
        return out

    def __len__(self) -> int:
        if self.stream:
            raise TypeError("pacer_torch.DataLoader: an iterable data set has no length")
        b = self.job.global_batch
        return -(-self.job.sampler.remaining() // b)

    def __iter__(self) -> Iterator[Any]:
        return self._iter_stream() if self.stream else self._iter_map()

    def _stream(self) -> Iterator[Any]:
        """One epoch's samples of the iterable data set, one at a time (through a torch
        DataLoader's workers when ``num_workers`` > 0: each worker holds a copy of the
        data set, which shards itself by ``get_worker_info()`` as with torch; the
        workers start anew each epoch, so that ``set_epoch`` reaches them)."""
        if self.num_workers == 0:
            return iter(self.dataset)
        # Workers send chunks of STREAM_CHUNK samples collated (one message and one
        # shared-memory tensor per field, not per sample); split back into samples here.
        loader = torch.utils.data.DataLoader(
            self.dataset,
            batch_size=STREAM_CHUNK,
            num_workers=self.num_workers,
            prefetch_factor=self.prefetch_factor,
            worker_init_fn=self.worker_init_fn,
            multiprocessing_context=self.multiprocessing_context,
            timeout=self.loader_timeout_s,
        )
        return (sample for chunk in loader for sample in _uncollate(chunk))

    def _iter_stream(self) -> Iterator[Any]:
        """The steps of an iterable data set (``sampler.StreamPosition``): every rank
        reads the step's ``B`` samples of the stream and keeps its own share."""
        job = self.job
        restore_if_needed(job)
        pos = job.sampler
        set_epoch = getattr(self.dataset, "set_epoch", None)
        if callable(set_epoch):
            set_epoch(pos.epoch)
        stream = self._stream()
        for skipped in range(pos.offset):  # resumed mid-epoch
            if next(stream, _END) is _END:
                raise ValueError(
                    f"checkpoint: the stream of epoch {pos.epoch} ends after {skipped} "
                    f"samples, the checkpoint is at sample {pos.offset}"
                )
        rank = job.rank
        while True:
            started = (time.perf_counter(), time.thread_time())
            want = job.batches
            total = sum(want)
            got = list(itertools.islice(stream, total))
            sizes = (
                list(want)
                if len(got) == total
                else split_remainder(want, len(got), pos.minima, pos.caps)
            )
            if sum(sizes) == 0:  # the stream is over (or what is left fits no rank)
                pos.offset += len(got)
                pos.next_epoch()
                return
            job.begin_step(sizes=sizes, started=started)
            start = sum(sizes[:rank])
            if sizes[rank]:
                batch = self.collate_fn(got[start : start + sizes[rank]])
            else:  # this rank sits the step out (min_local_batch): an empty batch
                batch = _empty(self.collate_fn(got[:1]))
            if self.pin_memory and torch.cuda.is_available():
                batch = _pin(batch)  # pragma: no cover - no GPU here
            if self.device is not None:
                batch = _to(batch, self.device)
            last = len(got) < total
            pos.offset += len(got) - sum(sizes)  # samples no rank could take
            try:
                yield batch
            except GeneratorExit:  # the user's loop left during this step
                job.leave_step()
                raise
            if last:
                pos.next_epoch()
            job.end_step()
            if last:
                return

    def _make_torch_loader(self) -> torch.utils.data.DataLoader:
        kw: dict = {}
        if self.num_workers > 0:
            kw.update(
                prefetch_factor=self.prefetch_factor,
                persistent_workers=self.persistent_workers,
                worker_init_fn=self.worker_init_fn,
                multiprocessing_context=self.multiprocessing_context,
                timeout=self.loader_timeout_s,
            )
        return torch.utils.data.DataLoader(
            self.dataset,
            batch_sampler=_PlannedSteps(self.job),
            num_workers=self.num_workers,
            collate_fn=self.collate_fn,
            pin_memory=self.pin_memory,
            **kw,
        )

    def _worker_fetch(self) -> Tuple[Callable[[], None], Callable[[torch.Tensor], Any]]:
        """The steps' batches through a torch DataLoader (workers, prefetch, pinned
        memory): its batch sampler hands out the index lists of the steps whose
        decisions every rank knows (``_PlannedSteps``), ``lookahead`` steps ahead.
        Returns ``(before, fetch)``: ``before()`` before each step begins (starts the
        torch iterator at the coming step's position, or restarts it), ``fetch(idx)``
        the batch of the step that just began (indices ``idx``, checked against the
        plan)."""
        job = self.job
        if self._torch_loader is None:
            self._torch_loader = self._make_torch_loader()
        loader = self._torch_loader
        planned = loader.batch_sampler
        assert isinstance(planned, _PlannedSteps)
        it: Optional[Iterator[Any]] = None
        version = job.decisions_version

        def before() -> None:
            nonlocal it, version
            if it is None or job.decisions_version != version:
                # Restarted when decisions already prefetched were replaced
                # (set_batches, set_global_batch): what the workers fetched is dropped.
                version = job.decisions_version
                it = iter(loader)

        def fetch(idx: torch.Tensor) -> Any:
            assert it is not None
            try:
                batch = next(it)
            except StopIteration:
                raise RuntimeError(
                    "pacer_torch.DataLoader: the torch DataLoader ended before the epoch "
                    "(a bug in the planned steps)"
                ) from None
            planned.check(idx)
            if len(idx) == 0:  # the workers fetched a stand-in sample (_PlannedSteps)
                batch = _empty(batch)
            return _to(batch, self.device) if self.device is not None else batch

        return before, fetch

    def _iter_map(self) -> Iterator[Any]:
        job = self.job
        restore_if_needed(job)
        sampler = job.sampler
        if sampler.remaining() == 0:
            sampler.next_epoch()
        if self.num_workers > 0 or self.pin_memory:
            before, fetch = self._worker_fetch()
        else:
            before, fetch = (lambda: None), self._fetch
        while True:
            if sum(sampler.step_batches(job.batches)) == 0:
                # Only samples no rank can take without going below its minimum are
                # left (sampler.split_remainder): the epoch ends without them.
                sampler.take(job.batches)
                sampler.next_epoch()
                return
            before()
            idx = job.begin_step()[job.rank]
            try:
                yield fetch(idx)
            except GeneratorExit:  # the user's loop left during this step
                job.leave_step()
                raise
            last = sampler.remaining() == 0
            if last:
                sampler.next_epoch()
            job.end_step()
            if last:
                return


#: The end of an iterator (``next(it, _END)``).
_END = object()

#: Samples per message from an iterable data set's loader workers.
STREAM_CHUNK = 32


def _uncollate(batch: Any) -> List[Any]:
    """The samples of a batch made by ``default_collate`` (tensors split along their
    first dimension; lists, tuples and dicts of them per sample)."""
    if isinstance(batch, torch.Tensor):
        return list(batch.unbind(0))
    if isinstance(batch, dict):
        cols = {k: _uncollate(v) for k, v in batch.items()}
        n = len(next(iter(cols.values()))) if cols else 0
        return [{k: c[i] for k, c in cols.items()} for i in range(n)]
    if isinstance(batch, (list, tuple)):
        parts = [_uncollate(v) for v in batch]
        n = len(parts[0]) if parts else 0
        rows = [[p[i] for p in parts] for i in range(n)]
        return [tuple(r) for r in rows] if isinstance(batch, tuple) else rows
    raise TypeError(
        f"pacer_torch.DataLoader: cannot split a worker's batch of {type(batch).__name__} "
        "into samples (an iterable data set's samples must be tensors, numbers, or "
        "lists, tuples and dicts of them)"
    )


def _empty(x: Any) -> Any:
    """A collated batch's structure with no sample (every tensor's first 0 rows)."""
    if isinstance(x, torch.Tensor):
        return x[:0]
    if isinstance(x, (list, tuple)):
        return type(x)(_empty(v) for v in x)
    if isinstance(x, dict):
        return {k: _empty(v) for k, v in x.items()}
    return x


def _pin(x: Any) -> Any:  # pragma: no cover - no GPU here
    if isinstance(x, torch.Tensor):
        return x.pin_memory()
    if isinstance(x, (list, tuple)):
        return type(x)(_pin(v) for v in x)
    if isinstance(x, dict):
        return {k: _pin(v) for k, v in x.items()}
    return x


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


def state() -> UserState:
    """The job's user state: a dict whose entries pacer's checkpoints save and a resume
    restores (``pacer_torch/state.py``): objects with ``state_dict``/``load_state_dict``
    (LR scheduler, GradScaler, EMA) in place, other values replaced by the saved ones.
    Register entries after the ``DataLoader`` is made and before the resume
    (``remaining_epochs`` or the first iteration)::

        pacer.state()["scheduler"] = scheduler
        pacer.state()["best_accuracy"] = 0.0
    """
    job = current()
    if job is None:
        raise RuntimeError("pacer_torch.state: create the pacer_torch.DataLoader first")
    return job.user_state


def request_stop() -> None:
    """Checkpoint to the checkpoint directory after the current step, then exit with
    status 143 (``job.STOP_EXIT_STATUS``) on every rank."""
    job = current()
    if job is not None:
        job.request_stop()


class _PlannedSteps:
    """The batch sampler of the torch DataLoader behind ``pacer_torch.DataLoader``
    (``num_workers`` > 0 or ``pin_memory``): for the steps of the current epoch, this
    rank's sample indices, computed ahead of the steps from the decisions every rank
    already knows (``job.known_decision``) on a copy of the sampler's position. The
    job's own sampler takes the same indices when each step begins (same position,
    same decisions), so the checkpointed position is that of the steps run, not of the
    steps prefetched."""

    def __init__(self, job: Job):
        self.job = job
        #: The index lists handed out and not yet run (checked against the job's own
        #: sampler when each step begins).
        self.planned: "collections.deque[List[int]]" = collections.deque()

    def check(self, idx: torch.Tensor) -> None:
        want = idx.tolist()
        got = self.planned.popleft() if self.planned else None
        if got != want:
            raise RuntimeError(
                "pacer_torch.DataLoader: the prefetched batch is not the step's (planned "
                f"{None if got is None else len(got)} samples, the step takes {len(want)})"
            )

    def __iter__(self) -> Iterator[List[int]]:
        # The position is read now, when the torch iterator is made (before the step
        # begins), not at the first batch: without workers torch asks for that only
        # when the step fetches, after the job's sampler has taken the step's indices.
        job = self.job
        self.planned.clear()
        shadow = ElasticSampler(job.sampler.num_samples, job.sampler.seed)
        shadow.minima, shadow.caps = job.sampler.minima, job.sampler.caps
        shadow.load_state_dict(job.sampler.state_dict())
        return self._steps(shadow, job.steps)

    def _steps(self, shadow: ElasticSampler, first: int) -> Iterator[List[int]]:
        """``first``: the absolute number of the coming step."""
        job = self.job
        epoch = shadow.epoch
        k = 0
        while shadow.epoch == epoch and shadow.remaining() > 0:
            ahead = first + k - job.steps
            d = job.known_decision(ahead)
            if sum(shadow.step_batches(d.batches)) == 0:
                return
            idx = shadow.take(d.batches)[job.rank].tolist()
            self.planned.append(idx)
            # A rank with no sample in a step (the epoch's remainder, or min_local_batch)
            # still gets one batch from the workers, so that the batches stay in step
            # order; torch cannot collate no sample, so the workers fetch sample 0 as a
            # stand-in and ``fetch`` empties it.
            yield idx if idx else [0]
            k += 1

    def __len__(self) -> int:
        b = self.job.global_batch
        return -(-self.job.sampler.remaining() // b)
