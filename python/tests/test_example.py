"""python/examples/train_ddp.py, the README's porting example, runs as shipped under
torchrun: plain (2 ranks) and with the adaptive global batch at unequal speeds (4 ranks)."""

import os
import re

from _torchrun import EXAMPLES, torchrun

SCRIPT = os.path.join(EXAMPLES, "train_ddp.py")


def _final_accuracy(out: str) -> float:
    m = re.search(r"^final accuracy ([0-9.]+)$", out, re.M)
    assert m, out
    return float(m.group(1))


def test_the_example_trains_under_torchrun_with_two_ranks():
    r = torchrun(SCRIPT, 2, ["--epochs", "3"], timeout_s=240)
    assert r.returncode == 0, r.stdout + r.stderr
    assert _final_accuracy(r.stdout) >= 0.85, r.stdout


def test_the_example_adapts_its_batch_under_torchrun_with_four_ranks():
    r = torchrun(SCRIPT, 4, ["--epochs", "4", "--adaptive", "--global-batch", "64",
                             "--speeds", "1,1,0.5,0.25"], timeout_s=300)
    assert r.returncode == 0, r.stdout + r.stderr
    batches = [int(b) for b in re.findall(r"global batch (\d+)", r.stdout)]
    assert len(batches) == 4 and max(batches) > 64, r.stdout
    assert _final_accuracy(r.stdout) >= 0.85, r.stdout
