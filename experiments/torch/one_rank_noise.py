"""The gradient noise scale with one rank: pacer_torch's estimate (``ConsecutiveSteps``:
three consecutive steps, drift cancelled to first order) and AdaptDL's (the last two
steps' gradients as two draws) against an unbiased reference, the two-batch estimate
from the two halves of every step at the same parameters (computed here with two
extra backward passes a step). All three are smoothed by the same estimator
(``pacer_torch._native.Gns``, smoothing 0.99) and compared every 10 steps after the
first 50: the median ratio to the reference, per run.

Problem: a 16-64-4 MLP on a noisy linear teacher (4,096 samples, the agreement test's),
one rank, 4 epochs. Nothing here was tuned: the estimator has no parameters.

    ~/.cache/pacer/venv/bin/python experiments/torch/one_rank_noise.py [--json OUT]
"""

import argparse
import json
import statistics

import torch

import pacer_torch as pacer
from pacer_torch import _native
from pacer_torch.gradnorm import preconditioner

CONFIGS = [  # (optimizer, lr, momentum, global batch)
    ("sgd", 0.01, 0.0, 32),
    ("sgd", 0.05, 0.9, 32),
    ("sgd", 0.05, 0.9, 128),
    ("sgd", 0.1, 0.0, 64),
    ("adam", 1e-3, 0.0, 32),
    ("adam", 1e-2, 0.0, 64),
]
SEEDS = [11, 12]
EPOCHS = 4


def data(seed=21, n=4096):
    g = torch.Generator().manual_seed(seed)
    teacher = torch.randn(16, 4, generator=g)
    x = torch.randn(n, 16, generator=g)
    y = (x @ teacher + 0.3 * torch.randn(n, 4, generator=g)).argmax(dim=1)
    return torch.utils.data.TensorDataset(x, y)


def flat_grad(model, x, y):
    """The gradient at the current parameters, leaving ``.grad`` alone."""
    loss = torch.nn.functional.cross_entropy(model(x), y)
    return torch.cat([g.reshape(-1) for g in torch.autograd.grad(loss, list(model.parameters()))])


def sqr(t, pinv):
    t = t.double() if pinv is None else t.double() / pinv.double()
    return float(t @ t)


def run(opt_name, lr, momentum, batch, seed):
    torch.manual_seed(seed)
    model = torch.nn.Sequential(torch.nn.Linear(16, 64), torch.nn.ReLU(), torch.nn.Linear(64, 4))
    params = list(model.parameters())
    opt = (torch.optim.SGD(params, lr=lr, momentum=momentum) if opt_name == "sgd"
           else torch.optim.Adam(params, lr=lr))
    net = pacer.DataParallel(model, opt)
    loader = pacer.DataLoader(data(), global_batch=batch, controller="uniform", seed=seed,
                              noise_scale=True)
    job = pacer.current()
    ref, adaptdl = _native.Gns(float(batch)), _native.Gns(float(batch))
    prev = None
    ratios = {"pacer": [], "adaptdl": []}
    step = 0
    for _ in range(EPOCHS):
        for x, y in loader:
            pinv = preconditioner(opt, params)
            h = len(x) // 2
            if h >= 1:
                g1, g2 = flat_grad(model, x[:h], y[:h]), flat_grad(model, x[h:], y[h:])
                b1, b2 = float(h), float(len(x) - h)
                agg = (b1 * g1 + b2 * g2) / (b1 + b2)
                ref.observe([b1, b2], [sqr(g1, pinv), sqr(g2, pinv)], sqr(agg, pinv))
            loss = torch.nn.functional.cross_entropy(net(x), y)
            opt.zero_grad()
            loss.backward()
            g = torch.cat([p.grad.reshape(-1) for p in params]).clone()
            b = float(len(x))
            if prev is not None:
                pg, pb = prev
                agg = (pb * pg + b * g) / (pb + b)
                adaptdl.observe([pb, b], [sqr(pg, pinv), sqr(g, pinv)], sqr(agg, pinv))
            prev = (g, b)
            opt.step()
            step += 1
            r = ref.noise_scale()
            if step > 50 and step % 10 == 0 and r and ref.resolved():
                for name, est in (("pacer", job.gns), ("adaptdl", adaptdl)):
                    v = est.noise_scale()
                    # An unresolved estimate (|G|^2 at its floor) counts as infinitely high.
                    ratios[name].append(v / r if v and est.resolved() else float("inf"))
    out = {"optimizer": opt_name, "lr": lr, "momentum": momentum, "batch": batch, "seed": seed,
           "steps": step, "reference": ref.noise_scale()}
    for name, rs in ratios.items():
        out[f"{name}_median_ratio"] = statistics.median(rs) if rs else None
        out[f"{name}_unresolved"] = sum(1 for v in rs if v == float("inf"))
    out["points"] = len(ratios["pacer"])
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--json", help="write every run's figures here")
    args = ap.parse_args()
    rows = []
    print(f"{'run':<34} {'reference':>9} {'pacer':>7} {'adaptdl':>8}  (median ratio to reference)")
    for cfg in CONFIGS:
        for seed in SEEDS:
            r = run(*cfg, seed)
            rows.append(r)
            name = f"{cfg[0]} lr {cfg[1]} m {cfg[2]} B {cfg[3]} seed {seed}"
            fmt = lambda v: "-" if v is None else ("unres." if v == float("inf") else f"{v:.2f}")
            print(f"{name:<34} {r['reference']:>9.1f} {fmt(r['pacer_median_ratio']):>7} "
                  f"{fmt(r['adaptdl_median_ratio']):>8}", flush=True)
    for name in ("pacer", "adaptdl"):
        rs = [r[f"{name}_median_ratio"] for r in rows if r[f"{name}_median_ratio"] is not None]
        within = sum(1 for v in rs if 0.75 <= v <= 1.25)
        print(f"{name}: median of runs {statistics.median(rs):.2f}, within +-25 %: "
              f"{within} of {len(rs)}, max {max(rs):.2f}, min {min(rs):.2f}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
