"""The inputs of the gradient noise scale: ``|g|^2`` of a flat gradient, preconditioned
for Adam/AdamW and unscaled for AMP's ``GradScaler`` (as AdaptDL's
``GradientNoiseScale``/``AdamGradientNoiseScale``), for both engines."""

from __future__ import annotations

import math
from typing import Any, List, Optional, Sequence, Tuple

import torch


#: Optimizers whose second-moment estimate preconditions the noise scale's norms.
ADAM_LIKE = (torch.optim.Adam, torch.optim.AdamW)

#: Steps of Adam before its second-moment estimate is used (AdaptDL's choice).
ADAM_WARMUP_STEPS = 5


def preconditioner(
    optimizer: Optional[torch.optim.Optimizer], params: Sequence[torch.Tensor]
) -> Optional[torch.Tensor]:
    """Adam/AdamW's preconditioner over ``params`` (flattened in their order), as
    AdaptDL's ``AdamGradientNoiseScale``: ``sqrt(v / (1 - beta2^t)) + eps`` per
    element, 1 for a parameter whose optimizer has taken fewer than 5 steps; None for
    another optimizer (no preconditioning). The noise scale then measures the
    gradients ``g / pinv`` that the optimizer's update follows."""
    if not isinstance(optimizer, ADAM_LIKE):
        return None
    groups = {id(p): g for g in optimizer.param_groups for p in g["params"]}
    parts = []
    for p in params:
        st = optimizer.state.get(p, {})
        step = float(st.get("step", 0))
        g = groups.get(id(p))
        if g is None or step < ADAM_WARMUP_STEPS or "exp_avg_sq" not in st:
            parts.append(torch.ones(p.numel(), dtype=torch.float32, device=p.device))
            continue
        beta2, eps = g["betas"][1], g["eps"]
        v = st["exp_avg_sq"].detach().reshape(-1).float()
        parts.append(v.sqrt().div_(math.sqrt(1.0 - beta2**step)).add_(eps))
    return torch.cat(parts)


#: Values per row of the CPU's sum of squares (``_sum_of_squares``).
ROW_LEN = 1 << 14


def _sum_of_squares(g: torch.Tensor) -> torch.Tensor:
    """``sum(g**2)`` as a float64 0-d tensor. On a GPU in float64 throughout. On the
    CPU, where converting every value to float64 first costs ~45x a float32 norm (51 ms
    against 1.8 ms for 11 M values, one thread), the norms of rows of ``ROW_LEN``
    values in ``g``'s precision, their squares summed in float64: a float32 row's
    norm is within ~1e-6 of the exact one, while one float32 norm over all 11 M values
    was off by 9e-4 (measured)."""
    if g.is_cuda or g.dtype == torch.float64:
        return torch.linalg.vector_norm(g, dtype=torch.float64) ** 2
    n = g.numel()
    m = n - n % ROW_LEN
    # (Summed without a zero to start from: 0.0 + s is s for every s >= 0, inf or nan.)
    out: Optional[torch.Tensor] = None
    if m:
        rows = torch.linalg.vector_norm(g[:m].view(-1, ROW_LEN), dim=1, dtype=torch.float32)
        out = rows.double().square().sum()
    if m < n:
        rest = torch.linalg.vector_norm(g[m:], dtype=torch.float64) ** 2
        out = rest if out is None else out + rest
    return out if out is not None else torch.zeros((), dtype=torch.float64)


def grad_norm_sqr_t(
    flat: torch.Tensor, pinv: Optional[torch.Tensor], grad_scaler: Optional[Any]
) -> torch.Tensor:
    """``|g / pinv|^2`` of a flat gradient as a float64 tensor on its device (no wait
    for the device, except for a ``GradScaler``'s scale), divided by the square of an
    AMP ``GradScaler``'s current scale (the gradients are the scaled ones until
    ``scaler.unscale_``/``step``). Not finite on an overflow step (the noise scale
    skips it, as the scaler skips the step)."""
    g = flat if pinv is None else flat / pinv.to(flat.dtype)
    sqr = _sum_of_squares(g)
    if grad_scaler is not None and grad_scaler.is_enabled():
        sqr = sqr / float(grad_scaler.get_scale()) ** 2
    return sqr


def grad_norm_sqr(
    flat: torch.Tensor, pinv: Optional[torch.Tensor], grad_scaler: Optional[Any]
) -> float:
    """``grad_norm_sqr_t`` as a Python float (waits for the device)."""
    return float(grad_norm_sqr_t(flat, pinv, grad_scaler))


class ConsecutiveSteps:
    """The noise scale's inputs where one rank computes every step (no second gradient
    of the same step to compare with). AdaptDL, at one replica, takes the last two
    steps' gradients as two draws at one point; but the parameters moved between them,
    so the change of the true gradient counts as noise. Here the drift is cancelled to
    first order: with the last three steps' mean gradients ``g_a, g_b, g_c`` (batches
    ``b_a, b_b, b_c``, preconditioned by the current ``pinv``, each unscaled by its own
    step's loss scale), ``d = g_b - (g_a + g_c) / 2`` holds no linear drift, and
    ``E|d|^2 = tr(S) (1/b_b + 1/(4 b_a) + 1/(4 b_c))``; then
    ``|G|^2 = mean_i(|g_i|^2 - tr(S)/b_i)``. python/README.md ("One rank") compares
    both with the unbiased estimate from two halves of each step.

    Costs two float32 copies of the gradient (kept) and, per step, two sums of squares
    (four under a preconditioner, which changes every step)."""

    def __init__(self) -> None:
        #: The last two steps' gradients and batches, oldest first.
        self.kept: List[Tuple[torch.Tensor, float]] = []
        #: ``|g|^2`` of the kept gradients without a preconditioner (by identity).
        self._sqr: List[Tuple[torch.Tensor, Optional[float]]] = []

    def reset(self) -> None:
        """Forget the last steps (after a step whose gradient is not the job's)."""
        self.kept = []
        self._sqr = []

    def observe(
        self,
        flat: torch.Tensor,
        b: int,
        pinv: Optional[torch.Tensor],
        grad_scaler: Optional[Any],
        owned: bool = False,
    ) -> Optional[Tuple[float, float, float]]:
        """Keeps ``flat`` (this step's mean gradient over ``b`` samples); returns this
        step's ``(|G|^2, tr(S), b)`` estimate from it and the last two, or None before
        there are three steps, after a step without samples, or when a value is not
        finite (an AMP overflow step: the steps around it are dropped, as the scaler
        drops the step). ``owned``: ``flat`` is a new tensor the caller no longer
        uses, kept as it is when float32 (no copy)."""
        if b <= 0:
            self.kept = []
            return None
        if owned and flat.dtype == torch.float32:
            cur = flat.detach()
        else:
            cur = flat.detach().to(torch.float32, copy=True)
        if grad_scaler is not None and grad_scaler.is_enabled():
            cur.div_(float(grad_scaler.get_scale()))
        kept = [k for k in self.kept if k[0].shape == cur.shape] + [(cur, float(b))]
        self.kept = kept[-2:]
        if len(kept) < 3:
            return None
        (ga, ba), (gb, bb), (gc, bc) = kept
        d = gb - (ga + gc).mul_(0.5)
        if pinv is None:
            # Without a preconditioner a kept gradient's |g|^2 does not change from one
            # step to the next: each is summed once, when it is the newest.
            fresh = torch.stack([_sum_of_squares(d), _sum_of_squares(gc)]).tolist()
            known = self._sqr
            if len(known) != 2 or known[0][0] is not ga or known[1][0] is not gb:
                known = [(ga, None), (gb, None)]
            olds = [s for _, s in known]
            if any(s is None for s in olds):
                olds = torch.stack([_sum_of_squares(ga), _sum_of_squares(gb)]).tolist()
            sums = [fresh[0], olds[0], olds[1], fresh[1]]
            self._sqr = [(gb, olds[1]), (gc, fresh[1])]
        else:
            p = pinv.to(device=cur.device, dtype=cur.dtype)
            sums = torch.stack([_sum_of_squares(t / p) for t in (d, ga, gb, gc)]).tolist()
            self._sqr = []
        if not all(math.isfinite(v) for v in sums):
            self.kept = []
            return None
        trace_cov = sums[0] / (1.0 / bb + 0.25 / ba + 0.25 / bc)
        grad_sqr = sum(s - trace_cov / bi for s, bi in zip(sums[1:], (ba, bb, bc))) / 3.0
        return grad_sqr, trace_cov, float(b)
