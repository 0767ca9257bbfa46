"""Compile and run times of the host backend (the reference executor) on real sizes.

For each kernel, prints the time to compile (lowering to LLVM IR, -O3, JIT), the best of a
few runs, and whether the result matches numpy. Kernels: 256^3 GEMM in float32 and in
int8 -> int32, the ResNet-50 3x3 convolution layer (1x56x56x64 -> 64, padding 1, int8 ->
int32, with its padding block) and 128^3 matmul + ReLU. Figures, not assertions.

    PYTHONPATH=. python bench/bench_executor.py [--repeat 3]
"""

from __future__ import annotations

import argparse
import importlib.util
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

import ir
from ir import te
from targets import host

_EXAMPLES = Path(__file__).resolve().parents[1] / "examples" / "te"


def _build(name: str, **sizes: int) -> ir.PrimFunc:
    spec = importlib.util.spec_from_file_location(name, _EXAMPLES / f"{name}.py")
    if spec is None or spec.loader is None:
        raise SystemExit(f"cannot load example {name}")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.build(**sizes)


def _conv_reference(I: np.ndarray, W: np.ndarray) -> np.ndarray:
    padded = np.pad(I.astype(np.int32), ((0, 0), (1, 1), (1, 1), (0, 0)))
    height, width = I.shape[1:3]
    out = np.zeros((1, height, width, W.shape[3]), np.int32)
    for rh in range(3):
        for rw in range(3):
            out += np.einsum("nhwc,co->nhwo", padded[:, rh:rh + height, rw:rw + width],
                             W[rh, rw].astype(np.int32))
    return out


def _inputs(func: ir.PrimFunc, rng: np.random.Generator) -> list[np.ndarray]:
    arrays = []
    for param in func.params[:-1]:
        if param.dtype.is_int:
            arrays.append(rng.integers(-128, 128, param.shape).astype(param.dtype.numpy))
        else:
            arrays.append(rng.standard_normal(param.shape).astype(param.dtype.numpy))
    return arrays


def _gemm_float32(size: int) -> ir.PrimFunc:
    A = te.placeholder((size, size), "float32", "A")
    B = te.placeholder((size, size), "float32", "B")
    k = te.reduce_axis(size, "k")
    C = te.compute((size, size), lambda i, j: te.sum(A[i, k] * B[k, j], axis=k), "C")
    return te.create_prim_func([A, B, C], "gemm")


_CASES: list[tuple[str, Callable[[], ir.PrimFunc], Callable[..., np.ndarray]]] = [
    ("GEMM 256^3 float32", lambda: _gemm_float32(256), lambda a, b: a @ b),
    ("GEMM 256^3 int8 -> int32", lambda: _build("gemm_int8"),
     lambda a, b: a.astype(np.int32) @ b.astype(np.int32)),
    ("conv 3x3 1x56x56x64 -> 64 int8", lambda: _build("conv2d_nhwc"), _conv_reference),
    ("matmul + relu 128^3 float32", lambda: _build("matmul_relu"),
     lambda a, b: np.maximum(a @ b, 0)),
]


def main() -> None:
    """Run the bench and print its figures."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=3, help="runs per kernel (best is shown)")
    args = parser.parse_args()
    rng = np.random.default_rng(0)
    print(f"{'kernel':<32} {'compile':>9} {'run':>9}  matches numpy")
    for label, build, reference in _CASES:
        func = build()
        start = time.perf_counter()
        compiled = host.compile(func)
        compile_time = time.perf_counter() - start
        inputs = _inputs(func, rng)
        out = np.zeros(func.params[-1].shape, func.params[-1].dtype.numpy)
        runs = []
        for _ in range(args.repeat):
            start = time.perf_counter()
            compiled(*inputs, out)
            runs.append(time.perf_counter() - start)
        expected = reference(*inputs)
        if out.dtype.kind == "f":
            matches = np.allclose(out, expected, rtol=1e-4, atol=1e-3)
        else:
            matches = np.array_equal(out, expected)
        print(f"{label:<32} {compile_time:8.3f}s {min(runs):8.3f}s  {matches}")


if __name__ == "__main__":
    main()
