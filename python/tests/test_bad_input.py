"""Bad input is a ValueError naming the argument; nothing is started half-way."""

import pytest
import torch

import pacer_torch as pacer
from pacer_torch import job as jobmod


def data(n=64):
    return torch.utils.data.TensorDataset(torch.randn(n, 4), torch.randint(0, 2, (n,)))


@pytest.fixture(autouse=True)
def no_job():
    jobmod.set_current(None)
    yield
    jobmod.set_current(None)


def refused(match, **kw):
    with pytest.raises(ValueError, match=match):
        pacer.DataLoader(data(), **kw)
    assert pacer.current() is None, "nothing started"


def test_global_batch_smaller_than_the_world_or_not_an_integer():
    refused(r"^global_batch: 0 is smaller than the world size 1", global_batch=0)
    refused(r"^global_batch: 8\.0 \(expected an integer\)", global_batch=8.0)


def test_caps_that_cannot_hold_the_global_batch():
    refused(r"^max_local_batch: the ranks' caps \[16\] hold 16 samples, less than the global batch 32",
            global_batch=32, max_local_batch=16)
    refused(r"^max_local_batch: 0", global_batch=32, max_local_batch=0)


def test_minimum_local_batches_the_global_batch_cannot_give():
    refused(r"^min_local_batch: 0 \(expected an integer >= 1\)", global_batch=8, min_local_batch=0)
    refused(r"^min_local_batch: the ranks' minima \[9\] sum to 9, more than the global batch 8",
            global_batch=8, min_local_batch=9)
    refused(r"^min_local_batch: rank 0's minimum 20 is above its max_local_batch 16",
            global_batch=16, min_local_batch=20, max_local_batch=16)


def test_loader_worker_arguments():
    refused(r"^num_workers: -1 \(expected an integer >= 0\)", global_batch=8, num_workers=-1)
    refused(r"^prefetch_factor: 0 \(expected an integer >= 1\)", global_batch=8,
            num_workers=1, prefetch_factor=0)
    refused(r"^prefetch_factor: needs num_workers > 0", global_batch=8, prefetch_factor=2)
    refused(r"^loader_timeout_s: -1", global_batch=8, loader_timeout_s=-1)

    class NoLength(torch.utils.data.Dataset):
        def __getitem__(self, i):
            return i

    with pytest.raises(ValueError, match=r"^dataset: has no length \(expected a map-style"):
        pacer.DataLoader(NoLength(), global_batch=8)


def test_an_iterable_data_set_has_no_length():
    class Stream(torch.utils.data.IterableDataset):
        def __iter__(self):
            return iter(range(10))

    loader = pacer.DataLoader(Stream(), global_batch=4)
    with pytest.raises(TypeError, match="an iterable data set has no length"):
        len(loader)


def test_a_batchnorm_model_derives_a_minimum_of_two():
    bn = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.BatchNorm1d(4))
    pacer.DataParallel(bn)
    refused(r"^min_local_batch: the ranks' minima \[2\] \(derived: the model has BatchNorm "
            r"layers\) sum to 2, more than the global batch 1", global_batch=1)
    assert pacer.DataLoader(data(), global_batch=1, min_local_batch=1).job.minima == [1]
    jobmod.set_current(None)
    bn.eval()  # BatchNorm in eval mode uses its running statistics: one sample is fine
    pacer.DataParallel(bn)
    assert pacer.DataLoader(data(), global_batch=1).job.minima == [1]
    jobmod.set_current(None)
    loader = pacer.DataLoader(data(), global_batch=1)  # before the model: checked when wrapped
    with pytest.raises(ValueError, match=r"^min_local_batch: the model's BatchNorm layers "
                       r"\(training mode\) need 2 samples per rank, 2 in all, more than the "
                       r"global batch 1"):
        pacer.DataParallel(torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.BatchNorm1d(4)))
    assert loader.job.minima == [1]


def test_periodic_checkpoints_need_a_directory_and_a_period(tmp_path, monkeypatch):
    monkeypatch.delenv("PACER_CHECKPOINT_DIR", raising=False)
    refused(r"^checkpoint_every_steps: no checkpoint directory", global_batch=8,
            checkpoint_every_steps=10)
    refused(r"^checkpoint_every_s: no checkpoint directory", global_batch=8,
            checkpoint_every_s=60)
    refused(r"^checkpoint_every_steps: 0 \(expected an integer >= 1\)", global_batch=8,
            checkpoint_every_steps=0, checkpoint_dir=str(tmp_path))
    refused(r"^checkpoint_every_s: nan \(expected a finite number of seconds > 0\)",
            global_batch=8, checkpoint_every_s=float("nan"), checkpoint_dir=str(tmp_path))


def test_unknown_engine():
    with pytest.raises(ValueError, match=r"^engine: 'reducer' \(expected one of flat, ddp\)"):
        pacer.DataParallel(torch.nn.Linear(4, 2), engine="reducer")


def test_unknown_controller_and_predictor():
    refused(r"^controller: unknown `fastest` \(expected one of uniform, lbbsp", global_batch=8,
            controller="fastest")
    refused(r"^predictor: unknown `arima`", global_batch=8, predictor="arima")
    with pytest.raises(ValueError, match="^controller: unknown controller `nope`"):
        pacer.Session(64, "nope")
    with pytest.raises(ValueError, match="^name: unknown predictor `x`"):
        pacer.Predictor("x")


def test_emulation_and_adaptive_arguments():
    refused(r"^speed: 0", global_batch=8, speed=0)
    refused(r"^time_scale: 0\.5", global_batch=8, time_scale=0.5)
    refused(r"^emulation_cost: \(0\.001, 0\.0\) \(expected finite fixed_s >= 0 and "
            r"per_sample_s > 0\)", global_batch=8, emulation_cost=(0.001, 0.0))
    refused(r"^emulation_cost: 3 \(expected \(fixed_s, per_sample_s\)\)", global_batch=8,
            emulation_cost=3)
    refused(r"^max_global_batch: 4 is below global_batch 8", global_batch=8,
            adaptive_batch=True, max_global_batch=4)


def _job(tmp_path, model):
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    net = pacer.DataParallel(model, opt)
    loader = pacer.DataLoader(data(), global_batch=16, checkpoint_dir=str(tmp_path))
    return net, opt, loader


def test_a_checkpoint_from_another_model_is_refused_and_changes_nothing(tmp_path):
    torch.manual_seed(0)
    net, opt, loader = _job(tmp_path, torch.nn.Linear(4, 2))
    for x, y in loader:
        torch.nn.functional.cross_entropy(net(x), y).backward()
        opt.step()
        break
    pacer.save_checkpoint()
    other = torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.Linear(3, 2))
    before = [p.detach().clone() for p in other.parameters()]
    net2, opt2, loader2 = _job(tmp_path, other)
    offset = loader2.job.sampler.offset
    with pytest.raises(ValueError, match=r"^checkpoint: saved from another model \(\('weight'"):
        pacer.restore_if_needed()
    assert all(torch.equal(a, b) for a, b in zip(before, other.parameters()))
    assert loader2.job.sampler.offset == offset and opt2.state_dict()["state"] == {}


def test_the_same_model_resumes(tmp_path):
    torch.manual_seed(0)
    net, opt, loader = _job(tmp_path, torch.nn.Linear(4, 2))
    for i, (x, y) in enumerate(loader):
        torch.nn.functional.cross_entropy(net(x), y).backward()
        opt.step()
        if i == 1:
            break
    pacer.save_checkpoint()
    model2 = torch.nn.Linear(4, 2)
    net2, opt2, loader2 = _job(tmp_path, model2)
    assert pacer.restore_if_needed()
    assert loader2.job.sampler.offset == 32 and loader2.job.steps == 2
    assert torch.equal(model2.weight, net.module.weight)
    assert torch.equal(opt2.state_dict()["state"][0]["momentum_buffer"],
                       opt.state_dict()["state"][0]["momentum_buffer"])


def test_backward_outside_a_step_is_an_error():
    net = pacer.DataParallel(torch.nn.Linear(4, 2))
    pacer.DataLoader(data(), global_batch=8)
    with pytest.raises(RuntimeError, match="outside a step"):
        net(torch.randn(3, 4)).sum().backward()


def test_rendezvous_reads_torchrun_then_slurm():
    info = pacer.rendezvous({"RANK": "2", "WORLD_SIZE": "4", "LOCAL_RANK": "0",
                             "MASTER_ADDR": "10.0.0.1", "MASTER_PORT": "1234"})
    assert (info["rank"], info["world_size"], info["master_port"], info["source"]) == (2, 4, 1234, "torchrun")
    info = pacer.rendezvous({"SLURM_PROCID": "1", "SLURM_NTASKS": "2", "SLURM_LOCALID": "1",
                             "SLURM_JOB_NODELIST": "node7"})
    assert (info["rank"], info["master_addr"], info["source"]) == (1, "node7", "slurm")
    with pytest.raises(ValueError, match="SLURM_JOB_NODELIST"):
        pacer.rendezvous({"SLURM_PROCID": "0", "SLURM_NTASKS": "2", "SLURM_JOB_NODELIST": "n[1-2]"})
    with pytest.raises(ValueError, match="^environment variable RANK: 'x'"):
        pacer.rendezvous({"RANK": "x", "WORLD_SIZE": "2"})
    with pytest.raises(ValueError, match="rank 4 of world size 4"):
        pacer.rendezvous({"RANK": "4", "WORLD_SIZE": "4"})
    assert pacer.rendezvous({})["source"] == "single"


def test_nccl_with_more_ranks_than_gpus_is_one_clear_error(monkeypatch):
    """nccl refuses two ranks on one GPU deep inside its first collective; pacer says so
    before joining the group (here with torch's device count stubbed to 1)."""
    import torch.distributed as dist

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    for k, v in {"RANK": "1", "WORLD_SIZE": "2", "LOCAL_RANK": "1",
                 "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "29999"}.items():
        monkeypatch.setenv(k, v)
    with pytest.raises(RuntimeError, match="LOCAL_RANK 1 but this process sees 1 CUDA"):
        pacer.init_process_group()
    assert not dist.is_initialized()


def test_global_batch_reads_pacer_global_batch_or_the_default():
    assert pacer.global_batch(256, {}) == 256
    assert pacer.global_batch(256, {"PACER_GLOBAL_BATCH": ""}) == 256
    assert pacer.global_batch(256, {"PACER_GLOBAL_BATCH": "512"}) == 512
    for bad in ["0", "-3", "many", "1.5"]:
        with pytest.raises(ValueError, match="PACER_GLOBAL_BATCH"):
            pacer.global_batch(256, {"PACER_GLOBAL_BATCH": bad})
    for bad in [0, True, 2.0]:
        with pytest.raises(ValueError, match="default"):
            pacer.global_batch(bad, {})
