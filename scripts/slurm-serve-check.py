#!/usr/bin/env python3
"""Checks for scripts/slurm-e2e.sh's `pacer serve --executor slurm` phase.

  slurm-serve-check.py placement JOBS_JSON SQUEUE_JSON   squeue's nodes and GPUs = pacer's runs
  slurm-serve-check.py states JOBS_JSON STATE...         every job is in one of STATEs (exit 1 if not)
  slurm-serve-check.py once SQUEUE_JSON MIN_ID           each pacer run was submitted to Slurm once
                                                         (Slurm jobs with id > MIN_ID)
Node i of pacer's cluster is Slurm node n{i+1} (the dev cluster's, in Slurm's order).
"""
import json
import sys


def load(path):
    with open(path) as f:
        return json.load(f)


def jobs_of(doc):
    return doc["jobs"] if isinstance(doc, dict) and "jobs" in doc else doc


def placement(jobs_path, squeue_path):
    jobs = jobs_of(load(jobs_path))
    slurm = {j["name"]: j for j in load(squeue_path)["jobs"] if j["job_state"] == "RUNNING"}
    for j in jobs:
        run = j.get("run")
        if j["state"] != "running" or not run:
            continue
        name = "pacer-%s.%d" % (j["id"], run["attempt"])
        s = slurm.get(name)
        if s is None:
            sys.exit("%s: pacer runs it but squeue shows no running %s" % (j["id"], name))
        want_nodes = ["n%d" % (n + 1) for n, _ in run["alloc"]]
        want_gpus = max(k for _, k in run["alloc"])
        got_nodes = [a["nodename"] for a in s["job_resources"]["allocated_nodes"]]
        got_gpus = [int(g.split("(")[0].split(":")[-1]) for g in s["gres_detail"]]
        print("%s attempt %d: pacer %s -> squeue %s %s (Slurm job %d)"
              % (j["id"], run["attempt"], run["alloc"], got_nodes, s["gres_detail"], s["job_id"]))
        if sorted(got_nodes) != sorted(want_nodes) or any(g != want_gpus for g in got_gpus):
            sys.exit("%s: squeue placement %s %s differs from pacer's %s" % (j["id"], got_nodes, got_gpus, run["alloc"]))


def states(jobs_path, wanted):
    jobs = jobs_of(load(jobs_path))
    bad = [(j["id"], j["state"]) for j in jobs if j["state"] not in wanted]
    print(" ".join("%s=%s" % (j["id"], j["state"]) for j in jobs))
    sys.exit(1 if bad or not jobs else 0)


def once(squeue_path, min_id):
    names = [j["name"] for j in load(squeue_path)["jobs"]
             if j["name"].startswith("pacer-job-") and j["job_id"] > min_id]
    dup = sorted({n for n in names if names.count(n) > 1})
    print("Slurm jobs submitted by pacer serve: %s" % sorted(names))
    if dup:
        sys.exit("submitted more than once: %s" % dup)


if __name__ == "__main__":
    cmd = sys.argv[1]
    if cmd == "placement":
        placement(sys.argv[2], sys.argv[3])
    elif cmd == "states":
        states(sys.argv[2], sys.argv[3:])
    elif cmd == "once":
        once(sys.argv[2], int(sys.argv[3]))
    else:
        sys.exit("unknown check " + cmd)
