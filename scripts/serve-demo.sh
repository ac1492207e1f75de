#!/usr/bin/env bash
# Demo of `pacer serve` with real training jobs: for each policy (default: fair,
# tiresias, pollux) start a service with the local executor on emulated CPU slots
# (4 nodes x 2 slots), submit the same 8 `pacer train --dataset tiny` jobs (1 or 2
# replicas, the first worker emulated at half speed), wait until all have finished, and print
# every job's completion time (JCT = finished - submitted) per policy.
#
# Not yet here: `pacer train` does not report to the service nor checkpoint on SIGTERM
# until the runtime side of the contract lands (another issue), so a preempted job
# restarts from scratch and the policies see no measured throughput; and the
# side-by-side with `pacer simulate` on the same workload is not done.
#
# Usage: scripts/serve-demo.sh [OUT_DIR] [POLICY...]
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${1:-target/serve-demo}
shift || true
POLICIES=("${@:-fair tiresias pollux}")
read -r -a POLICIES <<< "${POLICIES[*]}"
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
cargo build -q --release -p pacer-cli
PACER=$(pwd)/${CARGO_TARGET_DIR:-target}/release/pacer
[ -x "$PACER" ] || PACER=${CARGO_TARGET_DIR}/release/pacer

REPLICAS=(1 2 1 2 1 1 2 1)
ITERS=(3000 6000 4000 3000 5000 3000 4000 6000)

for POLICY in "${POLICIES[@]}"; do
  STATE=$(mktemp -d)
  PORT=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
  "$PACER" serve --listen 127.0.0.1:$PORT --state "$STATE" --cluster 4x2:cpu --policy "$POLICY" \
    --round-s 2 --grace-s 5 > "$OUT/service-$POLICY.log" 2>&1 &
  SERVICE=$!
  for _ in $(seq 100); do curl -sf http://127.0.0.1:$PORT/healthz >/dev/null && break; sleep 0.1; done
  export PACER_SERVER=http://127.0.0.1:$PORT
  for k in $(seq 0 7); do
    cat > "$STATE/job$k.toml" <<TOML
name = "tiny-$k"
replicas = ${REPLICAS[$k]}
adaptive = true
max_replicas = 2
global_batch = 256
[trainer]
dataset = "tiny"
args = ["--speeds", "0.5", "--max-iterations", "${ITERS[$k]}"]
TOML
    "$PACER" submit "$STATE/job$k.toml" --token-file "$STATE/token" > /dev/null
  done
  echo "== $POLICY: 8 jobs submitted"
  T0=$(date +%s)
  while :; do
    "$PACER" jobs --json --token-file "$STATE/token" > "$OUT/jobs-$POLICY.json"
    LEFT=$(python3 -c 'import json,sys; print(sum(j["state"] not in ("succeeded","failed","cancelled") for j in json.load(open(sys.argv[1]))["jobs"]))' "$OUT/jobs-$POLICY.json")
    [ "$LEFT" = 0 ] && break
    if [ $(( $(date +%s) - T0 )) -gt 1200 ]; then echo "FAIL: $POLICY did not finish in 20 min"; kill $SERVICE; exit 1; fi
    sleep 2
  done
  kill $SERVICE; wait $SERVICE 2>/dev/null || true
  rm -rf "$STATE"
done

python3 - "$OUT" "${POLICIES[@]}" <<'PY'
import json, sys
out, policies = sys.argv[1], sys.argv[2:]
runs = {p: {j["spec"]["name"]: j for j in json.load(open(f"{out}/jobs-{p}.json"))["jobs"]} for p in policies}
names = sorted(runs[policies[0]])
print(f"{'job':<8} {'replicas':>8} " + " ".join(f"{p + ' JCT s':>16} {'restarts':>8}" for p in policies))
for n in names:
    row = []
    for p in policies:
        j = runs[p][n]
        jct = (j["finished_ms"] - j["submitted_ms"]) / 1000 if j["state"] == "succeeded" else float("nan")
        row.append(f"{jct:>16.1f} {j['restarts']:>8}")
    print(f"{n:<8} {runs[policies[0]][n]['spec']['replicas']:>8} " + " ".join(row))
for p in policies:
    jcts = [(j["finished_ms"] - j["submitted_ms"]) / 1000 for j in runs[p].values() if j["state"] == "succeeded"]
    failed = sum(j["state"] != "succeeded" for j in runs[p].values())
    print(f"{p}: mean JCT {sum(jcts) / max(1, len(jcts)):.1f} s, makespan {max(jcts, default=0):.1f} s, not succeeded {failed}")
PY
