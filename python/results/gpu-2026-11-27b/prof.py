import os, sys, time, cProfile, pstats, io, statistics
os.environ.update(RANK="0", WORLD_SIZE="1", LOCAL_RANK="0", MASTER_ADDR="127.0.0.1", MASTER_PORT="29871")
import torch
import pacer_torch as pacer
from pacer_torch import overhead as ov
CPU = os.environ.get("PROF_CPU")
ov.MODEL = "resnet18"
if CPU:
    ov.make_model = lambda: torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(3072, 10))
else:
    ov.DEVICE = torch.device("cuda", 0); torch.cuda.set_device(0)
pacer.init_process_group(backend="gloo" if CPU else "nccl")
ds = ov.data(256 * 140)
out = os.environ["OUT"]
runs = {"ddp": lambda: ov.run_ddp(ds, 256, 120, 10),
        "flat-uniform": lambda: ov.run_pacer(ds, 256, 120, 10, "flat", "uniform"),
        "flat-lbbsp": lambda: ov.run_pacer(ds, 256, 120, 10, "flat", "lbbsp"),
        "ddp-lbbsp": lambda: ov.run_pacer(ds, 256, 120, 10, "ddp", "lbbsp")}
for name, fn in runs.items():
    fn()
    t, span = fn()
    print(name, "median ms", round(statistics.median(a for a, b in t[10:]) * 1e3, 3), "span", round(span * 1e3, 3), flush=True)
for name in ("flat-uniform", "ddp-lbbsp", "ddp"):
    pr = cProfile.Profile(); pr.enable(); runs[name](); pr.disable()
    s = io.StringIO(); st = pstats.Stats(pr, stream=s)
    st.sort_stats("tottime").print_stats(40); st.sort_stats("cumtime").print_stats("pacer_torch", 40)
    open(f"{out}/prof-{name}.txt", "w").write(s.getvalue())
# torch profiler of a few pacer steps (host side)
from torch.profiler import profile, ProfilerActivity
for name in ("flat-uniform", "ddp-lbbsp"):
    with profile(activities=[ProfilerActivity.CPU] + ([] if CPU else [ProfilerActivity.CUDA])) as p:
        runs[name]()
    open(f"{out}/tprof-{name}.txt", "w").write(p.key_averages().table(sort_by="self_cpu_time_total", row_limit=40))
pacer.destroy_process_group()
