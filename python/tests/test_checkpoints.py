"""Periodic checkpoints (every N steps, every T seconds) with the user state
(``pacer.state()``: LR scheduler, EMA, a plain counter), resumed exactly: a run that
crashes after a periodic checkpoint and resumes from it runs the same steps, bit for bit,
as one that never stopped (2 gloo ranks, the uniform split so that the batches do not
depend on timings)."""

import os
import time

import pytest
import torch

import _dist

N = 1024
B = 64
STEPS = 10


def make_data():
    g = torch.Generator().manual_seed(8)
    x = torch.randn(N, 12, generator=g)
    y = (x[:, :4].sum(dim=1) > 0).long()
    return torch.utils.data.TensorDataset(x, y)


def _setup(out, **kw):
    import pacer_torch as pacer

    torch.manual_seed(1)
    model = torch.nn.Sequential(torch.nn.Linear(12, 16), torch.nn.Tanh(), torch.nn.Linear(16, 2))
    opt = torch.optim.SGD(model.parameters(), lr=0.2, momentum=0.9)
    sched = torch.optim.lr_scheduler.StepLR(opt, step_size=3, gamma=0.5)
    ema = torch.optim.swa_utils.AveragedModel(
        model, multi_avg_fn=torch.optim.swa_utils.get_ema_multi_avg_fn(0.9))
    net = pacer.DataParallel(model, opt)
    loader = pacer.DataLoader(make_data(), global_batch=B, controller="uniform", seed=2,
                              checkpoint_dir=os.path.join(out, "ckpt"), **kw)
    st = pacer.state()
    st["scheduler"] = sched
    st["ema"] = ema
    st["counters"] = {"samples": 0}
    return net, opt, sched, ema, loader, st


def _train(rank, world, out, name, stop_after, kw):
    import pacer_torch as pacer

    net, opt, sched, ema, loader, st = _setup(out, **kw)
    resumed = pacer.restore_if_needed()
    job = pacer.current()
    log, checkpoints = [], []
    for x, y in loader if job.steps < stop_after else []:
        # A step ends (its report, its due checkpoint) when the loader is asked for the
        # next batch: stop here, after asking, so that step `stop_after` has ended with
        # its checkpoint. (A loop that breaks right after its last step does not write
        # that step's checkpoint: test_leaving_the_loop_… below.)
        if job.steps == stop_after:
            break
        loss = torch.nn.functional.cross_entropy(net(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        sched.step()
        ema.update_parameters(net.module)
        st["counters"]["samples"] += sum(job.step_ctx.sizes)
        log.append((job.steps, loss.item(), opt.param_groups[0]["lr"]))  # rank 0's loss: its own
        if job.checkpoint_due:  # this step ends with a checkpoint
            checkpoints.append(job.steps)
            if rank == 0:
                torch.save({"sched": sched.state_dict(), "samples": st["counters"]["samples"]},
                           os.path.join(out, f"{name}-due-{job.steps}.pt"))
        if kw.get("checkpoint_every_s") and rank == 0:
            time.sleep(0.03)  # rank 0's clock decides for every rank
    import torch.distributed as dist

    views = [None] * world
    dist.all_gather_object(views, ([(s, lr) for s, _, lr in log], checkpoints))
    assert all(v == views[0] for v in views), "every rank ran the same steps and checkpoints"
    if rank == 0:
        torch.save({"log": log, "checkpoints": checkpoints, "resumed": resumed,
                    "sched": sched.state_dict(), "ema": ema.state_dict(),
                    "counters": st["counters"]}, os.path.join(out, f"{name}.pt"))


def _same(a, b):
    if isinstance(a, torch.Tensor):
        return torch.equal(a, b)
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    return a == b


def test_periodic_checkpoints_every_n_steps_resume_exactly(tmp_path):
    ref_dir, out = tmp_path / "ref", tmp_path / "run"
    ref_dir.mkdir()
    out.mkdir()
    _dist.run(_train, 2, str(ref_dir), "ref", STEPS, {})
    # Checkpoints after steps 4 and 8; this run "crashes" after step 6 and resumes at 4.
    _dist.run(_train, 2, str(out), "first", 6, {"checkpoint_every_steps": 4})
    first = torch.load(out / "first.pt")
    assert first["checkpoints"] == [4]
    assert torch.load(out / "ckpt" / "checkpoint.pt", weights_only=False)["steps"] == 4
    _dist.run(_train, 2, str(out), "resumed", STEPS, {"checkpoint_every_steps": 4})
    ref, resumed = torch.load(ref_dir / "ref.pt"), torch.load(out / "resumed.pt")
    assert resumed["resumed"] and resumed["checkpoints"] == [8]
    assert resumed["log"] == ref["log"][4:], "steps 5-10: the same losses and rates, bit for bit"
    assert first["log"] == ref["log"][:6]
    assert _same(resumed["sched"], ref["sched"]) and resumed["sched"]["last_epoch"] == STEPS
    assert _same(resumed["ema"], ref["ema"])
    assert resumed["counters"] == ref["counters"] == {"samples": STEPS * B}


def test_periodic_checkpoints_every_t_seconds_agree_and_resume(tmp_path):
    kw = {"checkpoint_every_s": 0.1}
    _dist.run(_train, 2, str(tmp_path), "first", STEPS, kw)
    first = torch.load(tmp_path / "first.pt")
    due = first["checkpoints"]  # the same on both ranks (checked in _train)
    print("checkpoints after steps", due)
    assert due, "rank 0 sleeps 30 ms a step: 10 steps pass 0.1 s"
    ckpt = torch.load(tmp_path / "ckpt" / "checkpoint.pt", weights_only=False)
    assert ckpt["steps"] == due[-1]
    _dist.run(_train, 2, str(tmp_path), "resumed", due[-1], kw)
    resumed = torch.load(tmp_path / "resumed.pt")
    at = torch.load(tmp_path / f"first-due-{due[-1]}.pt")
    assert resumed["resumed"] and resumed["log"] == []
    assert _same(resumed["sched"], at["sched"])
    assert resumed["counters"]["samples"] == at["samples"] == due[-1] * B


def test_a_saved_object_state_needs_its_object_on_resume(tmp_path):
    from pacer_torch.state import UserState

    saved = UserState()
    saved["scheduler"] = torch.optim.lr_scheduler.StepLR(
        torch.optim.SGD([torch.zeros(1, requires_grad=True)], lr=1.0), step_size=2)
    saved["best"] = 0.5
    snap = saved.snapshot()
    with pytest.raises(ValueError, match=r"^checkpoint: user state 'scheduler' holds an object's "
                       r"state_dict, and this run registers nothing under that name"):
        UserState().check(snap)
    here = UserState()
    here["scheduler"] = 3
    with pytest.raises(ValueError, match=r"registers a plain int under that name"):
        here.check(snap)
    here = UserState()
    here["scheduler"] = torch.optim.lr_scheduler.StepLR(
        torch.optim.SGD([torch.zeros(1, requires_grad=True)], lr=1.0), step_size=2)
    here["best"] = torch.optim.lr_scheduler.StepLR(
        torch.optim.SGD([torch.zeros(1, requires_grad=True)], lr=1.0), step_size=2)
    with pytest.raises(ValueError, match=r"'best' was saved as a plain value"):
        here.check(snap)
    with pytest.raises(ValueError, match=r"^state: name 3"):
        here[3] = 1


def _sgd_step(net, opt, x, y):
    loss = torch.nn.functional.cross_entropy(net(x), y)
    opt.zero_grad()
    loss.backward()
    opt.step()


def _leave(rank, world, out):
    import warnings

    import pacer_torch as pacer

    net, opt, sched, ema, loader, st = _setup(out, checkpoint_every_steps=4)
    job = pacer.current()
    steps = []
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for x, y in loader:
            _sgd_step(net, opt, x, y)
            steps.append(job.steps)
            if job.steps == 4:  # its checkpoint is due: left before the loader ends it
                break
    left = [str(w.message) for w in caught if issubclass(w.category, RuntimeWarning)]
    ended = job.step_ctx is None
    # The loop can be entered again: the job goes on with step 5.
    for x, y in loader:
        _sgd_step(net, opt, x, y)
        steps.append(job.steps)
        if job.steps == 9:
            break
    torch.save({"steps": steps, "left": left, "ended": ended},
               os.path.join(out, f"leave-{rank}.pt"))


def test_leaving_the_loop_right_after_a_step_ends_it_and_says_so(tmp_path):
    """A ``break`` right after a step whose checkpoint is due: the step ends (the next
    loop goes on with the next step) and a warning says that its checkpoint is not
    written (writing one is collective); before, the step stayed open."""
    _dist.run(_leave, 2, str(tmp_path), timeout_s=60)
    for rank in range(2):
        got = torch.load(tmp_path / f"leave-{rank}.pt")
        assert got["ended"]
        assert got["steps"] == list(range(1, 10))
        assert len(got["left"]) == 1 and "after step 4" in got["left"][0], got["left"]
    # Step 8's checkpoint (the second loop asked for step 9's batch) is the last one.
    assert torch.load(tmp_path / "ckpt" / "checkpoint.pt", weights_only=False)["steps"] == 8
