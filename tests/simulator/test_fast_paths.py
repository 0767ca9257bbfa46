"""The engine's fast paths change no figure: GEMM programs on the built-in 16x16 machine and
the two example machines (32x32 output-stationary, 8x64) run both ways, as the simulator's
own program builder writes them and as the NPU backend compiles a tensorized kernel (a
weight tile loaded whole and read in parts, several times over).

"Both ways": with the engine as it is, and with its shortcuts turned off (every write
merges the segments it covers, as before the in-place update; the GEMM bounds are checked
on every instruction; each GEMM's values are computed as it runs, not in groups of
simulator.products; each queue's ready time is worked out on every step, not kept until
what it depends on changes; a LOAD takes DRAM through datapath.dram_rows, not through the
engine's views of DRAM as rows; a group's operand views are taken anew, not kept; no loop
is fast-forwarded, simulator.steady, every iteration timed instruction by instruction). The two
runs must agree on every figure (cycles, per-unit busy and stall, traffic, DRAM wait, MACs,
the trace records) and on the DRAM image; the output must equal numpy's product exactly.
(tests/simulator/test_memory_segments.py checks that the segments' verdicts, faults
included, do not depend on how they are kept.)
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from simulator import engine, gemm_program, load_machine, memory, products, simulate
from simulator.result import SimResult
from targets import npu
from tensorize.engine import auto_tensorize
from tests.simulator.test_programs import operands, reference
from tests.tensorize.schedule.kernels import gemm_int8

MACHINES = Path(__file__).parents[2] / "examples" / "machines"


def figures(result: SimResult) -> tuple[object, ...]:
    """Everything a run reports, the DRAM image included."""
    return (result.cycles, result.bytes, result.dram_wait, result.useful_macs,
            result.instructions, {u.name: (u.busy, u.stall, u.instructions)
                                  for u in result.units.values()},
            list(result.records), result.dram.tobytes())


def both_ways(program, config, image, monkeypatch) -> SimResult:
    """Run ``program`` with the fast paths and without; the first run, once the figures of
    the two are checked equal."""
    fast = simulate(program, config, image)
    with monkeypatch.context() as plain_paths:
        plain_paths.setattr(memory, "_MERGE_ABOVE", 0)
        plain_paths.setattr(engine, "_MAX_FITS", 0)
        plain_paths.setattr(engine, "_GROUP", 1)
        plain_paths.setattr(engine, "_KEEP_READY", False)
        plain_paths.setattr(engine, "_MAX_VIEWS", 0)
        plain_paths.setattr(products, "_MAX_VIEWS", 0)
        plain_paths.setattr(engine, "_FAST_FORWARD", False)
        plain = simulate(program, config, image)
    assert figures(fast) == figures(plain)
    return fast


@pytest.mark.parametrize(("machine", "shape"), [
    (None, (100, 72, 90)),
    ("npu32x32.yaml", (70, 96, 66)),
    ("npu8x64.yaml", (40, 130, 75)),
])
def test_fast_paths_give_the_figures_of_the_plain_ones(machine, shape, monkeypatch):
    config = load_machine(MACHINES / machine if machine else None)
    m, n, k = shape
    program = gemm_program(m, n, k, config)
    a, b = operands(m, n, k, seed=5)
    result = both_ways(program.program, config, program.dram(a, b), monkeypatch)
    assert result.instructions["gemm"] > 8
    assert np.array_equal(program.output(result.dram), reference(a, b))


@pytest.mark.parametrize(("machine", "shape"), [
    (None, (64, 48, 80)),
    (None, (100, 40, 3000)),  # a K loop long enough to be fast-forwarded (simulator.steady)
    ("npu32x32.yaml", (64, 96, 96)),
    ("npu8x64.yaml", (24, 192, 40)),
])
def test_compiled_kernels_run_the_same_both_ways(machine, shape, monkeypatch):
    if machine:
        config = npu.load_machine(MACHINES / machine)
        registry = npu.machine_registry(MACHINES / machine)
    else:
        from intrinsics import default_registry

        config, registry = load_machine(), default_registry()
    m, n, k = shape
    func = auto_tensorize(gemm_int8(m, n, k), "npu", registry=registry, config=config).func
    a, b = operands(m, n, k, seed=7)
    simulated = []

    def recording(program, config, image, **options):
        simulated.append((program, image.copy()))
        return simulate(program, config, image, **options)

    monkeypatch.setattr(npu, "simulate", recording)
    run = npu.run(func, {"A": a, "B": b}, config, lookup=registry.get)
    assert np.array_equal(run.outputs["C"], reference(a, b))
    assert simulated
    for program, image in simulated:
        both_ways(program, config, image, monkeypatch)
