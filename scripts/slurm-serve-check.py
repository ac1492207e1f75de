#!/usr/bin/env python3
"""Checks for scripts/slurm-e2e.sh's `pacer serve --executor slurm` phase.

  slurm-serve-check.py placement JOBS_JSON SQUEUE_JSON   squeue's nodes and GPUs = pacer's runs
  slurm-serve-check.py states JOBS_JSON STATE...         every job is in one of STATEs (exit 1 if not)
  slurm-serve-check.py once SQUEUE_JSON MIN_ID           each pacer run was submitted to Slurm once
                                                         (Slurm jobs with id > MIN_ID)
  slurm-serve-check.py watch JOBS_JSON SQUEUE_JSON SEEN_JSON
      as placement, for a run Slurm has not started yet too (it may stay pending at most
      PENDING_S seconds, and ended in Slurm before pacer settles it at most ENDED_S),
      recording each checked run in SEEN_JSON
  slurm-serve-check.py workload JOBS_JSON SEEN_JSON [--need-restart]   every job succeeded; one
      multi-node run was checked against squeue; with --need-restart, one job was stopped and
      relaunched (preemption/resize)
  slurm-serve-check.py lost JOBS_JSON LOG_DIR EVERY [TAKEN_NODE TAKEN_GPUS SEEN_JSON]
      every relaunch redid at most EVERY steps (the `start … resume S done D` lines of
      scripts/slurm-job.sh); at least one job was lost and relaunched; no pacer run used
      more than 4 - TAKEN_GPUS GPUs of node TAKEN_NODE (another user's job held those)
  slurm-serve-check.py multinode SEEN_JSON JOB_ID
      some run of JOB_ID was seen RUNNING in squeue on 2 nodes or more (by `watch`)
  slurm-serve-check.py overhead EVENTS_DIR LOG_DIR
      decision-to-first-step time per run (EVENTS_DIR: one `pacer job ID --json` per job)
  slurm-serve-check.py early JOBS_JSON EVENTS_JSON LOG JOB_ID GRACE_S ITERATIONS
      a run stopped right after it started ended within GRACE_S (no SIGKILL), and the job
      finished with the report of ITERATIONS (phase `preempt`, part 2)
  slurm-serve-check.py preempt JOBS_JSON SEEN_JSON EVENTS_JSON LOG SQUEUE_JSON JOB_ID ITERATIONS
      a multi-node `pacer train --slurm` job was stopped and relaunched (phase `preempt`):
      SIGTERM, a checkpoint, a new Slurm job id per attempt, each start resumed at the step
      of the last checkpoint, a different allocation, the report of ITERATIONS at the end;
      no two Slurm jobs of it alive in any squeue snapshot (`watch`) nor overlapping in
      Slurm's start/end times
Node i of pacer's cluster is Slurm node n{i+1} (the dev cluster's, in Slurm's order).
"""
import os
import re
import time

# Longest a run pacer has running may be pending (or missing) in Slurm, and ended in
# Slurm before pacer settles it (rounds are 1 s in slurm-e2e.sh).
PENDING_S = 20
ENDED_S = 5
ENDED = ("COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "OUT_OF_MEMORY",
         "PREEMPTED", "BOOT_FAIL", "DEADLINE", "COMPLETING")
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


def watch(jobs_path, squeue_path, seen_path):
    jobs = jobs_of(load(jobs_path))
    slurm = {j["name"]: j for j in load(squeue_path)["jobs"]}
    seen = load(seen_path) if os.path.exists(seen_path) else {"runs": {}, "pending": {}}
    now = time.time()
    record_overlaps(seen, load(squeue_path)["jobs"], now)
    for j in jobs:
        run = j.get("run")
        if j["state"] != "running" or not run:
            continue
        name = "pacer-%s.%d" % (j["id"], run["attempt"])
        s = slurm.get(name)
        state = s["job_state"] if s else "MISSING"
        if state != "RUNNING":
            # How long this run has been not running in Slurm while pacer has it running,
            # counted from the first look that saw it so (a run Slurm has not started yet,
            # or one that ended and pacer settles at its next round). A run seen RUNNING
            # in between starts afresh: counting from its launch-time PENDING made a
            # 30 s run that had just completed look stuck (the intermittent failure).
            key = "%s %s" % (name, "ended" if state in ENDED else "waiting")
            first = seen["pending"].setdefault(key, now)
            limit = ENDED_S if state in ENDED else PENDING_S
            if now - first > limit:
                sys.exit("%s: pacer runs it for %.0f s but Slurm says %s (%s)"
                         % (name, now - first, state, s and s.get("state_reason")))
            continue
        for key in [k for k in seen["pending"] if k.split(" ")[0] == name]:
            del seen["pending"][key]
        if name in seen["runs"]:
            continue
        want_nodes = ["n%d" % (n + 1) for n, _ in run["alloc"]]
        want_gpus = max(k for _, k in run["alloc"])
        got_nodes = [a["nodename"] for a in s["job_resources"]["allocated_nodes"]]
        got_gpus = [int(g.split("(")[0].split(":")[-1]) for g in s["gres_detail"]]
        print("%s: pacer %s -> squeue %s %s (Slurm job %d)"
              % (name, run["alloc"], got_nodes, s["gres_detail"], s["job_id"]))
        if sorted(got_nodes) != sorted(want_nodes) or any(g != want_gpus for g in got_gpus):
            sys.exit("%s: squeue placement %s %s differs from pacer's %s"
                     % (name, got_nodes, got_gpus, run["alloc"]))
        seen["runs"][name] = {"alloc": run["alloc"], "nodes": got_nodes, "gpus": got_gpus}
    with open(seen_path + ".tmp", "w") as f:
        json.dump(seen, f)
    os.replace(seen_path + ".tmp", seen_path)


# Slurm states of a job that may still run processes (or will).
ALIVE = ("PENDING", "CONFIGURING", "RUNNING", "COMPLETING", "SUSPENDED", "REQUEUED",
         "RESIZING", "SIGNALING", "STAGE_OUT")
RUN_NAME = re.compile(r"^pacer-(.+)\.(\d+)$")


def record_overlaps(seen, slurm_jobs, now):
    """Counts the squeue snapshots and records each one in which two Slurm jobs of the same
    pacer job were alive at once (seen["overlaps"]); `preempt` fails on any."""
    alive = {}
    for j in slurm_jobs:
        m = RUN_NAME.match(j.get("name", ""))
        if m and j["job_state"] in ALIVE:
            alive.setdefault(m.group(1), []).append("%d %s" % (j["job_id"], j["job_state"]))
    seen["snapshots"] = seen.get("snapshots", 0) + 1
    for job, runs in sorted(alive.items()):
        if len(runs) > 1:
            seen.setdefault("overlaps", []).append({"t": now, "job": job, "slurm": runs})


def workload(jobs_path, seen_path, need_restart):
    jobs = jobs_of(load(jobs_path))
    runs = load(seen_path)["runs"]
    bad = [(j["id"], j["state"]) for j in jobs if j["state"] != "succeeded"]
    if bad or not jobs:
        sys.exit("not all jobs succeeded: %s" % bad)
    restarted = [j["id"] for j in jobs if j["restarts"] > 0]
    multi = sorted(n for n, r in runs.items() if len(r["nodes"]) > 1)
    print("%d jobs succeeded; %d runs checked against squeue; stopped and relaunched: %s; "
          "multi-node runs: %s" % (len(jobs), len(runs), restarted, multi))
    if need_restart and not restarted:
        sys.exit("no job was preempted or resized")
    if not multi:
        sys.exit("no multi-node run was checked")


START = re.compile(r"^start (\S+) rank 0/\d+ node \S+ gpus \S+ resume (\d+) done (\d+)"
                   r"(?: at ([0-9.]+))?$")
LAUNCHED = re.compile(r"^attempt (\d+) on .* \(pid \d+, (\d+) ms after the decision\)$")


def lost(jobs_path, log_dir, every, taken=None):
    jobs = jobs_of(load(jobs_path))
    worst, relaunched = 0, []
    for j in jobs:
        if j["state"] != "succeeded":
            sys.exit("%s: %s (%s)" % (j["id"], j["state"], j.get("last_exit")))
        with open(os.path.join(log_dir, j["id"] + ".log")) as f:
            starts = [m.groups() for m in map(START.match, f.read().splitlines()) if m]
        for run, resume, done, _ in starts[1:]:
            redo = int(done) - int(resume)
            print("%s %s: resumed at step %s, last step done before %s: %d steps redone"
                  % (j["id"], run, resume, done, redo))
            worst = max(worst, redo)
            relaunched.append(j["id"])
    print("most steps redone by one relaunch: %d (checkpoint interval %d)" % (worst, every))
    if worst > every:
        sys.exit("a relaunch redid more than one checkpoint interval")
    lost_runs = [j["id"] for j in jobs if "lost" in (j.get("last_exit") or "") or j["restarts"] > 0]
    if not relaunched or not lost_runs:
        sys.exit("no job was relaunched")
    if taken:
        node, gpus, seen_path = taken
        runs = load(seen_path)["runs"]
        for name, r in runs.items():
            on = sum(k for n, k in r["alloc"] if "n%d" % (n + 1) == node)
            if on > 4 - gpus:
                sys.exit("%s used %d GPUs of %s, where another user's job held %d"
                         % (name, on, node, gpus))
        print("no pacer run used more than %d GPUs of %s (another user's job held %d)"
              % (4 - gpus, node, gpus))


def overhead(events_dir, log_dir):
    """Decision-to-first-step time of every run: from pacer's decision (its `launched`
    event, less the milliseconds since the decision it records) to the run's rank-0
    `start … at T` line (scripts/slurm-job.sh prints it as its first step begins)."""
    firsts = {}
    for name in os.listdir(log_dir):
        with open(os.path.join(log_dir, name)) as f:
            for m in map(START.match, f.read().splitlines()):
                if m and m.group(4):
                    firsts.setdefault(m.group(1), float(m.group(4)))
    times = []
    for name in sorted(os.listdir(events_dir)):
        events = load(os.path.join(events_dir, name)).get("events", [])
        for i, e in enumerate(events):
            m = LAUNCHED.match(e.get("detail", "")) if e.get("kind") == "launched" else None
            if not m:
                continue
            run = "%s:%s" % (e["job"], m.group(1))
            decided = e["t_ms"] / 1000.0 - int(m.group(2)) / 1000.0
            # A run stopped before Slurm started it (pending, or its ranks' step not
            # there yet) is cancelled: it never has a first step.
            end = next((x for x in events[i + 1:] if x["kind"] not in ("stopping",)), None)
            if run not in firsts and end and end["kind"] == "queued" and end.get("detail") == "killed":
                print("%s: stopped and cancelled before it started (no first step)" % run)
                continue
            if run not in firsts:
                sys.exit("%s: launched, but its log has no start line" % run)
            dt = firsts[run] - decided
            times.append(dt)
            print("%s: decision -> first step %.2f s" % (run, dt))
    if not times:
        sys.exit("no launched run to measure")
    times.sort()
    print("decision -> first step over %d runs: min %.2f s, median %.2f s, max %.2f s"
          % (len(times), times[0], times[len(times) // 2], times[-1]))


def multinode(seen_path, job_id):
    runs = load(seen_path)["runs"] if os.path.exists(seen_path) else {}
    mine = {k: r for k, r in runs.items() if k.startswith("pacer-%s." % job_id)}
    wide = [k for k, r in mine.items() if len(r["nodes"]) >= 2]
    if not wide:
        sys.exit("%s: no run seen in squeue on 2 nodes or more (seen: %s)" % (job_id, mine))
    for k in wide:
        print("%s: squeue showed it on %s with gpus %s" % (k, mine[k]["nodes"], mine[k]["gpus"]))


TRAIN_START = re.compile(r"^pacer train: rank 0 of (\d+) on (\S+),")
CKPT = re.compile(r"^pacer controller: checkpoint of step (\d+) ")
RESUME = re.compile(r"^pacer controller: resuming from \S+ at step (\d+) ")
TERMED = re.compile(r"^pacer: interrupted \(SIGTERM\) after (\d+) iterations")


def train_log(log_path, every_rank=True):
    """The story of a `pacer train --slurm` job's log: (starts, sigterms, checkpoints,
    resumes, last reported iterations), failing when a start after the first did not resume
    or resumed anywhere but at the last checkpoint's step, or the step counter went back."""
    with open(log_path) as f:
        text = f.read()
    starts, termed, ckpts, resumes = [], [], [], []
    last_ckpt, resumed = None, True
    for line in text.splitlines():
        if TRAIN_START.match(line):
            if not resumed:
                sys.exit("%s: a start after a checkpoint did not resume from it (%d start(s))"
                         % (log_path, len(starts)))
            starts.append(TRAIN_START.match(line).groups())
            resumed = last_ckpt is None
        elif CKPT.match(line):
            k = int(CKPT.match(line).group(1))
            if last_ckpt is not None and k < last_ckpt:
                sys.exit("%s: checkpoint of step %d after one of step %d" % (log_path, k, last_ckpt))
            ckpts.append(k)
            last_ckpt = k
        elif RESUME.match(line):
            k = int(RESUME.match(line).group(1))
            if k != last_ckpt:
                sys.exit("%s: resumed at step %d, the last checkpoint was of step %s"
                         % (log_path, k, last_ckpt))
            resumes.append(k)
            resumed = True
        elif TERMED.match(line):
            termed.append(int(TERMED.match(line).group(1)))
    if not resumed:
        sys.exit("%s: the last start did not resume from the checkpoint" % log_path)
    reported = [int(n) for n in re.findall(r'"iterations": *(\d+)', text)]
    # Every worker rank of every start ended when its controller shut it down, without
    # an error (a rank srun or Slurm killed prints nothing; one cut off prints its error).
    # With every_rank=False (a run stopped as it started: a rank may die of the SIGTERM
    # before its handler is in place, or leave before its controller answered) only no
    # error is required.
    ended = re.findall(r"^pacer train: rank [1-9]\d* on \S+: \d+ worker\(s\) trained \d+ steps(.*)$",
                       text, re.M)
    others = sum(int(n) - 1 for n, _ in starts)
    if (every_rank and len(ended) != others) or any(ended):
        sys.exit("%s: %d worker ranks started, %d ended cleanly: %s"
                 % (log_path, others, len([e for e in ended if not e]), [e for e in ended if e]))
    return starts, termed, ckpts, resumes, reported


def preempt(jobs_path, seen_path, events_path, log_path, squeue_path, job_id, iterations):
    job = next((j for j in jobs_of(load(jobs_path)) if j["id"] == job_id), None)
    if job is None or job["state"] != "succeeded":
        sys.exit("%s: %s" % (job_id, job and (job["state"], job.get("last_exit"))))
    events = load(events_path).get("events", [])
    launched = {}
    for e in events:
        m = LAUNCHED_PID.match(e.get("detail", "")) if e.get("kind") == "launched" else None
        if m:
            launched[int(m.group(1))] = int(m.group(2))
    stops = [e["detail"] for e in events if e.get("kind") == "stopping"]
    # What each stopped run ended with: the job's own exit (143 after its checkpoint), not
    # the service's SIGKILL after the grace period.
    settled = [e["detail"] for e in events if e.get("kind") == "queued" and e.get("detail")]
    print("%s: %d attempts, Slurm job ids %s; stops: %s; stopped runs ended: %s"
          % (job_id, len(launched), [launched[a] for a in sorted(launched)], stops, settled))
    # Each stop's timeline: SIGTERM → the run's exit seen → the next attempt launched.
    t = {}
    for e in events:
        if e.get("kind") in ("stopping", "queued", "launched"):
            t.setdefault(e["kind"], []).append(e["t_ms"] / 1000.0)
    for i, t_stop in enumerate(t.get("stopping", [])):
        t_exit = next((x for x in t.get("queued", []) if x >= t_stop), None)
        t_next = next((x for x in t.get("launched", []) if x >= t_stop), None)
        if t_exit is not None and t_next is not None:
            print("%s stop %d: SIGTERM -> exit seen %.1f s -> relaunched %.1f s"
                  % (job_id, i + 1, t_exit - t_stop, t_next - t_stop))
    if len(launched) < 2 or not stops:
        sys.exit("%s was not stopped and relaunched" % job_id)
    if len(set(launched.values())) != len(launched):
        sys.exit("%s: an attempt reused a Slurm job id: %s" % (job_id, launched))
    # A stop of the last attempt can cross its own end: the run finishes its iterations in
    # the round the policy resizes it, and ends as the job's success (exit 0, checked above)
    # instead of being requeued; every other stop must be settled by the run's own 143.
    last_stop_finished = len(stops) == len(launched) and events[-1].get("kind") == "succeeded"
    if any(d != "exit 143" for d in settled) or len(settled) != len(stops) - last_stop_finished:
        sys.exit("%s: a stopped run did not checkpoint and exit 143 itself: %s" % (job_id, settled))
    starts, termed, ckpts, resumes, reported = train_log(log_path)
    print("%s: rank-0 starts %s; SIGTERM after %s iterations; checkpoints of steps %s; "
          "resumed at steps %s; reports of %s iterations"
          % (job_id, starts, termed, ckpts, resumes, reported))
    # (The run that finished may or may not have logged the SIGTERM it got at its end.)
    settled_stops = len(stops) - last_stop_finished
    if (len(starts) != len(launched) or not settled_stops <= len(termed) <= len(stops)
            or len(resumes) != settled_stops):
        sys.exit("%s: %d attempts and %d stops, but the log has %d starts, %d SIGTERMs and "
                 "%d resumes" % (job_id, len(launched), len(stops), len(starts), len(termed),
                                 len(resumes)))
    if max(resumes) == 0:
        sys.exit("%s: every relaunch resumed at step 0" % job_id)
    if not reported or reported[-1] != iterations:
        sys.exit("%s: the last report is not of %d iterations: %s" % (job_id, iterations, reported))
    # The allocations Slurm ran each attempt on (`watch`), and Slurm's own ids for them.
    runs = load(seen_path)["runs"]
    slurm = {j["name"]: j for j in load(squeue_path)["jobs"]}
    shapes = []
    for a in sorted(launched):
        name = "pacer-%s.%d" % (job_id, a)
        r = runs.get(name)
        s = slurm.get(name)
        if r is None or s is None:
            sys.exit("%s: attempt %d was never seen running in squeue" % (job_id, a))
        if s["job_id"] != launched[a]:
            sys.exit("%s: pacer recorded Slurm job %d, squeue has %d" % (name, launched[a], s["job_id"]))
        shapes.append((tuple(sorted(r["nodes"])), tuple(r["gpus"])))
        print("%s: Slurm job %d on %s, gpus per node %s, %s"
              % (name, s["job_id"], r["nodes"], r["gpus"], s["job_state"]))
    if len(shapes[0][0]) < 2:
        sys.exit("%s: the first attempt ran on one node" % job_id)
    if all(sh[0] == shapes[0][0] for sh in shapes):
        sys.exit("%s: every attempt ran on the same nodes %s" % (job_id, shapes[0][0]))
    # Never two Slurm jobs of it at once: in any snapshot, nor in Slurm's times.
    seen = load(seen_path)
    overlaps = [o for o in seen.get("overlaps", []) if o["job"] == job_id]
    if overlaps:
        sys.exit("%s: two Slurm jobs alive at once: %s" % (job_id, overlaps[:3]))
    mine = sorted((j for j in slurm.values() if RUN_NAME.match(j["name"])
                   and RUN_NAME.match(j["name"]).group(1) == job_id), key=lambda j: j["start_time"])
    for a, b in zip(mine, mine[1:]):
        if a["end_time"] > b["start_time"]:
            sys.exit("%s (ended %d) overlaps %s (started %d)"
                     % (a["name"], a["end_time"], b["name"], b["start_time"]))
    print("%s: no two Slurm jobs of it alive at once (%d squeue snapshots; start/end times of "
          "%d Slurm jobs)" % (job_id, seen.get("snapshots", 0), len(mine)))


def early(jobs_path, events_path, log_path, job_id, grace_s, iterations):
    """A multi-node run stopped right after Slurm started it (phase `preempt`, part 2):
    the stop took less than the grace period (no SIGKILL: a SIGTERM Slurm dropped because
    the ranks' job step did not exist yet left the run training until then), the job
    finished, and each start resumed from the last checkpoint when there was one."""
    job = next((j for j in jobs_of(load(jobs_path)) if j["id"] == job_id), None)
    if job is None or job["state"] != "succeeded":
        sys.exit("%s: %s" % (job_id, job and (job["state"], job.get("last_exit"))))
    events = load(events_path).get("events", [])
    for e in events:
        print("%s %.1f %s: %s" % (job_id, e["t_ms"] / 1000.0 % 1000, e["kind"], e.get("detail", "")))
    stops = [e["t_ms"] / 1000.0 for e in events if e["kind"] == "stopping"]
    # A stopped run ends requeued, or, when it finished as the stop reached it (the last
    # stop of a short job on a loaded machine), with the job's own end.
    ends = [(e["t_ms"] / 1000.0, e.get("detail")) for e in events
            if e["kind"] in ("queued", "succeeded")]
    if not stops:
        sys.exit("%s was not stopped" % job_id)
    if any(e["kind"] == "killed" for e in events):
        sys.exit("%s: a stopped run was killed after the grace period" % job_id)
    for t in stops:
        end = next(((u, d) for u, d in ends if u >= t), None)
        if end is None or end[0] - t >= grace_s:
            sys.exit("%s: the run stopped at %.1f did not end within %.0f s" % (job_id, t, grace_s))
        print("%s: stopped, ended (%s) %.1f s later" % (job_id, end[1], end[0] - t))
    starts, termed, ckpts, resumes, reported = train_log(log_path, every_rank=False)
    early_exits = len(re.findall(r"^pacer train: rank \d+ on \S+: SIGTERM before the controller",
                                 open(log_path).read(), re.M))
    if not reported or reported[-1] != iterations:
        sys.exit("%s: the last report is not of %d iterations: %s" % (job_id, iterations, reported))
    print("%s: worker ranks that left before their controller answered: %d" % (job_id, early_exits))
    print("%s: rank-0 starts %s; SIGTERM after %s iterations; checkpoints %s; resumes %s; "
          "reports %s" % (job_id, starts, termed, ckpts, resumes, reported))


TORCH_TYPED = re.compile(
    r"^torch rank (\d+) of (\d+) on (\S+): (\d+) steps, .*type (\S+), mean local batch ([0-9.]+)")


def mixed(log_path, runs_wanted):
    """The first run of a job across types: every rank printed its line, ranks of both
    types, and the faster type's ranks (a100) had larger mean local batches than the
    slower type's (t4). At least `runs_wanted` runs printed (a resized job: 2)."""
    lines = []
    with open(log_path) as f:
        for line in f:
            m = TORCH_TYPED.match(line)
            if m:
                lines.append((int(m.group(2)), m.group(5), float(m.group(6))))
    if not lines:
        sys.exit("mixed: no typed rank line in %s" % log_path)
    runs, at = [], 0
    while at < len(lines):
        world = lines[at][0]
        runs.append(lines[at:at + world])
        at += world
    first = runs[0]
    by_type = {}
    for world, t, b in first:
        by_type.setdefault(t, []).append(b)
    if len(first) != first[0][0] or any(w != first[0][0] for w, _, _ in first):
        sys.exit("mixed: the first run's lines do not cover its world: %s" % first)
    if set(by_type) != {"t4", "a100"}:
        sys.exit("mixed: the first run's ranks ran on types %s, not on both t4 and a100" % sorted(by_type))
    slow, fast = max(by_type["t4"]), min(by_type["a100"])
    if not fast > 1.5 * slow:
        sys.exit("mixed: a100 ranks' mean local batch %.1f is not well above t4's %.1f: %s"
                 % (fast, slow, by_type))
    if len(runs) < runs_wanted:
        sys.exit("mixed: %d run(s) printed, %d wanted: %s" % (len(runs), runs_wanted, runs))
    print("mixed: first run %d ranks, mean local batch a100 %s, t4 %s; runs (world sizes) %s"
          % (len(first), by_type["a100"], by_type["t4"], [r[0][0] for r in runs]))


LAUNCHED_PID = re.compile(r"^attempt (\d+) on .* \(pid (\d+),")


if __name__ == "__main__":
    cmd = sys.argv[1]
    if cmd == "placement":
        placement(sys.argv[2], sys.argv[3])
    elif cmd == "states":
        states(sys.argv[2], sys.argv[3:])
    elif cmd == "once":
        once(sys.argv[2], int(sys.argv[3]))
    elif cmd == "watch":
        watch(sys.argv[2], sys.argv[3], sys.argv[4])
    elif cmd == "workload":
        workload(sys.argv[2], sys.argv[3], "--need-restart" in sys.argv[4:])
    elif cmd == "multinode":
        multinode(sys.argv[2], sys.argv[3])
    elif cmd == "overhead":
        overhead(sys.argv[2], sys.argv[3])
    elif cmd == "preempt":
        preempt(*sys.argv[2:8], int(sys.argv[8]))
    elif cmd == "early":
        early(*sys.argv[2:6], float(sys.argv[6]), int(sys.argv[7]))
    elif cmd == "mixed":
        mixed(sys.argv[2], int(sys.argv[3]) if len(sys.argv) > 3 else 1)
    elif cmd == "lost":
        extra = (sys.argv[5], int(sys.argv[6]), sys.argv[7]) if len(sys.argv) > 7 else None
        lost(sys.argv[2], sys.argv[3], int(sys.argv[4]), extra)
    else:
        sys.exit("unknown check " + cmd)
