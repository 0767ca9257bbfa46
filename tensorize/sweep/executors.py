"""Executors: where a sweep's points run. Each yields ``(task, row)`` as points finish, in
whatever order they finish.

- :class:`LocalExecutor` (the default): a process pool on this machine
  (``concurrent.futures``, no extra dependency). A worker process that dies (killed, out of
  memory) breaks the pool; the points it had not returned go to a fresh pool, up to
  ``MAX_RESTARTS`` times, after which each becomes a failed row naming the loss.
- :class:`DaskExecutor`: a Dask cluster through ``dask.distributed.Client(address)``, or a
  local cluster of ``workers`` processes on loopback when no address is given. The scheduler
  reschedules the tasks of a worker that dies; a task whose future still fails (it has
  killed several workers, Dask's ``allowed-failures``, or the client lost it) is submitted
  again, up to ``MAX_RESTARTS`` times, then becomes a failed row. Dask is imported only
  here, only when this executor is asked for (the ``sweep`` extra).
"""

from __future__ import annotations

import logging
import multiprocessing
from collections.abc import Generator, Iterator, Sequence
from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait
from concurrent.futures.process import BrokenProcessPool
from typing import Any

from tensorize.runners.context import ContextError
from tensorize.sweep.points import Task
from tensorize.sweep.task import run_point

MAX_RESTARTS = 3


def lost_row(task: Task, reason: str) -> dict[str, Any]:
    """The row of a point the executor lost (its worker died too often)."""
    return {"key": task.key, "cycles": None, "utilisation": None, "macs": None,
            "dram_bytes": None, "seconds": None, "error": f"lost: {reason}"}


class LocalExecutor:
    """A pool of ``workers`` processes on this machine."""

    def __init__(self, workers: int) -> None:
        self.workers = workers

    def run(self, tasks: Sequence[Task]) -> Iterator[tuple[Task, dict[str, Any]]]:
        """Run every task; yield each with its row as it finishes."""
        pending = list(tasks)
        restarts = 0
        while pending:
            # forkserver: the sweep runs on a thread of the CLI, and forking a threaded
            # process can copy a lock held by another thread.
            pool = ProcessPoolExecutor(self.workers,
                                       mp_context=multiprocessing.get_context("forkserver"))
            try:
                pending = yield from _drain(pool, pending)
            except BaseException:
                # Ctrl-C reaches the workers too (their points raise KeyboardInterrupt):
                # drop the queued points, or the pool would run them all before exiting.
                pool.shutdown(wait=False, cancel_futures=True)
                raise
            pool.shutdown()
            if pending:
                restarts += 1
            if pending and restarts > MAX_RESTARTS:
                for task in pending:
                    yield task, lost_row(task, f"worker processes died {restarts} times")
                return


def _drain(pool: ProcessPoolExecutor, tasks: Sequence[Task]
           ) -> Generator[tuple[Task, dict[str, Any]], None, list[Task]]:
    """Run ``tasks`` on ``pool``, yielding each finished one with its row; returns the tasks
    a dead worker process took down with the pool."""
    futures = {}
    lost: list[Task] = []
    for position, task in enumerate(tasks):
        try:
            futures[pool.submit(run_point, task)] = task
        except BrokenProcessPool:  # a worker died while the points were still handed out
            lost.extend(tasks[position:])
            break
    while futures:
        finished, _ = wait(futures, return_when=FIRST_COMPLETED)
        for future in finished:
            task = futures.pop(future)
            try:
                row = future.result()
            except BrokenProcessPool:
                lost.append(task)
                continue
            yield task, row
    return lost


class DaskExecutor:
    """The tasks on a Dask cluster: the one at ``address``, or a local one of ``workers``
    processes (loopback only) that lives as long as the run."""

    def __init__(self, address: str | None, workers: int) -> None:
        self.address = address
        self.workers = workers

    def run(self, tasks: Sequence[Task]) -> Iterator[tuple[Task, dict[str, Any]]]:
        """Run every task; yield each with its row as it finishes."""
        try:
            from dask.distributed import Client, LocalCluster, as_completed
        except ImportError:
            raise ContextError("--executor dask requires Dask (dask[distributed]); install "
                             "the sweep extra: pip install 'tensorize[sweep]'") from None
        cluster = None
        if self.address is None:
            # Quiet workers: a heartbeat racing the cluster's shutdown logs a traceback, and
            # a point's own failure is its row.
            cluster = LocalCluster(n_workers=self.workers, threads_per_worker=1,
                                   processes=True, host="127.0.0.1", dashboard_address=None,
                                   silence_logs=logging.CRITICAL)
        try:
            client = Client(cluster if cluster is not None else self.address, timeout="20s")
        except (OSError, TimeoutError, ValueError) as err:  # unreachable, or not an address
            raise ContextError(f"--address {self.address}: cannot reach a Dask scheduler there "
                             f"({err})") from None
        try:
            futures = {client.submit(run_point, task, key=f"sweep-point-{task.key}",
                                     pure=False): task for task in tasks}
            tries = {task.key: 1 for task in tasks}
            pending = as_completed(futures)
            for future in pending:
                task = futures.pop(future)
                try:
                    row = future.result()
                except Exception as err:  # noqa: BLE001  (KilledWorker and the like)
                    # A point is a pure function of its task: one the cluster lost (a worker
                    # died with it, the client's connection broke) is submitted again.
                    if tries[task.key] <= MAX_RESTARTS:
                        tries[task.key] += 1
                        retry = client.submit(run_point, task, pure=False,
                                              key=f"sweep-point-{task.key}-{tries[task.key]}")
                        futures[retry] = task
                        pending.add(retry)
                        continue
                    row = lost_row(task, f"{type(err).__name__}: {err} (tried "
                                         f"{tries[task.key]} times)")
                yield task, row
        finally:
            client.close()
            if cluster is not None:
                cluster.close()


def make_executor(name: str, address: str | None, workers: int) -> Any:
    """The executor called ``name`` (local or dask)."""
    if name == "dask":
        return DaskExecutor(address, workers)
    return LocalExecutor(workers)
