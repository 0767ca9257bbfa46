"""The CUDA backend's errors are the project's (ir.errors), and the command line prints
them as user errors."""

from __future__ import annotations

import importlib

import pytest

from ir.errors import ExecutionError, TensorizeError
from targets import cuda
from targets.cuda import errors
from tensorize.cli import main

# A fragment read element by element: the engine tensorizes nothing (--allow-fallback runs
# it as is), and the backend refuses to emit it.
FRAGMENT_PEEK = '''\
from ir import script as T


@T.prim_func
def peek(A: T.Buffer((16, 16), "float32"), C: T.Buffer((16, 16), "float32")):
    Cf = T.alloc_buffer((16, 16), "float32", scope="wmma.accumulator")
    for i, j in T.grid(16, 16):
        with T.block("fill"):
            vi, vj = T.axis.remap("SS", [i, j])
            Cf[vi, vj] = A[vi, vj]
    for i, j in T.grid(16, 16):
        with T.block("peek"):
            vi, vj = T.axis.remap("SS", [i, j])
            C[vi, vj] = Cf[vi, vj]
'''


@pytest.mark.parametrize(("error", "base"), [
    (cuda.EmitError, TensorizeError),
    (cuda.CompileError, ExecutionError),
    (cuda.EmulationError, ExecutionError),
])
def test_the_backends_errors_are_in_the_projects_hierarchy(error, base):
    assert issubclass(error, base) and issubclass(error, TensorizeError)
    assert not issubclass(error, (ValueError, RuntimeError))
    assert getattr(errors, error.__name__) is error


def test_the_errors_are_importable_where_they_were():
    # (``targets.cuda.compile`` and ``.emulate`` are the functions; these are the modules.)
    compile_module = importlib.import_module("targets.cuda.compile")
    emulate_module = importlib.import_module("targets.cuda.emulate")
    assert compile_module.CompileError is cuda.CompileError
    assert emulate_module.EmulationError is cuda.EmulationError


def test_the_command_line_prints_a_refusal_to_emit_as_a_user_error(tmp_path, capsys):
    path = tmp_path / "peek.py"
    path.write_text(FRAGMENT_PEEK)
    assert main(["run", str(path), "--target", "cuda", "--allow-fallback", "--quiet"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: buffer Cf is a wmma.accumulator fragment, opaque to plain "
                          "loads and stores")
    assert "internal error" not in err and "EmitError" not in err and "targets." not in err
