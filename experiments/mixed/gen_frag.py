#!/usr/bin/env python3
"""A workload where device-type fragmentation dominates queueing (issue 26,
docs/mixed-types.md, "A cluster where type fragmentation dominates").

Jobs of Sia's applications (`--apps sia:DIR`), each (replicas, batch size) drawn from the
pairs Sia's saturn workloads give that application (Sia's generator's own choices):
  bert        6/384, 8/384, 12/384, 16/384
  deepspeech2 6/320, 8/320, 12/640
  yolov3      4/64
  cifar10     4/2048, 6/2048, 8/2048, 8/4096, 10/4096, 12/4096, 16/4096
Application shares: deepspeech2 35 %, bert 25 %, cifar10 25 %, yolov3 15 % (imagenet is
left out: one imagenet job runs for days on 16 devices). Arrivals: Poisson, one job per
5 minutes on average, from t = 0; 48 jobs. The cluster it is meant for,
`3x2:aws,2x2:dgx-ext,3x2:rtx` (16 devices, no type has more than 6), gives most of these
jobs less than they ask of any one type. These parameters were fixed before any run.

    python3 experiments/mixed/gen_frag.py --seed 4 -o frag-4.csv
"""

import argparse
import random

PAIRS = {
    "bert": [(6, 384), (8, 384), (12, 384), (16, 384)],
    "deepspeech2": [(6, 320), (8, 320), (12, 640)],
    "yolov3": [(4, 64)],
    "cifar10": [(4, 2048), (6, 2048), (8, 2048), (8, 4096), (10, 4096), (12, 4096),
                (16, 4096)],
}
SHARES = [("deepspeech2", 0.35), ("bert", 0.25), ("cifar10", 0.25), ("yolov3", 0.15)]


def generate(seed, jobs=48, mean_gap_s=300.0, shares=None, salt=(7_919, 1)):
    """`jobs` rows `(name, time, application, replicas, batch)`: Poisson arrivals
    `mean_gap_s` apart on average, applications drawn by `shares`, each job's
    (replicas, batch) from `PAIRS`; the RNG seeded `salt[0] * seed + salt[1]`."""
    shares = SHARES if shares is None else shares
    rng = random.Random(salt[0] * seed + salt[1])
    t = 0.0
    rows = []
    for i in range(jobs):
        t += rng.expovariate(1.0 / mean_gap_s)
        u = rng.random()
        acc = 0.0
        app = shares[-1][0]
        for a, f in shares:
            acc += f
            if u < acc:
                app = a
                break
        reps, bsz = rng.choice(PAIRS[app])
        rows.append((f"{app}-{i}", round(t, 1), app, reps, bsz))
    return rows


def main(doc=None, jobs=48, mean_gap_s=300.0, gen=generate):
    """The command line of a generator: `--seed`, `-n`, `--mean-gap-s`, `-o`."""
    doc = __doc__ if doc is None else doc
    ap = argparse.ArgumentParser(description=doc.split("\n")[0])
    ap.add_argument("--seed", type=int, required=True)
    ap.add_argument("-n", "--num-jobs", type=int, default=jobs)
    ap.add_argument("--mean-gap-s", type=float, default=mean_gap_s)
    ap.add_argument("-o", "--output", required=True)
    a = ap.parse_args()
    if a.num_jobs < 1 or not a.mean_gap_s > 0:
        ap.error("--num-jobs must be >= 1 and --mean-gap-s > 0")
    with open(a.output, "w") as f:
        f.write("name,time,application,num_replicas,batch_size\n")
        for r in gen(a.seed, a.num_jobs, a.mean_gap_s):
            f.write(",".join(str(x) for x in r) + "\n")


if __name__ == "__main__":
    main()
