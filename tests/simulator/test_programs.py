"""The tiled GEMM builder on several machines: exact against numpy, and fast when it should."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from simulator import MachineConfig, gemm_program, load_machine, simulate
from simulator.programs import choose_tiles
from tests.simulator.helpers import SMALL, small_machine


def operands(m: int, n: int, k: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Random int8 A and B, with rows and columns of the extremes -128 and 127."""
    rng = np.random.default_rng(seed)
    a = rng.integers(-128, 128, (m, k), dtype=np.int8)
    b = rng.integers(-128, 128, (k, n), dtype=np.int8)
    a[0, :] = -128
    b[:, 0] = -128
    a[-1, :] = 127
    b[:, -1] = 127
    return a, b


def reference(a: np.ndarray, b: np.ndarray, requant=None, relu=False) -> np.ndarray:
    """C in int64, then wrapped to int32, requantised with exact rationals, relu, narrowed."""
    c = (a.astype(np.int64) @ b.astype(np.int64) + 2 ** 31) % 2 ** 32 - 2 ** 31
    if requant:
        mult, shift = requant
        p = c * mult
        half = 1 << (shift - 1)
        c = np.sign(p) * ((np.abs(p) + half) // (1 << shift))
        c = np.clip(c, -(2 ** 31), 2 ** 31 - 1)
    if relu:
        c = np.maximum(c, 0)
    return np.clip(c, -128, 127) if requant else c


def run_gemm(m, n, k, config, seed=0, **options):
    program = gemm_program(m, n, k, config, **options)
    a, b = operands(m, n, k, seed)
    result = simulate(program.program, config, program.dram(a, b))
    expected = reference(a, b, options.get("requant"), options.get("relu", False))
    assert np.array_equal(program.output(result.dram), expected)
    return result


@pytest.mark.parametrize(("m", "n", "k"), [(1, 1, 1), (15, 16, 17), (33, 31, 32),
                                           (16, 16, 16), (64, 48, 40)])
def test_gemm_matches_numpy_on_the_builtin_machine(npu, m, n, k):
    run_gemm(m, n, k, npu)


@pytest.mark.parametrize("double_buffer", [True, False])
def test_gemm_with_partial_tiles_on_the_small_machine(small, double_buffer):
    # Several output tiles and K steps per tile, each with a ragged edge.
    result = run_gemm(37, 23, 18, small, double_buffer=double_buffer, seed=3)
    assert result.instructions["gemm"] > 20


def test_requantised_relu_output_is_int8(npu):
    run_gemm(40, 20, 50, npu, requant=(1518500250, 40), relu=True)
    run_gemm(17, 33, 16, npu, requant=(3, 4))


def test_a_long_reduction_of_extremes_wraps_int32():
    # 128 * 128 * 2**17 = 2**31 overflows int32 exactly once. A 4096 x 1 array takes it in
    # 32 steps (and its dot products of 4096 terms are past float32's exact range).
    config = small_machine(
        array={"rows": 4096, "cols": 1, "dataflow": "weight_stationary",
               "double_buffered_weights": True, "latency": 2},
        inp={"rows": 2, "banks": 2}, wgt={"rows": 8192, "banks": 2}, acc={"rows": 2, "banks": 2})
    k = 1 << 17
    program = gemm_program(1, 1, k, config)
    a = np.full((1, k), -128, np.int8)
    b = np.full((k, 1), -128, np.int8)
    result = simulate(program.program, config, program.dram(a, b))
    assert program.output(result.dram)[0, 0] == -(2 ** 31)


@given(st.integers(1, 40), st.integers(1, 40), st.integers(1, 40), st.booleans())
@settings(max_examples=15)
def test_gemm_any_shape(m, n, k, double_buffer):
    run_gemm(m, n, k, small_machine(), seed=m * n * k, double_buffer=double_buffer)


SECOND = """\
# An 8x8 machine with one-bank scratchpads and a slow DRAM.
machine:
  name: npu-8x8
  clock_mhz: 500
  array: {rows: 8, cols: 8, dataflow: weight_stationary, double_buffered_weights: false,
          latency: 1}
  inp: {rows: 512, banks: 1}
  wgt: {rows: 128, banks: 4}
  acc: {rows: 256, banks: 2}
  vector: {lanes: 4, latency: 2}
  dram: {bytes_per_cycle: 8, latency: 60}
  dma: {max_outstanding: 2, issue_cycles: 2}
  queues: {instruction_depth: 8, token_depth: 2, fetch_cycles: 2}
scopes: {}
"""


def test_second_machine_from_yaml(tmp_path):
    path = tmp_path / "npu8.yaml"
    path.write_text(SECOND)
    config = load_machine(path)
    assert (config.array.rows, config.array.cols, config.inp.banks) == (8, 8, 1)
    result = run_gemm(70, 45, 29, config, requant=(5, 3))
    assert result.config.name == "npu-8x8"


def test_non_square_output_stationary_machine_from_dict():
    data = {**SMALL, "array": {"rows": 32, "cols": 8, "dataflow": "output_stationary",
                               "double_buffered_weights": False, "latency": 3},
            "wgt": {"rows": 256, "banks": 4}, "inp": {"rows": 256, "banks": 2},
            "acc": {"rows": 512, "banks": 2}}
    config = MachineConfig.from_dict(data)
    run_gemm(65, 17, 70, config)


def test_large_double_buffered_gemm_keeps_the_array_busy(npu):
    program = gemm_program(512, 512, 512, npu)
    result = simulate(program.program, npu, np.zeros(program.dram_bytes, np.uint8),
                      functional=False)
    assert result.mac_utilisation >= 0.9
    single = gemm_program(512, 512, 512, npu, double_buffer=False)
    slow = simulate(single.program, npu, np.zeros(single.dram_bytes, np.uint8),
                    functional=False)
    assert slow.mac_utilisation < result.mac_utilisation


def test_tile_choice_keeps_load_traffic_within_half_the_bandwidth(npu):
    rows, blocks = choose_tiles(1024, 1024, npu)
    r, c = npu.array.rows, npu.array.cols
    assert (rows * r + blocks * r * c) / (blocks * rows) <= npu.dram.bytes_per_cycle / 2
    assert (rows, blocks) == (512, 2)


def test_builder_rejects_bad_arguments(small):
    with pytest.raises(ValueError, match="requires m, n, k >= 1"):
        gemm_program(0, 4, 4, small)
    with pytest.raises(ValueError, match="weight buffer of R = 4 rows"):
        gemm_program(4, 4, 4, small_machine(wgt__rows=4))
    with pytest.raises(ValueError, match="do not fit the buffers"):
        gemm_program(4, 4, 4, small, tiles=(64, 1))
