"""ONNX models as sweep workloads: one workload per distinct GEMM-like layer, with the count
of layers sharing it, the ``select:`` filter, every mistake at its line, and cycles equal to
what ``tensorize model MODEL --target npu --machine FILE`` reports for each layer."""

from __future__ import annotations

import csv
import io
import json

import pytest

onnx = pytest.importorskip("onnx", reason="onnx not installed (pip install tensorize[models])")
pytest.importorskip("onnxruntime",
                    reason="onnxruntime not installed (pip install tensorize[models])")

from ir import structural_equal
from ir.onnx import import_model
from tensorize.cli import main
from tensorize.model import networks
from tensorize.sweep import (
    LocalExecutor,
    SweepSpecError,
    expand,
    load_sweep,
    run_sweep,
)
from tensorize.sweep.model_totals import model_totals, model_totals_text
from tensorize.sweep.report import summary_text
from tests.tensorize.sweep.conftest import MACHINES, CountingExecutor

# One bottleneck block of ResNet-50 on a 16x16 image: the 7x7 stem, the block's 1x1, 3x3
# and 1x1 convolutions and its projection (the last two of one shape, so one kernel), the
# classifier: five distinct kernels, six layers.
TINY = {"width": 4, "resolution": 16, "blocks": (1,), "classes": 10}

SWEEP = f"""\
name: model
base: {MACHINES / "npu32x32.yaml"}
vary:
  array.rows: {{rows}}
  array.cols: [8]
workloads:
  - model: {{model}}
{{select}}"""


@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory):
    """The quantized one-block ResNet-50, as a file."""
    path = tmp_path_factory.mktemp("model") / "tiny_int8.onnx"
    onnx.save(networks.quantize(networks.resnet50(0, **TINY)), path)
    return path


@pytest.fixture(scope="module")
def small_resnet(tmp_path_factory):
    """The tests' small ResNet-50 (four stages of one block), quantized, as a file."""
    path = tmp_path_factory.mktemp("model") / "resnet50_int8.onnx"
    onnx.save(networks.quantize(networks.build("resnet50", small=True)), path)
    return path


def _sweep(write_sweep, model, rows="[8]", select=""):
    return write_sweep(SWEEP.format(rows=rows, model=model, select=select))


def _check_against_model_command(outcome, out, sweep, model, capsys):
    """On each row's machine, the model command reports the row's cycles for every layer of
    its workload, or, where the point failed, runs those layers on the host with the same
    reason; and the per-model total is the command's total."""
    totals = {t["machine_file"]: t for t in model_totals(outcome.rows, sweep.workloads)}
    infos = {w.name: dict(w.info) for w in sweep.workloads}
    machines = sorted({r["machine_file"] for r in outcome.rows})
    assert sorted(totals) == machines
    for machine in machines:
        capsys.readouterr()
        assert main(["model", str(model), "--target", "npu", "--machine", str(out / machine),
                     "--json", "--quiet"]) == 0
        report = json.loads(capsys.readouterr().out)
        records = {r["name"]: r for r in report["layers"]}
        for row in (r for r in outcome.rows if r["machine_file"] == machine):
            for layer in infos[row["workload"]]["layers"]:
                record = records[layer]
                if row["error"]:
                    assert record["placement"] == "fallback" and record["cycles"] is None
                    assert record["why_not"] in row["error"]
                else:
                    assert record["placement"] == "tensorized" and record["check"] == "exact"
                    assert record["cycles"] == row["cycles"] > 0, (layer, machine)
        assert totals[machine]["cycles"] == report["totals"]["cycles"]
        assert totals[machine]["layers"] == report["totals"]["tensorized"]
        assert totals[machine]["failed"] == sum(r["placement"] == "fallback"
                                                for r in records.values())


@pytest.mark.slow  # in CI's slow pass, for the default run's time
def test_each_layer_has_the_cycles_tensorize_model_reports(write_sweep, tiny_model, tmp_path,
                                                           capsys):
    sweep = load_sweep(_sweep(write_sweep, tiny_model))
    names = [w.name for w in sweep.workloads]
    assert names == ["tiny_int8:conv1", "tiny_int8:layer1.0.conv1",
                     "tiny_int8:layer1.0.downsample", "tiny_int8:layer1.0.conv2",
                     "tiny_int8:fc"]
    shared = dict(sweep.workloads[2].info)
    assert shared["layers"] == ("layer1.0.downsample", "layer1.0.conv3")
    assert shared["count"] == 2 and shared["model"] == "tiny_int8.onnx"
    graph = import_model(tiny_model)
    by_name = {layer.name: layer for layer in graph.layers}
    for workload in sweep.workloads:  # what a worker builds is the layer's own kernel
        layer = by_name[dict(workload.info)["layers"][0]]
        assert structural_equal(workload.build(), layer.func)
    out = tmp_path / "out"
    outcome = run_sweep(sweep, out, CountingExecutor(), stream=io.StringIO(), plots=False)
    assert [r["error"] for r in outcome.rows] == [None] * 5
    _check_against_model_command(outcome, out, sweep, tiny_model, capsys)
    for row, workload in zip(outcome.rows, sweep.workloads, strict=True):
        info = dict(workload.info)
        assert (row["model"], row["layers"], row["count"]) == (
            "tiny_int8.onnx", list(info["layers"]), info["count"])
    table = list(csv.DictReader((out / "results.csv").open()))
    assert [row["layers"] for row in table] == [
        " ".join(dict(w.info)["layers"]) for w in sweep.workloads]
    assert {row["model"] for row in table} == {"tiny_int8.onnx"}
    assert outcome.summary["model_totals"] == model_totals(outcome.rows, sweep.workloads)
    assert model_totals_text(outcome.summary["model_totals"]) in summary_text(outcome.summary)
    again = run_sweep(load_sweep(_sweep(write_sweep, tiny_model)), out, CountingExecutor(),
                      stream=io.StringIO(), plots=False)
    assert (again.executed, again.resumed) == (0, 5)


@pytest.mark.slow
def test_a_model_sweep_on_the_pool_matches_the_model_command(write_sweep, small_resnet,
                                                             tmp_path, capsys):
    sweep = load_sweep(_sweep(write_sweep, small_resnet, rows="[8, 16]"))
    out = tmp_path / "out"
    outcome = run_sweep(sweep, out, LocalExecutor(2), stream=io.StringIO(), plots=False)
    assert len(outcome.rows) == 2 * len(sweep.workloads)
    # Every layer runs, the last stage's one-pixel convolutions included (the importer gives
    # their kernels one more output column, so the GEMM keeps a row iterator).
    assert [r["error"] for r in outcome.rows] == [None] * len(outcome.rows)
    assert any(r["workload"] == "resnet50_int8:layer4.0.conv2" for r in outcome.rows)
    _check_against_model_command(outcome, out, sweep, small_resnet, capsys)


@pytest.mark.parametrize(("select", "kept"), [
    ("{op: Conv, window: 3x3}", ["layer1.0.conv2", "layer2.0.conv2", "layer3.0.conv2",
                                 "layer4.0.conv2"]),
    ("{window: 3x3 s1, name: 'layer[12].*'}", ["layer1.0.conv2", "layer2.0.conv2"]),
    ("{op: [Gemm, QDQ Gemm]}", ["fc"]),
    ("{name: [fc, conv1], op: Conv}", ["conv1"]),
    ("{window: 1x1 s2}", ["layer2.0.conv1", "layer2.0.downsample", "layer3.0.conv1",
                          "layer3.0.downsample", "layer4.0.conv1", "layer4.0.downsample"]),
])
def test_select_keeps_the_layers_it_names(write_sweep, small_resnet, select, kept):
    sweep = load_sweep(_sweep(write_sweep, small_resnet, select=f"    select: {select}\n"))
    chosen = [layer for w in sweep.workloads for layer in dict(w.info)["layers"]]
    assert chosen == kept
    assert all(w.name.startswith("resnet50_int8:") for w in sweep.workloads)


def _error(write_sweep, text):
    with pytest.raises(SweepSpecError) as info:
        load_sweep(write_sweep(text))
    message = str(info.value)
    assert "Traceback" not in message and "tensorize.sweep" not in message
    return info.value


def test_a_model_without_gemm_layers_is_refused(write_sweep, tmp_path):
    from onnx import TensorProto, helper

    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4])
    graph = helper.make_graph([helper.make_node("Relu", ["x"], ["y"], name="relu")], "g",
                              [x], [y])
    path = tmp_path / "relu.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)
    error = _error(write_sweep, SWEEP.format(rows="[8]", model=path, select=""))
    (finding,) = error.findings
    assert "workloads[].model requires a model with a convolution or matrix product, got " \
           "none among the 1 layers" in finding.message
    assert (finding.loc.line, finding.loc.col) == (7, 12)


# Each mistake in a model entry: the entry's text, the message fragment, line and column.
MISTAKES = [
    ("    select: {op: Conv, kernel: 3x3}\n",
     "unknown field 'kernel'; expected one of op, window, name", 8, 24),
    ("    select: {window: [3x3, three]}\n",
     "select.window requires a window such as 3x3 or 3x3 s2, got 'three'", 8, 28),
    ("    select: {op: [Conv, 7]}\n",
     "select.op requires text or a list of text, got ['Conv', 7]", 8, 25),
    ("    select: [Conv]\n",
     "workloads[].select requires a mapping of op, window, name", 8, 13),
    ("    select: {op: Softmax}\n",
     "select requires a filter that keeps a layer, got none of the 6 GEMM-like layers of", 8, 5),
    ("    weights: int8\n", "unknown field 'weights'; expected one of model, select", 8, 5),
]


@pytest.mark.parametrize(("select", "fragment", "line", "col"), MISTAKES,
                         ids=[m[1][:40] for m in MISTAKES])
def test_a_mistake_in_a_model_entry_is_reported_at_its_line(write_sweep, tiny_model, select,
                                                            fragment, line, col):
    error = _error(write_sweep, SWEEP.format(rows="[8]", model=tiny_model, select=select))
    found = [f for f in error.findings if fragment in f.message]
    assert found, str(error)
    assert (found[0].loc.line, found[0].loc.col) == (line, col), str(error)


def test_a_missing_model_file_is_named(write_sweep, tmp_path):
    error = _error(write_sweep, SWEEP.format(rows="[8]", model="absent.onnx", select=""))
    (finding,) = error.findings
    assert "workloads[].model: " in finding.message and "absent.onnx" in finding.message
    assert "no such file" in finding.message
    assert (finding.loc.line, finding.loc.col) == (7, 12)


def test_model_totals_count_the_layers_whose_point_failed(write_sweep, tiny_model):
    sweep = load_sweep(_sweep(write_sweep, tiny_model))
    counts = {w.name: dict(w.info)["count"] for w in sweep.workloads}
    macs = {w.name: dict(w.info)["macs"] for w in sweep.workloads}
    rows = []
    for machine, failing in (("a.yaml", None), ("b.yaml", "tiny_int8:layer1.0.downsample")):
        for number, name in enumerate(counts):
            failed = name == failing
            rows.append({"workload": name, "machine_file": machine, "fields": {"m": machine},
                         "pes": 64, "sram_bytes": 1024, "cycles": None if failed else
                         100 + number, "error": "not tensorized" if failed else None})
    complete, partial = model_totals(rows, sweep.workloads)
    assert [t["machine_file"] for t in (complete, partial)] == ["a.yaml", "b.yaml"]
    assert complete["model"] == "tiny_int8.onnx"
    assert complete["cycles"] == sum((100 + n) * counts[w] for n, w in enumerate(counts))
    assert (complete["layers"], complete["failed"]) == (6, 0)
    assert complete["utilisation"] == round(
        sum(macs[w] * counts[w] for w in counts) / (complete["cycles"] * 64), 6)
    assert (partial["layers"], partial["failed"]) == (4, 2)
    assert partial["cycles"] == complete["cycles"] - 102 * 2
    lines = model_totals_text([partial, complete]).splitlines()
    assert lines[0].startswith("tiny_int8.onnx: 6 layers, total cycles")
    assert lines[0].endswith("fastest 1 of 1 machines that ran them all; 1 machines left "
                             "some layer unrun:")
    assert lines[2].split()[:3] == ["64", "1,024", f"{complete['cycles']:,}"]
    assert lines[2].endswith("m=a.yaml") and len(lines) == 3


def test_the_example_model_sweep_reads(write_sweep, small_resnet):
    example = (MACHINES.parent / "sweeps" / "resnet50_3x3.yaml").read_text()
    text = example.replace("../machines/", f"{MACHINES}/").replace(
        "../../models/resnet50_int8.onnx", str(small_resnet))
    sweep = load_sweep(write_sweep(text))
    assert [w.name for w in sweep.workloads] == [
        f"resnet50_int8:layer{stage}.0.conv2" for stage in (1, 2, 3, 4)]
    assert expand(sweep).machines == 14 and len(expand(sweep).points) == 56
