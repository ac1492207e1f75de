#!/usr/bin/env python3
"""Workloads with other application mixes, from Sia's own workload generator.

Sia's generator (`sia-simulator/utils/generate_workload.py`, `generate_v2`) samples jobs
from the Philly trace in a time window (the arrival process) and labels them by GPU-time:
< 1 GPU-h cifar10, < 10 deepspeech2 (half of those bert), < 100 yolov3, else imagenet,
so its workloads are ~84 % cifar10. This script calls that generator unchanged (same
seed, same arrivals and labels) and then relabels a seeded fraction of the cifar10 jobs
to another application, drawing the new job's (replicas, batch size) from Sia's own
`get_configurations(0.5, 0.8, max_gpus=16, ngpus_per_node=8)` on `rtx`, as the
generator does for every job. Arrival times are untouched.

Mixes (fraction of cifar10 jobs relabelled):
  bert   0.5 to bert          (bert-heavy, ~45 % bert)
  ds2    0.5 to deepspeech2   (deepspeech2-heavy, ~45 % deepspeech2)
  mixed  0.3 to deepspeech2, 0.3 to bert  (~30 % cifar10, ~30 % each of the others)

Needs Sia's artifact (it reads Sia's traces and the Philly digest) and its Python
dependencies (numpy, pandas). Deterministic for a given (--mix, --seed, window):

  python experiments/sia/gen_mix.py --sia $SIA_SIM --mix bert --seed 1 --start 600 -o bert-1.csv

(experiments/sia/mixes.sh makes every set of experiments/sia/MIXES.md.)

$SIA_SIM is the artifact's `sia-simulator/` folder (with `traces/philly.csv`).
"""

import argparse
import contextlib
import io
import os
import random
import sys

MIXES = {
    "bert": [("bert", 0.5)],
    "ds2": [("deepspeech2", 0.5)],
    "mixed": [("deepspeech2", 0.3), ("bert", 0.3)],
}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--sia", required=True, help="Sia's sia-simulator/ folder")
    ap.add_argument("--mix", required=True, choices=sorted(MIXES))
    ap.add_argument("--seed", type=int, required=True)
    ap.add_argument("-n", "--num-jobs", type=int, default=160)
    ap.add_argument("--start", type=int, required=True,
                    help="window start, hours into the Philly trace (Sia's default, 2, "
                         "has fewer than 160 jobs in its window)")
    ap.add_argument("--duration", type=int, default=8, help="window hours (Sia's default)")
    ap.add_argument("-o", "--output", required=True)
    args = ap.parse_args()

    sim = os.path.abspath(args.sia)
    gen = os.path.join(sim, "utils", "generate_workload.py")
    if not os.path.isfile(gen):
        sys.exit(f"--sia {args.sia}: expected Sia's sia-simulator/ folder (no {gen})")
    sys.path[:0] = [sim, os.path.join(sim, "utils")]
    cwd = os.getcwd()
    os.chdir(sim)  # applications.py reads traces/ relative to the working directory
    try:
        import generate_workload as g
        from applications import APPLICATIONS

        with contextlib.redirect_stdout(io.StringIO()):
            df = g.generate_v2(args.num_jobs, start=args.start,
                               duration=args.duration, seed=args.seed, trace="philly")
        rng = random.Random(1_000_003 * args.seed + 17)
        for i in range(len(df)):
            if df.at[i, "application"] != "cifar10":
                continue
            u = rng.random()
            acc = 0.0
            for app, frac in MIXES[args.mix]:
                acc += frac
                if u < acc:
                    confs = APPLICATIONS[g.base_gpu_type][app].get_configurations(
                        0.5, 0.8, max_gpus=g.MAX_NUM_GPUS, ngpus_per_node=g.NGPUS_PER_NODE)
                    reps, bsz, _ = rng.choice(confs)
                    df.at[i, "application"] = app
                    df.at[i, "num_replicas"] = reps
                    df.at[i, "batch_size"] = bsz
                    break
    finally:
        os.chdir(cwd)
    df["name"] = [f"{a}-{i}" for i, a in enumerate(df["application"])]
    df.set_index("name").to_csv(args.output)
    counts = df["application"].value_counts()
    print(args.output, ", ".join(f"{a} {c}" for a, c in counts.items()), file=sys.stderr)


if __name__ == "__main__":
    main()
