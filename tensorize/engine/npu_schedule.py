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

A reduction one tile deep (K <= T) calls only the resetting GEMM.

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
from ir import Buffer, BufferLoad, BufferStore, IterKind, ScheduleError, Var
from ir.visitor import post_order_visit
from simulator import MachineConfig, load_machine
from tensorize.match.result import Match
from tensorize.schedule import Schedule, tree


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
                 tiling: NpuTiling, fuse_epilogues: bool = True) -> None:
    """Tile, stage and tensorize the GEMM-shaped block (module docs); with
    ``fuse_epilogues``, also the elementwise blocks after it that the vector unit can do."""
    t = intrinsic.iter_vars[0].extent
    block = sch.get_block(block_name)
    loops = sch.get_loops(block)
    lm, ln, lk = loops[-3:]
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
    acc = sch.get(c_stage).block.reads[0].buffer.name
    sch.compact_buffer(acc)
    store_stage, store_done = c_stage, False
    if fuse_epilogues:
        store_stage, store_done = _fuse_epilogues(sch, c_stage, acc, no, registry, t)

    _tensorize_gemm(sch, mi, block_name, intrinsic, registry)

    loads = {name: intrinsic.loads.get(name, ()) for name in names[:2]}
    stores = intrinsic.stores.get(names[2], ())
    _tensorize_copy(sch, a_stage, loads[names[0]], registry, t)
    _tensorize_copy(sch, b_stage, loads[names[1]], registry, t)
    if not store_done:
        dtype = sch.get(store_stage).block.writes[0].buffer.dtype
        _tensorize_copy(sch, store_stage, stores, registry, t, dtype)


def _fuse_epilogues(sch: Schedule, c_stage, acc: str, tile_loop, registry: Registry, t: int
                    ) -> tuple[object, bool]:
    """Move the elementwise blocks that consume the GEMM's result onto the accumulator tile,
    while the vector unit or a store intrinsic can do them: each is put under the tile loop,
    reads the tile on chip (the write-back is inlined into it), and then either is itself a
    store (``npu_store_acc_i8`` narrows with saturation) or computes in place on the tile
    with a vector instruction, its other inputs (a bias row) loaded beside the tile.

    Returns the block that now writes the result to DRAM and whether it is already
    tensorized. An epilogue no instruction computes ends the chain; it and what follows run
    as before (on the host), so fusing never changes what is computed.
    """
    # The instruction with the fewest operands first: relu before max-with-an-immediate.
    vectors = sorted((i for i in registry.for_target("npu")
                      if i.kind == "compute" and not i.reduce_vars()),
                     key=lambda i: len(i.operands))
    stores = [i for i in registry.for_target("npu") if i.kind == "store"]
    stage = c_stage
    while True:
        epilogue = _elementwise_consumer(sch, stage)
        if epilogue is None:
            return stage, False
        saved_func, saved_steps = sch.func, list(sch.trace.steps)
        try:
            sch.reverse_compute_at(epilogue, tile_loop)
            sch.compute_inline(stage)
            if _tensorize_any(sch, epilogue, stores, t):
                return epilogue, True
            out = sch.get(epilogue).block.writes[0].buffer
            extra = [r.buffer.name for r in sch.get(epilogue).block.reads
                     if r.buffer.name != acc and r.buffer.scope == "global"]
            loads = []
            for name in extra:
                load = sch.cache_read(epilogue, name, "npu.acc")
                sch.compute_at(load, tile_loop)
                sch.compact_buffer(sch.get(load).block.writes[0].buffer.name)
                loads.append(load)
            write_back = sch.cache_write(epilogue, out.name, "npu.acc")
            sch.reverse_compute_at(write_back, tile_loop)
            sch.compact_buffer(sch.get(epilogue).block.writes[0].buffer.name)
            sch.write_in_place(epilogue, acc)
            if not _tensorize_any(sch, epilogue, vectors, t):
                raise ScheduleError("fuse epilogue", "no vector instruction computes it")
            for load in loads:
                _tensorize_row_load(sch, load, registry)
        except ScheduleError:
            sch.func = saved_func
            sch.trace.steps[:] = saved_steps
            return stage, False
        stage = write_back


def _elementwise_consumer(sch: Schedule, stage):
    """The one block reading what ``stage`` writes, when it is elementwise over it: one
    spatial store reading the written buffer at the indices it stores to."""
    written = sch.get(stage).block.writes[0].buffer
    readers = [b for b in tree.block_names(sch.func)
               if any(r.buffer is written for r in sch.get(sch.get_block(b)).block.reads)]
    if len(readers) != 1:
        return None
    block = sch.get(sch.get_block(readers[0])).block
    store = block.body
    if not isinstance(store, BufferStore) or block.init is not None or any(
            iv.kind is IterKind.REDUCE for iv in block.iter_vars):
        return None
    loads: list[BufferLoad] = []
    post_order_visit(store.value, lambda n: loads.append(n) if isinstance(n, BufferLoad)
                     and n.buffer is written else None)
    if not loads or any(l.indices != store.indices for l in loads):
        return None
    return sch.get_block(readers[0])


def _tensorize_any(sch: Schedule, block, candidates: list[Intrinsic], t: int) -> bool:
    """Tile the block's rows by ``t`` and tensorize it with the first candidate that fits."""
    loops = sch.get_loops(block)
    rows = loops[-2]
    saved_func, saved_steps = sch.func, list(sch.trace.steps)
    if sch.get(rows).extent > t:
        _, rows = sch.split(rows, [None, t])
    for intrinsic in candidates:
        try:
            sch.tensorize(rows, intrinsic)
            return True
        except ScheduleError:
            continue
    sch.func = saved_func
    sch.trace.steps[:] = saved_steps
    return False


def _tensorize_row_load(sch: Schedule, load, registry: Registry) -> None:
    """A one-dimensional staging copy (a bias row) becomes one row load."""
    loop = sch.get_loops(load)[-1]
    for intrinsic in registry.for_target("npu"):
        if intrinsic.kind == "load" and len(intrinsic.output.shape) == 1:
            sch.tensorize(loop, intrinsic)
            return
    raise ScheduleError("fuse epilogue", "no intrinsic loads one accumulator row")


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


def _tensorize_gemm(sch: Schedule, tile_loop, block_name: str, intrinsic: Intrinsic,
                    registry: Registry) -> None:
    """Replace the GEMM tile under ``tile_loop`` by ``intrinsic``, its first step by the
    resetting variant (``fold_init``); or, when the whole reduction fits one tile, by the
    resetting variant alone.

    When the reduction is one tile deep (K <= T after padding), no reduce loop stays outside
    the tile, so ``blockize`` keeps the init inside it and the accumulating intrinsic is
    refused: every call then starts a new accumulator tile, which is what the resetting
    variant does. Raises the accumulating intrinsic's refusal, with the resetting variant's,
    when neither fits.
    """
    reset = _reset_variant(intrinsic, registry)
    try:
        sch.tensorize(tile_loop, intrinsic)
    except ScheduleError as accumulating:
        if reset is None:
            raise
        try:
            sch.tensorize(tile_loop, reset.name)
        except ScheduleError as resetting:
            reasons = [err.message.removeprefix("tensorize: ")
                       for err in (accumulating, resetting)]
            raise ScheduleError("tensorize", f"neither {intrinsic.name} nor {reset.name} fits: "
                                f"{reasons[0]}; {reasons[1]}",
                                accumulating.nodes + resetting.nodes, accumulating.loc) from None
        return
    if reset is not None:
        sch.fold_init(sch.get_block(f"{block_name}_o"), reset)


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
    rows = loops[-2]
    if sch.get(rows).extent > t:
        _, rows = sch.split(rows, [None, t])
    for name in candidates:
        intrinsic = registry.get(name)
        if dtype is None or intrinsic.output.dtype == dtype:
            sch.tensorize(rows, intrinsic)
            return
    raise LookupError(f"no data-movement intrinsic among {', '.join(candidates)} fits")
