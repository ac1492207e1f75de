#!/usr/bin/env python3
"""Who takes a dgx-ext device that a finishing job leaves (issue 25, MIXES.md).

  python experiments/sia/dgx_freed.py --sia SIA_LOG
  python experiments/sia/dgx_freed.py --pacer DUMP WORKLOAD_CSV

For every round right after a job holding dgx-ext devices finished, counts the jobs
that gain dgx-ext devices in that round, by application and kind: grown on dgx-ext,
moved from another type (with the configuration it left), or new.

SIA_LOG: the `--output` file of Sia's `multi_simulator.py` (its `allocation` is the
round's decision). DUMP: the stderr of a pacer build with the temporary per-round
dump of MIXES.md ("Same inputs, same values"): one line per trained job and round,
`DUMP t=T job=J held=TYPE:NODES:GPUS|- choice=TYPE:NODES:GPUS|- ...`; jobs that have
not trained (`fresh=true`) are left out. Standard library only.
"""

import json
import re
import sys
from collections import Counter, defaultdict


def sia(path):
    prev, done_prev, who, n = {}, set(), Counter(), 0
    with open(path) as f:
        for line in f:
            r = json.loads(line)
            cur, done = {}, set()
            for j in r["submitted_jobs"]:
                if j["completion_time"] is not None:
                    done.add(j["name"])
                a = j["allocation"]
                if a:
                    cur[j["name"]] = (a[0], len(a[1]))
            if any(prev.get(k, ("",))[0] == "dgx-ext" for k in done - done_prev):
                n += 1
                for k, v in cur.items():
                    count(who, k, prev.get(k), v)
            prev, done_prev = cur, done
    return n, who


def pacer(path, workload):
    with open(workload) as f:
        names = [l.split(",")[0] for l in f.readlines()[1:]]
    rounds = defaultdict(dict)
    pat = re.compile(r"DUMP t=(\S+) job=(\d+) held=(\S+) choice=(\S+)")
    with open(path) as f:
        for line in f:
            m = pat.match(line)
            if m and " fresh=true" not in line:
                rounds[float(m.group(1))][names[int(m.group(2))]] = (
                    cfg(m.group(3)),
                    cfg(m.group(4)),
                )
    prev, who, n = {}, Counter(), 0
    for t in sorted(rounds):
        if any(v and v[0] == "dgx-ext" and k not in rounds[t] for k, v in prev.items()):
            n += 1
            for k, (h, c) in rounds[t].items():
                count(who, k, h, c)
        prev = {k: c for k, (_, c) in rounds[t].items()}
    return n, who


def cfg(s):
    if s == "-":
        return None
    ty, _, gpus = s.split(":")
    return (ty, int(gpus))


def count(who, name, before, after):
    if not after or after[0] != "dgx-ext":
        return
    if before is None:
        kind = "new"
    elif before[0] == "dgx-ext":
        if before[1] >= after[1]:
            return
        kind = "grow"
    else:
        kind = "move from %s:%d" % before
    who[(name.split("-")[0], kind, after[1])] += 1


def main():
    if len(sys.argv) == 3 and sys.argv[1] == "--sia":
        n, who = sia(sys.argv[2])
    elif len(sys.argv) == 4 and sys.argv[1] == "--pacer":
        n, who = pacer(sys.argv[2], sys.argv[3])
    else:
        sys.exit(__doc__)
    print(f"{n} rounds right after a dgx-ext job finished")
    for (app, kind, gpus), v in sorted(who.items(), key=lambda x: (-x[1], x[0])):
        print(f"  {app:12s} {kind:18s} to dgx-ext:{gpus:<3d} {v}")


if __name__ == "__main__":
    main()
