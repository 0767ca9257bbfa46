"""A kernel of elementwise blocks alone (a requantisation, a residual add, a ReLU) as one
NPU program on the vector unit, with no GEMM before it.

The GEMM schedule (``npu_schedule``) runs the elementwise blocks after a GEMM on its
accumulator tile. Here the tile comes from DRAM instead: the kernel's first block is put
under a tile loop with its result in the accumulator memory, and then either

- it is itself a copy of a tile of its input (a widening one, where the family has it),
  and becomes that load; or
- its tile inputs (read at the indices it stores to) and row inputs (read by the column
  alone: a bias, a row of scales) are loaded beside it, and it computes in place on the
  first tile input's copy with a vector intrinsic;

after which every later block follows on the same tile exactly as an epilogue follows a
GEMM (``npu_schedule._fuse_epilogues``), and the last result is stored. Every block must be
``(rows, columns)`` over whole ``16 x 16``-style tiles of the vector intrinsics (the caller
pads), after any leading batch dimensions, which stay outer loops (a row input is then
read by the batch indices and the column: a grouped layer's bias); the tile is the largest that fits the accumulator memory
twice over with every tile input, at most :func:`~tensorize.engine.npu_traffic.most_blocks`
call-wide column blocks wide. An elementwise kernel moves each element once whatever the
tile, so the tile only sets the instruction count and the overlap.

A kernel with a block the vector unit cannot compute is refused with that block and reason
(a :class:`ScheduleError`), and the engine leaves it untouched for the host.
"""

from __future__ import annotations

from intrinsics import Registry
from intrinsics.runnable import row_layout
from ir import BufferLoad, BufferStore, IterKind, ScheduleError, Var
from ir.visitor import post_order_visit
from simulator import MachineConfig
from simulator.config import row_width
from tensorize.engine import npu_traffic
from tensorize.engine.npu_schedule import (_column_blocks, _fuse_epilogues, _tensorize_any,
                                           _tensorize_copy, _tensorize_staged, stage_beside,
                                           tensorize_tile_load, vector_intrinsics)
from tensorize.schedule import Schedule, tree

_PRIMITIVE = "npu vector kernel"


def elementwise_only(sch: Schedule) -> bool:
    """Whether every block of the function is elementwise (no reduce iterator): the
    kernels this schedule is for."""
    names = tree.block_names(sch.func)
    return bool(names) and all(
        not any(iv.kind is IterKind.REDUCE for iv in sch.get(sch.get_block(n)).block.iter_vars)
        for n in names)


def schedule_vector(sch: Schedule, registry: Registry, config: MachineConfig) -> None:
    """Schedule the elementwise kernel in ``sch`` onto the NPU (module docs). Raises
    ScheduleError naming the block and the reason when it cannot (``sch`` is then partly
    rewritten: the caller restores it)."""
    first = tree.block_names(sch.func)[0]
    block = sch.get_block(first)
    body = sch.get(block).block
    store = body.body
    if not isinstance(store, BufferStore) or len(store.indices) < 2 or body.init is not None:
        raise ScheduleError(_PRIMITIVE, f"block {first!r} requires one store of at least "
                            "two dimensions (rows, columns)")
    tiles, rows = _inputs(body, store)
    acc_scope = registry.scope("npu.acc")
    width = _call_width(registry, config)
    m, n = (sch.get(loop).extent for loop in sch.get_loops(block)[-2:])
    # Every input of the kernel is staged in the accumulator memory beside the tile (a row
    # input takes far less than a tile; counting it as one keeps the bound simple).
    inputs = len(sch.func.params) - 1  # the last parameter is the output
    tm, tn = _tile(m, n, width, inputs, config)
    i, j = sch.get_loops(block)[-2:]
    io, ii = sch.split(i, [None, tm])
    jo, ji = sch.split(j, [None, tn])
    sch.reorder(io, jo, ii, ji)
    write_back = sch.cache_write(block, store.buffer.name, acc_scope)
    sch.reverse_compute_at(write_back, jo)
    acc = sch.get(block).block.writes[0].buffer.name
    sch.compact_buffer(acc)
    _column_blocks(sch, block, acc, width)
    # A plain or widening copy of its one tile input is a load into the accumulator tile.
    if len(tiles) != 1 or not tensorize_tile_load(sch, block, registry):
        loads = [stage_beside(sch, block, name, acc_scope, jo, width) for name in tiles + rows]
        acc = _in_place(sch, block, loads, registry, config)
    stage, done = _fuse_epilogues(sch, write_back, acc, acc_scope, jo, width, registry, config)
    if not done:
        out = sch.get(stage).block.writes[0].buffer
        stores = [i.name for i in registry.for_target("npu") if i.kind == "store"]
        _tensorize_copy(sch, stage, tuple(stores), registry, out.dtype)
    untouched = [b for b in tree.block_names(sch.func)
                 if "tensorized" not in dict(sch.get(sch.get_block(b)).block.annotations)]
    if untouched:
        raise ScheduleError(_PRIMITIVE, f"no vector instruction of {config.name} computes "
                            f"block {untouched[0]!r}")


def _inputs(block, store: BufferStore) -> tuple[list[str], list[str]]:
    """The global buffers ``block`` reads at the indices it stores to (tiles) and by its
    column index alone, after any batch indices (rows); ScheduleError for any other
    access."""
    tiles: list[str] = []
    rows: list[str] = []
    column = store.indices[-1]
    row_indices = (*store.indices[:-2], column)
    problem: list[str] = []

    def visit(node: object) -> None:
        if not isinstance(node, BufferLoad):
            return
        name = node.buffer.name
        if node.indices == store.indices:
            (tiles if name not in tiles else []).append(name)
        elif node.indices == row_indices and all(isinstance(i, Var) for i in row_indices):
            (rows if name not in rows else []).append(name)
        else:
            problem.append(name)

    post_order_visit(store.value, visit)
    if problem:
        raise ScheduleError(_PRIMITIVE, f"block {block.name!r} reads {problem[0]} other than "
                            "at the indices it stores to or by its column alone")
    if not tiles:
        raise ScheduleError(_PRIMITIVE, f"block {block.name!r} reads no tile of an input")
    return tiles, rows


def _call_width(registry: Registry, config: MachineConfig) -> int:
    """The columns of one vector instruction's tile: the widest among those the machine
    runs (every one of the built-in family is one accumulator row wide)."""
    widths = {i.output.shape[-1] for i in vector_intrinsics(registry, config)
              if len(i.output.shape) == 2}
    if not widths:
        raise ScheduleError(_PRIMITIVE, f"{config.name} runs no two-dimensional vector "
                            "instruction")
    return max(widths)


def _tile(m: int, n: int, width: int, copies: int, config: MachineConfig) -> tuple[int, int]:
    """The largest ``tm x tn`` tile (``tn`` call-wide blocks, at most ``most_blocks``; both
    dividing the extents) of which two copies each of ``copies`` buffers fit the
    accumulator memory, each copy within a bank."""
    if m % width or n % width:
        raise ScheduleError(_PRIMITIVE, f"a {m} x {n} kernel is not whole {width} x {width} "
                            "tiles of the vector instructions (the caller pads)")
    acc, row = config.acc, row_width(config.array, "acc")
    best = None
    for tn in range(width, min(n, npu_traffic.most_blocks(config) * width) + 1, width):
        for tm in range(width, m + 1, width):
            if n % tn or m % tm:
                continue
            layout = row_layout((tn // width, tm, width), row)
            rows = layout[1] if layout is not None else acc.rows + 1
            # Two copies of each buffer (double buffering), each within one bank.
            if rows <= acc.bank_rows and acc.banks * (acc.bank_rows // rows) >= 2 * copies:
                best = max(best or (0, 0, 0), (tm * tn, tn, tm))
    if best is None:
        raise ScheduleError(_PRIMITIVE, f"not even one {width} x {width} tile of each of "
                            f"{copies} buffers fits {config.name}'s accumulator twice")
    return best[2], best[1]


def _in_place(sch: Schedule, block, loads, registry: Registry, config: MachineConfig) -> str:
    """``block`` computed in place on its first tile input's copy by a vector intrinsic,
    its inputs loaded by the family's tile and row loads; returns that copy's name."""
    first = sch.get(loads[0]).block.writes[0].buffer.name
    sch.write_in_place(block, first)
    if not _tensorize_any(sch, block, vector_intrinsics(registry, config)):
        raise ScheduleError(_PRIMITIVE, f"no vector instruction of {config.name} computes "
                            f"block {sch.get(block).block.name!r}")
    for load in loads:
        _tensorize_staged(sch, load, registry)
    return first
