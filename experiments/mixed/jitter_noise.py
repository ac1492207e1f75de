#!/usr/bin/env python3
"""How much a workload's average JCT moves when its arrivals move by up to half a round.

Each workload of Sia's saturn 1-5 and philly 1-8 sets is run as given (j0) and with every
arrival shifted by a uniform offset in [-30 s, +30 s] (seeds j1..j5, clamped at 0), under
`sia-pacer` and `sia-pacer-mix` (`--mixed-types`), fitted and online. The spread of
`sia-pacer` over the six arrival versions is the re-planning noise band that a mixing gain
must clear; the paired difference (mix - no mix, same arrivals) is the gain itself.

usage: jitter_noise.py PACER SIA_DATA_DIR [--out OUT.txt]
  (SIA_DATA_DIR = ../shared/data/sia: traces/ and workloads/{saturn,philly}/)
"""
import argparse, csv, os, random, statistics, subprocess, sys, tempfile

WORKLOADS = [("saturn", w) for w in range(1, 6)] + [("philly", w) for w in range(1, 9)]
SEEDS = range(1, 6)
JITTER_S = 30.0
CLUSTER = "6x4:aws,2x8:dgx-ext,3x8:rtx"


def jittered(src, fam, w, seed, out_dir):
    rows = list(csv.DictReader(open(src)))
    rng = random.Random(1000 * seed + w + (0 if fam == "saturn" else 100))
    out = []
    for r in rows:
        r = dict(r)
        r["time"] = "%.1f" % max(0.0, float(r["time"]) + rng.uniform(-JITTER_S, JITTER_S))
        out.append(r)
    out.sort(key=lambda r: float(r["time"]))
    path = os.path.join(out_dir, f"{fam}-{w}-j{seed}.csv")
    with open(path, "w", newline="") as f:
        wr = csv.DictWriter(f, fieldnames=list(rows[0].keys()))
        wr.writeheader()
        wr.writerows(out)
    return path


def run(pacer, data, workload, profiles):
    out = subprocess.run(
        [pacer, "simulate", "--apps", f"sia:{data}/traces", "--workload", workload,
         "--cluster", CLUSTER, "--policy", "sia-pacer,sia-pacer-mix", "--mixed-types",
         "--profiles", profiles],
        check=True, capture_output=True, text=True).stdout
    got = {}
    for line in out.splitlines():
        f = line.split()
        if len(f) > 3 and f[1] in ("sia-pacer", "sia-pacer-mix"):
            got[f[1]] = float(f[3])
    return got["sia-pacer"], got["sia-pacer-mix"]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("pacer")
    ap.add_argument("data")
    ap.add_argument("--out")
    a = ap.parse_args()
    if not os.path.isdir(os.path.join(a.data, "workloads")):
        sys.exit(f"{a.data}: no workloads/ (Sia's data, ../shared/data/sia)")
    lines = []
    with tempfile.TemporaryDirectory() as tmp:
        for profiles in ("fitted", "online"):
            lines.append(f"## {profiles}")
            lines.append("workload  sia-pacer j0..j5 (h)  spread %  mix-minus-none j0..j5 (%)  mean %")
            all_d, spreads = [], []
            for fam, w in WORKLOADS:
                src = os.path.join(a.data, "workloads", fam, f"workload-{w}.csv")
                versions = [src] + [jittered(src, fam, w, s, tmp) for s in SEEDS]
                base, delta = [], []
                for v in versions:
                    b, m = run(a.pacer, a.data, v, profiles)
                    base.append(b)
                    delta.append(100.0 * (m / b - 1.0))
                spread = 100.0 * (max(base) - min(base)) / statistics.mean(base)
                spreads.append(spread)
                all_d += delta
                lines.append(
                    f"{fam}-{w}  {' '.join('%.3f' % x for x in base)}  {spread:.1f}  "
                    f"{' '.join('%+.1f' % x for x in delta)}  {statistics.mean(delta):+.2f}")
                print(lines[-1], flush=True)
            lines.append(
                f"over all: sia-pacer spread median {statistics.median(spreads):.1f} % "
                f"(max {max(spreads):.1f}); mix - none: mean {statistics.mean(all_d):+.2f} %, "
                f"sd {statistics.stdev(all_d):.2f}, n {len(all_d)}, "
                f"range {min(all_d):+.1f} .. {max(all_d):+.1f}")
            print(lines[-1], flush=True)
    if a.out:
        open(a.out, "w").write("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
