"""A sweep point in its worker: the workload's reference is made once per worker process."""

from __future__ import annotations

from tensorize.sweep import load_sweep, run_sweep
from tensorize.sweep import task as task_module
from tests.tensorize.sweep.conftest import CountingExecutor


def test_a_worker_makes_each_workloads_reference_once(write_sweep, tmp_path):
    task_module._reference.cache_clear()
    outcome = run_sweep(load_sweep(write_sweep()), tmp_path / "out", CountingExecutor(),
                        plots=False)
    # Two machines x two layers: every point checked exactly against its layer's reference.
    assert [r["error"] for r in outcome.rows] == [None] * 4
    info = task_module._reference.cache_info()
    assert (info.misses, info.hits) == (2, 2)
