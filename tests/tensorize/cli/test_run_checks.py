"""tensorize run: what is checked before any work, when a run counts as not tensorized, the
comparison with the reference, and the files it writes."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from ir import script as T
from tensorize.cli import main
from tensorize.validate import compare
from tensorize.engine import IntrinsicChoiceError, auto_tensorize
from tests.intrinsics.conftest import MAC_FAMILY
from tests.tensorize.cli.test_run_cmd import FLOAT_GEMM, SMALL_GEMM

ROOT = Path(__file__).resolve().parents[3]
# FLOAT_GEMM with its reference computed in float32 too.
FLOAT = FLOAT_GEMM.replace("A.astype(np.int32) @ B.astype(np.int32)", "A @ B")


@pytest.fixture
def kernel(tmp_path: Path):
    def write(text: str) -> str:
        path = tmp_path / "kernel.py"
        path.write_text(text)
        return str(path)
    return write


def test_a_te_example_runs_through_its_build(monkeypatch, capsys) -> None:
    monkeypatch.chdir(ROOT)
    assert main(["run", "examples/te/gemm_int8.py", "--target", "npu", "--quiet"]) == 0
    out = capsys.readouterr().out
    assert "ok   tensorize   C: npu_gemm" in out and "ok   check" in out


def test_module_level_prim_funcs_are_kernels(kernel, capsys) -> None:
    source = SMALL_GEMM.replace("@T.prim_func\n", "").replace(
        "def reference", "gemm = T.prim_func(gemm)\n\n\ndef reference")
    assert main(["run", kernel(source), "--quiet"]) == 0
    assert "ok   reference   C against numpy reference(...)" in capsys.readouterr().out


@pytest.mark.parametrize("target", ["npu", "arm"])
def test_required_tensorization_fails_before_running_anything(kernel, capsys, target) -> None:
    assert main(["run", kernel(FLOAT_GEMM), "--target", target, "--require-tensorized",
                 "--json"]) == 1
    report = json.loads(capsys.readouterr().out)
    assert [s["step"] for s in report["steps"]] == ["round-trip", "tensorize"]
    assert report["ok"] is False and "block 'C' is not tensorized" in report["error"]


def test_nothing_tensorized_fails_unless_fallback_is_allowed(kernel, capsys) -> None:
    path = kernel(FLOAT)
    assert main(["run", path, "--target", "npu", "--quiet"]) == 1
    captured = capsys.readouterr()
    assert "FAIL tensorize   C: not tensorized" in captured.out
    assert ("error: not tensorized: C: C is float32, npu_gemm's C is int32; pass "
            "--allow-fallback to run it on npu untensorized") in captured.err
    assert main(["run", path, "--target", "npu", "--quiet", "--allow-fallback"]) == 0
    out = capsys.readouterr().out
    assert "0 NPU program(s); on the host: C" in out
    assert "skip tensorize   not tensorized: C: C is float32" in out
    assert "ok   reference" in out


def test_intrinsic_of_another_target_is_refused_by_the_api(registry, machine) -> None:
    func = T.parse(SMALL_GEMM.split("\n\ndef reference")[0])
    with pytest.raises(IntrinsicChoiceError, match="got wmma_m16n16k16_f16_f32, an intrinsic "
                                                   "of target cuda"):
        auto_tensorize(func, "npu", intrinsic="wmma_m16n16k16_f16_f32", registry=registry,
                       config=machine)
    with pytest.raises(IntrinsicChoiceError, match="did you mean arm_sdot_lane"):
        auto_tensorize(func, "arm", intrinsic="arm_sdot_lan", registry=registry)


def test_features_add_to_and_remove_from_the_defaults(kernel, capsys) -> None:
    path = kernel(SMALL_GEMM)
    # The i8mm code is emitted; this host cannot run it (unless it is AArch64 with i8mm).
    main(["run", path, "--target", "arm", "--features", "+i8mm", "--json"])
    report = json.loads(capsys.readouterr().out)
    assert report["cpu"]["features"] == "+neon,+dotprod,+i8mm"
    assert report["blocks"][0]["intrinsic"] == "arm_smmla"  # chosen by cost: fewer instructions
    # Without dotprod no arm intrinsic is left: nothing is tensorized.
    assert main(["run", path, "--target", "arm", "--features=-dotprod", "--quiet"]) == 1
    assert "no arm intrinsic to try" in capsys.readouterr().err


def test_compare_never_narrows_the_reference() -> None:
    got = np.arange(6, dtype=np.int32).reshape(2, 3)
    ok, detail = compare(got, got.astype(np.int64) + 2**32)
    assert not ok and detail.startswith("6 of 6 elements differ, first at (0, 0): 0 vs 4294967296")
    assert not compare(got, got + 0.5)[0]  # a float reference is not truncated
    assert compare(got, got.astype(np.float64))[0]
    big = np.array([2**63 + 1], dtype=np.uint64)
    assert not compare(big, np.array([1], dtype=np.int64))[0]  # no float64 rounding


def test_outputs_are_written_whole_and_nothing_else(kernel, tmp_path: Path) -> None:
    out = tmp_path / "out" / "prog.s"
    out.parent.mkdir()
    out.write_text("an older program\n")
    assert main(["run", kernel(SMALL_GEMM), "--target", "npu", "--quiet", "--emit", "code",
                 "-o", str(out)]) == 0
    assert "gemm acc[" in out.read_text()
    assert [p.name for p in out.parent.iterdir()] == ["prog.s"]


def test_max_bytes_is_the_limit_on_the_buffers(kernel, capsys) -> None:
    assert main(["run", kernel(SMALL_GEMM), "--quiet", "--max-bytes", "4K"]) == 2
    assert ("requires its buffers to fit in 4.0 KiB (--max-bytes), got 4.5 KiB (C (40, 20) "
            "int32: 3.1 KiB") in capsys.readouterr().err


def test_intrinsics_dir_adds_the_families_in_it(kernel, tmp_path: Path, capsys) -> None:
    families = tmp_path / "families"
    families.mkdir()
    (families / "mac16.yaml").write_text(MAC_FAMILY)
    assert main(["run", kernel(SMALL_GEMM), "--target", "npu", "--intrinsics-dir",
                 str(families), "--intrinsic", "mac_mma_i16"]) == 2
    assert "got mac_mma_i16, an intrinsic of target mac" in capsys.readouterr().err
