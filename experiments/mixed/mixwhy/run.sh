#!/bin/sh
# Runs behind docs/mixed-types.md, "Why mixing loses online since MatchedBatch".
# Needs a binary built with diag.patch applied (a diagnostic, not committed code):
#   git apply experiments/mixed/mixwhy/diag.patch && cargo build --release -p pacer-cli
# PACER_MIXDIAG=1: one stderr line per allocation change (types, `*` = the job's own
# online fit there, else projected; the view's predicted step against the tables' at
# the job's batch). PACER_DIAG_PROJ=sia: Sia's projection instead of the policy's.
# Writes OUT/{out,diag}-<cluster><proj><policy>-<seed>; then analyze.py OUT.
set -e
OUT=${1:-/tmp/mixwhy}
DATA=${DATA:-../shared/data/sia}
mkdir -p "$OUT"
for c in light frag; do
  case $c in light) cl=6x2:aws,6x2:dgx-ext,6x2:rtx;; frag) cl=3x2:aws,2x2:dgx-ext,3x2:rtx;; esac
  for proj in M S; do
    for pol in sia-pacer sia-pacer-mix sia-pacer-mix-g1 sia-pacer-mix-post; do
      for s in 1 2 3 4 5 6 7 8 9 10; do
        tag=$c$proj$pol-$s
        if [ $proj = S ]; then p=sia; else p=policy; fi
        PACER_DIAG_PROJ=$p PACER_MIXDIAG=1 nice -n 5 target/release/pacer simulate \
          --apps sia:$DATA/traces --workload experiments/mixed/$c/workload-$s.csv \
          --cluster $cl --policy $pol --profiles online --json --mixed-types \
          --out "$OUT/out-$tag" 2>"$OUT/diag-$tag.txt" >"$OUT/json-$tag.json"
      done
    done
  done
done
