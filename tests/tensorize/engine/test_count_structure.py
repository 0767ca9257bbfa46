"""Counting calls from the loop structure gives exactly what walking every iteration gives,
on random nests of loops, guards, predicated blocks and inits, and on tensorized kernels."""

from __future__ import annotations

from collections import Counter

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import ir
from ir import (
    TRUE,
    Block,
    BlockRealize,
    For,
    IfThenElse,
    IntrinsicCall,
    IterKind,
    IterVar,
    PrimFunc,
    SeqStmt,
    Stmt,
    Var,
    make_root,
)
from ir.evaluate import evaluate
from tensorize.engine import auto_tensorize
from tensorize.engine.count import count_calls_by_block
from tests.tensorize.engine.suite import suite

MAX_DEPTH = 4


def walk_every_iteration(func: PrimFunc) -> dict[tuple[str, str], int]:
    """The obvious count: run the loop nest, evaluate every guard, count each call."""
    counts: Counter[tuple[str, str]] = Counter()

    def walk(stmt: Stmt, env: dict[Var, int], block: str) -> None:
        if isinstance(stmt, IntrinsicCall):
            counts[(block, stmt.intrinsic)] += 1
        elif isinstance(stmt, For):
            for value in range(stmt.extent):
                walk(stmt.body, {**env, stmt.var: value}, block)
        elif isinstance(stmt, SeqStmt):
            for child in stmt.stmts:
                walk(child, env, block)
        elif isinstance(stmt, IfThenElse):
            if evaluate(stmt.cond, env):
                walk(stmt.then_case, env, block)
            elif stmt.else_case is not None:
                walk(stmt.else_case, env, block)
        elif isinstance(stmt, BlockRealize):
            inner = {**env, **{iv.var: evaluate(b, env)
                               for iv, b in zip(stmt.block.iter_vars, stmt.bindings)}}
            if not evaluate(stmt.predicate, env):
                return
            blk = stmt.block
            if blk.init is not None and all(inner[iv.var] == 0 for iv in blk.iter_vars
                                            if iv.kind is IterKind.REDUCE):
                walk(blk.init, inner, blk.name)
            walk(blk.body, inner, blk.name)

    walk(func.body, {}, "root")
    return dict(counts)


@st.composite
def affine(draw: st.DrawFn, scope: list[Var]) -> ir.Expr:
    """``c0 + sum(ci * vi)`` over a few variables in scope."""
    expr: ir.Expr = ir.const(draw(st.integers(-6, 12)), "int32")
    for var in draw(st.lists(st.sampled_from(scope), max_size=3)) if scope else []:
        expr = expr + var * draw(st.integers(-3, 4))
    return expr


@st.composite
def condition(draw: st.DrawFn, scope: list[Var]) -> ir.Expr:
    """A guard of the kinds padding and splitting make: a bound, a parity, a conjunction."""
    kind = draw(st.sampled_from(["lt", "mod", "and", "true"]))
    if kind == "true" or not scope:
        return TRUE
    if kind == "mod":
        return ir.eq(draw(affine(scope)) % draw(st.integers(2, 3)), 0)
    bound = draw(affine(scope)) < draw(st.integers(0, 12))
    return ir.and_(bound, draw(condition(scope))) if kind == "and" else bound


@st.composite
def statement(draw: st.DrawFn, scope: list[Var], depth: int) -> Stmt:
    """A random statement holding intrinsic calls, over the variables in ``scope``."""
    kinds = ["call"] if depth >= MAX_DEPTH else ["call", "loop", "loop", "seq", "if", "block"]
    kind = draw(st.sampled_from(kinds))
    if kind == "call":
        return IntrinsicCall(draw(st.sampled_from(["x", "y"])), ())
    if kind == "loop":
        var = Var(f"i{depth}_{len(scope)}")
        body = draw(statement([*scope, var], depth + 1))
        return For(var, draw(st.integers(1, 4)), body)
    if kind == "seq":
        return SeqStmt(tuple(draw(st.lists(statement(scope, depth + 1), min_size=2,
                                           max_size=3))))
    if kind == "if":
        else_case = draw(st.none() | statement(scope, depth + 1))
        return IfThenElse(draw(condition(scope)), draw(statement(scope, depth + 1)), else_case)
    return draw(block(scope, depth))


@st.composite
def block(draw: st.DrawFn, scope: list[Var], depth: int) -> Stmt:
    """A block whose iterators are bound to affine forms of the loops, under a predicate,
    with an init when one iterator reduces."""
    kinds = draw(st.lists(st.sampled_from([IterKind.SPATIAL, IterKind.REDUCE]), min_size=1,
                          max_size=2))
    iters = tuple(IterVar(Var(f"v{depth}_{n}"), 64, kind) for n, kind in enumerate(kinds))
    bindings = tuple(ir.max_(draw(affine(scope)), 0) for _ in iters)
    inner = [*scope, *(iv.var for iv in iters)]
    init = draw(statement(inner, depth + 1)) if IterKind.REDUCE in kinds else None
    body = draw(statement(inner, depth + 1))
    name = f"b{depth}_{len(scope)}"
    return BlockRealize(bindings, Block(name, iters, (), (), body, init),
                        draw(condition(scope)))


@pytest.mark.slow
@settings(max_examples=300, deadline=None)
@given(statement([], 0))
def test_the_structural_count_equals_walking_every_iteration(body: Stmt) -> None:
    func = PrimFunc("f", (), make_root(body))
    assert count_calls_by_block(func) == walk_every_iteration(func)


@pytest.mark.parametrize("name, target", [("gemm_int8_odd", "npu"), ("conv2d_nhwc_int8", "arm"),
                                          ("conv2d_nchw_int8", "cuda")])
def test_tensorized_kernels_count_as_walked(name: str, target: str, registry, context) -> None:
    func = auto_tensorize(suite()[name], target, registry=registry,
                          config=context(target).machine).func
    assert count_calls_by_block(func) == walk_every_iteration(func)
