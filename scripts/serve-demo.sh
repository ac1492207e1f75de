#!/usr/bin/env bash
# Demo of `pacer serve` with real training jobs: for each policy (default: fair,
# tiresias, pollux) start a service with the local executor on emulated CPU slots
# (4 nodes x 2 slots), submit the same 8 `pacer train --dataset tiny` jobs (1 or 2
# replicas, the first worker emulated at half speed), wait until all have finished, and print
# every job's completion time (JCT = finished - submitted) per policy.
#
# Jobs report to the service (so the policies see measured throughput) and checkpoint
# on SIGTERM (a preempted or resized job resumes); the script checks from every job's
# reports that no restarted job went back to an earlier step.
#
# Then the same workload through `pacer simulate`: a Gavel-format trace (one row per
# job: job type = its name, total steps = its iterations, scale factor = its requested
# replicas, all arriving at 0) and a throughputs file of what the jobs measured (steps/s
# per replica count on type `cpu`: the mean of the reports, then over the policies' runs), simulated on
# 4x2:cpu with 2 s rounds; real and simulated JCTs are printed side by side
# (docs/serve.md explains why they differ).
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
  AUTH="Authorization: Bearer $(cat "$STATE/token")"
  for k in $(seq 1 8); do
    curl -sf -H "$AUTH" "$PACER_SERVER/v1/jobs/job-$k/reports?limit=10000" > "$OUT/reports-$POLICY-job-$k.json"
    curl -sf -H "$AUTH" "$PACER_SERVER/v1/jobs/job-$k/events?limit=10000" > "$OUT/events-$POLICY-job-$k.json"
  done
  kill $SERVICE; wait $SERVICE 2>/dev/null || true
  cp -r "$STATE/logs" "$OUT/logs-$POLICY"
  rm -rf "$STATE"
done

# The simulator's input from the measurements: per (job, replicas), the mean of the
# throughputs the job reported at that size over its whole run (not the service's
# EWMA, which holds the speed near the end, when fewer jobs shared the cores), then
# the mean over the policies' runs, in steps/s (samples/s over the global batch).
python3 - "$OUT" "${ITERS[*]}" "${REPLICAS[*]}" "${POLICIES[@]}" <<'PY'
import json, sys
out, iters, reps, policies = sys.argv[1], sys.argv[2].split(), sys.argv[3].split(), sys.argv[4:]
meas = {}
for p in policies:
    for j in json.load(open(f"{out}/jobs-{p}.json"))["jobs"]:
        per = {}
        for r in json.load(open(f"{out}/reports-{p}-{j['id']}.json"))["reports"]:
            if r["throughput"] > 0:
                per.setdefault(r["replicas"], []).append(r["throughput"])
        for n, v in per.items():
            meas.setdefault((j["spec"]["name"], n), []).append(sum(v) / len(v) / j["spec"]["global_batch"])
tput = {"cpu": {f"('{n}', {r})": {"null": sum(v) / len(v)} for (n, r), v in sorted(meas.items())}}
json.dump(tput, open(f"{out}/measured-throughputs.json", "w"), indent=1)
with open(f"{out}/workload.trace", "w") as f:
    for k, (it, r) in enumerate(zip(iters, reps)):
        f.write(f"tiny-{k}\tpacer train --dataset tiny\t--max-iterations\t0\t{it}\t0\t{r}\n")
PY
# What a restart costs a real job here: the wall time of a one-iteration `pacer train`
# (process start, data, workers' handshake), measured now; the simulator charges it on
# every allocation change instead of its default 30 s.
RESTART_S=$(python3 - "$PACER" <<'PY'
import subprocess, sys, time
t = []
for _ in range(3):
    t0 = time.monotonic()
    subprocess.run([sys.argv[1], "train", "--dataset", "tiny", "--max-iterations", "1"],
                   check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    t.append(time.monotonic() - t0)
print(f"{sorted(t)[1]:.2f}")
PY
)
echo "== restart cost measured: $RESTART_S s (median of 3 one-iteration runs)"
for POLICY in "${POLICIES[@]}"; do
  "$PACER" simulate --restart-s "$RESTART_S" --trace "gavel:$OUT/workload.trace" --gavel-throughputs "$OUT/measured-throughputs.json" \
    --cluster 4x2:cpu --round-s 2 --policy "$POLICY" --quiet --out "$OUT/sim-$POLICY" > "$OUT/sim-$POLICY.txt"
done

python3 - "$OUT" "${POLICIES[@]}" <<'PY'
import csv, glob, json, sys
out, policies = sys.argv[1], sys.argv[2:]
runs = {p: {j["spec"]["name"]: j for j in json.load(open(f"{out}/jobs-{p}.json"))["jobs"]} for p in policies}
names = sorted(runs[policies[0]])
# Resumed, not restarted: a restarted job's reported steps never go back.
for p in policies:
    for n, j in runs[p].items():
        steps = [r["step"] for r in json.load(open(f"{out}/reports-{p}-{j['id']}.json"))["reports"]]
        back = [(a, b) for a, b in zip(steps, steps[1:]) if b < a]
        if back:
            sys.exit(f"FAIL: {p} {n} went back from step {back[0][0]} to {back[0][1]} (restarted from scratch?)")
        if j["restarts"]:
            print(f"{p} {n}: {j['restarts']} restart(s), {len(steps)} reports, steps never went back (last {steps[-1] if steps else 0})")
def sim_jcts(p):
    files = glob.glob(f"{out}/sim-{p}/**/*.csv", recursive=True)
    for f in files:
        rows = list(csv.DictReader(open(f)))
        if rows and "jct_s" in rows[0]:
            return {r["application"]: (float(r["jct_s"] or "nan"), int(r["restarts"])) for r in rows}
    sys.exit(f"FAIL: no per-job CSV with jct_s under {out}/sim-{p}")
sim = {p: sim_jcts(p) for p in policies}
print(f"{'job':<8} {'repl':>4} " + " ".join(f"{p[:8] + ' real':>13} {'rst':>3} {'sim':>6} {'rst':>3}" for p in policies))
for n in names:
    row = []
    for p in policies:
        j = runs[p][n]
        jct = (j["finished_ms"] - j["submitted_ms"]) / 1000 if j["state"] == "succeeded" else float("nan")
        sj, sr = sim[p].get(n, (float("nan"), 0))
        row.append(f"{jct:>13.1f} {j['restarts']:>3} {sj:>6.1f} {sr:>3}")
    print(f"{n:<8} {runs[policies[0]][n]['spec']['replicas']:>4} " + " ".join(row))
for p in policies:
    jcts = [(j["finished_ms"] - j["submitted_ms"]) / 1000 for j in runs[p].values() if j["state"] == "succeeded"]
    failed = sum(j["state"] != "succeeded" for j in runs[p].values())
    restarts = sum(j["restarts"] for j in runs[p].values())
    print(f"{p}: real mean JCT {sum(jcts) / max(1, len(jcts)):.1f} s, makespan {max(jcts, default=0):.1f} s, restarts {restarts}, not succeeded {failed}"
          f" | simulated mean JCT {sum(v[0] for v in sim[p].values()) / len(sim[p]):.1f} s, makespan {max(v[0] for v in sim[p].values()):.1f} s,"
          f" restarts {sum(v[1] for v in sim[p].values())}")
PY
