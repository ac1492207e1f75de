#!/usr/bin/env python3
"""Mixed-type model vs pacer_torch (issue 26, "model vs measured"), the PyTorch half of
validate_runtime.py.

For each mix of device types, with speeds equal to the types' measured one-device
throughput ratios in Sia's tables (per application), this script uses pacer_torch's own
benchmark (``pacer_torch.bench``: 4 gloo ranks under torchrun, MNIST MLP, ranks emulated at
their speed by padding to a calibrated noise-free device) to
  1. run all four ranks at one type's speed (pacer, lbbsp) at the global batch B and
     B/2, and fit that type's step time ``alpha + beta * local_batch``;
  2. predict the mixed run with ``pacer batching mixed`` (the worker level's own
     controller balancing the types);
  3. run the mix itself to the target accuracy: its mean step time and time to target,
     against the prediction (the one-type run's steps to target at B times the
     predicted step).

Needs Sia's tables ($SIA/traces, default ../shared/data/sia/traces), MNIST
(../shared/data/mnist) and a Python with torch and pacer_torch (run it with that Python,
e.g. ~/.cache/pacer/venv/bin/python); says so and exits 2 when missing.

    ~/.cache/pacer/venv/bin/python experiments/mixed/validate_torch.py
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, HERE)
from validate_runtime import fit_line, one_device_throughput  # noqa: E402

MIXES = [
    ("deepspeech2 a100+rtx", "deepspeech2", [("dgx-ext", 2), ("rtx", 2)]),
    ("imagenet rtx+t4", "imagenet", [("rtx", 2), ("aws", 2)]),
    ("cifar10 a100+t4", "cifar10", [("dgx-ext", 1), ("aws", 3)]),
]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--pacer", default=os.path.join(ROOT, "target/release/pacer"))
    ap.add_argument("--sia", default=os.environ.get("SIA", os.path.join(ROOT, "../shared/data/sia")))
    ap.add_argument("--data", default=os.path.join(ROOT, "../shared/data/mnist"))
    ap.add_argument("--batch", type=int, default=512)
    ap.add_argument("--steps", type=int, default=40, help="steps of each one-type run")
    ap.add_argument("--time-scale", type=float, default=16.0)
    ap.add_argument("--target", type=float, default=0.95)
    ap.add_argument("--out", default=os.path.join(HERE, "results-torch.json"))
    args = ap.parse_args()
    try:
        import torch  # noqa: F401
        from pacer_torch import bench
    except ImportError as e:
        print(f"this experiment needs torch and pacer_torch in {sys.executable}: {e}", file=sys.stderr)
        sys.exit(2)
    traces = os.path.join(args.sia, "traces")
    for what, path in (("Sia's tables", traces), ("MNIST", args.data)):
        if not os.path.isdir(path):
            print(f"{what} not found at {path}: this experiment needs them", file=sys.stderr)
            sys.exit(2)

    def bench_args(batch):
        # The options `python -m pacer_torch.bench` would pass its runs.
        return argparse.Namespace(
            predictor="ewma", global_batch=batch, time_scale=args.time_scale, time_scale_mlp=64.0,
            time_scale_cnn=16.0, target=args.target, eval_every=10, eval_samples=2000, warmup=5,
            seed=0, emulation="calibrated", calibrate_reps=20, slowdown=None, lr=None,
            data=args.data, trace=False, trace_keep=None, run_timeout=1800.0, emulation_cost=None)

    cost = None  # the calibrated device, measured by the first run and reused by all

    def run(speeds, batch, target, steps):
        nonlocal cost
        a = bench_args(batch)
        r = bench.run_one(a, "mlp", "pacer", "lbbsp", ",".join(f"{s:.6g}" for s in speeds),
                          target, False, steps, cost)
        if cost is None:
            cost = tuple(r["emulation_cost_s"])
        return r

    one_type = {}

    def profile(speed):
        key = round(speed, 6)
        if key not in one_type:
            points = []
            for b in (args.batch, args.batch // 2):
                r = run([speed] * 4, b, 2.0, args.steps)  # target 2.0: never reached
                points.append((b / 4, r["step_s_mean"] * 1e3))
            a, b = fit_line(points)
            one_type[key] = (a, b)
            print(f"  one type at speed {speed:.3f}: step {a:.2f} + {b:.4f}·b ms", flush=True)
        return one_type[key]

    rows = []
    ref = None
    for name, app, groups in MIXES:
        tput = {t: one_device_throughput(traces, app, t) for t, _ in groups}
        fastest = max(tput.values())
        speed = {t: tput[t] / fastest for t in tput}
        print(f"{name}: speeds {', '.join(f'{t} {s:.3f}' for t, s in speed.items())}", flush=True)
        job_groups = []
        for t, n in groups:
            a, b = profile(speed[t])
            job_groups.append({"type": t, "replicas": n, "max_atomic": args.batch,
                               "perf": {"alpha_c": max(a, 0.0) / 1e3, "beta_c": b / 1e3,
                                        "alpha_n": 0.0, "beta_n": 0.0, "alpha_r": 0.0,
                                        "beta_r": 0.0, "gamma": 1.0}})
        with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as f:
            json.dump({"nodes": 1, "global_batch": args.batch, "groups": job_groups}, f)
            spec = f.name
        pred = json.loads(subprocess.run(
            [args.pacer, "batching", "mixed", spec, "--controller", "lbbsp", "--json"],
            check=True, capture_output=True, text=True).stdout)
        os.unlink(spec)
        if ref is None:
            ref = run([1.0] * 4, args.batch, args.target, 600)
        speeds = [speed[t] for t, n in groups for _ in range(n)]
        mixed = run(speeds, args.batch, args.target, 600)
        pred_ms, meas_ms = pred["step_s"] * 1e3, mixed["step_s_mean"] * 1e3
        pred_tta = ref["steps_to_target"] * pred["step_s"] if ref["time_to_target_s"] else None
        meas_tta = mixed["time_to_target_s"]
        row = {"mix": name, "speeds": speeds, "predicted_step_ms": pred_ms, "measured_step_ms": meas_ms,
               "step_error": pred_ms / meas_ms - 1,
               "predicted_batches": [b for g in pred["groups"] for b in g["local_batches"]],
               "measured_batches_last": mixed["batches_every_10_steps"][-1:] if mixed["batches_every_10_steps"] else None,
               "reference_steps_to_target": ref["steps_to_target"],
               "mixed_steps_to_target": mixed["steps_to_target"],
               "predicted_tta_s": pred_tta, "measured_tta_s": meas_tta,
               "tta_error": (pred_tta / meas_tta - 1) if pred_tta and meas_tta else None}
        rows.append(row)
        print(f"  predicted {pred_ms:.1f} ms/step, measured {meas_ms:.1f} ({row['step_error']:+.1%}); "
              f"batches {row['predicted_batches']} vs {row['measured_batches_last']}; TTA predicted "
              f"{pred_tta or float('nan'):.1f} s, measured {meas_tta or float('nan'):.1f} s"
              + (f" ({row['tta_error']:+.1%})" if row["tta_error"] is not None else ""), flush=True)
    with open(args.out, "w") as f:
        json.dump({"time_scale": args.time_scale, "batch": args.batch, "target": args.target,
                   "emulation_cost_s": cost, "rows": rows}, f, indent=1)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
