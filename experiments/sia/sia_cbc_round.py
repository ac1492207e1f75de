#!/usr/bin/env python3
"""Sia's integer program, solved by Sia's solver, on pacer's own rounds (issue 25).

  python experiments/sia/sia_cbc_round.py DUMP

DUMP: the stderr of a pacer build with `experiments/sia/sia_dump.patch` applied, run with
`PACER_SIA_DUMP=1` on the 6x4:aws,2x8:dgx-ext,3x8:rtx cluster: per round a `ROUND` line
(capacity per type after the jobs held in a restart) and per job a `DUMP` line (held and
chosen configuration, whether it has trained, its options and their values). For every
round this builds Sia's program as `sia.py` does (`__solve_mip_rescaled`: one 0/1 variable
per job and configuration, cost `1.1 − value` for an option and 100 otherwise, minimise the
costs plus 1.1 per job left without devices, per-type device capacity, one configuration per
job) and solves it with CBC at Sia's settings (8 threads, `allowablePercentageGap` 0.01).
Prints the rounds in which pacer's choice is worth less than CBC's (the sum of the chosen
values, to 0.005), the total shortfall, and, for jobs that hold a device without having
trained (the tie of MIXES.md "Why bert waits"), how often pacer and CBC keep them.
Needs cvxpy with CBC (Sia's requirements).
"""

import re
import sys
from collections import Counter

import cvxpy as cp
import numpy as np

TYPES = [("aws", 4, 6), ("dgx-ext", 8, 2), ("rtx", 8, 3)]


def configs():
    out = []
    for ty, per, nodes in TYPES:
        g = 1
        while g < per:
            out.append((ty, 1, g))
            g *= 2
        for k in range(1, nodes + 1):
            out.append((ty, k, k * per))
    return out


def read(path, index):
    rounds, cur = [], None
    opt = re.compile(r"([\w-]+:\d+:\d+)=([\d.]+)")
    with open(path) as f:
        for line in f:
            if line.startswith("ROUND"):
                cap = [int(x) for x in re.findall(r"\d+", line.split("cap=")[1])]
                cur = {"cap": cap, "jobs": []}
                rounds.append(cur)
            elif line.startswith("DUMP") and cur is not None:
                head, rest = line.split(" opts=")
                d = dict(re.findall(r"(\w+)=(\S+)", head))
                opts = {
                    index[k]: round(float(v), 2)
                    for k, v in opt.findall(rest.split(" M0=")[0])
                }
                cur["jobs"].append(
                    (d["choice"], d["fresh"] == "true", d["cur"] == "true", opts)
                )
    return rounds


def main():
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    conf = configs()
    index = {"%s:%d:%d" % c: i for i, c in enumerate(conf)}
    gpus = np.zeros((len(conf), len(TYPES)))
    for i, (ty, _, g) in enumerate(conf):
        gpus[i, [t[0] for t in TYPES].index(ty)] = g
    stats = Counter()
    for r in read(sys.argv[1], index):
        jobs = [j for j in r["jobs"] if j[3]]  # held in a restart: no options
        if not jobs:
            continue
        cost = np.full((len(jobs), len(conf)), 100.0)
        for i, j in enumerate(jobs):
            for c, v in j[3].items():
                cost[i, c] = round(1.1 - v, 2)
        x = cp.Variable(cost.shape, integer=True)
        objective = cp.sum(cp.multiply(x, cost)) + 1.1 * (len(jobs) - cp.sum(x))
        constraints = [
            x >= 0,
            x <= 1,
            cp.sum(x, axis=1) <= 1,
            cp.sum(x @ gpus, axis=0) <= np.array(r["cap"]),
        ]
        cp.Problem(cp.Minimize(objective), constraints).solve(
            solver=cp.CBC, numberThreads=8, allowablePercentageGap=0.01
        )
        sol = np.round(x.value).astype(int)
        mine = theirs = 0.0
        for i, (choice, fresh, holds, opts) in enumerate(jobs):
            picked = np.flatnonzero(sol[i])
            mine += opts.get(index.get(choice), 0.0)
            theirs += opts.get(int(picked[0]), 0.0) if len(picked) else 0.0
            if fresh and holds:
                stats["untrained jobs holding a device, with options"] += 1
                stats["  kept by pacer"] += choice != "-"
                stats["  kept by CBC"] += len(picked) > 0
        stats["rounds"] += 1
        if theirs - mine > 0.005:
            stats["rounds where pacer's choice is worth less"] += 1
            stats["total shortfall"] += theirs - mine
        elif mine - theirs > 0.005:
            stats["rounds where pacer's choice is worth more (CBC within its gap)"] += 1
    for k, v in stats.items():
        print(k, round(v, 2) if isinstance(v, float) else v)


if __name__ == "__main__":
    main()
