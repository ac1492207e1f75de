"""``pacer_torch.DataLoader(num_workers=...)``: the steps' batches come from a real
``torch.utils.data.DataLoader`` (worker processes, prefetch) whose batch sampler hands
out each rank's share of steps decided ahead (``job.lookahead``). With 4 gloo ranks at
unequal emulated speeds the batches change during the run (lbbsp, and ``set_batches``
mid-epoch, which drops what the workers prefetched), and every sample of every epoch is
seen exactly once across the ranks; the decisions agree on every rank."""

import os

import pytest
import torch

import _dist

N = 1000
EPOCHS = 2
#: The ranks here are spawned (``_dist``), so their loader workers would be spawned too
#: (each importing torch anew: ~18 s per worker here); under torchrun they fork.
FORK = "fork"


class Indexed(torch.utils.data.Dataset):
    """A map-style data set (not a TensorDataset): each sample carries its index, and
    which worker process fetched it."""

    def __init__(self, n):
        g = torch.Generator().manual_seed(4)
        self.x = torch.randn(n, 8, generator=g)
        self.y = torch.randint(0, 3, (n,), generator=g)

    def __len__(self):
        return len(self.x)

    def __getitem__(self, i):
        info = torch.utils.data.get_worker_info()
        return self.x[i], self.y[i], i, -1 if info is None else info.id


def make_net():
    import pacer_torch as pacer

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 3))
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    return pacer.DataParallel(model, opt), opt


def train_step(net, opt, x, y):
    loss = torch.nn.functional.cross_entropy(net(x), y)
    opt.zero_grad()
    loss.backward()
    opt.step()


def _train(rank, world, out, num_workers, adaptive):
    import torch.distributed as dist

    import pacer_torch as pacer

    net, opt = make_net()
    loader = pacer.DataLoader(
        Indexed(N), global_batch=48, controller="lbbsp", seed=5, speed=[1, 1, 0.5, 0.25],
        num_workers=num_workers, prefetch_factor=2 if num_workers else None,
        loader_timeout_s=60 if num_workers else 0, multiprocessing_context=FORK,
        adaptive_batch=adaptive, max_global_batch=256 if adaptive else None, adapt_every=3,
    )
    job = pacer.current()
    assert job.lookahead == 2 * num_workers
    seen, sizes, workers, forced = [], [], set(), None
    for epoch in pacer.remaining_epochs(EPOCHS):
        for step, (x, y, idx, wid) in enumerate(loader):
            if epoch == 0 and step == 5:
                # Mid-epoch, after the workers prefetched steps decided otherwise.
                g = job.global_batch
                forced = [g // 2, g // 4, g // 8, g - g // 2 - g // 4 - g // 8]
                loader.set_batches(forced)
            assert len(x) == len(idx) == job.step_ctx.sizes[rank]
            train_step(net, opt, x, y)
            seen.append((epoch, idx.tolist()))
            sizes.append(list(job.step_ctx.sizes))
            workers.update(wid.tolist())
    views = [None] * world
    dist.all_gather_object(views, (seen, sizes, sorted(workers), forced))
    if rank == 0:
        torch.save(views, os.path.join(out, "seen.pt"))


@pytest.mark.parametrize("num_workers,adaptive", [(2, True)])
def test_worker_loader_sees_every_sample_once_per_epoch(tmp_path, num_workers, adaptive):
    _dist.run(_train, 4, str(tmp_path), num_workers, adaptive, timeout_s=60)
    views = torch.load(tmp_path / "seen.pt")
    sizes = views[0][1]
    assert all(v[1] == sizes for v in views), "the ranks ran different batches"
    assert len({tuple(s) for s in sizes}) > 2, "the batches did not change"
    assert views[0][3] in sizes, "set_batches was not applied"
    if adaptive:
        assert max(sum(s) for s in sizes) > 48, "the global batch did not adapt"
    for e in range(EPOCHS):
        got = sorted(i for v in views for ep, idx in v[0] if ep == e for i in idx)
        assert got == list(range(N)), f"epoch {e}: not every sample exactly once"
    # The samples came from the worker processes, not the training process.
    assert all(-1 not in v[2] and len(v[2]) == num_workers for v in views), [v[2] for v in views]


class Stream(torch.utils.data.IterableDataset):
    """An iterable data set: epoch ``e`` streams the samples in the order of a
    permutation drawn from ``e``; with workers, worker ``w`` of ``k`` streams every
    ``k``-th position (torch's sharding)."""

    def __init__(self, n):
        self.data = Indexed(n)
        self.epoch = 0

    def set_epoch(self, epoch):
        self.epoch = epoch

    def __iter__(self):
        order = torch.randperm(len(self.data), generator=torch.Generator().manual_seed(self.epoch))
        info = torch.utils.data.get_worker_info()
        if info is not None:
            order = order[info.id :: info.num_workers]
        for i in order.tolist():
            yield self.data[i]


M = 700


def _stream(rank, world, out, phase):
    import torch.distributed as dist

    import pacer_torch as pacer

    net, opt = make_net()
    speed = [1, 1, 0.5, 0.25][:world]
    loader = pacer.DataLoader(
        Stream(M), global_batch=40, controller="lbbsp", seed=5, speed=speed, num_workers=2,
        loader_timeout_s=60, checkpoint_dir=os.path.join(out, "ck"), multiprocessing_context=FORK,
    )
    job = pacer.current()
    seen, sizes = [], []
    for epoch in pacer.remaining_epochs(EPOCHS):
        for x, y, idx, wid in loader:
            assert len(x) == len(idx) == job.step_ctx.sizes[rank]
            train_step(net, opt, x, y)
            seen.append((epoch, idx.tolist()))
            sizes.append(list(job.step_ctx.sizes))
            if phase == "first" and epoch == 0 and len(seen) == 6:
                pacer.save_checkpoint()
                break
        if phase == "first":
            break
    views = [None] * world
    dist.all_gather_object(views, (seen, sizes))
    if rank == 0:
        torch.save(views, os.path.join(out, f"{phase}.pt"))


def test_iterable_stream_with_workers_sees_every_sample_once_and_resumes(tmp_path):
    # 4 ranks checkpoint after step 6 of epoch 0; 2 ranks resume and finish.
    _dist.run(_stream, 4, str(tmp_path), "first", timeout_s=60)
    _dist.run(_stream, 2, str(tmp_path), "resumed", timeout_s=60)
    first, resumed = torch.load(tmp_path / "first.pt"), torch.load(tmp_path / "resumed.pt")
    assert all(v[1] == first[0][1] for v in first) and all(v[1] == resumed[0][1] for v in resumed)
    assert len({tuple(s) for s in first[0][1]}) > 1, "the batches did not change"
    for e in range(EPOCHS):
        got = sorted(i for v in first + resumed for ep, idx in v[0] if ep == e for i in idx)
        assert got == list(range(M)), f"epoch {e}: not every sample exactly once"


def _tail(rank, world, out, num_workers):
    import torch.distributed as dist

    import pacer_torch as pacer

    net, opt = make_net()
    n = 48 * 3 + 2  # the epoch's last step holds 2 samples: two ranks get none
    loader = pacer.DataLoader(
        Indexed(n), global_batch=48, controller="uniform", seed=5,
        num_workers=num_workers, prefetch_factor=2 if num_workers else None,
        loader_timeout_s=60 if num_workers else 0, multiprocessing_context=FORK,
    )
    seen, shapes = [], []
    for epoch in pacer.remaining_epochs(2):
        for x, y, idx, wid in loader:
            assert len(x) == len(y) == len(idx) == pacer.current().step_ctx.sizes[rank]
            shapes.append(tuple(x.shape))
            train_step(net, opt, x, y)  # every rank joins the step's all-reduce
            seen.append((epoch, idx.tolist()))
    assert all(torch.isfinite(p).all() for p in net.parameters())
    views = [None] * world
    dist.all_gather_object(views, (seen, shapes))
    if rank == 0:
        torch.save(views, os.path.join(out, "tail.pt"))


@pytest.mark.parametrize("num_workers", [0, 2])
def test_a_rank_without_samples_in_a_step_gets_an_empty_batch(tmp_path, num_workers):
    """A map-style data set that is not a TensorDataset, an epoch that ends with fewer
    samples than ranks: the ranks left out get an empty batch of the right structure
    (torch cannot collate no sample; this failed in the workers and without them)."""
    _dist.run(_tail, 4, str(tmp_path), num_workers, timeout_s=60)
    views = torch.load(tmp_path / "tail.pt")
    assert (0, 8) in views[3][1], "no rank sat a step out"
    for e in range(2):
        got = sorted(i for v in views for ep, idx in v[0] if ep == e for i in idx)
        assert got == list(range(48 * 3 + 2)), f"epoch {e}: not every sample exactly once"


def test_pinned_memory_without_workers_runs_every_step_of_every_epoch():
    """``pin_memory=True`` with ``num_workers=0`` (one process, no group): torch's
    single-process iterator asks the batch sampler for a step's indices only when the
    step fetches them, after the job's sampler took them; the planned steps must read
    the position when the iterator is made (it used to end the epoch at once: "the torch
    DataLoader ended before the epoch"). With ``set_batches`` before the first step."""
    import warnings

    import pacer_torch as pacer

    ds = Indexed(130)
    model = torch.nn.Linear(8, 3)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    net = pacer.DataParallel(model, opt)
    loader = pacer.DataLoader(ds, global_batch=32, seed=5, pin_memory=True)
    loader.set_batches([32])
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # torch: pin_memory without an accelerator
            for _ in range(2):
                seen = []
                for x, y, idx, _w in loader:
                    torch.nn.functional.cross_entropy(net(x), y).backward()
                    opt.step()
                    opt.zero_grad()
                    seen.extend(idx.tolist())
                assert sorted(seen) == list(range(130))
    finally:
        pacer.job.set_current(None)
