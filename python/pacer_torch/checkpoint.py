"""Checkpoints: model, optimiser, sampler position, session and noise-scale state, and
the script's own state (``pacer.state()``: LR scheduler, GradScaler, EMA, counters).

Rank 0 writes ``<dir>/checkpoint.pt`` (to a temporary name, then renamed, so a
checkpoint is either whole or absent); every rank waits for it. A checkpoint is checked
whole against the running job before any of it is applied: another model (parameter
names or shapes), another optimiser layout or another data set size is a ValueError
naming ``checkpoint`` and nothing changes. The world size may differ: the session keeps
the workers (ranks) both runs have, drops the others and adds the new ones. Rank 0's
session and its decisions (the coming step's and the one it was about to send) are
saved; resumed with the same ranks, the run continues with exactly those decisions,
otherwise rank 0 re-balances and broadcasts the new one.
"""

from __future__ import annotations

import os
import time
from typing import TYPE_CHECKING, Dict, List, Tuple

import torch
import torch.distributed as dist

from . import _native
from .job import Decision, share_from_rank0

if TYPE_CHECKING:  # pragma: no cover
    from .job import Job

FORMAT = "pacer_torch-checkpoint-1"
FILE = "checkpoint.pt"


def checkpoint_file(directory: str) -> str:
    return os.path.join(directory, FILE)


def _signature(model: torch.nn.Module) -> List[Tuple[str, List[int]]]:
    return [(k, list(v.shape)) for k, v in model.state_dict().items()]


def _optimizer_layout(opt: torch.optim.Optimizer) -> List[int]:
    return [len(g["params"]) for g in opt.param_groups]


def _barrier() -> None:
    if dist.is_available() and dist.is_initialized():
        dist.barrier()


def save(job: "Job", directory: str) -> str:
    """Writes the job's checkpoint (collective: every rank calls it at the same step)."""
    path = checkpoint_file(directory)
    if job.rank == 0:
        if job.model is None:
            raise RuntimeError("pacer_torch: no DataParallel model to checkpoint")
        os.makedirs(directory, exist_ok=True)
        state = {
            "format": FORMAT,
            "model_signature": _signature(job.model.module),
            "model": job.model.module.state_dict(),
            "optimizer": job.optimizer.state_dict() if job.optimizer is not None else None,
            "optimizer_layout": _optimizer_layout(job.optimizer) if job.optimizer else None,
            "sampler": job.sampler.state_dict(),
            "session": job.session.state(),
            "next": job.next.state_dict(),
            "ahead": [d.state_dict() for d in job.ahead],
            "pending": job.pending.state_dict() if job.pending is not None else None,
            "gns": job.gns.state(),
            "noise_scale_norms": job.norms,
            "steps": job.steps,
            "samples": job.samples,
            "base_batch": job.base_batch,
            "lr_gain": job.lr_gain,
            "world_size": job.world,
            "user_state": job.user_state.snapshot(),
        }
        tmp = path + ".tmp"
        torch.save(state, tmp)
        os.replace(tmp, path)
    _barrier()
    job.last_checkpoint_t = time.monotonic()
    return path


def _check(job: "Job", state: Dict) -> None:
    if not isinstance(state, dict) or state.get("format") != FORMAT:
        raise ValueError(f"checkpoint: not a {FORMAT} file")
    if job.model is None:
        raise RuntimeError("pacer_torch: wrap the model in DataParallel before resuming")
    want = _signature(job.model.module)
    got = [(k, list(s)) for k, s in state["model_signature"]]
    if got != want:
        diff = next(
            (f"{a} vs this model's {b}" for a, b in zip(got, want) if a != b),
            f"{len(got)} tensors vs this model's {len(want)}",
        )
        raise ValueError(f"checkpoint: saved from another model ({diff})")
    if (job.optimizer is None) != (state["optimizer"] is None):
        raise ValueError("checkpoint: optimiser state present in only one of checkpoint and job")
    if job.optimizer is not None and state["optimizer_layout"] != _optimizer_layout(job.optimizer):
        raise ValueError(
            f"checkpoint: optimiser parameter groups {state['optimizer_layout']} vs this "
            f"job's {_optimizer_layout(job.optimizer)}"
        )
    job.sampler.check_state(state["sampler"])
    job.user_state.check(state.get("user_state", {}))


def load(job: "Job", path: str) -> None:
    """Resumes the job from ``path`` (every rank reads it)."""
    try:
        state = torch.load(path, map_location="cpu", weights_only=False)
    except (OSError, RuntimeError, EOFError) as e:
        raise ValueError(f"checkpoint: cannot read {path}: {e}") from None
    _check(job, state)
    # Build everything before changing anything.
    try:
        gns = _native.Gns.from_state(state["gns"])
    except ValueError as e:
        raise ValueError(f"checkpoint: {e}") from None
    built: Dict[str, object] = {}

    def rank0_session() -> Tuple[Decision, Decision, bool]:
        try:
            session = _native.Session.from_state(state["session"])
        except ValueError as e:
            raise ValueError(f"checkpoint: {e}") from None
        lr_gain = float(state["lr_gain"])
        members = session.workers()
        same = members == list(range(job.world)) and state.get("next") and state.get("pending")
        if same:
            nxt = Decision.from_state(state["next"])
            pending = Decision.from_state(state["pending"])
        else:
            for w in members:
                if w >= job.world:
                    session.leave(w)
            for r in range(job.world):
                if r not in members:
                    job.join(session, r)
            try:
                d = session.decide()
            except ValueError as e:
                raise ValueError(
                    f"max_local_batch: the checkpoint's batches do not fit: {e}"
                ) from None
            nxt = Decision(session.global_batch, lr_gain, list(d[0]), list(d[1]))
            pending = nxt.copy()
        built["session"] = session
        return nxt, pending, bool(same)

    nxt, pending, same = share_from_rank0(job.rank, rank0_session)
    # The decisions of the steps after the coming one (a loader that prefetches): the
    # saved ones when the ranks and the prefetch depth are the same, else the coming
    # step's decision repeated.
    saved_ahead = state.get("ahead") or []
    if same and len(saved_ahead) == job.lookahead:
        ahead = [Decision.from_state(d) for d in saved_ahead]
    else:
        ahead = [nxt.copy() for _ in range(job.lookahead)]
    job.model.module.load_state_dict(state["model"])
    if job.optimizer is not None:
        job.optimizer.load_state_dict(state["optimizer"])
    job.sampler.load_state_dict(state["sampler"])
    job.user_state.restore(state.get("user_state", {}))
    job.gns = gns
    if job.noise_scale_mode == "auto" and state.get("noise_scale_norms"):
        # Taken when the checkpoint was written (read by then): still taken. Every rank
        # reads the same file, so all agree.
        job.norms = True
    if job.rank == 0:
        job.session = built["session"]  # type: ignore[assignment]
        job.pending = pending
    job.next = nxt
    job.ahead = ahead
    job.decisions_version += 1
    job._lr_gain = float(state["lr_gain"])
    job.steps, job.samples = int(state["steps"]), int(state["samples"])
    job.last_checkpoint_t = time.monotonic()
    job.restored = True
