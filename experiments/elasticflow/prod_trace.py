"""Converts one production trace of ElasticFlow's Figure 8(b) (microsoft/elasticflow-traces,
MIT licence: `data/elasticflow-traces.tar.gz`, `clusterNN.csv`) into the trace format both
simulators read (docs/elasticflow.md, "Held-out: production traces").

usage: prod_trace.py IN_CSV OUT_CSV [FIRST_N]
  The columns are renamed (submission_time -> submit_time, num_iteration -> iteration,
  deadline -> ddl; ElasticFlow's simulator reads both spellings), submit times and
  deadlines are shifted by the first submit time so the trace starts at 0 (both simulators
  only see differences; pacer would otherwise step through the idle rounds before it), and
  only the first FIRST_N jobs in submit order are kept when FIRST_N is given.
"""
import csv
import sys

if len(sys.argv) not in (3, 4):
    sys.exit("usage: prod_trace.py IN_CSV OUT_CSV [FIRST_N]")
src, dst = sys.argv[1], sys.argv[2]
first_n = int(sys.argv[3]) if len(sys.argv) == 4 else None
with open(src) as f:
    rows = list(csv.DictReader(f))
need = ["job_id", "submission_time", "num_iteration", "model_name", "deadline",
        "batch_size", "num_gpu", "duration"]
if not rows or any(k not in rows[0] for k in need):
    sys.exit(f"prod_trace.py: {src}: expected the columns {','.join(need)}")
rows.sort(key=lambda r: int(r["submission_time"]))
if first_n is not None:
    rows = rows[:first_n]
t0 = int(rows[0]["submission_time"])
with open(dst, "w", newline="") as f:
    w = csv.writer(f, lineterminator="\n")
    w.writerow(["job_id", "submit_time", "iteration", "model_name", "ddl", "batch_size",
                "num_gpu", "duration"])
    for r in rows:
        w.writerow([r["job_id"], int(r["submission_time"]) - t0, r["num_iteration"],
                    r["model_name"], int(r["deadline"]) - t0, r["batch_size"], r["num_gpu"],
                    r["duration"]])
print(f"{dst}: {len(rows)} jobs, span {int(rows[-1]['submission_time']) - t0} s")
