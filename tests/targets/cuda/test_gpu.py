"""targets.cuda.run on a GPU (skipped without pycuda and a CUDA driver)."""

from __future__ import annotations

import numpy as np
import pytest

from targets import cuda, host
from tests.targets.cuda.helpers import emitted, random_inputs
from tests.tensorize.engine.suite import suite

pytest.importorskip("pycuda.driver")


@pytest.mark.parametrize("name", ["gemm_int8", "gemm_fp16", "conv2d_nhwc_int8"])
def test_gpu_run_matches_the_reference(name):
    try:
        import pycuda.autoinit  # noqa: F401
    except Exception as err:
        pytest.skip(f"no CUDA device: {err}")
    inputs = random_inputs(suite()[name])
    expected = host.run(suite()[name], inputs)
    actual = cuda.run(emitted(name), inputs).outputs
    for key, value in expected.items():
        if value.dtype.kind == "f":
            np.testing.assert_allclose(actual[key], value, rtol=1e-2, atol=1e-2)
        else:
            np.testing.assert_array_equal(actual[key], value)
