"""What the reader refuses before any layer is built: an opset newer than the installed onnx
defines, and a node no one can run (a domain not imported, a domain neither onnx nor
onnxruntime defines, an operator onnx does not have, or not yet at the model's opset). Each
message names the file and the node (or the opset import), and no internal module."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from ir.onnx import OnnxImportError, import_model
from tests.ir.onnx import models
from tensorize.model.executors import run_on_host

F = TensorProto.FLOAT


def _no_internals(message: str) -> None:
    assert "Traceback" not in message
    assert "ir/onnx" not in message and "ir.onnx" not in message and ".py" not in message


def _save(tmp_path, nodes, opsets, name="m.onnx", functions=()):
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", F, [2, 3])],
                              [helper.make_tensor_value_info("y", F, [2, 3])])
    built = helper.make_model(graph, opset_imports=[helper.make_opsetid(d, v)
                                                    for d, v in opsets],
                              functions=list(functions))
    built.ir_version = 9
    return models.save(built, tmp_path, name)


def _refused(path, *fragments: str) -> str:
    with pytest.raises(OnnxImportError) as err:
        import_model(path)
    message = str(err.value)
    assert message.startswith(f"{path}: "), message
    for fragment in fragments:
        assert fragment in message, message
    _no_internals(message)
    return message


@pytest.mark.parametrize("domain, version", [("", 99), ("ai.onnx", 99), ("ai.onnx.ml", 99),
                                             ("", 0)])
def test_an_opset_beyond_what_onnx_defines_is_refused_naming_the_import(tmp_path, domain,
                                                                         version):
    opsets = [("", 17), (domain, version)] if domain == "ai.onnx.ml" else [(domain, version)]
    path = _save(tmp_path, [helper.make_node("Relu", ["x"], ["y"], name="relu")], opsets)
    shown = domain or "ai.onnx"
    _refused(path, f"opset import {shown!r} requires a version from 1 to", f"got {version}")


def test_the_newest_opset_onnx_defines_is_taken(tmp_path):
    newest = onnx.defs.onnx_opset_version()
    path = _save(tmp_path, [helper.make_node("Relu", ["x"], ["y"], name="relu")],
                 [("", newest)])
    assert [layer.op for layer in import_model(path).layers] == ["Relu"]


def test_a_domain_no_one_defines_is_refused_naming_node_and_domain(tmp_path):
    path = _save(tmp_path, [helper.make_node("Foo", ["x"], ["y"], name="foo1",
                                             domain="com.example")],
                 [("", 17), ("com.example", 1)])
    _refused(path, "node 'foo1' (Foo) requires an operator domain onnx or onnxruntime "
                   "defines", "got 'com.example'")


def test_a_domain_missing_from_the_opset_imports_is_refused(tmp_path):
    path = _save(tmp_path, [helper.make_node("Foo", ["x"], ["y"], name="foo1",
                                             domain="com.example")], [("", 17)])
    _refused(path, "node 'foo1' (Foo) requires its domain 'com.example' among the model's "
                   "opset imports, got 'ai.onnx'")


def test_an_operator_onnx_does_not_define_is_refused(tmp_path):
    path = _save(tmp_path, [helper.make_node("Reluu", ["x"], ["y"], name="typo")], [("", 17)])
    _refused(path, "node 'typo' (Reluu) requires an operator onnx defines in domain "
                   "'ai.onnx', got Reluu")


def test_an_operator_newer_than_the_models_opset_is_refused_with_its_opset(tmp_path):
    path = _save(tmp_path, [helper.make_node("Gelu", ["x"], ["y"], name="gelu")], [("", 17)])
    _refused(path, "node 'gelu' (Gelu) requires opset 20 or later", "got opset 17")


def test_a_function_the_model_defines_runs_in_its_own_domain(tmp_path):
    body = [helper.make_node("Relu", ["a"], ["r"]), helper.make_node("Neg", ["r"], ["b"])]
    function = helper.make_function("local.fn", "NegRelu", ["a"], ["b"], body,
                                    [helper.make_opsetid("", 17)])
    path = _save(tmp_path, [helper.make_node("NegRelu", ["x"], ["y"], name="fn",
                                             domain="local.fn")],
                 [("", 17), ("local.fn", 1)], functions=[function])
    layer, = import_model(path).layers
    x = np.linspace(-1, 1, 6, dtype=np.float32).reshape(2, 3)
    assert layer.fallback
    np.testing.assert_array_equal(run_on_host(layer, [x]), -np.maximum(x, 0))


def test_an_escape_sequence_in_an_op_type_is_shown_escaped(tmp_path):
    path = _save(tmp_path, [helper.make_node("Foo\x1b[2J", ["x"], ["y"], name="n",
                                             domain="com.example")],
                 [("", 17), ("com.example", 1)])
    message = _refused(path, "(Foo\\x1b[2J)")
    assert "\x1b" not in message
