#!/usr/bin/env bash
# End-to-end check of the Slurm client against a real Slurm: brings the dev cluster up
# (deploy/slurm/dev-cluster.sh), runs the live tests of crates/slurm (tests/live.rs) and takes
# the cluster down again, also when a test fails. Needs root (the dev cluster does).
#
#   scripts/slurm-e2e.sh                 # everything
#   scripts/slurm-e2e.sh two_node        # only the live tests whose name contains `two_node`
#   KEEP_CLUSTER=1 scripts/slurm-e2e.sh  # leave the cluster running afterwards
#   PACER_BIN=path scripts/slurm-e2e.sh  # use this `pacer` binary for the multi-node training
#                                        # test (default: cargo build --release -p pacer-cli)
set -euo pipefail
cd "$(dirname "$0")/.."

CLUSTER=deploy/slurm/dev-cluster.sh
export PACER_SLURM_DIR=${PACER_SLURM_DIR:-/var/lib/pacer-slurm}
export SLURM_CONF=$PACER_SLURM_DIR/slurm.conf

was_up=0
if [ -f "$PACER_SLURM_DIR/run/slurmctld.pid" ] && "$CLUSTER" status >/dev/null 2>&1 &&
    "$CLUSTER" status | grep -q '^slurmctld: running'; then
    was_up=1
fi

teardown() {
    if [ "${KEEP_CLUSTER:-0}" = 1 ] || [ "$was_up" = 1 ]; then
        echo "slurm-e2e: leaving the dev cluster up"
    else
        "$CLUSTER" down
    fi
}
trap teardown EXIT

t0=$SECONDS
"$CLUSTER" up
echo "slurm-e2e: cluster up in $((SECONDS - t0)) s"
"$CLUSTER" status

# Binaries are built before the clock of the live part starts.
if [ -z "${PACER_BIN:-}" ]; then
    cargo build --release -p pacer-cli
    PACER_BIN="${CARGO_TARGET_DIR:-target}/release/pacer"
fi
PACER_BIN=$(realpath "$PACER_BIN")
export PACER_BIN
cargo test -p pacer-slurm --test live --no-run
t1=$SECONDS
PACER_SLURM_LIVE=1 cargo test -p pacer-slurm --test live -- --nocapture --test-threads=1 "$@"
echo "slurm-e2e: live tests passed in $((SECONDS - t1)) s"
[ $# -eq 0 ] || exit 0

# pacer serve --executor slurm: three jobs placed by the fair policy, squeue shows pacer's
# placements, the service is killed (-9) mid-run and restarted: the Slurm jobs are
# re-adopted, none is submitted twice, all finish.
CHECK=scripts/slurm-serve-check.py
STATE=$(mktemp -d /tmp/pacer-slurm-serve.XXXXXX)
serve_pid=
starts=0
start_serve() {
    starts=$((starts + 1))
    local out="$STATE/serve-$starts.out" i
    "$PACER_BIN" serve --executor slurm --cluster slurm --state "$STATE" --policy fair \
        --round-s 1 --grace-s 5 --listen 127.0.0.1:0 >"$out" 2>&1 &
    serve_pid=$!
    for ((i = 0; i < 100; i++)); do
        grep -q "listening on" "$out" && break
        kill -0 "$serve_pid" 2>/dev/null || { cat "$out"; echo "slurm-e2e: pacer serve exited" >&2; exit 1; }
        sleep 0.1
    done
    PACER_SERVER=$(grep -o 'http://[0-9.:]*' "$out" | tail -1)
    export PACER_SERVER PACER_TOKEN
    PACER_TOKEN=$(cat "$STATE/token")
}
stop_serve() { [ -z "$serve_pid" ] || { kill -TERM "$serve_pid" 2>/dev/null || true; wait "$serve_pid" 2>/dev/null || true; serve_pid=; }; }
wait_states() { # wait_states LIMIT_S STATE...
    local limit=$1 i; shift
    for ((i = 0; i < limit * 2; i++)); do
        "$PACER_BIN" jobs --json >"$STATE/jobs.json" && python3 "$CHECK" states "$STATE/jobs.json" "$@" >/dev/null && return 0
        sleep 0.5
    done
    python3 "$CHECK" states "$STATE/jobs.json" "$@" || true
    echo "slurm-e2e: jobs not all in: $*" >&2
    exit 1
}
trap 'stop_serve; teardown' EXIT

t2=$SECONDS
min_id=$(squeue --json | python3 -c 'import json,sys; print(max([j["job_id"] for j in json.load(sys.stdin)["jobs"]] or [0]))')
start_serve
for spec in "big 8" "small 2" "mid 4"; do
    set -- $spec
    cat >"$STATE/$1.toml" <<TOML
name = "$1"
command = ["sh", "-c", "echo \$PACER_RUN_ID on \$SLURM_JOB_NODELIST gpus \$CUDA_VISIBLE_DEVICES world \$WORLD_SIZE; sleep 25; echo done"]
replicas = $2
TOML
    "$PACER_BIN" submit "$STATE/$1.toml"
done
wait_states 60 running
# pacer counts a run as running once sbatch returns; Slurm starts it ~1 s later.
for ((i = 0; ; i++)); do
    squeue --json >"$STATE/squeue.json"
    "$PACER_BIN" jobs --json >"$STATE/jobs.json"
    python3 "$CHECK" placement "$STATE/jobs.json" "$STATE/squeue.json" && break
    [ $i -lt 20 ] || exit 1
    sleep 0.5
done

kill -KILL "$serve_pid"; wait "$serve_pid" 2>/dev/null || true; serve_pid=
echo "slurm-e2e: pacer serve killed (-9); restarting"
start_serve
wait_states 120 succeeded
for id in job-1 job-2 job-3; do "$PACER_BIN" job "$id" | grep -E "adopted|launched|succeeded" || true; done
squeue --json >"$STATE/squeue.json"
python3 "$CHECK" once "$STATE/squeue.json" "$min_id"
stop_serve
echo "slurm-e2e: pacer serve --executor slurm: 3 jobs placed as decided, re-adopted after kill -9, all succeeded in $((SECONDS - t2)) s"
rm -rf "$STATE"
