"""What an NPU family needs to run on its machine, said in one place.

A family that describes an NPU (its file has a ``machine:`` section) is runnable when its
scopes are the machine's memories, each on-chip tile fits one bank of its memory, and each
GEMM the engine may try (a compute intrinsic that reduces and accumulates) is one the array
executes, reads its tiles with declared loads, writes them with a declared store, and starts
its accumulator tile at zero (a resetting variant or a fill), and each instruction its
intrinsics emit is one the machine has (:func:`unit_problem`: ``vec.requant`` and
``vec.qadd`` need ``machine.requant``). The loader calls
:func:`check_npu_family` on every such family, so ``tensorize intrinsics validate`` and the
registry that ``tensorize run`` loads refuse the same files at the same lines; the NPU schedule
(``tensorize.engine.npu_schedule``) asks the same questions of the machine a run uses
(:func:`gemm_axes`, :func:`fit_problem`, :func:`reset_variant`, :func:`zeroing_problem`), so a
family another machine cannot run is refused there with the same reason.

Each question returns the reason as text (or None when all is well); callers wrap it in their
own error: a finding at the YAML line here, a ``ScheduleError`` in the schedule. Which scope
is which memory (:data:`SCOPE_MEMORY`) and how a tile lies in a memory's rows
(:func:`row_layout`) are the NPU backend's too (``targets.npu.memory`` places buffers by them).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

import ir
from intrinsics.checks import operand_positions
from intrinsics.model import Intrinsic, Operand, Scope
from intrinsics.source import Findings
from ir import IterKind
from simulator.config import MachineConfig, memory_bytes, row_width
from simulator.isa import Mem

# The family's scope of each on-chip memory of the machine (the simulator's names).
SCOPE_MEMORY = {"npu.inp": Mem.INP, "npu.wgt": Mem.WGT, "npu.acc": Mem.ACC}
_ROLE = {Mem.INP: "input scratchpad", Mem.WGT: "weight scratchpad",
         Mem.ACC: "accumulator memory"}
_DTYPE = {"inp": ir.dtype("int8"), "wgt": ir.dtype("int8"), "acc": ir.dtype("int32")}
# What else a memory's elements may hold: an acc word holds the float32 bits of a
# requantisation scale as well (vec.requant reads a row of them), or an int8 value a
# widening load sign-extended (vec.qadd adds a tile of them).
_ALSO = {"inp": (), "wgt": (), "acc": (ir.dtype("float32"), ir.dtype("int8"))}
# The same on a float array (``machine.datapath``): bfloat16 operands, a float32 accumulator
# and nothing else (it has no requantisation stage and no widening load).
_FLOAT_DTYPE = {"inp": ir.dtype("bfloat16"), "wgt": ir.dtype("bfloat16"),
                "acc": ir.dtype("float32")}
_FLOAT_ALSO: dict[str, tuple[ir.DType, ...]] = {"inp": (), "wgt": (), "acc": ()}


@dataclass(frozen=True, slots=True)
class GemmAxes:
    """A GEMM intrinsic's M, N and K: their positions among its iterators, and their
    extents (ti, tj, tk), the tile one call computes."""

    positions: tuple[int, int, int]
    extents: tuple[int, int, int]

    def of(self, values: tuple[int, ...]) -> tuple[int, int, int]:
        """``values`` given in the intrinsic's iterator order, as (m, n, k)."""
        m, n, k = self.positions
        return values[m], values[n], values[k]


def tried(intrinsic: Intrinsic) -> bool:
    """Whether the engine tries ``intrinsic`` on a reduction: a compute intrinsic that
    reduces and accumulates (a resetting variant is used through its accumulating one)."""
    return intrinsic.kind == "compute" and bool(intrinsic.reduce_vars()) and not intrinsic.resets


def gemm_axes(intrinsic: Intrinsic) -> GemmAxes | None:
    """Where M, N and K are in ``intrinsic`` (``C[i, j] += A[i, k] * B[k, j]`` with any
    iterator names and order): M and N index the output's rows and columns, K is the one
    reduce iterator; None when it is not shaped so (:func:`not_a_gemm` says why)."""
    reduce = [n for n, iv in enumerate(intrinsic.iter_vars) if iv.kind is IterKind.REDUCE]
    output = operand_positions(intrinsic).get(intrinsic.output.name, [])
    if len(intrinsic.iter_vars) != 3 or len(reduce) != 1 or len(output) != 2:
        return None
    positions = (output[0], output[1], reduce[0])
    m, n, k = (intrinsic.iter_vars[p].extent for p in positions)
    return GemmAxes(positions, (m, n, k))


def not_a_gemm(intrinsic: Intrinsic) -> str:
    """Why :func:`gemm_axes` found no GEMM in ``intrinsic``."""
    return (f"{intrinsic.name} requires the shape of a GEMM, C[i, j] += A[i, k] * B[k, j] "
            f"with one reduce iterator, got {intrinsic.semantics_text!r}")


def gemm_operands(intrinsic: Intrinsic, axes: GemmAxes
                  ) -> tuple[Operand, Operand, Operand] | None:
    """The operands (A, B, C): A indexed by (m, k), B by (k, n), C the output; None when the
    inputs are not indexed so (:func:`not_row_major` says why)."""
    positions = operand_positions(intrinsic)
    m, n, k = axes.positions
    by_axes = {tuple(positions.get(o.name, ())): o for o in intrinsic.operands}
    a, b = by_axes.get((m, k)), by_axes.get((k, n))
    return None if a is None or b is None else (a, b, intrinsic.output)


def not_row_major(intrinsic: Intrinsic) -> str:
    """Why :func:`gemm_operands` found no A and B in ``intrinsic``."""
    return (f"{intrinsic.name} requires operands A[i, k] and B[k, j] (row-major tiles), got "
            f"{intrinsic.semantics_text!r}")


def fit_problem(intrinsic: Intrinsic, axes: GemmAxes, config: MachineConfig) -> str | None:
    """Why the machine ``config`` cannot run one call of the GEMM ``intrinsic`` (None when
    it can): its k-values must fit the array's rows (one reduction step) and its output
    columns the array's columns."""
    ti, tj, tk = axes.extents
    array = config.array
    needs = []
    if tk > array.rows:
        needs.append(f"k = {tk} <= the array's {array.rows} rows (machine.array.rows)")
    if tj > array.cols:
        needs.append(f"n = {tj} <= the array's {array.cols} columns (machine.array.cols)")
    if not needs:
        return None
    return (f"{intrinsic.name} computes {ti}x{tj}x{tk} tiles (m x n x k), which requires "
            f"{' and '.join(needs)} of machine {config.name}; describe the family's GEMM for "
            "this machine")


def reset_variant(intrinsic: Intrinsic, family: Iterable[Intrinsic]) -> Intrinsic | None:
    """The intrinsic of ``family`` (the intrinsics of ``intrinsic``'s family) that overwrites
    instead of accumulating, with the same operands; None when it declares none."""
    if intrinsic.resets:
        return None
    shape = [(o.name, o.shape, o.dtype, o.role) for o in intrinsic.operands]
    for other in family:
        if (other.resets and other.kind == intrinsic.kind and other.family == intrinsic.family
                and other.target == intrinsic.target
                and [(o.name, o.shape, o.dtype, o.role) for o in other.operands] == shape):
            return other
    return None


def zeroing_problem(intrinsic: Intrinsic) -> str:
    """Why nothing starts ``intrinsic``'s accumulator tile at zero (asked when the family
    has no :func:`reset_variant` of it and it declares no fill)."""
    out = intrinsic.output.name
    return (f"{intrinsic.name} accumulates, and its family declares neither a resetting "
            f"variant (resets: true, same operands) nor a fill intrinsic for {out} (fill: "
            f"{{{out}: NAME}}), so nothing can start an accumulator tile at zero; declare one "
            "of them")


def copies_problem(intrinsic: Intrinsic, operands: tuple[Operand, Operand, Operand]
                   ) -> str | None:
    """Why the GEMM's tiles cannot reach the chip or leave it (None when they can): A and B
    need a declared load, C a declared store."""
    a, b, c = operands
    missing = [f"loads: {{{o.name}: NAME}}" for o in (a, b) if not intrinsic.loads.get(o.name)]
    if not intrinsic.stores.get(c.name):
        missing.append(f"stores: {{{c.name}: NAME}}")
    if not missing:
        return None
    return (f"{intrinsic.name} requires a data-movement intrinsic for each tile it reads from "
            f"DRAM and writes back, got none declared for {' and '.join(missing)}")


def row_layout(shape: tuple[int, ...], width: int) -> tuple[int, int] | None:
    """How a buffer of ``shape`` lies in a memory of ``width``-element rows: (elements per
    memory row, memory rows). Whole rows when its last dimension is a multiple of the row,
    else one buffer row per memory row (the rest of it unused); None when its last dimension
    is longer than a row and not a multiple of it (no layout exists)."""
    last = shape[-1] if shape else 1
    if last % width and last > width:
        return None
    per_row = width if last % width == 0 else last
    size = 1
    for extent in shape:
        size *= extent
    return per_row, size // per_row


def scope_problem(intrinsic: Intrinsic, operand: Operand, mem: Mem) -> str | None:
    """Why ``operand`` of a GEMM cannot live where the simulator keeps it (None: it can):
    the NPU backend places a GEMM's operands by scope name, one name per memory."""
    wanted = next(name for name, m in SCOPE_MEMORY.items() if m is mem)
    if operand.scope == wanted:
        return None
    return (f"intrinsic {intrinsic.name}: operand {operand.name} requires scope {wanted}, the "
            f"NPU's {_ROLE[mem]} (the backend places a GEMM's operands by these scope names, "
            f"docs/intrinsics.md), got {operand.scope}")


# Instructions only some machines have, by mnemonic: the machine section each one needs.
OPTIONAL_UNITS = {"vec.requant": "requant", "vec.qadd": "requant"}


def unit_problem(intrinsic: Intrinsic, config: MachineConfig) -> str | None:
    """Why the machine ``config`` lacks the instruction ``intrinsic`` emits (None: it has
    it): ``vec.requant`` and ``vec.qadd`` run on the vector unit's float32 requantisation
    stage, which a machine has only when its description declares ``machine.requant``."""
    mnemonic = intrinsic.emit.get("npu", "").split(None, 1)[:1]
    unit = OPTIONAL_UNITS.get(mnemonic[0]) if mnemonic else None
    if unit is None or getattr(config, unit) is not None:
        return None
    return (f"intrinsic {intrinsic.name} emits {mnemonic[0]}, which requires a machine with "
            f"machine.{unit}, and {config.name} has none")


def accumulation_problem(intrinsic: Intrinsic, config: MachineConfig) -> str | None:
    """Why a compute intrinsic's stated ``accumulation`` is not what the machine ``config``'s
    float array does (None: it is, or the array is int8): the family states the order the
    hardware-order checks assume, the machine's ``datapath`` the order the simulator adds
    in, and the two must be one."""
    datapath = config.datapath
    if datapath is None or intrinsic.kind != "compute":
        return None
    want = (datapath.order, datapath.rounding, datapath.denormals)
    rule = intrinsic.accumulation
    got = None if rule is None else (rule.order, rule.rounding, rule.denormals)
    if got == want:
        return None
    text = "none" if got is None else (
        f"{{order: {got[0]}, rounding: {got[1]}, denormals: {got[2]}}}")
    return (f"intrinsic {intrinsic.name} runs on {config.name}'s float array "
            f"(machine.datapath), which requires accumulation: {{order: {want[0]}, "
            f"rounding: {want[1]}, denormals: {want[2]}}}, got {text}")


def check_npu_family(intrinsics: Iterable[Intrinsic], scopes: Mapping[str, Scope],
                     config: MachineConfig | None, findings: Findings) -> None:
    """Record, at its YAML line, everything that keeps an NPU family from running (module
    docs) on the machine ``config`` its file describes; with no machine (a family adding
    intrinsics to an NPU another file describes), what keeps it from running on any."""
    intrinsics = tuple(intrinsics)
    if config is not None:
        for scope in scopes.values():
            _check_scope(scope, config, findings)
        # Each tile shape of each memory once, at its first operand: one finding per thing
        # to change, not one per variant and companion sharing the tile.
        tiles: dict[tuple[str, tuple[int, ...]], tuple[Intrinsic, Operand]] = {}
        for intrinsic in intrinsics:
            for operand in intrinsic.operands:
                tiles.setdefault((operand.scope, operand.shape), (intrinsic, operand))
        for intrinsic, operand in tiles.values():
            _check_tile(intrinsic, operand, config, findings)
        for intrinsic in intrinsics:
            problem = unit_problem(intrinsic, config) or accumulation_problem(intrinsic, config)
            if problem is not None:
                findings.add(intrinsic.loc, problem)
    for intrinsic in intrinsics:
        if tried(intrinsic):
            _check_gemm(intrinsic, intrinsics, config, findings)


def _check_scope(scope: Scope, config: MachineConfig, findings: Findings) -> None:
    """A scope standing for an on-chip memory declares that memory: its bytes, its banks and
    the dtype it holds."""
    mem = SCOPE_MEMORY.get(scope.name)
    if mem is None:
        return
    name = mem.name.lower()
    memory = getattr(config, name)
    nbytes = memory_bytes(config, name)
    dtype = (_FLOAT_DTYPE if config.is_float else _DTYPE)[name]
    what = (f"the machine's {_ROLE[mem]} (machine.{name}: {memory.rows} rows of "
            f"{row_width(config.array, name)} {dtype}, {memory.banks} banks)")
    if scope.capacity is not None and scope.capacity != nbytes:
        findings.add(scope.loc, f"scope {scope.name} requires capacity {nbytes}, the bytes of "
                     f"{what}, got {scope.capacity}")
    if scope.banks is not None and scope.banks != memory.banks:
        findings.add(scope.loc, f"scope {scope.name} requires banks: {memory.banks}, the banks "
                     f"of {what}, got {scope.banks}")
    others = (_FLOAT_ALSO if config.is_float else _ALSO)[name]
    allowed = (dtype, *others)
    if scope.dtypes and (dtype not in scope.dtypes or
                         any(d not in allowed for d in scope.dtypes)):
        held = ", ".join(d.name for d in scope.dtypes)
        also = "".join(f" (and {d})" for d in others)
        findings.add(scope.loc, f"scope {scope.name} requires dtype {dtype}{also}, what "
                     f"{what} holds, got {held}")


def _check_tile(intrinsic: Intrinsic, operand: Operand, config: MachineConfig,
                findings: Findings) -> None:
    """An on-chip operand's tile has a layout in its memory's rows, within one bank (an
    instruction's rows lie in one bank)."""
    mem = SCOPE_MEMORY.get(operand.scope)
    if mem is None or operand.is_scalar:
        return
    name = mem.name.lower()
    width = row_width(config.array, name)
    memory = getattr(config, name)
    tile = "x".join(str(s) for s in operand.shape)
    layout = row_layout(operand.shape, width)
    where = f"intrinsic {intrinsic.name}: operand {operand.name}"
    if layout is None:
        findings.add(operand.loc, f"{where} requires its last dimension to be a multiple of "
                     f"the {width}-element rows of {operand.scope} (machine.{name}) or at most "
                     f"one row, got a {tile} tile")
        return
    rows = layout[1]
    if rows > memory.bank_rows:
        findings.add(operand.loc, f"{where}: its {tile} {operand.dtype} tile takes {rows} rows "
                     f"of {operand.scope}, which requires at most {memory.bank_rows}, the rows of "
                     f"one bank of the machine's {_ROLE[mem]} (machine.{name}: {memory.rows} "
                     f"rows in {memory.banks} banks)")


def _check_gemm(intrinsic: Intrinsic, family: tuple[Intrinsic, ...],
                config: MachineConfig | None, findings: Findings) -> None:
    """A GEMM the engine may try is one the NPU schedule takes (on ``config``, if given)."""
    axes = gemm_axes(intrinsic)
    if axes is None:
        findings.add(intrinsic.loc, not_a_gemm(intrinsic))
        return
    operands = gemm_operands(intrinsic, axes)
    if operands is None:
        findings.add(intrinsic.loc, not_row_major(intrinsic))
        return
    for operand, mem in zip(operands, (Mem.INP, Mem.WGT, Mem.ACC)):
        problem = scope_problem(intrinsic, operand, mem)
        if problem is not None:
            findings.add(operand.loc or intrinsic.loc, problem)
            return
    problem = fit_problem(intrinsic, axes, config) if config is not None else None
    if problem is not None:
        _, n, k = axes.positions
        wide = intrinsic.iter_vars[k if axes.extents[2] > config.array.rows else n]
        findings.add(wide.loc or intrinsic.loc, problem)
    if reset_variant(intrinsic, family) is None and \
            not intrinsic.fill.get(intrinsic.output.name):
        findings.add(intrinsic.loc, zeroing_problem(intrinsic))
    problem = copies_problem(intrinsic, operands)
    if problem is not None:
        findings.add(intrinsic.loc, problem)

