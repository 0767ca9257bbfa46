"""Expression matching: a block's store against an intrinsic's semantics, up to renaming,
commuted operands and exactly-equivalent conversions."""

from __future__ import annotations

import numpy as np
import pytest

import ir
import intrinsics
from ir import script as T
from ir import te
from tensorize.match import Mismatch
from tensorize.match.expr_match import ExprMatch, canonical, match_expr
from tensorize.schedule import tree

REGISTRY = intrinsics.default_registry()
NPU = REGISTRY.get("npu_gemm")


def i32(x: ir.Expr) -> ir.Expr:
    return ir.cast("int32", x)


def i16(x: ir.Expr) -> ir.Expr:
    return ir.cast("int16", x)


def block_of(func: ir.PrimFunc, name: str) -> ir.Block:
    return tree.find_block(func, name).node.block


def gemm_block(product=lambda a, b: i32(a) * i32(b), a: str = "int8", b: str = "int8",
               reduce=te.sum) -> ir.Block:
    """C[i, j] = reduce_k product(A[i, k], B[k, j]), 32 x 24 x 16."""
    A = te.placeholder((32, 16), a, "A")
    B = te.placeholder((16, 24), b, "B")
    rk = te.reduce_axis(16, "k")
    C = te.compute((32, 24), lambda i, j: reduce(product(A[i, rk], B[rk, j]), axis=rk), "C")
    return block_of(te.create_prim_func([A, B, C]), "C")


def first(result: list[ExprMatch] | Mismatch) -> ExprMatch:
    assert isinstance(result, list), result
    return result[0]


# -- conversions: accepted exactly when numpy computes the same numbers -------------------------

A8 = ir.Buffer("a", (256, 1), "int8")
B8 = ir.Buffer("b", (1, 256), "int8")
U8 = ir.Buffer("u", (1, 256), "uint8")
H16 = ir.Buffer("h", (64, 1), "float16")
G16 = ir.Buffer("g", (1, 64), "float16")


def load(buffer: ir.Buffer) -> ir.Expr:
    return ir.BufferLoad(buffer, (ir.IntImm(0), ir.IntImm(0)))


def evaluate(expr: ir.Expr, env: dict[str, np.ndarray]) -> np.ndarray:
    """numpy's value of a tree of loads, conversions and + - * (integers wrap)."""
    if isinstance(expr, ir.BufferLoad):
        return env[expr.buffer.name]
    if isinstance(expr, ir.Cast):
        return evaluate(expr.value, env).astype(expr.dtype.numpy)
    if isinstance(expr, ir.IntImm):
        return np.array(expr.value, expr.dtype.numpy)
    ops = {"add": np.add, "sub": np.subtract, "mul": np.multiply}
    with np.errstate(all="ignore"):
        return ops[expr.op](evaluate(expr.a, env), evaluate(expr.b, env))


def environment() -> dict[str, np.ndarray]:
    rng = np.random.default_rng(0)
    return {"a": np.arange(-128, 128, dtype=np.int8).reshape(256, 1),
            "b": np.arange(-128, 128, dtype=np.int8).reshape(1, 256),
            "u": np.arange(0, 256, dtype=np.uint8).reshape(1, 256),
            "h": (rng.standard_normal((64, 1)) * 30).astype(np.float16),
            "g": (rng.standard_normal((1, 64)) * 30).astype(np.float16)}


a, b, u, h, g = (load(x) for x in (A8, B8, U8, H16, G16))
EQUIVALENT = {
    "widening chain": (i32(i16(a)), i32(a)),
    "int16 product of int8 values": (i32(i16(a) * i16(b)), i32(a) * i32(b)),
    "int16 sum of int8 values": (i32(i16(a) + i16(b)), i32(a) + i32(b)),
    "int32 product widened to int64": (ir.cast("int64", i32(a) * i32(b)),
                                       ir.cast("int64", a) * ir.cast("int64", b)),
    "int8 through float16": (ir.cast("float32", ir.cast("float16", a)), ir.cast("float32", a)),
    "identity conversion": (ir.Cast(ir.dtypes.int8, a), a),
    "constant": (i32(ir.IntImm(3, ir.dtypes.int8)) * i32(a), ir.IntImm(3) * i32(a)),
}
DIFFERENT = {  # the rewrite a careless matcher would make, and numpy shows it wrong
    "int8 product": (i32(a * b), i32(a) * i32(b)),
    "uint8 product": (i16(ir.cast("uint8", a) * u), i16(ir.cast("uint8", a)) * i16(u)),
    "int8 seen as uint8": (i32(ir.cast("uint8", a)), i32(a)),
    "float16 product": (ir.cast("float32", h * g), ir.cast("float32", h) * ir.cast("float32", g)),
}


@pytest.mark.parametrize("name", EQUIVALENT)
def test_canonical_rewrites_only_where_values_agree(name: str) -> None:
    written, expected = EQUIVALENT[name]
    assert ir.structural_equal(canonical(written), expected)
    env = environment()
    np.testing.assert_array_equal(evaluate(written, env), evaluate(expected, env))


@pytest.mark.parametrize("name", DIFFERENT)
def test_canonical_keeps_conversions_that_change_values(name: str) -> None:
    written, rewritten = DIFFERENT[name]
    assert canonical(written) is written
    env = environment()
    assert not np.array_equal(evaluate(written, env), evaluate(rewritten, env))


# -- matching ------------------------------------------------------------------------------------


def test_gemm_pairs_buffers_and_lists_every_access() -> None:
    found = first(match_expr(gemm_block(), NPU))
    assert found.buffer_map == {"C": "C", "A": "A", "B": "B"}
    seen = {(x.buffer.name, tuple(i.name for i in x.indices),
             tuple(i.name for i in x.operand_indices)) for x in found.accesses}
    assert seen == {("C", ("vi", "vj"), ("i", "j")), ("A", ("vi", "vk"), ("i", "k")),
                    ("B", ("vk", "vj"), ("k", "j"))}
    assert found.accesses[0].buffer.name == "C"  # the store comes first


def buffer_maps(result: list[ExprMatch] | Mismatch) -> set[tuple[tuple[str, str], ...]]:
    assert isinstance(result, list), result
    return {tuple(sorted(m.buffer_map.items())) for m in result}


STRAIGHT = (("A", "A"), ("B", "B"), ("C", "C"))
SWAPPED = (("A", "B"), ("B", "A"), ("C", "C"))


def test_same_dtype_operands_may_also_pair_swapped() -> None:
    assert buffer_maps(match_expr(gemm_block(), NPU)) == {STRAIGHT, SWAPPED}


def test_commuted_operands_match_the_same_ways() -> None:
    commuted = match_expr(gemm_block(lambda x, y: i32(y) * i32(x)), NPU)
    assert buffer_maps(commuted) == buffer_maps(match_expr(gemm_block(), NPU))


def test_distinct_dtypes_fix_the_pairing_whatever_the_order() -> None:
    usmmla = REGISTRY.get("arm_usmmla")
    commuted = gemm_block(lambda x, y: i32(y) * i32(x), a="uint8")
    assert buffer_maps(match_expr(commuted, usmmla)) == {STRAIGHT}


def test_accumulator_on_either_side_of_the_sum() -> None:
    func = T.parse('''
@T.prim_func
def f(A: T.Buffer((8, 8), "int8"), B: T.Buffer((8, 8), "int8"), C: T.Buffer((8, 8), "int32")):
    for i, j, k in T.grid(8, 8, 8):
        with T.block("C"):
            vi, vj, vk = T.axis.remap("SSR", [i, j, k])
            C[vi, vj] = T.cast(B[vk, vj], "int32") * T.cast(A[vi, vk], "int32") + C[vi, vj]
''')
    assert buffer_maps(match_expr(block_of(func, "C"), NPU)) == {STRAIGHT, SWAPPED}


def test_conversion_through_int16_matches() -> None:
    found = match_expr(gemm_block(lambda x, y: i32(i16(x) * i16(y))), NPU)
    assert buffer_maps(found) == {STRAIGHT, SWAPPED}


def test_cast_of_an_int8_product_does_not_match() -> None:
    result = match_expr(gemm_block(lambda x, y: i32(x * y)), NPU)
    assert isinstance(result, Mismatch)
    assert result.reason == ("cast of an int8 product vs npu_gemm's product of int32 values: "
                             "the int8 product can overflow before the conversion")


def test_uint8_operand_is_not_int8() -> None:
    result = match_expr(gemm_block(a="uint8"), NPU)
    assert isinstance(result, Mismatch)
    assert result.reason == "A is uint8, npu_gemm's A is int8"
    assert isinstance(match_expr(gemm_block(a="uint8"), REGISTRY.get("arm_usmmla")), list)


def test_float16_inputs_with_float32_sums_match_only_the_float32_accumulator() -> None:
    block = gemm_block(lambda x, y: ir.cast("float32", x) * ir.cast("float32", y),
                       a="float16", b="float16")
    assert isinstance(match_expr(block, REGISTRY.get("wmma_m16n16k16_f16_f32")), list)
    result = match_expr(block, REGISTRY.get("wmma_m16n16k16_f16_f16"))
    assert isinstance(result, Mismatch)
    assert result.reason == "C is float32, wmma_m16n16k16_f16_f16's C is float16"


def test_unwidened_float_inputs_name_both_dtypes() -> None:
    block = gemm_block(lambda x, y: x * y, a="float32", b="float32")
    result = match_expr(block, REGISTRY.get("wmma_m16n16k16_f16_f32"))
    assert isinstance(result, Mismatch)
    assert result.reason == "A is float32, wmma_m16n16k16_f16_f32's A is float16"


def test_max_reduction_is_not_a_sum() -> None:
    result = match_expr(gemm_block(reduce=te.max), NPU)
    assert isinstance(result, Mismatch)
    assert result.reason == "operator mismatch: block C is a max-reduction vs npu_gemm's sum"


def test_other_operator_is_named() -> None:
    result = match_expr(gemm_block(lambda x, y: i32(x) - i32(y)), NPU)
    assert isinstance(result, Mismatch)
    assert result.reason == "operator mismatch: the block has '-' where npu_gemm has '*'"


def test_one_buffer_cannot_be_two_operands() -> None:
    A = te.placeholder((16, 16), "int8", "A")
    rk = te.reduce_axis(16, "k")
    C = te.compute((16, 16), lambda i, j: te.sum(i32(A[i, rk]) * i32(A[rk, j]), axis=rk), "C")
    result = match_expr(block_of(te.create_prim_func([A, C]), "C"), NPU)
    assert isinstance(result, Mismatch)
    assert result.reason == "A would be both npu_gemm's A and B"


ACCUMULATE_ONLY = '''
@T.prim_func
def f(A: T.Buffer((16, 16), "int8"), B: T.Buffer((16, 16), "int8"),
      C: T.Buffer((16, 16), "int32")):
    for i, j, k in T.grid(16, 16, 16):
        with T.block("C"):
            vi, vj, vk = T.axis.remap("SSR", [i, j, k])
            C[vi, vj] += T.cast(A[vi, vk], "int32") * T.cast(B[vk, vj], "int32")
'''


def test_resetting_intrinsic_needs_a_zero_init() -> None:
    reset = REGISTRY.get("npu_gemm_reset")
    assert isinstance(match_expr(gemm_block(), reset), list)
    no_init = block_of(T.parse(ACCUMULATE_ONLY), "C")
    assert isinstance(match_expr(no_init, NPU), list)
    result = match_expr(no_init, reset)
    assert isinstance(result, Mismatch)
    assert result.reason.startswith("npu_gemm_reset zeroes C before accumulating; block C "
                                    "requires an init storing 0 to C")


def test_accumulating_at_another_element_is_not_an_update() -> None:
    func = T.parse(ACCUMULATE_ONLY.replace("C[vi, vj] += ", "C[vi, vj] = C[vj, vi] + "))
    result = match_expr(block_of(func, "C"), NPU)
    assert isinstance(result, Mismatch)
    assert result.reason == ("npu_gemm updates C in place (C = C + ...); block C reads C "
                             "only at other elements (C[vj, vi]) than the one it writes "
                             "(C[vi, vj])")


# Blocks that read the element they write, but not the way the intrinsic does: each reason
# names what the block does (it reads C), never that it writes C without reading it.
OTHER_READS = {
    "C[vi, vj] -= ":
        "operator mismatch: block C updates C with '-' (C = C - ...), npu_gemm with '+' "
        "(C = C + ...)",
    "C[vi, vj] = (C[vi, vj] + 1) + ":
        "npu_gemm updates C in place (C = C + ...); block C reads C[vi, vj] nested in its "
        "value, not as an operand of its outermost operation",
    "C[vi, vj] = C[vi, vj] // 2 + ":
        "npu_gemm updates C in place (C = C + ...); block C reads C[vi, vj] nested in its "
        "value, not as an operand of its outermost operation",
}


@pytest.mark.parametrize("update", list(OTHER_READS))
def test_a_block_reading_its_output_otherwise_is_named_for_what_it_does(update: str) -> None:
    func = T.parse(ACCUMULATE_ONLY.replace("C[vi, vj] += ", update))
    result = match_expr(block_of(func, "C"), NPU)
    assert isinstance(result, Mismatch)
    assert result.reason == OTHER_READS[update]
    assert "without reading" not in result.reason


def test_subtracting_the_element_from_the_sum_names_the_side() -> None:
    func = T.parse(ACCUMULATE_ONLY.replace(
        "C[vi, vj] += T.cast(A[vi, vk], \"int32\") * T.cast(B[vk, vj], \"int32\")",
        "C[vi, vj] = T.cast(A[vi, vk], \"int32\") * T.cast(B[vk, vj], \"int32\") - C[vi, vj]"))
    result = match_expr(block_of(func, "C"), NPU)
    assert isinstance(result, Mismatch)
    assert result.reason == ("operator mismatch: block C updates C with '-' (C = ... - C), "
                             "npu_gemm with '+' (C = C + ...)")


def test_an_intrinsic_reading_its_output_deeper_is_not_said_to_overwrite_it() -> None:
    """npu_vec_clip reads D inside min(max(D, lo), hi); a block C = min(C, 5) updates C."""
    func = T.parse('''
@T.prim_func
def f(C: T.Buffer((16, 16), "int32")):
    for i, j in T.grid(16, 16):
        with T.block("C"):
            vi, vj = T.axis.remap("SS", [i, j])
            C[vi, vj] = T.min(C[vi, vj], 5)
''')
    result = match_expr(block_of(func, "C"), REGISTRY.get("npu_vec_clip"))
    assert isinstance(result, Mismatch)
    assert result.reason == ("block C updates C in place (C = min(C, ...)); npu_vec_clip reads "
                             "D[i, j] nested in its value, not as an operand of its outermost "
                             "operation")


def test_body_that_is_not_one_store_is_refused() -> None:
    func = T.parse('''
@T.prim_func
def f(A: T.Buffer((4, 4), "int32"), C: T.Buffer((4,), "int32")):
    for i in range(4):
        with T.block("C"):
            vi = T.axis.spatial(4, i)
            for k in range(4):
                C[vi] = C[vi] + A[vi, k]
''')
    result = match_expr(block_of(func, "C"), NPU)
    assert isinstance(result, Mismatch)
    assert result.reason == "block C's body is a For, not one store like npu_gemm's"
