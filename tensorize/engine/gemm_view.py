"""Bringing a matched block into the intrinsic's own shape: one iterator per intrinsic
iterator, every operand indexed exactly as the intrinsic indexes it, sizes padded to the
intrinsic's multiples.

For a match that fuses several block iterators onto one intrinsic iterator (a convolution's
``(n, h, w)`` onto the GEMM's M and ``(rh, rw, rc)`` onto K), or whose operands are laid out
otherwise (a dense layer's transposed weight, a convolution's sliding window), this is:

1. ``reindex`` every operand not already indexed by the block's iterators in the intrinsic's
   order: a copy stage (the packing step; on the NPU it runs on the host) into a buffer
   indexed by the block's iterators;
2. ``transform_layout`` each copy into the intrinsic operand's dimensions, fusing groups;
3. ``transform_block_layout`` the block to ``(outer..., one iterator per intrinsic
   iterator)``;
4. ``pad_einsum`` to multiples of the intrinsic's extents (padded elements read zero and are
   never written back).

Unit (extent-1) iterators that the match leaves out ride along in the first group of their
kind, where they always contribute 0. Every step is a schedule primitive, recorded in the
schedule's trace.
"""

from __future__ import annotations

import re

from intrinsics.checks import operand_positions
from ir import BufferLoad, BufferStore, IterKind, Var
from ir.visitor import post_order_visit
from tensorize.match.result import Match
from tensorize.schedule import Schedule

_LETTERS = "abcdefghijklmnopqrstuvwxyz"


def to_intrinsic_shape(sch: Schedule, match: Match) -> None:
    """Rewrite block ``match.block`` of ``sch`` into the intrinsic's shape (module docs).

    Afterwards the block's iterators are the outer ones (``match.outer``) followed by one per
    intrinsic iterator, in the intrinsic's order, padded to its extents.
    """
    to_intrinsic_layout(sch, match)
    pad_to_multiples(sch, match, [iv.extent for iv in match.intrinsic.iter_vars])


def to_intrinsic_layout(sch: Schedule, match: Match) -> tuple[int, ...]:
    """Steps 1 to 3 of :func:`to_intrinsic_shape` (module docs): the block's iterators
    become the outer ones followed by one per intrinsic iterator, unpadded. Returns the
    extents of the intrinsic iterators."""
    intrinsic = match.intrinsic
    block = sch.get_block(match.block)
    _loops_in_iterator_order(sch, block)
    ivs = sch.get(block).block.iter_vars
    iters = [iv.var.name for iv in ivs]
    extents = {iv.var.name: iv.extent for iv in ivs}
    groups = _groups_with_units(match, ivs)
    outer = list(match.outer)
    positions = operand_positions(intrinsic)
    by_operand = {operand: buffer for buffer, operand in match.buffer_map.items()}

    for operand in intrinsic.operands:
        if operand.is_scalar or operand.name not in by_operand:
            continue
        name = by_operand[operand.name]
        used = _used_iterators(sch, match.block, name)
        wanted = [(v,) for v in outer if v in used] + [
            tuple(v for v in groups[p] if v in used) for p in positions[operand.name]]
        if _is_direct(sch, match.block, name, wanted):
            continue
        sch.reindex(block, name)
        dims = [v for v in iters if v in used]
        target = [_fuse(g, extents) for g in wanted]
        if target != dims:
            sch.transform_layout(block, f"{name}_reindex", _lambda(dims, target))

    new_iters = outer + [_fuse(g, extents) for g in groups]
    if new_iters != iters:
        sch.transform_block_layout(block, _lambda(iters, new_iters))
    count = len(intrinsic.iter_vars)
    return tuple(iv.extent for iv in sch.get(block).block.iter_vars[-count:])


def pad_to_multiples(sch: Schedule, match: Match, multiples: list[int]) -> None:
    """Step 4 of :func:`to_intrinsic_shape`: pad the block in the intrinsic's layout to
    ``multiples``, one per intrinsic iterator (each a multiple of the intrinsic's extent:
    a target tiling beyond one call pads to its tile)."""
    block = sch.get_block(match.block)
    sch.pad_einsum(block, [1] * len(match.outer) + list(multiples))


def _loops_in_iterator_order(sch: Schedule, block) -> None:
    """Reorder the block's loops to follow its iterators when each iterator is bound to a
    loop of its own (the kernel may be written with any loop order)."""
    realize = sch.get(block)
    loops = sch.get_loops(block)
    by_var = {sch.get(loop).var: loop for loop in loops}
    order = [by_var.get(b) for b in realize.bindings if isinstance(b, Var)]
    if len(order) != len(loops) or None in order or len(set(order)) != len(order):
        return
    if [sch.get(l).var for l in order] != [sch.get(l).var for l in loops]:
        sch.reorder(*order)


def _groups_with_units(match: Match, ivs) -> list[tuple[str, ...]]:
    """The match's groups in intrinsic order, each unit iterator added to the first group of
    its kind."""
    intrinsic = match.intrinsic
    groups = [list(match.iter_map[iv.var.name]) for iv in intrinsic.iter_vars]
    placed = {v for g in groups for v in g} | set(match.outer)
    for iv in ivs:
        if iv.var.name in placed:
            continue
        for group, target in zip(groups, intrinsic.iter_vars):
            if target.kind is iv.kind or (iv.kind is IterKind.SPATIAL
                                          and target.kind is IterKind.SPATIAL):
                group.insert(0, iv.var.name)
                break
    return [tuple(g) for g in groups]


def _accesses(sch: Schedule, block_name: str, buffer_name: str) -> list:
    block = sch.get(sch.get_block(block_name)).block
    found: list = []
    post_order_visit(block.body, lambda n: found.append(n) if isinstance(
        n, (BufferLoad, BufferStore)) and n.buffer.name == buffer_name else None)
    return found


def _used_iterators(sch: Schedule, block_name: str, buffer_name: str) -> set[str]:
    used: set[str] = set()
    for access in _accesses(sch, block_name, buffer_name):
        for index in access.indices:
            post_order_visit(index, lambda n: used.add(n.name) if isinstance(n, Var) else None)
    return used


def _is_direct(sch: Schedule, block_name: str, buffer_name: str,
               wanted: list[tuple[str, ...]]) -> bool:
    """True when every access is ``X[v1, v2, ...]`` with exactly the wanted iterators, one per
    dimension, in order."""
    if any(len(g) != 1 for g in wanted):
        return False
    names = [g[0] for g in wanted]
    return all([i.name if isinstance(i, Var) else None for i in access.indices] == names
               for access in _accesses(sch, block_name, buffer_name))


def _fuse(group: tuple[str, ...], extents: dict[str, int]) -> str:
    """``a * (eb * ec) + b * ec + c`` for a group (a, b, c), as text over iterator names."""
    terms = []
    for n, name in enumerate(group):
        stride = 1
        for later in group[n + 1:]:
            stride *= extents[later]
        terms.append(name if stride == 1 else f"{name} * {stride}")
    return " + ".join(terms)


def _lambda(params: list[str], results: list[str]) -> str:
    """Lambda text mapping ``params`` to ``results`` (expressions over the param names)."""
    letters = [_LETTERS[d] for d in range(len(params))]
    mapping = dict(zip(params, letters))

    def rename(text: str) -> str:
        return re.sub(r"[A-Za-z_][A-Za-z_0-9]*", lambda m: mapping.get(m.group(0), m.group(0)),
                      text)

    return f"lambda {', '.join(letters)}: ({', '.join(rename(r) for r in results)},)"
