"""A PyTorch DDP training script ported to pacer_torch (python/README.md, "Porting a
DDP script"). Every line that differs from the plain DDP script is marked `# pacer:`
with the line it replaces.

Runs as shipped, on CPU (gloo) or CUDA (nccl), with synthetic data (no download):

    torchrun --nproc_per_node=4 python/examples/train_ddp.py
    torchrun --nproc_per_node=4 python/examples/train_ddp.py --adaptive
    torchrun --nproc_per_node=4 python/examples/train_ddp.py --speeds 1,1,0.5,0.25

`--speeds` emulates slower devices (a rank of speed s takes 1/s times as long per
sample), `--adaptive` lets pacer move the global batch to the goodput-optimal one,
`--checkpoint-dir` makes a SIGTERM checkpoint and a restart resume. Rank 0 prints one
line per epoch and `final accuracy A` at the end.
"""

import argparse

import torch
import torch.nn.functional as F

import pacer_torch as pacer  # pacer: (was `import torch.distributed as dist` and DDP's imports)


def synthetic(n: int, seed: int):
    """A 4-class problem: 32 features labelled by a fixed random teacher, 2 % noise."""
    g = torch.Generator().manual_seed(seed)
    teacher = torch.randn(32, 4, generator=torch.Generator().manual_seed(0))
    x = torch.randn(n, 32, generator=g)
    y = (x @ teacher).argmax(dim=1)
    flip = torch.rand(n, generator=g) < 0.02
    y[flip] = torch.randint(0, 4, (int(flip.sum()),), generator=g)
    return torch.utils.data.TensorDataset(x, y)


class Net(torch.nn.Module):
    def __init__(self, batch_norm: bool = False):
        super().__init__()
        norm = torch.nn.BatchNorm1d(128) if batch_norm else torch.nn.Identity()
        self.layers = torch.nn.Sequential(
            torch.nn.Linear(32, 128), norm, torch.nn.ReLU(), torch.nn.Linear(128, 4)
        )

    def forward(self, x):
        return self.layers(x)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--epochs", type=int, default=5)
    ap.add_argument("--global-batch", type=int, default=128)
    ap.add_argument("--lr", type=float, default=0.05)
    ap.add_argument("--train-size", type=int, default=8192)
    ap.add_argument("--adaptive", action="store_true", help="adaptive global batch")
    ap.add_argument("--max-global-batch", type=int, default=2048)
    ap.add_argument("--controller", default="lbbsp")
    ap.add_argument("--speeds", default=None, help="emulated speed per rank, e.g. 1,1,0.5,0.25")
    ap.add_argument("--batch-norm", action="store_true", help="a BatchNorm layer in the model")
    ap.add_argument("--checkpoint-dir", default=None)
    args = ap.parse_args()

    info = pacer.init_process_group()  # pacer: (was dist.init_process_group("gloo"))
    device = info["device"]
    rank = int(info["rank"])
    train = synthetic(args.train_size, seed=1)
    test_x, test_y = synthetic(2048, seed=2).tensors

    model = Net(args.batch_norm).to(device)
    opt = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9)
    net = pacer.DataParallel(model, opt)  # pacer: (was DDP(model))
    speeds = [float(s) for s in args.speeds.split(",")] if args.speeds else None
    loader = pacer.DataLoader(  # pacer: (was DistributedSampler + DataLoader(batch_size=B/world))
        train,
        global_batch=args.global_batch,
        controller=args.controller,
        adaptive_batch=args.adaptive,
        max_global_batch=args.max_global_batch if args.adaptive else None,
        adapt_every=10,
        speed=speeds,
        device=device,
        checkpoint_dir=args.checkpoint_dir,
    )
    acc = float("nan")
    for epoch in pacer.remaining_epochs(args.epochs):  # pacer: (was range(epochs) + sampler.set_epoch)
        net.train()
        total, n = 0.0, 0
        for x, y in loader:
            loss = F.cross_entropy(net(x), y)  # the mean over the local batch
            opt.zero_grad()
            loss.backward()
            opt.step()
            total += loss.item() * len(x)
            n += len(x)
        if rank == 0:
            net.eval()
            with torch.no_grad():
                acc = float((net(test_x.to(device)).argmax(dim=1) == test_y.to(device)).float().mean())
            job = pacer.current()
            print(
                f"epoch {epoch}: train loss {total / max(n, 1):.4f} (rank 0), test accuracy "
                f"{acc:.4f}, global batch {job.global_batch}, local batches {job.batches}",
                flush=True,
            )
    if rank == 0:
        print(f"final accuracy {acc:.4f}", flush=True)
    pacer.destroy_process_group()  # pacer: (was dist.destroy_process_group())


if __name__ == "__main__":
    main()
