"""Comparing a layer's output with onnxruntime's, in the words of a model run's record:
exactly for integer tensors, within a named tolerance for float ones (the comparison itself
is :func:`tensorize.validate.compare`, the one every run uses)."""

from __future__ import annotations

import numpy as np

from tensorize.validate import compare as compare_with_reference

# Float outputs: the largest absolute difference may be this fraction of the reference's
# largest magnitude (accumulation order differs between our kernels and onnxruntime's, so
# bit equality would be wrong; 1e-4 is a few float32 roundings over a K of thousands).
FLOAT_RTOL = 1e-4


def compare(got: np.ndarray, want: np.ndarray) -> tuple[bool, str]:
    """(ok, the record's ``check`` text): ``"exact"``, ``"max error 3.6e-07 of the largest
    value (tolerance 0.0001)"`` or ``"MISMATCH ..."`` saying what differs."""
    ok, detail = compare_with_reference(got, want, rtol=FLOAT_RTOL)
    if not ok:
        return False, f"MISMATCH {detail}"
    return True, "exact" if want.dtype.kind in "iub" else detail
