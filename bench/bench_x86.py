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

Then int8 x int8 (onnxruntime's default for static quantization), which runs on VPDPBUSD
through the shift x86.yaml declares (A + 128, less 128 * colsum(B)), beside MatMulInteger on
int8 x int8 with B a graph input and with B a constant initializer, which onnxruntime packs
once when the session is made (ours packs B at every call). Last, the 1024^3 GEMMs on 1 and
2 threads (the output rows split, ``--threads``) against the per-core VNNI peak, measured
here by a loop of independent VPDPBUSD chains. Each table is timed in rounds that alternate
the contenders (interleaved), each figure the best of its rounds, the process's CPU time
beside the wall time.
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
from tensorize.runners.context import make_context
from tensorize.runners.cpu import run_threaded

RUNS = 10
# Rounds of the interleaved tables: each round runs every contender a few times.
ROUNDS = 5
PER_ROUND = 3
# The peak loop: independent VPDPBUSD accumulators (more than its latency of 5 cycles times
# its issue rate, so none waits) and iterations of one pass over them.
PEAK_CHAINS = 24
PEAK_ITERATIONS = 20_000
# Runs of the peak loop (0.1 ms each): short and many, so that the best misses the other
# work a shared machine runs.
PEAK_RUNS = 200


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


def onnx_matmul_integer(a: np.ndarray, b: np.ndarray, prepacked: bool = False,
                        threads: int = 1) -> Callable[[], np.ndarray] | None:
    """A call of onnxruntime's MatMulInteger (uint8 or int8 A, int8 B -> int32) on
    ``threads`` threads, or None when onnx/onnxruntime are not installed. ``prepacked``: B
    is a constant initializer, which onnxruntime packs once when the session is made."""
    try:
        import onnx
        import onnxruntime
        from onnx import TensorProto, helper, numpy_helper
    except ImportError:
        return None
    a_type = TensorProto.UINT8 if a.dtype == np.uint8 else TensorProto.INT8
    inputs = [helper.make_tensor_value_info("A", a_type, list(a.shape))]
    initializers = []
    if prepacked:
        initializers.append(numpy_helper.from_array(b, "B"))
    else:
        inputs.append(helper.make_tensor_value_info("B", TensorProto.INT8, list(b.shape)))
    graph = helper.make_graph(
        [helper.make_node("MatMulInteger", ["A", "B"], ["C"])], "matmul_integer", inputs,
        [helper.make_tensor_value_info("C", TensorProto.INT32, [a.shape[0], b.shape[1]])],
        initializers)
    # IR version 8 (opset 13's): older onnxruntime builds refuse newer models.
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)],
                              ir_version=8)
    onnx.checker.check_model(model)
    options = onnxruntime.SessionOptions()
    options.intra_op_num_threads = threads
    options.inter_op_num_threads = 1
    session = onnxruntime.InferenceSession(model.SerializeToString(), options,
                                           providers=["CPUExecutionProvider"])
    feed = {"A": a} if prepacked else {"A": a, "B": b}
    return lambda: session.run(None, feed)[0]


def vnni_peak(registry) -> float:
    """Multiply-accumulates per second of one core issuing VPDPBUSD back to back:
    :data:`PEAK_CHAINS` independent 512-bit accumulators (64 MACs an instruction), the best
    of :data:`PEAK_RUNS` runs of :data:`PEAK_ITERATIONS` passes."""
    import ctypes

    import llvmlite.binding as llvm

    from targets.cpu.machine import target_machine

    x86 = registry.cpu("x86")
    vector = "<16 x i32>"
    phis = "\n".join(f"  %c{n} = phi {vector} [zeroinitializer, %entry], [%d{n}, %loop]"
                      for n in range(PEAK_CHAINS))
    dots = "\n".join(f"  %d{n} = call {vector} @llvm.x86.avx512.vpdpbusd.512({vector} %c{n}, "
                      f"{vector} %a, {vector} %b)" for n in range(PEAK_CHAINS))
    sums = "\n".join(f"  %s{n + 1} = add {vector} %s{n}, %d{n}" for n in range(PEAK_CHAINS))
    text = f"""
declare {vector} @llvm.x86.avx512.vpdpbusd.512({vector}, {vector}, {vector})
define void @peak(i64 %n, ptr %in, ptr %out) {{
entry:
  %a = load {vector}, ptr %in, align 4
  %b = load {vector}, ptr %in, align 4
  br label %loop
loop:
  %i = phi i64 [0, %entry], [%next, %loop]
{phis}
{dots}
  %next = add i64 %i, 1
  %more = icmp ult i64 %next, %n
  br i1 %more, label %loop, label %exit
exit:
  %s0 = bitcast {vector} zeroinitializer to {vector}
{sums}
  store {vector} %s{PEAK_CHAINS}, ptr %out, align 4
  ret void
}}
"""
    llvm.initialize_native_target()
    llvm.initialize_native_asmprinter()
    machine = target_machine(x86, x86.default_features, jit=True)
    module = llvm.parse_assembly(text)
    module.verify()
    engine = llvm.create_mcjit_compiler(module, machine)
    engine.finalize_object()
    peak = ctypes.CFUNCTYPE(None, ctypes.c_int64, ctypes.c_void_p, ctypes.c_void_p)(
        engine.get_function_address("peak"))
    data = np.ones(16, np.int32)
    out = np.zeros(16, np.int32)
    best, _ = timed(lambda: peak(PEAK_ITERATIONS, data.ctypes.data, out.ctypes.data),
                    PEAK_RUNS)
    return PEAK_ITERATIONS * PEAK_CHAINS * 64 / best


def interleaved(contenders: dict[str, Callable[[], tuple[float, float]]]
                ) -> dict[str, tuple[float, float]]:
    """Each contender's best (wall, CPU) seconds over :data:`ROUNDS` rounds, every round
    calling each contender once in turn; a contender times :data:`PER_ROUND` runs of its
    own per call and returns its best."""
    best: dict[str, tuple[float, float]] = {}
    for _ in range(ROUNDS):
        for label, call in contenders.items():
            wall, cpu_time = call()
            if label not in best or wall < best[label][0]:
                best[label] = (wall, cpu_time)
    return best


def timed_call(call: Callable[[], object]) -> Callable[[], tuple[float, float]]:
    """A contender for :func:`interleaved`: ``call``'s best (wall, CPU) of PER_ROUND."""
    def run() -> tuple[float, float]:
        runs = []
        for _ in range(PER_ROUND):
            wall, cpu_time = time.perf_counter(), time.process_time()
            call()
            runs.append((time.perf_counter() - wall, time.process_time() - cpu_time))
        return min(runs)
    return run


def kernel_call(kernel: cpu.CpuKernel, inputs: dict[str, np.ndarray]
                ) -> Callable[[], tuple[float, float]]:
    """A contender for :func:`interleaved`: one tensorize kernel's best of PER_ROUND."""
    def run() -> tuple[float, float]:
        result = cpu.run(kernel, inputs, PER_ROUND)
        at = result.seconds.index(result.best)
        return result.best, result.cpu_seconds[at]
    return run


def threaded_call(ctx, func: ir.PrimFunc, inputs: dict[str, np.ndarray], threads: int
                  ) -> Callable[[], tuple[float, float]]:
    """A contender for :func:`interleaved`: ``func`` split over ``threads`` threads."""
    def run() -> tuple[float, float]:
        result, how = run_threaded(ctx, func, inputs, threads, PER_ROUND)
        if result is None:
            raise SystemExit(f"{func.name} on {threads} threads: {how}")
        at = result.seconds.index(result.best)
        return result.best, result.cpu_seconds[at]
    return run


def row(label: str, best: float, median: float, macs: int) -> str:
    return (f"  {label:34} {best * 1e3:9.3f} {median * 1e3:9.3f} "
            f"{macs / best / 1e9:8.1f}")


def print_best(best: dict[str, tuple[float, float]], macs: int) -> None:
    """One line per contender: best wall and CPU milliseconds, and GMAC/s."""
    print(f"  {'':44} {'wall ms':>9} {'CPU ms':>9} {'GMAC/s':>8}")
    for label, (wall, cpu_time) in best.items():
        print(f"  {label:44} {wall * 1e3:9.3f} {cpu_time * 1e3:9.3f} "
              f"{macs / wall / 1e9:8.1f}")


def s8s8_table(registry, rng: np.random.Generator) -> None:
    """int8 x int8 GEMMs: tensorize (A shifted) beside MatMulInteger, B input and prepacked."""
    for size in (256, 1024):
        func = suite_kernels.builders()["gemm_int8"](size, size, size)
        inputs = {"A": rng.integers(-128, 128, (size, size), dtype=np.int8),
                  "B": rng.integers(-128, 128, (size, size), dtype=np.int8)}
        result = auto_tensorize(func, "x86", registry=registry)
        kernel = cpu.emit(result.func, "x86", registry=registry)
        a, b = inputs["A"], inputs["B"]
        expected = (a.astype(np.float64) @ b.astype(np.float64)).astype(np.int32)
        if not np.array_equal(cpu.run(kernel, inputs).outputs["C"], expected):
            raise SystemExit(f"s8 x s8 {size}^3: the x86 kernel's output differs from numpy's")
        ours = "tensorize x86, A shifted"
        contenders = {ours: kernel_call(kernel, inputs)}
        for prepacked in (False, True):
            matmul = onnx_matmul_integer(a, b, prepacked)
            if matmul is None:
                continue
            if not np.array_equal(matmul(), expected):
                raise SystemExit(f"s8 x s8 {size}^3: onnxruntime's output differs from numpy's")
            label = "B prepacked" if prepacked else "B an input"
            contenders[f"onnxruntime s8 x s8, {label}"] = timed_call(matmul)
        # A timing reference only: MLAS's u8 x s8 kernel on A + 128 (its result lacks the
        # compensation), the fastest path onnxruntime has for these operands.
        shifted = onnx_matmul_integer((a.astype(np.int16) + 128).astype(np.uint8), b, True)
        if shifted is not None:
            contenders["onnxruntime u8 x s8 on A + 128, B prepacked"] = timed_call(shifted)
        macs = size ** 3
        print(f"GEMM s8 x s8 {size}^3 ({macs / 1e6:.0f} M MACs; "
              f"{', '.join(o.intrinsic for o in result.tensorized)}), interleaved, "
              f"best of {ROUNDS} rounds")
        best = interleaved(contenders)
        print_best(best, macs)
        for label, (wall, _) in best.items():
            if label != ours:
                print(f"  {label}: tensorize is {wall / best[ours][0]:.2f}x as fast")


def threads_table(registry, rng: np.random.Generator) -> None:
    """The 1024^3 GEMMs on 1 and 2 threads against the per-core VNNI peak."""
    peak = vnni_peak(registry)
    print(f"VPDPBUSD peak of one core: {peak / 1e9:.1f} GMAC/s ({PEAK_CHAINS} independent "
          "accumulators)")
    ctx = make_context(registry, "x86", threads=2)
    size = 1024
    macs = size ** 3
    for name, func, a_low in (("u8 x s8", suite_kernels.builders()["gemm_u8s8"](
            size, size, size), 0), ("s8 x s8", suite_kernels.builders()["gemm_int8"](size, size, size), -128)):
        a_type = func.params[0].dtype.numpy
        inputs = {"A": rng.integers(a_low, a_low + 256, (size, size), dtype=a_type),
                  "B": rng.integers(-128, 128, (size, size), dtype=np.int8)}
        kernel = cpu.emit(auto_tensorize(func, "x86", registry=registry).func, "x86",
                          registry=registry)
        contenders = {"1 thread": kernel_call(kernel, inputs),
                      "2 threads (rows split)": threaded_call(ctx, func, inputs, 2)}
        matmul = onnx_matmul_integer(inputs["A"], inputs["B"], prepacked=True, threads=2)
        if matmul is not None:
            contenders["onnxruntime, B prepacked, 2 threads"] = timed_call(matmul)
        print(f"GEMM {name} 1024^3, interleaved, best of {ROUNDS} rounds")
        best = interleaved(contenders)
        print_best(best, macs)
        one = best["1 thread"][0]
        print(f"  1 thread: {macs / one / peak:.1%} of the peak; 2 threads: "
              f"{one / best['2 threads (rows split)'][0]:.2f}x 1 thread")


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
    s8s8_table(registry, rng)
    threads_table(registry, rng)


if __name__ == "__main__":
    main()
