"""tensorize run --target cuda: emit, compile, emulate on the host, and what is skipped."""

from __future__ import annotations

import json
import re
import shutil

import pytest

from targets import cuda
from targets.cuda.compile import cuobjdump_path
from targets.cuda.run import gpu_unavailable
from tensorize.cli import main
from tests.tensorize.cli.test_run_cmd import SMALL_GEMM

needs_nvcc = pytest.mark.skipif(cuda.nvcc_path() is None, reason="nvcc not installed")
needs_cxx = pytest.mark.skipif(shutil.which("g++") is None and shutil.which("c++") is None,
                               reason="no host C++ compiler to build the emulation")


# The figures below are WMMA's for this GEMM (its m32n8k16 fragment; mma.sync's m16n8k32
# takes fewer calls here, so the engine would pick it): pinned, so they stay those.
CUDA = ["--target", "cuda", "--intrinsic", "wmma_m32n8k16_s8_s32"]


@pytest.fixture
def gemm(tmp_path):
    path = tmp_path / "gemm.py"
    path.write_text(SMALL_GEMM)
    return str(path)


@pytest.mark.slow
@needs_nvcc
@needs_cxx
def test_cuda_run_compiles_and_emulates_exactly(gemm, capsys):
    assert main(["run", gemm, *CUDA, "--quiet"]) == 0
    out = capsys.readouterr().out
    assert "ok   compile     nvcc -arch=sm_80" in out and "ok   compile     nvcc -arch=sm_90" in out
    # The small GEMM is double-buffered: emulated with copies landing at wait and at issue.
    for copies in ("at wait", "at issue"):
        assert re.search(rf"ok   emulate     C: the CUDA source .* copies landing {copies} .*"
                         r"all 800 elements equal \(exact\)", out)


@pytest.mark.slow
@needs_nvcc
def test_cuda_run_reports_ptxas_resources_and_occupancy(gemm, capsys):
    assert main(["run", gemm, *CUDA, "--quiet"]) == 0
    out = capsys.readouterr().out
    # The tensorized kernel: one warp a block, so 32 blocks fill half the warp slots (its
    # 55-57 registers, 2048 a warp with the granularity, allow 32 blocks too: a tie).
    for arch in ("sm_80", "sm_90"):
        assert re.search(rf"ok   ptxas       gemm_k\d {arch}: \d+ registers, \d+ B shared, "
                         r"0 spill bytes, 0 B stack; 32 threads per block, occupancy 32 warps "
                         r"of 64 \(50%\) limited by (registers|blocks)", out)
    # The SASS mix where cuobjdump is installed; otherwise the step says why not.
    if cuobjdump_path() is None:
        assert "skip sass        cuobjdump not found" in out
    else:
        # Its two-step k loop is unrolled by its two stages: 2 MMA a step, none in a loop.
        for arch in ("sm_80", "sm_90"):
            # ... and whether the first MMA after each barrier waits for an ldmatrix issued
            # after it (unrolled whole, every barrier of the kernel counts).
            assert re.search(rf"ok   sass        gemm_k\d {arch}: 4 SASS MMA and \d+ other "
                             r"SASS instructions in the kernel \(no loop holds an MMA\): "
                             r"[\d.]+ other per SASS MMA instruction; (no drain at its \d+|"
                             r"drains at \d+ of \d+) barrier\(s\)", out)


@pytest.mark.slow
@needs_nvcc
def test_json_report_carries_the_ptxas_records(gemm, capsys):
    assert main(["run", gemm, *CUDA, "--json"]) == 0
    records = json.loads(capsys.readouterr().out)["cuda"]["ptxas"]
    launches = 5
    assert len(records) == 2 * launches
    tiled = [r for r in records if r["threads_per_block"] == 32]
    assert {r["arch"] for r in tiled} == {"sm_80", "sm_90"}
    for record in tiled:
        assert record["spill_stores"] == record["spill_loads"] == 0
        assert record["warps_per_sm"] == 32 and record["occupancy"] == 0.5
        assert record["limited_by"] in ("registers", "blocks") and record["shared_bytes"] > 0


def test_cuda_run_without_a_device_reports_a_skip(gemm, capsys):
    if gpu_unavailable() is None:
        pytest.skip("a CUDA device is present")
    main(["run", gemm, *CUDA, "--quiet"])
    assert "skip gpu         no CUDA device to run on" in capsys.readouterr().out


@needs_cxx
def test_wrong_emulated_numbers_fail_the_run(gemm, capsys, monkeypatch):
    real = cuda.emulate

    def off_by_one(kernel, inputs, **kw):
        outputs = real(kernel, inputs, **kw)
        outputs["C"][3, 5] += 1
        return outputs

    monkeypatch.setattr(cuda, "emulate", off_by_one)
    assert main(["run", gemm, *CUDA, "--quiet"]) == 1
    assert "FAIL emulate     C: the CUDA source" in capsys.readouterr().out


@pytest.mark.slow  # in CI's slow pass, for the default run's time
def test_emit_code_writes_the_source_and_its_launches(gemm, tmp_path):
    out = tmp_path / "gemm.cu"
    assert main(["run", gemm, *CUDA, "--quiet", "--emit", "code",
                 "-o", str(out)]) == 0
    text = out.read_text()
    # The parameters come first; the padded intermediates the runner allocates follow.
    assert text.startswith("// launch in order, arguments (A, B, C")
    assert "wmma::mma_sync" in text and "__global__" in text


@pytest.mark.slow  # in CI's slow pass, for the default run's time
def test_json_report_lists_the_launches(gemm, capsys):
    assert main(["run", gemm, *CUDA, "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    launches = report["cuda"]["launches"]
    # The tensorized kernel runs whole warps: its block's x dimension is one warp; its two
    # k steps take two cp.async stages in static shared memory.
    (tiled,) = [launch for launch in launches if launch["block"][0] == 32]
    assert (tiled["stages"], tiled["dynamic_shared"]) == (2, 0)
    skipped = [s["step"] for s in report["steps"] if s.get("skipped")]
    assert "gpu" in skipped or "gpu_ms" in report["cuda"]


@pytest.mark.slow
@needs_nvcc
def test_tune_on_a_gemm_smaller_than_every_block_tile_tries_narrow_blocks(gemm, capsys):
    assert main(["run", gemm, *CUDA, "--tune", "--quiet"]) == 0
    out = capsys.readouterr().out
    assert "ok   tune        mma_m16n8k32_s8s8_s32: block 16" in out
    assert "all 800 elements equal (exact)" in out


@pytest.mark.slow
@needs_nvcc
@needs_cxx
def test_tune_on_cuda_reports_its_trials_and_emits_the_chosen_stages(capsys):
    assert main(["run", "examples/script/gemm_int8.py", "--target", "cuda", "--tune",
                 "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    trials = report["tune"]
    assert trials and all(t["stages"] >= 2 for t in trials)
    # The kernel that ran is emitted with the stages of the search's best trial (fewer only
    # where its k loop is shorter), and its emulation is still exact.
    best = trials[0]["stages"]
    assert all(launch["stages"] <= best for launch in report["cuda"]["launches"])
    assert report["ok"]
