"""Iterator mapping: which block iterators fuse onto which intrinsic iterator, and which stay
loops around the intrinsic calls.

Given an expression match (:mod:`expr_match`), every block iterator is classified by the set
of operands whose indices it appears in (through the buffer map) and by its kind, and so is
every intrinsic iterator. A block iterator may fuse onto an intrinsic iterator of the same
operand set and kind; several may fuse onto one (a convolution's ``n, h, w`` onto a GEMM's
``i``, its window and input channels onto ``k``). Any block iterator may instead stay an outer
loop: each call then works on the slice of the operands at that iterator's value, which is
always sound, and is the only choice for an iterator that matches no intrinsic iterator (a
batch iterator, which indexes every operand; the rows of a GEMM under a by-element dot
product, whose ``A`` operand is one row). A mapping must give every intrinsic iterator at least
one block iterator; otherwise the operand dimension it spans has nothing to span and the
match fails with that reason. Unit (extent-1) iterators are 0 and otherwise ignored, except
where an intrinsic iterator has no other block iterator to span it: a unit iterator indexing
exactly that iterator's operands then spans it, padded from 1 to the intrinsic's extent (the
one row of a ``1 x N x K`` GEMM becomes the M of a ``16 x 8 x 16`` tile); and an
intrinsic's unit reduce iterator, which a block's reduction spans like any other (FMLAL by
element adds one k value a call).

Indices are accepted when quasi-affine in the block iterators (``ir.arith.is_affine``): sums
of constant multiples of iterators, and floordiv / floormod of such by positive constants.
An iterator counts as indexing an operand wherever it appears, inside a floordiv or floormod
atom too (``h + rh`` and ``2 * h + rh`` both touch ``h`` and ``rh``). Other indices (products
of iterators, loads, ``min``/``max`` clamps) refuse the match.

Every valid mapping is enumerated (each block iterator fused onto one of its candidates or
left outer), with the extents padded up to the intrinsic's, the number of calls and the
padding waste. Each operand's tile is then checked against the layouts the intrinsic accepts
(its own, and those of its load and store intrinsics): the buffer's address must be, in the
fused iterators, one stride per operand dimension, each fused group contiguous, with the
innermost dimension of the layout at stride 1. Floordiv/floormod pairs that cancel
(``16 * (m // 16) + m % 16``) are simplified away first; a tile left with such atoms in its
address is no strided window, so it needs packing.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import ir
from intrinsics import Intrinsic, Registry
from ir import Expr, IterVar, Var
from ir.arith import Interval, is_affine, linearize, simplify
from tensorize.match.expr_match import Access, ExprMatch, index_text
from tensorize.match.result import Match, Mismatch

AFFINE_NOTE = ("the matcher accepts sums of constant multiples of iterators and their "
               "floordiv/floormod by positive constants")


@dataclass(frozen=True, slots=True)
class _Site:
    """One operand as the kernel and the intrinsic index it (unit iterators set to 0).

    ``dim_vars``: ids of the variables in each kernel index; ``touched`` and
    ``operand_touched``: in all the kernel's and all the intrinsic's indices.
    ``coefficients``: the coefficient of each variable in the kernel buffer's address;
    ``unstrided``: ids of variables the address holds inside other atoms (floordiv,
    floormod), where no stride describes them. ``unit_touched`` and ``unit_coefficients``:
    the same for the unit iterators, read from the indices before they are set to 0.
    """

    access: Access
    dim_vars: tuple[frozenset[int], ...]
    touched: frozenset[int]
    operand_touched: frozenset[int]
    coefficients: tuple[tuple[int, int], ...]
    unstrided: frozenset[int]
    unit_touched: frozenset[int]
    unit_coefficients: tuple[tuple[int, int], ...]


def accepted_layouts(intrinsic: Intrinsic, registry: Registry) -> dict[str, frozenset[str]]:
    """Per operand, the memory layouts its data may come in or go out with: the operand's
    own, plus the memory side of each of its load and store intrinsics that ``registry``
    knows (WMMA's ``B`` loads row- or column-major)."""
    accepted = {}
    for operand in intrinsic.operands:
        layouts = {operand.layout}
        movers = (*intrinsic.loads.get(operand.name, ()), *intrinsic.stores.get(operand.name, ()))
        for name in movers:
            if name not in registry:
                continue
            mover = registry.get(name)
            memory_side = "input" if mover.kind == "load" else "output"
            layouts.update(o.layout for o in mover.operands if o.role == memory_side)
        accepted[operand.name] = frozenset(layouts)
    return accepted


def map_iterators(block: ir.Block, found: ExprMatch, intrinsic: Intrinsic,
                  accepted: Mapping[str, frozenset[str]]) -> list[Match] | Mismatch:
    """Every mapping of ``block``'s iterators onto ``intrinsic``'s under the buffer map of
    ``found``, unsorted and never empty; or a Mismatch (a non-affine index, an intrinsic
    iterator no block iterator can span).

    ``accepted`` gives the layouts each operand accepts (:func:`accepted_layouts`).
    """
    ranges = {iv.var: Interval(0, iv.extent - 1) for iv in block.iter_vars}
    sites = _sites(block, found, intrinsic, ranges)
    if isinstance(sites, str):
        return Mismatch(block.name, intrinsic, sites)
    live = [iv for iv in block.iter_vars if iv.extent > 1]
    # A unit reduce iterator still takes the block's reduction (FMLAL's one k value a call):
    # left outer, the sum would run outside the calls that accumulate it.
    targets = [iv for iv in intrinsic.iter_vars
               if iv.extent > 1 or iv.kind is ir.IterKind.REDUCE]
    mine = {id(iv.var): _operand_set(iv.var, sites, operand_side=False) for iv in live}
    theirs = {id(t.var): _operand_set(t.var, sites, operand_side=True) for t in targets}
    candidates = [[t for t in targets
                   if t.kind is iv.kind and theirs[id(t.var)] == mine[id(iv.var)]]
                  for iv in live]
    spanning = _unit_spans(block, targets, theirs, candidates, sites)
    live += list(spanning)
    candidates += [[target] for target in spanning.values()]
    for target in targets:
        if not any(target in options for options in candidates):
            return Mismatch(block.name, intrinsic, _uncovered_reason(
                block, intrinsic, target, theirs[id(target.var)], found))
    ranked = sorted(sites, key=lambda s: _operand_rank(intrinsic, s.access.operand))
    order = {id(iv.var): _position(iv.var, position, ranked) for position, iv in enumerate(live)}
    matches = []
    for choice in itertools.product(*[[*options, None] for options in candidates]):
        groups = {id(t.var): sorted((iv for iv, c in zip(live, choice) if c is t),
                                    key=lambda iv: order[id(iv.var)]) for t in targets}
        if all(groups.values()):
            outer = [iv for iv, c in zip(live, choice) if c is None]
            matches.append(_build(block, found, intrinsic, accepted, targets, groups, outer,
                                  sites))
    if not matches:
        names = ", ".join(t.var.name for t in targets)
        return Mismatch(block.name, intrinsic, f"no iterator for an operand dimension: block "
                        f"{block.name} has too few iterators to span {intrinsic.name}'s "
                        f"{names} at once")
    return matches


def _unit_spans(block: ir.Block, targets: Sequence[IterVar],
                theirs: Mapping[int, frozenset[str]], candidates: Sequence[Sequence[IterVar]],
                sites: Sequence[_Site]) -> dict[IterVar, IterVar]:
    """Unit iterator -> the intrinsic iterator it spans: for each intrinsic iterator no
    live block iterator can span, the first unit iterator of its kind indexing exactly its
    operands (the module docs), with a stride in every operand it indexes."""
    covered = {id(t.var) for options in candidates for t in options}
    units = [iv for iv in block.iter_vars if iv.extent == 1]
    spans: dict[IterVar, IterVar] = {}
    for target in targets:
        if id(target.var) in covered:
            continue
        for unit in units:
            indexed = [s for s in sites if id(unit.var) in s.unit_touched]
            if (unit not in spans and unit.kind is target.kind
                    and frozenset(s.access.operand for s in indexed) == theirs[id(target.var)]
                    and all(id(unit.var) in dict(s.unit_coefficients) for s in indexed)):
                spans[unit] = target
                break
    return spans


def _sites(block: ir.Block, found: ExprMatch, intrinsic: Intrinsic,
           ranges: Mapping[Var, Interval]) -> list[_Site] | str:
    """The accesses with unit iterators replaced by 0, or why an index (the kernel's or the
    intrinsic's) is not affine."""
    zeros = {iv.var: ir.IntImm(0, iv.var.dtype) for iv in block.iter_vars if iv.extent == 1}
    unit_ids = frozenset(id(var) for var in zeros)
    sites = []
    for access in found.accesses:
        indices = tuple(simplify(ir.substitute(i, zeros), ranges) for i in access.indices)
        if not all(is_affine(i) for i in indices):
            return f"non-affine index {index_text(access.buffer, access.indices)}: {AFFINE_NOTE}"
        if not all(is_affine(i) for i in access.operand_indices):
            operand = intrinsic.operand(access.operand)
            return (f"{intrinsic.name} indexes "
                    f"{index_text(operand.buffer, access.operand_indices)}, which is not "
                    f"affine: {AFFINE_NOTE}")
        coefficients, unstrided = _address(access.buffer, indices, ranges)
        dim_vars = tuple(_var_ids((index,)) for index in indices)
        sites.append(_Site(access, dim_vars, frozenset().union(*dim_vars),
                           _var_ids(access.operand_indices), coefficients, unstrided,
                           _var_ids(access.indices) & unit_ids,
                           _unit_strides(access.buffer, access.indices, unit_ids)))
    return sites


def _unit_strides(buffer: ir.Buffer, indices: tuple[Expr, ...], unit_ids: frozenset[int]
                  ) -> tuple[tuple[int, int], ...]:
    """The coefficients of the unit iterators in the address ``sum(stride * index)``: the
    strides their tile dimensions have where they span an intrinsic iterator. Read without
    the iterators' ranges, which would fold a unit iterator to its only value, 0."""
    address: Expr = ir.IntImm(0)
    for stride, index in zip(buffer.effective_strides, indices):
        address = address + index * stride
    return tuple((id(atom), coeff) for atom, coeff in linearize(address).terms
                 if isinstance(atom, Var) and id(atom) in unit_ids)


def _address(buffer: ir.Buffer, indices: tuple[Expr, ...], ranges: Mapping[Var, Interval]
             ) -> tuple[tuple[tuple[int, int], ...], frozenset[int]]:
    """The address ``sum(stride * index)`` as variable coefficients, and the variables left
    inside non-linear atoms once split pairs cancel (``16 * (m // 16) + m % 16 -> m``)."""
    address: Expr = ir.IntImm(0)
    for stride, index in zip(buffer.effective_strides, indices):
        address = address + index * stride
    coefficients = []
    unstrided: frozenset[int] = frozenset()
    for atom, coeff in linearize(simplify(address, ranges)).terms:
        if isinstance(atom, Var):
            coefficients.append((id(atom), coeff))
        else:
            unstrided = unstrided | _var_ids((atom,))
    return tuple(coefficients), unstrided


def _var_ids(exprs: tuple[Expr, ...]) -> frozenset[int]:
    found: set[int] = set()

    def collect(node: object) -> None:
        if isinstance(node, Var):
            found.add(id(node))

    for expr in exprs:
        ir.post_order_visit(expr, collect)
    return frozenset(found)


def _operand_set(var: Var, sites: Sequence[_Site], operand_side: bool) -> frozenset[str]:
    """The operands whose indices mention ``var`` (the intrinsic's indices when
    ``operand_side``, else the kernel's)."""
    return frozenset(s.access.operand for s in sites
                     if id(var) in (s.operand_touched if operand_side else s.touched))


def _operand_rank(intrinsic: Intrinsic, operand: str) -> tuple[bool, int]:
    """The output first, then the operands in declared order: a kernel-independent order,
    so that commuting the kernel's operands changes nothing."""
    names = [o.name for o in intrinsic.operands]
    return operand != intrinsic.output.name, names.index(operand)


def _position(var: Var, declared: int, sites: Sequence[_Site]) -> tuple[int, ...]:
    """Sort key putting fused iterators outermost first: per access (ranked), the first
    dimension indexed with ``var``, then the larger stride first (``i`` before ``ii`` in
    ``A[16 * i + ii]``); declaration order last."""
    key = []
    for site in sites:
        dims = [d for d, found in enumerate(site.dim_vars) if id(var) in found]
        key.append(dims[0] if dims else len(site.dim_vars))
        key.append(-abs(dict(site.coefficients).get(id(var), 0)))
    return (*key, declared)


def _uncovered_reason(block: ir.Block, intrinsic: Intrinsic, target: IterVar,
                      operands: frozenset[str], found: ExprMatch) -> str:
    names = [o.name for o in intrinsic.operands if o.name in operands]
    buffers = [b.name for o in names for b, paired in found.pairs if paired == o]
    kind = target.kind.value
    return (f"no iterator for an operand dimension: {intrinsic.name}'s {target.var.name} "
            f"({kind}) indexes {', '.join(names)}, and no {kind} iterator of block "
            f"{block.name} indexes exactly {', '.join(buffers)}")


def _build(block: ir.Block, found: ExprMatch, intrinsic: Intrinsic,
           accepted: Mapping[str, frozenset[str]], targets: Sequence[IterVar],
           groups: Mapping[int, list[IterVar]], outer: Sequence[IterVar],
           sites: Sequence[_Site]) -> Match:
    extents = {t.var.name: math.prod(iv.extent for iv in groups[id(t.var)]) for t in targets}
    padded = {t.var.name: -(-extents[t.var.name] // t.extent) * t.extent for t in targets}
    tiles = math.prod(padded[t.var.name] // t.extent for t in targets)
    useful = math.prod(extents.values()) / math.prod(padded.values())
    layouts: dict[str, str | None] = {}
    for site in sites:
        if site.access.operand not in layouts:
            layouts[site.access.operand] = _tile_layout(site, groups, outer)
    return Match(
        block=block.name, intrinsic=intrinsic, buffer_map=found.buffer_map,
        iter_map={t.var.name: tuple(iv.var.name for iv in groups[id(t.var)]) for t in targets},
        outer=tuple(iv.var.name for iv in outer), extents=extents, padded_extents=padded,
        calls=math.prod(iv.extent for iv in outer) * tiles, waste=1.0 - useful,
        layouts=layouts,
        needs_pack={o: layout not in accepted[o] for o, layout in layouts.items()})


def _tile_layout(site: _Site, groups: Mapping[int, list[IterVar]],
                 outer: Sequence[IterVar]) -> str | None:
    """How the kernel buffer lays out the operand's tile: ``row_major``, ``col_major``, or
    None when the tile is no strided window of the buffer (see the module docstring)."""
    dims = site.access.operand_indices
    if not dims:
        return "row_major"
    if not all(isinstance(d, Var) and id(d) in groups for d in dims):
        return None
    if not site.unstrided <= {id(iv.var) for iv in outer}:
        return None
    coefficients = dict(site.coefficients) | dict(site.unit_coefficients)
    dim_strides = []
    for dim in dims:
        members = groups[id(dim)]
        for outer_iv, inner_iv in zip(members, members[1:]):
            if coefficients.get(id(outer_iv.var)) != \
                    coefficients.get(id(inner_iv.var), 0) * inner_iv.extent:
                return None
        dim_strides.append(coefficients.get(id(members[-1].var), 0))
    if any(s <= 0 for s in dim_strides):
        return None
    if dim_strides[-1] == 1:
        return "row_major"
    if dim_strides[0] == 1:
        return "col_major"
    return None
