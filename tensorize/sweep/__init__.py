"""Design-space sweeps: simulate workloads on a grid of NPU machines.

A sweep description (:func:`load_sweep`, ``spec.py``) names a base machine, the fields to
vary, constraints, the workloads and the target. :func:`expand` gives its points (machine x
workload, each keyed by a hash of machine + workload + tool version); :func:`run_sweep` runs
them on an executor (a local process pool, or a Dask cluster), streams one row per point to
``results.jsonl`` and ``results.csv`` as it arrives, skips points already done, and writes
the summary and plots. ``tensorize sweep SWEEP.yaml`` is the command (docs/sweeps.md).
"""

from tensorize.sweep.executors import DaskExecutor, LocalExecutor, make_executor
from tensorize.sweep.points import Point, Task, expand, point_key
from tensorize.sweep.runner import SweepOutcome, run_sweep
from tensorize.sweep.spec import Sweep, SweepSpecError, load_sweep
from tensorize.sweep.task import run_point

__all__ = ["DaskExecutor", "LocalExecutor", "Point", "Sweep", "SweepOutcome",
           "SweepSpecError", "Task", "expand", "load_sweep", "make_executor", "point_key",
           "run_point", "run_sweep"]
