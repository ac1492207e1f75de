"""Accuracy spread of the one-rank adaptive run on CUDA (test_cuda's _adaptive), per engine:
per-epoch accuracy, steps, final noise scale. Usage: python diag.py OUTDIR REPS"""
import json, os, sys, time
import torch
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python", "tests"))
import _dist
import test_agreement as ta


def one(rank, world, out, engine, dev_kind):
    import pacer_torch as pacer
    dev = torch.device("cuda", 0) if dev_kind == "cuda" else torch.device("cpu")
    if dev_kind == "cuda":
        torch.cuda.set_device(dev)
    train, (xt, yt) = ta.make_data()
    model = ta.make_model().to(dev)
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    net = pacer.DataParallel(model, opt, engine=engine)
    loader = pacer.DataLoader(train, global_batch=32, controller="lbbsp", seed=7,
                              adaptive_batch=True, max_global_batch=1024, adapt_every=4,
                              speed=[1], time_scale=1.0, device=dev)
    job = pacer.current()
    accs, steps, lrs = [], [], []
    for _ in pacer.remaining_epochs(10):
        for x, y in loader:
            loss = torch.nn.functional.cross_entropy(net(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            steps.append(len(x))
            lrs.append(opt.param_groups[0]["lr"])
        with torch.no_grad():
            accs.append(float((model(xt.to(dev)).argmax(dim=1) == yt.to(dev)).float().mean()))
    json.dump({"engine": engine, "accs": accs, "steps": steps, "lrs": lrs,
               "noise_scale": job.noise_scale()}, open(out, "w"))


if __name__ == "__main__":
    outdir, reps = sys.argv[1], int(sys.argv[2])
    dev_kind = sys.argv[3] if len(sys.argv) > 3 else "cuda"
    backend = "nccl" if dev_kind == "cuda" else "gloo"
    for i in range(reps):
        for engine in ("ddp", "flat"):
            f = os.path.join(outdir, f"diag-{engine}-{i}.json")
            t0 = time.time()
            _dist.run(one, 1, f, engine, dev_kind, backend=backend, timeout_s=120)
            d = json.load(open(f))
            n6 = sum(1 for _ in d["steps"])
            print(engine, i, f"{time.time() - t0:.0f} s", "acc by epoch",
                  [round(a, 3) for a in d["accs"]], "steps", len(d["steps"]),
                  "max lr %.3f" % max(d["lrs"]), "noise", d["noise_scale"], flush=True)
