"""What the CPU code generator knows while it emits (targets/cpu/ranges.py): conditions the
ranges in scope decide, mins and maxes they settle, and where a serial loop splits so that
its interior runs with no condition and no bounds check left. Decisions are checked against
every point of the box; kernels are run exactly against numpy."""

import itertools

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ir import script as T
from ir.arith import Interval
from ir.expr import Var, and_, const, eq, max_, min_, ne
from ir.stmt import For, ForKind
from targets import cpu
from targets.cpu.ranges import decide, has_conditions, pick, segments
from tensorize.engine import auto_tensorize
from tests.tensorize.schedule.kernels import gemm_int8

x, y = Var("x"), Var("y")
COMPARES = ["lt", "le", "gt", "ge", "eq", "ne"]


def _value(op: str, a: int, b: int) -> bool:
    return {"lt": a < b, "le": a <= b, "gt": a > b, "ge": a >= b, "eq": a == b,
            "ne": a != b}[op]


@settings(max_examples=200, deadline=None)
@given(st.integers(-3, 3), st.integers(-3, 3), st.integers(-20, 20),
       st.sampled_from(COMPARES), st.integers(-5, 5), st.integers(0, 6), st.integers(-5, 5),
       st.integers(0, 6))
def test_a_decided_comparison_holds_at_every_point_of_the_box(a, b, c, op, x0, xn, y0, yn):
    form = a * x + b * y
    cond = {"eq": eq, "ne": ne}[op](form, c) if op in ("eq", "ne") else \
        getattr(form, f"__{op}__")(c)
    ranges = {x: Interval(x0, x0 + xn), y: Interval(y0, y0 + yn)}
    values = {_value(op, a * i + b * j, c)
              for i, j in itertools.product(range(x0, x0 + xn + 1), range(y0, y0 + yn + 1))}
    decided = decide(cond, ranges)
    if decided is not None:
        assert values == {decided}
    if len(values) == 1 and (a == 0 or b == 0) and op not in ("eq", "ne"):
        # An order of one variable against a bound (an index against an extent): its two
        # ends decide it. (Equality can miss values between them: 2 * y == 3.)
        assert decided == values.pop()


def test_logic_is_decided_by_the_operand_that_settles_it() -> None:
    ranges = {x: Interval(0, 15), y: Interval(0, 99)}
    assert decide(and_(x < 16, y < 50), ranges) is None
    assert decide(and_(x < 10, y < 200), ranges) is None
    assert decide(and_(x < 16, y < 200), ranges) is True
    assert decide(and_(x > 20, y < 50), ranges) is False
    assert decide(const(1, "bool"), ranges) is True


def test_a_min_or_max_is_the_operand_it_always_equals() -> None:
    ranges = {x: Interval(0, 15)}
    assert pick(min_(x, 16), ranges) is x
    assert pick(max_(x, 0), ranges) is x
    assert pick(min_(x, 7), ranges) is None
    assert pick(min_(x, -1), ranges).value == -1  # type: ignore[union-attr]


def _padded_copy(n: int, tile: int):
    """Copy ``A`` (n elements) into whole tiles, zero past its end: the shape of a packing
    stage, with the tile's loop unrolled."""
    tiles = -(-n // tile)

    @T.prim_func
    def pad(A: T.Buffer((n,), "int8"), P: T.Buffer((tiles, tile), "int8")):
        for t in range(tiles):
            for u in T.unroll(tile):
                with T.block("pad"):
                    vt = T.axis.spatial(tiles, t)
                    vu = T.axis.spatial(tile, u)
                    P[vt, vu] = T.if_then_else(vt * tile + vu < n, A[T.min(vt * tile + vu,
                                                                             n - 1)], 0)

    return pad


def _loop(func) -> For:
    node = func.body
    while not isinstance(node, For):
        node = node.block.body if hasattr(node, "block") else node.body
    return node


@pytest.mark.parametrize("n, pieces", [(16, None), (17, [(0, 3), (4, 4)]),
                                       (31, [(0, 6), (7, 7)]), (32, None), (33, [(0, 7), (8, 8)])])
def test_a_padded_loop_splits_into_its_interior_and_its_edge(n, pieces) -> None:
    loop = _loop(_padded_copy(n, 4))
    assert loop.kind is ForKind.SERIAL and has_conditions(loop.body)
    assert segments(loop, {}) == pieces


def test_a_loop_without_conditions_is_not_split() -> None:
    @T.prim_func
    def copy(A: T.Buffer((32,), "int8"), P: T.Buffer((32,), "int8")):
        for t in range(8):
            for u in T.unroll(4):
                with T.block("copy"):
                    v = T.axis.spatial(32, t * 4 + u)
                    P[v] = A[v]

    loop = _loop(copy)
    assert not has_conditions(loop.body) and segments(loop, {}) is None


@pytest.mark.parametrize("n", [15, 16, 17, 31, 32, 33])
def test_a_padded_copy_runs_exactly_with_no_condition_left(n, registry) -> None:
    func = _padded_copy(n, 16)
    kernel = cpu.emit(func, "arm", registry=registry)
    # Every index proven in bounds and every condition decided: the interior tiles and the
    # edge tile, peeled, move whole vectors.
    assert "out_of_bounds" not in kernel.llvm_ir and "select i1" not in kernel.llvm_ir
    assert "store <16 x i8>" in kernel.llvm_ir
    a = np.random.default_rng(n).integers(-128, 128, n, dtype=np.int8)
    got = cpu.run(kernel, {"A": a}).outputs["P"]
    expected = np.zeros(-(-n // 16) * 16, np.int8)
    expected[:n] = a
    np.testing.assert_array_equal(got.reshape(-1), expected)


@pytest.mark.parametrize("shape", [(17, 33, 65), (31, 17, 15), (33, 15, 16)])
def test_a_padded_gemms_packing_is_condition_free_vector_moves(shape, registry) -> None:
    m, n, k = shape
    kernel = cpu.emit(auto_tensorize(gemm_int8(m, n, k), "arm", registry=registry).func, "arm",
                      registry=registry)
    assert "out_of_bounds" not in kernel.llvm_ir and "select i1" not in kernel.llvm_ir
    assert "shufflevector" in kernel.llvm_ir
    rng = np.random.default_rng(1)
    inputs = {"A": rng.integers(-128, 128, (m, k), dtype=np.int8),
              "B": rng.integers(-128, 128, (k, n), dtype=np.int8)}
    np.testing.assert_array_equal(cpu.run(kernel, inputs).outputs["C"],
                                  inputs["A"].astype(np.int32) @ inputs["B"].astype(np.int32))
