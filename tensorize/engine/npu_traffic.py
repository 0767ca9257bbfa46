"""The DRAM traffic of the NPU's GEMM schedule, and the tiles that make it least.

The schedule (``npu_schedule``) runs a GEMM ``M x N x K`` (extents padded to the intrinsic's
``ti x tj x tk``) in accumulator tiles of ``tm x tn``, each reduced in steps of ``tk``-deep
blocks ``kb`` deep, the tiles visited row tile by row tile (order ``"mn"``) or column tile
by column tile (``"nm"``). Per step it loads an input tile ``tm x kb`` and a weight tile
``kb x tn``, and it stores each accumulator tile once. So, with ``A``, ``B`` and ``C`` the
bytes of the three tensors::

    bytes = A * (N / tn) + B * (M / tm) + C

except that an operand indexed by the outer loop alone stays on chip while the inner loop
runs, when its whole panel is one tile (``kb == K``): in order ``"mn"`` the ``tm x K``
input panel is loaded once per row tile, so ``A`` is read once; in order ``"nm"`` the
``K x tn`` weight panel, so ``B`` is. The least any schedule moves reads each operand once
and writes the output once: ``A + B + C``.

A row tile ``tm`` need not divide M: the schedule then pads M up to the next multiple
(:func:`padded_m`; ``M = 784`` in four 208-row tiles is 832 rows), whose extra rows are
moved as real ones (A's and C's bytes above are of the padded rows). Only the row tiles
that leave no smaller tile with as few tiles are candidates (:func:`row_tiles`).

A candidate fits when the NPU backend's memory planner (``targets.npu.memory.place``) puts
two copies of each staged operand tile in its memory (so the next tile's load overlaps the
current tile's use), and one or two copies of the accumulator's buffers (the tile, the
tiles an epilogue loads beside it and its per-column vectors): on-chip tiles are stored in
``tk``- or ``tj``-wide column blocks, one block row per memory row, and a copy larger than a
bank spans banks, each block inside one bank, since an instruction walks one block and must
stay in one bank. With one accumulator copy the next tile's GEMMs overwrite each block only
once its store has read it; on ResNet-50's layers that measured 0.2-2% of a layer's cycles
(docs/simulator.md, *GEMM tiles and DRAM traffic*).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

from intrinsics.runnable import row_layout
from simulator import MachineConfig
from simulator.config import row_width
from targets.npu.memory import place, place_copies, slab_rows

ORDERS = ("mn", "nm")


@dataclass(frozen=True, slots=True)
class GemmShape:
    """A GEMM as the schedule sees it: padded extents ``m x n x k``, the intrinsic's tile
    ``ti x tj x tk``, the bytes per element of A, B and C in DRAM, and the accumulator
    tiles a step keeps on chip: the sums and each tile its epilogue loads beside them (a
    residual add's skip input), and the per-column vectors of ``n`` elements the epilogue
    keeps in the accumulator memory beside them (a bias, a requantisation's scale)."""

    m: int
    n: int
    k: int
    ti: int
    tj: int
    tk: int
    a_bytes: int = 1
    b_bytes: int = 1
    c_bytes: int = 4
    acc_tiles: int = 1
    acc_vectors: int = 0

    @property
    def minimum(self) -> int:
        """The least DRAM traffic of any schedule: each operand read once, C written once."""
        return (self.m * self.k * self.a_bytes + self.k * self.n * self.b_bytes
                + self.m * self.n * self.c_bytes)


@dataclass(frozen=True, slots=True)
class NpuTiling:
    """One GEMM schedule: accumulator tiles of ``rows`` (tm) x ``cols`` (tn), reduced in
    blocks ``depth`` (kb) deep, visited in ``order`` (``"mn"``: row tiles outside; ``"nm"``:
    column tiles outside). ``cols`` and ``depth`` of 0 mean one intrinsic call's (tj, tk)."""

    rows: int
    cols: int = 0
    depth: int = 0
    order: str = "mn"

    def describe(self) -> str:
        """The tile as the run's report shows it."""
        return f"{self.rows}x{self.cols}x{self.depth} {self.order}"


def padded_m(shape: GemmShape, tiling: NpuTiling) -> int:
    """M padded up to a multiple of the row tile: the rows the schedule runs."""
    return -(-shape.m // tiling.rows) * tiling.rows


def reads(shape: GemmShape, tiling: NpuTiling) -> tuple[int, int]:
    """How many times the schedule with ``tiling`` reads all of A (its padded rows) and all
    of B: once each column tile and once each row tile, but once when the operand's panel
    stays on chip."""
    s = shape
    whole_k = (tiling.depth or s.tk) == s.k
    a_reads = 1 if tiling.order == "mn" and whole_k else s.n // (tiling.cols or s.tj)
    b_reads = 1 if tiling.order == "nm" and whole_k else padded_m(s, tiling) // tiling.rows
    return a_reads, b_reads


def traffic(shape: GemmShape, tiling: NpuTiling) -> int:
    """Bytes the schedule with ``tiling`` moves across the DRAM port (module docs)."""
    s = shape
    a_reads, b_reads = reads(shape, tiling)
    m = padded_m(shape, tiling)
    return (m * s.k * s.a_bytes * a_reads + s.k * s.n * s.b_bytes * b_reads
            + m * s.n * s.c_bytes)


def tile_rows(shape: GemmShape, tiling: NpuTiling, config: MachineConfig
              ) -> dict[str, tuple[int, int]]:
    """Memory rows of one copy of each staged tile, ``inp`` (A), ``wgt`` (B), ``acc`` (C),
    and of one of its column blocks: a tile wider than one call is stored in call-wide
    column blocks (``tk`` for A, ``tj`` for B and C), one block row per memory row."""
    s = shape
    tn, kb = tiling.cols or s.tj, tiling.depth or s.tk
    arr = config.array
    tiles = {"inp": (kb // s.tk, tiling.rows, s.tk), "wgt": (tn // s.tj, kb, s.tj),
             "acc": (tn // s.tj, tiling.rows, s.tj)}
    return {name: _rows(tile, row_width(arr, name)) for name, tile in tiles.items()}


def fits(shape: GemmShape, tiling: NpuTiling, config: MachineConfig) -> bool:
    """Whether the memory planner places two copies of each staged operand tile and at
    least one of the accumulator's buffers (:func:`acc_copies`)."""
    rows = tile_rows(shape, tiling, config)
    return (all(place([rows[name][0]], [rows[name][1]], [2], memory) is not None
                for name, memory in (("inp", config.inp), ("wgt", config.wgt)))
            and acc_copies(shape, tiling, config) > 0)


def acc_copies(shape: GemmShape, tiling: NpuTiling, config: MachineConfig) -> int:
    """Copies of the accumulator's buffers the memory planner keeps (2, 1, or 0 when one
    copy does not fit): ``shape.acc_tiles`` tiles and ``shape.acc_vectors`` vectors of the
    tile's columns, as the planner decides (``targets.npu.memory.place_copies``)."""
    tile, block = tile_rows(shape, tiling, config)["acc"]
    vector = _rows((tiling.cols or shape.tj,), row_width(config.array, "acc"))
    sizes = [tile] * shape.acc_tiles + [vector[0]] * shape.acc_vectors
    slabs = [block] * shape.acc_tiles + [vector[1]] * shape.acc_vectors
    placed = place_copies(sizes, slabs, [True] * len(sizes), config.acc)
    return 0 if placed is None else len(placed[0])


def in_banks(shape: GemmShape, tiling: NpuTiling, config: MachineConfig) -> bool:
    """Whether each staged tile fits one bank of its memory (no copy spans banks)."""
    memories = {"inp": config.inp, "wgt": config.wgt, "acc": config.acc}
    return all(rows <= memories[name].bank_rows
               for name, (rows, _) in tile_rows(shape, tiling, config).items())


def candidates(shape: GemmShape, config: MachineConfig) -> Iterator[NpuTiling]:
    """Every tiling that fits: tm one of :func:`row_tiles`, tn and kb multiples of the
    call's tile dividing the extents, in both orders."""
    s = shape
    for rows in row_tiles(s.m, s.ti):
        for cols in _multiples(s.n, s.tj):
            for depth in _multiples(s.k, s.tk):
                for order in ORDERS:
                    tiling = NpuTiling(rows, cols, depth, order)
                    if fits(s, tiling, config):
                        yield tiling


def most_blocks(config: MachineConfig) -> int:
    """The most call-wide column blocks of an accumulator tile the schedule takes at no
    extra modelled cost (and of an elementwise kernel's tile, ``npu_vector``): half the
    token queue's depth. The store of each block, and the vector instruction of each
    epilogue on it, exchange dependency tokens with the other queues; the token pass merges
    tokens where a tile has more (``targets.npu.tokens``), so any tile runs, but with
    ResNet-50's requantising epilogue such tiles ran up to 7% slower, so the schedule takes
    a wider one only where the model, charged for the width (``npu_cycles.wide_cycles``),
    finds it as fast (docs/simulator.md, *GEMM tiles and DRAM traffic*)."""
    return max(1, config.queues.token_depth // 2)


def ranked(shape: GemmShape, config: MachineConfig) -> list[NpuTiling]:
    """Every fitting tiling, least traffic first; among equals, the largest accumulator
    tile (fewest stores and array drains), then the deepest step (fewest DMA requests),
    then order ``"mn"``."""
    return sorted(candidates(shape, config),
                  key=lambda t: (traffic(shape, t), -t.rows * t.cols, -t.depth,
                                 t.order != "mn", -t.rows))


def row_tiles(extent: int, unit: int) -> list[int]:
    """Row tiles worth padding ``extent`` for: for each count of tiles, the least multiple
    of ``unit`` that many tiles cover ``extent`` with (every divisor among them)."""
    return sorted({-(-extent // (count * unit)) * unit for count in range(1, extent // unit + 1)})


def _multiples(extent: int, unit: int) -> list[int]:
    """The multiples of ``unit`` that divide ``extent``."""
    return [t for t in range(unit, extent + 1, unit) if extent % t == 0]


def _rows(shape: tuple[int, ...], width: int) -> tuple[int, int]:
    """Memory rows of a tile of ``shape`` and of one of its column blocks."""
    layout = row_layout(shape, width)
    if layout is None:
        # A block wider than a row but not a multiple of it has no layout: it never fits.
        return 1 << 62, 1 << 62
    return layout[1], slab_rows(shape, layout[1])
