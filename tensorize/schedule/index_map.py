"""Index maps: functions from n indices to m indices, written as Python lambdas.

An :class:`IndexMap` describes a new layout of a buffer
(``lambda i, j: (i // 16, j // 16, i % 16, j % 16)`` tiles a matrix) or a new iteration space
of a block (``lambda n, h, w: (n * 64 + h * 8 + w,)`` fuses three iterators). It is built from a
Python lambda, whose parameters become Vars and whose operators build IR expressions, or parsed
from the same lambda written as text, and it prints as that text.

Bijectivity is decided structurally, the way split and fuse build indices. Every target must
be a *fusion*: a sum of *pieces* whose coefficients form a mixed radix (1, e1, e1*e2, ... for
pieces of extents e1, e2, ...). A piece is ``(x // lower) % extent`` of a source index ``x`` or
of an inner fusion (a fused index split again, as in ``(i * 3 + j) // 2``). The ends of the
pieces cut every index into digits, and the map is a bijection from the source box onto the
target box when each digit is read exactly once. The inverse reads each digit back as
``(target // weight) % extent`` and sums each source index's digits. The targets are tried as
written, then simplified under the source ranges. The check is sufficient, not necessary: a
bijection written outside this structure is refused with the reason it could not be shown.
"""

from __future__ import annotations

import ast
import inspect
import keyword
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from ir import BinOp, Expr, IntImm, IRError, KernelError, ScheduleError, Var, as_expr
from ir.arith import Interval, LinearForm, bound, const_int, linearize, simplify, to_expr
from ir.script.exprs import ExprParser
from ir.script.source import SourceText
from ir.visitor import child_fields, substitute

__all__ = ["IndexMap", "as_index_map", "simplify_index"]

# Operators an index map may use, with their Python symbol and binding strength.
_SYMBOLS = {"add": ("+", 1), "sub": ("-", 1), "mul": ("*", 2), "floordiv": ("//", 2),
            "floormod": ("%", 2)}
_UNARY, _ATOM = 3, 4


class _MapError(Exception):
    """A reason an index map is malformed or not a bijection; callers turn it into a
    ScheduleError naming their primitive."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


@dataclass(frozen=True, slots=True, eq=False)
class IndexMap:
    """``lambda *source: targets``: each target an integer expression of the source Vars
    built with ``+ - * // %`` and integer constants.

    Two maps are equal when they have as many sources and their targets agree once the
    sources are matched by position. ``repr`` is Python that rebuilds the map (it imports this
    module itself, so it evaluates in any namespace); ``str`` is the lambda text.
    """

    source: tuple[Var, ...]
    targets: tuple[Expr, ...]

    def __post_init__(self) -> None:
        object.__setattr__(self, "source", tuple(self.source))
        object.__setattr__(self, "targets", tuple(self.targets))
        reason = _malformed(self.source, self.targets)
        if reason is not None:
            raise ScheduleError("IndexMap", reason)

    # -- building -------------------------------------------------------------------------

    @staticmethod
    def from_func(func: Callable[..., Any]) -> IndexMap:
        """The map a Python function computes on index Vars: ``IndexMap.from_func(lambda i,
        j: (j, i))``. The function receives one Var per parameter and returns a target or a
        tuple of targets built with Python operators. Raises ScheduleError when it is not
        such a function."""
        return _raising("IndexMap", lambda: _from_func(func))

    @staticmethod
    def parse(text: str) -> IndexMap:
        """The map written as lambda text: ``IndexMap.parse("lambda i, j: (j, i)")``.
        Raises ScheduleError on text that is not a lambda over indices."""
        return _raising("IndexMap", lambda: _parse(text))

    # -- using ----------------------------------------------------------------------------

    @property
    def text(self) -> str:
        """The map as lambda text, which :meth:`parse` reads back to an equal map."""
        names = {var: var.name for var in self.source}
        rendered = [_render(t, names)[0] for t in self.targets]
        body = rendered[0] if len(rendered) == 1 else f"({', '.join(rendered)})"
        return f"lambda {', '.join(names.values())}: {body}"

    def apply(self, indices: Sequence[Expr | int],
              ranges: dict[Var, Interval] | None = None) -> tuple[Expr, ...]:
        """The targets with the source Vars replaced by ``indices`` (one per source),
        simplified under ``ranges`` (Var -> Interval) of the Vars the indices use."""
        _check_arity(self, indices, "indices")
        mapping = {var: as_expr(index) for var, index in zip(self.source, indices)}
        return tuple(simplify_index(substitute(t, mapping), ranges) for t in self.targets)

    def evaluate(self, point: Sequence[int]) -> tuple[int, ...]:
        """The target values at one integer point of the source."""
        _check_arity(self, point, "point")
        values = []
        for target in self.apply([IntImm(int(p)) for p in point]):
            value = const_int(target)
            if value is None:
                raise ScheduleError("IndexMap", f"{self.text} does not fold to constants at "
                                                f"{tuple(point)}")
            values.append(value)
        return tuple(values)

    def target_shape(self, source_shape: Sequence[int]) -> tuple[int, ...]:
        """The extents of the targets when the sources range over ``source_shape``: one past
        each target's largest value (by interval bounds). Raises ScheduleError when a target
        can be negative or is unbounded."""
        return _raising("IndexMap", lambda: _target_shape(self, source_shape))

    def why_not_bijective(self, source_shape: Sequence[int]) -> str | None:
        """None when the map is a bijection from the box ``source_shape`` onto the box
        :meth:`target_shape`, else the reason it is not (or cannot be shown to be): the map
        must be built of splits and fusions, see the module docs."""
        try:
            _decompose(self, source_shape)
        except _MapError as err:
            return err.reason
        return None

    def is_bijective(self, source_shape: Sequence[int]) -> bool:
        """True when the map is a bijection from the box ``source_shape`` onto the box
        :meth:`target_shape` (see :meth:`why_not_bijective`)."""
        return self.why_not_bijective(source_shape) is None

    def inverse(self, source_shape: Sequence[int]) -> IndexMap:
        """The map from the target box back to the box ``source_shape``, so that
        ``inverse.evaluate(self.evaluate(x)) == x`` for every source point ``x``.

        Precondition: the map is bijective on ``source_shape``; otherwise ScheduleError says
        why not.

        >>> tile = IndexMap.parse("lambda i, j: (i // 16, j // 16, i % 16, j % 16)")
        >>> print(tile.inverse([32, 48]))
        lambda y0, y1, y2, y3: (y0 * 16 + y2, y1 * 16 + y3)
        """
        return _raising("IndexMap", lambda: _decompose(self, source_shape).inverse())

    # -- values ---------------------------------------------------------------------------

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, IndexMap) or len(other.source) != len(self.source):
            return False
        renamed = substitute(other.targets, dict(zip(other.source, self.source)))
        return renamed == self.targets

    def __hash__(self) -> int:
        return hash((len(self.source), len(self.targets)))

    def __str__(self) -> str:
        return self.text

    def __repr__(self) -> str:
        return (f'__import__("{__name__}", fromlist=["IndexMap"]).IndexMap.parse('
                f"{self.text!r})")


def as_index_map(value: IndexMap | Callable[..., Any] | str, primitive: str,
                 argument: str = "index_map") -> IndexMap:
    """``value`` as an IndexMap: a map passes through, a lambda is traced, text is parsed.
    Raises ScheduleError(primitive, ...) naming ``argument`` when it is none of these."""
    if isinstance(value, IndexMap):
        return value
    try:
        if isinstance(value, str):
            return _parse(value)
        if callable(value):
            return _from_func(value)
    except _MapError as err:
        raise ScheduleError(primitive, f"argument '{argument}': {err.reason}") from None
    raise ScheduleError(primitive, f"argument '{argument}': expected an IndexMap, a lambda or "
                                   f"lambda text, got {value!r}")


def simplify_index(expr: Expr, ranges: dict[Var, Interval] | None = None) -> Expr:
    """``expr`` simplified under ``ranges``, with splits of splits merged back as well:
    ``k*b*(x // (a*b)) + k*((x // a) % b) -> k*(x // a)``, which composing a map with its
    inverse produces and the arith simplifier (merging only ``x // c`` with ``x % c``) leaves.
    Returns ``expr`` itself when nothing changes."""
    result = simplify(expr, ranges)
    if not result.dtype.is_int or result.dtype.is_bool:
        return result
    form = linearize(result)
    merged = _merge_nested_splits(form)
    if merged is form:
        return result
    return simplify(to_expr(merged, result.dtype), ranges)


def _merge_nested_splits(form: LinearForm) -> LinearForm:
    """The form with every ``k*b*(x // (a*b)) + k*((x // a) % b)`` pair replaced by
    ``k*(x // a)``; the same object when there is none."""
    changed = True
    while changed:
        changed = False
        for atom, coeff in form.terms:
            if not (isinstance(atom, BinOp) and atom.op == "floormod"
                    and isinstance(atom.b, IntImm) and isinstance(atom.a, BinOp)
                    and atom.a.op == "floordiv" and isinstance(atom.a.b, IntImm)):
                continue
            split, b = atom.a, atom.b.value
            partner = BinOp("floordiv", split.a, IntImm(split.b.value * b, split.b.dtype))
            if form.coeff(partner) == coeff * b:
                form = form.without(atom).without(partner) + LinearForm.of_atom(split, coeff)
                changed = True
                break
    return form


def _raising(primitive: str, build: Callable[[], Any]) -> Any:
    try:
        return build()
    except _MapError as err:
        raise ScheduleError(primitive, err.reason) from None


def _check_arity(index_map: IndexMap, values: Sequence[Any], what: str) -> None:
    if len(values) != len(index_map.source):
        raise ScheduleError("IndexMap", f"{index_map.text} takes {len(index_map.source)} "
                                        f"indices, got {len(values)} {what}")


# -- construction -------------------------------------------------------------------------


def _malformed(source: tuple[Any, ...], targets: tuple[Any, ...]) -> str | None:
    """Why ``source``/``targets`` do not make an index map, or None."""
    names = set()
    for var in source:
        if not isinstance(var, Var) or not var.dtype.is_int or var.dtype.is_bool:
            return f"index map sources must be integer Vars, got {var!r}"
        if not var.name.isidentifier() or keyword.iskeyword(var.name) or var.name in names:
            return f"index map sources need distinct Python names, got {var.name!r}"
        names.add(var.name)
    if not targets:
        return "an index map needs at least one target"
    for target in targets:
        reason = _bad_node(target, source)
        if reason is not None:
            return reason
    return None


def _bad_node(expr: Any, source: tuple[Var, ...]) -> str | None:
    if isinstance(expr, Var):
        if not any(expr is var for var in source):
            return f"index map target uses {expr.name}, which is not one of its parameters"
        return None
    if isinstance(expr, IntImm) and expr.dtype.is_int and not expr.dtype.is_bool:
        return None
    if not (isinstance(expr, BinOp) and expr.op in _SYMBOLS):
        shown = expr.op if isinstance(expr, BinOp) else type(expr).__name__
        return f"index map targets are built with + - * // % and integers, got {shown}"
    for name in child_fields(BinOp):
        if name != "op":
            reason = _bad_node(getattr(expr, name), source)
            if reason is not None:
                return reason
    return None


def _from_func(func: Callable[..., Any]) -> IndexMap:
    try:
        parameters = list(inspect.signature(func).parameters.values())
    except (TypeError, ValueError):
        raise _MapError(f"expected a lambda over indices, got {func!r}") from None
    plain = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
    for parameter in parameters:
        if parameter.kind not in plain or parameter.default is not inspect.Parameter.empty:
            raise _MapError(f"an index map's parameters are plain indices, got '{parameter}'")
    source = tuple(Var(p.name) for p in parameters)
    try:
        result = func(*source)
        targets = tuple(as_expr(t) for t in (result if isinstance(result, (tuple, list))
                                             else (result,)))
    except IRError as err:
        raise _MapError(f"index map function failed: {err.message}") from None
    reason = _malformed(source, targets)
    if reason is not None:
        raise _MapError(reason)
    return IndexMap(source, targets)


class _LambdaParser(ExprParser):
    """Index expressions of a lambda's body: names are its parameters; no calls."""

    call_prefix = ""

    def __init__(self, source: SourceText, params: dict[str, Var]) -> None:
        super().__init__(source)
        self.params = params

    def resolve_name(self, node: ast.Name) -> Var:
        found = self.params.get(node.id)
        if found is None:
            raise self.error(node, f"unknown index {node.id}; the lambda's parameters are "
                                   f"{', '.join(self.params) or 'none'}")
        return found

    def function_name(self, node: ast.expr) -> str | None:
        return None


def _parse(text: str) -> IndexMap:
    if not isinstance(text, str):
        raise _MapError(f"expected lambda text, got {text!r}")
    stripped = text.strip()
    try:
        tree = ast.parse(stripped, mode="eval")
    except SyntaxError as err:
        raise _MapError(f"invalid Python syntax in {text!r}: {err.msg}") from None
    node = tree.body
    if not isinstance(node, ast.Lambda):
        raise _MapError(f"expected a lambda, as in 'lambda i, j: (j, i)', got {text!r}")
    args = node.args
    if args.vararg or args.kwarg or args.kwonlyargs or args.defaults:
        raise _MapError(f"an index map's parameters are plain indices, got {text!r}")
    params = {a.arg: Var(a.arg) for a in [*args.posonlyargs, *args.args]}
    body = node.body.elts if isinstance(node.body, ast.Tuple) else [node.body]
    parser = _LambdaParser(SourceText(stripped, "<index map>"), params)
    try:
        targets = tuple(parser.index(item) for item in body)
    except KernelError as err:
        raise _MapError(f"in {stripped!r}: {err.message}") from None
    reason = _malformed(tuple(params.values()), targets)
    if reason is not None:
        raise _MapError(reason)
    return IndexMap(tuple(params.values()), targets)


def _render(expr: Expr, names: dict[Var, str]) -> tuple[str, int]:
    """Python text of an index expression (Vars, IntImms and the BinOps of ``_SYMBOLS``, as
    ``_malformed`` admits) and its binding strength."""
    if isinstance(expr, Var):
        return names[expr], _ATOM
    if isinstance(expr, IntImm):
        return str(expr.value), _ATOM if expr.value >= 0 else _UNARY
    symbol, strength = _SYMBOLS[expr.op]
    left, left_strength = _render(expr.a, names)
    right, right_strength = _render(expr.b, names)
    # Python operators associate to the left: a right operand of equal strength needs parens.
    if left_strength < strength:
        left = f"({left})"
    if right_strength <= strength:
        right = f"({right})"
    return f"{left} {symbol} {right}", strength


# -- shapes and bijectivity ---------------------------------------------------------------


def _source_ranges(index_map: IndexMap, shape: Sequence[int]) -> dict[Var, Interval]:
    if (not isinstance(shape, (list, tuple)) or len(shape) != len(index_map.source)
            or not all(isinstance(n, int) and not isinstance(n, bool) and n > 0
                       for n in shape)):
        raise _MapError(f"{index_map.text} needs a shape of {len(index_map.source)} positive "
                        f"extents, got {shape!r}")
    return {var: Interval(0, n - 1) for var, n in zip(index_map.source, shape)}


def _target_shape(index_map: IndexMap, source_shape: Sequence[int]) -> tuple[int, ...]:
    ranges = _source_ranges(index_map, source_shape)
    shape = []
    for target in index_map.targets:
        span = bound(simplify(target, ranges), ranges)
        if not span.is_bounded or span.lo < 0:
            text = _render(target, {v: v.name for v in index_map.source})[0]
            raise _MapError(f"target {text} of {index_map.text} ranges over {span} on shape "
                            f"{tuple(source_shape)}; an index must be bounded and >= 0")
        shape.append(span.hi + 1)
    return tuple(shape)


@dataclass(eq=False)
class _Index:
    """Something the map cuts into digits: a source index, an inner fusion (``parts``, its
    pieces by coefficient) or a segment of an inner fusion (``reads``, the ranges of other
    indices it is made of).

    ``cuts`` are the positions where the map's pieces start and end. An inner fusion is split
    at the cuts that fall on digit boundaries of its parts into ``segments``: a segment with
    no other cut inside reads straight through to the parts (None); any other becomes an
    opaque index of its own, with digits.
    """

    name: str
    extent: int
    parts: list[tuple[_Piece, int]] | None = None
    reads: list[tuple[_Index, int, int]] = field(default_factory=list)
    cuts: set[int] = field(default_factory=set)
    segments: list[tuple[int, int, _Index | None]] = field(default_factory=list)
    digits: list[_Digit] = field(default_factory=list)


@dataclass(frozen=True, eq=False)
class _Piece:
    """``(index // lower) % extent``."""

    index: _Index
    lower: int
    extent: int

    @property
    def top(self) -> int:
        """The position just past the piece."""
        return self.lower * self.extent

    def describe(self) -> str:
        return _describe(self.index, self.lower, self.extent)


@dataclass(eq=False)
class _Digit:
    """A digit of an index, ``(index // position) % extent``, read by one user (a target or
    an opaque segment) as ``(user // weight) % extent``."""

    index: _Index
    position: int
    extent: int
    user: _User | None = None
    weight: int = 0

    def describe(self) -> str:
        return _describe(self.index, self.position, self.extent)


@dataclass(eq=False)
class _User:
    """A target, or an opaque segment (``index``), as a mixed radix of the digits it reads."""

    extent: int
    index: _Index | None = None


def _describe(index: _Index, lower: int, extent: int) -> str:
    text = index.name if lower == 1 else f"{index.name} // {lower}"
    if lower * extent >= index.extent:
        return text
    return f"{text} % {extent}" if lower == 1 else f"({text}) % {extent}"


def _decompose(index_map: IndexMap, shape: Sequence[int]) -> _Decomposition:
    """The decomposition of the targets as written or, failing that, as simplified under the
    source ranges (either one proves the map bijective). Raises the first reason when both
    fail."""
    try:
        return _Decomposition(index_map, shape, simplified=False)
    except _MapError as written:
        try:
            return _Decomposition(index_map, shape, simplified=True)
        except _MapError:
            raise written from None


def _piece(index: _Index, lower: int, extent: int) -> _Piece:
    ceiling = -(-index.extent // lower)
    return _Piece(index, lower, min(extent, ceiling))


class _Decomposition:
    """The digits of a map on a shape, or a _MapError saying why it is not a bijection.

    Parsing turns each target into a fusion of pieces (inner fusions become indices of their
    own). Every piece cuts its index at its two ends; an inner fusion pushes the cuts that fall
    on digit boundaries of its parts down into them and keeps the stretches between the others
    as opaque segments. Consecutive cuts of each source index and segment must divide each
    other, which makes their digits; every digit must then be read exactly once, by a target or
    by an opaque segment.
    """

    def __init__(self, index_map: IndexMap, shape: Sequence[int], simplified: bool) -> None:
        self.map = index_map
        self.ranges = _source_ranges(index_map, shape)
        self.names = {v: v.name for v in index_map.source}
        self.sources = {v: _Index(v.name, n) for v, n in zip(index_map.source, shape)}
        self.inner: list[tuple[LinearForm, _Index]] = []
        targets = [self.fusion(simplify(t, self.ranges) if simplified else t)
                   for t in index_map.targets]
        fusions = [index for _, index in self.inner]
        for parts in [*(p for p, _ in targets), *(f.parts or [] for f in fusions)]:
            for piece, _ in parts:
                self.cut(piece)
        opaque: list[_Index] = []
        # Outer fusions first: the cuts they push down reach the fusions inside them.
        for fusion in reversed(fusions):
            opaque += self.segment(fusion)
        leaves = [*self.sources.values(), *opaque]
        for index in leaves:
            self.make_digits(index)
        self.users = [self.read([(p.index, p.lower, p.top) for p, _ in parts], _User(extent))
                      for parts, extent in targets]
        for segment in opaque:
            self.read(segment.reads, _User(segment.extent, segment))
        for index in leaves:
            for digit in index.digits:
                if digit.user is None:
                    raise _MapError(f"{index_map.text} never uses {digit.describe()} (extent "
                                    f"{digit.extent}); the map is not one-to-one")
        target_shape = _target_shape(index_map, shape)
        fused = tuple(extent for _, extent in targets)
        if fused != target_shape:
            raise _MapError(f"{index_map.text} on shape {tuple(shape)} fills a box of "
                            f"{fused} inside its bounds {target_shape}")

    def text(self, expr: Expr) -> str:
        return _render(expr, self.names)[0]

    # -- parsing into fusions and pieces ---------------------------------------------------

    def fusion(self, expr: Expr) -> tuple[list[tuple[_Piece, int]], int]:
        """``expr`` as a mixed-radix sum of pieces (by coefficient) and its extent."""
        form = linearize(expr)
        text = self.text(expr)
        if form.const != 0:
            raise _MapError(f"{text} adds the constant {form.const}, so its values do not "
                            "start at 0")
        parts = [(self.piece(atom), coeff) for atom, coeff in form.terms]
        parts = sorted([(p, c) for p, c in parts if p.extent > 1], key=lambda pc: pc[1])
        extent = 1
        for piece, coeff in parts:
            if coeff != extent:
                raise _MapError(f"in {text}, {piece.describe()} (extent {piece.extent}) has "
                                f"coefficient {coeff} where a dense fusion needs {extent}")
            extent = coeff * piece.extent
        return parts, extent

    def piece(self, atom: Expr) -> _Piece:
        """A linear-form atom as a piece of a source index or of an inner fusion."""
        if isinstance(atom, Var) and atom in self.sources:
            index = self.sources[atom]
            return _piece(index, 1, index.extent)
        if (isinstance(atom, BinOp) and atom.op in ("floordiv", "floormod")
                and isinstance(atom.b, IntImm) and atom.b.value > 0):
            inner, c = self.operand(atom.a), atom.b.value
            if atom.op == "floordiv":
                return self.divide(inner, c, atom)
            return self.modulo(inner, c, atom)
        raise _MapError(f"{self.text(atom)} is not a split or fusion of the indices "
                        f"{', '.join(self.names.values())}")

    def operand(self, expr: Expr) -> _Piece:
        """The operand of ``//`` or ``%``: a piece, or an inner fusion taken whole."""
        form = linearize(expr)
        if form.const == 0 and len(form.terms) == 1 and form.terms[0][1] == 1:
            return self.piece(form.terms[0][0])
        for known, index in self.inner:
            if known == form:
                return _piece(index, 1, index.extent)
        parts, extent = self.fusion(expr)
        index = _Index(f"({self.text(expr)})", extent, parts)
        self.inner.append((form, index))
        return _piece(index, 1, extent)

    def divide(self, piece: _Piece, c: int, atom: Expr) -> _Piece:
        # ((x // lo) % e) // c == (x // (lo*c)) % (e / c) when c divides e, and
        # (x // lo) // c == x // (lo*c) when the modulo is a no-op (the piece is the top one).
        if piece.extent % c == 0 or piece.top >= piece.index.extent:
            return _piece(piece.index, piece.lower * c, -(-piece.extent // c))
        raise _MapError(f"{self.text(atom)} divides {piece.describe()} by {c}, which does not "
                        f"divide its extent {piece.extent}")

    def modulo(self, piece: _Piece, c: int, atom: Expr) -> _Piece:
        # ((x // lo) % e) % c == (x // lo) % c when c divides e or the first modulo is a
        # no-op; it is the piece itself when c >= e.
        if c >= piece.extent:
            return piece
        if piece.extent % c == 0 or piece.top >= piece.index.extent:
            return _piece(piece.index, piece.lower, c)
        raise _MapError(f"{self.text(atom)} takes {piece.describe()} modulo {c}, which does "
                        f"not divide its extent {piece.extent}")

    # -- digits ----------------------------------------------------------------------------

    def cut(self, piece: _Piece) -> None:
        index = piece.index
        if piece.top > index.extent:
            raise _MapError(f"{piece.describe()} takes {piece.extent} values but {index.name} "
                            f"has {index.extent}, not a multiple of {piece.lower}: the "
                            "targets would leave holes")
        index.cuts.update((piece.lower, piece.top))

    def segment(self, fusion: _Index) -> list[_Index]:
        """Split an inner fusion at its cuts that are digit boundaries of its parts (a cut
        ``q * C`` inside a part of coefficient C and extent divisible by q), pushing those cuts
        into the parts. Returns the opaque segments: stretches with other cuts inside."""
        parts = fusion.parts or []
        cuts = self.chain(fusion)
        boundaries = [1]
        for position in cuts[1:-1]:
            inside = [(p, c) for p, c in parts if c < position < c * p.extent]
            if not inside:
                boundaries.append(position)
                continue
            piece, coeff = inside[0]
            if position % coeff == 0 and piece.extent % (position // coeff) == 0:
                piece.index.cuts.add(piece.lower * (position // coeff))
                boundaries.append(position)
        boundaries.append(fusion.extent)
        opaque = []
        for start, stop in zip(boundaries, boundaries[1:]):
            within = [c // start for c in cuts if start < c < stop]
            if not within:
                fusion.segments.append((start, stop, None))
                continue
            segment = _Index(f"({fusion.name} // {start}) % {stop // start}", stop // start,
                             cuts={1, *within})
            for piece, coeff in parts:
                low, high = max(start, coeff), min(stop, coeff * piece.extent)
                if low < high:
                    segment.reads.append((piece.index, piece.lower * (low // coeff),
                                          piece.lower * (high // coeff)))
            fusion.segments.append((start, stop, segment))
            opaque.append(segment)
        return opaque

    def chain(self, index: _Index) -> list[int]:
        """The cuts of ``index`` with its ends, each dividing the next (else _MapError)."""
        cuts = sorted(index.cuts | {1, index.extent})
        for low, high in zip(cuts, cuts[1:]):
            if high % low:
                raise _MapError(f"the pieces of {index.name} in {self.map.text} cut it at "
                                f"{low} and {high}; {low} does not divide {high}, so they are "
                                "not digits of one mixed radix")
        return cuts

    def make_digits(self, index: _Index) -> None:
        cuts = self.chain(index)
        index.digits = [_Digit(index, low, high // low) for low, high in zip(cuts, cuts[1:])]

    def digits_between(self, index: _Index, start: int, stop: int) -> list[_Digit]:
        """The digits making up positions ``[start, stop)`` of ``index``, least significant
        first, through inner fusions down to source indices and opaque segments."""
        if index.parts is None:
            return [d for d in index.digits if start <= d.position < stop]
        found: list[_Digit] = []
        for low, high, segment in index.segments:
            begin, end = max(start, low), min(stop, high)
            if begin >= end:
                continue
            if segment is not None:
                found += self.digits_between(segment, begin // low, end // low)
                continue
            for piece, coeff in index.parts:
                lo, hi = max(begin, coeff), min(end, coeff * piece.extent)
                if lo < hi:
                    found += self.digits_between(piece.index, piece.lower * (lo // coeff),
                                                 piece.lower * (hi // coeff))
        return found

    def read(self, ranges: list[tuple[_Index, int, int]], user: _User) -> _User:
        """Record ``user`` as the one reader of the digits of ``ranges`` (least significant
        first), each weighted by the product of the extents before it."""
        weight = 1
        for index, start, stop in ranges:
            for digit in self.digits_between(index, start, stop):
                if digit.user is not None:
                    raise _MapError(f"{self.map.text} uses {digit.describe()} in two places; "
                                    "the map is not one-to-one")
                digit.user, digit.weight = user, weight
                weight *= digit.extent
        return user

    def inverse(self) -> IndexMap:
        """The map from the targets back to the sources."""
        result = tuple(Var(f"y{k}") for k in range(len(self.users)))
        values: dict[int, Expr] = {id(u): y for u, y in zip(self.users, result)}

        def user_value(user: _User) -> Expr:
            # Targets are seeded above; every other user is an opaque segment.
            if id(user) not in values:
                values[id(user)] = index_value(user.index)
            return values[id(user)]

        def index_value(index: _Index) -> Expr:
            total: Expr = IntImm(0)
            for digit in reversed(index.digits):
                value = user_value(digit.user)
                if digit.weight != 1:
                    value = value // digit.weight
                if digit.weight * digit.extent != digit.user.extent:
                    value = value % digit.extent
                total = total + (value if digit.position == 1 else value * digit.position)
            return total

        ranges = {y: Interval(0, u.extent - 1) for y, u in zip(result, self.users)}
        targets = tuple(simplify_index(index_value(self.sources[v]), ranges)
                        for v in self.map.source)
        return IndexMap(result, targets)
