"""Running one layer on a target: tensorize its PrimFunc with the engine, run it where the
target's code runs, and measure it.

- ``host``: the PrimFunc on the host backend (the reference executor, LLVM JIT); nothing is
  tensorized (the host has no intrinsics).
- ``npu``: the engine's NPU schedule, then the NPU backend: NPU stages simulated (cycles,
  DRAM bytes, roofline), its host stages (packing) on the host.
- a CPU target (``arm``, ``x86``, any family with a ``cpu:`` section): the engine's CPU
  schedule, LLVM for the target's triple and features, run by the first engine of the
  target's ``run`` list that can here (unicorn counts instructions; native is timed). A
  float layer's kernel on an intrinsic that states its accumulation (FMLAL for float16) is
  checked bit for bit against the hardware-order reference of its block
  (:func:`tensorize.model.check.hardware_check`).

A PrimFunc the target cannot tensorize runs on the host, placed ``fallback`` with the
engine's reason; host layers run their numpy function (or onnxruntime, for a node of an
operator the importer has no function for).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

import numpy as np

from ir import BlockRealize, ExecutionError, IterKind
from intrinsics import runnable
from ir.onnx import Graph, Layer
from ir.onnx.depthwise import DepthwiseGemm
from ir.onnx.fused import FusedGemm
from ir.onnx.residual import residual_joins
from tensorize.model.check import hardware_check
from tensorize.model.timeline import LayerTimeline, layer_timeline
from tensorize.schedule import tree

if TYPE_CHECKING:
    from tensorize.runners.context import RunContext

# Native runs timed per layer on a CPU target (the fastest is reported).
NATIVE_RUNS = 3


@dataclass
class LayerRun:
    """What running one layer gave: the output and the record's measured fields."""

    output: np.ndarray
    placement: str
    intrinsic: str | None = None
    why_not: str | None = None
    calls: int | None = None
    cycles: int | None = None
    instructions: int | None = None
    seconds: float | None = None
    utilisation: float | None = None
    dram_bytes: int | None = None
    bound: str | None = None
    notes: list[str] = field(default_factory=list)
    # The form of the layer that ran, when not the layer itself (its fused form, whose
    # epilogue ran on the device): the report names that form's host work.
    ran: Layer | None = None
    # Where the layer's NPU cycles went, unit by unit (simulated layers only).
    timeline: LayerTimeline | None = None
    # A float layer's kernel output against the hardware-order reference of its tensorized
    # block (:func:`tensorize.model.check.hardware_check`): (ok, words); None where its
    # intrinsic states no accumulation.
    kernel_check: tuple[bool, str] | None = None


@dataclass(frozen=True)
class DeviceForm:
    """A layer's form that runs on the NPU as one plan: the form, the engine's outcome, the
    plan (:class:`targets.npu.NpuPlan`), the compute intrinsic's calls, and the note the
    report gives it."""

    form: Layer
    outcome: Any
    planned: Any
    calls: int
    note: str | None


@dataclass(frozen=True)
class Refused:
    """A layer the NPU runs no form of: the form to run on the host, and why."""

    form: Layer
    reason: str


class Timings(dict):
    """Seconds spent per kind of work (tensorize, compile, simulate, host ...), summed over
    the layers."""

    @contextmanager
    def measure(self, kind: str) -> Iterator[None]:
        """Add the time the ``with`` body takes to ``kind``."""
        start = time.perf_counter()
        try:
            yield
        finally:
            self.add(kind, time.perf_counter() - start)

    def add(self, kind: str, seconds: float) -> None:
        """Add ``seconds`` to ``kind``."""
        self[kind] = self.get(kind, 0.0) + seconds


def run_on_host(layer: Layer, arrays: list[np.ndarray]) -> np.ndarray:
    """``layer`` computed entirely on the host: its host function, or its PrimFunc on the
    host backend (the reference executor, LLVM JIT)."""
    if layer.host is not None:
        return layer.host(arrays)
    from targets import host

    func, pack, unpack = layer.func, layer.pack, layer.unpack
    if func is None or pack is None or unpack is None:
        raise ValueError(f"layer {layer.name} has neither a host function nor a PrimFunc")
    out = host.run(func, pack(arrays))
    return unpack(out[func.params[-1].name], arrays)


def host_reason(layer: Layer) -> str:
    """Why a layer without a kernel runs on the host."""
    return layer.epilogue or f"{layer.op} is not a GEMM: no compute intrinsic does it"


class Executor:
    """Runs layers on one target; :func:`executor_for` picks the class. ``timings`` says
    where the time went."""

    target = "host"

    def __init__(self) -> None:
        self.timings = Timings()
        # Layers that took the residual add after them (:meth:`_join_residuals`), by identity.
        self._joined: set[int] = set()

    def prepare(self, graph: Graph) -> Graph:
        """The graph this executor runs: ``graph`` as it is (an executor that computes
        several layers in one program joins them here)."""
        return graph

    def _join_residuals(self, graph: Graph, tile: tuple[int, int, int],
                        runs: Callable[[Layer], bool]) -> Graph:
        """``graph`` with each residual add joined onto the layer producing its first
        operand (:mod:`ir.onnx.residual`; the joined layer padded to ``tile``) where
        ``runs`` says this target runs the joined kernel whole."""
        layers: list[Layer | None] = list(graph.layers)
        for join in residual_joins(graph):
            base, add = graph.layers[join.layer], graph.layers[join.add]
            joined = self._joined_form(base, add, tile, runs)
            if runs(joined):
                layers[join.layer], layers[join.add] = joined, None
                self._joined.add(id(joined))
        return replace(graph, layers=tuple(layer for layer in layers if layer is not None))

    def _joined_form(self, base: Layer, add: Layer, tile: tuple[int, int, int],
                     runs: Callable[[Layer], bool]) -> Layer:
        """``base`` with ``add`` joined after it, in the form this target runs."""
        return base.fused.joined(base, add, tile)

    def run(self, layer: Layer, arrays: list[np.ndarray]) -> LayerRun:
        """Run ``layer`` on its input ``arrays``."""
        if layer.func is None:
            return self._on_host(layer, arrays, host_reason(layer), time.perf_counter())
        return self.run_func(layer, arrays)

    def _on_host(self, layer: Layer, arrays: list[np.ndarray], why: str, start: float
                 ) -> LayerRun:
        """A host layer computed on the host, placed ``host`` with ``why``; ``start`` is
        when the layer's run began."""
        with self.timings.measure("host layers"):
            output = run_on_host(layer, arrays)
        return LayerRun(output, "host", why_not=why, seconds=time.perf_counter() - start)

    def run_func(self, layer: Layer, arrays: list[np.ndarray]) -> LayerRun:
        """A PrimFunc layer on this target (here: the host backend)."""
        start = time.perf_counter()
        with self.timings.measure("host kernels"):
            output = run_on_host(layer, arrays)
        return LayerRun(output, "host", seconds=time.perf_counter() - start)

    def _fallback(self, layer: Layer, arrays: list[np.ndarray], reason: str) -> LayerRun:
        """A kernel the target did not take, on the host, placed ``fallback``."""
        start = time.perf_counter()
        with self.timings.measure("host kernels"):
            output = run_on_host(layer, arrays)
        return LayerRun(output, "fallback", why_not=reason,
                        seconds=time.perf_counter() - start)

    @staticmethod
    def _first_taken(layer: Layer, prepare):
        """The layer or its first variant whose kernel ``prepare`` (``func -> (outcome,
        prepared or None)``) takes: ``(that layer, its outcome, prepared)``; where none is
        taken, ``(layer, the first outcome, None)``."""
        first = None
        for candidate in (layer, *layer.variants):
            outcome, prepared = prepare(candidate.func)
            first = first or outcome
            if prepared is not None:
                return candidate, outcome, prepared
        return layer, first, None

    @property
    def roofline(self) -> dict[str, Any] | None:
        """The report's roofline parameters (None: no machine model)."""
        return None


def _epilogue_blocks_on_host(planned, func) -> list[str]:
    """The elementwise blocks of ``func`` (its epilogue) that ``planned`` (an NPU plan of
    ``func`` tensorized) runs in a host stage rather than on the NPU."""
    epilogue = {stmt.block.name for stmt, _ in tree.walk_stmts(func)
                if isinstance(stmt, BlockRealize) and stmt.block.name != "root"
                and not any(iv.kind is IterKind.REDUCE for iv in stmt.block.iter_vars)}
    on_host = []
    for stage in planned.stages:
        if stage.stage.on_npu:
            continue
        on_host += [stmt.block.name for stmt, _ in tree.walk_stmts(stage.stage.stmt)
                    if isinstance(stmt, BlockRealize) and stmt.block.name in epilogue]
    return on_host


def _compute_block(func) -> str | None:
    """The block whose outcome stands for the kernel's: its reduction, or the first block
    of a kernel of elementwise blocks alone."""
    names = []
    for stmt, _ in tree.walk_stmts(func):
        if isinstance(stmt, BlockRealize) and stmt.block.name != "root":
            if any(iv.kind is IterKind.REDUCE for iv in stmt.block.iter_vars):
                return stmt.block.name
            names.append(stmt.block.name)
    return names[0] if names else None


def _outcome(result, block: str | None):
    return next((b for b in result.blocks if b.block == block), None)


def _principal(result, block: str | None, registry):
    """The outcome standing for the kernel's: ``block``'s, or, where that block became a
    data movement (a kernel of elementwise blocks whose first block is a load), the first
    block's that calls a compute intrinsic."""
    outcome = _outcome(result, block)
    if outcome is None or outcome.intrinsic is None or \
            registry.get(outcome.intrinsic).kind == "compute":
        return outcome
    return next((o for o in result.blocks if o.intrinsic is not None
                 and registry.get(o.intrinsic).kind == "compute"), outcome)


def _reason(outcome) -> str:
    """Why a layer's kernel was not tensorized (its first form's reason)."""
    return outcome.reason if outcome is not None else "no reduction block"


def _compute_calls(func, intrinsic: str) -> int:
    """Executed calls of the compute intrinsic and its variants (a resetting GEMM is
    ``npu_gemm_reset``), the data movement not counted."""
    from tensorize.engine.count import count_calls

    return sum(n for name, n in count_calls(func).items() if name.startswith(intrinsic))


class NpuExecutor(Executor):
    """The simulated NPU. Layers of one shape share one kernel (:func:`ir.onnx.kernels`), so
    each kernel is tensorized, split into stages and compiled once and only simulated per
    layer; stages run as :func:`targets.npu.run` runs them."""

    target = "npu"

    def __init__(self, ctx: RunContext, fusion: bool = True) -> None:
        super().__init__()
        if ctx.machine is None:
            from ir.errors import TensorizeError

            raise TensorizeError("an NPU model run requires the run context's machine "
                                 "(make_context sets it for kind npu), got none")
        self.ctx = ctx
        self.fusion = fusion
        self.registry = ctx.registry
        self.config = ctx.machine
        self._plans: dict[int, tuple[Any, Any, Any]] = {}
        self._fused_layers: dict[int, tuple[Layer, Layer]] = {}
        self._implicit_layers: dict[int, tuple[Layer, Layer | None]] = {}
        self._gathering_layers: dict[int, tuple[Layer, Layer | None]] = {}
        # The first kernel planned of each family (KernelFamily.key): its constants, outcome
        # and plan, which the family's other kernels retarget.
        self._families: dict[tuple, tuple[Any, Any, Any]] = {}
        self._tile = self._gemm_tile()

    def prepare(self, graph: Graph) -> Graph:
        """``graph`` with each residual add joined onto the layer producing its first
        operand (:mod:`ir.onnx.residual`) where this machine runs the joined kernel with
        every block on the NPU, so that layer's output never leaves the accumulator memory;
        with fusion off, ``graph`` as it is."""
        if not self.fusion or isinstance(self._tile, str):
            return graph
        return self._join_residuals(graph, self._tile,
                                    lambda joined: not isinstance(self.on_device(joined), str))

    @property
    def roofline(self) -> dict[str, Any]:
        """The machine's peak MACs per cycle and DRAM bytes per cycle."""
        return {"peak_macs_per_cycle": self.config.array.rows * self.config.array.cols,
                "dram_bytes_per_cycle": self.config.dram.bytes_per_cycle}

    def _plan(self, func) -> tuple[Any, Any]:
        """The engine's outcome for ``func``'s reduction block and, when it is tensorized,
        its plan (the NPU runner's :func:`~tensorize.runners.npu.plan_npu`) and compute
        calls (cached by function)."""
        cached = self._plans.get(id(func))
        if cached is not None and cached[0] is func:
            return cached[1], cached[2]
        from tensorize.runners.npu import plan_npu

        with self.timings.measure("tensorize"):
            result = _tensorized(self.ctx, func)
        outcome = _principal(result, _compute_block(func), self.registry)
        plan = None
        if outcome is not None and outcome.intrinsic is not None:
            try:
                with self.timings.measure("compile"):
                    plan = (plan_npu(result.func, self.config, self.registry),
                            _compute_calls(result.func, outcome.intrinsic))
            except ExecutionError as err:
                # The program does not fit the machine (its memories, its queues): the
                # layer takes another form, or the host, with this reason.
                outcome = replace(outcome, intrinsic=None,
                                  reason=f"tensorized with {outcome.intrinsic}, but "
                                         f"{err.message}")
        self._plans[id(func)] = (func, outcome, plan)
        return outcome, plan

    def _family_plan(self, form: Layer) -> tuple[Any, Any]:
        """:meth:`_plan` of ``form``'s kernel; for a kernel of a family planned before
        (:class:`ir.onnx.kernels.KernelFamily`: the layers of one shape whose quantisation
        constants differ), that plan retargeted to this kernel's constants, neither
        tensorized nor compiled again."""
        from tensorize.runners.npu import retarget_npu

        family = form.family
        template = None if family is None else self._families.get(family.key)
        if template is not None:
            first, outcome, (planned, calls) = template
            retargeted = retarget_npu(planned, form.func, *_immediates(first, family))
            if retargeted is not None:
                self._plans[id(form.func)] = (form.func, outcome, (retargeted, calls))
                return outcome, (retargeted, calls)
        outcome, plan = self._plan(form.func)
        if family is not None and plan is not None and family.key not in self._families:
            self._families[family.key] = (family, outcome, plan)
        return outcome, plan

    def _gemm_tile(self) -> tuple[int, int, int] | str:
        """The (rows, depth, columns) of the one GEMM shape the machine's intrinsics
        multiply, the tile a fused layer is padded to; or why there is none."""
        shapes = set()
        for intrinsic in self.registry.for_target("npu"):
            axes = runnable.gemm_axes(intrinsic)
            if axes is not None and runnable.unit_problem(intrinsic, self.config) is None:
                ti, tj, tk = axes.extents
                shapes.add((ti, tk, tj))
        if len(shapes) != 1:
            return (f"the NPU family has {len(shapes)} GEMM shapes for {self.config.name}, "
                    "not one to pad to")
        return shapes.pop()

    def _fused(self, layer: Layer) -> tuple[Layer, Any, Any] | str:
        """``layer`` as one GEMM with its epilogue in the kernel (:attr:`Layer.fused`),
        padded to the machine's GEMM tile, when the engine tensorizes that GEMM and puts
        every epilogue block on the vector unit: ``(that layer, its outcome, plan)``; else
        why not, for the report."""
        if isinstance(self._tile, str):
            return self._tile
        implicit = _cached_form(self._implicit_layers, layer, lambda base: self._row_tiled(
            lambda tile: base.fused.implicit_layer(base, tile)
            if isinstance(base.fused, FusedGemm) else None))
        if implicit is not None:
            device = self.on_device(implicit)
            if not isinstance(device, str):
                return device
        return self.on_device(_cached_form(self._fused_layers, layer, lambda base:
                                            self._row_tiled(lambda t: base.fused.layer(base, t))))

    def _row_tiled(self, build: Callable[[tuple[int, int, int]], Layer | None]
                   ) -> Layer | None:
        """The form ``build`` makes padded to the machine's GEMM tile; or, where the NPU
        schedule pads its GEMM's rows further (to a row tile that does not divide them,
        ``npu_traffic.padded_m``), the form ``build`` makes with its rows padded so in the
        kernel: the padding then comes before the epilogue rather than between the GEMM and
        it, which would leave the epilogue on the host. The first form where the second's
        schedule would pad again."""
        form = build(self._tile)
        rows = None if form is None else self._scheduled_rows(form)
        if rows is None:
            return form
        padded = build((rows, *self._tile[1:]))
        return padded if padded is not None and self._scheduled_rows(padded) is None else form

    def _scheduled_rows(self, form: Layer) -> int | None:
        """The rows the NPU schedule runs ``form``'s GEMM on, where they are more than the
        kernel's (its output's rows); None where they are not, or it is not tensorized."""
        outcome, plan = self._family_plan(form)
        if plan is None or outcome.intrinsic is None or not outcome.extents:
            return None
        axes = runnable.gemm_axes(self.registry.get(outcome.intrinsic))
        rows = None if axes is None else axes.of(outcome.extents)[0]
        return rows if rows is not None and rows > form.func.params[-1].shape[0] else None

    def _joined_form(self, base: Layer, add: Layer, tile: tuple[int, int, int],
                     runs: Callable[[Layer], bool]) -> Layer:
        """The implicit GEMM's joined form (:meth:`ir.onnx.fused.FusedGemm.implicit_layer`:
        the convolution's rows gathered by the program's loads) where it runs whole on the
        device, else the joined form on gathered rows."""
        if isinstance(base.fused, FusedGemm):
            implicit = self._row_tiled(lambda t: base.fused.implicit_layer(base, t, add))
            if implicit is not None and runs(implicit):
                return implicit
        return self._row_tiled(lambda t: base.fused.joined(base, add, t))

    def on_device(self, form: Layer) -> tuple[Layer, Any, Any] | str:
        """``form`` (a layer's device form) tensorized with every block on the NPU:
        ``(form, its outcome, plan)``; else why not, for the report."""
        outcome, plan = self._family_plan(form)
        if plan is None:
            return _reason(outcome)
        on_host = _epilogue_blocks_on_host(plan[0], form.func)
        if on_host:
            return (f"no vector instruction of {self.config.name} computes block "
                    f"{', '.join(on_host)}")
        return form, outcome, plan

    def device_form(self, layer: Layer) -> DeviceForm | Refused:
        """The form of ``layer`` this machine runs as one plan, with its note; or, where it
        runs none, the form to run on the host and why. A kernel layer runs as one program
        with its epilogue on the vector unit where the machine can (:meth:`_fused`), else
        with the epilogue on the host (or its first variant that tensorizes). A host layer
        with a device form runs that: its vector kernel (a quantised add, a max pool:
        :attr:`Layer.vector`) as a program of its own on the vector unit, a pool with a GEMM
        form (its ``fused``) as that GEMM. A host layer with neither runs on the host."""
        if layer.func is None:
            if layer.vector is None and layer.fused is None:
                return Refused(layer, host_reason(layer))
            if layer.vector is not None:
                device = self._vector_layer(layer)
                note = "on the vector unit, a program of its own"
            else:
                device = self._fused(layer)
                note = ("as a GEMM by a column of ones on the array, requantised on the "
                        "vector unit, in the program")
            if isinstance(device, str):
                return Refused(layer, f"{layer.epilogue}; not on the NPU: {device}")
            form, outcome, (planned, calls) = device
            return DeviceForm(form, outcome, planned, calls, note)
        fused = self._fused(layer) if layer.fused is not None else None
        if isinstance(fused, tuple):
            form, outcome, plan = fused
            note = "bias and requantisation on the vector unit, in the program"
        else:
            form, outcome, plan = self._first_taken(layer, self._plan)
            note = None if fused is None else f"epilogue on the host: {fused}"
            if id(form) in self._joined:
                note = ("bias, requantisation and the residual add on the vector unit, in "
                        "the program")
        if plan is None:
            reason = _reason(outcome)
            if isinstance(fused, str):
                reason = f"{fused}; the layer's own kernel: {reason}"
            return Refused(form, reason)
        return DeviceForm(form, outcome, plan[0], plan[1], note)

    def gathering_form(self, layer: Layer) -> DeviceForm | None:
        """``layer``'s form whose program gathers its input's windows itself where the
        machine runs it whole and the layer's own form leaves that to the pack (a depthwise
        layer's grouped GEMMs, :meth:`ir.onnx.depthwise.DepthwiseGemm.implicit_layer`): for
        a caller that keeps the input in the device's layout
        (:mod:`tensorize.model.npu_stages`); None where there is none."""
        if isinstance(self._tile, str) or not isinstance(layer.fused, DepthwiseGemm):
            return None
        form = _cached_form(self._gathering_layers, layer, lambda base: self._row_tiled(
            lambda tile: base.fused.implicit_layer(base, tile)))
        device = None if form is None else self.on_device(form)
        if device is None or isinstance(device, str):
            return None
        form, outcome, (planned, calls) = device
        return DeviceForm(form, outcome, planned, calls,
                          "grouped GEMMs of diagonal tiles, the windows gathered by the "
                          "program's loads, requantised on the vector unit, in the program")

    def run(self, layer: Layer, arrays: list[np.ndarray]) -> LayerRun:
        """Run ``layer``: its device form (:meth:`device_form`) simulated; without fusion, a
        layer with a fused form as two programs where the machine can (:meth:`_unfused`);
        the host where the machine runs neither (a kernel layer placed ``fallback``)."""
        start = time.perf_counter()
        if not self.fusion and layer.fused is not None and layer.vector is None:
            stages = self._unfused(layer)
            if not isinstance(stages, str):
                return self._run_stages(layer, arrays, stages, start)
            if layer.func is None:
                return self._on_host(layer, arrays, f"{layer.epilogue}; not on the NPU: "
                                                    f"{stages}", start)
        choice = self.device_form(layer)
        if isinstance(choice, Refused):
            if layer.func is None:
                return self._on_host(layer, arrays, choice.reason, start)
            return self._fallback(choice.form, arrays, choice.reason)
        return self._run_plan(choice.form, arrays, choice.outcome,
                              (choice.planned, choice.calls), choice.note, start)

    def _vector_layer(self, layer: Layer) -> tuple[Layer, Any, Any] | str:
        """The host ``layer`` as its vector kernel (:attr:`Layer.vector`) with every block
        on the NPU, with its outcome and plan; else why not."""
        if isinstance(self._tile, str):
            return self._tile
        try:
            vector = layer.vector(layer, self._tile)
        except ValueError as err:
            return str(err)
        return self.on_device(vector)

    def _run_plan(self, layer: Layer, arrays: list[np.ndarray], outcome: Any, plan: Any,
                  note: str | None, start: float) -> LayerRun:
        """``layer``'s planned kernel simulated on its inputs, and its record."""
        planned, calls = plan
        output, measure = self._simulate(layer, planned, arrays)
        host_stages = measure.host_stages
        notes = [f"host stages: {', '.join(host_stages)}"] if host_stages else []
        if measure.folded:
            notes.append(f"copies done by the program's loads and stores: "
                         f"{', '.join(measure.folded)}")
        if note:
            notes.append(note)
        return self._record(layer, output, outcome.intrinsic, calls, [measure], notes, start)

    def _simulate(self, layer: Layer, planned: Any, arrays: list[np.ndarray]
                  ) -> tuple[np.ndarray, Any]:
        """``layer``'s plan run on its inputs: its output and the measure."""
        from tensorize.runners.npu import run_planned

        with self.timings.measure("pack"):
            packed = layer.pack(arrays)
        measure = run_planned(planned, packed, self.config)
        for stage in measure.run.stages:
            self.timings.add("simulate" if stage.on_npu else "host stages", stage.seconds)
        with self.timings.measure("unpack and epilogue"):
            output = layer.unpack(measure.run.outputs[layer.func.params[-1].name], arrays)
        return output, measure

    def _record(self, layer: Layer, output: np.ndarray, intrinsic: str, calls: int,
                measures: list[Any], notes: list[str], start: float) -> LayerRun:
        """The layer's run from the measures of its programs (run one after another)."""
        from simulator import Roofline

        cycles = sum(m.cycles for m in measures)
        roofline = Roofline.of(sum(m.macs for m in measures),
                               sum(m.roofline.min_dram_bytes for m in measures), self.config)
        peak = self.config.array.rows * self.config.array.cols
        sims = [sim for m in measures for sim in m.sims]
        # The layer's own MACs (padding excluded) over the array's peak: the report's
        # utilisation of the layer, not of the padded tiles the array ran.
        return LayerRun(output, "tensorized", intrinsic, None, calls, cycles,
                        seconds=time.perf_counter() - start,
                        utilisation=layer.macs / (cycles * peak) if cycles else None,
                        dram_bytes=sum(m.dram_bytes for m in measures),
                        bound="compute" if roofline.binds == "compute" else "memory",
                        notes=notes, ran=layer, timeline=layer_timeline(sims))

    def _unfused(self, layer: Layer) -> tuple[tuple[Layer, Any, Any], ...] | str:
        """``layer``'s fused form as two programs (:meth:`ir.onnx.fused.FusedGemm.unfused`):
        each stage with its outcome and plan, when the engine tensorizes both; else why not."""
        if isinstance(self._tile, str):
            return self._tile
        stages = []
        for stage in layer.fused.unfused(layer, self._tile):
            outcome, plan = self._plan(stage.func)
            if plan is None:
                return _reason(outcome)
            stages.append((stage, outcome, plan))
        return tuple(stages)

    def _run_stages(self, layer: Layer, arrays: list[np.ndarray],
                    stages: tuple[tuple[Layer, Any, Any], ...], start: float) -> LayerRun:
        """The layer's programs one after another, each on the last one's output."""
        measures = []
        values = arrays
        for stage, _, (planned, _) in stages:
            output, measure = self._simulate(stage, planned, values)
            measures.append(measure)
            values = [output]
        (first, outcome, (_, calls)), *_ = stages
        note = ("without fusion: the GEMM stores its int32 sums and a second program "
                "requantises them")
        return self._record(first, values[0], outcome.intrinsic, calls, measures, [note],
                            start)


class CpuExecutor(Executor):
    """A CPU target: tensorize, emit LLVM for its triple, run by its first engine here."""

    def __init__(self, ctx: RunContext) -> None:
        super().__init__()
        if ctx.features is None:
            from ir.errors import TensorizeError

            raise TensorizeError("a CPU model run requires the run context's features "
                                 "(make_context sets them for kind cpu), got none")
        self.ctx = ctx
        self.target = ctx.target
        self._kernels: dict[int, tuple[Any, Any, Any]] = {}
        self._results: dict[int, tuple[Any, Any]] = {}
        self._fused_forms: dict[int, tuple[Layer, Layer]] = {}

    def _engine(self, func):
        """The engine's result for ``func`` (cached by function)."""
        cached = self._results.get(id(func))
        if cached is None or cached[0] is not func:
            with self.timings.measure("tensorize"):
                cached = (func, _tensorized(self.ctx, func))
            self._results[id(func)] = cached
        return cached[1]

    def prepacked(self, func, constants: tuple[str, ...]):
        """``func``'s tensorized kernel split at its constant inputs' packing
        (:func:`targets.cpu.split_constants`): ``(pack, kernel, packed)``, the pack's and
        the per-call kernel's emitted code and the packed buffers' names; None when
        ``func`` does not tensorize or no stage packs those constants alone."""
        from targets.cpu import EmitError, split_constants
        from tensorize.runners.cpu import emit_cpu

        result = self._engine(func)
        outcome = _outcome(result, _compute_block(func))
        if outcome is None or outcome.intrinsic is None:
            return None
        try:
            split = split_constants(result.func, constants)
        except EmitError:
            return None
        with self.timings.measure("compile"):
            return emit_cpu(self.ctx, split.pack), emit_cpu(self.ctx, split.kernel), split.packed

    def compiled(self, func):
        """The engine's outcome for ``func``'s reduction block and, when tensorized, its
        emitted kernel (the CPU runner's :func:`~tensorize.runners.cpu.emit_cpu`; cached by
        function)."""
        cached = self._kernels.get(id(func))
        if cached is not None and cached[0] is func:
            return cached[1], cached[2]
        from tensorize.runners.cpu import emit_cpu

        result = self._engine(func)
        outcome = _outcome(result, _compute_block(func))
        kernel = None
        if outcome is not None and outcome.intrinsic is not None:
            with self.timings.measure("compile"):
                kernel = (emit_cpu(self.ctx, result.func),
                          _compute_calls(result.func, outcome.intrinsic))
        self._kernels[id(func)] = (func, outcome, kernel)
        return outcome, kernel

    def prepare(self, graph: Graph) -> Graph:
        """``graph`` with each residual add joined onto the layer producing its first
        operand where the joined kernel (the add compiled into the convolution's epilogue)
        tensorizes: the add's inputs are read once, in the kernel, not by a host layer."""
        return self._join_residuals(graph, (1, 1, 1),
                                    lambda joined: self.compiled(joined.func)[1] is not None)

    def _unshifted_first(self, layer: Layer) -> Layer:
        """``layer``, or the first of its variants whose kernel tensorizes without an
        operand shift when ``layer``'s needs one (x86 takes int8 activations through the
        +128 shift; the uint8 variant has the shift in its pack and its zero point, and no
        column sums or compensation pass to run)."""
        if not layer.variants or not _shifted(self._engine(layer.func)):
            return layer
        for variant in layer.variants:
            result = self._engine(variant.func)
            outcome = _outcome(result, _compute_block(variant.func))
            if outcome is not None and outcome.intrinsic is not None and not _shifted(result):
                return replace(variant, variants=(layer,))
        return layer

    def kernel_for(self, layer: Layer) -> tuple[Layer, Any, Any]:
        """The form of ``layer`` a run takes, the engine's outcome and, when tensorized,
        ``(emitted kernel, compute calls)``, else None. The form is the layer's fused one
        (its epilogue compiled into the kernel: :attr:`Layer.fused`, unpadded) where that
        tensorizes, else the layer or its first variant that tensorizes, one needing no
        operand shift first. Measured on ResNet-50's layers on x86, the fused form is the
        faster even where its pack gathers the windows in numpy: the epilogue in numpy
        costs more than the gathering (``docs/models.md``). A depthwise layer's form, GEMMs
        of diagonal tiles, is for a GEMM array: the CPU runs the layer's own kernel."""
        if layer.fused is not None and not layer.fused.diagonal:
            fused = _cached_form(self._fused_forms, layer,
                                 lambda base: base.fused.layer(base, (1, 1, 1)))
            outcome, kernel = self.compiled(fused.func)
            if kernel is not None:
                return fused, outcome, kernel
        return self._first_taken(self._unshifted_first(layer), self.compiled)

    def run_func(self, layer: Layer, arrays: list[np.ndarray]) -> LayerRun:
        """The layer's kernel (or its first variant that tensorizes, one needing no operand
        shift first) compiled for the CPU target and run by its engine here; the host when
        none tensorizes or none runs."""
        from targets import cpu
        from tensorize.runners.cpu import run_emitted

        layer, outcome, kernel = self.kernel_for(layer)
        if kernel is None:
            return self._fallback(layer, arrays, _reason(outcome))
        emitted, calls = kernel
        engine, reason = cpu.engine_for(emitted)
        if engine is None:
            return self._fallback(layer, arrays, f"tensorized with {outcome.intrinsic} but "
                                                 f"not runnable here: {reason}")
        with self.timings.measure("run (compile and execute)"):
            packed = layer.pack(arrays)
            run = run_emitted(emitted, packed, NATIVE_RUNS)
        sums = run.outputs[layer.func.params[-1].name]
        kernel_check = None
        # Only float intrinsics state an accumulation order: integer layers skip the step,
        # and their timings name no such phase.
        if self.ctx.registry.get(outcome.intrinsic).accumulation is not None:
            with self.timings.measure("hardware-order reference"):
                kernel_check = hardware_check(layer.func, outcome, self.ctx.registry, packed,
                                              sums)
        with self.timings.measure("unpack and epilogue"):
            output = layer.unpack(sums, arrays)
        notes = [f"ran on {run.engine}"]
        if any(form is layer for _, form in self._fused_forms.values()):
            notes.append("bias and requantisation compiled into the kernel")
        elif id(layer) in self._joined:
            notes.append("bias, requantisation and the residual add compiled into the kernel")
        return LayerRun(output, "tensorized", outcome.intrinsic, None, calls,
                        instructions=run.instructions,
                        seconds=run.best if run.seconds else None, notes=notes, ran=layer,
                        kernel_check=kernel_check)


def _immediates(first, family) -> tuple[tuple, tuple]:
    """The requantising instructions' immediates of the family's first kernel and of
    ``family``'s: ``((zp, lo, hi) pairs, (lo, hi) pairs of a joined add)``."""
    requant = tuple((q.zero_point, q.low, q.high)
                    for q in (first.requantisation, family.requantisation))
    qadd = () if family.add is None else (first.add.bounds, family.add.bounds)
    return requant, qadd


def _cached_form(cache: dict[int, tuple[Layer, Layer]], layer: Layer,
                 build: Callable[[Layer], Layer]) -> Layer:
    """``build(layer)``, built once per layer: ``cache`` maps a layer's identity to the
    layer and its form (the layer is kept, so a reused identity is built anew)."""
    cached = cache.get(id(layer))
    if cached is None or cached[0] is not layer:
        cached = (layer, build(layer))
        cache[id(layer)] = cached
    return cached[1]


def _shifted(result) -> bool:
    """Whether the engine fed an operand through a shifted copy (``shift_operand``)."""
    return any(step.primitive == "shift_operand" for step in result.schedule.trace.steps)


def _tensorized(ctx: RunContext, func):
    """``func`` tensorized by the runner of the context's target kind (the steps of
    ``tensorize run``, without tuning): the engine's result."""
    from tensorize.runners import RunOptions, RunReport, runner_for

    return runner_for(ctx).tensorize(ctx, func, RunOptions(), RunReport()).result


def executor_for(ctx: RunContext, fusion: bool = True) -> Executor:
    """The executor of the context's target (host, npu, or a CPU target its registry
    declares); ``fusion`` False runs each NPU layer's epilogue as a program of its own."""
    if ctx.kind == "host":
        return Executor()
    if ctx.kind == "npu":
        return NpuExecutor(ctx, fusion)
    if ctx.kind == "cpu":
        return CpuExecutor(ctx)
    from ir.errors import TensorizeError

    raise TensorizeError(f"model runs require a target of kind host, npu or cpu, got "
                         f"{ctx.target} of kind {ctx.kind}")
