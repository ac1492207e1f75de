"""The noise scale with one rank (issue 24): AdaptDL estimates it from consecutive
steps' gradients when one replica computes the step; pacer_torch did not, so a job of
one rank never adapted its batch. It now does, from three consecutive steps with the
drift cancelled (``ConsecutiveSteps``). Checked on a closed form (the gradient does not
depend on the parameters, so the steps are independent draws and the estimate is
unbiased) for both engines, on a linear drift (no noise is read into it), and end to
end: one adaptive rank grows its global batch."""

import math
import os

import pytest
import torch

import _dist
from test_agreement import N_TRAIN, TARGET, adaptive_job

D, SIGMA, G_SQR, BATCH, STEPS = 50, 1.0, 0.5, 16, 600
MAX_EPOCHS = 16
#: tr(Sigma) / |G|^2 of the closed form below.
B_NOISE = D * SIGMA**2 / G_SQR


def _closed_form(engine, seed):
    """Per-sample loss ``w . x_i`` with ``x_i = G + N(0, SIGMA^2 I)``: every step's
    gradient is the batch's mean ``x``, whatever ``w`` is."""
    import pacer_torch as pacer

    g = torch.Generator().manual_seed(seed)
    G = torch.randn(D, generator=g)
    G = G / G.norm() * math.sqrt(G_SQR)
    x = G + SIGMA * torch.randn(BATCH * STEPS, D, generator=g)
    torch.manual_seed(seed)
    model = torch.nn.Linear(D, 1, bias=False)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    net = pacer.DataParallel(model, opt, engine=engine)
    loader = pacer.DataLoader(
        torch.utils.data.TensorDataset(x), global_batch=BATCH, controller="uniform", seed=seed,
        noise_scale=True,
    )
    job = pacer.current()
    assert job.world == 1
    for (xb,) in loader:
        opt.zero_grad()
        net(xb).mean().backward()
        opt.step()
    # The first two steps have no estimate; every other step counts.
    return job.noise_scale(), job.stats.gns_skipped, job.gns.state()


def _in_group(rank, world, engine, seed, out):
    torch.save(_closed_form(engine, seed), os.path.join(out, f"{engine}.pt"))


def test_one_rank_estimates_the_noise_scale_from_consecutive_steps(tmp_path):
    seeds = [1, 2, 3, 4]
    got = {s: _closed_form("flat", s) for s in seeds}
    for s, (ns, skipped, _) in got.items():
        assert skipped == 2, (s, skipped)
        # One seed's estimate is an average over ~100 steps' noisy pairs.
        assert ns is not None and abs(ns / B_NOISE - 1) < 0.35, (s, ns)
    mean = sum(ns for ns, _, _ in got.values()) / len(seeds)
    print(f"B_noise {B_NOISE}: one rank, seeds {seeds}: "
          f"{[round(ns, 1) for ns, _, _ in got.values()]}, mean {mean:.1f}")
    assert abs(mean / B_NOISE - 1) < 0.15, mean
    # The ddp engine (in a one-rank gloo group, which it needs) reads the same inputs.
    _dist.run(_in_group, 1, "ddp", 1, str(tmp_path), timeout_s=60)
    ddp = torch.load(tmp_path / "ddp.pt")
    assert ddp[0] == pytest.approx(got[1][0], rel=1e-9), (ddp[0], got[1][0])
    assert ddp[2] == got[1][2]


def test_linear_drift_is_not_noise_and_an_overflowed_step_is_dropped():
    from pacer_torch.gradnorm import ConsecutiveSteps

    c = ConsecutiveSteps()
    ones = torch.ones(4)
    assert c.observe(ones, 8, None, None) is None  # nothing to compare with yet
    assert c.observe(2 * ones, 8, None, None) is None
    # The gradient drifts linearly and has no noise: tr(S) = 0, |G|^2 the mean norm.
    g2, tr, b = c.observe(3 * ones, 8, None, None)
    assert tr == pytest.approx(0.0, abs=1e-9) and b == 8.0
    assert g2 == pytest.approx((4 + 16 + 36) / 3)
    # AdaptDL's two-step difference would read that drift as noise: from steps 2 and 3,
    # (|g|^2 mean - |agg|^2) * 2b = ((16 + 36) / 2 - 25) * 16 = 16, not 0.
    # Unequal batches weigh the middle step's noise as 1/b_b + 1/(4 b_a) + 1/(4 b_c).
    c = ConsecutiveSteps()
    for g, b in ((ones, 4), (-ones, 16)):
        c.observe(g, b, None, None)
    g2, tr, _ = c.observe(ones, 64, None, None)
    assert tr == pytest.approx(16 / (1 / 16 + 1 / 16 + 1 / 256))
    # An AMP overflow step: no estimate, and none until three finite steps again.
    assert c.observe(torch.tensor([1.0, float("inf"), 0, 0]), 8, None, None) is None
    assert c.observe(ones, 8, None, None) is None
    assert c.observe(ones, 8, None, None) is None
    assert c.observe(ones, 8, None, None) is not None
    # The preconditioner divides every kept gradient (the current one, as AdaptDL's).
    pinv = torch.tensor([1.0, 2.0, 1.0, 2.0])
    g2, tr, _ = c.observe(ones, 8, pinv, None)
    assert tr == pytest.approx(0.0, abs=1e-9) and g2 == pytest.approx(2.5)


def _reference_observe(kept, flat, b, pinv):
    """``ConsecutiveSteps.observe`` with every sum of squares computed afresh."""
    from pacer_torch.gradnorm import _sum_of_squares

    cur = flat.detach().to(torch.float32, copy=True)
    kept[:] = [k for k in kept if k[0].shape == cur.shape] + [(cur, float(b))]
    del kept[:-3]
    if len(kept) < 3:
        return None
    (ga, ba), (gb, bb), (gc, bc) = kept
    kept.pop(0)
    p = None if pinv is None else pinv.to(cur.dtype)
    d = gb - (ga + gc).mul_(0.5)
    sums = torch.stack([_sum_of_squares(t if p is None else t / p) for t in (d, ga, gb, gc)])
    sums = sums.tolist()
    if not all(math.isfinite(v) for v in sums):
        kept.clear()
        return None
    trace_cov = sums[0] / (1.0 / bb + 0.25 / ba + 0.25 / bc)
    grad_sqr = sum(s - trace_cov / bi for s, bi in zip(sums[1:], (ba, bb, bc))) / 3.0
    return grad_sqr, trace_cov, float(b)


@pytest.mark.parametrize("with_pinv", [False, True])
def test_the_norms_kept_from_earlier_steps_are_the_ones_summed_afresh(with_pinv):
    # Without a preconditioner each kept gradient's |g|^2 is summed once and reused;
    # the estimates must equal, bit for bit, those that sum all four every step —
    # across a change of shape (a new model), a non-finite step and a reset.
    from pacer_torch.gradnorm import ROW_LEN, ConsecutiveSteps

    gen = torch.Generator().manual_seed(5)
    c, kept, n_est = ConsecutiveSteps(), [], 0
    for step in range(40):
        n = 3 * ROW_LEN + 11 if step < 20 else 999
        g = torch.randn(n, generator=gen) * (1 + step % 3)
        if step == 9:
            g[4] = float("inf")
        if step == 30:
            c.reset()
            kept.clear()
        pinv = torch.rand(n, generator=gen) + 0.5 if with_pinv else None
        b = 8 + step % 5
        got = c.observe(g, b, pinv, None, owned=step % 2 == 0)
        want = _reference_observe(kept, g, b, pinv)
        assert got == want, (step, got, want)
        n_est += got is not None
    assert n_est >= 25


def _adaptive_one(rank, world, engine, out):
    import pacer_torch as pacer

    model, opt, net, loader, (xt, yt) = adaptive_job(engine)
    job = pacer.current()
    batches, epochs, acc = [], 0, 0.0
    # Trained to the target, not for a fixed number of epochs: a larger batch makes
    # less progress per epoch (its statistical efficiency), and more per second.
    for _ in pacer.remaining_epochs(MAX_EPOCHS):
        for x, y in loader:
            loss = torch.nn.functional.cross_entropy(net(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            batches.append(len(x))
        epochs += 1
        with torch.no_grad():
            acc = float((model(xt).argmax(dim=1) == yt).float().mean())
        if acc >= TARGET:
            break
    torch.save({"batches": batches, "acc": acc, "epochs": epochs,
                "noise_scale": job.noise_scale()}, os.path.join(out, "one.pt"))


@pytest.mark.parametrize("engine", ["flat", "ddp"])
def test_one_adaptive_rank_grows_its_batch(tmp_path, engine):
    # As the 4-rank agreement test, at one rank: the noise scale is known, so the
    # goodput-optimal global batch moves off the base batch.
    _dist.run(_adaptive_one, 1, engine, str(tmp_path), timeout_s=60)
    got = torch.load(tmp_path / "one.pt")
    batches = got["batches"]
    print(f"steps {len(batches)}, epochs {got['epochs']}, batches {sorted(set(batches))}, "
          f"accuracy {got['acc']:.3f}, noise scale {got['noise_scale']}")
    assert sum(batches) == got["epochs"] * N_TRAIN
    assert got["noise_scale"] is not None
    assert max(batches) > 32 * 1.05, sorted(set(batches))
    assert got["acc"] >= TARGET, got["acc"]
