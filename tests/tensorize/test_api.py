"""tensorize.compile_model: an ONNX model compiled for a CPU target as one call, its outputs
onnxruntime's; a target that is no CPU one refused by name."""

from __future__ import annotations

import numpy as np
import pytest

import tensorize
from ir.onnx import import_model
from tensorize.model import random_inputs
from tensorize.model.reference import reference_session
from tensorize.runners.context import ContextError
from tests.ir.onnx import models


@pytest.fixture(scope="module")
def model_path(tmp_path_factory):
    folder = tmp_path_factory.mktemp("api")
    return models.save(models.quantize(models.small_cnn(size=12), folder), folder,
                       "cnn_int8.onnx")


def test_a_compiled_model_gives_onnxruntimes_outputs(model_path):
    network = tensorize.compile_model(model_path, "x86", threads=1)
    graph = import_model(model_path)
    inputs = random_inputs(graph, 2)
    names = [info.name for info in graph.outputs]
    theirs = reference_session(graph).run(names, inputs)
    ours = network(inputs)
    for name, want in zip(names, theirs):
        np.testing.assert_array_equal(ours[name], want)


def test_a_target_of_another_kind_is_refused(model_path):
    with pytest.raises(ContextError, match="compile_model requires a CPU target, got npu"):
        tensorize.compile_model(model_path, "npu")
