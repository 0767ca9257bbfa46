"""An intrinsic's stated ``accumulation``: read from the YAML, modelled in the hardware's
order (intrinsics.oracle.hardware_model) and checked against float64 within the stated bound
by the self-check. The values are built so that each rule changes the result."""

from dataclasses import replace

import ml_dtypes
import numpy as np
import pytest

from intrinsics import load_family, self_check
from intrinsics.model import Accumulation
from intrinsics.oracle import hardware_model, numpy_model
from intrinsics.selfcheck import OK, accumulation_bound, check_accumulation, random_inputs
from targets.host.selfcheck import SemanticsChecker
from tests.tensorize.schedule.kernels import bf16_one_lane

BF16 = ml_dtypes.bfloat16


@pytest.fixture(scope="module")
def vdpbf16ps(registry):
    return registry.get("x86_vdpbf16ps")


def _one_lane(c: float, a: tuple[float, float], b: tuple[float, float]) -> dict:
    """Inputs whose lane 0 computes ``c + a[1] * b[1] + a[0] * b[0]``; other lanes zero."""
    return bf16_one_lane(c, a, b, 16)


def test_the_yaml_states_vdpbf16ps_accumulation(vdpbf16ps, registry) -> None:
    assert vdpbf16ps.accumulation == Accumulation("descending", "nearest_even", "flush")
    assert registry.get("x86_vpdpbusd").accumulation is None


def test_the_odd_product_is_added_first(vdpbf16ps) -> None:
    # 2**25 - 2**25 + 1 is 1 in the stated order; 2**25 + 1 rounds to 2**25 first otherwise.
    inputs = _one_lane(2.0 ** 25, (1.0, -1.0), (1.0, 2.0 ** 25))
    assert hardware_model(vdpbf16ps, inputs)[0] == 1.0
    swapped = replace(vdpbf16ps,
                      accumulation=Accumulation("ascending", "nearest_even", "flush"))
    assert hardware_model(swapped, inputs)[0] == 0.0


def test_denormal_inputs_read_as_zero(vdpbf16ps) -> None:
    inputs = _one_lane(0.0, (1e-39, 0.0), (1.0, 0.0))
    assert numpy_model(vdpbf16ps, inputs)[0] != 0.0
    assert hardware_model(vdpbf16ps, inputs)[0] == 0.0


def test_a_denormal_result_is_written_as_zero(vdpbf16ps) -> None:
    # 2**-126 - 2**-127 = 2**-127, a denormal: flushed. Every input is a normal number.
    inputs = _one_lane(2.0 ** -126, (2.0 ** -63, 0.0), (-(2.0 ** -64), 0.0))
    assert numpy_model(vdpbf16ps, inputs)[0] == 2.0 ** -127
    assert hardware_model(vdpbf16ps, inputs)[0] == 0.0


def test_rounding_is_to_nearest_even(vdpbf16ps) -> None:
    # 1 + 2**-24 is halfway between 1 and its successor: ties to 1 (even).
    inputs = _one_lane(1.0, (2.0 ** -12, 0.0), (2.0 ** -12, 0.0))
    assert hardware_model(vdpbf16ps, inputs)[0] == 1.0


def test_the_self_check_bounds_the_hardware_order_by_float64(vdpbf16ps) -> None:
    rng = np.random.default_rng(0)
    inputs = random_inputs(vdpbf16ps, rng)
    result = check_accumulation(vdpbf16ps, inputs, "semantics")
    assert result.status == OK and result.max_error <= result.tolerance
    limit = accumulation_bound(vdpbf16ps, np.ones(16))
    assert np.all(limit > 0) and np.all(limit < 1e-6)
    [checked] = self_check([vdpbf16ps], [SemanticsChecker(trials=4)])
    assert checked.status == OK, str(checked)


def test_the_bound_is_exceeded_by_a_wrong_model(vdpbf16ps, monkeypatch) -> None:
    import intrinsics.selfcheck as selfcheck

    monkeypatch.setattr(selfcheck, "hardware_model",
                        lambda i, x: hardware_model(i, x) + np.float32(1e-3))
    inputs = random_inputs(vdpbf16ps, np.random.default_rng(1))
    result = selfcheck.check_accumulation(vdpbf16ps, inputs, "semantics")
    assert result.status == "mismatch" and "float64" in result.detail


def test_an_order_on_semantics_the_model_cannot_run_is_an_error_not_a_crash(tmp_path) -> None:
    # A[2 * k] is no plain iterator: the loader takes the field (one product, one reduce
    # iterator), and the self-check says why it cannot check it.
    path = tmp_path / "toy.yaml"
    path.write_text(TOY.replace("A[k]", "A[2 * k]").replace("shape: [2], dtype: bf16",
                                                             "shape: [4], dtype: bf16"))
    [toy] = load_family(path).intrinsics
    [checked] = self_check([toy], [SemanticsChecker()])
    assert checked.status == "error" and "hardware-order model cannot run" in checked.detail


TOY = """\
target: toy
scopes:
  toy.reg: {capacity: 4096}
intrinsics:
  - name: toy_dot
    kind: compute
    iterators:
      - {name: i, extent: 4}
      - {name: k, extent: 2, kind: reduce}
    operands:
      - {name: A, role: input, shape: [2], dtype: bf16, scope: toy.reg}
      - {name: B, role: input, shape: [4, 2], dtype: bf16, scope: toy.reg}
      - {name: C, role: accumulator, shape: [4], dtype: f32, scope: toy.reg}
    semantics: "C[i] += f32(A[k]) * f32(B[i, k])"
    accumulation: {order: descending, rounding: nearest_even, denormals: flush}
    emit:
      toy: "dot {C}, {A}, {B}"
    cost: {latency: 4, interval: 1}
    reference: https://example.com/toy#dot
"""
