"""int8 kernels on x86 with AVX-512 VNNI: the x86 target's code (VPDPBUSD in a
register-blocked micro-kernel), run natively through LLVM's JIT, beside numpy and, when
installed (``pip install -e '.[bench]'``), onnxruntime's MatMulInteger (MLAS, hand-written
VNNI kernels) with ``intra_op_num_threads=1``.

    .venv/bin/python bench/bench_x86.py [u8s8] [s8s8] [threads]   (default: all three)

Every table is timed in rounds that alternate its contenders (interleaved), each figure the
best of its rounds, in milliseconds of wall time with the process's CPU time beside it and
the rate in billions of multiply-accumulates per second. Every output is checked exactly
against numpy first.

u8s8: u8 x s8 -> s32 GEMMs and ResNet-50's 3x3 convolution on one thread, ours with its
packing stages in each call, and with B packed once: split at the packing of its weights
(``targets.cpu.split_constants``, as a network's layers are run), the packing run once
before timing, the figure the per-call kernel's on the packed weights. Beside them
MatMulInteger with B an input, and with B a constant initializer, which onnxruntime packs
once when the session is made ("B prepacked"), the yardstick for ours packed once. numpy has
no int8 GEMM: "numpy f64" multiplies the operands widened to float64 through BLAS (exact at
these sizes: every sum stays below 2**53), "numpy i32" widened to int32 (exact, numpy's own
loops; too slow to interleave, timed after the rest). The convolution's onnxruntime figures
are MatMulInteger on its im2col matrix, built beforehand (so they leave out the packing that
ours includes); ConvInteger takes no int8 weights.

s8s8: int8 x int8 (onnxruntime's default for static quantization), which runs on VPDPBUSD
through the shift x86.yaml declares (A + 128, less 128 * colsum(B)), beside MatMulInteger on
int8 x int8 with B an input and prepacked; ours with B packed per call and packed once (the
column sums of B stay per call: ``split_constants`` keeps a reduction stage in the kernel).

threads: the 1024^3 GEMMs on 1 and 2 threads (the output rows split as ``--threads``
splits them; packed once: each part's B packed once, all parts reading the one packed B)
against the per-core VNNI peak, measured here by a loop of independent VPDPBUSD chains
(before and after each table, the best kept). On a shared machine, 2 threads on fewer than
2 cores (CPU time over wall time) were slowed by other work.
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

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import suite_kernels  # bench/ is on the path: these run as scripts

import ir
from intrinsics import default_registry
from ir import te
from targets import cpu
from tensorize.engine import auto_tensorize
from tensorize.engine.cpu_threads import plan_rows, slice_rows
from tensorize.runners.context import make_context
from tensorize.runners.cpu import run_threaded

# Runs of numpy's int32 product below 10**8 MACs (too slow to interleave; one above).
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
    # Its worker threads otherwise spin, waiting for work, after each run: on a machine of
    # few cores they take the cores the contender timed next needs (interleaved rounds).
    options.add_session_config_entry("session.intra_op.allow_spinning", "0")
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


def best_run(result: cpu.CpuRun) -> tuple[float, float]:
    """A native run's best wall time and the CPU time of that run."""
    return result.best, result.cpu_seconds[result.seconds.index(result.best)]


def kernel_call(kernel: cpu.CpuKernel, inputs: dict[str, np.ndarray]
                ) -> Callable[[], tuple[float, float]]:
    """A contender for :func:`interleaved`: one tensorize kernel's best of PER_ROUND."""
    return lambda: best_run(cpu.run(kernel, inputs, PER_ROUND))


def threaded_run(ctx, func: ir.PrimFunc, inputs: dict[str, np.ndarray], threads: int,
                 runs: int) -> cpu.CpuRun:
    """``func`` split over ``threads`` threads as ``--threads`` splits it, run ``runs``
    times."""
    result, how = run_threaded(ctx, func, inputs, threads, runs)
    if result is None:
        raise SystemExit(f"{func.name} on {threads} threads: {how}")
    return result


def threaded_call(ctx, func: ir.PrimFunc, inputs: dict[str, np.ndarray], threads: int
                  ) -> Callable[[], tuple[float, float]]:
    """A contender for :func:`interleaved`: ``func`` split over ``threads`` threads."""
    return lambda: best_run(threaded_run(ctx, func, inputs, threads, PER_ROUND))


def pack_once(func: ir.PrimFunc, constant: str, inputs: dict[str, np.ndarray], registry
              ) -> tuple[cpu.CpuKernel, dict[str, np.ndarray]]:
    """The tensorized ``func`` split at the packing of its input ``constant``
    (:func:`targets.cpu.split_constants`), that packing run once here: the per-call kernel
    and its inputs (``inputs`` and the packed buffers, which it reads in the place of
    ``constant``)."""
    split = cpu.split_constants(func, [constant])
    pack = cpu.emit(split.pack, "x86", registry=registry)
    packed = cpu.run(pack, {constant: inputs[constant]}).outputs
    kernel = cpu.emit(split.kernel, "x86", registry=registry)
    return kernel, {**inputs, **{name: packed[name] for name in split.packed}}


class PackedParts:
    """``func`` (untensorized, B its constant input) split over ``threads`` threads by its
    output rows (``plan_rows``, as ``--threads`` splits it), each part tensorized and split
    at B's packing: B is packed once, and every call runs the parts' per-call kernels at
    once (``targets.cpu.run_parts``) on the one packed B."""

    def __init__(self, func: ir.PrimFunc, inputs: dict[str, np.ndarray], threads: int,
                 registry) -> None:
        split = plan_rows(func, threads)
        if isinstance(split, str):
            raise SystemExit(f"{func.name} on {threads} threads: {split}")
        whole, self.inputs = pack_once(auto_tensorize(func, "x86", registry=registry).func,
                                       "B", inputs, registry)
        self.params = whole.func.params
        self.sliced = frozenset(split.sliced)
        kernels = {rows: self._part_kernel(slice_rows(func, split, rows), registry)
                   for rows in {rows for _, rows in split.parts}}
        self.parts = [cpu.Part(kernels[rows], start, rows) for start, rows in split.parts]

    def _part_kernel(self, part: ir.PrimFunc, registry) -> cpu.CpuKernel:
        """One part's per-call kernel; its packed B must be the whole's, which every part
        then shares."""
        kernel, packed = pack_once(auto_tensorize(part, "x86", registry=registry).func, "B",
                                   {"B": self.inputs["B"]}, registry)
        for name, array in packed.items():
            if not np.array_equal(array, self.inputs.get(name)):
                raise SystemExit(f"{part.name}: a part packs B into {name} unlike the whole")
        return kernel

    def run(self, runs: int) -> cpu.CpuRun:
        """The parts at once, ``runs`` times."""
        return cpu.run_parts(self.parts, self.params, self.sliced, self.inputs, runs)

    def call(self) -> Callable[[], tuple[float, float]]:
        """A contender for :func:`interleaved`: the parts' best of PER_ROUND."""
        return lambda: best_run(self.run(PER_ROUND))


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
        per_call, packed = pack_once(result.func, "B", inputs, registry)
        for what, (code, given) in (("", (kernel, inputs)),
                                    (" with B packed once", (per_call, packed))):
            if not np.array_equal(cpu.run(code, given).outputs["C"], expected):
                raise SystemExit(f"s8 x s8 {size}^3: the x86 kernel's output{what} differs "
                                 "from numpy's")
        ours = ("tensorize x86, A shifted", "tensorize x86, A shifted, B packed once")
        contenders = {ours[0]: kernel_call(kernel, inputs),
                      ours[1]: kernel_call(per_call, packed)}
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
            if label not in ours:
                print(f"  {label}: tensorize is {wall / best[ours[0]][0]:.2f}x as fast, "
                      f"{wall / best[ours[1]][0]:.2f}x with B packed once")


def threads_contenders(ctx, func: ir.PrimFunc, inputs: dict[str, np.ndarray]
                       ) -> dict[str, Callable[[], tuple[float, float]]]:
    """Ours on 1 and 2 threads, B packed per call and packed once, each checked exactly
    against numpy first."""
    registry = ctx.registry
    tensorized = auto_tensorize(func, "x86", registry=registry).func
    kernel = cpu.emit(tensorized, "x86", registry=registry)
    per_call, packed = pack_once(tensorized, "B", inputs, registry)
    parts = PackedParts(func, inputs, 2, registry)
    expected = inputs["A"].astype(np.int64) @ inputs["B"].astype(np.int64)
    for what, run in (("1 thread", cpu.run(kernel, inputs)),
                      ("2 threads", threaded_run(ctx, func, inputs, 2, 1)),
                      ("1 thread, B packed once", cpu.run(per_call, packed)),
                      ("2 threads, B packed once", parts.run(1))):
        if not np.array_equal(run.outputs["C"], expected):
            raise SystemExit(f"{func.name} on {what}: the output differs from numpy's")
    return {"1 thread": kernel_call(kernel, inputs),
            "2 threads (rows split)": threaded_call(ctx, func, inputs, 2),
            "1 thread, B packed once": kernel_call(per_call, packed),
            "2 threads, B packed once": parts.call()}


def threads_table(registry, rng: np.random.Generator) -> None:
    """The 1024^3 GEMMs on 1 and 2 threads against the per-core VNNI peak."""
    peak = vnni_peak(registry)
    print(f"VPDPBUSD peak of one core: {peak / 1e9:.1f} GMAC/s ({PEAK_CHAINS} independent "
          "accumulators; measured again after each table, the best kept)")
    print(f"(2 threads run on 2.00 cores, CPU time over wall time, when both run throughout; "
          f"fewer, on a machine with {os.cpu_count()} cores, means other work held one)")
    ctx = make_context(registry, "x86", threads=2)
    size = 1024
    macs = size ** 3
    builders = suite_kernels.builders()
    for name, func, a_low in (("u8 x s8", builders["gemm_u8s8"](size, size, size), 0),
                              ("s8 x s8", builders["gemm_int8"](size, size, size), -128)):
        a_type = func.params[0].dtype.numpy
        inputs = {"A": rng.integers(a_low, a_low + 256, (size, size), dtype=a_type),
                  "B": rng.integers(-128, 128, (size, size), dtype=np.int8)}
        contenders = threads_contenders(ctx, func, inputs)
        matmul = onnx_matmul_integer(inputs["A"], inputs["B"], prepacked=True, threads=2)
        if matmul is not None:
            contenders["onnxruntime, B prepacked, 2 threads"] = timed_call(matmul)
        print(f"GEMM {name} 1024^3, interleaved, best of {ROUNDS} rounds")
        best = interleaved(contenders)
        # Measured again after each table, the best kept: other work only lowers it.
        peak = max(peak, vnni_peak(registry))
        print_best(best, macs)
        for what, one, two in (
                ("B packed per call", "1 thread", "2 threads (rows split)"),
                ("B packed once", "1 thread, B packed once", "2 threads, B packed once")):
            wall, cpu_time = best[two]
            print(f"  {what}: 1 thread {macs / best[one][0] / peak:.1%} of the peak "
                  f"({peak / 1e9:.1f} GMAC/s); "
                  f"2 threads {best[one][0] / wall:.2f}x 1 thread, on "
                  f"{cpu_time / wall:.2f} cores")


def u8s8_case(label: str, func: ir.PrimFunc, rng: np.random.Generator, registry) -> None:
    """One u8 x s8 kernel (A, B, output), interleaved: ours with B packed per call and
    packed once, numpy f64 and MatMulInteger with B an input and prepacked; numpy i32 (too
    slow to interleave) after them. A 4-d A is a convolution's input, its GEMM the im2col
    matrix's."""
    a_param, b_param, out = func.params
    inputs = {a_param.name: rng.integers(0, 256, a_param.shape, dtype=np.uint8),
              b_param.name: rng.integers(-128, 128, b_param.shape, dtype=np.int8)}
    start = time.perf_counter()
    result = auto_tensorize(func, "x86", registry=registry)
    kernel = cpu.emit(result.func, "x86", registry=registry)
    prepared = time.perf_counter() - start
    per_call, packed = pack_once(result.func, b_param.name, inputs, registry)
    a, b = inputs[a_param.name], inputs[b_param.name]
    if a.ndim == 4:  # the convolution: its GEMM on the im2col matrix
        a, b = im2col(a), b.reshape(-1, b.shape[-1])
    a, b = np.ascontiguousarray(a), np.ascontiguousarray(b)
    expected = a.astype(np.int32) @ b.astype(np.int32)
    ours = ("tensorize x86 (packing included)", "tensorize x86, B packed once")
    contenders = {ours[0]: kernel_call(kernel, inputs), ours[1]: kernel_call(per_call, packed)}
    for name, (code, given) in zip(ours, ((kernel, inputs), (per_call, packed))):
        got = cpu.run(code, given).outputs[out.name].reshape(expected.shape)
        if not np.array_equal(got, expected):
            raise SystemExit(f"{label}: {name}: the output differs from numpy's")
    contenders["numpy f64 (BLAS)"] = timed_call(product(a, b, np.float64))
    what = "on im2col" if a_param.ndim == 4 else "(MLAS)"
    theirs = (f"onnxruntime MatMulInteger {what}", f"onnxruntime {what}, B prepacked")
    for name, prepacked in zip(theirs, (False, True)):
        matmul = onnx_matmul_integer(a, b, prepacked)
        if matmul is None:
            break
        if not np.array_equal(matmul(), expected):
            raise SystemExit(f"{label}: {name}: the output differs from numpy's")
        contenders[name] = timed_call(matmul)
    macs = a.shape[0] * a.shape[1] * b.shape[1]
    blocks = ", ".join(f"{o.block}: {o.intrinsic}" for o in result.tensorized)
    print(f"{label} ({macs / 1e6:.0f} M MACs; {blocks}; tensorize and emit {prepared:.2f} s), "
          f"interleaved, best of {ROUNDS} rounds")
    best = interleaved(contenders)
    print_best(best, macs)
    slow = 1 if macs > 10**8 else RUNS
    i32, _ = timed(product(a, b, np.int32), slow)
    print(f"  {f'numpy i32 (after them, best of {slow})':44} {i32 * 1e3:9.3f} {'':9} "
          f"{macs / i32 / 1e9:8.1f}")
    if theirs[1] not in best:
        print("  onnxruntime MatMulInteger: not installed (pip install -e '.[bench]')")
        return
    print(f"  tensorize / onnxruntime: {best[theirs[0]][0] / best[ours[0]][0]:.2f}x with B "
          f"per call and an input, {best[theirs[1]][0] / best[ours[1]][0]:.2f}x with B "
          "packed once and prepacked")


def u8s8_table(registry, rng: np.random.Generator) -> None:
    """The u8 x s8 GEMMs and ResNet-50's 3x3 convolution (:func:`u8s8_case`)."""
    gemm = suite_kernels.builders()["gemm_u8s8"]
    cases = [("GEMM 256^3", gemm(256, 256, 256)), ("GEMM 1024^3", gemm(1024, 1024, 1024)),
             ("ResNet-50 conv 3x3 56x56x64 -> 64", conv3x3_u8s8(56, 64, 64))]
    for label, func in cases:
        u8s8_case(label, func, rng, registry)


TABLES = {"u8s8": u8s8_table, "s8s8": s8s8_table, "threads": threads_table}


def main() -> None:
    parser = argparse.ArgumentParser(description="x86 int8 kernels against MLAS (module "
                                                 "docs)")
    # No ``choices``: argparse (3.11) checks a list default of ``nargs="*"`` against them.
    parser.add_argument("tables", nargs="*", metavar="TABLE",
                        help=f"any of {', '.join(TABLES)}, run in the order given "
                             "(default: all)")
    tables = parser.parse_args().tables or list(TABLES)
    unknown = [name for name in tables if name not in TABLES]
    if unknown:
        parser.error(f"unknown table {', '.join(unknown)}: the tables are "
                     f"{', '.join(TABLES)}")
    rng = np.random.default_rng(0)
    registry = default_registry()  # a bench is an edge: the built-in descriptions
    for name in tables:
        TABLES[name](registry, rng)

if __name__ == "__main__":
    main()
