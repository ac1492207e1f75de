#!/usr/bin/env python3
"""Why jobs wait in Sia's simulator: per-round statistics of its log (issue 25).

  python experiments/sia/sia_rounds.py SIA_LOG [PACER_JOBS_CSV]

SIA_LOG: the `--output` file of Sia's `multi_simulator.py` (one JSON record per round).
Prints, per application:
  - spells: maximal runs of rounds a job holds devices; "dropped" = spells that end
    with the job back at 0 devices before completion, split by whether the job had
    made any progress during the spell and whether it had ever trained before;
  - for jobs that have never trained and just finished a 2-round spell (bert's 120 s
    restart spans two 60 s rounds): how often Sia keeps them in the next round
    ("kept at the tie"), against the per-round start rate of jobs waiting to start;
and, for the whole workload, how many jobs started while an earlier arrival was still
waiting to start ("overtook"), and how many such earlier arrivals in all. With
PACER_JOBS_CSV (`pacer simulate --out DIR` per-job file) the same overtaking count for
pacer (from its start_s). Standard library only; streams the log.
"""

import csv
import json
import sys
from collections import Counter, defaultdict


def app_of(name):
    return name.rsplit("-", 1)[0]


def read_series(path):
    series = defaultdict(list)  # name -> [(t, gpus, progress)]
    sub = {}
    with open(path) as f:
        for line in f:
            rec = json.loads(line)
            t = rec["timestamp"]
            for j in rec["submitted_jobs"]:
                sub[j["name"]] = j["submission_time"]
                if j["completion_time"] is None:
                    series[j["name"]].append((t, sum(j["placement"] or ()), j["progress"]))
    return series, sub


def overtakes(first, arrival):
    names = sorted(first, key=lambda n: arrival[n])
    jobs = total = 0
    for i, n in enumerate(names):
        k = sum(1 for m in names[:i] if first[m] > first[n])
        jobs += k > 0
        total += k
    return jobs, total, len(names)


def main():
    if len(sys.argv) not in (2, 3):
        sys.exit(__doc__)
    series, sub = read_series(sys.argv[1])
    spells = defaultdict(Counter)
    tie = Counter()
    for n, s in series.items():
        a = app_of(n)
        s.sort()
        trained = False
        i = 0
        while i < len(s):
            if s[i][1] == 0:
                i += 1
                continue
            j = i
            while j < len(s) and s[j][1] > 0:
                j += 1
            spells[a]["spells"] += 1
            end = s[j][2] if j < len(s) else float("inf")  # inf: it completed
            progressed = end > s[i][2]
            if j < len(s):  # back at 0 devices before completion
                spells[a]["dropped"] += 1
                spells[a]["dropped, no progress in the spell"] += not progressed
                spells[a]["dropped, never trained before"] += not trained
            # Never trained, two rounds held without progress (its restart): the
            # third round decides with the job still without a model.
            if not trained and j - i >= 2 and s[i + 1][2] == 0 and (j - i > 2 or j < len(s)):
                tie[a, "at tie"] += 1
                tie[a, "kept"] += j - i > 2
            trained = trained or progressed
            i = j
    # Per-round start rate of jobs waiting to start (never held devices yet).
    first = {n: next((t for t, g, _ in sorted(s) if g > 0), None) for n, s in series.items()}
    waiting = started = 0
    for n, s in series.items():
        f = first[n]
        for t, g, _ in s:
            if f is None or t <= f:
                waiting += 1
                started += t == f
    print("| application | spells | dropped to 0 | of them without progress | of them never trained before |")
    print("|---|---|---|---|---|")
    for a, c in sorted(spells.items()):
        print(f"| {a} | {c['spells']} | {c['dropped']} | {c['dropped, no progress in the spell']} | "
              f"{c['dropped, never trained before']} |")
    print()
    for a in sorted({a for a, _ in tie}):
        at, kept = tie[a, "at tie"], tie[a, "kept"]
        print(f"{a}: never trained after a 2-round spell: kept {kept} of {at} ({kept / at:.3f})")
    print(f"jobs waiting to start: started per round {started / max(waiting, 1):.4f}")
    first = {n: f for n, f in first.items() if f is not None}
    jobs, total, n = overtakes(first, sub)
    print(f"Sia: {jobs} of {n} jobs started while an earlier arrival waited to start "
          f"({total} such earlier arrivals in all)")
    if len(sys.argv) == 3:
        with open(sys.argv[2]) as f:
            rows = [r for r in csv.DictReader(f) if r["start_s"] not in ("", "nan")]
        st = {r["name"]: float(r["start_s"]) for r in rows}
        ar = {r["name"]: float(r["arrival_s"]) for r in rows}
        jobs, total, n = overtakes(st, ar)
        print(f"pacer: {jobs} of {n} jobs started while an earlier arrival waited to start "
              f"({total} in all)")


if __name__ == "__main__":
    main()
