"""Per-step capture of everything pacer's controllers and the noise scale see, with a
deterministic compute clock, for comparing two versions of pacer_torch byte for byte.
Run alone (world 1) or under torchrun. ENGINE=flat|ddp OPT=sgd|adam ADAPT=0|1 OUT=file"""
import os, sys, hashlib, json
if "RANK" not in os.environ:
    os.environ.update(RANK="0", WORLD_SIZE="1", LOCAL_RANK="0", MASTER_ADDR="127.0.0.1",
                      MASTER_PORT=os.environ.get("PORT", "29873"))
import torch
torch.set_num_threads(1)
import torch.distributed as dist
import pacer_torch as pacer
from pacer_torch import job as jobmod

SPEEDS = [1.0, 1.0, 0.5, 0.25]
def end_compute(self):
    ctx = self.step_ctx
    b = ctx.sizes[self.rank]
    # deterministic: a device of speed SPEEDS[rank] at 1000 samples/s, plus 1 ms
    return 1e-3 + b / (1000.0 * SPEEDS[self.rank % 4]), 0.0, 0.0
jobmod.Job.end_compute = end_compute

engine = os.environ.get("ENGINE", "flat")
optname = os.environ.get("OPT", "sgd")
adapt = os.environ.get("ADAPT", "1") == "1"
pacer.init_process_group(backend="gloo")
rank, world = dist.get_rank(), dist.get_world_size()
g = torch.Generator().manual_seed(21)
teacher = torch.randn(16, 4, generator=g)
x = torch.randn(3000, 16, generator=g)
y = (x @ teacher + 0.3 * torch.randn(3000, 4, generator=g)).argmax(dim=1)
torch.manual_seed(3)
model = torch.nn.Sequential(torch.nn.Linear(16, 64), torch.nn.ReLU(), torch.nn.Linear(64, 4))
opt = (torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9) if optname == "sgd"
       else torch.optim.Adam(model.parameters(), lr=1e-3))
scaler = torch.amp.GradScaler("cpu", init_scale=2.0**10, growth_interval=3) if os.environ.get("SCALER") else None
net = pacer.DataParallel(model, opt, engine=engine, grad_scaler=scaler)
loader = pacer.DataLoader(torch.utils.data.TensorDataset(x, y), global_batch=32,
                          controller="lbbsp", seed=7, adaptive_batch=adapt,
                          max_global_batch=512, adapt_every=4)
job = pacer.current()
real_gathered = job.gathered
log = []
def gathered(rows, agg, decision, one_rank=None):
    job.stats.step_wall_s = job.stats.max_compute_s + 0.05  # deterministic
    ent = {"rows": [[r[c] for c in (0, 1, 2, 4, 5, 6)] for r in rows], "decision": decision,
           "one_rank": one_rank}
    live = [r for r in range(world) if job.step_ctx.sizes[r] > 0]
    if len(live) >= 2:  # what gathered reads of the norms
        ent["sqr"] = [rows[r][3] for r in live]
        ent["agg"] = agg
    real_gathered(rows, agg, decision, one_rank)
    ent["gns"] = job.gns.state()
    ent["next"] = job.next.state_dict()
    if job.session is not None:
        ent["session"] = job.session.state()
        ent["pending"] = job.pending.state_dict()
    log.append(ent)
job.gathered = gathered
for epoch in pacer.remaining_epochs(3):
    for xb, yb in loader:
        loss = torch.nn.functional.cross_entropy(net(xb), yb)
        opt.zero_grad()
        (scaler.scale(loss) if scaler else loss).backward()
        gr = torch.cat([p.grad.reshape(-1) for p in model.parameters()])
        log[-1]["grad"] = hashlib.md5(gr.numpy().tobytes()).hexdigest()
        log[-1]["batch"] = hashlib.md5(xb.numpy().tobytes() + yb.numpy().tobytes()).hexdigest()
        if scaler:
            scaler.step(opt); scaler.update()
        else:
            opt.step()
flat = torch.cat([p.detach().reshape(-1) for p in model.parameters()])
res = {"steps": log, "params": hashlib.md5(flat.numpy().tobytes()).hexdigest(),
       "noise_scale": job.noise_scale()}
with open(f"{os.environ['OUT']}.{rank}", "w") as f:
    json.dump(res, f)
pacer.destroy_process_group()
