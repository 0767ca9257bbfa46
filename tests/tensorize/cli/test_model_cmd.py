"""``tensorize model``: the table, --json, --report, and the exit statuses."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

from tensorize.cli import main
from tests.ir.onnx import models


@pytest.fixture(scope="module")
def qdq_path(tmp_path_factory):
    folder = tmp_path_factory.mktemp("cli")
    return models.save(models.quantize(models.small_cnn(size=8), folder), folder,
                       "cnn_int8.onnx")


def test_npu_json_every_layer_exact(qdq_path, tmp_path, capsys):
    trace = tmp_path / "timeline.json"
    assert main(["model", str(qdq_path), "--target", "npu", "--json", "--quiet",
                 "--trace", str(trace)]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["ok"] and data["target"] == "npu"
    assert data["totals"]["tensorized"] >= 2 and data["totals"]["cycles"] > 0
    assert all("MISMATCH" not in r["check"] for r in data["layers"])
    assert data["roofline"]["peak_macs_per_cycle"] == 256
    assert data["trace"] == str(trace)
    _check_network_trace(json.loads(trace.read_text()), data)


def _check_network_trace(trace, data):
    """The timeline holds each simulated layer once, end to end in run order with its
    cycles, each host layer as a marker with its reason, and unit spans inside their layer."""
    clock = data["machine"]["clock_mhz"]
    events = trace["traceEvents"]
    slices = [e for e in events if e["ph"] == "X" and e["tid"] == 0]
    simulated = [r for r in data["layers"] if r["cycles"]]
    assert [e["name"] for e in slices] == [r["name"] for r in simulated]
    start = 0
    for event, layer in zip(slices, simulated):
        assert event["ts"] == pytest.approx(start / clock)
        assert event["dur"] == pytest.approx(layer["cycles"] / clock)
        start += layer["cycles"]
    assert trace["otherData"]["cycles"] == data["totals"]["cycles"] == start
    markers = {e["name"]: e["args"]["why"] for e in events if e["ph"] == "i"}
    assert markers == {r["name"]: r["why_not"] for r in data["layers"] if not r["cycles"]}
    layer_at = {e["name"]: e for e in slices}
    spans = [e for e in events if e["ph"] == "X" and e["tid"] >= 2]
    assert {e["cat"] for e in spans} >= {"load", "gemm", "store", "dram"}
    for span in spans:
        layer = layer_at[span["name"]]
        assert layer["ts"] - 1e-9 <= span["ts"]
        assert span["ts"] + span["dur"] <= layer["ts"] + layer["dur"] + 1e-9


def test_host_table_progress_and_report(qdq_path, tmp_path, capsys):
    out = tmp_path / "report"
    assert main(["model", str(qdq_path), "--report", str(out)]) == 0
    captured = capsys.readouterr()
    assert "QDQ Conv" in captured.out and "total" in captured.out
    assert "[2/" in captured.err and "exact" in captured.err
    assert (out / "index.html").is_file() and (out / "layers.csv").is_file()


def test_nothing_tensorized_fails(tmp_path, capsys):
    path = models.save(models.small_cnn(size=8), tmp_path, "cnn.onnx")
    assert main(["model", str(path), "--target", "npu", "--quiet"]) == 1
    assert "not tensorized" in capsys.readouterr().err


@pytest.mark.slow
def test_bench_times_the_compiled_network_beside_onnxruntime(qdq_path, capsys):
    assert main(["model", str(qdq_path), "--target", "x86", "--bench", "2", "--threads", "2",
                 "--json", "--quiet"]) == 0
    bench = json.loads(capsys.readouterr().out)["bench"]
    assert bench["outputs_ok"] and bench["runs"] == 2
    assert [r["threads"] for r in bench["rounds"]] == [1, 2]
    assert 0 < bench["native_layers"] < bench["layers"]
    for round_ in bench["rounds"]:
        for name in ("tensorize", "onnxruntime"):
            assert 0 < round_[name]["best_ms"] <= round_[name]["median_ms"]
    assert main(["model", str(qdq_path), "--target", "x86", "--threads", "2"]) == 2
    assert "--threads applies with --bench" in capsys.readouterr().err
    assert main(["model", str(qdq_path), "--target", "npu", "--bench", "2"]) == 2
    assert "--bench applies to a CPU target" in capsys.readouterr().err


def test_trace_and_unfused_are_for_the_npu_only(qdq_path, tmp_path, capsys):
    assert main(["model", str(qdq_path), "--trace", str(tmp_path / "t.json")]) == 2
    assert "--trace applies to --target npu only" in capsys.readouterr().err
    assert not (tmp_path / "t.json").exists()
    assert main(["model", str(qdq_path), "--target", "x86", "--unfused"]) == 2
    assert "--unfused applies to --target npu only" in capsys.readouterr().err


def test_programs_per_stage_are_listed_with_why_each_ends(qdq_path, capsys):
    assert main(["model", str(qdq_path), "--target", "npu", "--programs", "stage",
                 "--json", "--quiet"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["ok"] and data["stages"]
    layers = [i for stage in data["stages"] for i in stage["layers"]]
    assert layers == sorted(set(layers))
    cycles = {r["index"]: r["cycles"] for r in data["layers"]}
    assert sum(s["cycles"] for s in data["stages"]) == sum(cycles[i] for i in layers)
    assert all(s["ends"] for s in data["stages"][:-1])
    assert main(["model", str(qdq_path), "--target", "npu", "--programs", "stage",
                 "--quiet"]) == 0
    out = capsys.readouterr().out
    assert f"{len(data['stages'])} stages, one NPU program each" in out
    assert "why it ends" in out


def test_programs_per_stage_are_for_fused_npu_runs(qdq_path, capsys):
    assert main(["model", str(qdq_path), "--programs", "stage"]) == 2
    assert "--programs stage applies to --target npu only" in capsys.readouterr().err
    assert main(["model", str(qdq_path), "--target", "npu", "--programs", "stage",
                 "--unfused"]) == 2
    assert "does not apply with --unfused" in capsys.readouterr().err


def test_bad_model_and_usage_exit_2(tmp_path, capsys):
    assert main(["model", str(tmp_path / "none.onnx")]) == 2
    assert "none.onnx: requires an ONNX model file" in capsys.readouterr().err
    path = models.save(models.small_cnn(size=8), tmp_path, "cnn.onnx")
    assert main(["model", str(path), "--machine", "m.yaml"]) == 2
    assert "--machine applies to --target npu only" in capsys.readouterr().err
    assert main(["model", str(path), "--target", "tpu"]) == 2
    assert "--target requires host or a target" in capsys.readouterr().err


def test_machine_file_is_used(qdq_path, capsys):
    machine = Path(__file__).parents[3] / "examples" / "machines" / "npu32x32.yaml"
    assert main(["model", str(qdq_path), "--target", "npu", "--machine", str(machine),
                 "--json", "--quiet"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["roofline"]["peak_macs_per_cycle"] == 32 * 32
    convs = [r for r in data["layers"] if r["op"] == "QDQ Conv"]
    assert all(r["intrinsic"] == "os32_gemm" and r["check"] == "exact" for r in convs)


@pytest.mark.slow
def test_npu_report_names_the_machine_and_one_bound_everywhere(qdq_path, tmp_path, capsys):
    import csv

    out = tmp_path / "report"
    assert main(["model", str(qdq_path), "--target", "npu", "--report", str(out),
                 "--quiet"]) == 0
    table = capsys.readouterr().out.splitlines()
    machine = ("npu-16x16: 16x16 weight_stationary array, 700 MHz, SRAM inp 32 KiB + wgt "
               "16 KiB + acc 128 KiB, DRAM port 32 bytes/cycle")
    assert table[0] == f"machine: {machine}"
    document = json.loads((out / "report.json").read_text(encoding="utf-8"))
    assert document["machine"]["rows"] == 16 and document["machine"]["clock_mhz"] == 700
    with (out / "layers.csv").open(newline="", encoding="utf-8") as stream:
        rows = list(csv.DictReader(stream))
    assert {row["machine"] for row in rows} == {machine}
    assert machine in (out / "index.html").read_text(encoding="utf-8")
    header = table[1]
    ridge = document["roofline"]["ridge_intensity"]
    for record, row, line in zip(document["layers"], rows, table[3:]):
        if record["dram_bytes"] is None or not record["macs"]:
            # No MACs (a pool or an add on the vector unit): no roofline point, no side.
            assert record["bound"] is None and row["bound"] == ""
            continue
        side = "memory" if record["macs"] / record["dram_bytes"] < ridge else "compute"
        assert record["bound"] == row["bound"] == side
        assert line[header.index("bound"):].split()[0] == side


def test_features_choose_the_cpu_target_s_intrinsics(tmp_path, capsys):
    weights = np.random.default_rng(0).standard_normal((16, 8)).astype(np.float16)
    built = models.model([helper.make_node("MatMul", ["x", "w"], ["y"], name="mm")],
                         [("x", TensorProto.FLOAT16, [4, 16])],
                         [("y", TensorProto.FLOAT16, [4, 8])],
                         [numpy_helper.from_array(weights, "w")])
    path = models.save(built, tmp_path, "mm_fp16.onnx")
    assert main(["model", str(path), "--target", "arm", "--features", "+fp16fml", "--json",
                 "--quiet"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["machine"]["features"] == "+neon,+dotprod,+fp16fml"
    (layer,) = data["layers"]
    assert layer["intrinsic"] == "arm_fmlal_lane"
    assert layer["check"].startswith("kernel exact against the hardware-order reference")
    assert main(["model", str(path), "--target", "npu", "--features", "+fp16fml"]) == 2
    assert "--features applies to a CPU target" in capsys.readouterr().err
