"""One sweep point, run where the executor puts it (a pool process, a Dask worker):
tensorize the workload for the point's machine, simulate it, check the outputs against the
reference executor, and measure.

The steps are those of ``tensorize run KERNEL --target npu --machine FILE``, through the same
functions: the machine text the task carries is written to a file in this process's private
directory and read by the bounded machine reader (``targets.npu.load_machine``,
``machine_registry``), the workload tensorized by ``auto_tensorize`` and simulated by
``targets.npu.run`` on the run command's random inputs (seed 0). The inputs and the reference
executor's outputs depend on the workload alone, so a worker makes them once per workload.
A point that fails returns its error; it never raises.

Nothing a worker reads comes from a shared place: the directory is made by ``mkdtemp`` (mode
0700, an unguessable name) in the worker process itself, and a machine file is checked against
the task's text before each use, so no file is simulated because of its name (docs/trust.md).
"""

from __future__ import annotations

import atexit
import hashlib
import shutil
import tempfile
import time
from functools import lru_cache
from pathlib import Path
from typing import Any

from threadpoolctl import threadpool_limits

from ir.errors import TensorizeError
from tensorize.sweep.points import Task
from tensorize.sweep.workloads import Workload


def run_point(task: Task) -> dict[str, Any]:
    """The measurements of one point: ``key``, ``cycles``, ``utilisation`` (MACs over R x C x
    cycles), ``macs``, ``dram_bytes``, ``seconds`` and ``error`` (None, or why it failed)."""
    start = time.perf_counter()
    row: dict[str, Any] = {"key": task.key, "cycles": None, "utilisation": None, "macs": None,
                           "dram_bytes": None}
    try:
        # A worker is one of several on the machine: BLAS threads (the reference executor's,
        # the simulator's tile products) would compete with the other workers.
        with threadpool_limits(1, user_api="blas"):
            row.update(_measure(task))
        row["error"] = None
    except TensorizeError as err:
        row["error"] = str(err)
    except Exception as err:  # noqa: BLE001  (a point's failure is its row; the rest go on)
        row["error"] = f"internal error: {type(err).__name__}: {err}"
    row["seconds"] = round(time.perf_counter() - start, 4)
    return row


def _measure(task: Task) -> dict[str, Any]:
    from tensorize.engine import auto_tensorize
    from tensorize.runners.npu import simulate_and_measure
    from tensorize.validate import compare

    config, registry = _machine(task.machine_text)
    func = task.workload.build()
    result = auto_tensorize(func, "npu", registry=registry, config=config)
    if not result.tensorized:
        reasons = "; ".join(f"{b.block}: {b.reason}" for b in result.blocks)
        raise TensorizeError(f"not tensorized: {reasons or 'the kernel has no block'}")
    inputs, expected = _reference(task.workload)
    measure = simulate_and_measure(result.func, inputs, config, registry)
    for name, want in expected.items():
        ok, detail = compare(measure.run.outputs[name], want)
        if not ok:
            raise TensorizeError(f"{name} from the simulator differs from the reference "
                                 f"executor: {detail}")
    return {"cycles": measure.cycles, "utilisation": round(measure.utilisation, 6),
            "macs": measure.macs, "dram_bytes": measure.dram_bytes}


@lru_cache(maxsize=8)
def _reference(workload: Workload) -> tuple[dict[str, Any], dict[str, Any]]:
    """A workload's inputs (the run command's random inputs, seed 0) and the reference
    executor's outputs on them, once per worker process: a worker runs one workload on many
    machines, and neither depends on the machine. Callers only read them (the simulator and
    the host backend copy their inputs)."""
    import numpy as np

    from targets import host
    from tensorize.validate import random_array

    func = workload.build()
    rng = np.random.default_rng(0)
    inputs = {p.name: random_array(p.shape, p.dtype, rng) for p in func.params}
    return inputs, host.run(func, inputs)


@lru_cache(maxsize=64)
def _machine(text: str) -> tuple[Any, Any]:
    """The machine config and registry of a point's machine text, read from a file (the
    bounded reader's input) once per process."""
    from targets.npu import load_machine, machine_registry

    path = machine_file(text, _private_directory())
    config, registry = load_machine(path), machine_registry(path)
    if path.read_bytes() != text.encode():
        raise TensorizeError(f"the machine file {path} changed while it was read; the point "
                             "was not simulated")
    return config, registry


@lru_cache(maxsize=1)
def _private_directory() -> Path:
    """This process's own directory for machine files: made by mkdtemp (mode 0700, a fresh
    random name), removed when the process exits."""
    directory = Path(tempfile.mkdtemp(prefix="tensorize-sweep-"))
    atexit.register(shutil.rmtree, directory, True)
    return directory


def machine_file(text: str, directory: Path) -> Path:
    """``text`` written as ``directory/<digest>.yaml``, the file's path. A file already
    there is kept only when it holds exactly ``text``; otherwise it is replaced."""
    path = directory / f"{hashlib.sha256(text.encode()).hexdigest()[:16]}.yaml"
    try:
        if path.read_bytes() == text.encode():
            return path
    except OSError:
        pass  # absent or unreadable: written below
    directory.mkdir(parents=True, exist_ok=True)
    with tempfile.NamedTemporaryFile("w", dir=directory, suffix=".tmp", delete=False) as part:
        part.write(text)
    Path(part.name).replace(path)
    return path
