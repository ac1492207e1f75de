"""Summarises jitter_run.sh's results.tsv (docs/elasticflow.md, "Cluster 01 over jittered
arrivals"): per trace and MAX_S, both simulators' planned ratio per seed, their means and
sample standard deviations, pacer's mean against ElasticFlow's in %, how many single pairs
(pacer against ElasticFlow on the same seed) are outside +-5 %, and the strict means.
usage: jitter_sum.py RESULTS_TSV
"""
import csv
import statistics
import sys


def off(p, e):
    return (p / e - 1) * 100


def sd(xs):
    return statistics.stdev(xs) if len(xs) > 1 else 0.0


def main(argv):
    if len(argv) != 2:
        sys.exit("usage: jitter_sum.py RESULTS_TSV")
    with open(argv[1], newline="") as f:
        rows = list(csv.DictReader(f, delimiter="\t"))
    need = ["trace", "max_s", "seed", "ef_planned", "ef_strict", "pacer_planned", "pacer_strict"]
    if not rows or any(k not in rows[0] for k in need):
        sys.exit(f"jitter_sum.py: {argv[1]}: expected the columns {','.join(need)}")
    groups = {}
    for r in rows:
        groups.setdefault((r["trace"], r["max_s"]), []).append(r)
    for (trace, max_s), rs in groups.items():
        ef = [float(r["ef_planned"]) for r in rs]
        pa = [float(r["pacer_planned"]) for r in rs]
        seeds = " ".join(r["seed"] for r in rs)
        print(f"{trace} max_s={max_s} seeds={seeds}")
        print("  EF planned    " + " ".join(f"{x:.3f}" for x in ef)
              + f"  mean {statistics.mean(ef):.3f} sd {sd(ef):.3f}")
        print("  pacer planned " + " ".join(f"{x:.3f}" for x in pa)
              + f"  mean {statistics.mean(pa):.3f} sd {sd(pa):.3f}")
        pairs = [off(p, e) for p, e in zip(pa, ef)]
        out = sum(abs(x) > 5 for x in pairs)
        print("  pair off %    " + " ".join(f"{x:+.1f}" for x in pairs)
              + f"  outside +-5 %: {out} of {len(pairs)}")
        print(f"  means: pacer {off(statistics.mean(pa), statistics.mean(ef)):+.1f} % against EF")
        es = [float(r["ef_strict"]) for r in rs]
        ps = [float(r["pacer_strict"]) for r in rs]
        print(f"  strict means: EF {statistics.mean(es):.3f} (sd {sd(es):.3f}), "
              f"pacer {statistics.mean(ps):.3f} (sd {sd(ps):.3f})")
        if "ef_cpu_s" in rs[0]:
            ec = [float(r["ef_cpu_s"]) for r in rs]
            pc = [float(r["pacer_cpu_s"]) for r in rs]
            print(f"  CPU s: EF {min(ec):.1f}-{max(ec):.1f}, pacer {min(pc):.2f}-{max(pc):.2f}")


if __name__ == "__main__":
    main(sys.argv)
