"""Register spills, as ptxas reports them: the parsed figures of a kernel equal what
``nvcc -Xptxas -v`` prints for it (one built to spill, one that does not); the narrow
examples (int4 at 256^3 on sm_80, sm_89 and sm_90, fp8 on sm_89 and sm_90) compile without
a spill; and ``tensorize run --target cuda`` reports the spills step and compiles fp8 for
sm_89, the architecture its instruction needs, and fails that step for a kernel that
spills."""

from __future__ import annotations

import json
import re
import subprocess
from functools import cache
from pathlib import Path

import numpy as np
import pytest

from intrinsics import default_registry
from ir import dtypes
from ir import script as T
from targets import cuda
from targets.cuda.compile import nvcc_path, resource_usage
from tensorize.cli import main
from tensorize.engine import auto_tensorize
from tensorize.engine.cuda_schedule import CudaTiling
from tensorize.runners.cuda import run_cuda
from tensorize.runners.report import RunReport

pytestmark = [pytest.mark.slow,  # a second or more of nvcc a kernel and architecture
              pytest.mark.skipif(nvcc_path() is None, reason="nvcc not found")]
EXAMPLES = Path(__file__).resolve().parents[3] / "examples" / "script"
# The 128 x 256 block (warps of 64 x 64) the engine took for fp8 before it knew narrow
# inputs: on sm_90, which runs each fp8 mma.sync as two f16 HMMAs, ptxas spills it.
WIDE = CudaTiling((2, 4), (4, 8), 2)


@cache
def _tensorized(name: str, tiling: CudaTiling | None = None):
    func = T.load_file(EXAMPLES / f"{name}.py")[name]
    options = {} if tiling is None else {"tiling": tiling}
    return auto_tensorize(func, "cuda", registry=default_registry(), **options).func


@cache
def _kernel(name: str, tiling: CudaTiling | None = None) -> cuda.CudaKernel:
    return cuda.emit(_tensorized(name, tiling), default_registry())


def _printed(kernel: cuda.CudaKernel, arch: str, tmp_path: Path) -> dict[str, tuple[int, int]]:
    """(spill stores, spill loads) per entry function, as ``nvcc -Xptxas -v`` prints them
    when it compiles the source itself."""
    source = tmp_path / "kernel.cu"
    source.write_text(kernel.source)
    done = subprocess.run([nvcc_path(), f"-arch={arch}", "-cubin", "-O3", "-std=c++17",
                           "-Xptxas", "-v", "-o", str(tmp_path / "kernel.cubin"), str(source)],
                          capture_output=True, text=True, check=True)
    printed = {}
    for entry in done.stderr.split("Compiling entry function")[1:]:
        name = re.match(r" '(\w+)'", entry)[1]
        spills = re.search(r"(\d+) bytes spill stores, (\d+) bytes spill loads", entry)
        printed[name] = (int(spills[1]), int(spills[2])) if spills else (0, 0)
    return printed


@pytest.mark.parametrize("tiling", [WIDE, None], ids=["wide", "engine"])
def test_parsed_spills_equal_what_ptxas_printed(tiling, tmp_path) -> None:
    kernel = _kernel("gemm_fp8", tiling)
    printed = _printed(kernel, "sm_90", tmp_path)
    parsed = {r.kernel: (r.spill_stores, r.spill_loads) for r in resource_usage(kernel, "sm_90")}
    assert parsed == printed
    gemm = max(parsed.values())
    assert (gemm != (0, 0)) == (tiling is WIDE)


@pytest.mark.parametrize("name, archs", [("gemm_int4", ("sm_80", "sm_89", "sm_90")),
                                         ("gemm_fp8", ("sm_89", "sm_90"))])
def test_the_narrow_examples_compile_without_spills(name, archs) -> None:
    for arch in archs:
        for r in resource_usage(_kernel(name), arch):
            assert (r.spill_stores, r.spill_loads, r.stack_frame) == (0, 0, 0), r


def test_the_run_reports_spills_and_compiles_fp8_for_sm_89(capsys) -> None:
    assert main(["run", str(EXAMPLES / "gemm_fp8.py"), "--target", "cuda", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    compiled = report["cuda"]["ptxas"]
    assert sorted({r["arch"] for r in compiled}) == ["sm_89", "sm_90"]
    sm_89 = [r for r in compiled if r["arch"] == "sm_89"]
    assert all(r["occupancy"] is None for r in sm_89)
    assert report["cuda"]["spills"] == {"spill_stores": 0, "spill_loads": 0, "spilled": []}
    (spills,) = [s for s in report["steps"] if s["step"] == "spills"]
    assert spills["ok"] and spills["detail"].startswith("none: 0 bytes spill stores")


def test_a_kernel_that_spills_fails_the_spills_step(context) -> None:
    report = RunReport()
    rng = np.random.default_rng(0)
    inputs = {name: dtypes.narrow_array(rng.standard_normal((256, 256)), "float8_e4m3")
              for name in ("A", "B")}
    run_cuda(context("cuda"), _tensorized("gemm_fp8", WIDE), {}, inputs, report, [], False)
    spilled = [r for r in resource_usage(_kernel("gemm_fp8", WIDE), "sm_90") if r.spill_stores]
    assert [r.kernel for r in spilled] == ["gemm_fp8_k1"]
    (step,) = [s for s in report.steps if s.name == "spills"]
    assert not step.ok
    assert step.detail == "; ".join(f"{r.kernel} sm_90: {r.spill_stores} bytes spill stores, "
                                    f"{r.spill_loads} bytes spill loads" for r in spilled)
    assert report.data["cuda"]["spills"]["spilled"] == [{"kernel": "gemm_fp8_k1",
                                                         "arch": "sm_90"}]
