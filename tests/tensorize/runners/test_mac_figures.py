"""The run's step lines name useful and executed MACs apart: the tensorize line gives the
executed calls and the padding's share of the executed work, the NPU simulate line MAC
utilisation both ways; each checked against counts the tool does not make itself (the
kernel's sizes, the simulator's executed MACs). The CPU run line's MACs per instruction,
both ways, is checked in tests/tensorize/cli/test_run_arm.py against the emulator's counts."""

from __future__ import annotations

import json
import re

import pytest

from tensorize.cli import main

M, N, K = 17, 33, 65
ODD_GEMM = f'''
from ir import script as T


@T.prim_func
def gemm(A: T.Buffer(({M}, {K}), "int8"), B: T.Buffer(({K}, {N}), "int8"),
         C: T.Buffer(({M}, {N}), "int32")):
    for i, j, k in T.grid({M}, {N}, {K}):
        with T.block("C"):
            vi, vj, vk = T.axis.remap("SSR", [i, j, k])
            with T.init():
                C[vi, vj] = 0
            C[vi, vj] += T.cast(A[vi, vk], "int32") * T.cast(B[vk, vj], "int32")
'''


@pytest.fixture
def gemm(tmp_path):
    path = tmp_path / "gemm.py"
    path.write_text(ODD_GEMM)
    return str(path)


def run_json(gemm, target, capsys):
    assert main(["run", gemm, "--target", target, "--json"]) == 0
    return json.loads(capsys.readouterr().out)


def step(report, name):
    return next(s["detail"] for s in report["steps"] if s["step"] == name)


def test_npu_names_useful_and_executed_utilisation(gemm, capsys):
    report = run_json(gemm, "npu", capsys)
    npu = report["npu"]
    useful, executed = M * N * K, npu["macs"]  # the simulator's executed MACs
    assert report["macs"]["useful"] == useful and report["macs"]["executed"] == executed
    peak = npu["cycles"] * 16 * 16
    assert (f"MAC utilisation {100 * useful / peak:.1f}% useful, "
            f"{100 * executed / peak:.1f}% executed") in step(report, "simulate")
    assert f"pad {100 * (1 - useful / executed):.1f}% of executed MACs" in step(report,
                                                                                "tensorize")
    # The matcher's estimate ("calls 84 pad 70%", padding to the intrinsic's shape) is gone.
    assert not re.search(r"calls \d+ pad", step(report, "tensorize"))
