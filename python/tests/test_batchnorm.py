"""A BatchNorm model under lbbsp with one rank at emulated speed 0.05 (issue 24): the slow
rank's share shrinks towards the derived min_local_batch of 2 and never below it (one
sample fails BatchNorm in training mode: "Expected more than 1 value per channel"),
through every epoch's last step, whichever of DataParallel and DataLoader comes first."""

import os

import torch

import _dist

N = 453  # 7 steps of 64, then 5 samples: fewer than the 4 ranks' minima (8)
B = 64
EPOCHS = 2


def make_model():
    torch.manual_seed(2)
    return torch.nn.Sequential(
        torch.nn.Linear(8, 32), torch.nn.BatchNorm1d(32), torch.nn.ReLU(), torch.nn.Linear(32, 3)
    )


def make_data():
    g = torch.Generator().manual_seed(4)
    x = torch.randn(N, 8, generator=g)
    y = (x[:, :3] * torch.tensor([1.0, -1.0, 0.5])).argmax(dim=1)
    return torch.utils.data.TensorDataset(x, y)


def _train(rank, world, out, loader_first):
    import torch.distributed as dist

    import pacer_torch as pacer

    model = make_model()
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    kw = dict(global_batch=B, controller="lbbsp", seed=5, speed=[1, 1, 1, 0.05], time_scale=1.0)
    if loader_first:
        loader = pacer.DataLoader(make_data(), **kw)
        net = pacer.DataParallel(model, opt)
    else:
        net = pacer.DataParallel(model, opt)
        loader = pacer.DataLoader(make_data(), **kw)
    assert pacer.current().minima == [2, 2, 2, 2]
    sizes, losses, seen = [], [], 0
    for _ in pacer.remaining_epochs(EPOCHS):
        for x, y in loader:
            loss = torch.nn.functional.cross_entropy(net(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            sizes.append(list(pacer.current().step_ctx.sizes))
            seen += len(x)
            if sum(sizes[-1]) == B and len(x):
                losses.append(loss.item())
    total = torch.tensor([seen])
    dist.all_reduce(total)
    if rank == 0:
        torch.save({"sizes": sizes, "losses": losses, "seen": int(total)},
                   os.path.join(out, "bn.pt"))


def _check(out):
    got = torch.load(os.path.join(out, "bn.pt"))
    sizes = got["sizes"]
    slow = [s[3] for s in sizes]
    print("slow rank's batches:", slow)
    assert all(b == 0 or b >= 2 for s in sizes for b in s), sizes
    assert slow.count(2) >= 5, "the bound was the binding constraint"
    # Each epoch's last step: 5 samples, fewer than the minima: two ranks take 2 and 3.
    tails = [s for s in sizes if sum(s) < B]
    assert len(tails) == EPOCHS and all(sorted(s) == [0, 0, 2, 3] for s in tails), tails
    assert got["seen"] == EPOCHS * N
    losses = got["losses"]  # rank 0's, on full steps
    assert sum(losses[-8:]) / 8 < sum(losses[:4]) / 4, losses


def test_batchnorm_model_with_a_rank_at_speed_005_trains(tmp_path):
    _dist.run(_train, 4, str(tmp_path), False, timeout_s=60)
    _check(str(tmp_path))


def test_batchnorm_model_wrapped_after_the_loader_gets_the_same_minimum(tmp_path):
    _dist.run(_train, 4, str(tmp_path), True, timeout_s=60)
    _check(str(tmp_path))
