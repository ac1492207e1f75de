"""``pacer_torch.overhead``: core pinning and the report's spread, and one short run."""

from __future__ import annotations

import json
import os

import pytest

from pacer_torch import overhead
from _torchrun import torchrun


def _topology(root, cpus):
    """A fake sysfs: ``cpus`` maps a CPU to its (package, core)."""
    for c, (pkg, core) in cpus.items():
        d = root / f"cpu{c}" / "topology"
        d.mkdir(parents=True)
        (d / "physical_package_id").write_text(f"{pkg}\n")
        (d / "core_id").write_text(f"{core}\n")


def test_smt_siblings_are_one_core(tmp_path):
    # Two packages, SMT siblings numbered apart (as Linux numbers them on x86).
    _topology(tmp_path, {0: (0, 0), 1: (0, 1), 2: (1, 0), 3: (1, 1),
                         4: (0, 0), 5: (0, 1), 6: (1, 0), 7: (1, 1)})
    got = overhead.physical_cores([7, 6, 5, 4, 3, 2, 1, 0], root=str(tmp_path))
    assert got == [[0, 4], [1, 5], [2, 6], [3, 7]]
    # Only the CPUs the process may use count; core 0 of package 1 is a core of its own.
    assert overhead.physical_cores([0, 2, 4], root=str(tmp_path)) == [[0, 4], [2]]


def test_a_cpu_without_topology_is_a_core_of_its_own(tmp_path):
    _topology(tmp_path, {0: (0, 0), 1: (0, 0)})
    assert overhead.physical_cores([0, 1, 9], root=str(tmp_path)) == [[0, 1], [9]]


def test_pinning_more_cores_than_there_are_is_refused():
    n = len(overhead.physical_cores(list(os.sched_getaffinity(0))))
    with pytest.raises(ValueError, match=f"need {n + 1} physical cores"):
        overhead.pin(0, n + 1, 1)


def test_quartiles():
    assert overhead.quartiles([0.5]) == [0.5, 0.5, 0.5]
    lo, mid, hi = overhead.quartiles([0.04, 0.01, 0.03, 0.02, 0.05])
    assert (lo, mid, hi) == pytest.approx((0.015, 0.03, 0.045))


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="needs two CPUs")
def test_a_short_pinned_run_reports_every_run(tmp_path):
    cores = overhead.physical_cores(list(os.sched_getaffinity(0)))
    if len(cores) < 2:
        pytest.skip("needs two physical cores")
    script = os.path.join(os.path.dirname(overhead.__file__), "overhead.py")
    p = torchrun(script, 2, ["--rounds", "1", "--steps", "8", "--warmup", "2",
                             "--cores-per-rank", "1"], timeout_s=240)
    assert p.returncode == 0, p.stderr[-3000:]
    out = json.loads(p.stdout)
    assert out["world"] == 2 and out["cores_per_rank"] == 1
    assert out["rank0_cpus"] == cores[0]
    for r in overhead.RUNS:
        assert out[r]["n"] == 8 - 1 - 2 and out[r]["median_ms"] > 0
    for r in overhead.RUNS[1:]:
        lo, mid, hi = out[f"{r}_overhead_paired_quartiles"]
        assert lo == mid == hi == out[f"{r}_overhead_paired"]
