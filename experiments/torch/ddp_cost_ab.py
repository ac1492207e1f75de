"""Table of ``ddp_cost_ab.sh``'s runs: per tree and world size, each repeat's
``pacer-ddp`` paired overhead against DDP and CPU ms per step (``pacer-ddp`` and DDP),
then the median over the repeats.

    python experiments/torch/ddp_cost_ab.py OUT_DIR
"""

import glob
import json
import os
import statistics
import sys


def main() -> None:
    rows = {}
    for f in sorted(glob.glob(os.path.join(sys.argv[1], "*.json"))):
        tree, n, _ = os.path.basename(f)[:-5].split("-")
        with open(f) as fh:
            d = json.load(fh)
        rows.setdefault((tree, n), []).append((
            100 * d["pacer-ddp_overhead_paired"], 100 * d["pacer_overhead_paired"],
            d["ddp"]["cpu_ms_per_step"], d["pacer-ddp"]["cpu_ms_per_step"],
            d["pacer-ddp"]["cpu_ms_per_step"] - d["ddp"]["cpu_ms_per_step"],
        ))
    print("tree ranks | ddp engine paired % (each) | median | flat lbbsp paired % median"
          " | DDP cpu ms | ddp engine cpu ms | engine - DDP cpu ms (each) | median")
    for (tree, n), rs in sorted(rows.items(), key=lambda kv: (kv[0][1], kv[0][0])):
        med = [statistics.median(r[i] for r in rs) for i in range(5)]
        print(f"{tree} {n} | {' '.join(f'{r[0]:+.1f}' for r in rs)} | {med[0]:+.1f} | "
              f"{med[1]:+.1f} | {med[2]:.2f} | {med[3]:.2f} | "
              f"{' '.join(f'{r[4]:+.2f}' for r in rs)} | {med[4]:+.2f}")


if __name__ == "__main__":
    main()
