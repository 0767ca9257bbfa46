"""The same sweep on a real Dask cluster started inside the test (loopback, two worker
processes): the rows equal the process pool's, and a worker killed mid-sweep loses nothing."""

from __future__ import annotations

import os
import signal

import pytest

from tensorize.sweep import DaskExecutor, LocalExecutor, load_sweep, run_sweep
from tests.tensorize.sweep.conftest import SMALL

distributed = pytest.importorskip("dask.distributed", reason="Dask is not installed (the "
                                                             "sweep extra)")

pytestmark = pytest.mark.slow

# Twelve points: enough that some are still queued when a worker dies.
WIDER = SMALL.replace("array.cols: [8]", "array.cols: [8, 16, 32]")


def _measured(rows):
    """The rows without what depends on the run (how long a point took)."""
    return [{k: v for k, v in row.items() if k != "seconds"} for row in rows]


def test_a_dask_cluster_gives_the_rows_of_the_process_pool(write_sweep, tmp_path):
    sweep = load_sweep(write_sweep())
    local = run_sweep(sweep, tmp_path / "local", LocalExecutor(2), plots=False)
    on_dask = run_sweep(sweep, tmp_path / "dask", DaskExecutor(None, 2), plots=False)
    assert len(local.rows) == 4 and local.failed == 0
    assert _measured(on_dask.rows) == _measured(local.rows)
    assert (tmp_path / "dask" / "results.csv").read_text() == \
        (tmp_path / "local" / "results.csv").read_text()


class KillingExecutor:
    """Dask at ``address``; after the first row arrives, SIGKILL one worker process."""

    def __init__(self, client, address: str) -> None:
        self.client = client
        self.dask = DaskExecutor(address, 2)
        self.killed: int | None = None

    def run(self, tasks):
        for task, row in self.dask.run(tasks):
            if self.killed is None:
                pids = self.client.run(os.getpid)
                self.killed = min(pids.values())
                os.kill(self.killed, signal.SIGKILL)
            yield task, row


def test_a_worker_killed_mid_sweep_loses_no_point(write_sweep, tmp_path):
    sweep = load_sweep(write_sweep(WIDER))
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                                  host="127.0.0.1", dashboard_address=None) as cluster, \
            distributed.Client(cluster) as client:
        executor = KillingExecutor(client, cluster.scheduler_address)
        outcome = run_sweep(sweep, tmp_path / "out", executor, plots=False)
        assert executor.killed is not None
        assert executor.killed not in client.run(os.getpid).values()
    assert len(outcome.rows) == 12 and outcome.executed == 12
    assert [r["error"] for r in outcome.rows] == [None] * 12
    reference = run_sweep(sweep, tmp_path / "local", LocalExecutor(2), plots=False)
    assert _measured(outcome.rows) == _measured(reference.rows)
