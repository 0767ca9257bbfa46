"""Well-formedness of a PrimFunc: the rules every front end and transform must respect.

- every variable is used inside the loop or block that binds it, and each Var object is bound
  once (by one loop or one iterator);
- a block is isolated: its body, init and regions use only its own iterators (and loops
  inside it), never a loop variable or iterator from outside;
- every buffer used is a parameter or allocated by an enclosing block;
- a block's bindings are affine in the outer loop variables and stay inside the iterators'
  extents, where the predicate holds when the verifier can read it (below);
- a reduce iterator never indexes a store (the output of a reduction is spatial);
- no access leaves its buffer where the verifier can tell (below).

Bounds of accesses. Every load, store and intrinsic-call region is judged against its buffer's
shape, over the values its variables take: a loop variable its loop's; a block iterator those
of its declared domain that its binding reaches where the block's predicate holds (in
``init``, where the reduce iterators are 0, those are 0). A condition narrows the variables
when it is a conjunction of comparisons of one variable's multiple with a constant (``i < 15``,
``2 * i + 1 >= 4``): a block predicate (``T.where``) and an ``if`` so narrow their block and
branch, an ``else`` when the condition is one comparison. An access is rejected only when
some point of that space provably reaches outside the buffer: its index has an exact range
(:func:`ir.arith.exact_bound`: affine, or ``//`` and ``%`` of affine by constants, no variable
twice) and it lies under no condition the verifier cannot read (``i + j < 16``, ``i * i <
50``); within such a block, a predicate that cannot be read also lets its bindings overrun
the extents (uneven splits guard them with ``io * 4 + ii < 10``). Anything else (a ``min``, a
load in an index) is left to the backends' run-time checks. ``T.if_then_else`` and
``and``/``or`` evaluate both operands, so their conditions guard nothing. The regions a
block declares (``T.reads``/``T.writes``) are summaries, which transforms may relax past the
buffer, and are not judged.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

from ir.arith import Interval, bound, exact_bound, is_affine, linearize
from ir.buffer import Buffer
from ir.errors import KernelError
from ir.expr import COMPARE_OPS, BinOp, BufferLoad, Expr, IntImm, Not, Select, Var
from ir.function import PrimFunc
from ir.node import LocT, Node
from ir.stmt import (Block, BlockRealize, BufferRegion, BufferStore, For, IfThenElse, IntrinsicCall,
                     IterKind, SeqStmt, Stmt)
from ir.visitor import child_fields, vars_of

# A comparison, negated (for the else branch of an if).
_NEGATED = {"lt": "ge", "le": "gt", "gt": "le", "ge": "lt", "eq": "ne", "ne": "eq"}


def verify(func: PrimFunc) -> None:
    """Raise KernelError, located at the offending node, unless ``func`` is well formed."""
    _Verifier(func).run()


@dataclass
class _Scope:
    """Variables bound so far, innermost last; ``boundary`` is where the current block starts."""

    bound: list[tuple[Var, str]] = field(default_factory=list)
    boundary: int = 0


class _Verifier:
    def __init__(self, func: PrimFunc) -> None:
        self.func = func
        self.scope = _Scope()
        self.seen_vars: set[int] = set()
        self.buffers: list[Buffer] = list(func.params)
        self.seen_buffers: set[int] = {id(b) for b in func.params}
        self.ranges: dict[Var, Interval] = {}
        self.blocks: list[Block] = []
        # How many enclosing conditions the bounds check cannot read; accesses under one are
        # not judged.
        self.opaque_guards = 0

    def run(self) -> None:
        self.stmt(self.func.body, self.func.loc)

    def fail(self, message: str, loc: LocT) -> KernelError:
        return KernelError(message, loc if loc is not None else self.func.loc)

    # -- statements ------------------------------------------------------------------------

    def stmt(self, stmt: Stmt, loc: LocT) -> None:
        loc = _use_loc(stmt, loc)
        if isinstance(stmt, BufferStore):
            self.store(stmt, loc)
        elif isinstance(stmt, For):
            self.bind(stmt.var, "loop variable", loc)
            self.ranges[stmt.var] = Interval(0, stmt.extent - 1)
            self.stmt(stmt.body, loc)
            self.scope.bound.pop()
        elif isinstance(stmt, SeqStmt):
            for item in stmt.stmts:
                self.stmt(item, loc)
        elif isinstance(stmt, IfThenElse):
            self.expr(stmt.cond, loc)
            with self.guarded(stmt.cond, negate=False):
                self.stmt(stmt.then_case, loc)
            if stmt.else_case is not None:
                with self.guarded(stmt.cond, negate=True):
                    self.stmt(stmt.else_case, loc)
        elif isinstance(stmt, IntrinsicCall):
            self.intrinsic_call(stmt, loc)
        elif isinstance(stmt, BlockRealize):
            self.realize(stmt, loc)
        else:
            raise self.fail(f"function {self.func.name}: unexpected statement "
                            f"{type(stmt).__name__} (a block must be placed by a BlockRealize)",
                            loc)

    def store(self, stmt: BufferStore, loc: LocT) -> None:
        self.use_buffer(stmt.buffer, loc)
        for index in stmt.indices:
            self.expr(index, loc)
        self.expr(stmt.value, loc)
        if self.blocks:
            block = self.blocks[-1]
            reduce_vars = {iv.var for iv in block.iter_vars if iv.kind is IterKind.REDUCE}
            for index in stmt.indices:
                used = [v for v in vars_of(index) if v in reduce_vars]
                if used:
                    raise self.fail(f"block {block.name!r}: the store to {stmt.buffer.name} "
                                    "requires spatial iterators in its indices, got reduce "
                                    f"iterator {used[0].name}; an output cannot be indexed by a "
                                    "reduction (declare the iterator spatial if it is not one)",
                                    _use_loc(index, loc))
        self.check_access(stmt.buffer, stmt.indices, loc)

    def intrinsic_call(self, call: IntrinsicCall, loc: LocT) -> None:
        for arg in call.args:
            if isinstance(arg, BufferRegion):
                self.region(arg, loc)
                self.check_region(arg, arg.loc or loc)
            else:
                self.expr(arg, loc)

    def realize(self, realize: BlockRealize, loc: LocT) -> None:
        block = realize.block
        domains, readable = self.instances(realize, loc)
        self.expr(realize.predicate, loc)
        outer_scope, outer_buffers = self.scope, len(self.buffers)
        self.scope = _Scope(list(outer_scope.bound), len(outer_scope.bound))
        for iter_var in block.iter_vars:
            self.bind(iter_var.var, f"iterator of block {block.name!r}", iter_var.loc or loc)
        self.ranges.update(domains)
        for buffer in block.alloc_buffers:
            if id(buffer) in self.seen_buffers:
                raise self.fail(f"block {block.name!r}: buffer {buffer.name} requires one "
                                "declaration, got a second one", buffer.loc or block.loc or loc)
            self.seen_buffers.add(id(buffer))
            self.buffers.append(buffer)
        self.blocks.append(block)
        block_loc = block.loc or loc
        # A predicate the bounds check cannot read leaves the iterators' values unknown.
        self.opaque_guards += not readable
        # The body first: its statements carry locations, and declared regions are most often
        # inferred from it, so a bad index is reported where it is written.
        if block.init is not None:
            self.init(block, block_loc)
        self.stmt(block.body, block_loc)
        self.opaque_guards -= not readable
        for region in (*block.reads, *block.writes):
            self.region(region, block_loc)
        self.blocks.pop()
        del self.buffers[outer_buffers:]
        self.scope = outer_scope

    def instances(self, realize: BlockRealize, loc: LocT) -> tuple[dict[Var, Interval], bool]:
        """Check the bindings; the ranges the iterators take where the predicate holds, and
        whether the bounds check can read the predicate (else they are the domains).

        Each iterator stays in its domain, and within its binding's range over the loops as the
        predicate narrows them (``T.where(i < 7)`` with ``vi = i`` gives ``vi`` in [0, 6]).
        """
        block = realize.block
        narrowed = _narrowing(realize.predicate, False, self.ranges)
        if narrowed is not None and _empty(narrowed):
            narrowed = None  # an instance that never runs accesses nothing
        outer = {**self.ranges, **(narrowed or {})}
        domains: dict[Var, Interval] = {}
        for binding, iter_var in zip(realize.bindings, block.iter_vars):
            where = _use_loc(binding, iter_var.loc or loc)
            self.expr(binding, where)
            self.check_binding(block, iter_var.var.name, iter_var.extent, binding,
                               realize.predicate, narrowed, where)
            domain = Interval(0, iter_var.extent - 1)
            span = bound(binding, outer) if all(v in outer for v in vars_of(binding)) else domain
            low = domain.lo if span.lo is None else max(span.lo, domain.lo)
            high = domain.hi if span.hi is None else min(span.hi, domain.hi)
            if low > high:
                # The binding never lands in the domain: only an unread predicate can make
                # that well formed, and then nothing is judged.
                narrowed, low, high = None, domain.lo, domain.hi
            domains[iter_var.var] = Interval(low, high)
        return domains, narrowed is not None
    def init(self, block: Block, loc: LocT) -> None:
        """A block's init, run where every reduce iterator is 0."""
        reduce_vars = [iv.var for iv in block.iter_vars if iv.kind is IterKind.REDUCE]
        saved = {var: self.ranges[var] for var in reduce_vars}
        self.ranges.update({var: Interval(0, 0) for var in reduce_vars})
        self.stmt(block.init, loc)
        self.ranges.update(saved)

    def check_binding(self, block: Block, name: str, extent: int, binding: Expr,
                      predicate: Expr, narrowed: dict[Var, Interval] | None, loc: LocT) -> None:
        """``narrowed``: the loop ranges where ``predicate`` holds, None when unknown."""
        if not is_affine(binding):
            raise self.fail(f"block {block.name!r}: the binding of iterator {name} requires an "
                            f"affine expression of loop variables (such as 4 * i + j), got "
                            f"{binding}", loc)
        if any(v not in self.ranges for v in vars_of(binding)):
            return
        if isinstance(predicate, IntImm) and predicate.value == 1:
            span: Interval | None = bound(binding, self.ranges)
            where = ""
        elif narrowed is not None:
            # Where the predicate holds, the binding must stay in the extent; a predicate the
            # check cannot read may guard bindings that overrun it (uneven splits).
            span = exact_bound(binding, {**self.ranges, **narrowed})
            where = " where the predicate holds"
        else:
            return
        if span is not None and span.lo is not None and span.hi is not None and (
                span.lo < 0 or span.hi >= extent):
            raise self.fail(f"block {block.name!r}: iterator {name} requires its binding to "
                            f"stay in [0, {extent - 1}], got {binding} ranging over "
                            f"[{span.lo}, {span.hi}]{where}; fix the extent or guard it with "
                            "T.where", loc)

    # -- bounds ----------------------------------------------------------------------------

    @contextmanager
    def guarded(self, cond: Expr, negate: bool) -> Iterator[None]:
        """Narrow the variables ``cond`` (or its negation) bounds while checking a branch."""
        narrowed = _narrowing(cond, negate, self.ranges)
        # A branch that never runs holds no access to judge either.
        opaque = narrowed is None or _empty(narrowed)
        saved = {var: self.ranges[var] for var in narrowed or {}}
        self.opaque_guards += opaque
        if not opaque:
            self.ranges.update(narrowed or {})
        try:
            yield
        finally:
            self.opaque_guards -= opaque
            self.ranges.update(saved)

    def check_access(self, buffer: Buffer, indices: tuple[Expr, ...], loc: LocT,
                     fix: str = "fix the extent, or guard the access with an if") -> None:
        """Reject an access whose index provably leaves ``buffer`` at some point; ``fix`` says
        how to mend it."""
        if self.opaque_guards:
            return
        for dim, (index, extent) in enumerate(zip(indices, buffer.shape)):
            span = exact_bound(index, self.ranges)
            if span is None or (span.lo >= 0 and span.hi < extent):
                continue
            access = f"{buffer.name}[{', '.join(str(i) for i in indices)}]"
            raise self.fail(f"{access}: index {dim} ranges over [{span.lo}, {span.hi}] but "
                            f"{buffer.name} has extent {extent} in dimension {dim}; keep it in "
                            f"[0, {extent - 1}] ({fix})", loc)

    def check_region(self, region: BufferRegion, loc: LocT) -> None:
        """Reject an intrinsic's operand region that provably leaves its buffer."""
        if self.opaque_guards:
            return
        for dim, (rng, extent) in enumerate(zip(region.ranges, region.buffer.shape)):
            start = exact_bound(rng.start, self.ranges)
            if start is None or not isinstance(rng.extent, IntImm):
                continue
            last = start.hi + rng.extent.value - 1
            if start.lo >= 0 and last < extent:
                continue
            raise self.fail(f"{region}: dimension {dim} covers [{start.lo}, {last}] but "
                            f"{region.buffer.name} has extent {extent} in dimension {dim}; "
                            f"keep it in [0, {extent - 1}]", loc)

    # -- names -----------------------------------------------------------------------------

    def bind(self, var: Var, role: str, loc: LocT) -> None:
        if id(var) in self.seen_vars:
            raise self.fail(f"function {self.func.name}: variable {var.name} requires one "
                            f"binding, got a second one as {role}; give each loop and "
                            "iterator its own Var", loc)
        self.seen_vars.add(id(var))
        self.scope.bound.append((var, role))

    def use_var(self, var: Var, loc: LocT) -> None:
        bound = self.scope.bound
        for position in range(len(bound) - 1, -1, -1):
            if bound[position][0] is not var:
                continue
            if position >= self.scope.boundary:
                return
            block = self.blocks[-1].name if self.blocks else "root"
            raise self.fail(f"block {block!r} requires only its own iterators, got "
                            f"{var.name}, a {bound[position][1]} from outside the block; "
                            f"bind it to an iterator (T.axis.spatial(extent, {var.name})) "
                            "and use that", loc)
        raise self.fail(f"function {self.func.name}: variable {var.name} is used outside the "
                        "loop or block that defines it", loc)

    def use_buffer(self, buffer: Buffer, loc: LocT) -> None:
        if any(buffer is known for known in self.buffers):
            return
        raise self.fail(f"function {self.func.name}: buffer {buffer.name} requires a "
                        "declaration, but it is neither a parameter nor allocated by an "
                        "enclosing block; add a parameter or use T.alloc_buffer", loc)

    def region(self, region: BufferRegion, loc: LocT) -> None:
        loc = region.loc or loc
        self.use_buffer(region.buffer, loc)
        for rng in region.ranges:
            self.expr(rng.start, rng.loc or loc)
            self.expr(rng.extent, rng.loc or loc)

    def expr(self, expr: Node, loc: LocT) -> None:
        """Check the names an expression uses, then the bounds of its loads.

        The walk keeps its own stack: an expression may be thousands of operators long.
        """
        loads: list[tuple[BufferLoad, LocT, bool]] = []
        # Each node with where it is, and whether it is a branch of a select.
        stack: list[tuple[Node, LocT, bool]] = [(expr, loc, False)]
        while stack:
            node, where, selected = stack.pop()
            if isinstance(node, Var):
                self.use_var(node, where)
                continue
            where = _use_loc(node, where)
            if isinstance(node, BufferLoad):
                self.use_buffer(node.buffer, where)
                loads.append((node, where, selected))
            branches = (node.true_value, node.false_value) if isinstance(node, Select) else ()
            stack.extend((child, where, selected or any(child is b for b in branches))
                         for child in reversed(_children(node)))
        for load, where, selected in loads:
            self.check_access(load.buffer, load.indices, where,
                              "T.if_then_else evaluates both branches, so guard the access with "
                              "an if statement" if selected else
                              "fix the extent, or guard the access with an if")


def _narrowing(cond: Expr, negate: bool, ranges: dict[Var, Interval]
               ) -> dict[Var, Interval] | None:
    """The ranges of the variables that ``cond`` (or ``not cond``) bounds, intersected with
    ``ranges``; None when the condition says more than such bounds can hold."""
    if isinstance(cond, Not):
        cond, negate = cond.a, not negate
    # The negation of a conjunction is a disjunction, which no box of ranges holds.
    terms = [cond] if negate else _conjuncts(cond)
    narrowed: dict[Var, Interval] = {}
    for term in terms:
        if isinstance(term, IntImm) and term.value == 1 and not negate:
            continue  # True narrows nothing
        if not (isinstance(term, BinOp) and term.op in COMPARE_OPS and term.a.dtype.is_int):
            return None
        op = _NEGATED[term.op] if negate else term.op
        form = linearize(term.a) - linearize(term.b)
        if op == "ne" or len(form.terms) != 1:
            return None
        var, coeff = form.terms[0]
        if not isinstance(var, Var) or var not in ranges:
            return None
        span = narrowed.get(var, ranges[var])
        for low, high in _solve(op, coeff, form.const):
            span = Interval(max(span.lo, low) if low is not None else span.lo,
                            min(span.hi, high) if high is not None else span.hi)
        narrowed[var] = span
    return narrowed


def _solve(op: str, coeff: int, const: int) -> list[tuple[int | None, int | None]]:
    """Bounds (low, high; None for none) on integer ``v`` from ``coeff * v + const OP 0``."""
    if op == "lt":
        return _solve("le", coeff, const + 1)
    if op == "gt":
        return _solve("ge", coeff, const - 1)
    if op == "eq":
        return _solve("le", coeff, const) + _solve("ge", coeff, const)
    if op == "ge":
        return _solve("le", -coeff, -const)
    if coeff > 0:
        return [(None, -const // coeff)]  # v <= floor(-const / coeff)
    return [(-(-const // -coeff), None)]  # v >= ceil(const / -coeff)


def _empty(ranges: dict[Var, Interval]) -> bool:
    """True when some variable has no value left."""
    return any(span.lo is not None and span.hi is not None and span.lo > span.hi
               for span in ranges.values())


def _conjuncts(cond: Expr) -> list[Expr]:
    """The terms of ``a and b and ...``, in order."""
    terms: list[Expr] = []
    pending = [cond]
    while pending:
        term = pending.pop()
        if isinstance(term, BinOp) and term.op == "and":
            pending.extend((term.b, term.a))
        else:
            terms.append(term)
    return terms


def _children(node: Node) -> list[Node]:
    """The child nodes of an expression or region, buffers left out, in field order."""
    found: list[Node] = []
    for name in child_fields(type(node)):
        child = getattr(node, name)
        for item in child if isinstance(child, tuple) else (child,):
            if isinstance(item, Node) and not isinstance(item, Buffer):
                found.append(item)
    return found


def _use_loc(node: Node, loc: LocT) -> LocT:
    """Where ``node`` is used: its own span, except for a Var, whose span is its definition."""
    if isinstance(node, Var):
        return loc
    return getattr(node, "loc", None) or loc

