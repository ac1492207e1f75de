#!/usr/bin/env python3
"""A job for pacer serve's tests, following the job contract (docs/serve.md):
runs STEPS steps of 0.1 s, reports every 5 steps, checkpoints its step on SIGTERM
(and every 5 steps) in PACER_CHECKPOINT_DIR and resumes from it.

Usage: job.py OUT_DIR STEPS
OUT_DIR/<job>.lock   held (flock) while it runs: a second copy at once is recorded
                     in OUT_DIR/violations
OUT_DIR/accepted.log one line "job index step" per report answered 202
"""
import signal

stop = False


def on_term(*_):
    global stop
    stop = True


signal.signal(signal.SIGTERM, on_term)  # first: a SIGTERM during start-up is a stop too

import fcntl, json, os, sys, time, urllib.request

out, total = sys.argv[1], int(sys.argv[2])
job = os.environ["PACER_JOB_ID"]
lock = open(os.path.join(out, job + ".lock"), "w")
try:
    fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
except OSError:
    with open(os.path.join(out, "violations"), "a") as f:
        f.write(f"{job} ran twice at once\n")
    sys.exit(3)

ckpt = os.path.join(os.environ["PACER_CHECKPOINT_DIR"], "step")
step = int(open(ckpt).read()) if os.path.exists(ckpt) else 0
replicas = int(os.environ["PACER_REPLICAS"])


def save():
    tmp = ckpt + ".tmp"
    with open(tmp, "w") as f:
        f.write(str(step))
    os.replace(tmp, ckpt)


t0 = time.time()
failed_once = False


def report(done):
    global failed_once
    body = {
        "step": step, "samples": step * 32, "time_s": time.time() - t0,
        "replicas": replicas, "device_type": os.environ["PACER_DEVICE_TYPE"],
        "global_batch": 32, "local_batches": [32 // replicas] * replicas,
        "throughput": 320.0 * replicas ** 0.8, "step_time_s": 0.1,
        "noise_scale": 100.0 + step, "loss": 1.0 / (1 + step), "done": done,
    }
    req = urllib.request.Request(
        os.environ["PACER_SERVER"] + "/v1/jobs/" + job + "/reports",
        data=json.dumps(body).encode(), method="POST",
        headers={"Authorization": "Bearer " + os.environ["PACER_TOKEN"],
                 "Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=2) as r:
            ans = json.load(r)
            if r.status == 202:
                with open(os.path.join(out, "accepted.log"), "a") as f:
                    f.write(f"{job} {ans['index']} {step}\n")
    except Exception as e:  # a failed report never stops training; logged once
        if not failed_once:
            print(f"report failed: {e}", file=sys.stderr, flush=True)
            failed_once = True


print(f"{job} starts at step {step} on {replicas} slots {os.environ['PACER_SLOTS']}", flush=True)
while step < total and not stop:
    time.sleep(0.1)
    step += 1
    if step % 5 == 0:
        save()
        report(step >= total)
save()
print(f"{job} {'checkpointed' if stop else 'finished'} at step {step}", flush=True)
sys.exit(0)
