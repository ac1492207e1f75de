#!/usr/bin/env python3
"""Mixed-type allocations on Sia's workloads (issue 26, docs/mixed-types.md).

For every Sia saturn and philly workload on Sia's cluster, runs `sia-pacer` (jobs on one
type) and `sia-pacer-mix --mixed-types` (jobs may span types), with `--profiles fitted`
and `--profiles online` (the same on both sides), and writes the mean avg JCT, the
breakdown (queueing before the first start, restart delay paid, time running, device
utilisation, devices held on mixes) and Sia's published numbers beside them
(experiments/sia/ANCHORS.md). Tuning subset: saturn 1-3 (nothing was tuned on it; it is
kept apart so that a later knob is chosen there); held out: saturn 4-10, philly 1-8.

    cargo build --release -p pacer-cli
    python3 experiments/mixed/sia_mix.py [--data ../shared/data/sia] [--cluster SPEC] \
        [--workloads saturn:1-10,philly:1-8] [--out experiments/mixed/sia-mix.json]
"""

import argparse
import csv
import json
import os
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PACER = os.environ.get("PACER_BIN") or os.path.join(ROOT, "target", "release", "pacer")
# Sia's own simulator, avg JCT in hours (experiments/sia/ANCHORS.md; no Sia run for
# philly 4, 6, 8).
SIA = {
    ("saturn", 1): 0.581, ("saturn", 2): 0.715, ("saturn", 3): 0.742, ("saturn", 4): 0.845,
    ("saturn", 5): 0.664, ("saturn", 6): 0.669, ("saturn", 7): 0.584, ("saturn", 8): 0.794,
    ("saturn", 9): 1.017, ("saturn", 10): 0.796, ("philly", 1): 0.542, ("philly", 2): 0.747,
    ("philly", 3): 0.575, ("philly", 5): 0.667, ("philly", 7): 0.841,
}
TUNING = {("saturn", 1), ("saturn", 2), ("saturn", 3), ("frag", 1), ("frag", 2), ("frag", 3),
          ("light", 1), ("light", 2), ("light", 3)}


def parse_workloads(spec):
    out = []
    for part in spec.split(","):
        trace, rng = part.split(":")
        lo, _, hi = rng.partition("-")
        out += [(trace, i) for i in range(int(lo), int(hi or lo) + 1)]
    return out


def run(data, root, cluster, trace, i, policy, profiles, mixed, fabric=None):
    """One simulation; `mixed`: with `--mixed-types` (`sia-pacer` runs the same with
    it, and its views then carry the balanced models the estimate needs)."""
    wl = os.path.join(root, trace, f"workload-{i}.csv")
    with tempfile.TemporaryDirectory() as out:
        cmd = [PACER, "simulate", "--apps", f"sia:{data}/traces", "--workload", wl,
               "--cluster", cluster, "--policy", policy, "--profiles", profiles,
               "--json", "--out", out, "--mixing-opportunity"]
        if mixed:
            cmd.append("--mixed-types")
        if fabric:
            cmd += ["--shared-fabric", fabric]
        t = time.time()
        res = subprocess.run(cmd, capture_output=True, text=True)
        wall = time.time() - t
        if res.returncode != 0:
            sys.exit(f"{' '.join(cmd)}: {res.stderr}")
        row = json.loads(res.stdout)[0]
        jobs_csv = [f for f in os.listdir(out) if f.endswith("-jobs.csv")][0]
        with open(os.path.join(out, jobs_csv)) as f:
            jobs = list(csv.DictReader(f))
    fin = [j for j in jobs if j["jct_s"]]
    n = len(fin)
    mean = lambda k: sum(float(j[k] or 0) for j in fin) / max(n, 1)
    gpu = sum(float(j["gpu_s"]) for j in jobs)
    mixed_gpu = sum(float(j["mixed_gpu_s"]) for j in jobs)
    return {
        "trace": trace, "workload": i, "policy": policy, "profiles": profiles,
        "mixed_types": mixed, "finished": row["finished"], "jobs": row["jobs"],
        "avg_jct_h": row["avg_jct_s"] / 3600, "p99_jct_h": row["p99_jct_s"] / 3600,
        "makespan_h": row["makespan_s"] / 3600,
        "avg_queueing_h": mean("queueing_s") / 3600,
        "avg_restart_paid_h": mean("restart_paid_s") / 3600,
        "avg_restarts": mean("restarts"),
        "avg_mixed_gpu_h": mean("mixed_gpu_s") / 3600,
        "utilization": row["utilization"],
        "mixed_jobs": sum(1 for j in jobs if float(j["mixed_gpu_s"]) > 0),
        "mixed_gpu_share": mixed_gpu / gpu if gpu > 0 else 0.0,
        "wall_s": wall,
        # Idle and stranded device-hours, and the bound on the avg JCT a policy across
        # types could remove from this run (docs/mixed-types.md, "The opportunity").
        "mixing": row["mixing"],
    }


def opportunity(a, rows):
    """Per set, under `sia-pacer`: idle and stranded device-hours per workload and the
    mean bound on the avg-JCT gain (each workload's bound, averaged)."""
    print("| profiles | set | workloads | sia-pacer avg JCT h | util | idle GPU-h | "
          "stranded GPU-h | bound on avg-JCT gain | same-type | balanced |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for profiles in a.profiles.split(","):
        sets = {}
        for r in rows:
            if r["policy"] == "sia-pacer" and r["profiles"] == profiles:
                s = "tuning" if (r["trace"], r["workload"]) in TUNING else "held out"
                sets.setdefault((r["trace"], s), []).append(r)
        for (trace, s), v in sorted(sets.items()):
            avg = lambda f: sum(f(r) for r in v) / len(v)
            print(f"| {profiles} | {trace} {s} | {len(v)} | {avg(lambda r: r['avg_jct_h']):.3f} | "
                  f"{avg(lambda r: r['utilization']):.3f} | "
                  f"{avg(lambda r: r['mixing']['idle_gpu_h']):.1f} | "
                  f"{avg(lambda r: r['mixing']['stranded_gpu_h']):.1f} | "
                  f"{100 * avg(lambda r: r['mixing']['bound_avg_jct_gain']):.2f} % (max "
                  f"{100 * max(r['mixing']['bound_avg_jct_gain'] for r in v):.2f} %) | "
                  f"{est(v, 'same_type_avg_jct_gain')} | {est(v, 'balanced_avg_jct_gain')} |")


def est(v, key):
    """Mean (max) of an estimate over a set's workloads, when measured."""
    xs = [r["mixing"].get(key) for r in v]
    if any(x is None for x in xs):
        return "—"
    return f"{100 * sum(xs) / len(xs):.2f} % (max {100 * max(xs):.2f} %)"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--data", default=os.path.join(ROOT, "..", "shared", "data", "sia"))
    ap.add_argument("--workload-root", default=None,
                    help="folder of TRACE/workload-I.csv (default: DATA/workloads; "
                         "experiments/mixed for the generated frag workloads)")
    ap.add_argument("--cluster", default="6x4:aws,2x8:dgx-ext,3x8:rtx")
    ap.add_argument("--workloads", default="saturn:1-10,philly:1-8")
    ap.add_argument("--profiles", default="fitted,online")
    ap.add_argument("--mix", default="sia-pacer-mix,sia-pacer-mix-g1",
                    help="mixing policies, each run with --mixed-types")
    ap.add_argument("--baseline-mixed-types", action="store_true",
                    help="run sia-pacer with --mixed-types too (its results are the same; "
                         "its opportunity then has the balanced and same-type estimates)")
    ap.add_argument("--shared-fabric", default=None, metavar="TYPE",
                    help="the what-if on every side: each type's cross-node sync is TYPE's "
                         "(pacer simulate --shared-fabric; docs/mixed-types.md)")
    ap.add_argument("--out", default=os.path.join(ROOT, "experiments", "mixed", "sia-mix.json"))
    a = ap.parse_args()
    root = a.workload_root or os.path.join(a.data, "workloads")
    rows = []
    for profiles in a.profiles.split(","):
        for trace, i in parse_workloads(a.workloads):
            runs = [("sia-pacer", a.baseline_mixed_types)]
            runs += [(m, True) for m in a.mix.split(",") if m]
            for policy, mixed in runs:
                r = run(a.data, root, a.cluster, trace, i, policy, profiles, mixed,
                        a.shared_fabric)
                r["policy"] = policy
                rows.append(r)
                print(f"{profiles} {trace}-{i} {policy}: avg JCT {r['avg_jct_h']:.3f} h, "
                      f"queueing {r['avg_queueing_h']:.3f} h, restarts paid "
                      f"{r['avg_restart_paid_h']:.3f} h, mixed {r['avg_mixed_gpu_h']:.3f} "
                      f"GPU-h/job, util {r['utilization']:.3f}, "
                      f"mixed jobs {r['mixed_jobs']} ({100 * r['mixed_gpu_share']:.1f} % of "
                      f"device time), idle {r['mixing']['idle_gpu_h']:.1f} GPU-h, stranded "
                      f"{r['mixing']['stranded_gpu_h']:.1f} GPU-h, bound "
                      f"{100 * r['mixing']['bound_avg_jct_gain']:.1f} %, same-type "
                      f"{100 * r['mixing'].get('same_type_avg_jct_gain', float('nan')):.1f} %, "
                      f"balanced "
                      f"{100 * r['mixing'].get('balanced_avg_jct_gain', float('nan')):.1f} %, "
                      f"{r['wall_s']:.1f} s",
                      flush=True)
    with open(a.out, "w") as f:
        json.dump({"cluster": a.cluster, "shared_fabric": a.shared_fabric, "rows": rows}, f,
                  indent=1)
    print()
    by = {(r["profiles"], r["trace"], r["workload"], r["policy"]): r for r in rows}
    opportunity(a, rows)
    for mix in [m for m in a.mix.split(",") if m]:
        print()
        print(f"{mix} against sia-pacer")
        print("| profiles | trace | workload | set | Sia | sia-pacer | mix | Δ | "
              "queueing Δ h | restart paid Δ h | util | mixed jobs |")
        print("|---|---|---|---|---|---|---|---|---|---|---|---|")
        for profiles in a.profiles.split(","):
            sums = {}
            for trace, i in parse_workloads(a.workloads):
                p = by[(profiles, trace, i, "sia-pacer")]
                m = by[(profiles, trace, i, mix)]
                d = m["avg_jct_h"] / p["avg_jct_h"] - 1
                s = "tuning" if (trace, i) in TUNING else "held out"
                sia = SIA.get((trace, i))
                print(f"| {profiles} | {trace} | {i} | {s} | {sia if sia else '—'} | "
                      f"{p['avg_jct_h']:.3f} | {m['avg_jct_h']:.3f} | {100 * d:+.1f} % | "
                      f"{m['avg_queueing_h'] - p['avg_queueing_h']:+.3f} | "
                      f"{m['avg_restart_paid_h'] - p['avg_restart_paid_h']:+.3f} | "
                      f"{p['utilization']:.3f} → {m['utilization']:.3f} | {m['mixed_jobs']} |")
                for key in [(trace, s), (trace, "all")]:
                    sums.setdefault(key, []).append((p, m))
            for (trace, s), v in sorted(sums.items()):
                avg = lambda k, side: sum(x[side][k] for x in v) / len(v)
                mp, mm = avg("avg_jct_h", 0), avg("avg_jct_h", 1)
                print(f"{mix} {profiles} {trace} {s}: mean avg JCT sia-pacer {mp:.3f} h, "
                      f"{mix} {mm:.3f} h ({100 * (mm / mp - 1):+.1f} %, {len(v)} workloads); "
                      f"queueing {avg('avg_queueing_h', 0):.3f} → "
                      f"{avg('avg_queueing_h', 1):.3f} h, restart paid "
                      f"{avg('avg_restart_paid_h', 0):.3f} → {avg('avg_restart_paid_h', 1):.3f}"
                      f" h, restarts {avg('avg_restarts', 0):.2f} → {avg('avg_restarts', 1):.2f},"
                      f" mixed GPU-h per job {avg('avg_mixed_gpu_h', 1):.3f}")


if __name__ == "__main__":
    main()
