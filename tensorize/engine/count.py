"""How many times each intrinsic call of a function runs, counted from the loop structure.

A call runs once per iteration of the loops around it, so its count is the product of their
extents, unless a guard stands in between: an ``if``, a block predicate, or a block's
``init`` (which runs where the block's reduce iterators are all 0). A guard is evaluated for
every value of the loops it depends on (directly or through block bindings), and only those;
below it, the loops it does not depend on still count as their extents. So a padded split's
guard enumerates the two loops of the split, not the whole nest, and the count is exact.
"""

from __future__ import annotations

import itertools
import math
from collections import Counter
from collections.abc import Iterator, Sequence
from typing import NamedTuple

from ir import (BlockRealize, Expr, For, IfThenElse, IntrinsicCall, IterKind, PrimFunc, SeqStmt,
                Stmt, Var)
from ir.evaluate import evaluate
from ir.visitor import post_order_visit, vars_of


def count_calls(func: PrimFunc) -> dict[str, int]:
    """Executions of each intrinsic, by name (intrinsics never called are absent)."""
    totals: Counter[str] = Counter()
    for (_, name), count in count_calls_by_block(func).items():
        totals[name] += count
    return dict(totals)


def count_calls_by_block(func: PrimFunc) -> dict[tuple[str, str], int]:
    """Executions of each intrinsic per block that calls it: ``(block, intrinsic) -> count``,
    in program order (calls that never run are absent)."""
    counter = _CallCounter()
    counter.stmt(func.body, _Scope({}, (), {}), "root")
    return dict(counter.counts)


class _Scope(NamedTuple):
    """What is known where a statement runs.

    ``values``: variables whose value is fixed here. ``loops``: the enclosing loops not
    enumerated yet, as (variable, extent); everything below runs once per point of them.
    ``bound``: block iterators whose bindings use those loops, to their binding.
    """

    values: dict[Var, int]
    loops: tuple[tuple[Var, int], ...]
    bound: dict[Var, Expr]


class _CallCounter:
    """Adds up the calls below a statement; memo tables are keyed by node identity, since
    hashing a frozen tree walks all of it."""

    def __init__(self) -> None:
        self.counts: Counter[tuple[str, str]] = Counter()
        self._has_call: dict[int, bool] = {}
        self._free_vars: dict[int, frozenset[Var]] = {}

    def stmt(self, stmt: Stmt, scope: _Scope, block: str) -> None:
        """Count the calls of ``stmt``, run once per point of ``scope.loops``."""
        if not self._calls_below(stmt):
            return
        if isinstance(stmt, IntrinsicCall):
            self.counts[(block, stmt.intrinsic)] += math.prod(e for _, e in scope.loops)
        elif isinstance(stmt, For):
            loops = (*scope.loops, (stmt.var, stmt.extent))
            self.stmt(stmt.body, scope._replace(loops=loops), block)
        elif isinstance(stmt, SeqStmt):
            for child in stmt.stmts:
                self.stmt(child, scope, block)
        elif isinstance(stmt, IfThenElse):
            for case in self._cases((stmt.cond,), scope):
                if evaluate(stmt.cond, case.values):
                    self.stmt(stmt.then_case, case, block)
                elif stmt.else_case is not None:
                    self.stmt(stmt.else_case, case, block)
        elif isinstance(stmt, BlockRealize):
            self._block(stmt, scope)

    def _block(self, realize: BlockRealize, scope: _Scope) -> None:
        block = realize.block
        bound = dict(scope.bound)
        bound.update((iv.var, value) for iv, value in zip(block.iter_vars, realize.bindings))
        reduce = tuple(iv.var for iv in block.iter_vars if iv.kind is IterKind.REDUCE)
        inner = self._resolved(scope._replace(bound=bound))
        for case in self._cases((realize.predicate,), inner):
            if not evaluate(realize.predicate, case.values):
                continue
            if block.init is not None and self._calls_below(block.init):
                for first in self._cases(reduce, case):
                    if all(evaluate(var, first.values) == 0 for var in reduce):
                        self.stmt(block.init, first, block.name)
            self.stmt(block.body, case, block.name)

    def _cases(self, exprs: Sequence[Expr], scope: _Scope) -> Iterator[_Scope]:
        """``scope`` at each point of the pending loops that ``exprs`` depend on, those loops
        then fixed; ``scope`` itself when they depend on none."""
        needed = self._loops_needed(exprs, scope)
        if not needed:
            yield scope
            return
        chosen = [loop for loop in scope.loops if loop[0] in needed]
        rest = tuple(loop for loop in scope.loops if loop[0] not in needed)
        for point in itertools.product(*(range(extent) for _, extent in chosen)):
            values = dict(scope.values)
            values.update(zip((var for var, _ in chosen), point))
            yield self._resolved(_Scope(values, rest, scope.bound))

    def _resolved(self, scope: _Scope) -> _Scope:
        """``scope`` with every pending binding whose variables now have values evaluated (in
        binding order, so an inner block's binding sees the outer ones)."""
        values, bound = scope.values, {}
        for var, binding in scope.bound.items():
            if self._vars(binding) <= values.keys():
                if values is scope.values:
                    values = dict(values)
                values[var] = evaluate(binding, values)
            else:
                bound[var] = binding
        return _Scope(values, scope.loops, bound)

    def _loops_needed(self, exprs: Sequence[Expr], scope: _Scope) -> set[Var]:
        """The variables without a value that ``exprs`` read, through pending bindings."""
        needed: set[Var] = set()
        todo = [var for expr in exprs for var in self._vars(expr)]
        while todo:
            var = todo.pop()
            if var in scope.values or var in needed:
                continue
            if var in scope.bound:
                todo.extend(self._vars(scope.bound[var]))
            else:
                needed.add(var)
        return needed

    def _vars(self, expr: Expr) -> frozenset[Var]:
        if id(expr) not in self._free_vars:
            self._free_vars[id(expr)] = frozenset(vars_of(expr))
        return self._free_vars[id(expr)]

    def _calls_below(self, stmt: Stmt) -> bool:
        if id(stmt) not in self._has_call:
            found: list[bool] = []
            post_order_visit(stmt, lambda node: found.append(isinstance(node, IntrinsicCall)))
            self._has_call[id(stmt)] = any(found)
        return self._has_call[id(stmt)]

