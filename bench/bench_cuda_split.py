"""Split-K on CUDA: which GEMMs the cost model splits, into how many parts, and what it
expects of it.

For the skinny and square GEMMs of ``cuda_suite.py`` (fp16 with fp32 accumulation, int8
with int32) and ResNet-50's convolutions and classifier as int8 GEMMs of the same extents
(M = output pixels, N = output channels, K = input channels x kernel area; batch 1), the
engine's default kernel (``auto_tensorize(..., "cuda")``): its intrinsic, block tile, the
blocks of the unsplit grid, the parts the model takes (``tensorize/engine/cuda_split.py``)
and the modelled cycles unsplit and split, on the oldest architecture of ``cuda.yaml``'s
``gpu:`` section (sm_80, 108 SMs: every kernel is compiled for all of them). Figures of the
model, not of a GPU: ``bench_cuda.py --gpu-suite`` times the kernels where one is lent.

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

SPLIT_NOTE = re.compile(r"split-K in (?P<parts>\d+) parts \(modelled on \w+: (?P<split>[\d,]+) "
                        r"cycles against (?P<unsplit>[\d,]+) unsplit\)")
SUITE = (("gemm_fp16", 1, 4096, 4096), ("gemm_fp16", 8, 4096, 4096),
         ("gemm_fp16", 64, 4096, 4096), ("gemm_fp16", 1000, 1000, 1000),
         ("gemm_fp16", 4096, 4096, 4096), ("gemm_int8", 1, 4096, 4096),
         ("gemm_int8", 8, 4096, 4096), ("gemm_int8", 64, 4096, 4096))


def row(name: str, m: int, n: int, k: int, registry) -> str:
    """One GEMM's line: the default kernel's intrinsic, tile, blocks and the model's split."""
    func = suite_kernels.builders()[name](m, n, k)
    result = auto_tensorize(func, "cuda", registry=registry)
    (outcome,) = result.tensorized
    intrinsic = registry.get(outcome.intrinsic)
    shape = tuple(intrinsic.extents)
    extents = tuple(outcome.extents[-3:])
    tiling = choose_tiling(extents, shape, max(intrinsic.operands[0].dtype.bits // 8, 1),
                           narrow_inputs(intrinsic))
    bm, bn, _ = tiling.block_tile(*shape)
    blocks = (extents[0] // bm) * (extents[1] // bn)
    # The engine's note carries its choice (a transposed mapping adds the epilogue's launch
    # to the split's cost); without one, the unsplit figure is the model's.
    note = SPLIT_NOTE.search(outcome.mapping)
    if note is None:
        parts = 1
        unsplit = split = choose_split(extents, 1, intrinsic, tiling, registry).cycles[1]
    else:
        parts = int(note["parts"])
        split, unsplit = (float(note[g].replace(",", "")) for g in ("split", "unsplit"))
    return (f"| {name.removeprefix('gemm_')} {m}x{n}x{k} | {outcome.intrinsic} | {bm}x{bn} | "
            f"{blocks} | {parts} | {unsplit:,.0f} | {split:,.0f} | {unsplit / split:.2f} |")


def main() -> None:
    registry = default_registry()
    start, cpu = time.perf_counter(), time.process_time()
    header = ("| GEMM | intrinsic | block tile | blocks | parts | modelled cycles unsplit | "
              "split | modelled speed-up |\n|---|---|---|---|---|---|---|---|")
    print("The suite's GEMMs (engine default, sm_80 model):")
    print(header)
    for name, m, n, k in SUITE:
        print(row(name, m, n, k, registry), flush=True)
    gemms: Counter[tuple[int, int, int]] = resnet50_gemms()
    print(f"\nResNet-50's {sum(gemms.values())} matrix layers ({len(gemms)} shapes) as int8 "
          "GEMMs:")
    print(header)
    for m, n, k in sorted(gemms):
        print(row("gemm_int8", m, n, k, registry), flush=True)
    print(f"\n{time.perf_counter() - start:.1f} s wall, {time.process_time() - cpu:.1f} s CPU")


if __name__ == "__main__":
    main()
