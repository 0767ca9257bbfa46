"""Shared test configuration: hypothesis profiles sized for a 2-core CI machine, and the
run's settings made at the edge (a test is one: it loads the registry, the machine and the
context the library is given)."""

import os

import pytest
from hypothesis import HealthCheck, settings

from intrinsics import Registry, default_registry

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


@pytest.fixture(scope="session")
def registry() -> Registry:
    """The built-in descriptions (and those of TENSORIZE_INTRINSICS_PATH), loaded once."""
    return default_registry()


@pytest.fixture(scope="session")
def machine():
    """The built-in NPU (the ``machine:`` section of intrinsics/npu.yaml), loaded once: the
    machine a test gives the NPU's engine and backend (``config=machine``)."""
    from simulator import load_machine

    return load_machine()


@pytest.fixture(scope="session")
def context(registry):
    """The run context of a target of the built-in descriptions, as the CLI makes it:
    ``context("npu")``, ``context("host", seed=3)``."""
    from tensorize.runners import make_context

    def make(target: str, **settings):
        return make_context(registry, target, **settings)

    return make
