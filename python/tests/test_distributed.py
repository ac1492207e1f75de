"""Real gloo processes: exact weighted aggregation at unequal batches, and a checkpoint
taken with 4 ranks resumed with 2."""

import os

import pytest
import torch
import torch.multiprocessing as mp

import _dist

BATCHES = [200, 150, 100, 62]


def make_model(dtype=torch.float32):
    torch.manual_seed(5)
    return torch.nn.Sequential(
        torch.nn.Linear(20, 32), torch.nn.Tanh(), torch.nn.Linear(32, 5)
    ).to(dtype)


def make_data(n, dtype=torch.float32):
    g = torch.Generator().manual_seed(11)
    x = torch.randn(n, 20, generator=g).to(dtype)
    y = torch.randint(0, 5, (n,), generator=g)
    idx = torch.arange(n)
    return torch.utils.data.TensorDataset(x, y, idx)


def backward_in_micro_batches(net, x, y, micro):
    """``micro`` micro-batches: all but the last accumulate under no_sync, each mean
    loss weighted by its share of the local batch."""
    parts = list(zip(x.tensor_split(micro), y.tensor_split(micro)))
    for i, (xm, ym) in enumerate(parts):
        loss = torch.nn.functional.cross_entropy(net(xm), ym) * (len(xm) / len(x))
        if i < len(parts) - 1:
            with net.no_sync():
                loss.backward()
        else:
            loss.backward()


def _exactness(rank, world, out, engine, micro):
    import pacer_torch as pacer

    data = make_data(512)
    model = make_model()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    # A small bucket cap: the DDP engine reduces this model in several buckets.
    net = pacer.DataParallel(model, opt, engine=engine, bucket_cap_mb=0.001)
    # noise_scale=True: the step's noise-scale inputs are checked (not taken by default).
    loader = pacer.DataLoader(data, global_batch=512, controller="lbbsp", seed=3,
                              noise_scale=True)
    loader.set_batches(BATCHES)
    for x, y, idx in loader:
        assert len(x) == BATCHES[rank]
        backward_in_micro_batches(net, x, y, micro)
        grads = [p.grad.clone() for p in model.parameters()]
        job = pacer.current()
        torch.save({"grads": grads, "idx": idx, "gns_steps": job.gns.steps,
                    "noise_scale_inputs": job.gns.state()},
                   os.path.join(out, f"rank{rank}.pt"))
        break


@pytest.mark.parametrize("engine,micro", [("flat", 1), ("flat", 3), ("ddp", 3)])
def test_weighted_gradient_equals_the_single_process_gradient(tmp_path, engine, micro):
    _dist.run(_exactness, 4, str(tmp_path), engine, micro)
    data = make_data(512)
    ref_model = make_model()
    x, y, _ = data.tensors
    torch.nn.functional.cross_entropy(ref_model(x), y).backward()
    ref = torch.cat([p.grad.reshape(-1) for p in ref_model.parameters()])
    seen = []
    for r in range(4):
        got = torch.load(tmp_path / f"rank{r}.pt")
        g = torch.cat([t.reshape(-1) for t in got["grads"]])
        rel = float((g.double() - ref.double()).norm() / ref.double().norm())
        print(f"rank {r}: relative error {rel:.3e}")
        assert rel <= 1e-5, rel
        assert len(got["idx"]) == BATCHES[r]
        assert got["gns_steps"] == 1
        seen.extend(got["idx"].tolist())
    assert sorted(seen) == list(range(512)), "disjoint shares covering the global batch"


N = 2000
K = 5


def _train_then_checkpoint(rank, world, out):
    import torch.distributed as dist

    import pacer_torch as pacer

    model = make_model()
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    net = pacer.DataParallel(model, opt)
    loader = pacer.DataLoader(make_data(N), global_batch=256, controller="pid", predictor="ewma",
                              seed=9, checkpoint_dir=os.path.join(out, "ckpt"))
    step = 0
    stream = []
    for x, y, idx in loader:
        torch.nn.functional.cross_entropy(net(x), y).backward()
        opt.step()
        opt.zero_grad()
        parts = [None] * world
        dist.all_gather_object(parts, idx.tolist())
        stream.append(sum(parts, []))
        step += 1
        if step == K:
            pacer.save_checkpoint()
            if rank == 0:
                torch.save({"opt": opt.state_dict(), "model": model.state_dict(),
                            "sampler": loader.job.sampler.state_dict()},
                           os.path.join(out, "at_k.pt"))
        if step == K + 2:
            break
    if rank == 0:
        torch.save(stream, os.path.join(out, "stream4.pt"))


def _resume(rank, world, out):
    import torch.distributed as dist

    import pacer_torch as pacer

    model = make_model()
    torch.manual_seed(100 + rank)  # a different start: the checkpoint must overwrite it
    with torch.no_grad():
        for p in model.parameters():
            p.add_(torch.randn_like(p))
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    net = pacer.DataParallel(model, opt)
    loader = pacer.DataLoader(make_data(N), global_batch=256, controller="pid", predictor="ewma",
                              seed=9, checkpoint_dir=os.path.join(out, "ckpt"))
    assert pacer.restore_if_needed()
    if rank == 0:
        torch.save({"opt": opt.state_dict(), "model": model.state_dict(),
                    "sampler": loader.job.sampler.state_dict(), "workers": loader.job.session.workers(),
                    "batches": loader.batch_sizes},
                   os.path.join(out, "resumed.pt"))
    stream = []
    for x, y, idx in loader:
        torch.nn.functional.cross_entropy(net(x), y).backward()
        opt.step()
        opt.zero_grad()
        parts = [None] * world
        dist.all_gather_object(parts, idx.tolist())
        stream.append(sum(parts, []))
        if len(stream) == 2:
            break
    if rank == 0:
        torch.save(stream, os.path.join(out, "stream2.pt"))


def _same(a, b):
    if isinstance(a, torch.Tensor):
        return torch.equal(a, b)
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, (list, tuple)):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))
    return a == b


def test_checkpoint_with_four_ranks_resumes_with_two(tmp_path):
    _dist.run(_train_then_checkpoint, 4, str(tmp_path))
    _dist.run(_resume, 2, str(tmp_path))
    at_k = torch.load(tmp_path / "at_k.pt")
    resumed = torch.load(tmp_path / "resumed.pt")
    assert _same(at_k["opt"], resumed["opt"]), "optimiser state identical"
    assert _same(at_k["model"], resumed["model"])
    assert at_k["sampler"] == resumed["sampler"] and at_k["sampler"]["offset"] == K * 256
    assert resumed["workers"] == [0, 1] and sum(resumed["batches"]) == 256
    s4 = torch.load(tmp_path / "stream4.pt")
    s2 = torch.load(tmp_path / "stream2.pt")
    # The global sample stream continues where it stopped, whatever the world size.
    assert s2 == s4[K : K + 2]
    seen = sum(s4[:K], []) + sum(s2, [])
    assert len(set(seen)) == len(seen) == (K + 2) * 256


def _sigterm(rank, world, out):
    import signal

    import pacer_torch as pacer

    model = make_model()
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    sched = torch.optim.lr_scheduler.ExponentialLR(opt, gamma=0.9)
    net = pacer.DataParallel(model, opt)
    loader = pacer.DataLoader(make_data(N), global_batch=128, seed=4,
                              checkpoint_dir=os.path.join(out, "ckpt"))
    pacer.state()["scheduler"] = sched
    pacer.state()["seen"] = 0
    try:
        for step, (x, y, idx) in enumerate(loader, 1):
            if step == 3 and rank == 1:
                os.kill(os.getpid(), signal.SIGTERM)  # only one rank is told
            torch.nn.functional.cross_entropy(net(x), y).backward()
            opt.step()
            opt.zero_grad()
            sched.step()
            pacer.state()["seen"] += sum(pacer.current().step_ctx.sizes)
            if pacer.current().stop_requested and rank == 0:
                torch.save(sched.state_dict(), os.path.join(out, "sched_at_stop.pt"))
    except SystemExit as e:
        open(os.path.join(out, f"exit-{rank}-{e.code}"), "w").close()
        raise
    open(os.path.join(out, f"not-stopped-{rank}"), "w").close()


def _resume_after_sigterm(rank, world, out):
    import pacer_torch as pacer

    model = make_model()
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    sched = torch.optim.lr_scheduler.ExponentialLR(opt, gamma=0.9)
    pacer.DataParallel(model, opt)
    pacer.DataLoader(make_data(N), global_batch=128, seed=4,
                     checkpoint_dir=os.path.join(out, "ckpt"))
    pacer.state()["scheduler"] = sched
    pacer.state()["seen"] = 0
    assert pacer.restore_if_needed()
    if rank == 0:
        torch.save({"sched": sched.state_dict(), "seen": pacer.state()["seen"],
                    "lr": opt.param_groups[0]["lr"]}, os.path.join(out, "resumed.pt"))


def test_sigterm_on_one_rank_checkpoints_all_after_that_step_and_exits_143(tmp_path):
    with pytest.raises(mp.ProcessExitedException) as e:
        _dist.run(_sigterm, 2, str(tmp_path))
    assert e.value.exit_code == 143
    assert not list(tmp_path.glob("not-stopped-*"))
    assert sorted(p.name for p in tmp_path.glob("exit-*")) == ["exit-0-143", "exit-1-143"]
    state = torch.load(tmp_path / "ckpt" / "checkpoint.pt", weights_only=False)
    assert state["steps"] == 3 and state["sampler"]["offset"] == 3 * 128
    assert state["world_size"] == 2 and "momentum_buffer" in state["optimizer"]["state"][0]
    # The user state, resumed exactly (the scheduler in place, the counter's value).
    _dist.run(_resume_after_sigterm, 2, str(tmp_path))
    resumed = torch.load(tmp_path / "resumed.pt")
    at_stop = torch.load(tmp_path / "sched_at_stop.pt")
    assert resumed["sched"] == at_stop and at_stop["last_epoch"] == 3
    assert resumed["seen"] == 3 * 128
    assert resumed["lr"] == pytest.approx(0.1 * 0.9**3, rel=1e-12)


def _optimiser_after_init(rank, world):
    import torch.distributed as dist

    model = make_model()
    # The first torch.optim optimiser imports torch._dynamo, which imports
    # torch.distributed.nn.functional: imported after the group exists, that module's
    # defaults held the group past destroy_process_group (python/README.md).
    torch.optim.Adam(model.parameters(), lr=1e-2)
    import torch.distributed.nn.functional as fn

    assert all(d is not dist.group.WORLD for d in fn.all_reduce.__defaults__)
    parts = [None] * world
    dist.all_gather_object(parts, [rank])
    assert parts == [[r] for r in range(world)]


def test_the_group_is_gone_after_teardown_whatever_torch_imported(tmp_path):
    # _dist.run fails when pacer_torch.destroy_process_group finds the group still alive.
    _dist.run(_optimiser_after_init, 2)


def _held_group(rank, world):
    import warnings

    import torch.distributed as dist

    import pacer_torch as pacer
    from pacer_torch.env import _gloo_workers

    held = dist.group.WORLD
    dist.barrier()  # torch names a gloo worker thread when it first runs a collective
    assert _gloo_workers() > 0
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        assert pacer.destroy_process_group() is False
    assert any("outlived" in str(w.message) for w in seen), [str(w.message) for w in seen]
    assert _gloo_workers() > 0
    del held  # the last reference: the group's destructor joins its worker threads
    assert _gloo_workers() == 0


def test_a_group_still_held_at_teardown_is_reported(tmp_path):
    _dist.run(_held_group, 2)
