"""GEMMs tensorized for CUDA, on a GPU, next to cuBLAS.

For fp16 (float32 accumulation) and int8 (int32 accumulation) GEMMs of 4096^3: the time to
tensorize, emit and compile (nvcc, for the GPU's architecture), then the best of several runs
through pycuda in TFLOP/s (TOP/s for int8), the same product through cuBLAS (cupy, else
torch) and the ratio. Without pycuda and a CUDA driver it says so and exits 0. Figures, not
assertions.

    .venv/bin/python bench/bench_cuda.py [--size N] [--repeat R]
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from targets import cuda
from tensorize.engine import auto_tensorize

import suite_kernels  # bench/ is on the path: the benchmarks run as scripts


def _gpu_available() -> str | None:
    """None when pycuda can create a context, else the reason it cannot."""
    try:
        import pycuda.autoinit  # noqa: F401
    except Exception as err:  # pycuda raises ImportError, or its own errors without a driver
        return f"{type(err).__name__}: {err}"
    return None


def _cublas_ms(a: np.ndarray, b: np.ndarray, repeat: int) -> tuple[float, str] | None:
    """Best time of ``a @ b`` through cuBLAS (cupy, else torch), or None without either."""
    try:
        import cupy

        x, y = cupy.asarray(a), cupy.asarray(b)
        kind = "cupy"

        def product() -> None:
            cupy.matmul(x, y)
            cupy.cuda.Device().synchronize()
    except ImportError:
        try:
            import torch
        except ImportError:
            return None
        x, y = torch.from_numpy(a).cuda(), torch.from_numpy(b).cuda()
        kind = "torch"
        if a.dtype == np.int8:
            def product() -> None:
                torch._int_mm(x, y)
                torch.cuda.synchronize()
        else:
            def product() -> None:
                torch.matmul(x, y)
                torch.cuda.synchronize()
    product()
    best = float("inf")
    for _ in range(repeat):
        start = time.perf_counter()
        product()
        best = min(best, time.perf_counter() - start)
    return best * 1e3, kind


def main() -> None:
    """Print one row per GEMM."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--size", type=int, default=4096)
    parser.add_argument("--repeat", type=int, default=10)
    args = parser.parse_args()
    reason = _gpu_available()
    if reason is not None:
        print(f"bench_cuda needs a GPU with pycuda ({reason}); nothing to measure here.")
        return
    builders = suite_kernels.builders()
    n = args.size
    rng = np.random.default_rng(0)
    for name in ("gemm_fp16", "gemm_int8"):
        start = time.perf_counter()
        func = builders[name](n, n, n)
        result = auto_tensorize(func, "cuda")
        kernel = cuda.emit(result.func)
        prepared = time.perf_counter() - start
        if name == "gemm_fp16":
            a = rng.standard_normal((n, n)).astype(np.float16)
            b = rng.standard_normal((n, n)).astype(np.float16)
        else:
            a = rng.integers(-128, 128, (n, n)).astype(np.int8)
            b = rng.integers(-128, 128, (n, n)).astype(np.int8)
        run = cuda.run(kernel, {"A": a, "B": b}, repeat=args.repeat)
        ops = 2 * n ** 3 / (run.milliseconds * 1e-3) / 1e12
        line = (f"{name} {n}^3: tensorize+emit {prepared:.2f} s, grid {kernel.grid} block "
                f"{kernel.block}, {run.milliseconds:.3f} ms, {ops:.1f} T(FL)OP/s")
        reference = _cublas_ms(a, b, args.repeat)
        if reference is not None:
            ms, kind = reference
            line += f"; cuBLAS ({kind}) {ms:.3f} ms, ratio {ms / run.milliseconds:.2f}"
        print(line)


if __name__ == "__main__":
    main()
