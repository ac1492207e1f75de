#!/usr/bin/env bash
set -u
export PYTHONUNBUFFERED=1 OMP_NUM_THREADS=1
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site .whl/*.whl 2>/dev/null || exit 1
export PYTHONPATH=/tmp/site
cp python/pacer_torch/*.py /tmp/site/pacer_torch/
REPO=$(pwd)
cd /tmp && timeout 200 python3 $REPO/.gpu/diag.py $OUT 5 cuda 2>&1 | grep -v -i warn | tail -20
