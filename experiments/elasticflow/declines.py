"""Why ElasticFlow's admission declined each job: reads the stdout of a run of a copy of its
simulator patched with `ef_patch.py EF_DIR log` (docs/elasticflow.md, "The residue").

For each declined deadline job it prints the jobs the admission plan found late: the job
itself, another job of the same event (ElasticFlow declines one event's arrivals together),
or an admitted job. An admitted job is marked `residue` when its planned end from the plan
before had already passed (`prev_real_end` < t) while it still has iterations left.
usage: declines.py STDOUT_TXT
"""
import re
import sys

EFLOG = re.compile(
    r"EFLOG t=(\d+) job=(\d+) ddl=(\d+) prev_real_end=(\S+) real_end=(\S+) "
    r"iter_left=(\S+) iteration=(\S+)"
)
DECLINED = re.compile(r"job\[(\d+)\]'s DDL request cannot be satisfied")
block, in_block, declined_now, counts = [], False, set(), {}
events = []  # (declined job, late jobs of its plan)
with open(sys.argv[1]) as f:
    for line in f:
        m = EFLOG.match(line)
        if m:
            if not in_block:
                block, declined_now = [], set()
            in_block = True
            t, job, ddl, prev, real, left, iters = m.groups()
            block.append((int(t), int(job), int(ddl), prev, float(real), float(left), int(iters)))
            continue
        in_block = False
        m = DECLINED.search(line)
        if m:
            declined_now.add(int(m.group(1)))
            events.append((int(m.group(1)), block, declined_now))
for job, late, same_event in events:
    causes = []
    for t, j, ddl, prev, real, left, iters in late:
        if j == job:
            kind = "itself"
        elif j in same_event or any(e[0] == j and e[2] is same_event for e in events):
            kind = "same-event"
        elif prev != "None" and float(prev) < t:
            kind = "residue"
        else:
            kind = "admitted-late"
        causes.append(kind)
        print(f"t={t} declined job {job}: job {j} {kind}, deadline {ddl}, planned end {real:.0f} "
              f"(was {prev}), {left:.1f} of {iters} iterations left")
    top = "itself" if "itself" in causes else ("same-event" if "same-event" in causes else
                                                (causes[0] if causes else "none logged"))
    counts[top] = counts.get(top, 0) + 1
print("declined deadline jobs by cause:", dict(sorted(counts.items())))
