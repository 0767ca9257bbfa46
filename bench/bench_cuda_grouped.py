"""Grouped and depthwise 3x3 convolutions (1 x 56 x 56, NHWC int8) on the CUDA backend,
static figures (no GPU needed): for each grouped layer, the mapping, launches, the GEMM's
grid, registers, shared memory and non-MMA instructions per MMA in its k loop on sm_80 (the
SASS, where cuobjdump is found); for a depthwise layer, the reason it is not tensorized.

    .venv/bin/python bench/bench_cuda_grouped.py
"""

from __future__ import annotations

import sys

from intrinsics import default_registry
from ir import ScheduleError
from ir.onnx.kernels import ConvShape, conv2d
from targets import cuda
from targets.cuda.compile import cuobjdump_path, resource_usage, sass_mix
from tensorize.engine import auto_tensorize, candidate_intrinsics
from tensorize.engine.cuda_grouped import reshape
from tensorize.schedule import Schedule

# (channels in, channels out, groups): 16, 4 and 8 channels a group (ResNeXt-50 32x4d's first
# stage is the 4), and a depthwise layer (MobileNet's).
LAYERS = [(64, 64, 4), (128, 128, 32), (256, 256, 32), (64, 64, 64)]


def layer(c: int, o: int, groups: int) -> str:
    """One line of figures for a 1 x 56 x 56 x c -> o layer in ``groups`` groups."""
    shape = ConvShape(1, c, 56, 56, o, (3, 3), (1, 1), (1, 1, 1, 1), (1, 1), groups)
    name = f"1x56x56x{c} -> {o}, {groups} groups of {c // groups}"
    registry = default_registry()  # a bench is an edge: the built-in descriptions
    sch = Schedule(conv2d(shape, "int8"), registry)
    try:
        reshape(sch, "conv", candidate_intrinsics(registry, "cuda"), {})
    except ScheduleError as err:
        return f"{name}: {err}"
    result = auto_tensorize(sch.func, "cuda", registry=registry)
    kernel = cuda.emit(result.func, registry)
    (launch,) = [l for l in kernel.launches if l.tensorized]
    (usage,) = [r for r in resource_usage(kernel, "sm_80") if r.kernel == launch.kernel]
    line = (f"{name}: {result.blocks[0].intrinsic} {result.blocks[0].mapping}; "
            f"{len(kernel.launches)} launches, GEMM grid {launch.grid}, sm_80 "
            f"{usage.registers} registers, {usage.shared_bytes} B shared")
    if cuobjdump_path() is None:
        return line + "; SASS skipped: no cuobjdump"
    (mix,) = [m for m in sass_mix(kernel, "sm_80") if m.kernel == launch.kernel]
    return line + f", {mix.other} non-MMA per {mix.mma} MMA: {mix.other_per_mma:.2f}"


def main() -> None:
    """Print one line per layer."""
    print("command:", " ".join([".venv/bin/python", *sys.argv]))
    for c, o, groups in LAYERS:
        print(layer(c, o, groups))


if __name__ == "__main__":
    main()
