"""Upper bounds on the deadline satisfactory ratio of an ElasticFlow trace, for any policy
(docs/elasticflow.md, "Held-out: production traces").

Each deadline job is checked alone on the empty cluster from its submit time: `loose` when
its iterations at its fastest measured size (ElasticFlow's throughput table for its model
and global batch, sizes up to min(batch, 64, cluster GPUs), the sizes both simulators allow)
fit before its deadline; `strict` when they fit after one ElasticFlow restart overhead at
that size too (`utils.estimate_overhead` without cache: 2 s, 7 s from 256 GPUs, plus 2 s
per doubling counting the first GPU). A job that fails the check misses under every policy,
so the share that passes bounds every ratio: `loose` the planned ones (no overhead),
`strict` the strict ones (every job pays at least its first start).

usage: bound.py TRACE_CSV TABLES_DIR GPU_TYPE CLUSTER_GPUS [PACER_JOBS_CSV]
  TABLES_DIR  holds throughputs_<GPU_TYPE>/<model>.csv (data/elasticflow)
  PACER_JOBS_CSV  a `pacer simulate --out` per-job CSV of the same trace: also lists the
              jobs within the strict bound that the run did not finish by their deadline
"""
import csv
import math
import sys

if len(sys.argv) not in (5, 6):
    sys.exit("usage: bound.py TRACE_CSV TABLES_DIR GPU_TYPE CLUSTER_GPUS [PACER_JOBS_CSV]")
trace, tables, gpu, cluster = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
cache = {}


def table(model):
    if model not in cache:
        with open(f"{tables}/throughputs_{gpu}/{model}.csv") as f:
            rows = list(csv.reader(f))
        sizes = [int(x) for x in rows[0][1:]]
        cache[model] = {
            int(r[0]): {g: float(v) for g, v in zip(sizes, r[1:]) if v.strip()} for r in rows[1:]
        }
    return cache[model]


def overhead(gpus):
    return (7 if cluster >= 256 else 2) + (math.log2(max(gpus, 1)) + 1) * 2


with open(trace) as f:
    jobs = [r for r in csv.DictReader(f) if r.get("best_effort", "0").strip() != "1"]
if not jobs:
    sys.exit(f"bound.py: {trace}: no deadline jobs")
ran = {}
if len(sys.argv) == 6:
    with open(sys.argv[5]) as f:
        ran = {r["name"]: r for r in csv.DictReader(f)}
loose = strict = 0
missed = []
for r in jobs:
    batch, iters = int(r["batch_size"]), int(r["iteration"])
    window = float(r["ddl"]) - float(r["submit_time"])
    sizes = {g: v for g, v in table(r["model_name"])[batch].items() if g <= min(batch, 64, cluster)}
    loose += iters / max(sizes.values()) <= window
    best = min((iters / v + overhead(g), g) for g, v in sizes.items())
    if best[0] > window:
        continue
    strict += 1
    if ran:
        q = ran[f"job-{r['job_id']}"]
        done = q["completion_s"]
        if not done or float(done) - float(q["arrival_s"]) > window:
            missed.append(f"  job {r['job_id']}: window {window:.0f} s, alone {best[0]:.0f} s "
                          f"at {best[1]} GPUs; run: {'declined' if not done else 'late'}, "
                          f"restarts {q['restarts']}")
n = len(jobs)
print(f"{trace}: {n} deadline jobs; bound without overheads {loose} ({loose / n:.3f}), "
      f"with one restart {strict} ({strict / n:.3f})")
if ran:
    print(f"within the strict bound but missed by the run: {len(missed)}")
    print("\n".join(missed))
