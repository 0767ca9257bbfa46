"""The NPU's schedule around its GEMM intrinsic: scratchpad-sized tiles, staged operands,
data movement through the DMA intrinsics, and the accumulator zeroed as the family declares.

The block arrives in the intrinsic's shape (``gemm_view``): iterators ``(outer...)`` then one
per intrinsic iterator, padded to its extents. The intrinsic computes ``C[i, j] += A[i, k] *
B[k, j]`` on tiles of ``ti x tj x tk`` (any iterator order; :func:`gemm_axes` finds them),
which the machine executes when ``tk <= R`` and ``tj <= C`` (the array's rows and columns).
With a tiling of ``tm x tn`` accumulator tiles reduced ``kb`` deep (:mod:`.npu_traffic`
chooses it), the loops become (order ``mn``; ``nm`` swaps ``mo`` and ``no``)::

    for outer..., mo, no:               # one accumulator tile: tm rows x tn columns
        [zero the tile: fill intrinsic]     (only when the family has no resetting GEMM)
        for ko:                         # one kb-deep step of the reduction
            load A[mo*tm : +tm, ko*kb : +kb] into npu.inp   (load intrinsic's tiles)
            load B[ko*kb : +kb, no*tn : +tn] into npu.wgt
            for kt, nt, mt: gemm        (the resetting variant at the first step, if declared)
        store the accumulator tile to C (store intrinsic's tiles)

When ``kb`` is the whole reduction, the operand the outer loop alone indexes (A in order
``mn``, B in ``nm``) is loaded above the inner loop and stays on chip while it runs. A staged
tile wider than one call is stored in call-wide column blocks, so each call's operand is a
run of whole memory rows.

A depthwise reduction (the channel indexes input, weight and output alike) matches no GEMM;
when the caller names the GEMM, :func:`reshape` first writes it as grouped GEMMs with
diagonal weight tiles (``diagonalize``), which then take the path above.

The accumulator starts at zero in one of two ways, each as the family declares it: a
variant of the GEMM with ``resets: true`` replaces the first step's call (``fold_init``; a
reduction one step deep calls only it), or a ``fill`` intrinsic of the accumulator operand
zeroes the tile before the reduction (``decompose_reduction``). A family with neither is
refused with that reason.

Each staged buffer is compacted to one tile, so the NPU backend can place two copies of it
and overlap the next tile's transfers with the current tile's GEMMs. Unless given, the
tiling is one moving near the least DRAM traffic among those whose tiles fit, near the
fewest cycles by the cycle model (:func:`choose_tiling`, :mod:`.npu_cycles`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from intrinsics import Intrinsic, Operand, Registry, runnable
from intrinsics.runnable import GemmAxes
from ir import Buffer, BufferLoad, BufferStore, IntImm, IterKind, ScheduleError, Select, Var
from ir.evaluate import evaluate
from ir.visitor import vars_of
from ir.visitor import post_order_visit
from simulator import MachineConfig
from tensorize.engine import npu_cycles
from tensorize.engine.npu_traffic import GemmShape, NpuTiling
from tensorize.match.result import Match
from tensorize.schedule import Schedule, tree

_PRIMITIVE = "npu schedule"


def gemm_axes(intrinsic: Intrinsic) -> GemmAxes:
    """Where M, N and K are in ``intrinsic`` (``C[i, j] += A[i, k] * B[k, j]`` with any
    iterator names and order; :func:`intrinsics.runnable.gemm_axes`). ScheduleError when the
    intrinsic is not shaped so."""
    axes = runnable.gemm_axes(intrinsic)
    if axes is None:
        raise ScheduleError(_PRIMITIVE, runnable.not_a_gemm(intrinsic))
    return axes


def check_executable(intrinsic: Intrinsic, config: MachineConfig) -> GemmAxes:
    """The intrinsic's axes, once the machine ``config`` is known to run one call of it:
    tk <= R (the array's rows hold one reduction step) and tj <= C (its columns). The
    reason is the one ``intrinsics validate`` gives a family on its own machine."""
    axes = gemm_axes(intrinsic)
    problem = runnable.fit_problem(intrinsic, axes, config)
    if problem is not None:
        raise ScheduleError(_PRIMITIVE, problem)
    return axes


def gemm_shape(intrinsic: Intrinsic, extents: tuple[int, ...]) -> GemmShape:
    """The GEMM a block in ``intrinsic``'s shape computes, for the traffic model: its padded
    extents (the block's last iterators, ``extents``), the call's tile, and the bytes per
    element of A, B and C (the intrinsic's operands: the tensors staged through them)."""
    axes = gemm_axes(intrinsic)
    operands = _gemm_operands(intrinsic, axes)
    m, n, k = axes.of(extents[-3:])
    ti, tj, tk = axes.extents
    return GemmShape(m, n, k, ti, tj, tk, *(max(o.dtype.bits // 8, 1) for o in operands))


def choose_tiling(shape: GemmShape, config: MachineConfig) -> NpuTiling:
    """Among the tilings that fit and move near the least DRAM traffic, one the cycle model
    finds near the fastest (:func:`npu_cycles.choose`)."""
    return npu_cycles.choose(shape, config)


def machine(options: Mapping[str, Any]) -> MachineConfig:
    """The machine in ``options["config"]``: the caller's, made at the edge (there is no
    default machine below it). TypeError when it is missing: a programming error."""
    config = options.get("config")
    if not isinstance(config, MachineConfig):
        raise TypeError(f"the {_PRIMITIVE} requires options['config'], the machine (a "
                        f"MachineConfig), got {config!r}")
    return config


def padding(sch: Schedule, match: Match, extents: tuple[int, ...], registry: Registry,
            options: Mapping[str, Any]) -> tuple[list[int], dict[str, Any]]:
    """The engine's padding hook (see ``tensorize.engine``): the tiling, ``options["tiling"]``
    or :func:`choose_tiling` on the GEMM padded to the intrinsic's multiples, and the
    multiples to pad the block's ``extents`` (the intrinsic iterators', unpadded) to: the
    intrinsic's, but M's the row tile, which need not divide M (``npu_traffic.padded_m``).
    Returns them with ``options`` naming the tiling, for :func:`schedule`."""
    config = machine(options)
    axes = check_executable(match.intrinsic, config)
    multiples = [iv.extent for iv in match.intrinsic.iter_vars]
    padded = tuple(-(-e // u) * u for e, u in zip(extents, multiples))
    shape = replace(gemm_shape(match.intrinsic, padded),
                    acc_tiles=1 + len(_tile_inputs(sch, match.block)),
                    acc_vectors=len(_column_inputs(sch, match.block)))
    tiling = options.get("tiling") or choose_tiling(shape, config)
    if tiling.rows % shape.ti == 0:
        multiples[axes.positions[0]] = tiling.rows
    return multiples, {**options, "tiling": tiling}


def schedule(sch: Schedule, match: Match, extents: tuple[int, ...], registry: Registry,
             options: Mapping[str, Any]) -> None:
    """The engine's entry (see ``tensorize.engine``): tile by ``options["tiling"]`` (which
    :func:`padding` chose where the caller did not) on ``options["config"]``, the machine
    (required)."""
    config = machine(options)
    check_executable(match.intrinsic, config)
    tiling = options.get("tiling") or padding(sch, match, extents, registry, options)[1]["tiling"]
    schedule_npu(sch, match.block, match.intrinsic, registry, tiling, config)


def _tile_inputs(sch: Schedule, block_name: str) -> list[str]:
    """The kernel's inputs of the GEMM's output shape that blocks after it read: tiles an
    epilogue fused onto the accumulator tile loads beside it (a residual add's skip)."""
    block = sch.get(sch.get_block(block_name)).block
    out = block.writes[0].buffer
    operands = {r.buffer for r in block.reads}
    return [p.name for p in sch.func.params[:-1]
            if p.shape == out.shape and p not in operands and p is not out]


def _column_inputs(sch: Schedule, block_name: str) -> list[str]:
    """The kernel's one-dimensional inputs that the GEMM does not read: vectors over the
    output's columns an epilogue fused onto the accumulator tile keeps beside it (a bias, a
    requantisation's scale)."""
    block = sch.get(sch.get_block(block_name)).block
    operands = {r.buffer for r in block.reads}
    return [p.name for p in sch.func.params[:-1] if len(p.shape) == 1 and p not in operands]


def reshape(sch: Schedule, block_name: str, candidates: list[Intrinsic],
            options: Mapping[str, Any]) -> bool:
    """The engine's hook for a block no GEMM matches (see ``tensorize.engine``): a depthwise
    reduction becomes grouped GEMMs over tiles of ``tj`` channels with diagonal weight tiles
    (``diagonalize``; tj the columns of the widest GEMM among ``candidates`` that the
    machine runs, else of the next). False, with ``sch`` unchanged, when the block is not
    depthwise, no such tj divides its channels, or no candidate runs. ``options["config"]``
    is the machine (required)."""
    config = machine(options)
    widths = set()
    for intrinsic in candidates:
        try:
            widths.add(check_executable(intrinsic, config).extents[1])
        except ScheduleError:
            continue
    for tile in sorted(widths, reverse=True):
        try:
            sch.diagonalize(sch.get_block(block_name), tile)
        except ScheduleError:
            continue
        return True
    return False


def schedule_npu(sch: Schedule, block_name: str, intrinsic: Intrinsic, registry: Registry,
                 tiling: NpuTiling, config: MachineConfig, fuse_epilogues: bool = True) -> None:
    """Tile, stage and tensorize the GEMM-shaped block (module docs); with
    ``fuse_epilogues``, also the elementwise blocks after it that the vector unit of the
    machine ``config`` can do."""
    axes = gemm_axes(intrinsic)
    ti, tj, tk = axes.extents
    zero = _zeroing(intrinsic, registry)
    block = sch.get_block(block_name)
    loops = sch.get_loops(block)
    lm, ln, lk = axes.of(tuple(loops[-3:]))
    m, n, k = (sch.get(loop).extent for loop in (lm, ln, lk))
    tm = _tile(tiling.rows, ti, m)
    tn = _tile(tiling.cols, tj, n)
    kb = _tile(tiling.depth, tk, k)
    a, b, c = _operand_buffers(sch, block_name, intrinsic, axes)
    mo, mt, mi = sch.split(lm, [None, tm // ti, ti])
    no, nt, ni = sch.split(ln, [None, tn // tj, tj])
    ko, kt, ki = sch.split(lk, [None, kb // tk, tk])
    steps = k // kb
    period = _gather_period(sch, a.name, steps, kb)
    reduction = [ko]
    if 1 < period < steps:
        reduction = list(sch.split(ko, [None, period]))
        ko = reduction[-1]
    outer, inner = (no, mo) if tiling.order == "nm" else (mo, no)
    sch.reorder(outer, inner, *reduction, kt, nt, mt, mi, ni, ki)

    names = [o.name for o in _gemm_operands(intrinsic, axes)]
    # Scope values, not names: a vendor family's scopes are in this registry alone.
    scope = {o.name: registry.scope(o.scope) for o in intrinsic.operands}
    # A panel the outer loop alone indexes stays on chip while the inner loop runs.
    whole_k = kb == k
    a_stage = sch.cache_read(block, a.name, scope[names[0]])
    sch.compute_at(a_stage, outer if whole_k and tiling.order == "mn" else ko)
    b_stage = sch.cache_read(block, b.name, scope[names[1]])
    sch.compute_at(b_stage, outer if whole_k and tiling.order == "nm" else ko)
    c_stage = sch.cache_write(block, c.name, scope[names[2]])
    sch.reverse_compute_at(c_stage, inner)
    for stage, width in ((a_stage, tk), (b_stage, tj)):
        staged = sch.get(stage).block.writes[0].buffer.name
        sch.compact_buffer(staged)
        _column_blocks(sch, stage, staged, width)
    acc = sch.get(c_stage).block.reads[0].buffer.name
    sch.compact_buffer(acc)
    _column_blocks(sch, c_stage, acc, tj)
    store_stage, store_done = c_stage, False
    if fuse_epilogues:
        store_stage, store_done = _fuse_epilogues(sch, c_stage, acc, scope[names[2]], inner,
                                                  tj, registry, config)

    if isinstance(zero, tuple):
        _tensorize_fill(sch, block, reduction[0], zero)
        sch.tensorize(mi, intrinsic)
    else:
        _tensorize_gemm(sch, mi, block_name, intrinsic, zero)

    loads = {name: intrinsic.loads.get(name, ()) for name in names[:2]}
    stores = intrinsic.stores.get(names[2], ())
    _tensorize_copy(sch, a_stage, loads[names[0]], registry)
    _tensorize_copy(sch, b_stage, loads[names[1]], registry)
    if not store_done:
        dtype = sch.get(store_stage).block.writes[0].buffer.dtype
        _tensorize_copy(sch, store_stage, stores, registry, dtype)


def _gather_period(sch: Schedule, a: str, steps: int, depth: int) -> int:
    """How many consecutive ``depth``-deep steps of the reduction read columns of ``a``
    that its producer copies from evenly spaced elements of one tensor (a convolution's
    im2col: the channels of one window position), the most that divides ``steps``; all of
    them when ``a`` is no copy's. A device whose loads gather those columns themselves
    then finds each step's address affine in a loop of that many (the reduction is split
    there), so the loop folds into a loop instruction."""
    writer = tree.sole_writer(sch.func, a)
    if writer is None:
        return steps
    store = writer.body
    if not isinstance(store, BufferStore) or len(store.indices) != 2 or \
            not all(isinstance(i, Var) for i in store.indices):
        return steps
    # A padded copy selects its load where it covers the element, else a zero.
    load = store.value.true_value if isinstance(store.value, Select) else store.value
    if not isinstance(load, BufferLoad):
        return steps
    row, column = store.indices
    flat = sum((index * stride for index, stride in zip(load.indices,
                                                       load.buffer.effective_strides)),
               IntImm(0))
    if any(v is not row and v is not column for v in vars_of(flat)):
        return steps  # the copy reads through other iterators: no column of one tensor
    offsets = [evaluate(flat, {row: 0, column: step * depth}) for step in range(steps)]
    for period in range(steps, 1, -1):
        if steps % period == 0 and all(
                len({b - a for a, b in zip(block, block[1:])}) <= 1
                for block in (offsets[s:s + period] for s in range(0, steps, period))):
            return period
    return 1


def _tile(size: int, unit: int, extent: int) -> int:
    """``size`` when it is a multiple of ``unit`` dividing ``extent``, else ``unit``."""
    return size if size and size % unit == 0 and extent % size == 0 else unit


def _column_blocks(sch: Schedule, stage, buffer: str, width: int) -> None:
    """Store a staged tile wider than one call (``width`` columns) as column blocks, one
    block row per memory row: ``T[..., r, c]`` moves to ``T'[..., c // width, r, c %
    width]``, so that every call's operand is a run of whole rows."""
    shape = next(b for b in sch.func.allocs if b.name == buffer).shape
    if len(shape) < 2 or not _divides(width, shape[-1]):
        return
    outer = ", ".join(f"d{n}" for n in range(len(shape) - 2))
    lead = outer + ", " if outer else ""
    sch.transform_layout(stage, buffer,
                         f"lambda {lead}r, c: ({lead}c // {width}, r, c % {width})")


def _zeroing(intrinsic: Intrinsic, registry: Registry) -> Intrinsic | tuple[Intrinsic, ...]:
    """How the family starts an accumulator tile: its resetting variant of ``intrinsic``, or
    else the fill intrinsics it declares for the accumulator (ScheduleError with neither)."""
    reset = runnable.reset_variant(intrinsic, registry.for_target(intrinsic.target))
    if reset is not None:
        return reset
    fills = tuple(registry.get(name) for name in intrinsic.fill.get(intrinsic.output.name, ()))
    if fills:
        return fills
    raise ScheduleError(_PRIMITIVE, runnable.zeroing_problem(intrinsic))


def _gemm_operands(intrinsic: Intrinsic, axes: GemmAxes
                   ) -> tuple[Operand, Operand, Operand]:
    """The operands (A, B, C): A indexed by (m, k), B by (k, n), C the output."""
    operands = runnable.gemm_operands(intrinsic, axes)
    if operands is None:
        raise ScheduleError(_PRIMITIVE, runnable.not_row_major(intrinsic))
    return operands


def _fuse_epilogues(sch: Schedule, c_stage, acc: str, acc_scope: str, tile_loop, width: int,
                    registry: Registry, config: MachineConfig) -> tuple[object, bool]:
    """Move the elementwise blocks that consume the GEMM's result onto the accumulator tile,
    while the vector unit or a store intrinsic can do them: each is put under the tile loop,
    reads the tile on chip (the write-back is inlined into it), and then either is itself a
    store (``npu_store_acc_i8`` narrows with saturation) or computes in place on the tile
    with a vector instruction, its other inputs loaded beside the tile: a row (a bias, per
    column) by a row load, a tile (a residual add's skip input, read at the tile's own
    indices) or a few rows of parameters by a tile load of the family that writes the
    accumulator memory in their dtype (``npu_load_acc_i8`` widens int8). The result, and
    every staged tile, is stored in ``width``-column blocks, as the accumulator tile is.

    Returns the block that now writes the result to DRAM and whether it is already
    tensorized. An epilogue no instruction computes ends the chain; it and what follows run
    as before (on the host), so fusing never changes what is computed.
    """
    vectors = vector_intrinsics(registry, config)
    stores = [i for i in registry.for_target("npu") if i.kind == "store"]
    stage = c_stage
    while True:
        epilogue = _elementwise_consumer(sch, stage)
        if epilogue is None:
            return stage, False
        before = sch.snapshot()
        try:
            sch.reverse_compute_at(epilogue, tile_loop)
            sch.compute_inline(stage)
            if _tensorize_any(sch, epilogue, stores):
                return epilogue, True
            out = sch.get(epilogue).block.writes[0].buffer
            extra = [r.buffer.name for r in sch.get(epilogue).block.reads
                     if r.buffer.name != acc and r.buffer.scope == "global"]
            loads = []
            loads = [stage_beside(sch, epilogue, name, acc_scope, tile_loop, width)
                     for name in extra]
            write_back = sch.cache_write(epilogue, out.name, acc_scope)
            sch.reverse_compute_at(write_back, tile_loop)
            written = sch.get(epilogue).block.writes[0].buffer.name
            sch.compact_buffer(written)
            _column_blocks(sch, epilogue, written, width)
            sch.write_in_place(epilogue, acc)
            if not _tensorize_any(sch, epilogue, vectors):
                raise ScheduleError("fuse epilogue", "no vector instruction computes it")
            for load in loads:
                _tensorize_staged(sch, load, registry)
        except ScheduleError:
            sch.restore(before)
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


def _tensorize_any(sch: Schedule, block, candidates: list[Intrinsic]) -> bool:
    """Tensorize a two-dimensional block (a copy, an elementwise epilogue) with the first
    candidate that fits, its rows tiled by the candidate's rows and, when wider than the
    candidate, its columns by the candidate's columns (column tiles outermost, so each
    column block's rows follow each other)."""
    body = tree.operators(sch.get(block).block.body)
    for intrinsic in candidates:
        if intrinsic.kind == "compute" and tree.operators(intrinsic.semantics) != body:
            continue  # tensorize would refuse it, after the splits it takes to try
        before = sch.snapshot()
        rows, cols = sch.get_loops(block)[-2:]
        shape = intrinsic.output.shape
        try:
            if len(shape) == 2 and _divides(shape[1], sch.get(cols).extent):
                col_tiles, cols = sch.split(cols, [None, shape[1]])
                sch.reorder(col_tiles, rows)
            if shape and _divides(shape[0], sch.get(rows).extent):
                _, rows = sch.split(rows, [None, shape[0]])
            sch.tensorize(rows, intrinsic)
            return True
        except ScheduleError:
            sch.restore(before)
    return False


def _divides(tile: int, extent: int) -> bool:
    """True when ``extent`` is several whole tiles."""
    return extent > tile and extent % tile == 0


def vector_intrinsics(registry: Registry, config: MachineConfig) -> list[Intrinsic]:
    """The NPU family's vector intrinsics the machine ``config`` runs, those of fewest
    operands first: relu before max-with-an-immediate."""
    return sorted((i for i in registry.for_target("npu")
                   if i.kind == "compute" and not i.reduce_vars()
                   and runnable.unit_problem(i, config) is None),
                  key=lambda i: len(i.operands))


def stage_beside(sch: Schedule, block, name: str, scope, loop, width: int):
    """``block``'s input ``name`` read through a copy in ``scope``, one tile per iteration
    of ``loop``, compacted and stored in ``width``-column blocks: the staging copy."""
    load = sch.cache_read(block, name, scope)
    sch.compute_at(load, loop)
    staged = sch.get(load).block.writes[0].buffer.name
    sch.compact_buffer(staged)
    _column_blocks(sch, load, staged, width)
    return load


def tensorize_tile_load(sch: Schedule, block, registry: Registry) -> bool:
    """Tensorize the two-dimensional copy ``block`` by the first load intrinsic that writes
    tiles of its output's dtype and scope and fits; False (``sch`` unchanged) when none."""
    written = sch.get(block).block.writes[0].buffer
    tiles = [i for i in registry.for_target("npu") if i.kind == "load"
             and len(i.output.shape) == 2 and i.output.dtype == written.dtype
             and i.output.scope == written.scope]
    return _tensorize_any(sch, block, tiles)


def _tensorize_staged(sch: Schedule, load, registry: Registry) -> None:
    """Tensorize an epilogue input's staging copy into the accumulator memory: a row by a
    row load (:func:`_tensorize_row_load`), a tile or a block of rows by the first load
    intrinsic writing two-dimensional tiles of its dtype and scope that fits."""
    written = sch.get(load).block.writes[0].buffer
    # A batched GEMM's per-batch row compacts to shape (1, ..., n): still one row.
    if all(extent == 1 for extent in written.shape[:-1]):
        _tensorize_row_load(sch, load, registry)
        return
    if not tensorize_tile_load(sch, load, registry):
        raise ScheduleError("fuse epilogue", f"no intrinsic loads a tile of {written.dtype} "
                            f"into {written.scope} (staging {written.name}, shape "
                            f"{written.shape})")


def _tensorize_row_load(sch: Schedule, load, registry: Registry) -> None:
    """A one-dimensional staging copy (a bias row, a row of scales) becomes one row load,
    by the first row-load intrinsic of its dtype."""
    loop = sch.get_loops(load)[-1]
    dtype = sch.get(load).block.writes[0].buffer.dtype
    for intrinsic in registry.for_target("npu"):
        if intrinsic.kind == "load" and len(intrinsic.output.shape) == 1 and \
                intrinsic.output.dtype == dtype:
            if _divides(intrinsic.output.shape[0], sch.get(loop).extent):
                _, loop = sch.split(loop, [None, intrinsic.output.shape[0]])
            sch.tensorize(loop, intrinsic)
            return
    raise ScheduleError("fuse epilogue", f"no intrinsic loads one accumulator row of {dtype}")


def _operand_buffers(sch: Schedule, block_name: str, intrinsic: Intrinsic, axes: GemmAxes
                     ) -> tuple[Buffer, Buffer, Buffer]:
    """The kernel buffers standing for the intrinsic's A, B and C: the store is C; a load
    indexed by (m, k) is A, by (k, n) is B."""
    block = sch.get(sch.get_block(block_name)).block
    ivs = axes.of(tuple(iv.var for iv in block.iter_vars[-3:]))
    store = block.body
    if not isinstance(store, BufferStore):
        raise ScheduleError(_PRIMITIVE, f"block {block_name!r} requires one store as its "
                            f"body, got a {type(store).__name__}")
    found: dict[tuple[int, ...], Buffer] = {}

    def visit(node: object) -> None:
        if isinstance(node, BufferLoad) and node.buffer is not store.buffer:
            key = tuple(ivs.index(i) for i in node.indices[-2:] if isinstance(i, Var)
                        and i in ivs)
            found[key] = node.buffer

    post_order_visit(store.value, visit)
    return found[(0, 2)], found[(2, 1)], store.buffer


def _tensorize_gemm(sch: Schedule, tile_loop, block_name: str, intrinsic: Intrinsic,
                    reset: Intrinsic) -> None:
    """Replace the GEMM tile under ``tile_loop`` by ``intrinsic``, its first step by the
    resetting variant ``reset`` (``fold_init``); or, when the whole reduction fits one tile,
    by ``reset`` alone.

    When the reduction is one tile deep (K <= tk after padding), no reduce loop stays outside
    the tile, so ``blockize`` keeps the init inside it and the accumulating intrinsic is
    refused: every call then starts a new accumulator tile, which is what the resetting
    variant does. Raises the accumulating intrinsic's refusal, with the resetting variant's,
    when neither fits.
    """
    try:
        sch.tensorize(tile_loop, intrinsic)
    except ScheduleError as accumulating:
        try:
            sch.tensorize(tile_loop, reset)
        except ScheduleError as resetting:
            reasons = [err.message.removeprefix("tensorize: ")
                       for err in (accumulating, resetting)]
            raise ScheduleError("tensorize", f"neither {intrinsic.name} nor {reset.name} fits: "
                                f"{reasons[0]}; {reasons[1]}",
                                accumulating.nodes + resetting.nodes, accumulating.loc) from None
        return
    sch.fold_init(sch.get_block(f"{block_name}_o"), reset)


def _tensorize_fill(sch: Schedule, block, reduction_loop, fills: tuple[Intrinsic, ...]) -> None:
    """Zero the accumulator tile before ``reduction_loop`` with one of ``fills``: the block's
    init becomes a block of its own there (``decompose_reduction``), tensorized like a copy."""
    init = sch.decompose_reduction(block, reduction_loop)
    if not _tensorize_any(sch, init, list(fills)):
        names = ", ".join(f.name for f in fills)
        raise ScheduleError(_PRIMITIVE, f"the accumulator tile's init is not computed by the "
                            f"declared fill intrinsic(s) {names}")


def _tensorize_copy(sch: Schedule, stage, candidates: tuple[str, ...], registry: Registry,
                    dtype=None) -> None:
    """Replace a staging copy by tiles of the first data-movement intrinsic among
    ``candidates`` that fits (the int32 or narrowing store, by the destination's dtype)."""
    fitting = [registry.get(name) for name in candidates]
    fitting = [i for i in fitting if dtype is None or i.output.dtype == dtype]
    if not _tensorize_any(sch, stage, fitting):
        block = sch.get(stage).block
        raise ScheduleError(_PRIMITIVE, f"no data-movement intrinsic among "
                            f"{', '.join(candidates) or '(none declared)'} copies block "
                            f"{block.name!r} ({block.writes[0].buffer.name}, shape "
                            f"{block.writes[0].buffer.shape})")
