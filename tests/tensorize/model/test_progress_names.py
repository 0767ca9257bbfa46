"""`tensorize model` prints a model's names with terminal control characters escaped: the
progress lines on stderr and the table on stdout carry no raw ESC, bell or carriage return."""

from __future__ import annotations

from tensorize.cli import main
from tests.ir.onnx import corpus_models, models


def test_progress_and_table_escape_control_characters(tmp_path, capsys):
    path = models.save(corpus_models.escaped_names(), tmp_path, "names.onnx")
    status = main(["model", str(path), "--target", "host"])
    out = capsys.readouterr()
    assert status == 0, out.err
    assert "[1/4] split\\x1b[31m:0 (Split): host" in out.err
    assert "[3/4] relu\\x07a (Relu): host" in out.err
    assert "relu\\x0db" in out.out
    for raw in ("\x1b", "\x07", "\r"):
        assert raw not in out.err and raw not in out.out
