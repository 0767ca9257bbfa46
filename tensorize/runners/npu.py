"""The runner's steps for the npu target kind: tensorize for the context's machine (or, with
``tune``, rank the tile heights by the cost model and simulate the best few), then emit the
programs, simulate them, check them, and measure: cycles, MAC utilisation, per-unit busy
and stall cycles, DRAM traffic and the roofline bound.

:func:`simulate_and_measure` is the one place a tensorized function is simulated and its
figures derived; ``tensorize run``, sweeps and the benches all go through it.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, TextIO

import numpy as np

from intrinsics import Registry
from ir import PrimFunc
from simulator import MachineConfig, Roofline, SimResult, gigabytes_per_second
from tensorize.engine import Tensorized, auto_tensorize
from tensorize.runners.context import RunContext
from tensorize.runners.report import RunReport
from tensorize.validate import Expected


@dataclass(frozen=True)
class NpuMeasure:
    """A tensorized function simulated on ``config``: the backend's run (outputs, stages),
    and the figures every report derives from it the same way."""

    run: Any  # targets.npu.NpuRun
    config: MachineConfig

    @property
    def cycles(self) -> int:
        """Simulated cycles of the NPU stages."""
        return int(self.run.cycles)

    @property
    def macs(self) -> int:
        """MACs the array executed (padding included)."""
        return int(self.run.macs)

    @property
    def dram_bytes(self) -> int:
        """Bytes moved between DRAM and the scratchpads."""
        return int(self.run.dram_bytes)

    @property
    def sims(self) -> tuple[SimResult, ...]:
        """The simulation of each NPU program, in order."""
        return tuple(self.run.sims)

    @property
    def host_stages(self) -> list[str]:
        """The stages that ran on the host (packing, epilogues), by label."""
        return [s.label for s in self.run.stages if not s.on_npu]

    @property
    def folded(self) -> list[str]:
        """The host copies the programs' loads and stores do instead (an im2col, a
        weight's reshape, an unpadding: ``targets.npu.remap``), by label."""
        return [label for s in self.run.stages if s.compiled for label in s.compiled.folded]

    @property
    def utilisation(self) -> float:
        """MACs over the array's peak for the simulated cycles (0 with no cycle)."""
        peak = self.cycles * self.config.array.rows * self.config.array.cols
        return self.macs / peak if peak else 0.0

    @property
    def bytes_per_cycle(self) -> float:
        """DRAM bytes moved per simulated cycle."""
        return self.dram_bytes / self.cycles if self.cycles else 0.0

    @property
    def roofline(self) -> Roofline:
        """The bound of the NPU stages on the machine."""
        return self.run.roofline(self.config)

    def to_dict(self) -> dict[str, Any]:
        """The JSON record of the run (``tensorize run --json``'s ``npu``)."""
        config, run, roofline = self.config, self.run, self.roofline
        gbps = gigabytes_per_second(self.bytes_per_cycle, config)
        return {
            "machine": config.name, "array": [config.array.rows, config.array.cols],
            "dataflow": config.array.dataflow, "clock_mhz": config.clock_mhz,
            "cycles": self.cycles, "mac_utilisation": round(self.utilisation, 4),
            "macs": self.macs, "programs": len(self.sims), "host_stages": self.host_stages,
            "folded_copies": self.folded,
            "instructions": sum(len(s.compiled.program) for s in run.stages if s.compiled),
            "units": {u.name: {"busy": u.busy, "stall": u.stall, "idle": u.idle,
                               "instructions": u.instructions} for u in run.units.values()},
            "dram": {"bytes": self.dram_bytes,
                     "read": sum(s.bytes["dram.read"] for s in self.sims),
                     "write": sum(s.bytes["dram.write"] for s in self.sims),
                     "bytes_per_cycle": round(self.bytes_per_cycle, 4),
                     "gb_per_s": round(gbps, 4),
                     "port_bytes_per_cycle": config.dram.bytes_per_cycle},
            "roofline": {"compute_cycles": round(roofline.compute_cycles, 1),
                         "bandwidth_cycles": round(roofline.bandwidth_cycles, 1),
                         "min_dram_bytes": roofline.min_dram_bytes,
                         "bound_cycles": round(roofline.bound_cycles, 1),
                         "binds": roofline.binds,
                         "run_over_bound": round(self.cycles / roofline.bound_cycles, 4)
                         if roofline.bound_cycles else None}}


def simulate_and_measure(func: PrimFunc, inputs: Mapping[str, np.ndarray],
                         config: MachineConfig, registry: Registry) -> NpuMeasure:
    """Run ``func`` (tensorized for the NPU) on ``config``: NPU stages simulated, the others
    on the host; its figures."""
    return run_planned(plan_npu(func, config, registry), inputs, config)


def plan_npu(func: PrimFunc, config: MachineConfig, registry: Registry) -> Any:
    """``func`` (tensorized for the NPU) split into stages, each compiled once for
    ``config`` (a ``targets.npu.NpuPlan``): what a network's layers of one shape share."""
    from targets import npu

    return npu.plan(func, config, lookup=registry.get)


def retarget_npu(planned: Any, func: PrimFunc, requant: tuple[tuple[int, int, int], ...],
                 qadd: tuple[tuple[int, int], ...] = ()) -> Any:
    """``planned`` (:func:`plan_npu`'s) as the plan of ``func``, which differs from its
    kernel only in its requantising instructions' immediates (``targets.npu.retarget``);
    None where more would change."""
    from targets import npu

    return npu.retarget(planned, func, requant, qadd)


def run_planned(planned: Any, inputs: Mapping[str, np.ndarray], config: MachineConfig
                ) -> NpuMeasure:
    """A plan of :func:`plan_npu` run on ``inputs``: NPU stages simulated, the others on
    the host; its figures."""
    from targets import npu

    return NpuMeasure(npu.execute(planned, inputs), config)


def tensorize_npu(ctx: RunContext, func: PrimFunc, intrinsic: str | None, tune: bool,
                  report: RunReport) -> Tensorized:
    """Tensorize ``func`` for the context's machine; with ``tune``, the tiling that
    simulates fastest among the cost model's best few and the schedule's own (one ``tune``
    line per trial, and one saying which was kept)."""
    if not tune:
        return auto_tensorize(func, ctx.target, registry=ctx.registry, intrinsic=intrinsic,
                              config=ctx.machine)
    from tensorize.engine.tune import tune_npu

    result, trials, own = tune_npu(func, _machine(ctx), ctx.registry, intrinsic)
    for trial in trials:
        report.step("tune", True, trial.describe())
    if own is not None:
        report.step("tune", True, own.describe())
    report.data["tune"] = [trial.to_dict() for trial in trials]
    report.data["tune_own_cycles"] = None if own is None else own.cycles
    return result


def measure_npu(ctx: RunContext, result: Tensorized, inputs: Mapping[str, np.ndarray]
                ) -> NpuMeasure:
    """``result`` simulated on the context's machine (:func:`simulate_and_measure`)."""
    return simulate_and_measure(result.func, inputs, _machine(ctx), ctx.registry)


def run_npu(ctx: RunContext, result: Tensorized, inputs: dict[str, np.ndarray],
            reference: Expected, report: RunReport, emitted: list[str],
            emit_code: bool, measure: NpuMeasure | None = None
            ) -> tuple[dict[str, np.ndarray], Callable[[TextIO], None] | None]:
    """Report ``result`` simulated on the context's machine (``measure``, else simulated
    here) and check its outputs against ``reference``; returns the outputs and the writer
    of the first program's timeline (None when no NPU program ran)."""
    config = _machine(ctx)
    if measure is None:
        measure = measure_npu(ctx, result, inputs)
    run, on_host, folded = measure.run, measure.host_stages, measure.folded
    # Useful MACs are the kernel's own (the tensorize step's figure); the array's executed
    # MACs include the padded rows and columns of its tiles.
    useful = report.data.get("macs", {}).get("useful")
    peak = measure.cycles * config.array.rows * config.array.cols
    utilisation = f"{100 * useful / peak:.1f}% useful, " if useful is not None and peak else ""
    report.step("simulate", True,
                f"{config.name}: {measure.cycles} cycles "
                f"({measure.cycles / config.clock_mhz:.1f} us simulated at "
                f"{config.clock_mhz:g} MHz), MAC utilisation {utilisation}"
                f"{100 * measure.utilisation:.1f}% executed, {len(measure.sims)} NPU "
                f"program(s)" + (f"; on the host: {', '.join(on_host)}" if on_host else "")
                + (f"; copies done by its loads and stores: {', '.join(folded)}"
                   if folded else ""))
    if measure.sims:
        gbps = gigabytes_per_second(measure.bytes_per_cycle, config)
        report.step("units", True, "busy/stall cycles: " + ", ".join(
            f"{u.name} {u.busy}/{u.stall}" for u in run.units.values()))
        report.step("dram", True, f"{measure.dram_bytes} bytes moved: "
                                  f"{measure.bytes_per_cycle:.2f} bytes/cycle = {gbps:.2f} GB/s "
                                  f"(port {config.dram.bytes_per_cycle:g} bytes/cycle)")
        report.step("roofline", True, measure.roofline.describe(measure.cycles))
    for name in reference:
        ok, detail = reference.check(name, run.outputs[name])
        report.step("check", ok, f"{name} from the simulator {detail}")
    report.data["npu"] = measure.to_dict()
    if emit_code and measure.sims:
        emitted.extend(s.compiled.assembly for s in run.stages if s.compiled is not None)
    elif emit_code:
        report.step("emit", False, f"{NO_PROGRAM}, so there is no NPU code to emit")
    timeline = measure.sims[0].write_trace if measure.sims else None
    return run.outputs, timeline


# Why an NPU run has no program, timeline or code to show.
NO_PROGRAM = "no NPU program ran (every stage ran on the host)"


def _machine(ctx: RunContext) -> MachineConfig:
    if ctx.machine is None:  # make_context always sets it for kind npu
        raise ValueError(f"a run on {ctx.target} requires its machine in the run context")
    return ctx.machine
