"""Split-K and the stream-K hybrid on CUDA: which GEMMs the cost model splits, with which
tiling, and what it expects of it; the split chosen after the default tiling beside the
tiling and split chosen together.

For the skinny and square GEMMs of ``cuda_suite.py`` (fp16 with fp32 accumulation, int8
with int32), two GEMMs the stream-K hybrid takes, and ResNet-50's convolutions and
classifier as int8 GEMMs of the same extents (M = output pixels, N = output channels, K =
input channels x kernel area; batch 1), the engine's default kernel
(``auto_tensorize(..., "cuda")``): its intrinsic, the default block tile and its blocks;
then the split the model took for that tiling alone (``choose_split``, the engine's choice
before the tiling and split were searched together: ``auto_tensorize(...,
tiling=<default>)``) and its modelled cycles; then what it takes now
(``tensorize/engine/cuda_split.py``: every candidate tiling priced unsplit, split in
each number of parts, and as the stream-K hybrid) and its modelled cycles; and the
modelled speed-up of the joint choice over the default tiling unsplit. Cycles of the
model on the oldest architecture of ``cuda.yaml``'s ``gpu:`` section (sm_80, 108 SMs:
every kernel is compiled for all of them), not of a GPU: ``bench_cuda.py --gpu-suite``
times the kernels where one is lent.

    .venv/bin/python bench/bench_cuda_split.py
"""

from __future__ import annotations

import re
import time
from collections import Counter

import suite_kernels  # bench/ is on the path: the benchmarks run as scripts
from bench_npu_traffic import resnet50_gemms

from intrinsics import default_registry
from tensorize.engine import auto_tensorize
from tensorize.engine.cuda_schedule import choose_tiling, narrow_inputs
from tensorize.engine.cuda_split import choose_split

# The note of the split chosen for a given tiling, and of the joint choice.
AFTER_NOTE = re.compile(r"split-K in (?P<parts>\d+) parts \(modelled on \w+: (?P<cycles>[\d,]+) "
                        r"cycles against (?P<unsplit>[\d,]+) unsplit\)")
JOINT_NOTE = re.compile(r"(?P<what>(split-K|stream-K)[^(]*) \(modelled on \w+: "
                        r"(?P<cycles>[\d,]+) cycles against (?P<unsplit>[\d,]+) unsplit")
SUITE = (("gemm_fp16", 1, 4096, 4096), ("gemm_fp16", 8, 4096, 4096),
         ("gemm_fp16", 64, 4096, 4096), ("gemm_fp16", 1000, 1000, 1000),
         ("gemm_fp16", 4096, 4096, 4096), ("gemm_int8", 1, 4096, 4096),
         ("gemm_int8", 8, 4096, 4096), ("gemm_int8", 64, 4096, 4096),
         ("gemm_fp16", 3584, 512, 1024), ("gemm_int8", 1024, 1792, 4096))
HEADER = ("| GEMM | intrinsic | default block tile | blocks | split after the tiling | "
          "its modelled cycles | tiling and split together | their modelled cycles | "
          "modelled speed-up |\n|---|---|---|---|---|---|---|---|---|")


def _cycles(text: str) -> float:
    return float(text.replace(",", ""))


def row(name: str, m: int, n: int, k: int, registry) -> str:
    """One GEMM's line: the default kernel's intrinsic, tile and blocks, the split chosen
    for that tiling and the tiling and split chosen together."""
    func = suite_kernels.builders()[name](m, n, k)
    (outcome,) = auto_tensorize(func, "cuda", registry=registry).tensorized
    intrinsic = registry.get(outcome.intrinsic)
    shape = tuple(intrinsic.extents)
    extents = tuple(outcome.extents[-3:])
    tiling = choose_tiling(extents, shape, max(intrinsic.operands[0].dtype.bits // 8, 1),
                           narrow_inputs(intrinsic))
    bm, bn, _ = tiling.block_tile(*shape)
    blocks = (extents[0] // bm) * (extents[1] // bn)
    # The engine's notes carry its choices (a transposed or padded mapping adds the
    # epilogue's launch to a split's cost); without one, the default tiling ran unsplit.
    unsplit = choose_split(extents, 1, intrinsic, tiling, registry).cycles[1]
    (given,) = auto_tensorize(func, "cuda", registry=registry, intrinsic=outcome.intrinsic,
                              tiling=tiling).tensorized
    after = AFTER_NOTE.search(given.mapping)
    before = (f"{after['parts']} parts", _cycles(after["cycles"])) if after else ("none",
                                                                                    unsplit)
    joint = JOINT_NOTE.search(outcome.mapping)
    now = (joint["what"], _cycles(joint["cycles"])) if joint else ("unsplit", unsplit)
    return (f"| {name.removeprefix('gemm_')} {m}x{n}x{k} | {outcome.intrinsic} | {bm}x{bn} | "
            f"{blocks} | {before[0]} | {before[1]:,.0f} | {now[0]} | {now[1]:,.0f} | "
            f"{unsplit / now[1]:.2f} |")


def main() -> None:
    registry = default_registry()
    start, cpu = time.perf_counter(), time.process_time()
    print("The suite's GEMMs and two the stream-K hybrid takes (engine default, sm_80 model):")
    print(HEADER)
    for name, m, n, k in SUITE:
        print(row(name, m, n, k, registry), flush=True)
    gemms: Counter[tuple[int, int, int]] = resnet50_gemms()
    print(f"\nResNet-50's {sum(gemms.values())} matrix layers ({len(gemms)} shapes) as int8 "
          "GEMMs:")
    print(HEADER)
    for m, n, k in sorted(gemms):
        print(row("gemm_int8", m, n, k, registry), flush=True)
    print(f"\n{time.perf_counter() - start:.1f} s wall, {time.process_time() - cpu:.1f} s CPU")


if __name__ == "__main__":
    main()
