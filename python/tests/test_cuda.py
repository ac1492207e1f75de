"""The CUDA path (issue 24, point 8): the exact weighted gradient, one decision per job
with the adaptive batch on, a checkpoint resumed at another world size, the compute
clock, and the noise scale under AMP (fp16 autocast, a GradScaler) — on GPUs. Skipped
where torch sees no CUDA device (the build machines and CI: the same bodies run there on
the CPU, in test_distributed.py, test_agreement.py and test_gradnorm.py).

nccl needs one GPU per rank; with fewer GPUs than ranks the ranks share the GPUs under
gloo, which reduces CUDA tensors too (`backend` below). On one GPU, nccl runs at world
size 1: its collectives (the packed all-reduce, the decision's broadcast) still run."""

import math
import os
import time

import pytest
import torch

import _dist
import test_agreement as ta
import test_distributed as td

NGPU = torch.cuda.device_count() if torch.cuda.is_available() else 0
pytestmark = pytest.mark.skipif(NGPU == 0, reason="no CUDA device (see python/README.md, GPU)")

# (backend, world): several ranks per GPU under gloo; nccl at one rank per GPU.
SHARED = ("gloo", 4)
NCCL = ("nccl", min(NGPU, 4) if NGPU else 1)


def _device(rank):
    dev = torch.device("cuda", rank % torch.cuda.device_count())
    torch.cuda.set_device(dev)
    return dev


def _split(world):
    """Unequal local batches of the global 512 (td.BATCHES at 4 ranks)."""
    return {1: [512], 2: [300, 212], 3: [250, 150, 112], 4: td.BATCHES}[world]


def _exactness(rank, world, out, engine, micro):
    import pacer_torch as pacer

    dev = _device(rank)
    batches = _split(world)
    model = td.make_model().to(dev)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    net = pacer.DataParallel(model, opt, engine=engine, bucket_cap_mb=0.001)
    loader = pacer.DataLoader(td.make_data(512), global_batch=512, controller="lbbsp", seed=3,
                              device=dev, pin_memory=True)
    loader.set_batches(batches)
    for x, y, idx in loader:
        assert x.is_cuda and len(x) == batches[rank]
        td.backward_in_micro_batches(net, x, y, micro)
        torch.save({"grads": [p.grad.cpu() for p in model.parameters()], "idx": idx.cpu()},
                   os.path.join(out, f"rank{rank}.pt"))
        break


@pytest.mark.parametrize("backend,world", [SHARED, NCCL])
@pytest.mark.parametrize("engine,micro", [("flat", 1), ("ddp", 3)])
def test_weighted_gradient_on_cuda_equals_the_single_process_gradient(
    tmp_path, backend, world, engine, micro
):
    _dist.run(_exactness, world, str(tmp_path), engine, micro, backend=backend)
    x, y, _ = td.make_data(512).tensors
    ref_model = td.make_model()
    torch.nn.functional.cross_entropy(ref_model(x), y).backward()  # on the CPU
    ref = torch.cat([p.grad.reshape(-1) for p in ref_model.parameters()]).double()
    seen = []
    for r in range(world):
        got = torch.load(tmp_path / f"rank{r}.pt")
        g = torch.cat([t.reshape(-1) for t in got["grads"]]).double()
        rel = float((g - ref).norm() / ref.norm())
        print(f"{backend} world {world} rank {r}: relative error {rel:.3e}")
        assert rel <= 1e-5, rel
        seen.extend(got["idx"].tolist())
    assert sorted(seen) == list(range(512))


def _adaptive(rank, world, out, engine):
    import torch.distributed as dist

    import pacer_torch as pacer

    dev = _device(rank)
    train, (xt, yt) = ta.make_data()
    model = ta.make_model().to(dev)
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    net = pacer.DataParallel(model, opt, engine=engine)
    speed = [1, 1, 0.5, 0.25][:world]
    loader = pacer.DataLoader(
        train, global_batch=32, controller="lbbsp", seed=7, adaptive_batch=True,
        max_global_batch=1024, adapt_every=4, speed=speed, time_scale=1.0, device=dev,
    )
    job = pacer.current()
    log, epochs, acc = [], 0, 0.0
    # ta.EPOCHS epochs, then on to the target, at most ta.MAX_EPOCHS: the goodput-optimal
    # batch trades progress per epoch for progress per second, so a fixed epoch count
    # can end below the target (0.876 after 6 epochs once on an H200, where 50 other
    # one-rank epochs from the second on were 0.906-0.948).
    for _ in pacer.remaining_epochs(ta.MAX_EPOCHS):
        for x, y in loader:
            loss = torch.nn.functional.cross_entropy(net(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            mine = (list(job.step_ctx.sizes), len(x), opt.param_groups[0]["lr"],
                    list(job.batches))
            views = [None] * world
            dist.all_gather_object(views, mine)
            ran = [v[1] for v in views]
            if any(v[0] != ran or v[2:] != views[0][2:] for v in views):
                raise AssertionError(f"step {len(log)}: the ranks disagree: {views}")
            log.append(ran)
        epochs += 1
        with torch.no_grad():
            acc = float((model(xt.to(dev)).argmax(dim=1) == yt.to(dev)).float().mean())
        # Every rank stops after the same epoch (rank 0's accuracy decides).
        stop = torch.tensor([1.0 if epochs >= ta.EPOCHS and acc >= ta.TARGET else 0.0],
                            device=dev)
        dist.broadcast(stop, 0)
        if stop.item():
            break
    with torch.no_grad():
        flat = torch.cat([p.reshape(-1) for p in model.parameters()]).cpu()
    copies = [None] * world
    dist.all_gather_object(copies, flat)
    if rank == 0:
        torch.save({"log": log, "acc": acc, "epochs": epochs, "copies": copies},
                   os.path.join(out, "a.pt"))


@pytest.mark.parametrize("backend,world", [SHARED, NCCL])
@pytest.mark.parametrize("engine", ["flat", "ddp"])
def test_adaptive_ranks_on_cuda_apply_one_decision_every_step(tmp_path, backend, world, engine):
    _dist.run(_adaptive, world, str(tmp_path), engine, backend=backend, timeout_s=90)
    got = torch.load(tmp_path / "a.pt")
    globals_ = [sum(ran) for ran in got["log"]]
    print(f"{backend} world {world} {engine}: steps {len(globals_)}, epochs {got['epochs']}, "
          f"global batches {sorted(set(globals_))}, accuracy {got['acc']:.3f}")
    assert sum(globals_) == got["epochs"] * ta.N_TRAIN
    # At one rank (nccl) the noise scale comes from consecutive steps (ConsecutiveSteps).
    assert max(globals_) > 32 * 1.05, "the global batch adapted"
    assert all(torch.equal(c, got["copies"][0]) for c in got["copies"])
    assert got["acc"] >= ta.TARGET, got["acc"]


def _checkpoint(rank, world, out, phase):
    import pacer_torch as pacer

    dev = _device(rank)
    model = td.make_model().to(dev)
    if phase == "resume":
        with torch.no_grad():
            for p in model.parameters():
                p.add_(1.0)  # a different start: the checkpoint must overwrite it
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    net = pacer.DataParallel(model, opt)
    loader = pacer.DataLoader(td.make_data(td.N), global_batch=256, controller="pid", seed=9,
                              checkpoint_dir=os.path.join(out, "ckpt"), device=dev)
    if phase == "resume":
        assert pacer.restore_if_needed()
        if rank == 0:
            torch.save({"model": {k: v.cpu() for k, v in model.state_dict().items()},
                        "exp_avg": [opt.state[p]["exp_avg"].cpu() for p in model.parameters()],
                        "on": [str(opt.state[p]["exp_avg"].device) for p in model.parameters()],
                        "offset": loader.job.sampler.state_dict()["offset"]},
                       os.path.join(out, "resumed.pt"))
        return
    for step, (x, y, _) in enumerate(loader, 1):
        torch.nn.functional.cross_entropy(net(x), y).backward()
        opt.step()
        opt.zero_grad()
        if step == td.K:
            pacer.save_checkpoint()
            if rank == 0:
                torch.save({"model": {k: v.cpu() for k, v in model.state_dict().items()},
                            "exp_avg": [opt.state[p]["exp_avg"].cpu()
                                        for p in model.parameters()]},
                           os.path.join(out, "at_k.pt"))
            break


def test_a_cuda_checkpoint_resumes_at_another_world_size(tmp_path):
    world = SHARED[1]
    _dist.run(_checkpoint, world, str(tmp_path), "train", backend="gloo")
    _dist.run(_checkpoint, 2, str(tmp_path), "resume", backend="gloo")
    a, b = torch.load(tmp_path / "at_k.pt"), torch.load(tmp_path / "resumed.pt")
    assert a["model"].keys() == b["model"].keys()
    assert all(torch.equal(a["model"][k], b["model"][k]) for k in a["model"])
    assert all(torch.equal(u, v) for u, v in zip(a["exp_avg"], b["exp_avg"]))
    assert all(on.startswith("cuda") for on in b["on"]), b["on"]
    assert b["offset"] == td.K * 256


def _clock(rank, world, out):
    import pacer_torch as pacer

    dev = _device(rank)
    torch.manual_seed(0)
    # Narrow inputs (the batch's copy is small) into wide layers (much device work).
    inputs, width, layers, batch = 256, 4096, 6, 2048
    model = torch.nn.Sequential(
        torch.nn.Linear(inputs, width),
        *[m for _ in range(layers) for m in (torch.nn.Linear(width, width), torch.nn.ReLU())],
        torch.nn.Linear(width, 10),
    ).to(dev)
    opt = torch.optim.SGD(model.parameters(), lr=1e-4)
    x = torch.randn(batch * 8, inputs)
    y = torch.randint(0, 10, (batch * 8,))
    # The device's time of one forward and backward at this batch, synchronised.
    xb, yb = x[:batch].to(dev), y[:batch].to(dev)
    ref = []
    for _ in range(6):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        torch.nn.functional.cross_entropy(model(xb), yb).backward()
        torch.cuda.synchronize()
        ref.append(time.perf_counter() - t0)
    model.zero_grad()
    net = pacer.DataParallel(model, opt)
    loader = pacer.DataLoader(torch.utils.data.TensorDataset(x, y), global_batch=batch,
                              controller="uniform", seed=1, device=dev)
    job = pacer.current()
    seen = []
    real_row = job.local_row

    def row(measured, sqr):
        r = real_row(measured, sqr)
        seen.append((measured[0], r[0]))  # the host's clock, the row's compute
        return r

    job.local_row = row
    for xs, ys in loader:
        torch.nn.functional.cross_entropy(net(xs), ys).backward()
        opt.step()
        opt.zero_grad()
    torch.save({"ref": ref, "seen": seen}, os.path.join(out, "clock.pt"))


def test_the_compute_clock_counts_the_device_time_not_the_launches(tmp_path):
    _dist.run(_clock, 1, str(tmp_path), backend="gloo")
    got = torch.load(tmp_path / "clock.pt")
    ref = sorted(got["ref"])[len(got["ref"]) // 2]
    host = sorted(h for h, _ in got["seen"][1:])
    row = sorted(r for _, r in got["seen"][1:])
    print(f"device fwd+bwd {ref * 1e3:.2f} ms; host clock median {host[len(host) // 2] * 1e3:.2f}"
          f" ms; pacer's compute median {row[len(row) // 2] * 1e3:.2f} ms")
    med = row[len(row) // 2]
    assert 0.8 * ref <= med <= 1.5 * ref, (med, ref)


def _amp(rank, world, out, engine, on="cuda"):
    """Mixed precision on the GPU (``on="cpu"``: the same body on the CPU, to check the
    test itself): fp16 autocast and a GradScaler whose scale grows every other step
    until the fp16 gradients overflow (the scaler then skips a step and halves its
    scale). Two ranks (the noise scale reads the norms only when two or more ranks
    computed the step): each step's |g|^2 must equal the unscaled norm of the reduced
    gradient, and this rank's |g_i|^2 the unscaled norm of its own gradient (a copy of
    the model, the same batch and the same scaled backward outside pacer), or be
    non-finite on an overflow step."""
    import copy

    import pacer_torch as pacer
    from pacer_torch.job import SQR

    dev = _device(rank) if on == "cuda" else torch.device("cpu")
    g = torch.Generator().manual_seed(3)
    x, y = torch.randn(2048, 64, generator=g), torch.randint(0, 10, (2048,), generator=g)
    torch.manual_seed(1)
    model = torch.nn.Sequential(torch.nn.Linear(64, 256), torch.nn.ReLU(),
                                torch.nn.Linear(256, 10)).to(dev)
    params = list(model.parameters())
    opt = torch.optim.SGD(params, lr=0.05)
    scaler = torch.amp.GradScaler(dev.type, init_scale=2.0**14, growth_interval=2)
    net = pacer.DataParallel(model, opt, engine=engine, grad_scaler=scaler)
    loader = pacer.DataLoader(torch.utils.data.TensorDataset(x, y), global_batch=128,
                              controller="uniform", seed=2, device=dev, noise_scale=True)
    job = pacer.current()
    got = []
    gathered = job.gathered

    def spy(rows, agg, dec, pair=None):
        got.append(([r[SQR] for r in rows], agg))
        gathered(rows, agg, dec, pair)

    job.gathered = spy
    checks = []
    for step, (xb, yb) in enumerate(loader):
        opt.zero_grad()
        s = scaler.get_scale()
        ref = copy.deepcopy(model)
        with torch.autocast(dev.type, dtype=torch.float16):
            ref_loss = torch.nn.functional.cross_entropy(ref(xb), yb)
        (ref_loss * s).backward()
        mine = torch.cat([p.grad.reshape(-1) for p in ref.parameters()]).double()
        with torch.autocast(dev.type, dtype=torch.float16):
            logits = net(xb)
            loss = torch.nn.functional.cross_entropy(logits, yb)
        assert logits.dtype == torch.float16
        scaler.scale(loss).backward()
        flat = torch.cat([p.grad.reshape(-1) for p in params]).double()
        raw = float((flat ** 2).sum())
        local, agg = got[-1]
        checks.append((step, s, math.isfinite(raw), local[rank], agg, raw / s**2,
                       float((mine ** 2).sum()) / s**2))
        scaler.step(opt)
        scaler.update()
        if step == 15:
            break
    torch.save({"checks": checks}, os.path.join(out, f"amp-{engine}-{rank}.pt"))


def check_amp(out, engine, world=2):
    for rank in range(world):
        checks = torch.load(os.path.join(out, f"amp-{engine}-{rank}.pt"))["checks"]
        finite = [c for c in checks if c[2]]
        print(f"amp {engine} rank {rank}: scales {[c[1] for c in checks]}, "
              f"{len(checks) - len(finite)} overflow steps")
        assert len(finite) >= 8
        for step, s, _, local, agg, want, want_local in finite:
            assert abs(agg - want) <= 1e-4 * want, (step, s, agg, want)
            assert abs(local - want_local) <= 1e-4 * want_local, (step, s, local, want_local)
            assert s >= 2.0**10  # the raw norm is s^2 times larger: a missed unscale fails
        for step, s, ok, local, agg, want, _ in checks:
            if not ok:
                assert not math.isfinite(agg), (step, local, agg)


@pytest.mark.parametrize("engine", ["flat", "ddp"])
def test_the_noise_scale_under_amp_on_cuda_divides_out_the_loss_scale(tmp_path, engine):
    # Two ranks share the GPUs under gloo (nccl would need two GPUs).
    _dist.run(_amp, 2, str(tmp_path), engine, backend="gloo", timeout_s=90)
    check_amp(str(tmp_path), engine)
