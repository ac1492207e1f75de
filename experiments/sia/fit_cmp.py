#!/usr/bin/env python3
"""Sia's `fit_perf_params` against pacer's fit on the same profile points (issue 25).

  python experiments/sia/fit_cmp.py SIA_SIMULATOR_DIR APP TYPE [K]

Needs Sia's Python environment (numpy, scipy, autograd, pandas; `goodput.py` is read
from SIA_SIMULATOR_DIR) and pacer's `fit_points` example
(`cargo build --release -p pacer-predict --example fit_points`). For every pair of the
application's K smallest one-device local batches (b1, b2) on device type TYPE, it
builds the profile a job has after one round on 1 device at b1 and one on 2 devices of
one node at b2 (step and sync times from Sia's `placements-TYPE.csv`, as Sia's
simulator records them), fits both models to those two points, and compares what
they predict for 2 devices against 1 at b2: 2 · t(1 device) / t(2 devices), the
speedup the policy sees for growing the job (the trace's own ratio beside it).
Prints one row per pair and the means.
"""

import os
import subprocess
import sys

import numpy as np
import pandas as pd


def main():
    if len(sys.argv) not in (4, 5):
        sys.exit(__doc__)
    sim, app, ty = sys.argv[1:4]
    k = int(sys.argv[4]) if len(sys.argv) == 5 else 6
    sys.path.insert(0, sim)
    import warnings

    warnings.filterwarnings("ignore")
    from goodput import (PerfParams, _predict_accum_time, _predict_log_optim_time,
                         _predict_network_time, fit_perf_params)

    def step(p, n, r, b):
        p = PerfParams(*p)
        a = _predict_accum_time(p, np.array([b], dtype=float))
        net = _predict_network_time(p, np.array([n]), np.array([r]))
        return float(np.exp(_predict_log_optim_time(p, a, net))[0])

    df = pd.read_csv(os.path.join(sim, "traces", app, f"placements-{ty}.csv"))

    def point(place, b):
        r = df[(df.placement == place) & (df.local_bsz == b)].iloc[0]
        return float(r.step_time), float(r.sync_time)

    two = set(df[df.placement == 2].local_bsz)
    bs = [b for b in sorted(df[df.placement == 1].local_bsz.unique()) if b in two][:k]
    sets = [[(1, 1, b1) + point(1, b1), (1, 2, b2) + point(2, b2)] for b1 in bs for b2 in bs]
    text = "\n\n".join("\n".join(" ".join(map(str, x)) for x in s) for s in sets)
    exe = os.path.join(os.path.dirname(__file__), "..", "..", "target", "release",
                       "examples", "fit_points")
    out = subprocess.run([exe], input=text, capture_output=True, text=True,
                         check=True).stdout.splitlines()
    print("| b1 | b2 | Sia's fit 2·t1/t2 | pacer's fit | trace | Sia α_r | pacer α_r |")
    print("|---|---|---|---|---|---|---|")
    ratios = []
    for s, line in zip(sets, out):
        pp = [float(x) for x in line.split()]
        n, r, b, st, sy = (np.array([x[i] for x in s], dtype=float) for i in range(5))
        sp = list(fit_perf_params(n.astype(int), r.astype(int), b, st - sy, st))
        b2 = s[1][2]
        rs = 2 * step(sp, 1, 1, b2) / step(sp, 1, 2, b2)
        rp = 2 * step(pp, 1, 1, b2) / step(pp, 1, 2, b2)
        rt = 2 * point(1, b2)[0] / point(2, b2)[0]
        ratios.append((rs, rp, rt))
        print(f"| {s[0][2]} | {b2} | {rs:.3f} | {rp:.3f} | {rt:.3f} | {sp[4]:.3g} | {pp[4]:.3g} |")
    m = np.mean(ratios, axis=0)
    higher = sum(rp > rs + 1e-3 for rs, rp, _ in ratios)
    lower = sum(rp < rs - 1e-3 for rs, rp, _ in ratios)
    print(f"\n{app} on {ty}, {len(ratios)} pairs: mean 2-device speedup Sia's fit {m[0]:.3f}, "
          f"pacer's fit {m[1]:.3f}, trace {m[2]:.3f}; pacer's higher in {higher}, lower in {lower}")


if __name__ == "__main__":
    main()
