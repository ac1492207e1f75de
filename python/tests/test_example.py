"""python/examples/train_ddp.py, the README's porting example, runs as shipped under
torchrun: plain (2 ranks) and with the adaptive global batch at unequal speeds (4 ranks)."""

import os
import re

import pytest
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


def _wait_for_line(p, pattern, timeout_s):
    """Reads ``p``'s stdout until a line matches (bounded); returns what was read."""
    import selectors
    import time

    sel = selectors.DefaultSelector()
    sel.register(p.stdout, selectors.EVENT_READ)
    seen = ""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if not sel.select(timeout=1.0):
            continue
        line = p.stdout.readline()
        if not line:
            break
        seen += line
        if re.search(pattern, line):
            return seen
    raise AssertionError(f"no line matching {pattern!r} within {timeout_s} s:\n{seen}")


def _children(pid):
    with open(f"/proc/{pid}/task/{pid}/children") as f:
        return [int(c) for c in f.read().split()]


@pytest.mark.parametrize("who", ["launcher", "one worker"])
def test_sigterm_under_pacer_torch_run_checkpoints_and_exits_143_then_resumes(tmp_path, who):
    import signal

    from _torchrun import finish, start

    ckpt = str(tmp_path / "ckpt")
    args = ["--epochs", "400", "--checkpoint-dir", ckpt]
    p = start(SCRIPT, 2, args, launcher="pacer_torch.run")
    try:
        head = _wait_for_line(p, r"^epoch 1:", 180)
        target = p.pid if who == "launcher" else _children(p.pid)[-1]
        os.kill(target, signal.SIGTERM)
    except BaseException:
        finish(p, 1) if p.poll() is None else None
        raise
    r = finish(p, 120)
    assert r.returncode == 143, head + r.stdout + r.stderr
    assert "Traceback" not in r.stderr and "SignalException" not in r.stderr, r.stderr
    assert "pacer_torch.run: " in r.stderr.splitlines()[-1], r.stderr
    assert os.path.exists(os.path.join(ckpt, "checkpoint.pt"))
    # Resumed where it stopped (the scheduler with it), then runs to its end.
    r2 = torchrun(SCRIPT, 2, ["--epochs", "3", "--checkpoint-dir", ckpt], timeout_s=240,
                  launcher="pacer_torch.run")
    assert r2.returncode == 0, r2.stdout + r2.stderr
    m = re.search(r"^resumed at step (\d+)$", r2.stdout, re.M)
    assert m and int(m.group(1)) >= 2 * 64, r2.stdout  # after epoch 1 (64 steps an epoch)


def test_the_readme_quotes_the_example_and_counts_its_edits():
    import textwrap

    readme = open(os.path.join(EXAMPLES, "..", "README.md")).read()
    src = open(SCRIPT).read()
    guide = readme[readme.index("## Porting a DDP script"):]
    block = guide[guide.index("```python\n") + len("```python\n"):]
    block = block[: block.index("```")]
    assert textwrap.indent(block, "    ") in src, "the README quotes the example verbatim"
    marked = [ln for ln in src.splitlines() if "# pacer:" in ln and not ln.startswith("DDP")]
    m = re.search(r"\*\*(\d+) lines change\*\*", guide)
    assert m and int(m.group(1)) == len(marked), (m and m.group(0), marked)
