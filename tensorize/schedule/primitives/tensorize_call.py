"""tensorize: replace a blockized tile by one call of a hardware intrinsic.

The tile is an outer block (as ``blockize`` makes it) whose body is loops around one inner
block. It is the intrinsic when it is the intrinsic's description (``desc_func``) up to
renaming: the same loop extents in order; each loop driving exactly one inner iterator, of
the intrinsic iterator's kind; the same store, operator for operator and dtype for dtype,
with each kernel buffer standing for one operand; and each operand's accesses landing on a
kernel region of exactly the operand's shape, indexed as the intrinsic indexes the operand.
The last point is checked on the call itself: lowering the call (``intrinsics.lower_call``)
must give back the tile's accesses.

The init. An accumulating intrinsic adds into its accumulator and cannot run an init, so the
inner block must have none: the outer block keeps its own init (``blockize`` moves a
reduction's init there when a reduce loop stays outside the tile), which the executor and
backends run as ordinary code before the first call. A resetting intrinsic zeroes its
accumulator on every call, so it replaces a tile whose inner block zeroes its output in an
init and reduces over the tile's loops only.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, NoReturn

from intrinsics import Intrinsic, Operand, Registry, lower_call
from ir import (TRUE, BinOp, Block, BlockRealize, Buffer, BufferLoad, BufferRegion, BufferStore,
                Cast, Expr, FloatImm, For, IntImm, IntrinsicCall, IRError, IterKind,
                IntrinsicSpecError, Node, PrimFunc, Range, ScheduleError, SeqStmt, Stmt, Var,
                substitute)
from ir.arith import Interval, LinearForm, bound_form, equal, linearize, simplify, to_expr
from ir.regions import infer_block_regions, region_union
from ir.visitor import child_fields
from tensorize.schedule import tree
from tensorize.schedule.check import arg_check, check, fail, get_block
from tensorize.schedule.handles import BlockRV, LoopRV
from tensorize.schedule.primitives.blockize import blockize

__all__ = ["tensorize"]

_PRIMITIVE = "tensorize"

ANNOTATION = "tensorized"


def tensorize(func: PrimFunc, block_or_loop: BlockRV | LoopRV, intrinsic: str | Intrinsic, *,
              registry: Registry | None = None) -> tuple[PrimFunc, None]:
    """Replace the body of a blockized tile by one call of ``intrinsic``.

    ``block_or_loop`` is the outer block of a tile, or a loop, which is blockized first.
    ``intrinsic`` is an :class:`~intrinsics.Intrinsic`, or the name of one in ``registry``
    (a Schedule passes the registry it was made with; its trace records the name either
    way, and replays with that registry).

    Preconditions (see the module documentation): the tile computes the intrinsic's
    description up to renaming, on regions of the operands' shapes; an accumulating intrinsic
    needs the inner block without init, a resetting one needs it with an init that zeroes the
    output and every reduction inside the tile.

    The outer block's body becomes ``IntrinsicCall(name, regions)`` with the kernel regions
    in the intrinsic's operand order; its reads and writes are those regions (plus what its
    init writes), and it is annotated ``("tensorized", name)``. Returns the new function.

    >>> from ir import script as T
    >>> from intrinsics import default_registry
    >>> from tensorize.schedule import Schedule
    >>> @T.prim_func
    ... def add(D: T.Buffer((32, 16), "int32"), S: T.Buffer((32, 16), "int32")):
    ...     for i, j in T.grid(32, 16):
    ...         with T.block("D"):
    ...             vi, vj = T.axis.remap("SS", [i, j])
    ...             D[vi, vj] = D[vi, vj] + S[vi, vj]
    >>> sch = Schedule(add, registry=default_registry())
    >>> i, j = sch.get_loops(sch.get_block("D"))
    >>> i_0, i_1 = sch.split(i, [None, 16])
    >>> sch.tensorize(i_1, "npu_vec_add")
    >>> print(sch.get(sch.get_block("D_o")).block.body)
    T.call_intrinsic("npu_vec_add", D[vi_o * 16:vi_o * 16 + 16, 0:16],
                     S[vi_o * 16:vi_o * 16 + 16, 0:16])
    """
    intrin = _resolve(intrinsic, registry)
    if isinstance(block_or_loop, LoopRV):
        func, handle = blockize(func, block_or_loop)
    else:
        arg_check(isinstance(block_or_loop, BlockRV), _PRIMITIVE, "block_or_loop",
                  "a block or loop handle", block_or_loop)
        handle = block_or_loop
    outer = get_block(func, handle, _PRIMITIVE).node
    loops, inner = _tile(outer.block)
    args = _match_commuted(outer.block, loops, inner, intrin)
    block = outer.block
    call = IntrinsicCall(intrin.name, args, inner.block.loc)
    reads, writes = _call_regions(intrin, args, block.init)
    annotations = tuple(a for a in block.annotations if a[0] != ANNOTATION)
    new_block = Block(block.name, block.iter_vars, reads, writes, call, block.init,
                      block.alloc_buffers, annotations + ((ANNOTATION, intrin.name),), block.loc)
    realize = BlockRealize(outer.bindings, new_block, outer.predicate, outer.loc)
    return tree.replace_stmt(func, outer, realize), None


def _match_commuted(outer: Block, loops: list[For], inner: BlockRealize, intrin: Intrinsic
                    ) -> tuple[BufferRegion | Expr, ...]:
    """The call's arguments for the tile written as it is, or with the operands of some
    ``+``/``*`` swapped (``B * A`` computes what ``A * B`` does, but binds the buffers to the
    other operands). The refusal reported is the one for the tile as written. Swapping never
    changes which operators the store holds, so a tile whose operators are not the
    intrinsic's is tried as written only (a block tried against every vector instruction
    would otherwise try up to 64 orders against each)."""
    if tree.operators(inner.block.body) != tree.operators(intrin.semantics):
        return _Tile(outer, loops, inner, intrin).match()
    first: ScheduleError | None = None
    for body in _commutations(inner.block.body):
        block = dataclasses.replace(inner.block, body=body)
        variant = dataclasses.replace(inner, block=block)
        try:
            return _Tile(outer, loops, variant, intrin).match()
        except ScheduleError as err:
            first = first or err
    assert first is not None
    raise first


_COMMUTATIVE = ("add", "mul", "min", "max")
_MAX_COMMUTATIONS = 64


def _commutations(stmt: Stmt) -> list[Stmt]:
    """``stmt`` with every combination of swapped commutative operands in its stored value
    (the original first), at most :data:`_MAX_COMMUTATIONS` of them."""
    if not isinstance(stmt, BufferStore):
        return [stmt]
    values = _variants(stmt.value)[:_MAX_COMMUTATIONS]
    return [dataclasses.replace(stmt, value=v) for v in values]


def _variants(expr: Expr) -> list[Expr]:
    if isinstance(expr, BinOp):
        pairs = [(a, b) for a in _variants(expr.a) for b in _variants(expr.b)]
        out = [BinOp(expr.op, a, b, expr.loc) for a, b in pairs]
        if expr.op in _COMMUTATIVE:
            out += [BinOp(expr.op, b, a, expr.loc) for a, b in pairs]
        return out[:_MAX_COMMUTATIONS]
    if isinstance(expr, Cast):
        return [Cast(expr.type, v, expr.loc) for v in _variants(expr.value)]
    return [expr]


def _resolve(intrinsic: str | Intrinsic, registry: Registry | None) -> Intrinsic:
    if isinstance(intrinsic, Intrinsic):
        return intrinsic
    arg_check(isinstance(intrinsic, str), _PRIMITIVE, "intrinsic",
              "an Intrinsic or the name of one", intrinsic)
    if registry is None:
        fail(_PRIMITIVE, f"argument 'intrinsic': expected an Intrinsic, or a name with the "
                         f"registry that declares it (Schedule(func, registry=...)), got "
                         f"{intrinsic!r}")
    try:
        return registry.get(intrinsic)
    except IntrinsicSpecError as err:
        reason = err.message
    fail(_PRIMITIVE, f"argument 'intrinsic': {reason}")


def _tile(block: Block) -> tuple[list[For], BlockRealize]:
    """The loops of a blockized tile and the block at their bottom."""
    loops: list[For] = []
    body = block.body
    while isinstance(body, For):
        loops.append(body)
        body = body.body
    if not isinstance(body, BlockRealize):
        fail(_PRIMITIVE, f"block {block.name!r} requires a body of loops around one block "
                         f"(blockize a loop first), got a {type(body).__name__}", block)
    return loops, body


def _call_regions(intrin: Intrinsic, args: tuple[BufferRegion | Expr, ...], init: Stmt | None
                  ) -> tuple[tuple[BufferRegion, ...], tuple[BufferRegion, ...]]:
    """What the tensorized block reads and writes: the operands' regions by role, and the
    regions its init writes."""
    reads = [a for o, a in zip(intrin.operands, args)
             if isinstance(a, BufferRegion) and o.role in ("input", "accumulator")]
    writes = [a for o, a in zip(intrin.operands, args)
              if isinstance(a, BufferRegion) and o.role in ("output", "accumulator")]
    if init is not None:
        _, init_writes = infer_block_regions(Block("init", (), (), (), init))
        for region in init_writes:
            at = next((n for n, w in enumerate(writes) if w.buffer is region.buffer), None)
            if at is None:
                writes.append(region)
            else:
                writes[at] = region_union(writes[at], region)
    return tuple(reads), tuple(writes)


@dataclass
class _Access:
    """One access of an operand in the tile: ``reads`` or ``writes``, and the kernel's
    indices."""

    verb: str
    indices: tuple[Expr, ...]


@dataclass
class _Binding:
    """An operand's kernel counterpart: a buffer and its accesses, or a scalar expression."""

    operand: Operand
    buffer: Buffer | None = None
    accesses: list[_Access] = field(default_factory=list)
    value: Expr | None = None


class _Tile:
    """Matches one tile against one intrinsic; every refusal names the block and the
    mismatch."""

    def __init__(self, outer: Block, loops: list[For], inner: BlockRealize,
                 intrin: Intrinsic) -> None:
        self.outer = outer
        self.loops = loops
        self.inner = inner
        self.block = inner.block
        self.intrin = intrin
        desc = intrin.desc_func()
        self.desc_loops, desc_realize = _tile(desc.root)
        self.desc = desc_realize.block
        self.who = f"block {self.block.name!r} (in {outer.name!r})"
        self.by_buffer = {o.buffer: _Binding(o) for o in intrin.operands}
        self.ranges: dict[Var, Interval] = {iv.var: Interval(0, iv.extent - 1)
                                            for iv in outer.iter_vars}
        self.ranges.update({node.var: Interval(0, node.extent - 1) for node in loops})
        # Each inner iterator in the outer iterators and the tile's loops.
        self.values = {iv.var: b for iv, b in zip(self.block.iter_vars, inner.bindings)}
        self.loop_of: dict[Var, int | None] = {}

    def fail(self, reason: str) -> NoReturn:
        fail(_PRIMITIVE, f"{self.who} does not match intrinsic {self.intrin.name}: {reason}",
             self.block)

    def match(self) -> tuple[BufferRegion | Expr, ...]:
        """The call's arguments, or a ScheduleError naming the first mismatch."""
        self.check_shape()
        store = self.block.body
        if not isinstance(store, BufferStore):
            self.fail(f"it requires one store as the block body, got a {type(store).__name__}")
        check(not self.block.alloc_buffers, _PRIMITIVE,
              f"{self.who} allocates {', '.join(b.name for b in self.block.alloc_buffers)}; "
              "tensorize requires a tile that allocates nothing", self.block)
        self.map_iterators()
        self.store(store, self.desc.body)
        args = self.arguments()
        self.check_lowered(args, store)
        self.check_init(store)
        return args

    # -- shape and iterators ------------------------------------------------------------------

    def check_shape(self) -> None:
        got = [node.extent for node in self.loops]
        want = [node.extent for node in self.desc_loops]
        if got != want:
            names = ", ".join(iv.var.name for iv in self.intrin.iter_vars)
            loops = ", ".join(node.var.name for node in self.loops) or "none"
            self.fail(f"wrong shape: its tile loops ({loops}) have extents {got}; the "
                      f"intrinsic's iterators ({names}) have extents {want}")

    def map_iterators(self) -> None:
        """Bind each inner iterator to the tile loop it runs along (or none), kind for kind."""
        position = {node.var: t for t, node in enumerate(self.loops)}
        driven: dict[int, str] = {}
        for iv, binding in zip(self.block.iter_vars, self.inner.bindings):
            inner = [(a, c) for a, c in linearize(binding).terms
                     if any(v in position for v in _vars_in(a))]
            if not inner:
                self.loop_of[iv.var] = None
                continue
            atom, coeff = inner[0]
            if len(inner) > 1 or coeff != 1 or not isinstance(atom, Var) or \
                    atom not in position:
                self.fail(f"iterator {iv.var.name} is bound to {binding}, whose part inside "
                          "the tile is not one tile loop")
            t = position[atom]
            if t in driven:
                self.fail(f"loop {self.loops[t].var.name} drives both iterators {driven[t]} "
                          f"and {iv.var.name}")
            driven[t] = iv.var.name
            self.loop_of[iv.var] = t
            want = self.desc.iter_vars[t]
            if iv.kind is not want.kind:
                self.fail(f"iterator kind mismatch: iterator {iv.var.name} (along loop "
                          f"{self.loops[t].var.name}) is {iv.kind.value}; the intrinsic's "
                          f"iterator {want.var.name} is {want.kind.value}")
        for t, node in enumerate(self.loops):
            # A unit loop runs along an intrinsic iterator of extent 1 (FMLAL's one k
            # value), which is 0 whatever binds it: the block's iterator may stay outside.
            if t not in driven and node.extent != 1:
                self.fail(f"loop {node.var.name} drives no iterator of the block")
        if simplify(self.inner.predicate, self.ranges) != TRUE:
            self.fail(f"it runs under the predicate {self.inner.predicate}, but the intrinsic "
                      "always computes a whole tile (pad the kernel to the tile first)")

    # -- the computation ----------------------------------------------------------------------

    def store(self, kernel: BufferStore, desc: BufferStore) -> None:
        binding = self.operand(kernel.buffer, desc.buffer, "writes")
        binding.accesses.append(_Access("writes", kernel.indices))
        self.expr(kernel.value, desc.value)

    def operand(self, buffer: Buffer, desc_buffer: Buffer, verb: str) -> _Binding:
        """The operand ``desc_buffer`` stands for, bound to the kernel's ``buffer``."""
        binding = self.by_buffer[desc_buffer]
        name = binding.operand.name
        if buffer.dtype != desc_buffer.dtype:
            self.fail(f"dtype mismatch: it {verb} {buffer.name} of {buffer.dtype}; the "
                      f"intrinsic's operand {name} is {desc_buffer.dtype}")
        if binding.buffer is None:
            other = next((b.operand.name for b in self.by_buffer.values()
                          if b.buffer is buffer), None)
            if other is not None:
                self.fail(f"it uses {buffer.name} as both operands {other} and {name}")
            binding.buffer = buffer
        elif binding.buffer is not buffer:
            self.fail(f"operand mismatch: it uses both {binding.buffer.name} and "
                      f"{buffer.name} where the intrinsic uses operand {name}")
        return binding

    def expr(self, kernel: Expr, desc: Expr) -> None:
        if isinstance(desc, BufferLoad) and self.by_buffer[desc.buffer].operand.is_scalar:
            self.scalar(kernel, desc)
            return
        different_op = isinstance(kernel, BinOp) and isinstance(desc, BinOp) and \
            kernel.op != desc.op
        if type(kernel) is not type(desc) or different_op:
            self.fail(f"operator mismatch: it computes {_what(kernel)} ({kernel}) where the "
                      f"intrinsic computes {_what(desc)} ({desc})")
        if isinstance(kernel, (Cast, IntImm, FloatImm)) and kernel.dtype != desc.dtype:
            self.fail(f"dtype mismatch: it computes {_what(kernel)} of {kernel.dtype} where "
                      f"the intrinsic computes {_what(desc)} of {desc.dtype}")
        if isinstance(kernel, BufferLoad) and isinstance(desc, BufferLoad):
            binding = self.operand(kernel.buffer, desc.buffer, "reads")
            binding.accesses.append(_Access("reads", kernel.indices))
        elif isinstance(kernel, Var) and isinstance(desc, Var):
            self.variable(kernel, desc)
        else:
            self.children(kernel, desc)

    def children(self, kernel: Node, desc: Node) -> None:
        for name in child_fields(type(kernel)):
            mine, theirs = getattr(kernel, name), getattr(desc, name)
            if isinstance(mine, Expr):
                self.expr(mine, theirs)
            elif isinstance(mine, tuple) and len(mine) == len(theirs) and \
                    all(isinstance(x, Expr) for x in mine):
                for x, y in zip(mine, theirs):
                    self.expr(x, y)
            elif mine != theirs:
                self.fail(f"operator mismatch: it computes {kernel} where the intrinsic "
                          f"computes {desc}")

    def variable(self, kernel: Var, desc: Var) -> None:
        """An iterator used as a value must be the intrinsic's, with no outer part."""
        t = self.loop_of.get(kernel)
        same = t is not None and self.desc.iter_vars[t].var is desc and \
            equal(self.values[kernel], self.loops[t].var, self.ranges)
        if not same:
            self.fail(f"operator mismatch: it uses {kernel.name} as a value where the "
                      f"intrinsic uses {desc}")

    def scalar(self, kernel: Expr, desc: BufferLoad) -> None:
        """A scalar operand takes the kernel's expression, which must not vary in the tile."""
        binding = self.by_buffer[desc.buffer]
        name = binding.operand.name
        if kernel.dtype != desc.dtype:
            self.fail(f"dtype mismatch: it computes {kernel} of {kernel.dtype} for scalar "
                      f"operand {name} of {desc.dtype}")
        value = simplify(substitute(kernel, self.values))
        tile_loops = {node.var for node in self.loops}
        if any(v in tile_loops for v in _vars_in(value)):
            self.fail(f"scalar operand {name} requires a value fixed over the tile, got "
                      f"{kernel}, which varies with the tile loops")
        if binding.value is not None and binding.value != value:
            self.fail(f"scalar operand {name} takes two values, {binding.value} and {value}")
        binding.value = value

    # -- regions ------------------------------------------------------------------------------

    def arguments(self) -> tuple[BufferRegion | Expr, ...]:
        """One argument per operand: the kernel region (or scalar value) it binds."""
        args: list[BufferRegion | Expr] = []
        for binding in self.by_buffer.values():
            operand = binding.operand
            if binding.value is not None:
                args.append(binding.value)
                continue
            if binding.buffer is None:
                self.fail(f"the intrinsic's operand {operand.name} has no counterpart in it")
            args.append(self.region(binding, binding.buffer))
        return tuple(args)

    def region(self, binding: _Binding, buffer: Buffer) -> BufferRegion:
        """The region of the operand's accesses: per dimension, the part over the tile
        loops spans the extent; the rest is the start, the least of the accesses' where they
        differ by constants (an operand read at rows 0, 1 and 2 spans the three)."""
        access = binding.accesses[0]
        tile_loops = {node.var: Interval(0, node.extent - 1) for node in self.loops}
        ranges, extents = [], []
        for dim, index in enumerate(access.indices):
            spans = [self._span(a.indices[dim], tile_loops) for a in binding.accesses]
            start, extent = spans[0]
            offsets = [(s - start, e) for s, e in spans]
            if all(o.is_const for o, _ in offsets):
                low = min(o.const for o, _ in offsets)
                extent = max(o.const + e for o, e in offsets) - low
                start = start + LinearForm.of_const(low)
            ranges.append(Range(to_expr(start, index.dtype), IntImm(extent, index.dtype)))
            extents.append(extent)
        region = BufferRegion(buffer, tuple(ranges))
        operand = binding.operand
        if [e for e in extents if e != 1] != [e for e in operand.shape if e != 1]:
            self.fail(f"operand region mismatch: it {access.verb} {_region_text(region)}, "
                      f"extents {extents}; the intrinsic's operand {operand.name} is "
                      f"{list(operand.shape)}")
        return region

    def _span(self, index: Expr, tile_loops: dict[Var, Interval]) -> tuple[LinearForm, int]:
        """One access index's start (a linear form) and extent over the tile loops."""
        form = linearize(simplify(substitute(index, self.values), self.ranges))
        inside = LinearForm(tuple((a, c) for a, c in form.terms
                                  if any(v in tile_loops for v in _vars_in(a))), 0)
        span = bound_form(inside, tile_loops)
        extent = span.hi - span.lo + 1 if span.is_bounded else 0
        return form - inside + LinearForm.of_const(span.lo or 0), extent

    def check_lowered(self, args: tuple[BufferRegion | Expr, ...], store: BufferStore) -> None:
        """Lowering the call must give back the tile's own accesses, access for access."""
        call = IntrinsicCall(self.intrin.name, args)
        try:
            lowered = lower_call(call, self.intrin)
        except IRError as err:
            self.fail(f"operand region mismatch: {err.message}")
        nest = lowered.stmts[-1] if isinstance(lowered, SeqStmt) else lowered
        loop_vars = {}
        while isinstance(nest, For):
            loop_vars[nest.var] = self.loops[len(loop_vars)].var
            nest = nest.body
        expected = substitute(nest, loop_vars)
        actual = substitute(store, self.values)
        mismatch = _first_difference(actual, expected, self.ranges)
        if mismatch is not None:
            mine, theirs = mismatch
            self.fail(f"operand region mismatch: it accesses {mine} where the intrinsic, on "
                      f"the regions {', '.join(_arg_text(a) for a in args)}, accesses "
                      f"{theirs}")

    # -- init ---------------------------------------------------------------------------------

    def check_init(self, store: BufferStore) -> None:
        init = self.block.init
        if not self.intrin.resets:
            if init is not None:
                self.fail(f"the intrinsic accumulates into {store.buffer.name}, but the block "
                          "still has its init (blockize keeps it there when no reduce loop "
                          "stays outside the tile, or when moving it out could change "
                          "results); split a reduce loop so that part of it stays outside, "
                          "or use an intrinsic that resets its accumulator")
            return
        if init is None:
            self.fail(f"the intrinsic resets {store.buffer.name} on every call, but the block "
                      "accumulates into it across calls (it has no init of its own); use an "
                      "accumulating intrinsic")
        zero = isinstance(init, BufferStore) and init.buffer is store.buffer and \
            isinstance(init.value, (IntImm, FloatImm)) and init.value.value == 0 and \
            all(equal(a, b, self.ranges) for a, b in zip(init.indices, store.indices))
        if not zero:
            self.fail(f"the intrinsic resets {store.buffer.name} to 0 on every call, but the "
                      f"block's init is {init}")
        for iv in self.block.iter_vars:
            if iv.kind is not IterKind.REDUCE:
                continue
            t = self.loop_of[iv.var]
            if t is None or not equal(self.values[iv.var], self.loops[t].var, self.ranges):
                self.fail(f"the intrinsic resets {store.buffer.name} on every call, but the "
                          f"block reduces over {iv.var.name} = {self.values[iv.var]} beyond "
                          "one call")


def _vars_in(expr: Any) -> list[Var]:
    found: list[Var] = []

    def visit(node: Any) -> None:
        if isinstance(node, Var):
            found.append(node)
        elif isinstance(node, tuple):
            for item in node:
                visit(item)
        elif isinstance(node, Node) and not isinstance(node, Buffer):
            for name in child_fields(type(node)):
                visit(getattr(node, name))

    visit(expr)
    return found


def _what(expr: Expr) -> str:
    """A short name for the operation at the top of ``expr``."""
    if isinstance(expr, BinOp):
        return f"'{expr.op}'"
    if isinstance(expr, Cast):
        return f"a cast to {expr.dtype}"
    if isinstance(expr, BufferLoad):
        return f"a load of {expr.buffer.name}"
    if isinstance(expr, (IntImm, FloatImm)):
        return f"the constant {expr.value}"
    return f"a {type(expr).__name__}"


def _region_text(region: BufferRegion) -> str:
    """``A[vi_o * 16:vi_o * 16 + 16, 0:16]``: the region as the script syntax slices it."""
    dims = []
    for rng in region.ranges:
        end = simplify(rng.start + rng.extent)
        dims.append(f"{rng.start}:{end}")
    return f"{region.buffer.name}[{', '.join(dims)}]"


def _arg_text(arg: BufferRegion | Expr) -> str:
    return _region_text(arg) if isinstance(arg, BufferRegion) else str(arg)


def _first_difference(actual: Any, expected: Any, ranges: dict[Var, Interval]
                      ) -> tuple[str, str] | None:
    """The first pair of accesses (as text) that differ between two computations of the
    same shape, indices compared as integer expressions under ``ranges``; None when none."""
    if type(actual) is not type(expected):
        return str(actual), str(expected)
    if isinstance(actual, (BufferLoad, BufferStore)):
        same = actual.buffer is expected.buffer and all(
            equal(a, b, ranges) for a, b in zip(actual.indices, expected.indices))
        if not same:
            return _access_text(actual), _access_text(expected)
        if isinstance(actual, BufferStore):
            return _first_difference(actual.value, expected.value, ranges)
        return None
    if isinstance(actual, tuple):
        for x, y in zip(actual, expected):
            found = _first_difference(x, y, ranges)
            if found is not None:
                return found
        return None
    if isinstance(actual, Node) and not isinstance(actual, (Var, Buffer)):
        for name in child_fields(type(actual)):
            found = _first_difference(getattr(actual, name), getattr(expected, name), ranges)
            if found is not None:
                return found
    return None


def _access_text(access: BufferLoad | BufferStore) -> str:
    return f"{access.buffer.name}[{', '.join(str(i) for i in access.indices)}]"
