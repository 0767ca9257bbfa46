"""The ``--target cuda`` steps of ``tensorize run``: emit the CUDA C++, compile it with nvcc
for each architecture, run it under the host emulation of the warp matrix API, and run it on
a GPU where pycuda finds one.

Each step reports through the run's report; a step whose tool is missing here (nvcc, a host
C++ compiler, pycuda and a driver) is reported as skipped with the reason, never as passed.
"""

from __future__ import annotations

import time
from typing import Any

import numpy as np

from ir import PrimFunc
from targets import cuda

# The architectures every emitted kernel is compiled for: Ampere (cp.async) and Hopper.
ARCHITECTURES = ("sm_80", "sm_90")


def run_cuda(func: PrimFunc, reference: dict[str, np.ndarray], inputs: dict[str, np.ndarray],
             report: Any, compare: Any, emitted: list[str], emit_code: bool
             ) -> dict[str, np.ndarray]:
    """Emit ``func`` (tensorized for cuda) as CUDA C++ and check it every way this machine
    allows; returns the outputs of the most faithful run (GPU, else emulation, else
    ``reference``)."""
    kernel = cuda.emit(func)
    launches = "; ".join(f"{l.kernel} grid {l.grid} block {l.block}" for l in kernel.launches)
    report.step("emit", True, f"CUDA C++, {len(kernel.source.splitlines())} lines, "
                              f"{len(kernel.launches)} kernel(s): {launches}")
    report.data["cuda"] = {"launches": [{"kernel": l.kernel, "grid": list(l.grid),
                                         "block": list(l.block)} for l in kernel.launches],
                           "params": list(kernel.params)}
    if emit_code:
        emitted.append(_with_launches(kernel))
    _compile(kernel, report)
    outputs = _emulate(kernel, inputs, reference, report, compare) or reference
    return _on_gpu(kernel, inputs, reference, report, compare) or outputs


def _with_launches(kernel: cuda.CudaKernel) -> str:
    """The source, preceded by how to launch it (one comment line per kernel, in order)."""
    lines = [f"// launch in order, arguments ({', '.join(kernel.params)}):"]
    lines += [f"//   {l.kernel}<<<dim3{l.grid}, dim3{l.block}>>>" for l in kernel.launches]
    return "\n".join(lines) + "\n" + kernel.source


def _compile(kernel: cuda.CudaKernel, report: Any) -> None:
    if cuda.nvcc_path() is None:
        report.skip("compile", "nvcc not found (install the CUDA toolkit or set NVCC)")
        return
    for arch in ARCHITECTURES:
        start = time.perf_counter()
        try:
            ptx = cuda.compile(kernel, arch).decode()
        except cuda.CompileError as err:
            report.step("compile", False, str(err).splitlines()[0])
            continue
        mma = ptx.count("mma.sync") + ptx.count("wmma.mma")
        report.step("compile", True, f"nvcc -arch={arch}: {time.perf_counter() - start:.1f} s, "
                                     f"{mma} tensor-core instruction(s) in the PTX")


def _emulate(kernel: cuda.CudaKernel, inputs: dict[str, np.ndarray],
             reference: dict[str, np.ndarray], report: Any, compare: Any
             ) -> dict[str, np.ndarray] | None:
    start = time.perf_counter()
    try:
        outputs = cuda.emulate(kernel, inputs)
    except cuda.EmulationError as err:
        if "no host C++ compiler" in str(err):
            report.skip("emulate", str(err))
        else:
            report.step("emulate", False, str(err).splitlines()[0])
        return None
    seconds = time.perf_counter() - start
    for name, expected in reference.items():
        ok, detail = compare(outputs[name], expected)
        report.step("emulate", ok, f"{name}: the CUDA source on the host's emulation of WMMA "
                                   f"and the thread model ({seconds:.1f} s) against the "
                                   f"reference executor: {detail}")
    return outputs


def _on_gpu(kernel: cuda.CudaKernel, inputs: dict[str, np.ndarray],
            reference: dict[str, np.ndarray], report: Any, compare: Any
            ) -> dict[str, np.ndarray] | None:
    try:
        import pycuda.autoinit  # noqa: F401  (creates the context, or fails without a driver)
    except Exception as err:  # ImportError without pycuda, pycuda's own errors without a GPU
        report.skip("gpu", f"no CUDA device to run on ({type(err).__name__}: {err})")
        return None
    run = cuda.run(kernel, inputs, repeat=10)
    for name, expected in reference.items():
        ok, detail = compare(run.outputs[name], expected)
        report.step("gpu", ok, f"{name} on the GPU, best of 10: {run.milliseconds:.3f} ms; "
                               f"against the reference executor: {detail}")
    report.data["cuda"]["gpu_ms"] = run.milliseconds
    return run.outputs
