"""A different NPU, made by editing only its YAML: an 8x8 array with a smaller input
scratchpad runs the same kernels exactly."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest

from intrinsics import load_registry
from simulator import Gemm, load_machine
from targets import npu
from tests.targets.npu.kernels import tiled_gemm

BUILTIN = Path(__file__).resolve().parents[3] / "intrinsics" / "npu.yaml"


def small_npu_yaml() -> str:
    """npu.yaml with an 8x8 array, 1024 input rows, and every 16-wide tile made 8 wide."""
    text = BUILTIN.read_text()
    text = re.sub(r"(\n    (rows|cols): )16( )", r"\g<1>8\3", text)  # the array
    text = text.replace("inp: {rows: 2048, banks: 2}", "inp: {rows: 1024, banks: 2}")
    text = text.replace("name: npu-16x16", "name: npu-8x8")
    for old, new in (("extent: 16", "extent: 8"), ("[16, 16]", "[8, 8]"), ("shape: [16]",
                     "shape: [8]"), ("[3, 16]", "[3, 8]"), ("rows=16", "rows=8"),
                     ("cols=16", "cols=8"), ("k=16", "k=8")):
        text = text.replace(old, new)
    # Scratchpad capacities follow from rows x row bytes.
    text = text.replace("capacity: 32768", "capacity: 8192")    # inp: 1024 x 8
    text = text.replace("capacity: 16384", "capacity: 8192")    # wgt: 1024 x 8
    text = text.replace("capacity: 131072", "capacity: 65536")  # acc: 2048 x 8 x 4
    return text


@pytest.fixture(scope="module")
def small_npu(tmp_path_factory):
    path = tmp_path_factory.mktemp("npu8") / "npu.yaml"
    path.write_text(small_npu_yaml())
    return load_machine(path), load_registry([path]).get


@pytest.mark.parametrize(("m", "n", "k", "tm"), [(32, 24, 40, 16), (64, 8, 8, 64)])
def test_8x8_machine_runs_the_tiled_gemm_exactly(small_npu, m, n, k, tm):
    config, lookup = small_npu
    assert (config.array.rows, config.array.cols, config.inp.rows) == (8, 8, 1024)
    rng = np.random.default_rng(3)
    A = rng.integers(-128, 128, (m, k)).astype(np.int8)
    B = rng.integers(-128, 128, (k, n)).astype(np.int8)
    result = npu.run(tiled_gemm(m, n, k, tm, t=8), {"A": A, "B": B}, config, lookup=lookup)
    np.testing.assert_array_equal(result.outputs["C"], A.astype(np.int32) @ B.astype(np.int32))
    gemms = [i for i in result.stages[0].compiled.program if isinstance(i, Gemm)]
    assert all(g.k == 8 for g in gemms)
    assert result.stages[0].sim.mac_utilisation <= 1.0


@pytest.mark.parametrize("name", ["gemm_int8_odd", "batch_matmul_int8", "dense_int8",
                                  "conv2d_nhwc_int8", "conv2d_nchw_int8", "conv1d_int8",
                                  "matmul_requant_int8"])
def test_8x8_machine_runs_the_tensorized_suite_exactly(small_npu, tmp_path, name):
    from targets import host
    from tensorize.engine import auto_tensorize
    from tests.tensorize.engine.suite import suite
    from tests.tensorize.schedule.kernels import random_inputs

    config, lookup = small_npu
    registry = load_registry([_written(tmp_path)])
    func = suite()[name]
    result = auto_tensorize(func, "npu", registry=registry, config=config)
    assert result.tensorized
    inputs = random_inputs(func, 2)
    want = host.run(func, inputs)
    run = npu.run(result.func, {p.name: a for p, a in zip(func.params, inputs)}, config,
                  lookup=lookup)
    for key, expected in want.items():
        np.testing.assert_array_equal(run.outputs[key], expected, err_msg=key)
    assert all(g.k == 8 for s in run.stages if s.compiled for g in s.compiled.program
               if isinstance(g, Gemm))


def _written(tmp_path) -> Path:
    path = tmp_path / "npu.yaml"
    path.write_text(small_npu_yaml())
    return path
