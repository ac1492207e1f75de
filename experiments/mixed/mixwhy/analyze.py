#!/usr/bin/env python3
"""Tables of docs/mixed-types.md, "Why mixing loses online since MatchedBatch", from the
runs of run.sh (OUT, default /tmp/mixwhy).

Per run: mean avg JCT against `sia-pacer` under the same projection; per allocation a
job got (a DIAG line of diag.patch): held for how long, on how many devices, mixed or
one type, every type the job's own online fit (own) or some projected (proj), and the
policy's predicted step over the tables' step at the job's batch (pred/table; < 1: the
policy thought it faster than it runs). Weighted by device-seconds held, geometric.

    python3 experiments/mixed/mixwhy/analyze.py [OUT]
"""

import collections
import csv
import glob
import json
import math
import re
import sys

OUT = sys.argv[1] if len(sys.argv) > 1 else "/tmp/mixwhy"
POLICIES = ["sia-pacer-mix", "sia-pacer-mix-g1", "sia-pacer-mix-post"]
PROJ = {"M": "MatchedBatch", "S": "Sia"}
SETS = {"1-3": range(1, 4), "4-10": range(4, 11)}


def jct(tag):
    with open(f"{OUT}/json-{tag}.json") as f:
        return json.load(f)[0]["avg_jct_s"] / 3600


def jobs(tag):
    path = glob.glob(f"{OUT}/out-{tag}/*-jobs.csv")[0]
    with open(path) as f:
        return {r["name"]: r for r in csv.DictReader(f)}


def allocations(tag):
    """(job, app, held s, device-s, mixed, own, pred/table) per allocation change."""
    done = jobs(tag)
    events = collections.defaultdict(list)
    with open(f"{OUT}/diag-{tag}.txt") as f:
        for line in f:
            m = re.match(r"DIAG t=(\S+) job=(\S+) (.*)", line.strip())
            if m:
                events[m.group(2)].append((float(m.group(1)), m.group(3)))
    out = []
    for job, es in events.items():
        end = float(done[job]["completion_s"] or math.inf)
        for k, (t, d) in enumerate(es):
            r = re.search(r"pred/table=(\S+)", d)
            if not r:
                continue
            held = (es[k + 1][0] if k + 1 < len(es) else end) - t
            parts = d.split(" ")[0].split("+")
            devices = sum(int(p.split("x")[-1]) for p in parts)
            out.append(dict(job=f"{tag}/{job}", app=job.split("-")[0], held=held, gs=held * devices,
                            mixed=len(parts) > 1, own=all("*" in p for p in parts),
                            ratio=float(r.group(1))))
    return out


def geo(rows):
    w = sum(r["gs"] for r in rows)
    return math.exp(sum(r["gs"] * math.log(r["ratio"]) for r in rows) / w), w / 3600


for cluster in ["light", "frag"]:
    print(f"## {cluster}: mean avg JCT h, Δ against sia-pacer (same projection)")
    for proj, name in PROJ.items():
        for label, seeds in SETS.items():
            base = sum(jct(f"{cluster}{proj}sia-pacer-{s}") for s in seeds) / len(seeds)
            cells = []
            for p in POLICIES:
                v = sum(jct(f"{cluster}{proj}{p}-{s}") for s in seeds) / len(seeds)
                cells.append(f"{p} {v:.3f} ({(v / base - 1) * 100:+.1f} %)")
            print(f"{name:12s} {label:5s} sia-pacer {base:.3f}; " + "; ".join(cells))
    print(f"## {cluster} 4-10: mixes by application, pred/table, and JCT change")
    for proj, name in PROJ.items():
        for p in ["sia-pacer-mix", "sia-pacer-mix-g1"]:
            rows = [r for s in SETS["4-10"] for r in allocations(f"{cluster}{proj}{p}-{s}")]
            mixes = [r for r in rows if r["mixed"]]
            by = collections.defaultdict(list)
            for r in mixes:
                by[(r["app"], r["own"])].append(r)
            cells = []
            for (app, own), rs in sorted(by.items()):
                g, h = geo(rs)
                med = sorted(r["held"] for r in rs)[len(rs) // 2]
                cells.append(f"{app} {'own' if own else 'proj'}: {len(rs)} mixes, "
                             f"{h:.1f} GPU-h, pred/table {g:.3f}, median held {med:.0f} s")
            print(f"{name:12s} {p}: " + "; ".join(cells))
            for kind, mixed in (("mixes", True), ("one type", False)):
                for own in (True, False):
                    rs = [r for r in rows if r["mixed"] == mixed and r["own"] == own]
                    if rs:
                        g, h = geo(rs)
                        print(f"{'':12s}   {kind}, {'own' if own else 'proj'}: {len(rs)} "
                              f"allocations, {h:.1f} GPU-h, pred/table {g:.3f}")
            d = collections.defaultdict(lambda: [0, 0.0])
            for s in SETS["4-10"]:
                a, b = jobs(f"{cluster}{proj}sia-pacer-{s}"), jobs(f"{cluster}{proj}{p}-{s}")
                for n in a:
                    dj = (float(b[n]["jct_s"]) - float(a[n]["jct_s"])) / 3600
                    key = n.split("-")[0] if float(b[n]["mixed_gpu_s"]) > 0 else "never mixed"
                    d[key][0] += 1
                    d[key][1] += dj
            print(f"{'':12s}   summed JCT change: " + "; ".join(
                f"{k} ({v[0]} jobs) {v[1]:+.2f} h" for k, v in sorted(d.items())))
            per = collections.Counter(r["job"] for r in mixes if not r["own"])
            print(f"{'':12s}   mixes onto a type not run: {sum(per.values())} by "
                  f"{len(per)} jobs, {sum(1 for v in per.values() if v >= 2)} of them "
                  f"twice or more (at most {max(per.values(), default=0)})")

# The two projections' ratios for yolov3 from dgx-ext, from the raw one-device rows of
# Sia's tables (uncalibrated; the simulator's come from the models fitted to the
# calibrated rows), and the tables' sync on two nodes (one device each) at local batch 4.
DATA = "../shared/data/sia/traces"
print("## yolov3 from dgx-ext, raw one-device rows")
rows = {}
for t in ["aws", "dgx-ext", "rtx"]:
    with open(f"{DATA}/yolov3/placements-{t}.csv") as f:
        rows[t] = list(csv.DictReader(f))
one = {t: {float(r["local_bsz"]): float(r["step_time"]) for r in rs if r["placement"] == "1"}
       for t, rs in rows.items()}
sync = {t: next(float(r["sync_time"]) for r in rs
                if r["placement"] == "11" and float(r["local_bsz"]) == 4)
        for t, rs in rows.items()}
top = {t: max(v) for t, v in one.items()}
for t in ["aws", "rtx"]:
    sia = (top["dgx-ext"] / one["dgx-ext"][top["dgx-ext"]]) / (top[t] / one[t][top[t]])
    b = min(top["dgx-ext"], top[t])
    matched = one[t][b] / one["dgx-ext"][b]
    print(f"{t}: Sia's ratio {sia:.2f}, matched batch ({b:.0f}) {matched:.2f}; sync on 2 "
          f"nodes at batch 4 {sync[t]:.3f} s against dgx-ext's {sync['dgx-ext']:.3f} s "
          f"({sync[t] / sync['dgx-ext']:.1f}x)")
