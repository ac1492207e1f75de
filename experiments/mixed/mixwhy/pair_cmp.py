#!/usr/bin/env python3
"""Mean avg JCT per set, and its change against sia-pacer, from pair_run.sh outputs. usage: pair_cmp.py OLDDIR NEWDIR [REFDIR]"""
import json, sys, os
def jct(d, c, p, s):
    return json.load(open(f"{d}/json-{c}-{p}-{s}.json"))[0]["avg_jct_s"] / 3600
SETS = {"1-3": range(1, 4), "4-10": range(4, 11)}
POLS = ["sia-pacer-mix", "sia-pacer-mix-g1", "sia-pacer-mix-post"]
dirs = sys.argv[1:]
ref = dirs[-1] if len(dirs) > 2 else dirs[0]
for c in ["light", "frag"]:
    for lab, seeds in SETS.items():
        base = sum(jct(ref, c, "sia-pacer", s) for s in seeds) / len(seeds)
        row = [f"{c} {lab} sia-pacer {base:.3f}"]
        for d in dirs[:2]:
            cells = []
            for p in POLS:
                v = sum(jct(d, c, p, s) for s in seeds) / len(seeds)
                cells.append(f"{p[9:] or 'mix'} {v:.3f} ({(v/base-1)*100:+.1f} %)")
            row.append(os.path.basename(d) + ": " + ", ".join(cells))
        print(" | ".join(row))
