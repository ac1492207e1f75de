#!/usr/bin/env bash
# Controller and workers as separate processes on different loopback addresses
# (127.0.0.10 for the controller, 127.0.0.11.. for the workers): what `pacer
# controller` / `pacer worker` do across hosts. One worker is killed with SIGKILL
# mid-training and a new one joins later; training must still reach the target.
# Usage: experiments/runtime/scripts/multihost.sh [DATASET] [TARGET]   (default: MNIST, 0.97)
#   e.g. multihost.sh mnist:/data/mnist 0.97
set -euo pipefail
cd "$(dirname "$0")/../../.."
DATASET=${1:-mnist:../shared/data/mnist}
TARGET=${2:-0.97}
# Time scale 8 (compute-dominated, ~8-16 ms per iteration). The kill and the join
# are timed by the controller's heartbeat (`--verbose` logs every 50th iteration):
# SIGKILL when it reports KILL_AT (200), a new worker started when it reports
# JOIN_START (350; it joins ~0.3-0.5 s later, after loading the data).
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
wait_for_iteration() { # n: block until the controller logged iteration n (or ended)
  until grep -q "iteration $1," "$LOG/controller.err" 2>/dev/null; do
    kill -0 "$CTRL" 2>/dev/null || return 0
    sleep 0.02
  done
}
wait_for_iteration "${KILL_AT:-200}"
echo "killing worker w3 (pid ${pids[3]}) with SIGKILL at iteration ${KILL_AT:-200}" >&2
kill -9 "${pids[3]}" || true
wait_for_iteration "${JOIN_START:-350}"
echo "starting worker w4 from 127.0.0.15 at iteration ${JOIN_START:-350}" >&2
"$RT" worker --connect 127.0.0.10:$PORT --bind 127.0.0.15 --name w4 --speed 1 --time-scale "$TS" \
  2> "$LOG/w4.err" &
status=0
wait "$CTRL" || status=$?
cat "$LOG/controller.err" >&2
cat "$LOG/controller.out"
for i in 0 1 2 4; do echo "w$i: $(tail -1 "$LOG/w$i.err")" >&2; done
grep -q "^reached" "$LOG/controller.out"
exit $status
