#!/usr/bin/env python3
"""`sia-pacer` against Sia's simulator over jittered arrivals (issue 25).

Each workload with a Sia anchor (saturn 1-10, philly 1, 2, 3, 5, 7, and the bert-1, ds2-1,
mixed-1 mixes of `gen_mix.py`) runs as given (j0) and with every arrival moved by a
uniform offset in [-30 s, +30 s] (j1..j5, clamped at 0; experiments/mixed/jitter_noise.py's
jitter, the same versions of saturn and philly as there). Prints, per workload, Sia's avg
JCT (one anchor run each: ANCHORS.md, MIXES.md), `sia-pacer`'s avg JCT as given and its
mean, min and max over the six arrival versions, each as Δ against Sia; with --before
(a `pacer` build of the previous commit) the same for it and the paired difference
(after / before - 1, same arrivals), mean over the versions. Tuning set: saturn 1-5 and
bert-1; the other 12 are held out.

usage: jitter_pacer.py PACER SIA_DATA_DIR MIX_DIR [--before PACER] [--profiles online]
                       [--seeds 5] [--out OUT.txt]
  SIA_DATA_DIR: ../shared/data/sia (traces/, workloads/{saturn,philly}/)
  MIX_DIR: the output of experiments/sia/mixes.sh (bert-1.csv, ds2-1.csv, mixed-1.csv)
"""
import argparse, json, os, statistics, subprocess, sys, tempfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "mixed"))
from jitter_noise import JITTER_S, jittered  # noqa: E402  (the same arrival jitter)

CLUSTER = "6x4:aws,2x8:dgx-ext,3x8:rtx"
# (name, family: saturn, philly or mix, Sia's avg JCT h)
SIA = [("saturn-%d" % w, "saturn", a) for w, a in zip(range(1, 11), (
    0.581, 0.715, 0.742, 0.845, 0.664, 0.669, 0.584, 0.794, 1.017, 0.796))]
SIA += [("philly-%d" % w, "philly", a) for w, a in (
    (1, 0.542), (2, 0.747), (3, 0.575), (5, 0.667), (7, 0.841))]
SIA += [("bert-1", "mix", 0.656), ("ds2-1", "mix", 2.441), ("mixed-1", "mix", 1.489)]
TUNING = {"saturn-1", "saturn-2", "saturn-3", "saturn-4", "saturn-5", "bert-1"}


def versions(name, fam, data, mixes, seeds, tmp):
    """The workload as given, then jittered with seeds 1..`seeds` (saturn and philly as
    experiments/mixed/jitter_noise.py jitters them; the mixes seeded apart from them)."""
    src = source(name, fam, data, mixes)
    if fam == "mix":
        fam, w = name, 21 + [n for n, f, _ in SIA if f == "mix"].index(name)
    else:
        w = int(name.split("-")[1])
    return [src] + [jittered(src, fam, w, s, tmp) for s in range(1, seeds + 1)]


def source(name, fam, data, mixes):
    if fam == "mix":
        return os.path.join(mixes, name + ".csv")
    return os.path.join(data, "workloads", fam, "workload-%s.csv" % name.split("-")[1])


def avg_jct_h(pacer, data, workload, profiles):
    out = subprocess.run(
        [pacer, "simulate", "--apps", "sia:%s/traces" % data, "--workload", workload,
         "--cluster", CLUSTER, "--policy", "sia-pacer", "--profiles", profiles, "--json"],
        check=True, capture_output=True, text=True).stdout
    return json.loads(out)[0]["avg_jct_s"] / 3600.0


def pct(x):
    return "%+.1f %%" % (100.0 * x)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("pacer")
    ap.add_argument("data")
    ap.add_argument("mixes")
    ap.add_argument("--before")
    ap.add_argument("--profiles", default="online")
    ap.add_argument("--seeds", type=int, default=5)
    ap.add_argument("--out")
    a = ap.parse_args()
    for d, what in ((a.data, "traces"), (a.mixes, "bert-1.csv")):
        if not os.path.exists(os.path.join(d, what)):
            sys.exit("%s: no %s" % (d, what))
    lines = ["sia-pacer --profiles %s; arrivals as given (j0) and jittered by up to "
             "%.0f s (j1..j%d); avg JCT h, Δ against Sia's one anchor run" %
             (a.profiles, JITTER_S, a.seeds), ""]
    head = "| workload | set | Sia h | j0 h | Δ j0 | mean h | Δ mean | Δ min … max |"
    if a.before:
        head += " before: Δ j0 | Δ mean | Δ min … max | paired after/before |"
    lines += [head, "|" + "---|" * (head.count("|") - 1)]
    summary = {"tuning": [], "held out": []}
    with tempfile.TemporaryDirectory() as tmp:
        for name, fam, sia in SIA:
            files = versions(name, fam, a.data, a.mixes, a.seeds, tmp)
            new = [avg_jct_h(a.pacer, a.data, f, a.profiles) for f in files]
            d = [v / sia - 1 for v in new]
            row = "| %s | %s | %.3f | %.3f | %s | %.3f | %s | %s … %s |" % (
                name, "tuning" if name in TUNING else "held out", sia, new[0], pct(d[0]),
                statistics.mean(new), pct(statistics.mean(d)), pct(min(d)), pct(max(d)))
            rec = {"d0": d[0], "dmean": statistics.mean(d), "above": sum(x > 0 for x in d)}
            if a.before:
                old = [avg_jct_h(a.before, a.data, f, a.profiles) for f in files]
                do = [v / sia - 1 for v in old]
                paired = [n / o - 1 for n, o in zip(new, old)]
                row += " %s | %s | %s … %s | %s |" % (
                    pct(do[0]), pct(statistics.mean(do)), pct(min(do)), pct(max(do)),
                    pct(statistics.mean(paired)))
                rec.update(b0=do[0], bmean=statistics.mean(do), babove=sum(x > 0 for x in do),
                           paired=statistics.mean(paired))
            lines.append(row)
            print(row, file=sys.stderr)
            summary["tuning" if name in TUNING else "held out"].append(rec)
    lines.append("")
    for key in ("tuning", "held out"):
        r = summary[key]
        s = "%s (%d): Δ j0 mean %s, ≤ Sia %d; Δ over versions mean %s, versions above Sia %d of %d" % (
            key, len(r), pct(statistics.mean(x["d0"] for x in r)), sum(x["d0"] <= 0 for x in r),
            pct(statistics.mean(x["dmean"] for x in r)), sum(x["above"] for x in r),
            len(r) * (a.seeds + 1))
        if a.before:
            s += "; before: Δ j0 mean %s, ≤ Sia %d, over versions mean %s, above Sia %d; paired %s" % (
                pct(statistics.mean(x["b0"] for x in r)), sum(x["b0"] <= 0 for x in r),
                pct(statistics.mean(x["bmean"] for x in r)), sum(x["babove"] for x in r),
                pct(statistics.mean(x["paired"] for x in r)))
        lines.append(s)
    text = "\n".join(lines) + "\n"
    sys.stdout.write(text)
    if a.out:
        open(a.out, "w").write(text)


if __name__ == "__main__":
    main()
