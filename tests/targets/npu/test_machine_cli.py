"""``tensorize run --machine FILE.yaml``: the run uses the machine (and its family) from the
file, and reports what limits the layer: per-unit busy and stall cycles, DRAM traffic and
bandwidth, MAC utilisation and the roofline bound."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from targets import npu
from tensorize.cli import main
from tensorize.engine import npu_traffic
from tensorize.engine.tune import RANKED, SIMULATED
from tests.targets.npu.machines import Npu

EXAMPLES = Path(__file__).resolve().parents[3] / "examples" / "machines"
# The kernel below as the schedule sees it on the 8x16 machine: 24 x 48 x 40 in 8 x 16 x 8 calls.
SHAPE = npu_traffic.GemmShape(24, 48, 40, 8, 16, 8)

GEMM = '''
import numpy as np
from ir import script as T


@T.prim_func
def gemm(A: T.Buffer((24, 40), "int8"), B: T.Buffer((40, 36), "int8"),
         C: T.Buffer((24, 36), "int32")):
    for i, j, k in T.grid(24, 36, 40):
        with T.block("C"):
            vi, vj, vk = T.axis.remap("SSR", [i, j, k])
            with T.init():
                C[vi, vj] = 0
            C[vi, vj] += T.cast(A[vi, vk], "int32") * T.cast(B[vk, vj], "int32")


def reference(A, B):
    return A.astype(np.int32) @ B.astype(np.int32)
'''


@pytest.fixture
def files(tmp_path):
    kernel = tmp_path / "gemm.py"
    kernel.write_text(GEMM)
    return str(kernel), Npu("npu8x16", 8, 16, i=8, k=8, bytes_per_cycle=4).write(tmp_path)


def test_the_run_uses_the_machine_and_reports_what_limits_it(files, capsys):
    kernel, machine = files
    assert main(["run", kernel, "--target", "npu", "--machine", str(machine), "--tune",
                 "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    # The least-traffic tilings, in traffic order; the model ranks them, its best are simulated.
    ranked = npu_traffic.ranked(SHAPE, npu.load_machine(machine))[:RANKED]
    assert [(t["rows"], t["cols"], t["depth"], t["order"]) for t in report["tune"]] == [
        (t.rows, t.cols, t.depth, t.order) for t in ranked]
    simulated = [t for t in report["tune"] if t["simulated_cycles"] is not None]
    assert len(simulated) == min(SIMULATED, len(ranked))
    assert all(t["model_cycles"] > 0 and t["simulated_cycles"] > 0 for t in simulated)
    assert report["ok"] and report["blocks"][0]["intrinsic"] == "npu8x16_gemm"
    run = report["npu"]
    assert (run["machine"], run["array"]) == ("npu8x16", [8, 16])
    cycles = run["cycles"]
    assert set(run["units"]) == {"load", "gemm", "vector", "store", "dram"}
    assert all(u["busy"] + u["stall"] + u["idle"] == cycles for u in run["units"].values())
    dram = run["dram"]
    assert dram["bytes"] == dram["read"] + dram["write"] > 0
    assert dram["bytes_per_cycle"] == pytest.approx(dram["bytes"] / cycles, abs=1e-4)
    assert dram["gb_per_s"] == pytest.approx(dram["bytes_per_cycle"] * 0.5, abs=1e-3)
    roof = run["roofline"]
    # 24 x 40 x 36 padded to 24 x 48 x 40; A, B and C padded, each moved once at least.
    assert roof["compute_cycles"] == pytest.approx(24 * 48 * 40 / (8 * 16), abs=0.1)
    assert roof["min_dram_bytes"] == 24 * 40 + 40 * 48 + 24 * 48 * 4
    assert roof["bandwidth_cycles"] == pytest.approx(roof["min_dram_bytes"] / 4, abs=0.1)
    assert roof["binds"] == "bandwidth"
    assert roof["bound_cycles"] <= cycles


@pytest.mark.slow
def test_the_summary_lines_name_the_bound_and_the_models_error(files, capsys):
    kernel, machine = files
    assert main(["run", kernel, "--target", "npu", "--machine", str(machine), "--quiet",
                 "--tune"]) == 0
    out = capsys.readouterr().out
    first = npu_traffic.ranked(SHAPE, npu.load_machine(machine))[0]
    assert f"ok   tune        tile {first.describe()}: model " in out
    assert "cycles, simulated " in out
    assert "ok   simulate    npu8x16: " in out
    assert "ok   units       busy/stall cycles: load " in out
    assert "bytes/cycle = " in out and " GB/s (port 4 bytes/cycle)" in out
    assert "bandwidth-bound; the run takes " in out


def test_a_bad_machine_file_is_reported_at_its_line(files, capsys):
    kernel, machine = files
    text = machine.read_text().replace("dataflow: weight_stationary", "dataflow: diagonal")
    machine.write_text(text)
    line = 1 + text[:text.index("diagonal")].count("\n")
    assert main(["run", kernel, "--target", "npu", "--machine", str(machine), "--quiet"]) == 2
    err = capsys.readouterr().err
    assert f"{machine}:{line}:" in err
    assert "machine.array.dataflow requires one of weight_stationary" in err


def test_machine_applies_to_the_npu_only(files, capsys):
    kernel, machine = files
    assert main(["run", kernel, "--machine", str(machine), "--quiet"]) == 2
    assert "--machine apply to --target npu only" in capsys.readouterr().err


@pytest.mark.parametrize("name", ["npu32x32.yaml", "npu8x64.yaml", "npu_bf16.yaml"])
def test_an_example_machine_validates_with_its_own_memories(name, capsys):
    # Each stands in for the built-in NPU family, whose scopes are another machine's.
    assert main(["intrinsics", "validate", str(EXAMPLES / name)]) == 0
    assert "simulator: ok" in capsys.readouterr().out
