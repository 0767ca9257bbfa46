"""A quantised layer's epilogue (bias, requantisation, ReLU, narrowing) fused onto the NPU:
the engine matches the requantisation block with ``npu_vec_requant`` (one float32 scale) or
``npu_vec_requant_row`` (a row of per-channel scales), and the run is exact against
onnxruntime's requantisation (``ir.onnx.quant.requantize``) and the example's numpy reference.
A machine without the requantisation stage gets no ``vec.requant``: the block stays on the
host, still exact."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import numpy as np
import pytest

from intrinsics import default_registry, load_family
from intrinsics.oracle import numpy_model
from ir import script as T
from ir.errors import ExecutionError, IntrinsicSpecError
from ir.onnx.quant import requantize
from simulator import MachineConfig, load_machine
from targets import host, npu
from tensorize.engine import auto_tensorize
from tensorize.engine.npu_schedule import choose_tiling
from tensorize.engine.npu_traffic import GemmShape

ROOT = Path(__file__).resolve().parents[3]
EXAMPLE = ROOT / "examples" / "script" / "gemm_requant_int8.py"
BUILTIN = ROOT / "intrinsics" / "npu.yaml"
MACHINE = load_machine()
REGISTRY = default_registry()


def _example():
    spec = importlib.util.spec_from_file_location("gemm_requant_int8", EXAMPLE)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return T.load_file(EXAMPLE)["gemm_requant_int8"], module


def _inputs(seed: int) -> dict[str, np.ndarray]:
    """Operands in a layer's ranges: full int8, a bias of a few thousand, scales that bring
    the accumulator near the int8 range (some saturate), four of them powers of two (ties)."""
    rng = np.random.default_rng(seed)
    scale = rng.uniform(2e-4, 2e-3, 64).astype(np.float32)
    scale[:4] = (2.0 ** -8, 2.0 ** -9, 2.0 ** -10, 2.0 ** -1)
    return {"A": rng.integers(-128, 128, (128, 96)).astype(np.int8),
            "B": rng.integers(-128, 128, (96, 64)).astype(np.int8),
            "bias": rng.integers(-4000, 4001, 64).astype(np.int32), "scale": scale}


def _run(func, inputs, config: MachineConfig):
    result = auto_tensorize(func, "npu", registry=REGISTRY, config=config)
    run = npu.run(result.func, inputs, config, lookup=REGISTRY.get)
    return {b.block: b.intrinsic for b in result.blocks}, run


@pytest.mark.parametrize("name", ["npu_vec_requant", "npu_vec_requant_row"])
def test_the_described_semantics_is_onnxruntimes_requantisation(name):
    # The YAML semantics (the kernel language, evaluated by the independent numpy model) on
    # accumulators of every size, ties (scales 1/2, 1/4) and both ends of int32.
    rng = np.random.default_rng(11)
    d = rng.integers(-(1 << 31), 1 << 31, (16, 16)).astype(np.int32)
    d[:8] = rng.integers(-600, 601, (8, 16))
    d[0, :2] = (-(1 << 31), (1 << 31) - 1)
    scale = rng.uniform(1e-3, 0.4, 16).astype(np.float32)
    scale[:2] = (0.5, 0.25)
    inputs = {"D": d, "zp": np.int32(-7), "lo": np.int32(-128), "hi": np.int32(127)}
    if name == "npu_vec_requant":
        scale = scale[:1]
        inputs["scale"] = scale.reshape(())
    else:
        inputs["S"] = scale
    got = numpy_model(REGISTRY.get(name), inputs)
    np.testing.assert_array_equal(got, requantize(d, scale, np.int8(-7)).astype(np.int32))


@pytest.mark.parametrize("seed", [0, 1])
def test_the_example_runs_its_whole_epilogue_on_the_npu_exactly(seed):
    func, module = _example()
    inputs = _inputs(seed)
    used, run = _run(func, inputs, MACHINE)
    assert used == {"acc": "npu_gemm", "biased": "npu_vec_add_bcast",
                    "quant": "npu_vec_requant_row", "relu": "npu_vec_max_imm",
                    "out": "npu_store_acc_i8"}
    assert [s.on_npu for s in run.stages] == [True]
    assert run.calls["npu_vec_requant_row"] == (128 // 16) * (64 // 16)
    # One scale row per column block of every accumulator tile the schedule takes.
    tiling = choose_tiling(GemmShape(128, 64, 96, 16, 16, 16), MACHINE)
    assert run.calls["npu_load_acc_row_f32"] == 128 // tiling.rows * (64 // 16)
    got = run.outputs["out"]
    np.testing.assert_array_equal(got, module.reference(*inputs.values()))
    # The same through the ONNX path's requantisation, itself exact against onnxruntime.
    acc = inputs["A"].astype(np.int32) @ inputs["B"].astype(np.int32) + inputs["bias"]
    want = np.maximum(requantize(acc, inputs["scale"], np.int8(module.ZERO_POINT)),
                      module.ZERO_POINT)
    np.testing.assert_array_equal(got, want)
    assert len(np.unique(got)) > 100  # not all saturated: the rounding is what is compared
    # The kernel as written (the language's float32 arithmetic) computes the same.
    np.testing.assert_array_equal(host.run(func, list(inputs.values()))["out"], got)


@T.prim_func
def requant_per_tensor(A: T.Buffer((64, 32), "int8"), B: T.Buffer((32, 48), "int8"),
                       out: T.Buffer((64, 48), "int8")):
    acc = T.alloc_buffer((64, 48), "int32")
    quant = T.alloc_buffer((64, 48), "int32")
    for i, j, k in T.grid(64, 48, 32):
        with T.block("acc"):
            vi, vj, vk = T.axis.remap("SSR", [i, j, k])
            with T.init():
                acc[vi, vj] = 0
            acc[vi, vj] += T.cast(A[vi, vk], "int32") * T.cast(B[vk, vj], "int32")
    for i, j in T.grid(64, 48):
        with T.block("quant"):
            vi, vj = T.axis.remap("SS", [i, j])
            quant[vi, vj] = T.min(T.max(T.cast(
                T.min(T.max(T.cast(acc[vi, vj], "float32") * T.float32(0.0078125),
                            T.float32(-4194304.0)), T.float32(4194304.0))
                + T.float32(12582912.0) - T.float32(12582912.0), "int32") + -9, -128), 127)
    for i, j in T.grid(64, 48):
        with T.block("out"):
            vi, vj = T.axis.remap("SS", [i, j])
            out[vi, vj] = T.cast(T.min(T.max(quant[vi, vj], -128), 127), "int8")


def test_a_constant_scale_becomes_the_immediate_of_vec_requant():
    rng = np.random.default_rng(3)
    inputs = {"A": rng.integers(-128, 128, (64, 32)).astype(np.int8),
              "B": rng.integers(-128, 128, (32, 48)).astype(np.int8)}
    used, run = _run(requant_per_tensor, inputs, MACHINE)
    assert used["quant"] == "npu_vec_requant" and [s.on_npu for s in run.stages] == [True]
    assert "scale=0x3c000000" in run.stages[0].compiled.assembly  # 2**-7 as float32 bits
    acc = inputs["A"].astype(np.int32) @ inputs["B"].astype(np.int32)
    # 2**-7 makes every odd multiple of 64 a tie; onnxruntime rounds those to even.
    assert (acc % 128 == 64).any()
    want = requantize(acc, np.float32(2.0 ** -7), np.int8(-9))
    np.testing.assert_array_equal(run.outputs["out"], want)


def test_a_machine_without_the_stage_keeps_the_requantisation_on_the_host():
    func, module = _example()
    lacking = MachineConfig.from_dict({k: v for k, v in MACHINE.to_dict().items()
                                       if k != "requant"})
    inputs = _inputs(2)
    used, run = _run(func, inputs, lacking)
    assert used["biased"] == "npu_vec_add_bcast" and used["quant"] is None
    assert "npu_vec_requant_row" not in run.calls
    assert not any("vec.requant" in s.compiled.assembly for s in run.stages if s.on_npu)
    np.testing.assert_array_equal(run.outputs["out"], module.reference(*inputs.values()))
    want = host.run(func, list(inputs.values()))["out"]
    np.testing.assert_array_equal(run.outputs["out"], want)


def test_a_family_whose_machine_lacks_the_stage_is_refused_at_the_intrinsic(tmp_path):
    text = BUILTIN.read_text()
    start = text.index("  requant:")
    end = text.index("  dram:")
    path = tmp_path / "npu.yaml"
    path.write_text(text[:start] + text[end:])
    with pytest.raises(IntrinsicSpecError) as info:
        load_family(path)
    findings = [(f.loc.line, f.message) for f in info.value.findings]
    lines = path.read_text().splitlines()
    assert findings == [
        (n + 1, f"intrinsic {name} emits {mnemonic}, which requires a machine with "
                "machine.requant, and npu-16x16 has none")
        for name, mnemonic in (("npu_vec_requant", "vec.requant"),
                               ("npu_vec_requant_row", "vec.requant"),
                               ("npu_vec_qadd", "vec.qadd"))
        for n, line in enumerate(lines) if line.strip() == f"- name: {name}"]


_CALL = '''
@T.prim_func
def requant_call(C: T.Buffer((16, 16), "int32"), D: T.Buffer((16, 16), "int32")):
    acc = T.alloc_buffer((16, 16), "int32", scope="npu.acc")
    T.call_intrinsic("npu_load_acc", acc[0:16, 0:16], C[0:16, 0:16])
    for k in range(2):
        T.call_intrinsic("npu_vec_requant", acc[0:16, 0:16], SCALE, 0, -128, 127)
    T.call_intrinsic("npu_store_acc", D[0:16, 0:16], acc[0:16, 0:16])
'''


def test_a_float_immediate_is_its_bits_and_must_be_a_constant():
    c = np.arange(-128, 128, dtype=np.int32).reshape(16, 16) * 8
    run = npu.run(T.parse(_CALL.replace("SCALE", "T.float32(0.25)")), {"C": c}, MACHINE,
                  lookup=REGISTRY.get)
    once = requantize(c, np.float32(0.25), np.int8(0)).astype(np.int32)
    want = requantize(once, np.float32(0.25), np.int8(0)).astype(np.int32)
    np.testing.assert_array_equal(run.outputs["D"], want)
    with pytest.raises(ExecutionError, match=r"scalar operand scale of float32 requires a "
                       r"float32 constant \(an NPU immediate holds its bits\), got "):
        npu.run(T.parse(_CALL.replace("SCALE", 'T.cast(k, "float32")')), {"C": c}, MACHINE,
                lookup=REGISTRY.get)
