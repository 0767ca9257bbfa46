"""The cuda runner's steps for a kernel the engine made Hopper's GEMM (``--arch sm_90a``):
emit it over the kernel's own buffers (:func:`tensorize.engine.cuda_hopper.hopper_kernel`),
compile it for sm_90a alone (ptxas per launch with sm_90's occupancy limits, the spills
step, the SASS mix and the GEMM launch's wgmma, tensor-copy and mbarrier instructions),
emulate it with the tensor copies landing at their wait and again at their issue (the JSON
names the blocks fused into its store under ``cuda.epilogue``), and say
why the GPU run is skipped: a launch taking TMA tensor maps is refused there until the host
encodes them (``targets/cuda/run.py``).

A kernel the Hopper schedule refused is reported with the reason (a ``hopper`` skip) and
runs the way it would on the ``gpu:`` section's architectures, compiled for sm_90a.
"""

from __future__ import annotations

import numpy as np

from targets import cuda
from targets.cuda.compile import cuobjdump_path, sass_opcodes
from targets.cuda.run import gpu_unavailable
from tensorize.engine.cuda_hopper import HOPPER_ARCH, HopperChoice, HopperGemm, hopper_kernel
from tensorize.runners.context import RunContext
from tensorize.runners.cuda import (compile_steps, compiled_architectures, emulate_steps,
                                     source_with_launches)
from tensorize.runners.report import RunReport

# The SASS opcodes the GEMM launch's line counts: the wgmma of each input type, the tensor
# copy (UTMALDG) and the mbarrier operations (SYNCS).
SASS_COUNTED = ("HGMMA", "IGMMA", "QGMMA", "UTMALDG", "SYNCS")


def report_choice(choice: HopperChoice | None, report: RunReport) -> None:
    """One ``hopper`` step for a run on sm_90a: the GEMM the schedule took, or a skip with
    the reason it refused the kernel (which then takes the other families); nothing for
    other architectures (``choice`` None)."""
    if choice is None:
        return
    if choice.gemm is None:
        report.skip("hopper", f"{choice.reason}; the kernel takes the families of the gpu: "
                              "section's architectures (WMMA, mma.sync) instead")
        return
    report.step("hopper", True, choice.gemm.describe())


def run_hopper(ctx: RunContext, gemm: HopperGemm, name: str,
               reference: dict[str, np.ndarray], inputs: dict[str, np.ndarray],
               report: RunReport, emitted: list[str], emit_code: bool
               ) -> dict[str, np.ndarray]:
    """Emit, compile and emulate the Hopper kernel of ``gemm`` (launches named after
    ``name``, the kernel function's), and skip its GPU run with the reason, each step in
    ``report``; returns the emulation's outputs (``reference`` where it could not run)."""
    kernel = hopper_kernel(gemm, ctx.registry, name)
    epilogue = gemm.operands.epilogue
    launches = "; ".join(f"{l.kernel} grid {l.grid} block {l.block}"
                         + (f" cluster ({l.cluster}, 1, 1)" if l.cluster > 1 else "")
                         for l in kernel.launches)
    report.step("emit", True, f"CUDA C++ for {HOPPER_ARCH}, {len(kernel.source.splitlines())} "
                              f"lines, {len(kernel.launches)} kernel(s): {launches}")
    report.data["cuda"] = {"arch": HOPPER_ARCH,
                           "launches": [{"kernel": l.kernel, "grid": list(l.grid),
                                         "block": list(l.block), "stages": l.stages,
                                         "dynamic_shared": l.dynamic_shared,
                                         "tensor_maps": len(l.tensor_maps),
                                         "cluster": l.cluster}
                                        for l in kernel.launches],
                           "params": list(kernel.params),
                           "epilogue": list(epilogue.blocks) if epilogue is not None else []}
    if emit_code:
        emitted.append(_with_maps(source_with_launches(kernel), kernel))
    compile_steps(kernel, report, compiled_architectures(ctx), (HOPPER_ARCH, gemm.intrinsic.name))
    if cuda.nvcc_path() is not None and cuobjdump_path() is not None:
        _gemm_opcodes(kernel, report)
    outputs = emulate_steps(kernel, inputs, reference, report) or reference
    reason = gpu_unavailable()
    report.skip("gpu", f"no CUDA device to run on ({reason})" if reason is not None else
                "launches taking TMA tensor maps run under the emulation only: the host "
                "does not encode CUtensorMap for a GPU yet (cuTensorMapEncodeTiled)")
    return outputs


def _with_maps(text: str, kernel: cuda.CudaKernel) -> str:
    """``text`` (the launch lines, then the source) with a line per tensor map that a
    launch takes after the buffers, as the host must encode it, before the source."""
    lines = [f"//   then {launch.kernel}'s tensor map tz_map_{operand} over {m.buffer} "
             f"(cuTensorMapEncodeTiled, 2-d, swizzle {m.swizzle}): dims {m.dims}, row stride "
             f"{m.stride} bytes, box {m.box}"
             for launch in kernel.launches
             for operand, m in zip("ab", launch.tensor_maps)]
    head = text[:len(text) - len(kernel.source)]
    return head + "".join(f"{line}\n" for line in lines) + kernel.source


def _gemm_opcodes(kernel: cuda.CudaKernel, report: RunReport) -> None:
    """The ``sass`` line of the GEMM launch: its wgmma, tensor-copy and mbarrier
    instructions on sm_90a (in the JSON under ``cuda.sass_opcodes``)."""
    (launch,) = [l for l in kernel.launches if l.tensorized]
    try:
        by_function = sass_opcodes(kernel, HOPPER_ARCH)
    except cuda.CompileError as err:
        report.step("sass", False, str(err).splitlines()[0])
        return
    (counts,) = [c for f, c in by_function.items() if launch.kernel in f]
    counted = {o: counts[o] for o in SASS_COUNTED if counts.get(o)}
    wgmma = sum(n for o, n in counted.items() if o.endswith("GMMA"))
    text = ", ".join(f"{n} {o}" for o, n in counted.items()) or "none of them"
    report.step("sass", bool(wgmma and counted.get("UTMALDG")),
                f"{launch.kernel} {HOPPER_ARCH}: {text} (wgmma fed by TMA tensor copies "
                f"requires both a GMMA and UTMALDG)")
    report.data["cuda"]["sass_opcodes"] = counted
