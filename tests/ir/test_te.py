"""The TE builder: the functions it builds, their equality with the script examples, and the
errors it reports."""

from __future__ import annotations

import numpy as np
import pytest

import ir
from ir import IterKind, te
from targets import host
from tests.targets.host.kernels import EXAMPLE_NAMES, script_kernel, te_builder


def _blocks(func: ir.PrimFunc) -> list[ir.Block]:
    found: list[ir.Block] = []
    ir.post_order_visit(func.body, lambda n: found.append(n) if isinstance(n, ir.Block) else None)
    return [b for b in found if b.name != "root"]


def _matmul() -> tuple[te.Tensor, te.Tensor, te.Tensor]:
    A = te.placeholder((8, 4), "float32", "A")
    B = te.placeholder((4, 6), "float32", "B")
    k = te.reduce_axis(4, "k")
    C = te.compute((8, 6), lambda i, j: te.sum(A[i, k] * B[k, j], axis=k), "C")
    return A, B, C


@pytest.mark.parametrize("name", EXAMPLE_NAMES)
def test_te_example_equals_its_script_version(name: str) -> None:
    ir.assert_structural_equal(te_builder(name)(), script_kernel(name))


def test_reduction_block_has_spatial_then_reduce_iterators_bound_to_its_loops() -> None:
    A, B, C = _matmul()
    func = te.create_prim_func([A, B, C], "mm")
    (block,) = _blocks(func)
    assert block.name == "C"
    assert [(iv.extent, iv.kind) for iv in block.iter_vars] == [
        (8, IterKind.SPATIAL), (6, IterKind.SPATIAL), (4, IterKind.REDUCE)]
    loops = []
    node: ir.Stmt = func.body.block.body
    while isinstance(node, ir.For):
        loops.append(node)
        node = node.body
    assert isinstance(node, ir.BlockRealize)
    assert [loop.extent for loop in loops] == [8, 6, 4]
    assert all(b is loop.var for b, loop in zip(node.bindings, loops))


def test_sum_starts_from_zero_in_init() -> None:
    (block,) = _blocks(te.create_prim_func(list(_matmul()), "mm"))
    assert isinstance(block.init, ir.BufferStore)
    assert block.init.value == ir.FloatImm(0.0, ir.dtypes.float32)


@pytest.mark.parametrize(("reduce", "start", "numpy"), [
    (te.max, ir.dtypes.int16.min, np.max), (te.min, ir.dtypes.int16.max, np.min)])
def test_max_and_min_start_from_the_dtype_extremes(reduce, start, numpy) -> None:  # type: ignore
    A = te.placeholder((5, 7), "int16", "A")
    k = te.reduce_axis(7, "k")
    R = te.compute((5,), lambda i: reduce(A[i, k], axis=k), "R")
    func = te.create_prim_func([A, R], "reduce")
    (block,) = _blocks(func)
    assert block.init.value == ir.IntImm(start, ir.dtypes.int16)  # type: ignore[union-attr]
    a = np.random.default_rng(0).integers(-30000, 30000, (5, 7)).astype(np.int16)
    np.testing.assert_array_equal(host.run(func, [a])["R"], numpy(a, axis=1))


def test_intermediate_computes_become_allocations_in_dependence_order() -> None:
    A = te.placeholder((4,), "int32", "A")
    T = te.compute((4,), lambda i: A[i] + 1, "T")
    U = te.compute((4,), lambda i: T[i] * 2, "U")
    V = te.compute((4,), lambda i: U[i] - T[i], "V")
    func = te.create_prim_func([A, V], "chain")
    assert [b.name for b in _blocks(func)] == ["T", "U", "V"]
    assert [buf.name for buf in func.allocs] == ["T", "U"]
    assert [p.name for p in func.params] == ["A", "V"]
    a = np.arange(4, dtype=np.int32)
    np.testing.assert_array_equal(host.run(func, [a])["V"], a + 1)


def test_reduction_over_several_axes() -> None:
    A = te.placeholder((3, 4, 5), "int32", "A")
    j = te.reduce_axis(4, "j")
    k = te.reduce_axis(5, "k")
    S = te.compute((3,), lambda i: te.sum(A[i, j, k], axis=[j, k]), "S")
    a = np.arange(60, dtype=np.int32).reshape(3, 4, 5)
    np.testing.assert_array_equal(host.run(te.create_prim_func([A, S]), [a])["S"],
                                  a.sum(axis=(1, 2)))


def test_if_then_else_builds_a_select() -> None:
    A = te.placeholder((6,), "int8", "A")
    B = te.compute((6,), lambda i: te.if_then_else(i < 3, A[i], 0), "B")
    (block,) = _blocks(te.create_prim_func([A, B]))
    assert isinstance(block.body, ir.BufferStore)
    assert isinstance(block.body.value, ir.Select)


def test_one_tensor_graph_builds_independent_functions() -> None:
    tensors = list(_matmul())
    first = te.create_prim_func(tensors, "a")
    second = te.create_prim_func(tensors, "b")
    assert _blocks(first)[0].iter_vars[0].var is not _blocks(second)[0].iter_vars[0].var
    ir.assert_structural_equal(first.body, second.body)


def test_reads_and_writes_are_inferred() -> None:
    A, B, C = _matmul()
    (block,) = _blocks(te.create_prim_func([A, B, C]))
    assert sorted(r.buffer.name for r in block.reads) == ["A", "B", "C"]
    assert [w.buffer.name for w in block.writes] == ["C"]


# -- errors ----------------------------------------------------------------------------------


def _error(call, fragment: str) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(ir.KernelError) as info:
        call()
    message = str(info.value)
    assert fragment in message
    assert "ir.te" not in message and "Traceback" not in message


def test_compute_with_a_dtype_its_expression_lacks_is_refused() -> None:
    A = te.placeholder((4,), "int8", "A")
    _error(lambda: te.compute((4,), lambda i: A[i], "B", "int32"),
           "compute B requires its expression to have dtype int32, got int8; add a cast")


def test_reduce_axis_missing_from_the_reduction_is_refused() -> None:
    A = te.placeholder((4, 4), "float32", "A")
    k = te.reduce_axis(4, "k")
    _error(lambda: te.compute((4,), lambda i: A[i, k], "B"),
           "compute B requires its expression to use only its own indices and the axes it "
           "reduces over, got k")


def test_unlisted_placeholder_is_refused() -> None:
    A, _, C = _matmul()
    _error(lambda: te.create_prim_func([A, C]),
           "create_prim_func requires placeholder B, read by compute C, to be listed")


def test_compute_function_must_take_one_index_per_dimension() -> None:
    _error(lambda: te.compute((4, 4), lambda i: i, "B"),
           "compute B requires a function of 2 indices (one per dimension), got one of 1")


@pytest.mark.parametrize("extent", [0, -2, 2.5])
def test_reduce_axis_extent_must_be_a_positive_int(extent: object) -> None:
    _error(lambda: te.reduce_axis(extent, "r"),  # type: ignore[arg-type]
           "reduce_axis r requires a positive int extent")


def test_reduction_needs_reduce_axes() -> None:
    A = te.placeholder((4,), "float32", "A")
    _error(lambda: te.max(A[0], 1.0),  # type: ignore[arg-type]
           "max requires axis= to be reduce_axis values, got 1.0; for the max of two values "
           "use ir.max_")


def test_function_of_placeholders_only_is_refused() -> None:
    A = te.placeholder((4,), "float32", "A")
    _error(lambda: te.create_prim_func([A], "nothing"),
           "create_prim_func nothing requires at least one compute")
