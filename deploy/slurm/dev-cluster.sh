#!/usr/bin/env bash
# A single-machine Slurm dev cluster: one slurmctld and 4 slurmd (n1..n4), 4 fake GPUs each,
# of GRES type $PACER_SLURM_GPU_TYPE (default t4), or per node from PACER_SLURM_GPU_TYPES
# (e.g. t4,t4,a100,a100: two types).
#
#   deploy/slurm/dev-cluster.sh up       install slurm-wlm if missing, write config, start, wait
#   deploy/slurm/dev-cluster.sh down     stop the daemons `up` started (pid files), nothing else
#   deploy/slurm/dev-cluster.sh status   the daemons and `sinfo` of the nodes
#   deploy/slurm/dev-cluster.sh env      the line to export so sbatch/squeue/... find the cluster
#   deploy/slurm/dev-cluster.sh fail-node NODE
#                                        emulate NODE's machine dying: SIGKILL its slurmd and
#                                        every job process it started (`up` brings it back)
#
# Runs as root on Debian without systemd. Everything lives under $PACER_SLURM_DIR
# (default /var/lib/pacer-slurm): slurm.conf, gres.conf, cgroup.conf, the fake GPU devices,
# pid files, logs and state. Clients find the cluster with SLURM_CONF=$PACER_SLURM_DIR/slurm.conf.
# See deploy/slurm/README.md.
set -euo pipefail

DIR=${PACER_SLURM_DIR:-/var/lib/pacer-slurm}
CTLD_PORT=${PACER_SLURM_CTLD_PORT:-16817}
SLURMD_PORT_BASE=${PACER_SLURM_SLURMD_PORT_BASE:-16820}
NODES=(n1 n2 n3 n4)
GPUS_PER_NODE=4
GPU_TYPE=${PACER_SLURM_GPU_TYPE:-t4}
# One GRES type per node, comma-separated in node order (e.g. t4,t4,a100,a100 for a
# cluster of two types); default: every node $GPU_TYPE.
IFS=, read -r -a NODE_TYPES <<<"${PACER_SLURM_GPU_TYPES:-}"
if [ "${#NODE_TYPES[@]}" = 0 ]; then
    NODE_TYPES=()
    for _ in "${NODES[@]}"; do NODE_TYPES+=("$GPU_TYPE"); done
fi
CPUS_PER_NODE=8
WAIT_S=${PACER_SLURM_WAIT_S:-60}
export SLURM_CONF="$DIR/slurm.conf"

# secs A B: B - A in seconds, 0.1 s resolution (A, B from $EPOCHREALTIME).
secs() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.1f", b - a }'; }

die() { echo "dev-cluster: $*" >&2; exit 1; }

[ "${#NODE_TYPES[@]}" = "${#NODES[@]}" ] ||
    die "PACER_SLURM_GPU_TYPES: expected ${#NODES[@]} comma-separated types (one per node ${NODES[*]}), got '${PACER_SLURM_GPU_TYPES:-}'"
for t in "${NODE_TYPES[@]}"; do
    [[ "$t" =~ ^[A-Za-z0-9_-]+$ ]] || die "PACER_SLURM_GPU_TYPES: '$t' is not a GRES type name (letters, digits, _ and -)"
done

need_root() { [ "$(id -u)" = 0 ] || die "must run as root (installs packages, makes device nodes, starts daemons)"; }

install_slurm() {
    if command -v slurmctld >/dev/null && command -v slurmd >/dev/null && command -v sbatch >/dev/null; then
        return
    fi
    command -v apt-get >/dev/null || die "slurm-wlm is not installed and apt-get is not available"
    echo "dev-cluster: installing slurm-wlm (apt-get) ..."
    local t0=$SECONDS
    DEBIAN_FRONTEND=noninteractive apt-get -y -q install slurm-wlm >"$DIR/log/apt.log" 2>&1 ||
        { DEBIAN_FRONTEND=noninteractive apt-get -q update >>"$DIR/log/apt.log" 2>&1 &&
          DEBIAN_FRONTEND=noninteractive apt-get -y -q install slurm-wlm >>"$DIR/log/apt.log" 2>&1; } ||
        die "apt-get install slurm-wlm failed; see $DIR/log/apt.log"
    echo "dev-cluster: installed slurm-wlm in $((SECONDS - t0)) s"
}

write_config() {
    local host
    host=$(hostname -s)
    cat >"$DIR/slurm.conf.new" <<EOF
# Written by deploy/slurm/dev-cluster.sh; rewritten on every \`up\`.
ClusterName=pacer-dev
SlurmctldHost=$host
SlurmctldPort=$CTLD_PORT
SlurmUser=root
SlurmdUser=root
AuthType=auth/none
CredType=cred/none
StateSaveLocation=$DIR/state/ctld
SlurmdSpoolDir=$DIR/state/%n
SlurmctldPidFile=$DIR/run/slurmctld.pid
SlurmdPidFile=$DIR/run/slurmd-%n.pid
SlurmctldLogFile=$DIR/log/slurmctld.log
SlurmdLogFile=$DIR/log/slurmd-%n.log
SlurmctldDebug=info
SlurmdDebug=info
# No systemd and no writable cgroup tree here: track processes by parent pid, bind nothing.
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
MpiDefault=none
SwitchType=switch/none
LaunchParameters=use_interactive_step
SchedulerType=sched/backfill
# Schedule a batch job when it is submitted, not up to 3 s later (the default): the median
# submit -> RUNNING went from 1.9 s to 0.85 s here (deploy/slurm/README.md).
SchedulerParameters=batch_sched_delay=0
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
GresTypes=gpu
# Each slurmd takes its node's CPUs and GRES from this file, not from the hardware.
SlurmdParameters=config_overrides
ReturnToService=2
JobRequeue=1
# A killed slurmd marks its node DOWN within ~SlurmdTimeout.
SlurmdTimeout=10
SlurmctldTimeout=10
MessageTimeout=10
InactiveLimit=0
KillWait=10
MinJobAge=300
EOF
    local i=0 n
    for n in "${NODES[@]}"; do
        echo "NodeName=$n NodeHostname=localhost NodeAddr=127.0.0.1 Port=$((SLURMD_PORT_BASE + i)) CPUs=$CPUS_PER_NODE RealMemory=4096 Gres=gpu:${NODE_TYPES[$i]}:$GPUS_PER_NODE Feature=${NODE_TYPES[$i]} State=UNKNOWN" >>"$DIR/slurm.conf.new"
        i=$((i + 1))
    done
    echo "PartitionName=gpu Nodes=$(IFS=,; echo "${NODES[*]}") Default=YES MaxTime=INFINITE State=UP OverSubscribe=NO" >>"$DIR/slurm.conf.new"

    {
        echo "# Written by deploy/slurm/dev-cluster.sh: fake GPUs are character devices (c 1 3, like /dev/null)."
        local i=0
        for n in "${NODES[@]}"; do
            echo "NodeName=$n Name=gpu Type=${NODE_TYPES[$i]} File=$DIR/dev/$n-gpu[0-$((GPUS_PER_NODE - 1))]"
            i=$((i + 1))
        done
    } >"$DIR/gres.conf.new"

    cat >"$DIR/cgroup.conf.new" <<EOF
# Written by deploy/slurm/dev-cluster.sh. No plugin here uses cgroups (proctrack/linuxproc,
# task/none); this file only stops slurmd from looking for one elsewhere.
CgroupPlugin=autodetect
EOF
    mv "$DIR/slurm.conf.new" "$DIR/slurm.conf"
    mv "$DIR/gres.conf.new" "$DIR/gres.conf"
    mv "$DIR/cgroup.conf.new" "$DIR/cgroup.conf"
}

make_devices() {
    local n g f
    for n in "${NODES[@]}"; do
        for ((g = 0; g < GPUS_PER_NODE; g++)); do
            f="$DIR/dev/$n-gpu$g"
            if [ -e "$f" ] && [ ! -c "$f" ]; then rm -f "$f"; fi
            [ -c "$f" ] || mknod "$f" c 1 3 || die "mknod $f failed (fake GPUs must be character devices)"
        done
    done
}

# alive PIDFILE: the pid in the file runs and is the expected program.
alive() {
    local pidfile=$1 prog=$2 pid
    [ -f "$pidfile" ] || return 1
    pid=$(cat "$pidfile" 2>/dev/null) || return 1
    [ -n "$pid" ] && [ -r "/proc/$pid/cmdline" ] || return 1
    tr '\0' ' ' <"/proc/$pid/cmdline" | grep -q "$prog"
}

start_daemons() {
    if alive "$DIR/run/slurmctld.pid" slurmctld; then
        echo "dev-cluster: slurmctld already running (pid $(cat "$DIR/run/slurmctld.pid"))"
    else
        slurmctld -f "$DIR/slurm.conf" >>"$DIR/log/slurmctld.out" 2>&1 ||
            die "slurmctld did not start; see $DIR/log/slurmctld.log"
    fi
    local n
    for n in "${NODES[@]}"; do
        if alive "$DIR/run/slurmd-$n.pid" slurmd; then
            echo "dev-cluster: slurmd $n already running (pid $(cat "$DIR/run/slurmd-$n.pid"))"
        else
            slurmd -f "$DIR/slurm.conf" -N "$n" >>"$DIR/log/slurmd-$n.out" 2>&1 ||
                die "slurmd -N $n did not start; see $DIR/log/slurmd-$n.log"
        fi
    done
}

wait_idle() {
    local deadline=$((SECONDS + WAIT_S)) idle out
    while :; do
        out=$(sinfo -h -N -p gpu -o '%N %t' 2>/dev/null || true)
        idle=$(awk '$2 ~ /^(idle|mix|alloc)$/' <<<"$out" | sort -u | wc -l)
        # Nodes left DOWN by an earlier run (slurmd killed) come back once their slurmd registers.
        if [ "$idle" -ge "${#NODES[@]}" ]; then return 0; fi
        if [ $SECONDS -ge $deadline ]; then
            echo "$out" >&2
            die "after ${WAIT_S} s only $idle of ${#NODES[@]} nodes are up; see $DIR/log/"
        fi
        sleep 0.5
    done
}

up() {
    need_root
    local t0=$EPOCHREALTIME
    mkdir -p "$DIR"/{log,run,dev,state/ctld} "${NODES[@]/#/$DIR/state/}"
    install_slurm
    local t1=$EPOCHREALTIME
    write_config
    make_devices
    start_daemons
    wait_idle
    echo "dev-cluster: up: ${#NODES[@]} nodes x $GPUS_PER_NODE gpu, types $(IFS=,; echo "${NODE_TYPES[*]}") (install $(secs "$t0" "$t1") s, bring-up $(secs "$t1" "$EPOCHREALTIME") s)"
    echo "dev-cluster: export SLURM_CONF=$SLURM_CONF"
}

stop_pidfile() {
    local pidfile=$1 prog=$2 pid i
    if ! alive "$pidfile" "$prog"; then rm -f "$pidfile"; return 0; fi
    pid=$(cat "$pidfile")
    kill -TERM "$pid" 2>/dev/null || true
    for ((i = 0; i < 100; i++)); do
        [ -d "/proc/$pid" ] || break
        sleep 0.1
    done
    if [ -d "/proc/$pid" ]; then kill -KILL "$pid" 2>/dev/null || true; fi
    rm -f "$pidfile"
    echo "dev-cluster: stopped $prog (pid $pid)"
}

# kill_tree PID: SIGKILL PID and its descendants (children first found, then the parent).
kill_tree() {
    local pid=$1 child
    kill -STOP "$pid" 2>/dev/null || true
    for child in $(pgrep -P "$pid" 2>/dev/null || true); do kill_tree "$child"; done
    kill -KILL "$pid" 2>/dev/null || true
}

# stepd_pids NODE: the slurmstepd processes NODE's slurmd started (they keep its log open).
stepd_pids() {
    local log="$DIR/log/slurmd-$1.log" p
    for p in /proc/[0-9]*; do
        [ "$(head -c 10 "$p/cmdline" 2>/dev/null | tr '\0' ' ')" = "slurmstepd" ] || continue
        if [ "$(readlink "$p/fd/3" 2>/dev/null)" = "$log" ] ||
            ls -l "$p/fd" 2>/dev/null | grep -qF -- "-> $log"; then
            echo "${p#/proc/}"
        fi
    done
}

fail_node() {
    need_root
    local node=${1:-} pid n=0
    [[ " ${NODES[*]} " == *" $node "* ]] || die "fail-node: expected one of ${NODES[*]}, got \`$node'"
    if alive "$DIR/run/slurmd-$node.pid" slurmd; then
        kill -KILL "$(cat "$DIR/run/slurmd-$node.pid")"
        rm -f "$DIR/run/slurmd-$node.pid"
    fi
    for pid in $(stepd_pids "$node"); do kill_tree "$pid"; n=$((n + 1)); done
    echo "dev-cluster: $node failed (slurmd and $n job step daemons killed)"
}

down() {
    [ -d "$DIR" ] || { echo "dev-cluster: nothing to stop ($DIR does not exist)"; return 0; }
    # Cancel what still runs, so no slurmstepd is left behind, then stop the daemons.
    if alive "$DIR/run/slurmctld.pid" slurmctld; then
        timeout 10 scancel --full --quiet --partition=gpu 2>/dev/null || true
        local i
        for ((i = 0; i < 30; i++)); do
            [ -z "$(timeout 5 squeue -h -t R,CG -o %i 2>/dev/null)" ] && break
            sleep 0.5
        done
    fi
    local n
    for n in "${NODES[@]}"; do stop_pidfile "$DIR/run/slurmd-$n.pid" slurmd; done
    stop_pidfile "$DIR/run/slurmctld.pid" slurmctld
    # Job steps orphaned by a failed node (fail-node, or a killed slurmd) outlive slurmctld.
    local pid
    for n in "${NODES[@]}"; do
        for pid in $(stepd_pids "$n"); do kill_tree "$pid"; echo "dev-cluster: killed orphaned slurmstepd $pid ($n)"; done
    done
}

status() {
    [ -f "$DIR/slurm.conf" ] || die "not set up ($DIR/slurm.conf does not exist); run: $0 up"
    local n
    if alive "$DIR/run/slurmctld.pid" slurmctld; then echo "slurmctld: running (pid $(cat "$DIR/run/slurmctld.pid"))"; else echo "slurmctld: stopped"; fi
    for n in "${NODES[@]}"; do
        if alive "$DIR/run/slurmd-$n.pid" slurmd; then echo "slurmd $n: running (pid $(cat "$DIR/run/slurmd-$n.pid"))"; else echo "slurmd $n: stopped"; fi
    done
    timeout 10 sinfo -N -o '%N %P %t %c %G %f' || echo "sinfo: controller unreachable"
}

case "${1:-}" in
    up) up ;;
    down) down ;;
    status) status ;;
    env) echo "export SLURM_CONF=$SLURM_CONF" ;;
    fail-node) fail_node "${2:-}" ;;
    *) die "usage: $0 up|down|status|env|fail-node NODE" ;;
esac
