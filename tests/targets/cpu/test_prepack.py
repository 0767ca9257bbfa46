"""The weights packed once on x86 (targets.cpu.prepack is target-independent): the packing
split off runs natively (where this host can), the per-call kernel on its packed buffer,
exact against numpy."""

import numpy as np

import ir
from ir import te
from targets import cpu
from tensorize.engine import auto_tensorize
from tests.targets.cpu.conftest import gemm_inputs, run_here, u8s8_gemm


def test_the_packed_weight_and_the_per_call_kernel_give_numpys_product(registry):
    func = auto_tensorize(u8s8_gemm(4, 32, 64), "x86", registry=registry).func
    split = cpu.split_constants(func, ["B"])
    assert "B" not in [p.name for p in split.kernel.params]
    inputs = gemm_inputs(4, 32, 64)
    pack = run_here(cpu.emit(split.pack, "x86", registry=registry), {"B": inputs["B"]})
    packed = {name: pack.outputs[name] for name in split.packed}
    call = run_here(cpu.emit(split.kernel, "x86", registry=registry),
                    {"A": inputs["A"], **packed})
    expected = inputs["A"].astype(np.int32) @ inputs["B"].astype(np.int32)
    np.testing.assert_array_equal(call.outputs["C"], expected)


def test_the_shift_compensations_column_sums_are_packed_once_too(registry):
    # int8 x int8 on VPDPBUSD: A shifted by 128, less 128 times B's column sums, a
    # reduction over B alone, which the pack computes once.
    k = te.reduce_axis(64, "k")
    A = te.placeholder((16, 64), "int8", "A")
    B = te.placeholder((64, 32), "int8", "B")
    C = te.compute((16, 32), lambda i, j: te.sum(
        ir.cast("int32", A[i, k]) * ir.cast("int32", B[k, j]), axis=k), "C")
    func = auto_tensorize(te.create_prim_func([A, B, C], "gemm_s8s8"), "x86",
                          registry=registry).func
    split = cpu.split_constants(func, ["B"])
    assert any(name.endswith("_sum") for name in split.packed)
    rng = np.random.default_rng(7)
    a = rng.integers(-128, 128, (16, 64), dtype=np.int8)
    b = rng.integers(-128, 128, (64, 32), dtype=np.int8)
    pack = run_here(cpu.emit(split.pack, "x86", registry=registry), {"B": b})
    packed = {name: pack.outputs[name] for name in split.packed}
    call = run_here(cpu.emit(split.kernel, "x86", registry=registry), {"A": a, **packed})
    np.testing.assert_array_equal(call.outputs["C"], a.astype(np.int32) @ b.astype(np.int32))
