"""AArch64 with FEAT_FHM: float16 x float16 -> float32 GEMMs tensorized onto FMLAL (by
element), run under unicorn and under qemu-user and compared bit for bit with a reference
that computes as the Arm ARM states (``arm_fmlal_lane``'s ``accumulation``: each exact product
added with one rounding to nearest even, in ascending k, denormals kept), and with float64
within the stated bound; counted under unicorn, which executes FMLAL."""

from dataclasses import replace

import numpy as np
import pytest

import ir
from intrinsics import self_check
from intrinsics.oracle import hardware_gemm, hardware_model
from intrinsics.selfcheck import OK
from ir import te
from targets import cpu
from targets.arm.qemu import qemu_binary
from targets.host.selfcheck import SemanticsChecker
from tensorize.engine import auto_tensorize
from tensorize.match import match_block
from tests.default_run import first_by_default

FEATURES = "+neon,+dotprod,+fp16fml"
needs_qemu = pytest.mark.skipif(qemu_binary() is None, reason="qemu-user "
                                "(qemu-aarch64-static) is not installed: apt-get install "
                                "qemu-user-static")
# The smallest positive float16 (a denormal: 2**-24) and the largest float16 denormal.
F16_TINY = float(np.finfo(np.float16).smallest_subnormal)
F16_DENORMAL = float(np.finfo(np.float16).smallest_normal) - F16_TINY


@pytest.fixture(scope="module")
def fmlal(registry):
    return registry.get("arm_fmlal_lane")


def gemm_fp16(m: int, n: int, k: int) -> ir.PrimFunc:
    """C = A @ B, A and B float16, products accumulated in float32, one block "C"."""
    A = te.placeholder((m, k), "float16", "A")
    B = te.placeholder((k, n), "float16", "B")
    rk = te.reduce_axis(k, "k")
    C = te.compute((m, n), lambda i, j: te.sum(
        ir.cast("float32", A[i, rk]) * ir.cast("float32", B[rk, j]), axis=[rk]), "C")
    return te.create_prim_func([A, B, C], "gemm_fp16")


def fp16_inputs(m: int, n: int, k: int, seed: int = 0) -> dict[str, np.ndarray]:
    """Inputs of :func:`gemm_fp16`: normal values, with denormals (the smallest and the
    largest) and zeros of each sign in both operands."""
    rng = np.random.default_rng(seed)
    a = rng.standard_normal((m, k)).astype(np.float16)
    b = rng.standard_normal((k, n)).astype(np.float16)
    for x in (a, b):
        x.flat[:6] = np.array([F16_TINY, -F16_TINY, F16_DENORMAL, -F16_DENORMAL, 0.0, -0.0],
                              np.float16)
    return {"A": a, "B": b}


def _one_lane(c: float, a: float, b: float) -> dict[str, np.ndarray]:
    """Inputs of one call whose lane 0 computes ``c + a * b``; the other lanes zero."""
    panel = np.zeros((4, 1), np.float16)
    panel[0, 0] = b
    acc = np.zeros(4, np.float32)
    acc[0] = c
    return {"A": np.array([a], np.float16), "B": panel, "C": acc}


def _kernel(shape: tuple[int, int, int], registry) -> cpu.CpuKernel:
    result = auto_tensorize(gemm_fp16(*shape), "arm", features=FEATURES, registry=registry)
    assert [b.intrinsic for b in result.tensorized] == ["arm_fmlal_lane"]
    return cpu.emit(result.func, "arm", FEATURES, registry=registry)


def _float64_bound(inputs: dict[str, np.ndarray]) -> np.ndarray:
    """The recursive-sum bound of k roundings to nearest (half a unit in the last place
    each; the products are exact, no denormal is flushed) around the float64 product."""
    k = inputs["A"].shape[1]
    unit = float(np.finfo(np.float32).eps) / 2
    a64, b64 = (x.astype(np.float64) for x in (inputs["A"], inputs["B"]))
    return k * unit / (1 - k * unit) * (np.abs(a64) @ np.abs(b64))


def test_a_tie_rounds_to_even(fmlal) -> None:
    # 2**-12 * 2**-12 is half a unit in the last place of 1 (2**-24): a tie, to the even 1;
    # beside the odd 1 + 2**-23 the same tie goes up to 1 + 2**-22.
    assert hardware_model(fmlal, _one_lane(1.0, 2.0 ** -12, 2.0 ** -12))[0] == 1.0
    assert hardware_model(fmlal, _one_lane(1.0 + 2.0 ** -23, 2.0 ** -12, 2.0 ** -12))[0] \
        == 1.0 + 2.0 ** -22


def test_a_float16_denormal_is_kept(fmlal) -> None:
    # 2**-24 is a float16 denormal; times 2**-10 it is 2**-34, a normal float32.
    assert hardware_model(fmlal, _one_lane(0.0, F16_TINY, 2.0 ** -10))[0] == 2.0 ** -34
    flushed = replace(fmlal.accumulation, denormals="flush")
    assert hardware_model(replace(fmlal, accumulation=flushed),
                          _one_lane(0.0, F16_TINY, 2.0 ** -10))[0] == 0.0


def test_the_product_is_not_rounded_before_the_sum(fmlal) -> None:
    # (1 + 2**-10)**2 = 1 + 2**-9 + 2**-20 is exact in float32; minus 1 leaves
    # 2**-9 + 2**-20 exactly, where a float16 product would have lost the 2**-20.
    one_ulp = 1.0 + 2.0 ** -10
    assert hardware_model(fmlal, _one_lane(-1.0, one_ulp, one_ulp))[0] == 2.0 ** -9 + 2.0 ** -20


def test_the_gemm_reduction_spans_the_unit_k(fmlal, registry) -> None:
    """FMLAL's k has extent 1, yet the block's k maps onto it, so the calls accumulate the
    sum in registers; only the rows stay a loop around them (A is one row's value)."""
    best = match_block(gemm_fp16(16, 16, 32), "C", fmlal, registry)[0]
    assert dict(best.iter_map) == {"i": ("vj",), "k": ("vk",)}
    assert best.outer == ("vi",) and best.calls == 16 * 4 * 32


def test_the_self_check_bounds_the_hardware_order_by_float64(fmlal) -> None:
    [checked] = self_check([fmlal], [SemanticsChecker(trials=4)])
    assert checked.status == OK, str(checked)


@pytest.mark.parametrize("m, n, k", first_by_default(
    [(15, 16, 17), (2, 4, 3), (17, 33, 65), (33, 15, 16)], keep=2))
def test_fp16_gemm_equals_the_hardware_order_bit_for_bit(m, n, k, registry) -> None:
    inputs = fp16_inputs(m, n, k)
    run = cpu.run(_kernel((m, n, k), registry), inputs)
    assert run.engine == "unicorn"
    got = run.outputs["C"]
    want = hardware_gemm(inputs["A"], inputs["B"], 1, registry.get("arm_fmlal_lane").accumulation)
    np.testing.assert_array_equal(got.view(np.uint32), want.view(np.uint32))
    a64, b64 = (x.astype(np.float64) for x in (inputs["A"], inputs["B"]))
    assert np.all(np.abs(got - a64 @ b64) <= _float64_bound(inputs))


@needs_qemu
def test_qemu_user_computes_what_unicorn_does(registry) -> None:
    """Two emulators, two implementations of FMLAL (QEMU 5's core in unicorn, QEMU 7.2's
    qemu-user), one answer: the hardware order's."""
    shape = (9, 20, 33)
    kernel = _kernel(shape, registry)
    inputs = fp16_inputs(*shape, seed=1)
    under_qemu = replace(kernel, cpu=replace(kernel.cpu, engines=("qemu-user",)))
    run = cpu.run(under_qemu, inputs)
    assert run.engine == "qemu-user"
    want = hardware_gemm(inputs["A"], inputs["B"], 1, registry.get("arm_fmlal_lane").accumulation)
    np.testing.assert_array_equal(run.outputs["C"].view(np.uint32), want.view(np.uint32))
    np.testing.assert_array_equal(run.outputs["C"], cpu.run(kernel, inputs).outputs["C"])


def test_the_reference_rule_matters(registry) -> None:
    """The exact check has teeth: flushing the denormals, rounding to odd, or adding the k
    values two at a time from the last, gives another result on these inputs, which the
    emulated run does not equal."""
    shape = (16, 16, 64)
    inputs = fp16_inputs(*shape, seed=3)
    got = cpu.run(_kernel(shape, registry), inputs).outputs["C"]
    rule = registry.get("arm_fmlal_lane").accumulation
    for group, other in ((1, replace(rule, denormals="flush")), (1, replace(rule, rounding="odd")),
                         (2, replace(rule, order="descending"))):
        assert not np.array_equal(got, hardware_gemm(inputs["A"], inputs["B"], group, other))


def test_the_kernel_calls_fmlal_by_element_and_is_counted(registry) -> None:
    kernel = _kernel((8, 16, 32), registry)
    assert "+fp16fml" in kernel.features.split(",")
    asm = cpu.compile(kernel, "asm")
    calls = [line for line in asm.splitlines() if line.strip().startswith("fmlal")]
    # By element: the row of A is a lane of a register (Vm.H[index]).
    assert calls and all(".4s" in line and ".4h" in line and ".h[" in line for line in calls)
    # 4 MACs an FMLAL: the kernel executes at least its 1,024 FMLALs and less than one
    # instruction a MAC.
    run = cpu.run(kernel, fp16_inputs(8, 16, 32))
    assert run.counted == {"fmlal": 8 * 16 * 32 // 4}
    assert 8 * 16 * 32 // 4 < run.instructions < 8 * 16 * 32


@pytest.mark.slow  # a second under unicorn
def test_the_documented_256_cubed_count(registry) -> None:
    """docs/arm_backend.md, "fp16 on FEAT_FHM": 5,103,274 instructions, 0.304 a MAC."""
    count = cpu.count_executed(_kernel((256, 256, 256), registry), fp16_inputs(256, 256, 256))
    assert count == 5_103_274
    assert round(count / 256 ** 3, 3) == 0.304
