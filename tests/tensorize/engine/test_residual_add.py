"""A residual block's end on the NPU (issue 28): an integer GEMM, its requantisation, the
QLinearAdd of a skip tensor and ReLU as one program. The engine loads the skip tile beside the
accumulator tile with the widening load (``npu_load_acc_i8``), the add's parameter rows with
``npu_load_acc_qadd``, and puts the add on ``npu_vec_qadd``; the result is exact against the
ONNX path's requantisation and QLinearAdd (``ir.onnx.quant.requantize``, ``ir.onnx.host_ops.
qlinear_add``, both exact against onnxruntime). Without the instruction or the load, the add
stays on the host, still exact."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import numpy as np
import pytest

from intrinsics import default_registry
from ir import script as T
from ir.onnx.host_ops import qlinear_add
from ir.onnx.kernels import Requantisation, ResidualAdd, matmul_requantised_add, qadd_parameters
from ir.onnx.quant import QParams, requantize
from simulator import Load, MachineConfig, QAdd, expanded, load_machine
from targets import host, npu
from tensorize.engine import auto_tensorize

ROOT = Path(__file__).resolve().parents[3]
EXAMPLE = ROOT / "examples" / "script" / "gemm_requant_add_relu_int8.py"
BUILTIN = ROOT / "intrinsics" / "npu.yaml"
MACHINE = load_machine()
REGISTRY = default_registry()
ON_CHIP = {"matmul": "npu_gemm", "biased": "npu_vec_add_bcast",
           "requantised": "npu_vec_requant_row", "added": "npu_vec_qadd",
           "narrowed": "npu_store_acc_i8"}
# (scale, zero point) of the layer's output a, the skip input b and the sum y.
A_Q, B_Q, Y_Q = (0.05, 3), (0.03, -9), (0.06, -5)


def _inputs(m: int, k: int, n: int, seed: int) -> dict[str, np.ndarray]:
    """Operands in a layer's ranges: the accumulator brought near int8 by the scales (some
    saturate), a skip tensor over all of int8, the add's parameters as the pack makes them."""
    rng = np.random.default_rng(seed)
    return {"A": rng.integers(-128, 128, (m, k)).astype(np.int8),
            "B": rng.integers(-128, 128, (k, n)).astype(np.int8),
            "Bias": rng.integers(-4000, 4001, n).astype(np.int32),
            "Scale": rng.uniform(2e-4, 2e-3, n).astype(np.float32),
            "Skip": rng.integers(-128, 128, (m, n)).astype(np.int8),
            "AddParams": qadd_parameters(*A_Q, *B_Q, *Y_Q, n)}


def _onnx_path(inputs: dict[str, np.ndarray], relu: bool) -> np.ndarray:
    """What the ONNX path's host operators give: requantise, QLinearAdd, ReLU."""
    acc = inputs["A"].astype(np.int32) @ inputs["B"].astype(np.int32) + inputs["Bias"]
    layer = requantize(acc, inputs["Scale"], np.int8(A_Q[1]))
    add = qlinear_add(*[QParams(np.float32(s), np.array(z, np.int8)) for s, z in
                        (A_Q, B_Q, Y_Q)])
    out = add([layer, inputs["Skip"]])
    return np.maximum(out, np.int8(Y_Q[1])) if relu else out


def _run(func, inputs, config: MachineConfig, registry=REGISTRY):
    result = auto_tensorize(func, "npu", registry=registry, config=config)
    run = npu.run(result.func, inputs, config, lookup=registry.get)
    return {b.block: b.intrinsic for b in result.blocks}, run


@pytest.mark.parametrize("m, k, n, relu", [(64, 48, 32, True), (32, 32, 48, False)])
def test_the_whole_residual_block_is_one_npu_program_exactly(m, k, n, relu):
    func = matmul_requantised_add(m, k, n, Requantisation(A_Q[1]), ResidualAdd(Y_Q[1], relu))
    inputs = _inputs(m, k, n, seed=m + n)
    used, run = _run(func, inputs, MACHINE)
    assert used == ON_CHIP
    assert [s.on_npu for s in run.stages] == [True]
    tiles = (m // 16) * (n // 16)
    assert run.calls["npu_load_acc_i8"] == run.calls["npu_vec_qadd"] == tiles
    program = expanded(run.stages[0].compiled.program)
    widened = [i for i in program if isinstance(i, Load) and i.widen]
    assert sum(i.rows * i.cols for i in widened) == m * n  # the skip tensor once, as int8
    bounds = {(i.lo, i.hi) for i in program if isinstance(i, QAdd)}
    assert bounds == {(Y_Q[1] if relu else -128, 127)}  # ReLU: the lower bound is y_zp
    got = run.outputs["narrowed"]
    np.testing.assert_array_equal(got, _onnx_path(inputs, relu))
    assert len(np.unique(got)) > 50  # not all saturated: the rounding is what is compared
    np.testing.assert_array_equal(host.run(func, list(inputs.values()))["narrowed"], got)


def test_the_example_runs_exactly_against_its_reference():
    spec = importlib.util.spec_from_file_location("example", EXAMPLE)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    func = T.load_file(EXAMPLE)["gemm_requant_add_relu_int8"]
    rng = np.random.default_rng(5)
    inputs = _inputs(128, 96, 64, seed=5)
    # The example's own parameter rows: a different ratio and offset per column.
    inputs["AddParams"] = np.stack([rng.uniform(0.3, 1.5, 64), rng.uniform(0.3, 1.5, 64),
                                    rng.uniform(-4, 4, 64)]).astype(np.float32)
    arrays = dict(zip(["A", "B", "bias", "scale", "skip", "params"], inputs.values()))
    used, run = _run(func, arrays, MACHINE)
    assert used["added"] == "npu_vec_qadd" and [s.on_npu for s in run.stages] == [True]
    np.testing.assert_array_equal(run.outputs["out"], module.reference(*arrays.values()))


def test_a_machine_without_the_float_stage_adds_on_the_host():
    lacking = MachineConfig.from_dict({k: v for k, v in MACHINE.to_dict().items()
                                       if k != "requant"})
    func = matmul_requantised_add(32, 32, 32, Requantisation(A_Q[1]), ResidualAdd(Y_Q[1], True))
    inputs = _inputs(32, 32, 32, seed=7)
    used, run = _run(func, inputs, lacking)
    assert used["biased"] == "npu_vec_add_bcast" and used["added"] is None
    assert "npu_vec_qadd" not in run.calls and "npu_load_acc_i8" not in run.calls
    np.testing.assert_array_equal(run.outputs["narrowed"], _onnx_path(inputs, True))


def test_a_family_without_the_widening_load_adds_on_the_host(tmp_path):
    text = BUILTIN.read_text()
    start = text.index("  - name: npu_load_acc_i8")
    end = text.index("  # vec.qadd's three float32 parameter rows")
    path = tmp_path / "npu.yaml"
    path.write_text(text[:start] + text[end:])
    registry = npu.machine_registry(path)
    func = matmul_requantised_add(32, 32, 32, Requantisation(A_Q[1]), ResidualAdd(Y_Q[1], True))
    inputs = _inputs(32, 32, 32, seed=8)
    used, run = _run(func, inputs, MACHINE, registry)
    assert used["requantised"] == "npu_vec_requant_row" and used["added"] is None
    assert "npu_vec_qadd" not in run.calls
    np.testing.assert_array_equal(run.outputs["narrowed"], _onnx_path(inputs, True))


def test_the_builder_refuses_a_layer_whose_output_is_not_int8():
    with pytest.raises(ValueError, match=r"requires the layer's output in int8, got bounds "
                       r"\[0, 255\]"):
        matmul_requantised_add(16, 16, 16, Requantisation(0, 0, 255), ResidualAdd(0))
