"""The narrow dtypes (int4, uint4, float8_e4m3, float8_e5m2): their names and ranges, the
checked conversion into them, int4's packing two to a byte, and buffers of them through the
host executor: every value loads, stores back and widens exactly."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

import ir
from ir import dtypes, te
from ir.errors import ExecutionError, IRError
from targets import host

NARROW = (dtypes.int4, dtypes.uint4, dtypes.float8_e4m3, dtypes.float8_e5m2)


@pytest.mark.parametrize("alias, expected", [
    ("s4", dtypes.int4), ("i4", dtypes.int4), ("u4", dtypes.uint4),
    ("e4m3", dtypes.float8_e4m3), ("e5m2", dtypes.float8_e5m2)])
def test_short_names(alias, expected):
    assert dtypes.dtype(alias) is expected
    assert dtypes.dtype(expected.numpy) is expected


def test_ranges():
    assert (dtypes.int4.min, dtypes.int4.max) == (-8, 7)
    assert (dtypes.uint4.min, dtypes.uint4.max) == (0, 15)
    assert dtypes.float8_e4m3.max == 448.0
    assert dtypes.float8_e5m2.max == 57344.0


@pytest.mark.parametrize("dt, values", [("int4", [-9, 0]), ("int4", [8]), ("uint4", [-1]),
                                        ("uint4", [16]), ("float8_e4m3", [449.0, 1.0])])
def test_a_value_out_of_range_is_refused(dt, values):
    with pytest.raises(IRError, match=f"{dt} holds"):
        dtypes.narrow_array(np.array(values), dt)


def _every_value(dt: ir.DType) -> np.ndarray:
    if dt.is_int:
        return np.arange(dt.min, dt.max + 1).astype(dt.numpy)
    return np.arange(256, dtype=np.uint8).view(dt.numpy)


@pytest.mark.parametrize("dt", NARROW, ids=str)
def test_a_buffer_round_trips_and_widens_exactly_on_the_host(dt):
    values = _every_value(dt)
    n = values.size
    X = te.placeholder((n,), dt.name, "X")
    Y = te.compute((n,), lambda i: X[i], "Y")
    wide = "int32" if dt.is_int else "float32"
    W = te.compute((n,), lambda i: ir.cast(wide, X[i]), "W")
    out = host.run(te.create_prim_func([X, Y, W], "copy"), {"X": values})
    assert out["Y"].dtype == dt.numpy
    assert np.array_equal(out["Y"].view(np.uint8) & (0xF if dt.bits == 4 else 0xFF),
                          values.view(np.uint8) & (0xF if dt.bits == 4 else 0xFF))
    np.testing.assert_array_equal(out["W"], values.astype(wide))


def test_the_host_refuses_to_round_to_float8():
    X = te.placeholder((4,), "float32", "X")
    Y = te.compute((4,), lambda i: ir.cast("float8_e4m3", X[i]), "Y")
    with pytest.raises(ExecutionError, match="does not round results to float8_e4m3"):
        host.run(te.create_prim_func([X, Y], "narrowing"), {"X": np.ones(4, np.float32)})


def test_ml_dtypes_holds_int4_in_the_low_nibble():
    # The host executor and the CUDA emulation rely on this layout of numpy's int4.
    assert np.array([-1], ml_dtypes.int4).view(np.uint8)[0] & 0xF == 0xF
