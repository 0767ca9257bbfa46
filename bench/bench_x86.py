"""u8 x s8 -> s32 kernels on x86 with AVX-512 VNNI, single thread: the x86 target's code
(VPDPBUSD in a register-blocked micro-kernel, packing included), run natively through LLVM's
JIT, beside numpy and, when installed (``pip install -e '.[bench]'``), onnxruntime's
MatMulInteger (MLAS, hand-written VNNI kernels) with ``intra_op_num_threads=1``.

    .venv/bin/python bench/bench_x86.py

Each figure is the best and the median of several runs, in milliseconds, with the rate in
billions of multiply-accumulates per second. Every output is checked exactly against numpy
first. numpy has no int8 GEMM: "numpy i32" multiplies the operands widened to int32 (exact,
numpy's own loops), "numpy f64" widened to float64 through BLAS (exact at these sizes: every
sum stays below 2**53). The convolution's onnxruntime figure is MatMulInteger on its im2col
matrix, built beforehand (so it leaves out the packing that ours includes); ConvInteger takes
no int8 weights.
"""

from __future__ import annotations

import os

# Single thread: BLAS behind numpy reads these when it loads.
for _name in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ[_name] = "1"

import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import suite_kernels  # bench/ is on the path: these run as scripts

import ir
from intrinsics import default_registry
from ir import te
from targets import cpu
from tensorize.engine import auto_tensorize

RUNS = 10


def conv3x3_u8s8(size: int, channels: int, out_channels: int) -> ir.PrimFunc:
    """ResNet-50's 3x3 convolution: NHWC uint8 input, stride 1, zero padding 1, HWIO int8
    weights, int32 output; blocks ``pad`` and ``conv``."""
    inp = te.placeholder((1, size, size, channels), "uint8", "I")
    wgt = te.placeholder((3, 3, channels, out_channels), "int8", "W")
    def inside(v: ir.Expr) -> ir.Expr:
        return ir.and_(ir.const(1, "int32") <= v, v < size + 1)

    def clamp(v: ir.Expr) -> ir.Expr:
        return ir.min_(ir.max_(v - 1, 0), size - 1)

    pad = te.compute((1, size + 2, size + 2, channels), lambda n, y, x, c: te.if_then_else(
        ir.and_(inside(y), inside(x)), inp[n, clamp(y), clamp(x), c], ir.const(0, "uint8")),
        "pad")
    rh, rw, rc = te.reduce_axis(3, "rh"), te.reduce_axis(3, "rw"), te.reduce_axis(channels, "rc")
    out = te.compute((1, size, size, out_channels), lambda n, h, w, co: te.sum(
        ir.cast("int32", pad[n, h + rh, w + rw, rc]) * ir.cast("int32", wgt[rh, rw, rc, co]),
        axis=[rh, rw, rc]), "conv")
    return te.create_prim_func([inp, wgt, out], "conv3x3_u8s8")


def im2col(image: np.ndarray) -> np.ndarray:
    """(1, H, W, C) -> (H * W, 9 * C): each output pixel's zero-padded 3x3 window, in the
    weights' (rh, rw, c) order."""
    _, h, w, c = image.shape
    padded = np.pad(image[0], ((1, 1), (1, 1), (0, 0)))
    windows = [padded[y:y + h, x:x + w] for y in range(3) for x in range(3)]
    return np.concatenate(windows, axis=2).reshape(h * w, 9 * c)


def timed(call: Callable[[], object], runs: int) -> tuple[float, float]:
    """(best, median) seconds of ``runs`` calls."""
    seconds = []
    for _ in range(runs):
        start = time.perf_counter()
        call()
        seconds.append(time.perf_counter() - start)
    return min(seconds), statistics.median(seconds)


def product(a: np.ndarray, b: np.ndarray, dtype: type) -> Callable[[], np.ndarray]:
    """numpy's ``a @ b`` with both widened to ``dtype`` beforehand."""
    wide_a, wide_b = a.astype(dtype), b.astype(dtype)
    return lambda: wide_a @ wide_b


def onnx_matmul_integer(a: np.ndarray, b: np.ndarray) -> Callable[[], np.ndarray] | None:
    """A call of onnxruntime's MatMulInteger (uint8 x int8 -> int32) on one thread, or None
    when onnx/onnxruntime are not installed."""
    try:
        import onnx
        import onnxruntime
        from onnx import TensorProto, helper
    except ImportError:
        return None
    graph = helper.make_graph(
        [helper.make_node("MatMulInteger", ["A", "B"], ["C"])], "matmul_integer",
        [helper.make_tensor_value_info("A", TensorProto.UINT8, list(a.shape)),
         helper.make_tensor_value_info("B", TensorProto.INT8, list(b.shape))],
        [helper.make_tensor_value_info("C", TensorProto.INT32, [a.shape[0], b.shape[1]])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    onnx.checker.check_model(model)
    options = onnxruntime.SessionOptions()
    options.intra_op_num_threads = 1
    options.inter_op_num_threads = 1
    session = onnxruntime.InferenceSession(model.SerializeToString(), options,
                                           providers=["CPUExecutionProvider"])
    return lambda: session.run(None, {"A": a, "B": b})[0]


def row(label: str, best: float, median: float, macs: int) -> str:
    return (f"  {label:34} {best * 1e3:9.3f} {median * 1e3:9.3f} "
            f"{macs / best / 1e9:8.1f}")


def main() -> None:
    rng = np.random.default_rng(0)
    registry = default_registry()  # a bench is an edge: the built-in descriptions
    gemm = suite_kernels.builders()["gemm_u8s8"]
    cases = [("GEMM 256^3", gemm(256, 256, 256)), ("GEMM 1024^3", gemm(1024, 1024, 1024)),
             ("ResNet-50 conv 3x3 56x56x64 -> 64", conv3x3_u8s8(56, 64, 64))]
    print(f"  {'':34} {'best ms':>9} {'median ms':>9} {'GMAC/s':>8}")
    for label, func in cases:
        a_param, b_param, out = func.params
        inputs = {a_param.name: rng.integers(0, 256, a_param.shape, dtype=np.uint8),
                  b_param.name: rng.integers(-128, 128, b_param.shape, dtype=np.int8)}
        start = time.perf_counter()
        result = auto_tensorize(func, "x86", registry=registry)
        kernel = cpu.emit(result.func, "x86", registry=registry)
        prepared = time.perf_counter() - start
        run = cpu.run(kernel, inputs, RUNS)
        a, b = inputs[a_param.name], inputs[b_param.name]
        if a.ndim == 4:  # the convolution: its GEMM on the im2col matrix
            a, b = im2col(a), b.reshape(-1, b.shape[-1])
        expected = a.astype(np.int32) @ b.astype(np.int32)
        got = run.outputs[out.name].reshape(expected.shape)
        if not np.array_equal(got, expected):
            raise SystemExit(f"{label}: the x86 kernel's output differs from numpy's")
        macs = a.shape[0] * a.shape[1] * b.shape[1]
        blocks = ", ".join(f"{o.block}: {o.intrinsic}" for o in result.tensorized)
        print(f"{label} ({macs / 1e6:.0f} M MACs; {blocks}; tensorize and emit "
              f"{prepared:.2f} s)")
        print(row("tensorize x86 (packing included)", run.best, run.median, macs))
        slow = 1 if macs > 10**8 else RUNS
        print(row(f"numpy i32 (best of {slow})", *timed(product(a, b, np.int32), slow), macs))
        print(row("numpy f64 (BLAS)", *timed(product(a, b, np.float64), RUNS), macs))
        matmul = onnx_matmul_integer(np.ascontiguousarray(a), np.ascontiguousarray(b))
        if matmul is None:
            print("  onnxruntime MatMulInteger: not installed (pip install -e '.[bench]')")
            continue
        if not np.array_equal(matmul(), expected):
            raise SystemExit(f"{label}: onnxruntime's output differs from numpy's")
        best, median = timed(matmul, RUNS)
        what = "on im2col" if label.startswith("ResNet") else "(MLAS)"
        print(row(f"onnxruntime MatMulInteger {what}", best, median, macs))
        print(f"  tensorize / onnxruntime (best): {best / run.best:.2f}x")


if __name__ == "__main__":
    main()
