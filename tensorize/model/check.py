"""Checking a layer, in the words of a model run's record: its output against onnxruntime's,
exactly for integer tensors and within a tolerance per float dtype (the comparison itself is
:func:`tensorize.validate.compare`, the one every run uses); and a float layer's kernel, bit
for bit, against the hardware-order reference of its tensorized block
(:mod:`tensorize.hardware_order`), where that reference can follow the block."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

import numpy as np

from tensorize.validate import compare as compare_with_reference

if TYPE_CHECKING:
    from intrinsics import Registry
    from ir import PrimFunc
    from tensorize.engine import BlockOutcome

# Float outputs: the largest absolute difference may be this fraction of the reference's
# largest magnitude, per output dtype (docs/models.md, "Float16 models"). float32: our
# kernels and onnxruntime's sum in different orders, and 1e-4 is a few float32 roundings
# over a K of thousands. float16: both sides round a float32 sum to float16 once, and sums
# in two orders may round to neighbouring values (one unit in the last place, 2**-10 of a
# power of two); onnxruntime also drops the float16 casts between two of its float32
# kernels, so a layer of ours reads an input rounded to float16 that onnxruntime's reads
# in float32 (half a unit per input). Four units at the largest value cover both.
FLOAT_RTOL = {"float32": 1e-4, "float16": 4 * 2.0 ** -10}


def tolerance(dtype: np.dtype) -> float:
    """The tolerance of a float output of ``dtype`` (:data:`FLOAT_RTOL`; float32's for a
    dtype it does not name)."""
    return FLOAT_RTOL.get(np.dtype(dtype).name, FLOAT_RTOL["float32"])


def compare(got: np.ndarray, want: np.ndarray, kernel: tuple[bool, str] | None = None
            ) -> tuple[bool, str]:
    """(ok, the record's ``check`` text): ``"exact"``, ``"max error 3.6e-07 of the largest
    value (tolerance 0.0001)"`` or ``"MISMATCH ..."`` saying what differs. ``kernel``, the
    check of a float layer's kernel (:func:`hardware_check`), comes first in the text and
    must pass too."""
    ok, detail = compare_with_reference(got, want, rtol=tolerance(want.dtype))
    text = "exact" if ok and want.dtype.kind in "iub" else detail
    if kernel is not None:
        text = f"{kernel[1]}; against onnxruntime: {text}"
        ok = ok and kernel[0]
    return ok, text if ok else f"MISMATCH {text}"


def hardware_check(func: PrimFunc, outcome: BlockOutcome, registry: Registry,
                   inputs: Mapping[str, np.ndarray], sums: np.ndarray
                   ) -> tuple[bool, str] | None:
    """A float layer's kernel output ``sums`` (``func`` run tensorized on ``inputs``, its
    block ``outcome``) against the hardware-order reference of that block on its
    intrinsic: (ok, words); where the reference cannot follow the block, (True, why not:
    the output's tolerance check then stands alone); None for a block on an intrinsic that
    states no accumulation (an integer one, exact anyway)."""
    from tensorize.hardware_order import Unfollowable, block_reference, buffer_values

    intrinsic = registry.get(outcome.intrinsic or "")
    if intrinsic.accumulation is None:
        return None
    try:
        _, order = block_reference(func, outcome, intrinsic, buffer_values(func, inputs),
                                   registry)
    except Unfollowable as why:
        return True, f"kernel not bit for bit: block {outcome.block!r} ({intrinsic.name}): {why}"
    ok, detail = order.check(sums)
    return ok, f"kernel {detail}"
