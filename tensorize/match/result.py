"""What matching a block against an intrinsic finds: one :class:`Match` per valid mapping, or
one :class:`Mismatch` saying why there is none."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from intrinsics import Intrinsic
from intrinsics.model import frozen_mapping


@dataclass(frozen=True, slots=True)
class Match:
    """One way to compute block ``block`` with calls of ``intrinsic``.

    ``buffer_map``: kernel buffer name -> the intrinsic operand it becomes (injective).
    ``iter_map``: intrinsic iterator name -> the block iterators fused onto it, outermost
    first (the order in which they index the operands' dimensions).
    ``outer``: block iterators that stay loops around the calls, in declaration order; unit
    (extent-1) iterators appear nowhere, except one in ``iter_map`` that spans an intrinsic
    iterator no other block iterator can (a 1 x N x K GEMM's row, padded to the tile).
    ``extents``: intrinsic iterator -> the product of its block iterators' extents.
    ``padded_extents``: those extents rounded up to a multiple of the intrinsic's extent.
    ``calls``: intrinsic calls needed (outer iterations times tiles).
    ``waste``: the fraction of the calls' work spent on padding, in [0, 1).
    ``layouts``: operand -> how the kernel's buffer lays out the operand's tile:
    ``row_major`` (last dimension contiguous), ``col_major`` (first dimension contiguous), or
    None when the tile is no strided window of the buffer (im2col, a transposed vector ...).
    ``needs_pack``: operand -> True when that layout is not one the intrinsic or its load /
    store intrinsics accept, so the data must be repacked (reindexed) first.
    """

    block: str
    intrinsic: Intrinsic
    buffer_map: Mapping[str, str]
    iter_map: Mapping[str, tuple[str, ...]]
    outer: tuple[str, ...]
    extents: Mapping[str, int]
    padded_extents: Mapping[str, int]
    calls: int
    waste: float
    layouts: Mapping[str, str | None]
    needs_pack: Mapping[str, bool]

    def __post_init__(self) -> None:
        for name in ("buffer_map", "iter_map", "extents", "padded_extents", "layouts",
                     "needs_pack"):
            object.__setattr__(self, name, frozen_mapping(getattr(self, name)))

    @property
    def packed(self) -> tuple[str, ...]:
        """The operands that need packing, in the intrinsic's declared order."""
        return tuple(o.name for o in self.intrinsic.operands if self.needs_pack.get(o.name))

    @property
    def cost(self) -> tuple[int, float, int, int]:
        """What matches are sorted by: calls, then padding waste, then operands to pack,
        then iterators left outer."""
        return self.calls, self.waste, len(self.packed), len(self.outer)


@dataclass(frozen=True, slots=True)
class Mismatch:
    """Why block ``block`` cannot be computed with ``intrinsic``: ``reason`` is one line."""

    block: str
    intrinsic: Intrinsic
    reason: str
