"""Edits a copy of ElasticFlow's simulator in place (docs/elasticflow.md, "The residue").

usage: ef_patch.py EF_DIR residue|log
  EF_DIR   the ElasticFlow/ folder of a copy of the repository (not the one the anchors use)
  residue  the fix: a job's progress is no longer cut off at its planned end before the
           overhead the simulator charged it. ElasticFlow's `JOBS.run_all_jobs`
           (scheduler/jobs.py) advances a running job over the interval since the last event
           by the interval, less the part after the job's planned end (`real_end_time`), less
           the overhead charged at the last event. The plan leaves that overhead out, so a job
           whose planned end falls inside the interval keeps about one overhead's worth of
           iterations; every later interval starts after its planned end, so it makes no more
           progress until its end event, and each re-plan in between puts its end after its
           deadline: admission declines every newcomer, and the job is counted as missed. With
           the fix the job runs until its planned end plus the overhead. Nothing changes for
           policies charged no overhead (EDF, Tiresias).
  log      prints, for every job `estimate_all_jobs` (the plan admission is decided on) finds
           late, a line `EFLOG t= job= ddl= prev_real_end= real_end= iter_left= iteration=`
           (prev_real_end: its planned end before this plan); `declines.py` reads them.
"""
import re
import sys


def patch(path, pattern, replace, what):
    with open(path) as f:
        text = f.read()
    if len(re.findall(pattern, text)) != 1:
        sys.exit(f"ef_patch.py: {path}: expected {what} once (already patched?)")
    with open(path, "w") as f:
        f.write(re.sub(pattern, replace, text))
    print(f"patched {path}: {what}")


ef, mode = sys.argv[1], sys.argv[2]
if mode == "residue":
    patch(
        f"{ef}/scheduler/jobs.py",
        r"if cur_time > job\['real_end_time'\]:\n(\s+)run_time -= \(cur_time - job\['real_end_time'\]\)",
        lambda m: "if cur_time > job['real_end_time'] + job.get('overhead', 0):\n"
        + m.group(1)
        + "run_time -= (cur_time - job['real_end_time'] - job.get('overhead', 0))",
        "the progress cut-off at the planned end",
    )
elif mode == "log":
    patch(
        f"{ef}/scheduler/scheduler.py",
        r"\n(\s+)if not ef_sim_allocation\(job, cur_time\):\n(\s+)result = False\n",
        lambda m: f"\n{m.group(1)}prev_real_end = job.get('real_end_time')\n"
        f"{m.group(1)}if not ef_sim_allocation(job, cur_time):\n"
        f"{m.group(2)}result = False\n"
        f"{m.group(2)}print('EFLOG t=%d job=%d ddl=%d prev_real_end=%s real_end=%s iter_left=%s "
        "iteration=%s' % (cur_time, job['job_idx'], job['ddl'], prev_real_end, "
        "job.get('real_end_time'), job['iter_left'], job['iteration']))\n",
        "estimate_all_jobs's plan loop",
    )
else:
    sys.exit(f"ef_patch.py: unknown mode '{mode}' (expected residue or log)")
