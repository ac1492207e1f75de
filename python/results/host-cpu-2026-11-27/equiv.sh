#!/bin/bash
# equiv.sh PKGDIR TAG: captures every configuration of equiv.py (1 and 4 gloo ranks,
# both engines, SGD / Adam / SGD with a GradScaler) with the pacer_torch package in
# PKGDIR into $EQ/TAG-*, and prints their md5s (compare two TAGs' lists).
here=$(cd "$(dirname "$0")" && pwd)
py=${PY:-/tmp/venv-torchcpu/bin/python}
EQ=${EQ:-/tmp/pacer-equiv}
mkdir -p "$EQ" && cd "$EQ"
export OMP_NUM_THREADS=1 PYTHONPATH=$1
mkdir -p eq
for eng in flat ddp; do for opt in sgd adam scaler; do
  ENGINE=$eng OPT=${opt/scaler/sgd} SCALER=$([ $opt = scaler ] && echo 1) OUT=eq/$2-w1-$eng-$opt $py "$here/equiv.py" || echo FAIL w1 $eng $opt
  ENGINE=$eng OPT=${opt/scaler/sgd} SCALER=$([ $opt = scaler ] && echo 1) OUT=eq/$2-w4-$eng-$opt $py -m torch.distributed.run --nproc_per_node=4 --master_port=29874 "$here/equiv.py" 2>&1 | grep -v Warning | grep -iE "error|fail" ;
done; done
md5sum eq/$2-* | sed "s/$2-//" | sort -k2
