"""Edge tiles: extents the register tile does not divide are padded up to whole tiles (the
edge tiles compute on zeros) and only the valid part of the output is stored, so no extent
needs to divide. Sizes around the tile, run under the emulator, exact against numpy."""

import numpy as np
import pytest

from intrinsics import default_registry
from targets import cpu
from tensorize.engine import auto_tensorize
from tensorize.engine.cpu_schedule import CpuTiling, choose_tiling
from tests.tensorize.schedule.kernels import gemm_int8

SHAPES = [(15, 16, 17), (16, 31, 33), (17, 33, 65), (31, 17, 15), (33, 15, 16),
          (100, 37, 50), (1, 5, 3)]


def _inputs(m: int, n: int, k: int, seed: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {"A": rng.integers(-128, 128, (m, k), dtype=np.int8),
            "B": rng.integers(-128, 128, (k, n), dtype=np.int8)}


@pytest.mark.parametrize("shape", SHAPES)
def test_gemm_of_any_size_runs_exactly_under_the_emulator(shape, registry) -> None:
    m, n, k = shape
    result = auto_tensorize(gemm_int8(m, n, k), "arm", registry=registry)
    assert [b.intrinsic for b in result.tensorized] == ["arm_sdot_lane"]
    inputs = _inputs(m, n, k)
    run = cpu.run(cpu.emit(result.func, "arm", registry=registry), inputs)
    assert run.engine == "unicorn" and run.counted["sdot"] > 0
    expected = inputs["A"].astype(np.int32) @ inputs["B"].astype(np.int32)
    np.testing.assert_array_equal(run.outputs["C"], expected)


def test_the_tile_need_not_divide_the_rows() -> None:
    arm = default_registry().cpu("arm")
    sdot = default_registry().get("arm_sdot_lane")
    # 17 rows, 9 column vectors (33 columns padded to 36), 17 k steps: 5 tiles of 4 rows
    # (20) cost fewer instructions than 17 one-row tiles, the only tile that divides 17.
    assert choose_tiling(17, 9, 17, arm, sdot) == CpuTiling(4, 3)


def test_edge_tiles_compute_on_padding_and_store_only_the_valid_part(registry) -> None:
    result = auto_tensorize(gemm_int8(17, 33, 65), "arm", registry=registry)
    text = str(result.func)
    # The output is computed into a buffer of whole tiles (20 rows of 36 columns) and only
    # its 17 x 33 valid part is copied back.
    assert 'T.alloc_buffer((20, 36), "int32")' in text
    assert "for i, j in T.grid(17, 33):" in text
    run = cpu.run(cpu.emit(result.func, "arm", registry=registry), _inputs(17, 33, 65, seed=1))
    assert run.counted == {"sdot": 20 * 36 * 68 // 16}
