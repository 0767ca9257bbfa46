"""How many times each intrinsic call of a function runs.

Loops around calls are walked with their real values and block predicates evaluated, so a
call under a guard of a padded or uneven split counts only where it runs. Subtrees without
calls are skipped, so the walk costs one step per executed call at most.
"""

from __future__ import annotations

from collections import Counter

from ir import BlockRealize, For, IfThenElse, IntrinsicCall, IterKind, PrimFunc, SeqStmt, Stmt
from ir.evaluate import evaluate
from ir.visitor import post_order_visit


def count_calls(func: PrimFunc) -> dict[str, int]:
    """Executions of each intrinsic, by name (intrinsics never called are absent)."""
    counts: Counter[str] = Counter()
    _walk(func.body, {}, counts, {})
    return dict(counts)


def _has_call(stmt: Stmt, memo: dict[int, bool]) -> bool:
    # Keyed by identity: hashing a frozen tree would walk all of it every time.
    if id(stmt) not in memo:
        found: list[bool] = []
        post_order_visit(stmt, lambda node: found.append(isinstance(node, IntrinsicCall)))
        memo[id(stmt)] = any(found)
    return memo[id(stmt)]


def _walk(stmt: Stmt, env: dict, counts: Counter[str], memo: dict[int, bool]) -> None:
    if not _has_call(stmt, memo):
        return
    if isinstance(stmt, IntrinsicCall):
        counts[stmt.intrinsic] += 1
    elif isinstance(stmt, For):
        for value in range(stmt.extent):
            env[stmt.var] = value
            _walk(stmt.body, env, counts, memo)
        del env[stmt.var]
    elif isinstance(stmt, SeqStmt):
        for child in stmt.stmts:
            _walk(child, env, counts, memo)
    elif isinstance(stmt, IfThenElse):
        if evaluate(stmt.cond, env):
            _walk(stmt.then_case, env, counts, memo)
        elif stmt.else_case is not None:
            _walk(stmt.else_case, env, counts, memo)
    elif isinstance(stmt, BlockRealize):
        block = stmt.block
        values = [evaluate(b, env) for b in stmt.bindings]
        if not evaluate(stmt.predicate, env):
            return
        inner = dict(env)
        inner.update({iv.var: v for iv, v in zip(block.iter_vars, values)})
        if block.init is not None and all(
                v == 0 for iv, v in zip(block.iter_vars, values) if iv.kind is IterKind.REDUCE):
            _walk(block.init, inner, counts, memo)
        _walk(block.body, inner, counts, memo)
