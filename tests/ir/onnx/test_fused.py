"""Integer layers as one GEMM with the epilogue in the kernel (ir.onnx.fused): run on the
host backend, every fused layer's output equals onnxruntime's, bit for bit, whatever tile
the GEMM is padded to."""

from __future__ import annotations

import numpy as np
import pytest

from ir.onnx import import_model
from ir.onnx.fused import FusedGemm
from tensorize.model.executors import run_on_host
from tensorize.model.reference import run_reference
from tensorize.model.runner import random_inputs
from tests.ir.onnx import models

# A tile of unequal sides pads each dimension differently: CI's slow pass runs it.
TILES = [(16, 16, 16), pytest.param((8, 16, 64), marks=pytest.mark.slow), (1, 1, 1)]


@pytest.fixture(scope="module", params=[
    {}, {"per_channel": True}, {"unsigned": True}], ids=["int8", "per-channel", "uint8"])
def cnn(request, tmp_path_factory):
    folder = tmp_path_factory.mktemp("fused")
    built = models.quantize(models.small_cnn(size=9), folder, **request.param)
    graph = import_model(models.save(built, folder, "cnn.onnx"))
    inputs = random_inputs(graph, 3)
    return graph, inputs, run_reference(graph, inputs)


@pytest.mark.parametrize("tile", TILES, ids=["16x16x16", "8x16x64", "1x1x1"])
def test_every_fused_layer_equals_onnxruntime(cnn, tile):
    graph, inputs, expected = cnn
    fused = [layer for layer in graph.layers if layer.fused is not None]
    # The pool's GEMM form takes int8 alone.
    assert {"QDQ Conv", "QDQ Gemm"} <= {layer.op for layer in fused} <= {
        "QDQ Conv", "QDQ Gemm", "QDQ GlobalAveragePool"}
    for layer in fused:
        arrays = [expected.get(name, inputs.get(name)) for name in layer.inputs]
        got = run_on_host(layer.fused.layer(layer, tile), arrays)
        want = expected[layer.output]
        assert got.dtype == want.dtype, layer.name
        np.testing.assert_array_equal(got, want, err_msg=layer.name)


def test_the_fused_kernel_is_padded_to_whole_tiles(cnn):
    graph, _, _ = cnn
    layer = next(layer for layer in graph.layers if layer.op == "QDQ Gemm")
    fused: FusedGemm = layer.fused
    k, n = fused.weights.shape
    func = fused.layer(layer, (16, 16, 16)).func
    shapes = {p.name: p.shape for p in func.params}
    rows = -(-fused.m // 16) * 16
    depth, cols = -(-k // 16) * 16, -(-n // 16) * 16
    assert shapes == {"A": (rows, depth), "B": (depth, cols), "Bias": (cols,),
                      "Scale": (cols,), "narrowed": (rows, cols)}


def test_a_layer_without_an_output_quantisation_has_no_fused_form(tmp_path):
    graph = import_model(models.save(models.small_cnn(size=8), tmp_path, "float.onnx"))
    assert all(layer.fused is None for layer in graph.layers)
