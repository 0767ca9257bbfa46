"""Grouped and depthwise convolutions on the CUDA tensor cores.

A grouped convolution, channels-last with the group folded into the channel axes (as the
suite and the ONNX importer write it), reads its input channel as ``o // og * cg + rc``::

    conv[n, h, w, o] += X[n, h + rh, w + rw, o // og * cg + rc] * W[rh, rw, rc, o]

No GEMM intrinsic matches it: the output channel ``o`` indexes the input too, through the
group. :func:`reshape` gives the block the iterators of a batched GEMM, the group ``g`` as a
batch (fused with the first spatial iterator, a convolution's batch) and ``oi`` the channel
within it (``transform_block_layout``)::

    conv[n, h, w, g * og + oi] += X[n, h + rh, w + rw, g * cg + rc] * W[rh, rw, rc, g * og + oi]

which matches with M the pixels (or ``oi``), N ``oi`` (or the pixels), K ``(rh, rw, rc)`` and
the group outside the tile: the CUDA schedule binds it to ``blockIdx.z``, one GEMM per group.

A depthwise convolution (one channel per group: ``og = cg = 1``, the channel indexes input,
weight and output alike) would be a GEMM of ``pixels x 1 x kh * kw`` per channel. It is
refused, with the figures that justify it (:func:`depthwise_figures`): padded to a fragment
it uses a few percent of the MACs issued, and the layer does ``kh * kw`` MACs per input byte,
so memory, not arithmetic, bounds it on any unit; it runs as a plain CUDA kernel.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from intrinsics import Intrinsic
from ir import BinOp, Block, BufferLoad, BufferStore, IntImm, IterKind, ScheduleError, Var
from ir.visitor import post_order_visit
from tensorize.schedule import Schedule

__all__ = ["DepthwiseFigures", "Grouping", "depthwise_figures", "grouping", "reshape"]

PRIMITIVE = "cuda grouped convolution"


@dataclass(frozen=True, slots=True)
class Grouping:
    """A grouped block: its output-channel iterator (position ``channel`` among the block's
    iterators, extent ``groups * per_group``), ``per_group`` output channels a group, and the
    spatial iterator (position ``batch``) the group is fused with."""

    channel: int
    groups: int
    per_group: int
    batch: int


@dataclass(frozen=True, slots=True)
class DepthwiseFigures:
    """What a depthwise block would cost on the tensor cores: per channel a GEMM of
    ``pixels x 1 x window`` (window = kh * kw); on a ``fragment`` (m, n, k) it issues
    ``useful`` of its MACs usefully (k padded, one of n columns); grouping ``fragment[1]``
    channels with diagonal weight tiles (the NPU's way) ``diagonal``; and the layer does
    ``window`` MACs per input byte (``macs_per_byte``), which is what bounds it."""

    channels: int
    pixels: int
    window: int
    fragment: tuple[int, int, int]
    useful: float
    diagonal: float
    macs_per_byte: float

    def reason(self) -> str:
        """The refusal, one line with the figures."""
        m, n, k = self.fragment
        return (f"depthwise (one channel per group, {self.channels} channels) is not "
                f"tensorized on cuda: a channel is a {self.pixels} x 1 x {self.window} GEMM; "
                f"on the {m}x{n}x{k} fragment it issues {self.useful:.1%} of the MACs usefully "
                f"({self.window} of {_padded(self.window, k)} k, 1 of {n} columns), "
                f"{self.diagonal:.1%} with {n} channels in diagonal weight tiles, and the layer "
                f"does {self.macs_per_byte:.0f} MACs per input byte: memory-bound on any unit, "
                "so it runs as a CUDA-core kernel")


def grouping(block: Block) -> Grouping | None:
    """The grouping of a reduction ``block`` whose loads read a spatial iterator ``o`` as
    ``o // og`` (1 < og < extent, og dividing it) and that has another spatial iterator to
    fuse the group with; None otherwise (one such ``o // og`` at most)."""
    if block.init is None or not any(iv.kind is IterKind.REDUCE for iv in block.iter_vars):
        return None
    spatial = {iv.var: n for n, iv in enumerate(block.iter_vars)
               if iv.kind is IterKind.SPATIAL}
    found = set()

    def visit(node: object) -> None:
        if (isinstance(node, BinOp) and node.op == "floordiv" and isinstance(node.a, Var)
                and node.a in spatial and isinstance(node.b, IntImm)):
            found.add((spatial[node.a], node.b.value))

    for load in _loads(block):
        for index in load.indices:
            post_order_visit(index, visit)
    if len(found) != 1:
        return None
    (channel, per_group), = found
    extent = block.iter_vars[channel].extent
    others = [n for n in spatial.values() if n != channel]
    if not 1 < per_group < extent or extent % per_group or not others:
        return None
    return Grouping(channel, extent // per_group, per_group, others[0])


def depthwise_figures(block: Block, candidates: Sequence[Intrinsic]) -> DepthwiseFigures | None:
    """The figures of a depthwise reduction ``block`` (a spatial iterator indexing the stored
    buffer and every loaded one, as their last index, and reduce iterators: the window) on
    the candidate fragment that wastes least on it (of the candidates taking its input's
    dtype, when there are such); None when ``block`` is not depthwise or no candidate is a
    3-iterator GEMM."""
    store = block.body
    loads = _loads(block)
    gemms = [i for i in candidates if len(i.iter_vars) == 3]
    typed = [i for i in gemms if loads and i.operands[0].dtype == loads[0].buffer.dtype]
    fragments = [tuple(iv.extent for iv in i.iter_vars) for i in typed or gemms]
    if not isinstance(store, BufferStore) or block.init is None or not fragments:
        return None
    channel = store.indices[-1]
    window = [iv for iv in block.iter_vars if iv.kind is IterKind.REDUCE]
    if (not isinstance(channel, Var) or not window or not loads
            or any(load.indices[-1] is not channel for load in loads)):
        return None
    extents = {iv.var: iv.extent for iv in block.iter_vars}
    channels = extents[channel]
    size = math.prod(extents.values()) // math.prod(iv.extent for iv in window)
    taps = math.prod(iv.extent for iv in window)
    # The most favourable fragment, so that the refusal does not rest on a poor choice.
    m, n, k = max(sorted(fragments), key=lambda f: taps / _padded(taps, f[2]) / f[1])
    useful = taps / _padded(taps, k) / n
    diagonal = n * taps / _padded(n * taps, k) / n
    read = sum(math.prod(load.buffer.shape) * load.buffer.dtype.bits // 8 for load in loads)
    macs = size * taps
    return DepthwiseFigures(channels, size // channels, taps, (m, n, k), useful, diagonal,
                            macs / read)


def reshape(sch: Schedule, block_name: str, candidates: list[Intrinsic],
            options: Mapping[str, Any]) -> bool:
    """The engine's hook for a block no GEMM matches (see ``tensorize.engine.RESHAPES``): a
    grouped convolution becomes a batched GEMM over its groups (module docs) and True is
    returned; False, with ``sch`` unchanged, for a block that is not grouped. A depthwise
    block raises ScheduleError with :meth:`DepthwiseFigures.reason`."""
    handle = sch.get_block(block_name)
    block = sch.get(handle).block
    found = grouping(block)
    if found is None:
        figures = depthwise_figures(block, candidates)
        if figures is not None:
            raise ScheduleError(PRIMITIVE, figures.reason())
        return False
    names = [f"v{n}" for n in range(len(block.iter_vars))]
    targets = list(names)
    channel, batch = names[found.channel], names[found.batch]
    # The group joins the batch (one outer iterator): giving it one of its own would add an
    # iterator, and the batch and the group both index every operand.
    targets[found.batch] = f"{batch} * {found.groups} + {channel} // {found.per_group}"
    targets[found.channel] = f"{channel} % {found.per_group}"
    first = targets.pop(found.batch)
    sch.transform_block_layout(handle, f"lambda {', '.join(names)}: "
                                       f"({first}, {', '.join(targets)})")
    return True


def _loads(block: Block) -> list[BufferLoad]:
    """The loads of the block's body other than of the buffer it stores (the accumulation)."""
    store = block.body
    stored = store.buffer if isinstance(store, BufferStore) else None
    found: list[BufferLoad] = []
    post_order_visit(block.body, lambda n: found.append(n) if isinstance(n, BufferLoad)
                     and n.buffer is not stored else None)
    return found


def _padded(value: int, multiple: int) -> int:
    return -(-value // multiple) * multiple
