"""A vendor's own family of every target kind runs end to end from YAML in a temporary
directory, with names of its own: a CUDA tensor-core family (a renamed copy of the mma.sync
family), a CPU target (a renamed copy of the x86 family) and an NPU machine with its own
family. Each run is exact against numpy, and the calls table names the vendor's intrinsics,
so nothing of the built-in families stood in for them."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest

from intrinsics import default_registry
from targets.cpu.host import missing_features
from tensorize.cli import main
from tests.tensorize.cli.test_run_cmd import SMALL_GEMM

ROOT = Path(__file__).resolve().parents[3]
# The small GEMM with unsigned A, the operand types of AVX-512 VNNI's vpdpbusd.
SMALL_GEMM_U8S8 = SMALL_GEMM.replace('A: T.Buffer((40, 24), "int8")',
                                     'A: T.Buffer((40, 24), "uint8")')


def _renamed(source: Path, names: str, scopes: str | None, out: Path, extra: tuple = ()
             ) -> Path:
    """``source`` with every intrinsic name matching ``names`` and every scope prefix
    ``scopes.`` (None: the scopes keep their names) given the vendor's prefix ``acme``."""
    text = re.sub(rf"(?<![\w.@]){names}", lambda m: f"acme_{m.group(0)}", source.read_text())
    if scopes is not None:
        text = re.sub(rf"(?<![\w.]){re.escape(scopes)}\.(?=[a-z{{])", "acme.", text)
    for old, new in extra:
        text = text.replace(old, new)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(text)
    return out


@pytest.fixture
def kernel(tmp_path: Path) -> Path:
    path = tmp_path / "gemm.py"
    path.write_text(SMALL_GEMM)
    return path


@pytest.mark.slow
def test_a_vendor_cuda_family_runs_end_to_end(kernel, tmp_path, capsys):
    if shutil.which("g++") is None and shutil.which("c++") is None:
        pytest.skip("no host C++ compiler to build the CUDA emulation with")
    family = _renamed(ROOT / "intrinsics" / "cuda_mma.yaml",
                      r"(mma_m16n8k|ldmatrix_|lds_|mma_store_|mma_fill_)", "mma",
                      tmp_path / "vendor" / "acme_mma.yaml")
    assert main(["run", str(kernel), "--target", "cuda", "--intrinsics-dir",
                 str(family.parent), "--intrinsic", "acme_mma_m16n8k32_s8s8_s32",
                 "--quiet"]) == 0
    out = capsys.readouterr().out
    assert "ok   tensorize   C: acme_mma_m16n8k32_s8s8_s32" in out
    assert re.search(r"ok   emulate     C: .* all 800 elements equal \(exact\)", out)
    assert re.search(r"acme_ldmatrix_a_m16k32_s8 +9", out)
    assert "ok   reference   C against numpy reference(...): all 800 elements equal" in out


def test_a_vendor_cpu_target_runs_end_to_end(tmp_path, capsys):
    x86 = default_registry().cpu("x86")
    if missing_features(x86, frozenset(x86.default_features.replace("+", "").split(","))):
        pytest.skip("the host lacks the x86 target's features (AVX-512 VNNI)")
    kernel = tmp_path / "gemm.py"
    kernel.write_text(SMALL_GEMM_U8S8)
    family = _renamed(ROOT / "intrinsics" / "x86.yaml", r"x86_(?!64)", "x86",
                      tmp_path / "vendor" / "acme_cpu.yaml",
                      extra=(("target: x86", "target: acme_cpu"),))
    assert main(["run", str(kernel), "--target", "acme_cpu", "--intrinsics-dir",
                 str(family.parent), "--quiet"]) == 0
    out = capsys.readouterr().out
    assert "ok   tensorize   C: acme_x86_vpdpbusd" in out
    assert "ok   run         C on native" in out
    assert "ok   reference   C against numpy reference(...): all 800 elements equal" in out


def test_a_vendor_npu_machine_runs_end_to_end(kernel, tmp_path, capsys):
    machine = _renamed(ROOT / "examples" / "machines" / "npu8x64.yaml", r"ws8_", None,
                       tmp_path / "acme_npu.yaml")
    assert main(["run", str(kernel), "--target", "npu", "--machine", str(machine),
                 "--quiet"]) == 0
    out = capsys.readouterr().out
    assert re.search(r"ok   tensorize   C: acme_ws8_\w+", out)
    assert "ok   check       C from the simulator against the reference executor: all 800 " \
        "elements equal (exact)" in out
    assert "ok   reference   C against numpy reference(...): all 800 elements equal" in out
