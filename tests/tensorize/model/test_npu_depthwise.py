"""Depthwise layers in a network run on the NPU: grouped GEMMs of diagonal tiles with the
requantisation on the vector unit, in one program, or as two without fusion; exact against
onnxruntime. A CPU target runs the layer's own kernel."""

from __future__ import annotations

import pytest

from ir.onnx import import_model
from tensorize.model import run_model
from tests.ir.onnx import models
from tests.ir.onnx.test_depthwise import depthwise_net


@pytest.fixture(scope="module")
def graph(tmp_path_factory):
    folder = tmp_path_factory.mktemp("dw")
    return import_model(models.save(models.quantize(depthwise_net(), folder), folder,
                                    "dw.onnx"))


def _depthwise(run):
    return [(r, note) for r, note in zip(run.records, run.notes) if r["name"] in ("dw1", "dw2")]


def test_depthwise_layers_run_on_the_npu_with_their_epilogue(graph, context):
    run = run_model(graph, context("npu"))
    assert run.ok
    layers = _depthwise(run)
    assert len(layers) == 2
    for record, note in layers:
        assert record["placement"] == "tensorized" and record["intrinsic"] == "npu_gemm"
        assert record["check"] == "exact" and record["cycles"] > 0
        assert "bias and requantisation on the vector unit, in the program" in note
        # 20 channels in groups of 16: 32 lanes of diagonal tiles, each 16 wide, so the
        # array runs at least 16 x 32 / 20 products for each of the layer's.
        assert record["executed_macs"] >= record["macs"] * 16 * 32 // 20


def test_without_fusion_the_depthwise_epilogue_is_a_second_program(graph, context):
    fused = run_model(graph, context("npu"))
    unfused = run_model(graph, context("npu"), fusion=False)
    assert unfused.ok
    for (with_fusion, _), (without, note) in zip(_depthwise(fused), _depthwise(unfused)):
        assert without["placement"] == "tensorized" and without["check"] == "exact"
        assert "without fusion" in note
        assert without["cycles"] > with_fusion["cycles"]
        assert without["dram_bytes"] > with_fusion["dram_bytes"]


@pytest.mark.slow  # compiles the x86 depthwise kernels: seconds
def test_a_cpu_target_runs_the_depthwise_kernel_itself(graph, context):
    run = run_model(graph, context("x86"))
    assert run.ok
    for record, note in _depthwise(run):
        assert "compiled into the kernel" not in (note or "")


def test_a_depthwise_layer_of_one_channel_group_runs_fused(tmp_path, context):
    graph = import_model(models.save(models.quantize(depthwise_net(channels=16), tmp_path),
                                     tmp_path, "dw16.onnx"))
    run = run_model(graph, context("npu"))
    assert run.ok
    for record, note in _depthwise(run):
        assert record["placement"] == "tensorized" and record["check"] == "exact"
        assert "bias and requantisation on the vector unit, in the program" in note
