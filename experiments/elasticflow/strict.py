"""Deadline satisfactory ratios of one ElasticFlow simulator run (see ANCHORS.md).

planned: ElasticFlow's own count (final_result.csv: jobs whose planned finish, restart
overheads left out, is within the deadline). strict: jobs whose logged completion (job.csv
`time`, the completion event with the overheads the simulator charged) is <= ddl, over all
deadline jobs of the trace. Best-effort JCT: mean JCT of the trace's best_effort=1 jobs.
usage: strict.py RUN_DIR TRACE_CSV
"""
import csv
import sys

run, trace = sys.argv[1], sys.argv[2]
with open(trace) as f:
    rows = list(csv.DictReader(f))
be = {r["job_id"] for r in rows if r.get("best_effort", "0").strip() == "1"}
n_ddl = len(rows) - len(be)
met, be_jct = 0, []
with open(f"{run}/job.csv") as f:
    for r in csv.DictReader(f):
        if r["job_id"] in be:
            be_jct.append(float(r["time"]) - float(r["submit_time"]))
        elif float(r["time"]) <= float(r["ddl"]):
            met += 1
with open(f"{run}/final_result.csv") as f:
    planned = float(list(csv.DictReader(f))[-1]["ddl_satis_ratio"])
with open(f"{run}/time.txt") as f:
    u, s, _ = f.read().split()
jct = f"{sum(be_jct) / len(be_jct):.0f}" if be_jct else "-"
print(f"planned={planned:.3f} strict={met / n_ddl:.3f} be_jct_s={jct} cpu_s={float(u) + float(s):.2f}")
