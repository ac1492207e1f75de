#!/usr/bin/env python3
"""Tables of experiments/runtime/results/*.json (written by measure.sh) for RESULTS.md."""
import glob, json, os, sys

d = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), "..", "results")
R = {}
for p in sorted(glob.glob(os.path.join(d, "*.json"))):
    try:
        R[os.path.basename(p)[:-5]] = json.load(open(p))
    except ValueError:
        pass  # a run still in progress

def f(x, n=2):
    return "-" if x is None else f"{x:.{n}f}"

print("## accuracy")
for k in ["acc_mlp", "acc_logreg", "acc_svm", "acc_kmeans"]:
    if k in R:
        r = R[k]
        print(f"| {r['model']} | {f(r['final_accuracy']*100)} % | best {f(r['best_accuracy']*100)} % | {r['iterations']} it | {f(r['epochs'])} ep | t→target {f(r['time_to_target_s'])} s |")

def het_table(prefix):
    print(f"## {prefix}")
    print("| controller | seed | reached | time to 97 % (s) | iterations | mean iter ms | ideal ms | efficiency | hindsight eff. | eff. w/o overhead | overhead | overruns | speedup vs uniform | final batches (by worker) |")
    for seed in (1, 2):
        u = R.get(f"{prefix}_uniform_s{seed}")
        for c in ("uniform", "lbbsp", "pid"):
            r = R.get(f"{prefix}_{c}_s{seed}")
            if not r:
                continue
            sp = (u["time_to_target_s"] / r["time_to_target_s"]) if (u and r["time_to_target_s"] and u["time_to_target_s"]) else None
            named = ", ".join(f"{n[-1]}:{b}" for n, b in sorted(r.get('final_batches_named', [])))
            print(f"| {c} | {seed} | {r['reached']} | {f(r['time_to_target_s'])} | {r['iterations']} | {f(r['mean_iter_s']*1e3)} | {f(r['ideal_iter_s']*1e3)} | {f(r['efficiency'],3)} | {f(r.get('hindsight_efficiency'),3)} | {f(r['compute_efficiency'],3)} | {f(r['overhead_frac']*100,1)} % | {f(r['overrun_frac']*100,1)} % | {f(sp)} | {named} |")

het_table("het_ts3")
het_table("het_ts8")

print("## interference (time scale 3)")
print("| controller | predictor | time to 97 % (s) | iterations | mean iter ms | efficiency | hindsight eff. | overhead | overruns | speed MAPE | speedup vs uniform/same predictor |")
for c in ("uniform", "lbbsp", "pid"):
    for p in ("last", "ewma", "ets", "narx"):
        r = R.get(f"intf_{c}_{p}")
        u = R.get(f"intf_uniform_{p}")
        if not r:
            continue
        sp = u["time_to_target_s"] / r["time_to_target_s"] if (u and r["time_to_target_s"] and u["time_to_target_s"]) else None
        print(f"| {c} | {p} | {f(r['time_to_target_s'])} | {r['iterations']} | {f(r['mean_iter_s']*1e3)} | {f(r['efficiency'],3)} | {f(r.get('hindsight_efficiency'),3)} | {f(r['overhead_frac']*100,1)} % | {f(r['overrun_frac']*100,1)} % | {f(r['speed_mape']*100,1)} % | {f(sp)} |")

print("## overhead")
print("| B | time scale | iter ms | slowest step | control | enc params | worker decode | worker encode | ctrl decode | network (down + up) | aggregate | optimiser | other | overhead | overruns |")
for b in (512, 2048, 8192):
    for ts in (1, 3):
        r = R.get(f"ovh_b{b}_ts{ts}")
        if not r:
            continue
        o = r["overhead"]
        print(f"| {b} | {ts} | {f(o['iter_ms'])} | {f(o['compute_ms'])} | {f(o['control_ms'],3)} | {f(o['encode_params_ms'],3)} | {f(o['worker_decode_ms'],3)} | {f(o['worker_post_ms'],3)} | {f(o['ctrl_decode_ms'],3)} | {f(o['network_ms'],2)} ({f(o.get('downlink_ms'),2)} + {f(o.get('uplink_ms'),2)}) | {f(o['aggregate_ms'],3)} | {f(o['optimizer_ms'],3)} | {f(o['other_ms'],3)} | {f(r['overhead_frac']*100,1)} % | {f(r['overrun_frac']*100,1)} % |")

if "elastic" in R:
    r = R["elastic"]
    print("## elasticity")
    print(f"reached {r['reached']} in {f(r['time_to_target_s'])} s, {r['iterations']} it, final {f(r['final_accuracy']*100)} %, joins {r['joins']}, leaves {r['leaves']}, retried tasks {r['retried_tasks']}, disrupted iterations {r['disrupted_iterations']}, stale {r['stale_results']}, final batches {r['final_batches']}")
