#!/usr/bin/env bash
# Runs the whole comparison RUNS times (default 3) at the MLP's size and at 1 M
# parameters, each run started only when the 1-minute load average is below
# MAX_LOAD (default 1.5). Prints each table, with the load before it.
set -euo pipefail
cd "$(dirname "$0")"
RUNS=${RUNS:-3}
MAX_LOAD=${MAX_LOAD:-1.5}
cargo build --release --quiet
bin=target/release/pacer-rpc-bench

wait_for_quiet() {
  while awk -v max="$MAX_LOAD" '{ exit !($1 >= max) }' /proc/loadavg; do
    echo "# load $(cut -d' ' -f1-3 /proc/loadavg) >= $MAX_LOAD, waiting" >&2
    sleep 20
  done
}

for run in $(seq 1 "$RUNS"); do
  for args in "--params 101770" "--params 1000000"; do
    wait_for_quiet
    echo "## run $run: $bin $args ($(date -u +%H:%M:%SZ), uptime: $(uptime | sed 's/.*load/load/'))"
    # shellcheck disable=SC2086
    "$bin" $args "$@"
    echo
  done
done
