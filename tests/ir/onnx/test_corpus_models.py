"""The .onnx files the corpus cases read (tests/corpus/cli/onnx_models/) are exactly what
their builders in corpus_models.py make: regenerate them with
``python -m tests.ir.onnx.corpus_models`` after changing a builder."""

from __future__ import annotations

import onnx
import pytest

from tests.ir.onnx import corpus_models


@pytest.mark.parametrize("name", sorted(corpus_models.BUILDERS))
def test_committed_model_is_what_its_builder_makes(name):
    path = corpus_models.FOLDER / f"{name}.onnx"
    assert path.is_file(), f"{path} missing: run python -m tests.ir.onnx.corpus_models"
    committed = onnx.load_model_from_string(path.read_bytes())
    assert committed == corpus_models.BUILDERS[name](), \
        f"{path} differs from its builder: run python -m tests.ir.onnx.corpus_models"


def test_every_committed_model_has_a_builder():
    files = {p.stem for p in corpus_models.FOLDER.glob("*.onnx")}
    assert files == set(corpus_models.BUILDERS)
