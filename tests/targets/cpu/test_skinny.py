"""Skinny GEMMs (a few rows of A against a whole B, the batch-1 GEMV of a transformer): exact
on both CPU targets for 1, 2, 3 and 8 rows, a register tile of one row chosen for one row,
and B's packing walked tile by tile when the unit row is fused into the columns."""

import numpy as np
import pytest

from targets import cpu
from tensorize.engine import auto_tensorize
from tensorize.engine.cpu_schedule import choose_tiling
from tests.targets.cpu.conftest import run_here
from tests.targets.cpu.test_operand_shift import s8_inputs
from tests.tensorize.schedule.kernels import gemm_int8

ROWS = [1, 2, 3, 8]


def _run(target: str, m: int, n: int, k: int, registry, seed: int = 0) -> cpu.CpuRun:
    result = auto_tensorize(gemm_int8(m, n, k), target, registry=registry)
    assert result.tensorized, f"{m} x {n} x {k} is not tensorized for {target}"
    inputs = s8_inputs(m, n, k, seed)
    run = run_here(cpu.emit(result.func, target, registry=registry), inputs)
    expected = inputs["A"].astype(np.int32) @ inputs["B"].astype(np.int32)
    np.testing.assert_array_equal(run.outputs["C"], expected)
    return run


@pytest.mark.parametrize("target", ["arm", "x86"])
@pytest.mark.parametrize("m", ROWS)
def test_skinny_gemm_is_exact(target, m, registry) -> None:
    _run(target, m, 96, 128, registry, seed=m)


@pytest.mark.parametrize("target", ["arm", "x86"])
def test_one_row_gets_a_tile_of_one_row(target, registry) -> None:
    description = registry.cpu(target)
    intrinsic = auto_tensorize(gemm_int8(1, 256, 256), target,
                               registry=registry).tensorized[0].intrinsic
    # 1 x 256 x 256 in the intrinsic's units: one row, the columns in vectors, k in steps.
    lanes, depth = registry.get(intrinsic).extents[-2:]
    tiling = choose_tiling(1, 256 // lanes, 256 // depth, description, registry.get(intrinsic))
    assert tiling.rows == 1


def test_one_row_executes_fewer_instructions_than_two(registry) -> None:
    # A unit row is fused into the columns, so B's packing stage names its iterators apart
    # from the block's; walked byte by byte it cost 10 times the two-row kernel.
    one = _run("arm", 1, 256, 256, registry).instructions
    two = _run("arm", 2, 256, 256, registry).instructions
    assert one < two
