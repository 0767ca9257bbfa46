"""Random functions run by the JIT and by a plain Python interpreter agree exactly."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import ir
from targets import host
from tests.ir.strategies import prim_funcs
from tests.targets.host.interpreter import Interpreter


def _inputs(func: ir.PrimFunc, seed: int) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    arrays = []
    for param in func.params:
        dt = param.dtype
        if dt.is_int:
            arrays.append(rng.integers(dt.min, dt.max, param.shape, endpoint=True)
                          .astype(dt.numpy))
        else:
            arrays.append((rng.standard_normal(param.shape) * 8).astype(dt.numpy))
    return arrays


@given(func=prim_funcs(dtype_names=("int8", "int32", "uint8", "float32")),
       seed=st.integers(0, 2**16))
@pytest.mark.slow
def test_jit_agrees_with_the_interpreter(func: ir.PrimFunc, seed: int) -> None:
    inputs = _inputs(func, seed)
    expected = [a.copy() for a in inputs]
    Interpreter(func).run(expected)
    got = [a.copy() for a in inputs]
    host.compile(func)(*got)
    for param, want, have in zip(func.params, expected, got):
        assert want.dtype == have.dtype, param.name
        np.testing.assert_array_equal(have, want, err_msg=f"parameter {param.name}\n{func}")
