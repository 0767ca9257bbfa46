"""The emulation's build directory: none until the first build, and gone when the process
that made it exits. Each check runs a fresh interpreter with its own temporary directory."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]

EMULATE = """
import tempfile
from pathlib import Path
import numpy as np
from intrinsics import default_registry
from ir import te
from targets import cuda

A = te.placeholder((64,), "int32", "A")
B = te.compute((64,), lambda i: A[i] + 1, "B")
out = cuda.emulate(cuda.emit(te.create_prim_func([A, B], "inc"), default_registry()),
                   {"A": np.arange(64, dtype=np.int32)})
assert (out["B"] == np.arange(1, 65)).all()
print(len(list(Path(tempfile.gettempdir()).glob("tz_cuda_emulation_*"))))
"""


def _run(code: str, tmp: Path) -> str:
    env = dict(os.environ, TMPDIR=str(tmp), PYTHONPATH=str(ROOT))
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    return done.stdout


def _left(tmp: Path) -> list[Path]:
    return list(tmp.glob("tz_cuda_emulation_*"))


def test_importing_the_backend_makes_no_build_directory(tmp_path):
    _run("import targets.cuda", tmp_path)
    assert _left(tmp_path) == []


@pytest.mark.slow  # in CI's slow pass, for the default run's time
@pytest.mark.skipif(shutil.which("g++") is None and shutil.which("c++") is None,
                    reason="no host C++ compiler to build the emulation")
def test_the_build_directory_made_by_a_run_is_removed_at_exit(tmp_path):
    assert _run(EMULATE, tmp_path).split() == ["1"]  # one, while the process runs
    assert _left(tmp_path) == []
