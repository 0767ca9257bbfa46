"""The NPU backend: tensorized IR -> programs for the simulated NPU, run and checked.

:func:`compile_stage` turns one NPU stage (a root statement calling ``npu`` intrinsics) into
a program: buffers placed on chip and in DRAM (:mod:`.memory`), one instruction per intrinsic
call in program order with double-buffered on-chip buffers (:mod:`.emit`), continuing
instructions merged (:mod:`.coalesce`), dependency tokens between the queues
(:mod:`.tokens`), and tile loops folded into loop instructions (:mod:`.reroll`), so that
compiling takes time in proportion to the loop nest, not the calls.

:func:`run` runs a whole tensorized function: NPU stages on the simulator, the rest on the
host backend (:mod:`.stages`), and returns the outputs with each stage's cycles and
utilisation, and the whole run's unit time, DRAM traffic and roofline. Its two halves,
:func:`plan` (split and compile once) and :func:`execute` (run on inputs), serve callers that
run one function on many inputs. Both take the machine the caller was given (a
:class:`MachineConfig`, made at the edge); nothing here loads a default one.
:func:`load_machine` and :func:`machine_registry` (:mod:`.machine`) read an NPU a user
describes in YAML.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np

from intrinsics.model import Intrinsic
from ir.buffer import Buffer
from ir.errors import ExecutionError
from ir.function import PrimFunc
from simulator import MachineConfig, Roofline, SimResult, UnitStats, simulate
from simulator.assembler import disassemble
from simulator.isa import Instruction, QAdd, Requant, Vec, VecOp
from simulator.isa import Operand as VecOperand
from targets import host
from targets.npu.emit import (UnsoundSwitch, dram_accesses, emit_stage, scratch_bytes,
                              written_dram)
from targets.npu.machine import load_machine, machine_registry
from targets.npu.memory import (SCOPE_MEMORY, InDram, OnChip, element_bytes, plan_dram,
                                plan_on_chip)
from targets.npu.remap import Remap, RemapRefused, foldable
from targets.npu.stages import Stage, host_function, host_twin, split_stages

__all__ = ["CompiledStage", "NpuPlan", "NpuRun", "PlannedStage", "Stage", "StageRun",
           "compile_stage", "execute", "load_machine", "machine_registry", "plan", "retarget",
           "run", "split_stages"]

Lookup = Callable[[str], Intrinsic]


@dataclass(frozen=True, slots=True)
class CompiledStage:
    """An NPU stage's program and where its buffers live."""

    stage: Stage
    program: tuple[Instruction, ...]
    calls: Mapping[str, int]
    on_chip: Mapping[Buffer, OnChip]
    dram: Mapping[Buffer, InDram]
    dram_bytes: int
    single_copy: tuple[str, ...]
    min_dram_bytes: int = 0
    folded: tuple[str, ...] = ()  # host copies folded into the transfers (.remap)

    @property
    def assembly(self) -> str:
        """The program as assembly text."""
        return disassemble(self.program)


@dataclass(frozen=True, slots=True)
class StageRun:
    """What one stage did: where it ran, and for NPU stages the program and its simulation."""

    label: str
    on_npu: bool
    compiled: CompiledStage | None = None
    sim: SimResult | None = None
    seconds: float = 0.0  # wall time of the stage here (simulation or host run)


@dataclass(frozen=True, slots=True)
class NpuRun:
    """The outputs of a run (written parameters, by name) and every stage's record."""

    outputs: dict[str, np.ndarray]
    stages: tuple[StageRun, ...] = field(default_factory=tuple)

    @property
    def cycles(self) -> int:
        """Simulated cycles of all NPU stages, one after another."""
        return sum(s.sim.cycles for s in self.stages if s.sim is not None)

    @property
    def calls(self) -> dict[str, int]:
        """How many times each intrinsic ran, over all NPU stages."""
        total: dict[str, int] = {}
        for stage in self.stages:
            if stage.compiled is not None:
                for name, count in stage.compiled.calls.items():
                    total[name] = total.get(name, 0) + count
        return total

    @property
    def sims(self) -> tuple[SimResult, ...]:
        """The simulations of the NPU stages, in order."""
        return tuple(s.sim for s in self.stages if s.sim is not None)

    @property
    def units(self) -> dict[str, UnitStats]:
        """Per unit (load, gemm, vector, store, dram), busy, stall and idle cycles and
        instructions, summed over the NPU stages (which run one after another)."""
        total: dict[str, UnitStats] = {}
        for sim in self.sims:
            for name, u in sim.units.items():
                t = total.get(name, UnitStats(name, 0, 0, 0, 0))
                total[name] = UnitStats(name, t.busy + u.busy, t.stall + u.stall,
                                        t.idle + u.idle, t.instructions + u.instructions)
        return total

    @property
    def macs(self) -> int:
        """Multiply-accumulates the array executed (padded tiles included)."""
        return sum(sim.useful_macs for sim in self.sims)

    @property
    def dram_bytes(self) -> int:
        """Bytes moved across the DRAM port by all NPU stages."""
        return sum(sim.dram_bytes for sim in self.sims)

    def roofline(self, config: MachineConfig) -> Roofline:
        """The bound of the NPU stages on ``config``: their MACs on the array, and the DRAM
        tensors they read and write, each moved once (``CompiledStage.min_dram_bytes``)."""
        least = sum(s.compiled.min_dram_bytes for s in self.stages if s.compiled is not None)
        return Roofline.of(self.macs, least, config)


def compile_stage(stage: Stage, config: MachineConfig, lookup: Lookup,
                  single_copy: bool = False,
                  remaps: Mapping[Buffer, Remap] | None = None) -> CompiledStage:
    """The program of one NPU stage on the machine ``config``; ``single_copy`` turns double
    buffering off (every on-chip buffer in one copy). ``remaps`` are host copies to fold
    into its transfers (:mod:`.remap`); one whose rows are not runs is left out, and the
    result's ``folded`` names those folded."""
    remaps = dict(remaps or {})
    while True:
        try:
            return _compile(stage, config, lookup, single_copy, remaps)
        except RemapRefused as refused:
            del remaps[refused.buffer]


def _compile(stage: Stage, config: MachineConfig, lookup: Lookup, single_copy: bool,
             remaps: Mapping[Buffer, Remap]) -> CompiledStage:
    on_chip_buffers = [b for b in stage.buffers if b.scope in SCOPE_MEMORY]
    dram_buffers = [b for b in stage.buffers if b.scope not in SCOPE_MEMORY and b not in remaps]
    dram_buffers += list(dict.fromkeys(r.to for r in remaps.values()))
    dram, dram_bytes = plan_dram(dram_buffers)
    scratch = dram_bytes
    if remaps:
        dram_bytes += scratch_bytes(config, remaps)
    single: set[Buffer] = set(on_chip_buffers) if single_copy else set()
    while True:
        on_chip = plan_on_chip(on_chip_buffers, config, single=single)
        try:
            emitted = emit_stage(stage.stmt, lookup, on_chip, dram, config, remaps=remaps,
                                 scratch=scratch)
            break
        except UnsoundSwitch as unsound:
            # Alternating copies would read stale rows: keep this buffer in one copy.
            single.add(unsound.buffer)
    return CompiledStage(stage, emitted.instructions, emitted.calls, on_chip, dram, dram_bytes,
                         tuple(sorted(b.name for b in single)),
                         _tensor_bytes(stage, dram, lookup, remaps),
                         tuple(r.label for r in remaps.values()))


def _tensor_bytes(stage: Stage, dram: Mapping[Buffer, InDram], lookup: Lookup,
                  remaps: Mapping[Buffer, Remap]) -> int:
    """Bytes of the DRAM tensors the stage's intrinsics read, plus those they write: the
    least traffic of any schedule of it. A folded copy's intermediate counts as itself:
    its transfers move its rows (an im2col's windows, overlapping in the image, each
    come in on its own, as the array reads them)."""
    places = {**dram, **{b: InDram(b, 0, b.size * element_bytes(b)) for b in remaps}}
    read, written = dram_accesses(stage.stmt, lookup, places)
    return sum(places[b].nbytes for b in read) + sum(places[b].nbytes for b in written)


@dataclass(frozen=True, slots=True)
class PlannedStage:
    """One stage of a plan: an NPU stage with its program (``compiled``), or a host stage
    with the function that runs it (``host``, whose parameters are the plan's buffers) and
    the equal function the host backend compiles for it (``twin``, :func:`.host_twin`)."""

    stage: Stage
    compiled: CompiledStage | None = None
    host: PrimFunc | None = None
    twin: PrimFunc | None = None


@dataclass(frozen=True, slots=True)
class NpuPlan:
    """A tensorized function split into stages, each compiled once for ``config``: run it
    on any number of inputs with :func:`execute`."""

    func: PrimFunc
    config: MachineConfig
    stages: tuple[PlannedStage, ...]


def plan(func: PrimFunc, config: MachineConfig, *, lookup: Lookup) -> NpuPlan:
    """Split a tensorized function into stages and compile each: NPU stages into programs
    for the machine ``config`` (required: the run context's, or :func:`load_machine` of a
    file), host stages into functions for the host backend. ``lookup`` finds an intrinsic
    by name (``registry.get`` of the registry the function was tensorized with)."""
    if not isinstance(config, MachineConfig):
        raise TypeError(f"npu.plan requires config, the machine (a MachineConfig; "
                        f"npu.load_machine(path) reads one from a file), got {config!r}")
    split = split_stages(func, lookup)
    remaps = foldable(split, func.params)
    compiled = {n: compile_stage(split[n], config, lookup, remaps=remaps.get(n))
                for n, stage in enumerate(split) if stage.on_npu}
    # The host copies the programs' transfers do instead, by label (a stage's first block,
    # whose name no other stage's has).
    folded = {label for c in compiled.values() for label in c.folded}
    stages = []
    for n, stage in enumerate(split):
        if stage.on_npu:
            stages.append(PlannedStage(stage, compiled=compiled[n]))
        elif stage.label not in folded:
            sub = host_function(func, stage)
            stages.append(PlannedStage(stage, host=sub, twin=host_twin(sub)))
    return NpuPlan(func, config, tuple(stages))


def retarget(planned: NpuPlan, func: PrimFunc, requant: tuple[tuple[int, int, int], ...],
             qadd: tuple[tuple[int, int], ...] = ()) -> NpuPlan | None:
    """``planned`` as the plan of ``func``, a kernel that is the planned one but for the
    immediates of its requantising instructions (a layer of one shape with other
    quantisation constants: :class:`ir.onnx.kernels.KernelFamily`): every vec.requant's
    ``(zp, lo, hi)`` ``requant[0]`` becomes ``requant[1]``, every vec.qadd's ``(lo, hi)``
    ``qadd[0]`` becomes ``qadd[1]``. The plan keeps the planned kernel's buffers, which
    ``func``'s parameters match by name, shape and dtype (:func:`execute` takes and gives
    arrays by name). None where that is not all that would change: other parameters, a
    host stage (its function is the planned kernel's), a vector instruction with another
    immediate, or a requant or qadd whose immediates are not the old ones."""
    if [(b.name, b.shape, b.dtype) for b in func.params] != \
            [(b.name, b.shape, b.dtype) for b in planned.func.params]:
        return None
    stages = []
    for item in planned.stages:
        if item.compiled is None:
            return None
        program = []
        for insn in item.compiled.program:
            if isinstance(insn, Requant):
                if not requant or (insn.zp, insn.lo, insn.hi) != requant[0]:
                    return None
                zp, lo, hi = requant[1]
                insn = dataclasses.replace(insn, zp=zp, lo=lo, hi=hi)
            elif isinstance(insn, QAdd):
                if not qadd or (insn.lo, insn.hi) != qadd[0]:
                    return None
                lo, hi = qadd[1]
                insn = dataclasses.replace(insn, lo=lo, hi=hi)
            elif isinstance(insn, Vec) and _immediate(insn):
                return None
            program.append(insn)
        compiled = dataclasses.replace(item.compiled, program=tuple(program))
        stages.append(dataclasses.replace(item, compiled=compiled))
    return NpuPlan(planned.func, planned.config, tuple(stages))


def _immediate(insn: Vec) -> bool:
    """Whether a vector instruction holds an immediate a kernel's constant could give (a
    fill of zeros, the accumulator's start, is not one)."""
    if insn.op is VecOp.FILL:
        return insn.imm != 0
    return insn.op in (VecOp.MULSHIFT, VecOp.CLIP) or insn.mode is VecOperand.IMM and \
        insn.op in (VecOp.ADD, VecOp.MIN, VecOp.MAX)


def execute(planned: NpuPlan, inputs: Mapping[str, np.ndarray] | Sequence[np.ndarray]
            ) -> NpuRun:
    """Run a plan: NPU stages on the simulator, the others on the host backend.

    ``inputs`` maps parameter names to arrays (or lists them in parameter order); missing
    parameters start as zeros. Returns the parameters the function writes, and the stages,
    each with the seconds it took here.
    """
    func = planned.func
    pool = _initial_pool(func, inputs)
    written: set[Buffer] = set()
    records = []
    for item in planned.stages:
        start = time.perf_counter()
        compiled = item.compiled
        if compiled is not None:
            image = np.zeros(compiled.dram_bytes, np.uint8)
            for buffer, placed in compiled.dram.items():
                raw = np.ascontiguousarray(pool.setdefault(buffer, _zeros(buffer)))
                image[placed.base:placed.base + placed.nbytes] = raw.reshape(-1).view(np.uint8)
            sim = simulate(compiled.program, planned.config, image)
            for buffer, placed in compiled.dram.items():
                raw = sim.dram[placed.base:placed.base + placed.nbytes]
                pool[buffer] = raw.view(buffer.dtype.numpy).reshape(buffer.shape).copy()
            written.update(_written_dram(compiled))
            records.append(StageRun(item.stage.label, True, compiled, sim,
                                    time.perf_counter() - start))
        else:
            sub = item.host
            arrays = [pool.setdefault(b, _zeros(b)) for b in sub.params]
            # The twin's parameters have the same names, in the same order.
            outputs = host.run(item.twin or sub, arrays)
            for buffer in sub.params:
                if buffer.name in outputs:
                    pool[buffer] = outputs[buffer.name]
                    written.add(buffer)
            records.append(StageRun(item.stage.label, False,
                                    seconds=time.perf_counter() - start))
    outputs = {p.name: pool[p] for p in func.params if p in written}
    return NpuRun(outputs, tuple(records))


def run(func: PrimFunc, inputs: Mapping[str, np.ndarray] | Sequence[np.ndarray],
        config: MachineConfig, *, lookup: Lookup) -> NpuRun:
    """Run a tensorized function: NPU stages on the simulator, the others on the host.

    ``inputs`` maps parameter names to arrays (or lists them in parameter order); missing
    parameters start as zeros. ``config`` is the machine, required (:func:`load_machine`
    reads one from a YAML file); ``lookup`` as for :func:`plan`. Returns the parameters the
    function writes, and the stages. To run one function on many inputs, :func:`plan` it
    once and :func:`execute` the plan.
    """
    return execute(plan(func, config, lookup=lookup), inputs)


def _written_dram(compiled: CompiledStage) -> set[Buffer]:
    """The DRAM buffers a program's stores reach."""
    stored = written_dram(compiled.program)
    return {b for b, placed in compiled.dram.items()
            if any(lo < placed.base + placed.nbytes and placed.base < hi for lo, hi in stored)}


def _initial_pool(func: PrimFunc, inputs) -> dict[Buffer, np.ndarray]:
    if not isinstance(inputs, Mapping):
        inputs = {p.name: a for p, a in zip(func.params, inputs)}
    pool = {}
    for param in func.params:
        if param.name in inputs:
            array = np.asarray(inputs[param.name])
            if array.shape != param.shape or array.dtype != param.dtype.numpy:
                raise ExecutionError(f"input {param.name} requires shape {param.shape} and "
                                     f"dtype {param.dtype}, got {array.shape} {array.dtype}")
            pool[param] = array.copy()
    return pool


def _zeros(buffer: Buffer) -> np.ndarray:
    return np.zeros(buffer.shape, buffer.dtype.numpy)


