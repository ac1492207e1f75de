"""The global batch can change between steps (the adaptive batch's mechanism): the next
steps run the new batch, the epoch is still covered once, the LR gain is applied inside
optimizer.step() only."""

import torch

import pacer_torch as pacer
from pacer_torch import job as jobmod


def test_changing_the_global_batch_mid_epoch():
    jobmod.set_current(None)
    n = 100
    data = torch.utils.data.TensorDataset(torch.randn(n, 4), torch.randint(0, 2, (n,)), torch.arange(n))
    model = torch.nn.Linear(4, 2)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    net = pacer.DataParallel(model, opt)
    loader = pacer.DataLoader(data, global_batch=10, adaptive_batch=True, max_global_batch=40)
    job = pacer.current()
    seen, sizes, lrs = [], [], []
    # Registered after pacer's own hook: sees the rate the step uses.
    opt.register_step_pre_hook(lambda o, a, k: lrs.append(o.param_groups[0]["lr"]))
    for i, (x, y, idx) in enumerate(loader):
        torch.nn.functional.cross_entropy(net(x), y).backward()
        opt.step()
        opt.zero_grad()
        seen.extend(idx.tolist())
        sizes.append(len(x))
        if i == 1:
            job.set_global_batch(30)
            job.lr_gain = 2.0  # as if the noise-scale estimate said so
    assert sizes == [10, 10, 30, 30, 20]
    assert sorted(seen) == list(range(n))
    assert lrs == [0.1, 0.1, 0.2, 0.2, 0.2]
    assert opt.param_groups[0]["lr"] == 0.1, "the base rate is restored after each step"
    assert job.session.global_batch == 30
    jobmod.set_current(None)
