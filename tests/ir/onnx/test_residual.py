"""Residual joins: which quantised adds a layer before them can compute in its own kernel."""

from __future__ import annotations

from dataclasses import replace

import pytest

from ir.onnx import import_model
from ir.onnx.residual import Join, residual_joins
from tests.ir.onnx import models


@pytest.fixture(scope="module")
def cnn(tmp_path_factory):
    folder = tmp_path_factory.mktemp("residual")
    return import_model(models.save(models.quantize(models.small_cnn(size=16), folder),
                                    folder, "cnn_int8.onnx"))


def _index(graph, name):
    return next(i for i, layer in enumerate(graph.layers) if layer.name == name)


def test_the_add_joins_the_convolution_of_its_first_operand(cnn):
    assert residual_joins(cnn) == [Join(_index(cnn, "conv2"), _index(cnn, "add2"))]


def test_no_join_when_the_layer_is_the_second_operand(cnn):
    # QLinearAdd's fused multiply-adds take the operands in order: the joined kernel is
    # exact for the first one only.
    at = _index(cnn, "add2")
    add = cnn.layers[at]
    swapped = replace(add, inputs=add.inputs[::-1], input_shapes=add.input_shapes[::-1])
    layers = cnn.layers[:at] + (swapped,) + cnn.layers[at + 1:]
    assert residual_joins(replace(cnn, layers=layers)) == []


def test_no_join_when_another_layer_reads_the_output(cnn):
    conv = cnn.layers[_index(cnn, "conv2")]
    gap = _index(cnn, "gap")
    reader = replace(cnn.layers[gap], inputs=(conv.output,))
    layers = cnn.layers[:gap] + (reader,) + cnn.layers[gap + 1:]
    assert residual_joins(replace(cnn, layers=layers)) == []


def test_no_join_for_an_add_with_a_constant(cnn):
    at = _index(cnn, "add2")
    plain = replace(cnn.layers[at], qadd=None)
    layers = cnn.layers[:at] + (plain,) + cnn.layers[at + 1:]
    assert residual_joins(replace(cnn, layers=layers)) == []
