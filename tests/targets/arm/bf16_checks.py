"""What the arm bf16 tests check of an emulated GEMM: its result bit for bit the hardware
order its intrinsic states, and within that order's bound of float64."""

from __future__ import annotations

import numpy as np

from intrinsics.model import Accumulation
from intrinsics.oracle import gemm_bound, hardware_gemm


def assert_hardware_order(got: np.ndarray, inputs: dict[str, np.ndarray], rule: Accumulation,
                          group: int) -> None:
    """``got`` (float32) equals :func:`hardware_gemm` of ``inputs["A"] @ inputs["B"]`` under
    ``rule``, k in groups of ``group``, bit for bit, and lies within :func:`gemm_bound` (the
    recursive-sum bound of its roundings, the flushed denormal products and flushes) of
    the exact product."""
    want = hardware_gemm(inputs["A"], inputs["B"], group, rule)
    np.testing.assert_array_equal(got.view(np.uint32), want.view(np.uint32))
    exact, bound = gemm_bound(inputs["A"], inputs["B"], rule)
    assert np.all(np.abs(got - exact) <= bound)
