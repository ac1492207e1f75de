#!/usr/bin/env bash
set -u
export PYTHONUNBUFFERED=1 OMP_NUM_THREADS=1
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site .whl/*.whl 2>/dev/null || exit 1
export PYTHONPATH=/tmp/site
cp python/pacer_torch/*.py /tmp/site/pacer_torch/
cd /tmp
for i in 3 4; do
T0=$(date +%s)
CUDA_VISIBLE_DEVICES= timeout 120 torchrun --nproc_per_node=4 -m pacer_torch.overhead --rounds 16 --steps 30 > $OUT/overhead-cpu-$i.json 2>> $OUT/errs6.log
echo "run $i $(( $(date +%s) - T0 )) s"; grep -E '"median_ms"|_paired"' $OUT/overhead-cpu-$i.json | tr -d '\n '; echo
done
