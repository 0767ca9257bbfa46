"""Running an imported model layer by layer on a target, every layer checked against
onnxruntime, one record per layer for the report.

:func:`run_model` takes the run context made at the edge (its target, registry, machine and
seed), makes random inputs, runs onnxruntime once with every layer's output exposed
(:mod:`.reference`), then runs the layers in order on the target (:mod:`.executors`), each
on the outputs of our own earlier layers, and compares each layer's output with
onnxruntime's (:mod:`.check`). A layer that does not match hands onnxruntime's output on to
the layers after it, so one difference is reported once, where it arises, and every later
layer is still checked on its own. The records follow the schema the report
(:mod:`tensorize.model.report`) reads; see :func:`record`.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from ir.onnx import Graph, Layer
from tensorize.model.check import compare
from tensorize.model.executors import Executor, LayerRun, executor_for
from tensorize.model.reference import fused_nodes, run_reference
from tensorize.model.report import compute_totals, roofline_bound
from tensorize.model.timeline import LayerTimeline

if TYPE_CHECKING:
    from tensorize.runners.context import RunContext

# How an NPU run's layers become programs: one each, or one per stage of linked layers.
PROGRAMS = ("layer", "stage")

Progress = Callable[[int, int, Layer, dict[str, Any]], None]
# Wraps a long phase (a name) in a context manager: :mod:`tensorize.cli.progress`.
PhaseHook = Callable[[str], AbstractContextManager[object]]


@dataclass
class ModelRun:
    """A model's run: the records (one dict per layer, exactly the report's schema), the
    totals, the roofline parameters (NPU only), whether every check passed, per layer the
    notes a reader needs beside the record (host epilogue, onnxruntime's fusion, host
    stages), where the tool's time went (seconds), and the machine the figures were
    measured on (:mod:`tensorize.runners.machine`)."""

    model: str
    target: str
    records: list[dict[str, Any]]
    totals: dict[str, Any]
    roofline: dict[str, Any] | None
    ok: bool
    notes: list[str | None] = field(default_factory=list)
    timings: dict[str, float] = field(default_factory=dict)
    machine: dict[str, Any] = field(default_factory=dict)
    # Per layer, where its NPU cycles went (None: not simulated): the network's timeline.
    timelines: list[LayerTimeline | None] = field(default_factory=list)
    # With programs per stage, the stages (tensorize.model.npu_stages.StageSummary).
    stages: list[Any] = field(default_factory=list)

    @property
    def tensorized(self) -> int:
        """Layers that ran on an intrinsic of the target."""
        return int(self.totals["tensorized"])

    def to_dict(self) -> dict[str, Any]:
        """The run as plain JSON-serialisable data."""
        return {"model": self.model, "target": self.target, "machine": self.machine,
                "ok": self.ok, "layers": self.records, "totals": self.totals,
                "roofline": self.roofline,
                "notes": {r["name"]: n for r, n in zip(self.records, self.notes) if n},
                "timings": {k: round(v, 3) for k, v in self.timings.items()},
                **({"stages": [s.to_dict() for s in self.stages]} if self.stages else {})}


def random_inputs(graph: Graph, seed: int) -> dict[str, np.ndarray]:
    """Standard normal float inputs, integers over their dtype's range."""
    rng = np.random.default_rng(seed)
    inputs = {}
    for info in graph.inputs:
        dtype = np.dtype(info.dtype)
        if dtype.kind in "iu":
            limits = np.iinfo(dtype)
            inputs[info.name] = rng.integers(limits.min, int(limits.max) + 1,
                                             info.shape).astype(dtype)
        else:
            inputs[info.name] = rng.standard_normal(info.shape).astype(dtype)
    return inputs


def run_model(graph: Graph, ctx: RunContext, progress: Progress | None = None,
              phase: PhaseHook | None = None, fusion: bool = True,
              programs: str = "layer") -> ModelRun:
    """Run ``graph`` on the context's target layer by layer (its registry, machine and
    seed) and check every layer against onnxruntime on the same random inputs. ``progress``
    sees each layer as it finishes; ``phase`` wraps onnxruntime's reference run
    (:func:`tensorize.model.reference.run_reference`); ``fusion`` False runs each NPU
    layer's epilogue as a program of its own (the figure without fusion). ``programs``
    ``stage`` links an NPU's consecutive layers into one program per stage
    (:mod:`tensorize.model.npu_stages`), each layer checked on what it left in the stage's
    DRAM; ``layer`` (the default) runs each layer as a program of its own."""
    if programs not in PROGRAMS:
        raise ValueError(f"run_model requires programs in {PROGRAMS}, got {programs!r}")
    if programs == "stage" and (ctx.kind != "npu" or not fusion):
        from ir.errors import TensorizeError

        raise TensorizeError("programs per stage require an NPU target with fusion on, got "
                             f"{ctx.target} of kind {ctx.kind}"
                             + ("" if fusion else " with fusion off"))
    executor = executor_for(ctx, fusion)
    graph = executor.prepare(graph)
    inputs = random_inputs(graph, ctx.seed)
    start = time.perf_counter()
    expected = run_reference(graph, inputs, phase)
    fused = fused_nodes(graph)
    timings = {"reference": time.perf_counter() - start}
    values: dict[str, np.ndarray] = dict(inputs)
    records, notes, passed, timelines = [], [], [], []
    measures = Measures.of(ctx, executor.roofline)
    run_start = time.perf_counter()
    layer_start = run_start
    staged = None
    if programs == "stage":
        from tensorize.model.npu_stages import StagedRuns

        staged = StagedRuns(executor, graph.layers, values)
    runs = _layer_runs(executor, graph, values) if staged is None else staged
    for index, result in runs:
        layer = graph.layers[index]
        tool_s = time.perf_counter() - layer_start
        ok, check = compare(result.output, expected[layer.output], result.kernel_check)
        # A mismatch would spread to every later layer and hide whether they are right:
        # they read onnxruntime's output of this layer instead, so each check stays its own.
        values[layer.output] = result.output if ok else expected[layer.output]
        entry = record(index, layer, result, check, tool_s, measures)
        records.append(entry)
        note = _notes(layer, result, fused.get(layer.name))
        if not ok:
            handed_on = "later layers read onnxruntime's output of this layer"
            note = "; ".join(filter(None, [note, handed_on]))
        notes.append(note)
        passed.append(ok)
        timelines.append(result.timeline)
        if progress is not None:
            progress(index, len(graph.layers), layer, entry)
        layer_start = time.perf_counter()
    timings["run"] = time.perf_counter() - run_start
    timings.update((f"run: {kind}", seconds) for kind, seconds in executor.timings.items())
    totals = compute_totals(records)
    return ModelRun(graph.path, ctx.target, records, totals, executor.roofline, all(passed),
                    notes, timings, measures.machine, timelines,
                    [] if staged is None else staged.stages)


def _layer_runs(executor: Executor, graph: Graph, values: dict[str, np.ndarray]
                ) -> Iterator[tuple[int, LayerRun]]:
    """Each layer's index and run, in order, each run on ``values`` as they stand when it
    is taken (the caller adds each output before taking the next)."""
    for index, layer in enumerate(graph.layers):
        yield index, executor.run(layer, [values[name] for name in layer.inputs])


def _notes(layer: Layer, result: LayerRun, fused_by_ort: str | None) -> str | None:
    """What a reader needs beside the record: host stages, the host epilogue, and the
    kernel onnxruntime ran the node with."""
    notes = list(result.notes)
    epilogue = (result.ran or layer).epilogue
    if epilogue:
        notes.append(epilogue)
    if fused_by_ort:
        notes.append(f"onnxruntime fused this node into {fused_by_ort}")
    elif layer.op.startswith("QDQ "):
        notes.append("onnxruntime ran this node unfused (float32 between dequantise and "
                     "quantise)")
    return "; ".join(notes) or None


@dataclass(frozen=True)
class Measures:
    """What turns a layer's run into its record's figures: the MACs one call of each
    intrinsic performs, the machine's clock (NPU) and roofline, and the machine's data."""

    registry: Any
    clock_mhz: float | None
    roofline: dict[str, Any] | None
    machine: dict[str, Any]

    @classmethod
    def of(cls, ctx: RunContext, roofline: dict[str, Any] | None) -> Measures:
        """The measures of the context's target: its machine (NPU), its features (CPU)."""
        from tensorize.runners.machine import cpu_machine, npu_machine

        if ctx.kind == "npu" and ctx.machine is not None:
            return cls(ctx.registry, ctx.machine.clock_mhz, roofline, npu_machine(ctx.machine))
        if ctx.kind == "cpu":
            return cls(ctx.registry, None, roofline, cpu_machine(ctx.target, ctx.features))
        return cls(ctx.registry, None, roofline, {"kind": ctx.kind, "name": ctx.target})


def record(index: int, layer: Layer, result: LayerRun, check: str, tool_s: float,
           measures: Measures) -> dict[str, Any]:
    """One layer's record in the report's schema (:data:`tensorize.model.report.FIELDS`,
    whose comment gives each figure's meaning). ``tool_s`` is the tool's wall time for the
    layer. A result with cycles was simulated, so its seconds are the tool's (the simulated
    time is the cycles at the clock); any other result's seconds are its code's measured run
    time here."""
    from tensorize.runners.macs import intrinsic_macs

    executed = None
    # Executed MACs are those of a reducing (multiply-accumulate) intrinsic's calls; a
    # layer on a vector unit executes none.
    if result.intrinsic is not None and result.calls is not None and \
            measures.registry.get(result.intrinsic).reduce_vars():
        executed = result.calls * intrinsic_macs(measures.registry, result.intrinsic)
    simulated = result.cycles is not None
    sim_s = result.cycles / (measures.clock_mhz * 1e6) if simulated and measures.clock_mhz \
        else None
    dram = result.dram_bytes
    intensity = layer.macs / dram if layer.macs and dram else None
    bound = None
    if measures.roofline is not None:
        bound = roofline_bound(layer.macs, dram, measures.roofline)
    return {"index": index, "name": layer.name, "op": layer.op, "shape": layer.shape_text,
            "macs": layer.macs, "executed_macs": executed,
            "pad": round(1.0 - layer.macs / executed, 4) if executed else None,
            "placement": result.placement, "intrinsic": result.intrinsic,
            "why_not": result.why_not, "calls": result.calls, "cycles": result.cycles,
            "sim_s": sim_s, "instructions": result.instructions,
            "run_s": None if simulated or result.seconds is None else result.seconds,
            "tool_s": tool_s,
            "utilisation": None if result.utilisation is None
            else round(result.utilisation, 4),
            "dram_bytes": dram, "intensity": intensity, "bound": bound, "check": check}
