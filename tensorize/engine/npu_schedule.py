"""The NPU's schedule around its GEMM intrinsic: scratchpad-sized tiles, staged operands,
data movement through the DMA intrinsics, and resets folded into the first GEMM of a tile.

The block arrives in the intrinsic's shape (``gemm_view``): iterators ``(outer..., m, n, k)``
with m, n, k multiples of the array size T. The loops become::

    for outer..., mo, no:               # one accumulator tile: tm rows x T columns
        for ko:                         # one T-deep step of the reduction
            load A[mo*tm : +tm, ko*T : +T] into npu.inp      (tm/T DMA calls)
            load B[ko*T : +T, no*T : +T] into npu.wgt
            for mt: gemm                (reset at ko == 0)
        store the accumulator tile to C (tm/T DMA calls)

Each staged buffer is compacted to one tile, so the NPU backend can place two copies of it
and overlap the next tile's transfers with the current tile's GEMMs. ``tm`` is the tallest
multiple of T dividing m whose tiles fit a bank of the input and accumulator memories (tall
GEMMs preload their weights once per tm rows), unless given.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from intrinsics import Intrinsic, Registry
from ir import Buffer, BufferLoad, BufferStore, Var
from ir.visitor import post_order_visit
from simulator import MachineConfig, load_machine
from tensorize.match.result import Match
from tensorize.schedule import Schedule


@dataclass(frozen=True, slots=True)
class NpuTiling:
    """The tile of one accumulator pass: ``rows`` (tm) output rows by the array's columns."""

    rows: int


def tile_candidates(m: int, t: int, config: MachineConfig) -> list[int]:
    """Every tm (multiple of t dividing m) whose tiles fit one bank of inp and acc."""
    limit = min(config.inp.bank_rows, config.acc.bank_rows)
    return [tm for tm in range(t, m + 1, t) if m % tm == 0 and tm <= limit]


def choose_tiling(m: int, t: int, config: MachineConfig) -> NpuTiling:
    """The tallest tile that fits (fewest weight preloads, fewest instructions)."""
    candidates = tile_candidates(m, t, config)
    return NpuTiling(max(candidates) if candidates else t)


def schedule(sch: Schedule, match: Match, extents: tuple[int, ...], registry: Registry,
             options: Mapping[str, Any]) -> None:
    """The engine's entry (see ``tensorize.engine``): tile by ``options["tiling"]`` or by
    :func:`choose_tiling` on ``options["config"]`` (default: the built-in machine)."""
    t = match.intrinsic.iter_vars[0].extent
    tiling = options.get("tiling") or choose_tiling(extents[0], t,
                                                    options.get("config") or load_machine())
    schedule_npu(sch, match.block, match.intrinsic, registry, tiling)


def schedule_npu(sch: Schedule, block_name: str, intrinsic: Intrinsic, registry: Registry,
                 tiling: NpuTiling) -> None:
    """Tile, stage and tensorize the GEMM-shaped block (module docs)."""
    t = intrinsic.iter_vars[0].extent
    block = sch.get_block(block_name)
    loops = sch.get_loops(block)
    outer, (lm, ln, lk) = loops[:-3], loops[-3:]
    m = sch.get(lm).extent
    tm = tiling.rows if m % tiling.rows == 0 else t
    mo, mt, mi = sch.split(lm, [None, tm // t, t])
    no, ni = sch.split(ln, [None, t])
    ko, ki = sch.split(lk, [None, t])
    sch.reorder(mo, no, ko, mt, mi, ni, ki)

    a, b, c = _operand_buffers(sch, block_name, intrinsic)
    scope = {o.name: o.scope for o in intrinsic.operands}
    names = [o.name for o in intrinsic.operands]
    a_stage = sch.cache_read(block, a.name, scope[names[0]])
    sch.compute_at(a_stage, ko)
    b_stage = sch.cache_read(block, b.name, scope[names[1]])
    sch.compute_at(b_stage, ko)
    c_stage = sch.cache_write(block, c.name, scope[names[2]])
    sch.reverse_compute_at(c_stage, no)
    for stage in (a_stage, b_stage):
        sch.compact_buffer(sch.get(stage).block.writes[0].buffer.name)
    sch.compact_buffer(sch.get(c_stage).block.reads[0].buffer.name)

    sch.tensorize(mi, intrinsic.name)
    reset = _reset_variant(intrinsic, registry)
    if reset is not None:
        sch.fold_init(sch.get_block(f"{block_name}_o"), reset.name)

    loads = {name: intrinsic.loads.get(name, ()) for name in names[:2]}
    stores = intrinsic.stores.get(names[2], ())
    _tensorize_copy(sch, a_stage, loads[names[0]], registry, t)
    _tensorize_copy(sch, b_stage, loads[names[1]], registry, t)
    _tensorize_copy(sch, c_stage, stores, registry, t, c.dtype)


def _operand_buffers(sch: Schedule, block_name: str, intrinsic: Intrinsic
                     ) -> tuple[Buffer, Buffer, Buffer]:
    """The kernel buffers standing for the intrinsic's A, B and C: the store is C; a load
    indexed by (m, k) is A, by (k, n) is B."""
    block = sch.get(sch.get_block(block_name)).block
    ivs = [iv.var for iv in block.iter_vars][-3:]
    store = block.body
    assert isinstance(store, BufferStore)
    found: dict[tuple[int, ...], Buffer] = {}

    def visit(node: object) -> None:
        if isinstance(node, BufferLoad) and node.buffer is not store.buffer:
            key = tuple(ivs.index(i) for i in node.indices[-2:] if isinstance(i, Var)
                        and i in ivs)
            found[key] = node.buffer

    post_order_visit(store.value, visit)
    return found[(0, 2)], found[(2, 1)], store.buffer


def _reset_variant(intrinsic: Intrinsic, registry: Registry) -> Intrinsic | None:
    """The family's intrinsic that overwrites instead of accumulating, with the same operands."""
    if intrinsic.resets:
        return None
    shape = [(o.name, o.shape, o.dtype, o.role) for o in intrinsic.operands]
    for other in registry.for_target(intrinsic.target):
        if (other.resets and other.kind == intrinsic.kind and other.family == intrinsic.family
                and [(o.name, o.shape, o.dtype, o.role) for o in other.operands] == shape):
            return other
    return None


def _tensorize_copy(sch: Schedule, stage, candidates: tuple[str, ...], registry: Registry,
                    t: int, dtype=None) -> None:
    """Split a staging copy into T-row tiles and replace each by the DMA intrinsic whose
    operands fit (the int32 or narrowing store, by the destination's dtype)."""
    loops = sch.get_loops(stage)
    rows, cols = loops[-2], loops[-1]
    if sch.get(rows).extent > t:
        _, rows = sch.split(rows, [None, t])
    for name in candidates:
        intrinsic = registry.get(name)
        if dtype is None or intrinsic.output.dtype == dtype:
            sch.tensorize(rows, name)
            return
    raise LookupError(f"no data-movement intrinsic among {', '.join(candidates)} fits")
