"""targets.cuda.run on a GPU (skipped without CuPy and a CUDA device)."""

from __future__ import annotations

import numpy as np
import pytest

from targets import cuda, host
from targets.cuda.run import gpu_unavailable
from tests.targets.cuda.helpers import emitted, random_inputs
from tests.tensorize.engine.suite import suite

REASON = gpu_unavailable()


@pytest.mark.skipif(REASON is not None, reason=f"no CUDA device: {REASON}")
@pytest.mark.parametrize("name", ["gemm_int8", "gemm_fp16", "conv2d_nhwc_int8"])
def test_gpu_run_matches_the_reference(name):
    inputs = random_inputs(suite()[name])
    expected = host.run(suite()[name], inputs)
    actual = cuda.run(emitted(name), inputs).outputs
    for key, value in expected.items():
        if value.dtype.kind == "f":
            np.testing.assert_allclose(actual[key], value, rtol=1e-2, atol=1e-2)
        else:
            np.testing.assert_array_equal(actual[key], value)
