"""Comparing a layer's output with onnxruntime's: exactly for integer tensors, within a
named tolerance for float ones."""

from __future__ import annotations

import numpy as np

# Float outputs: the largest absolute difference may be this fraction of the reference's
# largest magnitude (accumulation order differs between our kernels and onnxruntime's, so
# bit equality would be wrong; 1e-4 is a few float32 roundings over a K of thousands).
FLOAT_RTOL = 1e-4


def compare(got: np.ndarray, want: np.ndarray) -> tuple[bool, str]:
    """(ok, the record's ``check`` text): ``"exact"``, ``"max abs err 3.6e-07 <= 1.2e-04"``
    or ``"MISMATCH ..."`` saying how many elements differ and by how much."""
    if got.shape != want.shape:
        return False, f"MISMATCH shape {got.shape} but onnxruntime gives {want.shape}"
    if want.dtype.kind in "iub":
        if got.dtype.kind not in "iub":
            return False, f"MISMATCH dtype {got.dtype} but onnxruntime gives {want.dtype}"
        diff = np.abs(got.astype(np.int64) - want.astype(np.int64))
        wrong = int(np.count_nonzero(diff))
        if wrong == 0:
            return True, "exact"
        where = tuple(int(i) for i in np.argwhere(diff)[0])
        return False, (f"MISMATCH {wrong} of {got.size} elements differ (max |diff| "
                       f"{int(diff.max())}), first at {where}: {got[where]} vs {want[where]}")
    got64, want64 = got.astype(np.float64), want.astype(np.float64)
    if not np.all(np.isfinite(got64) == np.isfinite(want64)):
        return False, "MISMATCH non-finite values differ from onnxruntime's"
    finite = np.isfinite(want64)
    error = float(np.max(np.abs(got64 - want64)[finite], initial=0.0))
    tolerance = FLOAT_RTOL * max(float(np.max(np.abs(want64[finite]), initial=0.0)), 1e-30)
    ok = error <= tolerance
    return ok, (f"max abs err {error:.1e} {'<=' if ok else '>'} {tolerance:.1e}"
                f"{'' if ok else ' MISMATCH'} (rtol {FLOAT_RTOL:g} of max |ref|)")
