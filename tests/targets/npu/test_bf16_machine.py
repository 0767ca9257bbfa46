"""The bf16 NPU (examples/machines/npu_bf16.yaml): a GEMM of bfloat16 inputs tensorizes onto
its bf16 x bf16 -> fp32 array, compiles, simulates, and equals the hardware-order reference
bit for bit (k ascending across and within the 16-deep tiles, one rounding per add), and the
float64 product within the stated bound of a recursive sum."""

from __future__ import annotations

import json
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest

import ir
from intrinsics.oracle import hardware_gemm
from ir import te
from ir.errors import IntrinsicSpecError
from simulator import Gemm, Load, Mem
from targets import npu
from targets.npu.selfcheck import SimulatorChecker
from targets.npu.tokens import accesses
from tensorize.cli import main
from tensorize.engine import auto_tensorize

MACHINE = Path(__file__).resolve().parents[3] / "examples" / "machines" / "npu_bf16.yaml"


def gemm_bf16(m: int, n: int, k: int) -> ir.PrimFunc:
    A = te.placeholder((m, k), "bfloat16", "A")
    B = te.placeholder((k, n), "bfloat16", "B")
    rk = te.reduce_axis(k, "k")
    C = te.compute((m, n), lambda i, j: te.sum(
        ir.Cast(ir.dtype("float32"), A[i, rk]) * ir.Cast(ir.dtype("float32"), B[rk, j]),
        axis=rk), "C")
    return te.create_prim_func([A, B, C], "gemm_bf16")


@pytest.fixture(scope="module")
def bf16_npu():
    return npu.load_machine(MACHINE), npu.machine_registry(MACHINE)


def test_the_machine_states_its_datapath_and_the_family_its_accumulation(bf16_npu):
    config, registry = bf16_npu
    assert config.is_float and config.datapath.order == "ascending"
    rule = registry.get("bf16_gemm").accumulation
    assert (rule.order, rule.rounding, rule.denormals) == (
        config.datapath.order, config.datapath.rounding, config.datapath.denormals)


@pytest.mark.parametrize(("m", "n", "k"), [(32, 16, 48), (17, 15, 40)])
def test_bf16_gemm_runs_exactly_in_hardware_order(bf16_npu, m, n, k):
    config, registry = bf16_npu
    rng = np.random.default_rng(m * n + k)
    a = (rng.standard_normal((m, k)) * np.exp2(rng.integers(-8, 8, (m, k))))
    b = (rng.standard_normal((k, n)) * np.exp2(rng.integers(-8, 8, (k, n))))
    a, b = a.astype(ml_dtypes.bfloat16), b.astype(ml_dtypes.bfloat16)
    result = auto_tensorize(gemm_bf16(m, n, k), "npu", registry=registry, config=config)
    assert [o.intrinsic for o in result.blocks if o.intrinsic] == ["bf16_gemm"]
    run = npu.run(result.func, {"A": a, "B": b}, config, lookup=registry.get)
    out = run.outputs["C"]
    gemms = [i for s in run.stages if s.compiled for i in s.compiled.program
             if isinstance(i, Gemm)]
    assert gemms and all(g.k == 16 for g in gemms)

    rule = registry.get("bf16_gemm").accumulation
    expected = hardware_gemm(a, b, 16, rule)
    np.testing.assert_array_equal(out.view(np.uint32), expected.view(np.uint32))
    # docs/intrinsics.md, "Float accumulation": gamma_K * sum |x * y| of float64's exact sum.
    wide_a, wide_b = a.astype(np.float64), b.astype(np.float64)
    u = 2.0 ** -24
    gamma = k * u / (1 - k * u)
    bound = gamma * (np.abs(wide_a) @ np.abs(wide_b))
    assert np.all(np.abs(out - wide_a @ wide_b) <= bound)


def test_token_hazards_span_the_bf16_bytes_a_load_reads(bf16_npu):
    config, _ = bf16_npu
    load = Load(Mem.INP, sram=0, dram=0, rows=1, cols=64, stride=128)
    # 64 bf16 elements are 128 bytes, two 64-byte DRAM chunks; read as int8 they would be one.
    (read,), _ = accesses(load, config.datapath)
    assert read[1:] == (0, 2)
    (read,), _ = accesses(load)
    assert read[1:] == (0, 1)


def test_the_simulator_self_check_is_bit_exact_against_the_stated_order(bf16_npu, capsys):
    assert main(["intrinsics", "validate", str(MACHINE)]) == 0
    assert "bf16_gemm: simulator: ok (max error 0)" in capsys.readouterr().out
    # One bit off in one element is a mismatch there: the stated order leaves no tolerance.
    config, registry = bf16_npu
    gemm = registry.get("bf16_gemm")
    checker = SimulatorChecker(list(registry.for_target("npu")), config)
    want = np.ones((16, 16), np.float32)
    got = want.copy()
    got.view(np.uint32)[3, 5] += 1
    result = checker.compare_bits(gemm, got, want)
    assert (result.status, result.where, result.max_error) == ("mismatch", (3, 5), 2.0 ** -23)


def test_a_family_stating_another_order_than_its_array_is_refused_at_its_line(tmp_path):
    wrong = tmp_path / "npu_bf16.yaml"
    text = MACHINE.read_text().replace("accumulation: {order: ascending",
                                       "accumulation: {order: descending")
    wrong.write_text(text)
    with pytest.raises(IntrinsicSpecError) as info:
        npu.machine_registry(wrong)
    (finding,) = info.value.findings
    assert "requires accumulation: {order: ascending, rounding: nearest_even, denormals: " \
        "keep}, got {order: descending" in finding.message
    assert finding.loc.line == 1 + text[:text.index("bf16_gemm\n")].count("\n")


@pytest.mark.slow
def test_the_documented_bf16_gemm_figure(capsys):
    # docs/simulator.md, "A float array": the 256^3 example on this machine.
    script = MACHINE.parents[1] / "script" / "gemm_bf16.py"
    assert main(["run", str(script), "--target", "npu", "--machine", str(MACHINE),
                 "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["ok"]
    run = report["npu"]
    assert (run["machine"], run["cycles"], run["mac_utilisation"]) == (
        "npu-16x16-bf16", 71730, 0.9136)
