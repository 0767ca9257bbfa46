"""Names from a model reach a terminal (progress lines, tables, messages) with every
character a terminal would act on escaped, never raw."""

from __future__ import annotations

import pytest

from ir.onnx import import_model
from ir.onnx.errors import printable
from tests.ir.onnx import corpus_models, models


@pytest.mark.parametrize("raw, shown", [
    ("conv1", "conv1"),
    ("layer1.0/conv 2", "layer1.0/conv 2"),
    ("caf\u00e9 \u5377\u7a4d", "caf\u00e9 \u5377\u7a4d"),
    ("red\x1b[31m", "red\\x1b[31m"),
    ("a\rb\nc\x07\x00", "a\\x0db\\x0ac\\x07\\x00"),
    ("rtl\u202eevil", "rtl\\u202eevil"),
    ("line\u2028sep", "line\\u2028sep"),
])
def test_printable_escapes_only_what_a_terminal_acts_on(raw, shown):
    assert printable(raw) == shown


def test_layer_names_and_ops_are_printable(tmp_path):
    graph = import_model(models.save(corpus_models.escaped_names(), tmp_path, "n.onnx"))
    assert [layer.name for layer in graph.layers] == [
        "split\\x1b[31m:0", "split\\x1b[31m:1", "relu\\x07a", "relu\\x0db"]
    assert all(layer.name.isprintable() and layer.op.isprintable() for layer in graph.layers)
