#!/usr/bin/env bash
# End-to-end check of the Slurm client against a real Slurm: brings the dev cluster up
# (deploy/slurm/dev-cluster.sh), runs the live tests of crates/slurm (tests/live.rs) and takes
# the cluster down again, also when a test fails. Needs root (the dev cluster does).
#
#   scripts/slurm-e2e.sh                 # everything
#   scripts/slurm-e2e.sh two_node        # only the live tests whose name contains `two_node`
#   KEEP_CLUSTER=1 scripts/slurm-e2e.sh  # leave the cluster running afterwards
#   SKIP_LIVE=1 scripts/slurm-e2e.sh     # only the pacer serve phases
#   PACER_BIN=path scripts/slurm-e2e.sh  # use this `pacer` binary for the multi-node training
#                                        # test (default: cargo build --release -p pacer-cli)
#   SLURM_E2E_TIMEOUT_S=N                # bound on the run after the builds (default 900 s);
#                                        # past it: teardown and exit 124
#   SLURM_E2E_PHASES=adopt,workload,train,torch,preempt,nodefail,mixed  # only these serve phases (default: all;
#                                        # the live tests run unless SKIP_LIVE=1)
#   SLURM_E2E_REPEAT=N                   # run the selected serve phases N times in a row
#   SLURM_E2E_NODE_FAIL=0                # leave out the node-failure phase
# Exits non-zero on any failure; the dev cluster installs slurm-wlm when it is missing.
set -euo pipefail
cd "$(dirname "$0")/.."
if [ -z "${SLURM_E2E_INNER:-}" ]; then
    # Binaries are built first, outside the time bound of the run itself.
    if [ -z "${PACER_BIN:-}" ]; then
        cargo build --release -p pacer-cli
        PACER_BIN="${CARGO_TARGET_DIR:-target}/release/pacer"
    fi
    PACER_BIN=$(realpath "$PACER_BIN")
    export PACER_BIN
    [ "${SKIP_LIVE:-0}" = 1 ] || cargo test -p pacer-slurm --test live --no-run
    export SLURM_E2E_INNER=1
    exec timeout --kill-after=30 "${SLURM_E2E_TIMEOUT_S:-900}" "$0" "$@"
fi
trap 'echo "slurm-e2e: stopped by a signal (time limit?)" >&2; exit 124' TERM INT
T_START=$SECONDS

CLUSTER=deploy/slurm/dev-cluster.sh
export PACER_SLURM_DIR=${PACER_SLURM_DIR:-/var/lib/pacer-slurm}
export SLURM_CONF=$PACER_SLURM_DIR/slurm.conf

was_up=0
if [ -f "$PACER_SLURM_DIR/run/slurmctld.pid" ] && status=$("$CLUSTER" status 2>/dev/null) &&
    grep -q '^slurmctld: running' <<<"$status"; then
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

t1=$SECONDS
if [ "${SKIP_LIVE:-0}" = 1 ]; then
    echo "slurm-e2e: live tests skipped (SKIP_LIVE=1)"
else
    cargo test -p pacer-slurm --test live -- --ignored --nocapture --test-threads=1 "$@"
    echo "slurm-e2e: live tests passed in $((SECONDS - t1)) s"
fi
[ $# -eq 0 ] || exit 0

# pacer serve --executor slurm: three jobs placed by the fair policy, squeue shows pacer's
# placements, the service is killed (-9) mid-run and restarted: the Slurm jobs are
# re-adopted, none is submitted twice, all finish.
CHECK=scripts/slurm-serve-check.py
JOB=$(realpath scripts/slurm-job.sh)
STATE=
serve_pid=
starts=0
start_serve() { # start_serve POLICY [FLAG...]
    starts=$((starts + 1))
    local out="$STATE/serve-$starts.out" i
    "$PACER_BIN" serve --executor slurm --cluster slurm --state "$STATE" --policy "$1" \
        --round-s 1 --grace-s 5 --listen 127.0.0.1:0 "${@:2}" >"$out" 2>&1 &
    serve_pid=$!
    for ((i = 0; i < 100; i++)); do
        grep -q "listening on" "$out" 2>/dev/null && break
        kill -0 "$serve_pid" 2>/dev/null || { cat "$out"; echo "slurm-e2e: pacer serve exited" >&2; exit 1; }
        sleep 0.1
    done
    PACER_SERVER=$(grep -o 'http://[0-9.:]*' "$out" | tail -1)
    export PACER_SERVER PACER_TOKEN
    PACER_TOKEN=$(cat "$STATE/token")
}
stop_serve() { [ -z "$serve_pid" ] || { kill -TERM "$serve_pid" 2>/dev/null || true; wait "$serve_pid" 2>/dev/null || true; serve_pid=; }; }
new_state() { STATE=$(mktemp -d /tmp/pacer-slurm-serve.XXXXXX); }
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
# watch_until LIMIT_S STATE...: checks every run pacer starts against squeue (SEEN file)
# until every job is in one of STATEs.
watch_until() {
    local limit=$1 i; shift
    for ((i = 0; i < limit * 2; i++)); do
        squeue --json >"$STATE/squeue.json"
        "$PACER_BIN" jobs --json >"$STATE/jobs.json"
        python3 "$CHECK" watch "$STATE/jobs.json" "$STATE/squeue.json" "$STATE/seen.json"
        python3 "$CHECK" states "$STATE/jobs.json" "$@" >/dev/null && return 0
        sleep 0.5
    done
    python3 "$CHECK" states "$STATE/jobs.json" "$@" || true
    echo "slurm-e2e: jobs not all in $* after $limit s" >&2
    exit 1
}
submit() { # submit NAME REPLICAS MIN STEPS STEP_S EVERY
    cat >"$STATE/$1.toml" <<TOML
name = "$1"
command = ["sh", "$JOB", "$4", "$5", "$6"]
replicas = $2
min_replicas = $3
TOML
    "$PACER_BIN" submit "$STATE/$1.toml" >/dev/null
}

# pacer serve --executor slurm: three jobs placed by the fair policy, squeue shows pacer's
# placements, the service is killed (-9) mid-run and restarted: the Slurm jobs are
# re-adopted, none is submitted twice, all finish.
phase_adopt() {
    local min_id i id spec t2
    new_state
    t2=$SECONDS
    min_id=$(squeue --json | python3 -c 'import json,sys; print(max([j["job_id"] for j in json.load(sys.stdin)["jobs"]] or [0]))')
    start_serve fair
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
        [ "$i" -lt 20 ] || exit 1
        sleep 0.5
    done

    kill -KILL "$serve_pid"; wait "$serve_pid" 2>/dev/null || true; serve_pid=
    echo "slurm-e2e: pacer serve killed (-9); restarting"
    start_serve fair
    wait_states 120 succeeded
    for id in job-1 job-2 job-3; do "$PACER_BIN" job "$id" | grep -E "adopted|launched|succeeded" || true; done
    squeue --json >"$STATE/squeue.json"
    python3 "$CHECK" once "$STATE/squeue.json" "$min_id"
    stop_serve
    echo "slurm-e2e: pacer serve --executor slurm: 3 jobs placed as decided, re-adopted after kill -9, all succeeded in $((SECONDS - t2)) s"
    rm -rf "$STATE"
}

# A 6-job workload under two policies: three jobs fill the 16 GPUs (one of 8 GPUs spans two
# nodes), three more arrive 8 s later. fair shares the GPUs again, so it must preempt or
# shrink runs (SIGTERM → checkpoint → resubmission with the new allocation); tiresias
# (gang-scheduled, demotes a job only after 16 GPU-hours) lets the newcomers wait. Every run
# pacer starts is checked against squeue (nodes, GPUs per node); all six must succeed.
phase_workload() {
    local policy t3
    for policy in fair tiresias; do
        new_state
        t3=$SECONDS
        start_serve "$policy"
        submit wide 8 8 30 0.5 4
        submit a 4 2 24 0.5 4
        submit b 4 2 24 0.5 4
        watch_until 30 running
        sleep 8
        submit c 4 2 16 0.5 4
        submit d 2 1 16 0.5 4
        submit e 4 2 16 0.5 4
        watch_until 240 succeeded failed cancelled
        python3 "$CHECK" workload "$STATE/jobs.json" "$STATE/seen.json" $([ "$policy" = fair ] && echo --need-restart)
        # Decision-to-first-step overhead of every run (pacer's `launched` event → the
        # job's first-step line).
        mkdir -p "$STATE/events"
        for id in job-1 job-2 job-3 job-4 job-5 job-6; do
            "$PACER_BIN" job "$id" --json >"$STATE/events/$id.json"
        done
        python3 "$CHECK" overhead "$STATE/events" "$STATE/logs" | sed "s/^/$policy: /"
        stop_serve
        echo "slurm-e2e: policy $policy: 6 jobs to completion, placements = squeue, in $((SECONDS - t3)) s"
        rm -rf "$STATE"
    done
}

# A node fails mid-run while another user's job holds 2 GPUs of n4: pacer plans without
# those GPUs, relaunches the failed node's jobs from their checkpoints on the nodes left,
# and each relaunch redoes at most one checkpoint interval (4 steps of 0.5 s).
phase_nodefail() {
    new_state
    local t4 t_fail i victim victim_job
    t4=$SECONDS
    other=$(sbatch --parsable --job-name=other-user --partition=gpu --nodelist=n4 --gres=gpu:2 \
        --output=/dev/null --wrap='sleep 600')
    for ((i = 0; i < 40; i++)); do
        [ "$(squeue -h -j "$other" -o %T)" = RUNNING ] && break
        sleep 0.5
    done
    start_serve fair
    submit a 4 2 70 0.5 4
    submit b 4 2 70 0.5 4
    submit c 4 2 70 0.5 4
    watch_until 30 running
    sleep 6
    read -r victim_job victim < <("$PACER_BIN" jobs --json | python3 -c 'import json,sys
d=json.load(sys.stdin); j=d["jobs"] if isinstance(d,dict) else d
print(j[0]["id"], "n%d" % (j[0]["run"]["alloc"][0][0] + 1))')
    deploy/slurm/dev-cluster.sh fail-node "$victim"
    t_fail=$SECONDS
    watch_until 240 succeeded failed cancelled
    python3 "$CHECK" lost "$STATE/jobs.json" "$STATE/logs" 4 n4 2 "$STATE/seen.json"
    # (Into a file first: `pacer job | grep -q` under pipefail failed whenever grep quit
    # before pacer had written everything, SIGPIPE.)
    "$PACER_BIN" job "$victim_job" --json >"$STATE/victim.json"
    grep -E '"(kind|detail)"' "$STATE/victim.json" | paste - - | sed 's/  */ /g'
    grep -q 'lost (node failure)' "$STATE/victim.json" ||
        { echo "slurm-e2e: $victim_job ran on $victim but no run of it was lost" >&2; exit 1; }
    stop_serve
    scancel "$other"
    other=
    echo "slurm-e2e: $victim failed: $victim_job lost and relaunched, all finished $((SECONDS - t_fail)) s later (phase $((SECONDS - t4)) s)"
    "$CLUSTER" up >/dev/null # bring the failed node's slurmd back
    rm -rf "$STATE"
}

# `pacer train --slurm` submitted to pacer serve as one job of 8 GPUs: pacer places it on
# two nodes (4 GPUs each), Slurm runs one rank per node under srun, rank 0 is the controller
# on MASTER_ADDR:MASTER_PORT, each rank runs a worker. squeue must show the run on 2 nodes
# (checked by `watch` against pacer's decision), and the job's log must show both ranks'
# workers trained and the controller's report counting 2 workers.
phase_train() {
    local t5 log
    new_state
    t5=$SECONDS
    start_serve fair
    cat >"$STATE/train.toml" <<TOML
name = "train"
command = ["$PACER_BIN", "train", "--slurm", "--dataset", "tiny", "--max-iterations", "3000", "--json", "--no-progress", "--normal-priority"]
replicas = 8
min_replicas = 8
TOML
    "$PACER_BIN" submit "$STATE/train.toml" >/dev/null
    watch_until 120 succeeded failed cancelled
    python3 "$CHECK" states "$STATE/jobs.json" succeeded
    python3 "$CHECK" multinode "$STATE/seen.json" job-1
    log="$STATE/logs/job-1.log"
    grep -E '^pacer train: rank' "$log"
    grep -Eq 'rank 0 on n[0-9]+: 1 worker\(s\) trained [1-9]' "$log" &&
        grep -Eq 'rank 1 on n[0-9]+: 1 worker\(s\) trained [1-9]' "$log" ||
        { cat "$log"; echo "slurm-e2e: the log does not show both ranks trained" >&2; exit 1; }
    grep -q '"workers": *2' "$log" && grep -q '"iterations": *3000' "$log" ||
        { cat "$log"; echo "slurm-e2e: no report of 3000 iterations on 2 workers" >&2; exit 1; }
    stop_serve
    echo "slurm-e2e: pacer train --slurm across 2 nodes: both ranks trained, 3000 iterations, in $((SECONDS - t5)) s"
    rm -rf "$STATE"
}

# The same with a pacer_torch job (scripts/slurm-torch-job.py): 8 GPUs, so two nodes; the
# process group comes from SLURM_PROCID/SLURM_NTASKS + MASTER_ADDR/MASTER_PORT (gloo over
# loopback). Skipped, saying so, when the venv (scripts/test-python.sh makes it) is missing.
# has_torch PHASE: whether $py has torch and pacer_torch; says the phase is skipped if not.
has_torch() {
    [ -x "$py" ] && "$py" -c 'import torch, pacer_torch' 2>/dev/null && return 0
    echo "slurm-e2e: phase $1 SKIPPED: no $py with torch and pacer_torch (run scripts/test-python.sh to make it)"
    return 1
}
py=${PACER_VENV:-$HOME/.cache/pacer/venv}/bin/python
phase_torch() {
    local t6 log
    has_torch torch || return 0
    new_state
    t6=$SECONDS
    start_serve fair
    cat >"$STATE/torch.toml" <<TOML
name = "torch"
command = ["$py", "$(realpath scripts/slurm-torch-job.py)", "2"]
replicas = 8
min_replicas = 8
TOML
    "$PACER_BIN" submit "$STATE/torch.toml" >/dev/null
    watch_until 180 succeeded failed cancelled
    log="$STATE/logs/job-1.log"
    python3 "$CHECK" states "$STATE/jobs.json" succeeded || { cat "$log"; exit 1; }
    python3 "$CHECK" multinode "$STATE/seen.json" job-1
    grep -E '^torch rank' "$log" | cut -c1-80
    grep -Eq "^torch rank 0 of 2 on n[0-9]+: [1-9][0-9]* steps.*'source': 'slurm'" "$log" &&
        grep -Eq "^torch rank 1 of 2 on n[0-9]+: [1-9][0-9]* steps.*'source': 'slurm'" "$log" ||
        { cat "$log"; echo "slurm-e2e: the log does not show both torch ranks trained" >&2; exit 1; }
    stop_serve
    echo "slurm-e2e: pacer_torch across 2 nodes: both ranks trained, in $((SECONDS - t6)) s"
    rm -rf "$STATE"
}

# A multi-node `pacer train --slurm` job preempted/resized by the policy (issue 17): alone
# it asks for and gets 12 GPUs (3 nodes × 4); once it trains, a second job of 8 GPUs
# arrives and `fair` shares the 16 GPUs 8/8, so job-1 gets SIGTERM in its Slurm steps,
# rank 0 checkpoints and exits 143, and pacer resubmits it as a new Slurm job on 2 nodes,
# where it resumes from the checkpoint (and may grow back to 3 nodes once job-2 is done).
# Checked (slurm-serve-check.py preempt): SIGTERM, checkpoint, a new Slurm job id per
# attempt, each start resumed at the last checkpoint's step, a different node set, the full
# iteration count at the end, and never two Slurm jobs of job-1 alive at once (every squeue
# snapshot of `watch`, and Slurm's start/end times).
PREEMPT_ITERS=${PREEMPT_ITERS:-12000}
submit_train() { # submit_train ITERATIONS: job-1, 12 GPUs (3 nodes), at least 4
    cat >"$STATE/train.toml" <<TOML
name = "train"
command = ["$PACER_BIN", "train", "--slurm", "--dataset", "tiny", "--max-iterations", "$1", "--json", "--no-progress", "--normal-priority", "--verbose"]
replicas = 12
min_replicas = 4
TOML
    "$PACER_BIN" submit "$STATE/train.toml" >/dev/null
}
phase_preempt() {
    local t7 log i
    new_state
    t7=$SECONDS
    start_serve fair
    submit_train "$PREEMPT_ITERS"
    log="$STATE/logs/job-1.log"
    # Until it trains on 3 nodes (its controller's heartbeat every 50 iterations).
    for ((i = 0; ; i++)); do
        squeue --json >"$STATE/squeue.json"
        "$PACER_BIN" jobs --json >"$STATE/jobs.json"
        python3 "$CHECK" watch "$STATE/jobs.json" "$STATE/squeue.json" "$STATE/seen.json"
        grep -q '^pacer controller: iteration' "$log" 2>/dev/null && break
        [ "$i" -lt 120 ] || { cat "$log"; echo "slurm-e2e: job-1 did not start training in 60 s" >&2; exit 1; }
        sleep 0.5
    done
    submit other 8 8 16 0.5 4
    watch_until 120 succeeded failed cancelled
    squeue --json >"$STATE/squeue.json"
    "$PACER_BIN" job job-1 --json >"$STATE/job-1.json"
    python3 "$CHECK" preempt "$STATE/jobs.json" "$STATE/seen.json" "$STATE/job-1.json" "$log" \
        "$STATE/squeue.json" job-1 "$PREEMPT_ITERS" || { grep -v '^ ' "$log" | tail -40; exit 1; }
    python3 "$CHECK" states "$STATE/jobs.json" succeeded
    stop_serve
    echo "slurm-e2e: pacer train --slurm preempted/resized and resumed from its checkpoint on another allocation, in $((SECONDS - t7)) s"
    rm -rf "$STATE"

    # Part 2: the same resize right after Slurm starts the run (--min-run-s 0: job-2 is
    # submitted once squeue shows job-1 RUNNING), when its ranks' job step may not exist
    # yet. The stop must take less than the grace period (5 s), not end in SIGKILL.
    new_state
    t7=$SECONDS
    RUST_LOG=pacer_serve=info start_serve fair --min-run-s 0
    submit_train 3000
    for ((i = 0; ; i++)); do
        [ "$(squeue -h -n pacer-job-1.1 -o %T)" = RUNNING ] && break
        [ "$i" -lt 200 ] || { echo "slurm-e2e: job-1 not RUNNING in Slurm within 20 s" >&2; exit 1; }
        sleep 0.1
    done
    submit other 8 8 4 0.5 4
    watch_until 90 succeeded failed cancelled
    "$PACER_BIN" job job-1 --json >"$STATE/job-1.json"
    python3 "$CHECK" early "$STATE/jobs.json" "$STATE/job-1.json" "$STATE/logs/job-1.log" job-1 5 3000 ||
        { grep -v '^ ' "$STATE/logs/job-1.log" | tail -40; exit 1; }
    python3 "$CHECK" states "$STATE/jobs.json" succeeded
    stop_serve
    # Which way the early stop went: cancelled before srun started the ranks, or SIGTERM.
    grep -h "have not started" "$STATE"/serve-*.out | sed 's/^/slurm-e2e: /' || true
    echo "slurm-e2e: pacer train --slurm resized right after it started: stopped within the grace period, finished, in $((SECONDS - t7)) s"
    rm -rf "$STATE"
}

# One pacer_torch job across two GPU types (issue 26): the dev cluster comes back with
# n1, n2 of type t4 and n3, n4 of type a100; a job of 12 GPUs (3 nodes) with
# `mixed_types = true` is placed across both types, each rank emulates its node's type
# (t4 at a quarter of a100's speed, from PACER_NODE_TYPES) and the session's LB-BSP gives
# the a100 ranks the larger local batches; then a second job makes `fair` resize it to 8
# GPUs (SIGTERM, checkpoint, relaunch, resume). The same job without `mixed_types` is
# refused at submission (no one type has 12 GPUs). The cluster is brought back with one
# type.
phase_mixed() {
    local t8 log
    has_torch mixed || return 0
    t8=$SECONDS
    "$CLUSTER" down
    PACER_SLURM_GPU_TYPES=t4,t4,a100,a100 "$CLUSTER" up
    new_state
    start_serve fair
    cat >"$STATE/one-type.toml" <<TOML
name = "one-type"
command = ["$py", "$(realpath scripts/slurm-torch-job.py)", "2"]
replicas = 12
TOML
    if "$PACER_BIN" submit "$STATE/one-type.toml" >"$STATE/one-type.out" 2>&1 ||
        ! grep -q "mixed_types = true" "$STATE/one-type.out"; then
        cat "$STATE/one-type.out"
        echo "slurm-e2e: a 12-GPU job on a 2+2-node two-type cluster was not refused with the mixed_types hint" >&2
        exit 1
    fi
    sed 's/^/slurm-e2e: refused as expected: /' "$STATE/one-type.out" | head -1
    cat >"$STATE/mixed.toml" <<TOML
name = "mixed"
command = ["$py", "$(realpath scripts/slurm-torch-job.py)", "60"]
replicas = 12
min_replicas = 4
adaptive = true
mixed_types = true
env = { TYPE_SPEEDS = "t4=0.25,a100=1" }
TOML
    "$PACER_BIN" submit "$STATE/mixed.toml" >/dev/null
    log="$STATE/logs/job-1.log"
    # Once it trains across types (its rank-0 reports reach the service), a job of 8 GPUs
    # arrives: `fair` shares 16 GPUs 8/8, so the mixed job is stopped (SIGTERM,
    # checkpoint, 143) and relaunched on 8 GPUs, where it resumes.
    local i
    for ((i = 0; ; i++)); do
        "$PACER_BIN" job job-1 --json >"$STATE/job-1.json" 2>/dev/null &&
            python3 -c 'import json,sys; j=json.load(open(sys.argv[1])); sys.exit(0 if j.get("progress", {}).get("step", 0) >= 20 else 1)' "$STATE/job-1.json" && break
        [ "$i" -lt 240 ] || { cat "$log"; echo "slurm-e2e: the mixed job did not report 20 steps in 120 s" >&2; exit 1; }
        sleep 0.5
    done
    submit other 8 8 16 0.5 4
    watch_until 300 succeeded failed cancelled
    python3 "$CHECK" states "$STATE/jobs.json" succeeded || { cat "$log"; exit 1; }
    python3 "$CHECK" multinode "$STATE/seen.json" job-1
    grep -E '^torch rank' "$log" | cut -c1-110
    python3 "$CHECK" mixed "$log" 2 || { cat "$log"; exit 1; }
    stop_serve
    rm -rf "$STATE"
    "$CLUSTER" down
    "$CLUSTER" up >/dev/null
    echo "slurm-e2e: pacer_torch across t4 and a100 nodes, per-rank batches by type, resized, in $((SECONDS - t8)) s"
}

other=
trap 'stop_serve; [ -z "$other" ] || scancel "$other" 2>/dev/null || true; teardown' EXIT
phases=${SLURM_E2E_PHASES:-adopt,workload,train,torch,preempt,nodefail,mixed}
[ "${SLURM_E2E_NODE_FAIL:-1}" = 1 ] || phases=${phases//nodefail/}
for ((rep = 1; rep <= ${SLURM_E2E_REPEAT:-1}; rep++)); do
    for phase in ${phases//,/ }; do
        t_phase=$SECONDS
        "phase_$phase"
        echo "slurm-e2e: phase $phase (repetition $rep) passed in $((SECONDS - t_phase)) s"
    done
done
echo "slurm-e2e: all passed in $((SECONDS - T_START)) s"
