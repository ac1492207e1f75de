"""One trace of both ElasticFlow figures, for a cluster of A100s and T4s together.

Figure 8(a)'s 195 jobs (T4 models, elasticVpollux_e.csv) shifted to start at t = 0 and
Figure 10's 100 jobs (A100 models, 100jobs_1500lam.csv, from t = 0), merged by submit
time and renumbered; deadlines shifted with their jobs; 8(a)'s rows get best_effort = 0.
ElasticFlow's A100 and T4 tables share no (model, global batch) pair, so each job can
run on one type only: the mixed cluster is two clusters under one policy.
usage: mixed_trace.py OUT_CSV   (run from the repository root)
"""
import csv
import sys

T = "data/elasticflow/traces"
with open(f"{T}/elasticVpollux_e.csv") as f:
    fig8a = list(csv.DictReader(f))
with open(f"{T}/100jobs_1500lam.csv") as f:
    fig10 = list(csv.DictReader(f))
t0 = min(int(r["submit_time"]) for r in fig8a)
rows = []
for r, shift, be in [(r, t0, None) for r in fig8a] + [(r, 0, "be") for r in fig10]:
    rows.append([
        int(r["submit_time"]) - shift, r["iteration"], r["model_name"],
        int(r["ddl"]) - shift, r["batch_size"], r["num_gpu"], r["duration"],
        r["best_effort"] if be else 0,
    ])
rows.sort(key=lambda x: x[0])
with open(sys.argv[1], "w", newline="") as f:
    w = csv.writer(f)
    w.writerow(["job_id", "submit_time", "iteration", "model_name", "ddl", "batch_size",
                "num_gpu", "duration", "best_effort"])
    for i, r in enumerate(rows):
        w.writerow([i] + r)
