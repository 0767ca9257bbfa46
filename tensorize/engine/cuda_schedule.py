"""The CUDA schedule around a WMMA intrinsic: thread-block tiles, several warps per block,
a grid of accumulator fragments per warp, and operands staged through shared memory.

The block arrives in the intrinsic's shape (``gemm_view``): iterators ``(outer..., m, n, k)``
padded to multiples of the fragment shape (tm, tn, tk). With a tiling of ``wy x wx`` warps,
``fm x fn`` fragments per warp and ``kt`` fragment steps per shared-memory stage, the loops
become::

    for outer (blockIdx.z), by (blockIdx.y), bx (blockIdx.x):
        for wy (threadIdx.z), wx (threadIdx.y), fm, fn:     # C_init
            fill_fragment(acc[fm, fn])
        for ko:                                              # BK = kt * tk deep
            A_shared <- A[by*BM : +BM, ko*BK : +BK]          # every thread of the block,
            B_shared <- B[ko*BK : +BK, bx*BN : +BN]          # 16 bytes (a vectorized loop) at once
            for wy (threadIdx.z), wx (threadIdx.y), ki:
                for fm: load_matrix_sync(A_frag[fm], A_shared tile)
                for fn: load_matrix_sync(B_frag[fn], B_shared tile)
                for fm, fn: mma_sync(acc[fm, fn], A_frag[fm], B_frag[fn])
        for wy (threadIdx.z), wx (threadIdx.y), fm, fn:
            store_matrix_sync(C tile, acc[fm, fn])
            [epilogue over the C tile]      # when elementwise blocks follow (C is then a
                                            # one-tile staging buffer in shared memory)

with ``BM = wy * fm * tm`` and ``BN = wx * fn * tn``. Every step is a schedule primitive:
split/reorder, cache_read into ``shared`` and then into the fragment scopes, cache_write into
``wmma.accumulator``, compute_at/reverse_compute_at, compact_buffer, decompose_reduction,
bind, and tensorize of the compute tile and of the fragment loads, fill and store. The copies
into shared memory stay plain loop nests: the CUDA backend spreads them over the block's
threads. The accumulator is one block tile in the IR; the backend keeps in each warp only the
fragments that warp's threads touch.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from intrinsics import Intrinsic, Registry
from ir import BufferLoad, BufferStore, IterKind, ScheduleError, Var
from ir.visitor import post_order_visit
from tensorize.match.result import Match
from tensorize.schedule import Schedule, tree

__all__ = ["CudaTiling", "choose_tiling", "schedule", "schedule_cuda"]


@dataclass(frozen=True, slots=True)
class CudaTiling:
    """One thread block's work: ``warps`` (along m, along n), ``fragments`` per warp (along
    m, along n) and ``k_steps`` fragment-deep steps per shared-memory stage."""

    warps: tuple[int, int]
    fragments: tuple[int, int]
    k_steps: int

    def block_tile(self, tm: int, tn: int, tk: int) -> tuple[int, int, int]:
        """(BM, BN, BK): the tile of C one thread block computes and the stage depth."""
        return (self.warps[0] * self.fragments[0] * tm, self.warps[1] * self.fragments[1] * tn,
                self.k_steps * tk)


def _largest_divisor(count: int, choices: tuple[int, ...]) -> int:
    return next(c for c in choices if count % c == 0)


def choose_tiling(extents: tuple[int, int, int], shape: tuple[int, int, int],
                  elem_bytes: int) -> CudaTiling:
    """The tiling for padded extents (m, n, k) and fragment shape (tm, tn, tk): block tiles
    of up to 8 x 8 fragments, split over 2 x 4 warps (2 x 2 fragments per warp when the
    tile is 4 x 4), and 32-deep stages for 2-byte inputs (a 1-byte input's second 16-column
    step would not be 32-byte aligned for load_matrix_sync in row-major shared memory)."""
    m_tiles, n_tiles, k_tiles = (e // s for e, s in zip(extents, shape))
    bm = _largest_divisor(m_tiles, (8, 4, 2, 1))
    bn = _largest_divisor(n_tiles, (8, 4, 2, 1))
    wy = 2 if bm >= 2 else 1
    wx = 4 if bn >= 8 else (2 if bn >= 2 else 1)
    kt = _largest_divisor(k_tiles, (2, 1)) if elem_bytes >= 2 else 1
    return CudaTiling((wy, wx), (bm // wy, bn // wx), kt)


def schedule(sch: Schedule, match: Match, extents: tuple[int, ...], registry: Registry,
             options: Mapping[str, Any]) -> None:
    """The engine's entry (see ``tensorize.engine``): tile by ``options["tiling"]`` when it
    is a :class:`CudaTiling`, else by :func:`choose_tiling`."""
    intrinsic = match.intrinsic
    shape = tuple(iv.extent for iv in intrinsic.iter_vars)
    tiling = options.get("tiling")
    if not isinstance(tiling, CudaTiling):
        elem = intrinsic.operands[0].dtype.bits // 8
        tiling = choose_tiling(tuple(extents[-3:]), shape, elem)
    schedule_cuda(sch, match.block, intrinsic, registry, tiling)


def schedule_cuda(sch: Schedule, block_name: str, intrinsic: Intrinsic, registry: Registry,
                  tiling: CudaTiling) -> None:
    """Tile, stage, bind and tensorize the GEMM-shaped block ``block_name`` (module docs).

    Raises ScheduleError when a primitive refuses a step, or when the block keeps a
    reduction outside the tile loops (its accumulator would be finished across blocks).
    """
    tm, tn, tk = (iv.extent for iv in intrinsic.iter_vars)
    (wy, wx), (fm, fn), kt = tiling.warps, tiling.fragments, tiling.k_steps
    block = sch.get_block(block_name)
    realize = sch.get(block)
    outer_kinds = [iv.kind for iv in realize.block.iter_vars][:-3]
    if IterKind.REDUCE in outer_kinds:
        raise ScheduleError("cuda schedule", f"block {block_name} reduces over a loop outside "
                            "the fragment tile; a thread block cannot finish its accumulator")
    loops = sch.get_loops(block)
    outer, (lm, ln, lk) = loops[:-3], loops[-3:]
    by, ty, mf, mi = sch.split(lm, [None, wy, fm, tm])
    bx, tx, nf, ni = sch.split(ln, [None, wx, fn, tn])
    ko, kf, ki = sch.split(lk, [None, kt, tk])
    sch.reorder(by, bx, ko, ty, tx, kf, mf, nf, mi, ni, ki)

    a, b, c = _operand_buffers(sch, block_name)
    names = [o.name for o in intrinsic.operands]
    scope = {o.name: o.scope for o in intrinsic.operands}
    a_shared = sch.cache_read(block, a, "shared")
    sch.compute_at(a_shared, ko)
    b_shared = sch.cache_read(block, b, "shared")
    sch.compute_at(b_shared, ko)
    a_frag = sch.cache_read(block, _written(sch, a_shared), scope[names[0]])
    sch.compute_at(a_frag, kf)
    b_frag = sch.cache_read(block, _written(sch, b_shared), scope[names[1]])
    sch.compute_at(b_frag, kf)
    epilogue = _fuse_epilogue_chain(sch, block, c)
    if epilogue is not None:
        # The accumulator goes to a staging tile in shared memory, which the epilogue reads.
        copy = sch.cache_write(block, c, "shared")
        c = sch.get(copy).block.reads[0].buffer.name
        sch.compute_inline(copy)
    c_store = sch.cache_write(block, c, scope[names[2]])
    sch.reverse_compute_at(c_store, bx)
    for stage in (a_shared, b_shared, a_frag, b_frag):
        sch.compact_buffer(_written(sch, stage))
    for stage in (a_shared, b_shared):
        _vectorize_copy(sch, stage)
    sch.compact_buffer(sch.get(c_store).block.reads[0].buffer.name)

    init = sch.decompose_reduction(block, ko)
    _warp_tile(sch, init, _tile_loops(sch, init, bx), tiling, (tm, tn),
               [registry.get(n) for n in intrinsic.fill[names[2]]])
    _warp_tile(sch, c_store, _tile_loops(sch, c_store, bx), tiling, (tm, tn),
               [registry.get(n) for n in intrinsic.stores[names[2]]], epilogue)
    if epilogue is not None:
        sch.compact_buffer(c)
    _fragment_loads(sch, a_frag, tm, [registry.get(n) for n in intrinsic.loads[names[0]]])
    _fragment_loads(sch, b_frag, tk, [registry.get(n) for n in intrinsic.loads[names[1]]])
    sch.tensorize(mi, intrinsic)
    sch.bind(ty, "threadIdx.z")
    sch.bind(tx, "threadIdx.y")
    sch.unroll(mf)
    sch.unroll(nf)
    sch.bind(by, "blockIdx.y")
    sch.bind(bx, "blockIdx.x")
    if outer:
        batch = sch.fuse(*outer) if len(outer) > 1 else outer[0]
        sch.bind(batch, "blockIdx.z")


def _written(sch: Schedule, stage) -> str:
    return sch.get(stage).block.writes[0].buffer.name


def _readers(sch: Schedule, buffer: str) -> list[str]:
    """The blocks reading ``buffer`` other than those writing it (an accumulation)."""
    found = []
    for name in tree.block_names(sch.func):
        block = sch.get(sch.get_block(name)).block
        if (any(r.buffer.name == buffer for r in block.reads)
                and not any(w.buffer.name == buffer for w in block.writes)):
            found.append(name)
    return found


def _elementwise_reader(sch: Schedule, buffer: str):
    """The one block reading ``buffer``, when it maps it element by element: a spatial store
    at its own iterators (over the whole output) reading ``buffer`` at the same iterators,
    possibly permuted (a reindexed GEMM result is transposed back this way)."""
    readers = _readers(sch, buffer)
    if len(readers) != 1:
        return None
    handle = sch.get_block(readers[0])
    block = sch.get(handle).block
    store = block.body
    if (not isinstance(store, BufferStore) or block.init is not None
            or any(iv.kind is IterKind.REDUCE for iv in block.iter_vars)):
        return None
    ivs = tuple(iv.var for iv in block.iter_vars)
    if store.indices != ivs or [iv.extent for iv in block.iter_vars] != list(
            store.buffer.shape):
        return None
    loads: list[BufferLoad] = []
    post_order_visit(store.value, lambda n: loads.append(n) if isinstance(n, BufferLoad)
                     and n.buffer.name == buffer else None)
    if not loads or any(len(l.indices) != len(ivs) or set(l.indices) != set(ivs)
                        for l in loads):
        return None
    return handle


def _fuse_epilogue_chain(sch: Schedule, block, c: str):
    """The elementwise blocks after the GEMM (bias, activation, requantisation, cast), as
    one block reading the GEMM's result ``c``: each but the last is inlined into the next.
    None when no such block follows, or ``c`` is a parameter (its values must reach the
    caller, so it cannot become a staging tile)."""
    if c not in {b.name for b in sch.func.allocs}:
        return None
    epilogue = _elementwise_reader(sch, c)
    if epilogue is None:
        return None
    while True:
        out = _written(sch, epilogue)
        following = _elementwise_reader(sch, out)
        if following is None or out not in {b.name for b in sch.func.allocs}:
            return epilogue
        sch.compute_inline(epilogue)
        epilogue = sch.get_block(sch.get(following).block.name)


def _vectorize_copy(sch: Schedule, stage) -> None:
    """Split the innermost loop of a copy into shared memory by the elements of 16 bytes and
    mark the inner loop vectorized, so the backend moves each row piece with one 16-byte
    load and store; a row whose extent is not a multiple of 16 bytes stays scalar."""
    lanes = 16 // max(sch.get(stage).block.writes[0].buffer.dtype.bits // 8, 1)
    inner = sch.get_loops(stage)[-1]
    if sch.get(inner).extent % lanes != 0:
        return
    _, vector = sch.split(inner, [None, lanes])
    sch.vectorize(vector)


def _tile_loops(sch: Schedule, stage, bx) -> tuple[list, list]:
    """The loops of a block-tile nest under ``bx``, as (row loops, column loops): each loop
    feeds the stage's row (second-to-last) iterator or its column iterator."""
    realize = sch.get(stage)
    loops = sch.get_loops(stage)
    below = loops[[sch.get(l).var for l in loops].index(sch.get(bx).var) + 1:]
    rows, cols = [], []
    for loop in below:
        var = sch.get(loop).var
        used: list[bool] = []
        post_order_visit(realize.bindings[-2], lambda n: used.append(n is var))
        (rows if any(used) else cols).append(loop)
    return rows, cols


def _warp_tile(sch: Schedule, stage, loops: tuple[list, list], tiling: CudaTiling,
               shape: tuple[int, int], candidates: list[Intrinsic], epilogue=None) -> None:
    """Bring a block-tile nest (its row and column loops) to (warp row, warp column,
    fragment row, fragment column, tile rows, tile columns), tensorize each fragment tile
    with the first candidate that fits and bind the warp loops. An ``epilogue`` reading what
    the nest stores is moved after each fragment's store, over that fragment's tile."""
    rows, cols = loops
    sch.reorder(*rows, *cols)
    row = sch.fuse(*rows) if len(rows) > 1 else rows[0]
    col = sch.fuse(*cols) if len(cols) > 1 else cols[0]
    wr, fr, ri = sch.split(row, [tiling.warps[0], tiling.fragments[0], shape[0]])
    wc, fc, _ = sch.split(col, [tiling.warps[1], tiling.fragments[1], shape[1]])
    sch.reorder(wr, wc, fr, fc, ri)
    if epilogue is not None:
        sch.reverse_compute_at(epilogue, fc)
    _tensorize_first(sch, ri, candidates)
    sch.bind(wr, "threadIdx.z")
    sch.bind(wc, "threadIdx.y")
    sch.unroll(fr)
    sch.unroll(fc)


def _fragment_loads(sch: Schedule, stage, rows: int, candidates: list[Intrinsic]) -> None:
    """Split a fragment-load nest into fragment tiles and tensorize each with a load."""
    loops = sch.get_loops(stage)
    row_loop, col_loop = loops[-2:]
    outer_rows, inner_rows = sch.split(row_loop, [None, rows])
    col_tiles = candidates[0].operands[0].shape[1]
    outer_cols, inner_cols = sch.split(col_loop, [None, col_tiles])
    sch.reorder(outer_rows, outer_cols, inner_rows, inner_cols)
    _tensorize_first(sch, inner_rows, candidates)
    sch.unroll(outer_rows)
    sch.unroll(outer_cols)


def _tensorize_first(sch: Schedule, loop, candidates) -> None:
    refusals = []
    for intrinsic in candidates:
        try:
            sch.tensorize(loop, intrinsic)
            return
        except ScheduleError as err:
            refusals.append(str(err))
    raise ScheduleError("cuda schedule", "; ".join(refusals))


def _operand_buffers(sch: Schedule, block_name: str) -> tuple[str, str, str]:
    """Names of the kernel buffers standing for the intrinsic's A, B and C: the store is C; a
    load indexed by (m, k) is A, by (k, n) is B."""
    block = sch.get(sch.get_block(block_name)).block
    ivs = [iv.var for iv in block.iter_vars][-3:]
    store = block.body
    if not isinstance(store, BufferStore):
        raise ScheduleError("cuda schedule", f"block {block_name} is not a single store")
    found: dict[tuple[int, ...], str] = {}

    def visit(node: object) -> None:
        if isinstance(node, BufferLoad) and node.buffer is not store.buffer:
            key = tuple(ivs.index(i) for i in node.indices[-2:] if isinstance(i, Var)
                        and i in ivs)
            found[key] = node.buffer.name

    post_order_visit(store.value, visit)
    return found[(0, 2)], found[(2, 1)], store.buffer.name
