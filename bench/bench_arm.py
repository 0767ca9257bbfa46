"""MACs per executed AArch64 instruction: the arm target's kernel (packing included) against
LLVM's own -O3 vectorisation of the untouched kernel, same target features, both run under
the emulator (unicorn), which counts every instruction executed.

    .venv/bin/python bench/bench_arm.py

The inner-loop figure is the k loop's body from the assembly: its sdot count times 16 MACs
over its instruction count. The +i8mm column is the same kernel tensorized with i8mm on (the
intrinsic the engine's count picks: SMMLA where it costs fewer instructions, so never below
the first column), the smmla column with SMMLA named (its register-blocked schedule); both
run exactly under qemu-user where it is installed and are counted under unicorn with every
i8mm instruction replaced by SDOT on the same registers (targets/arm/i8mm_count.py). Every
column but llvm -O3 is tuned per kernel for the scheduling model (the description's
tune_cpus) and the form of code (cpu_tune.CODE_FORMS) that execute it in the fewest
instructions.

A float table counts the float families the same way, on a 256^3 GEMM of each input type
(bfloat16 or float16, float32 sums), emitted for the generic scheduling model: BFDOT (by
element) and BFMMLA with +bf16, FMLAL (by element) with +fp16fml, and FMLAL's batch-1 dense
layer (a GEMV, 1x1024x1024). Each output is compared bit for bit with the reference that
adds in the hardware's order (``tensorize.hardware_order``, the intrinsic's
``accumulation``: what ``tensorize run`` checks), under qemu-user
for bf16 (skipped, and said so, where it is not installed) and under unicorn for FMLAL;
unicorn counts FMLAL itself and BFDOT and BFMMLA as SDOT (targets/arm/i8mm_count.py). The
last column is the intrinsic's own share: one call per its MACs.

    .venv/bin/python bench/bench_arm.py --rows float     # only the float table

A second table takes the GEMVs' weight (B) as a network has it, a constant: its packing is
split off into a kernel of its own (targets.cpu.prepack), run once before the calls, as a
model load would, and the per-call kernel reads the packed buffer. Its figures are a call's
MACs per executed instruction with that packing excluded (+i8mm and smmla as above); the
first column's kernel's instructions a call and its packing's, counted apart, are printed
beside them, and the last column puts one packing and one call together. Every output is
compared with numpy exactly.

    .venv/bin/python bench/bench_arm.py --rows GEMV     # only the rows whose name has GEMV
"""

from __future__ import annotations

import argparse
import math
import re
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import suite_kernels

import ir
from intrinsics import default_registry
from ir import te
from targets import cpu
from targets.arm.i8mm_count import count_i8mm
from tensorize.engine import auto_tensorize
from tensorize.engine.cpu_tune import choose_tune_cpu
from tensorize.hardware_order import block_reference


def inner_loop(asm: str) -> tuple[int, int]:
    """(sdot count, instruction count) of the basic block holding the most sdot."""
    best, current = (0, 1), []
    for line in (l.strip() for l in asm.splitlines()):
        if re.match(r"^\.LBB\d+_\d+:", line) or not line or line.startswith((".", "//")):
            if re.match(r"^\.LBB", line):
                current = []
            continue
        current.append(line)
        if line.startswith(("b.", "b\t", "cbz", "cbnz", "tbz", "tbnz", "ret")):
            dots = sum(i.startswith(("sdot", "udot")) for i in current)
            best = max(best, (dots, len(current)))
            current = []
    return best


I8MM = "+neon,+dotprod,+i8mm"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", default="", help="only the kernels whose name contains "
                        "this text (default: all)")
    rows = parser.parse_args().rows
    registry = default_registry()  # a bench is an edge: the built-in descriptions
    kernels = suite_kernels.builders()
    cases = [("int8 GEMM 64^3", kernels["gemm_int8"](64, 64, 64), 64 ** 3),
             ("int8 GEMM 256^3", kernels["gemm_int8"](256, 256, 256), 256 ** 3),
             ("conv2d NHWC 1x28x28x64, 3x3x64 -> 64", kernels["conv2d_nhwc_int8"](1, 28, 28, 64, 64),
              28 * 28 * 64 * 3 * 3 * 64),
             ("int8 GEMM 17x33x65 (edge tiles)", kernels["gemm_int8"](17, 33, 65), 17 * 33 * 65),
             ("int8 GEMM 100x37x50 (edge tiles)", kernels["gemm_int8"](100, 37, 50),
              100 * 37 * 50),
             # The batch-1 GEMV of a transformer: B as numpy's A @ B has it (k-major), and
             # the weight as a linear layer stores it (W[n, k], k contiguous).
             ("int8 GEMV 1x1024x1024", kernels["gemm_int8"](1, 1024, 1024), 1024 * 1024),
             ("int8 GEMV 1x1024x1024, W[n, k]", kernels["dense_int8"](1, 1024, 1024),
              1024 * 1024)]
    whole_kernels([case for case in cases if rows in case[0]], registry)
    floats = [(f"{dtype} GEMM 256^3, {intrinsic}", float_gemm(dtype, 256, 256, 256),
               intrinsic, features) for dtype, intrinsic, features in FLOAT_FAMILIES]
    # The batch-1 dense layer (the weight as a linear layer stores it, W[n, k]): a one-row
    # register tile, A one fp16 a k step, loaded a k iteration at a time.
    floats.append(("float16 GEMV 1x1024x1024, W[n, k], arm_fmlal_lane",
                   float_gemm("float16", 1, 1024, 1024, weight_rows=True), "arm_fmlal_lane",
                   "+neon,+dotprod,+fp16fml"))
    float_kernels([case for case in floats if rows in case[0]], registry)
    # The GEMVs' weights as constants, with numpy's product of the activation and weight.
    constant = [("int8 GEMV 1x1024x1024, B packed once", kernels["gemm_int8"](1, 1024, 1024),
                 1024 * 1024, lambda a, b: a @ b),
                ("int8 GEMV 1x1024x1024, W[n, k] packed once",
                 kernels["dense_int8"](1, 1024, 1024), 1024 * 1024, lambda a, w: a @ w.T)]
    prepacked([case for case in constant if rows in case[0]], registry)


def whole_kernels(cases: list, registry) -> None:
    """The first table: each kernel whole, its packing included, against LLVM's -O3."""
    if not cases:
        return
    rng = np.random.default_rng(0)
    print("MACs per executed AArch64 instruction, packing included; "
          ".venv/bin/python bench/bench_arm.py")
    print(f"{'kernel':36} {'ours':>8} {'llvm -O3':>9} {'ratio':>6} {'inner loop':>11} "
          f"{'+i8mm':>7} {'smmla':>7}")
    for label, func, count in cases:
        inputs = {p.name: rng.integers(-128, 128, p.shape).astype(p.dtype.numpy)
                  for p in func.params[:2]}
        # Tuned for the scheduling model (the description's tune_cpus) that runs it in
        # the fewest instructions.
        tensorized = auto_tensorize(func, "arm", registry=registry).func
        ours, _ = choose_tune_cpu(tensorized, "arm", registry=registry)
        mine = cpu.run(ours, inputs)
        # The untouched kernel through the same emitter (the same facts, such as the
        # buffers not aliasing): what LLVM's own -O3 vectorisation makes of it.
        base = cpu.run(cpu.emit(func, "arm", registry=registry), inputs)
        out = ours.outputs[0]
        if not np.array_equal(mine.outputs[out], base.outputs[out]):
            raise SystemExit(f"{label}: the tensorized kernel's output differs")
        dots, body = inner_loop(cpu.compile(ours, "asm"))
        # The same kernel with +i8mm: the intrinsic the engine's estimate picks, and SMMLA
        # named; each checked exactly where qemu-user runs it, counted under unicorn with
        # i8mm swapped for SDOT.
        figures = []
        for intrinsic in (None, "arm_smmla"):
            chosen = auto_tensorize(func, "arm", registry=registry, features=I8MM,
                                    intrinsic=intrinsic)
            kernel, _ = choose_tune_cpu(chosen.func, "arm", I8MM, registry=registry)
            if cpu.engine_for(kernel)[0] is not None and not np.array_equal(
                    cpu.run(kernel, inputs).outputs[out], base.outputs[out]):
                raise SystemExit(f"{label}: the +i8mm kernel's output differs")
            figures.append(count / count_i8mm(kernel, inputs))
        print(f"{label:36} {count / mine.instructions:8.2f} {count / base.instructions:9.2f} "
              f"{base.instructions / mine.instructions:6.2f} {16 * dots / body:11.2f} "
              f"{figures[0]:7.2f} {figures[1]:7.2f}")


# (input dtype, intrinsic, features) of the float table.
FLOAT_FAMILIES = (("bfloat16", "arm_bfdot_lane", "+neon,+dotprod,+bf16"),
                  ("bfloat16", "arm_bfmmla", "+neon,+dotprod,+bf16"),
                  ("float16", "arm_fmlal_lane", "+neon,+dotprod,+fp16fml"))


def float_gemm(dtype: str, m: int, n: int, k: int, weight_rows: bool = False
               ) -> ir.PrimFunc:
    """C = A @ B (m x k by k x n; ``weight_rows``: B stored as [n, k], C = A @ B^T), A and B
    of ``dtype``, products accumulated in float32."""
    A = te.placeholder((m, k), dtype, "A")
    B = te.placeholder((n, k) if weight_rows else (k, n), dtype, "B")
    rk = te.reduce_axis(k, "k")
    C = te.compute((m, n), lambda i, j: te.sum(
        ir.cast("float32", A[i, rk])
        * ir.cast("float32", B[j, rk] if weight_rows else B[rk, j]), axis=[rk]), "C")
    return te.create_prim_func([A, B, C], f"gemm_{dtype}")


def float_kernels(cases: list, registry) -> None:
    """The float table: each family's 256^3 GEMM (and FMLAL's GEMV), counted, its output
    checked bit for bit against the hardware-order reference of its GEMM
    (``tensorize.hardware_order``, what ``tensorize run`` checks) where an engine here runs
    it."""
    if not cases:
        return
    rng = np.random.default_rng(2)
    print()
    print("Float families, packing included: instructions executed per MAC (generic "
          "scheduling model)")
    print(f"{'kernel':50} {'instructions':>13} {'per MAC':>8} {'MACs/instr':>11} "
          f"{'intrinsic alone':>16}  exact")
    for label, func, name, features in cases:
        inputs = {p.name: rng.standard_normal(p.shape).astype(p.dtype.numpy)
                  for p in func.params[:2]}
        chosen = auto_tensorize(func, "arm", registry=registry, features=features,
                                intrinsic=name)
        kernel = cpu.emit(chosen.func, "arm", features, registry=registry)
        intrinsic = registry.get(name)
        exact = "not run"
        if cpu.engine_for(kernel)[0] is not None:
            got = cpu.run(kernel, inputs).outputs["C"]
            [outcome] = chosen.tensorized
            _, want = block_reference(func, outcome, intrinsic, inputs, registry)
            ok, detail = want.check(got)
            if not ok:
                raise SystemExit(f"{label}: {detail}")
            exact = "yes"
        count = cpu.count_executed(kernel, inputs)
        macs = math.prod(func.params[-1].shape) * func.params[0].shape[1]
        alone = 1 / math.prod(intrinsic.extents)
        print(f"{label:50} {count:13,} {count / macs:8.3f} {macs / count:11.2f} "
              f"{alone:16.3f}  {exact}")


def prepacked(cases: list, registry) -> None:
    """The second table: each kernel's weight (its second parameter) packed once by a kernel
    of its own, the per-call kernel counted without it; the packing counted apart."""
    if not cases:
        return
    rng = np.random.default_rng(1)
    print()
    print("The weight a constant, packed once before the calls (as at a model load): MACs per")
    print("executed instruction of a call, the packing excluded and its instructions counted "
          "apart")
    print(f"{'kernel':44} {'per call':>9} {'+i8mm':>7} {'smmla':>7} {'call':>9} "
          f"{'packing once':>13} {'call+packing':>13}")
    for label, func, count, reference in cases:
        activation, weight = (p.name for p in func.params[:2])
        inputs = {p.name: rng.integers(-128, 128, p.shape).astype(p.dtype.numpy)
                  for p in func.params[:2]}
        expected = reference(inputs[activation].astype(np.int32),
                             inputs[weight].astype(np.int32))
        figures = []
        for features, intrinsic in ((None, None), (I8MM, None), (I8MM, "arm_smmla")):
            chosen = auto_tensorize(func, "arm", registry=registry, features=features,
                                    intrinsic=intrinsic).func
            split = cpu.split_constants(chosen, [weight])
            pack, _ = choose_tune_cpu(split.pack, "arm", registry=registry)
            kernel, _ = choose_tune_cpu(split.kernel, "arm", features, registry=registry)
            packing = cpu.run(pack, {weight: inputs[weight]})
            call = {activation: inputs[activation],
                    **{name: packing.outputs[name] for name in split.packed}}
            if cpu.engine_for(kernel)[0] is not None and not np.array_equal(
                    cpu.run(kernel, call).outputs[kernel.outputs[0]], expected):
                raise SystemExit(f"{label}: the per-call kernel's output differs from numpy's")
            figures.append((cpu.count_executed(kernel, call), packing.instructions))
        (ours, packing), i8mm, smmla = figures
        print(f"{label:44} {count / ours:9.2f} {count / i8mm[0]:7.2f} {count / smmla[0]:7.2f} "
              f"{ours:9,} {packing:13,} {count / (ours + packing):13.2f}")


if __name__ == "__main__":
    main()
