"""Shared helpers: suite kernels tensorized for arm, random inputs, the host reference."""

from __future__ import annotations

from functools import cache

import numpy as np

from intrinsics import default_registry
from targets import cpu
from tensorize.engine import auto_tensorize
from tests.tensorize.engine.suite import suite


@cache
def tensorized(name: str, features: str | None = None, intrinsic: str | None = None):
    """Suite kernel ``name`` tensorized for arm (default features, any intrinsic, unless
    given)."""
    return auto_tensorize(suite()[name], "arm", features=features, intrinsic=intrinsic,
                          registry=default_registry())


@cache
def kernel(name: str) -> cpu.CpuKernel:
    """The arm kernel of suite kernel ``name``."""
    return cpu.emit(tensorized(name).func, "arm", registry=default_registry())


@cache
def assembly(name: str) -> str:
    """The -O3 assembly of suite kernel ``name``."""
    return cpu.compile(kernel(name), "asm")


def random_inputs(func, seed: int = 0) -> dict[str, np.ndarray]:
    """Integer inputs over each dtype's whole range (int8 -128..127 included)."""
    rng = np.random.default_rng(seed)
    inputs = {}
    for param in func.params:
        info = np.iinfo(param.dtype.numpy)
        inputs[param.name] = rng.integers(info.min, info.max, param.shape, endpoint=True,
                                          dtype=param.dtype.numpy)
    return inputs
