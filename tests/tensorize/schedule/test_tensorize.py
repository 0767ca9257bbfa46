"""tensorize: a blockized tile becomes one intrinsic call that computes the same results."""

from __future__ import annotations

import doctest
import importlib
from pathlib import Path

import pytest

import intrinsics
import ir
from intrinsics import ENV_VAR, Cost, Intrinsic, Operand, default_registry
from intrinsics.model import frozen_mapping
from ir import IntrinsicCall, IterKind, IterVar, ScheduleError, structural_equal, te
from ir import script as T
from ir.verify import verify
from tensorize.schedule import Schedule
from tests.tensorize.schedule.kernels import assert_same_results, batch_matmul, gemm_int8, \
    matmul_relu


@pytest.fixture(autouse=True)
def _builtin_intrinsics_only(monkeypatch: pytest.MonkeyPatch) -> None:
    """Names resolve against the built-in families unless a test adds one."""
    monkeypatch.delenv(ENV_VAR, raising=False)


def tiled_gemm(func: ir.PrimFunc, block: str, factor: int) -> tuple[Schedule, list]:
    """Split the i, j, k loops around ``block`` by ``factor`` and move (i1, j1, k1) innermost."""
    sch = Schedule(func, default_registry())
    outers, inners = [], []
    for loop in sch.get_loops(sch.get_block(block)):
        outer, inner = sch.split(loop, [None, factor])
        outers.append(outer)
        inners.append(inner)
    sch.reorder(*outers, *inners)
    return sch, inners


def calls(func: ir.PrimFunc) -> list[IntrinsicCall]:
    found: list[IntrinsicCall] = []
    ir.post_order_visit(func.body, lambda n: found.append(n) if isinstance(n, IntrinsicCall)
                        else None)
    return found


def run_with(*extra: Intrinsic):
    """A lower_intrinsic hook knowing the built-ins and ``extra``."""
    registry = intrinsics.default_registry()
    known = {i.name: i for i in extra}
    return intrinsics.lowerer(lambda name: known[name] if name in known else registry.get(name))


def gemm4(name: str = "test_gemm_4x4x4") -> Intrinsic:
    """A 4x4x4 int8 -> int32 multiply-accumulate described in Python, not YAML."""
    A = ir.Buffer("A", (4, 4), "int8")
    B = ir.Buffer("B", (4, 4), "int8")
    C = ir.Buffer("C", (4, 4), "int32")
    i, j, k = ir.Var("i"), ir.Var("j"), ir.Var("k")
    text = "C[i, j] += i32(A[i, k]) * i32(B[k, j])"
    store = T.parse_compute(text, {"A": A, "B": B, "C": C}, {"i": i, "j": j, "k": k})
    return Intrinsic(
        name=name, family="test", target="test", kind="compute",
        iter_vars=(IterVar(i, 4), IterVar(j, 4), IterVar(k, 4, IterKind.REDUCE)),
        operands=(Operand("A", "input", A), Operand("B", "input", B),
                  Operand("C", "accumulator", C)),
        semantics=store, semantics_text=text, emit=frozen_mapping({"test": "mma {C}, {A}, {B}"}),
        cost=Cost(4, 1), reference="https://example.com/test#mma")


TILE4_FAMILY = """\
target: tile4
description: a 4x4x4 int32 multiply-accumulate tile, for the tensorize tests
scopes:
  global: {}
intrinsics:
  - name: tile4_mma_i32
    kind: compute
    iterators:
      - {name: i, extent: 4}
      - {name: j, extent: 4}
      - {name: k, extent: 4, kind: reduce}
    operands:
      - {name: A, role: input, shape: [4, 4], dtype: int32, scope: global}
      - {name: B, role: input, shape: [4, 4], dtype: int32, scope: global}
      - {name: C, role: accumulator, shape: [4, 4], dtype: int32, scope: global}
    semantics: "C[i, j] += A[i, k] * B[k, j]"
    emit:
      tile4: "mma {C}, {A}, {B}"
    cost: {latency: 4, interval: 1}
    reference: https://example.com/tile4#mma
"""


@pytest.fixture
def tile4_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A user family in a directory the registry searches."""
    (tmp_path / "tile4.yaml").write_text(TILE4_FAMILY)
    monkeypatch.setenv(ENV_VAR, str(tmp_path))
    return tmp_path


# -- tensorizing ---------------------------------------------------------------------------------

def test_gemm_tile_becomes_one_npu_gemm_call_with_the_same_results():
    func = gemm_int8(64, 64, 64)
    sch, (i1, _, _) = tiled_gemm(func, "C", 16)
    tile = sch.blockize(i1)
    sch.tensorize(tile, "npu_gemm")
    block = sch.get(tile).block
    (call,) = calls(sch.func)
    assert call is block.body and call.intrinsic == "npu_gemm"
    assert [str(a) for a in call.args] == [
        "A[vi_o * 16:vi_o * 16 + 16, vk_o * 16:vk_o * 16 + 16]",
        "B[vk_o * 16:vk_o * 16 + 16, vj_o * 16:vj_o * 16 + 16]",
        "C[vi_o * 16:vi_o * 16 + 16, vj_o * 16:vj_o * 16 + 16]"]
    assert [r.buffer.name for r in block.reads] == ["A", "B", "C"]
    assert [str(r) for r in block.writes] == [
        "C[vi_o * 16:vi_o * 16 + 16, vj_o * 16:vj_o * 16 + 16]"]
    assert ("tensorized", "npu_gemm") in block.annotations
    assert block.init is not None  # the zeroing stays as ordinary code before the first call
    verify(sch.func)
    assert_same_results(func, sch.func, lower_intrinsic=run_with())


def test_tensorizing_a_loop_blockizes_it_first():
    func = gemm_int8(32, 32, 32)
    by_block, (i1, _, _) = tiled_gemm(func, "C", 16)
    by_block.tensorize(by_block.blockize(i1), "npu_gemm")
    by_loop, (i1, _, _) = tiled_gemm(func, "C", 16)
    by_loop.tensorize(i1, "npu_gemm")
    assert structural_equal(by_loop.func, by_block.func)


def test_python_built_intrinsic_tensorizes_a_4x4x4_tile():
    func = gemm_int8(16, 12, 8)
    intrinsic = gemm4()
    sch, (i1, _, _) = tiled_gemm(func, "C", 4)
    sch.tensorize(i1, intrinsic)
    assert [c.intrinsic for c in calls(sch.func)] == ["test_gemm_4x4x4"]
    verify(sch.func)
    assert_same_results(func, sch.func, lower_intrinsic=run_with(intrinsic))


def test_yaml_family_intrinsic_tensorizes_batch_matmul_by_name(tile4_dir):
    registry = default_registry([tile4_dir])  # the user's family, as --intrinsics-dir loads it
    func = batch_matmul(2, 8, 12, 8)
    sch = Schedule(func, registry)
    b, i, j, k = sch.get_loops(sch.get_block("C"))
    i0, i1 = sch.split(i, [None, 4])
    j0, j1 = sch.split(j, [None, 4])
    k0, k1 = sch.split(k, [None, 4])
    sch.reorder(i0, j0, k0, i1, j1, k1)
    sch.tensorize(i1, "tile4_mma_i32")
    (call,) = calls(sch.func)
    assert str(call.args[2]) == "C[vx_o, vi_o * 4:vi_o * 4 + 4, vj_o * 4:vj_o * 4 + 4]"
    verify(sch.func)
    assert_same_results(func, sch.func, lower_intrinsic=run_with())
    replayed = Schedule.replay(func, sch.replay_trace(), registry)
    assert structural_equal(replayed.func, sch.func)


def test_a_whole_reduction_inside_the_tile_takes_the_resetting_intrinsic(registry):
    func = gemm_int8(32, 32, 16)
    sch = Schedule(func, registry)
    i, j, k = sch.get_loops(sch.get_block("C"))
    i0, i1 = sch.split(i, [None, 16])
    j0, j1 = sch.split(j, [None, 16])
    sch.reorder(i0, j0, i1, j1, k)
    sch.tensorize(i1, "npu_gemm_reset")
    block = sch.get(sch.get_block("C_o")).block
    assert block.init is None and block.body.intrinsic == "npu_gemm_reset"
    verify(sch.func)
    assert_same_results(func, sch.func, lower_intrinsic=run_with())


def test_trace_replays_tensorize_by_name(registry):
    func = gemm_int8(32, 32, 32)
    sch, (i1, _, _) = tiled_gemm(func, "C", 16)
    sch.tensorize(sch.blockize(i1), "npu_gemm")
    assert sch.trace.as_python().splitlines()[-1] == "sch.tensorize(b1, 'npu_gemm')"
    replayed = Schedule.replay(func, sch.replay_trace(), registry)
    assert structural_equal(replayed.func, sch.func)


def test_tensorized_function_prints_and_parses_back():
    sch, (i1, _, _) = tiled_gemm(gemm_int8(32, 32, 32), "C", 16)
    sch.tensorize(i1, "npu_gemm")
    assert structural_equal(T.parse(str(sch.func)), sch.func)


# -- refusals ------------------------------------------------------------------------------------

def refuse(sch: Schedule, target, intrinsic, *fragments: str) -> None:
    before = sch.func
    steps = len(sch.trace)
    with pytest.raises(ScheduleError) as info:
        sch.tensorize(target, intrinsic)
    for fragment in fragments:
        assert fragment in str(info.value)
    assert sch.func is before
    assert len(sch.trace) == steps


def test_refuses_a_tile_of_the_wrong_shape():
    sch, (i1, _, _) = tiled_gemm(gemm_int8(32, 32, 32), "C", 8)
    refuse(sch, i1, "npu_gemm", "tensorize: block 'C' (in 'C_o') does not match intrinsic "
           "npu_gemm: wrong shape: its tile loops (i_1, j_1, k_1) have extents [8, 8, 8]; "
           "the intrinsic's iterators (i, j, k) have extents [16, 16, 16]")


def test_refuses_a_float_matmul_for_an_int8_intrinsic():
    sch, (i1, _, _) = tiled_gemm(matmul_relu(32, 32, 32), "Y", 16)
    refuse(sch, i1, "npu_gemm", "block 'Y' (in 'Y_o')",
           "dtype mismatch: it writes Y of float32; the intrinsic's operand C is int32")


def max_gemm() -> ir.PrimFunc:
    A = te.placeholder((32, 32), "int8", "A")
    B = te.placeholder((32, 32), "int8", "B")
    rk = te.reduce_axis(32, "k")
    C = te.compute((32, 32), lambda i, j: te.max(ir.cast("int32", A[i, rk])
                                                 * ir.cast("int32", B[rk, j]), axis=rk), "C")
    return te.create_prim_func([A, B, C], "max_gemm")


def test_refuses_a_max_reduction_for_a_sum_intrinsic():
    sch, (i1, _, _) = tiled_gemm(max_gemm(), "C", 16)
    refuse(sch, i1, "npu_gemm", "operator mismatch: it computes 'max'",
           "where the intrinsic computes 'add'")


def test_refuses_a_reduce_loop_where_the_intrinsic_has_a_spatial_one(registry):
    func = gemm_int8(32, 32, 32)
    sch = Schedule(func, registry)
    i, j, k = sch.get_loops(sch.get_block("C"))
    i0, i1 = sch.split(i, [None, 16])
    j0, j1 = sch.split(j, [None, 16])
    k0, k1 = sch.split(k, [None, 16])
    sch.reorder(i0, j0, k0, i1, k1, j1)
    refuse(sch, i1, "npu_gemm", "iterator kind mismatch: iterator vj (along loop j_1) is "
           "spatial; the intrinsic's iterator k is reduce")


def test_refuses_a_transposed_operand():
    A = te.placeholder((32, 32), "int8", "A")
    B = te.placeholder((32, 32), "int8", "B")
    rk = te.reduce_axis(32, "k")
    C = te.compute((32, 32), lambda i, j: te.sum(ir.cast("int32", A[i, rk])
                                                 * ir.cast("int32", B[j, rk]), axis=rk), "C")
    sch, (i1, _, _) = tiled_gemm(te.create_prim_func([A, B, C], "gemm_nt"), "C", 16)
    refuse(sch, i1, "npu_gemm", "operand region mismatch: it accesses "
           "B[vj_o * 16 + j_1, vk_o * 16 + k_1] where the intrinsic",
           "accesses B[vj_o * 16 + k_1, vk_o * 16 + j_1]")


def test_refuses_an_operand_region_of_another_shape():
    A = te.placeholder((32, 32), "int8", "A")
    B = te.placeholder((32, 32), "int8", "B")
    rk = te.reduce_axis(32, "k")
    C = te.compute((32, 32), lambda i, j: te.sum(ir.cast("int32", A[i, rk])
                                                 * ir.cast("int32", B[rk, 0]), axis=rk), "C")
    sch, (i1, _, _) = tiled_gemm(te.create_prim_func([A, B, C], "gemm_col"), "C", 16)
    refuse(sch, i1, "npu_gemm", "operand region mismatch: it reads "
           "B[vk_o * 16:vk_o * 16 + 16, 0:1], extents [16, 1]; the intrinsic's operand B is "
           "[16, 16]")


def test_refuses_an_accumulating_intrinsic_when_the_init_is_inside_the_tile(registry):
    sch = Schedule(gemm_int8(32, 32, 16), registry)
    i, j, k = sch.get_loops(sch.get_block("C"))
    i0, i1 = sch.split(i, [None, 16])
    j0, j1 = sch.split(j, [None, 16])
    sch.reorder(i0, j0, i1, j1, k)
    tile = sch.blockize(i1)
    refuse(sch, tile, "npu_gemm", "the intrinsic accumulates into C, but the block still has "
           "its init")


def test_refuses_a_resetting_intrinsic_when_the_reduction_spans_calls():
    sch, (i1, _, _) = tiled_gemm(gemm_int8(32, 32, 32), "C", 16)
    refuse(sch, sch.blockize(i1), "npu_gemm_reset", "the intrinsic resets C on every call, "
           "but the block accumulates into it across calls")


def test_refuses_a_block_that_is_not_blockized(registry):
    sch = Schedule(gemm_int8(), registry)
    refuse(sch, sch.get_block("C"), "npu_gemm", "block 'C' requires a body of loops around "
           "one block (blockize a loop first), got a BufferStore")


def test_refuses_an_unknown_intrinsic_name():
    sch, (i1, _, _) = tiled_gemm(gemm_int8(32, 32, 32), "C", 16)
    refuse(sch, i1, "npu_gem", "tensorize: argument 'intrinsic': no intrinsic is called "
           "'npu_gem'; did you mean")


def test_a_name_needs_the_registry_the_schedule_was_made_with(registry):
    func = gemm_int8(32, 32, 32)
    sch = Schedule(func)  # no registry: intrinsics are taken as values only
    i, j, k = sch.get_loops(sch.get_block("C"))
    i1, j1, k1 = (sch.split(loop, [None, 16])[1] for loop in (i, j, k))
    sch.reorder(*sch.get_loops(sch.get_block("C"))[::2], i1, j1, k1)
    refuse(sch, i1, "npu_gemm", "tensorize: argument 'intrinsic': expected an Intrinsic, or a "
           "name with the registry that declares it (Schedule(func, registry=...)), got "
           "'npu_gemm'")
    sch.tensorize(i1, registry.get("npu_gemm"))
    assert sch.trace.as_python().splitlines()[-1].endswith(", 'npu_gemm')")  # by name
    assert structural_equal(Schedule.replay(func, sch.replay_trace(), registry).func, sch.func)


def test_a_primitive_is_not_given_a_registry_of_its_own(registry):
    sch, (i1, _, _) = tiled_gemm(gemm_int8(32, 32, 32), "C", 16)
    with pytest.raises(ScheduleError, match="a Schedule resolves names in the registry it was "
                                            "made with"):
        sch.tensorize(i1, "npu_gemm", registry=registry)


def test_refuses_a_tile_under_a_predicate():
    sch, (i1, _, _) = tiled_gemm(gemm_int8(30, 32, 32), "C", 16)
    refuse(sch, i1, "npu_gemm", "it runs under the predicate vi_o * 16 + i_1 < 30")


def test_docstring_example_runs():
    module = importlib.import_module("tensorize.schedule.primitives.tensorize_call")
    assert doctest.testmod(module).failed == 0
