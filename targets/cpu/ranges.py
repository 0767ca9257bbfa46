"""What the CPU code generator knows about index values while it emits: the range of every
loop variable and block iterator, the conditions those ranges decide, and where a serial loop
splits into pieces over which every condition is decided.

A padded kernel's packing stages read ``select(i < 17, A[min(i, 16), k], 0)``: one compare,
one select and two bounds checks per byte, which keep LLVM from moving the copy in words. Over
most of the loop (the interior) every such condition has one value; only the last tile (the
edge) straddles the bound. :func:`segments` finds that split, so the interior is emitted with
no condition and no check left, and each edge iteration on its own, where the unrolled
loops inside fix every index and so every condition, element by element.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

from ir.arith import Interval, bound
from ir.expr import COMPARE_OPS, BinOp, BufferLoad, Expr, IntImm, Not, Select, Var
from ir.stmt import BlockRealize, For, ForKind, IfThenElse, SeqStmt, Stmt
from ir.visitor import post_order_visit, vars_of

__all__ = ["decide", "has_conditions", "pick", "segments"]

Ranges = Mapping[Var, Interval]

# A loop splits into at most this many pieces; more (a condition that flips back and forth)
# would copy its body more often than it saves.
_MAX_SEGMENTS = 4


def decide(cond: Expr, ranges: Ranges) -> bool | None:
    """The value ``cond`` has for every value of its variables in ``ranges``, or None when
    the ranges do not decide it (or it is not an integer comparison, a logic of them or a
    constant)."""
    if isinstance(cond, IntImm):
        return bool(cond.value)
    if isinstance(cond, Not):
        inner = decide(cond.a, ranges)
        return None if inner is None else not inner
    if not isinstance(cond, BinOp):
        return None
    if cond.op in ("and", "or"):
        a, b = decide(cond.a, ranges), decide(cond.b, ranges)
        stop = cond.op == "or"  # the value that settles the operator on its own
        if a is stop or b is stop:
            return stop
        return None if a is None or b is None else not stop
    if cond.op not in COMPARE_OPS or not _signed_index(cond.a):
        return None
    diff = bound(cond.a - cond.b, ranges)
    return _COMPARE[cond.op](diff.lo, diff.hi)


def _always(test: Callable[[int], bool], lo: int | None, hi: int | None) -> bool | None:
    """True when ``test`` holds at both ends (each test is monotone), False when at neither."""
    if lo is None or hi is None:
        return None
    ends = (test(lo), test(hi))
    return ends[0] if ends[0] == ends[1] else None


# Each comparison of a and b as a test of the range [lo, hi] of a - b.
_COMPARE: dict[str, Callable[[int | None, int | None], bool | None]] = {
    "lt": lambda lo, hi: _always(lambda d: d < 0, lo, hi),
    "le": lambda lo, hi: _always(lambda d: d <= 0, lo, hi),
    "gt": lambda lo, hi: _always(lambda d: d > 0, lo, hi),
    "ge": lambda lo, hi: _always(lambda d: d >= 0, lo, hi),
    "eq": lambda lo, hi: (True if lo == hi == 0 else False if lo is not None and hi is not None
                          and (lo > 0 or hi < 0) else None),
    "ne": lambda lo, hi: (False if lo == hi == 0 else True if lo is not None and hi is not None
                          and (lo > 0 or hi < 0) else None),
}


def pick(node: BinOp, ranges: Ranges) -> Expr | None:
    """The operand a ``min`` or ``max`` of signed indices always equals over ``ranges``, or
    None when either can be the result."""
    if node.op not in ("min", "max") or not _signed_index(node.a):
        return None
    diff = bound(node.a - node.b, ranges)
    if diff.hi is not None and diff.hi <= 0:
        return node.a if node.op == "min" else node.b
    if diff.lo is not None and diff.lo >= 0:
        return node.b if node.op == "min" else node.a
    return None


def _signed_index(expr: Expr) -> bool:
    """True for a signed integer expression that reads no buffer: index arithmetic, whose
    interval arithmetic does not wrap."""
    dtype = expr.dtype
    if not dtype.is_int or dtype.is_bool or dtype.min >= 0:
        return False
    loads: list[BufferLoad] = []
    post_order_visit(expr, lambda n: loads.append(n) if isinstance(n, BufferLoad) else None)
    return not loads


def has_conditions(stmt: Stmt) -> bool:
    """True when ``stmt`` holds a select, a branch, a block predicate, or a min or max of
    index values: what a split of a loop around it may decide."""
    found: list[object] = []

    def visit(node: object) -> None:
        if isinstance(node, (Select, IfThenElse)) or (
                isinstance(node, BinOp) and node.op in ("min", "max")
                and _signed_index(node.a)) or (
                isinstance(node, BlockRealize) and not _true(node.predicate)):
            found.append(node)

    post_order_visit(stmt, visit)
    return bool(found)


def segments(loop: For, ranges: Ranges) -> list[tuple[int, int]] | None:
    """The pieces ``[lo, hi]`` (in order, covering the loop) over each of which every
    condition in ``loop``'s body that depends on its variable is decided, the loops inside
    it unrolled where they are; None when the loop needs no split (one piece) or would split
    into too many."""
    pieces: list[tuple[int, int]] = []
    start = 0
    while start < loop.extent:
        if len(pieces) == _MAX_SEGMENTS:
            return None
        if not _decided(loop, ranges, start, start):
            pieces.append((start, start))
            start += 1
            continue
        # The largest end that keeps the piece decided (decided ranges shrink to decided
        # ranges, so the search is a bisection).
        good, bad = start, loop.extent
        while bad - good > 1:
            mid = (good + bad) // 2
            if _decided(loop, ranges, start, mid):
                good = mid
            else:
                bad = mid
        pieces.append((start, good))
        start = good + 1
    return pieces if len(pieces) > 1 else None


def _decided(loop: For, ranges: Ranges, lo: int, hi: int) -> bool:
    """True when, with the loop's variable in ``[lo, hi]``, every condition of its body that
    depends on it is decided at every point of the unrolled loops inside."""
    probe = _Probe(loop.var, {**ranges, loop.var: Interval(lo, hi)})
    return probe.stmt(loop.body)


class _Probe:
    """Walks a loop body as the code generator would (unrolled loops point by point, serial
    loops over their ranges, block iterators over their bindings' ranges), checking the
    conditions that depend on ``var``."""

    def __init__(self, var: Var, ranges: dict[Var, Interval]) -> None:
        self.var = var
        self.ranges = ranges
        # The serial loop variables each variable's value depends on.
        self.deps: dict[Var, frozenset[Var]] = {var: frozenset((var,))}

    def stmt(self, node: Stmt) -> bool:
        if isinstance(node, SeqStmt):
            return all(self.stmt(s) for s in node.stmts)
        if isinstance(node, For):
            return self._loop(node)
        if isinstance(node, IfThenElse):
            return (self._settled(node.cond) and self.stmt(node.then_case)
                    and (node.else_case is None or self.stmt(node.else_case)))
        if isinstance(node, BlockRealize):
            return self._block(node)
        return self._exprs_settled(node)

    def _loop(self, loop: For) -> bool:
        if loop.kind is not ForKind.UNROLLED:
            self.ranges[loop.var] = Interval(0, loop.extent - 1)
            self.deps[loop.var] = frozenset((loop.var,))
            return self.stmt(loop.body)
        self.deps[loop.var] = frozenset()
        for value in range(loop.extent):
            self.ranges[loop.var] = Interval.point(value)
            if not self.stmt(loop.body):
                return False
        return True

    def _block(self, realize: BlockRealize) -> bool:
        block = realize.block
        for iv, binding in zip(block.iter_vars, realize.bindings):
            self.ranges[iv.var] = bound(binding, self.ranges)
            self.deps[iv.var] = self._deps_of(binding)
        if not self._settled(realize.predicate):
            return False
        if block.init is not None and not self.stmt(block.init):
            return False
        return self.stmt(block.body)

    def _deps_of(self, expr: Expr) -> frozenset[Var]:
        found: set[Var] = set()
        for var in vars_of(expr):
            found |= self.deps.get(var, frozenset())
        return frozenset(found)

    def _settled(self, cond: Expr) -> bool:
        """True when every comparison within ``cond`` (a logic of them) that depends on the
        variable is decided: what is left to test at run time does not change along it."""
        if isinstance(cond, Not):
            return self._settled(cond.a)
        if isinstance(cond, BinOp) and cond.op in ("and", "or"):
            return self._settled(cond.a) and self._settled(cond.b)
        return self.var not in self._deps_of(cond) or decide(cond, self.ranges) is not None

    def _exprs_settled(self, node: Stmt) -> bool:
        """Every select condition and index min or max within a statement settled."""
        unsettled: list[object] = []

        def visit(n: object) -> None:
            if isinstance(n, Select) and not self._settled(n.cond) or isinstance(n, BinOp) and n.op in ("min", "max") and _signed_index(n.a) and \
                    self.var in self._deps_of(n) and pick(n, self.ranges) is None:
                unsettled.append(n)

        post_order_visit(node, visit)
        return not unsettled


def _true(predicate: Expr) -> bool:
    return isinstance(predicate, IntImm) and predicate.value == 1
