"""``DataParallel(..., engine="flat")`` (the default): one all-reduce after the backward pass.

The local mean gradients ``g_i`` are copied into one flat buffer, scaled by ``b_i / B``
and all-reduced together with every rank's row of measurements and rank 0's decision
(``job.py``), so ``g = sum_i (b_i / B) g_i`` is the global batch's mean gradient whatever
the local batches are; then copied back into the parameters' gradients.

Per-step host work kept small (python/README.md, "Engines"): the buffers are made once
per model; the copies in and out are one multi-tensor call each; the row and the decision
go in one tensor from the host (pinned on a GPU), and come back in one read; ``|g_i|^2``
and ``|g|^2`` are computed only when the job takes the noise scale's norms (``Job.norms``,
``DataLoader(noise_scale=)``) and two ranks or more computed the step; a job of one rank
skips the reduction, whose result is its input.
"""

from __future__ import annotations

from typing import Any, List, Optional, Tuple

import torch
import torch.distributed as dist

from .gradnorm import grad_norm_sqr, grad_norm_sqr_t, preconditioner
from .job import ROW, Decision, Job


class FlatEngine:
    """The flat engine's buffers and its reduction of one step (module docs)."""

    def __init__(self, params: List[torch.Tensor]):
        self.params = params
        self._buf: Optional[torch.Tensor] = None
        self._views: List[torch.Tensor] = []
        self._host = torch.zeros(0)

    def _buffers(
        self, dtype: torch.dtype, device: torch.device, n_tail: int
    ) -> Tuple[torch.Tensor, List[torch.Tensor], torch.Tensor]:
        """The buffers, made once per model (allocating 4 bytes per parameter each step
        costs page faults): the all-reduce's buffer (the gradients, then ``n_tail``
        values of rows and decision), each parameter's view of it, and the tail's
        staging copy on the host (pinned on a GPU)."""
        params = self.params
        n_par = sum(p.numel() for p in params)
        buf = self._buf
        if (
            buf is None
            or buf.numel() != n_par + n_tail
            or buf.dtype != dtype
            or buf.device != device
        ):
            buf = self._buf = torch.zeros(n_par + n_tail, dtype=dtype, device=device)
            self._views = [
                v.view_as(p) for v, p in zip(buf[:n_par].split([p.numel() for p in params]), params)
            ]
            host = torch.zeros(n_tail, dtype=dtype)
            self._host = host.pin_memory() if device.type == "cuda" else host
        return buf, self._views, self._host

    def sync(
        self,
        job: Job,
        measured: Tuple[float, float, float],
        optimizer: Optional[torch.optim.Optimizer],
        grad_scaler: Optional[Any],
        distributed: bool,
    ) -> None:
        """Reduces this step's gradients and hands the gathered rows to ``job``
        (``measured``: ``job.end_compute()``; ``distributed``: a process group is up)."""
        ctx = job.step_ctx
        assert ctx is not None
        params = self.params
        dtype = params[0].dtype
        if dtype in (torch.float16, torch.bfloat16):
            dtype = torch.float32
        device = params[0].device
        rank, world = job.rank, job.world
        sizes = ctx.sizes
        b = sizes[rank]
        total = sum(sizes)
        # The noise scale reads |g_i|^2 and |g|^2 only when the step takes its norms and
        # two ranks or more computed it (``Job.gathered``); every rank knows both, so all
        # skip alike.
        norms = ctx.norms and sum(1 for s in sizes if s > 0) >= 2
        grads = [p.grad for p in params]
        if world == 1 or not distributed:
            self._alone(job, measured, grads, b, dtype, optimizer, grad_scaler)
            return
        n_rows = ROW * world
        n_dec = Decision.slot_len(world)
        buf, views, host = self._buffers(dtype, device, n_rows + n_dec)
        n_par = buf.numel() - n_rows - n_dec
        flat = buf[:n_par]
        pinv = None
        sqr = 0.0
        if b > 0:
            # One multi-tensor copy into the flat buffer's views (the per-parameter
            # Python loop cost ~10 us a parameter: launch-bound steps on GPUs felt it).
            copy_all(
                views, [g if g is not None else torch.zeros_like(p) for g, p in zip(grads, params)]
            )
            if norms:
                pinv = preconditioner(optimizer, params)
                sqr = grad_norm_sqr(flat, pinv, grad_scaler)
            if b != total:  # (a weight of 1 leaves every value as it is)
                flat.mul_(b / total)
        else:
            flat.zero_()
        # The tail (every rank's row, rank 0's decision) in one copy from the host;
        # from pinned memory on a GPU, so the copy does not wait for the device. Built
        # in torch's default dtype, then the buffer's, as the values always travelled.
        tail = [0.0] * (n_rows + n_dec)
        tail[ROW * rank : ROW * (rank + 1)] = job.local_row(measured, sqr)
        if rank == 0:
            tail[n_rows:] = job.decision_slot()
        staged = torch.tensor(tail)
        if device.type == "cuda":
            host.copy_(staged)
            buf[n_par:].copy_(host, non_blocking=True)
        else:
            buf[n_par:].copy_(staged)
        trace = job.trace
        if trace is not None:
            trace.mark("arrive")
        dist.all_reduce(buf)
        if trace is not None:
            trace.mark("reduced")
        agg_sqr = 0.0
        if norms and pinv is None:
            pinv = preconditioner(optimizer, params)
        if device.type == "cuda":
            # The aggregate's |g|^2 and the tail reach the host in one copy (one wait).
            parts = [buf[n_par:].to(torch.float64)]
            if norms:
                parts.append(grad_norm_sqr_t(flat, pinv, grad_scaler).reshape(1))
            back = torch.cat(parts).cpu().tolist()
            if norms:
                agg_sqr = back.pop()
        else:
            back = buf[n_par:].tolist()
            if norms:
                agg_sqr = grad_norm_sqr(flat, pinv, grad_scaler)
        rows = [back[ROW * r : ROW * (r + 1)] for r in range(world)]
        decision = back[n_rows:]
        with torch.no_grad():
            if all(g is not None for g in grads):
                copy_all(grads, views)
            else:
                for p, g, v in zip(params, grads, views):
                    if g is None:
                        p.grad = v.to(p.dtype, copy=True)
                    else:
                        g.copy_(v)
        job.gathered(rows, agg_sqr, decision, None)
        if trace is not None:
            trace.mark("gathered")

    def _alone(
        self,
        job: Job,
        measured: Tuple[float, float, float],
        grads: List[Any],
        b: int,
        dtype: torch.dtype,
        optimizer: Optional[torch.optim.Optimizer],
        grad_scaler: Optional[Any],
    ) -> None:
        """``sync`` for a job of one rank: the all-reduce of one contribution is the
        identity and the weight ``b / B`` is 1, so the gradients stay where autograd
        left them (a parameter without one gets zeros, as after a reduction); the row
        and the decision take the values they would have travelled as (torch's default
        dtype, then the buffer's ``dtype``); the noise scale comes from consecutive
        steps (``ConsecutiveSteps``) when the step takes its norms."""
        params = self.params
        with torch.no_grad():
            for p, g in zip(params, grads):
                if g is None:
                    p.grad = torch.zeros_like(p)
        vals = torch.tensor(job.local_row(measured, 0.0) + job.decision_slot())
        if vals.dtype != dtype:
            vals = vals.to(dtype)
        back = vals.tolist()
        trace = job.trace
        if trace is not None:
            trace.mark("arrive")
            trace.mark("reduced")
        one_rank = None
        ctx = job.step_ctx
        if job.one_rank is not None and ctx is not None and ctx.norms:
            # A new float32 copy of the gradient, which ConsecutiveSteps keeps.
            flat = torch.cat([p.grad.reshape(-1) for p in params])
            if flat.dtype != torch.float32:
                flat = flat.to(torch.float32)
            pinv = preconditioner(optimizer, params)
            one_rank = job.one_rank.observe(flat, b, pinv, grad_scaler, owned=True)
        job.gathered([back[:ROW]], 0.0, back[ROW:], one_rank)
        if trace is not None:
            trace.mark("gathered")


def copy_all(dst: List[torch.Tensor], src: List[torch.Tensor]) -> None:
    """``d.copy_(s)`` for each pair: one multi-tensor call where torch has it."""
    foreach = getattr(torch, "_foreach_copy_", None)
    if foreach is not None:
        foreach(dst, src)
    else:  # pragma: no cover - torch < 2.2
        for d, s in zip(dst, src):
            d.copy_(s)
