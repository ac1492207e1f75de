"""``DataParallel(..., engine="ddp")``: PyTorch's reducer with pacer's weights.

The model runs inside ``torch.nn.parallel.DistributedDataParallel``: its buckets are
all-reduced while the backward pass still runs (DDP's overlap), through a communication
hook that scales each rank's bucket of local mean gradients by ``b_i / B`` before a
summing all-reduce, so the result is ``sum_i (b_i / B) g_i``, the global batch's mean
gradient, exactly as the default engine computes it. The last bucket also carries the
step's rows (every rank's measurements) and rank 0's decision (``job.py``), so a step
still costs no collective beyond DDP's own.
``|g_i|^2`` and ``|g|^2`` (the noise scale's inputs), when the step takes them
(``Job.norms``, ``DataLoader(noise_scale=)``), are summed over the buckets before
and after their reduction: each reduced bucket's ``|g|^2`` is kept by the bucket's index
(computed on gloo's threads, which finish buckets in no fixed order and, two at once,
lost one another's updates to a shared sum) and ``finish`` adds them in the buckets'
order.

Differences from the default engine: the rank's compute time ends when its first bucket
is ready (DDP starts communicating then), so an emulated slow device (``speed``) is
padded there; buffers are not broadcast (``broadcast_buffers=False``), as in the default
engine.
"""

from __future__ import annotations

import inspect
import weakref
from typing import TYPE_CHECKING, Any, Dict, List, Optional

import torch
import torch.distributed as dist

from .gradnorm import ADAM_LIKE, grad_norm_sqr_t, preconditioner
from .job import ROW, Decision, current

if TYPE_CHECKING:  # pragma: no cover
    from .job import Job


class StepState:
    """What the hooks of one backward pass gather, and what they share (the same for
    every bucket of the step)."""

    def __init__(self, rank: int, sizes: List[int], precondition: bool, norms: bool) -> None:
        #: This rank's local batch and the step's sum of them.
        self.b, self.total = sizes[rank], sum(sizes)
        #: The noise scale reads |g_i|^2 and |g|^2 only when the step takes its norms
        #: (``norms``: ``Job.norms``) and two ranks or more computed it
        #: (``Job.gathered``): every rank knows both, so all skip alike.
        self.norms = norms and sum(1 for s in sizes if s > 0) >= 2
        #: Whether the optimizer preconditions the norms (Adam, ``preconditioner``).
        self.precondition = precondition
        #: |g_i|^2 summed over the buckets: a float64 tensor on the gradients' device,
        #: read once per step (a read in a bucket's hook would make the backward pass
        #: wait).
        self.local_sqr: Any = 0.0
        self.measured: Optional[tuple] = None
        #: Each bucket's future (by the bucket's index), its preconditioner, and the
        #: reduced bucket's |g|^2 where its callback computed it (every bucket but the
        #: last: ``finish`` sums them in the buckets' order, so that the sum does not
        #: depend on which all-reduce finished first).
        self.futures: Dict[int, torch.futures.Future] = {}
        self.pinv: Dict[int, Optional[torch.Tensor]] = {}
        self.agg_sqr: Dict[int, Any] = {}
        #: The last bucket: its index, and where its reduced rows and decision are.
        self.last: Optional[int] = None
        self.tail: Optional[torch.Tensor] = None
        #: Alone (one rank): the rows and decision as they would have travelled.
        self.alone: Optional[List[float]] = None


def _value(f: torch.futures.Future) -> torch.Tensor:
    """The reduced bucket (an all-reduce's future holds the list of its tensors)."""
    return f.value()[0]


#: Every engine alive, so that ``destroy_process_group`` can drop their DDP wrappers,
#: which hold the process group (``env.destroy_process_group``).
_ENGINES: "weakref.WeakSet[DdpEngine]" = weakref.WeakSet()


def release_all() -> None:
    """Drops every engine's DDP wrapper (before the process group is destroyed)."""
    for e in list(_ENGINES):
        e.ddp = None


class DdpEngine:
    """Owns the DDP wrapper and its communication hook (module docs)."""

    def __init__(self, module: torch.nn.Module, bucket_cap_mb: Optional[float] = None):
        kw: dict = {"gradient_as_bucket_view": True}
        # Buffers synchronised at the start only, as the flat engine does (torch >= 2.15
        # names it forward_sync_buffers and deprecates broadcast_buffers).
        params = inspect.signature(torch.nn.parallel.DistributedDataParallel).parameters
        kw["forward_sync_buffers" if "forward_sync_buffers" in params else "broadcast_buffers"] = (
            False
        )
        if bucket_cap_mb is not None:
            kw["bucket_cap_mb"] = bucket_cap_mb
        if next(module.parameters()).is_cuda:  # pragma: no cover - no GPU here
            kw["device_ids"] = [torch.cuda.current_device()]
        self.ddp: Optional[torch.nn.parallel.DistributedDataParallel] = (
            torch.nn.parallel.DistributedDataParallel(module, **kw)
        )
        self.ddp.register_comm_hook(self, DdpEngine._hook)
        self.step: Optional[StepState] = None
        #: Set by ``DataParallel``: the noise scale's preconditioner and loss scale.
        self.optimizer: Optional[torch.optim.Optimizer] = None
        self.grad_scaler: Any = None
        _ENGINES.add(self)

    def _job(self) -> "Job":
        job = current()
        if job is None or job.step_ctx is None:
            raise RuntimeError(
                "pacer_torch.DataParallel: backward() outside a step of a pacer_torch.DataLoader"
            )
        return job

    def _hook(self, bucket):  # no annotations: DDP checks them, and these would be strings
        job = self._job()
        ctx = job.step_ctx
        assert ctx is not None
        st = self.step
        if st is None:
            if ctx.synced:
                raise RuntimeError(
                    "pacer_torch.DataParallel: a second backward() in one step after the "
                    "gradients were reduced (to accumulate, run all but the step's last "
                    "backward() inside `with model.no_sync():`)"
                )
            st = self.step = StepState(
                job.rank, ctx.sizes, isinstance(self.optimizer, ADAM_LIKE), ctx.norms
            )
            st.measured = job.end_compute()
        buf = bucket.buffer()
        index = bucket.index()
        world = job.world
        pinv = None
        if st.norms and st.precondition:
            # The bucket's buffer holds its parameters' gradients in this order.
            pinv = preconditioner(self.optimizer, bucket.parameters())
            if pinv is not None and pinv.numel() != buf.numel():  # pragma: no cover
                raise RuntimeError(
                    f"pacer_torch: a DDP bucket of {buf.numel()} values holds parameters of "
                    f"{pinv.numel()} (the Adam preconditioner cannot be laid over it)"
                )
        st.pinv[index] = pinv
        b, total = st.b, st.total
        if b > 0:
            if st.norms:
                st.local_sqr = st.local_sqr + grad_norm_sqr_t(buf, pinv, self.grad_scaler)
            if b != total:
                buf.mul_(b / total)
        else:
            buf.zero_()
        if bucket.is_last():
            st.last = index
            fut = self._last_bucket(job, st, buf)
        elif world == 1:  # the all-reduce of one contribution is the identity
            fut = torch.futures.Future()
            fut.set_result(buf)
        else:
            fut = dist.all_reduce(buf, async_op=True).get_future()
            if st.norms:
                scaler = self.grad_scaler

                def reduced(f: torch.futures.Future) -> torch.Tensor:
                    t = f.value()[0]
                    st.agg_sqr[index] = grad_norm_sqr_t(t, pinv, scaler)
                    return t

                fut = fut.then(reduced)
            else:
                fut = fut.then(_value)
        st.futures[index] = fut
        return fut

    def _last_bucket(self, job: "Job", st: StepState, buf: torch.Tensor):
        """The last bucket's all-reduce, with every rank's row and rank 0's decision
        after the gradients (``finish`` reads them, and the bucket's |g|^2)."""
        assert st.measured is not None
        rank, world = job.rank, job.world
        n_rows, n_dec = ROW * world, Decision.slot_len(world)
        values = [0.0] * (n_rows + n_dec)
        values[ROW * rank : ROW * (rank + 1)] = job.local_row(
            st.measured, float(st.local_sqr)
        )
        if rank == 0:
            values[n_rows:] = job.decision_slot()
        trace = job.trace
        if world == 1:
            # Alone: the values as they would have travelled (in the buffer's dtype).
            st.alone = torch.tensor(values, dtype=buf.dtype).tolist()
            if trace is not None:
                trace.mark("arrive")
                trace.mark("reduced")
            fut = torch.futures.Future()
            fut.set_result(buf)
            return fut
        tail = torch.tensor(values, dtype=buf.dtype)
        if buf.is_cuda:  # from pinned memory: the copy does not wait for the device
            tail = tail.pin_memory().to(buf.device, non_blocking=True)
        n = buf.numel()
        both = torch.cat([buf, tail])
        # DDP copies the reduced bucket from the head into the gradients after ``finish``.
        head, st.tail = both[:n], both[n:]
        if trace is not None:
            trace.mark("arrive")

        def done(_f: torch.futures.Future) -> torch.Tensor:
            if trace is not None:
                trace.mark("reduced")
            return head

        return dist.all_reduce(both, async_op=True).get_future().then(done)

    def finish(self) -> None:
        """After the backward pass (before DDP copies the last bucket's reduced
        gradients into the parameters): the step's gathered rows, and |g|^2 of the
        reduced buckets in their order, to the job."""
        st, self.step = self.step, None
        if st is None:
            return
        for f in st.futures.values():
            f.wait()
        job = current()
        assert job is not None and st.last is not None
        world = job.world
        n_rows = ROW * world
        if st.alone is not None:
            back = st.alone
        else:
            assert st.tail is not None
            back = st.tail.tolist()
        rows = [back[ROW * r : ROW * (r + 1)] for r in range(world)]
        agg_sqr: Any = 0.0
        if st.norms:
            last = st.last
            st.agg_sqr[last] = grad_norm_sqr_t(
                st.futures[last].value(), st.pinv[last], self.grad_scaler
            )
            for i in sorted(st.agg_sqr):
                agg_sqr = agg_sqr + st.agg_sqr[i]
        one_rank = None
        ctx = job.step_ctx
        if job.one_rank is not None and self.ddp is not None and ctx is not None and ctx.norms:
            # One rank: the step's gradient (DDP's buckets hold it) for the noise scale.
            params = [p for p in self.ddp.module.parameters() if p.requires_grad]
            flat = torch.cat(
                [(p.grad if p.grad is not None else torch.zeros_like(p)).reshape(-1) for p in params]
            )
            if flat.dtype != torch.float32:
                flat = flat.to(torch.float32)
            pinv = preconditioner(self.optimizer, params)
            one_rank = job.one_rank.observe(
                flat, ctx.sizes[job.rank], pinv, self.grad_scaler, owned=True
            )
        job.gathered(rows, float(agg_sqr), back[n_rows:], one_rank)
        if job.trace is not None:
            job.trace.mark("gathered")

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        if self.ddp is None:
            raise RuntimeError(
                "pacer_torch.DataParallel: the process group was destroyed (engine='ddp')"
            )
        return self.ddp(*args, **kwargs)
