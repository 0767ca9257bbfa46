"""Expression matching: is a block's store an intrinsic's semantics up to renaming?

Both stores are compared as trees after one normalisation (:func:`canonical`). Operators must
agree exactly; the operands of ``+``, ``*``, ``min``, ``max``, ``==``, ``!=``, ``and``, ``or``
may come in either order. Every load pairs a kernel buffer with an intrinsic operand; the
pairing must be one-to-one and the dtypes must be equal (int8 and uint8 differ, and so do a
float16 accumulator and a float32 one). The result lists the buffer map and, for every
access, the kernel's index expressions beside the intrinsic's, for :mod:`iter_map`.

Conversions are compared after :func:`canonical` has rewritten them by exact rules only:

- a conversion to the value's own dtype disappears;
- a conversion of a constant folds when the constant is representable;
- a chain ``T2(T1(x))`` becomes ``T2(x)`` when ``T1`` holds every value of ``x``
  (``i32(i16(a))`` for int8 ``a``), since the outer conversion then sees the same value;
- an integer conversion of a sum, difference or product becomes the operation on converted
  operands, ``W(a op b) -> W(a) op W(b)``, when value ranges prove that neither the narrow
  nor the wide operation wraps (``i32(i16(a) * i16(b))`` for int8 ``a``, ``b``: the int16
  product of two int8 values is exact).

So a cast of a product and a product of casts match only where they provably compute the
same numbers. ``i32(a * b)`` for int8 ``a``, ``b`` wraps in int8 and does not match
``i32(a) * i32(b)``; float conversions are never moved across an operation, because a
narrow float product rounds (``f32(x * y)`` for float16 ``x``, ``y`` differs from
``f32(x) * f32(y)``).

Statement shape: a block that updates its output in place (``C[..] = C[..] + e``) matches an
intrinsic that does, with the same operator. An intrinsic that zeroes its accumulator
(``resets``) needs a block whose init stores 0; otherwise the init is not compared, since the
rewrite splits it off (decompose_reduction) before the update becomes intrinsic calls.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass

import numpy as np

import ir
from intrinsics import Intrinsic, Operand
from ir import BinOp, BufferLoad, BufferStore, Cast, Expr, FloatImm, IntImm
from ir.arith import Interval, equal
from ir.printer import print_node
from tensorize.match.result import Mismatch

COMMUTATIVE = ("add", "mul", "min", "max", "eq", "ne", "and", "or")
# Operators that update an element in place: C[..] = C[..] op e.
UPDATE_OPS = ("add", "mul", "min", "max")
SYMBOLS = {"add": "+", "sub": "-", "mul": "*", "div": "/", "floordiv": "//", "floormod": "%",
           "min": "min", "max": "max", "eq": "==", "ne": "!=", "lt": "<", "le": "<=",
           "gt": ">", "ge": ">=", "and": "and", "or": "or"}
REDUCTIONS = {"add": "sum", "mul": "product", "min": "min-reduction", "max": "max-reduction"}
RESULT_WORDS = {"add": "sum", "sub": "difference", "mul": "product"}
# (significand bits, exponent bits) of each float dtype, to decide exact conversions.
FLOAT_FORMATS = {"float16": (11, 5), "bfloat16": (8, 8), "float32": (24, 8), "float64": (53, 11)}


@dataclass(frozen=True, slots=True)
class Access:
    """One access of the block (a load, or the store) beside the intrinsic's access it pairs
    with: ``indices`` are the kernel's, in block iterators; ``operand_indices`` the
    intrinsic's, in its iterators."""

    buffer: ir.Buffer
    operand: str
    indices: tuple[Expr, ...]
    operand_indices: tuple[Expr, ...]


@dataclass(frozen=True, slots=True)
class ExprMatch:
    """One way the block's store is the intrinsic's: ``pairs`` maps each kernel buffer to an
    operand name (in order of first access); ``accesses`` lists every access, the store
    first."""

    pairs: tuple[tuple[ir.Buffer, str], ...]
    accesses: tuple[Access, ...]

    @property
    def buffer_map(self) -> dict[str, str]:
        """Kernel buffer name -> operand name."""
        return {buffer.name: operand for buffer, operand in self.pairs}


def match_expr(block: ir.Block, intrinsic: Intrinsic) -> list[ExprMatch] | Mismatch:
    """Every way block ``block``'s store is ``intrinsic``'s semantics up to renaming.

    Precondition: none (any block, any intrinsic). Returns the distinct matches (buffer maps
    with their accesses; swapping the operands of a commutative operator can give several),
    buffers named like their operands first; or a Mismatch whose reason names the first
    disagreement: an operator, a dtype (both named), a conversion, or the statement's shape.
    """
    store = block.body
    if not isinstance(store, BufferStore):
        return Mismatch(block.name, intrinsic, f"block {block.name}'s body is a "
                        f"{type(store).__name__}, not one store like {intrinsic.name}'s")
    reason = _statement_reason(block, store, intrinsic)
    if reason is not None:
        return Mismatch(block.name, intrinsic, reason)
    target, output = intrinsic.semantics, intrinsic.output
    unifier = _Unifier(block, intrinsic)
    # The outputs pair first; their dtypes agree (checked above).
    start = _State(((store.buffer, output),),
                   (Access(store.buffer, output.name, store.indices, target.indices),))
    solutions = unifier.unify(canonical(store.value), canonical(target.value), start)
    ranges = {iv.var: Interval(0, iv.extent - 1) for iv in block.iter_vars}
    found: dict[tuple[object, ...], ExprMatch] = {}
    inconsistent = None
    for state in solutions:
        inconsistent = _inconsistent_access(state.accesses, ranges, intrinsic)
        if inconsistent is None:
            key = (tuple((id(b), o.name) for b, o in state.pairs), state.accesses)
            found.setdefault(key, ExprMatch(tuple((b, o.name) for b, o in state.pairs),
                                            state.accesses))
    if found:
        return sorted(found.values(), key=_preference)
    return Mismatch(block.name, intrinsic, inconsistent or unifier.failure_reason())


def _preference(found: ExprMatch) -> tuple[int, list[tuple[str, str]]]:
    """An order of matches independent of the order the kernel writes its operands in: most
    buffers named like their operands first, then by the buffer map."""
    pairs = found.buffer_map.items()
    return -sum(buffer == operand for buffer, operand in pairs), sorted(pairs)


# -- normalisation ------------------------------------------------------------------------------


def canonical(expr: Expr) -> Expr:
    """``expr`` with its conversions rewritten by the exact rules of this module's docstring.

    Returns the same object when no rule applies.
    """
    return _Canonical().visit(expr)


class _Canonical(ir.Mutator):
    def visit_Cast(self, node: Cast) -> Expr:
        value = self.visit(node.value)
        converted = convert(node.dtype, value)
        if isinstance(converted, Cast) and converted.value is node.value:
            return node
        return converted


def convert(dt: ir.DType, value: Expr) -> Expr:
    """``dt(value)``, simplified where that provably keeps every value (see the module
    docstring)."""
    if value.dtype == dt:
        return value  # identity conversion
    if isinstance(value, (IntImm, FloatImm)) and holds(value, dt):
        return ir.const(value.value, dt)  # representable constant
    if isinstance(value, Cast) and holds(value.value, value.dtype):
        return convert(dt, value.value)  # T2(T1(x)) -> T2(x) when T1(x) is exact
    if isinstance(value, BinOp) and _widens_exactly(dt, value):
        return BinOp(value.op, convert(dt, value.a), convert(dt, value.b))  # W(a op b)
    return Cast(dt, value)


def _widens_exactly(dt: ir.DType, op: BinOp) -> bool:
    """True when ``dt(a op b) == dt(a) op dt(b)`` for every value: integers only, and neither
    the narrow nor the wide operation wraps."""
    if op.op not in RESULT_WORDS or not (dt.is_int and op.dtype.is_int):
        return False
    a, b = value_range(op.a), value_range(op.b)
    result = _exact_result(op.op, a, b)
    return all(_fits(r, t) for r, t in ((result, op.dtype), (result, dt), (a, dt), (b, dt)))


def holds(value: Expr, dt: ir.DType) -> bool:
    """True when ``dt`` represents every value ``value`` can take exactly."""
    source = value.dtype
    if isinstance(value, (IntImm, FloatImm)):
        return _constant_holds(value, dt)
    if source.is_int or source.is_bool:
        if dt.is_int:
            return _fits(value_range(value), dt)
        return dt.is_float and _int_fits_float(value_range(value), dt)
    if not (source.is_float and dt.is_float):
        return False
    bits, exponent = FLOAT_FORMATS[source.name]
    wide_bits, wide_exponent = FLOAT_FORMATS[dt.name]
    return wide_bits >= bits and wide_exponent >= exponent


def _constant_holds(value: IntImm | FloatImm, dt: ir.DType) -> bool:
    if dt.is_int:
        return isinstance(value, IntImm) and int(dt.min) <= value.value <= int(dt.max)
    if not dt.is_float:
        return False
    with np.errstate(over="ignore"):
        return float(dt.numpy.type(value.value)) == value.value


def value_range(expr: Expr) -> Interval:
    """The interval holding every value the integer (or bool) expression takes, wrapping
    included: an operation whose exact result may leave its dtype spans the whole dtype."""
    dt = expr.dtype
    whole = Interval(int(dt.min), int(dt.max)) if not dt.is_float else Interval.everything()
    if isinstance(expr, IntImm):
        return Interval.point(expr.value)
    if isinstance(expr, Cast) and (expr.value.dtype.is_int or expr.value.dtype.is_bool):
        inner = value_range(expr.value)
        return inner if _fits(inner, dt) else whole
    if isinstance(expr, BinOp) and expr.op in RESULT_WORDS and dt.is_int:
        exact = _exact_result(expr.op, value_range(expr.a), value_range(expr.b))
        return exact if _fits(exact, dt) else whole
    if isinstance(expr, BinOp) and expr.op in ("min", "max") and dt.is_int:
        a, b = value_range(expr.a), value_range(expr.b)
        return a.min(b) if expr.op == "min" else a.max(b)
    if isinstance(expr, ir.Select) and dt.is_int:
        return value_range(expr.true_value).union(value_range(expr.false_value))
    return whole


def _exact_result(op: str, a: Interval, b: Interval) -> Interval:
    if op == "add":
        return a + b
    if op == "sub":
        return a - b
    return a * b


def _fits(interval: Interval, dt: ir.DType) -> bool:
    if dt.is_float:
        return _int_fits_float(interval, dt)
    return interval.within(int(dt.min), int(dt.max))


def _int_fits_float(interval: Interval, dt: ir.DType) -> bool:
    # Every integer of magnitude up to 2**significand is exactly representable.
    limit = 1 << FLOAT_FORMATS[dt.name][0]
    return interval.within(-limit, limit)


# -- statement shape ----------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class SelfRead:
    """How a store's value reads the buffer the store writes.

    ``form`` is ``"update"`` when the written element is an operand (``side`` 0 or 1) of the
    value's outermost operator ``op`` (``C = C - e``: op ``sub``, side 0); ``"nested"`` when
    the element is read only deeper in the value; ``"elsewhere"`` when only other elements
    are read (``indices``: the first one); ``"none"`` when the buffer is not read.
    """

    form: str
    op: str | None = None
    side: int = 0
    indices: tuple[Expr, ...] = ()


def self_read(store: BufferStore) -> SelfRead:
    """How ``store``'s value reads ``store.buffer`` (see :class:`SelfRead`)."""
    value = store.value
    if isinstance(value, BinOp):
        for side, operand in enumerate((value.a, value.b)):
            if isinstance(operand, BufferLoad) and operand.buffer is store.buffer \
                    and operand.indices == store.indices:
                return SelfRead("update", value.op, side)
    reads: list[BufferLoad] = []
    ir.post_order_visit(value, lambda n: reads.append(n) if isinstance(n, BufferLoad)
                        and n.buffer is store.buffer else None)
    if any(r.indices == store.indices for r in reads):
        return SelfRead("nested")
    if reads:
        return SelfRead("elsewhere", indices=reads[0].indices)
    return SelfRead("none")


def update_op(store: BufferStore) -> str | None:
    """The operator of a store that updates its element in place (``add`` for
    ``C[i] = C[i] + e`` or ``e + C[i]``), or None."""
    return _update_op(self_read(store))


def _update_op(read: SelfRead) -> str | None:
    """The in-place update operator ``read`` shows, or None (see :func:`update_op`)."""
    return read.op if read.form == "update" and read.op in UPDATE_OPS else None


def has_reduction(iter_vars: tuple[ir.IterVar, ...]) -> bool:
    """True when some non-unit iterator is a reduce iterator."""
    return any(iv.kind is ir.IterKind.REDUCE and iv.extent > 1 for iv in iter_vars)


def _statement_reason(block: ir.Block, store: BufferStore, intrinsic: Intrinsic) -> str | None:
    """Why the two stores cannot match as statements (output dtype, update form, init), or
    None."""
    out = intrinsic.output
    if store.buffer.dtype != out.dtype:
        return dtype_reason(store.buffer, out, intrinsic)
    unpaired = _unpaired_dtypes(store, intrinsic)
    if unpaired is not None:
        return dtype_reason(*unpaired, intrinsic)
    mine_read, theirs_read = self_read(store), self_read(intrinsic.semantics)
    mine, theirs = _update_op(mine_read), _update_op(theirs_read)
    buf = store.buffer.name
    if mine is not None and theirs is not None and mine != theirs:
        return (f"operator mismatch: block {block.name} is a "
                f"{_update_kind(mine, has_reduction(block.iter_vars))} vs {intrinsic.name}'s "
                f"{_update_kind(theirs, has_reduction(intrinsic.iter_vars))}")
    reason = _self_read_reason(block, store, intrinsic, mine_read, theirs_read)
    if reason is not None:
        return reason
    if intrinsic.resets and not _inits_zero(block, store):
        return (f"{intrinsic.name} zeroes {out.name} before accumulating; block {block.name} "
                f"requires an init storing 0 to {buf}, so that it does not add to {buf}'s "
                "previous values")
    return _repeated_operand_reason(intrinsic)


def _unpaired_dtypes(store: BufferStore, intrinsic: Intrinsic
                     ) -> tuple[ir.Buffer, Operand] | None:
    """A kernel input and an intrinsic input left without a partner of their dtype, or None.

    A match pairs the buffers the block loads (its output aside) one to one with the operands
    the semantics loads, dtypes equal, so both sides must hold the same dtypes. Checking this
    first names the culprits whatever order the kernel writes its operands in: same-named
    pairs are made first, then the rest in declared operand order and kernel name order.
    """
    pending = sorted(_loaded(store), key=lambda b: b.name)
    used = _loaded(intrinsic.semantics)
    unpaired = [o for o in intrinsic.operands if any(o.buffer is b for b in used)]
    for same_name in (True, False):
        for operand in list(unpaired):
            found = [b for b in pending if b.dtype == operand.dtype
                     and (b.name == operand.name or not same_name)]
            if found:
                pending.remove(found[0])
                unpaired.remove(operand)
    if pending and unpaired:
        return pending[0], unpaired[0]
    return None


def _loaded(store: BufferStore) -> list[ir.Buffer]:
    """The distinct buffers ``store``'s value loads, its own buffer aside."""
    found: list[ir.Buffer] = []

    def collect(node: object) -> None:
        if isinstance(node, BufferLoad) and node.buffer is not store.buffer \
                and not any(node.buffer is b for b in found):
            found.append(node.buffer)

    ir.post_order_visit(store.value, collect)
    return found


def _self_read_reason(block: ir.Block, store: BufferStore, intrinsic: Intrinsic,
                      mine: SelfRead, theirs: SelfRead) -> str | None:
    """Why the two stores read the element they write in different ways (one updates it with
    an operator, the other with another operator, reads it deeper, elsewhere or not at all),
    or None. Each side is described as it is: a side that reads its buffer is never said to
    write it without reading it."""
    semantics = intrinsic.semantics
    if _same_form(mine, theirs):
        return None
    kernel = (mine, f"block {block.name}", store)
    described = (theirs, intrinsic.name, semantics)
    if mine.form == theirs.form == "update":
        return (f"operator mismatch: block {block.name} updates {store.buffer.name} with "
                f"'{SYMBOLS.get(mine.op, mine.op)}' ({_form_text(mine, store)}), "
                f"{intrinsic.name} with '{SYMBOLS.get(theirs.op, theirs.op)}' "
                f"({_form_text(theirs, semantics)})")
    # The side that updates in place (the one the other falls short of) comes first.
    first, second = (described, kernel) if theirs.form == "update" else (kernel, described)
    return f"{_read_text(*first)}; {_read_text(*second)}"


def _same_form(a: SelfRead, b: SelfRead) -> bool:
    """Equal forms; the side of an update matters only for an operator that does not
    commute (``C = C - e`` is not ``C = e - C``; ``C = C + e`` is ``C = e + C``)."""
    if (a.form, a.op) != (b.form, b.op):
        return False
    return a.form != "update" or a.op in COMMUTATIVE or a.side == b.side


def _read_text(read: SelfRead, who: str, store: BufferStore) -> str:
    """``who``'s way of reading the element ``store`` writes, as a clause."""
    buf = store.buffer.name
    if read.form == "update":
        how = "in place" if read.op in UPDATE_OPS else f"with '{SYMBOLS.get(read.op, read.op)}'"
        return f"{who} updates {buf} {how} ({_form_text(read, store)})"
    if read.form == "nested":
        return (f"{who} reads {index_text(store.buffer, store.indices)} nested in its value, "
                "not as an operand of its outermost operation")
    if read.form == "elsewhere":
        other = index_text(store.buffer, read.indices)
        return (f"{who} reads {buf} only at other elements ({other}) than the one it writes "
                f"({index_text(store.buffer, store.indices)})")
    return f"{who} writes {buf} without reading it"


def _form_text(read: SelfRead, store: BufferStore) -> str:
    """``C = C - ...`` or ``C = ... - C`` for an update on side 0 or 1."""
    name = store.buffer.name
    if read.op in ("min", "max"):
        return f"{name} = {read.op}({name}, ...)"
    symbol = SYMBOLS.get(read.op, read.op)
    return f"{name} = {name} {symbol} ..." if read.side == 0 else f"{name} = ... {symbol} {name}"


def _update_kind(op: str | None, reduces: bool) -> str:
    if reduces:
        return REDUCTIONS[op or "add"]
    return f"in-place '{SYMBOLS[op or 'add']}'"


def _inits_zero(block: ir.Block, store: BufferStore) -> bool:
    init = block.init
    return (isinstance(init, BufferStore) and init.buffer is store.buffer
            and init.indices == store.indices
            and isinstance(init.value, (IntImm, FloatImm)) and init.value.value == 0)


def _repeated_operand_reason(intrinsic: Intrinsic) -> str | None:
    """The matcher pairs one kernel access pattern with each operand; an intrinsic reading an
    operand at two different places is refused rather than matched unsoundly."""
    places: dict[int, set[tuple[Expr, ...]]] = {}
    store = intrinsic.semantics
    places[id(store.buffer)] = {store.indices}

    def collect(node: object) -> None:
        if isinstance(node, BufferLoad):
            places.setdefault(id(node.buffer), set()).add(node.indices)

    ir.post_order_visit(store.value, collect)
    for operand in intrinsic.operands:
        if len(places.get(id(operand.buffer), ())) > 1:
            return (f"{intrinsic.name} accesses {operand.name} at several places; the matcher "
                    "requires one place per operand")
    return None


def _inconsistent_access(accesses: tuple[Access, ...], ranges: Mapping[ir.Var, Interval],
                         intrinsic: Intrinsic) -> str | None:
    """Two accesses of one operand must be of one element in the kernel too (the operand's
    accesses are all at one place; see :func:`_repeated_operand_reason`)."""
    first: dict[str, Access] = {}
    for access in accesses:
        seen = first.setdefault(access.operand, access)
        if seen is access:
            continue
        if seen.buffer is not access.buffer or not all(
                equal(a, b, ranges) for a, b in zip(seen.indices, access.indices)):
            return (f"the block accesses {index_text(seen.buffer, seen.indices)} and "
                    f"{index_text(access.buffer, access.indices)}, where {intrinsic.name} "
                    f"accesses {access.operand} at one place")
    return None


# -- unification ----------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class _State:
    """A partial match: buffer pairs, accesses so far, and how many node pairs agreed."""

    pairs: tuple[tuple[ir.Buffer, Operand], ...] = ()
    accesses: tuple[Access, ...] = ()
    size: int = 0

    def step(self) -> _State:
        return _State(self.pairs, self.accesses, self.size + 1)


class _Unifier:
    """Pairs a kernel expression with the intrinsic's, yielding every consistent state.

    Failures are remembered with how far the match got; the reason of the deepest one (the
    first among equals) explains the mismatch.
    """

    def __init__(self, block: ir.Block, intrinsic: Intrinsic) -> None:
        self.block = block
        self.intrinsic = intrinsic
        self.operands = {id(o.buffer): o for o in intrinsic.operands}
        self.failure = (-1, f"block {block.name}'s store is not {intrinsic.name}'s semantics")

    def failure_reason(self) -> str:
        return self.failure[1]

    def fail(self, state: _State, reason: str) -> None:
        if state.size > self.failure[0]:
            self.failure = (state.size, reason)

    def bind(self, state: _State, buffer: ir.Buffer, indices: tuple[Expr, ...],
             operand_buffer: ir.Buffer, operand_indices: tuple[Expr, ...]) -> _State | str:
        """``state`` with kernel ``buffer`` paired with the operand of ``operand_buffer``, or
        the reason they cannot pair."""
        operand = self.operands[id(operand_buffer)]
        name = self.intrinsic.name
        if buffer.dtype != operand.dtype:
            return dtype_reason(buffer, operand, self.intrinsic)
        for known, other in state.pairs:
            if known is buffer and other is not operand:
                return f"{buffer.name} would be both {name}'s {other.name} and {operand.name}"
            if other is operand and known is not buffer:
                return f"{name}'s {operand.name} would be both {known.name} and {buffer.name}"
        pairs = state.pairs
        if not any(known is buffer for known, _ in pairs):
            pairs = pairs + ((buffer, operand),)
        access = Access(buffer, operand.name, indices, operand_indices)
        return _State(pairs, state.accesses + (access,), state.size)

    def unify(self, mine: Expr, theirs: Expr, state: _State) -> Iterator[_State]:
        """Every state extending ``state`` in which ``mine`` is ``theirs`` up to renaming."""
        if type(mine) is not type(theirs):
            self.fail(state, self.shape_reason(mine, theirs))
            return
        state = state.step()
        if isinstance(mine, BufferLoad):
            bound = self.bind(state, mine.buffer, mine.indices, theirs.buffer, theirs.indices)
            if isinstance(bound, str):
                self.fail(state, bound)
            else:
                yield bound
        elif isinstance(mine, Cast):
            if mine.dtype != theirs.dtype:
                self.fail(state, f"the block converts to {mine.dtype} where "
                                 f"{self.intrinsic.name} converts to {theirs.dtype}")
            else:
                yield from self.unify(mine.value, theirs.value, state)
        elif isinstance(mine, BinOp):
            yield from self.binop(mine, theirs, state)
        elif isinstance(mine, (IntImm, FloatImm)):
            if mine == theirs:
                yield state
            else:
                self.fail(state, f"the block has {describe(mine)} ({mine.dtype}) where "
                                 f"{self.intrinsic.name} has {describe(theirs)} ({theirs.dtype})")
        elif isinstance(mine, ir.Select):
            yield from self.unify_all(((mine.cond, theirs.cond),
                                       (mine.true_value, theirs.true_value),
                                       (mine.false_value, theirs.false_value)), state)
        elif isinstance(mine, ir.Not):
            yield from self.unify(mine.a, theirs.a, state)
        elif isinstance(mine, ir.Call) and (mine.name, mine.dtype, len(mine.args)) == \
                (theirs.name, theirs.dtype, len(theirs.args)):
            yield from self.unify_all(tuple(zip(mine.args, theirs.args)), state)
        else:
            self.fail(state, f"the block has {describe(mine)} where {self.intrinsic.name} has "
                             f"{describe(theirs)}")

    def binop(self, mine: BinOp, theirs: BinOp, state: _State) -> Iterator[_State]:
        if mine.op != theirs.op:
            self.fail(state, f"operator mismatch: the block has '{SYMBOLS[mine.op]}' where "
                             f"{self.intrinsic.name} has '{SYMBOLS[theirs.op]}'")
            return
        yield from self.unify_all(((mine.a, theirs.a), (mine.b, theirs.b)), state)
        if mine.op in COMMUTATIVE:
            yield from self.unify_all(((mine.a, theirs.b), (mine.b, theirs.a)), state)

    def unify_all(self, pairs: tuple[tuple[Expr, Expr], ...],
                  state: _State) -> Iterator[_State]:
        if not pairs:
            yield state
            return
        (mine, theirs), rest = pairs[0], pairs[1:]
        for grown in self.unify(mine, theirs, state):
            yield from self.unify_all(rest, grown)

    def shape_reason(self, mine: Expr, theirs: Expr) -> str:
        """Why two expressions of different kinds differ, in the user's terms."""
        name = self.intrinsic.name
        load, other = _load_under_cast(mine), _load_under_cast(theirs)
        if load is not None and other is not None and id(other.buffer) in self.operands:
            operand = self.operands[id(other.buffer)]
            if load.buffer.dtype != operand.dtype:
                return dtype_reason(load.buffer, operand, self.intrinsic)
        if isinstance(mine, Cast) and isinstance(mine.value, BinOp) \
                and isinstance(theirs, BinOp) and mine.value.op == theirs.op:
            return (f"cast of {_narrow_text(mine.value)} vs {name}'s "
                    f"{RESULT_WORDS.get(theirs.op, SYMBOLS[theirs.op])} of {theirs.dtype} "
                    f"values: {_wrap_text(mine.value)}")
        if isinstance(theirs, Cast) and isinstance(theirs.value, BinOp) \
                and isinstance(mine, BinOp) and theirs.value.op == mine.op:
            return (f"{RESULT_WORDS.get(mine.op, SYMBOLS[mine.op])} of {mine.dtype} values vs "
                    f"{name}'s cast of {_narrow_text(theirs.value)}: {_wrap_text(theirs.value)}")
        return f"the block has {describe(mine)} where {name} has {describe(theirs)}"


def _load_under_cast(expr: Expr) -> BufferLoad | None:
    """The load ``expr`` is, or converts."""
    if isinstance(expr, Cast):
        expr = expr.value
    return expr if isinstance(expr, BufferLoad) else None


def _narrow_text(op: BinOp) -> str:
    article = "an" if op.dtype.name.startswith("int") else "a"
    return f"{article} {op.dtype} {RESULT_WORDS.get(op.op, SYMBOLS[op.op])}"


def _wrap_text(op: BinOp) -> str:
    failure = "round" if op.dtype.is_float else "overflow"
    return (f"the {op.dtype} {RESULT_WORDS.get(op.op, SYMBOLS[op.op])} can {failure} before "
            "the conversion")


# -- wording ------------------------------------------------------------------------------------


def dtype_reason(buffer: ir.Buffer, operand: Operand, intrinsic: Intrinsic) -> str:
    """``"A is float32, npu_gemm's A is int8"``."""
    return f"{buffer.name} is {buffer.dtype}, {intrinsic.name}'s {operand.name} is {operand.dtype}"


def describe(expr: Expr) -> str:
    """A short phrase for an expression node: ``a load of A``, ``'*'``, ``the constant 0``."""
    if isinstance(expr, BufferLoad):
        return f"a load of {expr.buffer.name}"
    if isinstance(expr, Cast):
        return f"a conversion to {expr.dtype}"
    if isinstance(expr, BinOp):
        return f"'{SYMBOLS[expr.op]}'"
    if isinstance(expr, (IntImm, FloatImm)):
        return f"the constant {expr.value}"
    if isinstance(expr, ir.Var):
        return f"iterator {expr.name}"
    if isinstance(expr, ir.Call):
        return f"{expr.name}()"
    if isinstance(expr, ir.Not):
        return "'not'"
    return "a select"


def index_text(buffer: ir.Buffer, indices: tuple[Expr, ...]) -> str:
    """``A[vi * 2 + vk, vj]``."""
    return f"{buffer.name}[{', '.join(print_node(i) for i in indices)}]"
