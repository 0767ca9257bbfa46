"""The CPU schedule: a register-blocked micro-kernel around a dot-product intrinsic, with its
operands packed into the layout the instruction loads. Every number it needs (the register
count, the tiles to try, the k unroll) comes from the target's ``cpu:`` description
(:class:`intrinsics.CpuTarget`), so one schedule serves every CPU target.

The block arrives in the intrinsic's shape (``gemm_view``): iterators ``(outer..., i, k)`` for
the dot products (``C[i] += A[k] * B[i, k]``: i runs along the output's columns, ``L`` lanes
of a vector, the rows are the innermost outer iterator m), padded to the intrinsic's extents.
With a register tile of ``mr`` rows by ``nr`` columns (``nr / L`` vectors), the rows and
columns padded up to whole tiles where the tile does not divide them (edge tiles compute on
zeros; only the valid part of the output is copied back), the loops become (AArch64's names;
L = 4)::

    A_pack[.., m // mr, k // 4, m % mr, k % 4] <- A      # packing stages (part of the kernel)
    B_pack[n // nr, k // 4, n % nr, k % 4] <- B
    for outer.., mo, no:
        C_reg[mr, nr] = 0                                  # arm_zero_4_s32, unrolled
        for ko:
            A_reg[mr, 4] <- A_pack[.., mo, ko]             # arm_ld1_4x4: 4 rows a load
            B_reg[nr, 4] <- B_pack[no, ko]                 # arm_ld1_4x4: 4 columns a load
            for mi, nv (unrolled):
                sdot_lane(A_reg[mi, 0:4], B_reg[4nv:4nv+4], C_reg[mi, 4nv:4nv+4])
        C[mo, no tile] <- C_reg                            # arm_st1_4_s32, unrolled

``C_reg``, ``A_reg`` and ``B_reg`` are buffers in the target's register scope; the code
generator keeps each vector-sized piece in an SSA value, so the ``mr * nr / L`` accumulators
stay in vector registers across the k loop. An input whose intrinsic operand lives in memory
(``global``: x86's row of A, which VPDPBUSD takes broadcast from memory) is not staged: the
instruction reads it from the packed buffer. Every step is a schedule primitive, so the trace
replays it. The matrix multiplies (``C[i, j] += A[i, k] * B[j, k]``, SMMLA's 2x2x8) get
the same blocking with one ``ti x tj`` tile per accumulator register
(:func:`schedule_matrix`).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from intrinsics import CpuTarget, Intrinsic, Registry
from ir import (BinOp, BufferLoad, BufferRegion, BufferStore, Cast, IntImm, IntrinsicCall,
                IterKind, PrimFunc, ScheduleError, Select, Var)
from ir.visitor import post_order_visit
from tensorize.engine import operand_shift
from tensorize.match.result import Match
from tensorize.schedule import Schedule, tree

__all__ = ["CpuTiling", "TileChoice", "choose_tiling", "estimate", "fitting_tilings", "reshape",
           "schedule", "tile_cost"]


@dataclass(frozen=True, slots=True)
class CpuTiling:
    """A register tile: ``rows`` output rows by ``vectors`` vectors of output columns."""

    rows: int
    vectors: int

    def registers(self, cpu: CpuTarget, intrinsic: Intrinsic) -> int:
        """Vector registers live in the k loop: the accumulators, one B panel per vector,
        and the A rows: packed into whole registers when A is staged into them, else one
        register its broadcast lands in. For the matrix multiplies a row is one A operand
        (two rows of the output) and a vector one B operand (two columns)."""
        return self.rows * self.vectors + self.vectors + (self.a_loads(cpu, intrinsic) or 1)

    def a_loads(self, cpu: CpuTarget, intrinsic: Intrinsic) -> int:
        """Registers the tile's rows of A fill at each k step when A is staged into
        registers (one load each); 0 when A stays in memory (the instruction's operand)."""
        a = intrinsic.inputs[0]
        if a.scope != cpu.register_scope:
            return 0
        return -(-self.rows * a.nbytes // cpu.vector_bytes)


# A caller's choice of register tile for one block: ``choice(block, intrinsic, units)``, with
# ``units`` the block's ``(rows, column vectors, k steps)`` in the intrinsic's units (for a
# matrix multiply: A operands, B operands, k steps); None leaves it to :func:`choose_tiling`.
TileChoice = Callable[[str, Intrinsic, tuple[int, int, int]], "CpuTiling | None"]


def fitting_tilings(cpu: CpuTarget, intrinsic: Intrinsic) -> list[CpuTiling]:
    """The target's ``register_tile`` choices that fit the registers it leaves the
    micro-kernel and whose output rows are whole registers (:func:`_whole_output_rows`), in
    the description's order."""
    return [CpuTiling(r, v) for r in cpu.tile_rows for v in cpu.tile_vectors
            if CpuTiling(r, v).registers(cpu, intrinsic) <= cpu.usable_registers
            and _whole_output_rows(v, cpu, intrinsic)]


def _whole_output_rows(vectors: int, cpu: CpuTarget, intrinsic: Intrinsic) -> bool:
    """True when a row of the tile's output (``vectors`` accumulators side by side) is a
    whole number of registers. A dot product's accumulator is one row of a register, so
    every tile is; a matrix multiply's holds a ``ti x tj`` tile (SMMLA: 2 x 2 int32, half a
    register a row), so only an even number of them side by side store as whole registers.
    With an odd number the rows are stored half a register at a time through lane moves,
    which the count does not see: every SMMLA tile counted under the emulator, the best of
    those 1 or 3 operands wide executes 8% to 13% more instructions than the best of those
    2 or 4 wide at 15^3, 17^3, 33^3 and 31x17x15, though the count ranked a 3-wide tile
    first at 31x17x15 and 33^3 (tests/targets/arm/test_tile_estimate.py)."""
    row = intrinsic.output.shape[-1] * max(intrinsic.output.dtype.bits // 8, 1) * vectors
    return row % cpu.vector_bytes == 0


# A tile that divides the extents is kept over one that pads when it costs at most this
# much more by the count: a padded output is computed into a buffer of its own and copied
# back, memory traffic the count does not weigh (x86, 1024^3: 14 x 1 counts 3.5% fewer
# instructions than 8 x 2 and runs 5% slower, natively timed).
DIVIDING_TOLERANCE = 1.05


def choose_tiling(rows: int, column_vectors: int, steps: int, cpu: CpuTarget,
                  intrinsic: Intrinsic) -> CpuTiling:
    """The register tile of the target's ``register_tile`` choices that fits the registers
    the target leaves the micro-kernel and costs the fewest instructions (:func:`tile_cost`)
    over ``rows`` by ``column_vectors`` and ``steps`` k steps; sides need not divide the
    extents (edge tiles compute on zero padding, and only the valid part is stored), but one
    that divides them is kept within :data:`DIVIDING_TOLERANCE` of the cheapest. Among equal
    costs, the one with the most accumulators, then most rows. ScheduleError when none
    fits."""
    fitting = fitting_tilings(cpu, intrinsic)
    if not fitting:
        raise ScheduleError("cpu schedule", f"no register tile of target {cpu.target} "
                            f"(rows {list(cpu.tile_rows)}, vectors {list(cpu.tile_vectors)}) "
                            f"fits its {cpu.usable_registers} registers")
    costs = {t: tile_cost(t, rows, column_vectors, steps, cpu, intrinsic) for t in fitting}
    cheapest = min(costs.values())
    return min(fitting, key=lambda t: (
        _pads(t, rows, column_vectors) or costs[t] > cheapest * DIVIDING_TOLERANCE,
        costs[t], -t.rows * t.vectors, -t.rows))


# Instructions per register of packed input: the packing stages move a register tile as a
# few vector loads, one permute of at most two registers per register stored, and the store
# (targets.cpu.copies); measured on AArch64 (bench/bench_arm.py) at 3 to 5.
PACK_PER_REGISTER = 4


def tile_cost(tiling: CpuTiling, rows: int, column_vectors: int, steps: int, cpu: CpuTarget,
              intrinsic: Intrinsic) -> int:
    """Instructions the kernel executes with ``tiling`` over ``rows`` by ``column_vectors``
    (in the intrinsic's units; for a matrix multiply, A and B operands) and ``steps`` k
    steps, the extents padded up to whole tiles: at every k step of every tile, its calls,
    its B panel loads and, when A is staged in registers, one load per register of its rows
    (an A in memory is the instruction's own memory operand); per tile, the zeroing and the
    store of each accumulator register; the packing of both inputs into their tiled layouts
    (:data:`PACK_PER_REGISTER` a register); and, when the tile does not divide the extents,
    the copy of the padded output back into its valid part. The same count for the dot
    products and the matrix multiplies, so that the engine's choice between them is by
    cost."""
    row_tiles = -(-rows // tiling.rows)
    column_tiles = -(-column_vectors // tiling.vectors)
    per_step = tiling.rows * tiling.vectors + tiling.vectors + tiling.a_loads(cpu, intrinsic)
    accumulators = tiling.rows * tiling.vectors
    kernel = row_tiles * column_tiles * (per_step * steps + 2 * accumulators)
    a, b = intrinsic.inputs
    packed = (row_tiles * tiling.rows * a.nbytes + column_tiles * tiling.vectors * b.nbytes) \
        * steps
    packing = PACK_PER_REGISTER * -(-packed // cpu.vector_bytes)
    return kernel + packing + _copy_back(tiling, rows, column_vectors, cpu, intrinsic)


def _copy_back(tiling: CpuTiling, rows: int, column_vectors: int, cpu: CpuTarget,
               intrinsic: Intrinsic) -> int:
    """Instructions that copy an output padded up to whole tiles back into its valid part (a
    vector load and store per register of it); 0 when the tile divides the extents."""
    if _pads(tiling, rows, column_vectors):
        return 2 * -(-rows * column_vectors * intrinsic.output.nbytes // cpu.vector_bytes)
    return 0


def _pads(tiling: CpuTiling, rows: int, column_vectors: int) -> bool:
    """True when the tile does not divide the extents (edge tiles compute on padding)."""
    return bool(rows % tiling.rows or column_vectors % tiling.vectors)


def estimate(func: PrimFunc, match: Match, registry: Registry) -> float:
    """The instructions the kernel would execute for ``match`` (:func:`tile_cost` of the
    tile :func:`choose_tiling` picks, and the copy of an output the mapping must repack),
    the same count for the dot products and the matrix multiplies, so that turning a
    feature on picks its instruction only where it is cheaper. Infinite when no tile
    fits."""
    intrinsic = match.intrinsic
    cpu = registry.cpu(intrinsic.target)
    block = tree.find_block(func, match.block).node.block
    if len(intrinsic.iter_vars) != 2:
        rows, vectors, steps = (match.padded_extents[iv.var.name] // iv.extent
                                for iv in intrinsic.iter_vars)
    else:
        # A dot-product intrinsic has no row iterator: the rows are the block's innermost
        # outer iterator of more than one iteration.
        extents = {iv.var.name: iv.extent for iv in block.iter_vars}
        rows = next((extents[n] for n in reversed(match.outer) if extents[n] > 1), 1)
        lanes, depth = intrinsic.iter_vars
        vectors = match.padded_extents[lanes.var.name] // lanes.extent
        steps = match.padded_extents[depth.var.name] // depth.extent
    try:
        tiling = choose_tiling(rows, vectors, steps, cpu, intrinsic)
    except ScheduleError:
        return float("inf")
    # The calls outside the rows and columns (batch, other outer iterators) repeat the tile.
    repeats = match.calls / (rows * vectors * steps)
    return repeats * tile_cost(tiling, rows, vectors, steps, cpu, intrinsic) + \
        _output_repack(block, match)


# Instructions per output element that a mapping whose output must be repacked (a
# transposed C) spends copying it back: a load, a store and an address step an element,
# since the transposed copy moves no whole vector (measured: bench/bench_arm.py).
REPACK_PER_ELEMENT = 3


def _output_repack(block: Any, match: Match) -> int:
    """Instructions that copy the output back from the layout the calls write, when the
    mapping's output needs repacking (``match.needs_pack``); else 0."""
    if not match.needs_pack.get(match.intrinsic.output.name):
        return 0
    return REPACK_PER_ELEMENT * math.prod(block.writes[0].buffer.shape)


def reshape(sch: Schedule, block_name: str, candidates: list[Intrinsic],
            options: Mapping[str, Any]) -> bool:
    """The engine's hook for a block no intrinsic matches (``tensorize.engine.RESHAPES``):
    an input of a dtype an intrinsic accepts only shifted (int8 for VPDPBUSD's uint8) is
    shifted, the output compensated (:mod:`.operand_shift`), the cheapest shift by
    :func:`estimate`. True when the block was rewritten."""
    return operand_shift.reshape(sch, block_name, candidates, options, estimate)


def schedule(sch: Schedule, match: Match, extents: tuple[int, ...], registry: Registry,
             options: Mapping[str, Any]) -> None:
    """The engine's entry (see ``tensorize.engine``): the register-blocked schedule for the
    dot products or the matrix multiplies, with ``options["tiling"]`` when it is a
    :class:`CpuTiling`, or what it gives for the block when it is a :class:`TileChoice`
    (the tuner's and the tile cache's way in); else :func:`choose_tiling`'s. The target is
    the intrinsic's."""
    intrinsic = match.intrinsic
    cpu = registry.cpu(intrinsic.target)
    block = sch.get_block(match.block)
    ivs = sch.get(block).block.iter_vars
    units = [e // t for e, t in zip(extents[-len(intrinsic.extents):], intrinsic.extents)]
    if len(units) == 3:
        rows, vectors, steps = units
    else:
        rows = next((iv.extent for iv in reversed(ivs[:-2]) if iv.extent > 1), 1)
        vectors, steps = units
    tiling = options.get("tiling")
    if callable(tiling):
        tiling = tiling(match.block, intrinsic, (rows, vectors, steps))
    if not isinstance(tiling, CpuTiling):
        tiling = choose_tiling(rows, vectors, steps, cpu, intrinsic)
    if len(units) == 3:
        schedule_matrix(sch, match.block, intrinsic, registry, cpu, tiling)
    else:
        schedule_cpu(sch, match.block, intrinsic, registry, cpu, tiling)


def schedule_cpu(sch: Schedule, block_name: str, intrinsic: Intrinsic, registry: Registry,
                 cpu: CpuTarget, tiling: CpuTiling) -> None:
    """Pack, tile, stage into registers and tensorize the dot-product-shaped block
    ``block_name`` (module docs) for target ``cpu``.

    Raises ScheduleError when a primitive refuses a step, or when the block reduces over a
    loop outside the tile (its accumulators would not be finished in registers).
    """
    block = sch.get_block(block_name)
    ivs = sch.get(block).block.iter_vars
    if any(iv.kind is IterKind.REDUCE for iv in ivs[:-2]):
        raise ScheduleError("cpu schedule", f"block {block_name} reduces over a loop outside "
                            "the register tile; its accumulators would leave the registers")
    ti, tk = intrinsic.extents
    names = [iv.var.name for iv in ivs]
    row = next((p for p in range(len(ivs) - 3, -1, -1) if ivs[p].extent > 1), None)
    depth = _depth_multiple(ivs[-1].extent, tk, cpu, row is None and any(
        math.prod(op.shape) == 1 for op in intrinsic.inputs if op.scope == cpu.register_scope))
    _pad_to_tile(sch, block_name, row, tiling.rows, tiling.vectors * ti, depth)
    factors = {names[-2]: tiling.vectors * ti, names[-1]: tk}
    if row is not None:
        factors[names[row]] = tiling.rows
    operands = _operand_buffers(sch, block_name, intrinsic)
    packed = {op.name: _pack(sch, block_name, operands[op.name]) for op in intrinsic.inputs}
    walks = {buffer: _stage_factors(sch, block_name, buffer, factors)
             for buffer in packed.values()}
    layouts = {op: _tiled_layout(sch, block_name, buffer, factors)
               for op, buffer in packed.items()}
    block = sch.get_block(block_name)
    loops = sch.get_loops(block)[-len(names):]
    ni_o, ni_u, ni_t = sch.split(loops[-2], [None, tiling.vectors, ti])
    ko, kt = sch.split(loops[-1], [None, tk])
    # The k steps of an iteration are staged together where one load of the family takes
    # them for every staged input (ld1x4: two steps of 8 rows, and of 8 columns).
    groups = _load_groups(sch, ko, cpu, registry, intrinsic,
                          (tiling.rows, tiling.vectors * ti), tk,
                          _stage_dims(sch, block_name, packed, factors, names[-1]))
    together = bool(groups)
    ko, ku = _split_steps(sch, ko, cpu) if together else (ko, [])
    stage_at = dict.fromkeys(groups, ko)
    small = min(groups.values(), default=0)
    if ku and sch.get(ku[0]).extent > small:
        # Each load's steps are staged next to their calls, not the iteration's loads all at
        # its top: LLVM then keeps fewer of them live (measured: docs/arm_backend.md). An
        # input whose load takes every step of the iteration (a one-row tile's A: 4 steps in
        # a register) is staged once an iteration.
        if small > 1:
            ku = sch.split(ku[0], [None, small])
        stage_at.update((op, ku[0]) for op, group in groups.items() if group == small)
    rest = [loop for p, loop in enumerate(loops[:-2]) if p != row]
    if row is not None:
        mo, mi = sch.split(loops[row], [None, tiling.rows])
        sch.reorder(*rest, mo, ni_o, ko, *ku, mi, ni_u, ni_t, kt)
        unrolled = [*ku, mi, ni_u]
    else:
        sch.reorder(*rest, ni_o, ko, *ku, ni_u, ni_t, kt)
        unrolled = [*ku, ni_u]
    _stage_and_tensorize(sch, block_name, intrinsic, registry, cpu, packed, operands, layouts,
                         (ni_o, ko, ni_t), (names[-1], tk) if together else None,
                         stage_at=stage_at)
    if not together:
        unrolled += _split_steps(sch, ko, cpu)[1]
    _unroll_and_pack(sch, cpu, intrinsic, unrolled, packed, walks)


def schedule_matrix(sch: Schedule, block_name: str, intrinsic: Intrinsic, registry: Registry,
                    cpu: CpuTarget, tiling: CpuTiling) -> None:
    """The register-blocked schedule of a matrix multiply ``C[i, j] += A[i, k] * B[j, k]``
    of ``ti x tj x tk`` (SMMLA's 2 x 2 x 8): ``tiling.rows`` A operands (``rows * ti``
    output rows) by ``tiling.vectors`` B operands (``vectors * tj`` columns) of
    accumulators, each register one ``ti x tj`` tile, loops ``(outer.., mo, no, ko, mu, nu,
    ii, jj, kk)``; the inputs packed so that each operand is 16 contiguous bytes, staged into
    registers at every k step, the accumulators kept in registers across the k loop.

    Raises ScheduleError when a primitive refuses a step, or when the block reduces over a
    loop outside the tile.
    """
    block = sch.get_block(block_name)
    ivs = sch.get(block).block.iter_vars
    if any(iv.kind is IterKind.REDUCE for iv in ivs[:-3]):
        raise ScheduleError("cpu schedule", f"block {block_name} reduces over a loop outside "
                            "the register tile; its accumulators would leave the registers")
    ti, tj, tk = intrinsic.extents
    names = [iv.var.name for iv in ivs]
    _pad_to_tile(sch, block_name, len(names) - 3, tiling.rows * ti, tiling.vectors * tj)
    factors = {names[-3]: tiling.rows * ti, names[-2]: tiling.vectors * tj, names[-1]: tk}
    operands = _operand_buffers(sch, block_name, intrinsic)
    packed = {op.name: _pack(sch, block_name, operands[op.name]) for op in intrinsic.inputs}
    walks = {buffer: _stage_factors(sch, block_name, buffer, factors)
             for buffer in packed.values()}
    layouts = {op: _tiled_layout(sch, block_name, buffer, factors)
               for op, buffer in packed.items()}
    loops = sch.get_loops(sch.get_block(block_name))[-len(names):]
    mo, mu, mt = sch.split(loops[-3], [None, tiling.rows, ti])
    no, nu, nt = sch.split(loops[-2], [None, tiling.vectors, tj])
    ko, kt = sch.split(loops[-1], [None, tk])
    sch.reorder(*loops[:-3], mo, no, ko, mu, nu, mt, nt, kt)
    # Each accumulator register holds one ti x tj tile: the register buffer is laid out by
    # tiles, so a tile is one register's piece.
    _stage_and_tensorize(sch, block_name, intrinsic, registry, cpu, packed, operands, layouts,
                         (no, ko, mt), None, (ti, tj))
    _, ku = _split_steps(sch, ko, cpu)
    _unroll_and_pack(sch, cpu, intrinsic, [*ku, mu, nu], packed, walks)


def _load_groups(sch: Schedule, ko: Any, cpu: CpuTarget, registry: Registry,
                 intrinsic: Intrinsic, rows: tuple[int, int], tk: int,
                 tiled: Mapping[str, int | None]) -> dict[str, int]:
    """The k steps one load takes, per input staged in registers (``rows``: A's rows and
    B's columns in the tile), when the k loop splits into several steps an iteration
    (:func:`_steps`) and loads of the family fill some input's stage of those steps a whole
    number of steps at a time, several in one instruction, laid out step by step (operand
    shape ``(steps, rows, tk)``; ld1x4: 2 steps of 8 rows, twice an iteration of 4; a
    one-row tile's A: 4 steps of one row in a register). Where one input's load takes every
    step of the iteration, an input no such load fills is loaded a step at a time (1).
    Empty where some input has no such load otherwise: each step's loads stay next to its
    calls, as the schedule's count (:func:`tile_cost`) assumes.

    ``tiled`` gives, per input, how many tiled dimensions besides k its register stage has
    (:func:`_stage_dims`). Only a stage of at most one (A's rows, or B's columns; none for
    a one-row tile's A) is laid out ``(steps, rows, tk)``: an input indexed by both the rows
    and the columns (B of a grouped convolution, whose channels depend on the output
    channel, the row) holds one panel a row, ``(steps, tile rows, rows, tk)``, where one
    row's steps are not one run a load can fill."""
    steps = _steps(sch, ko, cpu)
    if steps <= 1:
        return {}
    staged = [(op, n) for op, n in zip(intrinsic.inputs, rows)
              if op.scope == cpu.register_scope]
    if any(tiled.get(op.name) not in (0, 1) for op, _ in staged):
        return {}
    groups = {op.name: max((group for load in _loads(registry, intrinsic, op.name)
                            if (group := _steps_filled(load, n, tk)) and steps % group == 0),
                           default=0)
              for op, n in staged}
    if steps in groups.values():
        # One load takes the iteration's steps (a one-row tile's A): the others are loaded
        # a step at a time. Elsewhere a step-at-a-time input beside a grouped one made the
        # 1x1 convolutions of MobileNet-v2 up to 18% slower.
        return {op: group or 1 for op, group in groups.items()}
    return groups if groups and all(groups.values()) else {}


def _steps_filled(load: Intrinsic, rows: int, tk: int) -> int:
    """How many k steps of ``rows`` rows of ``tk`` k values ``load`` fills, laid out step
    by step (0: none): ``group`` for an operand ``(group, rows, tk)`` over iterators
    ``(rows, group * tk)``; for one row (a unit row takes no loop), ``(group, tk)`` over
    ``(group * tk,)``, or, one value a step, ``(group,)`` over ``(group,)``: the same
    elements (a 1-d load of FMLAL's fp16 A)."""
    shape, extents = tuple(load.operands[0].shape), tuple(load.extents)
    group = shape[0]
    if rows == 1 and tk == 1 and shape == extents == (group,):
        return group
    if rows == 1 and shape == (group, tk) and extents == (group * tk,):
        return group
    return group if extents == (rows, group * tk) and shape == (group, rows, tk) else 0


def _stage_dims(sch: Schedule, block_name: str, packed: Mapping[str, str],
                factors: Mapping[str, int], k: str) -> dict[str, int | None]:
    """Per input (its packed buffer in ``packed``), how many of the dimensions indexing it
    the register tile splits (``factors``), k (iterator ``k``) left out: the dimensions
    besides k its register stage holds more than one element of; None when an index is not
    a plain iterator."""
    result: dict[str, int | None] = {}
    for op, buffer in packed.items():
        dims = _index_vars(sch, block_name, buffer)
        result[op] = None if dims is None else sum(
            1 for d in dims if d != k and factors.get(d, 1) > 1)
    return result


def _steps(sch: Schedule, ko: Any, cpu: CpuTarget) -> int:
    """The k steps an iteration of loop ``ko`` runs: the largest divisor of ``k_unroll``
    that divides the loop's extent (1: the loop stays as it is)."""
    extent = sch.get(ko).extent
    return max(d for d in range(1, cpu.k_unroll + 1)
               if cpu.k_unroll % d == 0 and extent % d == 0)


def _split_steps(sch: Schedule, ko: Any, cpu: CpuTarget) -> tuple[Any, list[Any]]:
    """The k loop split into :func:`_steps` steps an iteration when that is more than one:
    (the loop, [the steps' loop]), else (the loop, []). The register stages are placed in
    the outer loop, so one iteration's operands are loaded together: contiguous in the
    packed layout, several registers in one instruction where the family has such a load."""
    steps = _steps(sch, ko, cpu)
    if steps > 1:
        outer, inner = sch.split(ko, [None, steps])
        return outer, [inner]
    return ko, []


def _unroll_and_pack(sch: Schedule, cpu: CpuTarget, intrinsic: Intrinsic,
                     unrolled: list[Any], packed: dict[str, str],
                     walks: Mapping[str, dict[str, int]]) -> None:
    """Unroll the register tile's loops and the k steps of an iteration (the loop's
    counter, pointer steps and branch are then spread over more calls), and walk each
    packing stage in its packed layout's order (``walks``: per packed buffer, the factors
    by its stage's iterators): a register's worth of its source rows at a
    time for an input staged in registers (whose registers gather several short runs),
    one tile at a time for one the instruction reads from memory (x86's broadcast rows of
    A: there the wider walk made the ResNet convolution 10% slower, natively timed)."""
    for loop in unrolled:
        sch.unroll(loop)
    for op, buffer in packed.items():
        staged = intrinsic.operand(op).scope == cpu.register_scope
        _tile_packing(sch, buffer, walks[buffer], cpu.vector_bytes if staged else 0)


def _depth_multiple(depth: int, tk: int, cpu: CpuTarget, single: bool) -> int:
    """What the k iterator (extent ``depth``, a multiple of the call's ``tk``) is padded to
    a multiple of: ``tk``, unless a one-row tile stages a ``single`` value of an input a k
    step (FMLAL's A, one fp16) and the k loop splits into no steps (:func:`_steps`). That
    stage has no loop for a load to tile; split into steps, one load takes the
    iteration's values (:func:`_load_groups`). The padded steps add products of zeros,
    which leave every sum as it was."""
    divisors = [d for d in range(2, cpu.k_unroll + 1) if cpu.k_unroll % d == 0]
    if not single or not divisors or any((depth // tk) % d == 0 for d in divisors):
        return tk
    return tk * divisors[0]


def _pad_to_tile(sch: Schedule, block_name: str, row: int | None, rows: int, columns: int,
                 depth: int = 1) -> None:
    """Pad the block's row iterator (position ``row``) to a multiple of ``rows``, its
    column iterator to one of ``columns`` and its k iterator to one of ``depth``: the edge
    tiles then compute on zeros, and only the valid part of the output is copied back. A
    copy the block's inputs or output already went through (the padding to the intrinsic's
    extents) is merged into the new one, so the data still moves once each way."""
    block = sch.get_block(block_name)
    ivs = sch.get(block).block.iter_vars
    padding = [1] * len(ivs)
    padding[-2] = columns
    padding[-1] = depth
    if row is not None:
        padding[row] = rows
    before = set(tree.block_names(sch.func))
    sch.pad_einsum(block, padding)
    for name in sorted(set(tree.block_names(sch.func)) - before):
        if name.endswith("_unpad"):
            written = sch.get(sch.get_block(name)).block.writes[0].buffer.name
            if _copies_of(sch, written, reads=True):
                sch.compute_inline(sch.get_block(name))
            continue
        _inline_copies_into(sch, sch.get(sch.get_block(name)).block.writes[0].buffer.name)


def _inline_copies_into(sch: Schedule, buffer: str) -> None:
    """Inline the chain of copies (reindex, padding) that the copy filling ``buffer`` reads
    from, so the data moves once; a copy that ``compute_inline`` refuses (one whose layout
    fuses dimensions) stays a stage of its own."""
    target = _copies_of(sch, buffer, reads=False)
    while target is not None and (source := _copies_of(
            sch, sch.get(sch.get_block(target)).block.reads[0].buffer.name, reads=False)):
        try:
            sch.compute_inline(sch.get_block(source))
        except ScheduleError:
            return


def _copies_of(sch: Schedule, buffer: str, reads: bool) -> str | None:
    """The one block that copies from (``reads``) or into ``buffer``, an intermediate, when
    it is the only block to do so and only copies; else None."""
    if any(p.name == buffer for p in sch.func.params):
        return None
    found = [b for b in tree.block_names(sch.func) if any(
        r.buffer.name == buffer for r in (sch.get(sch.get_block(b)).block.reads if reads
                                          else sch.get(sch.get_block(b)).block.writes))]
    return found[0] if len(found) == 1 and _is_copy(sch, found[0]) else None


def _tiled_layout(sch: Schedule, block_name: str, buffer: str, factors: dict[str, int]
                  ) -> str | None:
    """The packed layout of ``buffer`` (indexed by the block's iterators) as lambda text:
    each dimension whose iterator has a factor ``f`` splits into ``d // f`` (in place) and
    ``d % f`` (last), so that a register tile is contiguous; None when none splits."""
    dims = _index_vars(sch, block_name, buffer) or []
    if not any(factors.get(d, 1) > 1 for d in dims):
        return None
    params = [f"d{i}" for i in range(len(dims))]
    outer = [f"{p} // {factors[d]}" if factors.get(d, 1) > 1 else p
             for p, d in zip(params, dims)]
    inner = [f"{p} % {factors[d]}" for p, d in zip(params, dims) if factors.get(d, 1) > 1]
    return f"lambda {', '.join(params)}: ({', '.join(outer + inner)},)"


# The most bytes a widened packing tile that transposes (a tile of B) may hold (8 AArch64
# registers). SDOT's 16 columns x 4 k values (64 bytes) and SMMLA's 16 x 8 (128) are
# transposed by interleaves (targets.cpu.emit); wider ones multiply the shuffle sources
# (bench/bench_arm.py: SMMLA 16^3 598 -> 481 instructions, 256^3 20.06 -> 20.35 MACs an
# instruction, 64^3 13.73 -> 13.66).
_TRANSPOSED_BYTES = 128


def _tile_packing(sch: Schedule, buffer: str, factors: Mapping[str, int], vector_bytes: int
                  ) -> None:
    """Walk the stage that fills packed ``buffer`` in the packed order: each loop whose
    dimension the layout splits by ``f`` (``factors``, keyed by the stage's own iterators:
    :func:`_stage_factors`) splits by ``f`` too, the tile's loops go inside and
    are unrolled, so each tile is written contiguously and LLVM can move it in words rather
    than bytes. The dimension contiguous in the source is walked ``vector_bytes`` at a time
    where its extent allows (several tiles at once), so each run read is a whole register
    rather than one tile's few bytes (A's rows: 4 bytes a k step for SDOT, 8 for SMMLA,
    whose register of two k steps ``zip .2d`` then splits: 17 instructions for 64 bytes of
    A at 256^3 became 12); ``vector_bytes`` 0 walks one tile at a time. A stage the kernel
    already had (not a plain copy) is left as it is."""
    producer = _copies_of(sch, buffer, reads=False)
    if producer is None:
        return
    block = sch.get_block(producer)
    ivs = sch.get(block).block.iter_vars
    loops = sch.get_loops(block)[-len(ivs):]
    contiguous, size = _source_contiguous(sch, producer)
    split = [iv.var.name for iv in ivs if factors.get(iv.var.name, 1) > 1]
    widen = vector_bytes // (factors[contiguous] * size) if contiguous in split else 1
    if split[-1:] != [contiguous]:
        # The tile transposes (B's columns are contiguous in memory, its k values in the
        # packed tile): wider than _TRANSPOSED_BYTES, its shuffles draw on too many sources.
        if math.prod(factors[n] for n in split) * size * widen > _TRANSPOSED_BYTES:
            widen = 1
    outer, wide, inner = [], [], []
    # A reindex stage binds its iterators, named as the block's, to its loops in order.
    for loop, name in zip(loops, (iv.var.name for iv in ivs)):
        factor = factors.get(name, 1)
        extent = sch.get(loop).extent
        if factor <= 1 or extent % factor:
            outer.append(loop)
            continue
        tiles = widen if name == contiguous else 1
        if tiles > 1 and extent % (factor * tiles) == 0:
            parts = sch.split(loop, [None, tiles, factor])
            wide.append(parts[1])
        else:
            parts = sch.split(loop, [None, factor])
        outer.append(parts[0])
        inner.append(parts[-1])
    if not inner:
        return
    sch.reorder(*outer, *wide, *inner)
    for loop in wide + inner:
        sch.unroll(loop)


def _stage_factors(sch: Schedule, block_name: str, buffer: str,
                   factors: Mapping[str, int]) -> dict[str, int]:
    """The tile's ``factors`` (keyed by the block's iterators) keyed by the iterators of the
    copy that fills ``buffer``, before the tiled layout is applied. The copy may name them
    apart from the block (a unit row fused into the columns: the block's ``vi_vj`` is the
    copy's ``vj``; the packing, walked byte by byte, then cost 2.5 instructions a byte of B
    in a 1 x 1024 x 1024 GEMV), so they are paired by the dimension of ``buffer`` each
    indexes. Empty when there is no such copy or either indexes ``buffer`` otherwise than
    with plain iterators."""
    producer = _copies_of(sch, buffer, reads=False)
    dims = _index_vars(sch, block_name, buffer)
    if producer is None or dims is None:
        return {}
    store = sch.get(sch.get_block(producer)).block.body
    if not isinstance(store, BufferStore) or not all(isinstance(i, Var) for i in store.indices):
        return {}
    return {index.name: factors[dim] for index, dim in zip(store.indices, dims)
            if factors.get(dim, 1) > 1}


def _source_contiguous(sch: Schedule, block_name: str) -> tuple[str | None, int]:
    """The iterator of copy ``block_name`` that indexes its source's last (contiguous)
    dimension, and the source's element size in bytes; (None, 1) when that index is not
    a plain iterator."""
    value = _moved_load(sch.get(sch.get_block(block_name)).block.body.value)
    last = value.indices[-1] if isinstance(value, BufferLoad) and value.indices else None
    size = max(value.buffer.dtype.bits // 8, 1) if isinstance(value, BufferLoad) else 1
    return (last.name if isinstance(last, Var) else None), size


def _stage_and_tensorize(sch: Schedule, block_name: str, intrinsic: Intrinsic,
                         registry: Registry, cpu: CpuTarget, packed: dict[str, str],
                         operands: dict[str, str], layouts: dict[str, str | None],
                         loops: tuple[Any, Any, Any], steps: tuple[str, int] | None,
                         accumulator_tiles: tuple[int, int] | None = None,
                         stage_at: Mapping[str, Any] | None = None) -> None:
    """Stage the packed inputs whose operands live in registers into them at every
    iteration of the k loop ``loops[1]`` (one k step, or several with ``steps``),
    the accumulator tile in registers across the k loop (zeroed before it, stored after it),
    and tensorize. The packed buffers take their tiled ``layouts`` once their register stages
    are placed (the stages' regions are then plain affine windows). ``loops`` are the
    innermost output-tile loop, the k loop and the intrinsic tile's first loop;
    ``steps`` ``(k iterator, k extent of a call)``, when the k loop runs several steps an
    iteration, lays each register stage out step by step (each step's tile contiguous, the
    steps one after another, as in the packed layout); ``accumulator_tiles`` ``(ti, tj)``,
    when given, lays the accumulator registers out by tiles of that shape, one a
    register. ``stage_at``, when given, is the loop inside ``ko`` each input's register
    stage is placed in, by operand (a group of the iteration's steps; ``ko`` for one not
    named)."""
    tile_loop, ko, first = loops
    block = sch.get_block(block_name)
    dims = {op: _index_vars(sch, block_name, buffer) for op, buffer in packed.items()}
    stages = {}
    for op, buffer in packed.items():
        if intrinsic.operand(op).scope != cpu.register_scope:
            continue
        stage = sch.cache_read(block, buffer, registry.scope(cpu.register_scope))
        sch.compute_at(stage, (stage_at or {}).get(op, ko))
        stages[op] = stage
    c_op = intrinsic.output
    c_store = sch.cache_write(block, operands[c_op.name], registry.scope(c_op.scope))
    sch.reverse_compute_at(c_store, tile_loop)
    for op, stage in stages.items():
        sch.compact_buffer(_written(sch, stage))
        if steps is not None:
            _steps_first(sch, stage, dims[op], *steps)
    registers = sch.get(c_store).block.reads[0].buffer
    sch.compact_buffer(registers.name)
    if accumulator_tiles is not None:
        # Its last two dimensions by ti x tj tiles, each tile's elements last.
        ti, tj = accumulator_tiles
        lead = [f"d{n}" for n in range(len(registers.shape) - 2)]
        sch.transform_layout(c_store, registers.name, f"lambda {', '.join([*lead, 'i', 'j'])}: "
                             f"({', '.join([*lead, f'i // {ti}', f'j // {tj}'])}, i % {ti}, "
                             f"j % {tj})")
    for op, layout in layouts.items():
        if layout is not None:
            sch.transform_layout(stages.get(op, block), packed[op], layout)
    init = sch.decompose_reduction(block, ko)
    _vector_nest(sch, init, [registry.get(n) for n in intrinsic.fill[c_op.name]], True)
    _vector_nest(sch, c_store, [registry.get(n) for n in intrinsic.stores[c_op.name]], False)
    for op, stage in stages.items():
        _vector_nest(sch, stage, _loads(registry, intrinsic, op), True)
    sch.tensorize(first, intrinsic)


def _steps_first(sch: Schedule, stage: Any, dims: list[str] | None, k: str, tk: int) -> None:
    """Lay register stage ``stage``'s buffer (dimensions ``dims``, the block iterators
    indexing its packed source) out as ``(k // tk, other dimensions..., k % tk)``: the k
    steps of one iteration one after another, each step's tile contiguous."""
    if dims is None or k not in dims:
        return
    buffer = _written(sch, stage)
    params = [f"d{i}" for i in range(len(dims))]
    at = dims.index(k)
    others = [p for i, p in enumerate(params) if i != at]
    layout = [f"{params[at]} // {tk}", *others, f"{params[at]} % {tk}"]
    sch.transform_layout(stage, buffer, f"lambda {', '.join(params)}: ({', '.join(layout)})")


def _pack(sch: Schedule, block_name: str, buffer: str) -> str:
    """The packing stage of an input: a copy indexed by the block's own (tiled) iterators,
    so that each register tile is contiguous (``reindex``), unless the block already reads
    an intermediate that way. A copy stage it then reads from (an earlier reindex or
    padding) is inlined into it, so the data moves once. Returns the packed buffer's name."""
    if _index_vars(sch, block_name, buffer) is not None and \
            not any(p.name == buffer for p in sch.func.params):
        producer = _copies_of(sch, buffer, reads=False)
        if producer is not None and _fuses(sch, producer):
            # An im2col view (a convolution's window, its rows fused as h * W + w): the
            # tiled layout would put divisions of those fused indices in its stores, a stage
            # no tile splits. It stays a plain copy (its padding copy before it), and a
            # second copy, indexed by the block's own iterators, takes the tiled layout.
            packing = sch.reindex(sch.get_block(block_name), buffer)
            return sch.get(packing).block.writes[0].buffer.name
        _inline_copies_into(sch, buffer)
        return buffer
    packing = sch.reindex(sch.get_block(block_name), buffer)
    producers = [b for b in tree.block_names(sch.func)
                 if any(w.buffer.name == buffer
                        for w in sch.get(sch.get_block(b)).block.writes)]
    if len(producers) == 1 and _is_copy(sch, producers[0]):
        sch.compute_inline(sch.get_block(producers[0]))
    return sch.get(packing).block.writes[0].buffer.name


def _fuses(sch: Schedule, block_name: str) -> bool:
    """True when the block stores at an index that is not one of its iterators."""
    block = sch.get(sch.get_block(block_name)).block
    iters = {iv.var for iv in block.iter_vars}
    return isinstance(block.body, BufferStore) and not all(
        isinstance(i, Var) and i in iters for i in block.body.indices)


def _is_copy(sch: Schedule, block_name: str) -> bool:
    """True for a block that only moves elements (a reindex, or a padding copy: an element
    where it is in bounds, else a constant), each converted on its own at most (an operand
    shifted by a constant: ``shift_operand``), not one that combines elements."""
    block = sch.get(sch.get_block(block_name)).block
    if not isinstance(block.body, BufferStore) or block.init is not None:
        return False
    return isinstance(_moved_load(block.body.value), BufferLoad)


def _moved_load(value: Any) -> Any:
    """The load a copy's stored ``value`` moves, past the padding selects, conversions and
    constant shifts around it; ``value`` itself when something else is in the way."""
    while True:
        if isinstance(value, Select) and isinstance(value.false_value, IntImm):
            value = value.true_value
        elif isinstance(value, Cast):
            value = value.value
        elif isinstance(value, BinOp) and value.op == "add" and isinstance(value.b, IntImm):
            value = value.a
        else:
            return value


def _index_vars(sch: Schedule, block_name: str, buffer: str) -> list[str] | None:
    """The block iterators indexing ``buffer``, one per dimension in order, or None when an
    index is not a plain iterator."""
    block = sch.get(sch.get_block(block_name)).block
    iters = {iv.var for iv in block.iter_vars}
    found: list[list[str] | None] = []

    def visit(node: object) -> None:
        if isinstance(node, BufferLoad) and node.buffer.name == buffer:
            ok = all(isinstance(i, Var) and i in iters for i in node.indices)
            found.append([i.name for i in node.indices] if ok else None)  # type: ignore

    post_order_visit(block.body, visit)
    return found[0] if found and len({tuple(f) if f else None for f in found}) == 1 else None


def _operand_buffers(sch: Schedule, block_name: str, intrinsic: Intrinsic) -> dict[str, str]:
    """Kernel buffer names by intrinsic operand: the one stored is the output; the inputs
    in the order the block's value reads them matched against the intrinsic's (by dtype,
    then by order)."""
    block = sch.get(sch.get_block(block_name)).block
    store = block.body
    loads: list[BufferLoad] = []
    post_order_visit(store.value, lambda n: loads.append(n)  # type: ignore[attr-defined]
                     if isinstance(n, BufferLoad) and n.buffer is not store.buffer else None)
    result = {intrinsic.output.name: store.buffer.name}  # type: ignore[attr-defined]
    semantic_loads: list[BufferLoad] = []
    post_order_visit(intrinsic.semantics.value, lambda n: semantic_loads.append(n)
                     if isinstance(n, BufferLoad)
                     and n.buffer is not intrinsic.semantics.buffer else None)
    if len(loads) != len(semantic_loads):
        raise ScheduleError("cpu schedule", f"block {block_name} reads {len(loads)} buffers, "
                            f"{intrinsic.name} {len(semantic_loads)}")
    unpaired = list(loads)
    for semantic in semantic_loads:
        # Same dtype first: a mapping may swap the inputs (s8 x u8 onto a u8 x s8 dot).
        kernel = next((k for k in unpaired if k.buffer.dtype == semantic.buffer.dtype),
                      unpaired[0])
        unpaired.remove(kernel)
        result[semantic.buffer.name] = kernel.buffer.name
    return result


def _loads(registry: Registry, intrinsic: Intrinsic, operand: str) -> list[Intrinsic]:
    """The load intrinsics of the family that fill ``operand``'s scope with its dtype,
    largest first (several registers in one instruction, AArch64's ``ld1x4``, before one),
    then widest tile first: a register tile of several rows of A loads 4 rows at once (one
    16-byte load on AArch64) though the instruction reads one row's 4 bytes."""
    op = intrinsic.operand(operand)
    fits = [i for i in registry.for_target(intrinsic.target) if i.kind == "load"
            and i.operands[0].dtype == op.dtype and i.operands[0].scope == op.scope]
    # Among tiles of one size and rank, those whose rows are as long as the operand's come
    # first (a 2 x 8 tile for SMMLA's 2 x 8 operand, not a 4 x 4 one of the same 16 bytes).
    return sorted(fits, key=lambda i: (-math.prod(i.operands[0].shape),
                                       -len(i.operands[0].shape),
                                       i.operands[0].shape[-1] != op.shape[-1]))


def _written(sch: Schedule, stage: Any) -> str:
    return sch.get(stage).block.writes[0].buffer.name


def _vector_nest(sch: Schedule, stage: Any, candidates: list[Intrinsic], required: bool
                 ) -> None:
    """Tensorize a register-tile copy or fill nest one vector at a time with the first
    candidate whose tile fits (its last dimension splits the nest's innermost loop, a
    leading one the loop outside it), unrolling the loops around the calls. When no
    candidate fits and ``required`` is false (a store whose destination is not contiguous),
    the nest stays plain loops, unrolled, which the backend runs lane by lane."""
    refusals = []
    loops = sch.get_loops(stage)
    own = _own_loops(sch, stage, loops)
    for intrinsic in candidates:
        # The tile in the intrinsic's iterators (a multi-register load's operand may be laid
        # out differently, step by step).
        shape = tuple(intrinsic.extents)
        if not required and sum(e > 1 for e in shape) > 1:
            # A store of several rows writes them contiguously; in the kernel's output they
            # are a row apart, so only single-row stores fit.
            continue
        attempt = sch.snapshot()
        try:
            outside, tile = _split_to(sch, own, shape)
            before = set(tree.block_names(sch.func))
            sch.tensorize(tile[0], intrinsic)
            if required:
                _check_runs(sch, set(tree.block_names(sch.func)) - before, intrinsic)
            for loop in outside:
                sch.unroll(loop)
            return
        except ScheduleError as err:
            sch.restore(attempt)
            refusals.append(str(err))
    if required:
        raise ScheduleError("cpu schedule", "; ".join(refusals))
    for loop in own:
        sch.unroll(loop)


def _check_runs(sch: Schedule, blocks: set[str], intrinsic: Intrinsic) -> None:
    """ScheduleError unless every operand of the call of ``intrinsic`` in ``blocks`` (the
    block tensorize made) is one contiguous run of its buffer, as a load or fill moves it:
    whole registers (several in one instruction for ``ld1x4``) from a dense source. A tile
    whose dimensions interleave with another's in the register stage or the packed buffer
    (one row's k steps a panel apart) is refused here, so the next load is tried, rather
    than by the code generator."""
    from targets.cpu.emit import contiguous_tile  # the code generator's own rule

    for name in blocks:
        call = sch.get(sch.get_block(name)).block.body
        if not isinstance(call, IntrinsicCall):
            continue
        for operand, region in zip(intrinsic.operands, call.args):
            if not isinstance(region, BufferRegion):
                continue
            extents = [r.extent.value if isinstance(r.extent, IntImm) else None
                       for r in region.ranges]
            if None in extents or not contiguous_tile(extents, region.buffer.effective_strides):
                raise ScheduleError("cpu schedule", f"{intrinsic.name}: its operand "
                                    f"{operand.name}, a {'x'.join(map(str, extents))} tile "
                                    f"of {region.buffer.name}, is not one contiguous run")


def _own_loops(sch: Schedule, stage: Any, loops: list[Any]) -> list[Any]:
    """The loops of a stage's own perfect nest: from the stage outwards, while each loop
    holds nothing but the one inside it."""
    own: list[Any] = []
    child: Any = sch.get(stage)
    for loop in reversed(loops):
        node = sch.get(loop)
        if node.body is not child:
            break
        own.insert(0, loop)
        child = node
    return own


def _split_to(sch: Schedule, loops: list[Any], shape: tuple[int, ...]
              ) -> tuple[list[Any], list[Any]]:
    """Split the innermost loops of a nest by a tile's shape: returns (the loops left outside
    the tile, the tile's loops), the tile's loops innermost and in the tile's order."""
    if len(loops) < len(shape):
        raise ScheduleError("cpu schedule", f"a {len(shape)}-d tile needs {len(shape)} loops, "
                            f"the nest has {len(loops)}")
    outside, tile = list(loops[:-len(shape)]), []
    for loop, extent in zip(loops[-len(shape):], shape):
        if sch.get(loop).extent == extent:
            tile.append(loop)
            continue
        outer, inner = sch.split(loop, [None, extent])
        outside.append(outer)
        tile.append(inner)
    if outside:
        sch.reorder(*outside, *tile)
    return outside, tile
