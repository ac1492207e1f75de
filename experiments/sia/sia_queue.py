#!/usr/bin/env python3
"""Who waits, and what the running jobs hold: Sia's log against pacer's dump (issue 25).

  python experiments/sia/sia_queue.py WORKLOAD.csv SIA_LOG PACER_DUMP... [--window T0 T1]

SIA_LOG: Sia's `multi_simulator.py --output` file; PACER_DUMP: stderr of a `sia` run with
`experiments/sia/sia_dump.patch` applied and `PACER_SIA_DUMP=1` (job indices are rows of
WORKLOAD.csv). Per run: job-rounds spent waiting (no devices), bert's ties (a bert job that
has never trained, holds a device and is not in a restart) and how many it kept,
deepspeech2's job-rounds on 2 dgx-ext devices and its dgx-ext 1 → 2 and 2 → 1 moves, and the
mean number of jobs running in rounds with a queue; with --window, job-rounds per
(application, type, devices) between T0 and T1 seconds. Standard library only.
"""

import csv
import json
import sys
from collections import Counter, defaultdict


def app_of(name):
    return name.rsplit("-", 1)[0]


def sia_rounds(path):
    """Yields (t, name, type or None, devices, untrained-tie flag unknown) per job-round."""
    for line in open(path):
        rec = json.loads(line)
        for j in rec["submitted_jobs"]:
            if j["completion_time"] is None:
                g = sum(j["placement"] or ())
                yield rec["timestamp"], j["name"], (j["allocation"][0] if g else None), g, None


def pacer_rounds(path, names):
    for line in open(path):
        if not line.startswith("DUMP"):
            continue
        head, rest = line.split(" opts=", 1)
        d = dict(kv.split("=", 1) for kv in head.split()[1:])
        ch = d["choice"]
        ty, g = (None, 0) if ch == "-" else (ch.split(":")[0], int(ch.split(":")[2]))
        opts = rest.split(" M")[0].strip()
        tie = d["fresh"] == "true" and d["cur"] == "true" and bool(opts)
        yield float(d["t"]), names[int(d["job"])], ty, g, (tie, ch == d["held"])


def summarise(label, rounds, window):
    wait = 0
    per_t = defaultdict(lambda: [0, 0])
    ties = kept = 0
    d2 = grow = shrink = 0
    last = {}
    sizes = Counter()
    for t, name, ty, g, tie in rounds:
        a = app_of(name)
        per_t[t][0 if g == 0 else 1] += 1
        wait += g == 0
        if tie is not None and a == "bert" and tie[0]:
            ties += 1
            kept += tie[1]
        if a == "deepspeech2":
            c = f"{ty}:{g}" if g else "-"
            d2 += c == "dgx-ext:2"
            p = last.get(name)
            grow += p == "dgx-ext:1" and c == "dgx-ext:2"
            shrink += p == "dgx-ext:2" and c == "dgx-ext:1"
            last[name] = c
        if window and window[0] <= t < window[1] and g:
            sizes[a, ty, g] += 1
    queued = [r for w, r in per_t.values() if w > 0]
    run = sum(queued) / max(len(queued), 1)
    tie_s = f"bert ties {ties}, kept {kept}, dropped {ties - kept}; " if ties else ""
    print(f"{label}: waiting job-rounds {wait}; {tie_s}deepspeech2 on dgx-ext:2 {d2} job-rounds, "
          f"dgx-ext 1→2 {grow}, 2→1 {shrink}; rounds with a queue {len(queued)}, "
          f"jobs running in them {run:.1f}")
    return sizes


def main():
    args = sys.argv[1:]
    window = None
    if "--window" in args:
        i = args.index("--window")
        window = (float(args[i + 1]), float(args[i + 2]))
        del args[i:i + 3]
    if len(args) < 3:
        sys.exit(__doc__)
    names = [r["name"] for r in csv.DictReader(open(args[0]))]
    tables = [("Sia", summarise("Sia", sia_rounds(args[1]), window))]
    for p in args[2:]:
        tables.append((p, summarise(p, pacer_rounds(p, names), window)))
    if window:
        keys = sorted(set().union(*(s for _, s in tables)), key=str)
        print("| application, type, devices | " + " | ".join(l for l, _ in tables) + " |")
        print("|---|" + "---|" * len(tables))
        for k in keys:
            print(f"| {k[0]} {k[1]}:{k[2]} | " + " | ".join(str(s[k]) for _, s in tables) + " |")


if __name__ == "__main__":
    main()
