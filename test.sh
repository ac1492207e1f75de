#!/usr/bin/env bash
# The whole test suite: the Rust workspace, then the Python package (scripts/test-python.sh:
# creates its virtual environment and installs torch on first use). Fails if either fails.
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")"
cargo test --workspace
rust=$?
bash scripts/test-python.sh
py=$?
if [ $rust -ne 0 ] || [ $py -ne 0 ]; then
    echo "test.sh: cargo test exited $rust, Python tests exited $py" >&2
    exit 1
fi
