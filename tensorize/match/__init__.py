"""Matching blocks against intrinsic descriptions: the analysis the auto-tensorizer runs
before it rewrites anything.

:func:`match_block` compares one block with one intrinsic. The block's store must be the
intrinsic's semantics up to renaming (:mod:`tensorize.match.expr_match`); then its iterators
are mapped onto the intrinsic's (:mod:`tensorize.match.iter_map`). The result is every valid
mapping, cheapest first, or a one-line reason why there is none. :func:`match_function` does
this for every block and intrinsic; :func:`tensorize.match.explain.explain` prints it.
"""

from __future__ import annotations

from collections.abc import Iterable

import ir
from intrinsics import Intrinsic, Registry
from tensorize.match.expr_match import has_reduction, match_expr
from tensorize.match.iter_map import accepted_layouts, map_iterators
from tensorize.match.result import Match, Mismatch
from tensorize.schedule import tree
from tensorize.schedule.check import arg_check, fail

__all__ = ["Match", "Mismatch", "match_block", "match_function"]


def match_block(func: ir.PrimFunc, block_name: str, intrinsic: Intrinsic, registry: Registry
                ) -> list[Match] | Mismatch:
    """Every way to compute block ``block_name`` of ``func`` with calls of ``intrinsic``.

    Returns the matches sorted by cost (calls, then padding waste, then operands to pack,
    then outer iterators), never empty; or a Mismatch with a one-line reason. ``registry``
    (the one ``intrinsic`` comes from) resolves the intrinsic's load and store intrinsics,
    whose layouts decide ``needs_pack``. Raises ScheduleError when ``func`` has no
    block ``block_name`` or ``intrinsic`` is not an Intrinsic.
    """
    arg_check(isinstance(intrinsic, Intrinsic), "match_block", "intrinsic", "an Intrinsic",
              intrinsic)
    located = tree.find_block(func, block_name)
    if located is None or not located.path:
        names = ", ".join(tree.block_names(func)) or "none"
        fail("match_block", f"function {func.name} has no block named {block_name!r}; "
                            f"blocks: {names}")
    return _match(located.node.block, intrinsic, registry)


def match_function(func: ir.PrimFunc, intrinsics: Iterable[Intrinsic], registry: Registry
                   ) -> dict[str, dict[str, list[Match] | Mismatch]]:
    """:func:`match_block` for every block of ``func`` (program order) and every intrinsic
    (the order given): ``result[block][intrinsic name]``."""
    chosen = list(intrinsics)
    for intrinsic in chosen:
        arg_check(isinstance(intrinsic, Intrinsic), "match_function", "intrinsics",
                  "Intrinsics", intrinsic)
    result: dict[str, dict[str, list[Match] | Mismatch]] = {}
    for name in tree.block_names(func):
        block = tree.find_block(func, name).node.block  # type: ignore[union-attr]
        result[name] = {i.name: _match(block, i, registry) for i in chosen}
    return result


def _match(block: ir.Block, intrinsic: Intrinsic, registry: Registry) -> list[Match] | Mismatch:
    if has_reduction(intrinsic.iter_vars) and not has_reduction(block.iter_vars):
        return Mismatch(block.name, intrinsic, "not tensorizable by a GEMM intrinsic: no reduce "
                        f"iterator (block {block.name} is elementwise, {intrinsic.name} "
                        "reduces)")
    found = match_expr(block, intrinsic)
    if isinstance(found, Mismatch):
        return found
    accepted = accepted_layouts(intrinsic, registry)
    matches: list[Match] = []
    failures: list[Mismatch] = []
    for candidate in found:
        mapped = map_iterators(block, candidate, intrinsic, accepted)
        if isinstance(mapped, Mismatch):
            failures.append(mapped)
        else:
            matches.extend(mapped)
    if not matches:
        return failures[0]  # match_expr never returns an empty list
    return sorted(matches, key=_order)


def _order(match: Match) -> tuple[object, ...]:
    """Cost first; then names, so that equal costs come out in one order whatever the order
    of the kernel's operands."""
    return (match.cost, sorted(match.buffer_map.items()), sorted(match.iter_map.items()),
            match.outer)
