#!/usr/bin/env bash
# Before/after of the ddp engine's per-step cost (python/README.md, "Engines"):
# pacer_torch.overhead run alternately on the python/ tree of a base commit and on this
# checkout's, REPEATS times each, at 2 ranks pinned (one core each) and 4 ranks unpinned.
#   experiments/torch/ddp_cost_ab.sh BASE_COMMIT OUT_DIR [REPEATS]
# Needs the built extension in python/pacer_torch (_native*.so, copied to the base tree).
set -euo pipefail
base=${1:?base commit}; out=${2:?output directory}; repeats=${3:-3}
root=$(git rev-parse --show-toplevel)
py=${PACER_PYTHON:-/root/.cache/pacer/venv/bin/python}
torchrun=$(dirname "$py")/torchrun
so=$(ls "$root"/python/pacer_torch/_native*.so | head -1)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
git -C "$root" archive "$base" python/pacer_torch | tar -x -C "$tmp"
cp -L "$so" "$tmp/python/pacer_torch/"
mkdir -p "$out"
for i in $(seq 1 "$repeats"); do
  for tree in base head; do
    src=$tmp/python; [ "$tree" = head ] && src=$root/python
    for cfg in "2 --cores-per-rank 1" "4"; do
      set -- $cfg; n=$1; shift
      f=$out/$tree-n$n-$i.json
      # (From $tmp: the current directory must not shadow PYTHONPATH's pacer_torch.)
      (cd "$tmp" && OMP_NUM_THREADS=1 PYTHONPATH=$src nice -n 5 "$torchrun" \
        --nproc_per_node="$n" -m pacer_torch.overhead --rounds 4 --steps 40 "$@" \
        2>/dev/null | sed -n '/^{/,/^}/p' > "$f")
      echo "$tree n=$n repeat $i: $(uptime | sed 's/.*load/load/')"
    done
  done
done
