"""The opt-in step trace and its attribution (trace.py), and the calibrated emulation."""

import itertools
import json
import time
import types

import pytest
import torch

import pacer_torch as pacer
from pacer_torch import job as jobmod
from pacer_torch import signals
from pacer_torch import trace
from pacer_torch.signals import Emulation, calibrate_cost


@pytest.fixture(autouse=True)
def no_job():
    jobmod.set_current(None)
    yield
    jobmod.set_current(None)


def test_the_best_integer_split_is_the_brute_force_one():
    for speeds in ([1.0, 2.0, 3.5], [5.0, 5.0, 1.25], [0.3, 7.0, 7.0]):
        for batch in (3, 7, 12):
            best = min(
                max(b / v for b, v in zip(bs, speeds))
                for bs in itertools.product(range(batch + 1), repeat=3)
                if sum(bs) == batch
            )
            split = trace.best_integer_split(batch, speeds)
            assert sum(split) == batch
            assert trace.best_integer_max(batch, speeds) == pytest.approx(best)


def _row(t0, b, compute, target, arrive, reduced, gathered, end, pred_v=0.0):
    return {
        "t_begin": t0, "c_begin": 0.0, "b": b, "pred_v": pred_v,
        "t_pad_end": t0 + compute, "c_pad_end": 0.001, "cpu": 0.001, "target": target,
        "overrun": False, "t_arrive": arrive, "c_arrive": 0.002,
        "t_reduced": reduced, "c_reduced": 0.003, "t_gathered": gathered,
        "c_gathered": 0.004, "t_end": end, "c_end": 0.005,
    }


def test_the_terms_add_up_to_the_cycle_and_name_the_right_causes():
    # Two ranks, B = 30. Every step: all-reduce done at R(k) = 1.0 k; rank 1 (speed 100/s,
    # 10 samples) starts 5 ms after R(k-1), computes 100 ms + 2 ms overshoot, enters the
    # all-reduce 1 ms later, which completes 3 ms after that. Rank 0 (200/s, 20 samples)
    # is early. The ideal is 30 / (200 + 10/0.102).
    ranks = [[], []]
    for k in range(6):
        r_prev = k - 1.0
        r_now = float(k)
        s1 = r_prev + 0.005
        ranks[0].append(_row(r_prev + 0.002, 20, 0.1, 0.1, r_prev + 0.103, r_now,
                             r_now + 0.001, r_now + 0.002))
        ranks[1].append(_row(s1, 10, 0.102, 0.1, s1 + 0.103, r_now + 0.0001,
                             r_now + 0.001, r_now + 0.002))
        ranks[1][-1]["t_arrive"] = r_now - 0.003
    out = trace.analyse(ranks, skip=1)
    assert out["steps"] == 5
    terms = out["terms_ms"]
    assert sum(terms.values()) == pytest.approx(out["cycle_ms"], rel=1e-9)
    assert out["cycle_ms"] == pytest.approx(1000.0)
    v = [20 / 0.1, 10 / 0.102]
    assert terms["ideal"] == pytest.approx(1000 * 30 / sum(v))
    # Rank 1's 2 ms overshoot, less the part of it the ideal already holds.
    assert terms["emulation"] == pytest.approx(2.0 + 1000 * (30 / 300 - 30 / sum(v)))
    assert terms["post"] == pytest.approx(5.0)
    assert terms["comm"] == pytest.approx(3.0)
    split = out["post_split_ms"]
    assert split["exit"] == pytest.approx(0.1) and split["gather"] == pytest.approx(0.9)
    assert sum(split.values()) == pytest.approx(terms["post"])
    assert out["critical_rank_count"] == [0, 5]
    # The speeds never change: hindsight split = the best split, no noise.
    assert terms["noise"] == pytest.approx(0.0, abs=1e-9)
    assert out["per_rank"][1]["overshoot_ms_mean"] == pytest.approx(2.0)


def test_a_paused_cycle_is_left_out():
    ranks = [[_row(k, 4, 0.1, 0.1, k + 0.1, k + 0.2, k + 0.3, k + 0.4) for k in range(5)]]
    ranks[0][2]["paused"] = 1
    assert trace.analyse(ranks, skip=1)["steps"] == 3
    with pytest.raises(ValueError, match="^trace: no full step"):
        trace.analyse(ranks, skip=10)


def test_calibrated_emulation_pads_to_the_cost_line():
    em = Emulation(speed=0.5, time_scale=2.0, cost=(0.001, 0.0002))
    w0, c0 = time.perf_counter(), time.thread_time()
    em.pad(w0, c0, batch=40)
    took = time.perf_counter() - w0
    assert em.last_target == pytest.approx(2.0 * (0.001 + 0.0002 * 40) / 0.5)
    assert took >= em.last_target and not em.last_overrun


def test_calibrate_cost_fits_a_line_through_the_medians(monkeypatch):
    def burn(b):
        x = 0
        for i in range(2000 * b):
            x += i

    fixed, per_sample = calibrate_cost(burn, [1, 4, 8], reps=5, warmup=1)
    assert per_sample > 0 and fixed >= 0
    with pytest.raises(ValueError, match=r"^sizes: \[3, 3\]"):
        calibrate_cost(burn, [3, 3])
    # A step whose CPU time does not depend on the batch, on a clock that only the step
    # moves (a real no-op's medians are noise, and their slope is as often above 0).
    clock = [0.0]

    def flat(b):
        clock[0] += 2.0**-10  # exact in binary: every step takes exactly this long

    monkeypatch.setattr(signals, "time", types.SimpleNamespace(thread_time=lambda: clock[0]))
    with pytest.raises(ValueError, match=r"^sizes: the step's CPU time did not grow"):
        calibrate_cost(flat, [1, 2, 3], reps=3)


def _train(steps):
    data = torch.utils.data.TensorDataset(torch.randn(64, 4), torch.randint(0, 2, (64,)))
    model = torch.nn.Linear(4, 2)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    net = pacer.DataParallel(model, opt)
    loader = pacer.DataLoader(data, global_batch=8)
    it = iter(loader)
    for _ in range(steps):
        x, y = next(it)
        torch.nn.functional.cross_entropy(net(x), y).backward()
        opt.step()
        opt.zero_grad()
    next(it)  # ends the last step
    return loader.job


def test_the_trace_is_off_by_default_and_writes_a_row_per_step_when_on(tmp_path, monkeypatch):
    monkeypatch.delenv("PACER_TRACE", raising=False)
    assert _train(2).trace is None
    jobmod.set_current(None)
    monkeypatch.setenv("PACER_TRACE", str(tmp_path))
    job = _train(5)
    job.trace.flush()
    rows = [json.loads(line) for line in open(tmp_path / "trace-rank0.jsonl")]
    assert len(rows) == 5
    for r in rows:
        assert r["t_begin"] <= r["t_pad_end"] <= r["t_arrive"] <= r["t_reduced"]
        assert r["t_reduced"] <= r["t_gathered"] <= r["t_end"] and r["b"] == 8
    out = trace.analyse(trace.load(str(tmp_path)), skip=1)
    assert out["steps"] == 4
    assert sum(out["terms_ms"].values()) == pytest.approx(out["cycle_ms"], rel=1e-9)
