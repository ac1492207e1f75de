"""``DataLoader(noise_scale=)`` (issue 24): the noise scale's norms are taken only when
something reads them. Counted, not timed: every sum of squares of a gradient goes
through ``gradnorm._sum_of_squares``."""

import os

import pytest
import torch

import _dist
import pacer_torch as pacer
from pacer_torch import gradnorm
from pacer_torch import job as jobmod

STEPS = 12
#: The step (0-based) after whose backward rank 0 alone reads the noise scale.
READ_AT = 3


def _counted_sums(calls):
    """``gradnorm._sum_of_squares`` counting its calls in ``calls[0]``."""
    orig = gradnorm._sum_of_squares

    def counted(g):
        calls[0] += 1
        return orig(g)

    return counted


def _train(engine, noise_scale="auto", adaptive=False, read_at=None, read_rank=0):
    """``STEPS`` steps of a small model at 2 ranks; per step: whether it took the norms
    (every rank's view), the rows' ``|g_i|^2`` and the aggregate's ``|g|^2``; the sums of
    squares counted; the final noise-scale state."""
    import torch.distributed as dist

    from pacer_torch.job import SQR

    calls = [0]
    orig = gradnorm._sum_of_squares
    gradnorm._sum_of_squares = _counted_sums(calls)
    g = torch.Generator().manual_seed(7)
    n = 64 * STEPS
    data = torch.utils.data.TensorDataset(
        torch.randn(n, 10, generator=g), torch.randint(0, 3, (n,), generator=g)
    )
    torch.manual_seed(2)
    model = torch.nn.Sequential(torch.nn.Linear(10, 16), torch.nn.Tanh(), torch.nn.Linear(16, 3))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    net = pacer.DataParallel(model, opt, engine=engine, bucket_cap_mb=0.001)
    # The equal split (the batches do not depend on the clocks): runs compare step by step.
    loader = pacer.DataLoader(data, global_batch=64, controller="uniform", seed=1,
                              adaptive_batch=adaptive, adapt_every=10_000,
                              noise_scale=noise_scale)
    job = pacer.current()
    steps = []
    gathered = job.gathered

    def spy(rows, agg, dec, pair=None):
        steps.append((job.step_ctx.norms, [r[SQR] for r in rows], agg))
        gathered(rows, agg, dec, pair)

    job.gathered = spy
    read = "not read"
    for step, (x, y) in enumerate(loader):
        opt.zero_grad()
        torch.nn.functional.cross_entropy(net(x), y).backward()
        opt.step()
        if step == read_at and dist.get_rank() == read_rank:
            read = job.noise_scale()
    out = {"steps": steps, "calls": calls[0], "gns": job.gns.state(),
           "noise_scale": job.noise_scale() if job.norms else None, "read": read,
           "mode": job.noise_scale_mode}
    if job.reporter is not None:
        job.reporter.close(0.5)
    del net, loader
    jobmod.set_current(None)
    gradnorm._sum_of_squares = orig
    return out


def _runs(rank, world, engine, out):
    got = {}
    runs = {
        "auto": {},
        "on": {"noise_scale": True},
        "read": {"read_at": READ_AT},
        "read1": {"read_at": READ_AT, "read_rank": 1},
        "adaptive": {"adaptive": True},
        "off": {"noise_scale": False, "read_at": 0},
    }
    for name, kw in runs.items():
        got[name] = _train(engine, **kw)
    # A job that reports to a service (rank 0's environment alone: it alone reports; an
    # address where nothing listens, so every report fails, once logged).
    if rank == 0:
        os.environ.update(PACER_SERVER="http://127.0.0.1:9", PACER_JOB_ID="j-1")
    got["server"] = _train(engine)
    os.environ.pop("PACER_SERVER", None)
    torch.save(got, os.path.join(out, f"{engine}-{rank}.pt"))


@pytest.mark.parametrize("engine", ["flat", "ddp"])
def test_the_norms_are_taken_when_something_reads_them(tmp_path, engine):
    _dist.run(_runs, 2, engine, str(tmp_path), timeout_s=120)
    ranks = [torch.load(tmp_path / f"{engine}-{r}.pt") for r in range(2)]
    for r, got in enumerate(ranks):
        # auto, a fixed batch, no service, no read: no sum of squares at all.
        assert got["auto"]["calls"] == 0, (r, got["auto"]["calls"])
        assert not any(on for on, _, _ in got["auto"]["steps"])
        assert got["auto"]["mode"] == "auto"
        # noise_scale=False: none either, and a read returns None and changes nothing.
        assert got["off"]["calls"] == 0 and got["off"]["read"] in (None, "not read")
        assert not any(on for on, _, _ in got["off"]["steps"])
        # Always on, adaptive, or reporting: every step takes them, on every rank.
        for name in ("on", "adaptive", "server"):
            assert got[name]["calls"] > 0, (r, name)
            assert all(on for on, _, _ in got[name]["steps"]), (r, name)
            assert len(got[name]["steps"]) == STEPS
    on = ranks[0]["on"]["steps"]
    for name, reader in (("read", 0), ("read1", 1)):
        assert ranks[reader][name]["read"] is None, "the first read returns None"
        # The read after step READ_AT travels in step READ_AT + 1's all-reduce: every
        # rank takes the norms from step READ_AT + 2 on, and none before.
        for r in range(2):
            steps = ranks[r][name]["steps"]
            flags = [f for f, _, _ in steps]
            assert flags == [False] * (READ_AT + 2) + [True] * (STEPS - READ_AT - 2), (r, flags)
            # From there the inputs are the always-on run's, bit for bit ...
            assert steps[READ_AT + 2:] == on[READ_AT + 2:], (r, name)
        # ... and the estimate is an always-on estimator's started at that step.
        ref = pacer.Gns(64.0)
        for _, sqr, agg in on[READ_AT + 2:]:
            ref.observe([32.0, 32.0], sqr, agg)
        assert ranks[0][name]["gns"] == ref.state()
        assert ranks[0][name]["noise_scale"] is not None
    # Rank 0's and rank 1's estimates agree in every run.
    for name in ranks[0]:
        assert ranks[0][name]["gns"] == ranks[1][name]["gns"], name


def _one_rank(noise_scale, read_at=None):
    jobmod.set_current(None)
    g = torch.Generator().manual_seed(4)
    data = torch.utils.data.TensorDataset(torch.randn(160, 5, generator=g),
                                          torch.randint(0, 2, (160,), generator=g))
    torch.manual_seed(0)
    model = torch.nn.Linear(5, 2)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    net = pacer.DataParallel(model, opt)
    loader = pacer.DataLoader(data, global_batch=16, controller="uniform", noise_scale=noise_scale)
    job = pacer.current()
    flags, reads = [], []
    for step, (x, y) in enumerate(loader):
        flags.append(job.step_ctx.norms)
        torch.nn.functional.cross_entropy(net(x), y).backward()
        opt.step()
        opt.zero_grad()
        if step == read_at:
            reads.append(job.noise_scale())
    return job, flags, reads


def test_one_rank_auto_takes_no_norms_until_read(monkeypatch):
    calls = [0]
    monkeypatch.setattr(gradnorm, "_sum_of_squares", _counted_sums(calls))
    job, flags, _ = _one_rank("auto")
    assert calls[0] == 0 and flags == [False] * 10 and job.gns.steps == 0
    job, flags, reads = _one_rank("auto", read_at=2)
    assert reads == [None] and flags == [False] * 4 + [True] * 6
    # One rank: three steps with the norms give the first estimate (ConsecutiveSteps).
    assert calls[0] > 0 and job.gns.steps == 4 and job.noise_scale() is not None
    calls[0] = 0
    job, flags, reads = _one_rank(False, read_at=2)
    assert calls[0] == 0 and reads == [None] and flags == [False] * 10
    assert job.noise_scale() is None
    job, flags, _ = _one_rank(True)
    assert calls[0] > 0 and flags == [True] * 10 and job.gns.steps == 8
    jobmod.set_current(None)


def test_norms_turned_on_by_a_read_stay_on_after_a_resume(tmp_path):
    job, flags, _ = _one_rank("auto", read_at=2)
    assert job.norms
    pacer.save_checkpoint(str(tmp_path))
    job, flags, _ = _one_rank("auto")
    assert not job.norms
    pacer.resume(str(tmp_path / "checkpoint.pt"))
    assert job.norms
    job, _, _ = _one_rank(False)
    pacer.resume(str(tmp_path / "checkpoint.pt"))
    assert not job.norms, "noise_scale=False: never"
    jobmod.set_current(None)


def test_bad_noise_scale_values_are_errors_naming_the_argument():
    jobmod.set_current(None)
    data = torch.utils.data.TensorDataset(torch.randn(20, 4), torch.randint(0, 2, (20,)))
    with pytest.raises(ValueError, match=r"^noise_scale: False, but adaptive_batch=True"):
        pacer.DataLoader(data, global_batch=10, adaptive_batch=True, noise_scale=False)
    for bad in ("on", 1, None, "Auto"):
        with pytest.raises(ValueError, match=r"^noise_scale: .* \(expected 'auto', True or False"):
            pacer.DataLoader(data, global_batch=10, noise_scale=bad)
    assert pacer.current() is None
