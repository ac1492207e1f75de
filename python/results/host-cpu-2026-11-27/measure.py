"""CPU time per step (process_time between optimizer.step() ends) of DDP and pacer's
engines, interleaved in rounds; works alone (world 1, gloo) or under torchrun."""
import os, sys, time, json, statistics, gc
if "RANK" not in os.environ:
    os.environ.update(RANK="0", WORLD_SIZE="1", LOCAL_RANK="0", MASTER_ADDR="127.0.0.1",
                      MASTER_PORT=os.environ.get("PORT", "29871"))
import torch
torch.set_num_threads(1)
import torch.distributed as dist
import pacer_torch as pacer
from pacer_torch import overhead as ov
model = os.environ.get("MODEL", "cnn")
if model == "tiny":
    ov.make_model = lambda: (torch.manual_seed(0), torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(784, 10)))[1]
pacer.init_process_group(backend="gloo")
N = int(os.environ.get("N", "60")); W = 10; R = int(os.environ.get("R", "3"))
ds = ov.data(256 * (N + 2))
runs = {"ddp": lambda: ov.run_ddp(ds, 256, N, W),
        "flat-uniform": lambda: ov.run_pacer(ds, 256, N, W, "flat", "uniform"),
        "flat-lbbsp": lambda: ov.run_pacer(ds, 256, N, W, "flat", "lbbsp"),
        "ddp-lbbsp": lambda: ov.run_pacer(ds, 256, N, W, "ddp", "lbbsp")}
names = list(runs)
per = {n: [] for n in names}
for r in range(R):
    for n in names[r % 4:] + names[: r % 4]:
        dist.barrier()
        t, _ = runs[n]()
        per[n].append(statistics.median(c for _, c in t[W:]) * 1e3)
        gc.collect()
world = dist.get_world_size()
t = torch.zeros(len(names), R, world)
for i, n in enumerate(names):
    t[i, :, dist.get_rank()] = torch.tensor(per[n])
dist.all_reduce(t)
if dist.get_rank() == 0:
    out = {"world": world, "model": model, "steps": N, "rounds": R, "pkg": pacer.__file__}
    for i, n in enumerate(names):
        rounds = [statistics.median(t[i, k].tolist()) for k in range(R)]  # median over ranks
        out[n] = {"cpu_ms_median": round(statistics.median(rounds), 3),
                  "rounds": [round(v, 3) for v in rounds]}
    print(json.dumps(out))
pacer.destroy_process_group()
