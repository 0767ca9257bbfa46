"""The engine's tile product (``datapath.TileProduct``, scratch arrays per tile shape) gives
the integers of ``datapath.gemm`` and of numpy's int64 product wrapped to int32: int8 edge
values, accumulators near the int32 limits (the addition wraps), both ``reset`` forms, tiles
of several shapes in one run (each its own scratch), and reductions past float32's exact
range (which go through ``gemm``)."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from simulator import datapath


def _wrapped(values: np.ndarray) -> np.ndarray:
    """int64 values wrapped to int32, two's complement."""
    return ((values + (1 << 31)) % (1 << 32) - (1 << 31)).astype(np.int32)


def _operands(rng: np.random.Generator, rows: int, k: int, cols: int, edge: bool
              ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """float32 int8-valued operands (all -128 with ``edge``) and an int32 accumulator of
    values near the limits, as the engine keeps them."""
    if edge:
        inp = np.full((rows, k), -128, np.float32)
        wgt = np.full((k, cols), -128, np.float32)
    else:
        inp = rng.integers(-128, 128, (rows, k)).astype(np.float32)
        wgt = rng.integers(-128, 128, (k, cols)).astype(np.float32)
    near = rng.choice([-(1 << 31), (1 << 31) - 1, 0], (rows, cols))
    acc = (near + rng.integers(-(1 << 20), 1 << 20, (rows, cols))).clip(
        -(1 << 31), (1 << 31) - 1).astype(np.int32)
    return inp, wgt, acc


# One product for every example: its scratch arrays are reused across shapes and calls.
TILES = datapath.TileProduct()


@settings(max_examples=40, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), rows=st.integers(1, 40), k=st.integers(1, 33),
       cols=st.sampled_from([1, 8, 16]), reset=st.booleans(), edge=st.booleans())
def test_tile_product_gives_the_integers_of_gemm(seed, rows, k, cols, reset, edge):
    rng = np.random.default_rng(seed)
    inp, wgt, acc = _operands(rng, rows, k, cols, edge)
    got = acc.copy()
    TILES(got, inp, wgt, reset)
    want = acc.copy()
    datapath.gemm(want, inp, wgt, reset)
    exact = inp.astype(np.int64) @ wgt.astype(np.int64)
    if not reset:
        exact += acc
    assert np.array_equal(got, want)
    assert np.array_equal(got, _wrapped(exact))


def test_a_reduction_past_float32s_exact_range_goes_through_gemm():
    rng = np.random.default_rng(7)
    k = datapath.FLOAT32_EXACT_TERMS + 1
    inp = np.full((3, k), -128, np.float32)
    wgt = np.full((k, 4), -128, np.float32)
    inp[0, :7] = rng.integers(-128, 128, 7)
    acc = rng.integers(-1000, 1000, (3, 4)).astype(np.int32)
    got = acc.copy()
    datapath.TileProduct()(got, inp, wgt, reset=False)
    exact = acc + inp.astype(np.int64) @ wgt.astype(np.int64)
    assert np.array_equal(got, _wrapped(exact))
