"""pacer for PyTorch: per-worker batches, gradient noise scale, goodput and elastic
restarts in data-parallel training, driven by pacer's Rust job session.

A DDP script changes in seven lines (python/README.md, "Porting a DDP script";
python/examples/train_ddp.py marks each)::

    import pacer_torch as pacer
    pacer.init_process_group()
    net = pacer.DataParallel(model, optimizer)
    loader = pacer.DataLoader(dataset, global_batch=512, controller="lbbsp")
    pacer.state()["scheduler"] = scheduler      # checkpointed with the model
    for epoch in pacer.remaining_epochs(10):
        for x, y in loader: ...
    pacer.destroy_process_group()
"""

from . import _native
from ._native import CONTROLLERS, PREDICTORS, Gns, Perf, Predictor, Session
from .env import destroy_process_group, global_batch, init_process_group, rendezvous
from .job import current
from .parallel import (
    DataLoader,
    DataParallel,
    remaining_epochs,
    request_stop,
    restore_if_needed,
    resume,
    save_checkpoint,
    state,
)
from .probe import probe_max_local_batch
from .sampler import ElasticSampler

__all__ = [
    "CONTROLLERS",
    "PREDICTORS",
    "DataLoader",
    "DataParallel",
    "ElasticSampler",
    "Gns",
    "Perf",
    "Predictor",
    "Session",
    "current",
    "destroy_process_group",
    "global_batch",
    "init_process_group",
    "probe_max_local_batch",
    "remaining_epochs",
    "rendezvous",
    "request_stop",
    "restore_if_needed",
    "resume",
    "save_checkpoint",
    "state",
    "_native",
]
