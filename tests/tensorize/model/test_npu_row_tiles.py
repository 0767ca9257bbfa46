"""A layer whose GEMM the NPU schedule tiles in rows that do not divide its rows gets them
padded in its kernel, before its epilogue: the epilogue stays in the program, on the vector
unit, and the layer is exact."""

from __future__ import annotations

import numpy as np
from onnx import TensorProto, helper

from ir.onnx import import_model
from simulator import load_machine
from tensorize.engine.npu_cycles import choose
from tensorize.engine.npu_traffic import GemmShape, padded_m
from tensorize.model import run_model
from tests.ir.onnx import models


def one_conv(size: int, cin: int, cout: int):
    """A 1x1 convolution of ``cin`` to ``cout`` channels on a ``size`` x ``size`` input."""
    rng = np.random.default_rng(3)
    node = helper.make_node("Conv", ["x", "w", "b"], ["y"], name="conv")
    return models.model([node], [("x", TensorProto.FLOAT, [1, cin, size, size])],
                        [("y", TensorProto.FLOAT, [1, cout, size, size])],
                        [models.weights(rng, "w", [cout, cin, 1, 1]),
                         models.weights(rng, "b", [cout])])


def test_rows_padded_to_the_row_tile_keep_the_epilogue_in_the_program(tmp_path, context):
    # 13 x 13 pixels are 169 GEMM rows, 176 in tiles of 16; with its bias and scale beside
    # the sums the schedule takes a row tile that does not divide 176.
    shape = GemmShape(176, 32, 64, 16, 16, 16, acc_vectors=2)
    rows = padded_m(shape, choose(shape, load_machine()))
    assert rows > 176
    graph = import_model(models.save(models.quantize(one_conv(13, 64, 32), tmp_path),
                                     tmp_path, "conv.onnx"))
    run = run_model(graph, context("npu"))
    assert run.ok
    ((record, note),) = [(r, n) for r, n in zip(run.records, run.notes)
                         if r["op"].startswith("QDQ Conv")]
    assert record["placement"] == "tensorized" and record["check"] == "exact"
    assert record["executed_macs"] == rows * 32 * 64
    assert "bias and requantisation on the vector unit, in the program" in note
    assert "host stages" not in note and "epilogue on the host" not in note
