"""The cycles of the NPU's GEMM schedule, modelled from the GEMM's shape and its tiling, and
the tiling the schedule takes by them.

The schedule (``npu_schedule``; the tiling's terms in :mod:`.npu_traffic`) runs ``T``
accumulator tiles of ``tm x tn``, each in ``S`` reduction steps. A step loads its operand
tiles into the second copy of double-buffered scratchpads while the array streams the
current copy through ``(kb / tk) * (tn / tj)`` GEMMs of ``tm`` rows. With ``c`` the array's
cycles per step, ``x`` the step's load time, ``L`` the DRAM latency, ``d`` the array's drain
and ``P`` the weight preload (weight-stationary), a buffer goes back to the loads only when
the GEMM two steps earlier retires, so a step takes::

    step = max(c, (c + d + L + x + P) / 2, x)

``c`` counts each GEMM as its ``timing.stream_cycles``, or, with double-buffered weights,
as half the round of a weight buffer (stream, release, preload) when that is longer: a
16-row GEMM on a 16-row array waits on its weights. The accumulator is double-buffered the
same way, so with ``y`` a tile's store time a tile takes
``max(S * step + (y - c) / 2, (S * step + d + L + y) / 2)``: the store shares the port with
the next step's loads, and about half of what the step does not cover shows (measured:
a 256 x 64 tile 16 deep is 5% slower than 32 deep on a 12544 x 64 x 147 GEMM, as modelled).
The run is at least the port's time for all its bytes, and adds the first step's loads
``x0`` (both operand tiles: more than ``x`` where a panel stays on chip and later steps load
only the other operand) before the first GEMM and the last tile's drain and store after the
last::

    cycles = max(T * tile, bytes / bandwidth) + (L + x0 + P) + (d + L + y)

A transfer's time (``x``, ``y``) is its bytes over the port's bandwidth, or, when it is
many small requests, the requests' latency spread over the requests one DMA engine keeps
in flight (``dma.max_outstanding``): each column block of a staged tile is a request of its
own, so a wide tile of shallow blocks waits on the latency, not the port.

On the built-in machine the model is within 2.2% of the simulator on ResNet-50's layers
under every tiling near their least traffic, but the classifier's (up to 13% high); on the
32x32 output-stationary one, within 5% on the compute-bound layers, up to 22% low on the
memory-bound ones (``tests/tensorize/engine/test_npu_cycles.py``; docs/simulator.md, *GEMM
tiles and DRAM traffic*).

The choice (:func:`choose`) starts from tiles whose staged copies each fit a bank and whose
accumulator tile has at most ``most_blocks`` column blocks; a larger tile (wider, or with
copies spanning banks, and no fewer rows, so no more GEMM instructions) replaces that choice
where it moves less and the model, with what its width costs an epilogue
(``WIDE_TILE_LATENCIES``), runs it slower by no more than the bytes it saves are worth
(:func:`trade_bound`). Such a tile may keep
one copy of the accumulator (:func:`npu_traffic.acc_copies`) or pad M up to its rows
(:func:`npu_traffic.padded_m`); the model counts the padded rows' GEMMs and bytes.
"""

from __future__ import annotations

from dataclasses import dataclass

from simulator import MachineConfig, timing
from tensorize.engine.npu_traffic import (GemmShape, NpuTiling, in_banks, most_blocks, padded_m,
                                          ranked, reads, traffic)

# How far above the least traffic a tiling may move and still be chosen for its cycles.
TRAFFIC_SLACK = 0.10
# Modelled cycles this close to the fewest count as equal: the model's resolution.
CYCLE_SLACK = 0.01
# What a larger tile may cost in modelled cycles for the DRAM traffic it saves, against the
# narrow choice: a fraction TRAFFIC_TRADE of the fraction of bytes saved (1% more cycles for
# 4% fewer bytes), at most TRADE_LIMIT. A tile of more blocks, one accumulator copy or
# padded rows moves up to a third less on ResNet-50's deep layers for 0.5-5% of a layer's
# cycles (docs/simulator.md, *GEMM tiles and DRAM traffic*).
TRAFFIC_TRADE = 0.25
TRADE_LIMIT = 0.05
# What an accumulator tile of more column blocks than ``most_blocks`` costs, in DRAM
# latencies per tile, once a requantising epilogue is on it: its vector instructions and
# stores exchange tokens merged per run (targets.npu.tokens). Measured on the 16x16 machine
# (latency 100) against 4-block tiles of the same layer: 305 cycles per 112 x 128 tile
# (784 x 128 x 256 and x 1152), 329 per 112 x 128 x 64 (3136 x 256 x 64), 483 per 64 x 256
# (49 x 512 x 1024, 49 x 2048 x 512); the GEMM alone pays about none of it.
WIDE_TILE_LATENCIES = 5


@dataclass(frozen=True, slots=True)
class Work:
    """What one tensorized GEMM executes, in the model's terms: ``tiles`` accumulator tiles
    of ``steps`` reduction steps in all, each step ``per_step`` GEMMs of ``rows`` rows
    ``tk`` deep; DRAM bytes and requests of the loads and of the stores, all steps and
    tiles together, and of the first step's loads (both operand tiles, where a panel kept
    on chip makes the later steps load less)."""

    tiles: float
    steps: float
    per_step: int
    rows: int
    tk: int
    load_bytes: float
    load_requests: float
    store_bytes: float
    store_requests: float
    first_bytes: float
    first_requests: float


def transfer_cycles(nbytes: float, requests: float, config: MachineConfig) -> float:
    """Cycles ``requests`` DMAs of ``nbytes`` in all take: the port's time, or the requests'
    latency spread over the requests one engine keeps in flight, whichever is longer."""
    port = nbytes / config.dram.bytes_per_cycle
    return max(port, (requests * config.dram.latency + port) / config.dma.max_outstanding)


def cycles(work: Work, config: MachineConfig) -> int:
    """The modelled cycles of ``work`` on the machine ``config`` (module docs)."""
    array, dram = config.array, config.dram
    stream = timing.stream_cycles(work.rows, work.tk, config)
    preload = 0
    if array.dataflow == "weight_stationary":
        preload = timing.preload_cycles(config)
        if array.double_buffered_weights:
            # A weight buffer is preloaded again once the rows streamed through it have
            # passed its last PE row: two GEMMs share that round of the two buffers.
            release = timing.weight_release_cycles(config)
            stream = max(stream, (stream + release + preload) / 2)
        else:
            stream += 2 * preload - 1
    stream *= work.per_step
    drain = timing.drain_cycles(work.tk, config)
    load = transfer_cycles(work.load_bytes / work.steps, work.load_requests / work.steps,
                           config)
    store = transfer_cycles(work.store_bytes / work.tiles, work.store_requests / work.tiles,
                            config)
    step = max(stream, (stream + drain + dram.latency + load + preload) / 2, load)
    busy = work.steps / work.tiles * step
    # The accumulator tile is double-buffered as the operands are: a tile's buffer takes
    # the tile after next once its store is done.
    tile = max(busy + max(0, store - stream) / 2,
               (busy + drain + dram.latency + store) / 2)
    port = (work.load_bytes + work.store_bytes) / dram.bytes_per_cycle
    first = transfer_cycles(work.first_bytes, work.first_requests, config)
    return round(max(work.tiles * tile, port) + dram.latency + first + preload + drain
                 + dram.latency + store)


def gemm_work(shape: GemmShape, tiling: NpuTiling) -> Work:
    """The work of the GEMM ``shape`` under ``tiling``, its result stored as it is
    accumulated (no epilogue)."""
    s = shape
    tm, tn, kb = tiling.rows, tiling.cols or s.tj, tiling.depth or s.tk
    row_tiles, col_tiles, k_steps = padded_m(s, tiling) // tm, s.n // tn, s.k // kb
    a_reads, b_reads = reads(s, tiling)
    # A read once is one tm x kb tile per row tile and step; B likewise per column tile.
    a_loads = a_reads * row_tiles * k_steps
    b_loads = b_reads * col_tiles * k_steps
    c_bytes = padded_m(s, tiling) * s.n * s.c_bytes
    return Work(tiles=row_tiles * col_tiles, steps=row_tiles * col_tiles * k_steps,
                per_step=kb // s.tk * (tn // s.tj), rows=tm, tk=s.tk,
                load_bytes=traffic(s, tiling) - c_bytes,
                load_requests=a_loads * (kb // s.tk) + b_loads * (tn // s.tj),
                store_bytes=c_bytes, store_requests=row_tiles * col_tiles * (tn // s.tj),
                first_bytes=tm * kb * s.a_bytes + kb * tn * s.b_bytes,
                first_requests=kb // s.tk + tn // s.tj)


def gemm_cycles(shape: GemmShape, tiling: NpuTiling, config: MachineConfig) -> int:
    """The modelled cycles of the GEMM ``shape`` under ``tiling`` on ``config``."""
    return cycles(gemm_work(shape, tiling), config)


def choose(shape: GemmShape, config: MachineConfig) -> NpuTiling:
    """The tiling the schedule takes: :func:`choose_narrow` among the fitting tilings whose
    staged tiles each fit a bank (:func:`npu_traffic.in_banks`), then a larger tile in its
    place (more column blocks, :func:`widest` at most, or staged copies that span banks;
    as many rows or more) when it moves less and the model, with the cost of its width
    (:func:`wide_cycles`), runs it within :func:`trade_bound` of the narrow one: of those,
    the least traffic, then the fewest modelled cycles."""
    fitting = ranked(shape, config)
    narrow = choose_narrow(shape, config, [t for t in fitting if in_banks(shape, t, config)])
    cycles_narrow, bytes_narrow = gemm_cycles(shape, narrow, config), traffic(shape, narrow)
    larger = {t: wide_cycles(shape, t, config) for t in fitting
              if _larger(shape, t, narrow, config) and traffic(shape, t) < bytes_narrow}
    return min((t for t in larger
                if larger[t] <= trade_bound(cycles_narrow, bytes_narrow, traffic(shape, t))),
               key=lambda t: (traffic(shape, t), larger[t]), default=narrow)


def trade_bound(cycles: int, nbytes: int, fewer: int) -> float:
    """The most modelled cycles a tiling moving ``fewer`` bytes may take in the place of one
    taking ``cycles`` for ``nbytes``: ``TRAFFIC_TRADE`` of the fraction of bytes it saves
    more, at most ``TRADE_LIMIT`` more, and within ``CYCLE_SLACK`` in any case."""
    saved = 1 - fewer / nbytes
    return cycles * (1 + max(CYCLE_SLACK, min(TRADE_LIMIT, TRAFFIC_TRADE * saved)))


def choose_narrow(shape: GemmShape, config: MachineConfig, tilings: list[NpuTiling]
                  ) -> NpuTiling:
    """Of ``tilings`` (least traffic first, :func:`npu_traffic.ranked`) whose accumulator
    tile has at most :func:`npu_traffic.most_blocks` column blocks, those moving at most
    ``1 + TRAFFIC_SLACK`` times the least traffic; of these, those the model puts within
    ``1 + CYCLE_SLACK`` of the fewest cycles; of these, the least traffic, then the largest
    accumulator tile, then the fewest modelled cycles. One call's tile when none is
    narrow enough."""
    limit = most_blocks(config)
    found = [t for t in tilings if _blocks(shape, t) <= limit]
    if not found:
        return NpuTiling(shape.ti, shape.tj, shape.tk)
    least = traffic(shape, found[0])
    near = [t for t in found if traffic(shape, t) <= least * (1 + TRAFFIC_SLACK)]
    modelled = {t: gemm_cycles(shape, t, config) for t in near}
    fewest = min(modelled.values())
    fast = [t for t in near if modelled[t] <= fewest * (1 + CYCLE_SLACK)]
    return min(fast, key=lambda t: (traffic(shape, t), -t.rows * (t.cols or shape.tj),
                                    modelled[t]))


def widest(config: MachineConfig) -> int:
    """The most column blocks of an accumulator tile the schedule takes: twice the token
    queue's depth, the widest measured to run near the model (docs/simulator.md)."""
    return 2 * config.queues.token_depth


def wide_cycles(shape: GemmShape, tiling: NpuTiling, config: MachineConfig) -> int:
    """The modelled cycles of ``tiling``: :func:`gemm_cycles`, and when its accumulator tile
    has more column blocks than :func:`npu_traffic.most_blocks`, ``WIDE_TILE_LATENCIES``
    DRAM latencies per tile, what an epilogue's tokens merged per run cost
    (docs/simulator.md, *GEMM tiles and DRAM traffic*)."""
    modelled = gemm_cycles(shape, tiling, config)
    if _blocks(shape, tiling) <= most_blocks(config):
        return modelled
    tiles = gemm_work(shape, tiling).tiles
    return round(modelled + tiles * WIDE_TILE_LATENCIES * config.dram.latency)


def _larger(shape: GemmShape, tiling: NpuTiling, narrow: NpuTiling, config: MachineConfig
            ) -> bool:
    """Whether :func:`choose` may put ``tiling`` in the place of ``narrow``: at most
    :func:`widest` column blocks, more than ``most_blocks`` or copies that span banks (a
    tile :func:`choose_narrow` does not take), and as many rows as ``narrow`` or more (its
    GEMMs no shorter, so no more of them to compile and simulate)."""
    blocks = _blocks(shape, tiling)
    return (blocks <= widest(config) and tiling.rows >= narrow.rows
            and (blocks > most_blocks(config) or not in_banks(shape, tiling, config)))


def _blocks(shape: GemmShape, tiling: NpuTiling) -> int:
    """Call-wide column blocks of the accumulator tile."""
    return (tiling.cols or shape.tj) // shape.tj
