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

An 8-bit B is first stored as n rows of k in global memory (its producer's layout changed,
or one copy): the tiles then copy it 16 bytes of k at a time, and the backend keeps its
shared stage transposed and loads its fragments column-major, as the tensor cores read B.
An operand that is an NHWC convolution's im2col (or dense's transposed input) is not
written at all: its copy is folded into the tiles' copy into shared memory (implicit GEMM),
and so is the zero padding of its input (the copy becomes a zero-filling one); the
transpose of a reindexed result back to the convolution's output becomes the GEMM's
epilogue.
"""

from __future__ import annotations

import functools
import math
import operator
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from intrinsics import Intrinsic, Registry
from intrinsics.gpu_target import GpuArchitecture
from ir import (BufferLoad, BufferStore, Expr, IntImm, IterKind, PrimFunc, ScheduleError,
                Select, Var)
from ir.arith import linearize, mixed_radix, unfused
from ir.visitor import post_order_visit, vars_of
from tensorize.match.result import Match
from tensorize.schedule import Schedule, tree
from tensorize.schedule.index_map import IndexMap

__all__ = ["TENSOR_SPEEDUP", "UNIT_MACS", "CudaTiling", "TensorPipe", "TilingFigures",
           "TilingTrial", "choose_family", "choose_tiling", "estimate", "fuse_epilogue_chain",
           "instruction_macs", "mapping_cycles", "model_cycles", "narrow_inputs", "schedule_cuda",
           "search_tilings", "sm_number", "tensor_pipe", "tiling_candidates"]


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
                  elem_bytes: int, narrow: bool = False) -> CudaTiling:
    """The tiling for padded extents (m, n, k) and fragment shape (tm, tn, tk): where the
    extents take 128 x 256 blocks, CUTLASS's 128 x 256 block of 2 x 4 warps of 64 x 64 (4 x 4
    WMMA fragments of 16 x 16, or 4 x 8 mma.sync ones of 16 x 8; the static search's best for
    large GEMMs), or, for ``narrow`` inputs (:func:`narrow_inputs`), a 128 x 128 block of
    warps of 64 x 32; else block tiles of up to 8 x 8
    fragments, split over 2 x 4 warps (2 x 2 fragments per warp when the tile is 4 x 4);
    and 2 fragment steps per stage where they divide k: for 2-byte inputs
    always, for 1-byte inputs when the k loop keeps at least 4 steps for the pipeline (the
    backend's 16-byte panels keep each int8 tile 32-byte aligned); else 1."""
    m_tiles, n_tiles, k_tiles = (e // s for e, s in zip(extents, shape))
    if elem_bytes >= 2:
        kt = _largest_divisor(k_tiles, (2, 1))
    else:
        kt = 2 if k_tiles % 2 == 0 and k_tiles // 2 >= 4 else 1
    tm, tn, _ = shape
    warp_n = 32 if narrow else 64
    if extents[0] % 128 == 0 and extents[1] % (4 * warp_n) == 0 and 64 % tm == 0 and \
            warp_n % tn == 0:
        return CudaTiling((2, 4), (64 // tm, warp_n // tn), kt)
    bm = _largest_divisor(m_tiles, (8, 4, 2, 1))
    bn = _largest_divisor(n_tiles, (8, 4, 2, 1))
    wy = 2 if bm >= 2 else 1
    wx = 4 if bn >= 8 else (2 if bn >= 2 else 1)
    return CudaTiling((wy, wx), (bm // wy, bn // wx), kt)


def narrow_inputs(intrinsic: Intrinsic) -> bool:
    """Whether an input of ``intrinsic`` is of a type narrower than int8 or an 8-bit float.
    A 64 x 64 warp tile of such an instruction leaves ptxas no registers to spare: int4's
    fragments are loaded and packed a lane at a time (255 registers a thread on sm_80 at
    256^3), and sm_90, which has neither instruction, runs each int4 ``mma.sync`` as a
    software routine and each fp8 one as two f16 HMMAs on converted fragments with a second
    accumulator, and spills (docs/cuda_backend.md, *Narrow inputs*)."""
    return any(o.dtype.bits < 8 or (o.dtype.is_float and o.dtype.bits == 8)
               for o in intrinsic.inputs)


def schedule_cuda(sch: Schedule, block_name: str, intrinsic: Intrinsic, registry: Registry,
                  tiling: CudaTiling) -> None:
    """Tile, stage, bind and tensorize the GEMM-shaped block ``block_name`` (module docs).

    Raises ScheduleError when a primitive refuses a step, when the block keeps a
    reduction outside the tile loops (its accumulator would be finished across blocks), or
    for a warpgroup intrinsic (wgmma: :mod:`.cuda_hopper`).
    """
    if "warpgroup" in intrinsic.params:
        raise ScheduleError("cuda schedule", f"{intrinsic.name} is issued by a warpgroup, not a "
                            "warp: the Hopper schedule takes it for sm_90a (--arch sm_90a)")
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
    # Scope values, not names: a vendor family's scopes are in this registry alone.
    scope = {o.name: registry.scope(o.scope) for o in intrinsic.operands}
    a_shared = sch.cache_read(block, a, "shared")
    sch.compute_at(a_shared, ko)
    b_rows = intrinsic.operands[1].dtype.bits == 8
    intermediates = {buffer.name for buffer in sch.func.allocs}
    gathered = [x for x in (a, b) if x in intermediates]
    if b_rows:
        b = _transposed_copy(sch, block, b)
    b_shared = sch.cache_read(block, b, "shared")
    if b_rows:
        _swap_last(sch, b_shared, _written(sch, b_shared))
    sch.compute_at(b_shared, ko)
    a_frag = sch.cache_read(block, _written(sch, a_shared), scope[names[0]])
    sch.compute_at(a_frag, kf)
    b_frag = sch.cache_read(block, _written(sch, b_shared), scope[names[1]])
    sch.compute_at(b_frag, kf)
    epilogue = fuse_epilogue_chain(sch, c)
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
    for operand in gathered:
        _implicit_gather(sch, operand)
    sch.bind(ty, "threadIdx.z")
    sch.bind(tx, "threadIdx.y")
    sch.unroll(mf)
    sch.unroll(nf)
    sch.bind(by, "blockIdx.y")
    sch.bind(bx, "blockIdx.x")
    if outer:
        batch = sch.fuse(*outer) if len(outer) > 1 else outer[0]
        sch.bind(batch, "blockIdx.z")


# The transpose of an 8-bit B that is a parameter: tiles of TRANSPOSE_TILE x TRANSPOSE_TILE
# bytes, TRANSPOSE_WARPS warps a block.
TRANSPOSE_TILE = 64
TRANSPOSE_WARPS = 8


def _transposed_copy(sch: Schedule, block, b: str) -> str:
    """Store the 8-bit operand ``b`` (k rows of n) as n rows of k in global memory, and
    return that buffer's name: the block tiles then copy B's k values 16 bytes at a time
    into shared memory stored n-row by n-row, from which a column-major B fragment loads
    four k values of one column as one 32-bit word (a row-major int8 B fragment makes ptxas
    gather B one byte at a time: the tensor cores read B column-major). An intermediate B
    (the engine's transpose or im2col) is written so by its producer; a parameter is copied
    once, in its own launch: a tile at a time through shared memory where both extents are
    multiples of the tile, else element by element."""
    if b in {buffer.name for buffer in sch.func.allocs}:
        _swap_last(sch, block, b)
        return b
    stage = sch.cache_read(block, b, "global")
    buffer = _written(sch, stage)
    _swap_last(sch, stage, buffer)
    k_loop, n_loop = sch.get_loops(stage)[-2:]
    sch.reorder(n_loop, k_loop)
    if any(sch.get(loop).extent % TRANSPOSE_TILE for loop in (k_loop, n_loop)):
        # k innermost: consecutive threads write consecutive bytes of the copy (coalesced);
        # their reads, a column of B, come from sectors the neighbouring columns' threads
        # share in L2.
        return buffer
    # A tile at a time through shared memory: the block reads its tile of B row by row (16
    # bytes a thread along n) and each warp writes rows of the transposed tile (along k), so
    # both sides are coalesced.
    bn, nn = sch.split(n_loop, [None, TRANSPOSE_TILE])
    bk, kk = sch.split(k_loop, [None, TRANSPOSE_TILE])
    sch.reorder(bn, bk, nn, kk)
    tile = sch.cache_read(stage, b, "shared")
    sch.compute_at(tile, bk)
    sch.compact_buffer(_written(sch, tile))
    _vectorize_copy(sch, tile)
    warp, _ = sch.split(nn, [TRANSPOSE_WARPS, None])
    sch.bind(warp, "threadIdx.y")
    sch.bind(bn, "blockIdx.y")
    sch.bind(bk, "blockIdx.x")
    return buffer


def _implicit_gather(sch: Schedule, buffer: str) -> None:
    """Fold the block producing the intermediate ``buffer`` (an im2col: a plain copy whose
    store indices fuse its iterators, ``[n * 64 + h * 8 + w, rh * 48 + rw * 16 + c]``) into
    the copy that reads it into shared memory, so the tiles gather straight from the
    producer's input and ``buffer`` is never written (implicit GEMM). ``buffer`` is first
    stored with one dimension per fused iterator (``transform_layout``), which makes its
    store plain and inlinable. Only where the gather still moves 16 bytes at once: the last
    index's least significant iterator steps the producer's input's last index by 1, over a
    multiple of 16 bytes, the rest of that index in multiples of 16 bytes (NHWC channels, a
    group's ``g * 16 + c``; not NCHW, whose k digits end in a column offset). Nothing
    happens otherwise. When the input is a zero padding (:func:`_zero_padding`), that is
    inlined too."""
    producer = _plain_producer(sch, buffer)
    if producer is None:
        return
    block = sch.get(producer).block
    store = block.body
    extents = {iv.var: iv.extent for iv in block.iter_vars}
    parts = []
    for dim, index in enumerate(store.indices):
        digits = mixed_radix(index, extents)
        # Inlining needs the digits to cover the dimension (a padded one has more).
        if digits is None or math.prod(e for _, _, e in digits) != store.buffer.shape[dim]:
            return
        parts.append([(c, e) for c, _, e in digits])
    _, lowest, extent = digits[-1]
    lanes = 16 // max(store.buffer.dtype.bits // 8, 1)
    used = {id(a) for index in store.indices for a, _ in linearize(index).terms}
    unused = [iv for iv in block.iter_vars if id(iv.var) not in used]
    if (not _lowest_contiguous(store.value, lowest, lanes) or extent % lanes
            or sum(len(part) for part in parts) != len(used)  # an iterator in two dims
            or any(iv.extent != 1 for iv in unused)):
        return
    if unused:
        # Unit iterators the store does not use (a batch of 1) leave the iteration space.
        olds = _index_vars("v", len(block.iter_vars))
        kept = tuple(v for v, iv in zip(olds, block.iter_vars) if id(iv.var) in used)
        sch.transform_block_layout(producer, IndexMap(olds, kept))
    dims = _index_vars("d", len(store.indices))
    sch.transform_layout(producer, buffer, IndexMap(dims, tuple(
        digit for d, digits in zip(dims, parts) for digit in unfused(d, digits))))
    sch.compute_inline(producer)
    padding = _zero_padding(sch, store.value.buffer.name)
    if padding is not None:
        # The halo becomes a zero-filling 16-byte copy (cp.async with src-size 0): no kernel
        # writes the padded input either.
        sch.compute_inline(padding)


def _sole_writer(sch: Schedule, buffer: str):
    """The handle of the block writing ``buffer`` when ``buffer`` is an intermediate with
    one writer (:func:`tree.sole_writer`); else None."""
    block = tree.sole_writer(sch.func, buffer)
    return None if block is None else sch.get_block(block.name)


def _zero_padding(sch: Schedule, buffer: str):
    """The block writing the intermediate ``buffer`` when it pads: ``buffer[v...] =
    select(inside, X[...], 0)`` at its own iterators, ``inside`` not depending on the last
    one (the channel, which the 16-byte pieces step along); else None."""
    handle = _sole_writer(sch, buffer)
    if handle is None:
        return None
    block = sch.get(handle).block
    store = block.body
    if (not isinstance(store, BufferStore) or block.init is not None
            or store.indices != tuple(iv.var for iv in block.iter_vars)
            or any(iv.kind is IterKind.REDUCE for iv in block.iter_vars)
            or not isinstance(store.value, Select)
            or not isinstance(store.value.true_value, BufferLoad)
            or not isinstance(store.value.false_value, IntImm) or store.value.false_value.value):
        return None
    channel = store.indices[-1]
    used: list[bool] = []
    post_order_visit(store.value.cond, lambda n: used.append(n is channel))
    return None if any(used) else handle


def _lowest_contiguous(load: BufferLoad, lowest: Var, lanes: int) -> bool:
    """True when ``lowest`` steps only the last index of ``load``, by 1, and the rest of that
    index moves in whole runs of ``lanes`` elements (a group's first channel, ``g * 16 +
    c``): each run of ``lanes`` values of ``lowest`` is then one aligned 16-byte piece."""
    *leading, last = load.indices
    form = linearize(last)
    if any(a is lowest for index in leading for a, _ in linearize(index).terms):
        return False
    steps = {id(a): c for a, c in form.terms}
    return (steps.get(id(lowest)) == 1 and form.const % lanes == 0
            and all(c % lanes == 0 for a, c in form.terms if a is not lowest))


def _index_vars(prefix: str, count: int) -> tuple[Var, ...]:
    """``count`` fresh index variables, named ``prefix0``, ``prefix1``, ..."""
    return tuple(Var(f"{prefix}{i}") for i in range(count))


def _plain_producer(sch: Schedule, buffer: str):
    """The one block writing ``buffer`` when ``buffer`` is an intermediate and that block
    is a plain copy (one load, no reduction); else None."""
    handle = _sole_writer(sch, buffer)
    if handle is None:
        return None
    block = sch.get(handle).block
    if (not isinstance(block.body, BufferStore) or not isinstance(block.body.value, BufferLoad)
            or block.init is not None
            or any(iv.kind is IterKind.REDUCE for iv in block.iter_vars)):
        return None
    return handle


def _swap_last(sch: Schedule, stage, buffer: str) -> None:
    """Store ``buffer`` (accessed by ``stage``) with its last two dimensions swapped."""
    regions = (*sch.get(stage).block.reads, *sch.get(stage).block.writes)
    ndim = next(r.buffer.ndim for r in regions if r.buffer.name == buffer)
    dims = _index_vars("d", ndim)
    sch.transform_layout(stage, buffer, IndexMap(dims, (*dims[:-2], dims[-1], dims[-2])))


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


def _sole_reader(sch: Schedule, buffer: str):
    """The block reading ``buffer`` when exactly one block reads it without writing it;
    else None."""
    readers = _readers(sch, buffer)
    return sch.get_block(readers[0]) if len(readers) == 1 else None


def _elementwise_reader(sch: Schedule, buffer: str):
    """The one block reading ``buffer``, when it maps it element by element: a spatial store
    at its own iterators (over the whole output) reading ``buffer`` at the same iterators,
    possibly permuted (a reindexed GEMM result is transposed back this way)."""
    handle = _sole_reader(sch, buffer)
    if handle is None:
        return None
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


def _transpose_back(sch: Schedule, buffer: str):
    """The one block reading ``buffer`` when it copies it back to a convolution's output
    (``conv[n, h, w, co] = buffer[co, n * 64 + h * 8 + w]``), given the iterators of
    ``buffer``'s indices (``transform_block_layout``), so that it maps ``buffer`` element by
    element and can run as the GEMM's epilogue (its stores then unfuse the pixel index).
    Only a plain copy whose load indices are sums of distinct iterators' digits and whose
    store writes each output element once; None, with nothing changed, for any other."""
    handle = _sole_reader(sch, buffer)
    if handle is None:
        return None
    block = sch.get(handle).block
    store = block.body
    ivs = tuple(iv.var for iv in block.iter_vars)
    if (not isinstance(store, BufferStore) or not isinstance(store.value, BufferLoad)
            or store.value.buffer.name != buffer or block.init is not None):
        return None
    # The store must write each output element once (a grouped output's channel
    # ``g * og + oi`` included), so that running it in the epilogue's order changes nothing.
    writes, shape = IndexMap(ivs, store.indices), [iv.extent for iv in block.iter_vars]
    if store.indices != ivs and (writes.why_not_bijective(shape) is not None
                                 or list(writes.target_shape(shape)) != list(store.buffer.shape)):
        return None
    extents = {iv.var: iv.extent for iv in block.iter_vars}
    olds = _index_vars("v", len(ivs))
    names = dict(zip(ivs, olds))
    targets: list[Expr] = []
    covered = []
    for index, extent in zip(store.value.indices, store.value.buffer.shape):
        digits = mixed_radix(index, extents)
        if digits is None or math.prod(e for _, _, e in digits) != extent:
            return None
        covered += [id(var) for _, var, _ in digits]
        terms = [names[var] * c for c, var, _ in digits]
        targets.append(functools.reduce(operator.add, terms))
    # Each iterator in one digit; one of extent 1 the load does not use (a batch of 1)
    # leaves the iteration space.
    if (len(covered) != len(set(covered))
            or any(extents[var] != 1 for var in ivs if id(var) not in covered)):
        return None
    sch.transform_block_layout(handle, IndexMap(olds, tuple(targets)))
    return sch.get_block(block.name)


def fuse_epilogue_chain(sch: Schedule, c: str):
    """The elementwise blocks after the GEMM (bias, activation, requantisation, cast), as
    one block reading the GEMM's result ``c``: each but the last is inlined into the next.
    None when no such block follows, ``c`` is a parameter (its values must reach the
    caller, so it cannot become a staging tile) or more than one block writes ``c`` (the
    stream-K hybrid's two launches: the epilogue must wait for both)."""
    if c not in {b.name for b in sch.func.allocs} or _sole_writer(sch, c) is None:
        return None
    epilogue = _elementwise_reader(sch, c) or _transpose_back(sch, c)
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
        _store_order(sch, epilogue)
        _vectorize_copy(sch, epilogue)
    _tensorize_first(sch, ri, candidates)
    sch.bind(wr, "threadIdx.z")
    sch.bind(wc, "threadIdx.y")
    sch.unroll(fr)
    sch.unroll(fc)


def _store_order(sch: Schedule, epilogue) -> None:
    """Make the epilogue's loop that steps its store's last index (the output's contiguous
    dimension) the innermost of its two tile loops: a transposed store (a convolution's
    output written from an accumulator of channels by pixels) then has consecutive lanes
    write consecutive elements, 16 bytes at a time once vectorized."""
    realize = sch.get(epilogue)
    outer, inner = sch.get_loops(epilogue)[-2:]
    in_last: set[int] = set()
    post_order_visit(realize.block.body.indices[-1],
                     lambda n: in_last.add(id(n)) if isinstance(n, Var) else None)
    bindings = [b for iv, b in zip(realize.block.iter_vars, realize.bindings)
                if id(iv.var) in in_last]

    def steps(loop) -> bool:
        found: list[bool] = []
        for binding in bindings:
            post_order_visit(binding, lambda n: found.append(n is sch.get(loop).var))
        return any(found)

    if steps(outer) and not steps(inner):
        sch.reorder(inner, outer)


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
    load whose last two indices are in (m, k) is A, in (k, n) is B (an index may add an
    outer iterator: ``s * Kp + k`` after split-K)."""
    block = sch.get(sch.get_block(block_name)).block
    ivs = [iv.var for iv in block.iter_vars][-3:]
    store = block.body
    if not isinstance(store, BufferStore):
        raise ScheduleError("cuda schedule", f"block {block_name} is not a single store")
    found: dict[tuple[int, ...], str] = {}

    def visit(node: object) -> None:
        if isinstance(node, BufferLoad) and node.buffer is not store.buffer:
            key = tuple(ivs.index(v) for i in node.indices[-2:] for v in vars_of(i)
                        if v in ivs)
            found[key] = node.buffer.name

    post_order_visit(store.value, visit)
    return found[(0, 2)], found[(2, 1)], store.buffer.name


# ---- the static tiling search ---------------------------------------------------------------
#
# Candidates are (tiling, stages) pairs whose block tile divides the padded extents. Each is
# first estimated without compiling (registers and shared memory from the tile sizes), the
# best ``measured`` are compiled by the caller's ``measure`` (ptxas registers and shared
# memory, the SASS mix, the modelled bank conflicts), and all are ranked by one cost model.
# Work is counted in units of one m16n8k16 (UNIT_MACS multiply-accumulates), whatever
# instruction does it, so that WMMA and mma.sync, whose instructions do one or two units,
# are costed alike:
#
#   blocks per SM   occupancy from registers and shared memory (the occupancy calculator)
#   waves           ceil(blocks / (blocks per SM x SM count))
#   resident        min(blocks per SM, ceil(blocks / SM count))   (a small grid spreads out)
#   issue           resident x units per block / 4 sub-partitions
#                   x max(tensor cycles per unit,
#                         MMA instructions + non-MMA instructions + bank conflicts per unit)
#   global          resident x (BM + BN) x K x element bytes / GLOBAL_BYTES_PER_CYCLE
#   shared          resident x bytes the warps' fragment loads read / SHARED_BYTES_PER_CYCLE
#   cycles          waves x max(issue, global, shared)
#                   x max(1, 2 / resident warps per sub-partition)  (too few hide no latency)
#
# The tensor cycles per unit (:class:`TensorPipe`) come from the intrinsic's YAML interval,
# the input type's rate on an sm_80 sub-partition, scaled by TENSOR_SPEEDUP for the
# architecture. GLOBAL_BYTES_PER_CYCLE is an SM's share of the L2 bandwidth (about 5 TB/s
# over 108 SMs at 1.4 GHz on an A100: an estimate); SHARED_BYTES_PER_CYCLE is 32 banks of 4
# bytes.

UNIT_MACS = 16 * 8 * 16
# The tensor pipe's dense rate per SM and clock relative to sm_80's. On these parts it is the
# same ratio for every input type (NVIDIA's whitepapers, dense, boost clock), so the YAML
# intervals (sm_80's, per input type) scale by one number per architecture:
#   sm_75  T4:        65 TFLOPS f16, 130 TOPS int8,  40 SMs at 1.59 GHz: 512 f16 MAC/clock/SM
#   sm_80  A100 SXM4: 312 TFLOPS f16, 624 TOPS int8, 108 SMs at 1.41 GHz: 1024
#   sm_90  H100 SXM5: 989 TFLOPS f16, 1979 TOPS int8, 132 SMs at 1.83 GHz: 2048
TENSOR_SPEEDUP: Mapping[str, float] = {"sm_75": 0.5, "sm_80": 1.0, "sm_90": 2.0}
# The occupancy of a candidate: (registers, shared bytes, threads) -> what
# ``targets.cuda.occupancy.occupancy`` returns on the architecture (its ``blocks`` and
# ``warps`` per SM); a callable, so the engine does not depend on the backend.
OccupancyOf = Callable[[int, int, int], Any]
GLOBAL_BYTES_PER_CYCLE = 32
SHARED_BYTES_PER_CYCLE = 128
WARP_GRIDS = ((2, 2), (2, 4), (4, 2))
FRAGMENT_GRIDS = ((2, 2), (4, 2), (2, 4), (4, 4))
# Tried only where none of the grids above divides the extents (a skinny GEMM's one padded
# row tile, an odd tile count): narrower blocks, down to one warp of one fragment.
NARROW_WARP_GRIDS = ((1, 4), (1, 2), (4, 1), (2, 1), (1, 1))
NARROW_FRAGMENT_GRIDS = ((1, 4), (1, 2), (4, 1), (2, 1), (1, 1))
STAGE_CHOICES = (2, 3, 4)


def instruction_macs(intrinsic: Intrinsic) -> int:
    """Multiply-accumulates of one tensor-core machine instruction (HMMA, IMMA) that the
    compute ``intrinsic`` compiles to on sm_80 and later, from its shape and input type: an
    m16n8 tile, as deep as the call's k up to the 256 bits of one row the PTX ISA's largest
    mma takes (m16n8k16 for 16-bit inputs, m16n8k32 for 8-bit, m16n8k8 for tf32). So a
    16x16x16 8-bit WMMA is two IMMA.16816 (2048 each), an mma.sync m16n8k32 one IMMA.16832
    (4096), as the SASS of docs/cuda_backend.md shows."""
    bits = intrinsic.operands[0].dtype.bits
    depth = math.prod(iv.extent for iv in intrinsic.iter_vars if iv.kind is IterKind.REDUCE)
    return 16 * 8 * min(depth, 256 // bits)


@dataclass(frozen=True, slots=True)
class TensorPipe:
    """What one unit of work (an m16n8k16, UNIT_MACS multiply-accumulates) costs an
    intrinsic on one sub-partition of an architecture: ``cycles`` of the tensor pipe and
    ``instructions``, the tensor-core machine instructions issued for it (1 for an
    HMMA.16816, 0.5 for an IMMA.16832)."""

    cycles: float
    instructions: float


def tensor_pipe(intrinsic: Intrinsic, arch: str) -> TensorPipe:
    """The :class:`TensorPipe` of compute ``intrinsic`` on ``arch``: its YAML interval (the
    input type's rate on sm_80) per UNIT_MACS of its work, over TENSOR_SPEEDUP; ValueError
    naming the architectures known when ``arch`` is not one of them."""
    speedup = TENSOR_SPEEDUP.get(arch)
    if speedup is None:
        raise ValueError(f"the tensor-pipe model requires an architecture with a published "
                         f"rate, one of {', '.join(TENSOR_SPEEDUP)}, got {arch!r}")
    macs = math.prod(intrinsic.extents)
    return TensorPipe(intrinsic.cost.interval * UNIT_MACS / macs / speedup,
                      UNIT_MACS / instruction_macs(intrinsic))


@dataclass(frozen=True, slots=True)
class TilingFigures:
    """What one candidate compiles to: ``registers`` per thread, ``shared_bytes`` per block
    (static plus dynamic), ``spills`` (bytes), non-MMA instructions in the k loop and
    modelled bank conflicts, each per unit of work (an m16n8k16: the SASS figures per MMA
    instruction times the units one instruction does), None where not measured (the
    estimate stands in)."""

    registers: int
    shared_bytes: int
    spills: int = 0
    other_per_unit: float | None = None
    conflicts_per_unit: float | None = None


@dataclass(frozen=True, slots=True)
class TilingTrial:
    """One candidate of the search: its tiling and stages, the figures it was ranked by
    (``measured`` when compiled), and what the cost model makes of them."""

    tiling: CudaTiling
    stages: int
    figures: TilingFigures
    measured: bool
    blocks_per_sm: int
    waves: int
    cycles: float

    def describe(self, shape: tuple[int, int, int]) -> str:
        """One line: block and warp tiles, stages, figures and modelled cycles."""
        bm, bn, bk = self.tiling.block_tile(*shape)
        f = self.figures
        how = "measured" if self.measured else "estimated"
        other = ("non-MMA instructions unknown (no cuobjdump)" if f.other_per_unit is None
                 else f"{f.other_per_unit:.2f} non-MMA instructions per m16n8k16")
        conflicts = ("bank conflicts not modelled" if f.conflicts_per_unit is None
                     else f"{f.conflicts_per_unit:.2f} bank conflicts per m16n8k16")
        fit = (f"{self.blocks_per_sm} blocks/SM, {self.waves} waves, {self.cycles:.3g} cycles"
               if self.blocks_per_sm else "does not fit on an SM")
        return (f"block {bm}x{bn}x{bk}, warps {self.tiling.warps[0]}x{self.tiling.warps[1]} "
                f"of {bm // self.tiling.warps[0]}x{bn // self.tiling.warps[1]}, "
                f"{self.stages} stages ({how}: {f.registers} registers, {f.shared_bytes} B "
                f"shared, {f.spills} spill bytes, {other}, {conflicts}): {fit}")


def tiling_candidates(extents: tuple[int, int, int], shape: tuple[int, int, int],
                      elem_bytes: int) -> list[tuple[CudaTiling, int]]:
    """Every (tiling, stages) whose block tile divides the padded extents (m, n, k): warps
    2x2, 2x4 or 4x2, fragments 2x2 to 4x4 a warp (n fragments scaled to keep the warp
    tile's width for fragments narrower than 16), 2 or 4 fragment steps per stage (1 or 2
    for 1-byte inputs), 2 to 4 stages (at most the k loop's steps). Where none of those
    divides, the narrow ones too: 1 to 4 warps along a dimension, 1 to 4 fragments (not
    widened), 1 fragment step per stage."""
    usual = (2, 4) if elem_bytes >= 2 else (1, 2)
    return (_candidates(extents, shape, usual, WARP_GRIDS, FRAGMENT_GRIDS, max(16 // shape[1], 1))
            or _candidates(extents, shape, (1, *usual), WARP_GRIDS + NARROW_WARP_GRIDS,
                           FRAGMENT_GRIDS + NARROW_FRAGMENT_GRIDS, 1))


def _candidates(extents: tuple[int, int, int], shape: tuple[int, int, int],
                k_steps: tuple[int, ...], warp_grids: tuple[tuple[int, int], ...],
                fragment_grids: tuple[tuple[int, int], ...], widen: int
                ) -> list[tuple[CudaTiling, int]]:
    m_tiles, n_tiles, k_tiles = (e // s for e, s in zip(extents, shape))
    found = []
    for wy, wx in warp_grids:
        for fm, fn in fragment_grids:
            fn *= widen
            if m_tiles % (wy * fm) or n_tiles % (wx * fn):
                continue
            for kt in sorted(set(k_steps)):
                if k_tiles % kt:
                    continue
                for stages in STAGE_CHOICES:
                    if stages <= max(k_tiles // kt, 2):
                        found.append((CudaTiling((wy, wx), (fm, fn), kt), stages))
    return found


def estimate(tiling: CudaTiling, stages: int, shape: tuple[int, int, int],
             elem_bytes: int) -> TilingFigures:
    """Figures without compiling: an accumulator tile of 8 registers per 16 x 16 of output,
    4 per A and B fragment and 40 for addresses; the padded shared stages (rows padded by
    16 bytes, as the backend lays them out). Non-MMA instructions and conflicts unknown."""
    fm, fn = tiling.fragments
    bm, bn, bk = tiling.block_tile(*shape)
    accumulators = 8 * fm * fn * shape[0] * shape[1] // 256
    registers = accumulators + 4 * (fm + fn) + 40
    stage = bm * (bk * elem_bytes + 16) + bk * (bn * elem_bytes + 16)
    return TilingFigures(registers, stages * stage)


def model_cycles(tiling: CudaTiling, figures: TilingFigures, extents: tuple[int, int, int],
                 shape: tuple[int, int, int], elem_bytes: int, batch: int,
                 limits: GpuArchitecture, occupancy: OccupancyOf, pipe: TensorPipe
                 ) -> tuple[int, int, float]:
    """(blocks per SM, waves, cycles) of the cost model (section comment) on the
    architecture ``limits`` describes (the cuda family's ``gpu:`` section: its SM count and
    the shared memory a block may opt in to) with ``occupancy(registers, shared,
    threads)`` and the intrinsic's ``pipe`` there; a block over its shared memory or
    spilling does not fit (0, 0, inf)."""
    bm, bn, _ = tiling.block_tile(*shape)
    warps = tiling.warps[0] * tiling.warps[1]
    if figures.shared_bytes > limits.max_shared_per_block:
        return 0, 0, float("inf")
    fit = occupancy(figures.registers, figures.shared_bytes, 32 * warps)
    if fit.blocks == 0 or figures.spills:
        return 0, 0, float("inf")
    blocks = (extents[0] // bm) * (extents[1] // bn) * batch
    waves = -(-blocks // (fit.blocks * limits.sm_count))
    # A grid of fewer blocks than fit on all SMs puts fewer on each: an SM works only on
    # those it gets, so more room per SM must not cost a small grid more.
    resident = min(fit.blocks, -(-blocks // limits.sm_count))
    k = extents[2]
    units = bm * bn * k / UNIT_MACS
    # Unmeasured: 2 non-MMA instructions per unit, about what the copies and fragment
    # loads of a well-tiled k loop take (docs/cuda_backend.md measures 0.5 to 1.2).
    other = figures.other_per_unit if figures.other_per_unit is not None else 2.0
    conflicts = figures.conflicts_per_unit or 0.0
    issue = resident * units / 4 * max(pipe.cycles, pipe.instructions + other + conflicts)
    global_ = resident * (bm + bn) * k * elem_bytes / GLOBAL_BYTES_PER_CYCLE
    fragments = warps * (tiling.fragments[0] * shape[0] + tiling.fragments[1] * shape[1])
    shared = resident * fragments * shape[2] * (k // shape[2]) * elem_bytes
    hiding = max(1.0, 2.0 / (resident * warps / 4))
    busiest = max(issue, global_, shared / SHARED_BYTES_PER_CYCLE)
    return fit.blocks, waves, waves * busiest * hiding


def search_tilings(extents: tuple[int, int, int], shape: tuple[int, int, int],
                   elem_bytes: int, batch: int, limits: GpuArchitecture, occupancy: OccupancyOf,
                   pipe: TensorPipe, measure: Callable[[CudaTiling, int], TilingFigures | None],
                   measured: int = 6) -> list[TilingTrial]:
    """The candidates (:func:`tiling_candidates`) ranked by modelled cycles with the
    intrinsic's ``pipe``, best first: all estimated, the best ``measured`` of them then
    measured (``measure`` returns None for one that does not compile) and ranked again on
    what they measured. Unmeasured trials rank after measured ones; equal cycles go to
    larger block tiles (less traffic per MMA where the tensor pipe hides it), then more
    stages (the model does not see the latency they hide), then fewer non-MMA instructions
    per unit of work."""
    def trial(tiling: CudaTiling, stages: int, figures: TilingFigures,
              done: bool) -> TilingTrial:
        fit = model_cycles(tiling, figures, extents, shape, elem_bytes, batch, limits,
                           occupancy, pipe)
        return TilingTrial(tiling, stages, figures, done, *fit)

    estimated = sorted((trial(t, s, estimate(t, s, shape, elem_bytes), False)
                        for t, s in tiling_candidates(extents, shape, elem_bytes)), key=_rank)
    trials = []
    for n, guess in enumerate(estimated):
        figures = measure(guess.tiling, guess.stages) if n < measured else None
        trials.append(guess if figures is None else trial(guess.tiling, guess.stages,
                                                          figures, True))
    return sorted(trials, key=_rank)


def _rank(trial: TilingTrial) -> tuple:
    other = trial.figures.other_per_unit
    (wy, wx), (fm, fn) = trial.tiling.warps, trial.tiling.fragments
    return (not trial.measured, trial.cycles, -wy * wx * fm * fn, -trial.stages,
            float("inf") if other is None else other)


def choose_family(searches: Mapping[str, list[TilingTrial]], issued: Mapping[str, float]
                  ) -> tuple[str, str]:
    """Which of the searched intrinsics (name -> its search's trials, best first) to take,
    and why, in one line: the one whose best trial was measured, then models the fewest
    cycles, then (where the tensor pipe bounds both, the instructions around it are what the
    model cannot see: latency and register pressure) issues the fewest non-MMA instructions
    per unit of work, read from the SASS. Where the SASS could not be read for every family
    (no cuobjdump), the last tie-break is ``issued``: each intrinsic's tensor-core machine
    instructions per unit of work, known without any tool, and the reason says so. Still
    tied, the first family searched stays, and the reason says that. ValueError when no
    search found a trial."""
    best = {name: trials[0] for name, trials in searches.items() if trials}
    if not best:
        raise ValueError("choose_family requires at least one search with a trial, got none")
    sass = all(t.figures.other_per_unit is not None for t in best.values())

    def last(name: str) -> float:
        other = best[name].figures.other_per_unit
        return other if sass and other is not None else issued[name]

    ranked = sorted(best, key=lambda name: (not best[name].measured, best[name].cycles,
                                            last(name)))
    chosen = best[ranked[0]]
    figures = "; ".join(
        f"{name}: {best[name].cycles:.4g} cycles, "
        + (f"{best[name].figures.other_per_unit:.2f} non-MMA per m16n8k16" if sass
           else f"{issued[name]:.2f} tensor-core instructions per m16n8k16")
        + ("" if best[name].measured else " (estimated)") for name in ranked)
    if len(ranked) == 1:
        return ranked[0], f"{ranked[0]}: the only family that matches ({figures})"
    runner = best[ranked[1]]
    if chosen.cycles < runner.cycles:
        reason = "fewer modelled cycles"
    elif chosen.measured != runner.measured:
        reason = "measured, the other only estimated"
    elif last(ranked[0]) == last(ranked[1]):
        reason = ("cycles tie and so do the instructions per unit of work; the first family "
                  "searched stays")
    elif sass:
        reason = "cycles tie, fewer non-MMA instructions per unit of work (from the SASS)"
    else:
        reason = ("cycles tie, and without cuobjdump the SASS cannot be read: fewer "
                  "tensor-core instructions per unit of work")
    return ranked[0], f"{ranked[0]}: {reason} ({figures})"


def issued_per_unit(intrinsic: Intrinsic) -> float:
    """Tensor-core machine instructions ``intrinsic`` issues per unit of work (an
    m16n8k16): 1 for an HMMA.16816, 0.5 for an IMMA.16832 (:func:`instruction_macs`)."""
    return UNIT_MACS / instruction_macs(intrinsic)


# ---- choosing a family: WMMA or mma.sync ------------------------------------------------------

def mapping_cycles(func: PrimFunc, match: Match, registry: Registry) -> float:
    """What a mapping costs on the tensor pipe (the engine's estimate for cuda, lower is
    better): its calls times the intrinsic's YAML issue interval (the input type's rate, so
    8-bit work costs half of 16-bit work), on the oldest architecture of the cuda family's
    ``gpu:`` section, since every kernel is compiled for all of them; infinite when the
    intrinsic needs a later one (its ``feature``, ``sm_XX``: mma.sync's bf16 and 8-bit
    shapes need sm_80).

    Equal cycles (whole numbers) are broken by a fraction below one that grows with the
    tensor-core machine instructions issued per unit of work (:func:`instruction_macs`; a
    ratio, so the fraction stays clear of the cycles' rounding at any size): a 16x16x16
    8-bit WMMA issues
    two IMMA.16816 where an m16n8k32 mma.sync issues one IMMA.16832, and measured at
    4096^3 the latter takes 0.54 non-MMA instructions per m16n8k16 of work against WMMA's
    0.95. For 16-bit inputs both issue HMMA.16816 alike (measured 1.08 and 1.14, too close
    to call without compiling), so the tie stands and the matcher's order keeps WMMA."""
    intrinsic = match.intrinsic
    oldest = min(sm_number(name) for name in registry.gpu(intrinsic.target).architectures)
    needed = intrinsic.feature
    if needed is not None and sm_number(needed) > oldest:
        return math.inf
    per_unit = issued_per_unit(intrinsic)
    return float(match.calls * intrinsic.cost.interval) + per_unit / (per_unit + 1)


def sm_number(name: str) -> int:
    """75 for ``sm_75``; an architecture feature of another form is never available."""
    digits = name.removeprefix("sm_")
    return int(digits) if name.startswith("sm_") and digits.isdigit() else 1 << 30
