#!/bin/sh
# Makes the application-mix workloads of experiments/sia/MIXES.md from Sia's artifact.
# usage: experiments/sia/mixes.sh SIA_SIMULATOR_DIR OUT_DIR   (python with numpy+pandas on PATH)
set -eu
sim=$1 out=$2
here=$(dirname "$0")
mkdir -p "$out"
for mix in bert ds2 mixed; do
  python "$here/gen_mix.py" --sia "$sim" --mix $mix --seed 1 --start 600 -o "$out/$mix-1.csv"
  python "$here/gen_mix.py" --sia "$sim" --mix $mix --seed 2 --start 1000 -o "$out/$mix-2.csv"
done
