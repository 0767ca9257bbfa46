"""Emitting one NPU stage: instructions for its intrinsic calls, in loops where it can.

The stage's loops run here, at compile time: each ``IntrinsicCall`` of the ``npu`` target
becomes the line of assembly its ``emit.npu`` template gives, with operands replaced by
on-chip row addresses or DRAM byte addresses. Anything else (a plain store, a call of another
target's intrinsic) is refused with the block that holds it: the NPU runs only its own
instructions.

Walking every iteration would cost time in proportion to intrinsic calls (millions for a
large GEMM), so loops are handled whole where the IR proves that safe
(:func:`ir.arith.simplify` under the loops' ranges), and walked otherwise:

- **Collapse.** A loop whose iterations each run one call, whose instructions continue each
  other (the next rows of the same memories and DRAM, within one bank), becomes one taller
  instruction, as the merging pass (:mod:`.coalesce`) would make of them.
- **Fold.** A loop whose control decisions do not depend on its variable (past its first and
  last few iterations), whose on-chip operands do not move with it and whose DRAM operands
  move affinely, is run on a prefix of iterations; once the emitter's state repeats (double
  buffering gives a period of two), whole periods are skipped and a suffix is run. Marks
  (:mod:`.reroll`) record where; after merging and tokens, the sampled iterations are folded
  back into loop instructions whose address fields step per iteration.

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
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np

from intrinsics.model import Intrinsic, Operand
from intrinsics.templates import placeholders
from ir.arith import Interval, linearize, simplify
from ir.buffer import Buffer
from ir.errors import ExecutionError, SimulatorFault
from ir.evaluate import compile_index, evaluate
from ir.expr import Expr, FloatImm, IntImm, Var, and_, eq
from ir.stmt import (Block, BlockRealize, BufferRegion, BufferStore, For, IfThenElse, IntrinsicCall,
                     IterKind, SeqStmt, Stmt)
from ir.visitor import post_order_visit, substitute, vars_of
from simulator.assembler import assemble
from simulator.config import MachineConfig
from simulator.datapath import float_bits
from simulator.isa import STEP_FIELDS, Instruction, Queue, Store
from simulator.loops import placed, span, structure
from targets.npu.coalesce import bank_rows, coalesce, merged
from targets.npu.memory import DRAM_ALIGN, InDram, OnChip, element_bytes
from targets.npu.remap import Remap, RemapRefused, discarded_bytes, expand, region_rows
from targets.npu.reroll import Fold, Mark, RerollFailed, reroll
from targets.npu.tokens import Merge, balance, insert_tokens, stuck

_QUEUE_OF_KIND = {"load": Queue.LOAD, "store": Queue.STORE, "compute": Queue.COMPUTE,
                  "fill": Queue.COMPUTE}
PREFIX = 6  # iterations of a folded loop run before its gap
SUFFIX = 6  # iterations (at least) run after it
PERIODS = (1, 2)  # the periods in which the emitter's state may repeat


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
    """A stage's program (loop words, tokens and FINISH included) and how often each
    intrinsic runs."""

    instructions: tuple[Instruction, ...]
    calls: Mapping[str, int]


def emit_stage(stmt: Stmt, lookup, on_chip: Mapping[Buffer, OnChip],
               dram: Mapping[Buffer, InDram], config: MachineConfig,
               loops: bool = True, remaps: Mapping[Buffer, Remap] | None = None,
               scratch: int = 0) -> Emitted:
    """The program of one NPU stage (a statement of the tensorized function's root): emitted,
    merged (:mod:`.coalesce`), with dependency tokens (:mod:`.tokens`), folded into loops.

    ``lookup(name)`` gives an Intrinsic. Buffers must all be placed in ``on_chip`` or
    ``dram``. With ``loops=False`` every loop is walked: the straight-line program the folded
    one stands for (its expansion, :func:`simulator.loops.expanded`, is the same). Raises
    UnsoundSwitch for a double-buffered buffer that cannot alternate, and ExecutionError for
    anything the NPU cannot run.

    ``remaps`` are host copies folded into the transfers (:mod:`.remap`): a call naming one
    of their intermediates is emitted (and merged) as if it lay in DRAM past everything
    else, then moves the other tensor's rows, placed in ``dram`` (:func:`.remap.expand`);
    rows the copy does not cover are loaded as zeros from a zeroed row at ``scratch`` and
    stored past it (:func:`scratch_bytes` in all). RemapRefused names one whose rows are not
    runs.
    """
    remaps = remaps or {}
    ends = [p.base + p.nbytes for p in dram.values()]
    if remaps:
        ends.append(scratch + scratch_bytes(config, remaps))
    sizes = {"inp": config.inp.rows, "wgt": config.wgt.rows, "acc": config.acc.rows,
             "dram": max(ends, default=0)}
    places = {**dram, **_virtual(remaps, sizes["dram"])}
    walked: set[int] = set()  # loops to walk, not fold: their samples did not reroll
    while True:
        emitter = _Emitter(lookup, on_chip, places, stmt, walked, bank_rows(config), loops,
                           remaps)
        emitter.stmt(stmt, {}, None)
        merged_items = coalesce(emitter.items, config)
        if remaps:
            merged_items = expand(merged_items, places, remaps, scratch,
                                  scratch + _zero_row_bytes(config))
        items = _tokens(merged_items, sizes, config)
        try:
            program = reroll(items)
        except RerollFailed as failed:
            walked.add(id(failed.loop))
            continue
        _check_tokens_balance(program)
        return Emitted(tuple(program), dict(emitter.calls))


def _virtual(remaps: Mapping[Buffer, Remap], start: int) -> dict[Buffer, InDram]:
    """An address range of its own for each folded copy's intermediate, from ``start``:
    its transfers are emitted and merged there, then expanded."""
    places = {}
    cursor = start
    for buffer in remaps:
        nbytes = buffer.size * element_bytes(buffer)
        places[buffer] = InDram(buffer, cursor, nbytes)
        cursor += nbytes
    if cursor >= 1 << 32:
        raise RemapRefused(next(iter(remaps)), "the folded copies' intermediates pass 4 GiB "
                                               "of addresses")
    return places


def scratch_bytes(config: MachineConfig, remaps: Mapping[Buffer, Remap]) -> int:
    """DRAM bytes the transfers of folded copies need past the buffers
    (:func:`.remap.expand`): a zeroed row for the rows a gather does not cover, then room
    for those a scatter's stores do not keep."""
    return _zero_row_bytes(config) + discarded_bytes(remaps)


def _zero_row_bytes(config: MachineConfig) -> int:
    """The widest row any memory holds, at four bytes an element, in whole DRAM lines."""
    return -(-4 * max(config.array.rows, config.array.cols) // DRAM_ALIGN) * DRAM_ALIGN


def _tokens(items: list, sizes: dict[str, int], config: MachineConfig) -> list:
    """``items`` with dependency tokens (:func:`.tokens.insert_tokens`) that cannot deadlock
    on the machine's token and instruction queues (:func:`.tokens.stuck`): each dependency
    its own token where that runs, else as few merged into one per run as make it run."""
    depths = (config.queues.token_depth, config.queues.instruction_depth)
    for merge in Merge:
        program = insert_tokens(items, sizes, merge, config.datapath)
        why = stuck(program, *depths)
        if why is None:
            return program
    raise ExecutionError(f"NPU program deadlocks on its dependency tokens (token_depth "
                         f"{depths[0]}, instruction_depth {depths[1]}): {why}")


def _check_tokens_balance(program: list[Instruction]) -> None:
    """Every token pushed is popped, counting each loop's iterations: folding kept the
    pairing of the straight-line tokens (a safety net; the simulator checks every access)."""
    counted = balance(placed(structure(program)))
    if any(counted.values()):
        raise ExecutionError(f"internal error: folded NPU program pairs tokens unevenly "
                             f"({dict(counted)})")


@dataclass
class _Facts:
    """What a loop body does, as expressions over loop variables: the conditions deciding
    what runs, the flat offsets of its on-chip and DRAM operands, and the variables and
    ranges of the loops inside it."""

    controls: list[Expr] = field(default_factory=list)
    chip: list[Expr] = field(default_factory=list)
    dram: list[tuple[Buffer, Expr]] = field(default_factory=list)
    inner: dict[Var, Interval] = field(default_factory=dict)
    local: dict[Var, Interval] = field(default_factory=dict)  # a folded copy's rows, columns
    gathered: list[Expr] = field(default_factory=list)  # its offsets, and where it has them
    supported: bool = True


@dataclass(frozen=True, slots=True)
class _Plan:
    """How to emit a loop: ``collapse`` into one instruction, ``fold`` on samples, or walk."""

    collapse: bool
    fold: bool


class _Emitter:
    def __init__(self, lookup, on_chip: Mapping[Buffer, OnChip],
                 dram: Mapping[Buffer, InDram], stage: Stmt, walked: set[int],
                 banks: dict[str, int], loops: bool, remaps: Mapping[Buffer, Remap]) -> None:
        self.lookup = lookup
        self.remaps = remaps
        self.banks = banks
        self.loops = loops
        self.on_chip = on_chip
        self.dram = dram
        self.walked = walked
        self.items: list[Instruction | Mark] = []
        self.calls: Counter[str] = Counter()
        self.sites: dict[int, _Site] = {}
        self.bindings: dict[int, tuple] = {}  # per realize: compiled bindings and predicate
        self.conditions: dict[int, Callable[[Mapping[Var, int]], int]] = {}
        self.states = {b: _CopyState(rows_gen=[np.full(p.rows, -1, np.int64)
                                                for _ in p.bases])
                       for b, p in on_chip.items()}
        self.plans: dict[int, _Plan] = {}
        self.ranges: dict[Var, Interval] = {}  # the loops around the current statement
        self.subst: dict[Var, Expr] = {}  # block iterators -> loop variables, here
        self.substs: dict[int, dict[Var, Expr]] = {}  # per realize: the subst inside it
        self.hazards = _hazard_buffers(stage, self)
        self.dry: list[_Call] | None = None  # calls evaluated without effect, when a list
        self.last: _Call | None = None  # the last call emitted

    # -- statements ------------------------------------------------------------------------

    def stmt(self, stmt: Stmt, env: dict[Var, int], block: Block | None) -> None:
        if isinstance(stmt, For):
            self.loop(stmt, env, block)
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
        saved = self.subst
        inside = self.substs.get(id(realize))
        if inside is None:
            inside = self.substs[id(realize)] = _inside(realize, saved)
        self.subst = inside
        if block.init is not None and all(
                v == 0 for iv, v in zip(block.iter_vars, values) if iv.kind is IterKind.REDUCE):
            self.stmt(block.init, inner, block)
        self.stmt(block.body, inner, block)
        self.subst = saved

    # -- loops -------------------------------------------------------------------------------

    def loop(self, loop: For, env: dict[Var, int], block: Block | None) -> None:
        plan = self.plan(loop)
        self.ranges[loop.var] = Interval(0, loop.extent - 1)
        first = 0
        if plan.collapse and self.dry is None:
            first = self.collapse(loop, env, block)
        if first < loop.extent:
            if plan.fold and self.dry is None:
                self.fold(loop, env, block, first)
            else:
                for value in range(first, loop.extent):
                    env[loop.var] = value
                    self.stmt(loop.body, env, block)
        env.pop(loop.var, None)
        del self.ranges[loop.var]

    def plan(self, loop: For) -> _Plan:
        """Whether ``loop`` may collapse or fold (see the module docs), from its body alone."""
        plan = self.plans.get(id(loop))
        if plan is not None:
            return plan
        if not self.loops:
            plan = self.plans[id(loop)] = _Plan(collapse=False, fold=False)
            return plan
        facts = _Facts()
        _collect(loop.body, self.subst, facts, self)
        n, v = loop.extent, loop.var
        whole = {**self.ranges, **facts.inner, **facts.local, v: Interval(0, n - 1)}
        collapse = (facts.supported and not facts.inner and n > 1
                    and all(_decided(c, whole, v) for c in facts.controls)
                    and all(_affine(e, whole, v) for e in facts.chip)
                    and all(_affine(e, whole, v) for _, e in facts.dram))
        # The gap repeats the prefix's last period: from there to the suffix, nothing may
        # depend on the loop's variable.
        middle = {**whole, v: Interval(PREFIX - max(PERIODS), n - 1 - SUFFIX)}
        fold = (facts.supported and n >= PREFIX + SUFFIX + 1 + max(PERIODS)
                and id(loop) not in self.walked
                and all(_decided(c, middle, v) for c in facts.controls)
                and all(_decided(e, middle, v) for e in facts.chip)
                and all(_affine(e, middle, v) and (b not in self.hazards
                                                   or _decided(e, middle, v))
                        for b, e in facts.dram)
                and all(_decided(e, middle, v) if e.dtype.is_bool else _affine(e, middle, v)
                        for e in facts.gathered))
        plan = self.plans[id(loop)] = _Plan(collapse, fold)
        return plan

    def collapse(self, loop: For, env: dict[Var, int], block: Block | None) -> int:
        """Emit ``loop`` as one instruction if its iterations continue each other; returns
        the first iteration still to emit (the extent when collapsed, else 1: iteration 0
        has been emitted as it is)."""
        v, n = loop.var, loop.extent
        mark = len(self.items)
        env[v] = 0
        self.stmt(loop.body, env, block)
        first = self.last
        if len(self.items) != mark + 1 or first is None or \
                self.items[-1] is not first.insn:
            return 1
        env[v] = 1
        self.dry = []
        try:
            self.stmt(loop.body, env, block)
        finally:
            second, self.dry = self.dry, None
        if len(second) != 1 or second[0].site is not first.site:
            return 1
        whole = merged(first.insn, second[0].insn, n, self.banks)
        if whole is None or not self.collapse_effects(first, second[0], n):
            return 1
        self.items[-1] = whole
        self.calls[first.site.intrinsic.name] += n - 1
        return n

    def collapse_effects(self, first: _Call, second: _Call, n: int) -> bool:
        """The copy bookkeeping of iterations 1..n-1 of a collapsing call, done for their
        rows at once; False (and nothing done) where one operand's rows could meet another's
        within the loop, so that row-by-row order would matter."""
        spans = []
        for a, b in zip(first.accesses, second.accesses):
            step = b.rows.start - a.rows.start
            lo = b.rows.start + min(0, step * (n - 2))
            hi = b.rows.stop + max(0, step * (n - 2))
            spans.append((a, slice(lo, hi)))
        for x, (a, ra) in enumerate(spans):
            for y, (b, rb) in enumerate(spans):
                if x != y and a.buffer is b.buffer and (a.writes or b.writes) \
                        and ra.start < rb.stop and rb.start < ra.stop:
                    return False
        for access, rows in spans:
            if access.reads:
                self.check_read(access.buffer, rows, first.site.queue)
            if access.writes:
                state = self.states[access.buffer]
                state.rows_gen[state.copy][rows] = state.generation
        return True

    def fold(self, loop: For, env: dict[Var, int], block: Block | None, start: int) -> None:
        """Emit iterations ``start``.. of ``loop`` on samples: PREFIX iterations, then (once
        the state repeats with a period) a gap of whole periods, then the rest; marked for
        :func:`reroll`, which numbers them from 0."""
        n = loop.extent - start
        record = Fold(loop, n)
        self.items.append(Mark("open", record))
        snapshots = []
        for i in range(PREFIX):
            self.iteration(record, loop, env, block, start, i)
            snapshots.append((self.snapshot(), Counter(self.calls)))
        period = next((p for p in PERIODS if snapshots[-1][0][0] == snapshots[-1 - p][0][0]),
                      None)
        gap = (n - PREFIX - SUFFIX) // period * period if period is not None else 0
        if gap > 0:
            self.skip(gap // period, snapshots[-1], snapshots[-1 - period])  # type: ignore
            self.items.append(Mark("gap", record))
        for i in range(PREFIX + gap, n):
            self.iteration(record, loop, env, block, start, i)
        self.items.append(Mark("close", record))

    def iteration(self, record: Fold, loop: For, env: dict[Var, int], block: Block | None,
                  start: int, i: int) -> None:
        """Emit iteration ``start + i`` of ``loop``, marked as iteration i of ``record``."""
        self.items.append(Mark("iter", record, i))
        env[loop.var] = start + i
        self.stmt(loop.body, env, block)

    def snapshot(self) -> tuple[tuple, dict[Buffer, int]]:
        """(The copy state relative to each buffer's generation, the generations): equal
        relative states emit the same code for the same calls."""
        relative = []
        generations = {}
        for buffer, state in self.states.items():
            rows = [np.where(g < 0, np.iinfo(np.int64).min, g - state.generation).tobytes()
                    for g in state.rows_gen]
            relative.append((state.copy, frozenset(state.readers), tuple(rows)))
            generations[buffer] = state.generation
        return tuple(relative), generations

    def skip(self, periods: int, last: tuple, before: tuple) -> None:
        """Advance the state and call counts over ``periods`` periods, each repeating the one
        between snapshots ``before`` and ``last``."""
        (_, gens), calls = last
        (_, gens_before), calls_before = before
        for buffer, state in self.states.items():
            shift = (gens[buffer] - gens_before[buffer]) * periods
            state.generation += shift
            for g in state.rows_gen:
                g[g >= 0] += shift
        for name, count in calls.items():
            self.calls[name] += (count - calls_before.get(name, 0)) * periods

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
                args.append(_Arg.make(operand, arg, "chip"))
            elif buffer in self.dram:
                args.append(_Arg.make(operand, arg, "dram", _leading_stride(arg, operand)))
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
        dry = self.dry is not None
        # Writes first pick their copy, then every on-chip operand gets its row address.
        if not dry:
            for operand, buffer, flat in accesses:
                if _writes(operand, intrinsic):
                    self.begin_write(buffer, queue)
        rows_of = []
        for operand, buffer, flat in accesses:
            placed = self.on_chip[buffer]
            state = self.states[buffer]
            if flat % placed.row_elems:
                raise ExecutionError(f"{site.where}: operand {operand.name} of "
                                     f"{intrinsic.name} starts inside a row of {buffer.name}")
            values[operand.name] = placed.row_of(flat, state.copy)
            first = flat // placed.row_elems
            rows = slice(first, first + max(operand.buffer.size // placed.row_elems, 1))
            access = _Access(buffer, rows, _reads(operand, intrinsic),
                             _writes(operand, intrinsic))
            rows_of.append(access)
            if dry:
                continue
            if access.reads:
                self.check_read(buffer, rows, queue)
            if access.writes:
                state.rows_gen[state.copy][rows] = state.generation
        if site.template is not None:
            insn = site.template.make(values)
        else:
            line = intrinsic.render("npu", {k: str(v) for k, v in values.items()})
            (insn,) = assemble(line, f"<{intrinsic.name}>")
        done = _Call(site, insn, tuple(rows_of))
        if dry:
            self.dry.append(done)  # type: ignore[union-attr]
            return
        self.items.append(insn)
        self.last = done
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
class _Access:
    """The rows of a buffer (in its own row numbering) one operand of a call touches."""

    buffer: Buffer
    rows: slice
    reads: bool
    writes: bool


@dataclass(frozen=True, slots=True)
class _Call:
    """One call as emitted: its site, its instruction, and the rows each on-chip operand
    touches."""

    site: _Site
    insn: Instruction
    accesses: tuple[_Access, ...]


def _collect(stmt: Stmt, subst: dict[Var, Expr], facts: _Facts, emitter: _Emitter) -> None:
    """Fill ``facts`` from ``stmt``, block iterators replaced by their bindings."""
    if isinstance(stmt, For):
        facts.inner[stmt.var] = Interval(0, stmt.extent - 1)
        _collect(stmt.body, subst, facts, emitter)
    elif isinstance(stmt, SeqStmt):
        for child in stmt.stmts:
            _collect(child, subst, facts, emitter)
    elif isinstance(stmt, IfThenElse):
        facts.controls.append(substitute(stmt.cond, subst))
        _collect(stmt.then_case, subst, facts, emitter)
        if stmt.else_case is not None:
            _collect(stmt.else_case, subst, facts, emitter)
    elif isinstance(stmt, BlockRealize):
        block = stmt.block
        inner = _inside(stmt, subst)
        facts.controls.append(substitute(stmt.predicate, subst))
        if block.init is not None:
            firsts = [eq(inner[iv.var], IntImm(0, inner[iv.var].dtype))
                      for iv in block.iter_vars if iv.kind is IterKind.REDUCE]
            cond = firsts[0]
            for other in firsts[1:]:
                cond = and_(cond, other)
            facts.controls.append(cond)
            _collect(block.init, inner, facts, emitter)
        _collect(block.body, inner, facts, emitter)
    elif isinstance(stmt, IntrinsicCall):
        for arg in stmt.args:
            if not isinstance(arg, BufferRegion):
                continue
            remap = emitter.remaps.get(arg.buffer)
            if remap is not None:
                _remap_facts(arg, remap, subst, facts)
            offset = substitute(_flat_offset(arg), subst)
            if arg.buffer in emitter.on_chip:
                facts.chip.append(offset)
            else:
                facts.dram.append((arg.buffer, offset))
    else:
        facts.supported = False


def _remap_facts(region: BufferRegion, remap: Remap, subst: dict[Var, Expr],
                 facts: _Facts) -> None:
    """A folded copy's transfer as facts for folding: the offset in the other tensor of
    each of its elements (a row and a column variable over the region's extents), and
    whether each has one. Its runs repeat with a loop only where both are affine in, or
    free of, its variable; merging needs neither (it happens before the runs are
    found)."""
    rows, cols = region_rows([_extent(r.extent) for r in region.ranges])
    row, col = Var("_row"), Var("_col")
    facts.local[row] = Interval(0, rows - 1)
    facts.local[col] = Interval(0, cols - 1)
    starts = [substitute(r.start, subst) for r in region.ranges]
    starts[-1] = starts[-1] + col
    if len(starts) > 1:
        starts[-2] = starts[-2] + row
    facts.gathered.append(remap.offset_expr(starts))
    facts.gathered.extend(start < limit for start, limit in zip(starts, remap.covered))


def _inside(realize: BlockRealize, subst: dict[Var, Expr]) -> dict[Var, Expr]:
    """``subst`` inside ``realize``: its block's iterators replaced by their bindings."""
    return {**subst, **{iv.var: substitute(b, subst)
                        for iv, b in zip(realize.block.iter_vars, realize.bindings)}}


def _hazard_buffers(stage: Stmt, emitter: _Emitter) -> set[Buffer]:
    """The DRAM buffers the stage both reads and writes: a loop moving through one of them
    may order its loads after earlier stores, so it is never folded."""
    read, written = dram_accesses(stage, emitter.lookup, emitter.dram, emitter.remaps)
    return read & written


def dram_accesses(stage: Stmt, lookup: Callable[[str], Intrinsic],
                  dram: Mapping[Buffer, object], remaps: Mapping[Buffer, Remap] | None = None
                  ) -> tuple[set[Buffer], set[Buffer]]:
    """The DRAM buffers (keys of ``dram``) that the stage's intrinsic calls read, and those
    they write (a folded copy's intermediate counting as its other tensor, ``remaps``). An
    accumulator operand is both, unless its intrinsic resets it first."""
    read: set[Buffer] = set()
    written: set[Buffer] = set()
    remaps = remaps or {}

    def visit(node) -> None:
        if not isinstance(node, IntrinsicCall):
            return
        intrinsic = lookup(node.intrinsic)
        for operand, arg in zip(intrinsic.operands, node.args):
            if not isinstance(arg, BufferRegion):
                continue
            buffer = remaps[arg.buffer].to if arg.buffer in remaps else arg.buffer
            if buffer in dram:
                if _reads(operand, intrinsic):
                    read.add(buffer)
                if _writes(operand, intrinsic):
                    written.add(buffer)

    post_order_visit(stage, visit)
    return read, written


def _flat_offset(region: BufferRegion) -> Expr:
    """The region's first element as a flat offset into its buffer."""
    flat: Expr = IntImm(0)
    for r, stride in zip(region.ranges, region.buffer.effective_strides):
        flat = flat + r.start * stride
    return flat


def _decided(expr: Expr, ranges: dict[Var, Interval], var: Var) -> bool:
    """True when ``expr`` takes no value from ``var`` over ``ranges``."""
    return not any(v is var for v in vars_of(simplify(expr, ranges)))


def _affine(expr: Expr, ranges: dict[Var, Interval], var: Var) -> bool:
    """True when ``expr`` is affine in ``var`` over ``ranges``: ``var`` appears only as a
    term of its linear form, not inside a floordiv, a floormod or a select."""
    if expr.dtype.is_bool or not expr.dtype.is_int:
        return False
    form = linearize(simplify(expr, ranges))
    return not any(atom is not var and any(v is var for v in vars_of(atom))
                   for atom, _ in form.terms)


@dataclass(frozen=True, slots=True)
class _Arg:
    """One argument of a call site: a scalar expression, or a region on chip or in DRAM
    (and, in DRAM, the leading stride of the operand's rows). ``offset`` computes the
    region's first element (or the scalar) from the loop values."""

    operand: Operand
    node: BufferRegion | Expr
    kind: str
    ld: int = 0
    offset: Callable[[Mapping[Var, int]], int] | None = None

    @staticmethod
    def make(operand: Operand, node: BufferRegion | Expr, kind: str, ld: int = 0) -> _Arg:
        if isinstance(node, BufferRegion):
            return _Arg(operand, node, kind, ld, compile_index(_flat_offset(node)))
        if operand.dtype.is_float:
            bits = _float_bits(operand, node)
            return _Arg(operand, node, kind, ld, lambda env: bits)
        return _Arg(operand, node, kind, ld, compile_index(node))


def _float_bits(operand: Operand, node: Expr) -> int:
    """A float32 scalar operand's IEEE-754 bits, the form an NPU immediate holds it in (the
    machine's float fields, such as vec.requant's scale, read them so)."""
    if operand.dtype.bits != 32 or not isinstance(node, FloatImm):
        raise ExecutionError(f"scalar operand {operand.name} of {operand.dtype} requires a "
                             f"float32 constant (an NPU immediate holds its bits), got {node}")
    return float_bits(node.value)


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


def written_dram(program: Sequence[Instruction]) -> list[tuple[int, int]]:
    """The DRAM byte ranges [lo, hi) a program's stores may write, over all iterations."""
    spans = []
    for node in placed(structure(program)):
        if isinstance(node.insn, Store):
            (lo, _), (hi, _) = span(node, STEP_FIELDS[Store].index("dram"))
            spans.append((lo, hi + (node.insn.rows - 1) * node.insn.stride + 1))
    return spans
