"""Expressions thousands of operators long go through the library at Python's default
recursion limit, and the parser refuses, at the user's line, what nests past its limits."""

from __future__ import annotations

import functools
import operator
import sys
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

import targets.host as host
from ir import (BinOp, Buffer, BufferLoad, BufferStore, IntImm, KernelError, Var,
                post_order_visit)
from ir import script as T
from ir import structural_equal, substitute, te
from ir.arith import linearize
from ir.printer import print_node
from ir.script.source import MAX_EXPR_DEPTH, MAX_INDEX_DEPTH, MAX_OPERAND_NESTING

# Python's own default; other tests in the process may have raised it.
DEFAULT_RECURSION_LIMIT = 1000
ROWS = 4


@pytest.fixture(autouse=True)
def default_recursion_limit() -> Iterator[None]:
    previous = sys.getrecursionlimit()
    sys.setrecursionlimit(DEFAULT_RECURSION_LIMIT)
    yield
    sys.setrecursionlimit(previous)


def kernel_file(tmp_path: Path, value: str, columns: int = 4) -> Path:
    """A kernel file whose store (line 8, the value at column 21) is ``C[vi] = value``."""
    path = tmp_path / "deep.py"
    path.write_text(
        "from ir import script as T\n\n"
        "@T.prim_func\n"
        f"def deep(A: T.Buffer(({ROWS}, {columns}), \"float32\"), "
        f"C: T.Buffer(({ROWS},), \"float32\")):\n"
        f"    for i in range({ROWS}):\n"
        "        with T.block(\"C\"):\n"
        f"            vi = T.axis.spatial({ROWS}, i)\n"
        f"            C[vi] = {value}\n")
    return path


def sum_of(terms: int) -> str:
    return " + ".join(f"A[vi, {k}]" for k in range(terms))


def load_error(path: Path) -> KernelError:
    with pytest.raises(KernelError) as info:
        T.load_file(path)
    return info.value


@pytest.mark.parametrize("terms", [400, 1000])
def test_a_long_sum_parses_prints_reparses_and_runs(tmp_path, terms):
    func = T.load_file(kernel_file(tmp_path, sum_of(terms), terms))["deep"]
    reparsed = T.parse(print_node(func))
    assert structural_equal(func, reparsed)
    A = np.random.default_rng(terms).standard_normal((ROWS, terms)).astype(np.float32)
    # The IR adds left to right, rounding to float32 at every step, exactly as this loop does.
    expected = A[:, 0].copy()
    for k in range(1, terms):
        expected = expected + A[:, k]
    np.testing.assert_array_equal(host.run(reparsed, {"A": A})["C"], expected)


def test_a_long_sum_built_with_te_runs():
    A = te.placeholder((ROWS, 1000), "int32", "A")
    C = te.compute((ROWS,), lambda i: functools.reduce(
        operator.add, [A[i, k] for k in range(1000)]), "C")
    func = te.create_prim_func([A, C], "te_sum")
    values = np.random.default_rng(7).integers(-1000, 1000, (ROWS, 1000)).astype(np.int32)
    got = host.run(func, {"A": values})["C"]
    np.testing.assert_array_equal(got, values.sum(axis=1, dtype=np.int64).astype(np.int32))


def test_a_sum_of_as_many_terms_as_the_depth_limit_parses(tmp_path):
    # Issue 22, item 11: a 1,999-term sum was refused, each load counted 3 levels (subscript,
    # index tuple, name). A load is one level, a name or a constant none; the parser follows
    # the chain at Python's default recursion limit.
    func = T.load_file(kernel_file(tmp_path, sum_of(MAX_EXPR_DEPTH), MAX_EXPR_DEPTH))["deep"]
    stores: list[BufferStore] = []
    post_order_visit(func.body, lambda n: stores.append(n) if isinstance(n, BufferStore) else None)
    rights, first = spine(stores[0].value)
    assert len(rights) == MAX_EXPR_DEPTH - 1 and isinstance(first, BufferLoad)


def test_a_sum_one_term_past_the_depth_limit_is_refused(tmp_path):
    err = load_error(kernel_file(tmp_path, sum_of(MAX_EXPR_DEPTH + 1), MAX_EXPR_DEPTH + 1))
    assert f"nests {MAX_EXPR_DEPTH + 1} levels, more than the limit {MAX_EXPR_DEPTH}" \
        in err.message
    assert (err.loc.line, err.loc.col) == (8, 21)


def test_a_sum_past_the_depth_limit_is_refused_at_its_line(tmp_path):
    err = load_error(kernel_file(tmp_path, sum_of(MAX_EXPR_DEPTH + 100)))
    assert f"nests {MAX_EXPR_DEPTH + 100} levels, more than the limit {MAX_EXPR_DEPTH}" \
        in err.message
    assert "split it with a temporary buffer" in err.message
    assert (err.loc.line, err.loc.col) == (8, 21)
    # The 20000-character line is shown cut to a window around the caret.
    shown, caret = str(err).splitlines()[1:3]
    assert len(shown) < 140 and shown.endswith("...")
    assert caret.index("^") == shown.index("A[vi, 0]")


def test_a_sum_too_deep_for_pythons_parser_is_refused_at_its_line(tmp_path):
    err = load_error(kernel_file(tmp_path, sum_of(4000)))
    assert f"too deeply for Python's parser, more than the limit of {MAX_EXPR_DEPTH}" \
        in err.message
    assert (err.loc.line, err.loc.col) == (8, 13)  # where the statement starts


def test_operands_nested_past_the_limit_are_refused(tmp_path):
    err = load_error(kernel_file(tmp_path, "- " * MAX_OPERAND_NESTING + "A[vi, 0]"))
    # 100 minus signs around A[vi, 0], a load: one level (its indices are no levels of it).
    assert f"nests operands {MAX_OPERAND_NESTING + 1} levels deep" in err.message
    assert (err.loc.line, err.loc.col) == (8, 21)


def test_an_index_nested_past_the_limit_is_refused(tmp_path):
    # 101 additions; the constants are no levels.
    err = load_error(kernel_file(tmp_path, "A[vi, 0" + " + 0" * (MAX_INDEX_DEPTH + 1) + "]"))
    assert f"an index nests {MAX_INDEX_DEPTH + 1} levels, more than the limit" in err.message
    assert (err.loc.line, err.loc.col) == (8, 27)


def chain(terms: int) -> tuple[BinOp, Var, Buffer]:
    """``A[x] + A[x] + ...`` as the TE builder or a transform would build it."""
    A, x = Buffer("A", (8,), "int32"), Var("x")
    expr = BufferLoad(A, (x,))
    for _ in range(terms - 1):
        expr = expr + BufferLoad(A, (x,))
    return expr, x, A


def spine(expr):
    """The right operands of a chain, top first, and its leftmost operand."""
    rights = []
    while isinstance(expr, BinOp):
        rights.append(expr.b)
        expr = expr.a
    return rights, expr


def test_walkers_follow_a_chain_longer_than_the_recursion_limit():
    expr, x, A = chain(5000)
    y = Var("y")
    replaced = substitute(expr, {x: y})
    rights, first = spine(replaced)
    assert len(rights) == 4999
    assert all(load.indices == (y,) for load in (*rights, first))
    assert substitute(expr, {Var("unused"): y}) is expr
    kinds: list[str] = []
    post_order_visit(expr, lambda node: kinds.append(type(node).__name__))
    assert kinds.count("BinOp") == 4999 and kinds.count("Var") == 5000
    assert kinds[-1] == "BinOp" and kinds[:3] == ["Buffer", "Var", "BufferLoad"]
    assert print_node(expr).count(" + ") == 4999
    assert linearize(expr).terms[0][1] == 5000


def test_long_chains_compare_and_hash_as_values():
    first, x, A = chain(5000)
    second = first.a + BufferLoad(A, (x,))
    assert first == second and hash(first) == hash(second)
    different = first.a + BufferLoad(A, (IntImm(0),))
    assert first != different
    assert structural_equal(first, second) and not structural_equal(first, different)
