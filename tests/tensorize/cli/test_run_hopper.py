"""tensorize run --target cuda --arch sm_90a: a GEMM takes Hopper's wgmma kernel fed by TMA,
compiled for sm_90a (ptxas, spills, the SASS's wgmma and tensor copies), emulated exactly
with the copies landing at their wait and at their issue, the GPU run a named skip; a kernel
the schedule cannot take says why and takes the other families; --arch is checked at the
edge."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest

from intrinsics import default_registry
from targets import cuda
from targets.cuda.compile import cuobjdump_path
from tensorize.cli import main
from tensorize.kernel_file import read_kernel_file
from tensorize.runners import RunOptions, RunReport, make_context
from tensorize.runners.runner import CudaRunner
from tests.tensorize.cli.test_run_cmd import SMALL_GEMM

ROOT = Path(__file__).resolve().parents[3]
EXAMPLES = ROOT / "examples" / "script"
needs_tools = [pytest.mark.skipif(cuda.nvcc_path() is None, reason="nvcc not installed"),
               pytest.mark.skipif(shutil.which("g++") is None and shutil.which("c++") is None,
                                  reason="no host C++ compiler to build the emulation")]


@pytest.mark.parametrize("argv, message", [
    (["--target", "npu", "--arch", "sm_90a"],
     "--arch applies to a target of kind cuda, got --target npu of kind npu"),
    (["--target", "cuda", "--arch", "sm_70"],
     "--arch requires an architecture of cuda's descriptions (sm_80, sm_90, sm_90a), got "
     "'sm_70'"),
    (["--target", "cuda", "--arch", "sm_90a", "--tune"],
     "--tune searches the tilings of the gpu: section's architectures, got --arch sm_90a as "
     "well; give one of them"),
])
def test_an_architecture_that_does_not_apply_is_refused(argv, message, tmp_path, capsys):
    path = tmp_path / "gemm.py"
    path.write_text(SMALL_GEMM)
    assert main(["run", str(path), *argv, "--quiet"]) == 2
    assert message in capsys.readouterr().err


def test_a_kernel_with_an_epilogue_reports_the_blocks_fused_into_its_store():
    registry = default_registry()
    func = read_kernel_file(EXAMPLES / "gemm_bias_relu_int8.py", None).func
    report = RunReport()
    done = CudaRunner().tensorize(make_context(registry, "cuda", arch="sm_90a"), func,
                                  RunOptions(), report)
    (hopper,) = [s for s in report.steps if s.name == "hopper"]
    assert hopper.status == "ok"
    assert hopper.detail.endswith(
        "; blocks biased, relu, out fused into the consumers' store (computed on the "
        "accumulator registers, acc's sums never stored)")
    assert done.result.tensorized[0].intrinsic == "wgmma_m64n64k32_s8s8_s32"
    # The engine's outcome for each fused block: folded into the GEMM's store.
    fused = [(o.block, o.intrinsic, o.folded, o.reason) for o in done.result.blocks[1:]]
    reason = "computed in block acc's store, on its wgmma accumulator registers"
    assert fused == [(block, None, True, reason) for block in ("biased", "relu", "out")]


def test_a_kernel_with_a_copy_before_its_gemm_says_why_it_takes_the_other_families():
    registry = default_registry()
    func = read_kernel_file(EXAMPLES / "conv2d_nhwc.py", None).func
    report = RunReport()
    CudaRunner().tensorize(make_context(registry, "cuda", arch="sm_90a"), func, RunOptions(),
                           report)
    (hopper,) = [s for s in report.steps if s.name == "hopper"]
    assert hopper.status == "skip"
    assert hopper.detail == (
        "hopper schedule: requires one GEMM block, then only elementwise blocks reading its "
        "result where it lies (fused into the consumers' store), got 2 blocks (pad, conv): a "
        "second stage, a copy before the GEMM or a block reading the sums elsewhere is not "
        "fused into the warp-specialised kernel; the kernel takes the families of the gpu: "
        "section's architectures (WMMA, mma.sync) instead")


def test_without_an_architecture_no_hopper_step_is_reported():
    func = read_kernel_file(EXAMPLES / "gemm_int8.py", None).func
    report = RunReport()
    done = CudaRunner().tensorize(make_context(default_registry(), "cuda"), func,
                                  RunOptions(), report)
    assert not [s for s in report.steps if s.name == "hopper"]
    assert done.result.hopper is None


@pytest.mark.slow
@pytest.mark.parametrize("example, intrinsic, opcode, exact", [
    ("gemm_fp16", "wgmma_m64n128k16_f16f16_f32", "HGMMA", False),
    ("gemm_bf16", "wgmma_m64n128k16_bf16bf16_f32", "HGMMA", False),
    ("gemm_int8", "wgmma_m64n128k32_s8s8_s32", "IGMMA", True),
    ("gemm_fp8", "wgmma_m64n128k32_e4m3e4m3_f32", "QGMMA", False),
    ("dense_fp16", "wgmma_m64n128k16_f16f16_f32", "HGMMA", False),
])
@needs_tools[0]
@needs_tools[1]
def test_a_gemm_example_runs_as_hoppers_kernel(example, intrinsic, opcode, exact, capsys):
    assert main(["run", str(EXAMPLES / f"{example}.py"), "--target", "cuda", "--arch",
                 "sm_90a", "--quiet"]) == 0
    out = capsys.readouterr().out
    assert re.search(r"ok   hopper      block \w+: \d+ x \d+ x \d+ on 64 x 128 tiles", out)
    assert re.search(rf"ok   tensorize   \w+: {intrinsic} ", out)
    assert re.search(r"ok   compile     nvcc -arch=sm_90a: [\d.]+ s, \d+ tensor-core", out)
    assert "nvcc -arch=sm_80" not in out and "nvcc -arch=sm_90:" not in out
    assert re.search(rf"ok   ptxas       {example}_gemm sm_90a: \d+ registers, \d+ B shared "
                     r"\(\d+ dynamic\), 0 spill bytes", out)
    assert "ok   spills      none: 0 bytes spill stores, 0 bytes spill loads" in out
    if cuobjdump_path() is not None:
        assert re.search(rf"ok   sass        {example}_gemm sm_90a: \d+ {opcode}, \d+ UTMALDG",
                         out)
    # Floats within the reference executor's bound (a float32 sum in its own order).
    detail = r"all \d+ elements equal \(exact\)" if exact else r"max error [\d.e+-]+ of"
    for copies in ("at wait", "at issue"):
        assert re.search(rf"ok   emulate     \w+: .* copies landing {copies} .*{detail}", out)
    assert re.search(r"skip gpu         (no CUDA device to run on|launches taking TMA tensor "
                     r"maps run under the emulation only)", out)


@pytest.mark.slow
@needs_tools[0]
@needs_tools[1]
def test_a_kernel_the_hopper_schedule_refuses_runs_for_sm_90a_all_the_same(capsys):
    assert main(["run", str(EXAMPLES / "matmul_relu.py"), "--target", "cuda", "--arch",
                 "sm_90a", "--quiet"]) == 0
    out = capsys.readouterr().out
    assert ("skip hopper      hopper schedule: no wgmma intrinsic matches block Y: A is "
            "float32") in out
    assert "ok   tensorize   Y: wmma_m16n16k8_tf32_f32" in out
    assert re.search(r"ok   compile     nvcc -arch=sm_90a: ", out)
    assert "nvcc -arch=sm_80" not in out
    assert re.search(r"ok   reference   C against numpy reference\(\.\.\.\): max error", out)


@pytest.mark.slow
@pytest.mark.parametrize("example, blocks", [
    ("gemm_bias_relu_int8", "blocks biased, relu, out"),
    ("gemm_requant_int8", "blocks biased, quant, relu, out"),
    ("gemm_requant_add_relu_int8", "blocks biased, quant, added, out"),
])
@needs_tools[0]
@needs_tools[1]
def test_an_example_with_an_epilogue_runs_it_fused_into_hoppers_kernel(example, blocks,
                                                                        capsys):
    assert main(["run", str(EXAMPLES / f"{example}.py"), "--target", "cuda", "--arch",
                 "sm_90a", "--quiet"]) == 0
    out = capsys.readouterr().out
    assert (f"; {blocks} fused into the consumers' store (computed on the accumulator "
            "registers, acc's sums never stored)\n") in out
    assert "ok   tensorize   acc: wgmma_m64n64k32_s8s8_s32 " in out
    assert "ok   spills      none: 0 bytes spill stores, 0 bytes spill loads" in out
    for copies in ("at wait", "at issue"):
        assert re.search(rf"ok   emulate     out: .* copies landing {copies} .*all \d+ "
                         r"elements equal \(exact\)", out)
    assert re.search(r"ok   reference   out against numpy reference\(\.\.\.\): all \d+ "
                     r"elements equal \(exact\)", out)


# The documented SASS lines of the int8 example's run (docs/cuda_backend.md, *Hopper*): the
# doc tests (tests/docs) check the rest of that run, on machines without cuobjdump too.
SASS_BLOCK = "ok   sass        gemm_int8_gemm sm_90a: 8 SASS MMA and "


def _documented_sass() -> list[str]:
    """The block of SASS lines docs/cuda_backend.md quotes for the int8 example."""
    text = (ROOT / "docs" / "cuda_backend.md").read_text()
    start = text.index(f"```\n{SASS_BLOCK}") + 4
    return text[start:text.index("```", start)].splitlines()


@pytest.mark.slow
@needs_tools[0]
@needs_tools[1]
@pytest.mark.skipif(cuobjdump_path() is None, reason="cuobjdump not found (the sass extra)")
def test_the_documented_sass_lines_are_what_the_tool_prints(capsys):
    assert main(["run", str(EXAMPLES / "gemm_int8.py"), "--target", "cuda", "--arch",
                 "sm_90a", "--quiet"]) == 0
    out = capsys.readouterr().out.splitlines()
    documented = _documented_sass()
    assert len(documented) == 2
    for line in documented:
        # "..." stands for the end of the instruction mix's line.
        pattern = re.escape(line).replace(r"\.\.\.", ".*")
        assert any(re.fullmatch(pattern, got) for got in out), line


@pytest.mark.slow
@needs_tools[0]
@needs_tools[1]
def test_the_emitted_code_says_how_to_encode_each_tensor_map(tmp_path):
    out = tmp_path / "dense.cu"
    assert main(["run", str(EXAMPLES / "dense_fp16.py"), "--target", "cuda", "--arch",
                 "sm_90a", "--emit", "code", "-o", str(out), "--quiet"]) == 0
    text = out.read_text()
    # X (64 x 256) and W (128 x 256, a dense layer's N rows of K) are both read in place.
    assert text.startswith("// launch in order, arguments (X, W, Y):\n"
                           "//   dense_fp16_gemm<<<dim3(1, 1, 1), dim3(160, 1, 1), 99264>>>")
    # Boxes of a stage's 128 bytes of k, landed with the 128-byte swizzle (the map's mode 3).
    for operand, buffer, dims, box in (("a", "X", (256, 64), (64, 64)),
                                       ("b", "W", (256, 128), (64, 128))):
        assert (f"//   then dense_fp16_gemm's tensor map tz_map_{operand} over {buffer} "
                f"(cuTensorMapEncodeTiled, 2-d, swizzle 3): dims {dims}, row stride 512 "
                f"bytes, box {box}\n") in text
    assert 'extern "C" __global__ void __launch_bounds__(160) dense_fp16_gemm(' in text
