"""Jitters the arrivals of one trace in ElasticFlow's format (docs/elasticflow.md,
"Cluster 01 over jittered arrivals"): a nearly identical trace, to measure how far one run of
a simulator is one draw.

usage: jitter_trace.py IN_CSV OUT_CSV SEED MAX_S
  Every job's submit time (`submit_time`, or `submission_time`) is moved by a uniform integer
  in [-MAX_S, +MAX_S] drawn from Python's `random.Random(SEED)`, one draw per row in file
  order, and kept at 0 or above; its deadline (`ddl`, or `deadline`: absolute times in these
  traces) moves by the same amount, so each job's window is unchanged. The rows are then
  sorted by the new submit time (stable: equal times keep their order). Every other column,
  and every value's spelling, is kept. Same seed, same output.
"""
import csv
import random
import sys


def column(header, names, src):
    for n in names:
        if n in header:
            return n
    sys.exit(f"jitter_trace.py: {src}: no column {' or '.join(names)}")


def as_int(value, col, line, src):
    try:
        return int(value)
    except ValueError:
        sys.exit(f"jitter_trace.py: {src}:{line}: {col} = {value!r} is not an integer")


def main(argv):
    if len(argv) != 5:
        sys.exit("usage: jitter_trace.py IN_CSV OUT_CSV SEED MAX_S")
    src, dst = argv[1], argv[2]
    try:
        seed, max_s = int(argv[3]), int(argv[4])
    except ValueError:
        sys.exit(f"jitter_trace.py: SEED and MAX_S must be integers, got {argv[3]!r} {argv[4]!r}")
    if max_s < 0:
        sys.exit(f"jitter_trace.py: MAX_S must be 0 or more, got {max_s}")
    with open(src, newline="") as f:
        reader = csv.reader(f)
        header = next(reader, None)
        if header is None:
            sys.exit(f"jitter_trace.py: {src}: empty file")
        rows = list(reader)
    sub = header.index(column(header, ["submit_time", "submission_time"], src))
    ddl = header.index(column(header, ["ddl", "deadline"], src))
    rng = random.Random(seed)
    moved = []
    for line, row in enumerate(rows, start=2):
        if len(row) != len(header):
            sys.exit(f"jitter_trace.py: {src}:{line}: {len(row)} fields, header has {len(header)}")
        t = as_int(row[sub], header[sub], line, src)
        d = as_int(row[ddl], header[ddl], line, src)
        new_t = max(0, t + rng.randint(-max_s, max_s))
        row = list(row)
        row[sub], row[ddl] = str(new_t), str(d + new_t - t)
        moved.append((new_t, row))
    moved.sort(key=lambda m: m[0])
    with open(dst, "w", newline="") as f:
        w = csv.writer(f, lineterminator="\n")
        w.writerow(header)
        w.writerows(row for _, row in moved)
    print(f"{dst}: {len(moved)} jobs, seed {seed}, max shift {max_s} s")


if __name__ == "__main__":
    main(sys.argv)
