"""Checking a run's outputs: random inputs over a dtype's whole range, and the comparison of
an output with its reference (exact for integers, a relative tolerance per float dtype).

Shared by ``tensorize run``, ``tensorize sweep`` and anything else that proves a tensorized
kernel by running it.
"""

from __future__ import annotations

from typing import Any

import numpy as np

# Float outputs are compared to a float64 numpy reference with this relative tolerance per
# dtype (accumulation order differs, so exact equality would be wrong for floats).
_RTOL = {"float16": 2e-2, "bfloat16": 5e-2, "float32": 1e-4, "float64": 1e-10}


def random_array(shape: tuple[int, ...], dtype: Any, rng: np.random.Generator) -> np.ndarray:
    """Random values over an integer dtype's whole range, or standard normal floats."""
    if dtype.is_int:
        return rng.integers(dtype.min, dtype.max + 1, shape).astype(dtype.numpy)
    return rng.standard_normal(shape).astype(dtype.numpy)


def compare(got: np.ndarray, want: np.ndarray, rtol: float | None = None) -> tuple[bool, str]:
    """Exact comparison for integers, relative tolerance for floats; (ok, one-line detail).

    Both sides are compared in a type that holds every value of either, never narrowed to
    ``got``'s dtype: a reference off by 2**32 from an int32 output differs. A float output
    is within tolerance when its largest difference from the reference is at most ``rtol``
    (by default the output dtype's) times the reference's largest magnitude; infinities and
    NaNs must sit where the reference has them."""
    if got.shape != want.shape:
        return False, f"shape {got.shape} but the reference gives {want.shape}"
    if want.dtype.kind in "iub" and got.dtype.kind not in "iub":
        return False, f"dtype {got.dtype} but the reference gives {want.dtype}"
    if got.dtype.kind in "iub":
        common = _exact_common_type(got.dtype, want.dtype)
        wrong = got.astype(common) != want.astype(common)
        mismatched = int(np.count_nonzero(wrong))
        if mismatched:
            where = tuple(int(x) for x in np.argwhere(wrong)[0])
            return False, (f"{mismatched} of {got.size} elements differ, first at {where}: "
                           f"{got[where]} vs {want[where]}")
        return True, f"all {got.size} elements equal (exact)"
    rtol = _RTOL.get(got.dtype.name, 1e-4) if rtol is None else rtol
    got64, want64 = got.astype(np.float64), want.astype(np.float64)
    finite = np.isfinite(want64)
    if not np.array_equal(np.isfinite(got64), finite):
        return False, "non-finite values where the reference has finite ones, or the reverse"
    scale = max(float(np.max(np.abs(want64[finite]), initial=0.0)), 1e-30)
    error = float(np.max(np.abs(got64 - want64)[finite], initial=0.0)) / scale
    return error <= rtol, f"max error {error:.2e} of the largest value (tolerance {rtol:g})"


def _exact_common_type(got: np.dtype, want: np.dtype) -> np.dtype:
    """A dtype holding every value of an integer ``got`` and of ``want`` exactly: their
    integer promotion, float64 against a float, Python integers where no fixed-width integer
    holds both (uint64 against a signed type)."""
    if want.kind not in "iub":
        return np.dtype(np.float64)
    common = np.result_type(got, want)
    return common if common.kind in "iub" else np.dtype(object)
