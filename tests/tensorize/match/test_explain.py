"""The why-not report: one line per block and intrinsic, matched or with its reason."""

from __future__ import annotations

import importlib.util
from functools import cache
from pathlib import Path
from types import ModuleType

import pytest

import ir
import intrinsics
from ir import te
from tensorize.match.explain import explain
from tensorize.schedule import Schedule, tree

REGISTRY = intrinsics.default_registry()
COMPUTE = REGISTRY.compute_intrinsics()
NPU = REGISTRY.get("npu_gemm")
SUITE = Path(__file__).resolve().parents[3] / "examples" / "te" / "suite.py"


@cache
def suite() -> ModuleType:
    spec = importlib.util.spec_from_file_location("suite", SUITE)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def i32(x: ir.Expr) -> ir.Expr:
    return ir.cast("int32", x)


def reduction(product, a: str = "int8", b: str = "int8", reduce=te.sum,
              name: str = "C") -> ir.PrimFunc:
    A = te.placeholder((32, 16), a, "A")
    B = te.placeholder((16, 32), b, "B")
    rk = te.reduce_axis(16, "k")
    C = te.compute((32, 32), lambda i, j: reduce(product(A[i, rk], B[rk, j]), axis=rk), name)
    return te.create_prim_func([A, B, C])


def only_line(func: ir.PrimFunc, intrinsic: intrinsics.Intrinsic = NPU) -> str:
    (line,) = explain(func, [intrinsic], REGISTRY)
    return line


def test_one_line_per_block_and_intrinsic_for_every_kernel() -> None:
    everything = list(REGISTRY)  # loads, stores and fills too: nothing may crash
    for func in suite().kernels().values():
        blocks = tree.block_names(func)
        lines = explain(func, everything, REGISTRY)
        assert len(lines) == len(blocks) * len(everything)
        assert all("\n" not in line for line in lines)
        assert [line.split(":")[0] for line in lines] == [
            b for b in blocks for _ in everything]


def test_matched_line_shows_the_cheapest_mapping() -> None:
    pad, conv = explain(suite().conv2d_nhwc_int8(), [NPU], REGISTRY)
    assert conv == ("conv: npu_gemm  M=(vn,vh,vw) N=(vco) K=(vrh,vrw,vrc)  calls 72 pad 0%  "
                    "A=pad B=W C=conv  pack A  (best of 98)")
    assert pad.startswith("pad: npu_gemm  no match: ")


@pytest.mark.parametrize("kernel, intrinsic, line", [
    ("gemm_int8_odd", "npu_gemm",
     "C: npu_gemm  M=(vi) N=(vj) K=(vk)  calls 84 pad 37%  A=A B=B C=C  (best of 2)"),
    ("batch_matmul_int8", "npu_gemm",
     "C: npu_gemm  M=(vi) N=(vj) K=(vk) outer (vb)  calls 32 pad 0%  A=A B=B C=C  (best of 2)"),
    ("dense_int8", "npu_gemm",
     "Y: npu_gemm  M=(vi) N=(vj) K=(vk)  calls 32 pad 0%  A=X B=W C=Y  pack B  (best of 2)"),
    ("gemm_int8", "arm_sdot_lane",
     "C: arm_sdot_lane  N=(vj) K=(vk) outer (vi)  calls 16384 pad 0%  A=A B=B C=C  pack B  "
     "(best of 2)"),
    ("batch_matmul_int8", "arm_sdot",
     "C: arm_sdot  i=(vb) k=(vk) outer (vi,vj)  calls 8192 pad 0%  A=A B=B C=C  pack B,C  "
     "(best of 2)"),
    ("gemm_u8s8", "arm_usmmla",
     "C: arm_usmmla  M=(vi) N=(vj) K=(vk)  calls 8192 pad 0%  A=A B=B C=C  pack B  "
     "(only mapping)"),
])
def test_matched_lines(kernel: str, intrinsic: str, line: str) -> None:
    func = getattr(suite(), kernel)()
    assert only_line(func, REGISTRY.get(intrinsic)) == line


@pytest.mark.parametrize("func, line", [
    (reduction(lambda a, b: i32(a) * i32(b), reduce=te.max),
     "C: npu_gemm  no match: operator mismatch: block C is a max-reduction vs npu_gemm's sum"),
    (reduction(lambda a, b: i32(a) * i32(b), a="float32"),
     "C: npu_gemm  no match: A is float32, npu_gemm's A is int8"),
    (reduction(lambda a, b: ir.cast("float32", a) * ir.cast("float32", b)),
     "C: npu_gemm  no match: C is float32, npu_gemm's C is int32"),
    (reduction(lambda a, b: i32(a * b)),
     "C: npu_gemm  no match: cast of an int8 product vs npu_gemm's product of int32 values: "
     "the int8 product can overflow before the conversion"),
], ids=["operator", "input dtype", "output dtype", "cast of product"])
def test_mismatch_lines(func: ir.PrimFunc, line: str) -> None:
    assert only_line(func) == line


def test_missing_operand_dimension_line() -> None:
    line = explain(suite().depthwise_conv2d_int8(), [NPU], REGISTRY)[1]
    assert line == ("conv: npu_gemm  no match: no iterator for an operand dimension: npu_gemm's i "
                    "(spatial) indexes A, C, and no spatial iterator of block conv indexes "
                    "exactly W, conv")


def test_non_affine_index_line() -> None:
    A = te.placeholder((32, 16), "int8", "A")
    B = te.placeholder((16, 32), "int8", "B")
    rk = te.reduce_axis(16, "k")
    C = te.compute((32, 32), lambda i, j: te.sum(i32(A[i, rk]) * i32(B[rk, (j * rk) % 32]),
                                                 axis=rk), "C")
    assert only_line(te.create_prim_func([A, B, C])).startswith(
        "C: npu_gemm  no match: non-affine index B[vk, vj * vk % 32]: ")


def test_elementwise_blocks_are_reported() -> None:
    lines = explain(suite().add(), COMPUTE, REGISTRY)
    assert len(lines) == len(COMPUTE)
    assert all(" no match: " in line for line in lines)
    assert lines[[i.name for i in COMPUTE].index("npu_gemm")] == (
        "C: npu_gemm  no match: not tensorizable by a GEMM intrinsic: no reduce iterator "
        "(block C is elementwise, npu_gemm reduces)")


def reordered(func: ir.PrimFunc) -> ir.PrimFunc:
    sch = Schedule(func)
    i, j, k = sch.get_loops(sch.get_block("C"))
    sch.reorder(k, i, j)
    return sch.func


def with_unit_loop(func: ir.PrimFunc) -> ir.PrimFunc:
    sch = Schedule(func)
    sch.split(sch.get_loops(sch.get_block("C"))[0], [1, None])
    return sch.func


STRAIGHT = reduction(lambda a, b: i32(a) * i32(b))
VARIANTS = {
    "loop order": reordered(STRAIGHT),
    "unit loop": with_unit_loop(STRAIGHT),
    "commuted operands": reduction(lambda a, b: i32(b) * i32(a)),
    "casts through int16": reduction(lambda a, b: i32(ir.cast("int16", a))
                                     * i32(ir.cast("int16", b))),
    "cast of an exact int16 product": reduction(lambda a, b: i32(ir.cast("int16", a)
                                                                 * ir.cast("int16", b))),
}


@pytest.mark.parametrize("variant", VARIANTS)
def test_spelling_leaves_the_report_unchanged(variant: str) -> None:
    assert explain(VARIANTS[variant], COMPUTE, REGISTRY) == explain(STRAIGHT, COMPUTE, REGISTRY)
