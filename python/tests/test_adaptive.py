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


def test_learning_rate_rules():
    """``lr_rule``: the gain of a new global batch by AdaScale (the noise scale; 1 while
    it is unresolved), the square root of the ratio or the ratio; applied to the steps
    that run the new batch."""
    n = 120
    data = torch.utils.data.TensorDataset(torch.randn(n, 4), torch.randint(0, 2, (n,)))
    for rule, gain in (("adascale", 1.0), ("sqrt", 2.0), ("linear", 4.0)):
        jobmod.set_current(None)
        model = torch.nn.Linear(4, 2)
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        net = pacer.DataParallel(model, opt)
        loader = pacer.DataLoader(data, global_batch=10, lr_rule=rule)
        job = pacer.current()
        assert job.rule_gain(10) == 1.0
        lrs = []
        opt.register_step_pre_hook(lambda o, a, k: lrs.append(o.param_groups[0]["lr"]))
        for i, (x, y) in enumerate(loader):
            torch.nn.functional.cross_entropy(net(x), y).backward()
            opt.step()
            opt.zero_grad()
            if i == 0:
                job.set_global_batch(40)
        assert lrs == [0.1] + [0.1 * gain] * 3, (rule, lrs)
    jobmod.set_current(None)
    import pytest

    with pytest.raises(ValueError, match=r"^lr_rule: unknown `cubic` \(expected one of adascale, sqrt, linear\)"):
        pacer.DataLoader(data, global_batch=10, lr_rule="cubic")
    assert pacer.current() is None
