"""Running emitted CUDA C++ on a GPU through CuPy (imported only here, only when called).

CuPy ships prebuilt wheels (``cupy-cuda12x``) with the driver API, CUDA events and the
cuBLAS bindings the benchmark compares against; the cubin nvcc makes here is loaded with
``cupy.RawModule`` and launched with its dynamic shared memory.
"""

from __future__ import annotations

import shutil
import subprocess
import tempfile
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from targets.cuda.cexpr import device_numpy
from targets.cuda.compile import compile
from targets.cuda.emit import CudaKernel
from targets.cuda.errors import CompileError

__all__ = ["GpuRun", "device_summary", "event_times", "gpu_unavailable", "launch", "load",
           "run", "sm_clocks"]


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


def load(kernel: CudaKernel, arch: str | None = None, cubin: bytes | None = None) -> list:
    """The kernel's launches as (CuPy function, Launch) pairs, from ``cubin`` when given
    (compiled elsewhere, e.g. in a worker process), else compiled for the current device (or
    ``arch``); a function needing over 48 KB of dynamic shared memory is allowed it
    (``cudaFuncAttributeMaxDynamicSharedMemorySize``)."""
    if any(launch.tensor_maps for launch in kernel.launches):
        # The driver's encoding (cuTensorMapEncodeTiled) and by-value map arguments are not
        # wired into the CuPy launch yet; the emulation encodes its own (emulation/wgmma.h).
        raise CompileError(f"{kernel.name}: launches taking TMA tensor maps run under the "
                           "emulation only (no host encoding of CUtensorMap on a GPU yet)")
    import cupy

    if cubin is None:
        cubin = compile(kernel, arch or f"sm_{cupy.cuda.Device().compute_capability}", "cubin")
    with tempfile.TemporaryDirectory(prefix="tz_cuda_run_") as folder:
        path = Path(folder) / f"{kernel.name}.cubin"
        path.write_bytes(cubin)
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
    functions = load(kernel, arch)
    import cupy

    if not isinstance(inputs, Mapping):
        inputs = {b.name: a for b, a in zip(kernel.buffers, inputs)}
    allocations = []
    for buffer in kernel.buffers:
        host = np.zeros(buffer.shape, device_numpy(buffer.dtype))
        if buffer.name in inputs:
            host[...] = np.asarray(inputs[buffer.name]).astype(host.dtype)
        allocations.append(cupy.asarray(host))
    start, end = cupy.cuda.Event(), cupy.cuda.Event()
    best = float("inf")
    for _ in range(max(repeat, 1)):
        start.record()
        launch(functions, tuple(allocations))
        end.record()
        end.synchronize()
        best = min(best, cupy.cuda.get_elapsed_time(start, end))
    by_name = {b.name: a for b, a in zip(kernel.buffers, allocations)}
    dtypes = {b.name: b.dtype.numpy for b in kernel.buffers}
    return GpuRun({name: cupy.asnumpy(by_name[name]).astype(dtypes[name])
                   for name in kernel.outputs}, best)


def launch(functions: Sequence, args: tuple) -> None:
    """Every launch of ``functions`` (from :func:`load`), in order, on ``args`` (device
    arrays in the kernel's parameter order), each with its dynamic shared memory."""
    for function, step in functions:
        function(step.grid, step.block, args, shared_mem=step.dynamic_shared)


def event_times(call: Callable[[], object], repeat: int, warmup: int = 3) -> list[float]:
    """Milliseconds of each of ``repeat`` calls of ``call()`` (which enqueues GPU work on
    the current stream), each between two CUDA events, after ``warmup`` untimed calls."""
    import cupy

    for _ in range(warmup):
        call()
    cupy.cuda.get_current_stream().synchronize()
    start, end = cupy.cuda.Event(), cupy.cuda.Event()
    times = []
    for _ in range(max(repeat, 1)):
        start.record()
        call()
        end.record()
        end.synchronize()
        times.append(cupy.cuda.get_elapsed_time(start, end))
    return times


def device_summary() -> dict[str, object]:
    """The current device as plain values: name, compute capability, SM count, memory, and
    the driver, runtime and CuPy versions (CUDA's integer form, 13000 for 13.0)."""
    import cupy

    runtime = cupy.cuda.runtime
    properties = runtime.getDeviceProperties(cupy.cuda.Device().id)
    name = properties.get("name", b"?")
    return {"name": name.decode() if isinstance(name, bytes) else str(name),
            "compute_capability": cupy.cuda.Device().compute_capability,
            "sm_count": properties.get("multiProcessorCount"),
            "memory_bytes": properties.get("totalGlobalMem"),
            "driver_version": runtime.driverGetVersion(),
            "runtime_version": runtime.runtimeGetVersion(),
            "cupy_version": cupy.__version__}


# nvidia-smi's names for the clocks recorded beside each timing: the current SM and memory
# clocks (MHz) and the SM's maximum; "[N/A]" where a field is not supported.
SMI_CLOCKS = ("clocks.sm", "clocks.mem", "clocks.max.sm")


def sm_clocks() -> dict[str, object]:
    """The GPU's clocks now, in MHz, read by ``nvidia-smi --query-gpu`` (:data:`SMI_CLOCKS`)
    where it runs; else the device's reported maximum SM and memory clocks through CuPy
    (``source`` says which); fields neither gives are absent."""
    smi = shutil.which("nvidia-smi")
    if smi is not None:
        done = subprocess.run([smi, f"--query-gpu={','.join(SMI_CLOCKS)}",
                               "--format=csv,noheader,nounits", "-i", "0"],
                              capture_output=True, text=True, timeout=30)
        values = [v.strip() for v in done.stdout.strip().splitlines()[0].split(",")] \
            if done.returncode == 0 and done.stdout.strip() else []
        if len(values) == len(SMI_CLOCKS):
            found: dict[str, object] = {"source": "nvidia-smi"}
            found.update({k: float(v) for k, v in zip(SMI_CLOCKS, values) if _number(v)})
            return found
    import cupy

    attributes = cupy.cuda.Device().attributes
    found = {"source": "cupy device attributes (maximum clocks, not current)"}
    # Attributes are in kHz.
    for key, name in (("ClockRate", "clocks.max.sm"), ("MemoryClockRate", "clocks.max.mem")):
        if key in attributes:
            found[name] = attributes[key] / 1000
    return found


def _number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True
