"""The kernel builders of ``examples/te/suite.py`` by name, for the benchmarks beside this
file (each is run as a script, so this directory is on the import path)."""

from __future__ import annotations

import importlib.util
from collections.abc import Callable
from pathlib import Path

SUITE = Path(__file__).resolve().parents[1] / "examples" / "te" / "suite.py"


def builders() -> dict[str, Callable]:
    """Every builder of the suite (``gemm_int8(m, n, k)``, ...) by its name."""
    spec = importlib.util.spec_from_file_location("suite", SUITE)
    if spec is None or spec.loader is None:
        raise SystemExit(f"cannot load {SUITE}")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return {builder.__name__: builder for builder in module.BUILDERS}
