"""Shared test configuration: hypothesis profiles sized for a 2-core CI machine."""

import os

import pytest
from hypothesis import HealthCheck, settings

settings.register_profile(
    "ci", max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.register_profile(
    "thorough", max_examples=1000, deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))


@pytest.fixture(autouse=True)
def _private_tile_cache(tmp_path_factory, monkeypatch):
    """Each test session tunes into its own cache, never the user's (~/.cache/tensorize), so
    a tile cached by an earlier run cannot change which tile a test's kernel uses."""
    monkeypatch.setenv("TENSORIZE_CACHE_DIR", str(tmp_path_factory.getbasetemp() / "cache"))
