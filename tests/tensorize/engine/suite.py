"""The matching suite's kernels (examples/te/suite.py), loaded once."""

from __future__ import annotations

import importlib.util
from functools import cache
from pathlib import Path

import ir

SUITE = Path(__file__).resolve().parents[3] / "examples" / "te" / "suite.py"


@cache
def suite() -> dict[str, ir.PrimFunc]:
    """Every suite kernel at its default size, by name."""
    spec = importlib.util.spec_from_file_location("tensorize_suite", SUITE)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.kernels()
