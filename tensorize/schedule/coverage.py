"""Regions in loop variables, and exact coverage: whether a block's loops run its whole
iteration domain and whether it writes exactly a box, checked by enumerating dependent loops
(the data-staging primitives refuse what they cannot prove)."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from functools import reduce

import numpy as np

from ir import (TRUE, BinOp, BlockRealize, Buffer, BufferRegion, Cast, Expr, For, IntImm, IterKind,
                IterVar, Not, Range, Select, Var, and_, substitute)
from ir.arith import const_int, linearize, simplify
from ir.regions import region_union, relax_region
from ir.visitor import vars_of
from tensorize.schedule.check import check
from tensorize.schedule.sites import Site, loop_ranges

# The most loop iterations one exactness check enumerates (per group of dependent loops).
ENUMERATION_LIMIT = 1 << 22


# -- regions in loop variables -----------------------------------------------------------------

def region_in_loops(realize: BlockRealize, region: BufferRegion) -> BufferRegion:
    """A block's region (in its iterators) seen from outside, in the loop variables it is
    bound to."""
    mapping = {iv.var: b for iv, b in zip(realize.block.iter_vars, realize.bindings)}
    return BufferRegion(region.buffer, tuple(
        Range(simplify(substitute(r.start, mapping)), r.extent) for r in region.ranges))


def regions_of(site: Site, buffer: Buffer, writes: bool) -> list[BufferRegion]:
    """The block's declared regions of ``buffer`` (reads or writes), in loop variables."""
    declared = site.block.writes if writes else site.block.reads
    return [region_in_loops(site.realize, r) for r in declared if r.buffer is buffer]


def relax(region: BufferRegion, loops: Iterable[For]) -> BufferRegion:
    """The region covered while ``loops`` run over their ranges."""
    ranges = loop_ranges(loops)
    return relax_region(region, ranges) if ranges else region


def union(regions: Sequence[BufferRegion]) -> BufferRegion:
    """The smallest region covering all of ``regions`` (of one buffer)."""
    return reduce(region_union, regions)


def box_of(region: BufferRegion) -> list[tuple[Expr, int]]:
    """(start, constant extent) per dimension; a dimension without a constant extent is the
    whole dimension."""
    box = []
    for rng, dim in zip(region.ranges, region.buffer.shape):
        extent = const_int(rng.extent)
        box.append((rng.start, extent) if extent is not None else (IntImm(0), dim))
    return box


def offset_of(index: Expr, iterators: Sequence[IterVar]) -> tuple[IterVar, int] | None | str:
    """Read ``index`` as ``iterator + constant``: the pair, None for a constant, or "other"."""
    form = linearize(index)
    if not form.terms:
        return None
    if len(form.terms) == 1 and form.terms[0][1] == 1:
        for iv in iterators:
            if form.terms[0][0] is iv.var:
                return iv, form.const
    return "other"


# -- exact coverage ----------------------------------------------------------------------------

@dataclass(frozen=True, slots=True)
class Box:
    """One dimension of a target set: ``[start, start + extent)`` within ``[0, limit)``."""

    start: Expr
    extent: int
    limit: int


# What the coverage check groups: ("coord", dimension, vars), ("cond", conjunct, vars) or
# ("outer", variable, [variable]).
_Item = tuple[str, "int | Var", list[Var]]


def conjuncts(predicate: Expr) -> list[Expr]:
    """The terms of a conjunction, without literal Trues."""
    if isinstance(predicate, BinOp) and predicate.op == "and":
        return conjuncts(predicate.a) + conjuncts(predicate.b)
    if isinstance(predicate, IntImm) and predicate.value == 1:
        return []
    return [predicate]


def conjunction(terms: Sequence[Expr]) -> Expr:
    """``a and b and ...``; True when there are none."""
    return reduce(and_, terms) if terms else TRUE


def fills_exactly(coords: Sequence[Expr], predicate: Expr, domain: Mapping[Var, int],
                  boxes: Sequence[Box], outer: Sequence[Var] = ()) -> bool | None:
    """Whether ``{(o, coords(x)) : x in domain, predicate(x)}`` equals ``{(o, c) : c[d] in
    boxes[d](o)}``, ``o`` ranging over the ``outer`` variables (part of the domain, which maps
    each variable to its extent) and box starts depending on ``o`` only.

    The check is exact: loops that share an expression are grouped, and each group's
    iterations are enumerated. None when an expression cannot be evaluated (a load) or a
    group exceeds :data:`ENUMERATION_LIMIT` iterations.
    """
    items: list[_Item] = []
    for d, (coord, box) in enumerate(zip(coords, boxes)):
        items.append(("coord", d, vars_of(coord) + vars_of(box.start)))
    for n, term in enumerate(conjuncts(predicate)):
        items.append(("cond", n, vars_of(term)))
    items.extend(("outer", var, [var]) for var in outer)
    if any(var not in domain for _, _, used in items for var in used):
        return None
    parent: dict[Var, Var] = {}

    def root(var: Var) -> Var:
        while parent.get(var, var) is not var:
            var = parent[var]
        return var

    for _, _, used in items:
        for var in used[1:]:
            parent[root(var)] = root(used[0])
    groups: dict[int, list[_Item]] = {}
    for item in items:
        key = id(root(item[2][0])) if item[2] else id(item)
        groups.setdefault(key, []).append(item)
    terms = conjuncts(predicate)
    try:
        return all(_group_fills(group, coords, terms, domain, boxes, set(outer))
                   for group in groups.values())
    except _Unevaluable:
        return None


def _group_fills(group: list[_Item], coords: Sequence[Expr], terms: list[Expr],
                 domain: Mapping[Var, int], boxes: Sequence[Box], outer: set[Var]) -> bool:
    """The check for one group of dependent variables: enumerate their grid, keep the points
    the group's conditions allow, and compare the distinct points with the target's count."""
    variables = list({id(v): v for _, _, used in group for v in used}.values())
    size = int(np.prod([domain[v] for v in variables])) if variables else 1
    if size > ENUMERATION_LIMIT:
        raise _Unevaluable
    shape = tuple(domain[v] for v in variables)
    env = {v: np.arange(domain[v]).reshape([-1 if k == n else 1 for k in range(len(shape))])
           for n, v in enumerate(variables)}

    def full(expr: Expr) -> np.ndarray:
        return np.broadcast_to(np.asarray(_evaluate(expr, env)), shape)

    mask = np.ones(shape, dtype=bool)
    for kind, key, _ in group:
        if kind == "cond":
            mask &= full(terms[key]).astype(bool)
    columns, radices = [], []
    for kind, key, _ in group:
        if kind == "coord":
            box = boxes[key]
            value, start = full(coords[key])[mask], full(box.start)[mask]
            low, high = np.maximum(start, 0), np.minimum(start + box.extent, box.limit)
            if np.any(value < low) or np.any(value >= high):
                return False
            columns.append(value)
            radices.append(box.limit)
        elif kind == "outer":
            columns.append(np.broadcast_to(env[key], shape)[mask])
            radices.append(domain[key])
    found = _distinct(columns, radices) if columns else int(mask.any())
    return found == _expected(group, boxes, domain, outer)


def _distinct(columns: list[np.ndarray], radices: list[int]) -> int:
    """How many distinct rows the columns hold (each column's values lie in [0, radix))."""
    if float(np.prod([float(r) for r in radices])) < 2.0 ** 62:
        code = np.zeros(columns[0].shape, dtype=np.int64)
        for column, radix in zip(columns, radices):
            code = code * radix + column
        return int(np.unique(code).size)
    return int(np.unique(np.stack(columns), axis=1).shape[1])


def _expected(group: list[_Item], boxes: Sequence[Box], domain: Mapping[Var, int],
              outer: set[Var]) -> int:
    """How many points the target set holds for the group's dimensions and outer variables."""
    grid_vars = [key for kind, key, _ in group if kind == "outer"]
    shape = tuple(domain[v] for v in grid_vars)
    env = {v: np.arange(domain[v]).reshape([-1 if k == n else 1 for k in range(len(shape))])
           for n, v in enumerate(grid_vars)}
    count = np.ones(shape, dtype=np.int64)
    for kind, key, _ in group:
        if kind != "coord":
            continue
        box = boxes[key]
        if any(v not in outer for v in vars_of(box.start)):
            raise _Unevaluable
        start = np.broadcast_to(np.asarray(_evaluate(box.start, env)), shape)
        width = np.minimum(start + box.extent, box.limit) - np.maximum(start, 0)
        count = count * np.maximum(width, 0)
    return int(count.sum())


class _Unevaluable(Exception):
    """An expression the coverage check cannot evaluate over a grid."""


_NUMPY_OPS: dict[str, Callable[..., np.ndarray]] = {
    "add": np.add, "sub": np.subtract, "mul": np.multiply, "floordiv": np.floor_divide,
    "floormod": np.mod, "min": np.minimum, "max": np.maximum, "eq": np.equal,
    "ne": np.not_equal, "lt": np.less, "le": np.less_equal, "gt": np.greater,
    "ge": np.greater_equal, "and": np.logical_and, "or": np.logical_or,
}


def _evaluate(expr: Expr, env: Mapping[Var, np.ndarray]) -> np.ndarray | int:
    """An integer or bool expression's value at every point of a grid of its variables."""
    if isinstance(expr, Var):
        return env[expr]
    if isinstance(expr, IntImm):
        return expr.value
    if isinstance(expr, BinOp) and expr.op in _NUMPY_OPS:
        return _NUMPY_OPS[expr.op](_evaluate(expr.a, env), _evaluate(expr.b, env))
    if isinstance(expr, Not):
        return np.logical_not(_evaluate(expr.a, env))
    if isinstance(expr, Select):
        return np.where(_evaluate(expr.cond, env), _evaluate(expr.true_value, env),
                        _evaluate(expr.false_value, env))
    if isinstance(expr, Cast) and expr.dtype.is_int:
        return _evaluate(expr.value, env)
    raise _Unevaluable


def domain_of(site: Site) -> dict[Var, int]:
    """Every variable a block's bindings may use, with its extent."""
    domain = {iv.var: iv.extent for iv in site.scope.block.iter_vars}
    domain.update({loop.var: loop.extent for loop in site.loops})
    return domain


def covers_domain(realize: BlockRealize, domain: Mapping[Var, int]) -> bool | None:
    """Whether the bindings reach every point of the block's iteration domain (and no other)."""
    boxes = [Box(IntImm(0), iv.extent, iv.extent) for iv in realize.block.iter_vars]
    return fills_exactly(realize.bindings, realize.predicate, domain, boxes)


def check_complete(site: Site, primitive: str) -> None:
    """Refuse a block whose loops do not run every point of its iteration domain, and a
    reduction without an init (recomputing part of it would accumulate twice)."""
    covered = covers_domain(site.realize, domain_of(site))
    check(covered is not None, primitive,
          f"cannot check that block {site.name!r} runs its whole iteration domain: its bindings "
          f"or predicate are not integer expressions of at most {ENUMERATION_LIMIT} loop "
          "iterations", site.realize)
    check(bool(covered), primitive,
          f"block {site.name!r} is not complete: its loops do not run every point of its "
          "iteration domain", site.realize)
    reduces = any(iv.kind is IterKind.REDUCE for iv in site.block.iter_vars)
    check(not reduces or site.block.init is not None, primitive,
          f"block {site.name!r} accumulates without an init; {primitive} may run part of it "
          "twice, adding twice (move it before decompose_reduction)", site.realize)


def writes_exactly(site: Site, region: BufferRegion, inner: Sequence[For], box: list[Box]
                   ) -> bool | None:
    """Whether, in each iteration of the loops outside ``inner``, the block writes every
    element of ``box`` (its write ``region`` relaxed over ``inner``) and nothing else."""
    domain = domain_of(site)
    coords: list[Expr] = []
    for rng in region.ranges:
        width = const_int(rng.extent)
        if width is None:
            return None
        if width == 1:
            coords.append(rng.start)
            continue
        lane = Var("lane")
        domain[lane] = width
        coords.append(rng.start + lane)
    inner_vars = {loop.var for loop in inner}
    outer = [var for var in domain_of(site) if var not in inner_vars]
    return fills_exactly(coords, site.realize.predicate, domain, box, outer)


def clipped_box(region: BufferRegion) -> list[Box]:
    """The region's dimensions as boxes within the buffer's shape."""
    return [Box(start, extent, dim)
            for (start, extent), dim in zip(box_of(region), region.buffer.shape)]
