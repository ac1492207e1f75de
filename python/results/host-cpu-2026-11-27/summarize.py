"""Table of run.sh's output: CPU ms per step (median of each repeat's value; the
repeats' range), before and after, and pacer's runs against DDP in the same process."""
import json, re, statistics, sys
from collections import defaultdict

runs = ("ddp", "flat-uniform", "flat-lbbsp", "ddp-lbbsp")
got = defaultdict(list)
for line in open(sys.argv[1]):
    m = re.match(r"rep=(\d+) model=(\S+) world=(\d) pkg=(\S+) load=(\S+) (\{.*\})", line)
    if not m:
        continue
    d = json.loads(m.group(6))
    got[(m.group(2), int(m.group(3)), m.group(4))].append(d)
print("| model | world | run | before ms | after ms | before − DDP | after − DDP |")
print("| --- | --- | --- | --- | --- | --- | --- |")
for model in ("tiny", "cnn"):
    for w in (1, 4):
        for r in runs:
            cells = []
            for v in ("before", "after"):
                xs = [d[r]["cpu_ms_median"] for d in got[(model, w, v)]]
                cells.append(f"{statistics.median(xs):.3f} ({min(xs):.3f}–{max(xs):.3f})" if xs else "-")
            for v in ("before", "after"):
                ds = [d[r]["cpu_ms_median"] - d["ddp"]["cpu_ms_median"] for d in got[(model, w, v)]]
                cells.append(f"{statistics.median(ds):+.3f}" if ds else "-")
            n = len(got[(model, w, "before")])
            print(f"| {model} | {w} | {r} | " + " | ".join(cells) + f" |")
