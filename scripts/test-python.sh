#!/usr/bin/env bash
# Python side of the test suite (python/README.md): a virtual environment outside
# the repository (${PACER_VENV:-$HOME/.cache/pacer/venv}, reused by every clone),
# torch from PyPI (the default Linux wheel is the CUDA build, ~3 GB installed;
# PyPI serves no CPU-only wheel), maturin and pytest; then builds and installs
# ./python into it and runs python/tests. Prints the time and disk each install took.
set -euo pipefail
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
venv="${PACER_VENV:-$HOME/.cache/pacer/venv}"
py="${PYTHON:-python3}"

disk() { du -sm "$venv" 2>/dev/null | cut -f1; }

if [ ! -x "$venv/bin/python" ]; then
    echo "test-python: creating the virtual environment $venv"
    mkdir -p "$(dirname "$venv")"
    "$py" -m venv "$venv"
fi
vpy="$venv/bin/python"
# maturin's build backend calls the `maturin` program: the venv's must be on PATH.
export PATH="$venv/bin:$PATH"

if ! "$vpy" -c 'import torch' 2>/dev/null; then
    echo "test-python: installing torch from PyPI (once; a few GB)"
    t0=$(date +%s); d0=$(disk)
    "$vpy" -m pip install --quiet --upgrade pip
    "$vpy" -m pip install --quiet torch numpy
    t1=$(date +%s); d1=$(disk)
    echo "test-python: torch installed in $((t1 - t0)) s, venv grew by $((d1 - d0)) MiB (now $d1 MiB)"
fi
if ! [ -x "$venv/bin/maturin" ] || ! [ -x "$venv/bin/pytest" ]; then
    "$vpy" -m pip install --quiet 'maturin>=1.16,<1.17' 'pytest>=8'
fi

echo "test-python: building and installing ./python"
t0=$(date +%s)
# --no-build-isolation: use the venv's maturin (no download per run).
"$vpy" -m pip install --quiet --no-build-isolation --force-reinstall --no-deps "$repo/python"
echo "test-python: ./python built and installed in $(( $(date +%s) - t0 )) s"

# The pytest program, not `python -m pytest`: the latter puts the working directory on
# sys.path, and python/pacer_torch there (no compiled module) would shadow the install.
cd "$repo/python/tests"
t0=$(date +%s)
set +e
OMP_NUM_THREADS=1 "$venv/bin/pytest" -q -p no:cacheprovider . "$@"
rc=$?
set -e
echo "test-python: pytest took $(( $(date +%s) - t0 )) s"
exit $rc
