#!/bin/sh
# usage: pair_run.sh BIN OUTDIR PROFILES "POLICIES": the light and frag seeds 1-10 of docs/mixed-types.md under each policy (--mixed-types), one run at a time
set -e
BIN=$1; OUT=$2; PROF=$3; POLS=$4
DATA=${DATA:-../shared/data/sia}
mkdir -p "$OUT"
for c in light frag; do
  case $c in light) cl=6x2:aws,6x2:dgx-ext,6x2:rtx;; frag) cl=3x2:aws,2x2:dgx-ext,3x2:rtx;; esac
  for pol in $POLS; do
    for s in 1 2 3 4 5 6 7 8 9 10; do
      tag=$c-$pol-$s
      nice -n 5 $BIN simulate \
        --apps sia:$DATA/traces --workload experiments/mixed/$c/workload-$s.csv \
        --cluster $cl --policy $pol --profiles $PROF --json --mixed-types \
        --out "$OUT/out-$tag" >"$OUT/json-$tag.json" 2>"$OUT/err-$tag.txt"
    done
  done
done
