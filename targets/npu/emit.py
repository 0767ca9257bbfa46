"""Walking a tensorized stage and emitting one NPU instruction per intrinsic call.

The stage's loops run here, at compile time, as an NPU program is straight-line code: every
loop iteration and block instance is visited in program order, bindings and predicates are
evaluated, and each ``IntrinsicCall`` of the ``npu`` target becomes the line of assembly its
``emit.npu`` template gives, with operands replaced by on-chip row addresses or DRAM byte
addresses. Anything else (a plain store, a call of another target's intrinsic) is refused
with the block that holds it: the NPU runs only its own instructions.

Double buffering: an on-chip buffer with two copies switches copy when a queue starts
writing it again after another queue has read it (a new tile arrives after the previous one
was consumed), so the next tile's transfer can overlap the current one's use. A switch is
sound only when every later read finds data written since the switch; the emitter checks
that row by row and, where it fails, reports the buffer so the caller emits again with that
buffer in one copy.
"""

from __future__ import annotations

import dataclasses
from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

import numpy as np

from intrinsics.model import Intrinsic, Operand
from intrinsics.templates import placeholders
from ir.buffer import Buffer
from ir.errors import ExecutionError, SimulatorFault
from ir.evaluate import compile_index, evaluate
from ir.expr import Expr, IntImm, Var
from ir.stmt import (Block, BlockRealize, BufferRegion, BufferStore, For, IfThenElse,
                     IntrinsicCall, IterKind, SeqStmt, Stmt)
from simulator.assembler import assemble
from simulator.isa import Instruction, Queue
from targets.npu.memory import InDram, OnChip, element_bytes

_QUEUE_OF_KIND = {"load": Queue.LOAD, "store": Queue.STORE, "compute": Queue.COMPUTE,
                  "fill": Queue.COMPUTE}


class UnsoundSwitch(Exception):
    """A double-buffered buffer was read where its current copy holds older data."""

    def __init__(self, buffer: Buffer) -> None:
        super().__init__(buffer.name)
        self.buffer = buffer


@dataclass
class _CopyState:
    """Which copy of a buffer is current, which generation of data it holds, the generation
    each row was last written in, and the queues that read it since its last write."""

    copy: int = 0
    generation: int = 0
    readers: set[Queue] = field(default_factory=set)
    rows_gen: list[np.ndarray] = field(default_factory=list)


@dataclass(frozen=True, slots=True)
class Emitted:
    """The instructions of a stage, in program order, and how often each intrinsic ran."""

    instructions: tuple[Instruction, ...]
    calls: Mapping[str, int]


def emit_stage(stmt: Stmt, lookup, on_chip: Mapping[Buffer, OnChip],
               dram: Mapping[Buffer, InDram]) -> Emitted:
    """The instructions of one NPU stage (a statement of the tensorized function's root).

    ``lookup(name)`` gives an Intrinsic. Buffers must all be placed in ``on_chip`` or
    ``dram``. Raises UnsoundSwitch for a double-buffered buffer that cannot alternate, and
    ExecutionError for anything the NPU cannot run.
    """
    emitter = _Emitter(lookup, on_chip, dram)
    emitter.stmt(stmt, {}, None)
    return Emitted(tuple(emitter.program), dict(emitter.calls))


class _Emitter:
    def __init__(self, lookup, on_chip: Mapping[Buffer, OnChip],
                 dram: Mapping[Buffer, InDram]) -> None:
        self.lookup = lookup
        self.on_chip = on_chip
        self.dram = dram
        self.program: list[Instruction] = []
        self.calls: Counter[str] = Counter()
        self.sites: dict[int, _Site] = {}
        self.bindings: dict[int, tuple] = {}  # per realize: compiled bindings and predicate
        self.conditions: dict[int, Callable[[Mapping[Var, int]], int]] = {}
        self.states = {b: _CopyState(rows_gen=[np.full(p.rows, -1, np.int64)
                                                for _ in p.bases])
                       for b, p in on_chip.items()}

    # -- statements ------------------------------------------------------------------------

    def stmt(self, stmt: Stmt, env: dict[Var, int], block: Block | None) -> None:
        if isinstance(stmt, For):
            for value in range(stmt.extent):
                env[stmt.var] = value
                self.stmt(stmt.body, env, block)
            del env[stmt.var]
        elif isinstance(stmt, SeqStmt):
            for child in stmt.stmts:
                self.stmt(child, env, block)
        elif isinstance(stmt, IfThenElse):
            cond = self.conditions.get(id(stmt))
            if cond is None:
                cond = self.conditions[id(stmt)] = compile_index(stmt.cond)
            if cond(env):
                self.stmt(stmt.then_case, env, block)
            elif stmt.else_case is not None:
                self.stmt(stmt.else_case, env, block)
        elif isinstance(stmt, BlockRealize):
            self.realize(stmt, env)
        elif isinstance(stmt, IntrinsicCall):
            self.call(stmt, env, block)
        elif isinstance(stmt, BufferStore):
            where = f"block {block.name!r}" if block is not None else "the stage"
            raise ExecutionError(
                f"{where} stores to {stmt.buffer.name} with a plain statement; the NPU runs "
                "only its intrinsics, so this block must be tensorized or run on the host")
        else:
            raise ExecutionError(f"the NPU backend cannot run a {type(stmt).__name__}")

    def realize(self, realize: BlockRealize, env: dict[Var, int]) -> None:
        block = realize.block
        compiled = self.bindings.get(id(realize))
        if compiled is None:
            compiled = ([compile_index(b) for b in realize.bindings],
                        compile_index(realize.predicate))
            self.bindings[id(realize)] = compiled
        values = [b(env) for b in compiled[0]]
        if not compiled[1](env):
            return
        inner = dict(env)
        inner.update({iv.var: v for iv, v in zip(block.iter_vars, values)})
        if block.init is not None and all(
                v == 0 for iv, v in zip(block.iter_vars, values) if iv.kind is IterKind.REDUCE):
            self.stmt(block.init, inner, block)
        self.stmt(block.body, inner, block)

    # -- intrinsic calls ---------------------------------------------------------------------

    def site(self, call: IntrinsicCall, block: Block | None) -> _Site:
        """What does not change between executions of one call: checked once."""
        site = self.sites.get(id(call))
        if site is not None:
            return site
        intrinsic: Intrinsic = self.lookup(call.intrinsic)
        where = f"block {block.name!r}" if block is not None else "the stage"
        if intrinsic.target != "npu" or "npu" not in intrinsic.emit:
            raise ExecutionError(f"{where} calls {intrinsic.name} of target "
                                 f"{intrinsic.target}; the NPU runs only npu intrinsics")
        args = []
        for operand, arg in zip(intrinsic.operands, call.args):
            if not isinstance(arg, BufferRegion):
                args.append(_Arg.make(operand, arg, "scalar"))
                continue
            buffer = arg.buffer
            if buffer in self.on_chip:
                row_elems = self.on_chip[buffer].row_elems
                if len(operand.shape) >= 2 and _leading_stride(arg, operand) != row_elems:
                    raise ExecutionError(
                        f"{where}: operand {operand.name} of {intrinsic.name} requires its "
                        f"rows contiguous in {buffer.name} ({row_elems} elements apart), got "
                        f"{_leading_stride(arg, operand)}; lay the buffer out one tile row "
                        "per memory row")
                args.append(_Arg.make(operand, arg, "chip", buffer.effective_strides))
            elif buffer in self.dram:
                args.append(_Arg.make(operand, arg, "dram", buffer.effective_strides,
                                      _leading_stride(arg, operand)))
            else:
                raise ExecutionError(f"{where}: buffer {buffer.name} (scope {buffer.scope}) "
                                     "has no place in the NPU's memories")
        site = _Site(intrinsic, _QUEUE_OF_KIND[intrinsic.kind], tuple(args), where,
                     _Template.of(intrinsic))
        self.sites[id(call)] = site
        return site

    def call(self, call: IntrinsicCall, env: dict[Var, int], block: Block | None) -> None:
        site = self.site(call, block)
        intrinsic, queue = site.intrinsic, site.queue
        values: dict[str, int] = {}
        accesses = []
        for arg in site.args:
            name = arg.operand.name
            if arg.kind == "scalar":
                value = arg.offset(env)
                values[name] = value
                if value > 0 and value & (value - 1) == 0:
                    values[f"{name}.log2"] = value.bit_length() - 1
                continue
            flat = arg.offset(env)
            if arg.kind == "chip":
                accesses.append((arg.operand, arg.node.buffer, flat))
            else:
                buffer = arg.node.buffer
                width = element_bytes(buffer)
                values[name] = self.dram[buffer].base + flat * width
                values[f"{name}.ld"] = arg.ld
                values[f"{name}.ld_bytes"] = arg.ld * width
        # Writes first pick their copy, then every on-chip operand gets its row address.
        for operand, buffer, flat in accesses:
            if _writes(operand, intrinsic):
                self.begin_write(buffer, queue)
        for operand, buffer, flat in accesses:
            placed = self.on_chip[buffer]
            state = self.states[buffer]
            if flat % placed.row_elems:
                raise ExecutionError(f"{site.where}: operand {operand.name} of "
                                     f"{intrinsic.name} starts inside a row of {buffer.name}")
            values[operand.name] = placed.row_of(flat, state.copy)
            first = flat // placed.row_elems
            rows = slice(first, first + max(operand.buffer.size // placed.row_elems, 1))
            if _reads(operand, intrinsic):
                self.check_read(buffer, rows, queue)
            if _writes(operand, intrinsic):
                state.rows_gen[state.copy][rows] = state.generation
        if site.template is not None:
            self.program.append(site.template.make(values))
        else:
            line = intrinsic.render("npu", {k: str(v) for k, v in values.items()})
            self.program.extend(assemble(line, f"<{intrinsic.name}>"))
        self.calls[intrinsic.name] += 1

    def begin_write(self, buffer: Buffer, queue: Queue) -> None:
        """A write by ``queue`` after another queue consumed the data starts a generation,
        in the other copy when there are two."""
        state = self.states[buffer]
        if state.readers - {queue}:
            state.generation += 1
            if len(self.on_chip[buffer].bases) > 1:
                state.copy = 1 - state.copy
        state.readers = set()

    def check_read(self, buffer: Buffer, rows: slice, queue: Queue) -> None:
        """Refuse a read of a double-buffered buffer's rows from an older generation."""
        state = self.states[buffer]
        if len(self.on_chip[buffer].bases) > 1 and (
                state.rows_gen[state.copy][rows] != state.generation).any():
            raise UnsoundSwitch(buffer)
        state.readers.add(queue)


@dataclass(frozen=True, slots=True)
class _Arg:
    """One argument of a call site: a scalar expression, or a region on chip or in DRAM
    with its buffer's strides (and, in DRAM, the leading stride of the operand's rows).
    ``offset`` computes the region's first element (or the scalar) from the loop values."""

    operand: Operand
    node: BufferRegion | Expr
    kind: str
    strides: tuple[int, ...] = ()
    ld: int = 0
    offset: Callable[[Mapping[Var, int]], int] | None = None

    @staticmethod
    def make(operand: Operand, node: BufferRegion | Expr, kind: str,
             strides: tuple[int, ...] = (), ld: int = 0) -> _Arg:
        if isinstance(node, BufferRegion):
            flat = IntImm(0)
            for r, stride in zip(node.ranges, strides):
                flat = flat + r.start * stride
            return _Arg(operand, node, kind, strides, ld, compile_index(flat))
        return _Arg(operand, node, kind, strides, ld, compile_index(node))


@dataclass(frozen=True, slots=True)
class _Site:
    intrinsic: Intrinsic
    queue: Queue
    args: tuple[_Arg, ...]
    where: str
    template: _Template | None


_SENTINEL = 40000  # placeholder probes: distinct 16-bit values no template writes literally


@dataclass(frozen=True, slots=True)
class _Template:
    """An intrinsic's assembly line as an instruction with holes: which field each
    placeholder fills. Building instructions from it skips rendering and parsing text, and
    gives the same instruction as the text (the probe below checks every placeholder lands
    in exactly one field)."""

    cls: type
    fixed: tuple[tuple[str, object], ...]
    holes: tuple[tuple[str, str], ...]  # (placeholder, field)

    @staticmethod
    def of(intrinsic: Intrinsic) -> _Template | None:
        names = [str(p) for p in placeholders(intrinsic.emit["npu"])]
        probes = {name: _SENTINEL + 7 * n for n, name in enumerate(names)}
        try:
            (insn,) = assemble(intrinsic.render("npu", {k: str(v) for k, v in probes.items()}))
        except (SimulatorFault, ValueError):
            return None  # a placeholder whose field cannot hold a probe: render as text
        fields = {f.name: getattr(insn, f.name) for f in dataclasses.fields(insn)}
        holes = []
        for name, probe in probes.items():
            hits = [f for f, v in fields.items() if type(v) is int and v == probe]
            if len(hits) != 1:
                return None
            holes.append((name, hits[0]))
        filled = {f for _, f in holes}
        fixed = tuple((f, v) for f, v in fields.items() if f not in filled)
        return _Template(type(insn), fixed, tuple(holes))

    def make(self, values: Mapping[str, int]) -> Instruction:
        kwargs = dict(self.fixed)
        kwargs.update({field: values[name] for name, field in self.holes})
        return self.cls(**kwargs)


def _reads(operand: Operand, intrinsic: Intrinsic) -> bool:
    return operand.role == "input" or (operand.role == "accumulator" and not intrinsic.resets)


def _writes(operand: Operand, intrinsic: Intrinsic) -> bool:
    return operand.role in ("output", "accumulator")


def _leading_stride(region: BufferRegion, operand: Operand) -> int:
    """Elements between rows of the operand's first dimension in the kernel buffer: the
    stride of the region dimension that carries the operand's leading axis."""
    strides = region.buffer.effective_strides
    wide = [d for d, r in enumerate(region.ranges) if _extent(r.extent) > 1]
    if len(operand.shape) >= 2 and len(wide) >= 2:
        return strides[wide[-2]]
    if len(operand.shape) >= 2 and wide:
        # The leading axis has extent 1 in this call; any row stride serves.
        return strides[wide[-1] - 1] if wide[-1] > 0 else strides[0]
    return strides[-1]


def _extent(expr: Expr) -> int:
    return evaluate(expr, {})
