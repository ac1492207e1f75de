#!/usr/bin/env bash
# Device checks for issue 24, session of 2026-11-27 evening. Logs to $OUT.
set -u
export PYTHONUNBUFFERED=1 OMP_NUM_THREADS=1
REPO=$(pwd); T0=$(date +%s)
el() { echo "[$(( $(date +%s) - T0 )) s] $*"; }
{ nvidia-smi -L; python3 -c 'import os;print("cpus", len(os.sched_getaffinity(0)))'; lscpu | grep -E "^(CPU\(s\)|Thread|Core|Socket|Model name)"; python3 -c 'import torch,torchvision;print(torch.__version__, torchvision.__version__, torch.cuda.device_count(), torch.cuda.nccl.version())'; } 2>&1 | tee $OUT/env.txt
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site .whl/*.whl 2>/dev/null || exit 1
export PYTHONPATH=/tmp/site
cp python/pacer_torch/*.py /tmp/site/pacer_torch/
el "1. CUDA tests"
cd $REPO/python/tests
timeout 230 python3 -m pytest -v -s -p no:cacheprovider --tb=short -rfE test_cuda.py > $OUT/test_cuda.log 2>&1; echo "rc=$?"
grep -E "PASSED|FAILED|relative error|accuracy|global batches|amp " $OUT/test_cuda.log | cut -c1-200
grep -E "^E .*(Error|error|assert)" $OUT/test_cuda.log | sort | uniq -c | head -10 | cut -c1-300
cd /tmp
el "2. GPU overhead resnet18 nccl 1 rank"
f=$OUT/overhead-gpu-resnet18.json
timeout 60 torchrun --nproc_per_node=1 -m pacer_torch.overhead --device cuda --backend nccl --model resnet18 --rounds 4 --steps 40 --warmup 8 > $f 2>> $OUT/errs.log
grep -E '"median_ms"|span_ms|_span_paired"' $f | tr -d '\n '; echo
for k in 2 1; do
el "3.$k CPU overhead, 4 ranks pinned to $k physical cores each, CUDA hidden"
f=$OUT/overhead-cpu-pin$k.json
CUDA_VISIBLE_DEVICES= timeout 110 torchrun --nproc_per_node=4 -m pacer_torch.overhead --rounds 20 --steps 30 --cores-per-rank $k > $f 2>> $OUT/errs.log
grep -E 'rank0_cpus|"median_ms"|_paired"|_quartiles' $f | tr -d '\n '; echo
grep -A5 rank_speeds $f | tr -d '\n '; echo
done
el done
