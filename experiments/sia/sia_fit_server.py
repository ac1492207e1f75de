#!/usr/bin/env python3
"""Sia's own `fit_perf_params` as a line server for `sia_fit_server.patch` (issue 25).

  PACER_FIT_SERVER="python experiments/sia/sia_fit_server.py SIA_SIMULATOR_DIR FITS.tab" \\
    PACER_FIT_TABLE=FITS.tab pacer simulate ... --profiles online

Reads one profile per line (`nodes,replicas,atomic_batch,step,sync;` per point, the key the
patched engine writes), fits it with Sia's code and answers `alpha_c beta_c alpha_n beta_n
alpha_r beta_r gamma`; appends every new fit to FITS.tab (the patched engine reads that table
at start, so later runs ask only for new profiles). Needs Sia's Python environment.
"""
import sys, numpy as np
sys.path.insert(0, sys.argv[1])
import warnings; warnings.filterwarnings('ignore')
from goodput import fit_perf_params
out=open(sys.argv[2],'a')
cache={}
for k in sys.stdin:
    k=k.strip()
    if k in cache:
        sys.stdout.write(cache[k]+'\n'); sys.stdout.flush(); continue
    pts=[x.split(',') for x in k.split(';') if x]
    n=np.array([int(p[0]) for p in pts]); r=np.array([int(p[1]) for p in pts]); b=np.array([float(p[2]) for p in pts])
    s=np.array([float(p[3]) for p in pts]); y=np.array([float(p[4]) for p in pts])
    p=' '.join(repr(float(x)) for x in fit_perf_params(n,r,b,s-y,s))
    cache[k]=p
    out.write(k+' '+p+'\n'); out.flush()
    sys.stdout.write(p+'\n'); sys.stdout.flush()
