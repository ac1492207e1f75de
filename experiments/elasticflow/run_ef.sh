#!/bin/bash
# Runs ElasticFlow's own simulator (gudiandian/ElasticFlow, scheduler/scheduler.py) for one
# figure and one policy, and records its CPU seconds. See ANCHORS.md.
#   run_ef.sh EF_DIR FIGURE POLICY OUT_DIR
# EF_DIR: the ElasticFlow/ folder of an extracted ElasticFlow checkout (gRPC stubs made);
# FIGURE: fig8a[_SUFFIX] (fig8a_SUFFIX: traces_for_ElasticFlow/fig8a_SUFFIX.csv, e.g. a
# jittered copy, jitter_run.sh, on Figure 8(a)'s cluster) | fig10 | fig11be10 | fig11be50 (Figure 11's setup at 10 % and 50 % best
# effort, ANCHORS.md) | clusterNN[_SUFFIX] (a production trace of Figure 8(b), converted by
# prod_trace.py into traces_for_ElasticFlow/clusterNN[_SUFFIX].csv; the cluster is Figure
# 8(b)'s, run_fig8b.sh: 64x8 A100 for 01, 02, 03, 05, 06, 128x8 for 04, 07, 08, 09, 32x8
# for 10; 60 s slots); POLICY: ef-accessctrl | edf | gandiva | dlas-gpu | themis.
set -euo pipefail
ef=$1; fig=$2; pol=$3; out=$(realpath -m "$4")
case $fig in
  fig8a) spec=n16g4; trace=elasticVpollux_e.csv; slot=60; gpu=T4 ;;
  fig8a_*) spec=n16g4; trace=$fig.csv; slot=60; gpu=T4 ;;
  fig10) spec=n16g8; trace=100jobs_1500lam.csv; slot=240; gpu=A100 ;;
  fig11be10) spec=n8g8; trace=200jobs_900lam_0.1.csv; slot=240; gpu=A100 ;;
  fig11be50) spec=n8g8; trace=200jobs_900lam_0.5.csv; slot=240; gpu=A100 ;;
  cluster0[12356]*) spec=n64g8; trace=$fig.csv; slot=60; gpu=A100 ;;
  cluster0[4789]*) spec=n128g8; trace=$fig.csv; slot=60; gpu=A100 ;;
  cluster10*) spec=n32g8; trace=$fig.csv; slot=60; gpu=A100 ;;
  *) echo "run_ef.sh: unknown figure '$fig' (expected fig8a[_SUFFIX], fig10, fig11be10, fig11be50 or clusterNN[_SUFFIX])" >&2; exit 2 ;;
esac
scheme=elastic; [ "$pol" = gandiva ] && scheme=gandiva
mkdir -p "$out/$fig/$pol"
cd "$ef/scheduler"
/usr/bin/time -f "%U %S %e" -o "$out/$fig/$pol/time.txt" \
  python3 scheduler.py --cluster_spec=cluster_specs/$spec.csv --print --scheme=$scheme \
  --trace_file=../traces_for_ElasticFlow/$trace --schedule=$pol --log_path="$out/$fig/$pol" \
  --simulation=True --scheduling_slot=$slot --gpu_type=$gpu > "$out/$fig/$pol/stdout.txt" 2>&1
echo "$fig $pol cpu_s=$(awk '{print $1+$2}' "$out/$fig/$pol/time.txt") $(tail -n1 "$out/$fig/$pol/final_result.csv")"
