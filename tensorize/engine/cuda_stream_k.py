"""The stream-K hybrid for CUDA GEMMs, as two launches over row ranges.

Stream-K (Osama et al., "Stream-K: Work-centric Parallel Decomposition for Dense
Matrix-Matrix Multiplication on the GPU", PPoPP 2023; CUTLASS's ``kStreamK`` mode) gives
each of the GPU's blocks an equal share of the GEMM's (output tile, k step) iterations,
cutting tiles where a share ends; the blocks sharing a tile add their partial sums in a
fix-up. Its "data-parallel + stream-K" hybrid keeps the whole waves of output tiles
unsplit, one tile a block, and shares out only the tiles of the last, partial wave, whose
blocks would otherwise leave SMs idle while each walks the whole of K.

A share that ends in the middle of a tile is a range of k steps chosen per block at run
time, which this IR's loop nests (each block a rectangle of iterations) do not express. So
the hybrid is built from two schedule primitives, with what follows from that:

- ``partition`` cuts the GEMM's rows (M) after the tile rows of the whole waves: those
  rows run as one GEMM launch, data-parallel, their output tiles finished in it;
- ``split_reduction`` splits the remaining rows' K in ``p`` parts, each a block of its own
  in a second GEMM launch (split-K, ``p`` chosen to fill the SMs), and a third launch adds
  the parts in order of the part, as split-K does.

Rather than stream-K's exactly even shares, the rest's tiles get equal slices of K, so a
share is a whole tile's slice and the split's granularity is a power of two
(``cuda_split``); the data-parallel part is rounded down to whole tile rows. There are no
atomics and no per-tile flags: every partial sum is written by one block and added in a
fixed order, so integer results are exact and float results the same on every run.
"""

from __future__ import annotations

from ir import Block, BufferLoad, BufferStore, IterKind, ScheduleError
from ir.visitor import post_order_visit
from tensorize.schedule import Schedule, tree

__all__ = ["data_parallel_rows", "stream_k", "stream_k_refusal"]


def data_parallel_rows(tile_rows: int, tiles_per_row: int, wave: int) -> list[int]:
    """The tile rows the hybrid may run data-parallel, for a grid of ``tile_rows`` x
    ``tiles_per_row`` output tiles of which ``wave`` run at once on the GPU: the rows of
    the whole waves, rounded down to whole rows, and of one wave fewer (the last whole wave
    may share out better with the partial one, as CUTLASS's two-tile variant does); only
    counts leaving rows on both sides."""
    full = tile_rows * tiles_per_row // wave
    found = []
    for waves in (full, full - 1):
        rows = waves * wave // tiles_per_row
        if 0 < rows < tile_rows and rows not in found:
            found.append(rows)
    return found


def stream_k_refusal(sch: Schedule, block_name: str) -> str | None:
    """Why the GEMM ``block_name`` cannot run as the hybrid, or None when it can: an input
    the kernel writes with a plain copy (an implicit GEMM's im2col, which the CUDA schedule
    folds into one GEMM's copies) or an 8-bit B the kernel writes (the schedule lays it out
    for one GEMM, transposed in global memory)."""
    block = sch.get(sch.get_block(block_name)).block
    intermediates = {b.name for b in sch.func.allocs}
    output = block.writes[0].buffer.name
    for region in block.reads:
        name = region.buffer.name
        if name == output or name not in intermediates:
            continue
        if _plain_copy(sch, name):
            return f"its input {name} is a copy the schedule folds into one GEMM's tiles"
        if region.buffer.dtype.bits == 8 and _is_b(block, name):
            return f"its 8-bit B, {name}, is written by the kernel for one GEMM's layout"
    return None


def stream_k(sch: Schedule, block_name: str, rows: int, parts: int) -> str:
    """Run the first ``rows`` rows (padded M) of GEMM-shaped ``block_name`` (iterators
    ``(outer..., m, n, k)``) as the block itself and split the k of the others in
    ``parts`` (module docs). Returns the name of the rest's GEMM block; its sum is
    ``<rest>_sum``."""
    block = sch.get_block(block_name)
    loops = sch.get_loops(block)
    if len(loops) < 3:
        raise ScheduleError("cuda stream-K", f"block {block_name} has no (m, n, k) loops")
    rest = sch.partition(block, loops[-3], rows)
    sch.split_reduction(rest, sch.get_loops(rest)[-1], parts)
    return rest.name


def _plain_copy(sch: Schedule, buffer: str) -> bool:
    """Whether one block writes the intermediate ``buffer`` by copying another buffer's
    element, with no reduction."""
    writer = tree.sole_writer(sch.func, buffer)
    return (writer is not None and isinstance(writer.body, BufferStore)
            and isinstance(writer.body.value, BufferLoad) and writer.init is None
            and all(iv.kind is IterKind.SPATIAL for iv in writer.iter_vars))


def _is_b(block: Block, name: str) -> bool:
    """Whether the GEMM ``block`` reads ``name`` as B: indexed by its k and n iterators."""
    k_var, n_var = block.iter_vars[-1].var, block.iter_vars[-2].var
    found: list[bool] = []

    def visit(node: object) -> None:
        if isinstance(node, BufferLoad) and node.buffer.name == name:
            used: list[object] = []
            post_order_visit(node, used.append)
            found.append(any(u is k_var for u in used) and any(u is n_var for u in used))

    post_order_visit(block.body, visit)
    return any(found)
