"""Running emitted CUDA C++ on a GPU through pycuda (imported only here, only when called)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from targets.cuda.compile import compile
from targets.cuda.emit import CudaKernel

__all__ = ["GpuRun", "run"]


@dataclass(frozen=True, slots=True)
class GpuRun:
    """Outputs by parameter name, and the best time of all launches together in ms."""

    outputs: dict[str, np.ndarray]
    milliseconds: float


def run(kernel: CudaKernel, inputs: Mapping[str, np.ndarray] | Sequence[np.ndarray], *,
        arch: str | None = None, repeat: int = 1) -> GpuRun:
    """Compile ``kernel`` for the current GPU (or ``arch``), run its launches ``repeat`` times
    on copies of ``inputs`` (others and intermediates start as zeros) and return the outputs
    of the last run with the best time. Needs pycuda and a CUDA driver (ImportError or
    pycuda's error otherwise)."""
    import pycuda.autoinit  # noqa: F401  (creates the context)
    import pycuda.driver as driver

    device = driver.Context.get_device()
    major, minor = device.compute_capability()
    module = driver.module_from_buffer(compile(kernel, arch or f"sm_{major}{minor}", "cubin"))
    if not isinstance(inputs, Mapping):
        inputs = {b.name: a for b, a in zip(kernel.buffers, inputs)}
    allocations = []
    for buffer in kernel.buffers:
        host = np.zeros(buffer.shape, buffer.dtype.numpy)
        if buffer.name in inputs:
            host[...] = inputs[buffer.name]
        allocations.append(driver.to_device(host))
    functions = [(module.get_function(l.kernel), l) for l in kernel.launches]
    start, end = driver.Event(), driver.Event()
    best = float("inf")
    for _ in range(max(repeat, 1)):
        start.record()
        for function, launch in functions:
            function(*allocations, grid=launch.grid, block=launch.block)
        end.record()
        end.synchronize()
        best = min(best, start.time_till(end))
    by_name = {b.name: (b, a) for b, a in zip(kernel.buffers, allocations)}
    outputs = {}
    for name in kernel.outputs:
        buffer, allocation = by_name[name]
        outputs[name] = driver.from_device(allocation, buffer.shape, buffer.dtype.numpy)
    return GpuRun(outputs, best)
