"""bf16 GEMM on x86 with AVX-512 BF16: the x86 target's code (VDPBF16PS in the
register-blocked micro-kernel), run natively through LLVM's JIT on one thread, beside
numpy's float32 GEMM (BLAS, pinned to one thread) on the same values.

    .venv/bin/python bench/bench_x86_bf16.py [--size N] [--rounds R]   (default 1024, 10)

The contenders are timed in interleaved rounds: each round runs every contender
:data:`PER_ROUND` times in turn, and each contender's figures are the best and the median of
all its runs, wall time with the process's CPU time beside it, in milliseconds, then GFLOP/s
(two per multiply-accumulate) of the best. Ours runs with its packing of B in each call, and
with B packed once (``targets.cpu.split_constants``, as a network's weights are). Before
timing, our output is checked bit for bit against the hardware-order reference
(``intrinsics.oracle.hardware_gemm``) and against float64 within the accumulation's bound.
"""

from __future__ import annotations

import argparse
import os

# Single thread: BLAS behind numpy reads these when it loads.
for _name in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ[_name] = "1"

import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

import ml_dtypes
import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import ir
from intrinsics import default_registry
from intrinsics.oracle import hardware_gemm
from ir import te
from targets import cpu
from tensorize.engine import auto_tensorize

PER_ROUND = 3
Timing = list[tuple[float, float]]


def gemm_bf16(size: int) -> ir.PrimFunc:
    """C = A @ B, size^3, A and B bfloat16, accumulated in float32."""
    a = te.placeholder((size, size), "bfloat16", "A")
    b = te.placeholder((size, size), "bfloat16", "B")
    k = te.reduce_axis(size, "k")
    c = te.compute((size, size), lambda i, j: te.sum(
        ir.cast("float32", a[i, k]) * ir.cast("float32", b[k, j]), axis=[k]), "C")
    return te.create_prim_func([a, b, c], "gemm_bf16")


def kernel_runs(kernel: cpu.CpuKernel, inputs: dict[str, np.ndarray]
                ) -> Callable[[], Timing]:
    """A contender: PER_ROUND native runs of ``kernel``, (wall, CPU) seconds each."""
    def run() -> Timing:
        result = cpu.run(kernel, inputs, PER_ROUND)
        return list(zip(result.seconds, result.cpu_seconds))
    return run


def numpy_runs(a: np.ndarray, b: np.ndarray) -> Callable[[], Timing]:
    """A contender: PER_ROUND float32 GEMMs through numpy's BLAS."""
    def run() -> Timing:
        runs = []
        for _ in range(PER_ROUND):
            wall, cpu_time = time.perf_counter(), time.process_time()
            np.matmul(a, b)
            runs.append((time.perf_counter() - wall, time.process_time() - cpu_time))
        return runs
    return run


def packed_once(func: ir.PrimFunc, inputs: dict[str, np.ndarray], registry
                ) -> tuple[cpu.CpuKernel, dict[str, np.ndarray]]:
    """The tensorized ``func`` split at B's packing, that packing run once: the per-call
    kernel and its inputs."""
    split = cpu.split_constants(func, ["B"])
    packed = cpu.run(cpu.emit(split.pack, "x86", registry=registry),
                     {"B": inputs["B"]}).outputs
    kernel = cpu.emit(split.kernel, "x86", registry=registry)
    return kernel, {**inputs, **{name: packed[name] for name in split.packed}}


def check(got: np.ndarray, a: np.ndarray, b: np.ndarray, rule) -> str:
    """Bit for bit against the hardware order, and within the bound of float64; SystemExit
    otherwise."""
    want = hardware_gemm(a, b, 2, rule)
    if not np.array_equal(got.view(np.uint32), want.view(np.uint32)):
        raise SystemExit("the bf16 kernel differs from the hardware-order reference")
    a64, b64 = a.astype(np.float64), b.astype(np.float64)
    k = a.shape[1]
    unit = float(np.finfo(np.float32).eps) / 2
    bound = k * unit / (1 - k * unit) * (np.abs(a64) @ np.abs(b64))
    error = np.abs(got - a64 @ b64)
    if np.any(error > bound):
        raise SystemExit("the bf16 kernel strays from float64 beyond the bound")
    return f"largest error {float((error / bound).max()):.3f} of the bound"


def main() -> None:
    """Check, then time ours and numpy's in interleaved rounds, and print the table."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", type=int, default=1024)
    parser.add_argument("--rounds", type=int, default=10)
    args = parser.parse_args()
    size = args.size
    registry = default_registry()
    rng = np.random.default_rng(0)
    a = rng.standard_normal((size, size)).astype(ml_dtypes.bfloat16)
    b = rng.standard_normal((size, size)).astype(ml_dtypes.bfloat16)
    inputs = {"A": a, "B": b}
    start = time.perf_counter()
    func = auto_tensorize(gemm_bf16(size), "x86", registry=registry).func
    kernel = cpu.emit(func, "x86", registry=registry)
    prepared = time.perf_counter() - start
    engine, reason = cpu.engine_for(kernel)
    if engine != "native":
        raise SystemExit(f"not run: {reason}")
    per_call, packed = packed_once(func, inputs, registry)
    rule = registry.get("x86_vdpbf16ps").accumulation
    verdict = check(cpu.run(kernel, inputs).outputs["C"], a, b, rule)
    if not np.array_equal(cpu.run(per_call, packed).outputs["C"],
                          cpu.run(kernel, inputs).outputs["C"]):
        raise SystemExit("B packed once gives another result")
    contenders = {
        "tensorize x86 bf16 (packing included)": kernel_runs(kernel, inputs),
        "tensorize x86 bf16, B packed once": kernel_runs(per_call, packed),
        "numpy f32 (BLAS, 1 thread)": numpy_runs(a.astype(np.float32), b.astype(np.float32)),
    }
    timings: dict[str, Timing] = {label: [] for label in contenders}
    for _ in range(args.rounds):
        for label, run in contenders.items():
            timings[label].extend(run())
    macs = size ** 3
    print(f"GEMM {size}^3 bf16 x bf16 -> f32 ({macs / 1e6:.0f} M MACs; C: x86_vdpbf16ps; "
          f"tensorize and emit {prepared:.2f} s; checked: bit for bit against the hardware "
          f"order, {verdict}); {args.rounds} interleaved rounds of {PER_ROUND} runs")
    print(f"  {'':40} {'best ms':>9} {'CPU ms':>9} {'median ms':>10} {'CPU ms':>9} "
          f"{'GFLOP/s':>8}")
    best_of = {}
    for label, runs in timings.items():
        best = min(runs)
        median = statistics.median(wall for wall, _ in runs)
        median_cpu = statistics.median(cpu_time for _, cpu_time in runs)
        best_of[label] = best[0]
        print(f"  {label:40} {best[0] * 1e3:9.3f} {best[1] * 1e3:9.3f} {median * 1e3:10.3f} "
              f"{median_cpu * 1e3:9.3f} {2 * macs / best[0] / 1e9:8.1f}")
    numpy_best = best_of["numpy f32 (BLAS, 1 thread)"]
    print(f"  numpy f32 / tensorize bf16 (best): packing included "
          f"{numpy_best / best_of['tensorize x86 bf16 (packing included)']:.2f}x, "
          f"B packed once {numpy_best / best_of['tensorize x86 bf16, B packed once']:.2f}x")


if __name__ == "__main__":
    main()
