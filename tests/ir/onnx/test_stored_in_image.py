"""A kernel's output copied into the interior of the padded image the convolution after it
reads (:func:`ir.onnx.kernels.stored_in_image`): run on the host, the interior holds the
kernel's rows pixel by pixel and nothing else of the image changes."""

from __future__ import annotations

import numpy as np
import pytest

from ir.onnx import kernels
from ir.onnx.kernels import ConvShape, Requantisation
from targets import host

SHAPE = ConvShape(2, 16, 4, 3, 16, (1, 1), (1, 1), (0, 0, 0, 0), (1, 1), 1)


def test_the_interior_holds_the_kernels_rows_and_the_rest_is_kept():
    base = kernels.conv_rows_requantised(SHAPE, 32, 16, 16, Requantisation(-5))
    stored = kernels.stored_in_image(base, (2, 4, 3), (6, 5))
    assert stored.params[-1].shape == (2, 6, 5, 16)
    rng = np.random.default_rng(0)
    inputs = {"X": rng.integers(-128, 128, (2, 4, 3, 16), dtype=np.int8),
              "B": rng.integers(-128, 128, (16, 16), dtype=np.int8),
              "Bias": rng.integers(-500, 500, 16).astype(np.int32),
              "Scale": rng.uniform(1e-3, 0.05, 16).astype(np.float32)}
    rows = host.run(base, inputs)[base.params[-1].name]
    halo = np.full((2, 6, 5, 16), 7, np.int8)
    image = host.run(stored, {**inputs, "Image": halo})["Image"]
    assert np.array_equal(image[:, :4, :3].reshape(24, 16), rows[:24])
    kept = np.ones((2, 6, 5, 16), bool)
    kept[:, :4, :3] = False
    assert np.array_equal(image[kept], halo[kept])


def test_an_output_too_short_for_the_image_is_refused():
    base = kernels.conv_rows_requantised(SHAPE, 32, 16, 16, Requantisation(0))
    with pytest.raises(ValueError, match="at least 36 rows for a 3x4x3 image"):
        kernels.stored_in_image(base, (3, 4, 3), (6, 5))
