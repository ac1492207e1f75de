#!/usr/bin/env bash
# noise_scale="auto" against noise_scale=True (issue 24; python/README.md, "The noise
# scale's norms"): experiments/torch/ddp_cost.py and pacer_torch.overhead --with-norms at
# 2 ranks pinned one core each, REPEATS times each, alternately; every variant and run
# inside one command takes turns round by round. From the repository root:
#   python/results/noise-scale-auto-2026-11-27/run.sh OUT_DIR [REPEATS]
set -euo pipefail
out=${1:?output directory}; repeats=${2:-2}
root=$(git rev-parse --show-toplevel)
py=${PACER_PYTHON:-/root/.cache/pacer/venv/bin/python}
torchrun=$(dirname "$py")/torchrun
mkdir -p "$out"
cd "$root"
for i in $(seq 1 "$repeats"); do
  echo "ddp_cost $i: $(uptime | sed 's/.*load/load/')"
  OMP_NUM_THREADS=1 PYTHONPATH=python nice -n 5 "$torchrun" --nproc_per_node=2 \
    experiments/torch/ddp_cost.py --rounds 4 --steps 50 --cores-per-rank 1 \
    2>/dev/null | sed -n '/^{/,/^}/p' > "$out/ddp_cost-$i.json"
  echo "overhead $i: $(uptime | sed 's/.*load/load/')"
  OMP_NUM_THREADS=1 PYTHONPATH=python nice -n 5 "$torchrun" --nproc_per_node=2 \
    -m pacer_torch.overhead --rounds 6 --steps 40 --cores-per-rank 1 --with-norms \
    2>/dev/null | sed -n '/^{/,/^}/p' > "$out/overhead-$i.json"
done
echo "end: $(uptime | sed 's/.*load/load/')"
