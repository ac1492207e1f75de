"""The Rust bindings: the session's decisions, its state round trip, the noise scale."""

import json
import math
import random

import pytest

import pacer_torch as pacer


def drive(s, steps, rng, speeds):
    out = []
    for k in range(steps):
        b, _, _ = s.decide()
        out.append(b)
        s.observe([(w, b[i], b[i] / (speeds[i] * (1 + 0.05 * rng.random())), 0.1, 0.2)
                   for i, w in enumerate(s.workers())])
    return out


def test_the_session_balances_and_its_state_replays_exactly():
    s = pacer.Session(512, "lbbsp", "narx", 7)
    for w in range(4):
        s.join(w)
    rng = random.Random(3)
    speeds = [1000.0, 1000.0, 500.0, 250.0]
    hist = drive(s, 30, rng, speeds)
    assert hist[0] == [128] * 4
    last = hist[-1]
    assert sum(last) == 512 and last[0] > last[2] > last[3]
    # Ideal shares 186/186/93/47: within a few samples.
    assert all(abs(a - b) <= 8 for a, b in zip(last, [186, 186, 93, 47])), last
    t = pacer.Session.from_state(s.state())
    assert t.state() == s.state()
    t.leave(3)
    s.leave(3)
    assert drive(t, 10, random.Random(5), speeds[:3]) == drive(s, 10, random.Random(5), speeds[:3])


def test_bad_calls_change_nothing():
    s = pacer.Session(100, "pid", "ewma", 1)
    s.join(0)
    s.join(1)
    s.decide()
    n = s.logged_calls()
    with pytest.raises(ValueError, match="observations: worker 1: compute time NaN"):
        s.observe([(0, 50, 0.1, 0, 0), (1, 50, math.nan, 0, 0)])
    with pytest.raises(ValueError, match="already in the job"):
        s.join(1)
    with pytest.raises(ValueError, match="batches:"):
        s.override_batches([10, 10])
    assert s.logged_calls() == n
    with pytest.raises(ValueError, match="^state: not a session state"):
        pacer.Session.from_state("{}")
    bad = json.loads(s.state())
    bad["version"] = 99
    with pytest.raises(ValueError, match="version 99"):
        pacer.Session.from_state(json.dumps(bad))


def test_with_global_batch_keeps_members_and_recent_speeds():
    s = pacer.Session(300, "lbbsp", "ewma", 1)
    for w in range(3):
        s.join(w, 1, 1000)
    drive(s, 10, random.Random(1), [1000.0, 500.0, 500.0])
    t = s.with_global_batch(600)
    b, _, rebalanced = t.decide()
    assert rebalanced and sum(b) == 600 and b[0] > b[1]
    with pytest.raises(ValueError, match="^global_batch"):
        s.with_global_batch(5000)


def test_noise_scale_matches_the_two_batch_estimate():
    # Gradients g_i = G + noise with per-sample variance: B_noise = tr S / |G|^2.
    rng = random.Random(2)
    dim, tr_s, g2 = 200, 400.0, 1.0
    gns = pacer.Gns(512.0)
    big = [1.0 / math.sqrt(dim)] * dim
    for _ in range(3000):
        bs = [200, 150, 100, 62]
        locals_ = []
        for b in bs:
            sd = math.sqrt(tr_s / dim / b)
            locals_.append([x + rng.gauss(0, sd) for x in big])
        agg = [sum(b * g[j] for b, g in zip(bs, locals_)) / 512 for j in range(dim)]
        gns.observe([float(b) for b in bs], [sum(v * v for v in g) for g in locals_],
                    sum(v * v for v in agg))
    ns = gns.noise_scale()
    assert abs(ns - tr_s / g2) / (tr_s / g2) < 0.15, ns
    assert gns.resolved() and gns.steps == 3000
    best = gns.best_global_batch(10000.0, 0.05, 8192.0)
    assert best is not None and 512 <= best[0] <= 8192 and best[2] >= 1.0
    assert 1.0 <= gns.gain(1024.0) <= 2.0
    assert pacer.Gns.from_state(gns.state()).noise_scale() == ns
    with pytest.raises(ValueError, match="at least two workers"):
        gns.observe([512.0], [1.0], 1.0)
    with pytest.raises(ValueError, match="^base_batch"):
        pacer.Gns(0.0)


def test_predictors_and_goodput_model():
    p = pacer.Predictor("ewma")
    assert p.predict_next() is None
    for v in (100.0, 100.0, 200.0):
        p.observe(v)
    assert 100.0 < p.predict_next() < 200.0
    perf = pacer.Perf(0.01, 0.001, 0.1, 0.0, 0.05, 0.0, 1.0)
    assert perf.step_time(1, 4, 64.0, 0) == pytest.approx(0.01 + 0.064 + 0.05)
    assert pacer._native.efficiency(1.0, 0.0, 1024.0, 512.0) == pytest.approx(0.5)
    assert pacer._native.adascale_gain(1.0, 1e9, 1024.0, 512.0) == pytest.approx(2.0, rel=1e-6)
