#!/bin/bash
# Both simulators on jittered copies of one trace (docs/elasticflow.md, "Cluster 01 over
# jittered arrivals"): for each seed, jitter_trace.py moves every arrival by up to MAX_S
# seconds (deadlines with it), then ElasticFlow's simulator (ef-accessctrl, run_ef.sh) and
# pacer (elasticflow-s60, same cluster, 60 s rounds) run the same jittered file, one after
# the other. Appends one line per seed to OUT_DIR/results.tsv; jitter_sum.py summarises it.
#   jitter_run.sh EF_DIR PACER OUT_DIR TRACE MAX_S SEED...
# EF_DIR: ElasticFlow/ of a checkout set up as in ANCHORS.md (the residue fixed);
# PACER: the pacer binary; TRACE: cluster01_first400 | cluster04_first400 (converted by
# prod_trace.py into EF_DIR/traces_for_ElasticFlow/) | fig8a (the bundled
# data/elasticflow/traces/elasticVpollux_e.csv). Run from the repository root. ElasticFlow
# runs under `nice -n 10` (100-200 s CPU each on the clusters).
set -euo pipefail
if [ $# -lt 6 ]; then
  echo "usage: $0 EF_DIR PACER OUT_DIR TRACE MAX_S SEED..." >&2
  exit 2
fi
ef=$(realpath "$1"); pacer=$(realpath "$2"); out=$(realpath -m "$3"); trace=$4; max_s=$5
shift 5
here=$(dirname "$0")
case $trace in
  cluster01_first400) src=$ef/traces_for_ElasticFlow/$trace.csv; name=cluster01; cluster=64x8:a100 ;;
  cluster04_first400) src=$ef/traces_for_ElasticFlow/$trace.csv; name=cluster04; cluster=128x8:a100 ;;
  fig8a) src=data/elasticflow/traces/elasticVpollux_e.csv; name=fig8a; cluster=16x4:t4 ;;
  *) echo "jitter_run.sh: unknown trace '$trace' (expected cluster01_first400, cluster04_first400 or fig8a)" >&2; exit 2 ;;
esac
[ -f "$src" ] || { echo "jitter_run.sh: $src not found (prod_trace.py, ANCHORS.md)" >&2; exit 2; }
mkdir -p "$out"
[ -f "$out/results.tsv" ] || printf 'trace\tmax_s\tseed\tef_planned\tef_strict\tef_cpu_s\tpacer_planned\tpacer_strict\tpacer_cpu_s\n' > "$out/results.tsv"
for seed in "$@"; do
  fig=${name}_j${max_s}s${seed}
  file=$ef/traces_for_ElasticFlow/$fig.csv
  python3 "$here/jitter_trace.py" "$src" "$file" "$seed" "$max_s"
  nice -n 10 "$here/run_ef.sh" "$ef" "$fig" ef-accessctrl "$out/ef"
  read -r ef_p ef_s ef_c < <(python3 "$here/strict.py" "$out/ef/$fig/ef-accessctrl" "$file" |
    sed -E 's/planned=([^ ]*) strict=([^ ]*) be_jct_s=[^ ]* cpu_s=([^ ]*)/\1 \2 \3/')
  /usr/bin/time -f '%U %S' -o "$out/$fig.pacer_time" "$pacer" simulate \
    --trace "elasticflow:$file" --elasticflow-tables data/elasticflow --cluster "$cluster" \
    --round-s 60 --policy elasticflow-s60 --json > "$out/$fig.pacer.json"
  read -r p_p p_s < <(python3 -c 'import json,sys
d = json.load(open(sys.argv[1]))[0]["deadlines"]
print("%.3f %.3f" % (d["met_planned"], d["met_strict"]))' "$out/$fig.pacer.json")
  p_c=$(awk '{printf "%.2f", $1 + $2}' "$out/$fig.pacer_time")
  printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$trace" "$max_s" "$seed" "$ef_p" "$ef_s" "$ef_c" \
    "$p_p" "$p_s" "$p_c" | tee -a "$out/results.tsv"
done
