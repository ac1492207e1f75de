#!/usr/bin/env bash
# The whole test suite: the Rust workspace, then the Python package (scripts/test-python.sh:
# creates its virtual environment and installs torch on first use). Fails if either fails.
# Prints what it is doing and how long each part took.
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")"
t0=$(date +%s)
step() { echo; echo "== test.sh: $* ($(date -u +%H:%M:%S))"; }

step "building the Rust tests (first time: several minutes)"
cargo test --workspace --no-run
build=$?
t1=$(date +%s)
rust=$build
if [ $build -eq 0 ]; then
    step "running the Rust tests"
    cargo test --workspace
    rust=$?
fi
t2=$(date +%s)
step "Python: venv, torch (first time only), pacer_torch build, pytest"
bash scripts/test-python.sh
py=$?
t3=$(date +%s)
echo
echo "test.sh: Rust build $((t1 - t0)) s, Rust tests $((t2 - t1)) s, Python $((t3 - t2)) s, total $((t3 - t0)) s"
if [ $rust -ne 0 ] || [ $py -ne 0 ]; then
    echo "test.sh: cargo test exited $rust, Python tests exited $py" >&2
    exit 1
fi
