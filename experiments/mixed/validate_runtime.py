#!/usr/bin/env python3
"""Mixed-type model vs the Rust runtime (issue 26, "model vs measured").

For each mix of device types, with speeds equal to the types' measured one-device
throughput ratios in Sia's tables (per application), this script
  1. runs `pacer train` with all four workers of one type (one-type runs), at the
     global batch B and at B/2, and fits that type's compute time per step
     `alpha + beta * local_batch` to the workers' measured steps;
  2. predicts the mixed run with `pacer batching mixed` (the worker level's own
     controller balancing the types, plus the one-type runs' measured overhead);
  3. runs `pacer train` on the mix itself, and compares step time and time to the
     target accuracy (predicted: the one-type run's iterations to target at B times
     the predicted step).
Emulated speeds are CPU-time based (pacer_runtime::emulation), so the figures hold on
a loaded machine as long as overruns stay low (reported).

Needs Sia's tables ($SIA/traces, default ../shared/data/sia/traces) for the ratios and
MNIST ($MNIST, default ../shared/data/mnist); says so and exits 2 when missing.

    python3 experiments/mixed/validate_runtime.py [--pacer target/release/pacer]
"""
import argparse
import csv
import json
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))

# (name, application whose tables give the ratios, [(type, replicas)])
MIXES = [
    ("deepspeech2 a100+rtx", "deepspeech2", [("dgx-ext", 2), ("rtx", 2)]),
    ("imagenet rtx+t4", "imagenet", [("rtx", 2), ("aws", 2)]),
    ("deepspeech2 a100+rtx+t4", "deepspeech2", [("dgx-ext", 1), ("rtx", 1), ("aws", 2)]),
    ("cifar10 a100+t4", "cifar10", [("dgx-ext", 1), ("aws", 3)]),
]


def one_device_throughput(traces, app, gpu_type):
    """Largest samples/s of one device of the type in Sia's placements table."""
    path = os.path.join(traces, app, f"placements-{gpu_type}.csv")
    with open(path) as f:
        rows = [r for r in csv.DictReader(f) if r["placement"] == "1"]
    if not rows:
        sys.exit(f"{path}: no one-device rows")
    return max(float(r["local_bsz"]) / float(r["step_time"]) for r in rows)


def train(pacer, mnist, speeds, batch, args, target=None):
    cmd = [
        pacer, "train", "--dataset", f"mnist:{mnist}", "--workers", str(len(speeds)),
        "--speeds", ",".join(f"{s:.6g}" for s in speeds), "--time-scale", str(args.time_scale),
        "--global-batch", str(batch), "--controller", args.controller, "--seed", str(args.seed),
        "--no-progress", "--json", "--eval-every", "10",
    ]
    if target is None:
        cmd += ["--max-iterations", str(args.iterations)]
    else:
        cmd += ["--target-accuracy", str(target), "--max-iterations", "5000"]
    out = subprocess.run(cmd, check=True, capture_output=True, text=True, timeout=1800)
    return json.loads(out.stdout)


def fit_line(points):
    """Least squares y = a + b x."""
    n = len(points)
    mx = sum(x for x, _ in points) / n
    my = sum(y for _, y in points) / n
    sxx = sum((x - mx) ** 2 for x, _ in points)
    b = sum((x - mx) * (y - my) for x, y in points) / sxx
    return my - b * mx, b


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--pacer", default=os.path.join(ROOT, "target/release/pacer"))
    ap.add_argument("--sia", default=os.environ.get("SIA", os.path.join(ROOT, "../shared/data/sia")))
    ap.add_argument("--mnist", default=os.environ.get("MNIST", os.path.join(ROOT, "../shared/data/mnist")))
    ap.add_argument("--batch", type=int, default=512)
    ap.add_argument("--iterations", type=int, default=300)
    ap.add_argument("--time-scale", type=float, default=16.0)
    ap.add_argument("--controller", default="lbbsp")
    ap.add_argument("--target", type=float, default=0.95)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--out", default=os.path.join(HERE, "results-runtime.json"))
    args = ap.parse_args()
    traces = os.path.join(args.sia, "traces")
    for what, path in (("Sia's tables", traces), ("MNIST", args.mnist)):
        if not os.path.isdir(path):
            print(f"{what} not found at {path}: this experiment needs them", file=sys.stderr)
            sys.exit(2)

    one_type = {}  # speed -> (alpha_ms, beta_ms, overhead_ms, iterations to target, tta_s)

    def profile(speed):
        key = round(speed, 6)
        if key in one_type:
            return one_type[key]
        points, overheads = [], []
        for b in (args.batch, args.batch // 2):
            r = train(args.pacer, args.mnist, [speed] * 4, b, args)
            for w in r["worker_stats"]:
                points.append((w["mean_batch"], w["mean_step_ms"]))
            overheads.append(r["mean_iter_s"] * 1e3 - max(w["mean_step_ms"] for w in r["worker_stats"]))
        a, b = fit_line(points)
        one_type[key] = (max(a, 0.0), b, sum(overheads) / len(overheads))
        print(f"  one type at speed {speed:.3f}: compute {a:.3f} + {b:.5f}·b ms, overhead {one_type[key][2]:.3f} ms", flush=True)
        return one_type[key]

    rows = []
    for name, app, groups in MIXES:
        tput = {t: one_device_throughput(traces, app, t) for t, _ in groups}
        fastest = max(tput.values())
        speeds_by_type = {t: tput[t] / fastest for t in tput}
        print(f"{name}: speeds {', '.join(f'{t} {s:.3f}' for t, s in speeds_by_type.items())}", flush=True)
        job_groups, overhead = [], []
        for t, n in groups:
            a, b, o = profile(speeds_by_type[t])
            overhead.append(o)
            job_groups.append({"type": t, "replicas": n, "max_atomic": args.batch,
                               "perf": {"alpha_c": a / 1e3, "beta_c": b / 1e3,
                                        "alpha_n": 0.0, "beta_n": 0.0,
                                        "alpha_r": 0.0, "beta_r": 0.0, "gamma": 1.0}})
        o_ms = sum(overhead) / len(overhead)
        for g in job_groups:
            g["perf"]["alpha_r"] = o_ms / 1e3
            g["perf"]["alpha_n"] = o_ms / 1e3
        with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as f:
            json.dump({"nodes": 1, "global_batch": args.batch, "groups": job_groups}, f)
            spec = f.name
        pred = json.loads(subprocess.run(
            [args.pacer, "batching", "mixed", spec, "--controller", args.controller, "--json"],
            check=True, capture_output=True, text=True).stdout)
        os.unlink(spec)
        speeds = [speeds_by_type[t] for t, n in groups for _ in range(n)]
        mixed = train(args.pacer, args.mnist, speeds, args.batch, args)
        measured_ms = mixed["mean_iter_s"] * 1e3
        predicted_ms = pred["step_s"] * 1e3
        # Time to accuracy: the fastest type's one-type run gives the iterations; the
        # mixed run is measured to the same target.
        if "ref" not in one_type:
            one_type["ref"] = train(args.pacer, args.mnist, [1.0] * 4, args.batch, args, target=args.target)
        ref = one_type["ref"]
        mixed_tta = train(args.pacer, args.mnist, speeds, args.batch, args, target=args.target)
        pred_tta = ref["iterations_to_target"] * pred["step_s"] if ref["reached"] else None
        row = {
            "mix": name, "speeds": speeds,
            "predicted_step_ms": predicted_ms, "measured_step_ms": measured_ms,
            "step_error": predicted_ms / measured_ms - 1,
            "predicted_batches": [b for g in pred["groups"] for b in g["local_batches"]],
            "measured_batches": mixed["final_batches"],
            "overruns": mixed["overrun_frac"],
            "reference_iterations_to_target": ref["iterations_to_target"],
            "mixed_iterations_to_target": mixed_tta["iterations_to_target"],
            "predicted_tta_s": pred_tta, "measured_tta_s": mixed_tta["time_to_target_s"],
            "tta_error": (pred_tta / mixed_tta["time_to_target_s"] - 1)
            if pred_tta and mixed_tta["reached"] else None,
        }
        rows.append(row)
        print(f"  predicted {predicted_ms:.2f} ms/step, measured {measured_ms:.2f} ({row['step_error']:+.1%}); "
              f"batches {row['predicted_batches']} vs {row['measured_batches']}; "
              f"TTA predicted {pred_tta or float('nan'):.2f} s, measured {mixed_tta['time_to_target_s'] or float('nan'):.2f} s"
              + (f" ({row['tta_error']:+.1%})" if row["tta_error"] is not None else ""), flush=True)
    with open(args.out, "w") as f:
        json.dump({"time_scale": args.time_scale, "batch": args.batch, "controller": args.controller,
                   "target": args.target, "rows": rows}, f, indent=1)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
