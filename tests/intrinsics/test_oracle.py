"""The numpy model of each semantics agrees with independent references.

For the NPU, the reference is the simulator's own datapath: so these tests also show that the
YAML semantics describe what the simulated hardware does.
"""

import numpy as np
import pytest

from intrinsics import Registry
from intrinsics.oracle import einsum_subscripts, numpy_model
from intrinsics.selfcheck import random_inputs
from simulator import datapath


def _wrap32(value: int) -> int:
    return (value + 2**31) % 2**32 - 2**31


def test_wmma_int8_matches_python_loops(registry: Registry) -> None:
    mma = registry.get("wmma_m32n8k16_s8_s32")
    inputs = random_inputs(mma, np.random.default_rng(1))
    a, b, c = (inputs[n].astype(int) for n in "ABC")
    want = [[_wrap32(c[i, j] + sum(a[i, k] * b[k, j] for k in range(16))) for j in range(8)]
            for i in range(32)]
    np.testing.assert_array_equal(numpy_model(mma, inputs), np.array(want))


def test_wmma_uses_einsum_subscripts_from_the_index_pattern(registry: Registry) -> None:
    mma = registry.get("wmma_m16n16k16_f16_f32")
    subscripts, loads, casts = einsum_subscripts(mma, mma.semantics.value.b)
    assert subscripts == "ac,cb->ab"
    assert [load.buffer.name for load in loads] == ["A", "B"]
    assert [c.name for c in casts] == ["float32", "float32"]


def test_wmma_f16_matches_float64_within_rounding(registry: Registry) -> None:
    mma = registry.get("wmma_m16n16k16_f16_f32")
    inputs = random_inputs(mma, np.random.default_rng(2))
    a, b, c = (inputs[n].astype(np.float64) for n in "ABC")
    np.testing.assert_allclose(numpy_model(mma, inputs), c + a @ b, rtol=0, atol=1e-5)


def test_arm_sdot_lane_matches_python_loops(registry: Registry) -> None:
    sdot = registry.get("arm_sdot_lane")
    inputs = random_inputs(sdot, np.random.default_rng(3))
    a, b, c = (inputs[n].astype(int) for n in "ABC")
    want = [_wrap32(c[i] + sum(int(a[k]) * int(b[i, k]) for k in range(4))) for i in range(4)]
    np.testing.assert_array_equal(numpy_model(sdot, inputs), want)


def test_arm_usmmla_multiplies_unsigned_by_signed(registry: Registry) -> None:
    mmla = registry.get("arm_usmmla")
    a = np.full((2, 8), 255, np.uint8)
    b = np.full((2, 8), -128, np.int8)
    c = np.zeros((2, 2), np.int32)
    got = numpy_model(mmla, {"A": a, "B": b, "C": c})
    np.testing.assert_array_equal(got, np.full((2, 2), 8 * 255 * -128))


def test_npu_gemm_reset_ignores_the_old_accumulator(registry: Registry) -> None:
    gemm = registry.get("npu_gemm_reset")
    inputs = random_inputs(gemm, np.random.default_rng(4))
    want = inputs["C"].copy()
    datapath.gemm(want, inputs["A"], inputs["B"], reset=True)
    np.testing.assert_array_equal(numpy_model(gemm, inputs), want)


def test_npu_gemm_accumulates_like_the_datapath(registry: Registry) -> None:
    gemm = registry.get("npu_gemm")
    inputs = random_inputs(gemm, np.random.default_rng(5))
    want = inputs["C"].copy()
    datapath.gemm(want, inputs["A"], inputs["B"], reset=False)
    np.testing.assert_array_equal(numpy_model(gemm, inputs), want)


@pytest.mark.parametrize("shift", [0, 1, 7, 31, 38, 62])
def test_npu_mulshift_rounds_like_the_datapath(registry: Registry, shift: int) -> None:
    op = registry.get("npu_vec_mulshift")
    rng = np.random.default_rng(shift)
    d = rng.integers(-2**31, 2**31, size=(16, 16), dtype=np.int64).astype(np.int32)
    d[0, :4] = [-2**31, 2**31 - 1, 0, -1]
    for mult in (1, -1, 1 << 30, -(2**31), 2**31 - 1, 12345):
        got = numpy_model(op, {"D": d, "mult": np.array(mult, np.int32),
                               "scale": np.array(1 << shift, np.int64)})
        np.testing.assert_array_equal(got, datapath.requantise(d, mult, shift))


def test_npu_narrowing_store_saturates_like_the_datapath(registry: Registry) -> None:
    store = registry.get("npu_store_acc_i8")
    inputs = random_inputs(store, np.random.default_rng(6))
    got = numpy_model(store, inputs)
    assert got.dtype == np.int8
    np.testing.assert_array_equal(got, datapath.narrow(inputs["src"]))


@pytest.mark.parametrize("name, reference", [
    ("npu_vec_relu", lambda d, s, r: np.maximum(d, 0)),
    ("npu_vec_min", lambda d, s, r: np.minimum(d, s)),
    ("npu_vec_add", lambda d, s, r: (d.astype(np.int64) + s).astype(np.int32)),
    ("npu_vec_max_bcast", lambda d, s, r: np.maximum(d, r[None, :])),
])
def test_npu_vector_ops(registry: Registry, name: str, reference: object) -> None:
    op = registry.get(name)
    inputs = random_inputs(op, np.random.default_rng(7))
    want = reference(inputs["D"], inputs.get("S"), inputs.get("R"))  # type: ignore[operator]
    np.testing.assert_array_equal(numpy_model(op, inputs), want)


def test_npu_clip_with_immediates(registry: Registry) -> None:
    clip = registry.get("npu_vec_clip")
    d = np.arange(-128, 128, dtype=np.int32).reshape(16, 16)
    got = numpy_model(clip, {"D": d, "lo": np.array(-5, np.int32), "hi": np.array(9, np.int32)})
    np.testing.assert_array_equal(got, np.clip(d, -5, 9))


def test_random_inputs_cover_both_ends_of_each_integer_range(registry: Registry) -> None:
    inputs = random_inputs(registry.get("wmma_m16n16k16_u8_s32"), np.random.default_rng(8))
    assert inputs["A"].dtype == np.uint8
    assert inputs["A"].min() == 0 and inputs["A"].max() == 255
    assert inputs["C"].min() == -2**31 and inputs["C"].max() == 2**31 - 1


def test_random_inputs_respect_a_declared_range(registry: Registry) -> None:
    inputs = random_inputs(registry.get("npu_vec_mulshift"), np.random.default_rng(9))
    assert inputs["scale"].shape == ()
    assert 1 <= int(inputs["scale"]) <= 2**62
