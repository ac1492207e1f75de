#!/usr/bin/env python3
"""Per-application comparison of Sia's simulator and pacer on one workload.

  python experiments/sia/per_app.py SIA_LOG [PACER_JOBS_CSV ...]
  python experiments/sia/per_app.py --anchor TRACE WORKLOAD SIA_LOG TIME_FILE

The second form prints one row of experiments/sia/MIXES.md's anchor table (the
columns of ANCHORS.md): jobs done, avg and p99 JCT (linear-interpolated 99th
percentile), makespan (last completion − first arrival), rounds, wall and CPU
seconds (TIME_FILE: `/usr/bin/time -f "%U %S %e"` of the run).

SIA_LOG: the `--output` file of Sia's `multi_simulator.py` (one JSON record per round,
each with every submitted job's epoch, restarts, placement, batch size and
accumulation steps). PACER_JOBS_CSV: `pacer simulate --out DIR` per-job files
(`DIR/<workload>-<policy>-jobs.csv`). Prints, per application: jobs, mean JCT (h),
restarts per job, and GPU-hours per job; for Sia also the mean GPUs held while
running and the mean per-GPU (local) batch incl. accumulation, over rounds.
Standard library only.
"""

import csv
import json
import sys
from collections import defaultdict


def app_of(name):
    return name.rsplit("-", 1)[0]


def sia_rows(path):
    last = None
    held = defaultdict(list)  # app -> GPUs held per (job, round) while running
    local = defaultdict(list)  # app -> local batch per replica per (job, round)
    gpu_s = defaultdict(float)
    prev_t = None
    try:
        f = open(path)
    except OSError as e:
        sys.exit(f"{path}: {e.strerror}")
    with f:
        for n, line in enumerate(f, 1):
            try:
                rec = json.loads(line)
            except json.JSONDecodeError as e:
                sys.exit(f"{path}:{n}: expected one JSON record of Sia's log per line ({e})")
            t = rec["timestamp"]
            dt = 0 if prev_t is None else t - prev_t
            prev_t = t
            for j in rec["submitted_jobs"]:
                g = sum(j["placement"] or ())
                if g and j["completion_time"] is None:
                    a = app_of(j["name"])
                    held[a].append(g)
                    gpu_s[j["name"]] += g * dt
                    if j["batch_size"]:
                        local[a].append(j["batch_size"] / g)
            last = rec
    if last is None:
        sys.exit(f"{path}: empty log")
    jobs = defaultdict(list)
    for j in last["submitted_jobs"]:
        if j["completion_time"] is None:
            continue
        jct = j["completion_time"] - j["submission_time"]
        jobs[app_of(j["name"])].append((jct, j["num_restarts"] or 0, gpu_s[j["name"]]))
    return jobs, held, local


def pacer_rows(path):
    jobs = defaultdict(list)
    with open(path) as f:
        for r in csv.DictReader(f):
            if r["completion_s"] in ("", "nan"):
                continue
            jobs[r["application"]].append(
                (float(r["jct_s"]), float(r["restarts"]), float(r["gpu_s"])))
    return jobs


def mean(xs):
    return sum(xs) / len(xs) if xs else float("nan")


def percentile(xs, q):
    xs = sorted(xs)
    k = (len(xs) - 1) * q / 100
    lo = int(k)
    hi = min(lo + 1, len(xs) - 1)
    return xs[lo] + (xs[hi] - xs[lo]) * (k - lo)


def anchor(trace, workload, log, time_file):
    recs = 0
    last = None
    with open(log) as f:
        for line in f:
            recs += 1
            last = json.loads(line)
    jobs = last["submitted_jobs"]
    done = [j for j in jobs if j["completion_time"] is not None]
    jct = [(j["completion_time"] - j["submission_time"]) / 3600 for j in done]
    mk = (max(j["completion_time"] for j in done) - min(j["submission_time"] for j in jobs)) / 3600
    try:
        user, system, wall = map(float, open(time_file).read().split()[-3:])
    except (OSError, ValueError):
        sys.exit(f"{time_file}: expected `/usr/bin/time -f \"%U %S %e\"` output (user system wall)")
    print(f"| sia | {trace} | {workload} | {len(done)}/{len(jobs)} | {mean(jct):.3f} | "
          f"{percentile(jct, 99):.2f} | {mk:.2f} | {recs} | — | {wall:.0f} | {user + system:.0f} |")


def main():
    if len(sys.argv) == 6 and sys.argv[1] == "--anchor":
        return anchor(*sys.argv[2:])
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    sia, held, local = sia_rows(sys.argv[1])
    runs = [("Sia", sia)] + [(p.rsplit("/", 1)[-1].replace("-jobs.csv", ""), pacer_rows(p))
                             for p in sys.argv[2:]]
    apps = sorted({a for _, r in runs for a in r})
    print("| run | application | jobs | mean JCT h | restarts/job | GPU-h/job |")
    print("|---|---|---|---|---|---|")
    for name, r in runs:
        alljct = [x[0] for a in r for x in r[a]]
        for a in apps:
            xs = r.get(a, [])
            print(f"| {name} | {a} | {len(xs)} | {mean([x[0] for x in xs]) / 3600:.3f} | "
                  f"{mean([x[1] for x in xs]):.2f} | {mean([x[2] for x in xs]) / 3600:.2f} |")
        print(f"| {name} | all | {len(alljct)} | {mean(alljct) / 3600:.3f} | | |")
    print()
    print("Sia, while running: mean GPUs held / mean local batch (batch per GPU, with accumulation)")
    for a in apps:
        print(f"  {a}: {mean(held[a]):.2f} GPUs, local batch {mean(local[a]):.1f}")


if __name__ == "__main__":
    main()
