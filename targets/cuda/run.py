"""Running emitted CUDA C++ on a GPU through CuPy (imported only here, only when called).

CuPy ships prebuilt wheels (``cupy-cuda12x``) with the driver API, CUDA events and the
cuBLAS bindings the benchmark compares against; the cubin nvcc makes here is loaded with
``cupy.RawModule`` and launched with its dynamic shared memory.
"""

from __future__ import annotations

import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from targets.cuda.compile import compile
from targets.cuda.emit import CudaKernel

__all__ = ["GpuRun", "gpu_unavailable", "load", "run"]


@dataclass(frozen=True, slots=True)
class GpuRun:
    """Outputs by parameter name, and the best time of all launches together in ms."""

    outputs: dict[str, np.ndarray]
    milliseconds: float


def gpu_unavailable() -> str | None:
    """None when CuPy can reach a CUDA device, else why not."""
    try:
        import cupy

        count = cupy.cuda.runtime.getDeviceCount()
    except Exception as err:  # noqa: BLE001  ImportError without CuPy; its errors without a driver
        return f"{type(err).__name__}: {err}"
    return None if count else "no CUDA device"


def load(kernel: CudaKernel, arch: str | None = None) -> list:
    """The kernel's launches as (CuPy function, Launch) pairs, compiled for the current
    device (or ``arch``); a function needing over 48 KB of dynamic shared memory is allowed
    it (``cudaFuncAttributeMaxDynamicSharedMemorySize``)."""
    import cupy

    arch = arch or f"sm_{cupy.cuda.Device().compute_capability}"
    with tempfile.TemporaryDirectory(prefix="tz_cuda_run_") as folder:
        path = Path(folder) / f"{kernel.name}.cubin"
        path.write_bytes(compile(kernel, arch, "cubin"))
        module = cupy.RawModule(path=str(path))
        functions = [(module.get_function(l.kernel), l) for l in kernel.launches]
    for function, launch in functions:
        if launch.dynamic_shared:
            function.max_dynamic_shared_size_bytes = launch.dynamic_shared
    return functions


def run(kernel: CudaKernel, inputs: Mapping[str, np.ndarray] | Sequence[np.ndarray], *,
        arch: str | None = None, repeat: int = 1) -> GpuRun:
    """Compile ``kernel`` for the current GPU (or ``arch``), run its launches ``repeat`` times
    on copies of ``inputs`` (others and intermediates start as zeros) and return the outputs
    of the last run with the best time between CUDA events. Needs CuPy and a CUDA driver
    (ImportError or CuPy's error otherwise)."""
    import cupy

    functions = load(kernel, arch)
    if not isinstance(inputs, Mapping):
        inputs = {b.name: a for b, a in zip(kernel.buffers, inputs)}
    allocations = []
    for buffer in kernel.buffers:
        host = np.zeros(buffer.shape, buffer.dtype.numpy)
        if buffer.name in inputs:
            host[...] = inputs[buffer.name]
        allocations.append(cupy.asarray(host))
    start, end = cupy.cuda.Event(), cupy.cuda.Event()
    best = float("inf")
    for _ in range(max(repeat, 1)):
        start.record()
        for function, launch in functions:
            function(launch.grid, launch.block, tuple(allocations),
                     shared_mem=launch.dynamic_shared)
        end.record()
        end.synchronize()
        best = min(best, cupy.cuda.get_elapsed_time(start, end))
    by_name = {b.name: a for b, a in zip(kernel.buffers, allocations)}
    return GpuRun({name: cupy.asnumpy(by_name[name]) for name in kernel.outputs}, best)
