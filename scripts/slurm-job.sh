#!/bin/sh
# A small job following the contract of docs/serve.md ("What a job gets"), for
# scripts/slurm-e2e.sh: STEPS steps of STEP_S seconds, a checkpoint (the step count) in
# $PACER_CHECKPOINT_DIR every CKPT_EVERY steps and on SIGTERM (then exit 143), resumed from
# it on the next start with any allocation. Every rank of a multi-node run (SLURM_PROCID)
# runs the steps; rank 0 owns the checkpoint. Each start prints one line:
#   start RUN rank R/N node NODE gpus DEVICES resume S done D at UNIX_TIME
# where D is the last step rank 0 finished before (a `progress` file written every step):
# D - S is the work this start redoes, which a node failure makes at most CKPT_EVERY; the
# time is when the first step starts (decision-to-first-step overhead, slurm-e2e.sh).
#
#   slurm-job.sh STEPS STEP_S CKPT_EVERY
set -u
steps=${1:?steps} dt=${2:?step seconds} every=${3:?checkpoint interval}
dir=${PACER_CHECKPOINT_DIR:?PACER_CHECKPOINT_DIR is not set}
rank=${SLURM_PROCID:-0}
s=0
[ -f "$dir/step" ] && s=$(cat "$dir/step")
d=$s
[ -f "$dir/progress" ] && d=$(cat "$dir/progress")
echo "start ${PACER_RUN_ID:-?} rank $rank/${SLURM_NTASKS:-1} node ${SLURMD_NODENAME:-?} gpus ${CUDA_VISIBLE_DEVICES:-none} resume $s done $d at $(date +%s.%N)"
save() { [ "$rank" = 0 ] && echo "$1" >"$dir/step.tmp" && mv "$dir/step.tmp" "$dir/step"; }
trap 'save $s; echo "rank $rank: SIGTERM at step $s, checkpointed"; exit 143' TERM
while [ "$s" -lt "$steps" ]; do
    sleep "$dt" &
    wait $!
    s=$((s + 1))
    [ "$rank" = 0 ] && echo "$s" >"$dir/progress"
    [ $((s % every)) -eq 0 ] && save "$s"
done
save "$s"
echo "rank $rank: done at step $s"
