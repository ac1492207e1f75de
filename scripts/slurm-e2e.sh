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
