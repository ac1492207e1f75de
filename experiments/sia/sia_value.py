#!/usr/bin/env python3
"""Sia's own valuation of a job's configurations on pacer's inputs (issue 25).

  SIA=/path/to/sia-simulator python experiments/sia/sia_value.py DUMP

DUMP: lines of the temporary per-round dump of MIXES.md ("Same inputs, same values"):
per trained job and round, pacer's inputs (age, restarts, restart penalty, requested
batch, replica cap, re-allocation factor, and per device type the step-time model,
gradient statistics and batch limits it values the job with) and the values
`λ_n − cost` pacer's `sia` gave each configuration. For each line, this evaluates the
same inputs with Sia's code: goodput at the goodput-optimal batch with Sia's
`GoodputFunction.optimize` (`goodput.py`, accumulation on, the requested batch as the
largest), normalised by the smallest goodput of the job's valid configurations, the
re-allocation factor on every configuration but the one held, cost `S^-0.5` rounded
to two decimals (`sia.py`), and prints both values per configuration; `--diff` only
the configurations where they differ by more than 0.005. Job-rounds
pacer pinned (restart under way, no options) and jobs that have not trained
(`fresh=true`: one device of any type at S = 1 in both) are skipped. Needs numpy, scipy and
autograd (Sia's requirements).
"""

import math
import os
import re
import sys

sys.path.insert(0, os.environ.get("SIA", "sia-simulator"))
import numpy as np  # noqa: E402
from goodput import GoodputFunction  # noqa: E402

PER_NODE = {"aws": 4, "dgx-ext": 8, "rtx": 8}
TOTAL = {"aws": 24, "dgx-ext": 16, "rtx": 24}  # 6x4:aws,2x8:dgx-ext,3x8:rtx
CONFIGS = [1, 2, 4, 8, 16, 24]
P, LAMBDA_N = -0.5, 1.1


def parse(line):
    head, rest = line.split(" opts=")
    d = dict(re.findall(r"(\w+)=(\S+)", head))
    opts = {
        k: float(v)
        for k, v in re.findall(r"([\w-]+:\d+:\d+)=([\d.]+)", rest.split(" M0=")[0])
    }
    models = {}
    for m in re.finditer(r"M\d=([\w-]+):(\S+)", rest):
        perf, grad, lim = m.group(2).split("|")
        models[m.group(1)] = (
            [float(x) for x in perf.split(",")],
            [float(x) for x in grad.split(",")],
            [float(x) for x in lim.split(",")[:4]],
        )
    return d, opts, models


def sia_values(d, models):
    req = re.search(r"[\d.]+", d["req"])
    maxr = int(d["maxr"])
    goodput = {}
    for ty, (perf, grad, (base, max_batch, min_atomic, max_atomic)) in models.items():
        fn = GoodputFunction(perf, grad, base)
        largest = float(req.group()) if req else max_batch
        per = PER_NODE[ty]
        for g in CONFIGS:
            if g > maxr or g > TOTAL[ty] or (g > per and g % per):
                continue
            nodes = math.ceil(g / per)
            gp = fn.optimize(
                np.float32(nodes),
                np.float32(g),
                max_batch_size=largest,
                atomic_bsz_range=(min_atomic, max_atomic),
                accumulation=True,
            )[0]
            goodput[f"{ty}:{nodes}:{g}"] = gp
    smallest = min(v for v in goodput.values() if v > 1e-4)
    rf = float(d["rf"])
    out = {}
    for c, v in goodput.items():
        # No factor for a job that held nothing (Sia: no previous configuration).
        s = v / smallest * (1.0 if d["held"] in (c, "-") else rf)
        cost = min(np.round(np.power(s, P), 2), 3000.0)
        out[c] = (s, LAMBDA_N - cost)
    return out


def main():
    args = [a for a in sys.argv[1:] if a != "--diff"]
    if len(args) != 1:
        sys.exit(__doc__)
    diff = "--diff" in sys.argv
    lines = differ = 0
    with open(args[0]) as f:
        for line in f:
            if not line.startswith("DUMP") or " M0=" not in line or " fresh=true" in line:
                continue
            d, opts, models = parse(line)
            if not opts:
                continue  # pinned in a restart: no options to compare
            lines += 1
            rows = []
            for c, (s, v) in sia_values(d, models).items():
                mine = opts.get(c)
                # pacer drops options with value <= 0; so does Sia's optimum.
                off = (mine is None and v > 0.005) or (
                    mine is not None and abs(mine - v) > 0.005
                )
                differ += off
                if off or not diff:
                    rows.append(f"   {c:12s} S={s:8.3f} sia={v:6.2f} pacer={mine}")
            if rows:
                print(f"t={d['t']} job={d['job']} held={d['held']} choice={d['choice']}")
                print("\n".join(rows))
    print(f"{lines} job-rounds, {differ} configuration values differ by more than 0.005")


if __name__ == "__main__":
    main()
