"""``tensorize run``'s exact float check (tensorize/hardware_order.py): a kernel tensorized
onto a float intrinsic that states its ``accumulation`` is checked bit for bit against the
hardware-order reference of its GEMMs and within the float64 bound; a wrong model fails
with the first differing element; a kernel the reference cannot follow keeps the tolerance
check and says why. The GEMM split itself is checked against numpy on integer-valued
inputs, whose sums are exact in float64 in any order."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest

import ir
from intrinsics import load_registry
from ir import script as T
from ir import te
from targets.cpu.host import missing_features
from tensorize.cli import main
from tensorize.hardware_order import Unfollowable, buffer_values, split_gemms
from tensorize.kernel_file import read_kernel_file
from tensorize.runners import RunOptions, make_context, run_kernel
from tensorize.runners.report import RunReport
from tensorize.runners.runner import reduction_blocks
from tensorize.validate import HardwareOrder
from tests.targets import float_examples as fx
from tests.tensorize.schedule.kernels import bf16_inputs, gemm_bf16

ROOT = Path(__file__).resolve().parents[2]
FP16FML = "+neon,+dotprod,+fp16fml"


def gemm_fp16(m: int, n: int, k: int, epilogue: bool = False) -> ir.PrimFunc:
    """C = A @ B in float16 accumulated in float32; with ``epilogue``, D = 2 * C after it."""
    A = te.placeholder((m, k), "float16", "A")
    B = te.placeholder((k, n), "float16", "B")
    rk = te.reduce_axis(k, "k")
    C = te.compute((m, n), lambda i, j: te.sum(
        ir.cast("float32", A[i, rk]) * ir.cast("float32", B[rk, j]), axis=[rk]), "C")
    if not epilogue:
        return te.create_prim_func([A, B, C], "gemm_fp16")
    D = te.compute((m, n), lambda i, j: C[i, j] * ir.const(2.0, "float32"), "D")
    return te.create_prim_func([A, B, D], "gemm_fp16_scaled")


def fp16_inputs(m: int, n: int, k: int) -> dict[str, np.ndarray]:
    """Standard normal float16 A and B of :func:`gemm_fp16`."""
    rng = np.random.default_rng(1)
    return {"A": rng.standard_normal((m, k)).astype(np.float16),
            "B": rng.standard_normal((k, n)).astype(np.float16)}


def _run(func: ir.PrimFunc, registry, target: str, inputs, features: str | None = None
         ) -> RunReport:
    ctx = make_context(registry, target, features=features)
    outcome = run_kernel(ctx, func, inputs, RunOptions(require_tensorized=True))
    assert not outcome.refusal, outcome.refusal
    return outcome.report


def _run_line(report: RunReport) -> tuple[bool, str]:
    [step] = [s for s in report.steps if s.name == "run"]
    return step.status == "ok", step.detail


def test_a_bf16_gemm_on_x86_is_exact_against_the_hardware_order(registry) -> None:
    x86 = registry.cpu("x86")
    if missing_features(x86, frozenset({"avx512bf16"})):
        pytest.skip("the host lacks AVX-512 BF16 (vdpbf16ps)")
    report = _run(gemm_bf16(33, 40, 24), registry, "x86", bf16_inputs(33, 40, 24))
    ok, detail = _run_line(report)
    assert ok, detail
    assert re.search(r"exact against the hardware-order reference \(descending, round to "
                     r"nearest even, flush\) of x86_vdpbf16ps; max error \S+ of the float64 "
                     r"bound \S+$", detail), detail


def test_the_documented_run_line(registry, capsys) -> None:
    """docs/intrinsics.md, "In `tensorize run`": the example's run step, its timing left
    out."""
    if missing_features(registry.cpu("x86"), frozenset({"avx512bf16"})):
        pytest.skip("the host lacks AVX-512 BF16 (vdpbf16ps)")
    docs = (ROOT / "docs" / "intrinsics.md").read_text()
    [documented] = re.findall(r"^ok   run         C on native \(\.\.\.\) exact .*$", docs,
                              re.MULTILINE)
    assert main(["run", str(ROOT / "examples" / "script" / "gemm_bf16.py"), "--target",
                 "x86"]) == 0
    [line] = [l for l in capsys.readouterr().out.splitlines() if l.startswith("ok   run ")]
    assert re.sub(r"native \([^)]*\)", "native (...)", line, count=1) == documented


def test_an_fp16_gemm_on_arm_is_exact_against_the_hardware_order(registry) -> None:
    report = _run(gemm_fp16(17, 16, 31), registry, "arm", fp16_inputs(17, 16, 31), FP16FML)
    ok, detail = _run_line(report)
    assert ok, detail
    assert "exact against the hardware-order reference (ascending, round to nearest even, " \
           "denormals kept) of arm_fmlal_lane; max error" in detail, detail


def test_a_wrong_accumulation_model_fails_the_exact_check(tmp_path) -> None:
    """FMLAL stated to round to odd (a copy of arm.yaml that says so): the emulated FMLAL
    rounds to nearest even, and the check names the first element where they part."""
    text = (ROOT / "intrinsics" / "arm.yaml").read_text()
    stated = "accumulation: {order: ascending, rounding: nearest_even, denormals: keep}"
    assert text.count(stated) == 1
    family = tmp_path / "arm.yaml"
    family.write_text(text.replace(stated, stated.replace("nearest_even", "odd")))
    report = _run(gemm_fp16(17, 16, 31), load_registry([family]), "arm",
                  fp16_inputs(17, 16, 31), FP16FML)
    ok, detail = _run_line(report)
    assert not ok
    assert re.search(r"\d+ of 272 elements differ from the hardware-order reference "
                     r"\(ascending, round to odd, denormals kept\) of arm_fmlal_lane, first "
                     r"at \(\d+, \d+\): \S+ \(0x[0-9a-f]{8}\) vs \S+ \(0x[0-9a-f]{8}\)$",
                     detail), detail


def test_an_epilogue_keeps_the_tolerance_check_and_says_why(registry) -> None:
    report = _run(gemm_fp16(8, 16, 8, epilogue=True), registry, "arm", fp16_inputs(8, 16, 8),
                  FP16FML)
    ok, detail = _run_line(report)
    assert ok, detail
    assert re.search(r"against the reference executor: max error \S+ of the largest value "
                     r"\(tolerance [^)]+\); not bit for bit: block 'C' \(arm_fmlal_lane\): "
                     r"block 'D' after it reads its output", detail), detail


def _integers(func: ir.PrimFunc, seed: int = 0) -> dict[str, np.ndarray]:
    """Small integers in every input of ``func``: products and their sums exact anywhere."""
    rng = np.random.default_rng(seed)
    return {p.name: rng.integers(-8, 9, p.shape).astype(p.dtype.numpy)
            for p in func.params[:-1]}


@pytest.mark.parametrize("kind", ["gemm", *fx.KINDS])
@pytest.mark.parametrize("suffix", ["fp16", "bf16"])
def test_the_gemms_of_a_kernel_make_its_output(kind, suffix) -> None:
    """Each example's GEMMs, multiplied in float64 and placed, give its numpy reference
    (``reference`` in the example's file) on integer-valued inputs, exactly."""
    kernel = read_kernel_file(fx.EXAMPLES / f"{kind}_{suffix}.py", None)
    func = kernel.func
    rng = np.random.default_rng(0)
    arrays = {p.name: rng.integers(-8, 9, p.shape).astype(p.dtype.numpy)
              for p in func.params[:-1]}
    [block] = reduction_blocks(func)
    split = split_gemms(func, block, buffer_values(func, arrays))
    products = [a.astype(np.float64) @ b.astype(np.float64) for a, b in zip(split.a, split.b)]
    want = kernel.reference(*(arrays[p.name] for p in func.params[:-1]))
    np.testing.assert_array_equal(split.assemble(products), want)


def test_a_missing_block_is_named() -> None:
    func = gemm_fp16(4, 4, 4)
    with pytest.raises(Unfollowable, match="gemm_fp16 has no block 'X'"):
        split_gemms(func, "X", buffer_values(func, fp16_inputs(4, 4, 4)))


def test_wider_inputs_are_not_followed() -> None:
    """float32 products are not exact in float32: the reference would not be the
    hardware's."""
    A = te.placeholder((4, 4), "float32", "A")
    B = te.placeholder((4, 4), "float32", "B")
    rk = te.reduce_axis(4, "k")
    C = te.compute((4, 4), lambda i, j: te.sum(
        ir.cast("float64", A[i, rk]) * ir.cast("float64", B[rk, j]), axis=[rk]), "C")
    func = te.create_prim_func([A, B, C], "gemm_f32")
    arrays = {"A": np.ones((4, 4), np.float32), "B": np.ones((4, 4), np.float32)}
    with pytest.raises(Unfollowable, match=r"A \(float32\) has more than 12 significant"):
        split_gemms(func, "C", buffer_values(func, arrays))


ADD_TO_C = """
@T.prim_func
def add_to_c(A: T.Buffer((4, 4), "float16"), B: T.Buffer((4, 4), "float16"),
             C: T.Buffer((4, 4), "float32")):
    for i, j, k in T.grid(4, 4, 4):
        with T.block("C"):
            vi, vj, vk = T.axis.remap("SSR", [i, j, k])
            C[vi, vj] += T.cast(A[vi, vk], "float32") * T.cast(B[vk, vj], "float32")
"""


def test_a_block_not_from_zero_is_not_followed() -> None:
    func = T.parse(ADD_TO_C)
    with pytest.raises(Unfollowable, match="it does not start its output from zero"):
        split_gemms(func, "C", buffer_values(func, fp16_inputs(4, 4, 4)))


SUM_ONLY = """
@T.prim_func
def sum_only(A: T.Buffer((4, 4), "float16"), C: T.Buffer((4,), "float32")):
    for i, k in T.grid(4, 4):
        with T.block("C"):
            vi, vk = T.axis.remap("SR", [i, k])
            with T.init():
                C[vi] = T.float32(0)
            C[vi] += T.cast(A[vi, vk], "float32")
"""

NARROW_PRODUCT = """
@T.prim_func
def narrow_product(A: T.Buffer((4, 4), "float16"), B: T.Buffer((4, 4), "float16"),
                   C: T.Buffer((4, 4), "float32")):
    for i, j, k in T.grid(4, 4, 4):
        with T.block("C"):
            vi, vj, vk = T.axis.remap("SSR", [i, j, k])
            with T.init():
                C[vi, vj] = T.float32(0)
            C[vi, vj] += T.cast(A[vi, vk] * B[vk, vj], "float32")
"""


@pytest.mark.parametrize("source, inputs, reason", [
    (SUM_ONLY, ("A",), "its body is no product added to its output"),
    (NARROW_PRODUCT, ("A", "B"), "its body is no product added to its output")])
def test_a_block_that_is_no_widened_product_is_not_followed(source, inputs, reason) -> None:
    func = T.parse(source)
    arrays = {name: np.ones((4, 4), np.float16) for name in inputs}
    with pytest.raises(Unfollowable, match=reason):
        split_gemms(func, "C", buffer_values(func, arrays))


def _order(values: np.ndarray) -> HardwareOrder:
    """A hardware-order expectation of ``values``, exact in float64, bound 1e-3."""
    return HardwareOrder(values, values.astype(np.float64), np.full(values.shape, 1e-3),
                         "ascending, round to nearest even, denormals kept", "fmla")


def test_a_bit_pattern_difference_is_a_mismatch() -> None:
    want = np.array([1.0, -0.0], np.float32)
    ok, detail = _order(want).check(np.array([1.0, 0.0], np.float32))
    assert not ok
    assert detail == ("1 of 2 elements differ from the hardware-order reference (ascending, "
                      "round to nearest even, denormals kept) of fmla, first at (1,): 0 "
                      "(0x00000000) vs -0 (0x80000000)")


def test_equal_bits_outside_the_float64_bound_are_a_mismatch() -> None:
    want = np.array([1.0, 2.0], np.float32)
    order = HardwareOrder(want, np.array([1.0, 2.5]), np.full(2, 1e-3), "ascending", "fmla")
    ok, detail = order.check(want.copy())
    assert not ok and "1 elements lie outside the float64 bound, first at (1,)" in detail


def test_another_dtype_is_a_mismatch() -> None:
    ok, detail = _order(np.zeros(2, np.float32)).check(np.zeros(2, np.float64))
    assert not ok and detail.startswith("float64[2] but the hardware-order reference")
