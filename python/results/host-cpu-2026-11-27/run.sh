#!/bin/bash
# Before/after CPU time per step (measure.py), alternating the two packages, 3 repeats.
# BEFORE / AFTER: directories holding a pacer_torch package each (the installed package
# of main at 29488ae and of this branch), put first on PYTHONPATH.
set -u
here=$(cd "$(dirname "$0")" && pwd)
py=${PY:-/tmp/venv-torchcpu/bin/python}
export OMP_NUM_THREADS=1
for rep in 1 2 3; do
  for model in tiny cnn; do
    if [ $model = tiny ]; then n=150; r=3; else n=40; r=2; fi
    for w in 1 4; do
      for v in before after; do
        pp=$BEFORE; [ $v = after ] && pp=$AFTER
        echo -n "rep=$rep model=$model world=$w pkg=$v load=$(cut -d' ' -f1 /proc/loadavg) "
        if [ $w = 1 ]; then
          PYTHONPATH=$pp MODEL=$model N=$n R=$r $py "$here/measure.py" 2>/dev/null
        else
          PYTHONPATH=$pp MODEL=$model N=$n R=$r $py -m torch.distributed.run \
            --nproc_per_node=4 --master_port=29877 "$here/measure.py" 2>/dev/null
        fi
      done
    done
  done
done
