#!/usr/bin/env bash
# Reproduces every number of experiments/runtime/RESULTS.md (issue 4) on MNIST.
# Usage: experiments/runtime/scripts/measure.sh [MNIST_DIR] [OUT_DIR]
# Runs in release mode through the `pacer` binary (`pacer train`).
set -euo pipefail
cd "$(dirname "$0")/../../.."
MNIST=${1:-../shared/data/mnist}
OUT=${2:-experiments/runtime/results}
mkdir -p "$OUT"
cargo build --release -q -p pacer-cli
RT=target/release/pacer
HET="--dataset mnist:$MNIST --workers 4 --speeds 1,1,0.5,0.25 --global-batch 512 --no-progress --json"

run() { # name, args...
  local name=$1; shift
  echo "== $name: $*" >&2
  "$RT" train "$@" > "$OUT/$name.json"
}

# 1. Accuracy of every model (homogeneous workers, LB-BSP).
run acc_mlp    --dataset mnist:$MNIST --model mlp    --workers 4 --target-accuracy 0.97 --no-progress --json
run acc_logreg --dataset mnist:$MNIST --model logreg --workers 4 --target-accuracy 0.91 --no-progress --json
run acc_svm    --dataset mnist:$MNIST --model svm    --workers 4 --max-iterations 600 --no-progress --json
run acc_kmeans --dataset mnist:$MNIST --model kmeans --clusters 10 --workers 4 --max-iterations 300 --no-progress --json

# 2. Heterogeneous workers, MLP, B = 512: time to 97 % per controller, two seeds,
#    at time scale 3 (fits a shared 2-core machine) and 8 (compute-dominated).
for ts in 3 8; do
  for seed in 1 2; do
    for c in uniform lbbsp pid; do
      run "het_ts${ts}_${c}_s${seed}" $HET --model mlp --time-scale $ts --controller $c --predictor ewma \
        --target-accuracy 0.97 --seed $seed
    done
  done
done

# 3. With interference: every controller × predictor.
for c in uniform lbbsp pid; do
  for p in last ewma ets narx; do
    run "intf_${c}_${p}" $HET --model mlp --time-scale 3 --controller $c --predictor $p \
      --interference crates/runtime/scenarios/interference4.json --target-accuracy 0.97
  done
done

# 4. Overhead against the amount of compute per iteration (global batch, time scale).
for b in 512 2048 8192; do
  for ts in 1 3; do
    "$RT" train --dataset mnist:$MNIST --workers 4 --speeds 1,1,0.5,0.25 --global-batch $b --no-progress --json \
      --model mlp --time-scale $ts --controller lbbsp --max-iterations 150 --eval-every 1000 > "$OUT/ovh_b${b}_ts${ts}.json"
  done
done

# 5. Elasticity: kill worker 3 when it receives iteration 200, add a worker after 400.
run elastic $HET --model mlp --time-scale 3 --controller lbbsp --predictor ewma \
  --kill 3@200 --join 400:1 --target-accuracy 0.97 --verbose
echo "done: $OUT" >&2
