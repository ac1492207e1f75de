#!/usr/bin/env bash
# Controller and workers as separate processes on different loopback addresses
# (127.0.0.10 for the controller, 127.0.0.11.. for the workers): what `pacer
# controller` / `pacer worker` do across hosts. One worker is killed with SIGKILL
# mid-training and a new one joins later; training must still reach the target.
# Usage: crates/runtime/scripts/multihost.sh [DATASET] [TARGET]   (default: MNIST, 0.97)
#   e.g. multihost.sh mnist:/data/mnist 0.97
set -euo pipefail
cd "$(dirname "$0")/../../.."
DATASET=${1:-mnist:../shared/data/mnist}
TARGET=${2:-0.97}
# Time scale 8: an iteration of ~16 ms, so the kill (after 4 s) lands near iteration
# 200 and the join (3 s later) near iteration 400 of the ~550 MNIST needs.
TS=${TS:-8}
cargo build --release -q -p pacer-cli
RT=target/release/pacer
PORT=$((20000 + RANDOM % 20000))
LOG=$(mktemp -d)
"$RT" controller --listen 127.0.0.10:$PORT --dataset "$DATASET" --model mlp --global-batch 512 \
  --controller lbbsp --predictor ewma --min-workers 4 --target-accuracy "$TARGET" \
  --max-time-s 300 --no-progress --verbose > "$LOG/controller.out" 2> "$LOG/controller.err" &
CTRL=$!
sleep 1
pids=()
speeds=(1 1 0.5 0.25)
for i in 0 1 2 3; do
  "$RT" worker --connect 127.0.0.10:$PORT --bind 127.0.0.1$((i + 1)) --name "w$i" \
    --speed "${speeds[$i]}" --time-scale "$TS" 2> "$LOG/w$i.err" &
  pids+=($!)
done
sleep "${KILL_AFTER_S:-4}"
echo "killing worker w3 (pid ${pids[3]}) with SIGKILL" >&2
kill -9 "${pids[3]}" || true
sleep "${JOIN_AFTER_S:-3}"
echo "starting worker w4 from 127.0.0.15" >&2
"$RT" worker --connect 127.0.0.10:$PORT --bind 127.0.0.15 --name w4 --speed 1 --time-scale "$TS" \
  2> "$LOG/w4.err" &
wait "$CTRL"
status=$?
cat "$LOG/controller.err" >&2
cat "$LOG/controller.out"
for i in 0 1 2 4; do echo "w$i: $(tail -1 "$LOG/w$i.err")" >&2; done
grep -q "^reached" "$LOG/controller.out"
exit $status
