"""What the doc tests share across modules: the example networks, built once a session."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.docs.doc_tables import ROOT, run_bench


@pytest.fixture(scope="session")
def example_models(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The directory holding the full-size example networks
    (``examples/models/build_models.py``), so that every page's figures of one network come
    from one run of ``tensorize model`` on one file."""
    out = tmp_path_factory.mktemp("models")
    run_bench(str(ROOT / "examples" / "models" / "build_models.py"), str(out))
    return out
