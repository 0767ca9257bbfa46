"""tensorize run: the main job end to end, its reports and its exit statuses."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from tensorize.cli import main

EXAMPLES = Path(__file__).resolve().parents[3] / "examples" / "script"

SMALL_GEMM = '''
import numpy as np
from ir import script as T


@T.prim_func
def gemm(A: T.Buffer((40, 24), "int8"), B: T.Buffer((24, 20), "int8"),
         C: T.Buffer((40, 20), "int32")):
    for i, j, k in T.grid(40, 20, 24):
        with T.block("C"):
            vi, vj, vk = T.axis.remap("SSR", [i, j, k])
            with T.init():
                C[vi, vj] = 0
            C[vi, vj] += T.cast(A[vi, vk], "int32") * T.cast(B[vk, vj], "int32")


def reference(A, B):
    return A.astype(np.int32) @ B.astype(np.int32)
'''

FLOAT_GEMM = (SMALL_GEMM.replace('"int8"', '"float32"').replace('"int32"', '"float32"')
              .replace('T.cast(A[vi, vk], "float32")', "A[vi, vk]")
              .replace("C[vi, vj] = 0", "C[vi, vj] = 0.0")
              .replace("A.astype(np.int32) @ B.astype(np.int32)", "A @ B"))


@pytest.fixture
def kernel(tmp_path):
    def write(text: str) -> str:
        path = tmp_path / "kernel.py"
        path.write_text(text)
        return str(path)
    return write


def test_host_run_validates_against_the_reference(kernel, capsys):
    assert main(["run", kernel(SMALL_GEMM), "--quiet"]) == 0
    out = capsys.readouterr().out
    assert "ok   round-trip" in out and "ok   reference" in out


def test_npu_run_tensorizes_simulates_and_checks(kernel, capsys):
    assert main(["run", kernel(SMALL_GEMM), "--target", "npu", "--quiet"]) == 0
    out = capsys.readouterr().out
    assert "ok   tensorize   C: npu_gemm" in out
    assert "ok   simulate" in out and "MAC utilisation" in out
    assert "ok   check       C from the simulator against the reference executor" in out
    assert "npu_gemm_reset" in out  # the calls table


def test_json_report_is_machine_readable(kernel, capsys):
    assert main(["run", kernel(SMALL_GEMM), "--target", "npu", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["ok"] and report["npu"]["cycles"] > 0
    assert report["blocks"][0]["intrinsic"] == "npu_gemm"
    assert report["tensorize_seconds"] < 5
    calls = {(c["block"], c["intrinsic"]): c["executed"] for c in report["calls"]}
    # 40 x 20 x 24 pads to 48 x 32 x 32: 3 x 2 x 2 tiles of 16.
    assert calls[("C_o", "npu_gemm_reset")] + calls[("C_o", "npu_gemm")] == 3 * 2 * 2


def test_required_intrinsic_that_does_not_fire_fails_with_the_reason(kernel, capsys):
    assert main(["run", kernel(FLOAT_GEMM), "--target", "npu", "--quiet",
                 "--require-tensorized"]) == 1
    err = capsys.readouterr().err
    assert "block 'C' is not tensorized: C is float32, npu_gemm's C is int32" in err


@pytest.mark.slow
def test_named_intrinsic_is_used(kernel, capsys):
    assert main(["run", kernel(SMALL_GEMM), "--target", "arm", "--quiet",
                 "--intrinsic", "arm_sdot_lane"]) == 0
    assert "ok   tensorize   C: arm_sdot_lane " in capsys.readouterr().out


def test_named_intrinsic_needing_a_feature_not_given_is_a_usage_error(kernel, capsys):
    assert main(["run", kernel(SMALL_GEMM), "--target", "arm", "--quiet",
                 "--intrinsic", "arm_smmla"]) == 2
    assert ("--intrinsic arm_smmla requires target feature +i8mm, got features "
            "+neon,+dotprod; add it with --features +i8mm") in capsys.readouterr().err


@pytest.mark.slow
def test_explain_prints_every_pair(capsys):
    assert main(["run", str(EXAMPLES / "conv2d_nhwc.py"), "--target", "cuda", "--quiet",
                 "--explain"]) == 0
    out = capsys.readouterr().out
    assert "explain     pad: wmma" in out and "no reduce iterator" in out


@pytest.mark.slow
def test_grouped_conv_runs_on_cuda_as_one_gemm_per_group(capsys):
    assert main(["run", str(EXAMPLES / "conv2d_grouped.py"), "--target", "cuda"]) == 0
    out = capsys.readouterr().out
    assert "conv: wmma_m16n16k16_s8_s32" in out
    assert "grid (1, 49, 4)" in out  # the 4 groups on blockIdx.z
    assert out.count("all 50176 elements equal (exact)") >= 3  # validate, emulate x2


def test_emit_writes_ir_code_and_trace(kernel, tmp_path):
    out = tmp_path / "emitted.txt"
    assert main(["run", kernel(SMALL_GEMM), "--target", "npu", "--quiet", "--emit", "ir",
                 "--emit", "code", "--emit", "trace", "-o", str(out)]) == 0
    text = out.read_text()
    assert 'T.call_intrinsic("npu_gemm"' in text
    assert "gemm acc[" in text and "finish" in text
    assert "sch.tensorize(" in text


def test_trace_file_opens_as_chrome_trace(kernel, tmp_path):
    trace = tmp_path / "t.json"
    assert main(["run", kernel(SMALL_GEMM), "--target", "npu", "--quiet", "--trace",
                 str(trace)]) == 0
    assert "traceEvents" in json.loads(trace.read_text())


def test_tune_simulates_the_best_modelled_tiles_and_keeps_the_fastest(kernel, capsys):
    assert main(["run", kernel(SMALL_GEMM), "--target", "npu", "--quiet", "--tune"]) == 0
    out = capsys.readouterr().out
    simulated = [int(c) for c in re.findall(r"^ok   tune        tile \S+ (?:mn|nm): model \d+ "
                                            r"cycles, simulated (\d+)", out, re.M)]
    assert len(simulated) >= 2
    own = re.search(r"^ok   tune        the schedule's own tiling: simulated ([\d,]+), ",
                    out, re.M)
    kept = re.search(r"^ok   simulate    npu-16x16: (\d+) cycles", out, re.M)
    assert own and kept
    assert int(kept.group(1)) == min(simulated + [int(own.group(1).replace(",", ""))])


def test_bad_kernel_exits_2_with_file_and_line(kernel, capsys):
    bad = SMALL_GEMM.replace("A[vi, vk]", "Q[vi, vk]")
    assert main(["run", kernel(bad), "--quiet"]) == 2
    err = capsys.readouterr().err
    assert "kernel.py:14:33: unknown buffer Q" in err
