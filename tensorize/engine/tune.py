"""Tile choice for the NPU: take the tilings that move the least DRAM traffic
(:mod:`.npu_traffic`), rank them by an analytical cost model, simulate only the best few (for
time only), keep the fastest simulated.

The model (:func:`model_cycles`) reads what the tensorized function executes (its calls,
counted from the loop structure, no emission) and the machine's parameters, and follows the
steady state of the NPU schedule (``npu_schedule``): per ``tm x tn`` accumulator tile, ``S``
reduction steps, each loading a ``tm x kb`` input tile and a ``kb x tn`` weight tile into the
second copy of double-buffered scratchpads while the array streams the current one through
``(kb / tk) * (tn / tj)`` GEMMs. With ``c`` the array's cycles per step (those GEMMs'
``timing.stream_cycles``, each plus any weight preload it cannot hide),
``x`` the step's load bytes over the DRAM port, ``L`` the DRAM latency, ``d`` the array's
drain and ``P`` the weight preload (weight-stationary), a buffer goes back to the loads only
when the GEMM two steps earlier retires, so a step takes ``max(c, (c + d + L + x + P) / 2,
x)``. A tile adds its vector instructions (``v``, sharing the compute queue) and its store,
which holds the DRAM port while the next loads wait; the run adds the first step's loads
before the first GEMM and the drain after the last::

    cycles = tiles * (S * step + v + store) + (L + x + P) + (d + L)
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from intrinsics import Intrinsic, Registry
from ir import PrimFunc
from simulator import MachineConfig, simulate, timing
from targets import npu
from tensorize.engine import Tensorized, auto_tensorize
from tensorize.engine.count import count_calls
from tensorize.engine import npu_traffic
from tensorize.engine.npu_schedule import gemm_axes, gemm_shape
from tensorize.engine.npu_traffic import NpuTiling

# How many of the model's best candidates are simulated.
SIMULATED = 3
# How many tilings, least traffic first, the model ranks.
RANKED = 8


@dataclass(frozen=True, slots=True)
class Trial:
    """One candidate tile: the model's cycles, and the simulated cycles of its NPU stages
    when it was among the best the model ranked (None otherwise)."""

    tiling: NpuTiling
    model: int
    cycles: int | None = None

    def describe(self) -> str:
        """One line for the run's report."""
        text = f"tile {self.tiling.describe()}: model {self.model:,} cycles"
        if self.cycles is None:
            return text + " (not simulated)"
        error = (self.model - self.cycles) / self.cycles if self.cycles else 0.0
        return text + f", simulated {self.cycles:,} (model {100 * error:+.1f}%)"

    def to_dict(self) -> dict[str, Any]:
        """The trial as plain data (the run's --json)."""
        t = self.tiling
        return {"rows": t.rows, "cols": t.cols, "depth": t.depth, "order": t.order,
                "model_cycles": self.model, "simulated_cycles": self.cycles}


@dataclass(frozen=True, slots=True)
class OwnChoice:
    """The schedule's own tiling, simulated beside the trials: its cycles, and the fewest
    any simulated trial took. The search keeps it unless a trial ran faster."""

    cycles: int
    fastest: int

    @property
    def kept(self) -> bool:
        """Whether the search kept the schedule's own tiling."""
        return self.cycles <= self.fastest

    def describe(self) -> str:
        """One line for the run's report."""
        kept = "kept" if self.kept else f"the fastest trial ({self.fastest:,}) kept instead"
        return f"the schedule's own tiling: simulated {self.cycles:,}, {kept}"


def tune_npu(func: PrimFunc, config: MachineConfig, registry: Registry,
             intrinsic: str | None = None, simulated: int = SIMULATED
             ) -> tuple[Tensorized, list[Trial], OwnChoice | None]:
    """The fastest tensorization of ``func`` on the NPU ``config`` among the ``RANKED``
    tilings of the first tensorized block that move the least DRAM traffic
    (:func:`npu_traffic.ranked`): each is ranked by :func:`model_cycles`, the best
    ``simulated`` are simulated, and the fastest simulated wins (ties go to the earlier in
    traffic order), unless the schedule's own choice, simulated too, is as fast: tuning
    never returns a slower program than no tuning. Returns it, one trial per candidate in
    traffic order, and the schedule's own choice against them (None when nothing was
    simulated)."""
    first = auto_tensorize(func, "npu", registry=registry, intrinsic=intrinsic, config=config)
    done = first.tensorized
    if not done:
        return first, [], None
    shape = gemm_shape(registry.get(done[0].intrinsic), done[0].extents)
    candidates = []
    for tiling in npu_traffic.ranked(shape, config)[:RANKED]:
        result = auto_tensorize(func, "npu", registry=registry, intrinsic=intrinsic,
                                config=config, tiling=tiling)
        candidates.append((tiling, result,
                           model_cycles(result.func, tiling, config, registry)))
    order = {c[0]: n for n, c in enumerate(candidates)}
    ranked = sorted(candidates, key=lambda c: (c[2], order[c[0]]))[:simulated]
    measured = {c[0]: simulated_cycles(c[1].func, config, registry) for c in ranked}
    trials = [Trial(tiling, model, measured.get(tiling)) for tiling, _, model in candidates]
    if not measured:
        return first, trials, None
    best = min(ranked, key=lambda c: (measured[c[0]], order[c[0]]))
    own = OwnChoice(simulated_cycles(first.func, config, registry), measured[best[0]])
    return (first if own.kept else best[1]), trials, own


def model_cycles(func: PrimFunc, tiling: NpuTiling, config: MachineConfig,
                 registry: Registry) -> int:
    """The modelled cycles of ``func``'s NPU stages, tensorized with ``tiling`` (module
    docs). A function calling no NPU GEMM is modelled as 0."""
    calls = {registry.get(name): n for name, n in count_calls(func).items()}
    calls = {i: n for i, n in calls.items() if i.target == "npu"}
    gemms = [i for i in calls if i.kind == "compute" and i.reduce_vars()]
    if not gemms:
        return 0
    ti, tj, tk = gemm_axes(gemms[0]).extents
    rows, cols, depth = tiling.rows, tiling.cols or tj, tiling.depth or tk
    array, dram = config.array, config.dram
    # One step loads a rows x depth input tile and a depth x cols weight tile, then runs
    # ``per_step`` GEMMs of ``rows`` rows each.
    per_step = depth // tk * (cols // tj)
    steps = sum(calls[g] for g in gemms) * ti / rows / per_step
    tiles = _tiles(calls, rows, cols)
    load_bytes = sum(n * _dram_bytes(i) for i, n in calls.items() if i.kind == "load")
    store_bytes = sum(n * _dram_bytes(i) for i, n in calls.items() if i.kind == "store")
    vector = sum(n * i.output.shape[0] * math.ceil(array.cols / config.vector.lanes)
                 for i, n in calls.items() if i.kind in ("compute", "fill")
                 and not i.reduce_vars() and i.output.shape)
    stream = timing.stream_cycles(rows, tk, config)
    preload = 0
    if array.dataflow == "weight_stationary":
        preload = timing.preload_cycles(config)
        stream += max(0, preload - rows) if array.double_buffered_weights else 2 * preload - 1
    stream *= per_step
    drain = timing.drain_cycles(tk, config)
    load = load_bytes / steps / dram.bytes_per_cycle
    store = store_bytes / tiles / dram.bytes_per_cycle
    step = max(stream, (stream + drain + dram.latency + load + preload) / 2, load)
    tile = steps / tiles * step + vector / tiles + store
    fill = dram.latency + load + preload
    return round(tiles * tile + fill + drain + dram.latency)


def _tiles(calls: dict[Intrinsic, int], rows: int, cols: int) -> float:
    """Accumulator tiles (rows x cols) the stores drain."""
    stored = sum(n * i.output.shape[0] * i.output.shape[-1]
                 for i, n in calls.items() if i.kind == "store")
    return max(1.0, stored / (rows * cols))


def _dram_bytes(intrinsic: Intrinsic) -> int:
    """Bytes one call of a DMA intrinsic moves: its DRAM-side operand's tile."""
    side = next((o for o in intrinsic.operands if o.scope == "global"), intrinsic.output)
    return side.nbytes


def timed_runs(func: PrimFunc, config: MachineConfig, registry: Registry) -> list:
    """The simulation of every NPU stage of ``func``, for time only (no data computed)."""
    runs = []
    for stage in npu.split_stages(func, registry.get):
        if stage.on_npu:
            compiled = npu.compile_stage(stage, config, registry.get)
            image = np.zeros(compiled.dram_bytes, np.uint8)
            runs.append(simulate(compiled.program, config, image, functional=False))
    return runs


def simulated_cycles(func: PrimFunc, config: MachineConfig, registry: Registry) -> int:
    """Cycles of every NPU stage of ``func``, simulated for time only."""
    return sum(run.cycles for run in timed_runs(func, config, registry))
