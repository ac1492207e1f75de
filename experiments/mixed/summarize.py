#!/usr/bin/env python3
"""The rows of docs/mixed-types.md's comparison tables from one or more sia_mix.py JSON files.

Per (profiles, trace, set) and mixing policy, over the workloads both sides ran: `sia-pacer`'s
mean avg JCT, its opportunity (bound, same-type, balanced: mean and max over the workloads,
when measured), the policy's mean avg JCT and Δ, the change in hours per job split into
queueing, restart delay paid and the rest (running), restarts per job, mixed GPU-h per job
and the per-workload range of Δ.

    python3 experiments/mixed/summarize.py experiments/mixed/light-tables-online.json
    python3 experiments/mixed/summarize.py --whole experiments/mixed/sia-tables-online.json

`--whole`: one set per trace (saturn 1-5 as one), not split into tuning and held out.
"""

import argparse
import json
import sys

from sia_mix import TUNING, est


def pct(x):
    return f"{100 * x:+.1f} %".replace("-", "−")


def signed(x, digits=4):
    return f"{x:+.{digits}f}".replace("-", "−")


def estimate(base, key):
    """sia_mix.py's mean (max) of an estimate, in the tables' style: "1.32 % (max 2.36)"."""
    return est(base, key).replace(" %)", ")")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--whole", action="store_true",
                    help="one set per trace, not split into tuning and held out")
    ap.add_argument("files", nargs="+", metavar="FILE.json")
    a = ap.parse_args()
    rows = []
    for path in a.files:
        try:
            with open(path) as f:
                rows += json.load(f)["rows"]
        except (OSError, ValueError, KeyError) as e:
            sys.exit(f"{path}: {e}")
    by = {(r["profiles"], r["trace"], r["workload"], r["policy"]): r for r in rows}
    groups = {}
    for r in rows:
        s = "all" if a.whole else (
            "tuning" if (r["trace"], r["workload"]) in TUNING else "held out")
        groups.setdefault((r["profiles"], r["trace"], s), set()).add(r["workload"])
    policies = sorted({r["policy"] for r in rows if r["policy"] != "sia-pacer"})
    print("| profiles | set | sia-pacer | bound | same-type | balanced | policy | avg JCT | Δ | "
          "queueing | restart paid | running | restarts/job | mixed GPU-h/job | per workload |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    for (profiles, trace, s), ws in sorted(groups.items()):
        ws = sorted(ws)
        base = [by[(profiles, trace, w, "sia-pacer")] for w in ws
                if (profiles, trace, w, "sia-pacer") in by]
        if len(base) != len(ws):
            sys.exit(f"{profiles} {trace} {s}: sia-pacer missing on some workloads")
        mean = lambda v, k: sum(x[k] for x in v) / len(v)
        bp = mean(base, "avg_jct_h")
        bound = (f"{100 * sum(b['mixing']['bound_avg_jct_gain'] for b in base) / len(base):.2f} %"
                 if all("mixing" in b for b in base) else "—")
        head = (f"| {profiles} | {trace} {ws[0]}–{ws[-1]} ({s}) | {bp:.3f} | {bound} | "
                f"{estimate(base, 'same_type_avg_jct_gain')} | "
                f"{estimate(base, 'balanced_avg_jct_gain')} |")
        for p in policies:
            mix = [by.get((profiles, trace, w, p)) for w in ws]
            if any(m is None for m in mix):
                continue
            mp = mean(mix, "avg_jct_h")
            dq = mean(mix, "avg_queueing_h") - mean(base, "avg_queueing_h")
            dr = mean(mix, "avg_restart_paid_h") - mean(base, "avg_restart_paid_h")
            run = (mp - bp) - dq - dr
            per = [m["avg_jct_h"] / b["avg_jct_h"] - 1 for m, b in zip(mix, base)]
            print(f"{head} {p} | {mp:.3f} | {pct(mp / bp - 1)} | {signed(dq)} | {signed(dr)} | "
                  f"{signed(run)} | {mean(base, 'avg_restarts'):.2f} → "
                  f"{mean(mix, 'avg_restarts'):.2f} | {mean(mix, 'avg_mixed_gpu_h'):.3f} | "
                  f"{pct(min(per)).replace(' %', '')} … {pct(max(per))} |")
            head = "| | | | | | |"


if __name__ == "__main__":
    main()
