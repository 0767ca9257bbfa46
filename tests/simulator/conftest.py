"""Fixtures for the simulator tests: the built-in machine and the small hand-checkable one."""

from __future__ import annotations

import pytest

from simulator import MachineConfig, load_machine
from tests.simulator.helpers import small_machine


@pytest.fixture(scope="session")
def npu() -> MachineConfig:
    """The built-in machine (intrinsics/npu.yaml)."""
    return load_machine()


@pytest.fixture
def small() -> MachineConfig:
    """The hand-checkable 4x4 machine (helpers.SMALL)."""
    return small_machine()
