"""The self-check: semantics run by the reference executor vs. the numpy model."""

from pathlib import Path

import numpy as np
import pytest

from intrinsics import CheckResult, Intrinsic, Registry, self_check
from intrinsics.oracle import numpy_model
from intrinsics.selfcheck import compare, random_inputs, tolerance
from targets.host.selfcheck import SemanticsChecker
from tensorize.cli import main
from tests.intrinsics.conftest import needs_host


def test_compare_is_exact_for_integers(registry: Registry) -> None:
    sdot = registry.get("arm_sdot")
    inputs = random_inputs(sdot, np.random.default_rng(0))
    want = numpy_model(sdot, inputs)
    got = want.copy()
    got[2] += 1
    result = compare(sdot, got, want, inputs, "semantics")
    assert (result.status, result.max_error, result.where) == ("mismatch", 1.0, (2,))
    assert "mismatch: max error 1 at [2] exceeds tolerance 0" in str(result)
    assert compare(sdot, want.copy(), want, inputs, "semantics").status == "ok"


def test_float_tolerance_scales_with_dtype_and_reduction(registry: Registry) -> None:
    half = registry.get("wmma_m16n16k16_f16_f16")
    single = registry.get("wmma_m16n16k16_f16_f32")
    s_inputs = random_inputs(single, np.random.default_rng(1))
    h_inputs = {**s_inputs, "C": s_inputs["C"].astype(np.float16)}
    h_tol = tolerance(half, numpy_model(half, h_inputs), h_inputs)
    s_tol = tolerance(single, numpy_model(single, s_inputs), s_inputs)
    # 18 ulps of a magnitude below 16 + 1: float16 allows about 2**13 times more than float32.
    assert 0 < s_tol < 18 * 2.0**-23 * 17
    assert 2**12 < h_tol / s_tol < 2**14


def test_float_error_beyond_tolerance_is_a_mismatch(registry: Registry) -> None:
    mma = registry.get("wmma_m16n16k16_bf16_f32")
    inputs = random_inputs(mma, np.random.default_rng(2))
    want = numpy_model(mma, inputs)
    limit = tolerance(mma, want, inputs)
    close, far = want.copy(), want.copy()
    close[3, 4] += np.float32(limit / 2)
    far[3, 4] += np.float32(limit * 4)
    assert compare(mma, close, want, inputs, "semantics").status == "ok"
    result = compare(mma, far, want, inputs, "semantics")
    assert result.status == "mismatch" and result.where == (3, 4)


class _Recorder:
    """A checker standing for a backend check: records what it was asked about."""

    name = "backend"

    def __init__(self) -> None:
        self.seen: list[str] = []

    def applies(self, intrinsic: Intrinsic) -> bool:
        return intrinsic.target == "arm"

    def check(self, intrinsic: Intrinsic, rng: np.random.Generator) -> CheckResult:
        self.seen.append(intrinsic.name)
        return CheckResult(intrinsic.name, self.name, "ok")


def test_further_checkers_plug_in_beside_the_semantics_check(registry: Registry) -> None:
    recorder = _Recorder()
    results = self_check(registry.for_target("arm"), checkers=[recorder])
    assert recorder.seen == [i.name for i in registry.for_target("arm")]
    assert {r.checker for r in results} == {"backend"}


@needs_host
def test_every_builtin_compute_intrinsic_checks_out(registry: Registry) -> None:
    results = self_check(registry.compute_intrinsics(), [SemanticsChecker()])
    assert len(results) == len(registry.compute_intrinsics())
    failed = [str(r) for r in results if r.status != "ok"]
    assert not failed


@needs_host
def test_semantics_checker_catches_a_wrong_executor(registry: Registry,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    from targets import host

    real_run = host.run

    def off_by_one(func, inputs, **kwargs):  # type: ignore[no-untyped-def]
        results = dict(real_run(func, inputs, **kwargs))
        results["C"] = results["C"] + 1
        return results

    monkeypatch.setattr(host, "run", off_by_one)
    result = SemanticsChecker().check(registry.get("arm_smmla"), np.random.default_rng(3))
    assert result.status == "mismatch" and result.max_error == 1


@needs_host
def test_validate_self_checks_a_user_family(capsys: pytest.CaptureFixture[str],
                                            mac_dir: Path) -> None:
    path = mac_dir / "mac16.yaml"
    status = main(["intrinsics", "validate", str(path)])
    out = capsys.readouterr().out
    assert status == 0
    report, summary = out.strip().splitlines()
    assert report == f"{path}:7:11: self-check: mac_mma_i16: semantics: ok (max error 0)"
    assert summary.endswith("self-check: 1/1 compute intrinsics ok")
