"""Fused indices: an index that is a mixed-radix number of iterators, and the digits that
take it apart again (what fusing loops writes, and what a transform that splits a fused
index back into its iterators needs)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from ir.arith.linear import linearize
from ir.expr import Expr, Var


def mixed_radix(index: Expr, extents: Mapping[Var, int]) -> list[tuple[int, Var, int]] | None:
    """``index`` as (coefficient, iterator, extent) digits, most significant first, when it
    is a sum of distinct iterators of ``extents`` whose coefficients are the products of the
    extents after them (``n * 64 + h * 8 + w`` over extents 2, 8, 8); else None."""
    form = linearize(index)
    if form.const != 0 or any(not isinstance(a, Var) or a not in extents
                              for a, _ in form.terms):
        return None
    digits = sorted(((c, a, extents[a]) for a, c in form.terms), key=lambda d: -d[0])
    stride = 1
    for coefficient, _, extent in reversed(digits):
        if coefficient != stride:
            return None
        stride *= extent
    return digits


def unfused(index: Expr, digits: Sequence[tuple[int, int]]) -> list[Expr]:
    """The expressions taking a fused ``index`` apart into its digits, given as
    (coefficient, extent) most significant first: the first ``index // coefficient``, the
    others also ``% extent``."""
    found: list[Expr] = []
    for position, (coefficient, extent) in enumerate(digits):
        value = index if coefficient == 1 else index // coefficient
        found.append(value if position == 0 else value % extent)
    return found
