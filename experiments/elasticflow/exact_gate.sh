#!/usr/bin/env bash
# Exactness gate for speed work on `pacer simulate` (docs/elasticflow.md, "Speed"):
# runs two builds on the same configurations and reports, per configuration, whether
# their `--json` outputs are byte-identical once `wall_ms` (the only timing field) is
# stripped. Exit status 0 only when every configuration is identical.
#
#   experiments/elasticflow/exact_gate.sh BIN_A BIN_B
#
# Configurations: the six ElasticFlow-trace policies below at `--replan-on-arrival
# never`, `always` and the default, on every trace of data/elasticflow/traces with its
# cluster and round; the default `pacer simulate` (no arguments, all policies); and,
# when ../shared/data/sia exists, Sia's saturn workload 1 under `sia`, `sia-pacer`,
# `pollux` and `deadline-s60`. Run from the repository root.
set -u
if [ $# -ne 2 ]; then
  echo "usage: $0 BIN_A BIN_B (two pacer binaries)" >&2
  exit 2
fi
A=$1
B=$2
for bin in "$A" "$B"; do
  if [ ! -x "$bin" ]; then
    echo "error: $bin is not an executable file" >&2
    exit 2
  fi
done
if [ ! -d data/elasticflow/traces ]; then
  echo "error: data/elasticflow/traces not found: run from the repository root" >&2
  exit 2
fi

POLICIES=deadline-s60,deadline-s240,elasticflow-s60,elasticflow-s240,edf,dlas-gpu
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
same=0
differ=0

# check NAME ARGS...: runs both binaries with ARGS and compares the stripped outputs.
check() {
  local name=$1
  shift
  local ra rb
  "$A" "$@" >"$TMP/a.json" 2>"$TMP/a.err"
  ra=$?
  "$B" "$@" >"$TMP/b.json" 2>"$TMP/b.err"
  rb=$?
  sed -E 's/"wall_ms": *[0-9.eE+-]+//g' "$TMP/a.json" >"$TMP/a.s"
  sed -E 's/"wall_ms": *[0-9.eE+-]+//g' "$TMP/b.json" >"$TMP/b.s"
  if [ "$ra" -eq "$rb" ] && [ -s "$TMP/a.s" ] && cmp -s "$TMP/a.s" "$TMP/b.s"; then
    echo "identical  $name ($(md5sum <"$TMP/a.s" | cut -c1-12), exit $ra)"
    same=$((same + 1))
  else
    echo "DIFFERENT  $name (exit $ra vs $rb, $(wc -c <"$TMP/a.s") vs $(wc -c <"$TMP/b.s") bytes)"
    differ=$((differ + 1))
  fi
}

# Each trace with its cluster and round ("Run it" in docs/elasticflow.md).
cluster_of() {
  case $1 in
    elasticVpollux_e) echo "16x4:t4 60" ;;
    100jobs_1500lam) echo "16x8:a100 240" ;;
    200jobs_900lam_*) echo "8x8:a100 240" ;;
    *) echo "" ;;
  esac
}

for f in data/elasticflow/traces/*.csv; do
  t=$(basename "$f" .csv)
  read -r cluster round <<<"$(cluster_of "$t")"
  if [ -z "${cluster:-}" ]; then
    echo "DIFFERENT  $t (no cluster known for this trace: add it to cluster_of)"
    differ=$((differ + 1))
    continue
  fi
  for replan in default never always; do
    extra=()
    [ "$replan" != default ] && extra=(--replan-on-arrival "$replan")
    check "$t $cluster round $round replan $replan" simulate --json \
      --elasticflow-tables data/elasticflow --trace "elasticflow:$f" \
      --cluster "$cluster" --round-s "$round" --policy "$POLICIES" "${extra[@]}"
  done
done

check "default simulate" simulate --json

D=../shared/data/sia
if [ -f "$D/workloads/saturn/workload-1.csv" ]; then
  check "sia saturn workload 1" simulate --json --apps "sia:$D/traces" \
    --workload "$D/workloads/saturn/workload-1.csv" --cluster 6x4:aws,2x8:dgx-ext,3x8:rtx \
    --policy sia,sia-pacer,pollux,deadline-s60
else
  echo "skipped    sia saturn workload 1 ($D absent)"
fi

echo "$same identical, $differ different"
[ "$differ" -eq 0 ]
