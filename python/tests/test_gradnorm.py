"""The noise scale's inputs under Adam (AdaptDL's preconditioner: the bias-corrected
second moment) and under AMP's GradScaler (the loss scale divided out), for both
engines: each step's ``|g_i|^2`` and ``|g|^2`` equal the ones computed here from the
gradients and the optimizer's state, and differ from the raw norms (so a missing
preconditioner or unscaling fails)."""

import math

import pytest
import torch

import _dist


def _expected_pinv(opt, params):
    out = []
    for p in params:
        st = opt.state.get(p, {})
        step = float(st.get("step", 0))
        if step < 5:
            out.append(torch.ones(p.numel()))
        else:
            g = opt.param_groups[0]
            v = st["exp_avg_sq"].reshape(-1)
            out.append(v.sqrt() / math.sqrt(1 - g["betas"][1] ** step) + g["eps"])
    return torch.cat(out)


def _check(rank, world, engine, mode):
    import copy

    import pacer_torch as pacer
    from pacer_torch.job import SQR

    g = torch.Generator().manual_seed(3)
    x, y = torch.randn(256, 6, generator=g), torch.randint(0, 3, (256,), generator=g)
    data = torch.utils.data.TensorDataset(x, y)
    torch.manual_seed(1)
    model = torch.nn.Sequential(torch.nn.Linear(6, 16), torch.nn.Tanh(), torch.nn.Linear(16, 3))
    params = list(model.parameters())
    if mode == "adam":
        opt, scaler = torch.optim.AdamW(params, lr=1e-2), None
    else:
        opt = torch.optim.SGD(params, lr=0.1)
        scaler = torch.amp.GradScaler("cpu", init_scale=1024.0)
    net = pacer.DataParallel(model, opt, engine=engine, grad_scaler=scaler)
    loader = pacer.DataLoader(data, global_batch=16, controller="uniform", seed=2,
                              noise_scale=True)
    job = pacer.current()
    got = []
    gathered = job.gathered
    def spy(rows, agg, dec, pair=None):
        got.append(([r[SQR] for r in rows], agg))
        gathered(rows, agg, dec, pair)

    job.gathered = spy
    checked = 0
    for step, (x, y) in enumerate(loader):
        opt.zero_grad()
        # This rank's own mean gradient, from a copy of the model outside pacer.
        ref = copy.deepcopy(model)
        torch.nn.functional.cross_entropy(ref(x), y).backward()
        mine = torch.cat([p.grad.reshape(-1) for p in ref.parameters()]).double()
        loss = torch.nn.functional.cross_entropy(net(x), y)
        (scaler.scale(loss) if scaler else loss).backward()
        flat = torch.cat([p.grad.reshape(-1) for p in params]).double()
        if mode == "adam":
            pinv = _expected_pinv(opt, params).double()
            want, raw = float(((flat / pinv) ** 2).sum()), float((flat ** 2).sum())
            want_local = float(((mine / pinv) ** 2).sum())
        else:
            s = scaler.get_scale()
            want, raw = float((flat ** 2).sum()) / s**2, float((flat ** 2).sum())
            want_local = float((mine ** 2).sum())
        local, agg = got[-1]
        assert abs(agg - want) <= 1e-5 * want, (step, agg, want)
        # Every rank's |g_i|^2 travelled in the rows; this rank's is its own gradient's.
        assert abs(local[rank] - want_local) <= 1e-5 * want_local, (step, local, want_local)
        assert min(local) > 0 and abs(local[0] - local[1]) > 1e-6 * want_local, local
        if mode == "gradscaler" or step >= 6:
            assert abs(raw - want) > 0.1 * want, (step, raw, want)
            checked += 1
        if scaler:
            scaler.step(opt)
            scaler.update()
        else:
            opt.step()
        if step == 9:
            break
    assert checked >= 4


def _all(rank, world):
    for engine in ("flat", "ddp"):
        for mode in ("adam", "gradscaler"):
            _check(rank, world, engine, mode)


def test_noise_scale_inputs_under_adam_and_a_grad_scaler():
    # Two ranks: the noise scale reads |g_i|^2 and |g|^2 only when two ranks or more
    # computed the step (with one rank they are not computed: ConsecutiveSteps).
    _dist.run(_all, 2, timeout_s=60)


@pytest.mark.parametrize("n", [1000, 3 * (1 << 14) + 7, 400_000])
def test_the_cpu_sum_of_squares_matches_float64(n):
    from pacer_torch.gradnorm import _sum_of_squares

    g = torch.randn(n, generator=torch.Generator().manual_seed(n)) * 1e-3
    ref = float((g.double() ** 2).sum())
    got = float(_sum_of_squares(g))
    assert abs(got - ref) / ref <= 1e-6, (got, ref)


def _every_bucket(rank, world):
    import pacer_torch as pacer

    g = torch.Generator().manual_seed(5)
    x, y = torch.randn(512, 64, generator=g), torch.randint(0, 8, (512,), generator=g)
    torch.manual_seed(1)
    layers = []
    for _ in range(6):
        layers += [torch.nn.Linear(64, 64), torch.nn.Tanh()]
    model = torch.nn.Sequential(*layers, torch.nn.Linear(64, 8))
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    # A bucket per parameter or so (~30): their all-reduces finish on gloo's threads in
    # no fixed order.
    net = pacer.DataParallel(model, opt, engine="ddp", bucket_cap_mb=0.001)
    loader = pacer.DataLoader(
        torch.utils.data.TensorDataset(x, y), global_batch=32, controller="uniform", seed=2,
        noise_scale=True,
    )
    job = pacer.current()
    got = []
    gathered = job.gathered

    def spy(rows, agg, dec, pair=None):
        got.append(agg)
        gathered(rows, agg, dec, pair)

    job.gathered = spy
    for step, (xb, yb) in enumerate(loader):
        opt.zero_grad()
        torch.nn.functional.cross_entropy(net(xb), yb).backward()
        flat = torch.cat([p.grad.reshape(-1) for p in model.parameters()]).double()
        want = float((flat**2).sum())
        assert abs(got[-1] - want) <= 1e-6 * want, (step, got[-1], want)
        opt.step()
    assert len(got) == 16


def test_the_ddp_engine_sums_every_buckets_reduced_norm():
    # |g|^2 of the aggregate is summed over ~30 buckets, each computed when its
    # all-reduce finishes: none may be lost, whatever order they finish in.
    _dist.run(_every_bucket, 2, timeout_s=60)
