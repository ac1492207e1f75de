"""A small pacer_torch job for scripts/slurm-e2e.sh (phase `torch`): run as every rank of a
multi-node Slurm run (`pacer serve --executor slurm`, one `srun` task per node), the process
group comes from SLURM_PROCID/SLURM_NTASKS and MASTER_ADDR/MASTER_PORT (gloo); a linear
classifier on seeded synthetic data for EPOCHS epochs. Each rank prints one line:
    torch rank R of N on NODE: S steps, samples B, loss L
A preempted run prints its line too, before exiting 143. With TYPE_SPEEDS (e.g.
"t4=0.25,a100=1", phase `mixed`) each rank emulates the speed of
its node's device type (PACER_NODE_TYPES at its node's place in PACER_NODE_NAMES) by sleeping
after its forward pass in proportion to its local batch, and its line adds
    type T, mean local batch M
"""
import os
import sys
import time

import torch
import torch.nn.functional as F

import pacer_torch as pacer


def main() -> None:
    epochs = int(sys.argv[1]) if len(sys.argv) > 1 else 3
    torch.manual_seed(0)
    torch.set_num_threads(1)
    info = pacer.init_process_group(timeout_s=120)
    import torch.distributed as dist

    rank, world = dist.get_rank(), dist.get_world_size()
    g = torch.Generator().manual_seed(1)
    x = torch.randn(4096, 16, generator=g)
    y = (x @ torch.randn(16, 4, generator=g)).argmax(1)
    data = torch.utils.data.TensorDataset(x, y)
    model = torch.nn.Linear(16, 4)
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    net = pacer.DataParallel(model, opt)
    loader = pacer.DataLoader(data, global_batch=256, controller="lbbsp", seed=3)
    # The service lists the run's nodes and their types in the same (allocation) order;
    # Slurm's own node index follows its node order, which may differ.
    types = os.environ.get("PACER_NODE_TYPES", "").split(",")
    names = os.environ.get("PACER_NODE_NAMES", "").split(",")
    here = os.environ.get("SLURMD_NODENAME", "")
    my_type = types[names.index(here)] if here in names and len(types) == len(names) else "?"
    speeds = dict(kv.split("=") for kv in os.environ.get("TYPE_SPEEDS", "").split(",") if kv)
    per_sample_s = 2e-4 / float(speeds[my_type]) if my_type in speeds else 0.0
    steps, samples, loss = 0, 0, float("nan")
    node = os.environ.get("SLURMD_NODENAME", "?")

    def summary() -> None:
        typed = f", type {my_type}, mean local batch {samples / max(steps, 1):.1f}" if speeds else ""
        print(f"torch rank {rank} of {world} on {node}: {steps} steps, samples {samples}, "
              f"loss {loss:.3f}{typed} ({info})", flush=True)

    try:
        for _ in pacer.remaining_epochs(epochs):
            for xb, yb in loader:
                out = F.cross_entropy(net(xb), yb)
                if per_sample_s:
                    time.sleep(per_sample_s * len(xb))
                opt.zero_grad()
                out.backward()
                opt.step()
                steps += 1
                samples += len(xb)
                loss = out.item()
    except SystemExit:
        # Preempted (SIGTERM: pacer_torch checkpointed and exits 143): this run's line too.
        summary()
        raise
    summary()
    del net  # the wrapper holds the process group
    # A barrier, then the group and its gloo threads must be gone (python/README.md).
    pacer.destroy_process_group()


if __name__ == "__main__":
    main()
