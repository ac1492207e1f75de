#!/usr/bin/env bash
set -u
export PYTHONUNBUFFERED=1 OMP_NUM_THREADS=1
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site .whl/*.whl 2>/dev/null || exit 1
export PYTHONPATH=/tmp/site
cp python/pacer_torch/*.py /tmp/site/pacer_torch/
cd python/tests
timeout 150 python3 -m pytest -v -s -p no:cacheprovider --tb=short -rfE test_cuda.py -k adaptive > $OUT/test_cuda_adaptive.log 2>&1; echo "rc=$?"
grep -E "PASSED|FAILED|accuracy|passed|failed" $OUT/test_cuda_adaptive.log | cut -c1-260
