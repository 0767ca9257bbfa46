"""What the importer refuses, and how: every message names the model file (and the node),
and no internal module leaks into it."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper

from ir.onnx import OnnxImportError, UnsupportedOperatorError, import_model, limits
from tensorize.model import run_model
from tests.ir.onnx import models
from tensorize.model.executors import run_on_host

F = TensorProto.FLOAT


def _no_internals(message: str) -> None:
    assert "Traceback" not in message and "ir/onnx" not in message


def _erf_model():
    nodes = [helper.make_node("Erf", ["x"], ["e"], name="erf1"),
             helper.make_node("Relu", ["e"], ["y"], name="relu")]
    return models.model(nodes, [("x", F, [2, 3])], [("y", F, [2, 3])])


def test_missing_and_unreadable_files(tmp_path):
    with pytest.raises(OnnxImportError, match="no such file") as err:
        import_model(tmp_path / "absent.onnx")
    _no_internals(str(err.value))
    junk = tmp_path / "junk.onnx"
    junk.write_bytes(b"\x0f\xff not a protobuf")
    with pytest.raises(OnnxImportError, match="junk.onnx: requires an ONNX model"):
        import_model(junk)


def test_unsupported_operator_refused_naming_node_and_op(tmp_path):
    path = models.save(_erf_model(), tmp_path, "erf.onnx")
    with pytest.raises(UnsupportedOperatorError) as err:
        import_model(path, fallback=False)
    message = str(err.value)
    assert "erf.onnx" in message and "'erf1'" in message and "Erf" in message
    assert (err.value.node, err.value.op_type) == ("erf1", "Erf")
    _no_internals(message)


def test_unsupported_operator_runs_on_host_through_onnxruntime(tmp_path):
    graph = import_model(models.save(_erf_model(), tmp_path, "erf.onnx"))
    erf, relu = graph.layers
    assert erf.fallback and erf.host is not None and "onnxruntime" in erf.epilogue
    x = np.linspace(-2, 2, 6, dtype=np.float32).reshape(2, 3)
    from math import erf as exact

    want = np.vectorize(exact)(x.astype(np.float64))
    assert np.max(np.abs(run_on_host(erf, [x]) - want)) < 1e-6
    assert not relu.fallback


def test_node_count_bounded(tmp_path, monkeypatch):
    path = models.save(_erf_model(), tmp_path, "erf.onnx")
    monkeypatch.setattr(limits, "MAX_NODES", 1)
    with pytest.raises(OnnxImportError, match="erf.onnx: requires at most 1 nodes, got 2"):
        import_model(path)


def test_file_size_bounded(tmp_path, monkeypatch):
    path = models.save(_erf_model(), tmp_path, "erf.onnx")
    monkeypatch.setattr(limits, "MAX_MODEL_BYTES", 16)
    with pytest.raises(OnnxImportError, match="erf.onnx: requires a model of at most"):
        import_model(path)


def test_symbolic_input_shape_refused(tmp_path):
    node = helper.make_node("Relu", ["x"], ["y"], name="relu")
    built = models.model([node], [("x", F, ["batch", 3])], [("y", F, ["batch", 3])])
    with pytest.raises(OnnxImportError, match="input 'x' requires a static shape"):
        import_model(models.save(built, tmp_path, "dyn.onnx"))


def test_bad_conv_attributes_named(tmp_path):
    rng = np.random.default_rng(0)
    node = helper.make_node("Conv", ["x", "w"], ["y"], name="conv7", group=3)
    built = models.model([node], [("x", F, [1, 4, 6, 6])], [("y", F, None)],
                         [models.weights(rng, "w", [6, 2, 3, 3])])
    with pytest.raises(OnnxImportError) as err:
        import_model(models.save(built, tmp_path, "conv.onnx"))
    assert "conv.onnx: node 'conv7' (Conv) requires input channels 4 = group 3" in str(err.value)


def test_gemm_with_alpha_refused(tmp_path):
    rng = np.random.default_rng(0)
    node = helper.make_node("Gemm", ["x", "w"], ["y"], name="fc", alpha=2.0)
    built = models.model([node], [("x", F, [2, 4])], [("y", F, [2, 3])],
                         [models.weights(rng, "w", [4, 3])])
    with pytest.raises(OnnxImportError, match="'fc' \\(Gemm\\) requires transA 0, alpha 1"):
        import_model(models.save(built, tmp_path, "gemm.onnx"))


def test_tensor_elements_bounded(tmp_path, monkeypatch):
    path = models.save(_erf_model(), tmp_path, "erf.onnx")
    monkeypatch.setattr(limits, "MAX_TENSOR_ELEMENTS", 5)
    with pytest.raises(OnnxImportError, match="tensor 'x' requires at most 5 elements, got 6"):
        import_model(path)


def test_missing_optional_package_says_how_to_install(tmp_path, monkeypatch):
    import importlib.util

    path = models.save(_erf_model(), tmp_path, "erf.onnx")
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a: None if name == "onnx" else real(name, *a))
    with pytest.raises(OnnxImportError, match=r"requires the onnx package.*tensorize\[models\]"):
        import_model(path)


def _save_external_weight_model(folder, location: str):
    """A MatMul whose weight W (2x2 float32) is stored outside the model, at ``location``,
    written as bytes (onnx's checker and saver would refuse or move a bad location)."""
    weight = helper.make_tensor("W", F, [2, 2], [1.0, 2.0, 3.0, 4.0])
    weight.ClearField("float_data")
    weight.data_location = TensorProto.EXTERNAL
    for key, value in (("location", location), ("length", "16")):
        entry = weight.external_data.add()
        entry.key, entry.value = key, value
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "W"], ["y"], name="mm")], "test",
        [helper.make_tensor_value_info("x", F, [2, 2])],
        [helper.make_tensor_value_info("y", F, [2, 2])], [weight])
    built = helper.make_model(graph, opset_imports=[helper.make_opsetid("", models.OPSET)])
    built.ir_version = 9
    path = folder / "ext.onnx"
    path.write_bytes(built.SerializeToString())
    return path


def test_external_weights_are_read_from_beside_the_model(tmp_path, monkeypatch, context):
    folder = tmp_path / "model"
    folder.mkdir()
    np.array([1.0, 2.0, 3.0, 4.0], np.float32).tofile(folder / "weights.bin")
    path = _save_external_weight_model(folder, "weights.bin")
    monkeypatch.chdir(tmp_path)  # not the model's folder
    graph = import_model(path)
    np.testing.assert_array_equal(graph.constants["W"], [[1.0, 2.0], [3.0, 4.0]])
    # onnxruntime, the reference every layer is checked against, sees the same weights.
    run = run_model(graph, context("host"))
    assert run.ok and [r["check"].startswith("max error") for r in run.records] == [True]


@pytest.mark.parametrize("location", ["../outside.bin", "/etc/hostname"])
def test_external_weights_outside_the_models_folder_are_refused(tmp_path, location):
    (tmp_path / "outside.bin").write_bytes(bytes(16))
    folder = tmp_path / "model"
    folder.mkdir()
    path = _save_external_weight_model(folder, location)
    with pytest.raises(OnnxImportError, match=r"ext.onnx: initializer 'W' cannot be read") as err:
        import_model(path)
    _no_internals(str(err.value))
