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
    totals: Counter[str] = Counter()
    for (_, name), count in count_calls_by_block(func).items():
        totals[name] += count
    return dict(totals)


def count_calls_by_block(func: PrimFunc) -> dict[tuple[str, str], int]:
    """Executions of each intrinsic per block that calls it: ``(block, intrinsic) -> count``,
    in the order the calls first run."""
    counts: Counter[tuple[str, str]] = Counter()
    _walk(func.body, {}, counts, {}, "root")
    return dict(counts)


def _has_call(stmt: Stmt, memo: dict[int, bool]) -> bool:
    # Keyed by identity: hashing a frozen tree would walk all of it every time.
    if id(stmt) not in memo:
        found: list[bool] = []
        post_order_visit(stmt, lambda node: found.append(isinstance(node, IntrinsicCall)))
        memo[id(stmt)] = any(found)
    return memo[id(stmt)]


def _walk(stmt: Stmt, env: dict, counts: Counter[tuple[str, str]], memo: dict[int, bool],
          block: str) -> None:
    if not _has_call(stmt, memo):
        return
    if isinstance(stmt, IntrinsicCall):
        counts[(block, stmt.intrinsic)] += 1
    elif isinstance(stmt, For):
        for value in range(stmt.extent):
            env[stmt.var] = value
            _walk(stmt.body, env, counts, memo, block)
        del env[stmt.var]
    elif isinstance(stmt, SeqStmt):
        for child in stmt.stmts:
            _walk(child, env, counts, memo, block)
    elif isinstance(stmt, IfThenElse):
        if evaluate(stmt.cond, env):
            _walk(stmt.then_case, env, counts, memo, block)
        elif stmt.else_case is not None:
            _walk(stmt.else_case, env, counts, memo, block)
    elif isinstance(stmt, BlockRealize):
        blk = stmt.block
        values = [evaluate(b, env) for b in stmt.bindings]
        if not evaluate(stmt.predicate, env):
            return
        inner = dict(env)
        inner.update({iv.var: v for iv, v in zip(blk.iter_vars, values)})
        if blk.init is not None and all(
                v == 0 for iv, v in zip(blk.iter_vars, values) if iv.kind is IterKind.REDUCE):
            _walk(blk.init, inner, counts, memo, blk.name)
        _walk(blk.body, inner, counts, memo, blk.name)
