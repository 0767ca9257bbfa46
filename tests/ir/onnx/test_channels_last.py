"""A max pool on a channels-last int8 input: its kernel (elementwise blocks, one per window
offset) over the input padded with -128 is the pool, checked window by window."""

from __future__ import annotations

import numpy as np
import pytest

import targets.host
from ir.onnx.channels_last import MaxPoolNhwc


def _pooled_by_loops(x: np.ndarray, pool: MaxPoolNhwc) -> np.ndarray:
    """The max over each window's pixels inside ``x`` (padding never counts)."""
    n, h, w, c = x.shape
    (kh, kw), (sh, sw), (top, left, bottom, right) = pool.kernel, pool.strides, pool.pads
    oh, ow = (h + top + bottom - kh) // sh + 1, (w + left + right - kw) // sw + 1
    out = np.empty((n, oh, ow, c), np.int8)
    for i in range(oh):
        for j in range(ow):
            rows = slice(max(i * sh - top, 0), min(i * sh - top + kh, h))
            cols = slice(max(j * sw - left, 0), min(j * sw - left + kw, w))
            out[:, i, j] = x[:, rows, cols].max(axis=(1, 2))
    return out


@pytest.mark.parametrize("pool", [MaxPoolNhwc((3, 3), (2, 2), (1, 1, 1, 1)),
                                  MaxPoolNhwc((2, 2), (2, 2), (0, 0, 0, 0)),
                                  MaxPoolNhwc((3, 2), (1, 2), (0, 1, 2, 0))],
                         ids=["3x3s2p1", "2x2s2", "3x2-asymmetric"])
def test_the_kernel_over_the_padded_input_is_the_pool(pool):
    # Values down to -128, so a window of -128 alone shows the padding does not count.
    x = np.random.default_rng(3).integers(-128, 128, (2, 7, 9, 5), dtype=np.int8)
    x[0, :3, :3] = -128
    padded = np.full(pool.padded_shape(x.shape), -128, np.int8)
    pool.pad_into(x, padded)
    func = pool.func(x.shape)
    out = targets.host.run(func, {"X": padded})
    got = out[func.params[-1].name]
    np.testing.assert_array_equal(got, _pooled_by_loops(x, pool))
    np.testing.assert_array_equal(pool([x]), got)
