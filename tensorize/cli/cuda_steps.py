"""The ``--target cuda`` steps of ``tensorize run``: emit the CUDA C++, compile it with nvcc
for each architecture (with what ptxas says of each kernel's registers, shared memory and
spills, and the occupancy they allow), run it under the host emulation of the warp matrix API
(asynchronous copies landing at their wait, and again at their issue), and run it on a GPU
where pycuda finds one.

Each step reports through the run's report; a step whose tool is missing here (nvcc, a host
C++ compiler, pycuda and a driver) is reported as skipped with the reason, never as passed.
"""

from __future__ import annotations

import time
from typing import Any

import numpy as np

from ir import PrimFunc
from targets import cuda
from targets.cuda.compile import KernelResources, SassMix, cuobjdump_path, resource_usage, sass_mix
from targets.cuda.emulate import COPY_MODES
from targets.cuda.occupancy import occupancy

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
    disassemble = cuobjdump_path() is not None
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
        _ptxas(kernel, arch, report, disassemble)
    if not disassemble:
        report.skip("sass", "cuobjdump not found (the CUDA toolkit's, or the "
                            "nvidia-cuda-cuobjdump and nvidia-cuda-nvdisasm wheels)")


def _ptxas(kernel: cuda.CudaKernel, arch: str, report: Any, disassemble: bool) -> None:
    """One line per kernel: what ptxas says of its resources, and the occupancy they allow;
    then, when ``disassemble``, one with its SASS instruction mix."""
    try:
        resources = resource_usage(kernel, arch)
        mixes = {m.kernel: m for m in sass_mix(kernel, arch)} if disassemble else {}
    except cuda.CompileError as err:
        report.step("ptxas", False, str(err).splitlines()[0])
        return
    threads = {l.kernel: l.block[0] * l.block[1] * l.block[2] for l in kernel.launches}
    order = list(threads)
    for r in sorted(resources, key=lambda r: order.index(r.kernel)):
        line, data = _resources(r, threads[r.kernel])
        report.step("ptxas", True, line)
        if r.kernel in mixes:
            data["sass"] = _sass(mixes[r.kernel], arch, report)
        report.data["cuda"].setdefault("ptxas", []).append(data)


def _sass(mix: SassMix, arch: str, report: Any) -> dict[str, Any]:
    """The report line and the JSON record of one kernel's SASS mix (kernels without an MMA
    get no line)."""
    if mix.mma:
        where = "its k loop" if mix.scope == "k loop" else "the kernel (no loop holds an MMA)"
        report.step("sass", True, f"{mix.kernel} {arch}: {mix.mma} MMA and {mix.other} other "
                                  f"instructions in {where}: {mix.other_per_mma:.1f} per MMA")
    return {"mma": mix.mma, "other": mix.other, "scope": mix.scope}


def _resources(r: KernelResources, threads: int) -> tuple[str, dict[str, Any]]:
    """The report line and the JSON record of one kernel on one architecture."""
    o = occupancy(r.arch, r.registers, r.shared_bytes, threads)
    spills = r.spill_stores + r.spill_loads
    line = (f"{r.kernel} {r.arch}: {r.registers} registers, {r.shared_bytes} B shared, "
            f"{spills} spill bytes, {r.stack_frame} B stack; {threads} threads per block, "
            f"occupancy {o.warps} warps of {o.max_warps} ({o.fraction:.0%}) limited by "
            f"{o.limited_by}")
    data = {"kernel": r.kernel, "arch": r.arch, "registers": r.registers,
            "shared_bytes": r.shared_bytes, "spill_stores": r.spill_stores,
            "spill_loads": r.spill_loads, "stack_frame": r.stack_frame,
            "threads_per_block": threads, "blocks_per_sm": o.blocks, "warps_per_sm": o.warps,
            "occupancy": o.fraction, "limited_by": o.limited_by}
    return line, data


def _emulate(kernel: cuda.CudaKernel, inputs: dict[str, np.ndarray],
             reference: dict[str, np.ndarray], report: Any, compare: Any
             ) -> dict[str, np.ndarray] | None:
    """Runs the emulation with asynchronous copies landing at their wait and, when the
    kernel issues any, again landing at their issue; returns the first run's outputs."""
    modes = COPY_MODES if "tz_cp_async16(&" in kernel.source else COPY_MODES[:1]
    try:
        results = [_emulate_once(kernel, inputs, reference, report, compare, mode)
                   for mode in modes]
    except cuda.EmulationError as err:  # no host compiler: nothing can run
        report.skip("emulate", str(err))
        return None
    return results[0]


def _emulate_once(kernel: cuda.CudaKernel, inputs: dict[str, np.ndarray],
                  reference: dict[str, np.ndarray], report: Any, compare: Any, copies: str
                  ) -> dict[str, np.ndarray] | None:
    start = time.perf_counter()
    try:
        outputs = cuda.emulate(kernel, inputs, copies=copies)
    except cuda.EmulationError as err:
        if "no host C++ compiler" in str(err):
            raise
        report.step("emulate", False, f"copies landing {copies.replace('_', ' ')}: "
                                      f"{str(err).splitlines()[0]}")
        return None
    seconds = time.perf_counter() - start
    for name, expected in reference.items():
        ok, detail = compare(outputs[name], expected)
        report.step("emulate", ok, f"{name}: the CUDA source on the host's emulation of WMMA "
                                   f"and the thread model, asynchronous copies landing "
                                   f"{copies.replace('_', ' ')} ({seconds:.1f} s), against "
                                   f"the reference executor: {detail}")
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
