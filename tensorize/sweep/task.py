"""One sweep point, run where the executor puts it (a pool process, a Dask worker):
tensorize the workload for the point's machine, simulate it, check the outputs against the
reference executor, and measure.

The steps are those of ``tensorize run KERNEL --target npu --machine FILE``, through the same
functions: the machine text is written to a file and read by the bounded machine reader
(``targets.npu.load_machine``, ``machine_registry``), the workload tensorized by
``auto_tensorize`` and simulated by ``targets.npu.run`` on the run command's random inputs
(seed 0). A point that fails returns its error; it never raises.
"""

from __future__ import annotations

import hashlib
import tempfile
import time
from functools import lru_cache
from pathlib import Path
from typing import Any

from ir.errors import TensorizeError
from tensorize.sweep.points import Task


def run_point(task: Task) -> dict[str, Any]:
    """The measurements of one point: ``key``, ``cycles``, ``utilisation`` (MACs over R x C x
    cycles), ``macs``, ``dram_bytes``, ``seconds`` and ``error`` (None, or why it failed)."""
    start = time.perf_counter()
    row: dict[str, Any] = {"key": task.key, "cycles": None, "utilisation": None, "macs": None,
                           "dram_bytes": None}
    try:
        row.update(_measure(task))
        row["error"] = None
    except TensorizeError as err:
        row["error"] = str(err)
    except Exception as err:  # noqa: BLE001  (a point's failure is its row; the rest go on)
        row["error"] = f"internal error: {type(err).__name__}: {err}"
    row["seconds"] = round(time.perf_counter() - start, 4)
    return row


def _measure(task: Task) -> dict[str, Any]:
    import numpy as np

    from targets import host, npu
    from tensorize.engine import auto_tensorize
    from tensorize.validate import compare, random_array

    config, registry = _machine(task.machine_text)
    func = task.workload.build()
    result = auto_tensorize(func, "npu", registry=registry, config=config)
    if not result.tensorized:
        reasons = "; ".join(f"{b.block}: {b.reason}" for b in result.blocks)
        raise TensorizeError(f"not tensorized: {reasons or 'the kernel has no block'}")
    rng = np.random.default_rng(0)
    inputs = {p.name: random_array(p.shape, p.dtype, rng) for p in func.params}
    run = npu.run(result.func, inputs, config, registry.get)
    expected = host.run(func, inputs)
    for name, want in expected.items():
        ok, detail = compare(run.outputs[name], want)
        if not ok:
            raise TensorizeError(f"{name} from the simulator differs from the reference "
                                 f"executor: {detail}")
    peak = run.cycles * config.array.rows * config.array.cols
    return {"cycles": run.cycles, "utilisation": round(run.macs / peak, 6) if peak else 0.0,
            "macs": run.macs, "dram_bytes": run.dram_bytes}


@lru_cache(maxsize=64)
def _machine(text: str) -> tuple[Any, Any]:
    """The machine config and registry of a point's machine text, read from a file (the
    bounded reader's input) once per process."""
    from targets.npu import load_machine, machine_registry

    path = machine_file(text, Path(tempfile.gettempdir()) / "tensorize-sweep" / "machines")
    return load_machine(path), machine_registry(path)


def machine_file(text: str, directory: Path) -> Path:
    """``text`` written as ``directory/<digest>.yaml`` (once), the file's path."""
    path = directory / f"{hashlib.sha256(text.encode()).hexdigest()[:16]}.yaml"
    if not path.exists():
        directory.mkdir(parents=True, exist_ok=True)
        partial = path.with_suffix(f".{id(text)}.tmp")
        partial.write_text(text)
        partial.replace(path)
    return path
